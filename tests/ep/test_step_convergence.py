"""EP on the label-noise step likelihood with flipped labels: the method="auto" chain's
stages, its report of each, and its convergence on the quick cells of benchmarks/stress.py."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

from _benchmarks import load_benchmark
from robustep.ep import AdaptiveDamping, InferenceStrategy, expectation_propagation, run_chain
from robustep.ep.chain import auto_expectation_propagation, hover_callback, stall_callback
from robustep.likelihoods import NoisyStep
from robustep.posterior import DensePrior


def _xor(n, flip, seed):
    """XOR labels in {-1, +1} on X uniform in [-1, 1]^2, a fraction ``flip`` flipped."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 1.0, size=(n, 2))
    y = np.where(X[:, 0] * X[:, 1] > 0, 1.0, -1.0)
    flipped = rng.random(n) < flip
    y[flipped] = -y[flipped]
    return X, y


def _moment_matching_residual(res, y, lik):
    """Largest change of a site's natural parameters that one undamped moment-matching update
    would make from the result's cavities (the engine's residual, computed independently)."""
    _, m_hat, v_hat = lik.tilted_moments(y, res.cavity_mean, res.cavity_var)
    prop_prec = 1.0 / v_hat - 1.0 / res.cavity_var
    prop_shift = m_hat / v_hat - res.cavity_mean / res.cavity_var
    return max(
        np.max(np.abs(prop_prec - res.site_precision)),
        np.max(np.abs(prop_shift - res.site_shift)),
    )


def test_adaptive_damped_stage_reports_the_residual_of_its_state():
    """On this data set a damped stage with adaptive damping from 0.5 has its robust step
    blocked after some sweeps (a cavity precision is left just above zero, and no halved
    step keeps it positive), so its next run makes no sweep; the stage must still report its
    state's finite residual."""
    X, y = _xor(300, 0.2, seed=7)
    K = DensePrior((ConstantKernel(4.0) * RBF(0.5))(X), check=False)
    lik = NoisyStep(0.2)
    strategy = InferenceStrategy(stages=("ep", "damped"), max_iter=100)
    assert strategy.damping == AdaptiveDamping(start=0.5, block=50)
    res = run_chain(K, y, lik, strategy)
    tried = {
        name: (converged, n_iter, resid) for name, converged, n_iter, resid in res.methods_tried
    }
    assert not tried["damped"][0] and tried["damped"][1] > 0
    assert np.isfinite(tried["damped"][2])
    assert "final residual inf" not in res.message
    # the state kept is the one with the smallest reported residual, and that residual is its own
    assert res.method_used == min(tried, key=lambda name: tried[name][2])
    np.testing.assert_allclose(
        tried[res.method_used][2], _moment_matching_residual(res, y, lik), rtol=1e-6
    )


@functools.cache
def _stress():
    return load_benchmark("stress", "_stress_step_noise")


def test_stress_step_noise_cells_and_run():
    """benchmarks/stress.py --step-noise: the quick cells hold the data set above, and a
    small run counts every candidate on every cell."""
    stress = _stress()
    quick = stress.step_noise_cells(quick=True)
    assert len(quick) == 20 and quick == stress.step_noise_cells(quick=True)
    assert ("xor", 0.2, 0.2, 300, 7, 4.0, 0.5) in quick
    X, y = stress.step_noise_data("xor", 300, 0.2, 7)
    X0, y0 = _xor(300, 0.2, seed=7)
    np.testing.assert_array_equal(X, X0)
    np.testing.assert_array_equal(y, y0)
    assert 0.1 < np.mean(y != np.where(X[:, 0] * X[:, 1] > 0, 1.0, -1.0)) < 0.3
    cells = [("smooth", 0.1, 0.1, 30, 0, 1.0, 1.0), ("xor", 0.2, 0.2, 30, 1, 1.0, 1.0)]
    table = stress.run_step_noise(cells, ("ep", "damped 0.8"), max_iter=30)
    assert len(table) == 4
    for row in table.values():
        assert row["runs"] == 1 and 0 <= row["converged"] <= 1
        assert 1 <= row["sweeps"] <= 30 and row["seconds"] > 0
    assert "| xor 20% n=30 s2=1 ell=1 | ep | 1 |" in stress.format_step_noise(table)


