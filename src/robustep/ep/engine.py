"""Expectation propagation for a latent Gaussian (GP) prior N(0, K).

One entry point, :func:`expectation_propagation`, built from a likelihood, a
schedule ("parallel" or "sequential"), a site update rule (moment matching by
default; relaxed EP supplies its own) and the numerical settings in
:mod:`robustep._config`.

Robust parallel EP (``robust=True``) follows Jylänki, Vanhatalo & Vehtari
(2011) §4: parallel sweeps whose step is limited so that every cavity precision
stays positive and the posterior stays valid (modification 2); while they make
steady progress they continue, when they stall or oscillate the step is halved
(twice at most), and then the run switches to the double-loop algorithm
(modifications 1, 3, 4), whose inner loop minimises the convex EP objective for
fixed reference marginals by
moment-matching directions with a line search, and whose outer loop resets
the reference marginals to q's marginals.  See docs/derivations/ep_evidence.md
and docs/derivations/double_loop.md.

Between robust parallel sweeps the engine makes O(n^2) *mean sweeps* that move only the
site shifts at fixed site precisions, reusing the sweep's factorisation; they leave EP's
fixed points unchanged and halve the O(n^3) sweeps for probit
(docs/derivations/engine_floor.md).
"""

from __future__ import annotations

import dataclasses
import functools
import numbers

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from robustep._config import get_config
from robustep._warnings import warn
from robustep.ep.evidence import ep_objective
from robustep.ep.state import EPResult
from robustep.ep.subset_start import resolve_subset_start
from robustep.ep.updates import max_abs, moment_matching_update
from robustep.likelihoods.base import Likelihood
from robustep.linalg import InvalidSiteConfiguration
from robustep.posterior import GaussianPrior, SitePosterior, as_prior

SCHEDULES = ("parallel", "sequential")


# --------------------------------------------------------------------------- evaluation
@dataclasses.dataclass
class _Evaluation:
    """Everything known about one site configuration for given reference marginals."""

    precision: np.ndarray  # site tau~ (n,)
    shift: np.ndarray  # site nu~ (n,)
    post: SitePosterior
    ref_precision: np.ndarray  # reference marginals lambda_s (n,)
    ref_shift: np.ndarray
    cav_precision: np.ndarray  # lambda_s - eta lambda~
    cav_shift: np.ndarray
    valid: np.ndarray  # bool (n,), cavity precision positive
    log_Z_tilted: np.ndarray  # (n,), NaN where invalid
    proposal_precision: np.ndarray  # undamped proposal (= current where invalid)
    proposal_shift: np.ndarray
    info: dict
    objective: float  # L(lambda~; lambda_s), NaN if any cavity invalid
    ref_is_q: bool  # lambda_s are q's marginals (then objective = log Z_EP)
    tol_units: str = "sites"  # how ``residual`` measures a change (TOL_UNITS)

    @property
    def marg_precision(self):
        return 1.0 / self.post.var

    @property
    def marg_shift(self):
        return self.post.mean / self.post.var

    @functools.cached_property
    def residual(self) -> float:
        # the proposal equals the current site where the cavity is invalid, so the
        # largest change over all sites is the largest over the valid ones
        if not self.precision.size:
            return 0.0
        d_precision = self.proposal_precision - self.precision
        d_shift = self.proposal_shift - self.shift
        if self.tol_units == "marginal":
            return marginal_residual(self.post.mean, self.post.var, d_precision, d_shift)
        return float(max(np.max(np.abs(d_precision)), np.max(np.abs(d_shift))))


#: How the residual of a site configuration measures the proposed site changes
#: (``tol_units`` of :func:`expectation_propagation`).
TOL_UNITS = ("sites", "marginal")


def marginal_changes(mean, var, d_precision, d_shift):
    """The first-order changes that each site's own change (Δτ̃_i, Δν̃_i) makes to its
    marginal N(mean_i, var_i): ``(var_i Δτ̃_i, sqrt(var_i) (Δν̃_i − mean_i Δτ̃_i))``, the
    relative change of var_i and the change of mean_i in standard deviations
    (docs/derivations/engine_floor.md §7).  mean, var : (n,); d_precision, d_shift :
    (..., n); returns two arrays of their shape."""
    var = np.asarray(var)
    with np.errstate(invalid="ignore", over="ignore"):
        return var * d_precision, np.sqrt(var) * (d_shift - np.asarray(mean) * d_precision)


def marginal_residual(mean, var, d_precision, d_shift):
    """The largest proposed site change in units of q's marginals: the largest
    :func:`marginal_changes` in absolute value, ``max_i max(var_i |Δτ̃_i|, sqrt(var_i)
    |Δν̃_i − mean_i Δτ̃_i|)``.  mean, var, d_precision, d_shift : (n,).
    """
    if not np.size(d_precision):
        return 0.0
    rel_var, mean_sd = marginal_changes(mean, var, d_precision, d_shift)
    return float(max(np.max(np.abs(rel_var)), np.max(np.abs(mean_sd))))


