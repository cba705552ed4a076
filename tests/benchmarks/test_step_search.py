"""benchmarks/step_search.py: its variants replace one method for a run and restore it."""

from __future__ import annotations

import numpy as np
import pytest

from _benchmarks import load_benchmark
from robustep.ep import InferenceStrategy
from robustep.estimators import _binary_dense


def _module():
    return load_benchmark("step_search")


def test_variants_change_the_search_and_restore_it():
    step_search = _module()
    assert len(step_search.cells()) == 42
    assert step_search.cells(True) == [("xor", 2000, 0.2, 5, 0.2), ("smooth", 2000, 0.1, 5, 0.1)]
    assert step_search.cells("smooth30") == [("smooth", 2000, 0.3, 5, 0.3)]
    other = step_search.cells(seeds=(8, 9))
    assert len(other) == 28 and {cell[3] for cell in other} == {8, 9}
    with pytest.raises(ValueError, match="large cell"):
        step_search.cells("ring10")
    chain = InferenceStrategy.auto(100, trial_damping=0.5, accelerate=True, tol_units="marginal")
    saved = (_binary_dense.DenseBinaryCore.infer, _binary_dense.DenseBinaryCore.optimise)
    with step_search.variant("former-search", []):
        assert chain.search_stages(1e-2).stages == ("accelerated", "damped")
    with step_search.variant("site-units", []):
        assert InferenceStrategy.auto(100, accelerate=True).tol_units == "sites"
    from robustep.ep import accelerated

    scaled = accelerated._in_tolerance_units
    with step_search.variant("site-weights", []):
        v = np.ones(4)
        assert accelerated._in_tolerance_units(None, None, v) is v
    assert accelerated._in_tolerance_units is scaled
    from robustep.estimators import _search

    minimise = _search.minimise
    with step_search.variant("normalised", []):
        assert _search.minimise is not minimise
    assert _search.minimise is minimise
    with step_search.variant("no-retry", []):
        assert _binary_dense.maximise_evidence.keywords == {"retry": False}
    assert _binary_dense.maximise_evidence is _search.maximise_evidence
    from robustep import get_config

    # the variants that set one robustep.config setting: (variant, setting, its value
    # inside, the default restored after)
    for name, setting, inside, default in (
        ("last-warm", "search_warm_jump", None, 1.0),
        ("nearest-warm", "search_warm_jump", 1e-12, 1.0),
        ("no-stall", "search_stall_evaluations", None, 5),
        ("raw-fallback-step", "search_fallback_first_step", None, 0.5),
        ("unit-fallback-step", "search_fallback_first_step", 1.0, 0.5),
        ("no-stones", "search_stone_step", None, 0.175),
        ("raw-first-step", "search_first_step", None, 0.25),
    ):
        with step_search.variant(name, []):
            assert getattr(get_config(), setting) == inside, name
        assert getattr(get_config(), setting) == default, name
    with step_search.variant("fresh-memory", []):
        assert not InferenceStrategy.auto(100, accelerate=True).accelerated.reuse_differences
    assert InferenceStrategy.auto(100, accelerate=True).accelerated.reuse_differences
    with step_search.variant("raw-fallback-step+no-stall", []):  # variants combine
        settings = get_config()
        assert settings.search_fallback_first_step is None
        assert settings.search_stall_evaluations is None
    assert get_config().search_stall_evaluations == 5
    assert get_config().search_fallback_first_step == 0.5
    with pytest.raises(ValueError, match="variant"), step_search.variant("no-stall+nope", []):
        pass
    assert get_config().search_stall_evaluations == 5
    with step_search.variant("no-restarts", []):
        stage = InferenceStrategy.auto(100, accelerate=True).accelerated
        assert (stage.restarts, stage.search_restarts) == (0, 0)
    with step_search.variant("search-restarts-2", []):
        stage = InferenceStrategy.auto(100, accelerate=True).search_stages().accelerated
        assert stage.restarts == 2
    stage = InferenceStrategy.auto(100, accelerate=True)
    assert (stage.accelerated.restarts, stage.search_stages().accelerated.restarts) == (2, 1)
    assert stage.search_stages(probe=True).accelerated.restarts == 0
    with step_search.variant("no-probes", []):
        assert stage.search_stages(1e-2, probe=True).accelerated.restarts == 1
    assert stage.search_stages(1e-2, probe=True).accelerated.restarts == 0
    with step_search.variant("former-stage", []):
        stage = InferenceStrategy.auto(100, accelerate=True).accelerated
        assert (stage.memory, stage.warmup) == (5, 20)
    stage = InferenceStrategy.auto(100, accelerate=True).accelerated
    assert (stage.memory, stage.warmup) == (10, 10)
    for name, off in (("no-early-stops", (None, None)), ("no-divergence", (None, 8)),
                      ("no-probe-patience", (20.0, None))):  # fmt: skip
        with step_search.variant(name, []):
            stage = InferenceStrategy.auto(100, accelerate=True).accelerated
            assert (stage.divergence, stage.probe_start_patience) == off
    stage = InferenceStrategy.auto(100, accelerate=True).accelerated
    assert (stage.divergence, stage.probe_start_patience) == (20.0, 8)
    assert chain.search_stages(1e-2).stages == ("accelerated",)
    assert InferenceStrategy.auto(100, tol_units="marginal").tol_units == "marginal"
    assert (_binary_dense.DenseBinaryCore.infer,
            _binary_dense.DenseBinaryCore.optimise) == saved  # fmt: skip
    with pytest.raises(ValueError, match="variant"), step_search.variant("nope", []):
        pass
    assert _binary_dense.DenseBinaryCore.infer is saved[0]


