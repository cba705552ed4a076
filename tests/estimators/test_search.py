"""The one evidence search of every estimator (robustep.estimators._search)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from robustep.estimators._search import (
    Evaluation,
    EvaluationFailed,
    _stones,
    draw_starts,
    maximise_evidence,
    shorter_length_scale_starts,
)


def _noisy_xor(n, seed):
    """n points of an XOR pattern in [-1, 1]^2 with labels +-1, 20% of them flipped."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 1.0, size=(n, 2))
    y = np.where(X[:, 0] * X[:, 1] > 0, 1, -1)
    y[rng.random(n) < 0.2] *= -1
    return X, y


def _quadratic(centre, wall=None):
    """log evidence -|x - centre|^2 (state: x), failing where x[0] > wall."""
    centre = np.asarray(centre, dtype=float)
    calls = []

    def evaluate(x, context):
        calls.append((x.copy(), context.warm, context.first, context.start))
        if wall is not None and x[0] > wall:
            raise EvaluationFailed("inference did not converge")
        d = x - centre
        return Evaluation(-float(d @ d), -2.0 * d, state=x.copy())

    return evaluate, calls


def test_finds_the_maximum_and_reports_it():
    evaluate, _ = _quadratic([0.3, -0.2])
    res = maximise_evidence(evaluate, np.zeros(2), [(-5, 5), (-5, 5)])
    np.testing.assert_allclose(res.x, [0.3, -0.2], atol=1e-6)
    assert res.success and res.moved and res.n_failures == 0 and res.n_starts == 1
    assert res.log_evidence == pytest.approx(0.0, abs=1e-10)
    np.testing.assert_array_equal(res.state, res.x)
    assert res.n_evaluations >= 2 and res.stuck_reason() is None
    assert "CONVERGENCE" in res.message


def test_backs_off_from_a_failure_wall():
    """The first step jumps far past the region where inference succeeds; the failure bowl
    points back, so the line search backs off and the search moves towards the wall instead of
    stopping at its start (a flat penalty with zero gradient stops L-BFGS-B at the start)."""
    evaluate, _ = _quadratic([50.0], wall=1.0)
    res = maximise_evidence(evaluate, np.zeros(1), [(-100.0, 100.0)])
    assert res.success and res.moved and res.n_failures >= 1
    assert 0.0 < res.x[0] <= 1.0 and res.log_evidence > -(50.0**2)
    assert res.stuck_reason() is None

    def flat_wall(x):  # the rule the search replaces
        if x[0] > 1.0:
            return 1e25, np.zeros(1)
        return float((x[0] - 50.0) ** 2), 2.0 * (x - 50.0)

    from scipy import optimize

    sol = optimize.minimize(flat_wall, np.zeros(1), jac=True, method="L-BFGS-B",
                            bounds=[(-100.0, 100.0)])  # fmt: skip
    assert sol.x[0] == 0.0  # stuck at its start: what the bowl avoids


def test_every_evaluation_failing_keeps_the_start_and_says_so():
    def evaluate(x, context):
        raise EvaluationFailed

    x0 = np.array([0.5, 1.0])
    res = maximise_evidence(evaluate, x0, [(-5, 5), (-5, 5)])
    assert not res.success and not res.moved and res.state is None
    np.testing.assert_array_equal(res.x, x0)
    assert res.n_failures == res.n_evaluations >= 1
    assert "failed" in res.stuck_reason()


def test_stuck_at_start_after_failures_is_reported():
    evaluate, _ = _quadratic([5.0], wall=1e-12)  # every step away from 0 fails
    res = maximise_evidence(evaluate, np.zeros(1), [(-10.0, 10.0)])
    assert res.success and res.n_failures >= 1
    # every success lies within 1e-12 of the start, below the move tolerance
    assert not res.moved and "ended at its start" in res.stuck_reason()


def test_warm_starts_follow_the_last_success_and_restarts_begin_cold():
    evaluate, calls = _quadratic([50.0], wall=1.0)
    warm0 = object()
    maximise_evidence(evaluate, np.zeros(1), [(-100.0, 100.0)], warm=warm0,
                      starts=[np.array([-3.0])])  # fmt: skip
    first = [c for c in calls if c[3] == 0]
    second = [c for c in calls if c[3] == 1]
    assert first[0][1] is warm0 and first[0][2] is True
    assert second[0][1] is None and second[0][2] is True
    # after a failed evaluation the warm start is still the last successful point
    for _, warm, first_flag, _ in first[1:]:
        assert first_flag is False
        assert isinstance(warm, np.ndarray) and warm[0] <= 1.0
    failed = [i for i, c in enumerate(first) if c[0][0] > 1.0]
    assert failed, "the test needs a failed evaluation"
    i = failed[0]
    np.testing.assert_array_equal(first[i + 1][1], first[i][1])


def test_best_start_wins():
    def evaluate(x, context):  # two maxima: x = -2 (value 0) and x = 2 (value 1)
        a, b = -((x[0] + 2) ** 2), 1.0 - (x[0] - 2) ** 2
        if a > b:
            return Evaluation(a, np.array([-2 * (x[0] + 2)]))
        return Evaluation(b, np.array([-2 * (x[0] - 2)]))

    res = maximise_evidence(evaluate, np.array([-1.5]), [(-5, 5)], starts=[np.array([1.5])])
    assert res.x[0] == pytest.approx(2.0, abs=1e-5) and res.n_starts == 2


