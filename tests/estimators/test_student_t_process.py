"""StudentTProcessClassifier: scikit-learn contract, GP limit, evidence optimisation."""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
from sklearn.utils.estimator_checks import parametrize_with_checks

from _reference_gaussian_ep import gaussian_gpc_ep
from robustep.estimators.student_t_process import StudentTProcessClassifier, default_kernel
from robustep.tep.process import (
    _site_update,
    _site_update_partials,
    process_log_marginal_likelihood,
    process_log_marginal_likelihood_gradient,
    process_tep,
)


@parametrize_with_checks([StudentTProcessClassifier(optimizer=None, max_iter=10, label_noise=0.05)])
def test_sklearn_compatible(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(estimator)


@pytest.mark.slow
@parametrize_with_checks([StudentTProcessClassifier()])
def test_sklearn_compatible_defaults(estimator, check):
    """The defaults (evidence optimisation, ARD off, damping) pass every check (~50 s)."""
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


# ------------------------------------------------------------ hyperparameter gradients
def _gradient_problem(n=25, seed=1):
    X, y01 = _data(n=n, seed=seed)
    y = np.where(y01 == 1, 1.0, -1.0)
    y[:3] *= -1  # label noise: some sites with negative precisions
    return X, y


def _converged_sites(K, y, df, warm=None):
    kw = {} if warm is None else {"tau": warm[0], "nu": warm[1]}
    with np.errstate(all="ignore"):
        tau, nu, post, info = process_tep(K, y, df=df, eps=0.05, tol=1e-12, max_iter=20000, **kw)
    assert info.converged
    return tau, nu, post


def _fd(fun, theta, h=1e-4):
    out = np.zeros(theta.size)
    for i in range(theta.size):
        e = np.zeros(theta.size)
        e[i] = h
        out[i] = (fun(theta + e) - fun(theta - e)) / (2 * h)
    return out


@pytest.mark.parametrize("df", [3.0, 10.0, np.inf])
def test_explicit_gradient_matches_fixed_site_finite_differences(df):
    """Derivation §8, eq. (8.7): sites held fixed, ARD kernel of eq. (44)."""
    X, y = _gradient_problem()
    K, K_gradient = KERNEL(X, eval_gradient=True)
    tau, nu, post = _converged_sites(K, y, df)
    lml, grad = process_log_marginal_likelihood_gradient(K, K_gradient, y, tau, nu, df, 0.05)
    assert np.isclose(lml, process_log_marginal_likelihood(K, y, tau, nu, df, 0.05), rtol=1e-12)

    def fixed_sites(theta):
        return process_log_marginal_likelihood(
            KERNEL.clone_with_theta(theta)(X), y, tau, nu, df, 0.05
        )

    fd = _fd(fixed_sites, KERNEL.theta, h=1e-5)
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-6 * np.abs(fd).max())


@pytest.mark.parametrize("eps", [0.0, 0.05])
@pytest.mark.parametrize("df", [3.0, np.inf])
def test_site_update_partials_closed_form(df, eps):
    """eq. (8.11) and the forward-mode chain through the site update vs. differences."""
    X, y = _gradient_problem()
    if eps == 0.0:
        y = np.where(X[:, 0] + 0.5 * X[:, 1] > 0, 1.0, -1.0)  # separable
    n = y.size
    K = KERNEL(X)
    with np.errstate(all="ignore"):
        tau, nu, post, _ = process_tep(K, y, df=df, eps=eps, tol=1e-10, max_iter=20000)
    x0 = {"d": np.diag(post.sigma_g), "mu": post.mu, "L": np.full(n, post.logdet_b)}
    x0.update(tau=tau, nu=nu)
    a_tau, a_nu, good = _site_update_partials(*x0.values(), y, df, eps, n)
    assert good.all()
    for key in x0:
        h = 1e-6 * np.maximum(np.abs(x0[key]), 1e-2)
        up, dn = dict(x0), dict(x0)
        up[key] = x0[key] + h
        dn[key] = x0[key] - h
        tp, np_, _ = _site_update(*up.values(), y, df, eps, n)
        tm, nm, _ = _site_update(*dn.values(), y, df, eps, n)
        for got, fd in [(a_tau[key], (tp - tm) / (2 * h)), (a_nu[key], (np_ - nm) / (2 * h))]:
            np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-7 * np.abs(fd).max())


def _converged_evidence(X, y, df, warm):
    def f(theta):
        K = KERNEL.clone_with_theta(theta)(X)
        tau, nu, post = _converged_sites(K, y, df, warm)
        return process_log_marginal_likelihood(K, y, tau, nu, df, 0.05, post=post)

    return f


@pytest.mark.parametrize("df", [3.0, 10.0, np.inf])
def test_implicit_gradient_is_total_derivative(df):
    """eq. (8.9) against central differences of the *converged* evidence (EP re-run).

    For df = inf the explicit gradient already is the total one (Gaussian EP's fixed
    point is stationary for its evidence); for finite df it is far from it.
    """
    X, y = _gradient_problem()
    K, K_gradient = KERNEL(X, eval_gradient=True)
    tau, nu, post = _converged_sites(K, y, df)
    fd = _fd(_converged_evidence(X, y, df, (tau, nu)), KERNEL.theta)
    _, g_exp = process_log_marginal_likelihood_gradient(K, K_gradient, y, tau, nu, df, 0.05)
    _, g_tot = process_log_marginal_likelihood_gradient(
        K, K_gradient, y, tau, nu, df, 0.05, implicit=True
    )
    scale = np.abs(fd).max()
    np.testing.assert_allclose(g_tot, fd, rtol=1e-5, atol=1e-6 * scale)
    gap = np.linalg.norm(g_exp - fd) / np.linalg.norm(fd)
    if np.isinf(df):
        assert gap < 1e-6
    else:
        assert gap > 0.1  # the reason the explicit gradient is not the default


def test_gradient_option_validation_and_modes():
    X, y = _gradient_problem(n=20)
    with pytest.raises(ValueError, match="gradient"):
        StudentTProcessClassifier(gradient="analytic").fit(X, y > 0)
    assert StudentTProcessClassifier(df=np.inf)._gradient_mode() == "explicit"
    assert StudentTProcessClassifier(df=10.0)._gradient_mode() == "implicit"
    # the estimator's objective: the analytic total gradient equals the finite-difference
    # one (tight EP tolerance: with tol 1e-6 the differences themselves are only ~1e-2 accurate)
    grads = {}
    for mode in ["implicit", "finite-difference", "explicit"]:
        clf = StudentTProcessClassifier(
            KERNEL, df=10.0, label_noise=0.05, gradient=mode, tol=1e-10, max_iter=20000
        )
        grads[mode] = clf._evaluate(KERNEL.theta, KERNEL, X, y, None).gradient
    ref = grads["finite-difference"]
    np.testing.assert_allclose(grads["implicit"], ref, rtol=1e-5, atol=1e-6 * np.abs(ref).max())
    assert np.linalg.norm(grads["explicit"] - ref) > 0.1 * np.linalg.norm(ref)


def test_implicit_and_finite_difference_fits_reach_the_same_optimum():
    X, y01 = _data(n=30, seed=4)
    fits = {
        mode: StudentTProcessClassifier(KERNEL, df=10.0, label_noise=0.05, gradient=mode).fit(
            X, y01
        )
        for mode in ["implicit", "finite-difference"]
    }
    a, b = (f.log_marginal_likelihood_value_ for f in fits.values())
    assert abs(a - b) < 1e-2 * max(1.0, abs(b))