def test_runs_are_recorded_per_fit():
    """One small fit under a variant records its search evaluations and final fit."""
    from robustep import GPClassifier

    step_search = _module()
    X, y = step_search._stress().step_noise_data("xor", 80, 0.2, 5)
    runs = []
    with step_search.variant("nearest-warm", runs):
        GPClassifier(likelihood="step", label_noise=0.2).fit(X, y)
    assert any(search for search, *_ in runs) and not runs[-1][0]
    assert all(isinstance(sweeps, int) and sweeps >= 0 for *_, sweeps in runs)
    assert np.all([stage in ("accelerated", "damped", "double_loop", "power", "ep")
                   for _, stage, _, _ in runs])  # fmt: skip


def test_normalised_keeps_the_optimum_and_shortens_the_first_step():
    """A steep concave quadratic (gradient 40 at the start): L-BFGS-B's first trial is the
    raw gradient, 40 units away; under variant "normalised" it is at most one unit away,
    and the search ends at the same maximum with the evidence on its own scale."""
    from robustep.estimators._search import Evaluation, maximise_evidence

    step_search = _module()
    for name, first_step in (("current", 40.0), ("normalised", 1.0)):
        calls = []

        def steep(x, context, calls=calls):
            calls.append(x.copy())
            d = x[0] - 2.0
            return Evaluation(-10.0 * d * d - 5.0, np.array([-20.0 * d]), state=x.copy())

        with step_search.variant(name, []):
            res = maximise_evidence(steep, np.zeros(1), [(-100.0, 100.0)])
        assert abs(calls[1][0]) == pytest.approx(first_step)
        np.testing.assert_allclose(res.x, [2.0], atol=1e-5)
        assert res.log_evidence == pytest.approx(-5.0, abs=1e-8)


def test_early_stop_counts():
    """The --residuals table's rules on hand-made traces: the divergence ratio counts from
    the end of the warm-up; the start patience stops a warm probe whose first sweeps are
    none 10% below its start."""
    step_search = _module()
    warm = {"residuals": [1.0, 0.95, 0.97, 0.92, 0.5], "warmup": 0}
    assert step_search._divergence_stop(warm, 1.02) == 2
    assert step_search._divergence_stop(warm, 2.0) is None
    assert step_search._start_patience_stop(warm, 3) == 3
    assert step_search._start_patience_stop(warm, 4) is None  # 0.5 at the fourth sweep
    cold = {"residuals": [0.1, 5.0, 40.0, 4.0, 90.0], "warmup": 2}
    assert step_search._worst_rise(cold) == [(3, 0.1), (4, 22.5)]
    assert step_search._divergence_stop(cold, 20) == 4


