"""Property-based tests of the public estimators.

For random valid inputs -- 2 to 14 samples, 1 to 3 features on scales 1e-2 to 1e2,
repeated rows, labels of several types -- every estimator:

* gives finite predictions; class probabilities lie in [0, 1] and each row sums to 1;
  the regressor's predictive standard deviations are finite and positive;
* predicts exactly the same after a pickle round trip;
* gives identical fits for the same ``random_state`` (with optimiser restarts, where
  randomness enters);
* never modifies the caller's arrays (X, y, and a kernel passed in).

Cheap configurations (``optimizer=None`` or few EP sweeps) keep the default run at a few
seconds (profile "default" of tests/_hypothesis_profiles.py); the ``slow``-marked copies
draw many more examples (``HYPOTHESIS_PROFILE=slow pytest -m slow
tests/estimators/test_properties_estimators.py``).
"""

from __future__ import annotations

import copy
import pickle
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.base import clone
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

import _hypothesis_profiles as profiles
from robustep.estimators import (
    BayesPointMachine,
    GPClassifier,
    StudentTGPRegressor,
    StudentTProcessClassifier,
)

CLASSIFIERS = {
    "gpc_ep": lambda: GPClassifier(optimizer=None, max_iter=30),
    "gpc_step": lambda: GPClassifier(
        optimizer=None, likelihood="step", label_noise=0.05, max_iter=30
    ),
    "gpc_laplace": lambda: GPClassifier(optimizer=None, method="laplace", max_iter=50),
    "bpm": lambda: BayesPointMachine(max_iter=30),
    "bpm_adf": lambda: BayesPointMachine(method="adf"),
    "stc": lambda: StudentTProcessClassifier(optimizer=None, max_iter=20),
}
REGRESSORS = {
    "tgp_ep": lambda: StudentTGPRegressor(optimizer=None),
    "tgp_laplace": lambda: StudentTGPRegressor(optimizer=None, method="laplace"),
    "tgp_vb": lambda: StudentTGPRegressor(optimizer=None, method="vb"),
}
#: estimators whose fit draws random numbers (optimiser restarts) -- random_state matters
SEEDED = {
    "gpc": lambda seed: GPClassifier(n_restarts_optimizer=1, max_iter=50, random_state=seed),
    "stc": lambda seed: StudentTProcessClassifier(
        n_restarts_optimizer=1, max_iter=30, random_state=seed
    ),
    "tgp": lambda seed: StudentTGPRegressor(n_restarts_optimizer=1, random_state=seed),
}

#: examples per test in the default run (the slow-marked copies draw SLOW_EXAMPLES)
_FAST = 6

LABELS = {
    "int01": np.array([0, 1]),
    "pm1": np.array([-1, 1]),
    "str": np.array(["no", "yes"]),
    "float": np.array([-1.0, 1.0]),
    "bool": np.array([False, True]),
}


@st.composite
def datasets(draw, classification=True, max_n=14):
    n = draw(st.integers(2, max_n))
    d = draw(st.integers(1, 3))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    X = rng.normal(size=(n, d)) * 10.0 ** draw(st.floats(-2, 2))
    if draw(st.booleans()):  # repeated rows
        X[-1] = X[0]
    if classification:
        labels = LABELS[draw(st.sampled_from(sorted(LABELS)))]
        idx = rng.integers(0, 2, n)
        idx[:2] = [0, 1]  # both classes present
        rng.shuffle(idx)
        y = labels[idx]
    else:
        y = np.sin(X[:, 0]) + 10.0 ** draw(st.floats(-2, 1)) * rng.standard_t(3.0, size=n)
    X_test = rng.normal(size=(5, d)) * 10.0 ** draw(st.floats(-2, 2))
    return X, y, X_test


def _quiet_fit(est, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ConvergenceWarning is allowed; NaN is not
        return est.fit(X, y)


def _outputs(est, X_test):
    """Every prediction the estimator offers, as a tuple of arrays."""
    if hasattr(est, "predict_proba"):
        return (est.predict(X_test), est.predict_proba(X_test), est.decision_function(X_test))
    mean, std = est.predict(X_test, return_std=True)
    return (mean, std)


def _check_valid(est, X_test):
    out = _outputs(est, X_test)
    if hasattr(est, "predict_proba"):
        labels, proba, score = out
        assert set(labels) <= set(est.classes_)
        assert proba.shape == (len(X_test), 2)
        assert np.all(np.isfinite(proba)) and np.all((proba >= 0) & (proba <= 1))
        np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-12)
        assert np.all(np.isfinite(score))
    else:
        mean, std = out
        assert np.all(np.isfinite(mean)) and np.all(np.isfinite(std)) and np.all(std > 0)


