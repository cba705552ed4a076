"""Anderson-accelerated parallel EP (robustep.ep.accelerated) and its stage in the chain."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

from _benchmarks import load_benchmark
from robustep.ep import InferenceStrategy, expectation_propagation, run_chain
from robustep.ep.accelerated import accelerated_expectation_propagation
from robustep.ep.chain import failure_message
from robustep.ep.strategy import AcceleratedStage
from robustep.likelihoods import NoisyStep, Probit
from robustep.posterior import DensePrior


def _xor(n, flip, seed, ell=1.0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 1.0, size=(n, 2))
    y = np.where(X[:, 0] * X[:, 1] > 0, 1.0, -1.0)
    flipped = rng.random(n) < flip
    y[flipped] = -y[flipped]
    return DensePrior((ConstantKernel(1.0) * RBF(ell))(X), check=False), y


def _tilted_residual(res, y, lik):
    """Largest change one undamped moment-matching update would make (computed here)."""
    _, m_hat, v_hat = lik.tilted_moments(y, res.cavity_mean, res.cavity_var)
    prec = 1.0 / v_hat - 1.0 / res.cavity_var
    shift = m_hat / v_hat - res.cavity_mean / res.cavity_var
    return max(np.max(np.abs(prec - res.site_precision)), np.max(np.abs(shift - res.site_shift)))


def test_same_fixed_point_as_damped_ep_in_a_fraction_of_the_sweeps():
    """XOR, 20% flips, n = 200 (seed 5), ConstantKernel(1) * RBF(0.7): damped EP at 0.8
    needs hundreds of sweeps; the accelerated run reaches the same fixed point (log Z,
    posterior mean, sites) in under a quarter of them."""
    K, y = _xor(200, 0.2, 5, ell=0.7)
    lik = NoisyStep(0.2)
    damped = expectation_propagation(K, y, lik, damping=0.8, double_loop=False, max_iter=2000)
    fast = accelerated_expectation_propagation(K, y, lik)
    assert damped.converged and fast.converged
    assert damped.n_iter > 200 and fast.n_iter < damped.n_iter / 4
    assert "accelerated" in fast.history["phase"]
    assert _tilted_residual(fast, y, lik) < 1e-4
    np.testing.assert_allclose(fast.log_Z, damped.log_Z, rtol=1e-7)
    np.testing.assert_allclose(fast.mean, damped.mean, atol=1e-4)
    np.testing.assert_allclose(fast.site_precision, damped.site_precision, atol=1e-3, rtol=1e-4)


def test_extrapolation_measures_residuals_in_the_tolerance_units(monkeypatch):
    """With ``tol_units="marginal"`` the least-squares problem of the mixing weights
    measures each site's residual by the change it makes to its marginal: the largest
    entry of the transformed residual is :func:`marginal_residual`, and site units leave
    it unchanged.  XOR, 20% flips, n = 400, length-scale 1: the run converges in under
    half the sweeps of the same run with site-unit weights, to the same fixed point."""
    from robustep.ep import accelerated
    from robustep.ep.engine import marginal_residual

    K, y = _xor(400, 0.2, 0, ell=1.0)
    lik = NoisyStep(0.2)
    runs = {}
    for units in ("marginal", "sites"):
        captured = []
        original = accelerated._in_tolerance_units

        def capture(ctx, ev, v, captured=captured, original=original):
            captured.append((ctx.tol_units, ev, v, original(ctx, ev, v)))
            return captured[-1][-1]

        monkeypatch.setattr(accelerated, "_in_tolerance_units", capture)
        runs[units] = accelerated_expectation_propagation(K, y, lik, tol_units=units)
        monkeypatch.undo()
        units_seen, ev, v, scaled = captured[-1]
        assert units_seen == units
        if units == "sites":
            assert scaled is v
            continue
        n = ev.precision.size
        for row, out in zip(np.atleast_2d(v), np.atleast_2d(scaled), strict=True):
            expected = marginal_residual(ev.post.mean, ev.post.var, row[:n], row[n:])
            assert np.isclose(np.max(np.abs(out)), expected, rtol=1e-12)
    marginal = runs["marginal"]
    monkeypatch.setattr(accelerated, "_in_tolerance_units", lambda ctx, ev, v: v)
    site_weights = accelerated_expectation_propagation(K, y, lik, tol_units="marginal")
    assert marginal.converged and site_weights.converged
    assert marginal.n_iter < site_weights.n_iter / 2
    np.testing.assert_allclose(marginal.log_Z, site_weights.log_Z, atol=1e-4)
    np.testing.assert_allclose(marginal.log_Z, runs["sites"].log_Z, atol=1e-4)


def test_warm_start_and_probit():
    """A warm start from the fixed point converges at once; on the probit likelihood the
    accelerated run finds parallel EP's fixed point."""
    K, y = _xor(100, 0.2, 0, ell=0.5)
    lik = NoisyStep(0.2)
    first = accelerated_expectation_propagation(K, y, lik, tol=1e-8)
    again = accelerated_expectation_propagation(K, y, lik, init=first)
    assert first.converged and again.converged and again.n_iter == 0
    plain = expectation_propagation(K, y, Probit(), tol=1e-8)
    fast = accelerated_expectation_propagation(K, y, Probit(), tol=1e-8)
    assert fast.converged
    np.testing.assert_allclose(fast.log_Z, plain.log_Z, rtol=1e-9)
    np.testing.assert_allclose(fast.mean, plain.mean, atol=1e-6)


