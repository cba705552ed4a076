"""The dense EP engine at its floor: mean sweeps, the O(n^2) shift update of
the dense posterior, the prediction paths, and the classifier's fast label path.

References: the plain engine (``mean_sweeps=0``) for the fixed points, a freshly
factorised posterior for ``with_site_shift``, the explicit covariance formula for the
predictive variances, exact GP regression for the Gaussian limiting case, and
``binary_labels`` for the label fast path.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

from robustep._validation import binary_labels
from robustep.ep import engine, expectation_propagation
from robustep.ep.updates import moment_matching_update
from robustep.estimators import GPClassifier
from robustep.estimators.gp_classifier import _two_integer_labels
from robustep.likelihoods import Gaussian, Logistic, Probit, StudentT
from robustep.posterior import DensePrior
from robustep.posterior.dense import DenseSitePosterior


def _data(n, kind, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (n, 2))
    K = (ConstantKernel(2.0) * RBF(1.0))(X) + 1e-6 * np.eye(n)
    f = np.sin(X[:, 0]) + np.cos(1.5 * X[:, 1])
    if kind in ("probit", "logistic"):
        y = np.where(f + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
        return K, y, Probit() if kind == "probit" else Logistic()
    y = f + 0.2 * rng.standard_normal(n)
    y[:: max(n // 8, 1)] += 4.0  # outliers: negative site precisions
    return K, y, StudentT(df=4.0, scale=0.2)


def _ep(K, y, lik, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        return expectation_propagation(K, y, lik, **kw)


# --------------------------------------------------------------------------- mean sweeps
@pytest.mark.parametrize(
    "kind, power", [("probit", 1.0), ("probit", 0.5), ("logistic", 1.0), ("student_t", 1.0)]
)
def test_mean_sweeps_reach_the_plain_fixed_point(kind, power):
    K, y, lik = _data(60, kind)
    plain = _ep(K, y, lik, power=power, tol=1e-10, mean_sweeps=0, max_iter=2000)
    fast = _ep(K, y, lik, power=power, tol=1e-10, mean_sweeps=3, max_iter=2000)
    assert plain.converged and fast.converged
    assert sum(plain.history["mean_sweeps"]) == 0 and sum(fast.history["mean_sweeps"]) > 0
    np.testing.assert_allclose(fast.mean, plain.mean, atol=1e-6)
    np.testing.assert_allclose(fast.var, plain.var, atol=1e-6)
    np.testing.assert_allclose(fast.site_precision, plain.site_precision, atol=1e-6)
    np.testing.assert_allclose(fast.site_shift, plain.site_shift, atol=1e-6)
    assert fast.log_Z == pytest.approx(plain.log_Z, abs=1e-6)
    if kind == "student_t":
        assert np.any(fast.site_precision < 0)  # the mixed-sign factorisation was exercised


def test_mean_sweeps_cut_the_sweeps_for_probit():
    K, y, lik = _data(300, "probit")
    plain = _ep(K, y, lik, tol=1e-4, mean_sweeps=0)
    fast = _ep(K, y, lik, tol=1e-4)  # "auto"
    assert fast.n_iter <= 0.7 * plain.n_iter, (fast.n_iter, plain.n_iter)
    assert len(fast.history["mean_sweeps"]) == fast.n_iter


def test_mean_sweeps_zero_is_the_plain_engine_and_robust_false_has_none():
    K, y, lik = _data(40, "probit")
    a = _ep(K, y, lik, tol=1e-8, mean_sweeps=0)
    b = _ep(K, y, lik, tol=1e-8, robust=False)  # plain parallel EP: never mean sweeps
    assert sum(b.history["mean_sweeps"]) == 0
    np.testing.assert_array_equal(a.site_precision, b.site_precision)
    np.testing.assert_array_equal(a.site_shift, b.site_shift)


@pytest.mark.parametrize("power", [1.0, 0.5])
def test_one_mean_sweep_at_exact_precisions_is_exact_gp_regression(power):
    """Limiting case: Gaussian likelihood N(y | f, s2).  At the exact site precisions
    1/s2 the tilted mean of every site is q's mean after an exact update, so one mean
    sweep (eq. M1) from zero shifts gives the exact GP-regression mean."""
    K, y, _ = _data(25, "student_t")
    s2 = 0.3
    lik = Gaussian(s2)
    prior = DensePrior(K)
    ctx = engine._Context(
        prior, y, lik, moment_matching_update, power, 0.0, 1e-12, 100, None
    )  # fmt: skip
    ev = engine._evaluate(ctx, np.full(y.size, 1.0 / s2), np.zeros(y.size))
    ev1, kept = engine._mean_sweeps(ctx, ev, 1)
    exact = K @ np.linalg.solve(K + s2 * np.eye(y.size), y)
    assert kept == 1
    np.testing.assert_allclose(ev1.post.mean, exact, atol=1e-9)
    np.testing.assert_allclose(ev1.shift, y / s2, atol=1e-8)


def test_mean_sweep_keeps_cavities_and_variances():
    K, y, lik = _data(60, "student_t")
    ctx = engine._Context(DensePrior(K), y, lik, moment_matching_update, 1.0, 0.0, 1e-8, 50, None)
    res = _ep(K, y, lik, tol=1e-3, mean_sweeps=0)
    assert np.any(res.site_precision < 0)
    ev = engine._evaluate(ctx, res.site_precision, res.site_shift + 0.3)
    new, _ = engine._mean_sweeps(ctx, ev, 3)
    assert new.post.var is ev.post.var  # shared: the precisions did not change
    np.testing.assert_array_equal(new.cav_precision, ev.cav_precision)
    assert np.all(new.valid)


def test_mean_sweeps_argument_is_validated():
    K, y, lik = _data(10, "probit")
    for bad in (-1, 1.5, "fast", None):
        with pytest.raises(ValueError, match="mean_sweeps"):
            expectation_propagation(K, y, lik, mean_sweeps=bad)
    with pytest.raises(ValueError, match="mean_sweeps"):
        expectation_propagation(
            K, y, lik, mean_sweeps=2, site_update=moment_matching_update
        )  # fmt: skip


# --------------------------------------------------------------------------- dense posterior
@pytest.mark.parametrize("mixed", [False, True])
def test_with_site_shift_equals_a_fresh_posterior(mixed):
    K, _, _ = _data(30, "probit")
    rng = np.random.default_rng(1)
    tau = rng.uniform(0.2, 2.0, 30)
    if mixed:
        tau[[2, 11]] = -0.05
    nu, nu2 = rng.standard_normal(30), rng.standard_normal(30)
    post = DenseSitePosterior(K, tau, nu)
    moved = post.with_site_shift(nu2)
    fresh = DenseSitePosterior(K, tau, nu2)
    np.testing.assert_allclose(moved.mean, fresh.mean, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(moved.alpha, fresh.alpha, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(moved.var, fresh.var)
    assert moved.log_det == fresh.log_det
    np.testing.assert_array_equal(post.site_shift, nu)  # the original is unchanged


@pytest.mark.parametrize("m", [3, 40])  # triangular solve / cached inverse factor
@pytest.mark.parametrize("mixed", [False, True])
def test_predictive_variance_paths_match_the_explicit_formula(m, mixed):
    rng = np.random.default_rng(2)
    X = rng.uniform(-3, 3, (40 + m, 2))
    kern = ConstantKernel(1.5) * RBF(0.8)
    Kall = kern(X) + 1e-8 * np.eye(40 + m)
    K, Ks, kss = Kall[:40, :40], Kall[40:, :40], np.diag(Kall)[40:]
    tau = rng.uniform(0.1, 3.0, 40)
    if mixed:
        tau[5] = -0.02
    nu = rng.standard_normal(40)
    post = DenseSitePosterior(K, tau, nu)
    for _ in range(2):  # the second call reuses the cached factor (when built)
        mean, var = post.predict(Ks, kss)
        R = np.linalg.inv(K + np.diag(1.0 / tau))
        np.testing.assert_allclose(mean, Ks @ post.alpha, rtol=1e-12)
        np.testing.assert_allclose(var, kss - np.einsum("ij,jk,ik->i", Ks, R, Ks), atol=1e-10)
    # flat sites: the prior
    flat = DenseSitePosterior(K, np.zeros(40), np.zeros(40))
    np.testing.assert_allclose(flat.predict(Ks, kss)[1], kss, atol=1e-14)


# --------------------------------------------------------------------------- classifier
@pytest.mark.parametrize(
    "y",
    [
        np.array([0, 1, 1, 0, 1]),
        np.array([3, -2, 3, 3, -2], dtype=np.int8),
        np.array([True, False, True, True, False]),
        np.array([0.0, 1.0, 1.0, 0.0, 0.0]),
        np.array([-1.0, 1.0, -1.0, 1.0, 1.0]),
    ],
)
def test_fast_label_path_equals_binary_labels(y):
    fast = _two_integer_labels(y)
    classes, y_pm = binary_labels(y, "GPClassifier")
    assert fast is not None
    np.testing.assert_array_equal(fast[0], classes)
    assert fast[0].dtype == classes.dtype
    np.testing.assert_array_equal(fast[1], y_pm)


@pytest.mark.parametrize(
    "y",
    [
        np.array([0.5, 1.5, 0.5]),  # continuous: the full validation says so
        np.array([0, 1, 2]),  # three classes
        np.array([1, 1, 1]),  # one class
        np.array(["a", "b", "a"]),  # strings: full path
        np.array([0.0, np.nan, 0.0]),
    ],
)
def test_fast_label_path_leaves_other_targets_to_the_full_validation(y):
    assert _two_integer_labels(y) is None


def test_classifier_without_the_engine_check_fits_as_before():
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (60, 2))
    y = (np.sin(X[:, 0]) + 0.3 * rng.standard_normal(60) > 0).astype(int)
    kernel = ConstantKernel(2.0) * RBF(1.0)
    clf = GPClassifier(kernel, method="ep", optimizer=None, tol=1e-10).fit(X, y)
    ref = _ep(kernel(X), np.where(y == 1, 1.0, -1.0), Probit(), tol=1e-10)
    np.testing.assert_allclose(clf.site_precision_, ref.site_precision, atol=1e-8)
    assert clf.log_marginal_likelihood_value_ == pytest.approx(ref.log_Z, abs=1e-8)
