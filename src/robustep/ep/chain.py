"""``method="auto"``: EP that does not silently fail.

One chain, used by every estimator that offers ``method="auto"``, run by
:func:`run_chain` with the stages of an :class:`~robustep.ep.strategy.InferenceStrategy`.
Stages 1-3 below look for the same thing, a fixed point of EP, and differ only in the
algorithm; stage 4 looks for a fixed point of power EP, another approximation, tried only
where EP's own iterations failed.  The chain stops at the first stage that
converges.  With :meth:`InferenceStrategy.auto <robustep.ep.strategy.InferenceStrategy.auto>`:

1. ``"ep"``: parallel EP (one factorisation per sweep, cavities kept positive,
   Jylänki et al. 2011 §4 modification 2), stopped early when it stalls or oscillates
   (no new smallest residual, by 10%, for ``patience`` sweeps);
2. ``"damped"``: parallel EP at damping 0.8 (first at ``trial_damping`` where the
   strategy sets one), plain robust sweeps (one block of
   :class:`~robustep.ep.strategy.AdaptiveDamping` as long as the budget: on the
   label-noise step likelihood an adaptive schedule from 0.5 was blocked at the cavity
   limits, and one from 0.8 was no better than the fixed 0.8, docs/reliability.md);
3. ``"double_loop"``: the double-loop algorithm (Heskes & Zoeter 2002; Jylänki et al.
   2011 §4, modifications 1-4; docs/derivations/double_loop.md) with ``max_inner=10``
   inner iterations per outer update, after ``n_parallel_init=10`` parallel sweeps, with
   at most ``2 * max_iter`` factorisations.  Only a final fit runs it
   (:meth:`InferenceStrategy.search_run
   <robustep.ep.strategy.InferenceStrategy.search_run>` and
   :meth:`~robustep.ep.strategy.InferenceStrategy.search_stages` leave it out);
4. ``"power"``: parallel power EP with alpha = 0.5 at damping 0.5, plain robust sweeps
   (:class:`~robustep.ep.strategy.PowerStage`).  Its fixed point is a *different
   approximation* from EP's (an alpha-divergence is minimised locally, not KL(p || q)), so
   a result of this stage reports ``method_used = "power"``.  With
   ``PowerStage(accelerate=True)`` (the step classifier's search on power EP's evidence,
   :meth:`InferenceStrategy.power_search
   <robustep.ep.strategy.InferenceStrategy.power_search>` and
   :meth:`~robustep.ep.strategy.InferenceStrategy.power_fit`) it first runs power EP with
   Anderson mixing, the same fixed point in fewer sweeps.

A strategy may name stage ``"accelerated"`` (:meth:`InferenceStrategy.auto
<robustep.ep.strategy.InferenceStrategy.auto>` with ``accelerate=True``, the label-noise
step likelihood's chain, in place of stage 1): parallel EP with Anderson mixing
(:mod:`robustep.ep.accelerated`), the same fixed points in a fraction of the sweeps,
stopped when it hovers; it always runs the parallel schedule.  Where stage ``"power"``
then converges, stage ``"accelerated"`` runs once more from power EP's fixed point
(``AcceleratedStage.after_power``), and where that run converges the result is EP's
fixed point (``method_used = "accelerated"``; ``methods_tried`` lists both runs).

With ``strategy.resume`` (the evaluations of a classifier's evidence search) and a warm
start that is a converged result of this chain, the stages before the one it converged in
are skipped, except stage ``"accelerated"``. Every stage starts from the caller's
``init`` (the previous evaluation's sites inside a hyperparameter search, else zero
sites), not from where a failed stage stopped: the end state of an oscillating parallel
run sits at the cavity limits, where the damped steps of stage 2 were blocked after a few
sweeps (docs/reliability.md). The double
loop is the provably convergent form of EP (each inner step decreases the convex inner
objective, each outer update the EP objective), but on a non-log-concave likelihood its
line-search steps are short and it converges slowly; stage 2 is tried first because it
converged, in a fraction of its time, on the hard cells of benchmarks/stress.py.

Each stage has its own budget of ``max_iter`` sweeps (inner iterations for the double
loop), so the chain costs at most about four times ``max_iter``.  No stage warns; the
caller warns only when all failed, with :func:`failure_message` (which names what was
tried).  The result is the converged stage's :class:`~robustep.ep.EPResult` with
``n_iter`` summed over the stages, and three extra attributes: ``method_used`` (the stage
name), ``methods_tried`` (a list of ``(name, converged, n_iter, final residual)``) and
``tol`` (the site tolerance its stage ran to: ``strategy.damped_tol`` for stage
``"damped"`` when set, else ``tol``).
When no stage converged, the result with the smallest final residual is returned.
"""

