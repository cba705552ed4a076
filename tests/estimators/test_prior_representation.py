"""GPClassifier and GPRegressor(prior="diagonal_plus_low_rank"): a registered prior
representation chosen by name in an estimator.

The low-rank prior is read off a kernel whose covariance is diagonal plus low rank
(robustep.posterior.low_rank.kernel_structure); its d, U and their derivatives equal the
kernel's K and dK; the classifier (and the regressor) fitted with method="auto" and the
evidence search gives the same kernel, evidence and predictions as the dense prior of the
same kernel; its evidence gradient (the chain rule through d and U) equals finite
differences and the dense one; kernels and settings it cannot serve raise a ValueError
that says what works.
"""

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import RBF, DotProduct, WhiteKernel
from sklearn.gaussian_process.kernels import ConstantKernel as C

from robustep.estimators import GPClassifier, GPRegressor
from robustep.estimators._regressor_inference import InferenceCore
from robustep.posterior import DiagonalPlusLowRankPrior, make_prior
from robustep.posterior.low_rank import kernel_structure

KERNELS = [
    WhiteKernel(0.5) + DotProduct(1.0),
    C(1.0, (1e-2, 1e2)) * DotProduct(1.0, (1e-2, 1e2)) + WhiteKernel(0.5, (1e-2, 1e2)),
    DotProduct(0.7) * C(2.0) + C(0.3) * WhiteKernel(0.2) + C(0.5),
    C(1.5) * (WhiteKernel(0.4, "fixed") + DotProduct(0.6)),
    WhiteKernel(0.3) + C(2.0, "fixed") * DotProduct(0.6, "fixed"),
]


def _data(n=60, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = (X[:, 0] - 0.5 * X[:, 1] + 0.8 * rng.normal(size=n) > 0).astype(int)
    flip = rng.random(n) < 0.1
    y[flip] = 1 - y[flip]
    return X, y


@pytest.mark.parametrize("kernel", KERNELS)
def test_structure_equals_kernel_and_its_gradient(kernel):
    X, _ = _data(20)
    d, U, dd, dU = kernel_structure(kernel, X, eval_gradient=True)
    K, K_gradient = kernel(X, eval_gradient=True)
    np.testing.assert_allclose(np.diag(d) + U @ U.T, K, rtol=1e-12, atol=1e-12)
    assert dd.shape[1] == dU.shape[2] == K_gradient.shape[2] == kernel.theta.size
    for k in range(kernel.theta.size):
        dK = np.diag(dd[:, k]) + dU[:, :, k] @ U.T + U @ dU[:, :, k].T
        np.testing.assert_allclose(dK, K_gradient[:, :, k], rtol=1e-12, atol=1e-12)


def test_make_prior_reads_the_kernel():
    X, _ = _data(15)
    kernel = WhiteKernel(0.5) + DotProduct(1.0)
    prior = make_prior(kernel, X, "diagonal_plus_low_rank")
    assert isinstance(prior, DiagonalPlusLowRankPrior)
    assert prior.U.shape == (15, 3)  # [sigma_0 1, X]
    np.testing.assert_allclose(prior.dense_covariance(), kernel(X), rtol=1e-12)


@pytest.mark.parametrize(
    "kernel",
    [RBF(1.0), WhiteKernel(0.5), DotProduct(1.0), WhiteKernel() + RBF(), DotProduct() ** 2],
)
def test_unsupported_kernel_raises(kernel):
    X, y = _data(20)
    with pytest.raises(ValueError, match="Supported: sums of WhiteKernel, DotProduct"):
        make_prior(kernel, X, "diagonal_plus_low_rank")
    with pytest.raises(ValueError, match="Supported: sums of WhiteKernel, DotProduct"):
        GPClassifier(kernel=kernel, prior="diagonal_plus_low_rank").fit(X, y)


@pytest.mark.parametrize("kernel", KERNELS[:2])
def test_fit_equals_dense(kernel):
    X, y = _data()
    X_test = np.random.default_rng(5).normal(size=(25, 2))
    fits = {
        prior: GPClassifier(kernel=kernel, prior=prior, method="auto").fit(X, y)
        for prior in ("dense", "diagonal_plus_low_rank")
    }
    dense, low_rank = fits["dense"], fits["diagonal_plus_low_rank"]
    assert low_rank.optimizer_result_.moved and low_rank.optimizer_result_.success
    assert isinstance(low_rank._state.result.posterior.prior, DiagonalPlusLowRankPrior)
    np.testing.assert_allclose(low_rank.kernel_.theta, dense.kernel_.theta, atol=1e-6)
    assert low_rank.log_marginal_likelihood_value_ == pytest.approx(
        dense.log_marginal_likelihood_value_, abs=1e-6
    )
    np.testing.assert_allclose(
        low_rank.predict_proba(X_test), dense.predict_proba(X_test), atol=1e-6
    )


def test_evidence_gradient_matches_finite_differences_and_dense():
    X, y = _data()
    kernel = C(1.0) * DotProduct(1.0) + WhiteKernel(0.5)
    clf = GPClassifier(
        kernel=kernel, prior="diagonal_plus_low_rank", optimizer=None, tol=1e-10
    ).fit(X, y)
    dense = GPClassifier(kernel=kernel, optimizer=None, tol=1e-10).fit(X, y)
    theta = np.log([0.7, 0.4, 0.9])
    value, grad = clf.log_marginal_likelihood(theta, eval_gradient=True)
    dense_value, dense_grad = dense.log_marginal_likelihood(theta, eval_gradient=True)
    assert value == pytest.approx(dense_value, abs=1e-8)
    np.testing.assert_allclose(grad, dense_grad, rtol=1e-7, atol=1e-9)
    h = 1e-5
    fd = np.array(
        [
            (
                clf.log_marginal_likelihood(theta + h * e)
                - clf.log_marginal_likelihood(theta - h * e)
            )
            / (2 * h)
            for e in np.eye(theta.size)
        ]
    )
    np.testing.assert_allclose(grad, fd, rtol=1e-4, atol=1e-6)
    assert np.all(np.abs(grad) > 1e-3)  # a gradient away from the optimum


def test_one_vs_rest_uses_the_representation():
    X, _ = _data(45)
    y = np.digitize(X[:, 0], [-0.4, 0.4])
    kernel = WhiteKernel(0.5) + DotProduct(1.0)
    kw = dict(kernel=kernel, multi_class="one_vs_rest", optimizer=None)
    low_rank = GPClassifier(prior="diagonal_plus_low_rank", **kw).fit(X, y)
    dense = GPClassifier(**kw).fit(X, y)
    np.testing.assert_allclose(low_rank.predict_proba(X), dense.predict_proba(X), atol=1e-8)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(method="laplace"), "method other than 'laplace'"),
        (dict(inducing_points=5), "inducing_points=None"),
        (dict(prior="fitc"), "prior"),
    ],
)
def test_settings_it_cannot_serve_raise(kwargs, match):
    X, y = _data(30)
    kwargs = {"prior": "diagonal_plus_low_rank", **kwargs}
    with pytest.raises(ValueError, match=match):
        GPClassifier(kernel=WhiteKernel() + DotProduct(), **kwargs).fit(X, y)


