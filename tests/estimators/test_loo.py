"""Leave-one-out diagnostics from EP's cavities (robustep.diagnostics).

Reference: brute-force leave-one-out, i.e. dense EP refitted on the n - 1 other points
with the same (fixed) hyperparameters and its predictive density at the left-out point.
"""

from __future__ import annotations

import warnings

import matplotlib
import numpy as np
import pytest
from scipy import special, stats
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

from robustep import diagnostics
from robustep.ep import expectation_propagation
from robustep.estimators import GPClassifier, StudentTGPRegressor, StudentTProcessClassifier
from robustep.likelihoods import NoisyStep, Probit, StudentT

matplotlib.use("Agg")

TOL = 1e-9


def _kernel():
    return ConstantKernel(2.0, "fixed") * RBF(0.8, "fixed")


def _classification(n=25, seed=0):
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(-3, 3, (n, 1)), axis=0)
    y = np.where(np.sin(1.5 * X[:, 0]) > 0, 1.0, -1.0)
    flip = rng.choice(n, 3, replace=False)
    y[flip] = -y[flip]
    return X, y


def _regression(n=25, seed=0):
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(-3, 3, (n, 1)), axis=0)
    y = np.sin(X[:, 0]) + 0.2 * rng.standard_normal(n)
    y[[3, 11, 19]] += np.array([3.0, -4.0, 5.0])
    return X, y


def _brute_force(K, y, likelihood, power=1.0, tol=TOL):
    """log p(y_i | y_-i) (n,) by n dense EP refits on n - 1 points."""
    n = y.size
    out = np.empty(n)
    for i in range(n):
        keep = np.arange(n) != i
        res = expectation_propagation(
            K[np.ix_(keep, keep)], y[keep], likelihood, power=power, tol=tol, max_iter=5000
        )
        assert res.converged
        m, v = res.predict(K[i, keep][None, :], np.array([K[i, i]]))
        out[i] = likelihood.tilted_moments(y[i : i + 1], m, v, 1.0)[0][0]
    return out


def _fast(K, y, likelihood, power=1.0):
    res = expectation_propagation(K, y, likelihood, power=power, tol=TOL, max_iter=5000)
    assert res.converged
    return diagnostics.loo_from_ep_result(res, likelihood, y), res


@pytest.mark.parametrize("power", [1.0, 0.7])
def test_probit_loo_matches_brute_force(power):
    X, y = _classification()
    K = _kernel()(X)
    fast, _ = _fast(K, y, Probit(), power)
    brute = _brute_force(K, y, Probit(), power)
    err = np.mean(np.abs(fast.log_predictive - brute))
    print(f"probit power={power}: mean |fast - brute force| = {err:.2e}")
    assert err <= 0.02, err
    assert not fast.fallback.any()


def test_student_t_loo_matches_brute_force():
    X, y = _regression()
    K = _kernel()(X)
    lik = StudentT(df=4.0, scale=0.3)
    fast, res = _fast(K, y, lik)
    brute = _brute_force(K, y, lik)
    err = np.mean(np.abs(fast.log_predictive - brute))
    print(f"Student-t: mean |fast - brute force| = {err:.2e}")
    assert err <= 0.02, err
    # the outliers (3, 11, 19) are the three least predictable points
    assert set(np.argsort(fast.log_predictive)[:3]) == {3, 11, 19}


def test_fractional_loo_uses_the_full_site():
    """With power eta < 1 the LOO cavity is q / t~ (L2), not EP's eta-cavity q / t~^eta."""
    X, y = _regression()
    K = _kernel()(X)
    lik = StudentT(df=4.0, scale=0.3)
    fast, res = _fast(K, y, lik, power=0.5)
    brute = _brute_force(K, y, lik, power=0.5)
    err_full = np.mean(np.abs(fast.log_predictive - brute))
    eta_lp = lik.tilted_moments(y, res.cavity_mean, res.cavity_var, 1.0)[0]
    err_eta = np.mean(np.abs(eta_lp - brute))
    print(f"Student-t power 0.5: full-site LOO {err_full:.2e}, eta-cavity {err_eta:.2e}")
    assert err_full <= 0.02, err_full
    assert err_eta > 5 * err_full  # the eta-cavity keeps half of the left-out point


