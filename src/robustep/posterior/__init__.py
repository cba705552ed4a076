"""The posterior behind the EP engine: priors that build Gaussian site posteriors.

:class:`GaussianPrior` and :class:`SitePosterior` are the interface (see
:mod:`robustep.posterior.base`); :class:`DensePrior` / :class:`DenseSitePosterior` the
dense implementation; :class:`ArrayPrior` / :class:`ArraySitePosterior` the same on any
array-API library (PyTorch, CuPy, ...; :mod:`robustep.posterior.backend`);
:class:`FITCPrior` / :class:`FITCSitePosterior` the sparse inducing-point (FITC) prior,
O(n m^2) (:mod:`robustep.posterior.sparse`); :class:`DiagonalPlusLowRankPrior` K = D + U U^T,
O(n r^2) (:mod:`robustep.posterior.low_rank`).
:func:`make_prior` builds any registered representation from a kernel and inputs, and
:func:`register_prior` adds one (:mod:`robustep.posterior.factory`).
:func:`as_prior` turns an (n, n) covariance matrix into a :class:`DensePrior` (numpy) or
an :class:`ArrayPrior` (another array library) and passes priors through.
"""

from robustep._array_api import is_foreign_array
from robustep.posterior.backend import ArrayPrior, ArraySitePosterior
from robustep.posterior.base import GaussianPrior, SitePosterior
from robustep.posterior.dense import DensePrior, DenseSitePosterior
from robustep.posterior.factory import make_prior, prior_representations, register_prior
from robustep.posterior.low_rank import DiagonalPlusLowRankPrior, DiagonalPlusLowRankSitePosterior
from robustep.posterior.sparse import FITCPrior, FITCSitePosterior


def as_prior(K, *, check=True) -> GaussianPrior:
    """Return ``K`` if it is a :class:`GaussianPrior`, else ``DensePrior(K, check=check)``
    (``ArrayPrior`` for an array of another array-API library: torch, CuPy, ...)."""
    if isinstance(K, GaussianPrior):
        return K
    if is_foreign_array(K):
        return ArrayPrior(K, check=check)
    return DensePrior(K, check=check)


__all__ = [
    "ArrayPrior", "ArraySitePosterior", "DensePrior", "DenseSitePosterior",
    "DiagonalPlusLowRankPrior", "DiagonalPlusLowRankSitePosterior", "FITCPrior",
    "FITCSitePosterior", "GaussianPrior", "SitePosterior", "as_prior", "make_prior",
    "prior_representations", "register_prior",
]  # fmt: skip
