"""Tests of power EP on the pseudo-point posterior (docs/derivations/sparse.md §8).

References used here:
- the Gaussian-likelihood closed forms (eqs. P6, P8): sites, posterior, log Z for any α;
- Titsias' collapsed bound and the DTC posterior (α → 0);
- EP on the FITC prior (α = 1, probit and Student-t with negative sites);
- dense power EP on K (m = n, Z = X: d_i = 0, every α);
- the Gaussian variational fixed point for probit (α → 0, Opper & Archambeau 2009);
- two-dimensional quadrature of the tilted integral (eqs. P4, P5);
- central finite differences of log Z (eqs. P10, P11).
"""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Matern, WhiteKernel

from robustep.diagnostics import loo_from_ep_result
from robustep.ep import expectation_propagation
from robustep.ep.pseudo_point import (
    PseudoPointLikelihood,
    check_inducing_power,
    pseudo_point_log_Z_gradient,
    pseudo_point_power_ep,
    pseudo_point_prior,
)
from robustep.likelihoods import Gaussian, Probit, StudentT
from robustep.posterior.sparse import FITCPrior

KERNEL = ConstantKernel(1.5) * RBF(0.7)


def _regression(n=30, seed=0, outliers=False):
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(-3, 3, size=(n, 1)), axis=0)
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=n)
    if outliers:
        y[[3, 11, 20]] += [4.0, -5.0, 6.0]
    return X, y


