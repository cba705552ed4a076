"""Closed-form Z1, Z2, gradients, Theorem 1 for the noisy step (eq. 43) vs quadrature."""

import numpy as np
import pytest
from scipy import integrate

from robustep.families import t_exponential as te
from robustep.tep import likelihood as lk

EPS = [0.0, 0.1]


_CACHE = {}


def _grid2(mu, sigma, df, v, eps, fn):
    """2-D integrals on a fine grid over a heavy-tail-safe box (cached per problem)."""
    key = (df, eps)
    if key not in _CACHE:
        g = np.linspace(-50, 50, 1601)
        W = np.stack(np.meshgrid(g, g, indexing="ij"), -1)
        p = np.exp(te.student_t_logpdf(W, mu, sigma, df))
        lt = (eps + (1 - 2 * eps) * (W @ v > 0)) ** te.t_of_df(df, 2)
        _CACHE[key] = (W, p, lt, (g[1] - g[0]) ** 2)
    W, p, lt, area = _CACHE[key]
    return fn(W, p, lt) * area


@pytest.mark.parametrize("eps", EPS)
@pytest.mark.parametrize("df", [3.0, 12.0])
def test_Z1_Z2_grad_1d(eps, df):
    mu, sigma, v = np.array([0.4]), np.array([[1.3]]), np.array([-0.8])
    t = te.t_of_df(df, 1)
    p = lambda w: np.exp(te.student_t_logpdf(np.array([w]), mu, sigma, df))  # noqa: E731
    lt = lambda w: (eps + (1 - 2 * eps) * (v[0] * w > 0)) ** t  # noqa: E731
    quad = lambda f: sum(
        integrate.quad(f, a, b, limit=200)[0] for a, b in [(-np.inf, 0), (0, np.inf)]
    )  # noqa: E731
    assert np.isclose(
        lk.noisy_step_Z1(mu, sigma, df, v, eps), quad(lambda w: p(w) * lt(w)), rtol=1e-8
    )
    assert np.isclose(
        lk.noisy_step_Z2(mu, sigma, df, v, eps), quad(lambda w: p(w) ** t * lt(w)), rtol=1e-8
    )
    g1, g2 = lk.noisy_step_grad_Z1(mu, sigma, df, v, eps)
    eta1, eta2 = te.expected_sufficient_statistics(mu, sigma)
    n1 = quad(lambda w: p(w) ** t * lt(w) * (w - eta1[0]))
    n2 = quad(lambda w: p(w) ** t * lt(w) * (w * w - eta2[0, 0]))
    assert np.isclose(g1[0], n1, rtol=1e-7, atol=1e-12)
    assert np.isclose(g2[0, 0], n2, rtol=1e-7, atol=1e-12)