def test_probit_brute_force_ep_against_exact():
    """Brute-force EP LOO vs the exact p(y_i | y_-i) = Z(y) / Z(y_-i) (orthant probabilities
    of N(0, K + I), Genz's algorithm) on n = 8: reports EP's own error."""
    n = 7
    X, y = _classification(n=n, seed=3)
    K = _kernel()(X)
    C = (K + np.eye(n)) * np.outer(y, y)  # y_i (f_i + e_i) > 0 for all i

    def log_orthant(idx):
        cov = C[np.ix_(idx, idx)]
        mvn = stats.multivariate_normal(
            np.zeros(idx.size), cov, seed=0, maxpts=50000 * idx.size, abseps=1e-12, releps=1e-8
        )
        return np.log(mvn.cdf(np.zeros(idx.size)))

    full = log_orthant(np.arange(n))
    exact = np.array([full - log_orthant(np.delete(np.arange(n), i)) for i in range(n)])
    brute = _brute_force(K, y, Probit())
    fast, _ = _fast(K, y, Probit())
    err = np.mean(np.abs(brute - exact))
    print(
        f"probit n={n}: mean |brute-force EP - exact| = {err:.2e}, "
        f"|cavity LOO - exact| = {np.mean(np.abs(fast.log_predictive - exact)):.2e}"
    )
    assert err < 0.02, err


def test_gp_classifier_attributes():
    X, y = _classification()
    K = _kernel()(X)
    fast, _ = _fast(K, y, Probit())
    clf = GPClassifier(_kernel(), method="ep", optimizer=None, tol=TOL).fit(X, y)
    np.testing.assert_allclose(clf.loo_log_predictive_, fast.log_predictive, atol=1e-6)
    np.testing.assert_allclose(clf.outlier_scores_, -clf.loo_log_predictive_)
    assert clf.loo_score() == pytest.approx(np.mean(fast.log_predictive))
    # the default (auto) and the other EP methods provide it
    for method in ("auto", "damped", "power", "rep"):
        est = GPClassifier(_kernel(), method=method, optimizer=None).fit(X, y)
        assert est.loo_log_predictive_.shape == (y.size,)
        assert np.all(np.isfinite(est.loo_log_predictive_))


def test_unsupported_methods_have_no_loo():
    X, y = _classification()
    clf = GPClassifier(_kernel(), method="ep", optimizer=None).fit(X, y)
    assert hasattr(clf, "loo_log_predictive_")
    clf.set_params(method="laplace").fit(X, y)  # a refit removes the old attributes
    assert not hasattr(clf, "loo_log_predictive_")
    assert not hasattr(clf, "outlier_scores_")
    with pytest.raises(AttributeError, match="method='laplace'.*EP methods"):
        clf.loo_score()
    Xr, yr = _regression()
    for method in ("laplace", "vb"):
        reg = StudentTGPRegressor(_kernel(), method=method, optimizer=None).fit(Xr, yr)
        assert not hasattr(reg, "loo_log_predictive_")
        assert not hasattr(reg, "loo_mean_")
        with pytest.raises(AttributeError, match="leave-one-out"):
            reg.loo_score()


def test_regressor_attributes_and_units():
    X, y = _regression()
    lik = StudentT(df=4.0, scale=0.3)
    fast, _ = _fast(_kernel()(X), y, lik)
    reg = StudentTGPRegressor(
        _kernel(), df=4.0, scale=0.3, method="ep", optimizer=None, normalize_y=False
    ).fit(X, y)
    np.testing.assert_allclose(reg.loo_log_predictive_, fast.log_predictive, atol=1e-3)
    np.testing.assert_allclose(reg.loo_mean_, fast.cavity_mean, atol=1e-3)
    np.testing.assert_allclose(
        reg.loo_std_, np.sqrt(fast.cavity_var + 0.3**2 * 4.0 / 2.0), rtol=1e-3
    )
    lo, hi = reg.loo_interval_
    assert np.all(lo < reg.loo_mean_) and np.all(reg.loo_mean_ < hi)
    assert set(np.argsort(-np.abs(reg.outlier_scores_))[:3]) == {3, 11, 19}
    # target units: rescaling y by c shifts log densities by -log c (normalize_y=True)
    a = StudentTGPRegressor(_kernel(), df=4.0, scale=0.3, method="ep", optimizer=None).fit(X, y)
    b = StudentTGPRegressor(_kernel(), df=4.0, scale=0.3, method="ep", optimizer=None).fit(
        X, 10.0 * y + 3.0
    )
    np.testing.assert_allclose(b.loo_log_predictive_, a.loo_log_predictive_ - np.log(10.0),
                               atol=1e-6)  # fmt: skip
    np.testing.assert_allclose(b.loo_mean_, 10.0 * a.loo_mean_ + 3.0, atol=1e-6)
    np.testing.assert_allclose(b.outlier_scores_, a.outlier_scores_, atol=1e-6)