def _evaluate(ctx, precision, shift, ref=None, post=None):
    """Factorise the posterior and run the site update rule at all valid cavities."""
    if post is None:
        ctx.count_factorisation()
        post = ctx.prior.posterior(precision, shift)
    if ref is None:
        ref_precision, ref_shift = 1.0 / post.var, post.mean / post.var
    else:
        ref_precision, ref_shift = ref
    eta = ctx.power
    cav_precision = ref_precision - eta * precision
    cav_shift = ref_shift - eta * shift
    valid = cav_precision > get_config().min_cavity_precision * ref_precision
    all_valid = bool(valid.all())
    if all_valid:  # the usual case: no masking, no copies
        cav_var = 1.0 / cav_precision
        prop_precision, prop_shift, log_Z, info = ctx.rule(
            ctx.likelihood, ctx.y, cav_shift * cav_var, cav_var, precision, shift, eta
        )
        prop_precision = np.asarray(prop_precision, dtype=float)
        prop_shift = np.asarray(prop_shift, dtype=float)
        log_Z = np.asarray(log_Z, dtype=float)
        info = {key: np.asarray(value) for key, value in info.items()}
    else:
        log_Z = np.full(precision.shape, np.nan)
        prop_precision = precision.copy()
        prop_shift = shift.copy()
        info = {}
        if np.any(valid):
            cav_var = 1.0 / cav_precision[valid]
            cav_mean = cav_shift[valid] * cav_var
            p, s, lz, inf = ctx.rule(
                ctx.likelihood, ctx.y[valid], cav_mean, cav_var, precision[valid], shift[valid],
                eta,
            )  # fmt: skip
            prop_precision[valid] = p
            prop_shift[valid] = s
            log_Z[valid] = lz
            for key, value in inf.items():
                full = np.zeros(precision.shape, dtype=np.asarray(value).dtype)
                full[valid] = value
                info[key] = full
    ok = all_valid and bool(np.isfinite(log_Z.sum()))
    bad = None
    if not np.isfinite(prop_precision.sum() + prop_shift.sum()):  # one reduction, usually
        bad = ~(np.isfinite(prop_precision) & np.isfinite(prop_shift))
    if bad is not None and bad.any():
        prop_precision, prop_shift = prop_precision.copy(), prop_shift.copy()
        prop_precision[bad] = precision[bad]
        prop_shift[bad] = shift[bad]
        valid = valid & ~bad
        ok = False
    objective = (
        ep_objective(post, log_Z, cav_precision, cav_shift, ref_precision, ref_shift, eta)
        if ok
        else np.nan
    )
    return _Evaluation(
        precision, shift, post, ref_precision, ref_shift, cav_precision, cav_shift, valid,
        log_Z, prop_precision, prop_shift, info, objective, ref is None, ctx.tol_units,
    )  # fmt: skip


class _OutOfFactorisations(Exception):
    """Internal: the run used up ``max_factorisations`` (caught in expectation_propagation)."""


@dataclasses.dataclass
class _Context:
    prior: GaussianPrior
    y: np.ndarray
    likelihood: Likelihood
    rule: object
    power: float
    damping: float
    tol: float
    max_iter: int
    callback: object
    history: dict = dataclasses.field(
        default_factory=lambda: {
            "max_change": [],
            "residual": [],
            "log_Z": [],
            "step": [],
            "phase": [],
            "mean_sweeps": [],
        }
    )
    n_iter: int = 0
    stopped_by_callback: bool = False
    mean_sweeps: int = 0  # O(n^2) mean sweeps after each robust parallel sweep (_mean_sweeps)
    pending_mean_sweeps: int = 0  # mean sweeps made since the last recorded sweep
    n_factorisations: int = 0
    # posterior factorisations allowed in all, checked once the initial state exists
    # (None: no limit, or not checked yet)
    max_factorisations: int | None = None
    last: object = None  # the latest accepted evaluation: the state kept when out of budget
    tol_units: str = "sites"  # how the residual is measured (TOL_UNITS)

    def count_factorisation(self):
        """Count one posterior factorisation; raise _OutOfFactorisations past the budget."""
        if self.max_factorisations is not None and self.n_factorisations >= self.max_factorisations:
            raise _OutOfFactorisations
        self.n_factorisations += 1

    def record(self, phase, ev, change, step, residual=None):
        """Append one sweep to the history; return True if the callback asks to stop."""
        residual = ev.residual if residual is None else residual
        self.last = ev
        h = self.history
        h["max_change"].append(float(change))
        h["residual"].append(float(residual))
        h["log_Z"].append(float(ev.objective))
        h["step"].append(float(step))
        h["phase"].append(phase)
        h["mean_sweeps"].append(self.pending_mean_sweeps)
        self.pending_mean_sweeps = 0
        self.n_iter += 1
        if self.callback is not None:
            stop = self.callback(
                {
                    "iteration": self.n_iter,
                    "phase": phase,
                    "site_precision": ev.precision.copy(),
                    "site_shift": ev.shift.copy(),
                    "mean": ev.post.mean.copy(),
                    "alpha": ev.post.alpha.copy(),
                    "max_change": float(change),
                    "residual": float(residual),
                    "log_Z": float(ev.objective),
                }
            )
            if stop:
                self.stopped_by_callback = True
                return True
        return False


def _stop_status(ctx, ev):
    """Return "converged" (residual below tol, all cavities valid), "max_iter", or None."""
    if ev.residual < ctx.tol and np.all(ev.valid):
        return "converged"
    if ctx.n_iter >= ctx.max_iter:
        return "max_iter"
    return None


# --------------------------------------------------------------------------- parallel
def _parallel_step(ctx, ev, step, robust):
    """One parallel EP sweep from evaluation ``ev`` (reference = q's marginals).

    Returns (new evaluation, actual max change, step used, safeguard_active).
    """
    d_prec = ev.proposal_precision - ev.precision
    d_shift = ev.proposal_shift - ev.shift
    delta = np.full(d_prec.shape, float(step))
    safeguard = False
    for _ in range(30):
        new_prec = ev.precision + delta * d_prec
        new_shift = ev.shift + delta * d_shift
        try:
            new_ev = _evaluate(ctx, new_prec, new_shift)
        except InvalidSiteConfiguration:
            safeguard = True
            delta = 0.5 * delta
            continue
        # Jylänki et al. (2011) §4, modification 2: the new cavities must stay positive;
        # otherwise halve the step.
        if robust and np.any(ev.valid & ~new_ev.valid):
            safeguard = True
            delta = 0.5 * delta
            continue
        change = max_abs(delta * d_prec, delta * d_shift)
        return new_ev, change, float(np.max(delta)) if delta.size else step, safeguard
    return None, 0.0, 0.0, True