def test_callable_optimizer_theta_is_used_when_it_claims_better():
    evaluate, _ = _quadratic([1.0])

    def optimizer(obj_func, theta, bounds):
        obj_func(theta)
        return np.array([0.9]), -5.0  # claims a better value than anything evaluated

    res = maximise_evidence(evaluate, np.zeros(1), [(-5, 5)], optimizer=optimizer)
    np.testing.assert_array_equal(res.x, [0.9])
    assert res.state is None

    def honest(obj_func, theta, bounds):
        value, _ = obj_func(np.array([0.5]))
        return np.array([0.5]), value

    res = maximise_evidence(evaluate, np.zeros(1), [(-5, 5)], optimizer=honest)
    np.testing.assert_array_equal(res.x, [0.5])
    np.testing.assert_array_equal(res.state, [0.5])


def test_draw_starts_rules():
    x0 = np.array([0.0, 0.0, 7.0])
    bounds = np.array([[-1.0, 1.0], [-10.0, 10.0], [0.0, 100.0]])
    rng = np.random.RandomState(0)
    uniform = draw_starts(x0, bounds, 3, rng, n_coordinates=2)
    assert len(uniform) == 3
    for x in uniform:
        assert np.all(x[:2] >= bounds[:2, 0]) and np.all(x[:2] <= bounds[:2, 1]) and x[2] == 7.0
    near = draw_starts(x0, bounds, 50, np.random.RandomState(1), radius=2.0, n_coordinates=2)
    assert max(abs(x[1]) for x in near) <= 2.0 and max(abs(x[0]) for x in near) <= 1.0
    # the same draws as rng.uniform(lo, hi) per start
    rng_a, rng_b = np.random.RandomState(5), np.random.RandomState(5)
    got = draw_starts(x0, bounds, 2, rng_a, n_coordinates=2)
    want = [rng_b.uniform(bounds[:2, 0], bounds[:2, 1]) for _ in range(2)]
    np.testing.assert_array_equal(np.array(got)[:, :2], want)
    with pytest.raises(ValueError, match="finite"):
        draw_starts(x0, np.array([[-np.inf, 1.0]] * 3), 1, rng)
    assert draw_starts(x0, np.array([[-np.inf, 1.0]] * 3), 0, rng) == []


def test_verbose_prints_each_evaluation(capsys):
    evaluate, _ = _quadratic([0.5], wall=2.0)
    res = maximise_evidence(evaluate, np.zeros(1), [(-5, 5)], verbose=True)
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == res.n_evaluations
    assert "log evidence" in lines[-1] and lines[0].startswith("robustep: evidence search")
    maximise_evidence(evaluate, np.zeros(1), [(-5, 5)])
    assert capsys.readouterr().err == ""  # quiet unless asked


def test_every_evaluation_is_an_info_record_with_its_values(caplog):
    evaluate, _ = _quadratic([0.5], wall=2.0)
    with caplog.at_level(logging.INFO, logger="robustep.search"):
        res = maximise_evidence(evaluate, np.zeros(1), [(-5, 5)])
    records = [r for r in caplog.records if r.name == "robustep.search"]
    assert len(records) == res.n_evaluations
    assert all(r.levelno == logging.INFO for r in records)
    assert records[-1].evaluation == res.n_evaluations
    assert max(r.log_evidence for r in records) == pytest.approx(res.log_evidence)