def test_residual_traces_of_one_fit(monkeypatch, capsys):
    """--residuals on one small fit: every run of stage "accelerated" is traced with its
    start's residual first, the table is printed, and the engine is restored."""
    from robustep.ep import accelerated, chain

    step_search = _module()
    monkeypatch.setattr(
        step_search, "cells", lambda large=False, seeds=(5,): [("xor", 80, 0.2, 5, 0.2)]
    )
    saved = (chain.accelerated_expectation_propagation, accelerated._iterate)
    traces = step_search.residual_traces()
    assert traces and all(len(t["residuals"]) >= 1 for t in traces)
    assert any(t["status"] == "converged" for t in traces)
    assert (chain.accelerated_expectation_propagation, accelerated._iterate) == saved
    step_search.residuals()
    out = capsys.readouterr().out
    assert "runs of stage accelerated" in out and "| divergence | 20 |" in out
    assert "| probe start patience | 8 |" in out


def test_retried_plain_proposal_variant_evaluates_it_four_times(monkeypatch):
    """Variant "retried-plain-proposal": with an empty memory and an invalid plain proposal
    the stage's single evaluation is followed by three more of the same point; with
    differences in memory nothing is added; the stage's own function is restored."""
    from sklearn.gaussian_process.kernels import RBF

    from robustep.ep import accelerated
    from robustep.ep.engine import _Context, _evaluate
    from robustep.ep.updates import moment_matching_update
    from robustep.likelihoods import NoisyStep
    from robustep.linalg import InvalidSiteConfiguration
    from robustep.posterior import DensePrior

    step_search = _module()
    X, y = step_search._stress().step_noise_data("xor", 40, 0.2, 5)
    prior = DensePrior(RBF(1.0)(X) + 1e-8 * np.eye(40), check=False)
    ctx = _Context(prior, y, NoisyStep(0.2), moment_matching_update, 1.0, 0.0, 1e-4, 10, None)
    ev = _evaluate(ctx, np.zeros(40), np.zeros(40))
    other = _evaluate(ctx, 0.5 * ev.proposal_precision, 0.5 * ev.proposal_shift)
    calls = []

    def invalid(ctx, precision, shift):
        calls.append(precision.copy())
        raise InvalidSiteConfiguration("test")

    original = accelerated._extrapolate
    with step_search.variant("retried-plain-proposal", []):
        monkeypatch.setattr(accelerated, "_evaluate", invalid)
        memory = accelerated._Memory(5)
        assert accelerated._extrapolate(ctx, ev, memory) is None
        assert len(calls) == 1 + accelerated._SHRINKS
        assert all(np.array_equal(c, ev.proposal_precision) for c in calls)
        calls.clear()
        assert accelerated._extrapolate(ctx, other, memory) is None  # one difference now
        assert len(calls) == 1 + accelerated._SHRINKS
        assert len({c.tobytes() for c in calls}) == len(calls)  # the point and its pulls
    assert accelerated._extrapolate is original


def test_run_counts_factorisations(monkeypatch):
    """run() counts each fit's posterior factorisations (at least one per sweep) and
    restores the engine's counter."""
    from robustep.ep import engine

    step_search = _module()
    monkeypatch.setattr(
        step_search, "cells", lambda large=False, seeds=(5,): [("xor", 80, 0.2, 5, 0.2)]
    )
    count = engine._Context.count_factorisation
    (fit,) = step_search.run("current", verbose=False)
    assert engine._Context.count_factorisation is count
    assert fit["factorisations"] >= sum(sweeps for *_, sweeps in fit["runs"]) > 0