def test_a_warm_start_that_fails_starts_again_from_zero_sites():
    """Sites from a far-away length-scale (ell = 0.12 for ell = 0.7): the warm-started run
    either converges or is repeated from zero sites with the damped warm-up; either way the
    result is the fixed point found from zero sites."""
    K_far, y = _xor(200, 0.2, 5, ell=0.12)
    K, _ = _xor(200, 0.2, 5, ell=0.7)
    lik = NoisyStep(0.2)
    far = accelerated_expectation_propagation(K_far, y, lik)
    cold = accelerated_expectation_propagation(K, y, lik)
    warm = accelerated_expectation_propagation(K, y, lik, init=far, warm_window=2)
    assert far.converged and cold.converged and warm.converged
    # warm_window=2 gives up on the warm start after a few extrapolated sweeps; the 10
    # damped sweeps of the warm-up from zero sites follow
    phases = list(warm.history["phase"])
    start = phases.index("parallel")
    assert 0 < start <= 6 and phases[start : start + 10] == ["parallel"] * 10
    assert phases[start + 10 :] and set(phases[start + 10 :]) == {"accelerated"}
    np.testing.assert_allclose(warm.log_Z, cold.log_Z, rtol=1e-7)
    # with restarts=0 the warm run that stops is the result: no run from zero sites
    alone = accelerated_expectation_propagation(K, y, lik, init=far, warm_window=2, restarts=0)
    assert not alone.converged and "parallel" not in alone.history["phase"]
    assert alone.n_iter == start


def test_search_evaluations_restart_once():
    """AcceleratedStage: two runs from zero sites after a stopped run in a final fit, one in
    a search evaluation (search_stages); the chain passes them to the stage."""
    from robustep.ep.strategy import AcceleratedStage

    strategy = InferenceStrategy.auto(1000, accelerate=True)
    assert strategy.accelerated.restarts == 2
    assert strategy.search_stages(1e-2).accelerated.restarts == 1
    with pytest.raises(ValueError, match="search_restarts"):
        AcceleratedStage(search_restarts=-1)
    K_far, y = _xor(200, 0.2, 5, ell=0.12)
    K, _ = _xor(200, 0.2, 5, ell=0.7)
    lik = NoisyStep(0.2)
    far = accelerated_expectation_propagation(K_far, y, lik)
    stage = AcceleratedStage(warm_window=2, restarts=0)
    chain = dataclasses.replace(strategy, stages=("accelerated",), accelerated=stage)
    res = run_chain(K, y, lik, chain, init=far)
    assert not res.converged and "parallel" not in res.history["phase"]


def test_early_stop_rules():
    """The divergence rule compares each sweep after the warm-up with the smallest residual
    since the warm-up ended; the start patience stops a run whose first sweeps are none 10%
    below its start."""
    from robustep.ep.accelerated import _Stops

    stops = _Stops(20.0, None)
    # warm-up of 2 sweeps: their residuals (and the start's) do not count
    assert stops.status([1.0, 5.0], 0.01, 2) is None
    assert stops.status([1.0, 5.0, 19.0 * 5.0], 0.01, 2) is None
    assert stops.status([1.0, 5.0, 0.5, 10.0], 0.01, 2) == "diverged"  # 20 x 0.5
    assert stops.status([1.0, 5.0, 0.5, 9.99], 0.01, 2) is None
    # no warm-up: the start's residual is the first smallest
    assert stops.status([25.0], 1.0, 0) == "diverged"
    # a start with zero residual (its invalid cavities kept it from converging) is no scale
    assert stops.status([25.0], 0.0, 0) is None
    # start patience: the third sweep decides
    stops = _Stops(None, 3)
    assert stops.status([0.95, 0.92], 1.0, 0) is None
    assert stops.status([0.95, 0.92, 0.91], 1.0, 0) == "stalled"
    assert stops.status([0.95, 0.85, 0.91], 1.0, 0) is None
    assert stops.from_zero().start_patience is None
    assert _Stops(None, None).status([1e9], 1.0, 0) is None
    for bad in ((1.0, None), (None, 0), (None, 1.5)):
        with pytest.raises(ValueError):
            _Stops(*bad)