def test_estimator_that_cannot_move_warns_and_reports_why(monkeypatch):
    """An evidence search whose every step away from the start fails warns and says so in
    ``optimizer_result_`` (it used to keep the start silently)."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    from robustep import GPClassifier
    from robustep.estimators._binary_dense import DenseBinaryCore

    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 2))
    y = (X[:, 0] > 0).astype(int)
    clf = GPClassifier(random_state=0)
    original = DenseBinaryCore.evaluate

    def only_the_start(self, theta, eval_gradient, init=None, search=False, **kwargs):
        if search and not np.allclose(theta, 0.0):  # the default kernel's log theta is 0
            raise np.linalg.LinAlgError("inference fails away from the start")
        return original(self, theta, eval_gradient, init=init, search=search, **kwargs)

    monkeypatch.setattr(DenseBinaryCore, "evaluate", only_the_start)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf.fit(X, y)
    messages = [str(w.message) for w in caught if w.category is ConvergenceWarning]
    assert any("ended at its start" in m for m in messages), messages
    assert any(w.filename == __file__ for w in caught if w.category is ConvergenceWarning)
    result = clf.optimizer_result_
    assert result.success and not result.moved and result.n_failures >= 1
    np.testing.assert_allclose(clf.kernel_.theta, [0.0, 0.0], atol=1e-6)


def test_estimator_verbose_prints_progress_once(capsys):
    from robustep import GPClassifier, GPRegressor, StudentTProcessClassifier

    rng = np.random.default_rng(0)
    X = rng.normal(size=(25, 2))
    y = (X[:, 0] > 0).astype(int)
    y3 = np.digitize(X[:, 0], [-0.5, 0.5])
    for est, target in (
        (GPClassifier(verbose=True), y),
        (GPClassifier(verbose=True, multi_class="one_vs_rest"), y3),
        (GPRegressor(verbose=True), X[:, 0]),
        (StudentTProcessClassifier(verbose=True), y),
    ):
        est.fit(X, target)
        lines = capsys.readouterr().err.strip().splitlines()
        assert lines and all(line.startswith("robustep: evidence search") for line in lines)
        numbers = [int(line.split("evaluation ")[1].split(" ")[0]) for line in lines]
        assert numbers[0] == 1  # each line once: no duplicated handlers
        assert all(b == a + 1 or b == 1 for a, b in zip(numbers, numbers[1:], strict=False))
    GPClassifier().fit(X, y)
    assert capsys.readouterr().err == ""


def test_fallback_starts_run_only_while_nothing_has_succeeded():
    """Inference fails for x[0] > 0.5: the search from 2 fails at its first evaluation,
    the first fallback (1.0) fails too, the second (0.0) succeeds and is searched to the
    wall; the third is never evaluated."""
    evaluate, calls = _quadratic([3.0], wall=0.5)
    fallbacks = [np.array([1.0]), np.array([0.0]), np.array([-4.0])]
    res = maximise_evidence(evaluate, np.array([2.0]), [(-5.0, 5.0)], fallback_starts=fallbacks)
    assert res.success and res.n_starts == 3
    assert 0.0 < res.x[0] <= 0.5
    starts_seen = {start for _, _, _, start in calls}
    assert starts_seen == {0, 1, 2}
    assert not any(np.allclose(x, -4.0) for x, *_ in calls)
    # a search whose first start succeeds never runs them
    evaluate, calls = _quadratic([0.3])
    res = maximise_evidence(evaluate, np.zeros(1), [(-5.0, 5.0)], fallback_starts=fallbacks)
    assert res.n_starts == 1 and {start for *_, start in calls} == {0}
    # all failing: the first start is kept, not moved, every start counted
    evaluate, _ = _quadratic([0.0], wall=-10.0)
    res = maximise_evidence(evaluate, np.array([2.0]), [(-5.0, 5.0)], fallback_starts=fallbacks)
    assert not res.success and not res.moved and res.n_starts == 4
    np.testing.assert_array_equal(res.x, [2.0])


def test_shorter_length_scale_starts():
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, DotProduct, WhiteKernel

    kernel = ConstantKernel(2.0) * RBF([1.0, 4.0], length_scale_bounds=(0.1, 10.0))
    starts = shorter_length_scale_starts(kernel, 0.25, 2)
    assert len(starts) == 2
    np.testing.assert_allclose(np.exp(starts[0]), [2.0, 0.25, 1.0])
    np.testing.assert_allclose(np.exp(starts[1]), [2.0, 0.1, 0.25])  # clipped at 0.1
    # a fixed amplitude is not a coordinate; the noise level is not a length-scale
    fixed = ConstantKernel(1.0, "fixed") * RBF(1.0) + WhiteKernel(0.5)
    (start,) = shorter_length_scale_starts(fixed, 0.5, 1)
    np.testing.assert_allclose(np.exp(start), [0.5, 0.5])
    assert shorter_length_scale_starts(DotProduct(), 0.25, 2) == []
    assert shorter_length_scale_starts(kernel, 0.25, 0) == []


def test_classifier_search_starts_again_from_shorter_length_scales():
    """XOR with 20% flipped labels fitted with label_noise=0.1 (n = 100, seed 0): EP does
    not converge at the default kernel's length-scale 1, so without fallback starts (and
    without the search on power EP's evidence) the search cannot move and the fit ends
    in power EP at the start; with them it starts
    again from length-scale 0.25, converges in EP and optimises the kernel."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    from robustep import GPClassifier, config

    rng = np.random.default_rng(0)
    X = rng.uniform(-1.0, 1.0, size=(100, 2))
    y = np.where(X[:, 0] * X[:, 1] > 0, 1, -1)
    flipped = rng.random(100) < 0.2
    y[flipped] = -y[flipped]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        with config(search_fallback_starts=0, search_power_fallback=False):
            stuck = GPClassifier(likelihood="step", label_noise=0.1).fit(X, y)
    assert not stuck.optimizer_result_.success and stuck.method_used_ != "accelerated"
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        fit = GPClassifier(likelihood="step", label_noise=0.1).fit(X, y)
    result = fit.optimizer_result_
    assert result.success and result.moved and result.n_starts == 2
    assert fit.converged_ and fit.method_used_ == "accelerated"
    assert fit.log_marginal_likelihood_value_ > stuck.log_marginal_likelihood_value_


def test_a_failure_from_a_worse_point_is_tried_again_from_the_best_point():
    """An evaluation that fails from the state of a trial point that did not improve (here:
    every evaluation warm-started from a state below -3, as far-off first steps of
    L-BFGS-B leave) is evaluated once more from the best point's state; one that fails
    from the best point's state is not repeated."""
    calls = []

    def evaluate(x, context):
        calls.append((x[0], None if context.warm is None else float(context.warm[0])))
        if context.warm is not None and context.warm[0] < -3.0 and x[0] > -3.0:
            raise EvaluationFailed("inference did not converge")
        d = x[0] + 1.0
        return Evaluation(-2.0 * d * d, np.array([-4.0 * d]), state=x.copy())

    res = maximise_evidence(evaluate, np.zeros(1), [(-10.0, 10.0)])
    assert calls[1][0] == pytest.approx(-4.0)  # the first step: the raw gradient
    retried = [i for i in range(1, len(calls)) if calls[i][0] == calls[i - 1][0]]
    assert retried, "the test needs a repeated evaluation"
    i = retried[0]
    assert calls[i - 1][1] < -3.0 and calls[i][1] == pytest.approx(0.0)
    assert res.success and res.n_failures == 0
    np.testing.assert_allclose(res.x, [-1.0], atol=1e-5)
    calls.clear()
    res = maximise_evidence(evaluate, np.zeros(1), [(-10.0, 10.0)], retry=False)
    assert res.n_failures >= 1
    assert not [i for i in range(1, len(calls)) if calls[i][0] == calls[i - 1][0]]

    def always_fails_away_from_start(x, context):
        calls.append((x[0], None if context.warm is None else float(context.warm[0])))
        if x[0] != 0.0:
            raise EvaluationFailed("inference did not converge")
        return Evaluation(-(float(x[0] - 5.0) ** 2), np.array([-2.0 * (x[0] - 5.0)]), state=x)

    calls.clear()
    res = maximise_evidence(always_fails_away_from_start, np.zeros(1), [(-10.0, 10.0)])
    # x = 0 is the only success: every failure was warm-started from the best point
    assert res.n_failures >= 1 and len(calls) == res.n_evaluations