def _mean_step(ev, eta):
    """Mean-sweep step of the site shifts (n,) (zero at invalid sites), eq. M1 of
    docs/derivations/engine_floor.md: (m^_i - mu_i) / (eta sigma_i^2)."""
    # tilted mean from the cavity and the proposed site (moment matching, eq. 15)
    with np.errstate(divide="ignore", invalid="ignore"):
        m_hat = (ev.cav_shift + eta * ev.proposal_shift) / (
            ev.cav_precision + eta * ev.proposal_precision
        )
        step = (m_hat - ev.post.mean) * (ev.ref_precision / eta)
    return step if ev.valid.all() else np.where(ev.valid, step, 0.0)


def _mean_sweeps(ctx, ev, max_sweeps):
    """Mean sweeps: update the site shifts only, at fixed site precisions, in O(n^2) each.

    Sigma, the marginal variances and the cavity precisions depend on the site precisions
    only, so they stay fixed and every cavity stays valid.  Each sweep sets every site
    shift so that q's marginal mean equals the tilted mean at the current cavity, with
    q's marginal precision kept (docs/derivations/engine_floor.md, eq. M1):

        nu~_i <- (m^_i / sigma_i^2 - nu_-i) / eta,

    and rebuilds the mean from the existing factorisation
    (``SitePosterior.with_site_shift``).  An EP fixed point is a fixed point of this
    map, so the engine's fixed points do not change.  A sweep is kept only while the
    mean mismatch max_i |m^_i - mu_i| / (eta sigma_i^2) shrinks; the sweeps stop at
    ``max_sweeps``, when the run has converged, at the first sweep that does not help, or
    when the mismatch is below ``mean_sweep_fraction`` (:func:`robustep.get_config`) times
    the largest proposed change of a site precision (then the precisions hold the run
    back, not the means).
    Returns (evaluation, number of sweeps kept).
    """
    if not ev.post.supports_site_shift or not ev.ref_is_q:
        return ev, 0
    eta = ctx.power
    fraction = get_config().mean_sweep_fraction
    kept = 0
    step = _mean_step(ev, eta)
    size = max_abs(step)
    for _ in range(max_sweeps):
        if _stop_status(ctx, ev) == "converged":
            break
        # enough: the means are consistent compared with what the precisions still lack
        if size < fraction * max_abs(ev.proposal_precision - ev.precision):
            break
        shift = ev.shift + step  # eq. M1
        if not np.all(np.isfinite(shift)):
            break
        try:
            trial = _evaluate(ctx, ev.precision, shift, post=ev.post.with_site_shift(shift))
        except InvalidSiteConfiguration:
            break
        trial_step = _mean_step(trial, eta)
        trial_size = max_abs(trial_step)
        if not (np.all(trial.valid >= ev.valid) and trial_size < size):
            break
        ev, step, size, kept = trial, trial_step, trial_size, kept + 1
    ctx.pending_mean_sweeps += kept
    return ev, kept


def _run_parallel(ctx, ev, *, robust, max_sweeps, patience=None, min_sweeps=0, step=None):
    """Parallel sweeps until convergence, ``max_sweeps``, or (with ``patience``) stalling.

    ``patience``: after ``min_sweeps`` sweeps, stop with status "stalled" when the
    residual has not reached a new minimum (by at least 10%) for this many
    consecutive sweeps; also "stalled" when a step had to be rejected entirely.
    ``step`` defaults to 1 - damping.
    """
    step = 1.0 - ctx.damping if step is None else step
    best, since_best = np.inf, 0
    for sweep in range(max_sweeps):
        status = _stop_status(ctx, ev)
        if status:
            return ev, status
        new_ev, change, used, _ = _parallel_step(ctx, ev, step, robust)
        if new_ev is None:
            return ev, "stalled"
        if robust and ctx.mean_sweeps:
            new_ev, kept = _mean_sweeps(ctx, new_ev, ctx.mean_sweeps)
            if kept:
                change = max_abs(new_ev.precision - ev.precision, new_ev.shift - ev.shift)
        ev = new_ev
        if ctx.record("parallel", ev, change, used):
            return ev, "callback"
        if ev.residual < 0.9 * best:
            best, since_best = ev.residual, 0
        else:
            since_best += 1
        if patience is not None and since_best >= patience and sweep + 1 >= min_sweeps:
            return ev, "stalled"
    return ev, _stop_status(ctx, ev) or "max_iter"


def _run_parallel_halving(ctx, ev, min_sweeps, halvings):
    """Parallel sweeps with patience ``stall_patience`` (:func:`robustep.get_config`) from
    step 1 - damping; on a stall halve the step (at most ``halvings`` times) and go on.
    Returns (evaluation, status)."""
    patience = get_config().stall_patience
    step = 1.0 - ctx.damping
    for attempt in range(halvings + 1):
        ev, status = _run_parallel(
            ctx, ev, robust=True, max_sweeps=ctx.max_iter, patience=patience,
            min_sweeps=min_sweeps if attempt == 0 else patience, step=step,
        )  # fmt: skip
        if status != "stalled" or ctx.n_iter >= ctx.max_iter:
            break
        step *= 0.5
    return ev, status


# --------------------------------------------------------------------------- double loop
def _directional(ev, d_prec, d_shift, eta):
    """Slope of L(lambda~; lambda_s) at ``ev`` along (d_prec, d_shift).

    dL/dnu~_i = mu_i - m^_i and dL/dtau~_i = -(E_q[f_i^2] - E_tilted[f_i^2]) / 2
    (docs/derivations/double_loop.md), with the tilted moments recovered from
    the cavity and the proposed site.
    """
    mu, s2 = ev.post.mean, ev.post.var
    v_hat = 1.0 / (ev.cav_precision + eta * ev.proposal_precision)
    m_hat = (ev.cav_shift + eta * ev.proposal_shift) * v_hat
    g_shift = mu - m_hat
    g_prec = -0.5 * (s2 + mu**2 - v_hat - m_hat**2)
    return float(np.sum(g_shift * d_shift + g_prec * d_prec))