def test_a_diverging_run_stops_and_is_reported(monkeypatch):
    """A warm start from a far length-scale (site units, tol 1e-4): the same sweeps as
    without the rule up to the first residual that reaches the multiple of the smallest
    before it (the start's included), where the run stops with status "diverged"; by
    default no rule applies."""
    from robustep.ep.accelerated import _Stops

    K_far, y = _xor(200, 0.2, 5, ell=0.12)
    K, _ = _xor(200, 0.2, 5, ell=0.7)
    lik = NoisyStep(0.2)
    far = accelerated_expectation_propagation(K_far, y, lik)
    options = {"init": far, "warm_window": 50, "restarts": 0, "max_iter": 40}
    free = accelerated_expectation_propagation(K, y, lik, **options)
    starts, status = [], _Stops.status

    def recorded(self, residuals, start, warmup):
        starts.append(start)
        return status(self, residuals, start, warmup)

    monkeypatch.setattr(_Stops, "status", recorded)
    stopped = accelerated_expectation_propagation(K, y, lik, divergence=3.0, **options)
    r = [starts[0], *free.history["residual"]]  # the start's residual, then each sweep's
    k = next(j for j in range(1, len(r)) if r[j] >= 3.0 * min(r[:j]))
    assert 1 < k < free.n_iter and stopped.n_iter == k
    assert not stopped.converged and "(diverged)" in stopped.message
    assert list(stopped.history["residual"]) == r[1 : k + 1]
    # none of the first two sweeps is 10% below the start: stopped after two
    assert min(r[1:3]) >= 0.9 * r[0]
    patient = accelerated_expectation_propagation(K, y, lik, start_patience=2, **options)
    assert patient.n_iter == 2 and "(stalled)" in patient.message


def test_the_chain_passes_the_early_stops(monkeypatch):
    """AcceleratedStage: divergence 20 for every run of the step chain, start patience 8
    for a probe's runs only; the chain passes both to the engine."""
    from robustep.ep import chain

    strategy = InferenceStrategy.auto(1000, accelerate=True)
    stage = strategy.accelerated
    assert (stage.divergence, stage.start_patience, stage.probe_start_patience) == (20.0, None, 8)
    assert strategy.search_stages(1e-2).accelerated.start_patience is None
    assert strategy.search_stages(1e-2, probe=True).accelerated.start_patience == 8
    for bad in ({"divergence": 1.0}, {"divergence": "20"}, {"start_patience": 0},
                {"probe_start_patience": 2.5}):  # fmt: skip
        with pytest.raises(ValueError):
            AcceleratedStage(**bad)
    seen = {}

    def engine(*args, **kwargs):
        seen.update(kwargs)
        return accelerated_expectation_propagation(*args, **kwargs)

    monkeypatch.setattr(chain, "accelerated_expectation_propagation", engine)
    K, y = _xor(60, 0.2, 0, ell=0.5)
    run_chain(K, y, NoisyStep(0.2), strategy.search_stages(1e-2, probe=True))
    assert (seen["divergence"], seen["start_patience"], seen["restarts"]) == (20.0, 8, 0)


def test_budget_and_hover_rule():
    """``max_factorisations`` ends the run at its latest state, not converged; a run that
    hovers stops after two windows, not at ``max_iter``."""
    K, y = _xor(200, 0.2, 5, ell=0.7)
    lik = NoisyStep(0.2)
    res = accelerated_expectation_propagation(K, y, lik, max_factorisations=15)
    assert not res.converged and res.n_factorisations <= 15
    assert np.all(np.isfinite(res.mean))
    # a tolerance no run reaches: the hover rule stops each run once the residual, at
    # rounding level, makes no new smallest value for two windows; the run from zero
    # sites is repeated twice, with 20 and then 40 damped warm-up sweeps
    res = accelerated_expectation_propagation(K, y, lik, tol=1e-300, window=5, max_iter=1000)
    assert not res.converged and res.n_iter < 400
    assert res.history["residual"][-1] < 1e-6
    phases = "".join("d" if p == "parallel" else "a" for p in res.history["phase"])
    assert [len(run) for run in phases.split("a") if run] == [10, 20, 40]


