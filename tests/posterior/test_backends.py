"""Array backends of the dense engine (robustep.posterior.backend, robustep.kernels.array,
estimators/_device.py): the same results as numpy on array-api-strict (every non-standard
call fails there) and, when it is installed, on PyTorch CPU.  No test needs a GPU.
"""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import (
    RBF,
    ConstantKernel,
    DotProduct,
    Exponentiation,
    Matern,
    RationalQuadratic,
    WhiteKernel,
)
from sklearn.utils.estimator_checks import parametrize_with_checks

from robustep import _array_api as aa
from robustep.ep import expectation_propagation, log_Z_gradient
from robustep.estimators import GPClassifier
from robustep.kernels.array import kernel_matrix, supports
from robustep.likelihoods import Gaussian, Logistic, NoisyStep, Probit, StudentT
from robustep.linalg import InvalidSiteConfiguration
from robustep.posterior import ArrayPrior, ArraySitePosterior, DensePrior, as_prior

xs = pytest.importorskip("array_api_strict")


def _torch_like():
    torch = pytest.importorskip("torch")
    return torch.zeros(0, dtype=torch.float64)


def _strict_like():
    return xs.zeros(0, dtype=xs.float64)


BACKENDS = [
    pytest.param(_strict_like, id="array-api-strict"),
    pytest.param(_torch_like, id="torch-cpu"),
]


def _as(like, a):
    return aa.from_numpy(aa.namespace(like), a, like)