def _recorded(evaluate):
    """``evaluate`` recording (x, the x its warm start came from) per call."""
    calls = []

    def wrapped(x, context):
        calls.append((float(x[0]), None if context.warm is None else float(context.warm[0])))
        return evaluate(x, context)

    return wrapped, calls


def _steep(x, context):
    """-2 (x + 1)^2: from 0, L-BFGS-B's first trial point is the raw gradient, -4."""
    d = x[0] + 1.0
    return Evaluation(-2.0 * d * d, np.array([-4.0 * d]), state=x.copy())


def test_warm_jump_starts_far_moves_from_the_nearest_success():
    """With warm_jump, an evaluation whose last success lies farther than warm_jump starts
    from the nearest success's state; one within warm_jump of the last from the last's.
    Without it every evaluation starts from the last success's state."""
    evaluate, calls = _recorded(_steep)
    res = maximise_evidence(evaluate, np.zeros(1), [(-10.0, 10.0)], warm_jump=1.0)
    np.testing.assert_allclose(res.x, [-1.0], atol=1e-5)
    assert calls[1] == (pytest.approx(-4.0), 0.0)
    seen = [calls[0][0]]
    for x, warm_x in calls[1:]:
        last = seen[-1]
        nearest = min(reversed(seen), key=lambda s: abs(s - x))
        assert warm_x == (last if abs(last - x) <= 1.0 else nearest)
        seen.append(x)
    # the point after the far first trial (-4) starts from the start's state (0), not -4
    assert abs(calls[2][0] - calls[1][0]) > 1.0 and calls[2][1] == 0.0
    evaluate, calls = _recorded(_steep)
    maximise_evidence(evaluate, np.zeros(1), [(-10.0, 10.0)])
    assert all(warm_x == calls[i][0] for i, (_, warm_x) in enumerate(calls[1:]))
    with pytest.raises(ValueError, match="warm_jump"):
        maximise_evidence(_steep, np.zeros(1), [(-10.0, 10.0)], warm_jump=0.0)


def test_a_failure_from_the_nearest_state_is_tried_again_from_the_last():
    """An evaluation that fails from the nearest success's state is tried once more from
    the last success's state (here: states at x > -2 fail at points in (-2, -0.5): the
    point after the far first trial, -4, fails from the start's state)."""

    def fragile(x, context):
        if context.warm is not None and context.warm[0] > -2.0 and -2.0 < x[0] < -0.5:
            raise EvaluationFailed("inference did not converge")
        return _steep(x, context)

    evaluate, calls = _recorded(fragile)
    res = maximise_evidence(evaluate, np.zeros(1), [(-10.0, 10.0)], warm_jump=1.0)
    retried = [i for i in range(1, len(calls)) if calls[i][0] == calls[i - 1][0]]
    assert retried, "the test needs a repeated evaluation"
    i = retried[0]
    assert calls[i - 1][1] > -2.0 and calls[i][1] == pytest.approx(-4.0)
    assert res.success
    np.testing.assert_allclose(res.x, [-1.0], atol=1e-5)


def _reachable_from_nearby(x, context):
    """_steep where the warm start's point lies within 0.3 of x; fails farther off (an
    iterative inference whose fixed point moves fast with x)."""
    if context.warm is not None and abs(context.warm[0] - x[0]) > 0.3:
        raise EvaluationFailed("inference did not converge")
    return _steep(x, context)


def test_stones_are_the_fewest_evenly_spaced_points_within_the_step():
    np.testing.assert_allclose(_stones([0.0], [1.0], 0.25, 10), [[0.25], [0.5], [0.75]])
    np.testing.assert_allclose(_stones([0.0], [1.0], 0.3, 10), [[0.25], [0.5], [0.75]])
    # the largest coordinate difference decides; at most `count` stones
    np.testing.assert_allclose(_stones([0.0, 0.0], [0.2, -1.0], 0.5, 10), [[0.1, -0.5]])
    np.testing.assert_allclose(_stones([0.0], [4.0], 0.25, 3), [[1.0], [2.0], [3.0]])
    assert _stones([1.0], [1.2], 0.25, 3) == [] and _stones([1.0], [1.0], 0.25, 3) == []