def test_stress_step_noise_classifier_repeats_time_the_fastest_run(monkeypatch):
    """--repeats: candidate "classifier" runs the probit and step fits that many times in
    turn and divides the fastest step run by the fastest probit run."""
    stress = _stress()
    seen, times = [], iter([0.5, 2.0, 0.25, 3.0, 0.4, 1.5])  # probit, step, probit, ...
    fit = stress._fit_classifier

    def timed(X, y, **params):
        seen.append(params.get("likelihood", "probit"))
        _, est, warned = fit(X, y, **params)
        return next(times), est, warned

    monkeypatch.setattr(stress, "_fit_classifier", timed)
    cells = [("xor", 0.2, 0.2, 30, 1, 1.0, 1.0)]
    table = stress.run_step_noise(cells, ("classifier",), repeats=3)
    assert seen == ["probit", "step"] * 3
    (row,) = table.values()
    assert row["runs"] == 1 and row["seconds"] == 1.5 and row["ratios"] == [1.5 / 0.25]
    assert "| 6 | 6 |" in stress.format_step_noise(table)


def test_stress_step_noise_sparse_classifier_fits_both_with_inducing_points(monkeypatch):
    """Candidate "sparse classifier": the step fit and its probit fit both with
    inducing_points=64, random_state=0."""
    stress = _stress()
    seen = []

    def recorded(X, y, **params):
        seen.append(params)
        est = stress.GPClassifier(**params, optimizer=None).fit(X, y)
        return 1.0 if "likelihood" in params else 2.0, est, False

    monkeypatch.setattr(stress, "_fit_classifier", recorded)
    table = stress.run_step_noise([("xor", 0.2, 0.2, 80, 1, 1.0, 1.0)], ("sparse classifier",))
    common = {"inducing_points": 64, "random_state": 0}
    assert seen == [common, {"likelihood": "step", "label_noise": 0.2, **common}]
    (row,) = table.values()
    assert row["converged"] == 1 and row["ratios"] == [0.5]


def test_stress_config_option_sets_robustep_config_for_the_run():
    """--config NAME=VALUE (JSON values, as the robustep command's --set): the run is under
    robustep.config(NAME=VALUE); a malformed pair or a bad setting is a usage error."""
    import argparse

    from robustep import get_config

    stress, parser = _stress(), argparse.ArgumentParser()
    with stress._settings(parser, ["search_first_step=null", "search_tol=0.02"]):
        assert get_config().search_first_step is None and get_config().search_tol == 0.02
    assert get_config().search_first_step == 0.25
    with stress._settings(parser, []):
        assert get_config().search_first_step == 0.25
    for bad in ("search_first_step", "nonsense=1", "search_first_step=-1", "search_tol=[1"):
        with pytest.raises(SystemExit):
            stress._settings(parser, [bad])


def test_default_chain_converges_on_every_quick_step_cell():
    """The quick cells of benchmarks/stress.py --step-noise (XOR with 20% flips, the smooth
    boundary with 10%, n in {200, 300}, five seeds, ConstantKernel(4) * RBF(0.5)): the
    default chain converges on each, at EP's fixed point (stages 1-2) where it did before
    the power stage, and no run reaches the double loop."""
    stress = _stress()
    for cell in stress.step_noise_cells(quick=True):
        boundary, flip, eps, n, seed, variance, ell = cell
        X, y = stress.step_noise_data(boundary, n, flip, seed)
        K = DensePrior((ConstantKernel(variance) * RBF(ell))(X), check=False)
        res = auto_expectation_propagation(K, y, NoisyStep(eps))
        assert res.converged, (cell, res.methods_tried)
        assert res.method_used in ("ep", "damped", "power"), (cell, res.methods_tried)


