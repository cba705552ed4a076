"""The posterior behind the EP engine: priors that build Gaussian site posteriors.

:class:`GaussianPrior` and :class:`SitePosterior` are the interface (see
:mod:`robustep.posterior.base`); :class:`DensePrior` / :class:`DenseSitePosterior` the
dense implementation.  :func:`as_prior` turns an (n, n) covariance matrix into a
:class:`DensePrior` and passes priors through.
"""

from robustep.posterior.base import GaussianPrior, SitePosterior
from robustep.posterior.dense import DensePrior, DenseSitePosterior


def as_prior(K, *, check=True) -> GaussianPrior:
    """Return ``K`` if it is a :class:`GaussianPrior`, else ``DensePrior(K, check=check)``."""
    if isinstance(K, GaussianPrior):
        return K
    return DensePrior(K, check=check)


__all__ = ["DensePrior", "DenseSitePosterior", "GaussianPrior", "SitePosterior", "as_prior"]
