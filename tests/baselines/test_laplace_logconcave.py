"""Laplace for log-concave likelihoods (R&W Alg. 3.1 / 5.1) against the general routine."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

from robustep.baselines.laplace import (
    LaplaceResult,
    laplace_approximation,
    laplace_log_marginal_likelihood_gradient,
)
from robustep.baselines.laplace_logconcave import laplace_logconcave, laplace_logconcave_gradient
from robustep.likelihoods import Probit, StudentT


def _problem(n=30, seed=0, length_scale=0.8):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n, 2))
    y = np.where(X[:, 0] + 0.4 * rng.standard_normal(n) > 0, 1.0, -1.0)
    kernel = ConstantKernel(2.0) * RBF(length_scale)
    K, K_gradient = kernel(X, eval_gradient=True)
    return X, y, kernel, K, K_gradient


@pytest.mark.parametrize("length_scale", [0.3, 0.8, 3.0])
def test_matches_the_general_laplace_routine(length_scale):
    X, y, kernel, K, K_gradient = _problem(length_scale=length_scale)
    lik = Probit()
    ref = laplace_approximation(K, y, lik, tol=1e-12)
    res = laplace_logconcave(K, y, lik, tol=1e-12)
    assert res.converged and ref.converged
    # The log-concave routine stops once the Newton decrement, quadratic in the gradient
    # of psi, is below tol, so with tol = 1e-12 its mode may be one step short of the
    # general routine's (measured: gradient of psi 1e-8 at length scale 0.3 with scipy
    # 1.17 / numpy 2.4, where earlier environments agreed to 1e-9); log|B| at the mode is
    # first-order in that, hence the 1e-7 tolerances.
    assert res.log_marginal_likelihood == pytest.approx(ref.log_marginal_likelihood, abs=1e-7)
    np.testing.assert_allclose(res.mode, ref.mode, atol=1e-7)
    np.testing.assert_allclose(res.var, ref.var, rtol=1e-7)
    np.testing.assert_allclose(res.alpha, ref.alpha, atol=1e-7)
    grad_ref, _ = laplace_log_marginal_likelihood_gradient(ref, K_gradient, lik, y)
    np.testing.assert_allclose(laplace_logconcave_gradient(res, K_gradient), grad_ref, rtol=1e-6)
    Xt = np.random.default_rng(3).uniform(-3, 3, (7, 2))
    for a, b in zip(res.predict(kernel(Xt, X), kernel.diag(Xt)),
                    ref.predict(kernel(Xt, X), kernel.diag(Xt)), strict=True):  # fmt: skip
        np.testing.assert_allclose(a, b, rtol=1e-7, atol=1e-10)


def test_gradient_matches_finite_differences():
    X, y, kernel, K, K_gradient = _problem()
    lik = Probit()
    res = laplace_logconcave(K, y, lik, tol=1e-13)
    grad = laplace_logconcave_gradient(res, K_gradient)
    h = 1e-5
    for j in range(kernel.theta.size):
        e = np.zeros(kernel.theta.size)
        e[j] = h
        up = laplace_logconcave(kernel.clone_with_theta(kernel.theta + e)(X), y, lik, tol=1e-13)
        dn = laplace_logconcave(kernel.clone_with_theta(kernel.theta - e)(X), y, lik, tol=1e-13)
        fd = (up.log_marginal_likelihood - dn.log_marginal_likelihood) / (2 * h)
        assert grad[j] == pytest.approx(fd, rel=1e-5, abs=1e-7)


def test_warm_start_from_alpha_reaches_the_same_mode_in_fewer_steps():
    X, y, kernel, K, _ = _problem()
    lik = Probit()
    first = laplace_logconcave(K, y, lik, tol=1e-12)
    K2 = kernel.clone_with_theta(kernel.theta + 0.05)(X)
    cold = laplace_logconcave(K2, y, lik, tol=1e-12)
    warm = laplace_logconcave(K2, y, lik, tol=1e-12, init_alpha=first.alpha)
    assert warm.n_iter < cold.n_iter
    assert warm.log_marginal_likelihood == pytest.approx(cold.log_marginal_likelihood, abs=1e-9)
    np.testing.assert_allclose(warm.mode, cold.mode, atol=1e-7)


def test_negative_curvature_falls_back_to_the_general_routine():
    rng = np.random.default_rng(1)
    X = rng.uniform(-2, 2, (15, 1))
    y = np.sin(X[:, 0])
    y[3] += 6.0  # an outlier: the Student-t's W is negative there
    K = (ConstantKernel(1.0) * RBF(1.0))(X)
    lik = StudentT(df=3.0, scale=0.2)
    res = laplace_logconcave(K, y, lik)
    assert isinstance(res, LaplaceResult) and np.any(res.W < 0)
    ref = laplace_approximation(K, y, lik)
    assert res.log_marginal_likelihood == pytest.approx(ref.log_marginal_likelihood, abs=1e-10)


def test_inputs_are_checked_and_not_modified():
    _, y, _, K, _ = _problem(n=10)
    K0 = K.copy()
    laplace_logconcave(K, y, Probit())
    np.testing.assert_array_equal(K, K0)
    with pytest.raises(ValueError, match="shape"):
        laplace_logconcave(K[:5, :5], y, Probit())
    bad = K.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        laplace_logconcave(bad, y, Probit())