def _run_double_loop(ctx, ev, *, max_inner=2, inner_reduction=0.1):
    """Double-loop EP (Heskes & Zoeter 2002; Jylänki et al. 2011 §3.6 and §4, mods 1, 3, 4).

    Outer loop: reference marginals lambda_s <- q's marginals.  Inner loop:
    minimise the convex L(lambda~; lambda_s) along moment-matching directions
    Delta = (lambda_tilted - lambda_q) / eta with a backtracking line search
    (cubic interpolation) that keeps every cavity positive.  The inner loop
    stops when the direction has shrunk by ``inner_reduction`` relative to its
    size at the start of the outer iteration (or below ``tol``), or after
    ``max_inner`` steps.
    """

    eta = ctx.power
    step = eta / (1.0 + eta)  # diagonal Newton step along the moment-matching direction
    idle_outer = 0
    wait, backoff = 0, 1  # outer iterations until the next parallel probe (eq. D1)
    limited = False  # the last inner step was short (see _line_search)
    # D1 only after parallel sweeps (which chose the fixed point); a pure double loop
    # (no parallel sweeps) stays a pure line-searched method
    accelerate = ctx.n_iter > 0
    while True:
        status = _stop_status(ctx, ev)
        if status:
            return ev, status
        if not np.isfinite(ev.objective):
            return ev, "invalid"
        if idle_outer >= 3:  # neither inner steps nor outer updates make progress
            return ev, "stalled"
        n_before = ctx.n_iter
        if accelerate and limited and wait <= 0:
            # eq. D1: when the last inner step was short (t < 0.1, typically near the
            # cavity limit of a site of the fixed reference), try a parallel EP step (its
            # reference moves with q, so those limits do not apply); keep it when it lowers
            # the largest moment-matching residual; after a rejected try the next one waits
            # 1, 2, 4 ... outer iterations
            ev_q = ev if ev.ref_is_q else _evaluate(ctx, ev.precision, ev.shift, post=ev.post)
            trial, change, used, _ = _parallel_step(ctx, ev_q, 1.0 - ctx.damping, True)
            if (
                np.all(ev_q.valid)
                and trial is not None
                and np.isfinite(trial.objective)
                and np.all(trial.valid)
                and trial.residual < ev_q.residual
            ):
                ev, backoff = trial, 1
                if ctx.record("double-loop-parallel", ev, change, used):
                    return ev, "callback"
                continue
            wait, backoff = backoff, 2 * backoff
        wait -= 1
        start_size = None
        for _ in range(max_inner):
            tilt_prec = ev.cav_precision + eta * ev.proposal_precision
            tilt_shift = ev.cav_shift + eta * ev.proposal_shift
            d_prec = (tilt_prec - ev.marg_precision) / eta
            d_shift = (tilt_shift - ev.marg_shift) / eta
            size = max_abs(d_prec, d_shift)
            start_size = size if start_size is None else start_size
            slope = _directional(ev, d_prec, d_shift, eta)
            if size < max(ctx.tol, inner_reduction * start_size) and size < start_size:
                break
            if slope >= 0.0:
                break
            new_ev, used, limited = _line_search(
                ctx, ev, d_prec, d_shift, slope, min(1.0, 2.0 * step)
            )
            if new_ev is None:
                break
            step = used
            ev = new_ev
            if ctx.record("double-loop", ev, used * size, used, residual=size):
                return ev, "callback"
            if ctx.n_iter >= ctx.max_iter:
                break
        idle_outer = idle_outer + 1 if ctx.n_iter == n_before else 0
        ev = _outer_update(ctx, ev)


def _outer_update(ctx, ev):
    """Move the reference marginals lambda_s to q's marginals.

    Where that would make a cavity precision non-positive (Jylänki et al. 2011
    §4 mention this "rare case"), the site's reference moves only part of the
    way, keeping at least half of its current cavity precision; repeated outer
    updates then approach q's marginals while the inner loop adapts the site.
    """
    eta = ctx.power
    q_prec, q_shift = ev.marg_precision, ev.marg_shift
    cav_now = ev.ref_precision - eta * ev.precision
    cav_target = q_prec - eta * ev.precision
    short = cav_target < 0.5 * cav_now
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = np.where(short, 0.5 * cav_now / (ev.ref_precision - q_prec), 1.0)
    rho = np.clip(rho, 0.0, 1.0)
    ref_prec = ev.ref_precision + rho * (q_prec - ev.ref_precision)
    ref_shift = ev.ref_shift + rho * (q_shift - ev.ref_shift)
    return _evaluate(ctx, ev.precision, ev.shift, ref=(ref_prec, ref_shift), post=ev.post)