def test_stones_reach_a_point_that_a_far_warm_start_cannot():
    """From 0, L-BFGS-B's first trial point is -4, where inference fails from 0's state.
    With stones 0.25 apart each evaluation starts within 0.3 of its point: every one
    succeeds, the stones count as evaluations and one of them is the maximum, -1.  With
    at most 3 stones (1 apart) the first stone fails and the walk stops; without stones
    the search fails at every point farther than 0.3 from its last success, and reaches -1
    only as L-BFGS-B's line searches back off."""
    evaluate, calls = _recorded(_reachable_from_nearby)
    res = maximise_evidence(evaluate, np.zeros(1), [(-10.0, 10.0)], warm_jump=1.0,
                            stones=(0.25, 20))  # fmt: skip
    np.testing.assert_allclose(res.x, [-1.0], atol=1e-5)
    assert res.n_failures == 0 and res.n_evaluations == len(calls)
    np.testing.assert_allclose([x for x, _ in calls[1:17]], -0.25 * np.arange(1, 17))
    assert all(abs(x - warm) <= 0.25 + 1e-12 for x, warm in calls[1:17])

    evaluate, calls = _recorded(_reachable_from_nearby)
    res = maximise_evidence(evaluate, np.zeros(1), [(-10.0, 10.0)], warm_jump=1.0,
                            stones=(0.25, 3))  # fmt: skip
    assert calls[1] == (pytest.approx(-1.0), 0.0)  # the first of three stones, 1 apart
    assert calls[2] == (pytest.approx(-4.0), 0.0)  # the walk stopped; the point itself
    assert res.n_failures >= 2 and res.n_evaluations == len(calls)

    evaluate, calls = _recorded(_reachable_from_nearby)
    res = maximise_evidence(evaluate, np.zeros(1), [(-10.0, 10.0)], warm_jump=1.0)
    assert calls[1] == (pytest.approx(-4.0), 0.0)
    assert res.n_failures >= 5  # L-BFGS-B backs off in failing steps towards 0's state


def test_the_optimiser_searches_on_from_a_stone_that_is_the_best_point():
    """A callable optimiser that tries its start and a point 4 to the left: from 0 the
    walk to -4 passes the maximum's neighbourhood (stones 4/14 apart) and the point itself
    fails (inference fails left of -3.9); the best point is then a stone the optimiser
    has not seen, and it is called again from there (and not again after that: its best
    point is then its own)."""
    starts = []

    def two_points(obj_func, theta, bounds):
        starts.append(float(theta[0]))
        here, there = obj_func(theta)[0], obj_func(theta - 4.0)[0]
        return (theta, here) if here <= there else (theta - 4.0, there)

    def evaluate(x, context):
        if x[0] < -3.9:
            raise EvaluationFailed("inference did not converge")
        return _steep(x, context)

    res = maximise_evidence(evaluate, np.zeros(1), [(-10.0, 10.0)], optimizer=two_points,
                            warm_jump=1.0, stones=(0.3, 20))  # fmt: skip
    stones = [-4.0 * (j / 14) for j in range(1, 14)]
    stone = max(stones, key=lambda x: -2.0 * (x + 1.0) ** 2)  # the best (the first on a tie)
    assert starts == [0.0, pytest.approx(stone)]
    np.testing.assert_allclose(res.x, [stone])
    assert res.message.count("the callable optimizer returned") == 2


def test_stones_are_evaluated_without_a_gradient():
    """A stone's context says gradient=False, and its evaluation may return none; the
    optimiser's own points are evaluated with one."""
    seen = []

    def evaluate(x, context):
        seen.append((float(x[0]), context.gradient))
        ev = _reachable_from_nearby(x, context)
        return ev if context.gradient else Evaluation(ev.log_evidence, None, ev.state)

    res = maximise_evidence(evaluate, np.zeros(1), [(-10.0, 10.0)], warm_jump=1.0,
                            stones=(0.25, 20))  # fmt: skip
    np.testing.assert_allclose(res.x, [-1.0], atol=1e-5)
    assert [g for _, g in seen[:18]] == [True] + [False] * 15 + [True, True]
    assert seen[16][0] == pytest.approx(-4.0)
    # an evaluation that returns no gradient where one is asked for fails
    res = maximise_evidence(lambda x, context: Evaluation(-float(x @ x), None, x.copy()),
                            np.zeros(1), [(-10.0, 10.0)])  # fmt: skip
    assert not res.success and res.n_failures == res.n_evaluations >= 1


def test_fallback_starts_take_no_stones():
    """The first start fails (inference fails for x > 4.5); the fallback start's far trial
    points are evaluated from their warm starts directly."""

    def evaluate(x, context):
        if x[0] > 4.5:
            raise EvaluationFailed("inference did not converge")
        return _reachable_from_nearby(x, context)

    evaluate, calls = _recorded(evaluate)
    maximise_evidence(evaluate, np.full(1, 5.0), [(-10.0, 10.0)], warm_jump=1.0,
                      stones=(0.25, 20), fallback_starts=[np.zeros(1)])  # fmt: skip
    assert calls[0] == (5.0, None) and calls[1] == (0.0, None)
    assert calls[2] == (pytest.approx(-4.0), 0.0)


def test_stones_are_validated():
    for bad in ((0.0, 3), (-1.0, 3), (np.nan, 3), (0.2, 0), (0.2, 1.5)):
        with pytest.raises(ValueError, match="stones"):
            maximise_evidence(_steep, np.zeros(1), [(-10.0, 10.0)], warm_jump=1.0, stones=bad)
    with pytest.raises(ValueError, match="warm_jump"):
        maximise_evidence(_steep, np.zeros(1), [(-10.0, 10.0)], stones=(0.2, 3))