def test_sparse_step_classifier_converges_on_the_quick_cells():
    """GPClassifier(likelihood="step", inducing_points=64) with its defaults (inducing
    inputs optimised, α = 0.5) on the quick cells of benchmarks/stress.py --step-noise
    (seeds 5 and 6): every fit converges without a warning, with the kernel optimised
    (docs/reliability.md, "The sparse step classifier")."""
    stress = _stress()
    for cell in stress.step_noise_cells(quick=True, seeds=(5, 6)):
        boundary, flip, eps, n, seed = cell[:5]
        X, y = stress.step_noise_data(boundary, n, flip, seed)
        _, est, warned = stress._fit_classifier(
            X, y, likelihood="step", label_noise=eps, inducing_points=64, random_state=0
        )
        assert est.converged_ and not warned, (cell, est.method_used_)
        assert est.inducing_power_ == 0.5 and est.method_used_ in ("accelerated", "damped")
        assert est.optimizer_result_.success and est.optimizer_result_.moved, cell


def test_power_stage_result_says_power():
    """XOR, 20% flips, label noise 0.1 at ConstantKernel(1) * RBF(1): parallel EP, damped EP
    and the double loop do not converge, power EP does; the result says which (a
    different approximation)."""
    X, y = _xor(200, 0.2, seed=8)
    K = DensePrior((ConstantKernel(1.0) * RBF(1.0))(X), check=False)
    res = auto_expectation_propagation(K, y, NoisyStep(0.1))
    assert res.converged and res.method_used == "power"
    assert [(name, conv) for name, conv, _, _ in res.methods_tried] == [
        ("ep", False),
        ("damped", False),
        ("double_loop", False),
        ("power", True),
    ]
    # a fixed point of power EP (alpha 0.5): one more power-EP sweep moves nothing
    again = expectation_propagation(
        K, y, NoisyStep(0.1), power=0.5, init=res, max_iter=1, double_loop=False
    )
    assert again.converged


def _step_cell(boundary, flip, n, seed):
    X, y = _stress().step_noise_data(boundary, n, flip, seed)
    return DensePrior((ConstantKernel(1.0) * RBF(1.0))(X), check=False), y, NoisyStep(flip)


def _ep_and_damped(trial=None, **changes):
    strategy = InferenceStrategy.auto(1000, trial_damping=trial)
    return dataclasses.replace(strategy, stages=("ep", "damped"), **changes)


def test_trial_damping_finds_the_same_fixed_point_in_fewer_sweeps():
    """XOR, 20% flips, n = 100 (seed 0): stage "ep" fails; damping 0.5 converges in less
    than half the sweeps of damping 0.8, to the same fixed point."""
    K, y, lik = _step_cell("xor", 0.2, 100, 0)
    plain = run_chain(K, y, lik, _ep_and_damped())
    trial = run_chain(K, y, lik, _ep_and_damped(trial=0.5))
    assert plain.converged and trial.converged
    assert plain.method_used == trial.method_used == "damped"
    assert trial.methods_tried[1][2] < 0.5 * plain.methods_tried[1][2]
    np.testing.assert_allclose(trial.log_Z, plain.log_Z, rtol=1e-5)
    np.testing.assert_allclose(trial.mean, plain.mean, rtol=1e-3, atol=1e-3)


def test_trial_damping_that_hovers_falls_back_to_the_stage_damping():
    """The smooth boundary, 10% flips, n = 100 (seed 0): damping 0.5 hovers and is stopped
    by the hover rule; damping 0.8 from the stage's start then converges, and the stage's
    sweeps count both runs."""
    K, y, lik = _step_cell("smooth", 0.1, 100, 0)
    plain = run_chain(K, y, lik, _ep_and_damped())
    trial = run_chain(K, y, lik, _ep_and_damped(trial=0.5))
    assert plain.converged and trial.converged and trial.method_used == "damped"
    extra = trial.methods_tried[1][2] - plain.methods_tried[1][2]
    assert 2 * 20 <= extra < 1000  # the hover rule needs two windows of 20 sweeps
    np.testing.assert_allclose(trial.log_Z, plain.log_Z, rtol=1e-5)


