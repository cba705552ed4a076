"""Stochastic power EP for the sparse GP (robustep.ep.stochastic,
docs/derivations/stochastic_ep.md)."""

import dataclasses

import numpy as np
import pytest
from scipy.optimize import minimize
from scipy.stats import norm
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Matern, WhiteKernel

from robustep.ep.pseudo_point import pseudo_point_log_Z_gradient, pseudo_point_power_ep
from robustep.ep.stochastic import fit_stochastic_ep, stochastic_ep_energy
from robustep.likelihoods import Probit, StudentT
from robustep.posterior.sparse import FITCPrior

JITTER = 1e-6
FIXED = {"learn_kernel": False, "learn_likelihood": False, "learn_inducing": False}


def _probit(n, m, seed=0, noise=0.3):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, 2))
    f = np.sin(1.5 * X[:, 0]) * np.cos(X[:, 1])
    y = np.where(f + noise * rng.normal(size=n) > 0, 1.0, -1.0)
    Z = X[rng.choice(n, m, replace=False)]
    return X, y, Z


def _student(n, m, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, 2))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=n)
    y[: n // 10] += rng.choice([-1, 1], n // 10) * rng.uniform(3, 6, n // 10)
    Z = X[rng.choice(n, m, replace=False)]
    return X, y, Z


# ------------------------------------------------------------- (a) full-batch fixed point
@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_full_batch_per_point_sites_reach_power_ep_fixed_point(alpha):
    X, y, Z = _probit(300, 20)
    kernel = ConstantKernel(2.0) * RBF(1.0)
    prior = FITCPrior.from_kernel(kernel, X, Z, jitter=JITTER)
    ref = pseudo_point_power_ep(
        prior, y, Probit(), inducing_power=alpha, tol=1e-12, max_iter=3000, damping=0.5
    )
    fit = fit_stochastic_ep(kernel, X, y, Probit(), Z, power=alpha, batch_size=300,
                            n_epochs=200, damping=0.5, tied_sites=False, jitter=JITTER,
                            random_state=0, **FIXED)  # fmt: skip
    np.testing.assert_allclose(fit.site_precision, ref.site_precision, atol=1e-8)
    np.testing.assert_allclose(fit.site_shift, ref.site_shift, atol=1e-8)
    # q(u) itself: the FITC predictive of both at new inputs, and the energy = log Z_α
    Xs = np.random.default_rng(5).uniform(-3, 3, size=(40, 2))
    mean, var = fit.predict(Xs)
    mean_ref, var_ref = ref.posterior.predict(kernel(Xs, Z), kernel.diag(Xs))
    np.testing.assert_allclose(mean, mean_ref, atol=1e-6)
    np.testing.assert_allclose(var, var_ref, atol=1e-6)
    energy = stochastic_ep_energy(fit, X, y, want_grad=False)[0]
    assert energy == pytest.approx(ref.log_Z, abs=1e-7)


def test_student_t_per_point_sites_with_negative_precisions_reach_fixed_point():
    X, y, Z = _student(200, 15)
    kernel = ConstantKernel(1.0) * RBF(1.0)
    lik = StudentT(df=3.0, scale=0.1)
    prior = FITCPrior.from_kernel(kernel, X, Z, jitter=JITTER)
    ref = pseudo_point_power_ep(
        prior, y, lik, inducing_power=0.5, tol=1e-12, max_iter=3000, damping=0.3
    )
    assert np.any(ref.site_precision < 0)
    fit = fit_stochastic_ep(kernel, X, y, lik, Z, power=0.5, batch_size=200, n_epochs=400,
                            damping=0.3, tied_sites=False, jitter=JITTER, random_state=0,
                            **FIXED)  # fmt: skip
    np.testing.assert_allclose(fit.site_precision, ref.site_precision, atol=1e-7)
    assert np.all(np.isfinite(fit.mean)) and np.all(np.isfinite(fit.cov))
    assert stochastic_ep_energy(fit, X, y, want_grad=False)[0] == pytest.approx(ref.log_Z, abs=1e-6)


# ------------------------------------------------------------------------ (b) gradients
def _perturbed(fit, theta=None, log_lik=None, Z=None):
    return dataclasses.replace(
        fit,
        kernel=fit.kernel if theta is None else fit.kernel.clone_with_theta(theta),
        likelihood=fit.likelihood if log_lik is None else fit.likelihood.with_log_params(log_lik),
        inducing_inputs=fit.inducing_inputs if Z is None else Z,
    )


CASES = [
    ("probit", ConstantKernel(2.0) * RBF([1.0, 1.5]), True),
    ("probit", ConstantKernel(2.0) * RBF([1.0, 1.5]), False),
    ("student", Matern(1.0, nu=1.5) + WhiteKernel(0.01), True),
    ("student", Matern(1.0, nu=1.5) + WhiteKernel(0.01), False),
]


@pytest.mark.parametrize("data,kernel,tied", CASES)
def test_energy_gradient_matches_finite_differences(data, kernel, tied):
    if data == "probit":
        X, y, Z = _probit(150, 8)
        lik = Probit()
    else:
        X, y, Z = _student(150, 8)
        lik = StudentT(df=3.0, scale=0.2)
    # a few damped sweeps: the sites are not at a fixed point, so only the explicit
    # gradient of the energy at fixed sites can match
    fit = fit_stochastic_ep(kernel, X, y, lik, Z, power=0.5, batch_size=50, n_epochs=2,
                            damping=0.5, tied_sites=tied, random_state=0, **FIXED)  # fmt: skip
    _, g_theta, g_lik, g_Z = stochastic_ep_energy(fit, X, y)
    at = (fit.kernel, fit.inducing_inputs)

    def energy(**kw):
        return stochastic_ep_energy(_perturbed(fit, **kw), X, y, want_grad=False, sites_at=at)[0]

    h = 1e-5
    theta = fit.kernel.theta
    fd = [energy(theta=theta + h * e) - energy(theta=theta - h * e) for e in np.eye(theta.size)]
    np.testing.assert_allclose(g_theta, np.array(fd) / (2 * h), rtol=1e-5, atol=1e-5)
    lp = fit.likelihood.get_log_params()
    fd = [energy(log_lik=lp + h * e) - energy(log_lik=lp - h * e) for e in np.eye(lp.size)]
    np.testing.assert_allclose(g_lik, np.array(fd) / (2 * h), rtol=1e-5, atol=1e-5)
    Z0 = fit.inducing_inputs
    for a, b in [(0, 0), (3, 1), (7, 0)]:
        E = np.zeros_like(Z0)
        E[a, b] = h
        fd = (energy(Z=Z0 + E) - energy(Z=Z0 - E)) / (2 * h)
        assert g_Z[a, b] == pytest.approx(fd, rel=1e-5, abs=1e-5)


@pytest.mark.parametrize("tied", [True, False])
def test_minibatch_estimate_is_unbiased(tied):
    X, y, Z = _student(200, 8)
    lik = StudentT(df=3.0, scale=0.2)
    kernel = ConstantKernel(1.0) * RBF(1.0)
    fit = fit_stochastic_ep(kernel, X, y, lik, Z, power=0.5, batch_size=40, n_epochs=2,
                            damping=0.5, tied_sites=tied, random_state=0, **FIXED)  # fmt: skip
    full = np.concatenate([np.atleast_1d(v).ravel() for v in stochastic_ep_energy(fit, X, y)])
    rng = np.random.default_rng(3)
    draws = np.array([
        np.concatenate([np.atleast_1d(v).ravel() for v in stochastic_ep_energy(
            fit, X, y, batch=rng.choice(200, 20, replace=False))])
        for _ in range(600)
    ])  # fmt: skip
    se = draws.std(axis=0) / np.sqrt(len(draws))
    assert np.all(se > 0)
    assert np.all(np.abs(draws.mean(axis=0) - full) < 4.5 * se + 1e-9)
    # the estimate is not the full value batch by batch (the test can see a bias)
    assert np.max(np.abs(draws[0] - full) / se) > 1


# -------------------------------------------------------------- (c) learning vs full batch
def _full_batch_optimum(kernel, X, y, Z, alpha):
    def negative(theta):
        k = kernel.clone_with_theta(theta)
        prior = FITCPrior.from_kernel(k, X, Z, jitter=JITTER)
        res = pseudo_point_power_ep(
            prior, y, Probit(), inducing_power=alpha, tol=1e-8, max_iter=300
        )
        g = pseudo_point_log_Z_gradient(res, k, X, Z, Probit(), y, wrt_inducing=False)[0]
        return -res.log_Z, -g

    opt = minimize(negative, kernel.theta, jac=True, method="L-BFGS-B")
    return opt.x, -opt.fun, negative


def _probability(kernel, Z, X, y, alpha, Xs):
    prior = FITCPrior.from_kernel(kernel, X, Z, jitter=JITTER)
    res = pseudo_point_power_ep(prior, y, Probit(), inducing_power=alpha, tol=1e-8)
    mean, var = res.posterior.predict(kernel(Xs, Z), kernel.diag(Xs))
    return norm.cdf(mean / np.sqrt(1 + var))


def _learning_check(n, m, batch, epochs, lr, tied, pred_tol, ev_tol):
    X, y, Z = _probit(n, m, seed=1, noise=1.0)
    alpha = 0.5
    kernel = ConstantKernel(1.0) * RBF(1.0)
    theta_opt, ev_opt, negative = _full_batch_optimum(kernel, X, y, Z, alpha)
    fit = fit_stochastic_ep(kernel, X, y, Probit(), Z, power=alpha, batch_size=batch,
                            n_epochs=epochs, learning_rate=lr, learn_inducing=False,
                            tied_sites=tied, jitter=JITTER, random_state=0)  # fmt: skip
    ev = -negative(fit.kernel.theta)[0]
    assert abs(ev - ev_opt) < ev_tol * abs(ev_opt)
    Xs = np.random.default_rng(9).uniform(-3, 3, size=(300, 2))
    p_opt = _probability(kernel.clone_with_theta(theta_opt), Z, X, y, alpha, Xs)
    mean, var = fit.predict(Xs)
    p = norm.cdf(mean / np.sqrt(1 + var))
    # the evidence is flat along the signal amplitude: the mean difference is the
    # criterion, the largest one a looser check
    assert np.mean(np.abs(p - p_opt)) < pred_tol
    assert np.max(np.abs(p - p_opt)) < 5 * pred_tol
    # the learning moved: the initial hyperparameters are worse
    assert -negative(kernel.theta)[0] < ev_opt - 5


@pytest.mark.parametrize(
    "tied", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["per_point", "tied"]
)
def test_learning_reaches_full_batch_optimum(tied):
    # about 9 s each (the full-batch L-BFGS-B search included)
    _learning_check(2000, 20, 500, 40, 0.1, tied=tied, pred_tol=0.01, ev_tol=0.01)


# ---------------------------------------------------------------- (d) tied vs per point
def test_tied_and_per_point_sites_agree_on_small_data():
    X, y, Z = _probit(300, 15)
    kernel = ConstantKernel(2.0) * RBF(1.0)
    common = dict(power=0.5, batch_size=50, n_epochs=60, damping=0.5, random_state=0, **FIXED)
    tied = fit_stochastic_ep(kernel, X, y, Probit(), Z, tied_sites=True, **common)
    point = fit_stochastic_ep(kernel, X, y, Probit(), Z, tied_sites=False, **common)
    Xs = np.random.default_rng(2).uniform(-3, 3, size=(200, 2))
    (m1, v1), (m2, v2) = tied.predict(Xs), point.predict(Xs)
    p1, p2 = norm.cdf(m1 / np.sqrt(1 + v1)), norm.cdf(m2 / np.sqrt(1 + v2))
    assert np.max(np.abs(p1 - p2)) < 0.05
    assert np.max(np.abs(p1 - 0.5)) > 0.3  # not both at the prior


# ------------------------------------------------------------------------------ the API
def test_reproducible_and_stops():
    X, y, Z = _probit(300, 10)
    kernel = ConstantKernel(1.0) * RBF(1.0)
    kw = dict(power=0.5, batch_size=64, n_epochs=3, random_state=7)
    a = fit_stochastic_ep(kernel, X, y, Probit(), Z, **kw)
    b = fit_stochastic_ep(kernel, X, y, Probit(), Z, **kw)
    np.testing.assert_array_equal(a.mean, b.mean)
    np.testing.assert_array_equal(a.inducing_inputs, b.inducing_inputs)
    assert not np.array_equal(a.inducing_inputs, Z)  # Z was learned
    assert [h["epoch"] for h in a.history] == [1, 2, 3]
    c = fit_stochastic_ep(kernel, X, y, Probit(), Z, **{**kw, "random_state": 8})
    assert not np.array_equal(a.mean, c.mean)
    seen = []

    def stop_at_two(state, record):
        seen.append(record["epoch"])
        return record["epoch"] == 2

    d = fit_stochastic_ep(kernel, X, y, Probit(), Z, callback=stop_at_two, **kw)
    assert seen == [1, 2] and d.stopped == "callback" and len(d.history) == 2
    e = fit_stochastic_ep(kernel, X, y, Probit(), Z, max_time=0.0, **kw)
    assert e.stopped == "max_time" and len(e.history) == 1 and e.n_steps == 1
    f = fit_stochastic_ep(kernel, X, y, Probit(), Z, max_time=0.0, keep_best=True, **kw)
    np.testing.assert_array_equal(f.mean, e.mean)
    g = fit_stochastic_ep(kernel, X, y, Probit(), Z, max_steps=5, **kw)
    assert g.stopped == "max_steps" and g.n_steps == 5


def test_student_t_regression_learns():
    X, y, Z = _student(600, 15)
    kernel = ConstantKernel(1.0) * RBF(2.0)
    lik = StudentT(df=3.0, scale=1.0)
    fit = fit_stochastic_ep(kernel, X, y, lik, Z, power=0.5, batch_size=100, n_epochs=25,
                            learning_rate=0.05, random_state=0)  # fmt: skip
    assert fit.history[-1]["energy"] > fit.history[0]["energy"] + 50
    assert fit.likelihood.scale < 0.5  # the outliers do not inflate the noise scale
    Xs = np.linspace(-2.5, 2.5, 50)[:, None] * np.array([[1.0, 0.0]])
    mean, _ = fit.predict(Xs)
    assert np.max(np.abs(mean - np.sin(Xs[:, 0]))) < 0.3


def test_bad_arguments():
    X, y, Z = _probit(50, 5)
    kernel = RBF(1.0)
    with pytest.raises(ValueError, match="inducing_power"):
        fit_stochastic_ep(kernel, X, y, Probit(), Z, power=1.5)
    with pytest.raises(ValueError, match="2-D"):
        fit_stochastic_ep(kernel, X[:, 0], y, Probit(), Z)
    with pytest.raises(ValueError, match="shape"):
        fit_stochastic_ep(kernel, X, y, Probit(), Z[:, :1])
    with pytest.raises(ValueError, match="damping"):
        fit_stochastic_ep(kernel, X, y, Probit(), Z, damping=1.5, tied_sites=False)
    with pytest.raises(TypeError, match="Likelihood"):
        fit_stochastic_ep(kernel, X, y, "probit", Z)


def test_point_with_no_cavity_variance_is_left_out(monkeypatch):
    """A point whose cavity pins h_i (v_i + d_i = 0: on an inducing input, with a
    projected variance that rounds to 0) is left out of the tied-site energy estimate and
    its gradient, as the site step leaves it out: no error, and the data term of the
    other points with the batch's n / |B| scale."""
    from robustep.ep import stochastic

    X, y, Z = _probit(60, 8, seed=3)
    fit = fit_stochastic_ep(ConstantKernel(1.0) * RBF(1.0), X, y, Probit(), Z, n_epochs=2,
                            batch_size=20, random_state=0)  # fmt: skip
    batch = np.arange(10)
    rest = stochastic_ep_energy(fit, X, y, batch=batch[1:], want_grad=False)[0]
    projections, rows = stochastic._Gauss.projections, stochastic._Frame.rows

    def pinned_projections(self, be, Kb):
        mean, var, s = projections(self, be, Kb)
        return mean, np.where(np.arange(var.size) == 0, 0.0, var), s

    def pinned_rows(self, Xb):
        Kb, a, kd, d = rows(self, Xb)
        return Kb, a, kd, np.where(np.arange(d.size) == 0, 0.0, d)

    monkeypatch.setattr(stochastic._Gauss, "projections", pinned_projections)
    monkeypatch.setattr(stochastic._Frame, "rows", pinned_rows)
    energy, g_theta, _, g_Z = stochastic_ep_energy(fit, X, y, batch=batch)
    assert np.isfinite(energy) and np.all(np.isfinite(g_theta)) and np.all(np.isfinite(g_Z))
    glob = stochastic_ep_energy(fit, X, y, batch=batch[:1], want_grad=False)[0]
    # the data terms: (n / 10) Σ_{i ≠ 0} φ_i against (n / 9) Σ_{i ≠ 0} φ_i
    assert energy - glob == pytest.approx(0.9 * (rest - glob), rel=1e-10)
