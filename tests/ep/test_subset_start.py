"""Dense EP started from FITC EP on a subset of the rows of K (robustep.ep.subset_start).

The start changes the path, never the fixed point: every test compares with the cold
start (zero sites) run to a tight tolerance.
"""

import warnings

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

import robustep
from robustep.ep import expectation_propagation
from robustep.ep import subset_start as subset_module
from robustep.ep.subset_start import subset_fitc_start, subset_size
from robustep.estimators import GPClassifier
from robustep.likelihoods import Probit, StudentT
from robustep.posterior import DensePrior, FITCPrior


def _problem(n, kind="probit", ell=1.5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, 2))
    K = (ConstantKernel(2.0) * RBF(ell))(X) + 1e-6 * np.eye(n)
    f = np.sin(X[:, 0]) + np.cos(1.5 * X[:, 1])
    if kind == "probit":
        return X, K, np.where(f + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0), Probit()
    y = f + 0.2 * rng.standard_normal(n)
    y[rng.random(n) < 0.08] += 5.0  # outliers: negative Student-t sites
    return X, K, y, StudentT(df=4.0, scale=0.2)


def test_subset_size():
    assert subset_size(5) == 5
    assert subset_size(100) == 20
    assert subset_size(1000) == 100
    assert subset_size(10**6) == 200


@pytest.mark.parametrize("kind", ["probit", "student-t"])
def test_same_fixed_point_as_the_cold_start(kind):
    _, K, y, lik = _problem(400, kind)
    K0 = K.copy()
    cold = expectation_propagation(K, y, lik, tol=1e-9)
    warm = expectation_propagation(K, y, lik, tol=1e-9, init="subset")
    assert cold.converged and warm.converged
    # the start was used: its first sweep begins closer to the fixed point
    assert warm.history["residual"][0] < cold.history["residual"][0]
    np.testing.assert_allclose(warm.mean, cold.mean, atol=1e-7)
    np.testing.assert_allclose(warm.var, cold.var, rtol=1e-7)
    np.testing.assert_allclose(warm.log_Z, cold.log_Z, rtol=1e-9)
    np.testing.assert_array_equal(K, K0)  # the caller's K is untouched


def test_fewer_dense_sweeps_on_a_smooth_problem():
    _, K, y, lik = _problem(1000, ell=2.0)
    cold = expectation_propagation(K, y, lik, tol=1e-4)
    warm = expectation_propagation(K, y, lik, tol=1e-4, init="subset")
    assert warm.converged
    assert warm.n_iter <= cold.n_iter - 2, (warm.n_iter, cold.n_iter)


