"""InferenceStrategy, AdaptiveDamping and DoubleLoop (ep/strategy.py) and the chain that
runs them (ep/chain.py)."""

from __future__ import annotations

import types
import warnings

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

import robustep
import robustep.ep as ep_package
from robustep.ep import AdaptiveDamping, DoubleLoop, InferenceStrategy, run_chain
from robustep.ep.strategy import STAGES, DampingSchedule, PowerStage
from robustep.likelihoods import Probit


# ------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"stages": ("ep", "newton")}, "stages must be distinct names"),
        ({"stages": ("ep", "ep")}, "stages must be distinct names"),
        ({"stages": ()}, "stages must be distinct names"),
        ({"stages": "ep"}, "stages must be a tuple"),
        ({"max_iter": 0}, "max_iter must be a positive integer"),
        ({"max_iter": 2.5}, "max_iter must be a positive integer"),
        ({"max_factorisations": -1}, "max_factorisations must be None or an integer"),
        ({"patience": 0}, "patience must be a positive integer"),
        ({"fallback": DoubleLoop("off")}, "fallback is the double-loop stage"),
        ({"fallback": DoubleLoop("stop_on_stall")}, "fallback is the double-loop stage"),
        ({"fallback_factorisations": -1}, "fallback_factorisations must be None or an"),
        ({"fallback_factorisations": 2.0}, "fallback_factorisations must be None or an"),
        ({"damped_tol": 0.0}, "damped_tol must be None or a number > 0"),
        ({"damped_tol": "1e-2"}, "damped_tol must be None or a number > 0"),
        ({"trial_damping": 1.0}, r"trial_damping must be None or in \[0, 1\)"),
        ({"trial_damping": True}, r"trial_damping must be None or in \[0, 1\)"),
    ],
)
def test_strategy_rejects_bad_fields(kwargs, match):
    with pytest.raises(ValueError, match=match):
        InferenceStrategy(**kwargs)


