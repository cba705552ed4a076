"""``method="auto"``: EP that does not silently fail (issue 14 §3).

One chain, used by every estimator that offers ``method="auto"``.  The stages all look
for the same thing — a fixed point of EP, the same approximation — and differ only in the
algorithm, from the cheapest to the most robust; the chain stops at the first stage that
converges:

1. ``"ep"``: parallel EP (one factorisation per sweep, cavities kept positive,
   Jylänki et al. 2011 §4 modification 2), stopped early when it stalls or oscillates
   (no new smallest residual, by 10%, for ``patience`` sweeps);
2. ``"damped"``: parallel EP with adaptive damping: blocks of ``block`` sweeps, starting
   at damping 0.5; after a block whose largest site change did not reach a new minimum
   the damping moves halfway to 1 (as ``GPClassifier(method="damped",
   damping="adaptive")``);
3. ``"double_loop"``: the double-loop algorithm (Heskes & Zoeter 2002; Jylänki et al.
   2011 §4, modifications 1-4; docs/derivations/double_loop.md) with ``max_inner=10``
   inner iterations per outer update, after ``n_parallel_init=10`` parallel sweeps.

Stages 2 and 3 start from the caller's ``init`` (the previous evaluation's sites inside a
hyperparameter search, else zero sites), not from where the failed stage stopped: the end
state of an oscillating parallel run sits at the cavity limits, where the damped steps of
stage 2 were blocked after a few sweeps (docs/reliability.md).  With the inner loop run
towards consistency the double loop is the provably convergent form (each inner step
decreases the convex inner objective, each outer update the EP objective); the engine's
default of 2 inner steps is faster but did not converge on the hard grid of
benchmarks/auto_grid.py (docs/reliability.md, "method='auto'").

Each stage has its own budget of ``max_iter`` sweeps (inner iterations for the double
loop), so the chain costs at most about three times ``max_iter``.  No stage warns; the
caller warns only when all failed, with :func:`failure_message` (which names what was
tried).  The result is the converged stage's :class:`~robustep.ep.EPResult` with
``n_iter`` summed over the stages, and two extra attributes: ``method_used`` (the stage
name) and ``methods_tried`` (a list of ``(name, converged, n_iter, final residual)``).
When no stage converged, the result with the smallest final residual is returned.
"""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning

__all__ = ["AUTO_STAGES", "auto_expectation_propagation", "failure_message"]

AUTO_STAGES = ("ep", "damped", "double_loop")
_DESCRIPTION = {
    "ep": "parallel EP",
    "damped": "damped EP with adaptive damping",
    "double_loop": "the double-loop algorithm (10 inner iterations)",
}


def _stall_callback(patience, min_sweeps):
    """EP callback that stops a run whose residual has not improved by 10% for ``patience``."""
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


def _residual(res):
    hist = res.history.get("residual", [])
    return float(hist[-1]) if hist else np.inf