def test_hover_callback_forgets_the_start():
    """A residual that first rises above its start and then falls steadily is not stopped
    (a stall rule from the first sweep would be); one that hovers is, once a window's
    smallest residual is not 10% below the previous window's."""
    falling = hover_callback(10)
    residuals = [20.0, 60.0] + [100.0 * 0.9**k for k in range(100)]
    assert not any(falling({"residual": r}) for r in residuals)
    stall = stall_callback(10, min_sweeps=10)
    assert any(stall({"iteration": k, "residual": r}) for k, r in enumerate(residuals))
    hovering = hover_callback(10)
    stops = [hovering({"residual": 30.0 + 10.0 * (k % 3)}) for k in range(40)]
    assert stops.index(True) == 19


def test_damped_tol_and_reported_tolerance():
    """Stage "damped" stops at ``damped_tol`` and the result says which tolerance it met;
    stage "ep" keeps the run's tol."""
    K, y, lik = _step_cell("xor", 0.2, 100, 0)
    loose = run_chain(K, y, lik, _ep_and_damped(damped_tol=1e-2))
    tight = run_chain(K, y, lik, _ep_and_damped())
    assert loose.converged and loose.method_used == "damped" and loose.tol == 1e-2
    assert tight.tol == 1e-4 and loose.n_iter < tight.n_iter
    assert 1e-4 < _moment_matching_residual(loose, y, lik) < 1e-2
    K, y, lik = _step_cell("xor", 0.2, 100, 3)
    res = run_chain(K, y, lik, _ep_and_damped(damped_tol=1e-2))
    assert res.method_used == "ep" and res.tol == 1e-4


def test_resume_begins_at_the_stage_the_warm_start_converged_in():
    """With ``resume`` a warm start that converged in stage "damped" skips stage "ep";
    without it, or from a plain pair of site arrays, every stage runs again."""
    K, y, lik = _step_cell("xor", 0.2, 100, 0)
    first = run_chain(K, y, lik, _ep_and_damped())
    assert first.method_used == "damped"
    resumed = run_chain(K, y, lik, _ep_and_damped(resume=True), init=first)
    assert [name for name, *_ in resumed.methods_tried] == ["damped"]
    again = run_chain(K, y, lik, _ep_and_damped(), init=first)
    assert [name for name, *_ in again.methods_tried][0] == "ep"
    sites = (first.site_precision, first.site_shift)
    pair = run_chain(K, y, lik, _ep_and_damped(resume=True), init=sites)
    assert [name for name, *_ in pair.methods_tried][0] == "ep"


def test_warm_start_is_a_light_copy_that_resumes_alike():
    """chain.warm_start keeps the sites, moments, converged and method_used of a result and
    drops its posterior factors and history; a run resumed from it equals one resumed from
    the result itself, and the result is not changed."""
    from robustep.ep.chain import warm_start

    K, y, lik = _step_cell("xor", 0.2, 100, 0)
    first = run_chain(K, y, lik, _ep_and_damped())
    light = warm_start(first)
    assert light.posterior is None and light.history == {} and light.site_info == {}
    assert light.method_used == first.method_used and light.converged == first.converged
    np.testing.assert_array_equal(light.site_precision, first.site_precision)
    np.testing.assert_array_equal(light.site_shift, first.site_shift)
    assert first.posterior is not None and first.history
    K2 = DensePrior(0.9 * K.K, check=False)
    a = run_chain(K2, y, lik, _ep_and_damped(resume=True), init=first)
    b = run_chain(K2, y, lik, _ep_and_damped(resume=True), init=light)
    assert a.methods_tried == b.methods_tried
    np.testing.assert_array_equal(a.site_precision, b.site_precision)
    assert a.log_Z == b.log_Z


def _step_data(boundary, n, flip, seed):
    X, y = _stress().step_noise_data(boundary, n, flip, seed)
    return X, np.where(y > 0, 1, 0)


