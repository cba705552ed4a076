"""Tests of the lazy dK/dlog theta operator (robustep.kernels.gradient).

References: scikit-learn's ``kernel(X, eval_gradient=True)`` (K and the dense (n, n, p)
gradient) and the consumers' own dense-array paths; central finite differences of the
regressor's approximate evidence for its gradient.
"""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

from robustep.baselines.laplace import (
    laplace_approximation,
    laplace_log_marginal_likelihood_gradient,
)
from robustep.baselines.variational import (
    factorized_vb,
    fvb_bound_gradient,
    fvb_em,
    variational_bounds,
    vb_log_marginal_likelihood_gradient,
)
from robustep.ep import expectation_propagation, log_Z_gradient
from robustep.estimators import StudentTGPRegressor
from robustep.kernels.gradient import (
    KernelWithGradient,
    RBFKernelGradient,
    contract_kernel_gradient,
    kernel_gradient_matvec,
)
from robustep.likelihoods import StudentT

RTOL = 1e-10


def _kernel(ard, d):
    ls = np.linspace(0.7, 2.0, d) if ard else 1.3
    return ConstantKernel(1.7) * RBF(ls)


def _inputs(n=40, d=3, offset=0.0, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)) + offset


def _close(a, b, rtol=RTOL):
    """Relative error of a against b, on the scale of b's largest entry."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape
    scale = max(float(np.max(np.abs(b))), 1e-300)
    assert float(np.max(np.abs(a - b))) <= rtol * scale


def _pair(ard, n=40, d=3, offset=0.0, seed=0):
    X = _inputs(n, d, offset, seed)
    kernel = _kernel(ard, d)
    K_ref, G_ref = kernel(X, eval_gradient=True)
    K, G = KernelWithGradient(kernel, X)(kernel.theta)
    return X, kernel, K, G, K_ref, G_ref


# ------------------------------------------------------------------ the operator
@pytest.mark.parametrize("offset", [0.0, 1e3])
@pytest.mark.parametrize("ard", [True, False])
def test_kernel_and_dense_gradient_match_sklearn(ard, offset):
    _, kernel, K, G, K_ref, G_ref = _pair(ard, offset=offset)
    assert isinstance(G, RBFKernelGradient)
    assert G.shape == G_ref.shape and G.ndim == 3
    np.testing.assert_array_equal(K, K.T)
    np.testing.assert_array_equal(np.diag(K), np.exp(kernel.theta[0]))
    _close(K, K_ref)
    _close(G.dense(), G_ref)
    _close(np.asarray(G), G_ref)


@pytest.mark.parametrize("offset", [0.0, 1e3])
@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("ard", [True, False])
def test_contract_matches_dense_einsum(ard, symmetric, offset):
    X, _, _, G, _, G_ref = _pair(ard, offset=offset, seed=1)
    rng = np.random.default_rng(2)
    M = rng.standard_normal((X.shape[0],) * 2)
    if symmetric:
        M = M + M.T
    ref = np.einsum("ij,ijp->p", M, G_ref)
    _close(G.contract(M), ref)
    _close(contract_kernel_gradient(G, M), ref)
    _close(contract_kernel_gradient(G_ref, M), ref)


@pytest.mark.parametrize("offset", [0.0, 1e3])
@pytest.mark.parametrize("ard", [True, False])
def test_matvec_matches_dense_einsum(ard, offset):
    X, _, _, G, _, G_ref = _pair(ard, offset=offset, seed=3)
    rng = np.random.default_rng(4)
    n = X.shape[0]
    v, V = rng.standard_normal(n), rng.standard_normal((n, 4))
    ref_v = np.einsum("ijp,j->ip", G_ref, v)
    ref_V = np.einsum("ijp,jm->imp", G_ref, V)
    assert G.matvec(v).shape == (n, G.shape[2])
    assert G.matvec(V).shape == (n, 4, G.shape[2])
    for k in range(G.shape[2]):  # entry by entry: the length-scale terms are smaller
        _close(G.matvec(v)[:, k], ref_v[:, k])
        _close(G.matvec(V)[:, :, k], ref_V[:, :, k])
    _close(kernel_gradient_matvec(G, v), ref_v)
    _close(kernel_gradient_matvec(G_ref, V), ref_V)


def test_dispatch_treats_a_matrix_as_one_hyperparameter():
    rng = np.random.default_rng(5)
    A, M, v = rng.standard_normal((6, 6)), rng.standard_normal((6, 6)), rng.standard_normal(6)
    np.testing.assert_allclose(contract_kernel_gradient(A, M), [np.sum(A * M)])
    np.testing.assert_allclose(kernel_gradient_matvec(A, v), (A @ v)[:, None])


def test_other_kernels_fall_back_to_sklearn():
    X = _inputs(12, 2)
    kernel = ConstantKernel(1.0) * RBF(1.0) + WhiteKernel(0.1)
    kg = KernelWithGradient(kernel, X)
    assert not kg.fast
    K, G = kg(kernel.theta)
    K_ref, G_ref = kernel.clone_with_theta(kernel.theta)(X, eval_gradient=True)
    np.testing.assert_array_equal(K, K_ref)
    np.testing.assert_array_equal(G, G_ref)


def test_old_module_path_warns_and_reexports():
    import importlib
    import sys

    import robustep.kernels.gradient as new

    sys.modules.pop("robustep.kernel_gradient", None)
    with pytest.warns(DeprecationWarning, match="robustep.kernels.gradient"):
        old = importlib.import_module("robustep.kernel_gradient")
    for name in new.__all__:
        assert getattr(old, name) is getattr(new, name)


def test_away_from_the_initial_theta():
    X = _inputs(30, 4, offset=50.0, seed=6)
    kernel = _kernel(True, 4)
    theta = kernel.theta + np.array([0.5, -1.0, 0.3, 1.2, -0.4])
    K, G = KernelWithGradient(kernel, X)(theta)
    K_ref, G_ref = kernel.clone_with_theta(theta)(X, eval_gradient=True)
    _close(K, K_ref)
    _close(G.dense(), G_ref)


# ------------------------------------------------------------------ the consumers
def _regression(n=25, d=2, seed=7, offset=0.0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n, d)) + offset
    y = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.1 * rng.standard_normal(n)
    y[3] += 3.0
    y[11] -= 2.5
    return X, y


@pytest.mark.parametrize("ard", [True, False])
def test_consumers_agree_on_operator_and_dense(ard):
    X, y = _regression(offset=100.0)
    kernel = _kernel(ard, X.shape[1])
    K, G = KernelWithGradient(kernel, X)(kernel.theta)
    dense = G.dense()
    lik = StudentT(df=3.0, scale=0.2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ep = expectation_propagation(K, y, lik, tol=1e-8)
        la = laplace_approximation(K, y, lik)
        vb = variational_bounds(K, y, lik)
        fvb = factorized_vb(K, y, lik)
    pairs = [
        (log_Z_gradient(ep, G, lik, y)[0], log_Z_gradient(ep, dense, lik, y)[0]),
        (
            laplace_log_marginal_likelihood_gradient(la, G, lik, y)[0],
            laplace_log_marginal_likelihood_gradient(la, dense, lik, y)[0],
        ),
        (
            vb_log_marginal_likelihood_gradient(vb, G, lik, y)[0],
            vb_log_marginal_likelihood_gradient(vb, dense, lik, y)[0],
        ),
        (fvb_bound_gradient(fvb, G, lik)[0], fvb_bound_gradient(fvb, dense, lik)[0]),
    ]
    est = StudentTGPRegressor(method="gaussian")
    est._y = y
    gauss = est._infer(K, 4.0, 0.3)
    pairs.append((gauss.gradient(G)[0], gauss.gradient(dense)[0]))
    for fast, ref in pairs:
        _close(fast, ref)


def test_gaussian_noise_gradient_matches_the_dense_identity():
    X, y = _regression(n=15)
    kernel = _kernel(True, 2)
    est = StudentTGPRegressor(method="gaussian")
    est._y = y
    res = est._infer(kernel(X), 4.0, 0.3)
    dense = res.gp.kernel_gradient((2.0 * 0.3**2 * np.eye(y.size))[:, :, None])[0]
    assert res.gradient(kernel(X, eval_gradient=True)[1])[1] == pytest.approx(dense, rel=1e-12)


def test_fvb_em_runs_on_the_fast_path():
    X, y = _regression(n=15, seed=8)
    lik = StudentT(df=4.0, scale=0.5)
    kernel = _kernel(True, 2)
    start = factorized_vb(kernel(X), y, lik).elbo
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        _, _, res, _, _ = fvb_em(kernel, X, y, lik, max_em_iter=5)
    assert res.elbo > start


@pytest.mark.parametrize("method", ["ep", "laplace", "vb", "gaussian"])
def test_regressor_evidence_gradient_matches_finite_differences(method):
    """The search objective's gradient (operator path) against central differences."""
    from robustep.estimators._regressor_inference import warm_of

    X, y = _regression(n=20, seed=9, offset=10.0)
    kernel = _kernel(True, 2)
    est = StudentTGPRegressor(method=method)
    est._X, est._y = X, y
    kg = KernelWithGradient(kernel, X)
    assert kg.fast
    df, scale = 4.0, 0.3

    def evidence(theta, s=scale, warm=None):
        K, G = kg(theta)
        res = est._infer(K, df, s, warm=warm, tol=1e-11, max_iter=5000)
        return res, G

    res, G = evidence(kernel.theta)
    gk, _, gs = est._gradient(res, G, df, scale)
    warm = warm_of(res)
    h = 1e-5
    fd = []
    for k in range(kernel.theta.size):
        e = np.eye(kernel.theta.size)[k] * h
        up = evidence(kernel.theta + e, warm=warm)[0].log_marginal_likelihood
        down = evidence(kernel.theta - e, warm=warm)[0].log_marginal_likelihood
        fd.append((up - down) / (2 * h))
    up = evidence(kernel.theta, s=scale * np.exp(h), warm=warm)[0].log_marginal_likelihood
    down = evidence(kernel.theta, s=scale * np.exp(-h), warm=warm)[0].log_marginal_likelihood
    fd_s = (up - down) / (2 * h)
    # the regressor runs VB's fixed point to its default bound tolerance (1e-7): its
    # envelope-theorem gradient is then good to about 2e-5
    rtol = 1e-4 if method == "vb" else 1e-5
    np.testing.assert_allclose(gk, fd, rtol=rtol, atol=1e-6)
    assert gs == pytest.approx(fd_s, rel=rtol, abs=1e-6)
