"""StudentTGPRegressor on an array backend (``device=``, estimators/_device.py): the same
fit and predictions as numpy on PyTorch CPU (when installed) and array-api-strict, and
clear errors for what does not run on a device.  No test needs a GPU.
"""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, ConstantKernel
from sklearn.utils.estimator_checks import parametrize_with_checks

from robustep.estimators import StudentTGPRegressor, _device

xs = pytest.importorskip("array_api_strict")

ATOL = 1e-8


def _data(n=60, seed=0):
    """1-D regression with three gross outliers (their EP sites are negative)."""
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(-3, 3, size=(n, 1)), axis=0)
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=n)
    y[[n // 12, n // 3, 2 * n // 3 + 1]] += [4.0, -3.5, 5.0]
    Xt = np.linspace(-3.5, 3.5, 25)[:, None]
    yt = np.sin(2 * Xt[:, 0])
    return X, y, Xt, yt


def _fit(X, y, **params):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return StudentTGPRegressor(random_state=0, **params).fit(X, y)


def _assert_same_fit(b, a, Xt, yt):
    """``b`` (device) against ``a`` (numpy): hyperparameters, evidence, sites, predictions."""
    np.testing.assert_allclose(b.kernel_.theta, a.kernel_.theta, rtol=0, atol=ATOL)
    assert abs(b.scale_ - a.scale_) < ATOL and abs(b.df_ - a.df_) < ATOL
    assert abs(b.log_marginal_likelihood_value_ - a.log_marginal_likelihood_value_) < ATOL
    assert b.converged_ == a.converged_ and b.method_used_ == a.method_used_
    np.testing.assert_array_equal(b.negative_precision_, a.negative_precision_)
    np.testing.assert_allclose(b.site_precision_, a.site_precision_, rtol=1e-7, atol=ATOL)
    np.testing.assert_allclose(b.loo_log_predictive_, a.loo_log_predictive_, atol=ATOL)
    for u, v in zip(b.predict(Xt, return_std=True), a.predict(Xt, return_std=True), strict=True):
        assert isinstance(u, np.ndarray) and u.dtype == np.float64
        np.testing.assert_allclose(u, v, rtol=0, atol=ATOL)
    lp = b.predict_log_density(Xt, yt)
    assert isinstance(lp, np.ndarray) and lp.dtype == np.float64
    np.testing.assert_allclose(lp, a.predict_log_density(Xt, yt), rtol=0, atol=ATOL)
    for u, v in zip(b.predict_interval(Xt), a.predict_interval(Xt), strict=True):
        np.testing.assert_allclose(u, v, rtol=0, atol=1e-7)
    assert abs(b.log_predictive_score(Xt, yt) - a.log_predictive_score(Xt, yt)) < ATOL


@pytest.mark.parametrize(
    "params",
    [
        dict(optimizer=None),
        dict(),
        dict(method="ep", optimize_df=True),
        dict(method="fractional", power=0.7),
    ],
    ids=["fixed", "auto", "ep-optimize-df", "fractional"],
)
def test_regressor_on_torch_cpu_matches_numpy(params):
    torch = pytest.importorskip("torch")
    X, y, Xt, yt = _data()
    X0, y0 = X.copy(), y.copy()
    a = _fit(X, y, **params)
    b = _fit(X, y, device="cpu", **params)
    assert b.device == "cpu" and b.get_params()["dtype"] == "float64"
    assert a.negative_precision_.any()  # the robust case: negative sites
    post = b._components[0]["res"].posterior
    assert isinstance(post._prior.K, torch.Tensor) and post._prior.K.dtype == torch.float64
    _assert_same_fit(b, a, Xt, yt)
    np.testing.assert_array_equal(X, X0)  # the caller's arrays are not modified
    np.testing.assert_array_equal(y, y0)


def test_regressor_ep3_grid_on_torch_cpu_matches_numpy():
    pytest.importorskip("torch")
    X, y, Xt, yt = _data(n=40, seed=1)
    a = _fit(X, y, method="ep", df_grid=[2.0, 6.0])
    b = _fit(X, y, method="ep", df_grid=[2.0, 6.0], device="cpu")
    np.testing.assert_allclose(b.df_weights_, a.df_weights_, rtol=0, atol=ATOL)
    _assert_same_fit(b, a, Xt, yt)
    Q = b.predict_quantiles(Xt, [0.1, 0.5, 0.9])
    np.testing.assert_allclose(Q, a.predict_quantiles(Xt, [0.1, 0.5, 0.9]), atol=1e-7)


def test_regressor_on_array_api_strict_matches_numpy(monkeypatch):
    """Every device step of the regressor uses only the array API standard."""
    monkeypatch.setattr(_device, "torch_like", lambda device, dtype: xs.zeros(0, dtype=xs.float64))
    X, y, Xt, yt = _data(n=30, seed=2)
    params = dict(kernel=ConstantKernel(1.0) * RBF(1.0))  # theta and sigma optimised
    a = _fit(X, y, **params)
    b = _fit(X, y, device="strict", **params)
    assert type(b._components[0]["res"].posterior._prior.K) is type(xs.zeros(0))
    _assert_same_fit(b, a, Xt, yt)


def test_device_evidence_gradient_matches_numpy():
    """Kernel part on the device, sigma and nu parts in numpy, away from the optimum."""
    pytest.importorskip("torch")
    X, y, _, _ = _data()
    a = _fit(X, y, optimizer=None)
    b = _fit(X, y, optimizer=None, device="cpu")
    kernel = ConstantKernel(1.3) * RBF(0.6)
    K, G = kernel(X, eval_gradient=True)
    res_a = a._infer(K, 3.0, 0.15, tol=1e-10)
    Kd, Gd = _device.prior(kernel, X, b._like, eval_gradient=True)
    res_b = b._infer(Kd, 3.0, 0.15, tol=1e-10)
    assert res_a.converged and res_b.converged and np.any(res_a.site_precision < 0)
    assert abs(res_a.log_marginal_likelihood - res_b.log_marginal_likelihood) < 1e-10
    ga, gb = a._gradient(res_a, G, 3.0, 0.15), b._gradient(res_b, Gd, 3.0, 0.15)
    np.testing.assert_allclose(gb[0], ga[0], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(gb[1:], ga[1:], rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("method", ["laplace", "vb", "fvb", "mcmc", "gaussian"])
def test_non_ep_methods_with_device_raise(method):
    X, y, _, _ = _data(n=12)
    with pytest.raises(
        ValueError, match=rf"use one of them, or device=None with method='{method}'"
    ):
        StudentTGPRegressor(method=method, device="cpu").fit(X, y)


def test_device_errors(monkeypatch):
    X, y, _, _ = _data(n=12)
    with pytest.raises(ValueError, match="dense model; use device=None with inducing_points"):
        StudentTGPRegressor(inducing_points=4, device="cpu").fit(X, y)
    with pytest.raises(ValueError, match="use dtype='float64'"):
        StudentTGPRegressor(device="cpu", dtype="float32").fit(X, y)
    with pytest.raises(ValueError, match="Invalid parameter|must be a str among"):
        StudentTGPRegressor(device="cpu", dtype="float16").fit(X, y)
    # device=None ignores dtype (as GPClassifier does)
    StudentTGPRegressor(optimizer=None, dtype="float32").fit(X, y)
    if _has_torch():
        with pytest.raises(ValueError, match="not usable by PyTorch"):
            StudentTGPRegressor(device="no-such-device").fit(X, y)
    monkeypatch.setitem(sys.modules, "torch", None)  # torch absent
    with pytest.raises(ImportError, match=r"pip install robustep\[torch\]"):
        StudentTGPRegressor(device="cuda").fit(X, y)


def _has_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(not _has_torch(), reason="needs PyTorch")
@parametrize_with_checks([StudentTGPRegressor(optimizer=None, device="cpu")])
def test_sklearn_compatible_on_torch_cpu(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(estimator)
