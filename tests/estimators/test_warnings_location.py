"""Warnings raised inside a fit name the user's file and line, not robustep's."""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

from robustep import GPClassifier, StudentTProcessClassifier
from robustep._warnings import warn


def _caught(fit):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit()
    return [w for w in caught if issubclass(w.category, ConvergenceWarning)]


def test_warn_points_at_the_first_frame_outside_robustep():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warn("hello", RuntimeWarning)
    assert caught[0].filename == __file__


def test_classifier_convergence_warning_names_this_file():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(30, 1))
    y = (X[:, 0] > 0).astype(int)
    clf = GPClassifier(ConstantKernel(1e4, "fixed") * RBF(1.0, "fixed"), max_iter=1,
                       tol=1e-12, optimizer=None)  # fmt: skip
    caught = _caught(lambda: clf.fit(X, y))
    assert caught and all(w.filename == __file__ for w in caught), [
        (w.filename, w.lineno) for w in caught
    ]


def test_process_classifier_warning_names_this_file():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 2))
    y = (X[:, 0] > 0).astype(int)
    clf = StudentTProcessClassifier(optimizer=None, max_iter=1, tol=1e-14)
    caught = _caught(lambda: clf.fit(X, y))
    assert caught and all(w.filename == __file__ for w in caught)


def test_regressor_convergence_warning_names_this_file():
    from robustep import GPRegressor

    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, size=(25, 1))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(25)
    reg = GPRegressor(method="ep", optimizer=None, max_iter=1)
    caught = _caught(lambda: reg.fit(X, y))
    assert caught and all(w.filename == __file__ for w in caught)