def test_step_classifier_search_uses_the_configured_warm_jump(monkeypatch):
    """The step classifier passes robustep.config's search_warm_jump to the search; the
    probit classifier always starts from the last success."""
    from robustep import GPClassifier, config
    from robustep.estimators import _binary_dense

    seen = []
    search = _binary_dense.maximise_evidence

    def spy(*args, **kwargs):
        seen.append((kwargs["warm_jump"], kwargs["stones"]))
        return search(*args, **kwargs)

    monkeypatch.setattr(_binary_dense, "maximise_evidence", spy)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2))
    y = np.where(X[:, 0] > 0, 1, -1)
    GPClassifier(likelihood="step", label_noise=0.1).fit(X, y)
    with config(search_warm_jump=None):
        GPClassifier(likelihood="step", label_noise=0.1).fit(X, y)
    GPClassifier().fit(X, y)
    assert [w for w, _ in seen] == [1.0, None, None]
    # stones with the warm jump only, as configured (search_stone_step, search_stones)
    assert [st for _, st in seen] == [(0.175, 3), None, None]
    with config(search_stone_step=None):
        GPClassifier(likelihood="step", label_noise=0.1).fit(X, y)
    with config(search_stone_step=0.3, search_stones=2):
        GPClassifier(likelihood="step", label_noise=0.1).fit(X, y)
    assert [st for _, st in seen[3:]] == [None, (0.3, 2)]
    with pytest.raises(ValueError, match="search_warm_jump"):
        with config(search_warm_jump=-1.0):
            pass


def test_context_gap_is_the_distance_to_the_nearest_success():
    """With warm_jump each evaluation's context.gap is the distance from its point to the
    nearest successful evaluation of the start (inf before the first); without it, inf."""
    seen = []

    def record(x, context):
        seen.append((float(x[0]), context.gap))
        return _steep(x, context)

    maximise_evidence(record, np.zeros(1), [(-10.0, 10.0)], warm_jump=1.0)
    assert seen[0][1] == np.inf
    for k, (x, gap) in enumerate(seen[1:], start=1):
        assert gap == pytest.approx(min(abs(x - s) for s, _ in seen[:k]))
    assert seen[1][1] == pytest.approx(4.0)  # the raw-gradient first trial: a probe
    seen.clear()
    maximise_evidence(record, np.zeros(1), [(-10.0, 10.0)])
    assert all(gap == np.inf for _, gap in seen)


def test_step_classifier_probes_run_without_restarts(monkeypatch):
    """The step classifier's search marks an evaluation farther than search_warm_jump from
    every success a probe, and a probe's stage "accelerated" makes no run from zero sites
    (search_stages(probe=True)).  The first evaluation is a probe while a fallback start
    or the search on power EP's evidence would follow its failure
    (search_first_restarts=False), not otherwise.  With stepping stones (the default) the
    far points of this fit are reached through stones, and none is a probe."""
    from robustep import GPClassifier, config
    from robustep.ep import InferenceStrategy
    from robustep.estimators import _binary_dense

    strategy = InferenceStrategy.auto(100, accelerate=True)
    assert strategy.search_stages(1e-2, probe=True).accelerated.restarts == 0
    assert strategy.search_stages(1e-2).accelerated.restarts == 1
    flags = []
    run = _binary_dense.run_inference

    def spy(*args, search=False, probe=False, **kwargs):
        if search:
            flags.append(probe)
        return run(*args, search=search, probe=probe, **kwargs)

    monkeypatch.setattr(_binary_dense, "run_inference", spy)
    X, y = _noisy_xor(80, seed=0)
    with config(search_stone_step=None):  # (stones walk to the far points: no probes)
        GPClassifier(likelihood="step", label_noise=0.2).fit(X, y)
    assert flags and flags[0] is True and any(flags[1:])
    flags.clear()
    GPClassifier(likelihood="step", label_noise=0.2).fit(X, y)
    assert flags and flags[0] is True and not any(flags[1:])
    flags.clear()
    with config(search_fallback_starts=0):  # the power-EP search would follow
        GPClassifier(likelihood="step", label_noise=0.2).fit(X, y)
    assert flags and flags[0] is True
    no_fallback = {"search_fallback_starts": 0, "search_power_fallback": False}
    for settings in ({"search_first_restarts": True}, no_fallback):
        flags.clear()
        with config(search_stone_step=None, **settings):
            GPClassifier(likelihood="step", label_noise=0.2).fit(X, y)
        assert flags and flags[0] is False and any(flags)
    with pytest.raises(ValueError, match="search_first_restarts"):
        with config(search_first_restarts="yes"):
            pass


def test_context_fallback_next_only_while_another_start_follows():
    """context.fallback_next: True before any success while a further start follows, False
    after a success and in the last start."""
    seen = []

    def record(x, context):
        seen.append((context.start, context.first, context.fallback_next))
        if x[0] > 0.5:
            raise EvaluationFailed
        return _steep(x, context)

    fallbacks = [np.array([1.0]), np.array([0.0])]
    maximise_evidence(record, np.array([2.0]), [(-5.0, 5.0)], fallback_starts=fallbacks)
    assert seen[0] == (0, True, True)  # fails; two fallback starts follow
    assert (1, True, True) in seen  # fails; one follows
    assert (2, True, False) in seen  # the last start's first evaluation
    assert all(not nxt for start, first, nxt in seen if not first)


def test_context_probe_far_points_and_with_first_probes_first_evaluations():
    """context.probe: with warm_jump, farther than it from every success of the start; with
    first_probes, a start's first evaluation while another start follows."""
    seen = []

    def record(x, context):
        seen.append((context.first, context.fallback_next, context.gap, context.probe))
        if x[0] > 0.5:
            raise EvaluationFailed
        return _steep(x, context)

    fallbacks = [np.array([1.0]), np.array([0.0])]
    for first_probes in (False, True):
        seen.clear()
        maximise_evidence(record, np.array([2.0]), [(-5.0, 5.0)], fallback_starts=fallbacks,
                          warm_jump=1.0, first_probes=first_probes)  # fmt: skip
        assert any(gap > 1.0 for *_, gap, _ in seen if np.isfinite(gap))
        for first, nxt, gap, probe in seen:
            far = bool(np.isfinite(gap) and gap > 1.0)
            assert probe == (far or (first_probes and first and nxt))


