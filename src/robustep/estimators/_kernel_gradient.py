"""K(theta) and dK/dlog theta on fixed training inputs, for hyperparameter searches.

A type-II MAP search evaluates ``kernel.clone_with_theta(theta)(X, eval_gradient=True)``
a few hundred times on the same X.  For the kernel of the robust-regression experiments,
``ConstantKernel * RBF`` (isotropic or ARD, all hyperparameters free), this module keeps
the per-dimension squared distances D_d = (x_id - x_jd)^2, shape (q, n, n), and forms

    K = c exp(-1/2 sum_d D_d / l_d^2),
    dK/dlog c = K,   dK/dlog l_d = K * D_d / l_d^2        (sklearn's RBF gradient)

with one BLAS product over D and one pass per length-scale, instead of scikit-learn's
clone, pdist, and several (n, n, q) temporaries (about 1/3 of a Boston unit's CPU time
in tgp-benchmark, docs/benchmarks.md).  The layout is scikit-learn's: K (n, n) and the
gradient (n, n, p) with p = 1 + q in ``kernel.theta`` order.  Any other kernel, or a
kernel whose fast values do not reproduce scikit-learn's to 1e-10 at the initial theta,
uses ``kernel.clone_with_theta(theta)(X, eval_gradient=True)``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["KernelWithGradient"]


class KernelWithGradient:
    """``theta -> (K (n, n), dK/dtheta (n, n, p))`` for a fixed kernel structure and X (n, d).

    ``fast`` tells whether the ConstantKernel * RBF path is in use.
    """

    def __init__(self, kernel, X):
        from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Product

        self.kernel = kernel
        self.X = np.asarray(X, dtype=float)
        self.D = None
        k1, k2 = getattr(kernel, "k1", None), getattr(kernel, "k2", None)
        if not (
            isinstance(kernel, Product)
            and isinstance(k1, ConstantKernel)
            and isinstance(k2, RBF)
            and not any(h.fixed for h in kernel.hyperparameters)
        ):
            return
        n, d = self.X.shape
        q = np.size(k2.theta)  # 1 (isotropic) or d (ARD)
        if q not in (1, d) or n == 0:
            return
        diff2 = (self.X.T[:, :, None] - self.X.T[:, None, :]) ** 2  # (d, n, n)
        self.D = diff2.sum(axis=0, keepdims=True) if q == 1 else np.ascontiguousarray(diff2)
        K, G = self(kernel.theta)
        K_ref, G_ref = kernel(self.X, eval_gradient=True)
        scale = max(1.0, float(np.max(np.abs(K_ref))))
        if not (
            np.allclose(K, K_ref, rtol=1e-10, atol=1e-12 * scale)
            and np.allclose(G, G_ref, rtol=1e-10, atol=1e-12 * scale)
        ):  # pragma: no cover - defensive
            self.D = None

    @property
    def fast(self) -> bool:
        return self.D is not None

    def __call__(self, theta):
        theta = np.asarray(theta, dtype=float)
        if self.D is None:
            return self.kernel.clone_with_theta(theta)(self.X, eval_gradient=True)
        q, n, _ = self.D.shape
        w = np.exp(-2.0 * theta[1:])  # 1 / l_d^2
        S = np.tensordot(w, self.D, axes=1)  # sum_d D_d / l_d^2, one BLAS product
        K = np.exp(theta[0] - 0.5 * S)  # c exp(-S/2)
        # built as (p, n, n) (contiguous writes) and returned as the (n, n, p) view
        G = np.empty((1 + q, n, n))
        G[0] = K
        for j in range(q):  # loop over length-scales, not data
            np.multiply(self.D[j], w[j], out=G[1 + j])
            G[1 + j] *= K
        return K, np.moveaxis(G, 0, -1)
