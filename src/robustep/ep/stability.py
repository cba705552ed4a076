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

:func:`fixed_point_stability` forms J from one posterior factorisation (each site's
proposal depends on the sites only through its cavity, and the cavities on all sites
through q's marginals and the posterior covariance) and returns its eigenvalues with the
quantities a user needs to choose a damping or to see that no damping can reach the
point.
"""

from __future__ import annotations

import dataclasses
import numbers

import numpy as np
from scipy import optimize

from robustep._config import get_config
from robustep.ep.engine import _check_inputs, _Context, _evaluate, _initial_sites
from robustep.ep.state import EPResult
from robustep.ep.updates import max_abs, moment_matching_update
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
        Posterior factorisations spent (one).
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
        # (every Re λ < 1 here, so no |1 − λ| is 0)
        bound = 2.0 * (1.0 - lam.real) / np.abs(1.0 - lam) ** 2
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

    Returns the eigenvalues of the Jacobian of the undamped parallel EP map (cavities
    from the current posterior, tilted moment matching, every site replaced) in the site
    parameters (docs/derivations/ep_stability.md).  At a fixed point they decide whether
    parallel EP converges there (spectral radius below 1), which dampings do
    (:attr:`FixedPointStability.smallest_damping`), or that none does (an eigenvalue
    with real part ≥ 1): such a fixed point is repelling for every damping, and parallel
    EP from anywhere misses it however long it runs.

    Parameters
    ----------
    K : (n, n) array or robustep.posterior.GaussianPrior
        Prior covariance of the latent values; a prior must form the full posterior
        covariance (``supports_sequential``, as :class:`~robustep.posterior.DensePrior`).
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
        Relative finite-difference step of each site's moment-matching map in its
        cavity's natural parameters (derivation §4).
    central : bool
        Central differences (4 vectorised evaluations of the tilted moments, error
        O(step²)) or forward differences (2, error O(step)).

    Returns
    -------
    FixedPointStability

    Notes
    -----
    Cost: one posterior factorisation, the n × n posterior covariance, and an
    eigen-decomposition of the 2n × 2n Jacobian, O(n³) in all; more sites than
    ``robustep.config(stability_max_sites=...)`` (1000) raise ``ValueError``.
    """
    if isinstance(sites, EPResult):
        if power is None:
            power = sites.power
    elif sites is None or isinstance(sites, str):
        raise TypeError(
            f"sites must be an EPResult or a (site_precision, site_shift) pair, got {sites!r}"
        )
    power = 1.0 if power is None else power
    prior, y = _check_inputs(K, y, likelihood, "parallel", 0.0, power, 1, 1.0)
    _check_jacobian_problem(
        prior, step, "fixed_point_stability", "decompose a {m} x {m} matrix",
        "Analyse a subset of the data, or raise the limit",
    )  # fmt: skip
    n = prior.n
    precision, shift = _initial_sites(sites, n, name="sites")
    ctx = _Context(prior, y, likelihood, moment_matching_update, float(power), 0.0, 1.0, 1, None)
    ev = _proper_evaluation(ctx, precision, shift, "this site configuration",
                            "analyse a converged fit")  # fmt: skip
    jacobian = _jacobian(ctx, ev, step, central)
    eigenvalues = np.linalg.eigvals(jacobian)
    eigenvalues = eigenvalues[np.argsort(-np.abs(eigenvalues), kind="stable")]
    residual = max_abs(ev.proposal_precision - precision, ev.proposal_shift - shift)
    return FixedPointStability(
        eigenvalues=eigenvalues.astype(complex),
        residual=residual,
        n_factorisations=ctx.n_factorisations,
    )


def _proper_evaluation(ctx, precision, shift, where, advice):
    """The engine's evaluation of the sites, which the parallel EP map (and so its
    Jacobian) needs proper: ``ValueError`` naming ``where`` and ``advice`` when the
    posterior is not positive definite or some cavity is improper."""
    try:
        ev = _evaluate(ctx, precision, shift)
    except InvalidSiteConfiguration as error:
        raise ValueError(
            f"the posterior is not positive definite at {where} ({error}); {advice}"
        ) from None
    if not np.all(ev.valid):
        raise ValueError(
            f"{int(np.sum(~ev.valid))} of {ev.precision.size} cavities are invalid (not "
            f"positive) at {where}; the EP map is undefined there: {advice}"
        )
    return ev


def _check_jacobian_problem(prior, step, name, work, advice):
    """The checks of a function that forms the 2n x 2n Jacobian of the parallel EP map
    (``name``; ``work`` what it does with it, ``{m}`` standing for 2n; ``advice`` what to
    do instead): the finite-difference ``step``, at most
    ``robustep.config(stability_max_sites=...)`` sites, a prior that forms the full
    posterior covariance."""
    if not (isinstance(step, numbers.Real) and 0.0 < step < 1.0):
        raise ValueError(f"step must be in (0, 1), got {step!r}")
    n, limit = prior.n, get_config().stability_max_sites
    if n > limit:
        raise ValueError(
            f"{name} on {n} sites would {work.format(m=2 * n)}; the limit is {limit} sites "
            f"(robustep.config(stability_max_sites=...)). {advice}"
        )
    if not prior.supports_sequential:
        raise ValueError(
            f"{name} needs the full posterior covariance, which {type(prior).__name__} "
            "does not form; pass the dense prior covariance K"
        )


def _site_partials(ctx, ev, step, central):
    """The derivatives of each site's proposal (τ̃*_i, ν̃*_i) in its cavity's natural
    parameters (λ₋_i, h₋_i): four (n,) arrays d τ̃*/d λ₋, d τ̃*/d h₋, d ν̃*/d λ₋,
    d ν̃*/d h₋, by finite differences vectorised over the sites (derivation §4)."""
    lam, h = ev.cav_precision, ev.cav_shift
    steps = (step * lam, step * np.maximum(np.abs(h), np.sqrt(lam)))

    def proposal(lam, h):
        var = 1.0 / lam
        out = ctx.rule(ctx.likelihood, ctx.y, h * var, var, ev.precision, ev.shift, ctx.power)
        return np.asarray(out[0], dtype=float), np.asarray(out[1], dtype=float)

    base = None if central else (ev.proposal_precision, ev.proposal_shift)
    partials = []
    for which, delta in enumerate(steps):
        up = proposal(lam + delta * (which == 0), h + delta * (which == 1))
        if central:
            down = proposal(lam - delta * (which == 0), h - delta * (which == 1))
            partials.append([(u - d) / (2.0 * delta) for u, d in zip(up, down, strict=True)])
        else:
            partials.append([(u - b) / delta for u, b in zip(up, base, strict=True)])
    (t_lam, n_lam), (t_h, n_h) = partials
    if not all(np.all(np.isfinite(a)) for a in (t_lam, t_h, n_lam, n_h)):
        raise ValueError(
            "the tilted moments are not finite a step away from this site configuration; "
            "use a smaller step"
        )
    return t_lam, t_h, n_lam, n_h


def _jacobian(ctx, ev, step, central):
    """J = ∂(τ̃*, ν̃*)/∂(τ̃, ν̃) (2n, 2n) of the parallel EP map at ``ev``: each site's
    partials in its cavity (:func:`_site_partials`) times the cavities' derivatives in
    all sites through q's marginals, from the posterior covariance Σ (derivation §4)."""
    n, eta = ev.precision.size, ctx.power
    S = ev.post.covariance()
    mean, var = ev.post.mean, ev.post.var
    # cavity (λ₋_i, h₋_i) = (1/v_i − η τ̃_i, m_i/v_i − η ν̃_i), with ∂v_i/∂τ̃_j = −Σ_ij²,
    # ∂m_i/∂τ̃_j = −Σ_ij m_j and ∂m_i/∂ν̃_j = Σ_ij
    S2 = S * S
    lam_tau = S2 / var[:, None] ** 2 - eta * np.eye(n)
    h_tau = (mean / var**2)[:, None] * S2 - S * mean[None, :] / var[:, None]
    h_nu = S / var[:, None] - eta * np.eye(n)
    t_lam, t_h, n_lam, n_h = (a[:, None] for a in _site_partials(ctx, ev, step, central))
    return np.block(
        [
            [t_lam * lam_tau + t_h * h_tau, t_h * h_nu],
            [n_lam * lam_tau + n_h * h_tau, n_h * h_nu],
        ]
    )