def _sites(res):
    return (np.array(res.site_precision, dtype=float), np.array(res.site_shift, dtype=float))


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
    block=50,
    double_loop=True,
    max_factorisations=None,
):
    """Run the ``method="auto"`` chain (module docstring) and return an ``EPResult``.

    K : (n, n) prior covariance or a :class:`robustep.posterior.GaussianPrior`;
    y : (n,) targets; likelihood : a :class:`robustep.likelihoods.Likelihood`;
    max_iter : sweep budget *per stage*; tol : site tolerance (as
    :func:`robustep.ep.expectation_propagation`); init : warm start for stage 1 (``"subset"``
    is resolved once, and stages 2 and 3 start from the same sites);
    schedule : schedule of stages 1 and 2 (the double loop is parallel);
    patience : stage 1 stops after this many sweeps without a new smallest residual;
    block : sweeps per damping level in stage 2;
    double_loop : False skips stage 3, for the inner runs of a hyperparameter search, which
    discard a run that does not converge within a small budget anyway;
    max_factorisations : posterior factorisations allowed *per stage*, as ``max_iter``
    (:func:`robustep.ep.expectation_propagation`; stage 2's runs share theirs).
    """
    from robustep.ep import expectation_propagation
    from robustep.ep.subset_start import resolve_subset_start

    if isinstance(init, str) and init == "subset":
        # once for the three stages (each would otherwise repeat the subset run)
        init = resolve_subset_start(
            K, y, likelihood, run=expectation_propagation, schedule=schedule
        )
    tried = []
    results = []
    total = 0

    def run(budget=max_factorisations, **kwargs):
        nonlocal total
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            warnings.filterwarnings("ignore", message="init gives an invalid posterior")
            res = expectation_propagation(
                K, y, likelihood, tol=tol, max_factorisations=budget, **kwargs
            )
        total += int(res.n_iter)
        return res

    def finish(res, name):
        res.n_iter = total
        res.method_used = name
        res.methods_tried = list(tried)
        return res

    # 1. parallel EP, stopped when it stalls or oscillates
    res = run(
        schedule=schedule,
        double_loop=False,
        max_iter=max_iter,
        init=init,
        callback=_stall_callback(patience, min_sweeps=patience),
    )
    tried.append(("ep", bool(res.converged), int(res.n_iter), _residual(res)))
    results.append(("ep", res))
    if res.converged:
        return finish(res, "ep")

    # 2. damped EP with adaptive damping, warm-started
    damping, used, best, start = 0.5, 0, np.inf, init
    n_damped = 0
    left = max_factorisations  # the stage's budget, shared by its runs as max_iter is
    while used < max_iter:
        res = run(
            schedule=schedule,
            double_loop=False,
            damping=damping,
            max_iter=min(block, max_iter - used),
            init=start,
            budget=left,
        )
        used += int(res.n_iter)
        n_damped += int(res.n_iter)
        if left is not None:
            left -= res.n_factorisations
        if res.converged or int(res.n_iter) == 0 or (left is not None and left <= 0):
            break
        last = float(res.history["max_change"][-1]) if res.history["max_change"] else np.inf
        if not last < best:
            damping = 0.5 * (1.0 + damping)
        best = min(best, last)
        start = _sites(res)
    tried.append(("damped", bool(res.converged), n_damped, _residual(res)))
    results.append(("damped", res))
    if res.converged:
        return finish(res, "damped")

    # 3. the double loop, inner loop run towards consistency
    if not double_loop:
        return _closest(results, tried, tol, finish)
    res = run(
        double_loop=True,
        n_parallel_init=10,
        max_inner=10,
        max_iter=max_iter,
        init=init,
    )
    tried.append(("double_loop", bool(res.converged), int(res.n_iter), _residual(res)))
    results.append(("double_loop", res))
    if res.converged:
        return finish(res, "double_loop")

    return _closest(results, tried, tol, finish)


def _closest(results, tried, tol, finish):
    """All stages failed: the state closest to a fixed point, reported as not converged."""
    name, res = min(results, key=lambda item: _residual(item[1]))
    res.converged = False
    res.message = failure_message(tried, tol)
    return finish(res, name)


def failure_message(tried, tol):
    """One sentence naming every stage tried, its sweeps and final residual."""
    parts = [
        f"{_DESCRIPTION[name]} ({n_iter} iterations, final residual {resid:.3g})"
        for name, _, n_iter, resid in tried
    ]
    return (
        f"method='auto' did not converge to tol={tol:g}: tried " + ", then ".join(parts) + "; "
        "the state closest to a fixed point is kept"
    )


def warn_if_not_converged(estimator, result, what, stacklevel=3):
    """The classifiers' ConvergenceWarning after a fit that did not converge (dense or sparse).

    ``method="auto"`` already names every stage it tried in ``result.message``; an explicit
    method gets the remedies to try.  ``what``: how the inference is named ("ep", "sparse
    ep", ...).
    """
    if estimator.converged_:
        return
    if estimator.method == "auto":
        warnings.warn(result.message, ConvergenceWarning, stacklevel=stacklevel)
        return
    others = [f"method={m!r}" for m in ("damped", "power") if m != estimator.method]
    warnings.warn(
        f"{what} inference did not converge ({estimator.n_iter_} iterations, "
        f"max_iter={estimator.max_iter}, tol={estimator.tol}); the last finite state is "
        f"kept. Try {', '.join(others)}, a larger max_iter or a larger tol.",
        ConvergenceWarning,
        stacklevel=stacklevel,
    )