def test_multinomial_refuses_the_representation():
    X, _ = _data(30)
    y = np.digitize(X[:, 0], [-0.4, 0.4])
    clf = GPClassifier(kernel=WhiteKernel() + DotProduct(), prior="diagonal_plus_low_rank")
    with pytest.raises(ValueError, match="one_vs_rest"):
        clf.fit(X, y)


# ---------------------------------------------------------------------------- regressor
def _regression_data(n=60, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    return X, X[:, 0] - 0.5 * X[:, 1] + 0.3 * rng.standard_t(3, size=n)


@pytest.mark.parametrize("method", ["auto", "fractional"])
def test_regressor_fit_equals_dense(method):
    X, y = _regression_data()
    X_test = np.random.default_rng(5).normal(size=(25, 2))
    kernel = WhiteKernel(0.05, "fixed") + C(1.0) * DotProduct(1.0)
    fits = {
        prior: GPRegressor(kernel=kernel, prior=prior, method=method).fit(X, y)
        for prior in ("dense", "diagonal_plus_low_rank")
    }
    dense, low_rank = fits["dense"], fits["diagonal_plus_low_rank"]
    assert low_rank.optimizer_result_.moved
    assert isinstance(low_rank._fit.components[0].res.posterior.prior, DiagonalPlusLowRankPrior)
    np.testing.assert_allclose(low_rank.kernel_.theta, dense.kernel_.theta, atol=1e-6)
    assert low_rank.likelihood_.scale == pytest.approx(dense.likelihood_.scale, abs=1e-6)
    assert low_rank.log_marginal_likelihood_value_ == pytest.approx(
        dense.log_marginal_likelihood_value_, abs=1e-6
    )
    for a, b in zip(
        low_rank.predict(X_test, return_std=True),
        dense.predict(X_test, return_std=True),
        strict=True,
    ):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_regressor_evidence_gradient_equals_dense():
    X, y = _regression_data()
    kernel = C(0.8) * DotProduct(0.5) + WhiteKernel(0.2)
    fit = GPRegressor(kernel=kernel, optimizer=None).fit(X, y)
    res = fit._fit.components[0].res
    core_dense = InferenceCore("auto", 0.5, fit._y)
    core_low_rank = InferenceCore("auto", 0.5, fit._y, prior="diagonal_plus_low_rank")
    prior, structure = core_low_rank.structured_prior(fit.kernel_, X)
    sites = (res.site_precision, res.site_shift)
    low = core_low_rank.infer(prior, fit.likelihood_, warm=sites, tol=1e-10)
    dense = core_dense.infer(fit.kernel_(X), fit.likelihood_, warm=sites, tol=1e-10)
    gk, gl = core_low_rank.gradient(low, structure, fit.likelihood_)
    gk_dense, gl_dense = core_dense.gradient(dense, fit.kernel_(X, eval_gradient=True)[1],
                                             fit.likelihood_)  # fmt: skip
    np.testing.assert_allclose(gk, gk_dense, rtol=1e-6, atol=1e-8)
    assert gl.keys() == gl_dense.keys()
    for name in gl:
        assert gl[name] == pytest.approx(gl_dense[name], rel=1e-6, abs=1e-8)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(method="laplace"), "EP methods"),
        (dict(inducing_points=5), "inducing_points=None"),
        (dict(kernel=RBF()), "Supported: sums of WhiteKernel"),
    ],
)
def test_regressor_settings_it_cannot_serve_raise(kwargs, match):
    X, y = _regression_data(30)
    kwargs = {"kernel": WhiteKernel() + DotProduct(), **kwargs}
    with pytest.raises(ValueError, match=match):
        GPRegressor(prior="diagonal_plus_low_rank", **kwargs).fit(X, y)
