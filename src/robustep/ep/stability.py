"""Local stability of an EP fixed point under parallel and damped parallel EP.

Parallel EP is the fixed-point iteration x ← g(x) on the site parameters
x = (τ̃, ν̃): g computes every cavity from q(x), matches the tilted moments and returns
the proposed sites (Minka 2001; Jylänki et al. 2011 eqs. 14–15 with a power η).
Damping with weight d iterates x ← d x + (1 − d) g(x).  Near a fixed point x* both
maps are linear with Jacobians J = ∂g/∂x and d I + (1 − d) J, so a fixed point
attracts the damped iteration exactly when every eigenvalue λ of J moves inside the
unit circle under λ ↦ d + (1 − d) λ.  That is possible for some d < 1 if and only if
every eigenvalue has Re λ < 1; an eigenvalue with Re λ ≥ 1 makes the fixed point
repelling for every damping (docs/derivations/ep_stability.md).

:func:`fixed_point_stability` estimates J by finite differences and returns the
eigenvalues with the quantities a user needs to choose a damping or to see that no
damping can reach the point.
"""

from __future__ import annotations

import dataclasses
import numbers

import numpy as np
from scipy import optimize

from robustep._config import get_config
from robustep.ep.engine import _check_inputs, _Context, _evaluate
from robustep.ep.state import EPResult
from robustep.ep.updates import moment_matching_update
from robustep.linalg import InvalidSiteConfiguration

__all__ = ["FixedPointStability", "fixed_point_stability"]


@dataclasses.dataclass(frozen=True)
class FixedPointStability:
    """Eigenvalues of the parallel EP map's Jacobian at one site configuration.

    Attributes
    ----------
    eigenvalues : (2n,) complex
        Eigenvalues λ of J = ∂g/∂(τ̃, ν̃), the Jacobian of the undamped parallel EP map,
        sorted by decreasing modulus.
    residual : float
        max |g(x) − x| over both site parameters at the evaluated point: how far the
        point is from a fixed point (the analysis describes the fixed point only when
        this is small).
    n_factorisations : int
        Posterior factorisations spent (1 + 2n with forward, 1 + 4n with central
        differences).
    """

    eigenvalues: np.ndarray
    residual: float
    n_factorisations: int

    @property
    def spectral_radius(self) -> float:
        """max |λ|: the asymptotic contraction per sweep of undamped parallel EP (< 1
        means the fixed point attracts it)."""
        return float(np.max(np.abs(self.eigenvalues))) if self.eigenvalues.size else 0.0

    @property
    def largest_real_part(self) -> float:
        """max Re λ: below 1 exactly when some damping d < 1 makes the point attracting."""
        return float(np.max(self.eigenvalues.real)) if self.eigenvalues.size else -np.inf

    @property
    def damping_converges(self) -> bool:
        """True when damped parallel EP with a large enough damping converges locally."""
        return self.largest_real_part < 1.0

    @property
    def smallest_damping(self) -> float | None:
        """The infimum of the dampings d ∈ [0, 1) under which the fixed point attracts
        damped parallel EP: ``max(0, 1 − min_i 2 (1 − Re λ_i) / |1 − λ_i|²)``; 0 when
        undamped EP already converges locally, None when no damping does."""
        if not self.damping_converges:
            return None
        lam = self.eigenvalues
        if not lam.size:
            return 0.0
        distance = np.abs(1.0 - lam) ** 2
        with np.errstate(divide="ignore"):
            bound = np.where(distance > 0, 2.0 * (1.0 - lam.real) / distance, np.inf)
        return float(max(0.0, 1.0 - np.min(bound)))

    def rate(self, damping: float) -> float:
        """Asymptotic contraction per sweep of damped parallel EP with weight ``damping``:
        ``max_i |d + (1 − d) λ_i|`` (below 1 means the point attracts it)."""
        if not (isinstance(damping, numbers.Real) and 0.0 <= damping < 1.0):
            raise ValueError(f"damping must be in [0, 1), got {damping!r}")
        if not self.eigenvalues.size:
            return 0.0
        return float(np.max(np.abs(damping + (1.0 - damping) * self.eigenvalues)))

    @property
    def best_damping(self) -> float | None:
        """The damping in [0, 1) with the smallest :meth:`rate` (the rate is convex in d,
        a maximum of moduli of affine functions); None when no damping converges."""
        if not self.damping_converges:
            return None
        if not self.eigenvalues.size:
            return 0.0
        found = optimize.minimize_scalar(
            self.rate, bounds=(0.0, 1.0 - 1e-12), method="bounded", options={"xatol": 1e-10}
        )
        return float(found.x) if self.rate(float(found.x)) < self.rate(0.0) else 0.0