def _classification(n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, 1))
    y = np.where(np.sin(1.5 * X[:, 0]) + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y


Z6 = np.linspace(-2.5, 2.5, 6)[:, None]


def _pep(prior, y, lik, alpha, **kw):
    kw.setdefault("tol", 1e-11)
    kw.setdefault("max_iter", 3000)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        return pseudo_point_power_ep(prior, y, lik, inducing_power=alpha, **kw)


def _dense_parts(kernel, X, Z, jitter):
    Kmm = kernel(Z) + jitter * np.eye(Z.shape[0])
    Kmn = kernel(Z, X)
    Q = Kmn.T @ np.linalg.solve(Kmm, Kmn)
    return Q, kernel.diag(X) - np.diag(Q)


def _log_normal(y, C):
    L = np.linalg.cholesky(C)
    a = np.linalg.solve(L, y)
    return -0.5 * a @ a - np.sum(np.log(np.diag(L))) - 0.5 * y.size * np.log(2 * np.pi)


# ------------------------------------------------------------------ Gaussian: eq. P8
@pytest.mark.parametrize("alpha", [1.0, 0.5, 0.1])
def test_gaussian_closed_form(alpha):
    X, y = _regression()
    s2 = 0.05
    prior = FITCPrior.from_kernel(KERNEL, X, Z6, jitter=1e-8)
    res = _pep(prior, y, Gaussian(s2), alpha)
    assert res.converged and res.power == alpha == res.inducing_power
    Q, d = _dense_parts(KERNEL, X, Z6, 1e-8)
    np.testing.assert_allclose(res.conditional_var, d, atol=1e-12)
    s = s2 + alpha * d  # eq. P6: the sites are N(y_i | h_i, s2 + α d_i)
    np.testing.assert_allclose(res.site_precision, 1.0 / s, rtol=1e-8)
    np.testing.assert_allclose(res.site_shift, y / s, rtol=1e-8)
    log_Z = _log_normal(y, Q + np.diag(s)) - (1 - alpha) / (2 * alpha) * np.sum(
        np.log1p(alpha * d / s2)
    )  # eq. P8
    assert abs(res.log_Z - log_Z) < 1e-8
    # posterior of h = Q (Q + S)^-1 y, Q - Q (Q + S)^-1 Q
    C = Q + np.diag(s)
    np.testing.assert_allclose(res.mean, Q @ np.linalg.solve(C, y), atol=1e-8)
    np.testing.assert_allclose(res.var, np.diag(Q - Q @ np.linalg.solve(C, Q)), atol=1e-8)
    mean_f, var_f = res.latent_marginals()
    np.testing.assert_allclose(var_f, res.var + d, atol=1e-14)
    # predictions: f* | u exact, q(u) from the sites (eq. S10)
    Xs = np.linspace(-3.5, 3.5, 7)[:, None]
    Kmm = KERNEL(Z6) + 1e-8 * np.eye(6)
    Ksm, Kmn = KERNEL(Xs, Z6), KERNEL(Z6, X)
    Sigma_u = np.linalg.inv(Kmm + Kmn @ np.diag(1 / s) @ Kmn.T)  # (K_mm^-1 Σ K_mm^-1)
    mu = Ksm @ Sigma_u @ Kmn @ (y / s)
    var = KERNEL.diag(Xs) - np.einsum("ij,ji->i", Ksm, np.linalg.solve(Kmm, Ksm.T))
    var += np.einsum("ij,jk,ik->i", Ksm, Sigma_u, Ksm)
    pm, pv = res.predict(Ksm, KERNEL.diag(Xs))
    np.testing.assert_allclose(pm, mu, atol=1e-8)
    np.testing.assert_allclose(pv, var, atol=1e-8)


def test_gaussian_alpha_to_zero_is_titsias():
    X, y = _regression()
    s2 = 0.05
    prior = FITCPrior.from_kernel(KERNEL, X, Z6, jitter=1e-8)
    Q, d = _dense_parts(KERNEL, X, Z6, 1e-8)
    vfe = _log_normal(y, Q + s2 * np.eye(y.size)) - np.sum(d) / (2 * s2)
    gaps = []
    for alpha in (1e-2, 1e-4, 1e-6):
        # the site update divides by α: rounding of order 1e-16 / α limits the tolerance
        res = _pep(prior, y, Gaussian(s2), alpha, tol=1e-7)
        gaps.append(abs(res.log_Z - vfe))
    # the gap is O(α) (about 120 α here): 1.15 at α = 1e-2, 1.2e-4 at α = 1e-6
    assert gaps[2] < 2e-4 and gaps[2] < 1.5e-2 * gaps[1] and gaps[1] < 1.5e-2 * gaps[0]
    dtc_mean = Q @ np.linalg.solve(Q + s2 * np.eye(y.size), y)
    np.testing.assert_allclose(res.mean, dtc_mean, atol=1e-5)


# ------------------------------------------------------------- α = 1 is FITC-EP
@pytest.mark.parametrize("lik_name", ["probit", "student-t"])
def test_alpha_one_is_fitc_ep(lik_name):
    if lik_name == "probit":
        X, y = _classification()
        lik = Probit()
    else:
        X, y = _regression(n=40, outliers=True)
        lik = StudentT(df=3.0, scale=0.1)
    Z = np.linspace(-3, 3, 8)[:, None]
    prior = FITCPrior.from_kernel(KERNEL, X, Z, jitter=1e-8)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        fitc = expectation_propagation(prior, y, lik, tol=1e-11, max_iter=3000)
    res = _pep(prior, y, lik, 1.0)
    if lik_name == "student-t":
        assert fitc.posterior.n_negative > 0 and res.posterior.n_negative > 0
    assert abs(res.log_Z - fitc.log_Z) < 1e-8
    # the same q(u): h_i = v_i^T u has the same moments (FITC's own marginals of f_i put the
    # site on f_i directly, q(f_i) = ∫ p(f_i | u) q(u) du does not; docs: §8, "α = 1")
    fp = fitc.posterior
    np.testing.assert_allclose(res.mean, prior.apply(fp.u_mean), atol=1e-8)
    np.testing.assert_allclose(res.var, fp.quad_diag(), atol=1e-8)
    cm, cv = res.latent_cavity()
    np.testing.assert_allclose(cm, fitc.cavity_mean, atol=1e-7)
    np.testing.assert_allclose(cv, fitc.cavity_var, atol=1e-7)
    # the h-sites are the FITC sites integrated against g_i (eq. S4)
    d = res.conditional_var
    c = 1.0 / (1.0 + d * fitc.site_precision)
    np.testing.assert_allclose(res.site_precision, fitc.site_precision * c, atol=1e-7)
    Xs = np.linspace(-3.5, 3.5, 9)[:, None]
    Ks = KERNEL(Xs, Z)
    for a, b in zip(
        res.predict(Ks, KERNEL.diag(Xs)), fitc.predict(Ks, KERNEL.diag(Xs)), strict=True
    ):
        np.testing.assert_allclose(a, b, atol=1e-8)
    # the latent view gives FITC-EP's leave-one-out cavities and predictive densities
    view = res.latent_view()
    loo_v, loo_f = loo_from_ep_result(view, lik, y), loo_from_ep_result(fitc, lik, y)
    np.testing.assert_allclose(loo_v.cavity_mean, loo_f.cavity_mean, atol=1e-7)
    np.testing.assert_allclose(loo_v.cavity_var, loo_f.cavity_var, atol=1e-7)
    np.testing.assert_allclose(loo_v.log_predictive, loo_f.log_predictive, atol=1e-7)
    np.testing.assert_array_equal(view.site_precision < 0, res.site_precision < 0)


# ------------------------------------------------- m = n, Z = X: dense power EP
@pytest.mark.parametrize("alpha", [1.0, 0.6, 0.2])
@pytest.mark.parametrize("lik_name", ["probit", "student-t"])
def test_inducing_equal_training_inputs_gives_dense_power_ep(alpha, lik_name):
    if lik_name == "probit":
        X, y = _classification(n=30)
        lik = Probit()
    else:
        X, y = _regression(n=30, outliers=True)
        lik = StudentT(df=3.0, scale=0.1)
    K = KERNEL(X) + 1e-6 * np.eye(X.shape[0])
    prior = FITCPrior(K, K, np.diag(K), jitter=0.0)
    assert np.max(prior.Lambda) < 1e-10
    res = _pep(prior, y, lik, alpha, tol=1e-10)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        dense = expectation_propagation(K, y, lik, power=alpha, tol=1e-10, max_iter=3000)
    assert abs(res.log_Z - dense.log_Z) < 1e-6
    np.testing.assert_allclose(res.mean, dense.mean, atol=1e-6)
    np.testing.assert_allclose(res.var, dense.var, atol=1e-6)
    np.testing.assert_allclose(res.site_precision, dense.site_precision, atol=1e-5)


# ------------------------------------------- probit α → 0: the variational fixed point
def _variational_fixed_point(prior_h, y, d, n_iter=2000):
    """Gaussian VI over u for probit: sites β = −E[g''], γ = E[g'] + β μ at
    f_i ~ N(μ_i, σ_i² + d_i) (Opper & Archambeau 2009), damped fixed-point iteration."""
    x, w = np.polynomial.hermite_e.hermegauss(80)
    w = w / w.sum()
    lik = Probit()
    beta, gamma = np.zeros(y.size), np.zeros(y.size)
    for _ in range(n_iter):
        post = prior_h.posterior(beta, gamma)
        f = post.mean[:, None] + np.sqrt(post.var + d)[:, None] * x[None, :]
        _, g1, g2, _ = lik.log_prob_derivatives(np.repeat(y, x.size), f.ravel())
        e1 = (g1.reshape(f.shape) * w).sum(1)
        e2 = (g2.reshape(f.shape) * w).sum(1)
        nb, ng = -e2, e1 - e2 * post.mean
        if max(np.max(np.abs(nb - beta)), np.max(np.abs(ng - gamma))) < 1e-12:
            break
        beta, gamma = 0.5 * (beta + nb), 0.5 * (gamma + ng)
    post = prior_h.posterior(beta, gamma)
    f = post.mean[:, None] + np.sqrt(post.var + d)[:, None] * x[None, :]
    ell = (lik.log_prob(np.repeat(y, x.size), f.ravel()).reshape(f.shape) * w).sum()
    m_u, L_A = post.u_mean, post.L_A
    A_inv = np.linalg.inv(L_A @ L_A.T)
    kl = 0.5 * (np.trace(A_inv) + m_u @ m_u - m_u.size) + np.sum(np.log(np.diag(L_A)))
    return post, ell - kl


def test_probit_alpha_to_zero_is_variational():
    X, y = _classification(n=30)
    prior = FITCPrior.from_kernel(KERNEL, X, Z6, jitter=1e-8)
    h_prior = pseudo_point_prior(prior)
    vi, elbo = _variational_fixed_point(h_prior, y, h_prior.conditional_var)
    gaps = []
    for alpha in (1e-2, 1e-3):
        res = _pep(prior, y, Probit(), alpha, tol=1e-10)
        gaps.append(
            (np.max(np.abs(res.mean - vi.mean)), np.max(np.abs(res.var - vi.var)),
             abs(res.log_Z - elbo))
        )  # fmt: skip
    for k in range(3):
        assert gaps[1][k] < 0.2 * gaps[0][k]  # O(α)
    assert max(gaps[1]) < 5e-3


# ------------------------------------------------------------- the tilted integral
def test_tilted_moments_match_two_dimensional_quadrature():
    """eqs. P4, P5 against ∫∫ N(h | m, v) N(f | h, d) p(y | f)^α dh df by Gauss–Hermite."""
    lik = StudentT(df=3.0, scale=0.3)
    wrapper = PseudoPointLikelihood(lik)
    y = np.array([0.2, 2.5, -1.0])
    d = np.array([0.4, 0.0, 1.3])
    m = np.array([0.0, -0.5, 0.7])
    v = np.array([0.3, 0.8, 0.05])
    alpha = 0.4
    log_Z, mh, vh = wrapper.tilted_moments(wrapper.pack(y, d), m, v, alpha)
    x, w = np.polynomial.hermite_e.hermegauss(120)
    w = w / w.sum()
    for i in range(3):
        h = m[i] + np.sqrt(v[i]) * x
        # E_{f | h}[p^α] by a fine grid in f (d may be 0)
        if d[i] > 0:
            f = h[:, None] + np.sqrt(d[i]) * x[None, :]
            inner = (np.exp(alpha * lik.log_prob(np.full(f.size, y[i]), f.ravel()))
                     .reshape(f.shape) * w).sum(1)  # fmt: skip
        else:
            inner = np.exp(alpha * lik.log_prob(np.full(h.size, y[i]), h))
        Zq = np.sum(w * inner)
        assert abs(np.log(Zq) - log_Z[i]) < 1e-6
        mq = np.sum(w * inner * h) / Zq
        assert abs(mq - mh[i]) < 1e-6
        assert abs(np.sum(w * inner * (h - mq) ** 2) / Zq - vh[i]) < 1e-6


# --------------------------------------------------------------- gradients: P10, P11
def _fd(f, x0, h=1e-5):
    g = np.zeros_like(x0)
    for k in range(x0.size):
        e = np.zeros_like(x0)
        e.flat[k] = h
        g.flat[k] = (f(x0 + e) - f(x0 - e)) / (2 * h)
    return g


@pytest.mark.parametrize(
    "case",
    [
        ("probit", 0.5, ConstantKernel(1.3) * RBF([0.9, 1.4])),
        ("student-t", 0.3, ConstantKernel(1.3) * Matern(0.9, nu=1.5) + WhiteKernel(0.01)),
        ("gaussian", 0.2, ConstantKernel(1.0) * RBF(1.0)),
    ],
    ids=["ard-rbf-probit", "matern32-white-student-t", "rbf-gaussian"],
)
def test_gradients_match_finite_differences(case):
    lik_name, alpha, kernel = case
    rng = np.random.default_rng(1)
    n, m = 40, 5
    X = rng.normal(size=(n, 2))
    Z = rng.normal(size=(m, 2))
    if lik_name == "probit":
        y = np.sign(np.sin(2 * X[:, 0]) + 0.3 * rng.normal(size=n))
        lik = Probit()
    else:
        y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=n)
        y[:4] += 6.0
        lik = StudentT(df=3.0, scale=0.2) if lik_name == "student-t" else Gaussian(0.1)

    def run(kernel, Z, lik):
        prior = FITCPrior.from_kernel(kernel, X, Z, jitter=1e-8)
        return _pep(prior, y, lik, alpha, tol=1e-11, max_iter=5000)

    res = run(kernel, Z, lik)
    if lik_name == "student-t":
        assert res.posterior.n_negative > 0
    g_theta, g_lik, g_Z = pseudo_point_log_Z_gradient(res, kernel, X, Z, lik, y)
    fd_theta = _fd(lambda t: run(kernel.clone_with_theta(t), Z, lik).log_Z, kernel.theta)
    np.testing.assert_allclose(g_theta, fd_theta, rtol=1e-4, atol=1e-5)
    fd_Z = _fd(lambda z: run(kernel, z, lik).log_Z, Z)
    np.testing.assert_allclose(g_Z, fd_Z, rtol=1e-4, atol=1e-5)
    lp = lik.get_log_params()
    fd_lik = _fd(lambda p: run(kernel, Z, lik.with_log_params(p)).log_Z, lp)
    np.testing.assert_allclose(g_lik, fd_lik, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------- validation
@pytest.mark.parametrize("bad", [0.0, -0.5, 1.5, np.nan, np.inf, True, "1", None])
def test_bad_inducing_power(bad):
    with pytest.raises(ValueError, match="inducing_power"):
        check_inducing_power(bad)
    X, y = _classification(n=10)
    prior = FITCPrior.from_kernel(KERNEL, X, Z6, jitter=1e-8)
    with pytest.raises(ValueError, match="inducing_power"):
        pseudo_point_power_ep(prior, y, Probit(), inducing_power=bad)


def test_power_and_inducing_power_are_not_combined():
    X, y = _classification(n=10)
    prior = FITCPrior.from_kernel(KERNEL, X, Z6, jitter=1e-8)
    with pytest.raises(ValueError, match="not power"):
        pseudo_point_power_ep(prior, y, Probit(), inducing_power=0.5, power=0.5)


def test_prior_and_inputs_not_modified():
    X, y = _classification(n=20)
    prior = FITCPrior.from_kernel(KERNEL, X, Z6, jitter=1e-8)
    lam, V, y0 = prior.Lambda.copy(), prior.V.copy(), y.copy()
    h = pseudo_point_prior(prior)
    assert np.all(h.Lambda == 0) and np.array_equal(h.conditional_var, lam)
    _pep(prior, y, Probit(), 0.5, tol=1e-6)
    assert np.array_equal(prior.Lambda, lam) and np.array_equal(prior.V, V)
    assert np.array_equal(y, y0)
    with pytest.raises(ValueError, match=r"\(n, 2\)"):
        PseudoPointLikelihood(Probit()).validate_targets(y)


# ---------------------------------------------------------------------- estimators
def test_classifier_default_is_fitc_and_alpha_near_one_agrees():
    from robustep.estimators import GPClassifier

    X, y = _classification(n=40)
    Z = np.linspace(-3, 3, 7)[:, None]
    kw = dict(inducing_points=Z, optimizer=None, tol=1e-9, method="ep")
    base = GPClassifier(**kw).fit(X, y)
    one = GPClassifier(inducing_power=1.0, **kw).fit(X, y)
    assert type(base._state.result).__name__ == "EPResult"  # the FITC code path, unchanged
    np.testing.assert_array_equal(base.predict_proba(X), one.predict_proba(X))
    assert base.log_marginal_likelihood_value_ == one.log_marginal_likelihood_value_
    near = GPClassifier(inducing_power=1 - 1e-7, **kw).fit(X, y)
    assert abs(near.log_marginal_likelihood_value_ - base.log_marginal_likelihood_value_) < 1e-5
    np.testing.assert_allclose(near.predict_proba(X), base.predict_proba(X), atol=1e-6)
    np.testing.assert_allclose(near.loo_log_predictive_, base.loo_log_predictive_, atol=1e-5)


def test_classifier_alpha_fit_and_evidence_gradient():
    from robustep.estimators import GPClassifier

    X, y = _classification(n=40)
    clf = GPClassifier(inducing_points=6, inducing_power=0.3, random_state=0).fit(X, y)
    assert clf.converged_ and np.isfinite(clf.log_marginal_likelihood_value_)
    assert clf.score(X, y) > 0.8 and np.all(np.isfinite(clf.loo_log_predictive_))
    theta = clf.kernel_.theta
    value, grad = clf.log_marginal_likelihood(theta, eval_gradient=True)
    assert abs(value - clf.log_marginal_likelihood_value_) < 1e-3
    fd = _fd(lambda t: clf.log_marginal_likelihood(t), theta, h=1e-4)
    np.testing.assert_allclose(grad, fd, rtol=1e-2, atol=1e-3)  # EP at tol 1e-4
    # the optimum of the α = 0.3 evidence is stationary
    assert np.max(np.abs(grad)) < 5e-2


def test_regressor_alpha_fit():
    from robustep.estimators import StudentTGPRegressor

    X, y = _regression(n=40, outliers=True)
    reg = StudentTGPRegressor(inducing_points=8, inducing_power=0.5, random_state=0).fit(X, y)
    assert reg.converged_ and np.isfinite(reg.log_marginal_likelihood_value_)
    assert reg.negative_precision_.sum() > 0  # the outliers get negative sites
    assert np.all(np.isfinite(reg.loo_log_predictive_))
    mean = reg.predict(X)
    inliers = np.setdiff1d(np.arange(40), [3, 11, 20])
    assert np.max(np.abs(mean[inliers] - np.sin(X[inliers, 0]))) < 0.5


def test_estimator_inducing_power_errors():
    from robustep.estimators import GPClassifier, StudentTGPRegressor

    X, y = _classification(n=20)
    with pytest.raises(ValueError, match="inducing_power"):
        GPClassifier(inducing_power=0.0, inducing_points=4).fit(X, y)
    with pytest.raises(ValueError, match="pass inducing_points"):
        GPClassifier(inducing_power=0.5).fit(X, y)
    with pytest.raises(ValueError, match="method='power'"):
        GPClassifier(inducing_points=4, inducing_power=0.5, method="power").fit(X, y)
    Xr, yr = _regression(n=20)
    with pytest.raises(ValueError, match="method='fractional'"):
        StudentTGPRegressor(inducing_points=4, inducing_power=0.5, method="fractional").fit(Xr, yr)
    with pytest.raises(ValueError, match="inducing_power"):
        StudentTGPRegressor(inducing_points=4, inducing_power=1.5).fit(Xr, yr)


def test_classifier_inducing_power_multiclass_and_dask():
    from robustep.estimators import GPClassifier

    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, size=(45, 1))
    y = np.digitize(X[:, 0], [-1, 1])
    with pytest.raises(ValueError, match="one_vs_rest"):
        GPClassifier(inducing_points=5, inducing_power=0.5).fit(X, y)
    ovr = GPClassifier(
        inducing_points=5, inducing_power=0.5, multi_class="one_vs_rest", optimizer=None
    ).fit(X, y)
    assert ovr.score(X, y) > 0.8
    da = pytest.importorskip("dask.array")
    with pytest.raises(ValueError, match="Dask"):
        GPClassifier(inducing_points=5, inducing_power=0.5, optimizer=None).fit(
            da.from_array(X, chunks=(15, 1)), (y > 0).astype(int)
        )


