"""Kernel derivatives for the FITC evidence gradient (docs/derivations/sparse.md §5).

Two contractions of the gradient weights of :meth:`FITCSitePosterior.gradient_weights`
with kernel derivatives, never forming an (n, m, p) or (n, m, m, d) array:

* :func:`fitc_theta_gradient`: d log Z / d theta for the kernel's log hyperparameters,
  from scikit-learn's own analytic ``eval_gradient`` (any kernel).  scikit-learn only
  differentiates ``k(X, X)``, so a block of rows X_c and the inducing inputs Z are stacked
  and ``kernel(vstack(X_c, Z), eval_gradient=True)`` gives dK_cm (its off-diagonal block)
  and d diag(K_cc) (its diagonal) at once, in row chunks.
* :func:`inducing_input_gradient`: d log Z / d Z, analytic for ``RBF`` (isotropic and
  ARD), ``Matern`` (nu = 0.5, 1.5, 2.5, inf), ``RationalQuadratic``, ``ConstantKernel``,
  ``WhiteKernel`` and their sums and products (product rule); other kernels raise
  ``NotImplementedError`` (fit with ``optimize_inducing=False`` then).
"""

from __future__ import annotations

import numpy as np
from sklearn.gaussian_process.kernels import (
    RBF,
    ConstantKernel,
    Matern,
    Product,
    RationalQuadratic,
    Sum,
    WhiteKernel,
)

from robustep.posterior.sparse import row_chunks  # sparse imports this module lazily only

#: kernels whose derivative with respect to the inducing inputs is analytic
ANALYTIC_INPUT_GRADIENT = (
    RBF,
    Matern,
    RationalQuadratic,
    ConstantKernel,
    WhiteKernel,
    Sum,
    Product,
)


def fitc_theta_gradient(kernel, X, Z, weights):
    """d log Z / d theta (p,) for the log hyperparameters ``kernel.theta``.

    ``weights`` = ``posterior.gradient_weights()`` = (W_nm_rows, W_mm, w_diag): the
    gradient is <W_nm, dK_nm> + <W_mm, dK_mm> + <w_diag, d diag K_nn> (eq. S14).
    """
    W_nm_rows, W_mm, w_diag = weights
    grad = theta_gradient_mm(kernel, Z, W_mm)
    n = X.shape[0]
    for rows in row_chunks(n, 1, entries=max(256, Z.shape[0])):
        grad += theta_gradient_rows(kernel, X[rows], Z, W_nm_rows(rows), w_diag[rows])
    return grad


def theta_gradient_mm(kernel, Z, W_mm):
    """<W_mm, dK_mm / d theta>, shape (p,)."""
    _, dK_mm = kernel(Z, eval_gradient=True)
    return np.einsum("ij,ijk->k", W_mm, dK_mm)


def theta_gradient_rows(kernel, X, Z, W_nm, w_diag):
    """<W_nm, dK_nm / d theta> + <w_diag, d diag K_nn / d theta> for a block of rows X.

    scikit-learn differentiates only k(X, X): the rows are stacked with Z, and the
    off-diagonal block and the diagonal of ``kernel(vstack(X, Z), eval_gradient=True)``
    give dK_nm and d diag K_nn.  Blocks of c ~ max(m, 256) rows keep the overhead of
    the Z block (a factor (c + m)^2 / (c m) in kernel evaluations) below about 4.
    """
    k = X.shape[0]
    grad = 0.0
    c = max(256, Z.shape[0])
    for start in range(0, k, c):
        rows = slice(start, min(start + c, k))
        Xc = X[rows]
        kc = Xc.shape[0]
        _, G = kernel(np.vstack([Xc, Z]), eval_gradient=True)
        grad = grad + np.einsum("ij,ijk->k", W_nm[rows], G[:kc, kc:, :])
        grad = grad + np.einsum("i,iik->k", w_diag[rows], G[:kc, :kc, :])
    return grad


def inducing_input_gradient(kernel, X, Z, weights):
    """d log Z / d Z, shape (m, d) (eq. S15): analytic for the kernels listed above."""
    W_nm_rows, W_mm, _ = weights
    n, m = X.shape[0], Z.shape[0]
    g = inducing_gradient_mm(kernel, Z, W_mm)
    for rows in row_chunks(n, m):
        g += inducing_gradient_rows(kernel, X[rows], Z, W_nm_rows(rows))
    return g


def inducing_gradient_mm(kernel, Z, W_mm):
    """<W_mm, dK_mm/dZ> = 2 sum_j W_ja d2 k(z_j, z_a) for symmetric W_mm, shape (m, d)."""
    return 2.0 * _contract_second_argument(kernel, Z, Z, W_mm)


def inducing_gradient_rows(kernel, X, Z, W_nm):
    """<W_nm, dK_nm/dZ> for a block of rows X, shape (m, d)."""
    return _contract_second_argument(kernel, X, Z, W_nm)