def test_damped_fallback_variant_runs_damped_sweeps_after_a_failed_run():
    """damped-fallback: the chain's accelerated runs are wrapped while the variant lasts;
    a run that fails is followed by plain damped EP, whose converged result replaces it
    with both runs' sweeps (the smooth-boundary fixed point at length-scale 0.88 that
    stage "accelerated" misses from zero sites, docs/reliability.md)."""
    from sklearn.gaussian_process.kernels import RBF

    from robustep.ep import chain
    from robustep.likelihoods import NoisyStep

    step_search = _module()
    original = chain.accelerated_expectation_propagation
    with step_search.variant("damped-fallback", []):
        assert chain.accelerated_expectation_propagation is not original
    assert chain.accelerated_expectation_propagation is original
    X, y = load_benchmark("stress").step_noise_data("smooth", 300, 0.2, 6)
    K = RBF(0.88)(X) + 1e-8 * np.eye(300)
    options = dict(max_iter=1000, tol=1e-4, tol_units="marginal", restarts=2,
                   divergence=20.0)  # fmt: skip
    alone = original(K, y, NoisyStep(0.2), **options)
    assert not alone.converged
    res = step_search.damped_fallback(original)(K, y, NoisyStep(0.2), **options)
    assert res.converged and res.n_iter > alone.n_iter
    # power EP's runs are left alone, converged or not
    power = step_search.damped_fallback(original)(K, y, NoisyStep(0.2), power=0.5, **options)
    plain = original(K, y, NoisyStep(0.2), power=0.5, **options)
    assert (power.n_iter, power.converged) == (plain.n_iter, plain.converged)
    np.testing.assert_array_equal(power.site_precision, plain.site_precision)


_CELL = ("xor", 80, 0.2, 5, 0.2)


def _one_cell_with_counter(monkeypatch):
    """step_search restricted to one small cell, its data, and a list whose entry counts
    the posterior factorisations made from now on."""
    from robustep.ep import engine

    step_search = _module()
    monkeypatch.setattr(step_search, "cells", lambda large=False, seeds=(5,): [_CELL])
    count, seen = engine._Context.count_factorisation, [0]

    def counted(ctx):
        seen[0] += 1
        return count(ctx)

    X, y = step_search._stress().step_noise_data(*_CELL[:4])
    return (
        step_search,
        X,
        y,
        seen,
        lambda: monkeypatch.setattr(engine._Context, "count_factorisation", counted),
    )


def test_probit_counts_are_the_probit_fits_factorisations(monkeypatch):
    """--probit: each fit also records the default probit fit's factorisations on its data,
    the same number an independent count of that fit gives; the summary line reports the
    ratios and names the fits above the bound."""
    from robustep import GPClassifier

    step_search, X, y, seen, start_counting = _one_cell_with_counter(monkeypatch)
    (fit,) = step_search.run("current", verbose=False, probit=True)
    start_counting()
    GPClassifier().fit(X, y)
    assert fit["probit_factorisations"] == seen[0] > 0
    ratio = fit["factorisations"] / fit["probit_factorisations"]
    line = step_search.probit_line([fit], bound=ratio / 2)
    assert f"median {ratio:.2f}x" in line and "above" in line and "1 of 1 (xor n=80" in line
    assert "0 of 1" in step_search.probit_line([fit], bound=ratio * 2)


def test_probit_start_searches_from_the_probit_kernel(monkeypatch):
    """--probit-start: the step fit's search starts at the probit fit's kernel (the same
    factorisations and optimum as an independent fit from that kernel, not the default
    start's), and the second summary line counts the probit fit in the step fit's cost."""
    from robustep import GPClassifier

    step_search, X, y, seen, start_counting = _one_cell_with_counter(monkeypatch)
    (fit,) = step_search.run("current", verbose=False, probit_start=True)
    (default,) = step_search.run("current", verbose=False, probit=True)
    kernel = GPClassifier().fit(X, y).kernel_
    start_counting()
    est = GPClassifier(likelihood="step", label_noise=_CELL[4], kernel=kernel).fit(X, y)
    assert fit["factorisations"] == seen[0] > 0
    assert fit["ell"] == pytest.approx(float(est.kernel_.k2.length_scale), rel=1e-12)
    assert fit["probit_factorisations"] == default["probit_factorisations"]
    assert (fit["factorisations"], fit["ell"]) != (default["factorisations"], default["ell"])
    total = (fit["factorisations"] + fit["probit_factorisations"]) / fit["probit_factorisations"]
    line = step_search.probit_line([fit], with_probit=True)
    assert f"step and probit / probit per fit: median {total:.2f}x" in line