def test_accelerated_stage_options_are_validated():
    assert AcceleratedStage() == AcceleratedStage(10, 10, 0.6, 20, 10)
    for bad in ({"memory": 0}, {"warmup": -1}, {"window": 0}, {"warm_window": 1.5},
                {"damping": 1.0}):  # fmt: skip
        with pytest.raises(ValueError):
            AcceleratedStage(**bad)
    with pytest.raises(TypeError):
        InferenceStrategy(accelerated=(5, 20))
    with pytest.raises(TypeError, match="reuse_differences must be True or False"):
        AcceleratedStage(reuse_differences="yes")
    with pytest.raises(ValueError):
        InferenceStrategy(stages=("accelerated", "nope"))


def test_strategy_with_the_accelerated_stage():
    """auto(accelerate=True) replaces stage "ep"; search_stages keeps it alone (a failed
    evaluation is abandoned, not passed on to stage "damped") and gives it the search
    tolerance; resume keeps it even after a stage "damped" convergence; the failure
    message names it."""
    strategy = InferenceStrategy.auto(1000, trial_damping=0.5, accelerate=True)
    assert strategy.stages == ("accelerated", "damped", "double_loop", "power")
    assert InferenceStrategy.auto(1000).stages[0] == "ep"
    search = strategy.search_stages(damped_tol=1e-2)
    assert search.stages == ("accelerated",) and search.resume
    assert InferenceStrategy.auto(1000).search_stages().stages == ("ep", "damped")
    K, y = _xor(100, 0.2, 0, ell=0.5)
    lik = NoisyStep(0.2)
    first = run_chain(K, y, lik, search)
    assert first.converged and first.method_used == "accelerated" and first.tol == 1e-2
    assert 1e-4 < _tilted_residual(first, y, lik) < 1e-2
    first.method_used = "damped"  # as if stage "accelerated" had failed there
    again = run_chain(K, y, lik, search, init=first)
    assert [name for name, *_ in again.methods_tried][0] == "accelerated"
    plain = dataclasses.replace(search, stages=("ep", "damped"))
    skipped = run_chain(K, y, lik, plain, init=first)
    assert [name for name, *_ in skipped.methods_tried] == ["damped"]
    message = failure_message([("accelerated", False, 40, 2.0)], 1e-4, strategy)
    assert "Anderson-accelerated parallel EP (memory 10) (40 iterations" in message


def test_a_warm_start_with_an_invalid_posterior_keeps_its_halved_sites():
    """Warm sites whose negative precisions are too strong for the prior (the converged
    sites with the negative ones scaled by 50): the negative sites are halved until the
    posterior is valid, and the run goes on from there as a warm start (no damped warm-up
    from zero sites), to the fixed point found from zero sites."""
    K, y = _xor(200, 0.2, 5, ell=0.7)
    lik = NoisyStep(0.2)
    cold = accelerated_expectation_propagation(K, y, lik)
    precision, shift = cold.site_precision.copy(), cold.site_shift.copy()
    negative = precision < 0
    assert negative.any()
    precision[negative] *= 50.0
    shift[negative] *= 50.0
    with pytest.raises(Exception, match="indefinite|positive definite|invalid"):
        K.posterior(precision, shift)
    warm = accelerated_expectation_propagation(K, y, lik, init=(precision, shift))
    assert warm.converged and warm.history["phase"][0] == "accelerated"
    np.testing.assert_allclose(warm.log_Z, cold.log_Z, rtol=1e-7)