def gradient_block(X, V, alpha, beta, M_diag, s, Ainv, L_mm, kernel, Z, wrt_Z):
    """Row part of the FITC evidence gradient for one block of rows (eqs. S14, S15).

    X (k, d), V (k, m) and the site vectors (k,) of the block; s = V^T alpha (m,),
    Ainv = A^-1 and L_mm (m, m) are global.  Returns (<W_nm, dK_nm/d theta> +
    <w, d diag K_nn/d theta> (p,), <W_nm, dK_nm/dZ> (m, d) or None), W_nm the block's
    rows (``sparse.W_nm_block``), w = diag(M)/2.
    """
    from robustep.posterior.sparse import W_nm_block

    W = W_nm_block(V, alpha, beta, M_diag, s, Ainv, L_mm)
    g_theta = theta_gradient_rows(kernel, X, Z, W, 0.5 * M_diag)
    g_Z = inducing_gradient_rows(kernel, X, Z, W) if wrt_Z else None
    return g_theta, g_Z


def supports_input_gradient(kernel) -> bool:
    """Whether :func:`inducing_input_gradient` has an analytic rule for ``kernel``."""
    if isinstance(kernel, (Sum, Product)):
        return supports_input_gradient(kernel.k1) and supports_input_gradient(kernel.k2)
    if isinstance(kernel, Matern):
        return kernel.nu in (0.5, 1.5, 2.5, np.inf)
    if isinstance(kernel, RationalQuadratic):
        return True
    return isinstance(kernel, (RBF, ConstantKernel, WhiteKernel))


def _contract_second_argument(kernel, X, Z, W):
    """sum_i W_ij d k(x_i, z_j) / d z_j, shape (m, d), for X (n, d), Z (m, d), W (n, m)."""
    if isinstance(kernel, Sum):
        return _contract_second_argument(kernel.k1, X, Z, W) + _contract_second_argument(
            kernel.k2, X, Z, W
        )
    if isinstance(kernel, Product):
        K1 = kernel.k1(X, Z)
        K2 = kernel.k2(X, Z)
        return _contract_second_argument(kernel.k1, X, Z, W * K2) + _contract_second_argument(
            kernel.k2, X, Z, W * K1
        )
    if isinstance(kernel, (ConstantKernel, WhiteKernel)):
        # constant in the inputs (WhiteKernel only acts on the diagonal of K_mm, a constant)
        return np.zeros(Z.shape)
    if isinstance(kernel, (RBF, Matern, RationalQuadratic)):
        if isinstance(kernel, RationalQuadratic):
            ls = np.full(X.shape[1], float(kernel.length_scale))
        else:
            ls = np.broadcast_to(np.asarray(kernel.length_scale, dtype=float), (X.shape[1],))
        # d k / d z = H(x, z) (x - z) / ls^2 for these stationary kernels
        H = _radial_factor(kernel, X, Z, ls)
        HW = H * W
        return (HW.T @ X - np.sum(HW, axis=0)[:, None] * Z) / ls**2
    raise NotImplementedError(
        f"no analytic derivative with respect to the inducing inputs for {type(kernel).__name__}"
        " (supported: RBF, Matern nu in {0.5, 1.5, 2.5, inf}, RationalQuadratic, "
        "ConstantKernel, WhiteKernel, sums and products); fit with optimize_inducing=False"
    )


def _radial_factor(kernel, X, Z, ls):
    """H with d k(x, z)/dz = H (x - z)/ls^2, shape (n, m)."""
    Xs, Zs = X / ls, Z / ls
    d2 = np.maximum(
        np.sum(Xs**2, axis=1)[:, None] + np.sum(Zs**2, axis=1)[None, :] - 2.0 * Xs @ Zs.T, 0.0
    )
    if isinstance(kernel, RationalQuadratic):
        a = float(kernel.alpha)
        return (1.0 + d2 / (2.0 * a)) ** (-a - 1.0)
    if isinstance(kernel, Matern) and kernel.nu != np.inf:
        r = np.sqrt(d2)
        if kernel.nu == 0.5:
            with np.errstate(divide="ignore", invalid="ignore"):
                return np.where(r > 0, np.exp(-r) / np.where(r > 0, r, 1.0), 0.0)
        if kernel.nu == 1.5:
            return 3.0 * np.exp(-np.sqrt(3.0) * r)
        if kernel.nu == 2.5:
            return (5.0 / 3.0) * (1.0 + np.sqrt(5.0) * r) * np.exp(-np.sqrt(5.0) * r)
        raise NotImplementedError(
            f"Matern(nu={kernel.nu}) has no analytic inducing-input derivative here; use nu in "
            "{0.5, 1.5, 2.5, inf} or optimize_inducing=False"
        )
    return np.exp(-0.5 * d2)  # RBF (and Matern nu = inf)
