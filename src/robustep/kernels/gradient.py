"""K(theta) and dK/dlog theta on fixed training inputs, for hyperparameter searches.

A type-II MAP search evaluates ``kernel.clone_with_theta(theta)(X, eval_gradient=True)``
a few hundred times on the same X, and the evidence gradients only ever use dK/dlog theta
(scikit-learn's layout: an (n, n, p) array, ``G[..., k] = dK/dtheta_k``) through two
operations:

* ``contract(M)``: the (p,) vector ``sum_ab M_ab G_ab k`` for an (n, n) M
  (``1/2 alpha^T dK alpha - 1/2 tr(R dK)`` is ``contract(1/2 (alpha alpha^T - R^T))``);
* ``matvec(V)``: ``dK_k V`` for V (n,) or (n, m): (n, p) or (n, m, p).

For the kernel of the robust-regression experiments, ``ConstantKernel * RBF`` (isotropic
or ARD, all hyperparameters free), with w_j = 1 / l_j^2 and D_j(a, b) = (x_aj - x_bj)^2,

    K = c exp(-1/2 sum_j w_j D_j),
    dK/dlog c = K,   dK/dlog l_j = w_j K o D_j      (isotropic: w sum_j K o D_j),

and both operations cost O(n^2 d) through BLAS without forming D_j or the (n, n, p) array:
expanding D_j(a, b) = x_aj^2 + x_bj^2 - 2 x_aj x_bj,

    sum_ab M_ab (dK/dlog l_j)_ab = w_j [(x_j^2)^T W 1 + 1^T W x_j^2 - 2 x_j^T W x_j],  W = M o K,
    (dK/dlog l_j v)_a = w_j [x_aj^2 (K v)_a - 2 x_aj (K (x_j o v))_a + (K (x_j^2 o v))_a],

each one matrix product (``W @ [1, X, X^2]``, ``K @ [v, X o v, X^2 o v]``).
:class:`RBFKernelGradient` is that lazy operator; :func:`contract_kernel_gradient` and
:func:`kernel_gradient_matvec` dispatch between it and a plain (n, n, p) array, so every
consumer accepts either.  :class:`KernelWithGradient` returns (K, operator) for
``ConstantKernel * RBF`` and scikit-learn's (K, dense array) for any other kernel.

This module imports nothing from robustep's estimators, EP or baselines (they import it).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "KernelWithGradient",
    "RBFKernelGradient",
    "as_kernel_gradient",
    "contract_kernel_gradient",
    "kernel_gradient_matvec",
]


class RBFKernelGradient:
    """dK/dlog theta of K = c exp(-1/2 sum_j w_j D_j) as a lazy (n, n, p) operator.

    theta = (log c, log l_1, ..., log l_q) with q = d (ARD) or 1 (isotropic); p = 1 + q.
    ``shape``, ``ndim`` and ``dtype`` are those of the dense array; ``dense()`` (or
    ``np.asarray``) builds it.  X is centred per column here: D_j is translation invariant
    and centring limits the cancellation in the expanded squares.

    Parameters
    ----------
    K : (n, n) the kernel matrix at theta.
    X : (n, d) training inputs.
    w : (q,) inverse squared length-scales 1 / l_j^2.
    """

    ndim = 3
    dtype = np.dtype(float)

    def __init__(self, K, X, w):
        X = np.asarray(X, dtype=float)
        self.K = K
        self.X = X - X.mean(axis=0)
        self.X2 = self.X**2
        self.w = np.asarray(w, dtype=float).reshape(-1)
        n, d = X.shape
        if self.w.size not in (1, d):
            raise ValueError(f"w must have 1 or {d} entries, got {self.w.size}")
        self.shape = (n, n, 1 + self.w.size)

    def _length_scale_terms(self, t, axis):
        """Per-dimension sums t (..., d, ...) -> dK/dlog l terms (..., q, ...) along ``axis``."""
        if self.w.size == 1:  # isotropic: one length-scale for sum_j D_j
            return self.w[0] * np.sum(t, axis=axis, keepdims=True)
        shape = [1] * t.ndim
        shape[axis] = -1
        return t * self.w.reshape(shape)

    def contract(self, M):
        """(p,) vector sum_ab M_ab dK_k(a, b) for an (n, n) M (M need not be symmetric).

        With W = M o K: entry 0 is sum W; entry 1 + j is w_j [(x_j^2)^T W 1 + 1^T W x_j^2
        - 2 x_j^T W x_j] from one product W @ [1, X, X^2].  W's diagonal (where D_j = 0)
        is left out of that product so its exactly cancelling terms add no rounding.
        """
        n, d = self.X.shape
        M = np.asarray(M, dtype=float)
        if M.shape != (n, n):
            raise ValueError(f"M must have shape ({n}, {n}), got {M.shape}")
        W = M * self.K
        diagonal_sum = float(np.trace(W))
        np.fill_diagonal(W, 0.0)
        B = np.empty((n, 1 + 2 * d))
        B[:, 0] = 1.0
        B[:, 1 : 1 + d] = self.X
        B[:, 1 + d :] = self.X2
        WB = W @ B
        W1, WX, WX2 = WB[:, 0], WB[:, 1 : 1 + d], WB[:, 1 + d :]
        t = self.X2.T @ W1 + WX2.sum(axis=0) - 2.0 * np.einsum("aj,aj->j", self.X, WX)
        out = np.empty(self.shape[2])
        out[0] = W1.sum() + diagonal_sum
        out[1:] = self._length_scale_terms(t, axis=0)
        return out

    def matvec(self, V):
        """dK_k V: (n, p) for V (n,) (``einsum("ijp,j->ip")``), (n, m, p) for V (n, m).

        (dK/dlog l_j v)_a = w_j [x_aj^2 (K v)_a - 2 x_aj (K (x_j o v))_a + (K (x_j^2 o v))_a]
        from one product K @ [V, X o V, X^2 o V].
        """
        n, d = self.X.shape
        V = np.asarray(V, dtype=float)
        vector = V.ndim == 1
        V2 = V[:, None] if vector else V
        if V2.ndim != 2 or V2.shape[0] != n:
            raise ValueError(f"V must have shape ({n},) or ({n}, m), got {V.shape}")
        m = V2.shape[1]
        B = np.empty((n, 1 + 2 * d, m))
        B[:, 0] = V2
        np.multiply(self.X[:, :, None], V2[:, None, :], out=B[:, 1 : 1 + d])
        np.multiply(self.X2[:, :, None], V2[:, None, :], out=B[:, 1 + d :])
        KB = (self.K @ B.reshape(n, -1)).reshape(n, 1 + 2 * d, m)
        KV = KB[:, 0]
        t = self.X2[:, :, None] * KV[:, None, :] - 2.0 * self.X[:, :, None] * KB[:, 1 : 1 + d]
        t += KB[:, 1 + d :]  # (n, d, m)
        out = np.empty((n, m, self.shape[2]))
        out[:, :, 0] = KV
        out[:, :, 1:] = np.moveaxis(self._length_scale_terms(t, axis=1), 1, 2)
        return out[:, 0, :] if vector else out

    def dense(self):
        """The (n, n, p) array dK/dlog theta (scikit-learn's ``eval_gradient`` layout)."""
        n, d = self.X.shape
        q = self.w.size
        # built as (p, n, n) (contiguous writes) and returned as the (n, n, p) view
        G = np.zeros((1 + q, n, n))
        G[0] = self.K
        for j in range(d):
            Dj = (self.X[:, j, None] - self.X[None, :, j]) ** 2
            if q == 1:
                G[1] += Dj
            else:
                G[1 + j] = Dj
        G[1:] *= self.w[:, None, None]
        G[1:] *= self.K
        return np.moveaxis(G, 0, -1)

    def __array__(self, dtype=None, copy=None):
        G = self.dense()
        return G if dtype is None else G.astype(dtype, copy=False)


def as_kernel_gradient(K_gradient):
    """An :class:`RBFKernelGradient` unchanged; any other input as a float (n, n, p) array.

    A 2-D (n, n) array counts as one hyperparameter (p = 1).  Use ``.shape`` on the
    result for shape checks: it never builds the dense array of an operator.
    """
    if isinstance(K_gradient, RBFKernelGradient):
        return K_gradient
    G = np.asarray(K_gradient, dtype=float)
    if G.ndim == 2:
        G = G[:, :, None]
    if G.ndim != 3:
        raise ValueError(f"K_gradient must have shape (n, n, p), got {G.shape}")
    return G


def contract_kernel_gradient(K_gradient, M):
    """(p,) vector sum_ab M_ab K_gradient[a, b, k] for an (n, n) M.

    K_gradient : :class:`RBFKernelGradient`, or an (n, n, p) / (n, n) array.
    """
    G = as_kernel_gradient(K_gradient)
    if isinstance(G, RBFKernelGradient):
        return G.contract(M)
    return np.einsum("ij,ijp->p", np.asarray(M, dtype=float), G)


def kernel_gradient_matvec(K_gradient, V):
    """dK_k V for every hyperparameter k: (n, p) for V (n,), (n, m, p) for V (n, m).

    K_gradient : :class:`RBFKernelGradient`, or an (n, n, p) / (n, n) array.
    """
    G = as_kernel_gradient(K_gradient)
    if isinstance(G, RBFKernelGradient):
        return G.matvec(V)
    V = np.asarray(V, dtype=float)
    if V.ndim == 1:
        return np.einsum("ijp,j->ip", G, V)
    return np.einsum("ijp,jm->imp", G, V)


def rbf_kernel_matrix(X, theta):
    """K = c exp(-1/2 ||(x_a - x_b) / l||^2), (n, n), for theta = (log c, log l (q,)).

    Squared distances of the scaled inputs by one (symmetric) matrix product, negatives
    from rounding clipped to 0 and the diagonal set to exactly 0; K is exactly symmetric.
    X should be centred (the expansion ||z_a||^2 + ||z_b||^2 - 2 z_a.z_b cancels less).
    """
    theta = np.asarray(theta, dtype=float)
    Z = X / np.exp(theta[1:])
    sq = np.einsum("aj,aj->a", Z, Z)
    S = Z @ Z.T  # symmetric (BLAS syrk)
    S *= -2.0
    S += np.add.outer(sq, sq)  # sq_a + sq_b in one addition, so S stays exactly symmetric
    np.maximum(S, 0.0, out=S)
    np.fill_diagonal(S, 0.0)
    S *= -0.5
    S += theta[0]
    return np.exp(S, out=S)


class KernelWithGradient:
    """``theta -> (K (n, n), dK/dlog theta)`` for a fixed kernel structure and X (n, d).

    For ``ConstantKernel * RBF`` (isotropic or ARD, all hyperparameters free) the
    gradient is an :class:`RBFKernelGradient` (``fast`` is True); for any other kernel,
    or one whose fast values do not reproduce scikit-learn's to 1e-10 at the initial
    theta, it is scikit-learn's (n, n, p) array from
    ``kernel.clone_with_theta(theta)(X, eval_gradient=True)``.
    """

    def __init__(self, kernel, X):
        from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Product

        self.kernel = kernel
        self.X = np.asarray(X, dtype=float)
        self._Xc = None
        k1, k2 = getattr(kernel, "k1", None), getattr(kernel, "k2", None)
        if not (
            isinstance(kernel, Product)
            and isinstance(k1, ConstantKernel)
            and isinstance(k2, RBF)
            and not any(h.fixed for h in kernel.hyperparameters)
        ):
            return
        n, d = self.X.shape if self.X.ndim == 2 else (0, 0)
        if np.size(k2.theta) not in (1, d) or n == 0:  # 1 (isotropic) or d (ARD)
            return
        self._Xc = self.X - self.X.mean(axis=0)
        K, G = self(kernel.theta)
        K_ref, G_ref = kernel(self.X, eval_gradient=True)
        scale = max(1.0, float(np.max(np.abs(K_ref))))
        if not (
            np.allclose(K, K_ref, rtol=1e-10, atol=1e-12 * scale)
            and np.allclose(G.dense(), G_ref, rtol=1e-10, atol=1e-12 * scale)
        ):  # pragma: no cover - defensive
            self._Xc = None

    @property
    def fast(self) -> bool:
        return self._Xc is not None

    def __call__(self, theta):
        """(K (n, n), dK/dlog theta: RBFKernelGradient or (n, n, p) array) at theta (p,)."""
        theta = np.asarray(theta, dtype=float)
        if self._Xc is None:
            return self.kernel.clone_with_theta(theta)(self.X, eval_gradient=True)
        K = rbf_kernel_matrix(self._Xc, theta)
        return K, RBFKernelGradient(K, self._Xc, np.exp(-2.0 * theta[1:]))