def test_regressor_gaussian_method_is_exact_loo():
    """method="gaussian": the cavity LOO is the exact Gaussian-process LOO
    (Rasmussen & Williams eq. 5.12: mu_i = y_i - [C^-1 y]_i / [C^-1]_ii, s_i^2 = 1/[C^-1]_ii)."""
    X, y = _regression()
    s = 0.4
    reg = StudentTGPRegressor(_kernel(), scale=s, method="gaussian", optimizer=None,
                              normalize_y=False).fit(X, y)  # fmt: skip
    Cinv = np.linalg.inv(_kernel()(X) + s**2 * np.eye(y.size))
    var = 1.0 / np.diag(Cinv)
    mu = y - (Cinv @ y) * var
    np.testing.assert_allclose(reg.loo_mean_, mu, atol=1e-8)
    np.testing.assert_allclose(reg.loo_std_, np.sqrt(var), atol=1e-8)
    np.testing.assert_allclose(reg.loo_log_predictive_, stats.norm.logpdf(y, mu, np.sqrt(var)),
                               atol=1e-8)  # fmt: skip
    np.testing.assert_allclose(reg.outlier_scores_, (y - mu) / np.sqrt(var), atol=1e-6)


def test_heavy_tails_std_is_infinite_but_scores_finite():
    X, y = _regression()
    reg = StudentTGPRegressor(_kernel(), df=1.5, optimizer=None).fit(X, y)
    assert np.all(np.isinf(reg.loo_std_))
    assert np.all(np.isfinite(reg.outlier_scores_))
    assert np.all(np.isfinite(reg.loo_log_predictive_))


def test_ep3_grid_mixture_loo():
    """(L3): p(y_i | y_-i) = 1 / sum_j w_j / p_j(y_i | y_-i)."""
    lp = np.log(np.array([[0.2, 0.5], [0.4, 0.1]]))
    w = np.array([0.25, 0.75])
    out, wl = diagnostics.mixture_loo(lp, w)
    expect = 1.0 / (w[:, None] / np.exp(lp)).sum(axis=0)
    np.testing.assert_allclose(np.exp(out), expect)
    np.testing.assert_allclose(wl.sum(axis=0), 1.0)
    X, y = _regression(n=20)
    reg = StudentTGPRegressor(df_grid=[2.0, 8.0], optimizer=None).fit(X, y)
    assert np.all(np.isfinite(reg.loo_log_predictive_))


@pytest.mark.parametrize("df", [np.inf, 6.0])
def test_student_t_process_loo_is_the_fixed_site_refit(df):
    """The t-cavity LOO equals the predictive of the model on the n - 1 other points with
    their sites held fixed (process_posterior + process_predict_latent): the identity
    behind process_classifier_loo (exact, to rounding)."""
    from robustep.tep.process import process_posterior, process_predict_latent

    X, y = _classification(n=20, seed=1)
    kernel = ConstantKernel(2.0, "fixed") * RBF(0.8, "fixed") + WhiteKernel(1e-2, "fixed")
    eps = 0.05
    clf = StudentTProcessClassifier(kernel, df=df, label_noise=eps, optimizer=None).fit(X, y)
    assert clf.loo_score() == pytest.approx(np.mean(clf.loo_log_predictive_))
    K = kernel(X)
    tau, nu = clf.site_tau_, clf.site_nu_
    expect = np.empty(y.size)
    for i in range(y.size):
        keep = np.arange(y.size) != i
        post = process_posterior(K[np.ix_(keep, keep)], tau[keep], nu[keep])
        m, s2 = process_predict_latent(None, tau[keep], nu[keep], post, K[keep, i][:, None],
                                       np.array([K[i, i]]), df)  # fmt: skip
        z = y[i] * m[0] / np.sqrt(s2[0])
        cdf = special.ndtr(z) if np.isinf(df) else stats.t.cdf(z, df)
        expect[i] = np.log(eps + (1 - 2 * eps) * cdf)
    np.testing.assert_allclose(clf.loo_log_predictive_, expect, atol=1e-8)


