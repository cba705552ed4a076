"""Dense linear algebra helpers: jittered Cholesky and triangular inverses.

The Gaussian posterior of a GP prior times Gaussian sites lives in
:mod:`robustep.posterior` (the seam between the EP engine and the prior:
dense, low-rank and array-backend implementations of one interface).
:class:`InvalidSiteConfiguration` is defined here so that every layer above can
raise and catch it.
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy.linalg import lapack

from robustep._config import get_config


class InvalidSiteConfiguration(np.linalg.LinAlgError):
    """The site precisions make ``K^-1 + diag(tau)`` indefinite (too negative sites)."""


def jittered_cholesky(A, *, lower=True, jitter=None, max_tries=None, warn=True):
    """Cholesky factor of a symmetric matrix, adding diagonal jitter on failure.

    Parameters
    ----------
    A : (n, n) symmetric matrix (not modified).
    jitter : first jitter relative to ``mean(diag(A))``; default from config.
    max_tries : number of tenfold jitter increases; default from config.
    warn : emit a RuntimeWarning when jitter was needed (internal callers that
        factorise many near-singular matrices pass False).

    Returns
    -------
    L : (n, n) lower (or upper) triangular factor.
    added : float, the absolute jitter that was added (0.0 if none).
    """
    A = np.asarray(A, dtype=float)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"expected a square matrix, got shape {A.shape}")
    if not np.all(np.isfinite(A)):
        raise ValueError("matrix contains NaN or inf; check the kernel hyperparameters and inputs")
    cfg = get_config()
    jitter = cfg.jitter if jitter is None else jitter
    max_tries = cfg.max_jitter_tries if max_tries is None else max_tries
    L, info = lapack.dpotrf(A, lower=lower, clean=True)
    if info == 0:
        return L, 0.0
    scale = float(np.mean(np.diag(A))) if A.size else 1.0
    scale = scale if scale > 0 else 1.0
    added = jitter * scale
    for _ in range(max_tries):
        L, info = lapack.dpotrf(A + added * np.eye(A.shape[0]), lower=lower, clean=True)
        if info == 0:
            if not warn:
                return L, added
            warnings.warn(
                f"matrix was not numerically positive definite; added jitter {added:.3g} "
                "to its diagonal",
                RuntimeWarning,
                stacklevel=2,
            )
            return L, added
        added *= 10.0
    raise np.linalg.LinAlgError(
        f"Cholesky failed even with jitter {added / 10:.3g}; the matrix is not positive "
        "definite (check the kernel, e.g. add a WhiteKernel, or duplicate inputs)"
    )


def triangular_inverse(L):
    """Inverse of a lower-triangular factor (LAPACK dtrtri), shape (n, n)."""
    if L.shape[0] == 0:
        return np.zeros((0, 0))
    Linv, info = lapack.dtrtri(L, lower=1)
    if info != 0:
        raise np.linalg.LinAlgError("singular triangular factor")
    return Linv
