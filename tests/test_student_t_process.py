"""StudentTProcessClassifier: scikit-learn contract, GP limit, evidence optimisation."""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
from sklearn.utils.estimator_checks import parametrize_with_checks
from threadpoolctl import threadpool_limits

from _reference_gaussian_ep import gaussian_gpc_ep
from robustep.estimators.student_t_process import StudentTProcessClassifier, default_kernel


@pytest.fixture(autouse=True)
def _single_threaded_blas():
    """Small matrices: one BLAS thread avoids oversubscription on shared machines."""
    with threadpool_limits(limits=1):
        yield


@parametrize_with_checks([StudentTProcessClassifier(optimizer=None, max_iter=10, label_noise=0.05)])
def test_sklearn_compatible(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(estimator)


def _data(n=30, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = np.where(X[:, 0] + 0.5 * X[:, 1] + 0.3 * rng.normal(size=n) > 0, 1, 0)
    return X, y


KERNEL = ConstantKernel(1.5) * RBF([1.0, 2.0]) + ConstantKernel(0.3) + WhiteKernel(0.05)


def test_large_df_agrees_with_gaussian_ep_gpc():
    X, y = _data()
    ypm = np.where(y == 1, 1.0, -1.0)
    K = KERNEL(X)
    m_ref, _, lz_ref = gaussian_gpc_ep(K, ypm, 0.05)
    for df in [np.inf, 1e8]:
        clf = StudentTProcessClassifier(
            KERNEL, df=df, label_noise=0.05, optimizer=None, tol=1e-10, max_iter=5000
        ).fit(X, y)
        assert clf.converged_
        np.testing.assert_allclose(clf._post.mu, m_ref, atol=1e-5)
        assert np.isclose(clf.log_marginal_likelihood_value_, lz_ref, atol=1e-4)
    # predictions: GP-EP predictive p = eps + (1 - 2 eps) Phi(m / s)
    p = clf.predict_proba(X[:5])[:, 1]
    assert np.all((p > 0.05) & (p < 0.95))


def test_default_kernel_is_eq44():
    k = default_kernel(3)
    assert k.n_dims == 1 + 3 + 1 + 1  # theta0, theta1 (ARD, 3), theta2, theta3
    X = np.random.default_rng(0).normal(size=(4, 3))
    K = k(X)
    assert np.allclose(K, K.T) and np.all(np.linalg.eigvalsh(K) > 0)
    assert np.allclose(k(X, X[:2] + 0.1) - k(X[:2] + 0.1, X).T, 0)


def test_fit_optimises_evidence_and_predicts():
    X, y = _data(n=25)
    base = StudentTProcessClassifier(df=10.0, label_noise=0.05, optimizer=None).fit(X, y)
    clf = StudentTProcessClassifier(df=10.0, label_noise=0.05).fit(X, y)
    assert clf.log_marginal_likelihood_value_ >= base.log_marginal_likelihood_value_ - 1e-6
    assert clf.kernel_ is not clf.kernel and clf.kernel is None
    assert (clf.predict(X) == y).mean() > 0.85
    P = clf.predict_proba(X)
    assert P.shape == (25, 2) and np.all(np.isfinite(P))


def test_labels_and_errors():
    X, y01 = _data(n=20)
    y = np.where(y01 == 1, "b", "a")
    clf = StudentTProcessClassifier(optimizer=None, label_noise=0.1).fit(X, y)
    assert set(clf.predict(X)) <= {"a", "b"} and list(clf.classes_) == ["a", "b"]
    with pytest.raises(ValueError, match="Only binary classification is supported"):
        StudentTProcessClassifier(optimizer=None).fit(X, np.arange(20) % 3)


def test_non_convergence_warns():
    X, y = _data()
    with pytest.warns(ConvergenceWarning):
        clf = StudentTProcessClassifier(KERNEL, optimizer=None, max_iter=1, tol=0.0).fit(X, y)
    assert not clf.converged_ and np.all(np.isfinite(clf.predict_proba(X)))


def test_large_df_agrees_with_library_gpclassifier():
    """Against robustep's GPClassifier(likelihood="step") (written independently)."""
    gpc_mod = pytest.importorskip("robustep.estimators.gp_classifier")
    X, y = _data()
    gpc = gpc_mod.GPClassifier(
        kernel=KERNEL, likelihood="step", label_noise=0.05, optimizer=None
    ).fit(X, y)
    stc = StudentTProcessClassifier(
        KERNEL, df=1e8, label_noise=0.05, optimizer=None, tol=1e-10, max_iter=5000
    ).fit(X, y)
    assert np.isclose(
        stc.log_marginal_likelihood_value_, gpc.log_marginal_likelihood_value_, atol=1e-3
    )
    np.testing.assert_allclose(
        stc.predict_proba(X[:10])[:, 1], gpc.predict_proba(X[:10])[:, 1], atol=1e-3
    )
