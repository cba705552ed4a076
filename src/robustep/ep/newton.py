"""Newton's method on the fixed-point equations of parallel EP.

Parallel EP's fixed points are the roots of F(x) = g(x) − x, with x = (τ̃, ν̃) (2n,) and
g the undamped parallel map (every cavity from q(x), tilted moment matching, every site
replaced).  Newton's method solves the linearisation at each iterate,

    (I − J) Δx = g(x) − x,      J = ∂g/∂x  (2n, 2n),

with J from one posterior factorisation by the chain rule of
:func:`robustep.ep.stability.fixed_point_stability` (docs/derivations/ep_stability.md
§4 and §7).  Near a fixed point whose I − J is non-singular it converges quadratically,
whatever J's eigenvalues: it reaches the fixed points with an eigenvalue of real part
≥ 1, which repel parallel EP at every damping, and it follows a branch of fixed points
when the hyperparameters change in small steps.  Far from a fixed point it has no
guarantee; each step is halved until the posterior and every cavity are proper and
the residual falls.

Cost per step: one posterior factorisation, the n × n posterior covariance, four
vectorised tilted-moment evaluations and a dense 2n × 2n solve, O(n³) with a constant
about 16× a Cholesky factorisation's (an LU factorisation of the 2n × 2n system); hence
a limit on n (``robustep.config(stability_max_sites=...)``) and no place in the
``auto`` chain.
"""

from __future__ import annotations

import numpy as np

from robustep.ep.engine import (
    _check_inputs,
    _check_tol_units,
    _Context,
    _evaluate,
    _finish,
    _initial_sites,
    _stop_status,
)
from robustep.ep.stability import _check_jacobian_problem, _jacobian, _proper_evaluation
from robustep.ep.updates import max_abs, moment_matching_update
from robustep.linalg import InvalidSiteConfiguration
from robustep.posterior import GaussianPrior

__all__ = ["newton_expectation_propagation"]

#: times a Newton step is halved before the run stops (status "stalled")
_HALVINGS = 10


def newton_expectation_propagation(
    K,
    y,
    likelihood,
    init,
    *,
    power=1.0,
    tol=1e-8,
    tol_units="sites",
    max_iter=20,
    step=1e-6,
):
    """EP's fixed point by Newton's method from a nearby site configuration.

    Parameters
    ----------
    K : (n, n) array or robustep.posterior.GaussianPrior
        Prior covariance; a prior must form the full posterior covariance
        (``supports_sequential``, as :class:`~robustep.posterior.DensePrior`).
    y : (n,) array
        Targets for ``likelihood``.
    likelihood : robustep.likelihoods.Likelihood
    init : EPResult or (site_precision, site_shift) pair of (n,) arrays
        The start: a fixed point at nearby hyperparameters, or a run that nearly
        converged.  Its posterior and every cavity must be proper.
    power : float in (0, 1]
        Fractional EP power η (Jylänki et al. 2011 eqs. 14–15): the roots are power EP's
        fixed points; 1, the default: EP's.
    tol, tol_units : the residual at which the run has converged, as
        :func:`robustep.ep.expectation_propagation`'s (default 1e-8 in site units:
        Newton's steps shrink the residual quadratically, so a tight tolerance costs one
        or two steps more).
    max_iter : int >= 1
        Newton steps at most.
    step : float in (0, 1)
        Relative finite-difference step of the Jacobian's per-site partials
        (:func:`robustep.ep.fixed_point_stability`'s ``step``).

    Returns
    -------
    EPResult
        As :func:`robustep.ep.expectation_propagation`'s, one history entry per Newton
        step (``history["phase"] == "newton"``, ``history["step"]`` the fraction of the
        Newton step taken).  A run that does not converge warns with
        ``ConvergenceWarning`` and says why in ``message``: ``max_iter``, ``stalled``
        (no shortened step lowered the residual while keeping every cavity proper) or
        ``singular`` (I − J not invertible).

    Raises
    ------
    ValueError
        More sites than ``robustep.config(stability_max_sites=...)``, a prior without
        the full posterior covariance, or a start whose posterior or some cavity is not
        proper.
    """
    prior, y = _check_inputs(K, y, likelihood, "parallel", 0.0, power, max_iter, tol)
    _check_tol_units(tol_units)
    _check_jacobian_problem(
        prior, step, "newton_expectation_propagation", "solve {m} x {m} systems",
        "Use expectation_propagation or accelerated_expectation_propagation, or raise the "
        "limit",
    )  # fmt: skip
    n = prior.n
    precision, shift = _initial_sites(init, n)
    ctx = _Context(prior, y, likelihood, moment_matching_update, float(power), 0.0,
                   float(tol), int(max_iter), None)  # fmt: skip
    ctx.tol_units = tol_units
    ev = _proper_evaluation(
        ctx, precision, shift, "init", "start Newton's method from a fixed point at nearby "
        "hyperparameters or from a run that nearly converged",
    )  # fmt: skip
    ctx.last = ev
    status = _stop_status(ctx, ev)
    while not status:
        ev, status = _newton_step(ctx, ev, step)
        status = status or _stop_status(ctx, ev)
    result = _finish(ctx, ev, status)
    return result if isinstance(K, GaussianPrior) else ctx.prior.convert_result(result)


def _newton_step(ctx, ev, step):
    """One Newton step from ``ev``, halved until the posterior and every cavity are
    proper and the residual falls: (new evaluation, None), or (``ev``, the reason the
    run stops)."""
    x = np.concatenate([ev.precision, ev.shift])
    f = np.concatenate([ev.proposal_precision, ev.proposal_shift]) - x
    system = -_jacobian(ctx, ev, step, True)
    system[np.diag_indices_from(system)] += 1.0
    try:
        dx = np.linalg.solve(system, f)
    except np.linalg.LinAlgError:
        return ev, "singular"
    if not np.all(np.isfinite(dx)):
        return ev, "singular"
    n, fraction = ev.precision.size, 1.0
    for _ in range(_HALVINGS + 1):
        new_x = x + fraction * dx
        try:
            new = _evaluate(ctx, new_x[:n], new_x[n:])
        except InvalidSiteConfiguration:
            new = None
        if new is not None and np.all(new.valid) and new.residual < ev.residual:
            ctx.record("newton", new, fraction * max_abs(dx[:n], dx[n:]), fraction)
            return new, None
        fraction *= 0.5
    return ev, "stalled"
