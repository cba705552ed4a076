"""BayesPointMachine: scikit-learn contract, label handling, Gaussian limit, ADF vs EP."""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.estimator_checks import parametrize_with_checks

from _reference_gaussian_ep import gaussian_bpm_ep
from robustep.estimators.bpm import BayesPointMachine


@parametrize_with_checks([BayesPointMachine()])
def test_sklearn_compatible_defaults(estimator, check):
    """The DEFAULT estimator passes every scikit-learn check."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(estimator)


def _data(n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = np.where(X[:, 0] - 0.5 * X[:, 1] > 0.2, "yes", "no")
    return X, y


def test_labels_attributes_and_probabilities():
    X, y = _data()
    clf = BayesPointMachine(df=5.0, label_noise=0.05).fit(X, y)
    assert list(clf.classes_) == ["no", "yes"]
    assert clf.coef_.shape == (1, 2) and clf.intercept_.shape == (1,)
    assert clf.converged_ and clf.n_iter_ >= 1 and np.isfinite(clf.log_marginal_likelihood_value_)
    p = clf.predict_proba(X)
    assert (
        p.shape == (40, 2)
        and np.allclose(p.sum(1), 1)
        and np.all((p >= 0.05 - 1e-12) & (p <= 0.95 + 1e-12))
    )
    assert (clf.predict(X) == y).mean() > 0.9
    assert np.array_equal(clf.predict(X), clf.classes_[(p[:, 1] > 0.5).astype(int)])


def test_multiclass_error_says_what_to_do():
    X, _ = _data(30)
    with pytest.raises(
        ValueError, match="Only binary classification is supported.*pass exactly two"
    ):
        BayesPointMachine().fit(X, np.arange(30) % 3)


def test_df_inf_is_gaussian_bpm():
    X, y = _data()
    ypm = np.where(y == "yes", 1.0, -1.0)
    Z = np.hstack([X, np.ones((40, 1))])
    m_ref, _, lz_ref, _ = gaussian_bpm_ep(Z, ypm, 0.05, np.eye(3))
    for df in [np.inf, 1e7]:
        clf = BayesPointMachine(df=df, label_noise=0.05, tol=1e-9).fit(X, y)
        np.testing.assert_allclose(np.r_[clf.coef_[0], clf.intercept_], m_ref, atol=1e-5)
        assert np.isclose(clf.log_marginal_likelihood_value_, lz_ref, atol=1e-4)


def test_non_convergence_warns_and_stays_finite():
    X, y = _data()
    with pytest.warns(ConvergenceWarning):
        clf = BayesPointMachine(max_iter=1, tol=0.0).fit(X, y)
    assert clf.converged_ is False
    assert np.all(np.isfinite(clf.predict_proba(X)))


def test_adf_single_pass():
    X, y = _data()
    clf = BayesPointMachine(method="adf", label_noise=0.05).fit(X, y)
    assert clf.n_iter_ == 1 and clf.converged_
    assert (clf.predict(X) == y).mean() > 0.85
    assert np.isfinite(clf.log_marginal_likelihood_value_)


def test_no_intercept():
    X, y = _data()
    clf = BayesPointMachine(fit_intercept=False, label_noise=0.05).fit(X, y)
    assert clf.intercept_[0] == 0.0 and clf.posterior_mean_.shape == (2,)


def _blobs_binary():
    """The two-class problem of sklearn's check_classifiers_train (3% not separable)."""
    from sklearn.datasets import make_blobs
    from sklearn.preprocessing import StandardScaler
    from sklearn.utils import shuffle

    X, y = make_blobs(n_samples=300, random_state=0)
    X, y = shuffle(X, y, random_state=7)
    X = StandardScaler().fit_transform(X)
    return X[y != 2], y[y != 2]


def test_defaults_converge_on_non_separable_data():
    X, y = _blobs_binary()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        clf = BayesPointMachine().fit(X, y)
    assert clf.converged_ and np.all(np.isfinite(clf.coef_))
    assert (clf.predict(X) == y).mean() > 0.9
    assert np.linalg.norm(clf.coef_) > 0.1  # no scale collapse


def test_noiseless_step_on_non_separable_data_warns():
    """label_noise=0 (the old default) has zero evidence here: EP collapses and says so."""
    X, y = _blobs_binary()
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        clf = BayesPointMachine(label_noise=0.0, damping=0.0, max_iter=30).fit(X, y)
    assert not clf.converged_


@pytest.mark.parametrize("df", [1.5, 10.0, np.inf])
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_scalar_escort_marginal_matches_vectorised(df, eps):
    from robustep.families.t_exponential import t_of_df
    from robustep.tep.ep import _escort_marginal_scalar
    from robustep.tep.likelihood import escort_tilted_marginal, step_levels

    rng = np.random.default_rng(1)
    a, b = step_levels(eps, t_of_df(df, 3))
    for _ in range(50):
        m, s2, y = rng.normal() * 3, 10 ** rng.uniform(-2, 2), rng.choice([-1.0, 1.0])
        got = _escort_marginal_scalar(m, s2, df, y, a, b)
        want = escort_tilted_marginal(m, s2, df, 3, y, eps)
        np.testing.assert_allclose(got, [float(w) for w in want], rtol=1e-9, atol=1e-12)
