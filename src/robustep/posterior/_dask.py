"""The FITC prior on a Dask array of training inputs chunked by rows.

:class:`DaskFITCPrior` is a :class:`~robustep.posterior.sparse.FITCPrior` whose V
(n x m, the only O(n m) object) lives in Dask chunks, one per row chunk of X, computed
and kept where the chunks are (``persist``: on the workers of an active
``dask.distributed.Client``, in memory with the threaded scheduler otherwise).
:class:`~robustep.posterior.sparse.FITCSitePosterior` touches V only through the
prior's block operations (``gram``, ``project``, ``apply``, ``quad``, ``weighted_gram``,
``gradient_rows``); here each is one Dask task per chunk plus a sum, so the O(n m^2)
work runs on the chunks and what travels per chunk is an m x m matrix or an m-vector
(the reductions), the chunk's slice of the site vectors (to the chunk) and of the
marginals (back).  The EP engine itself (cavities, tilted moments, site updates) runs
on the client on those n-vectors, so every schedule, damping, power and the robust
double loop work unchanged.  Sums are taken in chunk order, so results agree with the
in-memory prior to rounding (tests/posterior/test_sparse_dask.py: 1e-8).
"""

from __future__ import annotations

import numpy as np

from robustep.linalg import triangular_inverse
from robustep.posterior.sparse import (
    FITCPrior,
    _factor_kmm,
    gradient_rows_sum,
    gram_block,
    quad_block,
    whitened_cross_covariance,
)


def is_dask_array(x) -> bool:
    """Whether x is a dask.array.Array (without importing dask when it is not loaded)."""
    import sys

    if "dask.array" not in sys.modules:
        return False
    import dask.array as da

    return isinstance(x, da.Array)


# ----------------------------------------------------------------------- chunk tasks
def _block_V(Xc, kernel, Z, L_inv):
    return whitened_cross_covariance(kernel, Xc, Z, L_inv)


def _block_lambda(Xc, Vc, kernel):
    kd = np.asarray(kernel.diag(Xc), dtype=float)
    return np.stack([kd, kd - np.einsum("ij,ij->i", Vc, Vc)], axis=1)


def _block_gram(Vc, beta, gamma):
    return gram_block(Vc, beta, gamma)


def _block_project(Vc, g):
    return Vc.T @ g


def _block_apply(Vc, u):
    return Vc @ u


def _block_quad(Vc, L_inv):
    return quad_block(Vc, L_inv)


def _add(a, b):
    return None if a is None else a + b


def _sum(parts):
    """Sum of a list of arrays or of tuples of arrays (None entries stay None), in order."""
    total = parts[0]
    for p in parts[1:]:
        if isinstance(total, tuple):
            total = tuple(_add(a, b) for a, b in zip(total, p, strict=True))
        else:
            total = total + p
    return total