def _line_search(ctx, ev, d_prec, d_shift, slope, first_step, max_tries=12):
    """Backtracking search along t for a step that decreases L (Armijo).

    Jylänki et al. (2011) §4, modifications 1, 2 and 4.  Each site moves by
    ``min(t, limit_i) * Delta_i``, where ``limit_i`` keeps its cavity precision
    positive; a per-site scaling keeps a descent direction because every site's
    own term of the slope is non-positive (docs/derivations/double_loop.md).
    Returns (evaluation or None, t, short) where ``short``: t < 0.1 or some site was held
    back by its limit.
    """
    eta = ctx.power
    room = ev.ref_precision * (1.0 - 1e-6) - eta * ev.precision
    grow = d_prec > 0
    limits = np.where(grow, 0.99 * room / np.where(grow, eta * d_prec, 1.0), np.inf)
    limits = np.maximum(limits, 0.0)
    if np.all(limits <= 0):
        return None, 0.0, False
    ref = (ev.ref_precision, ev.ref_shift)
    f0 = ev.objective
    t = float(first_step)
    for _ in range(max_tries):
        delta = np.minimum(t, limits)
        dp, ds = delta * d_prec, delta * d_shift
        try:
            trial = _evaluate(ctx, ev.precision + dp, ev.shift + ds, ref=ref)
        except InvalidSiteConfiguration:
            t *= 0.5
            continue
        f1 = trial.objective
        slope_t = _directional(ev, dp, ds, eta)  # slope along the scaled direction
        if np.isfinite(f1) and f1 <= f0 + 1e-4 * slope_t:
            return trial, t, bool(t < 0.1 or np.any(limits < t))
        if np.isfinite(f1):
            slope1 = _directional(trial, dp, ds, eta)
            # Near the optimum the rounding noise of L (quadrature, log-determinant; about
            # 1e-10 relative) hides the decrease.  Accept by the approximate Wolfe conditions
            # of Hager & Zhang (2005), or when L stays within its noise while the
            # moment-matching residual shrinks.
            noise = 1e-9 * max(1.0, abs(f0))
            if f1 <= f0 + noise and (
                abs(slope1) <= 0.9 * abs(slope_t)
                or _direction_size(trial, eta) <= 0.9 * max_abs(d_prec, d_shift)
            ):
                return trial, t, bool(t < 0.1 or np.any(limits < t))
            t *= _interpolate_step(f0, slope_t, f1, slope1, 1.0)
        else:
            t *= 0.5
    return None, 0.0, False


def _direction_size(ev, eta):
    """Largest entry of the moment-matching direction (lambda_tilted - lambda_q) / eta."""
    return max_abs(
        (ev.cav_precision + eta * ev.proposal_precision - ev.marg_precision) / eta,
        (ev.cav_shift + eta * ev.proposal_shift - ev.marg_shift) / eta,
    )


def _interpolate_step(f0, g0, f1, g1, t):
    """Minimiser of the cubic with values/slopes (f0, g0) at 0 and (f1, g1) at t.

    Falls back to the quadratic through (f0, g0, f1); result clipped to [0.1 t, 0.5 t].
    """
    d1 = g0 + g1 - 3.0 * (f1 - f0) / t
    disc = d1 * d1 - g0 * g1
    if disc >= 0 and np.isfinite(disc):
        d2 = np.sqrt(disc)
        denom = g1 - g0 + 2.0 * d2
        new = t - t * (g1 + d2 - d1) / denom if denom != 0 else np.nan
    else:
        new = np.nan
    if not np.isfinite(new) or new <= 0:
        curv = f1 - f0 - g0 * t
        new = -g0 * t * t / (2.0 * curv) if curv > 0 else 0.5 * t
    return float(np.clip(new, 0.1 * t, 0.5 * t))


# --------------------------------------------------------------------------- sequential
def _repair_invalid_cavities(ctx, ev, max_halvings=60):
    """Shrink the negative sites until every cavity is valid (eq. S3).

    A cavity of site i at power 1 does not depend on site i itself: it is improper only
    because other sites have negative precision.  With all negative sites removed the
    leave-one-out posteriors are proper (prior N(0, K) times non-negative sites), so
    halving the negative sites (precision and shift together) reaches a valid state.
    Returns the new evaluation, or ``ev`` unchanged when it fails.
    """
    precision, shift = ev.precision.copy(), ev.shift.copy()
    neg = precision < 0
    if not np.any(neg):
        return ev
    for _ in range(max_halvings):
        precision[neg] *= 0.5
        shift[neg] *= 0.5
        try:
            new = _evaluate(ctx, precision, shift)
        except InvalidSiteConfiguration:
            continue
        if np.all(new.valid):
            return new
    return ev


def _run_sequential(ctx, ev, *, robust):
    """Sequential EP with rank-one updates of Sigma and a fresh factorisation after every pass.

    Jylänki et al. (2011) §4 for the sequential schedule (docs/derivations/double_loop.md,
    "Improper cavities and slow double loops"): a site whose cavity is improper is
    skipped (Minka & Lafferty 2002); after the pass the negative sites that made it
    improper are shortened (eq. S3) and the skipped site is retried on the next pass, so a
    run never ends with an improper cavity (nor log Z = NaN).  A step that would make
    Sigma indefinite is shortened (eq. S2).  The same safeguards apply with
    ``robust=False``.
    """
    n = ev.precision.size
    eta = ctx.power
    step = 1.0 - ctx.damping
    min_cav = get_config().min_cavity_precision
    while True:
        if not np.all(ev.valid):
            # some cavity turned improper during the last pass (or at the start): shorten
            # the negative sites that caused it (eq. S3), then retry the skipped sites
            repaired = _repair_invalid_cavities(ctx, ev)
            if repaired is ev:
                return ev, "invalid cavities"
            ev = repaired
        status = _stop_status(ctx, ev)
        if status:
            return ev, status
        precision, shift = ev.precision.copy(), ev.shift.copy()
        Sigma = ev.post.covariance()
        mu = ev.post.mean.copy()
        change = 0.0
        for i in range(n):  # inherently sequential: one site at a time
            s2, m = Sigma[i, i], mu[i]
            q_prec = 1.0 / s2
            cav_prec = q_prec - eta * precision[i]
            if not cav_prec > min_cav * q_prec:
                continue  # skipped, retried on the next pass
            cav_var = 1.0 / cav_prec
            cav_mean = (m * q_prec - eta * shift[i]) * cav_var
            p, s, _, _ = ctx.rule(
                ctx.likelihood, ctx.y[i : i + 1], np.array([cav_mean]), np.array([cav_var]),
                precision[i : i + 1], shift[i : i + 1], eta,
            )  # fmt: skip
            if not (np.isfinite(p[0]) and np.isfinite(s[0])):
                continue
            d_prec = step * (p[0] - precision[i])
            d_shift = step * (s[0] - shift[i])
            denom = 1.0 + d_prec * s2
            if denom <= 1e-10:  # the update would make Sigma indefinite: shorten it
                scale = (1.0 - 1e-3) / (-d_prec * s2)
                d_prec, d_shift = scale * d_prec, scale * d_shift
                denom = 1.0 + d_prec * s2
            col = Sigma[:, i].copy()
            Sigma -= (d_prec / denom) * np.outer(col, col)
            mu += ((d_shift - d_prec * m) / denom) * col
            precision[i] += d_prec
            shift[i] += d_shift
            change = max(change, abs(d_prec), abs(d_shift))
        try:
            ev = _evaluate(ctx, precision, shift)
        except InvalidSiteConfiguration:
            return ev, "invalid"
        if ctx.record("sequential", ev, change, step):
            return ev, "callback"


