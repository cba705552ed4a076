"""The residual in units of q's marginals (``tol_units="marginal"``)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

from robustep import GPClassifier
from robustep.ep import InferenceStrategy, expectation_propagation, run_chain
from robustep.ep.accelerated import accelerated_expectation_propagation
from robustep.ep.engine import marginal_residual
from robustep.likelihoods import NoisyStep, Probit
from robustep.posterior import DensePrior


def _problem(n=40, seed=0, flip=0.2):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 1.0, size=(n, 2))
    y = np.where(X[:, 0] * X[:, 1] > 0, 1.0, -1.0)
    flipped = rng.random(n) < flip
    y[flipped] = -y[flipped]
    return (ConstantKernel(2.0) * RBF(0.6))(X), y


def _marginals(K, tau, nu):
    Sigma = np.linalg.inv(np.linalg.inv(K) + np.diag(tau))
    return Sigma @ nu, np.diag(Sigma)


def test_marginal_residual_is_each_sites_first_order_change_of_its_marginal():
    """Change one site at a time by h (Δτ̃_i, Δν̃_i) and measure, by dense inverses, how
    much its marginal moves: relative variance change and mean change in standard
    deviations, divided by h, tend to the two terms of marginal_residual."""
    K, _ = _problem(12, seed=1)
    rng = np.random.default_rng(2)
    tau = rng.uniform(-0.3, 3.0, 12)
    nu = rng.normal(size=12)
    d_tau, d_nu = rng.normal(size=12), rng.normal(size=12)
    mean, var = _marginals(K, tau, nu)
    h = 1e-6
    measured = []
    for i in range(12):
        tau_h, nu_h = tau.copy(), nu.copy()
        tau_h[i] += h * d_tau[i]
        nu_h[i] += h * d_nu[i]
        mean_h, var_h = _marginals(K, tau_h, nu_h)
        measured.append(abs(var_h[i] - var[i]) / var[i] / h)
        measured.append(abs(mean_h[i] - mean[i]) / np.sqrt(var[i]) / h)
    assert marginal_residual(mean, var, d_tau, d_nu) == pytest.approx(max(measured), rel=1e-4)
    assert marginal_residual(mean, var, np.zeros(0), np.zeros(0)) == 0.0


def test_same_fixed_point_in_either_unit():
    """Both units stop at EP's fixed point: at a tight tol the sites agree, and the
    history's residual is the marginal one."""
    K, y = _problem(60, seed=3)
    lik = NoisyStep(0.2)
    kw = dict(damping=0.5, double_loop=False, max_iter=3000, tol=1e-9)
    a = expectation_propagation(K, y, lik, **kw)
    b = expectation_propagation(K, y, lik, tol_units="marginal", **kw)
    assert a.converged and b.converged
    np.testing.assert_allclose(b.site_precision, a.site_precision, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b.mean, a.mean, rtol=1e-6, atol=1e-8)
    assert b.log_Z == pytest.approx(a.log_Z, abs=1e-8)


def test_marginal_units_stop_where_the_site_change_is_large_but_the_marginal_change_small():
    """Step sites reach precisions in the hundreds; at tol 1e-2 the marginal residual is
    reached in fewer sweeps than the absolute one, and the final residual measured in
    site units is larger than tol while the marginal one is below it."""
    K, y = _problem(150, seed=4)
    prior = DensePrior(K, check=False)
    lik = NoisyStep(0.2)
    kw = dict(tol=1e-2, max_iter=500)
    sites = accelerated_expectation_propagation(prior, y, lik, **kw)
    marg = accelerated_expectation_propagation(prior, y, lik, tol_units="marginal", **kw)
    assert sites.converged and marg.converged
    assert marg.n_iter < sites.n_iter
    assert np.max(np.abs(marg.site_precision)) > 10.0


@pytest.mark.parametrize("bad", ["relative", None, 1])
def test_tol_units_are_validated(bad):
    K, y = _problem(10)
    with pytest.raises(ValueError, match="tol_units"):
        expectation_propagation(K, y, Probit(), tol_units=bad)
    with pytest.raises(ValueError, match="tol_units"):
        accelerated_expectation_propagation(K, y, Probit(), tol_units=bad)
    with pytest.raises(ValueError, match="tol_units"):
        InferenceStrategy(tol_units=bad)


def test_the_chain_runs_every_stage_in_the_strategys_units():
    """run_chain passes the strategy's tol_units to every stage: with "marginal" the
    converged result's last residual (history) is the marginal residual."""
    K, y = _problem(60, seed=5)
    lik = NoisyStep(0.2)
    strategy = InferenceStrategy.auto(200, trial_damping=0.5, accelerate=True,
                                      tol_units="marginal")  # fmt: skip
    assert strategy.search_stages(1e-2).tol_units == "marginal"
    res = run_chain(K, y, lik, strategy, tol=1e-6)
    assert res.converged
    # one undamped moment-matching update from the result, measured here
    _, m_hat, v_hat = lik.tilted_moments(y, res.cavity_mean, res.cavity_var)
    d_tau = 1.0 / v_hat - 1.0 / res.cavity_var - res.site_precision
    d_nu = m_hat / v_hat - res.cavity_mean / res.cavity_var - res.site_shift
    assert marginal_residual(res.mean, res.var, d_tau, d_nu) < 1e-6


def test_the_step_classifier_measures_tol_in_marginal_units(monkeypatch):
    """GPClassifier(likelihood="step") runs its chain with tol_units="marginal"; probit
    keeps site units."""
    import robustep.ep as ep

    seen = []
    real = ep.run_chain

    def spy(K, y, likelihood, strategy, **kw):
        seen.append(strategy.tol_units)
        return real(K, y, likelihood, strategy, **kw)

    monkeypatch.setattr(ep, "run_chain", spy)
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(40, 2))
    y = np.where(X[:, 0] > 0, 1, -1)
    GPClassifier(likelihood="step", label_noise=0.1, optimizer=None).fit(X, y)
    GPClassifier(optimizer=None).fit(X, y)
    assert seen == ["marginal", "sites"]
