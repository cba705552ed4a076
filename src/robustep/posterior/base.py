"""The seam between the EP engine and the prior: :class:`GaussianPrior` and :class:`SitePosterior`.

The EP engine (:mod:`robustep.ep.engine`), the evidence and its gradient
(:mod:`robustep.ep.evidence`), the subset start (:mod:`robustep.ep.subset_start`) and
the results (:class:`robustep.ep.EPResult`) ask a prior only for the posterior that
Gaussian sites ``t_i(f_i) = exp(nu~_i f_i - tau~_i f_i^2 / 2)`` give, and that posterior
only for what this module declares:

* ``mean`` (n,), ``var`` (n,): the marginals q(f_i) = N(mean_i, var_i) from which
  every cavity is formed (Jylänki et al. 2011 eq. 14);
* ``alpha`` (n,): the weights with mean = K alpha (the engine's callback, predictions);
* ``log_det`` = log|I + K T~| and ``site_shift``: the prior term of log Z_EP,
  ``-1/2 log_det + 1/2 nu~^T mean`` (:meth:`SitePosterior.prior_term`,
  docs/derivations/ep_evidence.md);
* :meth:`SitePosterior.kernel_gradient_contraction`: the prior's part of the evidence
  gradient, ``1/2 alpha^T dK alpha - 1/2 tr((K + T~^-1)^-1 dK)`` (Seeger 2005);
* :meth:`SitePosterior.predict`: latent predictive moments at new inputs;
* :meth:`SitePosterior.with_site_shift` (when ``supports_site_shift``): the engine's
  O(n^2) mean sweeps; :meth:`SitePosterior.covariance` (when the prior's
  ``supports_sequential``): the sequential schedule.

Implementations: :class:`robustep.posterior.dense.DensePrior` (explicit (n, n) K, the
split Cholesky for negative sites), :class:`robustep.posterior.backend.ArrayPrior` (the
same on any array-API library), :class:`robustep.posterior.sparse.FITCPrior` (inducing
points, O(n m^2)) and :class:`robustep.posterior.low_rank.DiagonalPlusLowRankPrior`
(K = D + U U^T, O(n r^2); the worked example of docs/architecture.md, "How to add a
prior representation").

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
    site_precision, site_shift : (n,) float arrays, the sites tau~, nu~ it was built from.
    mean : (n,) posterior means of f.
    var : (n,) marginal posterior variances, or None when built with ``need_var=False``.
    alpha : (n,) weights with ``mean = K @ alpha`` (``alpha = (K + T~^-1)^-1 mu~`` with
        mu~ = nu~ / tau~), K the prior covariance (for a low-rank prior, its implied K).
    log_det : float, log|I + K T~| (log|K^-1 + T~| + log|K|).
    n_negative : int, number of sites with negative precision.

    Class attribute ``supports_site_shift`` says whether :meth:`with_site_shift` reuses
    the factorisation (the engine makes mean sweeps only then).
    """

    site_precision: np.ndarray
    site_shift: np.ndarray
    mean: np.ndarray
    var: np.ndarray | None
    alpha: np.ndarray
    log_det: float
    n_negative: int

    supports_site_shift: bool = False

    @property
    def n(self) -> int:
        """Number of sites (latent values)."""
        return int(np.shape(self.site_precision)[0])

    def prior_term(self) -> float:
        """log ∫ N(f | 0, K) prod_i t_i(f_i) df = -1/2 log_det + 1/2 nu~^T mean (a float)."""
        return -0.5 * self.log_det + 0.5 * float(self.site_shift @ self.mean)

    def covariance(self) -> np.ndarray:
        """Full posterior covariance, shape (n, n); only priors that support it."""
        raise NotImplementedError(
            f"{type(self).__name__} does not form the full (n, n) posterior covariance; "
            "implement covariance() and set supports_sequential = True on its prior to "
            "offer the sequential schedule"
        )

    def with_site_shift(self, site_shift) -> SitePosterior:
        """The posterior with the same site precisions and new shifts nu~ (n,).

        Implementations that share the precision-dependent factors (O(n^2) dense instead
        of a new factorisation) set ``supports_site_shift = True``; the engine's mean
        sweeps (docs/derivations/engine_floor.md) run only then.
        """
        raise NotImplementedError(
            f"{type(self).__name__} does not implement with_site_shift(site_shift); "
            "implement it and set supports_site_shift = True to enable the engine's "
            "mean sweeps"
        )

    def kernel_gradient_contraction(self, K_gradient) -> np.ndarray:
        """The prior's part of d log Z_EP / d theta, shape (p,), at a converged fixed point.

        ``1/2 alpha^T dK_k alpha - 1/2 tr(R dK_k)`` with R = (K + T~^-1)^-1 for each of
        the p derivatives dK_k of K (Seeger 2005; docs/derivations/ep_evidence.md): the
        explicit dependence, valid where log Z_EP is stationary in the sites.

        Parameters
        ----------
        K_gradient : derivatives of K w.r.t. the p log hyperparameters, in the layout the
            implementation documents (dense: an (n, n, p) array as returned by
            ``kernel(X, eval_gradient=True)[1]`` or a lazy
            :class:`robustep.kernels.gradient.RBFKernelGradient`).
        """
        raise NotImplementedError(
            f"{type(self).__name__} does not implement kernel_gradient_contraction("
            "K_gradient), the prior's part of the evidence gradient "
            "1/2 alpha^T dK alpha - 1/2 tr((K + T~^-1)^-1 dK)"
        )

    @abc.abstractmethod
    def predict(self, K_cross, k_diag=None):
        """Latent predictive mean (m,) and variance (m,) (or None) at new inputs.

        ``K_cross`` holds the prior covariances between the new inputs and the
        prior's basis (the training inputs for a dense prior, the inducing inputs for a
        low-rank one); see the implementation.  ``k_diag`` (m,): prior variances at the
        new inputs, or None for means only.
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

    def convert_result(self, result):
        """The :class:`robustep.ep.EPResult` of a run given a raw covariance array.

        The engine calls it when the user passed an array (not a prior): an array-backend
        prior returns arrays of K's library; the default returns ``result`` unchanged.
        """
        return result
