"""One evidence search for every estimator: maximise an approximate log marginal likelihood.

An estimator supplies one function, ``evaluate(x, context) -> Evaluation``: the approximate
log evidence at the search coordinates ``x`` (log kernel hyperparameters, log likelihood
parameters, inducing inputs, ...), its gradient, and the inference result it came from.
An evaluation that has no valid evidence (inference failed or did not converge, or a value
or gradient is not finite) raises :class:`EvaluationFailed` (or a LinAlgError /
ArithmeticError / ValueError, which count the same).  This module does the rest, the same
way for every estimator:

- **the optimiser**: scipy's L-BFGS-B or the user's callable ``optimizer``
  (:func:`robustep.estimators._optimizer.minimise`, scikit-learn's convention);
- **the failure rule**: a failed point returns a quadratic bowl around the best point so
  far, ``f_best + 1e3 (1 + |x - x_best|^2)`` with gradient ``2e3 (x - x_best)``, which points
  back into the region where inference succeeds, so that the L-BFGS-B line search backs
  off from the failed point instead of stopping at a flat wall;
- **warm starts**: each evaluation receives the last successful evaluation's result of the
  same start, or, where that lies farther than ``warm_jump`` from it, the nearest
  successful evaluation's (a failed evaluation does not reset it; a new start begins from
  the caller's ``warm`` for the first start, nothing for the others); an evaluation that
  fails is tried once more from the last success's state if it started from another, else
  from the best point's state if it started from another; with ``stones``, a point
  farther from its warm start than a step is approached through evaluations in between
  (stepping stones);
- **restarts**: the caller's extra starts (:func:`draw_starts` gives the two rules in use),
  and fallback starts tried only while no evaluation has succeeded
  (:func:`shorter_length_scale_starts`);
- **the result**: the best successful evaluation over all starts — its point, evidence and
  inference result, so that the fit needs no separate final run — and a
  :class:`SearchResult` with the number of evaluations and failures and why it stopped,
  which the estimators expose as ``optimizer_result_``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from robustep._warnings import warn
from robustep.estimators._optimizer import minimise

__all__ = [
    "Evaluation",
    "EvaluationContext",
    "EvaluationFailed",
    "SearchResult",
    "after_failed_search",
    "draw_starts",
    "is_search_evidence",
    "maximise_evidence",
    "search_progress",
    "reports_progress",
    "shorter_length_scale_starts",
    "warn_if_stuck",
]

logger = logging.getLogger("robustep.search")

#: Smallest change of a search coordinate that counts as having moved from the start.
MOVE_TOLERANCE = 1e-4
#: Value of the failure bowl's floor before any evaluation has succeeded.
FAILURE_PENALTY = 1e25
#: Height and curvature of the failure bowl around the best point.
_BOWL_HEIGHT = 1e3


class EvaluationFailed(ArithmeticError):
    """Raised by ``evaluate`` when a point has no valid approximate evidence."""


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """What ``evaluate`` returns for one point.

    log_evidence : float, finite.
    gradient : (k,) d log_evidence / dx, finite (None allowed where the context says
        ``gradient=False``).
    state : the inference result at x (kept for the best point; passed on as a warm start).
    """

    log_evidence: float
    gradient: np.ndarray
    state: Any = None


@dataclasses.dataclass
class EvaluationContext:
    """What ``evaluate`` knows about the search when it is called.

    warm : the warm start of this evaluation: the last successful evaluation's ``state``
        in this start (or the nearest one's, ``maximise_evidence(warm_jump=...)``), or the
        caller's warm start, or None.
    first : True until an evaluation of this start has succeeded.
    start : index of the start (0 for the caller's x0).
    gap : with ``maximise_evidence(warm_jump=...)``, the distance from this evaluation's
        point to the nearest successful evaluation of the start (largest coordinate
        difference); inf before the first success and without ``warm_jump``.
    fallback_next : True while no evaluation of the search has succeeded and another
        start (a further start or a fallback start) follows this one, or the caller's
        next search does (``maximise_evidence(followed=True)``), so that a failure here
        is not the search's last word.
    probe : an evaluation that the search would rather abandon cheaply than rescue where
        inference fails: with ``maximise_evidence(warm_jump=...)`` one farther than
        ``warm_jump`` from every success of the start (a far trial step), and with
        ``first_probes`` a start's first evaluation while ``fallback_next``.
    gradient : False for a stepping stone (``maximise_evidence(stones=...)``), whose
        gradient nobody uses: ``evaluate`` may then return ``gradient=None``.
    """

    warm: Any = None
    first: bool = True
    start: int = 0
    gap: float = np.inf
    fallback_next: bool = False
    probe: bool = False
    gradient: bool = True


@dataclasses.dataclass
class SearchResult:
    """The outcome of :func:`maximise_evidence` (an estimator's ``optimizer_result_``).

    Attributes
    ----------
    x : (k,) the best evaluated point (the first start if no evaluation succeeded).
    log_evidence : float, the approximate log evidence at ``x`` (-inf if none succeeded).
    state : the inference result at ``x`` (None if none succeeded).
    success : bool, at least one evaluation succeeded.
    n_evaluations, n_failures : int, evaluations made over all starts, and failed ones.
    n_starts : int.
    moved : bool, ``x`` differs from the first start by more than ``MOVE_TOLERANCE`` in
        some coordinate (log hyperparameters: a relative change of 1e-4).
    message : str, why the search stopped (the optimiser's message per start).
    approximation : None, or ``"power"`` where the search maximised power EP's evidence
        because every evaluation of its EP search failed (the step classifier's search,
        ``robustep.config(search_power_fallback=True)``; :func:`after_failed_search`).
    """

    x: np.ndarray
    log_evidence: float
    state: Any = dataclasses.field(repr=False)
    success: bool = False
    n_evaluations: int = 0
    n_failures: int = 0
    n_starts: int = 1
    moved: bool = False
    message: str = ""
    approximation: str | None = None

    def stuck_reason(self) -> str | None:
        """A sentence saying why the search may not have learnt anything, or None.

        The search is stuck when no evaluation succeeded, or when it ended at its start
        after failed evaluations (the optimiser could not find a better point where
        inference succeeds).
        """
        if not self.success:
            return (
                f"every one of the {self.n_evaluations} evaluations of the evidence search "
                "failed (inference did not converge), so the hyperparameters were kept at "
                "their starting values"
            )
        if not self.moved and self.n_failures > 0:
            return (
                f"the evidence search ended at its start after {self.n_failures} of "
                f"{self.n_evaluations} evaluations failed (inference did not converge "
                "there), so the hyperparameters were kept at their starting values"
            )
        return None


def is_search_evidence(result, power=False) -> bool:
    """Whether an inference result's evidence may enter a search: it converged, and it is
    not method="auto"'s fallback to another approximation (its power-EP stage), whose log
    evidence is not comparable with EP's at the other points of the same search.
    ``power``: a search on power EP's evidence, which takes only power EP's results."""
    power_result = getattr(result, "method_used", None) == "power"
    return bool(result.converged) and power_result == bool(power)


def after_failed_search(failed: SearchResult, search: SearchResult, approximation: str):
    """The search ``search`` on ``approximation``'s evidence, run after every evaluation
    of the search ``failed`` had failed, as one :class:`SearchResult`: ``search``'s point,
    evidence and state, both searches' evaluations, failures and starts, and their
    messages."""
    return dataclasses.replace(
        search,
        n_evaluations=failed.n_evaluations + search.n_evaluations,
        n_failures=failed.n_failures + search.n_failures,
        n_starts=failed.n_starts + search.n_starts,
        message=f"every evaluation failed ({failed.message}); then on {approximation}'s "
        f"evidence: {search.message}",
        approximation=approximation,
    )


def warn_if_stuck(search, advice):
    """A ConvergenceWarning when ``search`` (a SearchResult or None) learnt nothing.

    advice : what the user can change through the estimator's parameters.
    """
    reason = None if search is None else search.stuck_reason()
    if reason is not None:
        warn(
            f"{reason}; {advice} (optimizer_result_ has the details)",
            ConvergenceWarning,
        )


def draw_starts(x0, bounds, n, rng, *, radius=None, n_coordinates=None) -> list[np.ndarray]:
    """Extra starts for a search: ``n`` points drawn uniformly, one ``rng.uniform`` call each.

    x0 : (k,) the first start; bounds : (k, 2) array; rng : a numpy RandomState/Generator.
    radius : None draws the first ``n_coordinates`` coordinates uniformly within their
        bounds (which must be finite); a number draws them within ``x0 ± radius``
        clipped to the bounds.  The other coordinates keep x0's values.
    n_coordinates : how many leading coordinates are drawn (default all).
    """
    x0 = np.asarray(x0, dtype=float)
    bounds = np.asarray(bounds, dtype=float).reshape(-1, 2)
    p = x0.size if n_coordinates is None else int(n_coordinates)
    lo, hi = bounds[:p, 0], bounds[:p, 1]
    if radius is not None:
        lo, hi = np.maximum(lo, x0[:p] - radius), np.minimum(hi, x0[:p] + radius)
    elif n > 0 and not np.all(np.isfinite(bounds[:p])):
        raise ValueError("n_restarts_optimizer > 0 needs finite kernel hyperparameter bounds")
    starts = []
    for _ in range(int(n)):
        x = x0.copy()
        x[:p] = rng.uniform(lo, hi)
        starts.append(x)
    return starts


def maximise_evidence(
    evaluate: Callable[[np.ndarray, EvaluationContext], Evaluation],
    x0,
    bounds,
    *,
    optimizer="fmin_l_bfgs_b",
    starts: Sequence[np.ndarray] = (),
    warm=None,
    warm_of: Callable[[Any], Any] | None = None,
    options: dict | None = None,
    callable_bounds=None,
    verbose: bool = False,
    fallback_starts: Sequence[np.ndarray] = (),
    retry: bool = True,
    warm_jump: float | None = None,
    first_probes: bool = False,
    stall: tuple[int, float, float] | None = None,
    first_step: float | None = None,
    fallback_first_step: float | None = None,
    followed: bool = False,
    stones: tuple[float, int] | None = None,
) -> SearchResult:
    """Maximise the approximate log evidence from ``x0`` and each of ``starts``.

    Parameters
    ----------
    evaluate : callable ``(x (k,), context) -> Evaluation``; raises EvaluationFailed.
    x0 : (k,) first start.
    bounds : k (low, high) pairs for L-BFGS-B (None: open side).
    optimizer : "fmin_l_bfgs_b" or a callable (scikit-learn's convention).
    starts : further starts (e.g. from :func:`draw_starts`).
    warm : the warm start of the first start's first evaluation.
    warm_of : maps an evaluation's ``state`` to the next evaluation's warm start
        (default: the state itself).
    options : L-BFGS-B options (e.g. ``{"maxiter": 200}``).
    callable_bounds : the (k, 2) bounds a callable optimizer gets, if not ``bounds``.
    verbose : print a progress line per evaluation to stderr (:func:`search_progress`);
        each evaluation is an INFO record on the ``robustep.search`` logger either way.
    fallback_starts : starts tried in order, after ``x0`` and ``starts``, only while no
        evaluation has succeeded (e.g. :func:`shorter_length_scale_starts`); the first
        with a successful evaluation is searched like any start, and the rest are skipped.
    retry : an evaluation that fails is tried once more from another state: the last
        success's if it started from the nearest one's, else the best point's (module
        docstring).
    warm_jump : None: each evaluation starts from the last successful evaluation's warm
        start; a number: from that of the successful evaluation of the same start nearest
        to it (largest coordinate difference; the later on a tie) when the last lies
        farther than ``warm_jump``, which keeps a far trial point (L-BFGS-B's first step
        is the raw gradient) from being the start of the next point, back near the
        others.  Then every successful evaluation's ``warm_of(state)`` of the start is
        kept, so ``warm_of`` should return a light state.
    first_probes : a start's first evaluation is a probe (``EvaluationContext.probe``)
        while another start would follow its failure.
    stall : None, or (count, step, rise): a start ends when ``count`` successful
        evaluations in a row lie within ``step`` of the start's best point (largest
        coordinate difference) without raising its log evidence by more than
        ``rise * max(1, |best|)``: the optimiser is chasing the noise of an evidence
        computed to a search tolerance (L-BFGS-B's failing line searches), and the best
        point is kept.
    first_step : None, or a positive number h: the optimiser of the first start, and
        those of ``starts``, see the objective divided by max(1, (largest entry of the
        first gradient) / h), so that L-BFGS-B's first step, the raw gradient where every
        coordinate is bounded, is at most h long in each coordinate.  The stationary
        points are the same.  Where each evaluation is an iterative inference
        warm-started from an earlier one, its cost grows with the distance between them,
        and the raw first step is as long as the gradient is large.
    fallback_first_step : the same for the fallback starts.  Inference failed at the first
        start; from a fallback start the evidence is steep and the raw step lands on a
        bound, where it fails too.
    followed : the caller runs another search where every evaluation of this one fails,
        so that a failure at the last start is not the last word either: with
        ``first_probes`` its first evaluation is a probe too.
    stones : None, or (step, count), with ``warm_jump``: an evaluation of the first start
        or of ``starts`` whose warm start's point lies farther than ``step`` from it is
        preceded by evaluations at stepping stones, the fewest points evenly spaced
        between the two that lie at most ``step`` apart (``count`` at most), each
        warm-started from the one before: a continuation in the search coordinates.
        Where an iterative inference's fixed point moves fast with x, a warm start from
        far off fails where one from nearby converges.  Each stone counts as an
        evaluation; one that succeeds is a warm start for later evaluations and may be
        the start's best point, around which a failure's bowl lies; the walk stops at the
        first stone that fails.  The optimiser does not see the stones: where the start's
        best point is a stone when its optimiser ends (not by the ``stall`` rule, whose
        evaluations lay around the best point), the optimiser runs again from there,
        ``count`` times at most.  The fallback starts take no stones: they search where
        the first start's inference failed, at shorter length-scales, where the step
        classifier's EP converged from warm starts half a unit away and more.

    Returns
    -------
    SearchResult
    """
    if verbose:
        with search_progress(True):
            return maximise_evidence(
                evaluate, x0, bounds, optimizer=optimizer, starts=starts, warm=warm,
                warm_of=warm_of, options=options, callable_bounds=callable_bounds,
                fallback_starts=fallback_starts, retry=retry, warm_jump=warm_jump,
                first_probes=first_probes, stall=stall, first_step=first_step,
                fallback_first_step=fallback_first_step, followed=followed, stones=stones,
            )  # fmt: skip
    if warm_jump is not None and not warm_jump > 0:
        raise ValueError(f"warm_jump must be None or positive, got {warm_jump!r}")
    for name, h in (("first_step", first_step), ("fallback_first_step", fallback_first_step)):
        if h is not None and not (np.isfinite(h) and h > 0):
            raise ValueError(f"{name} must be None or positive, got {h!r}")
    if stones is not None:
        if warm_jump is None:
            raise ValueError("stones needs warm_jump (the stones start from a success's state)")
        step, count = stones
        if not (np.isfinite(step) and step > 0 and int(count) == count >= 1):
            raise ValueError(f"stones must be None or (step > 0, count >= 1), got {stones!r}")
    if stall is not None:
        count, step, rise = stall
        if not (int(count) == count >= 1 and step >= 0 and rise >= 0):
            raise ValueError(
                f"stall must be None or (count >= 1, step >= 0, rise >= 0), got {stall!r}"
            )
    x0 = np.array(x0, dtype=float)
    warm_of = warm_of or (lambda state: state)
    counts = {"evaluations": 0, "failures": 0}
    overall = {"value": -np.inf, "x": None, "state": None}
    claimed = (np.inf, x0)  # the optimisers' best (func_min, theta_opt) over the starts
    messages = []
    started = time.perf_counter()

    all_starts = [x0, *starts, *fallback_starts]
    n_regular = 1 + len(starts)
    n_run = 0
    for index, start in enumerate(all_starts):
        if index >= n_regular and overall["x"] is not None:
            break  # a fallback start runs only while nothing has succeeded
        n_run += 1
        context = EvaluationContext(
            warm=warm if index == 0 else None, first=True, start=index,
            fallback_next=overall["x"] is None and (index + 1 < len(all_starts) or followed),
        )  # fmt: skip
        best = {"value": -np.inf, "x": None, "warm": None, "stone": False}
        done = []  # with warm_jump: (x, warm start) of this start's successes
        still = [0]  # with stall: successes in a row near the best point without progress

        def succeeded(x, ev, value, stone=False, context=context, best=best, done=done):
            """Book a successful evaluation at x (a ``stone``: one the optimiser did not
            ask for): the next warm start, this start's successes and best point, the
            search's best."""
            x = np.array(x, dtype=float)
            context.warm = warm_of(ev.state)
            context.first = False
            context.fallback_next = False
            if warm_jump is not None:
                done.append((x, context.warm))
            if value > best["value"]:
                best.update(value=value, x=x, warm=context.warm, stone=stone)
            if value > overall["value"]:
                overall.update(value=value, x=x, state=ev.state)

        def walk(x, origin, context=context, succeeded=succeeded):
            """The stepping stones from ``origin`` towards x (``stones``), each
            warm-started from the one before, until one fails; True if any succeeded."""
            moved = False
            for point in _stones(origin, x, *stones):
                counts["evaluations"] += 1
                context.probe, context.gradient = False, False
                try:
                    ev, value, _ = _attempt(evaluate, point, context)
                except _FAILURES:
                    counts["failures"] += 1
                    _log(verbose, counts, None, started)
                    break
                finally:
                    context.gradient = True
                succeeded(point, ev, value, stone=True)
                _log(verbose, counts, value, started)
                moved = True
            return moved

        walks = stones is not None and index < n_regular

        def objective(x, context=context, best=best, done=done, still=still, walks=walks,
                      walk=walk, succeeded=succeeded):  # fmt: skip
            counts["evaluations"] += 1
            last = context.warm
            if done:
                context.warm, context.gap, origin = _nearest_warm(done, x, warm_jump)
                if walks and walk(x, origin):
                    # from the last stone on (a retry goes back to the best point's state)
                    context.gap = min(context.gap, _distance(done[-1][0], x))
                    last = context.warm
            context.probe = (
                warm_jump is not None and np.isfinite(context.gap) and context.gap > warm_jump
            ) or (first_probes and context.first and context.fallback_next)
            try:
                try:
                    ev, value, grad = _attempt(evaluate, x, context)
                except _FAILURES:
                    # once more from another state: the last success's where the nearest
                    # one's failed, else the best point's (the last success was a trial
                    # point that did not improve, often far off as L-BFGS-B's first step)
                    tried = context.warm
                    other = last if last is not tried else best["warm"]
                    if not retry or other is None or other is tried:
                        raise
                    context.warm = other
                    ev, value, grad = _attempt(evaluate, x, context)
            except _FAILURES:
                counts["failures"] += 1
                x_best = x if best["x"] is None else best["x"]
                floor = FAILURE_PENALTY if best["x"] is None else -best["value"]
                d = np.asarray(x, dtype=float) - x_best
                _log(verbose, counts, None, started)
                return floor + _BOWL_HEIGHT * (1.0 + float(d @ d)), 2.0 * _BOWL_HEIGHT * d
            if stall is not None:
                still[0] = still[0] + 1 if _stalls(stall, best, x, value) else 0
            succeeded(x, ev, value)
            _log(verbose, counts, value, started)
            if stall is not None and still[0] >= stall[0]:
                raise _Stalled
            return -value, -grad

        limit = first_step if index < n_regular else fallback_first_step
        origin = start
        # where the best point of the start is a stone, which the optimiser has not seen,
        # it searches on from there (at most ``stones`` count times); not after a stall,
        # whose evaluations lay around the best point
        for _ in range(1 + (int(stones[1]) if walks else 0)):
            scale = [1.0]
            scaled = objective if limit is None else _bounded_first_step(objective, scale, limit)
            try:
                x_opt, f_opt, message = minimise(
                    optimizer, scaled, origin, bounds, options=options,
                    callable_bounds=callable_bounds,
                )  # fmt: skip
                f_opt = f_opt / scale[0]
            except _Stalled:
                x_opt, f_opt = best["x"], -best["value"]
                message = (
                    f"stopped after {stall[0]} evaluations in a row within {stall[1]:g} of "
                    "the best point without progress"
                )
                best["stone"] = False
            messages.append(message)
            if not best["stone"]:
                break
            # (a failure of its first evaluation is tried again from the stone's state)
            origin, context.warm, best["stone"] = best["x"], best["warm"], False
            still[0] = 0
        if best["x"] is None:  # no evaluation of this start succeeded
            x_opt, f_opt = start, np.inf
        if f_opt < claimed[0]:
            claimed = (f_opt, x_opt)

    success = overall["x"] is not None
    if success and overall["value"] >= -claimed[0]:
        x, value, state = overall["x"], overall["value"], overall["state"]
    else:  # a callable optimizer's theta_opt that it claims is better than any evaluation
        x, value, state = claimed[1], -claimed[0], None
    x = np.array(x, dtype=float)
    return SearchResult(
        x=x,
        log_evidence=float(value),
        state=state,
        success=success,
        n_evaluations=counts["evaluations"],
        n_failures=counts["failures"],
        n_starts=n_run,
        moved=bool(success and np.max(np.abs(x - x0), initial=0.0) > MOVE_TOLERANCE),
        message="; ".join(messages),
    )


_FAILURES = (np.linalg.LinAlgError, ArithmeticError, ValueError)


class _Stalled(Exception):
    """Raised through the optimiser to end a start that stalls
    (``maximise_evidence(stall=...)``)."""


def _bounded_first_step(objective, scale, limit):
    """``objective`` multiplied by ``scale[0]``, set at the first call to
    1 / max(1, (largest entry of the gradient) / limit), so that L-BFGS-B's first step
    is at most ``limit`` long (``maximise_evidence(first_step=...,
    fallback_first_step=...)``)."""
    first = [True]

    def scaled(x):
        value, grad = objective(x)
        if first[0]:
            first[0] = False
            largest = float(np.max(np.abs(grad), initial=0.0))
            scale[0] = 1.0 / max(1.0, largest / limit)
        return value * scale[0], np.asarray(grad) * scale[0]

    return scaled


def _stalls(stall, best, x, value):
    """Whether a successful evaluation (x, value) lies within ``stall``'s step of the
    start's best point without raising the best log evidence by more than its rise."""
    if best["x"] is None:
        return False
    _, step, rise = stall
    near = np.max(np.abs(np.asarray(x, dtype=float) - best["x"]), initial=0.0) <= step
    return bool(near and value <= best["value"] + rise * max(1.0, abs(best["value"])))


def _nearest_warm(done, x, jump):
    """(warm start, gap, origin) for an evaluation at x: the warm start of the last entry
    of ``done`` ((x_j, warm_j) pairs in evaluation order), or, where its x_j lies farther
    than ``jump`` from x (largest coordinate difference), that of the entry nearest to x
    (the later on a tie); gap: the distance to the nearest entry; origin: the chosen
    entry's x_j."""
    points = np.stack([xj for xj, _ in done])  # (evaluations, k)
    gaps = np.max(np.abs(points - np.asarray(x, dtype=float)), axis=1, initial=0.0)
    j = gaps.size - 1 - int(np.argmin(gaps[::-1]))
    chosen = -1 if gaps[-1] <= jump else j
    return done[chosen][1], float(gaps[j]), done[chosen][0]


def _distance(a, b):
    """The largest coordinate difference of two points."""
    return float(np.max(np.abs(np.asarray(a, dtype=float) - b), initial=0.0))


def _stones(origin, x, step, count):
    """The stepping stones from ``origin`` to x: the fewest points evenly spaced on the
    segment between them (neither end) such that consecutive points lie at most ``step``
    apart (largest coordinate difference), or ``count`` of them where more would be
    needed (then farther apart); none where x lies within ``step`` of ``origin``."""
    origin = np.asarray(origin, dtype=float)
    d = np.asarray(x, dtype=float) - origin
    pieces = min(int(np.ceil(_distance(d, 0.0) / step)), int(count) + 1)
    return [origin + d * (j / pieces) for j in range(1, pieces)]


def _attempt(evaluate, x, context):
    """``evaluate`` at x: (Evaluation, log evidence, gradient); raises EvaluationFailed
    where either is not finite (the gradient may be None where ``context.gradient`` is
    False)."""
    ev = evaluate(np.array(x, dtype=float), context)
    value = float(ev.log_evidence)
    if ev.gradient is None and not context.gradient:
        grad = None
    else:  # (a missing gradient where one was asked for is NaN: the evaluation fails)
        grad = np.asarray(ev.gradient, dtype=float)
    if not (np.isfinite(value) and (grad is None or np.all(np.isfinite(grad)))):
        raise EvaluationFailed("non-finite evidence or gradient")
    return ev, value, grad


def shorter_length_scale_starts(kernel, factor, count):
    """``count`` starts (log hyperparameters, (k,) each) equal to ``kernel.theta`` with
    every length-scale multiplied by ``factor``, ``factor**2``, ... (clipped to the
    bounds); [] when the kernel has no free length-scale (a hyperparameter whose name
    ends in "length_scale", scikit-learn's convention).

    The fallback starts of a classifier's search whose first evaluation failed: under a
    long length-scale the prior ties many points together, flipped labels pull against
    each other and EP's sites grow large with both signs; a shorter one lets the latent
    function bend around them (docs/reliability.md, "Cost of the step classifier").
    """
    theta = np.asarray(kernel.theta, dtype=float)
    mask = np.zeros(theta.size, dtype=bool)
    i = 0
    for hp in kernel.hyperparameters:
        if hp.fixed:
            continue
        if hp.name.endswith("length_scale"):
            mask[i : i + hp.n_elements] = True
        i += hp.n_elements
    if count <= 0 or not mask.any():
        return []
    bounds = np.asarray(kernel.bounds, dtype=float).reshape(-1, 2)
    return [
        np.clip(np.where(mask, theta + j * np.log(factor), theta), bounds[:, 0], bounds[:, 1])
        for j in range(1, int(count) + 1)
    ]


def _log(verbose, counts, value, started):
    """One INFO record per evaluation on the ``robustep.search`` logger, carrying
    ``evaluation``, ``failures``, ``log_evidence`` (None when it failed) and ``elapsed``.
    Nothing prints unless a handler is configured (``logging.basicConfig(level=INFO)``)
    or an estimator's ``verbose=True`` is in force (:func:`search_progress`)."""
    if not logger.isEnabledFor(logging.INFO):
        return
    elapsed = time.perf_counter() - started
    what = "failed" if value is None else f"log evidence {value:.6g}"
    extra = {
        "evaluation": counts["evaluations"],
        "failures": counts["failures"],
        "log_evidence": value,
        "elapsed": elapsed,
    }
    logger.info(
        "evidence search: evaluation %d (%d failed): %s, %.1f s",
        counts["evaluations"],
        counts["failures"],
        what,
        elapsed,
        extra=extra,
    )


@contextlib.contextmanager
def search_progress(verbose):
    """Inside the block, print the evidence search's progress lines to stderr when
    ``verbose`` (an estimator's ``verbose=True``); otherwise change nothing."""
    if not verbose or any(getattr(h, "robustep_progress", False) for h in logger.handlers):
        yield  # quiet, or an enclosing fit (one-vs-rest's binary fits) already prints
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.robustep_progress = True
    handler.setFormatter(logging.Formatter("robustep: %(message)s"))
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False  # a configured root handler would print the lines twice
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def reports_progress(fit):
    """Decorate an estimator's ``fit`` to print its searches' progress when the estimator's
    ``verbose`` is True (:func:`search_progress`)."""

    @functools.wraps(fit)
    def wrapper(self, *args, **kwargs):
        with search_progress(getattr(self, "verbose", False)):
            return fit(self, *args, **kwargs)

    return wrapper