# --------------------------------------------------------------------------- entry point
def _check_tol_units(tol_units):
    if not isinstance(tol_units, str) or tol_units not in TOL_UNITS:
        raise ValueError(f"tol_units must be one of {TOL_UNITS}, got {tol_units!r}")


def _check_inputs(K, y, likelihood, schedule, damping, power, max_iter, tol):
    if not isinstance(likelihood, Likelihood):
        raise TypeError(
            f"likelihood must be a robustep.likelihoods.Likelihood, got {type(likelihood).__name__}"
        )
    prior = as_prior(K)
    n = prior.n
    y = likelihood.validate_targets(y)
    if y.shape[0] != n:
        raise ValueError(
            f"y has {y.shape[0]} entries but K is {n} x {n} (the prior has {n} latent values); "
            "pass one target per row of K"
        )
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    if schedule == "sequential" and not prior.supports_sequential:
        raise ValueError(
            f"schedule='sequential' needs the full posterior covariance, which "
            f"{type(prior).__name__} does not form; use schedule='parallel'"
        )
    if not (isinstance(damping, numbers.Real) and 0.0 <= damping < 1.0):
        raise ValueError(f"damping must be in [0, 1) (0 = no damping), got {damping!r}")
    if not (isinstance(power, numbers.Real) and 0.0 < power <= 1.0):
        raise ValueError(f"power must be in (0, 1], got {power!r}")
    if not (isinstance(max_iter, numbers.Integral) and max_iter >= 1):
        raise ValueError(f"max_iter must be a positive integer, got {max_iter!r}")
    if not (isinstance(tol, numbers.Real) and tol > 0):
        raise ValueError(f"tol must be positive, got {tol!r}")
    return prior, y


def _is_never(double_loop):
    return isinstance(double_loop, str) and double_loop == "never"


def _check_double_loop(double_loop):
    """Raise ValueError for anything but None, a bool or "never"."""
    if double_loop is None or isinstance(double_loop, (bool, np.bool_)) or _is_never(double_loop):
        return
    raise ValueError(f'double_loop must be None, True, False or "never", got {double_loop!r}')


def _check_max_factorisations(max_factorisations):
    if max_factorisations is None:
        return None
    if not (isinstance(max_factorisations, numbers.Integral) and max_factorisations >= 0):
        raise ValueError(
            f"max_factorisations must be None or an integer >= 0, got {max_factorisations!r}"
        )
    return int(max_factorisations)


def _check_mean_sweeps(mean_sweeps, site_update):
    if isinstance(mean_sweeps, str) and mean_sweeps == "auto":
        return 3 if site_update is None else 0
    if not (isinstance(mean_sweeps, numbers.Integral) and mean_sweeps >= 0):
        raise ValueError(f'mean_sweeps must be "auto" or an integer >= 0, got {mean_sweeps!r}')
    if mean_sweeps and site_update is not None:
        raise ValueError(
            "mean_sweeps need the moment-matching update; pass mean_sweeps=0 with a custom "
            "site_update"
        )
    return int(mean_sweeps)


def _initial_sites(init, n, name="init", strings=()):
    """(site_precision, site_shift) copies, (n,) each, from ``init``: None (zero sites), an
    EPResult or a pair of arrays; ``name`` is the argument the error messages name and
    ``strings`` the string values the caller resolves before (listed in the message for
    any other string)."""
    if init is None:
        return np.zeros(n), np.zeros(n)
    if isinstance(init, str):
        accepted = "".join(f'"{s}", ' for s in strings)
        raise ValueError(
            f"{name} must be None, {accepted}a (site_precision, site_shift) pair or an "
            f"EPResult, got {init!r}"
        )
    if isinstance(init, EPResult):
        init = (init.site_precision, init.site_shift)
    try:
        precision, shift = (np.array(a, dtype=float) for a in init)
    except (TypeError, ValueError) as error:  # not iterable, not two entries, not numbers
        raise type(error)(
            f"{name} must be an EPResult or a (site_precision, site_shift) pair of arrays, "
            f"got {type(init).__name__}"
        ) from None
    if precision.shape != (n,) or shift.shape != (n,):
        raise ValueError(f"{name} must be (site_precision, site_shift) of shape ({n},)")
    if not (np.all(np.isfinite(precision)) and np.all(np.isfinite(shift))):
        raise ValueError(f"{name} contains NaN or inf")
    return precision, shift


