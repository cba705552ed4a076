"""Tests of the log-space quadrature helpers (robustep.quadrature)."""

import numpy as np
import pytest

from robustep.quadrature import (
    gauss_hermite,
    gauss_legendre,
    log_gauss_hermite_moments,
    log_moments_from_nodes,
    logsumexp_rows,
)


@pytest.mark.parametrize("n", [1, 5, 20, 48])
def test_gauss_hermite_integrates_normal_moments(n):
    x, logw = gauss_hermite(n)
    w = np.exp(logw)
    assert np.isclose(w.sum(), 1.0, rtol=1e-13)
    # exact for polynomials of degree < 2n: E[x^2] = 1, E[x^4] = 3, odd moments vanish
    if n >= 2:
        assert np.isclose(w @ x**2, 1.0, rtol=1e-12)
        assert abs(w @ x**3) < 1e-12
    if n >= 3:
        assert np.isclose(w @ x**4, 3.0, rtol=1e-12)


def test_rules_are_read_only_and_validated():
    x, logw = gauss_hermite(8)
    with pytest.raises(ValueError):
        x[0] = 1.0
    with pytest.raises(ValueError, match="positive"):
        gauss_legendre(0)
    with pytest.raises(ValueError, match="positive"):
        gauss_hermite(-3)


@pytest.mark.parametrize("n", [2, 10, 40])
def test_gauss_legendre_exact_for_polynomials(n):
    x, logw = gauss_legendre(n)
    w = np.exp(logw)
    for k in range(2 * n):
        exact = 0.0 if k % 2 else 2.0 / (k + 1)
        assert abs(w @ x**k - exact) < 1e-12


def test_logsumexp_rows_handles_large_offsets_and_empty_mass():
    a = np.array([[-1e5, -1e5 + np.log(3.0)], [-np.inf, -np.inf], [700.0, 700.0]])
    out = logsumexp_rows(a)
    assert np.isclose(out[0], -1e5 + np.log(4.0), rtol=0, atol=1e-9)
    assert out[1] == -np.inf
    assert np.isclose(out[2], 700.0 + np.log(2.0))


def test_log_moments_from_nodes_matches_direct_sums_and_is_shift_invariant():
    rng = np.random.default_rng(0)
    lw = rng.normal(size=(5, 7))
    x = rng.normal(size=(5, 7)) * 3 + 10
    log_Z, mean, var = log_moments_from_nodes(lw, x)
    w = np.exp(lw)
    Z = w.sum(1)
    mu = (w * x).sum(1) / Z
    assert np.allclose(log_Z, np.log(Z), rtol=1e-13)
    assert np.allclose(mean, mu, rtol=1e-13)
    assert np.allclose(var, (w * (x - mu[:, None]) ** 2).sum(1) / Z, rtol=1e-12)
    # a huge common offset (which would underflow in linear space) changes only log_Z
    log_Z2, mean2, var2 = log_moments_from_nodes(lw - 1e4, x)
    assert np.allclose(log_Z2, log_Z - 1e4, rtol=0, atol=1e-9)
    assert np.allclose(mean2, mean) and np.allclose(var2, var)


def test_log_moments_from_nodes_centred_variance_does_not_cancel():
    # nodes at 1e8 + tiny offsets: E[x^2] - E[x]^2 would lose every digit
    x = 1e8 + np.array([[-1e-3, 0.0, 1e-3]])
    lw = np.log(np.array([[0.25, 0.5, 0.25]]))
    _, mean, var = log_moments_from_nodes(lw, x)
    assert np.isclose(var[0], 0.5e-6, rtol=1e-6)


def test_log_moments_from_nodes_raises_when_integrand_vanishes():
    with pytest.raises(FloatingPointError, match="vanished"):
        log_moments_from_nodes(np.full((2, 3), -np.inf), np.zeros((2, 3)))


def test_log_gauss_hermite_moments_exact_for_polynomial_likelihood():
    # exp(log_f) = 1 + f^2 is a polynomial: the rule is exact; moments of N(m, v) known
    rng = np.random.default_rng(1)
    m, v = rng.normal(size=6) * 3, np.exp(rng.normal(size=6))
    log_Z, mean, var = log_gauss_hermite_moments(lambda f: np.log1p(f**2), m, v, n_points=6)
    Z = 1 + m**2 + v
    e1 = (m + m**3 + 3 * m * v) / Z
    e2 = (m**2 + v + m**4 + 6 * m**2 * v + 3 * v**2) / Z
    assert np.allclose(log_Z, np.log(Z), rtol=1e-12)
    assert np.allclose(mean, e1, rtol=1e-11)
    assert np.allclose(var, e2 - e1**2, rtol=1e-9)


def test_log_gauss_hermite_moments_smooth_likelihood_converges():
    # Gaussian likelihood (not polynomial): 48 nodes reach 1e-10 when the cavity is not
    # much wider than the likelihood (a known limit of cavity-centred Gauss–Hermite)
    rng = np.random.default_rng(2)
    m, v = rng.normal(size=6), rng.uniform(0.1, 1.0, size=6)
    y, s2 = rng.normal(size=6), 0.7
    yc = y[:, None]
    log_Z, mean, var = log_gauss_hermite_moments(
        lambda f: -0.5 * (np.log(2 * np.pi * s2) + (yc - f) ** 2 / s2), m, v
    )
    tot = v + s2
    assert np.allclose(log_Z, -0.5 * (np.log(2 * np.pi * tot) + (y - m) ** 2 / tot), rtol=1e-10)
    assert np.allclose(mean, m + v / tot * (y - m), rtol=1e-10)
    assert np.allclose(var, v * s2 / tot, rtol=1e-9)


def test_log_gauss_hermite_moments_does_not_mutate_inputs():
    m = np.array([0.5, -1.0])
    v = np.array([1.0, 2.0])
    m0, v0 = m.copy(), v.copy()
    log_gauss_hermite_moments(lambda f: -(f**2), m, v)
    assert np.array_equal(m, m0) and np.array_equal(v, v0)


@pytest.mark.parametrize("df", [1.5, 4.0, 30.0])
def test_gamma_scale_mixture_nodes_match_gamma_moments(df):
    """lambda ~ Gamma(nu/2, rate nu/2): E[lambda] = 1, Var[lambda] = 2/nu, and a Student-t tail."""
    from scipy import stats

    from robustep.quadrature import gamma_scale_mixture_nodes

    lam, w = gamma_scale_mixture_nodes(df)
    assert np.isclose(w.sum(), 1.0, atol=1e-10)
    # the nodes are built for bounded integrands; unbounded moments are only rough
    assert np.isclose(w @ lam, 1.0, rtol=1e-3)
    assert np.isclose(w @ lam**2 - 1.0, 2.0 / df, rtol=1e-2)
    # a bounded integrand with a heavy-tail contribution: Phi(-2 sqrt(lambda)) = T_nu(-2)
    exact = stats.t(df).cdf(-2.0)
    assert np.isclose(w @ stats.norm.cdf(-2.0 * np.sqrt(lam)), exact, rtol=1e-5)
    lam_inf, w_inf = gamma_scale_mixture_nodes(np.inf)
    assert lam_inf.tolist() == [1.0] and w_inf.tolist() == [1.0]