def test_step_evidence_and_predictions_do_not_depend_on_the_amplitude():
    """ε + (1 - 2ε) Θ(y f) depends on f only through its sign: with the kernel amplitude
    scaled by 10, EP's log evidence and the predictive probabilities are unchanged (the
    probit's are not); the fitted step classifier keeps the amplitude fixed at its start."""
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel

    from robustep import GPClassifier

    X, y = _step_data("xor", 150, 0.2, 0)
    X_test = np.random.default_rng(1).uniform(-1.0, 1.0, size=(50, 2))
    fits = {}
    for likelihood, eps in (("step", 0.2), ("probit", 0.0)):
        for s2 in (0.5, 5.0):
            kernel = ConstantKernel(s2) * RBF(0.5)
            fits[likelihood, s2] = GPClassifier(
                kernel, likelihood=likelihood, label_noise=eps, optimizer=None, tol=1e-9
            ).fit(X, y)
    small, large = fits["step", 0.5], fits["step", 5.0]
    assert small.converged_ and large.converged_
    np.testing.assert_allclose(
        small.log_marginal_likelihood_value_, large.log_marginal_likelihood_value_, rtol=1e-8
    )
    np.testing.assert_allclose(small.predict_proba(X_test), large.predict_proba(X_test),
                               atol=1e-8)  # fmt: skip
    # the sites scale with the amplitude: tau~ / 10, nu~ / sqrt(10)
    np.testing.assert_allclose(large.site_precision_ * 10.0, small.site_precision_,
                               rtol=1e-5, atol=1e-8)  # fmt: skip
    probit_small, probit_large = fits["probit", 0.5], fits["probit", 5.0]
    gap = probit_small.log_marginal_likelihood_value_ - probit_large.log_marginal_likelihood_value_
    assert abs(gap) > 1.0
    # the evidence search: the amplitude fixed (one coordinate, the length-scale), the
    # probit's searched
    step = GPClassifier(likelihood="step", label_noise=0.2).fit(X, y)
    amplitude = step.kernel_.k1
    assert amplitude.hyperparameter_constant_value.fixed and amplitude.constant_value == 1.0
    assert step.kernel_.theta.shape == (1,) and step.optimizer_result_.moved
    assert GPClassifier().fit(X, y).kernel_.theta.shape == (2,)
    # a kernel given without a search keeps its amplitude free
    fixed = GPClassifier(ConstantKernel(2.0) * RBF(0.5), likelihood="step", label_noise=0.2,
                         optimizer=None).fit(X, y)  # fmt: skip
    assert fixed.kernel_.theta.shape == (2,)


def _step_chain_without_acceleration(monkeypatch):
    """Make the classifier run the step likelihood's chain without stage "accelerated"
    (parallel EP, then damping 0.5 and 0.8): the reference path of the evidence search."""
    from robustep.ep import strategy

    auto = strategy.InferenceStrategy.auto.__func__

    def without_acceleration(cls, max_iter=1000, trial_damping=None, accelerate=False, **kw):
        return auto(cls, max_iter, trial_damping=trial_damping, accelerate=False, **kw)

    monkeypatch.setattr(strategy.InferenceStrategy, "auto", classmethod(without_acceleration))


@pytest.mark.parametrize("seed", [0, 1])
def test_step_classifier_optimum_is_the_step_evidence_optimum(monkeypatch, seed):
    """XOR, 20% flips, n = 150: the fitted length-scale is a stationary point of the step
    EP evidence (central finite difference at full EP tolerance below 2% of the slope of
    about 2 nats per unit log length-scale at the start: the search's evaluations run to
    ``search_tol`` in units of q's marginals, so their gradients carry that error), the
    search converged, and it is the optimum that the chain without stage "accelerated"
    finds."""
    from robustep import GPClassifier

    X, y = _step_data("xor", 150, 0.2, seed)
    est = GPClassifier(likelihood="step", label_noise=0.2).fit(X, y)
    assert est.converged_ and est.method_used_ == "accelerated"
    # L-BFGS-B's own test, or the stall rule (search_stall_evaluations) near the optimum
    message = est.optimizer_result_.message
    assert est.optimizer_result_.success
    assert "CONVERGENCE" in message or "without progress" in message, message
    theta, h = est.kernel_.theta, 1e-3
    slope = est.log_marginal_likelihood(theta + h) - est.log_marginal_likelihood(theta - h)
    slope /= 2.0 * h
    start_slope = est.log_marginal_likelihood(np.zeros(1), eval_gradient=True)[1][0]
    assert abs(start_slope) > 1.0 and abs(slope) < 2e-2 * abs(start_slope)
    _step_chain_without_acceleration(monkeypatch)
    plain = GPClassifier(likelihood="step", label_noise=0.2).fit(X, y)
    assert plain.converged_ and plain.method_used_ != "accelerated"
    np.testing.assert_allclose(est.kernel_.theta, plain.kernel_.theta, atol=5e-3)
    # both final fits stop at tol = 1e-4 (marginal units), at different points within it
    np.testing.assert_allclose(est.log_marginal_likelihood_value_,
                               plain.log_marginal_likelihood_value_, atol=3e-4)  # fmt: skip