def expectation_propagation(
    K,
    y,
    likelihood,
    *,
    schedule="parallel",
    damping=0.0,
    power=1.0,
    robust=True,
    max_iter=1000,
    tol=1e-4,
    init=None,
    callback=None,
    site_update=None,
    n_parallel_init=10,
    double_loop=None,
    max_inner=2,
    mean_sweeps="auto",
    max_factorisations=None,
    tol_units="sites",
):
    """Expectation propagation for p(f) = N(0, K) and sites p(y_i | f_i).

    Parameters
    ----------
    K : (n, n) prior covariance (not modified; checked to be symmetric positive
        semi-definite), or a :class:`robustep.posterior.GaussianPrior` (e.g.
        ``DensePrior(K, check=False)`` to skip the O(n^3) check, or a low-rank prior).
        K may be an array of another array-API library (a torch tensor on a GPU, CuPy):
        the factorisations then run there and the result's (n,) arrays are of that kind
        (:class:`robustep.posterior.ArrayPrior`; y stays a host array).
    y : (n,) targets, validated by ``likelihood.validate_targets``.
    likelihood : a :class:`robustep.likelihoods.Likelihood`.
    schedule : "parallel" (all sites from fixed marginals, one factorisation per
        sweep) or "sequential" (rank-one updates, re-factorised after every pass).
    damping : weight kept on the old site value, in [0, 1); step delta = 1 - damping
        (Jylänki et al. 2011 eqs. 12, 15).
    power : fractional EP power eta in (0, 1] (eqs. 14–15).
    robust : parallel schedule: keep cavity precisions positive; when parallel sweeps stall
        or oscillate, halve the step (at most twice) and then switch to the double loop
        (§4); with a custom ``site_update`` (no EP objective to line-search) halve the
        step up to five times instead.  Sequential schedule: skip sites with
        non-positive cavity precision (retried after shortening the negative sites that
        made it non-positive) and shorten steps that would make the posterior indefinite
        (also with ``robust=False``).  ``robust=False`` still never produces NaN: invalid
        cavities are skipped and invalid configurations are halved back.
    max_iter : maximum number of sweeps (inner iterations in the double loop).
    tol : convergence when the largest undamped site change (natural parameters) < tol.
    init : None (sites zero, q = prior), a ``(site_precision, site_shift)`` pair, an
        :class:`EPResult` (warm start), or ``"subset"``: start from the sites of FITC EP
        on a random subset of min(200, max(20, n // 10)) rows of K (O(n m^2) per sweep;
        :mod:`robustep.ep.subset_start`), which cuts the O(n^3) sweeps of a large
        problem by about half.  ``"subset"`` applies to a dense K (an array or a
        ``DensePrior``) with the parallel schedule; elsewhere, or when the subset run
        fails or its sites give an invalid dense posterior, it starts from zero sites
        without a warning.  The fixed points do not depend on ``init``.
    callback : called after every sweep with a dict (iteration, phase, site_precision,
        site_shift, mean (posterior mean of f), alpha (mu = K alpha), max_change, residual,
        log_Z); return True to stop.
    site_update : site update rule (see :mod:`robustep.ep.updates`); default moment matching.
    n_parallel_init : number of parallel sweeps before the double loop when
        ``double_loop=True`` (0 gives a pure double loop).  With the automatic choice
        (``robust=True``, ``double_loop=None``) at least ``n_parallel_init`` parallel
        sweeps are made, and more while they make progress (a new smallest residual,
        by 10%, at least every ``stall_patience`` sweeps of :func:`robustep.get_config`,
        default 5); the double loop takes over when they stall
        or oscillate.
    double_loop : None (automatic, see ``robust``), True (double loop after
        ``n_parallel_init`` parallel sweeps), False (never; plain robust parallel sweeps,
        no step halving) or "never" (the automatic choice's parallel sweeps with step
        halving, but a stall ends the run, status "stalled", instead of starting the
        double loop: for the inner runs of a hyperparameter search, which discard a run
        that does not converge within a small budget anyway; the double loop's
        line-search trials, one factorisation each, are not counted in ``max_iter``).
    max_inner : inner-loop iterations per outer update of the double loop (default 2,
        as in Jylänki et al. §4).  1 makes every parallel step line-searched on the EP
        objective (modifications 1, 2, 4); larger values iterate the inner loop towards
        consistency (modification 3).  On four seeds of example 2, 2 converged fastest
        where it converged (3 of 4 seeds); only 10 converged on all four, more slowly
        (docs/derivations/double_loop.md).
    mean_sweeps : "auto" or int >= 0.  After each robust parallel sweep, up to this many
        O(n^2) sweeps that move only the site shifts, at fixed site precisions, towards
        mean consistency (q's marginal means equal the tilted means), reusing the sweep's
        factorisation; each is kept only while it shrinks the mean mismatch, and they
        stop once that is below ``mean_sweep_fraction`` (:func:`robustep.get_config`,
        default 0.3) times the largest proposed change of a site precision.
        The fixed points are EP's; they cut the O(n^3) sweeps about in half for probit
        (docs/derivations/engine_floor.md).  "auto": 3 with moment matching
        (``site_update=None``), 0 with a custom update rule.  They run with ``robust=True``
        only (``robust=False`` is plain parallel EP) and are not counted in ``n_iter``;
        ``history["mean_sweeps"]`` has the number kept after each sweep.
    max_factorisations : None (no limit) or an integer >= 0: at most this many posterior
        factorisations in all (the initial posterior is always formed and counted).
        ``max_iter`` counts accepted sweeps only, while a parallel sweep whose trial step
        makes the posterior indefinite or a cavity improper halves the step and factorises
        again (up to 30 times) and the double loop's line search factorises once per
        trial; this bounds the work.  A run that reaches it stops at its latest accepted
        state, not converged, status "max_factorisations" (``n_factorisations`` of the
        result counts them).  For the inner runs of a hyperparameter search, which discard
        a run that does not converge within a small budget.
    tol_units : "sites" (default) or "marginal": how the residual that ``tol`` bounds
        measures the proposed site changes.  "sites": the largest change of a site's
        natural parameters (τ̃_i, ν̃_i).  "marginal": the largest first-order change a
        site's own change makes to its marginal of q, ``max(var_i |Δτ̃_i|, sqrt(var_i)
        |Δν̃_i − mean_i Δτ̃_i|)`` (:func:`marginal_residual`), which does not grow with the
        sites' size (the
        label-noise step likelihood's sites reach precisions of 10⁵ at n = 2000).
        The fixed points are the same; only where a run stops differs.  Applies to the
        parallel schedule's sweeps and to the convergence test of the final state.

    Returns
    -------
    EPResult
    """
    prior, y = _check_inputs(K, y, likelihood, schedule, damping, power, max_iter, tol)
    _check_tol_units(tol_units)
    _check_double_loop(double_loop)
    n = prior.n
    rule = moment_matching_update if site_update is None else site_update
    ctx = _Context(prior, y, likelihood, rule, float(power), float(damping), float(tol),
                   int(max_iter), callback)  # fmt: skip
    ctx.mean_sweeps = _check_mean_sweeps(mean_sweeps, site_update)
    ctx.tol_units = tol_units
    budget = _check_max_factorisations(max_factorisations)
    subset = isinstance(init, str) and init == "subset"
    if subset:
        init = resolve_subset_start(
            prior, y, likelihood, run=expectation_propagation, schedule=schedule,
            power=power, damping=damping, site_update=site_update,
        )  # fmt: skip
    precision, shift = _initial_sites(init, n, strings=("subset",))
    try:
        ev = _evaluate(ctx, precision, shift)
    except InvalidSiteConfiguration:
        if not subset:  # the subset start is a heuristic: fall back quietly
            warn("init gives an invalid posterior; starting from the prior")
        ev = _evaluate(ctx, np.zeros(n), np.zeros(n))
    ctx.last, ctx.max_factorisations = ev, budget
    try:
        ev, status = _run(ctx, ev, schedule, robust, site_update, double_loop,
                          n_parallel_init, max_inner)  # fmt: skip
    except _OutOfFactorisations:
        ev, status = ctx.last, "max_factorisations"
    ctx.max_factorisations = None  # describing the final state is not budgeted
    result = _finish(ctx, ev, status)
    # array backends: K given as a torch / CuPy / ... array -> results of that kind
    return result if isinstance(K, GaussianPrior) else ctx.prior.convert_result(result)