def test_an_invalid_plain_proposal_is_evaluated_once(monkeypatch):
    """With no residual differences in memory the Anderson point is the plain proposal,
    which pulling towards the proposal does not move: an invalid one costs one
    factorisation, not four; with differences, the point and its three pulls are tried."""
    from robustep.ep import accelerated
    from robustep.ep.engine import _Context, _evaluate
    from robustep.ep.updates import moment_matching_update
    from robustep.linalg import InvalidSiteConfiguration

    K, y = _xor(60, 0.2, 1)
    ctx = _Context(K, y, NoisyStep(0.2), moment_matching_update, 1.0, 0.0, 1e-4, 10, None)
    ev = _evaluate(ctx, np.zeros(60), np.zeros(60))
    calls = []

    def invalid(ctx, precision, shift):
        calls.append(precision.copy())
        raise InvalidSiteConfiguration("test")

    monkeypatch.setattr(accelerated, "_evaluate", invalid)
    memory = accelerated._Memory(5)
    assert accelerated._extrapolate(ctx, ev, memory) is None
    assert len(calls) == 1
    np.testing.assert_array_equal(calls[0], ev.proposal_precision)
    # a second state gives one difference: the Anderson point and its pulls
    other = _evaluate(ctx, 0.5 * ev.proposal_precision, 0.5 * ev.proposal_shift)
    calls.clear()
    assert accelerated._extrapolate(ctx, other, memory) is None
    assert len(calls) == accelerated._SHRINKS + 1
    assert len({c.tobytes() for c in calls}) == len(calls)


def test_ep_from_power_eps_fixed_point():
    """AcceleratedStage.after_power: where stage "accelerated" fails from zero sites and
    stage "power" converges, the stage runs again from power EP's sites; on the
    misspecified step model (20% flips, label noise 0.1, n = 300, length-scale 0.25) it
    reaches EP's fixed point there (benchmarks/step_fixed_points.py --n 300): the result
    is EP's (power 1, converged, the evidence of a direct run from power EP's sites, not
    power EP's), reported as "accelerated" after both runs; with after_power=False the
    chain ends in power EP."""
    K, y = _xor(300, 0.2, 5, ell=0.25)
    lik = NoisyStep(0.1)
    base = InferenceStrategy.auto(1000, accelerate=True, tol_units="marginal")
    strategy = dataclasses.replace(base, stages=("accelerated", "power"))
    res = run_chain(K, y, lik, strategy)
    assert [t[0] for t in res.methods_tried] == ["accelerated", "power", "accelerated"]
    assert [t[1] for t in res.methods_tried] == [False, True, True]
    assert res.method_used == "accelerated" and res.converged and res.power == 1.0
    assert res.n_iter == sum(t[2] for t in res.methods_tried)
    power = expectation_propagation(K, y, lik, power=0.5, damping=0.5, tol_units="marginal")
    direct = accelerated_expectation_propagation(
        K, y, lik, init=(power.site_precision, power.site_shift), tol_units="marginal",
        restarts=0, divergence=20.0,
    )  # fmt: skip
    np.testing.assert_allclose(res.log_Z, direct.log_Z, rtol=1e-10)
    assert abs(res.log_Z - power.log_Z) > 1e-3  # another approximation's evidence
    off = dataclasses.replace(
        strategy, accelerated=dataclasses.replace(strategy.accelerated, after_power=False)
    )
    kept = run_chain(K, y, lik, off)
    assert kept.method_used == "power" and [t[0] for t in kept.methods_tried] == [
        "accelerated",
        "power",
    ]
    with pytest.raises(TypeError, match="after_power"):
        AcceleratedStage(after_power="yes")


def test_stage_engine_options_are_the_engine_keywords(monkeypatch):
    """AcceleratedStage.engine_options: each field the engine takes, under its own name;
    the chain passes them on (a stage with non-default values reaches the engine as set)."""
    import inspect

    from robustep.ep import chain

    stage = AcceleratedStage(memory=3, warmup=4, damping=0.3, window=7, warm_window=5,
                             restarts=1, divergence=9.0, start_patience=6,
                             reuse_differences=False)  # fmt: skip
    options = stage.engine_options()
    assert options == {"memory": 3, "warmup": 4, "damping": 0.3, "window": 7,
                       "warm_window": 5, "restarts": 1, "divergence": 9.0,
                       "start_patience": 6, "reuse_differences": False}  # fmt: skip
    assert set(options) <= set(inspect.signature(accelerated_expectation_propagation).parameters)
    seen = {}

    def engine(*args, **kwargs):
        seen.update(kwargs)
        return accelerated_expectation_propagation(*args, **kwargs)

    K, y = _xor(40, 0.2, 0, ell=0.5)
    strategy = dataclasses.replace(
        InferenceStrategy.auto(1000, accelerate=True), stages=("accelerated",), accelerated=stage
    )
    monkeypatch.setattr(chain, "accelerated_expectation_propagation", engine)
    run_chain(K, y, NoisyStep(0.2), strategy)
    assert {key: seen[key] for key in options} == options