@pytest.mark.parametrize("eps", EPS)
def test_Z1_Z2_grad_theorem1_2d(eps):
    mu, sigma, df = np.array([0.3, -0.5]), np.array([[1.0, 0.3], [0.3, 0.5]]), 6.0
    v = np.array([1.0, 0.7])
    t = te.t_of_df(df, 2)
    z1 = _grid2(mu, sigma, df, v, eps, lambda W, p, lt: (p * lt).sum())
    z2 = _grid2(mu, sigma, df, v, eps, lambda W, p, lt: (p**t * lt).sum())
    assert np.isclose(lk.noisy_step_Z1(mu, sigma, df, v, eps), z1, rtol=5e-3)
    assert np.isclose(lk.noisy_step_Z2(mu, sigma, df, v, eps), z2, rtol=5e-3)
    # gradient against finite differences in the natural parameters
    th1, th2 = te.to_natural(mu, sigma, df)

    def z1_theta(a, b):
        m, s = te.from_natural(a, b, df)
        return lk.noisy_step_Z1(m, s, df, v, eps)

    g1, g2 = lk.noisy_step_grad_Z1(mu, sigma, df, v, eps)
    h, d = 1e-6, np.array([0.3, -0.2])
    E = np.array([[0.2, 0.1], [0.1, -0.3]]) * np.abs(th2).max()
    fd1 = (z1_theta(th1 + h * d, th2) - z1_theta(th1 - h * d, th2)) / (2 * h)
    fd2 = (z1_theta(th1, th2 + h * E) - z1_theta(th1, th2 - h * E)) / (2 * h)
    assert np.isclose(fd1, g1 @ d, rtol=1e-5)
    assert np.isclose(fd2, (g2 * E).sum(), rtol=1e-5)
    # Theorem 1 (eq. 34) = escort moments of the tilted distribution (numerical) = stable form
    m_t, s_t = lk.theorem1_moments(mu, sigma, df, v, eps)
    m_s, s_s = lk.escort_tilted_moments(mu, sigma, df, v, eps)
    np.testing.assert_allclose(m_t, m_s, atol=1e-10)
    np.testing.assert_allclose(s_t, s_s, atol=1e-10)
    zz = _grid2(mu, sigma, df, v, eps, lambda W, p, lt: (p**t * lt).sum())
    mean = (
        _grid2(mu, sigma, df, v, eps, lambda W, p, lt: ((p**t * lt)[..., None] * W).sum((0, 1)))
        / zz
    )
    sec = (
        _grid2(
            mu,
            sigma,
            df,
            v,
            eps,
            lambda W, p, lt: ((p**t * lt)[..., None, None] * W[..., :, None] * W[..., None, :]).sum(
                (0, 1)
            ),
        )
        / zz
    )
    np.testing.assert_allclose(m_t, mean, atol=2e-3)
    np.testing.assert_allclose(s_t, sec - np.outer(mean, mean), atol=3e-3)


@pytest.mark.parametrize("df", [4.0, np.inf])
def test_escort_tilted_marginal_and_tilted_normaliser(df):
    m, s2, y, eps, k = np.array([0.5, -2.0]), np.array([0.7, 2.0]), np.array([1.0, 1.0]), 0.05, 3
    mh, vh = lk.escort_tilted_marginal(m, s2, df, k, y, eps)
    for i in range(2):
        mu, sig = np.array([m[i]]), np.array([[s2[i]]])
        # marginal escort of a k-dim t = 1-D t with df + 2 and scale df s2/(df + 2):
        # compare with the k-dim Theorem-1 result projected on the first coordinate
        mu3 = np.r_[mu, 0.0, 0.0]
        sig3 = np.diag([s2[i], 1.0, 1.0])
        m_full, s_full = lk.escort_tilted_moments(mu3, sig3, df, np.r_[y[i], 0.0, 0.0], eps)
        assert np.isclose(mh[i], m_full[0], rtol=1e-9)
        assert np.isclose(vh[i], s_full[0, 0], rtol=1e-9)
        z = lk.tilted_normaliser(m[i], s2[i], df, y[i], eps)
        mi, si, yi = m[i], s2[i], y[i]

        def dens(f, mu=mu, sig=sig, mi=mi, si=si):
            if np.isfinite(df):
                return np.exp(te.student_t_logpdf(np.array([f]), mu, sig, df))
            return np.exp(-0.5 * (f - mi) ** 2 / si) / np.sqrt(2 * np.pi * si)

        num = integrate.quad(lambda f: dens(f) * (eps + (1 - 2 * eps) * (yi * f > 0)), 0, np.inf)[0]  # noqa: B023
        num += integrate.quad(lambda f: dens(f) * eps, -np.inf, 0)[0]  # noqa: B023
        assert np.isclose(z, np.log(num), rtol=1e-7)


def test_extreme_truncation_is_finite():
    m, v = lk.escort_tilted_marginal(
        np.array([-40.0]), np.array([1.0]), np.inf, 2, np.array([1.0]), 0.0
    )
    assert np.isfinite(m).all() and np.isfinite(v).all() and v[0] > 0
    m, v = lk.escort_tilted_marginal(
        np.array([-1e4]), np.array([1.0]), 5.0, 2, np.array([1.0]), 0.0
    )
    assert np.isfinite(m).all() and np.isfinite(v).all() and v[0] > 0


def test_bad_eps():
    with pytest.raises(ValueError, match="label_noise"):
        lk.step_levels(0.6, 1.1)