def _rbf_K(n, seed=0, d=2, ls=1.0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    K = 2.0 * np.exp(-0.5 * np.sum((X[:, None] - X[None]) ** 2, axis=-1) / ls**2)
    return X, K + 1e-8 * np.eye(n)


# ------------------------------------------------------------------ posterior
@pytest.mark.parametrize("make_like", BACKENDS)
@pytest.mark.parametrize("case", ["positive", "mixed", "flat", "some-zero"])
def test_posterior_matches_dense(make_like, case):
    like = make_like()
    n = 14
    X, K = _rbf_K(n)
    rng = np.random.default_rng(1)
    tau = np.abs(rng.normal(size=n)) + 0.1
    nu = rng.normal(size=n)
    if case == "mixed":
        tau[[2, 7, 11]] = [-0.05, -0.02, -0.1]
    elif case == "flat":
        tau[:] = 0.0
    elif case == "some-zero":
        tau[[0, 5]] = 0.0
    d = DensePrior(K).posterior(tau, nu)
    a = ArrayPrior(_as(like, K)).posterior(tau, nu)
    assert isinstance(a, ArraySitePosterior)
    assert a.n_negative == d.n_negative
    np.testing.assert_allclose(a.mean, d.mean, rtol=0, atol=1e-12)
    np.testing.assert_allclose(a.var, d.var, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(a.alpha, d.alpha, rtol=0, atol=1e-10)
    assert abs(a.log_det - d.log_det) < 1e-12
    assert abs(a.prior_term() - d.prior_term()) < 1e-11
    np.testing.assert_allclose(a.covariance(), d.covariance(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(a.R_matrix(), d.R_matrix(), rtol=0, atol=1e-10)
    Kc, kd = K[:5] * 0.9, np.diag(K)[:5]
    for host, dense in zip(a.predict(Kc, kd), d.predict(Kc, kd), strict=True):
        assert isinstance(host, np.ndarray)
        np.testing.assert_allclose(host, dense, rtol=0, atol=1e-12)
    mean, var = a.predict(_as(like, Kc), _as(like, kd))
    assert type(mean) is type(like)
    np.testing.assert_allclose(aa.to_numpy(var), d.predict(Kc, kd)[1], rtol=0, atol=1e-12)


@pytest.mark.parametrize("make_like", BACKENDS)
def test_invalid_configuration_raises_like_dense(make_like):
    like = make_like()
    _, K = _rbf_K(10)
    tau = np.full(10, 0.5)
    tau[3] = -50.0  # far beyond the validity boundary
    nu = np.ones(10)
    with pytest.raises(InvalidSiteConfiguration):
        DensePrior(K).posterior(tau, nu)
    with pytest.raises(InvalidSiteConfiguration):
        ArrayPrior(_as(like, K)).posterior(tau, nu)


def test_cancellation_guard_matches_dense():
    # |tau_i| Sigma_ii tiny for some sites: the explicit formula takes over
    _, K = _rbf_K(12)
    tau = np.full(12, 1e4)
    tau[[1, 4]] = [1e-9, -1e-9]
    nu = np.linspace(-1, 1, 12)
    d = DensePrior(K).posterior(tau, nu)
    a = ArrayPrior(_as(_strict_like(), K)).posterior(tau, nu)
    np.testing.assert_allclose(a.var, d.var, rtol=1e-9)


@pytest.mark.parametrize("make_like", BACKENDS)
def test_array_prior_checks_K(make_like):
    like = make_like()
    _, K = _rbf_K(6)
    with pytest.raises(ValueError, match="square"):
        ArrayPrior(_as(like, K[:5]))
    bad = K.copy()
    bad[0, 1] += 0.5
    with pytest.raises(ValueError, match="symmetric"):
        ArrayPrior(_as(like, bad))
    with pytest.raises(ValueError, match="positive semi-definite"):
        ArrayPrior(_as(like, K - 3.0 * np.eye(6)))
    nan = K.copy()
    nan[2, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        ArrayPrior(_as(like, nan))


def test_as_prior_dispatch():
    _, K = _rbf_K(5)
    assert isinstance(as_prior(K), DensePrior)
    assert isinstance(as_prior(K.tolist()), DensePrior)
    assert isinstance(as_prior(_as(_strict_like(), K)), ArrayPrior)


# --------------------------------------------------------------------- engine
def _problem(name, n=16, seed=0):
    """(K, y, likelihood) of a small problem; Student-t with outliers (negative sites)."""
    rng = np.random.default_rng(seed)
    X, K = _rbf_K(n, seed=seed, ls=1.2)
    f = rng.multivariate_normal(np.zeros(n), K)
    if name in ("probit", "logistic", "step"):
        y = np.where(f + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)
        lik = {"probit": Probit(), "logistic": Logistic(), "step": NoisyStep(0.1)}[name]
    else:
        y = f + 0.1 * rng.normal(size=n)
        y[[3, 9]] += [6.0, -5.0]  # outliers: negative site precisions under Student-t
        lik = Gaussian(0.2) if name == "gaussian" else StudentT(df=3.0, scale=0.2)
    return K, y, lik


SCHEDULES = {
    "parallel": dict(),
    "parallel-nonrobust": dict(robust=False, max_iter=60),
    "damped": dict(damping=0.5),
    "power": dict(power=0.7),
    "double-loop": dict(double_loop=True, n_parallel_init=2, max_iter=12),
    "sequential": dict(schedule="sequential"),
}


def _run(K, y, lik, kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return expectation_propagation(K, y, lik, **kwargs)


def _assert_same_result(res, ref, kind):
    for name in ("mean", "var", "site_precision", "site_shift", "cavity_mean", "cavity_var"):
        value = getattr(res, name)
        assert type(value) is kind, name
        expected = getattr(ref, name)
        scale = max(1.0, float(np.max(np.abs(expected))))  # within 1e-10 relative to the scale
        np.testing.assert_allclose(aa.to_numpy(value), expected, rtol=0, atol=1e-10 * scale,
                                   err_msg=name)  # fmt: skip
    assert res.n_iter == ref.n_iter
    assert res.converged == ref.converged
    assert abs(res.log_Z - ref.log_Z) < 1e-10 * max(1.0, abs(ref.log_Z))


@pytest.mark.parametrize("schedule", list(SCHEDULES))
@pytest.mark.parametrize("name", ["probit", "logistic", "step", "gaussian", "student_t"])
def test_engine_matches_numpy_on_strict(name, schedule):
    K, y, lik = _problem(name)
    like = _strict_like()
    ref = _run(K, y, lik, SCHEDULES[schedule])
    res = _run(_as(like, K), y, lik, SCHEDULES[schedule])
    _assert_same_result(res, ref, type(like))
    if name == "student_t" and schedule == "parallel":
        assert np.any(ref.site_precision < 0)  # the outliers' sites are negative
    if schedule == "double-loop" and name != "gaussian":
        assert "double-loop" in ref.history["phase"]


@pytest.mark.parametrize("schedule", list(SCHEDULES))
@pytest.mark.parametrize("name", ["probit", "student_t"])
def test_engine_matches_numpy_on_torch(name, schedule):
    like = _torch_like()
    K, y, lik = _problem(name, seed=1)
    ref = _run(K, y, lik, SCHEDULES[schedule])
    res = _run(_as(like, K), y, lik, SCHEDULES[schedule])
    _assert_same_result(res, ref, type(like))


def test_prior_object_keeps_numpy_results_and_predict():
    K, y, lik = _problem("student_t", seed=2)
    like = _strict_like()
    res = expectation_propagation(ArrayPrior(_as(like, K)), y, lik)
    ref = expectation_propagation(K, y, lik)
    assert isinstance(res.mean, np.ndarray)
    np.testing.assert_allclose(res.mean, ref.mean, atol=1e-10)
    Kc, kd = K[:4], np.diag(K)[:4]
    for u, v in zip(res.predict(Kc, kd), ref.predict(Kc, kd), strict=True):
        np.testing.assert_allclose(u, v, atol=1e-10)


def test_warm_start_and_log_Z_gradient_from_array_prior():
    K, y, lik = _problem("probit", seed=3)
    like = _strict_like()
    ref = expectation_propagation(K, y, lik, tol=1e-8)
    res = expectation_propagation(ArrayPrior(_as(like, K)), y, lik, tol=1e-8, init=ref)
    assert res.n_iter <= 1
    X, _ = _rbf_K(16, seed=3, ls=1.2)
    kernel = ConstantKernel(2.0) * RBF(1.2) + WhiteKernel(1e-8)
    _, G = kernel(X, eval_gradient=True)
    g_ref, _ = log_Z_gradient(ref, G, lik, y)
    g, _ = log_Z_gradient(res, G, lik, y)
    np.testing.assert_allclose(g, g_ref, rtol=1e-7, atol=1e-9)


def test_float32_close_to_float64():
    K, y, lik = _problem("probit", n=30, seed=4)
    ref = expectation_propagation(K, y, lik)
    K32 = xs.asarray(K, dtype=xs.float32)
    res = _run(K32, y, lik, {})
    assert res.mean.dtype == xs.float32
    np.testing.assert_allclose(aa.to_numpy(res.mean), ref.mean, atol=1e-3)
    np.testing.assert_allclose(aa.to_numpy(res.var), ref.var, rtol=1e-3, atol=1e-4)


# -------------------------------------------------------------------- kernels
KERNELS = [
    RBF(1.3),
    RBF([0.5, 1.0, 2.0]),
    Matern(0.7, nu=0.5),
    Matern([1.0, 2.0, 3.0], nu=0.5),
    Matern([1.0, 2.0, 3.0], nu=1.5),
    Matern(1.1, nu=2.5),
    Matern(0.9, nu=np.inf),
    RationalQuadratic(1.2, 0.7),
    ConstantKernel(2.0) * RBF(1.0) + WhiteKernel(0.3),
    ConstantKernel(2.0) * Matern([1.0, 2.0, 3.0], nu=2.5) * RationalQuadratic(2.0, 3.0)
    + WhiteKernel(0.1),
    RBF(1.0, length_scale_bounds="fixed") * ConstantKernel(3.0),
    Exponentiation(RBF(2.0), 2.0),
    # constants and white noise are kept lazy (no (n, n) matrix of constants / identity)
    ConstantKernel(2.0),
    ConstantKernel(0.5) + WhiteKernel(0.1),
    WhiteKernel(0.2) + WhiteKernel(0.1),
    WhiteKernel(0.3) * RBF(1.0),
    ConstantKernel(2.0) * ConstantKernel(3.0) + RBF(0.5),
    Exponentiation(ConstantKernel(2.0) + WhiteKernel(0.5), 2.0),
]


@pytest.mark.parametrize("make_like", [lambda: np.zeros(0), _strict_like, _torch_like],
                         ids=["numpy", "array-api-strict", "torch-cpu"])  # fmt: skip
@pytest.mark.parametrize("kernel", KERNELS, ids=repr)
def test_kernel_matrix_matches_sklearn(kernel, make_like):
    like = make_like()
    rng = np.random.default_rng(0)
    X = rng.normal(size=(15, 3)) * 2.0 + 5.0
    Y = rng.normal(size=(6, 3))
    assert supports(kernel)
    K, G = kernel(X, eval_gradient=True)
    Kx, Gx = kernel_matrix(kernel, X, like=like, eval_gradient=True)
    assert type(Kx) is type(like)
    np.testing.assert_allclose(aa.to_numpy(Kx), K, rtol=0, atol=1e-12)
    assert len(Gx) == G.shape[2] == kernel.n_dims
    for j, g in enumerate(Gx):
        np.testing.assert_allclose(aa.to_numpy(g), G[:, :, j], rtol=0, atol=1e-12)
    Kc = kernel_matrix(kernel, X, Y, like=like)
    np.testing.assert_allclose(aa.to_numpy(Kc), kernel(X, Y), rtol=0, atol=1e-12)


def test_unsupported_kernel_is_computed_by_sklearn_and_moved():
    kernel = DotProduct(1.0) + Matern(1.0, nu=0.7)
    assert not supports(kernel) and not supports(Matern(1.0, nu=0.7))
    like = _strict_like()
    X = np.random.default_rng(0).normal(size=(8, 2))
    K, G = kernel(X, eval_gradient=True)
    Kx, Gx = kernel_matrix(kernel, X, like=like, eval_gradient=True)
    np.testing.assert_allclose(aa.to_numpy(Kx), K, atol=1e-14)
    np.testing.assert_allclose(np.dstack([aa.to_numpy(g) for g in Gx]), G, atol=1e-14)


# ----------------------------------------------------------------- estimators
def test_device_gradient_matches_numpy_and_finite_differences():
    """estimators/_device.py on array-api-strict: EP evidence and gradient on the device."""
    from robustep.estimators import _device

    rng = np.random.default_rng(5)
    X = rng.normal(size=(20, 2))
    y = np.where(np.sin(2 * X[:, 0]) + 0.3 * rng.normal(size=20) > 0, 1.0, -1.0)
    kernel = ConstantKernel(1.5) * Matern([0.8, 1.3], nu=2.5)
    like = _strict_like()

    def value_grad(theta):
        k = kernel.clone_with_theta(theta)
        prior, grads = _device.prior(k, X, like, eval_gradient=True)
        res = expectation_propagation(prior, y, Probit(), tol=1e-10)
        return res.log_Z, _device.ep_gradient(res, grads), res

    theta = kernel.theta
    value, grad, res = value_grad(theta)
    K, G = kernel(X, eval_gradient=True)
    ref = expectation_propagation(K, y, Probit(), tol=1e-10)
    assert abs(value - ref.log_Z) < 1e-10
    np.testing.assert_allclose(grad, log_Z_gradient(ref, G, Probit(), y)[0], atol=1e-9)
    h = 1e-5
    for j in range(theta.size):
        e = np.zeros_like(theta)
        e[j] = h
        fd = (value_grad(theta + e)[0] - value_grad(theta - e)[0]) / (2 * h)
        assert abs(fd - grad[j]) < 1e-5 * max(1.0, abs(fd))
    mean, var = _device.predict_latent(kernel, X[:5] + 0.1, X, res, like)
    mean_ref, var_ref = ref.predict(kernel(X[:5] + 0.1, X), kernel.diag(X[:5] + 0.1))
    np.testing.assert_allclose(mean, mean_ref, atol=1e-10)
    np.testing.assert_allclose(var, var_ref, atol=1e-10)


@pytest.mark.parametrize("optimizer", [None, "fmin_l_bfgs_b"])
def test_gp_classifier_on_torch_cpu_matches_numpy(optimizer):
    pytest.importorskip("torch")
    from sklearn.datasets import make_moons

    from robustep.estimators import GPClassifier

    X, y = make_moons(60, noise=0.3, random_state=0)
    a = GPClassifier(optimizer=optimizer).fit(X, y)
    b = GPClassifier(optimizer=optimizer, device="cpu").fit(X, y)
    assert b.device == "cpu"  # parameters are stored as given
    np.testing.assert_allclose(b.kernel_.theta, a.kernel_.theta, atol=1e-8)
    assert abs(a.log_marginal_likelihood_value_ - b.log_marginal_likelihood_value_) < 1e-9
    proba = b.predict_proba(X)
    assert isinstance(proba, np.ndarray) and proba.dtype == np.float64
    np.testing.assert_allclose(proba, a.predict_proba(X), atol=1e-9)
    np.testing.assert_array_equal(b.predict(X), a.predict(X))
    theta = a.kernel_.theta + 0.2
    va, ga = a.log_marginal_likelihood(theta, eval_gradient=True)
    vb, gb = b.log_marginal_likelihood(theta, eval_gradient=True)
    assert abs(va - vb) < 1e-9
    np.testing.assert_allclose(gb, ga, atol=1e-8)
    c = GPClassifier(optimizer=None, device="cpu", dtype="float32").fit(X, y)
    np.testing.assert_allclose(c.predict_proba(X), a.predict_proba(X) if optimizer is None
                               else GPClassifier(optimizer=None).fit(X, y).predict_proba(X),
                               atol=1e-3)  # fmt: skip


def test_gp_classifier_device_errors(monkeypatch):
    from robustep.estimators import GPClassifier

    X = np.random.default_rng(0).normal(size=(10, 2))
    y = np.arange(10) % 2
    with pytest.raises(ValueError, match="laplace"):
        GPClassifier(method="laplace", device="cpu").fit(X, y)
    if _has_torch():
        with pytest.raises(ValueError, match="not usable by PyTorch"):
            GPClassifier(device="no-such-device").fit(X, y)
    monkeypatch.setitem(sys.modules, "torch", None)  # torch absent
    with pytest.raises(ImportError, match=r"pip install robustep\[torch\]"):
        GPClassifier(device="cuda").fit(X, y)


def _has_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(not _has_torch(), reason="needs PyTorch")
@parametrize_with_checks([GPClassifier(optimizer=None, device="cpu")])
def test_sklearn_compatible_on_torch_cpu(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(estimator)