def test_step_classifier_converges_without_a_warning_on_xor_with_20_percent_flips():
    """XOR, 20% flips, n = 200 (seed 5 of benchmarks/stress.py --step-noise), ε = 0.2 and
    the defaults: no ConvergenceWarning, converged in stage "accelerated", and the kernel
    optimised (the length-scale moves from 1 to about 0.68; L-BFGS-B's far first trial
    point, a probe without restarts, may fail and the search backs off from it)."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    from robustep import GPClassifier

    X, y = _step_data("xor", 200, 0.2, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est = GPClassifier(likelihood="step", label_noise=0.2).fit(X, y)
    assert est.converged_ and est.method_used_ == "accelerated"
    assert est.optimizer_result_.moved and est.optimizer_result_.n_failures <= 1
    np.testing.assert_allclose(est.kernel_.k2.length_scale, 0.683, rtol=1e-2)


def test_sparse_step_model_keeps_the_amplitude_fixed_in_its_search():
    """FITC's prior Q + diag(K - Q) scales with the kernel amplitude as K does, so the
    sparse step model's evidence does not depend on it either (with fixed inducing inputs,
    amplitude 0.5 against 5: equal evidence and predictions); its search keeps the
    amplitude at its start and moves the length-scale only.  The sparse probit model
    still searches both."""
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel

    from robustep import GPClassifier

    X, y = _step_data("xor", 150, 0.2, 0)
    X_test = np.random.default_rng(1).uniform(-1.0, 1.0, size=(40, 2))
    Z = X[::6]
    fits = [
        GPClassifier(
            ConstantKernel(s2) * RBF(0.5),
            likelihood="step",
            label_noise=0.2,
            inducing_points=Z,
            optimizer=None,
            tol=1e-9,
        ).fit(X, y)  # fmt: skip
        for s2 in (0.5, 5.0)
    ]
    np.testing.assert_allclose(fits[0].log_marginal_likelihood_value_,
                               fits[1].log_marginal_likelihood_value_, rtol=1e-6)  # fmt: skip
    np.testing.assert_allclose(fits[0].predict_proba(X_test), fits[1].predict_proba(X_test),
                               atol=1e-6)  # fmt: skip
    step = GPClassifier(likelihood="step", label_noise=0.2, inducing_points=Z,
                        optimize_inducing=False).fit(X, y)  # fmt: skip
    amplitude = step.kernel_.k1
    assert amplitude.hyperparameter_constant_value.fixed and amplitude.constant_value == 1.0
    assert step.kernel_.theta.shape == (1,) and step.optimizer_result_.moved
    probit = GPClassifier(inducing_points=Z, optimize_inducing=False).fit(X, y)
    assert probit.kernel_.theta.shape == (2,)


def test_a_stuck_step_search_suggests_a_larger_label_noise():
    """Where every evaluation of the step classifier's search fails (XOR with 20% flips
    fitted with label_noise 0.1, no fallback starts, no search on power EP's evidence),
    the warning adds the step model's
    advice; the probit classifier's advice does not carry it."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    from robustep import GPClassifier, config
    from robustep.estimators._binary_dense import SEARCH_ADVICE, STEP_SEARCH_ADVICE

    stress = load_benchmark("stress", "_stress_step_advice")
    X, y = stress.step_noise_data("xor", 80, 0.2, 1)
    no_fallbacks = config(search_fallback_starts=0, search_power_fallback=False)
    with no_fallbacks, warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        est = GPClassifier(likelihood="step", label_noise=0.1).fit(X, y)
    stuck = [str(w.message) for w in seen if issubclass(w.category, ConvergenceWarning)
             and "evaluations of the evidence search failed" in str(w.message)]  # fmt: skip
    assert len(stuck) == 1 and "a larger label_noise" in stuck[0]
    assert est.optimizer_result_.n_failures == est.optimizer_result_.n_evaluations
    assert est._state.advice == SEARCH_ADVICE + STEP_SEARCH_ADVICE
    assert GPClassifier().fit(X, y)._state.advice == SEARCH_ADVICE


