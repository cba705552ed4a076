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
from scipy.linalg import blas, lapack

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


# Factors of order <= _TRTRI_DIRECT go to LAPACK dtrtri whole; larger ones are split by
# the recursion of ``triangular_inverse`` down to blocks of order <= _TRTRI_BLOCK
# (crossover measured in docs/derivations/engine_floor.md §6).
_TRTRI_DIRECT = 160
_TRTRI_BLOCK = 64


def triangular_inverse(L, *, clean=False):
    """Inverse of a lower-triangular factor, shape (n, n), lower triangular (zeros above).

    By the block recursion

        [[L11, 0], [L21, L22]]^-1 = [[X11, 0], [-X22 L21 X11, X22]],  Xjj = Ljj^-1,

    whose two off-diagonal products are BLAS ``dtrmm`` calls (n^3/3 flops in all, like
    ``dtrtri``).  The OpenBLAS ``dtrtri`` that SciPy ships runs at about a third of the
    speed of its ``dpotrf`` of the same order (n = 455: 4.3 ms against 1.6 ms on one
    core), while ``dtrmm`` runs at ``dgemm`` speed, so the recursion is 1.5-3 times
    faster from n ~ 250 on (docs/derivations/engine_floor.md §6); factors of
    order <= 160 and the recursion's blocks of order <= 64 go to ``dtrtri``.  Only the
    lower triangle of ``L`` is read; the strict upper triangle of the result is zero.

    ``clean``: the strict upper triangle of ``L`` is zero, as ``dpotrf(clean=1)`` leaves
    it.  ``dtrtri`` copies the triangle it does not touch from its input, so the result
    then needs no clearing (``np.tril``, about 40 us of the 300 us of an n = 200
    inverse).  The result is the same either way, bit for bit.
    """
    L = np.asarray(L, dtype=float)
    n = L.shape[0]
    if n == 0:
        return np.zeros((0, 0))
    if n <= _TRTRI_DIRECT:
        Linv, info = lapack.dtrtri(L, lower=1)
        if info != 0:
            raise np.linalg.LinAlgError("singular triangular factor")
        if clean:  # in C order, as np.tril returns it (the callers' sums keep their order)
            return np.ascontiguousarray(Linv)
        return np.tril(Linv)  # dtrtri leaves L's upper triangle in place
    if not np.all(np.isfinite(np.diagonal(L))) or not np.all(np.diagonal(L)):
        raise np.linalg.LinAlgError("singular triangular factor")
    out = np.zeros((n, n), order="F")
    _triangular_inverse_into(L, out, clean)
    return out


def _triangular_inverse_into(L, out, clean):
    """Write L^-1 into the lower triangle of ``out`` (a view; its upper part untouched)."""
    n = L.shape[0]
    if n <= _TRTRI_BLOCK:
        inv, info = lapack.dtrtri(L, lower=1)
        if info != 0:
            raise np.linalg.LinAlgError("singular triangular factor")
        out[...] = inv if clean else np.tril(inv)
        return
    h = n // 2
    _triangular_inverse_into(L[:h, :h], out[:h, :h], clean)
    _triangular_inverse_into(L[h:, h:], out[h:, h:], clean)
    X = blas.dtrmm(1.0, out[:h, :h], L[h:, :h], side=1, lower=1)  # L21 X11
    out[h:, :h] = blas.dtrmm(-1.0, out[h:, h:], X, side=0, lower=1, overwrite_b=1)


def cholesky_inverse(L):
    """B^-1 = L^-T L^-1 from the lower Cholesky factor L of B, full symmetric (n, n).

    ``triangular_inverse`` and :func:`lower_gram`: the two n^3/3 passes of LAPACK
    ``dpotri``, with the faster triangular inverse (docs/derivations/engine_floor.md
    §6).  Only the lower triangle of ``L`` is read.
    """
    return lower_gram(triangular_inverse(L))


def lower_gram(X):
    """X^T X for a lower-triangular X (n, n) whose strict upper triangle is zero (as
    :func:`triangular_inverse` returns it), full symmetric (n, n), by LAPACK ``dlauum``
    (n^3/3 flops; exactly symmetric)."""
    n = X.shape[0]
    if n == 0:
        return np.zeros((0, 0))
    low, info = lapack.dlauum(X, lower=1)  # lower triangle of X^T X; above it X's zeros
    if info != 0:  # pragma: no cover - X is a finite triangular matrix
        raise np.linalg.LinAlgError(f"dlauum failed (info={info})")
    full = low + low.T
    full.flat[:: n + 1] *= 0.5
    return full


def _fortran_operand(A):
    """(array, transpose flag) such that op(array) = A with array Fortran-contiguous."""
    if A.flags.f_contiguous:
        return A, 0
    if A.flags.c_contiguous:
        return A.T, 1
    return np.asfortranarray(A), 0


