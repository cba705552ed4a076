"""The seam between the EP engine and the prior: :class:`GaussianPrior` and :class:`SitePosterior`.

The engine (:mod:`robustep.ep.engine`) only ever asks a prior for the posterior
that Gaussian sites ``t_i(f_i) = exp(nu~_i f_i - tau~_i f_i^2 / 2)`` give, and only
asks that posterior for

* ``mean`` (n,), ``var`` (n,): the marginals q(f_i) = N(mean_i, var_i) from which
  every cavity is formed (Jylänki et al. 2011 eq. 14);
* ``log_det`` = log|I + K T~| and ``site_shift``: the prior term of log Z_EP,
  ``-1/2 log_det + 1/2 nu~^T mean`` (docs/derivations/ep_evidence.md);
* ``covariance()`` (n, n): only for the sequential schedule, which is offered by
  priors whose ``supports_sequential`` is True.

Everything else (predictions, evidence gradients) is specific to the prior's
representation and documented on the implementation.  Implementations:

* :class:`robustep.posterior.dense.DensePrior` / ``DenseSitePosterior``: an explicit
  (n, n) K, the split Cholesky for negative sites (O(n^3) per factorisation);
* low-rank (FITC / inducing points, O(n m^2)) and array-backend implementations
  follow the same interface (docs/architecture.md, "The posterior seam").

An implementation raises :class:`robustep.linalg.InvalidSiteConfiguration` when the
sites make ``K^-1 + T~`` indefinite (too negative site precisions); the engine then
shortens its step.
"""

from __future__ import annotations

import abc

import numpy as np


class SitePosterior(abc.ABC):
    """Gaussian posterior of a latent GP prior times Gaussian sites (the interface).

    Attributes every implementation sets
    ------------------------------------
    site_precision, site_shift : (n,) the sites tau~, nu~ it was built from.
    mean : (n,) posterior means of f.
    var : (n,) marginal posterior variances, or None when built with ``need_var=False``.
    log_det : float, log|I + K T~| (log|K^-1 + T~| + log|K|).
    n_negative : number of sites with negative precision.
    """

    site_precision: np.ndarray
    site_shift: np.ndarray
    mean: np.ndarray
    var: np.ndarray | None
    log_det: float
    n_negative: int

    @property
    def n(self) -> int:
        """Number of sites (latent values)."""
        return int(np.shape(self.site_precision)[0])

    def prior_term(self) -> float:
        """log ∫ N(f | 0, K) prod_i t_i(f_i) df = -1/2 log_det + 1/2 nu~^T mean."""
        return -0.5 * self.log_det + 0.5 * float(self.site_shift @ self.mean)

    def covariance(self) -> np.ndarray:
        """Full posterior covariance, shape (n, n); only priors that support it."""
        raise NotImplementedError(
            f"{type(self).__name__} does not form the full (n, n) posterior covariance"
        )

    @abc.abstractmethod
    def predict(self, K_cross, k_diag=None):
        """Latent predictive mean (m,) and variance (m,) (or None) at new inputs.

        ``K_cross`` holds the prior covariances between the new inputs and the
        prior's basis (the training inputs for a dense prior, the inducing inputs for a
        low-rank one); see the implementation.
        """


class GaussianPrior(abc.ABC):
    """A zero-mean Gaussian prior over n latent values that builds :class:`SitePosterior` s.

    ``supports_sequential`` says whether its posteriors form ``covariance()``
    (needed by the sequential schedule's rank-one updates).
    """

    supports_sequential: bool = False

    @property
    @abc.abstractmethod
    def n(self) -> int:
        """Number of latent values (sites)."""

    @abc.abstractmethod
    def posterior(self, site_precision, site_shift, *, need_var=True) -> SitePosterior:
        """The posterior for sites (tau~, nu~), each (n,); raises InvalidSiteConfiguration."""