from __future__ import annotations

import dataclasses
import numbers
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from robustep._warnings import warn
from robustep.ep.accelerated import accelerated_expectation_propagation
from robustep.ep.engine import expectation_propagation
from robustep.ep.strategy import AdaptiveDamping, DoubleLoop, InferenceStrategy
from robustep.ep.subset_start import resolve_subset_start

__all__ = [
    "auto_expectation_propagation",
    "failure_message",
    "hover_callback",
    "run_chain",
    "stall_callback",
    "warm_start",
    "warn_if_not_converged",
]

# stages "ep" and "damped": robust parallel sweeps, no step halving, no double loop
_PARALLEL = DoubleLoop("off")


def stall_callback(patience, min_sweeps):
    """EP callback that stops a run whose residual has not improved by 10% for ``patience``
    sweeps, once it has made ``min_sweeps``."""
    state = {"best": np.inf, "since": 0, "n": 0}

    def callback(info):
        state["n"] += 1
        r = info["residual"]
        if r < 0.9 * state["best"]:
            state["best"], state["since"] = r, 0
        else:
            state["since"] += 1
        return state["n"] >= min_sweeps and state["since"] >= patience

    return callback


def hover_callback(window):
    """EP callback that stops a run whose smallest residual over its last ``window`` sweeps
    is not 10% below the smallest over the ``window`` sweeps before.

    Unlike :func:`stall_callback` it forgets the start: a damped run's residual often first
    rises for a few dozen sweeps and then falls steadily below its first value.
    """
    residuals = []

    def callback(info):
        residuals.append(info["residual"])
        if len(residuals) < 2 * window:
            return False
        return min(residuals[-window:]) > 0.9 * min(residuals[-2 * window : -window])

    return callback


def _residual(res):
    hist = res.history.get("residual", [])
    return float(hist[-1]) if hist else np.inf