def test_a_warm_start_reuses_its_runs_differences():
    """reuse_differences: a run warm-started from a nearby length-scale's result starts
    its memory from that run's differences; it reaches the same fixed point as with an
    empty memory (to its tolerance), in fewer sweeps on a chain of nearby length-scales
    of the smooth-boundary step cell (20% flips, n = 200, seed 5)."""
    X, y = load_benchmark("stress", "_stress_accelerated").step_noise_data("smooth", 200, 0.2, 5)
    lik = NoisyStep(0.2)
    options = {"tol": 1e-2, "tol_units": "marginal", "max_iter": 100}
    first = accelerated_expectation_propagation(RBF(0.779)(X), y, lik, **options)
    dX, dF = first.anderson_differences
    assert first.converged and dX.shape == dF.shape and dX.shape[1] == 2 * 200
    assert 1 <= dX.shape[0] <= 10
    lengths = (0.72, 0.69, 0.7)
    priors = [RBF(ell)(X) for ell in lengths]
    references = [accelerated_expectation_propagation(K, y, lik, tol=1e-10,
                                                      tol_units="marginal")
                  for K in priors]  # fmt: skip
    sweeps = {True: 0, False: 0}
    for reuse in (True, False):
        warm = first
        for K, reference in zip(priors, references, strict=True):
            res = accelerated_expectation_propagation(
                K, y, lik, init=warm, reuse_differences=reuse, **options
            )
            assert res.converged
            sweeps[reuse] += res.n_iter
            # the same fixed point: refined to 1e-10 from either, the same sites
            fine = accelerated_expectation_propagation(K, y, lik, init=res, tol=1e-10,
                                                       tol_units="marginal")  # fmt: skip
            np.testing.assert_allclose(fine.log_Z, reference.log_Z, rtol=1e-9)
            np.testing.assert_allclose(fine.mean, reference.mean, atol=1e-7)
            warm = res
    assert sweeps[True] < sweeps[False], sweeps


def test_reused_differences_need_the_same_shape_and_a_warm_start():
    """Differences of another size, or a start from zero sites, leave the memory empty:
    the run is the run without them."""
    K, y = _xor(60, 0.2, 1, ell=0.6)
    lik = NoisyStep(0.2)
    first = accelerated_expectation_propagation(K, y, lik, tol=1e-3)
    other = accelerated_expectation_propagation(*_xor(50, 0.2, 1, ell=0.6), lik, tol=1e-3)
    warm = dataclasses.replace(first)
    warm.anderson_differences = other.anderson_differences  # (m, 100): not this run's
    with_other = accelerated_expectation_propagation(K, y, lik, init=warm, tol=1e-8,
                                                     reuse_differences=True)  # fmt: skip
    plain = accelerated_expectation_propagation(K, y, lik, init=warm, tol=1e-8)
    np.testing.assert_array_equal(with_other.site_precision, plain.site_precision)
    assert with_other.n_iter == plain.n_iter
    # a (precision, shift) pair carries no differences
    pair = accelerated_expectation_propagation(
        K, y, lik, init=(first.site_precision, first.site_shift), tol=1e-8,
        reuse_differences=True,
    )  # fmt: skip
    np.testing.assert_array_equal(pair.site_precision, plain.site_precision)
    # a run from zero sites ignores them (its warm-up sets the sites' signs first)
    zero = dataclasses.replace(first, site_precision=np.zeros(60), site_shift=np.zeros(60))
    zero.anderson_differences = first.anderson_differences
    cold = accelerated_expectation_propagation(K, y, lik, init=zero, tol=1e-8,
                                               reuse_differences=True)  # fmt: skip
    np.testing.assert_array_equal(
        cold.site_precision, accelerated_expectation_propagation(K, y, lik, tol=1e-8).site_precision
    )


def test_warm_start_copies_keep_the_differences():
    from robustep.ep.chain import warm_start

    K, y = _xor(60, 0.2, 1, ell=0.6)
    strategy = dataclasses.replace(InferenceStrategy.auto(1000, accelerate=True),
                                   stages=("accelerated",))  # fmt: skip
    res = run_chain(K, y, NoisyStep(0.2), strategy)
    light = warm_start(res)
    assert light.posterior is None
    for a, b in zip(light.anderson_differences, res.anderson_differences, strict=True):
        np.testing.assert_array_equal(a, b)