# ------------------------------------------------- the label-noise step likelihood, α < 1
def _noisy_boundary(n=400, seed=1, m=16):
    """A smooth boundary with 20% flipped labels and m inducing inputs drawn from X, on
    which one undamped power-EP run (α = 0.5, the starting kernel) does not converge in
    300 sweeps."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, 2))
    y = np.where(np.sin(2 * X[:, 0]) + X[:, 1] > 0, 1.0, -1.0)
    y[rng.random(n) < 0.2] *= -1
    return X, y, X[rng.choice(n, m, replace=False)]


def _step_chain(max_iter=1000):
    import dataclasses

    from robustep.ep import InferenceStrategy

    strategy = InferenceStrategy.auto(max_iter, trial_damping=0.5, accelerate=True,
                                      tol_units="marginal")  # fmt: skip
    return dataclasses.replace(strategy, stages=("accelerated", "damped"))


def test_step_chain_converges_where_one_undamped_run_does_not():
    from robustep.likelihoods import NoisyStep

    X, y, Z = _noisy_boundary()
    prior = FITCPrior.from_kernel(ConstantKernel(1.0) * RBF(1.0), X, Z, jitter=1e-6)
    lik = NoisyStep(0.2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        plain = pseudo_point_power_ep(prior, y, lik, inducing_power=0.5, max_iter=300, tol=1e-4)
    assert not plain.converged
    chained = pseudo_point_power_ep(prior, y, lik, inducing_power=0.5, strategy=_step_chain(),
                                    tol=1e-8)  # fmt: skip
    assert chained.converged and chained.method_used == "accelerated"
    assert chained.inducing_power == 0.5 and chained.n_iter < 300
    # the same fixed point as heavily damped power EP at α = 0.5 (the engine's own sweeps)
    damped = _pep(prior, y, lik, 0.5, damping=0.8, tol=1e-8, tol_units="marginal")
    np.testing.assert_allclose(chained.log_Z, damped.log_Z, rtol=1e-9)
    np.testing.assert_allclose(chained.mean, damped.mean, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(chained.var, damped.var, rtol=1e-6)
    # the latent view keeps the chain's report
    view = chained.latent_view()
    assert view.method_used == "accelerated" and view.methods_tried == chained.methods_tried
    assert not hasattr(view, "anderson_differences")  # a warm start's detail, on h


def test_step_chain_options():
    from robustep.likelihoods import NoisyStep

    X, y = _classification(n=30)
    prior = FITCPrior.from_kernel(KERNEL, X, Z6, jitter=1e-6)
    with pytest.raises(ValueError, match="only tol and init"):
        pseudo_point_power_ep(prior, y, NoisyStep(0.1), inducing_power=0.5,
                              strategy=_step_chain(), damping=0.5)  # fmt: skip
    import dataclasses

    with_power = dataclasses.replace(_step_chain(), stages=("accelerated", "power"))
    with pytest.raises(ValueError, match="stage 'power'"):
        pseudo_point_power_ep(prior, y, NoisyStep(0.1), inducing_power=0.5, strategy=with_power)
    # at α = 1 the chain's power is EP's, and stage "power" is allowed
    res = pseudo_point_power_ep(prior, y, NoisyStep(0.1), inducing_power=1.0,
                                strategy=with_power, tol=1e-8)  # fmt: skip
    assert res.converged and res.method_used == "accelerated"


def test_step_classifier_alpha_below_one_converges_with_kernel_optimised():
    from robustep.estimators import GPClassifier

    X, y, Z = _noisy_boundary()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        clf = GPClassifier(likelihood="step", label_noise=0.2, inducing_points=Z,
                           optimize_inducing=False, inducing_power=0.5).fit(X, y)  # fmt: skip
    assert clf.converged_ and clf.method_used_ == "accelerated"
    assert clf.optimizer_result_.success
    assert abs(clf.kernel_.k2.length_scale - 1.0) > 0.05  # the kernel left its start
    # the fit is power EP's fixed point at the learned kernel, to the estimator's tol
    theta = clf.kernel_.theta
    value = clf.log_marginal_likelihood(theta)
    assert abs(value - clf.log_marginal_likelihood_value_) < 1e-2
    # a maximum of the full-tolerance evidence, up to the search tolerance: no point of a
    # grid around it is 0.01 nats higher (the curvature there is ~20 nats per unit²)
    around = [clf.log_marginal_likelihood(theta + d) for d in (-0.1, -0.05, 0.05, 0.1)]
    assert max(around) < value + 1e-2 and max(around) > value - 0.5
    # the default (inducing inputs optimised, α "auto") takes the same chain
    auto = GPClassifier(likelihood="step", label_noise=0.2, inducing_points=Z,
                        random_state=0).fit(X, y)  # fmt: skip
    assert auto.inducing_power_ < 1 and auto.converged_ and auto.method_used_ == "accelerated"


def test_step_classifier_search_evaluations_use_search_stages(monkeypatch):
    from robustep.estimators import GPClassifier, _binary_sparse

    X, y, Z = _noisy_boundary(n=120, seed=0, m=8)
    calls = []
    step_strategy = _binary_sparse.SparseBinaryCore.step_strategy

    def recorded(self, search=False):
        strategy = step_strategy(self, search)
        calls.append((search, strategy.stages, strategy.damped_tol))
        return strategy

    monkeypatch.setattr(_binary_sparse.SparseBinaryCore, "step_strategy", recorded)
    GPClassifier(likelihood="step", label_noise=0.2, inducing_points=Z, optimize_inducing=False,
                 inducing_power=0.5).fit(X, y)  # fmt: skip
    from robustep import get_config

    searched = [c for c in calls if c[0]]
    assert searched and all(c[1:] == (("accelerated",), get_config().search_tol) for c in searched)
    assert calls[-1] == (False, ("accelerated", "damped", "double_loop"), None)  # final fit
    # the probit likelihood keeps the engine's run
    calls.clear()
    GPClassifier(inducing_points=Z, inducing_power=0.5, optimize_inducing=False).fit(X, y)
    assert calls == []


def test_step_classifier_falls_back_to_shorter_length_scales(monkeypatch):
    """A first search evaluation that fails starts the sparse step search again from the
    length-scales times search_fallback_factor (as the dense step classifier's)."""
    from robustep.estimators import GPClassifier, _binary_sparse

    X, y, Z = _noisy_boundary(n=120, seed=0, m=8)
    infer = _binary_sparse.SparseBinaryCore.infer
    tried, inputs = [], []

    def failing_at_long_scales(self, kernel, Z, init=None, search=False):
        res = infer(self, kernel, Z, init, search)
        if search:
            tried.append(kernel.k2.length_scale)
            inputs.append(np.array(Z))
            if kernel.k2.length_scale > 0.5:  # as EP fails under long length-scales
                res.converged = False
        return res

    monkeypatch.setattr(_binary_sparse.SparseBinaryCore, "infer", failing_at_long_scales)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        clf = GPClassifier(likelihood="step", label_noise=0.2, inducing_points=Z,
                           inducing_power=0.5).fit(X, y)  # fmt: skip
    np.testing.assert_allclose(tried[:2], [1.0, 0.25])
    assert clf.converged_ and clf.optimizer_result_.n_failures >= 1
    assert clf.kernel_.k2.length_scale <= 0.5
    # the fallback start keeps the inducing inputs where the first one began
    np.testing.assert_array_equal(inputs[1], inputs[0])
    np.testing.assert_array_equal(inputs[0], Z)
    # the probit likelihood keeps its one start: its search stops at the failure
    tried.clear()
    with pytest.warns(ConvergenceWarning, match="kept at their starting values") as caught:
        GPClassifier(inducing_points=Z, inducing_power=0.5, optimize_inducing=False).fit(X, y)
    assert tried == [1.0]
    # the advice does not suggest the inducing power the fit has already
    assert not any("inducing_power=0.5" in str(w.message) for w in caught)


def test_step_classifier_fitc_search_runs_search_stages(monkeypatch):
    """At α = 1 (FITC-EP) the step classifier's search evaluations run the dense
    classifier's search stages (search=True); the final fit and the probit likelihood
    do not."""
    from robustep.estimators import GPClassifier, _binary_sparse

    X, y, Z = _noisy_boundary(n=120, seed=0, m=8)
    run = _binary_sparse.run_inference
    flags = []

    def recorded(params, prior, y, likelihood, init=None, search=False, **kwargs):
        flags.append((params.likelihood, search))
        return run(params, prior, y, likelihood, init, search, **kwargs)

    monkeypatch.setattr(_binary_sparse, "run_inference", recorded)
    clf = GPClassifier(likelihood="step", label_noise=0.2, inducing_points=Z,
                       optimize_inducing=False).fit(X, y)  # fmt: skip
    assert clf.inducing_power_ == 1.0 and clf.converged_
    assert flags[-1] == ("step", False) and all(s for _, s in flags[:-1]) and len(flags) > 2
    flags.clear()
    GPClassifier(inducing_points=Z, optimize_inducing=False).fit(X, y)
    assert flags and not any(s for _, s in flags)