def run_chain(K, y, likelihood, strategy, *, tol=1e-4, init=None, schedule="parallel", power=1.0):
    """Run the stages of ``strategy`` (module docstring) and return an ``EPResult``.

    K : (n, n) prior covariance or a :class:`robustep.posterior.GaussianPrior`;
    y : (n,) targets; likelihood : a :class:`robustep.likelihoods.Likelihood`;
    strategy : an :class:`~robustep.ep.strategy.InferenceStrategy` (its stages, stall rule,
    damping policy, double-loop options and per-stage budgets);
    tol : site tolerance (as :func:`robustep.ep.expectation_propagation`);
    init : warm start of every stage (``"subset"`` is resolved once, and all stages start
    from the same sites); schedule : schedule of stages "ep" and "damped" (the double loop
    is parallel); power : the power of every site in every stage, in (0, 1] (default 1:
    EP).  Below 1 every stage looks for power EP's fixed point, as the pseudo-point
    posterior's power EP does with its α (:func:`robustep.ep.pseudo_point_power_ep` with a
    ``strategy``); stage ``"power"``, which would change the power again, is then refused.
    """
    if not isinstance(strategy, InferenceStrategy):
        raise TypeError(f"strategy must be an InferenceStrategy, got {strategy!r}")
    if not (isinstance(power, numbers.Real) and 0.0 < power <= 1.0):
        raise ValueError(f"power must be in (0, 1], got {power!r}")
    site_power = float(power)  # (the name power is stage "power"'s below)
    if site_power < 1.0 and "power" in strategy.stages:
        raise ValueError(
            "stage 'power' runs power EP at its own power; with a chain power below 1 leave "
            f"it out of the strategy's stages (got stages {strategy.stages})"
        )
    if isinstance(init, str) and init == "subset":
        # once for all stages (each would otherwise repeat the subset run)
        init = resolve_subset_start(
            K, y, likelihood, run=expectation_propagation, schedule=schedule, power=site_power
        )
    tried = []
    results = []
    total = 0
    max_iter = strategy.max_iter

    def run(budget=strategy.max_factorisations, stage_tol=tol, **kwargs):
        nonlocal total
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            warnings.filterwarnings("ignore", message="init gives an invalid posterior")
            kwargs.setdefault("power", site_power)
            res = expectation_propagation(
                K, y, likelihood, tol=stage_tol, max_factorisations=budget,
                tol_units=strategy.tol_units, **kwargs,
            )  # fmt: skip
        res.tol = stage_tol
        total += int(res.n_iter)
        return res

    def parallel():  # stage "ep"
        return run(
            schedule=schedule,
            **_PARALLEL.engine_options(),
            max_iter=max_iter,
            init=init,
            callback=stall_callback(strategy.patience, min_sweeps=strategy.patience),
        )

    damped_tol = tol if strategy.damped_tol is None else strategy.damped_tol

    def damped():  # stage "damped": the blocks share the stage's budgets
        def block(damping, sweeps, start, budget, callback=None):
            return run(
                schedule=schedule,
                **_PARALLEL.engine_options(),
                damping=damping,
                max_iter=sweeps,
                init=start,
                budget=budget,
                stage_tol=damped_tol,
                callback=callback,
            )

        trial_sweeps = 0
        if strategy.trial_damping is not None:
            # stopped when it hovers (windows of twice stage "ep"'s patience: a damped
            # run's residual often rises for its first 10-20 sweeps)
            budgets = [b for b in (strategy.max_factorisations, 2 * max_iter) if b is not None]
            hover = hover_callback(2 * strategy.patience)
            trial = block(strategy.trial_damping, max_iter, init, min(budgets), hover)
            if trial.converged:
                return trial
            trial_sweeps = int(trial.n_iter)
        res = strategy.damping.run(
            block, max_iter, init, max_factorisations=strategy.max_factorisations
        )
        res.n_iter += trial_sweeps
        return res

    def accelerated(start=init, **overrides):  # stage "accelerated": Anderson mixing
        nonlocal total
        options = {**strategy.accelerated.engine_options(), "power": site_power, **overrides}
        res = accelerated_expectation_propagation(
            K, y, likelihood, max_iter=max_iter, tol=damped_tol, init=start,
            tol_units=strategy.tol_units, max_factorisations=strategy.max_factorisations,
            **options,
        )  # fmt: skip
        res.tol = damped_tol
        total += int(res.n_iter)
        return res

    def power():  # stage "power": damped sweeps of power EP, another approximation
        stage, sweeps = strategy.power, 0
        if stage.accelerate:  # Anderson mixing first (PowerStage.accelerate)
            res = accelerated(power=stage.power)
            if res.converged or not stage.plain:
                return res
            sweeps = int(res.n_iter)
        res = run(
            schedule=schedule,
            **_PARALLEL.engine_options(),
            power=stage.power,
            damping=stage.damping,
            max_iter=max_iter,
            init=init,
        )
        res.n_iter += sweeps
        return res

    def double_loop():  # stage "double_loop", from the caller's init
        return run(
            budget=strategy.double_loop_factorisations,
            **strategy.fallback.engine_options(),
            max_iter=max_iter,
            init=init,
        )

    stages = {
        "ep": parallel,
        "accelerated": accelerated,
        "damped": damped,
        "power": power,
        "double_loop": double_loop,
    }
    order = strategy.stages
    previous = getattr(init, "method_used", None)
    if strategy.resume and previous in order and getattr(init, "converged", False):
        # stage "accelerated" stays: it fails cheaply (its hover rule) and, where it
        # converges, needs a fraction of stage "damped"'s sweeps
        skipped = order[: order.index(previous)]
        order = tuple(s for s in order if s not in skipped or s == "accelerated")
    after_power = "accelerated" in strategy.stages and strategy.accelerated.after_power
    for name in order:
        res = stages[name]()
        tried.append((name, bool(res.converged), int(res.n_iter), _residual(res)))
        results.append((name, res))
        if res.converged and name == "power" and after_power:
            # EP's fixed point from power EP's (AcceleratedStage.after_power)
            ep = accelerated((res.site_precision, res.site_shift), restarts=0)
            tried.append(("accelerated", bool(ep.converged), int(ep.n_iter), _residual(ep)))
            if ep.converged:
                return _finish(ep, "accelerated", tried, total)
        if res.converged:
            return _finish(res, name, tried, total)

    # every stage failed: the state closest to a fixed point, reported as not converged
    name, res = min(results, key=lambda item: _residual(item[1]))
    res.converged = False
    res.message = failure_message(tried, tol, strategy)
    return _finish(res, name, tried, total)


