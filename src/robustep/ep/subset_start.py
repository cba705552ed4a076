"""A cheap starting point for dense EP: FITC EP on a subset of the training inputs.

Dense parallel EP from flat sites spends about six O(n^3) sweeps on a probit problem at
n = 2000 (one Cholesky and one triangular inverse each), most of them on getting the
site precisions roughly right.  A FITC prior whose inducing inputs are m training
inputs (Q_nn = K_nm K_mm^-1 K_mn plus the exact diagonal; docs/derivations/sparse.md)
needs only rows of K that the dense problem has already computed, and EP on it costs
O(n m^2) per sweep.  Its converged sites are close to the dense ones wherever the kernel
is smooth at the scale of the subset's spacing, so dense EP started there needs two or
three sweeps instead of six (measured in ``python benchmarks/engine.py``; the fixed
points do not change: only the starting point of the same iteration does).

The start is a heuristic and never an error: if the subset run fails, or its sites give
an indefinite dense posterior (negative Student-t sites can), the caller starts from
flat sites as before.
"""

from __future__ import annotations

import warnings

import numpy as np

from robustep.linalg import InvalidSiteConfiguration
from robustep.posterior import DensePrior, FITCPrior

#: inducing rows of the subset start: min(SUBSET_MAX, max(SUBSET_MIN, n // 10))
SUBSET_MAX = 200
SUBSET_MIN = 20
#: the subset run stops at this tolerance (the dense run refines to the user's tol)
SUBSET_TOL = 1e-3
SUBSET_MAX_ITER = 10


def subset_size(n: int) -> int:
    """Number of inducing rows for a problem of n sites."""
    return int(min(n, SUBSET_MAX, max(SUBSET_MIN, n // 10)))


def subset_prior(K, seed=0):
    """The FITC prior whose inducing inputs are m = :func:`subset_size` (n) rows of K.

    K : (n, n) prior covariance of the dense problem (not modified); the m rows are drawn
    without replacement by ``numpy.random.default_rng(seed)``.  Returns a
    :class:`robustep.posterior.FITCPrior` (K_mm jittered if the subset repeats an input).
    """
    n = K.shape[0]
    m = subset_size(n)
    rows = np.sort(np.random.default_rng(seed).choice(n, size=m, replace=False))
    return FITCPrior(K[np.ix_(rows, rows)], K[:, rows], np.diagonal(K).copy())


def subset_fitc_start(K, y, likelihood, *, run, power=1.0, damping=0.0, site_update=None, seed=0):
    """Sites ``(site_precision, site_shift)``, each (n,), from FITC EP on m rows of K.

    Parameters
    ----------
    K : (n, n) prior covariance of the dense problem (not modified).
    y, likelihood, power, damping, site_update : as for the dense run, so that the start
        is a point of the same approximation family.
    run : the EP routine, :func:`robustep.ep.expectation_propagation` (passed in by the
        engine, which this module sits below).
    seed : the m rows are drawn without replacement by ``numpy.random.default_rng(seed)``
        (reproducible; the dense fixed point does not depend on them).

    Returns
    -------
    (site_precision, site_shift) or None when the subset run failed.
    """
    try:
        with warnings.catch_warnings():
            # a rough start need not converge, and repeated inputs in the subset (a
            # singular K_mm, jittered by FITCPrior) are no concern of the user's
            warnings.simplefilter("ignore")
            prior = subset_prior(K, seed)
            res = run(
                prior, y, likelihood, power=power, damping=damping, site_update=site_update,
                tol=SUBSET_TOL, max_iter=SUBSET_MAX_ITER,
            )  # fmt: skip
    except (np.linalg.LinAlgError, InvalidSiteConfiguration, ValueError, FloatingPointError):
        return None
    precision = np.asarray(res.site_precision, dtype=float)
    shift = np.asarray(res.site_shift, dtype=float)
    if not (np.all(np.isfinite(precision)) and np.all(np.isfinite(shift))):
        return None
    return precision, shift


def resolve_subset_start(
    K, y, likelihood, *, run, schedule="parallel", power=1.0, damping=0.0, site_update=None
):
    """The sites ``init="subset"`` stands for, or None (start from zero sites).

    K : a dense (n, n) array or a :class:`robustep.posterior.DensePrior`; any other prior
    (low-rank, array backend) and the sequential schedule give None, as does a failed
    subset run.  ``run``: the EP routine (:func:`robustep.ep.expectation_propagation`).
    The other arguments are those of the dense run.
    """
    if schedule != "parallel":
        return None
    if type(K) is DensePrior:
        K = K.K
    elif not (isinstance(K, np.ndarray) and K.ndim == 2):
        return None
    return subset_fitc_start(
        K, y, likelihood, run=run, power=power, damping=damping, site_update=site_update
    )