def test_strategy_rejects_wrong_types():
    with pytest.raises(TypeError, match="damping must be an AdaptiveDamping"):
        InferenceStrategy(damping=0.5)
    with pytest.raises(TypeError, match="single_run must be a DoubleLoop"):
        InferenceStrategy(single_run="never")
    with pytest.raises(TypeError, match="power must be a PowerStage"):
        InferenceStrategy(power=0.5)
    with pytest.raises(TypeError, match="resume must be a bool"):
        InferenceStrategy(resume=1)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"power": 0.0}, r"power must be in \(0, 1\]"),
        ({"power": 1.5}, r"power must be in \(0, 1\]"),
        ({"power": True}, r"power must be in \(0, 1\]"),
        ({"damping": 1.0}, r"damping must be in \[0, 1\)"),
        ({"damping": -0.1}, r"damping must be in \[0, 1\)"),
    ],
)
def test_power_stage_rejects_bad_fields(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PowerStage(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"start": 1.0}, r"start must be in \[0, 1\)"),
        ({"start": -0.1}, r"start must be in \[0, 1\)"),
        ({"start": True}, r"start must be in \[0, 1\)"),
        ({"block": 0}, "block must be an integer >= 1"),
    ],
)
def test_adaptive_damping_rejects_bad_fields(kwargs, match):
    with pytest.raises(ValueError, match=match):
        AdaptiveDamping(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mode": "sometimes"}, "mode must be one of"),
        ({"mode": None}, "mode must be one of"),
        ({"n_parallel_init": -1}, "n_parallel_init must be an integer >= 0"),
        ({"max_inner": 0}, "max_inner must be an integer >= 1"),
    ],
)
def test_double_loop_rejects_bad_fields(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DoubleLoop(**kwargs)


def test_strategy_is_frozen():
    with pytest.raises(AttributeError):
        InferenceStrategy().max_iter = 5


# ----------------------------------------------------------------- constructors
def test_auto_constructor_is_the_estimators_chain():
    s = InferenceStrategy.auto(max_iter=300)
    assert s.stages == ("ep", "damped", "double_loop", "power") == STAGES
    assert s.max_iter == 300 and s.max_factorisations is None and s.patience == 20
    # plain sweeps at damping 0.8: one block as long as the budget
    assert s.damping == AdaptiveDamping(start=0.8, block=300)
    assert s.power == PowerStage(power=0.5, damping=0.5)
    assert s.fallback == DoubleLoop("after_init", n_parallel_init=10, max_inner=10)
    assert s.runs_double_loop
    assert s.fallback_factorisations == 600 == s.double_loop_factorisations
    # a method that runs the engine once gets the engine's defaults
    assert s.engine_options() == {
        "double_loop": None,
        "n_parallel_init": 10,
        "max_inner": 2,
        "max_iter": 300,
        "max_factorisations": None,
    }


def test_search_run_constructor_reads_the_config():
    s = InferenceStrategy.search_run()
    settings = robustep.get_config()
    assert s.stages == ("ep", "damped") and not s.runs_double_loop
    assert s.damping == AdaptiveDamping(start=0.8, block=30)
    assert s.max_iter == settings.search_max_iter == 30
    assert s.max_factorisations == settings.search_factorisations_per_sweep * 30 == 60
    options = s.engine_options()
    assert options["double_loop"] == "never" and options["max_factorisations"] == 60
    assert InferenceStrategy.search_run(7).max_factorisations == 14
    with robustep.config(search_max_iter=11, search_factorisations_per_sweep=3):
        s = InferenceStrategy.search_run()
    assert (s.max_iter, s.max_factorisations) == (11, 33)


def test_nested_ep_damping_starts_at_0_3():
    assert AdaptiveDamping.nested_ep() == AdaptiveDamping(start=0.3, block=50)


def test_double_loop_modes_translate_to_the_engine_argument():
    expected = {"on_stall": None, "after_init": True, "off": False, "stop_on_stall": "never"}
    for mode, engine_value in expected.items():
        options = DoubleLoop(mode, n_parallel_init=4, max_inner=3).engine_options()
        assert options == {"double_loop": engine_value, "n_parallel_init": 4, "max_inner": 3}
    assert [m for m in expected if DoubleLoop(m).runs] == ["on_stall", "after_init"]


# ------------------------------------------------------------ adaptive damping
def _result(change, n_iter, converged=False, n_factorisations=0, tag=None):
    return types.SimpleNamespace(
        history={"max_change": [change] * n_iter},
        n_iter=n_iter,
        converged=converged,
        n_factorisations=n_factorisations,
        site_precision=np.zeros(2),
        site_shift=np.zeros(2),
        tag=tag,
    )


def _toy(changes, converge_at=None, n_factorisations=0):
    """A run_block that returns the given last changes in turn and records its calls."""
    calls = []

    def run_block(damping, max_iter, init, max_factorisations):
        k = len(calls)
        calls.append((damping, max_iter, init, max_factorisations))
        return _result(changes[k], max_iter, k == converge_at, n_factorisations, tag=k)

    return run_block, calls


def test_damping_moves_halfway_to_one_after_a_block_without_progress():
    run_block, calls = _toy([1.0, 0.5, 0.7, 0.6, 0.4, 0.45])
    res = AdaptiveDamping(start=0.5, block=10).run(
        run_block, 55, init="first", warm_state=lambda r: r.tag
    )
    assert [c[0] for c in calls] == [0.5, 0.5, 0.5, 0.75, 0.875, 0.875]
    assert [c[1] for c in calls] == [10, 10, 10, 10, 10, 5]  # the last block is shorter
    assert [c[2] for c in calls] == ["first", 0, 1, 2, 3, 4]  # each from the last result
    assert res.tag == 5 and res.n_iter == 55


def test_schedule_alone_gives_the_same_sequence():
    schedule = DampingSchedule(AdaptiveDamping(start=0.3, block=4), max_iter=10)
    seen = []
    for change in [2.0, 3.0, 1.0]:
        damping, sweeps = schedule.next_block()
        seen.append((damping, sweeps))
        schedule.record(sweeps, change)
    assert seen == [(0.3, 4), (0.3, 4), (0.65, 2)]
    assert schedule.next_block() is None


def test_adaptive_damping_stops_at_convergence_and_at_an_empty_block():
    run_block, calls = _toy([1.0, 2.0, 3.0], converge_at=1)
    res = AdaptiveDamping(block=5).run(run_block, 100)
    assert len(calls) == 2 and res.converged and res.n_iter == 10

    calls = []

    def empty(damping, max_iter, init, max_factorisations):
        calls.append(damping)
        return _result(np.inf, 0)

    res = AdaptiveDamping().run(empty, 100)
    assert calls == [0.5] and res.n_iter == 0


def test_adaptive_damping_shares_the_factorisation_budget():
    run_block, calls = _toy([1.0, 2.0, 3.0, 4.0], n_factorisations=7)
    AdaptiveDamping(block=5).run(run_block, 100, max_factorisations=20)
    assert [c[3] for c in calls] == [20, 13, 6]  # the third leaves -1: no fourth block
    run_block, calls = _toy([1.0, 2.0, 3.0], n_factorisations=7)
    AdaptiveDamping(block=5).run(run_block, 15)
    assert [c[3] for c in calls] == [None, None, None]


def test_classifier_adaptive_damping_runs_the_schedule(monkeypatch):
    """GPClassifier(method="damped", damping="adaptive") calls the engine with the
    schedule's damping and block lengths, each block warm-started from the last."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(40, 1))
    y = np.where(X[:, 0] + 0.3 * rng.normal(size=40) > 0, 1, 0)
    calls = []
    engine = ep_package.expectation_propagation

    def spy(K, y, lik, **kw):
        res = engine(K, y, lik, **kw)
        calls.append((kw["damping"], kw["max_iter"], kw["init"], res, res.n_iter))
        return res

    monkeypatch.setattr(ep_package, "expectation_propagation", spy)
    clf = robustep.GPClassifier(
        ConstantKernel(1e4, "fixed") * RBF(1.0, "fixed"), method="damped",
        damping="adaptive", max_iter=160, tol=1e-12, optimizer=None,
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf.fit(X, y)
    assert len(calls) == 4 and calls[-1][0] > 0.5  # the damping moved
    schedule = AdaptiveDamping().schedule(160)
    for k, (damping, max_iter, init, res, n_iter) in enumerate(calls):
        assert (damping, max_iter) == schedule.next_block()
        schedule.record(n_iter, res.history["max_change"][-1])
        if k:
            np.testing.assert_array_equal(init[0], calls[k - 1][3].site_precision)
    assert calls[0][2] is None and clf.n_iter_ == sum(c[4] for c in calls) == 160


def test_nested_ep_adaptive_damping_starts_at_0_3():
    from robustep.estimators._multinomial import run_with_damping

    calls = []

    def run(damping, max_iter, init):
        calls.append((damping, max_iter, init))
        res = _result([1.0, 2.0, 3.0, 4.0][len(calls) - 1], max_iter)
        res.alpha, res.beta = len(calls), None
        return res

    res = run_with_damping(run, "adaptive", 120)
    assert [c[:2] for c in calls] == [(0.3, 50), (0.3, 50), (0.65, 20)]
    assert [c[2] for c in calls] == [None, (1, None), (2, None)]
    assert res.n_iter == 120
    assert run_with_damping(run, 0.2, 5).n_iter == 5 and calls[-1][:2] == (0.2, 5)


# ------------------------------------------------------------------ the chain
def _hard_probit():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(30, 1))
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    return (ConstantKernel(1e4) * RBF(1.0))(X), y


def test_chain_runs_the_strategy_stages_in_order():
    K, y = _hard_probit()
    s = InferenceStrategy(stages=("double_loop", "ep"), max_iter=1)
    res = run_chain(K, y, Probit(), s, tol=1e-12)
    assert [t[0] for t in res.methods_tried] == ["double_loop", "ep"]
    assert "double-loop algorithm (10 inner iterations)" in res.message
    s = InferenceStrategy(stages=("damped",), max_iter=1, fallback=DoubleLoop("after_init"))
    res = run_chain(K, y, Probit(), s, tol=1e-12)
    assert [t[0] for t in res.methods_tried] == ["damped"] and not res.converged


def test_double_loop_budget_is_the_smaller_one():
    assert InferenceStrategy().double_loop_factorisations is None
    assert InferenceStrategy(max_factorisations=9).double_loop_factorisations == 9
    s = InferenceStrategy(max_factorisations=9, fallback_factorisations=4)
    assert s.double_loop_factorisations == 4
    assert InferenceStrategy(fallback_factorisations=4).double_loop_factorisations == 4


def test_failure_message_names_each_stage_with_its_options():
    from robustep.ep.chain import failure_message

    tried = [(name, False, 3, 0.5) for name in STAGES]
    msg = failure_message(tried, 1e-4, InferenceStrategy.auto(100))
    assert "damped EP (damping 0.8)" in msg
    assert "power EP (alpha 0.5, damping 0.5; a different approximation)" in msg
    assert "double-loop algorithm (10 inner iterations)" in msg
    msg = failure_message(tried[1:2], 1e-4, InferenceStrategy(max_iter=100))
    assert "adaptive damping from 0.5" in msg


def test_chain_rejects_anything_but_a_strategy():
    K, y = _hard_probit()
    with pytest.raises(TypeError, match="InferenceStrategy"):
        run_chain(K, y, Probit(), {"max_iter": 1})


def test_chain_stage_budgets_come_from_the_strategy(monkeypatch):
    import robustep.ep.chain as chain

    K, y = _hard_probit()
    calls = []
    engine = chain.expectation_propagation

    def spy(K, y, lik, **kw):
        calls.append(kw)
        return engine(K, y, lik, **kw)

    monkeypatch.setattr(chain, "expectation_propagation", spy)
    s = InferenceStrategy(max_iter=3, max_factorisations=50, patience=2)
    run_chain(K, y, Probit(), s, tol=1e-12)
    assert all(c["max_factorisations"] is not None for c in calls)
    assert calls[0]["double_loop"] is False and calls[0]["max_iter"] == 3
    loops = [c for c in calls if c["double_loop"] is True]
    assert len(loops) == 1 and loops[0]["max_inner"] == 10
    assert calls.index(loops[0]) < calls.index([c for c in calls if c.get("power", 1.0) != 1.0][0])
    damped = [c for c in calls if c.get("damping") and c.get("power", 1.0) == 1.0]
    assert damped and damped[0]["damping"] == 0.5
    power = [c for c in calls if c.get("power", 1.0) != 1.0]
    assert len(power) == 1 and (power[0]["power"], power[0]["damping"]) == (0.5, 0.5)
    assert power[0]["double_loop"] is False and power[0]["max_factorisations"] == 50
    # the default chain: the double loop gets at most 2 x max_iter factorisations
    calls.clear()
    run_chain(K, y, Probit(), InferenceStrategy.auto(3), tol=1e-12)
    assert [c["max_factorisations"] for c in calls] == [None, None, 6, None]
    assert calls[1]["damping"] == 0.8 and calls[1]["max_iter"] == 3
    # a search run never starts the double loop
    calls.clear()
    run_chain(K, y, Probit(), InferenceStrategy.search_run(3), tol=1e-12)
    assert len(calls) == 2 and all(c["double_loop"] is False for c in calls)
    assert all(c.get("power", 1.0) == 1.0 for c in calls)  # no power stage in a search
    assert all(c["max_factorisations"] == 6 for c in calls)


def test_search_stages_keep_eps_fixed_point_stages_only():
    """An evidence search's evaluations: stages "ep" and "damped" with the same budgets, the
    damped stage to the given tolerance, and resume on; the auto chain itself resumes
    nothing and tries no lighter damping unless asked."""
    auto = InferenceStrategy.auto(300, trial_damping=0.5)
    search = auto.search_stages(damped_tol=1e-2)
    assert search.stages == ("ep", "damped") and search.resume and search.damped_tol == 1e-2
    assert (search.max_iter, search.damping, search.trial_damping) == (300, auto.damping, 0.5)
    assert not auto.resume and auto.damped_tol is None
    assert InferenceStrategy.auto(300).trial_damping is None
    only_power = InferenceStrategy(stages=("power",)).search_stages()
    assert only_power.stages == ("ep",) and only_power.damped_tol is None


def test_classifier_search_runs_the_search_stages(monkeypatch):
    """GPClassifier(likelihood="step"): every evaluation of the evidence search runs the
    search stage (Anderson-accelerated parallel EP only; no damped EP, no double loop, no
    power EP) to the search tolerance; the fit's final state meets the estimator's tol
    (its chain keeps the damped stage, damping 0.5 tried first).  The probit classifier's
    chain starts with plain parallel EP and gets no trial damping."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-1.0, 1.0, size=(80, 2))
    y = np.where(X[:, 0] * X[:, 1] > 0, 1, 0)
    flipped = rng.random(80) < 0.2
    y[flipped] = 1 - y[flipped]
    calls = []
    chain = ep_package.run_chain

    def spy(K, y, lik, strategy, **kw):
        res = chain(K, y, lik, strategy, **kw)
        calls.append((strategy, res))
        return res

    monkeypatch.setattr(ep_package, "run_chain", spy)
    clf = robustep.GPClassifier(likelihood="step", label_noise=0.2).fit(X, y)
    search = [s for s, _ in calls if s.resume]
    assert len(search) >= 3
    for strategy in search:
        assert strategy.stages == ("accelerated",) and strategy.trial_damping == 0.5
        assert strategy.damped_tol == robustep.get_config().search_tol
    assert clf.converged_ and clf._state.result.tol == clf.tol
    calls.clear()
    robustep.GPClassifier().fit(X, y)
    assert calls and all(s.trial_damping is None for s, _ in calls)
    assert all(s.stages[0] == "ep" for s, _ in calls)
