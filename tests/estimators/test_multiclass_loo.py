"""Leave-one-out diagnostics of the multi-class GPClassifier.

The cavity of each c-dimensional site gives log p(y_i | y_-i) without a refit
(robustep.diagnostics.multiclass_loo); checked against brute-force refits on the other
n - 1 points with the same (fixed) hyperparameters, for the dense and the sparse
multinomial model, the label-noise multinomial probit and one-vs-rest.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

from robustep import diagnostics
from robustep.estimators import GPClassifier

KERNEL = ConstantKernel(2.0, "fixed") * RBF(1.0, "fixed")


def three_blobs(n_per_class=6, seed=0):
    """Three overlapping 2-D blobs (labels 'a', 'b', 'c'), so that LOO is informative."""
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 0.0], [1.5, 0.3], [0.6, 1.4]])
    X = np.vstack([c + 0.7 * rng.standard_normal((n_per_class, 2)) for c in centres])
    y = np.repeat(np.array(["a", "b", "c"]), n_per_class)
    return X, y


def brute_force_loo(estimator, X, y):
    """log p(y_i | y_-i) by refitting without point i (same fixed hyperparameters)."""
    out = np.empty(len(y))
    for i in range(len(y)):
        keep = np.arange(len(y)) != i
        est = clone(estimator).fit(X[keep], y[keep])
        p = est.predict_proba(X[i : i + 1])[0]
        out[i] = np.log(p[list(est.classes_).index(y[i])])
    return out


CASES = {
    "multinomial": dict(multi_class="multinomial"),
    "label_noise": dict(multi_class="multinomial", label_noise=0.1),
    "one_vs_rest": dict(multi_class="one_vs_rest"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_loo_matches_brute_force_refits(case):
    X, y = three_blobs()
    est = GPClassifier(kernel=KERNEL, optimizer=None, **CASES[case])
    est.fit(X, y)
    assert est.loo_log_predictive_.shape == (len(y),)
    assert np.all(np.isfinite(est.loo_log_predictive_))
    assert not np.any(est.loo_approximate_)
    brute = brute_force_loo(est, X, y)
    diff = np.abs(est.loo_log_predictive_ - brute)
    print(f"{case}: mean |d log p| {np.mean(diff):.4f}, max {np.max(diff):.4f}")  # pytest -s
    assert np.mean(diff) <= 0.02, (case, np.mean(diff), np.max(diff))
    # the LOO values are not the in-sample ones: they are lower on average
    in_sample = np.log(est.predict_proba(X)[np.arange(len(y)), np.searchsorted(est.classes_, y)])
    assert np.mean(est.loo_log_predictive_) < np.mean(in_sample)
    np.testing.assert_allclose(est.outlier_scores_, -est.loo_log_predictive_)
    assert est.loo_score() == pytest.approx(np.mean(est.loo_log_predictive_))


def test_sparse_multinomial_loo_matches_brute_force_refits():
    X, y = three_blobs()
    Z = X[::3].copy()  # 6 fixed inducing inputs
    est = GPClassifier(kernel=KERNEL, optimizer=None, inducing_points=Z, multi_class="multinomial")
    est.fit(X, y)
    brute = brute_force_loo(est, X, y)
    diff = np.abs(est.loo_log_predictive_ - brute)
    print(f"sparse: mean |d log p| {np.mean(diff):.4f}, max {np.max(diff):.4f}")  # pytest -s
    assert np.mean(diff) <= 0.02, (np.mean(diff), np.max(diff))


def test_multiclass_loo_flags_a_flipped_label():
    """A point carrying another class's label deep inside a blob is the least likely LOO."""
    X, y = three_blobs(n_per_class=8, seed=1)
    centre_a = np.argmin(np.linalg.norm(X[y == "a"] - [0.0, 0.0], axis=1))
    flipped = np.flatnonzero(y == "a")[centre_a]
    y = y.copy()
    y[flipped] = "b"
    est = GPClassifier(kernel=KERNEL, optimizer=None, multi_class="multinomial").fit(X, y)
    assert np.argmax(est.outlier_scores_) == flipped


def test_multiclass_loo_cavity_is_the_posterior_without_the_site():
    """With a site of zero precision and shift the cavity is the posterior marginal."""
    from robustep.likelihoods.multinomial_probit import MultinomialProbit

    rng = np.random.default_rng(0)
    n, c = 4, 3
    mean = rng.standard_normal((n, c))
    A = rng.standard_normal((n, c, c))
    cov = A @ np.swapaxes(A, 1, 2) + 0.5 * np.eye(c)
    loo = diagnostics.multiclass_loo(
        MultinomialProbit(c), np.array([0, 1, 2, 0]), mean, cov, np.zeros((n, c, c)),
        np.zeros((n, c)),
    )  # fmt: skip
    np.testing.assert_allclose(loo.cavity_mean, mean, atol=1e-12)
    np.testing.assert_allclose(loo.cavity_var, cov, atol=1e-12)
    expected = MultinomialProbit(c).predictive_probabilities(mean, cov)
    np.testing.assert_allclose(
        loo.log_predictive, np.log(expected[np.arange(n), [0, 1, 2, 0]]), rtol=1e-12
    )


def test_plot_loo_multiclass():
    X, y = three_blobs()
    est = GPClassifier(kernel=KERNEL, optimizer=None).fit(X, y)
    ax = diagnostics.plot_loo(est)
    assert ax.get_ylabel() == "LOO probability of the observed label"
    # chance level for three classes
    assert any(np.allclose(line.get_ydata(), 1.0 / 3.0) for line in ax.get_lines())


def test_refit_binary_after_multiclass_keeps_loo_consistent():
    X, y = three_blobs()
    est = GPClassifier(kernel=KERNEL, optimizer=None).fit(X, y)
    assert est.loo_log_predictive_.shape == (len(y),)
    keep = y != "c"
    est.fit(X[keep], y[keep])
    assert est.loo_log_predictive_.shape == (int(keep.sum()),)