def _run(ctx, ev, schedule, robust, site_update, double_loop, n_parallel_init, max_inner):
    """The chosen schedule from the initial evaluation ``ev``: (evaluation, status)."""
    if schedule == "sequential":
        ev, status = _run_sequential(ctx, ev, robust=robust)
    else:
        automatic = robust and site_update is None
        never = _is_never(double_loop)
        use_double = automatic if double_loop is None else bool(double_loop) and not never
        if never and automatic:
            # the automatic choice's parallel phase; a stall ends the run
            ev, status = _run_parallel_halving(ctx, ev, n_parallel_init, halvings=2)
        elif use_double:
            if double_loop:
                ev, status = _run_parallel(ctx, ev, robust=True, max_sweeps=n_parallel_init)
            else:
                # Damped parallel initialisation: undamped (or the user's damping) first; when
                # the sweeps stall or oscillate, halve the step twice before the double loop.
                ev, status = _run_parallel_halving(ctx, ev, n_parallel_init, halvings=2)
            if status in ("stalled", "max_iter") and ctx.n_iter < ctx.max_iter:
                ev, status = _run_double_loop(
                    ctx, _evaluate(ctx, ev.precision, ev.shift), max_inner=max_inner
                )
        elif robust and site_update is not None:
            # A custom update (e.g. REP) has no EP objective for the double loop to
            # line-search, so a stall only halves the step (up to five times).
            ev, status = _run_parallel_halving(ctx, ev, n_parallel_init, halvings=5)
        else:
            ev, status = _run_parallel(ctx, ev, robust=robust, max_sweeps=ctx.max_iter)
    return ev, status


def _finish(ctx, ev, status):
    # the final state is always described with reference = q's marginals (the parallel
    # and sequential schedules end on such an evaluation; the double loop may not)
    if not ev.ref_is_q:
        ev = _evaluate(ctx, ev.precision, ev.shift, post=ev.post)
    repaired = False
    if not np.all(ev.valid):
        # never return an improper cavity (log Z = NaN): shrink the negative sites that
        # cause it (docs/derivations/double_loop.md eq. S3); the run is reported as not
        # converged either way
        new = _repair_invalid_cavities(ctx, ev)
        repaired = new is not ev
        ev = new
    converged = bool(ev.residual < ctx.tol and np.all(ev.valid)) and not repaired
    n_invalid = int(np.count_nonzero(~ev.valid))
    cav_var = np.where(ev.valid, 1.0 / np.where(ev.valid, ev.cav_precision, 1.0), np.nan)
    cav_mean = np.where(ev.valid, ev.cav_shift * cav_var, np.nan)
    if converged:
        message = f"converged after {ctx.n_iter} iterations"
    else:
        message = (
            f"EP did not converge ({status}) after {ctx.n_iter} iterations: largest site "
            f"residual {ev.residual:.3g} > tol {ctx.tol:g}"
        )
        if n_invalid:
            message += f"; {n_invalid} sites have non-positive cavity precision"
        if repaired:
            message += (
                "; some cavities were improper at the end, so the negative sites were shrunk "
                "until every cavity is proper"
            )
        if not ctx.stopped_by_callback:
            warn(message, ConvergenceWarning)
    log_Z = float(ev.objective)
    if not np.isfinite(log_Z):
        message += "; log_Z is undefined (NaN) because some cavities are invalid"
    return EPResult(
        mean=ev.post.mean,
        var=ev.post.var,
        site_precision=ev.precision,
        site_shift=ev.shift,
        cavity_mean=cav_mean,
        cavity_var=cav_var,
        log_Z=log_Z,
        converged=converged,
        n_iter=ctx.n_iter,
        n_factorisations=ctx.n_factorisations,
        history=ctx.history,
        site_info=ev.info,
        power=ctx.power,
        n_invalid_cavities=n_invalid,
        message=message,
        posterior=ev.post,
    )