class DaskFITCPrior(FITCPrior):
    """FITC prior of a scikit-learn kernel at Dask training inputs (docs/derivations/sparse.md).

    Parameters
    ----------
    kernel : scikit-learn kernel.
    X : dask.array (n, d), chunked by rows only (one chunk across the columns).
    Z : (m, d) numpy inducing inputs.
    jitter : as :class:`FITCPrior`.

    Attributes
    ----------
    V : dask.array (n, m), persisted; ``Lambda``, ``K_nn_diag`` : (n,) numpy;
    ``L_mm``, ``jitter`` as :class:`FITCPrior`; ``X`` the Dask inputs.
    """

    def __init__(self, kernel, X, Z, *, jitter=None):
        import dask

        check_dask_inputs(X)
        Z = np.asarray(Z, dtype=float)
        if Z.ndim != 2 or Z.shape[1] != X.shape[1]:
            raise ValueError(
                f"inducing inputs must have shape (m, {X.shape[1]}) to match X, got {Z.shape}"
            )
        K_mm = np.asarray(kernel(Z), dtype=float)
        L_mm, jitter = _factor_kmm(K_mm, jitter)
        L_inv = triangular_inverse(L_mm)
        m = Z.shape[0]
        rows = X.chunks[0]
        V = X.map_blocks(_block_V, kernel, Z, L_inv, chunks=(rows, (m,)), dtype=float)
        V = V.persist()
        lam_kd = dask.array.map_blocks(
            _block_lambda, X, V, kernel, chunks=(rows, (2,)), dtype=float
        ).compute()
        self.X = X
        self.V = V
        self.L_mm = L_mm
        self._L_inv = L_inv
        self.jitter = float(jitter)
        self.K_nn_diag = lam_kd[:, 0]
        lam = lam_kd[:, 1]
        scale = max(float(np.max(np.abs(self.K_nn_diag))), np.finfo(float).tiny)
        if np.any(lam < -1e-6 * scale):
            raise ValueError("diag(K_nn) is smaller than diag(Q_nn): the kernel is inconsistent")
        self.Lambda = np.maximum(lam, 0.0)
        bounds = np.concatenate([[0], np.cumsum(rows)])
        self._slices = [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        self._V_blocks = list(V.to_delayed().ravel())
        self._X_blocks = list(X.to_delayed().ravel())

    @property
    def n(self) -> int:
        return int(self.V.shape[0])

    @property
    def m(self) -> int:
        return int(self.V.shape[1])

    # ------------------------------------------------------------- block operations
    def _map(self, fn, *vectors, shared=()):
        """[fn(V_c, vec_1[c], ..., *shared) for every chunk c] as delayed objects."""
        from dask import delayed

        shared = [delayed(x) if isinstance(x, np.ndarray) else x for x in shared]
        return [
            delayed(fn, pure=True)(vb, *(v[sl] for v in vectors), *shared)
            for vb, sl in zip(self._V_blocks, self._slices, strict=True)
        ]

    def gram(self, beta, gamma):
        from dask import delayed

        return delayed(_sum)(self._map(_block_gram, beta, gamma)).compute()

    def project(self, g):
        from dask import delayed

        return delayed(_sum)(self._map(_block_project, g)).compute()

    def apply(self, u):
        import dask

        return np.concatenate(dask.compute(*self._map(_block_apply, shared=(u,))))

    def quad(self, L_inv):
        import dask

        return np.concatenate(dask.compute(*self._map(_block_quad, shared=(L_inv,))))

    def weighted_gram(self, alpha, d):
        VDV, s = self.gram(d, alpha)
        return s, VDV

    def gradient_rows(self, kernel, X, Z, alpha, beta, M_diag, s, Ainv, wrt_Z):
        """Sum over chunks of :func:`robustep.posterior.sparse.gradient_block`."""
        from dask import delayed

        shared = [delayed(a) for a in (s, Ainv, self.L_mm_inverse())]
        shared += [kernel, delayed(Z), wrt_Z]
        parts = [
            delayed(gradient_rows_sum, pure=True)(
                xb, vb, alpha[sl], beta[sl], M_diag[sl], *shared
            )
            for xb, vb, sl in zip(self._X_blocks, self._V_blocks, self._slices, strict=True)
        ]  # fmt: skip
        return delayed(_sum)(parts).compute()

    def dense_covariance(self):
        V = np.asarray(self.V.compute())
        return V @ V.T + np.diag(self.Lambda)


def check_dask_inputs(X, y=None):
    """Validate Dask training inputs: 2-D, chunked by rows only, y chunked like X's rows."""
    if not is_dask_array(X):
        raise TypeError(f"expected a dask.array for X, got {type(X).__name__}")
    if X.ndim != 2:
        raise ValueError(f"X must be a 2-D dask array (n, d), got {X.ndim} dimensions")
    if any(np.isnan(c) for c in X.chunks[0]):
        raise ValueError(
            "X has unknown chunk sizes; call X.compute_chunk_sizes() (or build it with "
            "known chunks) before fit"
        )
    if X.numblocks[1] != 1:
        raise ValueError(
            f"X is chunked along its columns ({X.numblocks[1]} column chunks); chunk it by "
            "rows only, e.g. X = X.rechunk({1: -1})"
        )
    if y is not None:
        if is_dask_array(y):
            if y.ndim != 1:
                raise ValueError(f"y must be 1-D, got {y.ndim} dimensions")
            if tuple(y.chunks[0]) != tuple(X.chunks[0]):
                raise ValueError(
                    f"y's chunks {y.chunks[0]} do not match X's row chunks {X.chunks[0]}; "
                    "rechunk y like X, e.g. y = y.rechunk(X.chunks[0])"
                )
        elif np.shape(y)[0] != X.shape[0]:
            raise ValueError(f"X has {X.shape[0]} rows but y has {np.shape(y)[0]} entries")