def _noisy_bowl(noise):
    """log evidence -(x - 0.3)^2 plus deterministic noise of size ``noise`` and a gradient
    with noise of its own (as an evidence computed to a tolerance, whose gradient is not
    the derivative of its rounding): near the maximum L-BFGS-B's line searches fail."""
    calls = []

    def evaluate(x, context):
        calls.append(x.copy())
        d = float(x[0]) - 0.3
        value = -d * d + noise * np.sin(1e4 * float(x[0]))
        grad = -2.0 * d + 1e3 * noise * np.cos(7e3 * float(x[0]))
        return Evaluation(value, np.array([grad]), state=x.copy())

    return evaluate, calls


def test_a_stalled_start_ends_at_its_best_point():
    """With stall=(count, step, rise) a start ends once `count` successes in a row lie
    within `step` of its best point without raising the best value by more than
    rise * max(1, |best|); the result is the best point, and the message says why."""
    evaluate, calls = _noisy_bowl(1e-6)
    free = maximise_evidence(evaluate, np.zeros(1), [(-5.0, 5.0)], options={"ftol": 1e-15})
    n_free = len(calls)
    evaluate, calls = _noisy_bowl(1e-6)
    res = maximise_evidence(
        evaluate, np.zeros(1), [(-5.0, 5.0)], options={"ftol": 1e-15}, stall=(3, 1e-2, 1e-4)
    )
    assert len(calls) < n_free and "without progress" in res.message
    np.testing.assert_allclose(res.x, [0.3], atol=1e-2)
    assert res.log_evidence == max(-((c[0] - 0.3) ** 2) + 1e-6 * np.sin(1e4 * c[0]) for c in calls)
    assert abs(res.log_evidence - free.log_evidence) < 1e-4
    # the last `count` evaluations lie within the step of the best point
    assert all(abs(c[0] - res.x[0]) <= 1e-2 for c in calls[-3:])
    # without noise and far from the maximum nothing stalls: the plain search
    evaluate, _ = _quadratic([2.0])
    res = maximise_evidence(evaluate, np.zeros(1), [(-5.0, 5.0)], stall=(3, 1e-2, 1e-4))
    np.testing.assert_allclose(res.x, [2.0], atol=1e-6)
    for bad in ((0, 1e-2, 1e-4), (2.5, 1e-2, 1e-4), (3, -1.0, 1e-4), (3, 1e-2, -1.0)):
        with pytest.raises(ValueError, match="stall"):
            maximise_evidence(evaluate, np.zeros(1), [(-5.0, 5.0)], stall=bad)


def test_step_classifier_search_stalls_only_with_its_own_optimizer(monkeypatch):
    """The step classifier's search passes stall=(search_stall_evaluations,
    search_stall_step, search_ftol), fallback_first_step=search_fallback_first_step and
    first_step=search_first_step to maximise_evidence with L-BFGS-B, none of them with a
    user's optimizer, no stall with search_stall_evaluations=None and no first step with
    search_first_step=None; other likelihoods none."""
    from robustep import GPClassifier, config
    from robustep.estimators import _binary_dense

    seen = []
    search = _binary_dense.maximise_evidence

    def spy(*args, stall=None, fallback_first_step=None, first_step=None, **kwargs):
        seen.append((stall, fallback_first_step, first_step))
        return search(*args, stall=stall, fallback_first_step=fallback_first_step,
                      first_step=first_step, **kwargs)  # fmt: skip

    monkeypatch.setattr(_binary_dense, "maximise_evidence", spy)
    X, y = _noisy_xor(60, seed=1)
    GPClassifier(likelihood="step", label_noise=0.2).fit(X, y)
    with config(search_stall_evaluations=None, search_first_step=None):
        GPClassifier(likelihood="step", label_noise=0.2).fit(X, y)

    def few_steps(obj_func, initial_theta, bounds):
        return initial_theta, obj_func(initial_theta, eval_gradient=False)

    GPClassifier(likelihood="step", label_noise=0.2, optimizer=few_steps).fit(X, y)
    GPClassifier().fit(X, y)
    assert seen == [
        ((5, 1e-2, 1e-6), 0.5, 0.25),
        (None, 0.5, None),
        (None, None, None),
        (None, None, None),
    ]


def test_a_fallback_start_takes_a_unit_first_step():
    """fallback_first_step=1: the first start fails (inference fails for x > 0.5, where it
    starts); the fallback start's optimiser sees the objective scaled by its first
    gradient, so L-BFGS-B's first trial is at most one unit away (40 without), and the
    search ends at the same maximum with the evidence on its own scale."""
    for unit, first_step in ((None, 40.0), (1.0, 1.0)):
        calls = []

        def steep(x, context, calls=calls):
            calls.append(x.copy())
            if x[0] > 0.5:
                raise EvaluationFailed("inference did not converge")
            d = x[0] + 2.0
            return Evaluation(-10.0 * d * d - 5.0, np.array([-20.0 * d]), state=x.copy())

        res = maximise_evidence(
            steep, np.ones(1), [(-100.0, 100.0)], fallback_starts=[np.zeros(1)],
            fallback_first_step=unit,
        )  # fmt: skip
        assert calls[0][0] == 1.0 and calls[1][0] == 0.0 and res.n_starts == 2
        assert abs(calls[2][0] - calls[1][0]) == pytest.approx(first_step)
        np.testing.assert_allclose(res.x, [-2.0], atol=1e-5)
        assert res.log_evidence == pytest.approx(-5.0, abs=1e-8)
    # a regular start is not scaled
    evaluate, calls = _quadratic([30.0])
    maximise_evidence(evaluate, np.zeros(1), [(-100.0, 100.0)], fallback_first_step=1.0)
    assert calls[1][0][0] == pytest.approx(60.0)