def test_a_step_search_where_ep_fails_everywhere_runs_on_power_eps_evidence():
    """search_power_fallback: where every evaluation of the step classifier's EP search
    fails (the data of the test above, no fallback starts), the search runs again on
    power EP's evidence.  The fit converges without a warning, reports power EP
    (method_used_, optimizer_result_.approximation), and its kernel is the maximum of
    power EP's evidence (alpha 0.5) over length-scales, computed by the engine's plain
    power EP to 1e-9 on a grid: the search's log evidence is within 1e-3 of the grid's
    largest and the engine's value at the fitted kernel."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    from robustep import GPClassifier, config

    stress = load_benchmark("stress", "_stress_power_search")
    X, y = stress.step_noise_data("xor", 80, 0.2, 1)
    with config(search_fallback_starts=0), warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est = GPClassifier(likelihood="step", label_noise=0.1).fit(X, y)
    search = est.optimizer_result_
    assert est.converged_ and est.method_used_ == "power"
    assert search.approximation == "power" and search.moved and search.n_starts == 2
    assert 1 <= search.n_failures < search.n_evaluations
    assert "then on power's evidence" in search.message

    def power_log_Z(ell):
        K = RBF(ell)(X)
        res = expectation_propagation(K, y, NoisyStep(0.1), power=0.5, damping=0.5,
                                      max_iter=5000, tol=1e-9)  # fmt: skip
        assert res.converged
        return res.log_Z

    ell = est.kernel_.k2.length_scale
    grid = ell * np.exp(np.linspace(-0.5, 0.5, 11))
    values = [power_log_Z(g) for g in grid]
    assert int(np.argmax(values)) not in (0, len(grid) - 1)  # an interior maximum
    assert est.log_marginal_likelihood_value_ > max(values) - 1e-3
    assert est.log_marginal_likelihood_value_ == pytest.approx(power_log_Z(ell), abs=1e-3)
    # the fitted model's evidence function is power EP's too
    assert est.log_marginal_likelihood(est.kernel_.theta) == pytest.approx(
        est.log_marginal_likelihood_value_, abs=1e-3
    )


def test_the_power_eps_search_first_step_is_at_most_the_fallback_step(monkeypatch):
    """The search on power EP's evidence bounds its first start's first step by the
    shorter of search_first_step and the fallback starts' step (search_fallback_first_step,
    half a unit); the EP search before it by search_first_step alone; both bound their
    fallback starts' by the fallback step."""
    from robustep import GPClassifier, config
    from robustep.estimators import _binary_dense

    seen = []
    search = _binary_dense.maximise_evidence

    def spy(*args, first_step=None, fallback_first_step=None, **kwargs):
        seen.append((first_step, fallback_first_step))
        return search(*args, first_step=first_step, fallback_first_step=fallback_first_step,
                      **kwargs)  # fmt: skip

    monkeypatch.setattr(_binary_dense, "maximise_evidence", spy)
    X, y = load_benchmark("stress", "_stress_power_first_step").step_noise_data("xor", 80, 0.2, 1)
    cases = (
        (0.25, 0.5, [(0.25, 0.5), (0.25, 0.5)]),
        (None, 0.5, [(None, 0.5), (0.5, 0.5)]),
        (0.25, 0.1, [(0.25, 0.1), (0.1, 0.1)]),
    )
    for first, fallback, expected in cases:
        seen.clear()
        settings = {"search_first_step": first, "search_fallback_first_step": fallback}
        with config(search_fallback_starts=0, **settings):
            est = GPClassifier(likelihood="step", label_noise=0.1).fit(X, y)
        assert est.optimizer_result_.approximation == "power"
        assert seen == expected


