"""Result object of the EP engine."""

from __future__ import annotations

import dataclasses

import numpy as np

from robustep.posterior import SitePosterior


@dataclasses.dataclass
class EPResult:
    """Outcome of :func:`robustep.ep.expectation_propagation`.

    Attributes
    ----------
    mean, var : (n,) marginal posterior means and variances of f.
    site_precision, site_shift : (n,) site natural parameters (tau~, nu~).
    cavity_mean, cavity_var : (n,) cavity (leave-one-out) moments at the final state;
        NaN where the cavity precision is not positive (see ``n_invalid_cavities``).
    log_Z : EP approximation of log p(y) (Jylänki et al. 2011 eq. 16, with power).
    converged : whether the largest site residual fell below ``tol``.
    n_iter : number of sweeps (parallel) / passes (sequential) / inner iterations (double loop).
    history : dict of per-sweep lists: ``"max_change"`` (largest actual change of any site
        natural parameter), ``"residual"`` (largest undamped moment-matching proposal change),
        ``"log_Z"`` (EP objective at that sweep), ``"step"`` (step size used),
        ``"phase"`` ("parallel", "sequential", "double-loop", or "double-loop-parallel"
        for a parallel step taken inside the double loop, docs/derivations/double_loop.md
        eq. D1).
    site_info : dict of per-site arrays from the site update rule (e.g. REP strengths).
    power : the fractional power eta.
    n_invalid_cavities : sites whose cavity precision was not positive at the end.
    message : human-readable summary of how the run ended.
    posterior : the :class:`robustep.posterior.SitePosterior` (dense, low-rank, ...).
    n_factorisations : posterior factorisations made, the initial one included (0 where
        the producer does not count them).
    """

    mean: np.ndarray
    var: np.ndarray
    site_precision: np.ndarray
    site_shift: np.ndarray
    cavity_mean: np.ndarray
    cavity_var: np.ndarray
    log_Z: float
    converged: bool
    n_iter: int
    history: dict
    site_info: dict
    power: float
    n_invalid_cavities: int
    message: str
    posterior: SitePosterior = dataclasses.field(repr=False)
    n_factorisations: int = 0

    def posterior_covariance(self) -> np.ndarray:
        """Full posterior covariance Sigma, shape (n, n)."""
        return self.posterior.covariance()

    def predict(self, K_cross, k_diag=None):
        """Latent predictive mean (m,) and variance (m,) (or None) at new inputs.

        ``K_cross`` is (m, n) prior covariance between new and training inputs,
        ``k_diag`` (m,) prior variances at the new inputs.
        """
        return self.posterior.predict(K_cross, k_diag)
