"""Tests of the generic GP Laplace approximation (robustep.baselines.laplace)."""

import numpy as np
import pytest
from scipy import optimize
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

from _reference_likelihoods import GaussianReference, StudentTReference
from robustep.baselines.laplace import (
    laplace_approximation,
    laplace_log_marginal_likelihood_gradient,
)


def _problem(n=12, seed=0, outliers=True):
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(-3, 3, size=(n, 1)), axis=0)
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(n)
    if outliers:
        y[2] += 3.0
        y[7] -= 2.5
    kernel = ConstantKernel(1.3) * RBF(0.9)
    return X, y, kernel


def test_gaussian_likelihood_is_exact():
    X, y, kernel = _problem(outliers=False)
    K = kernel(X)
    lik = GaussianReference(0.05)
    res = laplace_approximation(K, y, lik)
    assert res.converged
    Ky = K + 0.05 * np.eye(len(y))
    exact_lml = -0.5 * (y @ np.linalg.solve(Ky, y) + np.linalg.slogdet(2 * np.pi * Ky)[1])
    assert res.log_marginal_likelihood == pytest.approx(exact_lml, abs=1e-8)
    mean = K @ np.linalg.solve(Ky, y)
    cov = K - K @ np.linalg.solve(Ky, K)
    np.testing.assert_allclose(res.mode, mean, atol=1e-8)
    np.testing.assert_allclose(res.var, np.diag(cov), atol=1e-8)
    np.testing.assert_allclose(res.posterior_covariance(), cov, atol=1e-8)
    Xs = np.linspace(-4, 4, 7)[:, None]
    Ks = kernel(Xs, X)
    m, v = res.predict(Ks, kernel.diag(Xs))
    np.testing.assert_allclose(m, Ks @ np.linalg.solve(Ky, y), atol=1e-8)
    v_ref = kernel.diag(Xs) - np.sum(Ks * np.linalg.solve(Ky, Ks.T).T, axis=1)
    np.testing.assert_allclose(v, v_ref, atol=1e-8)


def test_single_site_matches_scalar_laplace():
    # Independent reference: 1-D optimisation and the textbook Laplace formula.
    lik = StudentTReference(df=3.0, scale=0.3)
    k, y = 2.0, np.array([1.7])
    res = laplace_approximation(np.array([[k]]), y, lik)
    neg = lambda f: 0.5 * f**2 / k - lik.log_prob(y, np.array([f]))[0]
    f_hat = optimize.minimize_scalar(neg, bracket=(0.0, 1.7), tol=1e-12).x
    W = -lik.log_prob_derivatives(y, np.array([f_hat]))[2][0]
    lml = -neg(f_hat) - 0.5 * np.log(2 * np.pi * k) + 0.5 * np.log(2 * np.pi / (1 / k + W))
    assert res.mode[0] == pytest.approx(f_hat, abs=1e-6)
    assert res.log_marginal_likelihood == pytest.approx(lml, abs=1e-8)
    assert res.var[0] == pytest.approx(1 / (1 / k + W), rel=1e-8)


def test_student_t_mode_with_negative_W_matches_bfgs():
    X, y, kernel = _problem()
    K = kernel(X)
    lik = StudentTReference(df=3.0, scale=0.1)
    res = laplace_approximation(K, y, lik)
    assert res.converged
    assert np.any(res.W < 0), "the outliers should give negative W at the mode"
    Kinv = np.linalg.inv(K)

    def neg(f):
        _, d1, _, _ = lik.log_prob_derivatives(y, f)
        return 0.5 * f @ Kinv @ f - lik.log_prob(y, f).sum(), Kinv @ f - d1

    ref = optimize.minimize(neg, res.mode + 0.05, jac=True, method="BFGS", tol=1e-12)
    np.testing.assert_allclose(res.mode, ref.x, atol=1e-5)
    cov = np.linalg.inv(Kinv + np.diag(res.W))
    np.testing.assert_allclose(res.posterior_covariance(), cov, atol=1e-6)
    assert np.all(res.var > 0)


def test_far_initialisation_stays_stable():
    X, y, kernel = _problem(seed=3)
    K = kernel(X)
    lik = StudentTReference(df=2.0, scale=0.05)
    res = laplace_approximation(K, y, lik, init=np.full(len(y), 5.0))
    assert res.converged and np.isfinite(res.log_marginal_likelihood)
    res0 = laplace_approximation(K, y, lik)
    # Both starts reach local maxima; the warm start is at least a valid maximum.
    assert np.all(np.linalg.eigvalsh(np.linalg.inv(K) + np.diag(res.W)) > 0)
    assert np.isfinite(res0.log_marginal_likelihood)


def _lml(kernel, theta_k, lik, theta_l, X, y):
    kern = kernel.clone_with_theta(theta_k)
    lk = lik.with_log_params(theta_l)
    return laplace_approximation(kern(X), y, lk, tol=1e-12).log_marginal_likelihood


@pytest.mark.parametrize("lik", [StudentTReference(3.0, 0.2), GaussianReference(0.1)])
def test_gradients_match_finite_differences(lik):
    X, y, kernel = _problem(n=10, seed=1)
    K, K_grad = kernel(X, eval_gradient=True)
    res = laplace_approximation(K, y, lik, tol=1e-12)
    gk, gl = laplace_log_marginal_likelihood_gradient(res, K_grad, lik, y)
    th_k, th_l = kernel.theta, lik.get_log_params()
    # h = 1e-4, not smaller: the mode search stops on its Newton decrement, and where W < 0
    # (the Student-t outliers) the log evidence at that stopping point varies by ~1e-9
    # with the rounding of the path (scipy 1.17 / numpy 2.4: a central difference with
    # h = 1e-5 was off by 1.6e-4 relative, with h = 1e-4 by 6e-6; truncation ~h^2)
    h = 1e-4
    for j in range(th_k.size):
        e = np.zeros_like(th_k)
        e[j] = h
        fd = (_lml(kernel, th_k + e, lik, th_l, X, y) - _lml(kernel, th_k - e, lik, th_l, X, y)) / (
            2 * h
        )
        assert gk[j] == pytest.approx(fd, rel=1e-4, abs=1e-5)
    for j in range(th_l.size):
        e = np.zeros_like(th_l)
        e[j] = h
        fd = (_lml(kernel, th_k, lik, th_l + e, X, y) - _lml(kernel, th_k, lik, th_l - e, X, y)) / (
            2 * h
        )
        assert gl[j] == pytest.approx(fd, rel=1e-4, abs=1e-5)


def test_input_validation():
    lik = StudentTReference()
    with pytest.raises(ValueError, match="shape"):
        laplace_approximation(np.eye(3), np.zeros(4), lik)
    with pytest.raises(ValueError, match="NaN"):
        laplace_approximation(np.eye(2), np.array([0.0, np.nan]), lik)
    with pytest.raises(ValueError, match="init"):
        laplace_approximation(np.eye(2), np.zeros(2), lik, init=np.zeros(3))
