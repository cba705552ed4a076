"""Tests of the VB (variational bounds) and fVB (factorised VB) baselines."""

import numpy as np
import pytest
from scipy import optimize
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

import _reference_student_t as st
from _reference_likelihoods import StudentTReference
from robustep.baselines.variational import (
    factorized_vb,
    fvb_bound_gradient,
    fvb_em,
    fvb_m_step_objective,
    variational_bounds,
    vb_log_marginal_likelihood_gradient,
)


def _problem(n=10, seed=0):
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(-3, 3, size=(n, 1)), axis=0)
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(n)
    y[3] += 2.5
    return X, y, ConstantKernel(1.2) * RBF(1.1)


def _exact_log_ml_2d(K, y, lik, m=300):
    """log int N(f|0,K) p(y1|f1) p(y2|f2) df by tensor Gauss-Legendre on a wide box."""
    x, w = np.polynomial.legendre.leggauss(m)
    sd = np.sqrt(np.diag(K))
    lo, hi = -9 * sd, 9 * sd
    g = [0.5 * (hi[i] - lo[i]) * x + 0.5 * (hi[i] + lo[i]) for i in range(2)]
    ww = [0.5 * (hi[i] - lo[i]) * w for i in range(2)]
    F1, F2 = np.meshgrid(g[0], g[1], indexing="ij")
    F = np.stack([F1.ravel(), F2.ravel()], 1)
    Kinv = np.linalg.inv(K)
    logN = -0.5 * np.einsum("ij,jk,ik->i", F, Kinv, F) - 0.5 * np.linalg.slogdet(2 * np.pi * K)[1]
    logp = lik.log_prob(y[0], F[:, 0]) + lik.log_prob(y[1], F[:, 1])
    W = np.outer(ww[0], ww[1]).ravel()
    v = logN + logp + np.log(W)
    return v.max() + np.log(np.exp(v - v.max()).sum())


def test_vb_bound_is_a_pointwise_lower_bound_touching_at_x0():
    df, scale, y = 3.0, 0.4, 0.7
    f = np.linspace(-6, 6, 2001)
    for gamma in [df * scale**2 / (df + 1) * 1.001, 0.3, 2.0]:
        x0 = (df + 1) * gamma - df * scale**2
        mh = st.log_prob(y, y + np.sqrt(x0), df, scale) + 0.5 * x0 / gamma
        bound = -((f - y) ** 2) / (2 * gamma) + mh
        assert np.all(bound <= st.log_prob(y, f, df, scale) + 1e-12)
        assert -x0 / (2 * gamma) + mh == pytest.approx(st.log_prob(y, y + np.sqrt(x0), df, scale))


def test_vb_single_site_matches_direct_maximisation_and_bounds_exact():
    lik = StudentTReference(3.0, 0.3)
    k, y = 1.5, np.array([1.2])
    res = variational_bounds(np.array([[k]]), y, lik, tol=1e-12)
    df, sc = lik.df, lik.scale

    def neg(lg):
        g = np.exp(lg)
        x0 = (df + 1) * g - df * sc**2
        return -(
            -0.5 * (np.log(2 * np.pi * (k + g)) + y[0] ** 2 / (k + g))
            + 0.5 * np.log(2 * np.pi * g)
            + st.log_prob(y[0], y[0] + np.sqrt(x0), df, sc)
            + 0.5 * x0 / g
        )

    lo = np.log(df * sc**2 / (df + 1)) + 1e-9
    best = optimize.minimize_scalar(
        neg, bounds=(lo, 5.0), method="bounded", options={"xatol": 1e-12}
    )
    assert res.log_marginal_likelihood == pytest.approx(-best.fun, abs=1e-7)
    assert res.gamma[0] == pytest.approx(np.exp(best.x), rel=1e-4)
    exact = np.log(np.exp(st.log_predictive_density(y[0], 0.0, k, df, sc)))
    assert res.log_marginal_likelihood <= exact + 1e-10