def fixed_point_stability(K, y, likelihood, sites, *, power=None, step=1e-6, central=True):
    """Linear stability of (damped) parallel EP at a site configuration.

    Estimates the Jacobian of the undamped parallel EP map (cavities from the current
    posterior, tilted moment matching, every site replaced) by finite differences in the
    site parameters and returns its eigenvalues (docs/derivations/ep_stability.md).  At
    a fixed point they decide whether parallel EP converges there (spectral radius
    below 1), which dampings do (:attr:`FixedPointStability.smallest_damping`), or that
    none does (an eigenvalue with real part ≥ 1): such a fixed point is repelling for
    every damping, and parallel EP from anywhere misses it however long it runs.

    Parameters
    ----------
    K : (n, n) array or robustep.posterior.GaussianPrior
        Prior covariance of the latent values.
    y : (n,) array
        Targets for ``likelihood``.
    likelihood : robustep.likelihoods.Likelihood
    sites : EPResult or (site_precision, site_shift) pair of (n,) arrays
        The point to analyse, usually a converged fit (``tol`` 1e-8 or tighter gives
        eigenvalues to about three digits).
    power : float in (0, 1] or None
        Fractional EP power η (Jylänki et al. 2011 eqs. 14–15); None takes the
        ``power`` of an EPResult, else 1.
    step : float
        Relative finite-difference step: site parameter x_i moves by
        ``step * max(1, |x_i|)``.
    central : bool
        Central differences (2 evaluations per parameter, error O(step²)) or forward
        differences (1 per parameter, error O(step)).

    Returns
    -------
    FixedPointStability

    Notes
    -----
    Cost: 1 + 4n posterior factorisations with central differences (1 + 2n forward)
    and an eigen-decomposition of a 2n × 2n matrix, O(n⁴) in all for a dense prior:
    a diagnostic for n up to a few hundred, not for a fitting loop.  Larger problems
    than ``robustep.config(stability_max_sites=...)`` (1000) raise ``ValueError``.
    """
    if isinstance(sites, EPResult):
        if power is None:
            power = sites.power
        sites = (sites.site_precision, sites.site_shift)
    power = 1.0 if power is None else power
    if not (isinstance(step, numbers.Real) and 0.0 < step < 1.0):
        raise ValueError(f"step must be in (0, 1), got {step!r}")
    prior, y = _check_inputs(K, y, likelihood, "parallel", 0.0, power, 1, 1.0)
    n = prior.n
    limit = get_config().stability_max_sites
    if n > limit:
        raise ValueError(
            f"fixed_point_stability on {n} sites would make {1 + 4 * n} posterior "
            f"factorisations and decompose a {2 * n} x {2 * n} matrix; the limit is "
            f"{limit} sites (robustep.config(stability_max_sites=...)). Analyse a subset "
            "of the data, or raise the limit"
        )
    try:
        precision, shift = (np.array(a, dtype=float) for a in sites)
    except (TypeError, ValueError):
        raise TypeError(
            "sites must be an EPResult or a (site_precision, site_shift) pair of arrays"
        ) from None
    if precision.shape != (n,) or shift.shape != (n,):
        raise ValueError(
            f"sites must be (site_precision, site_shift) of shape ({n},), got "
            f"{precision.shape} and {shift.shape}"
        )
    if not (np.all(np.isfinite(precision)) and np.all(np.isfinite(shift))):
        raise ValueError("sites contain NaN or inf; pass a finite site configuration")
    ctx = _Context(prior, y, likelihood, moment_matching_update, float(power), 0.0, 1.0, 1, None)
    x0 = np.concatenate([precision, shift])

    def proposal(x):
        try:
            ev = _evaluate(ctx, x[:n], x[n:])
        except InvalidSiteConfiguration as error:
            raise ValueError(
                f"the posterior is not positive definite at this site configuration or a "
                f"step away from it ({error}); analyse a converged fit, or use a smaller step"
            ) from None
        if not np.all(ev.valid):
            raise ValueError(
                f"{int(np.sum(~ev.valid))} of {n} cavities are invalid (not positive) at "
                "this site configuration or a step away from it; the EP map is undefined "
                "there. Analyse a converged fit, or use a smaller step"
            )
        return np.concatenate([ev.proposal_precision, ev.proposal_shift])

    g0 = proposal(x0)
    jacobian = np.empty((2 * n, 2 * n))
    for i in range(2 * n):
        h = step * max(1.0, abs(x0[i]))
        forward = x0.copy()
        forward[i] += h
        if central:
            backward = x0.copy()
            backward[i] -= h
            jacobian[:, i] = (proposal(forward) - proposal(backward)) / (2.0 * h)
        else:
            jacobian[:, i] = (proposal(forward) - g0) / h
    eigenvalues = np.linalg.eigvals(jacobian) if n else np.zeros(0, dtype=complex)
    eigenvalues = eigenvalues[np.argsort(-np.abs(eigenvalues), kind="stable")]
    return FixedPointStability(
        eigenvalues=eigenvalues.astype(complex),
        residual=float(np.max(np.abs(g0 - x0))) if n else 0.0,
        n_factorisations=ctx.n_factorisations,
    )
