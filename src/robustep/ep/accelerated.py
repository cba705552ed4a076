"""Anderson-accelerated parallel EP: the fixed point of parallel EP in tens of sweeps.

Parallel EP is a fixed-point iteration x <- g(x) on the site natural parameters
x = (τ̃, ν̃) (2n,), with g(x) the moment-matching proposal from x's cavities (one posterior
factorisation per evaluation).  Where plain sweeps oscillate, damping makes them converge,
but only linearly at a rate near 1: on the label-noise step likelihood damping 0.5 or 0.8
needed 100-700 sweeps (docs/reliability.md, "Cost of the step classifier").  Anderson
acceleration (Anderson 1965; Walker & Ni 2011, SIAM J. Numer. Anal. 49(4), eq. 2.1 with
mixing β = 1) takes the next point as the combination of the last ``memory + 1`` proposals
whose residuals f = g(x) - x combine to the smallest norm:

    γ = argmin_γ ‖f_k - ΔF γ‖²,     x_{k+1} = g(x_k) - ΔG γ,

with ΔF, ΔG (2n, m) the differences of successive residuals and proposals (ΔG = ΔX + ΔF),
at one factorisation per sweep, as a plain sweep.  Its fixed points are EP's (f = 0).
The least-squares problem of γ measures residuals in the run's tolerance units: with
``tol_units="marginal"`` each site's (Δτ̃_i, Δν̃_i) counts as the change it makes to its
marginal, ``(var_i Δτ̃_i, sqrt(var_i)(Δν̃_i − mean_i Δτ̃_i))``
(docs/derivations/engine_floor.md §7).  On the label-noise step likelihood the site
precisions span −5·10⁴ to 3·10⁵ at n = 2000; in site units the few largest sites decide
γ, and the step classifier's evidence searches there took 3.7 times as long
(docs/reliability.md, "Cost of the step classifier").

Safeguards (the proposal is not a valid site configuration everywhere):

* the first ``warmup`` sweeps are robust damped parallel sweeps (damping ``damping``), so
  that the sites have their final signs and rough sizes before they are extrapolated;
* a point whose posterior is not positive definite, or that makes a valid cavity
  improper, is moved halfway towards the plain proposal g(x_k) (three times at most);
  then a robust damped sweep is made instead and the memory is cleared;
* a damped sweep halves its step at most five times; one that needs more is blocked
  (the state sits at the cavity limits, where each further halving, one factorisation,
  moves it little);
* a run stops when its smallest residual over the last ``window`` sweeps is not 10%
  below the smallest over the ``window`` sweeps before (it hovers), as stage ``"damped"``'s
  trial does (:func:`robustep.ep.chain.hover_callback`), or when it is blocked; with
  ``divergence``, when a sweep after the warm-up has a residual ``divergence`` times the
  smallest since the warm-up or more (it diverges), and with ``start_patience``, when a
  warm-started run's first ``start_patience`` sweeps are none 10% below its starting
  residual;
* a warm start from another run's result may start the memory from that run's
  differences (``reuse_differences``): the map at nearby hyperparameters differs little,
  and the differences are replaced one by one by the run's own;
* a warm start whose posterior is invalid keeps its sites with the negative ones halved
  until it is valid; a warm-started run that stops is repeated from zero sites with the
  warm-up, and a run from zero sites that stops is repeated with twice the warm-up and,
  if it was blocked, the damping moved halfway to 1 (two repeats at most, ``restarts``;
  the chain makes one in a search evaluation).
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
    _OutOfFactorisations,
    _stop_status,
    marginal_changes,
)
from robustep.ep.updates import max_abs, moment_matching_update
from robustep.linalg import InvalidSiteConfiguration
from robustep.posterior import GaussianPrior

__all__ = ["accelerated_expectation_propagation"]

#: ridge on the least-squares problem of γ, relative to the trace of ΔFᵀΔF
_RIDGE = 1e-10
#: times a rejected point is moved halfway towards the plain proposal
_SHRINKS = 3
#: times the negative sites of a warm start that gives an invalid posterior are halved
_WARM_HALVINGS = 10
#: times a damped sweep's step is halved before the sweep counts as blocked: a state whose
#: sweeps need more sits at the cavity limits, where every further halving (one
#: factorisation each) moves it little (the engine's robust sweep halves up to 30 times)
_HALVINGS = 5


def _keeps_cavities(ev, new):
    """No cavity that is proper at ``ev`` is improper at ``new`` (Jylänki et al. 2011 §4,
    modification 2)."""
    return not np.any(ev.valid & ~new.valid)


def _damped_sweep(ctx, ev, step):
    """A robust damped parallel sweep from ``ev``: the step ``step`` towards the proposal,
    halved (``_HALVINGS`` times at most) until the posterior is valid and keeps every
    proper cavity proper.  Returns (evaluation or None, largest site change, step used)."""
    d_prec = ev.proposal_precision - ev.precision
    d_shift = ev.proposal_shift - ev.shift
    for _ in range(_HALVINGS + 1):
        try:
            new = _evaluate(ctx, ev.precision + step * d_prec, ev.shift + step * d_shift)
        except InvalidSiteConfiguration:
            new = None
        if new is not None and _keeps_cavities(ev, new):
            return new, step * max_abs(d_prec, d_shift), step
        step *= 0.5
    return None, 0.0, 0.0


def accelerated_expectation_propagation(
    K,
    y,
    likelihood,
    *,
    memory=10,
    warmup=10,
    damping=0.6,
    window=20,
    warm_window=10,
    max_iter=1000,
    tol=1e-4,
    init=None,
    max_factorisations=None,
    tol_units="sites",
    restarts=2,
    divergence=None,
    start_patience=None,
    power=1.0,
    reuse_differences=False,
):
    """Parallel EP accelerated by Anderson mixing (module docstring).

    Parameters
    ----------
    K : (n, n) prior covariance or a :class:`robustep.posterior.GaussianPrior`.
    y : (n,) targets; likelihood : a :class:`robustep.likelihoods.Likelihood`.
    memory : int >= 1, the residual differences kept (m).
    warmup : int >= 0, robust damped sweeps before the first extrapolation.
    damping : float in [0, 1), the damping of the warm-up and fallback sweeps.
    window : int >= 1, the hover rule's window in sweeps (None: no hover rule).
    warm_window : int >= 1, the same for a run from a warm start (``init`` with nonzero
        sites), which is then repeated from zero sites when it hovers or is blocked.
    max_iter : sweeps at most; tol : the site tolerance, as
        :func:`robustep.ep.expectation_propagation`.
    init : None (zero sites), a ``(site_precision, site_shift)`` pair or an EPResult.
    max_factorisations : None or the posterior factorisations allowed in all (each sweep
        makes one, a rejected point one more).
    tol_units : "sites" or "marginal", as :func:`robustep.ep.expectation_propagation`.
    restarts : int >= 0, runs from zero sites after a run that stopped (module docstring;
        ``AcceleratedStage.restarts``).
    divergence : float > 1 or None, a run stops (status "diverged") at a sweep after its
        warm-up whose residual is at least this multiple of the smallest residual since
        the warm-up ended (the start's for a run without warm-up; None, the default:
        never; ``AcceleratedStage.divergence``).
    start_patience : int >= 1 or None, a run from a warm start stops (status "stalled")
        when none of its first ``start_patience`` sweeps has a residual 10% below the warm
        start's (None: never).
    power : float in (0, 1], the power alpha of every site: below 1 the fixed point is
        power EP's (Minka 2004), as :func:`robustep.ep.expectation_propagation` with
        ``power`` (``PowerStage(accelerate=True)``); 1, the default: EP's.
    reuse_differences : bool, with ``init`` a result of this function (or its
        :func:`robustep.ep.chain.warm_start` copy), start the memory from that run's
        residual and proposal differences (``anderson_differences``) instead of empty.
        The fixed points are the same; a warm start from nearby hyperparameters, whose
        map differs little, then extrapolates from its first sweep
        (``AcceleratedStage.reuse_differences``).  False (default): empty memory.

    Returns
    -------
    EPResult
        As :func:`robustep.ep.expectation_propagation`'s, with ``history["phase"]``
        ``"accelerated"`` for an extrapolated sweep and ``"parallel"`` for a damped one.
        A run that does not converge does not warn (its caller decides).  Its attribute
        ``anderson_differences`` holds the memory's differences (ΔX, ΔF), each (m, 2n),
        for ``reuse_differences``.
    """
    prior, y = _check_inputs(K, y, likelihood, "parallel", damping, power, max_iter, tol)
    n, memory, warmup = prior.n, int(memory), int(warmup)
    ctx = _Context(prior, y, likelihood, moment_matching_update, float(power), float(damping),
                   float(tol), int(max_iter), None)  # fmt: skip
    _check_tol_units(tol_units)
    ctx.tol_units = tol_units
    ctx.stopped_by_callback = True  # the caller reports non-convergence
    ev = _warm_start(ctx, *_initial_sites(init, n))
    ctx.last, ctx.max_factorisations = ev, max_factorisations
    warm = bool(np.any(ev.precision))
    mem = _Memory(memory)
    if reuse_differences and warm:
        mem.seed(getattr(init, "anderson_differences", None), n)
    stops = _Stops(divergence, start_patience)
    try:
        # a warm start has its sites' signs and sizes already: no warm-up
        ev, status = _iterate(ctx, ev, mem, 0 if warm else warmup,
                              warm_window if warm else window, damping,
                              stops if warm else stops.from_zero())  # fmt: skip
        heavier, longer = damping, warmup
        for _ in range(int(restarts)):
            if status not in ("blocked", "stalled", "diverged"):
                break
            # the run reached the cavity limits (a cavity precision near zero that every
            # step makes negative) or hovered: again from zero sites; after a run from
            # zero sites, with twice its warm-up and, if it was blocked, its damping
            # moved halfway to 1 (at n = 1000 the residual was still 10^3 after 20
            # sweeps at 0.6, and the extrapolation diverged from there)
            if not warm:
                longer = 2 * max(longer, 1)
                if status == "blocked":
                    heavier = 0.5 * (1.0 + heavier)
            warm = False
            mem.clear()
            start = _evaluate(ctx, np.zeros(n), np.zeros(n))
            ev, status = _iterate(ctx, start, mem, longer, window, heavier, stops.from_zero())
    except _OutOfFactorisations:
        ev, status = ctx.last, "max_factorisations"
    ctx.max_factorisations = None
    result = _finish(ctx, ev, status)
    result = result if isinstance(K, GaussianPrior) else ctx.prior.convert_result(result)
    result.anderson_differences = mem.differences(n)
    return result


def _warm_start(ctx, precision, shift):
    """The evaluation of the initial sites; where they give an invalid posterior (a warm
    start from other hyperparameters whose negative sites are too strong for this prior),
    the negative sites halved until it is valid (``_WARM_HALVINGS`` times at most, as the
    engine repairs improper cavities, docs/derivations/double_loop.md eq. S3), else zero
    sites."""
    negative = precision < 0
    for _ in range(_WARM_HALVINGS + 1):
        try:
            return _evaluate(ctx, precision, shift)
        except InvalidSiteConfiguration:
            if not np.any(negative):
                break
            precision, shift = precision.copy(), shift.copy()
            precision[negative] *= 0.5
            shift[negative] *= 0.5
    n = precision.size
    return _evaluate(ctx, np.zeros(n), np.zeros(n))


class _Stops:
    """The early stops of a run besides the hover rule: ``divergence`` (a multiple of the
    run's smallest residual, or None) and ``start_patience`` (sweeps, or None; only for a
    run from a warm start)."""

    def __init__(self, divergence, start_patience):
        if divergence is not None and not divergence > 1:
            raise ValueError(f"divergence must be None or a number > 1, got {divergence!r}")
        if start_patience is not None and not (
            isinstance(start_patience, (int, np.integer)) and start_patience >= 1
        ):
            raise ValueError(
                f"start_patience must be None or an integer >= 1, got {start_patience!r}"
            )
        self.divergence, self.start_patience = divergence, start_patience

    def from_zero(self):
        """These stops for a run from zero sites (no ``start_patience``)."""
        return _Stops(self.divergence, None)

    def status(self, residuals, start, warmup):
        """ "diverged", "stalled" or None for a run whose starting residual is ``start`` and
        whose sweeps so far have ``residuals``.  The divergence rule compares each sweep
        after the ``warmup`` with the smallest residual since the warm-up ended (the
        warm-up's damped sweeps bring the sites to their signs and sizes, and their
        residuals can grow tenfold in site units)."""
        if not residuals:
            return None
        if self.divergence is not None and len(residuals) > warmup:
            smallest = min([start, *residuals][warmup:-1])
            # (a zero residual with invalid cavities is no scale to diverge from)
            if smallest > 0 and residuals[-1] >= self.divergence * smallest:
                return "diverged"
        patience = self.start_patience
        if patience is not None and len(residuals) == patience:
            if not min(residuals) < 0.9 * start:
                return "stalled"
        return None


def _hovers(residuals, window):
    """The hover rule: the last window's smallest residual not 10% below the previous's."""
    if window is None or len(residuals) < 2 * window:
        return False
    return min(residuals[-window:]) > 0.9 * min(residuals[-2 * window : -window])


class _Memory:
    """The differences ΔX, ΔF (lists of (2n,) arrays, at most ``size``) and the last point
    and residual of an Anderson run."""

    def __init__(self, size):
        self.size = size
        self.dX, self.dF = [], []
        self.x = self.f = None

    def add(self, x, f):
        if self.x is not None:
            self.dX.append(x - self.x)
            self.dF.append(f - self.f)
            if len(self.dX) > self.size:
                del self.dX[0], self.dF[0]
        self.x, self.f = x, f

    def clear(self):
        self.dX, self.dF = [], []
        self.x = self.f = None

    def seed(self, differences, n):
        """Start from another run's differences (ΔX, ΔF), each (m, 2n), the latest
        ``size`` of them; without its last point, so that the first difference of this run
        is between two of its own points.  None or another shape: nothing."""
        if differences is None:
            return
        dX, dF = differences
        if dX.ndim != 2 or dX.shape != dF.shape or dX.shape[1] != 2 * n:
            return
        self.dX = list(dX[-self.size :])
        self.dF = list(dF[-self.size :])

    def differences(self, n):
        """(ΔX, ΔF), each (m, 2n) (m = 0 when empty)."""
        return np.reshape(self.dX, (-1, 2 * n)), np.reshape(self.dF, (-1, 2 * n))


def _iterate(ctx, ev, memory, warmup, window, damping, stops):
    """Sweeps from ``ev`` until convergence, the budget, the hover rule (over this call's
    sweeps after the first ``warmup``, which are damped by ``damping``, as are those that
    replace a rejected point; status "stalled"), one of ``stops`` (a :class:`_Stops`) or a
    blocked damped sweep (status "blocked"): (ev, status).  ``memory``: a
    :class:`_Memory`."""
    step = 1.0 - damping
    first = ctx.n_iter
    start = ev.residual
    while True:
        status = _stop_status(ctx, ev)
        if status:
            return ev, status
        residuals = ctx.history["residual"][first:]
        if _hovers(residuals[warmup:], window):
            return ev, "stalled"
        status = stops.status(residuals, start, warmup)
        if status:
            return ev, status
        if ctx.n_iter - first < warmup:
            new = None
        else:
            new = _extrapolate(ctx, ev, memory)
        if new is None:  # a robust damped sweep
            memory.clear()
            new, change, used = _damped_sweep(ctx, ev, step)
            if new is None:
                return ev, "blocked"
            phase = "parallel"
        else:
            change, used, phase = max_abs(new.precision - ev.precision,
                                          new.shift - ev.shift), 1.0, "accelerated"  # fmt: skip
        ev = new
        ctx.record(phase, ev, change, used)


def _in_tolerance_units(ctx, ev, v):
    """Site changes ``v`` (..., 2n), stacked as (Δτ̃, Δν̃), in the units the run's tolerance
    measures: unchanged for ``tol_units="sites"``; for ``"marginal"`` the first-order
    changes they make to q's marginals N(mean_i, var_i),
    ``(var_i Δτ̃_i, sqrt(var_i) (Δν̃_i − mean_i Δτ̃_i))``
    (:func:`robustep.ep.engine.marginal_changes`)."""
    if ctx.tol_units != "marginal":
        return v
    n = ev.precision.size
    return np.concatenate(
        marginal_changes(ev.post.mean, ev.post.var, v[..., :n], v[..., n:]), axis=-1
    )


def _extrapolate(ctx, ev, memory):
    """The Anderson point from ``ev`` and ``memory`` (updated), evaluated; None when it and
    its three pulls towards the plain proposal are invalid."""
    x = np.concatenate([ev.precision, ev.shift])
    proposal = np.concatenate([ev.proposal_precision, ev.proposal_shift])
    f = proposal - x
    memory.add(x, f)
    point = proposal
    if memory.dF:
        dF = np.asarray(memory.dF)  # (m, 2n)
        dG = np.asarray(memory.dX) + dF
        dF_scaled = _in_tolerance_units(ctx, ev, dF)
        gram = dF_scaled @ dF_scaled.T
        gram[np.diag_indices_from(gram)] += _RIDGE * np.trace(gram) + np.finfo(float).tiny
        try:
            gamma = np.linalg.solve(gram, dF_scaled @ _in_tolerance_units(ctx, ev, f))
        except np.linalg.LinAlgError:
            gamma = np.zeros(len(dF))
        point = proposal - gamma @ dG
    n = ev.precision.size
    # without differences the point is the plain proposal, which a pull does not move
    for _ in range(_SHRINKS + 1 if memory.dF else 1):
        if np.all(np.isfinite(point)):
            try:
                new = _evaluate(ctx, point[:n], point[n:])
            except InvalidSiteConfiguration:
                new = None
            if new is not None and _keeps_cavities(ev, new):
                return new
        point = proposal + 0.5 * (point - proposal)
    return None