def test_the_start_is_close_to_the_dense_sites():
    _, K, y, lik = _problem(1000, ell=2.0)
    start = subset_fitc_start(K, y, lik, run=expectation_propagation)
    dense = expectation_propagation(K, y, lik, tol=1e-8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # one sweep from flat sites does not converge
        cold_first = expectation_propagation(K, y, lik, max_iter=1)
    err_start = np.max(np.abs(start[0] - dense.site_precision))
    err_first = np.max(np.abs(cold_first.site_precision - dense.site_precision))
    assert err_start < 0.2 * err_first


def test_does_not_apply_elsewhere_and_starts_cold():
    """Sequential schedule and non-dense priors: "subset" is a zero start."""
    _, K, y, lik = _problem(60)
    a = expectation_propagation(K, y, lik, init="subset", schedule="sequential")
    b = expectation_propagation(K, y, lik, schedule="sequential")
    np.testing.assert_array_equal(a.site_precision, b.site_precision)
    idx = np.arange(0, 60, 3)
    fitc = FITCPrior(K[np.ix_(idx, idx)], K[:, idx], np.diag(K).copy())
    a = expectation_propagation(fitc, y, lik, init="subset")
    b = expectation_propagation(fitc, y, lik)
    np.testing.assert_array_equal(a.site_precision, b.site_precision)


def test_invalid_start_falls_back_quietly(monkeypatch):
    _, K, y, lik = _problem(80, "student-t")
    # sites that make the dense posterior indefinite
    monkeypatch.setattr(
        subset_module, "subset_fitc_start", lambda *a, **k: (np.full(80, -50.0), np.zeros(80))
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "init gives an invalid posterior" warning
        a = expectation_propagation(K, y, lik, init="subset")
    b = expectation_propagation(K, y, lik)
    np.testing.assert_array_equal(a.site_precision, b.site_precision)


def test_failing_subset_run_returns_none(monkeypatch):
    _, K, y, lik = _problem(50)

    def boom(*args, **kwargs):
        raise np.linalg.LinAlgError("no")

    assert subset_fitc_start(K, y, lik, run=boom) is None


def test_unknown_init_string():
    _, K, y, lik = _problem(20)
    with pytest.raises(ValueError, match='"subset"'):
        expectation_propagation(K, y, lik, init="fitc")


def test_classifier_uses_the_start_from_the_configured_size(monkeypatch):
    X, _, y, _ = _problem(120)
    labels = (y > 0).astype(int)
    calls = []
    real = subset_module.subset_fitc_start

    def spy(*args, **kwargs):
        calls.append(args[0].shape)
        return real(*args, **kwargs)

    monkeypatch.setattr(subset_module, "subset_fitc_start", spy)
    clf = GPClassifier(method="ep", optimizer=None, tol=1e-9)
    cold = clf.fit(X, labels).predict_proba(X)
    assert calls == []  # n = 120 < 2000: the default keeps the cold start
    with robustep.config(subset_start_min_n=100):
        warm = clf.fit(X, labels).predict_proba(X)
    assert calls == [(120, 120)]
    np.testing.assert_allclose(warm, cold, atol=1e-7)
    with robustep.config(subset_start_min_n=None):
        clf.fit(X, labels)
    assert len(calls) == 1
    with robustep.config(subset_start_min_n=100):
        GPClassifier(method="laplace", optimizer=None).fit(X, labels)
        GPClassifier(method="ep", schedule="sequential", optimizer=None).fit(X, labels)
        GPClassifier(likelihood="step", label_noise=0.1, optimizer=None).fit(X, labels)
    assert len(calls) == 1


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "many"])
def test_config_validation(bad):
    with pytest.raises(ValueError, match="subset_start_min_n"):
        with robustep.config(subset_start_min_n=bad):
            pass


def test_dense_prior_object_takes_the_start():
    _, K, y, lik = _problem(300)
    a = expectation_propagation(DensePrior(K, check=False), y, lik, init="subset", tol=1e-9)
    b = expectation_propagation(K, y, lik, tol=1e-9)
    np.testing.assert_allclose(a.mean, b.mean, atol=1e-7)


def test_repeated_inputs_give_no_warning():
    """Duplicate rows make the subset's K_mm singular: the start stays quiet."""
    rng = np.random.default_rng(4)
    X = np.repeat(rng.uniform(-3, 3, size=(30, 2)), 10, axis=0)  # 300 rows, 30 distinct
    K = (ConstantKernel(2.0) * RBF(1.5))(X)
    y = np.where(np.sin(X[:, 0]) + 0.3 * rng.standard_normal(300) > 0, 1.0, -1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        start = subset_fitc_start(K, y, Probit(), run=expectation_propagation)
        res = expectation_propagation(DensePrior(K + 1e-6 * np.eye(300)), y, Probit(), init=start)
    assert res.converged


def test_auto_chain_runs_the_subset_start_once(monkeypatch):
    """method="auto" passes its init to every stage: "subset" is resolved once."""
    from robustep.ep.chain import auto_expectation_propagation

    _, K, y, lik = _problem(150)
    calls = []
    real = subset_module.subset_fitc_start

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(subset_module, "subset_fitc_start", spy)
    res = auto_expectation_propagation(K, y, lik, max_iter=1, init="subset")  # every stage
    assert [name for name, *_ in res.methods_tried] == ["ep", "damped", "double_loop", "power"]
    assert calls == [1]