def _check_unmodified_and_valid(make, data):
    X, y, X_test = data
    X0, y0, Xt0 = X.copy(), y.copy(), X_test.copy()
    est = _quiet_fit(make(), X, y)
    assert np.array_equal(X, X0) and np.array_equal(y, y0)
    _check_valid(est, X_test)
    assert np.array_equal(X_test, Xt0)


def _check_pickle(make, data):
    X, y, X_test = data
    est = _quiet_fit(make(), X, y)
    before = _outputs(est, X_test)
    loaded = pickle.loads(pickle.dumps(est))
    after = _outputs(loaded, X_test)
    for a, b in zip(before, after, strict=True):
        assert np.array_equal(a, b)


# ----------------------------------------------------------------------------- classifiers
@pytest.mark.parametrize("name", sorted(CLASSIFIERS))
@settings(max_examples=_FAST)
@given(data=datasets())
def test_classifier_valid_outputs_and_inputs_untouched(name, data):
    _check_unmodified_and_valid(CLASSIFIERS[name], data)


@pytest.mark.parametrize("name", sorted(CLASSIFIERS))
@settings(max_examples=3)
@given(data=datasets())
def test_classifier_pickle_round_trip(name, data):
    _check_pickle(CLASSIFIERS[name], data)


# ----------------------------------------------------------------------------- regressors
@pytest.mark.parametrize("name", sorted(REGRESSORS))
@settings(max_examples=_FAST)
@given(data=datasets(classification=False))
def test_regressor_valid_outputs_and_inputs_untouched(name, data):
    _check_unmodified_and_valid(REGRESSORS[name], data)


@pytest.mark.parametrize("name", sorted(REGRESSORS))
@settings(max_examples=3)
@given(data=datasets(classification=False))
def test_regressor_pickle_round_trip(name, data):
    _check_pickle(REGRESSORS[name], data)


# ----------------------------------------------------------------------------- seeds, kernels
def _check_same_seed(name, data, seed):
    X, y, X_test = data
    if name == "tgp":
        y = np.sin(X[:, 0]) + 0.1 * np.arange(len(X)) % 3
    a = _quiet_fit(SEEDED[name](seed), X, y)
    b = _quiet_fit(SEEDED[name](seed), X, y)
    assert a.kernel_.theta.tolist() == b.kernel_.theta.tolist()
    for u, v in zip(_outputs(a, X_test), _outputs(b, X_test), strict=True):
        assert np.array_equal(u, v)


@pytest.mark.parametrize("name", ["gpc", "tgp"])  # STC (slower) in the slow copy
@settings(max_examples=2)
@given(data=datasets(max_n=6), seed=st.integers(0, 2**31 - 1))
def test_same_random_state_same_fit(name, data, seed):
    _check_same_seed(name, data, seed)


@pytest.mark.parametrize(
    "make",
    [
        lambda k: GPClassifier(kernel=k, max_iter=50),
        lambda k: StudentTProcessClassifier(kernel=k, optimizer=None, max_iter=20),
        lambda k: StudentTGPRegressor(kernel=k),
    ],
    ids=["gpc", "stc", "tgp"],
)
@settings(max_examples=2)
@given(data=datasets(max_n=6))
def test_fit_never_modifies_the_kernel_passed_in(make, data):
    X, y, _ = data
    kernel = ConstantKernel(2.0) * RBF(0.7) + WhiteKernel(0.1)
    before = copy.deepcopy(kernel)
    if "Regressor" in type(make(kernel)).__name__:
        y = np.sin(X[:, 0])
    est = _quiet_fit(make(kernel), X, y)
    assert kernel.get_params() == before.get_params()
    assert np.array_equal(kernel.theta, before.theta)
    assert est.kernel_ is not kernel
    assert est.kernel is kernel  # the constructor argument itself is kept as given
    assert clone(est).kernel.get_params() == before.get_params()


# ----------------------------------------------------------------------------- slow copies
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CLASSIFIERS))
@settings(max_examples=profiles.SLOW_EXAMPLES)
@given(data=datasets(max_n=40))
def test_classifier_valid_outputs_many(name, data):
    _check_unmodified_and_valid(CLASSIFIERS[name], data)
    _check_pickle(CLASSIFIERS[name], data)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(REGRESSORS))
@settings(max_examples=profiles.SLOW_EXAMPLES)
@given(data=datasets(classification=False, max_n=40))
def test_regressor_valid_outputs_many(name, data):
    _check_unmodified_and_valid(REGRESSORS[name], data)
    _check_pickle(REGRESSORS[name], data)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SEEDED))
@settings(max_examples=max(10, profiles.SLOW_EXAMPLES // 10))
@given(data=datasets(max_n=20), seed=st.integers(0, 2**31 - 1))
def test_same_random_state_same_fit_many(name, data, seed):
    _check_same_seed(name, data, seed)