def test_power_ep_evidence_gradient_on_the_step_likelihood():
    """The search on power EP's evidence uses EP's explicit gradient with the power's
    fixed point (robustep.ep.log_Z_gradient): it matches central finite differences of
    the engine's power-EP log Z (alpha 0.5) in the log length-scale on the label-noise
    step likelihood."""
    from robustep.ep import log_Z_gradient

    X, y = _xor(40, 0.2, 3)
    lik, h = NoisyStep(0.1), 1e-4

    def run(log_ell, init=None):
        return expectation_propagation(RBF(np.exp(log_ell))(X), y, lik, power=0.5,
                                       damping=0.5, max_iter=5000, tol=1e-11,
                                       init=init)  # fmt: skip

    res = run(np.log(0.6))
    assert res.converged
    _, dK = RBF(0.6)(X, eval_gradient=True)
    grad = log_Z_gradient(res, dK, lik, y)[0][0]
    fd = (run(np.log(0.6) + h, res).log_Z - run(np.log(0.6) - h, res).log_Z) / (2 * h)
    assert grad == pytest.approx(fd, rel=1e-4, abs=1e-6)


def test_accelerated_power_ep_finds_power_eps_fixed_point():
    """accelerated_expectation_propagation(power=0.5) converges to the fixed point of the
    engine's damped power EP (sites and log Z), in fewer sweeps."""
    from robustep.ep.accelerated import accelerated_expectation_propagation

    X, y = _xor(120, 0.2, 2)
    K = RBF(0.5)(X)
    plain = expectation_propagation(K, y, NoisyStep(0.1), power=0.5, damping=0.5,
                                    max_iter=5000, tol=1e-10)  # fmt: skip
    fast = accelerated_expectation_propagation(K, y, NoisyStep(0.1), power=0.5, tol=1e-10)
    assert plain.converged and fast.converged and fast.n_iter < plain.n_iter
    np.testing.assert_allclose(fast.site_precision, plain.site_precision, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(fast.site_shift, plain.site_shift, rtol=1e-6, atol=1e-7)
    assert fast.log_Z == pytest.approx(plain.log_Z, abs=1e-8)
    ep = accelerated_expectation_propagation(K, y, NoisyStep(0.1), tol=1e-10)
    assert abs(ep.log_Z - fast.log_Z) > 1e-2  # power 1 is EP's fixed point, another one


def test_power_stage_accelerated_then_plain():
    """PowerStage(accelerate=True): the chain's power stage runs Anderson-accelerated power
    EP first and reports it; where that fails, plain damped sweeps from the same start
    unless plain=False.  The power-EP strategies of a search and its final fit."""
    X, y = _xor(120, 0.2, 2)
    K = RBF(0.5)(X)
    base = InferenceStrategy.auto(1000, accelerate=True, tol_units="marginal")
    fit = base.power_fit()
    assert fit.stages == ("power",) and fit.power.accelerate and fit.power.plain
    res = run_chain(K, y, NoisyStep(0.1), fit, tol=1e-8)
    assert res.converged and res.method_used == "power"
    direct = expectation_propagation(K, y, NoisyStep(0.1), power=0.5, damping=0.5,
                                     max_iter=5000, tol=1e-10)  # fmt: skip
    assert res.log_Z == pytest.approx(direct.log_Z, abs=1e-6)
    searched = base.power_search(damped_tol=3e-2, probe=True)
    assert searched.stages == ("power",) and not searched.power.plain
    assert searched.accelerated.restarts == 0 and searched.damped_tol == 3e-2
    # a budget too small for the accelerated run: plain sweeps follow only with plain
    short = dataclasses.replace(fit, max_iter=3)
    with_plain = run_chain(K, y, NoisyStep(0.1), short, tol=1e-8)
    without = run_chain(K, y, NoisyStep(0.1), dataclasses.replace(
        short, power=dataclasses.replace(short.power, plain=False)), tol=1e-8)  # fmt: skip
    assert not with_plain.converged and not without.converged
    assert with_plain.n_iter > without.n_iter
    assert "Anderson-accelerated power EP" in with_plain.message
    for bad in ({"accelerate": 1}, {"plain": "no"}):
        with pytest.raises(TypeError, match="PowerStage"):
            dataclasses.replace(fit.power, **bad)