def test_vb_and_fvb_are_lower_bounds_in_2d():
    lik = StudentTReference(2.5, 0.3)
    X = np.array([[0.0], [0.6]])
    K = (ConstantKernel(1.0) * RBF(1.0))(X)
    y = np.array([0.2, 1.9])
    exact = _exact_log_ml_2d(K, y, lik)
    vb = variational_bounds(K, y, lik)
    fvb = factorized_vb(K, y, lik)
    assert vb.log_marginal_likelihood <= exact
    assert fvb.elbo <= exact
    assert exact - vb.log_marginal_likelihood < 1.0


def test_vb_and_fvb_share_q_f_at_fixed_hyperparameters():
    X, y, kernel = _problem()
    lik = StudentTReference(4.0, 0.2)
    vb = variational_bounds(kernel(X), y, lik, tol=1e-11)
    fvb = factorized_vb(kernel(X), y, lik, tol=1e-11)
    np.testing.assert_allclose(vb.mean, fvb.mean, atol=1e-5)
    np.testing.assert_allclose(vb.var, fvb.var, atol=1e-5)
    np.testing.assert_allclose(vb.gamma, fvb.noise, rtol=1e-4)
    # the outlier gets a large effective noise variance
    assert np.argmax(vb.gamma) == 3


def test_vb_gradient_matches_finite_differences():
    X, y, kernel = _problem(seed=2)
    lik = StudentTReference(3.0, 0.25)
    K, Kg = kernel(X, eval_gradient=True)
    res = variational_bounds(K, y, lik, tol=1e-13, max_iter=5000)
    gk, gl = vb_log_marginal_likelihood_gradient(res, Kg, lik, y)

    def f(thk, thl):
        return variational_bounds(
            kernel.clone_with_theta(thk)(X),
            y,
            lik.with_log_params(thl),
            tol=1e-13,
            max_iter=5000,
            init=res.gamma,
        ).log_marginal_likelihood

    h = 1e-5
    thk, thl = kernel.theta, lik.get_log_params()
    for j in range(thk.size):
        e = np.eye(thk.size)[j] * h
        assert gk[j] == pytest.approx(
            (f(thk + e, thl) - f(thk - e, thl)) / (2 * h), rel=1e-4, abs=1e-5
        )
    for j in range(2):
        e = np.eye(2)[j] * h
        assert gl[j] == pytest.approx(
            (f(thk, thl + e) - f(thk, thl - e)) / (2 * h), rel=1e-4, abs=1e-5
        )


def test_fvb_m_step_gradient_matches_finite_differences():
    X, y, kernel = _problem(seed=4)
    lik = StudentTReference(3.0, 0.25)
    K, Kg = kernel(X, eval_gradient=True)
    res = factorized_vb(K, y, lik)
    gk, gl = fvb_bound_gradient(res, Kg, lik)
    h = 1e-6
    thk, thl = kernel.theta, lik.get_log_params()

    def f(tk, tl):
        return fvb_m_step_objective(
            kernel.clone_with_theta(tk)(X), y, lik.with_log_params(tl), res.a, res.b
        )

    for j in range(thk.size):
        e = np.eye(thk.size)[j] * h
        assert gk[j] == pytest.approx(
            (f(thk + e, thl) - f(thk - e, thl)) / (2 * h), rel=1e-5, abs=1e-6
        )
    for j in range(2):
        e = np.eye(2)[j] * h
        assert gl[j] == pytest.approx(
            (f(thk, thl + e) - f(thk, thl - e)) / (2 * h), rel=1e-5, abs=1e-6
        )


def test_fvb_em_increases_the_bound():
    X, y, kernel = _problem(n=15, seed=5)
    lik = StudentTReference(4.0, 0.5)
    start = factorized_vb(kernel(X), y, lik).elbo
    kern, lik2, res, n_it, _ = fvb_em(kernel, X, y, lik, optimize_df=True, max_em_iter=15)
    assert res.elbo > start
    assert lik2.df != lik.df and lik2.scale != lik.scale
    assert np.all(np.isfinite(res.mean))


def test_requires_student_t():
    class NoT:
        pass

    with pytest.raises(TypeError, match="Student-t"):
        variational_bounds(np.eye(2), np.zeros(2), NoT())