def _finish(res, name, tried, total):
    res.n_iter = total
    res.method_used = name
    res.methods_tried = list(tried)
    return res


def warm_start(res):
    """A light copy of a result of :func:`run_chain` for warm-starting the next run: its
    sites, moments, ``converged`` and ``method_used`` (where ``strategy.resume`` begins),
    without the posterior's factors or the history, so that an evidence search can keep
    one per evaluation (``maximise_evidence(warm_jump=...)``).

    res : an :class:`~robustep.ep.EPResult` of :func:`run_chain` (or of the engine).
    """
    light = dataclasses.replace(res, posterior=None, history={}, site_info={})
    light.method_used = getattr(res, "method_used", None)
    light.anderson_differences = getattr(res, "anderson_differences", None)
    return light


def auto_expectation_propagation(
    K,
    y,
    likelihood,
    *,
    max_iter=1000,
    tol=1e-4,
    init=None,
    schedule="parallel",
    patience=20,
    block=None,
    double_loop=True,
    max_factorisations=None,
):
    """The ``method="auto"`` chain with the strategy given by keywords (:func:`run_chain`).

    Stages and options of :meth:`InferenceStrategy.auto
    <robustep.ep.strategy.InferenceStrategy.auto>` unless a keyword says otherwise.
    max_iter : sweep budget *per stage*; patience : stage "ep" stops after this many
    sweeps without a new smallest residual; block : None (plain sweeps at damping 0.8 in
    stage "damped") or the sweeps per damping level of an adaptive schedule from 0.8;
    double_loop : False leaves out stage "double_loop"; max_factorisations : posterior
    factorisations allowed *per stage*; the other arguments as :func:`run_chain`.
    """
    strategy = InferenceStrategy.auto(max_iter)
    stages = strategy.stages if double_loop else tuple(s for s in strategy.stages
                                                       if s != "double_loop")  # fmt: skip
    damping = strategy.damping if block is None else AdaptiveDamping(start=0.8, block=block)
    strategy = dataclasses.replace(
        strategy,
        stages=stages,
        max_factorisations=max_factorisations,
        patience=patience,
        damping=damping,
    )
    return run_chain(K, y, likelihood, strategy, tol=tol, init=init, schedule=schedule)


def failure_message(tried, tol, strategy=None):
    """One sentence naming every stage tried, its sweeps and final residual.

    ``tried``: ``(name, converged, n_iter, final residual)`` per stage; ``strategy``: the
    chain's strategy (default ``InferenceStrategy.auto()``), for the stages' options.
    """
    strategy = strategy or InferenceStrategy.auto()
    policy, power = strategy.damping, strategy.power
    if policy.block >= strategy.max_iter:
        damped = f"damped EP (damping {policy.start:g})"
    else:
        damped = f"damped EP with adaptive damping from {policy.start:g}"
    description = {
        "ep": "parallel EP",
        "accelerated": f"Anderson-accelerated parallel EP (memory {strategy.accelerated.memory})",
        "damped": damped,
        "power": f"{'Anderson-accelerated ' if power.accelerate else ''}power EP (alpha "
        f"{power.power:g}, damping {power.damping:g}; a different approximation)",
        "double_loop": f"the double-loop algorithm ({strategy.fallback.max_inner} inner "
        "iterations)",
    }
    parts = [
        f"{description[name]} ({n_iter} iterations, final residual {resid:.3g})"
        for name, _, n_iter, resid in tried
    ]
    return (
        f"method='auto' did not converge to tol={tol:g}: tried " + ", then ".join(parts) + "; "
        "the state closest to a fixed point is kept"
    )


def warn_if_not_converged(estimator, result, what):
    """The classifiers' ConvergenceWarning after a fit that did not converge (dense or sparse).

    ``method="auto"`` already names every stage it tried in ``result.message``; an explicit
    method gets the remedies to try.  ``what``: how the inference is named ("ep", "sparse
    ep", ...).
    """
    if estimator.converged_:
        return
    if estimator.method == "auto":
        warn(result.message, ConvergenceWarning)
        return
    others = [f"method={m!r}" for m in ("damped", "power") if m != estimator.method]
    warn(
        f"{what} inference did not converge ({estimator.n_iter_} iterations, "
        f"max_iter={estimator.max_iter}, tol={estimator.tol}); the last finite state is "
        f"kept. Try {', '.join(others)}, a larger max_iter or a larger tol.",
        ConvergenceWarning,
    )