def blas_matmul(A, B):
    """``A @ B`` for float64 A (p, q) and B (q,) or (q, r), computed by SciPy's BLAS.

    numpy and SciPy wheels ship separate OpenBLAS builds, each with its own thread pool.
    After a multithreaded numpy product, numpy's idle BLAS threads keep spinning for a
    while; a LAPACK call through SciPy right after it then shares the cores with them and
    runs at one-thread speed (docs/derivations/engine_floor.md §6: ``dtrtri``
    at n = 2000 takes 98-101 ms right after numpy's ``K @ x``, 56 ms after the same
    product by SciPy's BLAS; docs/derivations/engine_floor.md §5).  The EP engine's
    per-sweep products therefore go through the library that runs its factorisations.
    C- or Fortran-ordered operands are passed without copies (a C-ordered array is the
    transpose of a Fortran-ordered one).
    Anything other than real float64 falls back to ``A @ B``.
    """
    if (
        A.dtype != np.float64
        or B.dtype != np.float64
        or A.ndim != 2
        or B.ndim not in (1, 2)
        or A.shape[1] != B.shape[0]
        or A.size == 0
        or B.size == 0
    ):
        return A @ B
    a, trans_a = _fortran_operand(A)
    if B.ndim == 1:
        x = B if B.flags.c_contiguous else np.ascontiguousarray(B)
        return blas.dgemv(1.0, a, x, trans=trans_a)
    b, trans_b = _fortran_operand(B)
    return blas.dgemm(1.0, a, b, trans_a=trans_a, trans_b=trans_b)


_SCALE_BLOCK_ROWS = 256


#: rows per block of :func:`zero_below_resolution` (bounds its temporaries to a few MB)
_RESOLUTION_BLOCK_ROWS = 256


def zero_below_resolution(K, *, copy=False):
    """Where a symmetric covariance matrix K (n, n) holds subnormal entries (a short
    length-scale: part of K underflows), set to zero its entries below the
    double-precision resolution of its diagonal, |K_ij| < eps sqrt(K_ii K_jj)
    (eps = 2.2e-16): in place, or with ``copy`` in a copy made only then; return the
    result (K itself, unchanged, where it holds no subnormal entry).

    Such an entry changes no sum it enters by more than rounding (the posterior moves by
    about n eps at most).  Under a short length-scale the products of K's tiny entries
    in a Cholesky factorisation's fill-in fall in the subnormal range, which x86 CPUs
    without flush-to-zero process tens of times more slowly: at n = 2000, length-scale
    0.0132 on [-1, 1]², dpotrf of I + W K W took 0.88 s against 0.13 s with the entries
    zeroed and 0.07 s at length-scale 1 (docs/derivations/engine_floor.md §8).  The
    diagonal is never zeroed.
    """
    n = K.shape[0]
    tiny = np.finfo(float).tiny
    blocks = range(0, n, _RESOLUTION_BLOCK_ROWS)
    rows = (K[start : start + _RESOLUTION_BLOCK_ROWS] for start in blocks)
    if not any(np.any((block != 0) & (np.abs(block) < tiny)) for block in rows):
        return K
    if copy:
        K = K.copy()
    scale = np.sqrt(np.finfo(float).eps * np.abs(np.diagonal(K)))
    for start in blocks:
        rows = K[start : start + _RESOLUTION_BLOCK_ROWS]
        rows[np.abs(rows) < scale[start : start + _RESOLUTION_BLOCK_ROWS, None] * scale] = 0.0
    return K


def plus_diagonal(A, d):
    """A + diag(d) as a new (n, n) float array, without forming the (n, n) diag(d).

    A : (n, n), not modified; d : (n,) or a scalar."""
    out = np.array(A, dtype=float)
    out.flat[:: out.shape[0] + 1] += d
    return out


def identity_plus_scaled(K, w, *, overwrite=False):
    """B = I + diag(w) K diag(w) for symmetric K (n, n) and w (n,), ready for LAPACK.

    Returns an (n, n) Fortran-ordered array whose **lower triangle** holds B; the part
    above the diagonal blocks is left uninitialised.  ``lapack.dpotrf(B, lower=1,
    clean=1, overwrite_a=1)`` reads only the lower triangle, factorises in place (a
    C-ordered argument would first be copied to Fortran order, 24-25 ms at n = 2000) and
    zeroes the rest.  It is built as the transpose of the row-wise product
    (K_ij w_j) w_i on the upper triangle, in row blocks of ``_SCALE_BLOCK_ROWS``, which
    touches about half of the memory of the full product (8.5-9.9 against 13.3-14.8 ms
    at n = 2000; both numbers in docs/derivations/engine_floor.md §6).  K is not
    modified unless ``overwrite`` (then K must be a C-ordered float64 array, such as a
    fresh copy of a block, and B is built in its memory: no new (n, n) allocation).
    """
    n = K.shape[0]
    if overwrite:
        if not (K.dtype == np.float64 and K.flags.c_contiguous and K.flags.writeable):
            raise ValueError("overwrite needs a writeable C-ordered float64 K")
        out = K
    else:
        out = np.empty((n, n))  # C order, so that out.T is Fortran-ordered
    for start in range(0, n, _SCALE_BLOCK_ROWS):
        stop = min(n, start + _SCALE_BLOCK_ROWS)
        block = np.multiply(K[start:stop, start:], w[None, start:], out=out[start:stop, start:])
        block *= w[start:stop, None]
    out.flat[:: n + 1] += 1.0
    return out.T