def test_unit_first_step_at_the_first_start():
    """first_step=1: the first start's optimiser too sees the objective scaled by its first
    gradient (L-BFGS-B's first trial one unit away instead of 60), to the same maximum."""
    evaluate, calls = _quadratic([30.0])
    res = maximise_evidence(evaluate, np.zeros(1), [(-100.0, 100.0)], first_step=1.0)
    assert calls[1][0][0] == pytest.approx(1.0)
    np.testing.assert_allclose(res.x, [30.0], atol=1e-5)
    assert res.log_evidence == pytest.approx(0.0, abs=1e-8)


def test_first_step_bounds_the_first_step_of_the_regular_starts():
    """first_step=h: each regular start's optimiser sees the objective scaled by
    max(1, largest first-gradient entry / h), so L-BFGS-B's first trial lies h away
    (60 without; a gradient already shorter than h is not scaled), to the same maximum on
    the evidence's own scale; a fallback start takes fallback_first_step's."""
    for h, first_trial in ((None, 60.0), (0.25, 0.25), (100.0, 60.0)):
        evaluate, calls = _quadratic([30.0])
        res = maximise_evidence(evaluate, np.zeros(1), [(-100.0, 100.0)], first_step=h)
        assert calls[1][0][0] == pytest.approx(first_trial)
        np.testing.assert_allclose(res.x, [30.0], atol=1e-5)
        assert res.log_evidence == pytest.approx(0.0, abs=1e-8)
    # two coordinates: the larger gradient entry's step is h
    evaluate, calls = _quadratic([30.0, -3.0])
    res = maximise_evidence(evaluate, np.zeros(2), [(-100.0, 100.0)] * 2, first_step=0.25)
    np.testing.assert_allclose(calls[1][0], [0.25, -0.025])
    np.testing.assert_allclose(res.x, [30.0, -3.0], atol=1e-5)
    # another regular start (starts) is scaled too
    evaluate, calls = _quadratic([30.0])
    maximise_evidence(evaluate, np.zeros(1), [(-100.0, 100.0)], starts=[np.array([40.0])],
                      first_step=0.25)  # fmt: skip
    second = [x[0] for x, _, _, start in calls if start == 1]
    assert second[0] == 40.0 and second[1] == pytest.approx(40.0 - 0.25)
    # a fallback start: fallback_first_step, not h (both set)
    calls = []

    def steep(x, context):
        calls.append(x.copy())
        if x[0] > 0.5:
            raise EvaluationFailed("inference did not converge")
        d = x[0] + 2.0
        return Evaluation(-10.0 * d * d - 5.0, np.array([-20.0 * d]), state=x.copy())

    maximise_evidence(steep, np.ones(1), [(-100.0, 100.0)], fallback_starts=[np.zeros(1)],
                      fallback_first_step=1.0, first_step=0.25)  # fmt: skip
    assert calls[1][0] == 0.0 and abs(calls[2][0]) == pytest.approx(1.0)
    for bad in (0.0, -1.0, np.inf, np.nan):
        for name in ("first_step", "fallback_first_step"):
            with pytest.raises(ValueError, match=name):
                maximise_evidence(evaluate, np.zeros(1), [(-100.0, 100.0)], **{name: bad})


def test_followed_makes_the_last_starts_first_evaluation_a_probe():
    """followed: the caller runs another search where this one fails everywhere, so with
    first_probes the last start's first evaluation is a probe too (fallback_next)."""
    for followed in (False, True):
        seen = []

        def record(x, context, seen=seen):
            seen.append((context.start, context.first, context.fallback_next, context.probe))
            raise EvaluationFailed

        res = maximise_evidence(record, np.array([2.0]), [(-5.0, 5.0)],
                                fallback_starts=[np.array([1.0])], first_probes=True,
                                followed=followed)  # fmt: skip
        assert not res.success and res.n_starts == 2
        first_of_last = next(s for s in seen if s[0] == 1 and s[1])
        assert first_of_last[2:] == (followed, followed)
        assert seen[0][2:] == (True, True)


def test_after_failed_search_reports_both_searches():
    """after_failed_search: the second search's point, evidence and state, both searches'
    counts, both messages and the approximation."""
    from robustep.estimators._search import after_failed_search

    def fail(x, context):
        raise EvaluationFailed

    failed = maximise_evidence(fail, np.zeros(1), [(-5.0, 5.0)], fallback_starts=[np.ones(1)])
    evaluate, _ = _quadratic([1.5])
    second = maximise_evidence(evaluate, np.zeros(1), [(-5.0, 5.0)])
    both = after_failed_search(failed, second, "power")
    assert both.approximation == "power" and failed.approximation is None
    np.testing.assert_allclose(both.x, second.x)
    assert both.log_evidence == second.log_evidence and both.state is second.state
    assert both.n_evaluations == failed.n_evaluations + second.n_evaluations
    assert both.n_failures == failed.n_evaluations and both.n_starts == 3
    assert both.success and both.moved and both.stuck_reason() is None
    assert failed.message in both.message and second.message in both.message