def _convolved_t(fun, y, m, v, df, s):
    """int fun((y - f) / s, df) N(f | m, v) df by adaptive quadrature (the reference)."""
    from scipy import integrate

    sd = np.sqrt(v)

    def integrand(f):
        return fun((y - f) / s, df) * stats.norm.pdf(f, m, sd)

    return integrate.quad(integrand, m - 12 * sd, m + 12 * sd, epsabs=0, epsrel=1e-10)[0]


def test_student_t_loo_predictive_cdf_against_quadrature():
    for y, m, v, df, s in [(8.0, 0.1, 0.03, 4.0, 0.18), (3.0, 0.0, 1.0, 1.5, 0.5),
                           (-2.0, 0.5, 0.2, 30.0, 0.3)]:  # fmt: skip
        G = _convolved_t(stats.t.sf, y, m, v, df, s)
        out = diagnostics.student_t_loo_predictive([y], [[m]], [[v]], [df], [s])
        assert out["z"][0] == pytest.approx(-special.ndtri(G), abs=1e-6)
        F_lo = _convolved_t(stats.t.cdf, out["lower"][0], m, v, df, s)
        assert F_lo == pytest.approx(0.025, abs=1e-6)


def test_plot_loo_runs():
    import matplotlib.pyplot as plt

    X, y = _regression()
    reg = StudentTGPRegressor(_kernel(), df=4.0, scale=0.3, optimizer=None).fit(X, y)
    ax = diagnostics.plot_loo(reg)
    assert ax.get_xlabel().startswith("LOO")
    Xc, yc = _classification()
    clf = GPClassifier(_kernel(), optimizer=None).fit(Xc, yc)
    fig, ax2 = plt.subplots()
    assert diagnostics.plot_loo(clf, ax=ax2) is ax2
    lap = GPClassifier(_kernel(), method="laplace", optimizer=None).fit(Xc, yc)
    with pytest.raises(AttributeError, match="no LOO"):
        diagnostics.plot_loo(lap)
    plt.close("all")


def test_step_likelihood_loo_against_brute_force():
    """The noisy step is much less smooth than the probit: removing one label moves the
    other sites more, and the cavity LOO is less accurate (measured: mean |error| 0.06 on
    this problem, docs/reliability.md); checked loosely."""
    X, y = _classification(seed=2)
    K = _kernel()(X)
    lik = NoisyStep(0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fast, _ = _fast(K, y, lik)
    # the step's tilted moments (differences of normal CDFs) stall some refits at a site
    # residual of ~6e-9 (scipy 1.17 / numpy 2.4), so the refits stop at 1e-7, which moves
    # log p(y_i | y_-i) by far less than the 0.1 checked here
    brute = _brute_force(K, y, lik, tol=1e-7)
    err = np.mean(np.abs(fast.log_predictive - brute))
    print(f"noisy step (eps=0.1) LOO: mean |fast - brute force| = {err:.4f}")
    assert err <= 0.1, err


def test_approximate_loo_values_are_marked_and_loo_score_warns():
    """Improper LOO cavities do not warn at fit; they are marked and loo_score warns."""
    import warnings as _warnings

    from sklearn.datasets import make_moons

    from robustep import GPClassifier

    X, y = make_moons(n_samples=30, noise=0.2, random_state=0)
    with _warnings.catch_warnings():
        _warnings.simplefilter("error", UserWarning)
        clf = GPClassifier(method="ep", optimizer=None).fit(X, y)
    assert clf.loo_approximate_.shape == (30,) and clf.loo_approximate_.dtype == bool
    clf.loo_approximate_ = clf.loo_approximate_.copy()
    clf.loo_approximate_[:2] = True
    with pytest.warns(UserWarning, match="2 of 30 leave-one-out values are approximate"):
        clf.loo_score()
