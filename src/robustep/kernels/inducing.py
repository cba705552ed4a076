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

Fast path: for exactly those kernel classes (not subclasses; :func:`supports_fast_rows`)
both contractions of a block of rows come from one distance computation per radial
factor, without scikit-learn's stacked (c + m)^2 evaluation and its (c + m, c + m, p)
gradient array: every derivative of a radial kernel k(r), r = ||(x - z)/l||, is a
multiple of H = -k'(r)/r (eq. S15),

    d k / d z_k = H (x_k - z_k) / l_k^2,     d k / d log l_k = H (x_k - z_k)^2 / l_k^2,

so with HW = H o W both are sums of HW, its row and column sums and HW^T X (k, m) x
(k, d).  :func:`cross_covariance` gives k(X, Z) from the same formulas (the prior's
K_nm).  Any other kernel falls back to scikit-learn for theta and to
:func:`_contract_second_argument` for Z.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import blas
from scipy.spatial.distance import cdist
from sklearn.gaussian_process.kernels import (
    RBF,
    ConstantKernel,
    Matern,
    Product,
    RationalQuadratic,
    Sum,
    WhiteKernel,
)

from robustep.kernels._rows import row_chunks
from robustep.linalg import blas_matmul

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
    if supports_fast_rows(kernel):
        return rows_gradient(kernel, X, Z, W_nm, w_diag, wrt_theta=True, wrt_Z=False)[0]
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
    if supports_fast_rows(kernel):
        return rows_gradient(kernel, X, Z, W_nm, None, wrt_theta=False, wrt_Z=True)[1]
    return _contract_second_argument(kernel, X, Z, W_nm)


# ------------------------------------------------------------------ fast path (radial kernels)
_FAST_BASE = (RBF, Matern, RationalQuadratic, ConstantKernel, WhiteKernel)


def supports_fast_rows(kernel) -> bool:
    """Whether :func:`rows_gradient` and :func:`cross_covariance` handle ``kernel``.

    Exactly the classes RBF (isotropic or ARD), Matern (nu in {0.5, 1.5, 2.5, inf}),
    RationalQuadratic, ConstantKernel, WhiteKernel and Sum / Product of them: a subclass
    may change the formulas, so it takes the general path.
    """
    t = type(kernel)
    if t in (Sum, Product):
        return supports_fast_rows(kernel.k1) and supports_fast_rows(kernel.k2)
    if t is Matern:
        return kernel.nu in (0.5, 1.5, 2.5, np.inf)
    return t in _FAST_BASE


def cross_covariance(kernel, X, Z, scratch=None):
    """k(X, Z), shape (k, m), C-ordered float64: by :func:`_value` for the kernels of
    :func:`supports_fast_rows` (the same distances and formulas as scikit-learn, up to
    rounding, without its intermediate (k, m) arrays), otherwise ``kernel(X, Z)``.
    With a ``scratch`` (:class:`robustep.kernels._rows.Scratch`) the result may be
    one of its buffers."""
    if not supports_fast_rows(kernel):
        return np.ascontiguousarray(kernel(X, Z), dtype=float)
    K = _value(kernel, _Block(X, Z, scratch))
    if np.ndim(K) == 0:
        return np.full((X.shape[0], Z.shape[0]), float(K))
    return np.ascontiguousarray(K)


def rows_gradient(kernel, X, Z, W, w_diag, *, wrt_theta=True, wrt_Z=True, scratch=None):
    """<W, dK(X, Z)> w.r.t. theta and Z, plus <w_diag, d diag K(X, X) / d theta> (eq. S14).

    X (k, d) rows, Z (m, d), W (k, m) their block of W_nm, w_diag (k,) or None (no
    diagonal term).  Returns (g_theta (p,) in the order of ``kernel.theta`` or None,
    g_Z (m, d) or None).  Only for :func:`supports_fast_rows` kernels, which are all
    stationary: d k(x, x) / d theta is the same at every x and is taken from scikit-learn
    at one point.  Cost: one distance computation (k m d) and a few elementwise passes
    over (k, m) per radial factor, and one (m, k) x (k, d) product per radial factor.
    ``scratch``: a :class:`robustep.kernels._rows.Scratch` for the (k, m) temporaries.
    """
    blk = _Block(X, Z, scratch)
    theta, g_Z = _contract(kernel, blk, W, wrt_theta, wrt_Z)
    if g_Z is None and wrt_Z:
        g_Z = np.zeros(Z.shape)
    if not wrt_theta:
        return None, g_Z
    g_theta = np.concatenate([np.atleast_1d(np.asarray(t, dtype=float)) for t in theta] or [[]])
    if g_theta.shape != kernel.theta.shape:  # a hyperparameter layout this path does not know
        raise RuntimeError(
            f"fast kernel gradient has {g_theta.size} entries for a kernel with "
            f"{kernel.theta.size} hyperparameters ({kernel}); please report this"
        )
    if w_diag is not None and g_theta.size and X.shape[0]:
        _, G0 = kernel(X[:1], eval_gradient=True)
        g_theta = g_theta + float(np.sum(w_diag)) * G0[0, 0, :]
    return g_theta, g_Z


class _Block:
    """Rows X (k, d) and inducing inputs Z (m, d) with the per-radial-kernel quantities
    of the block, computed once: squared scaled distances D2, k(r) and H = -k'(r)/r."""

    def __init__(self, X, Z, scratch=None):
        self.X, self.Z = X, Z
        self.scratch = scratch
        self._radial = {}
        self._products = {}
        self._colsums = {}

    def buffer(self, name):
        """An uninitialised (k, m) array, from the scratch when there is one."""
        shape = (self.X.shape[0], self.Z.shape[0])
        return np.empty(shape) if self.scratch is None else self.scratch.get(name, shape)

    def times(self, W, K):
        """W o K (k, m), cached per pair of arrays: for an RBF factor of a product the
        weight of the other factor and the RBF's own H o W are the same array."""
        key = (id(W), id(K))
        if key not in self._products:
            out = self.buffer(("product", len(self._products)))
            # W and K are kept with the product, so that their ids stay unique
            self._products[key] = (W, K, np.multiply(W, K, out=out))
        return self._products[key][2]

    def colsum(self, A):
        """Column sums (m,) of a (k, m) array, cached like :meth:`times`."""
        if id(A) not in self._colsums:
            self._colsums[id(A)] = (A, A.sum(axis=0))
        return self._colsums[id(A)][1]

    def radial(self, kernel):
        """(ls (d,), D2, K, H, extra) for a radial kernel; cached per kernel object."""
        key = id(kernel)
        if key not in self._radial:
            self._radial[key] = _radial_terms(kernel, self)
        return self._radial[key]


def _length_scales(kernel, d):
    if type(kernel) is RationalQuadratic:
        return np.full(d, float(kernel.length_scale))
    return np.broadcast_to(np.asarray(kernel.length_scale, dtype=float), (d,))


def _radial_terms(kernel, blk):
    X, Z = blk.X, blk.Z
    ls = _length_scales(kernel, X.shape[1])
    # squared distances of the scaled inputs, computed as scikit-learn's RBF does
    D2 = cdist(X / ls, Z / ls, metric="sqeuclidean", out=blk.buffer(("D2", id(kernel))))
    extra = None
    t = type(kernel)
    if t is RationalQuadratic:
        a = float(kernel.alpha)
        base = 1.0 + D2 / (2.0 * a)
        H = base ** (-a - 1.0)
        K = H * base  # base^-a
        extra = base
    elif t is Matern and kernel.nu != np.inf:
        r = np.sqrt(D2)
        if kernel.nu == 0.5:
            K = np.exp(-r)
            with np.errstate(divide="ignore", invalid="ignore"):
                H = np.where(r > 0, K / np.where(r > 0, r, 1.0), 0.0)
        elif kernel.nu == 1.5:
            r *= np.sqrt(3.0)
            e = np.exp(-r)
            K = (1.0 + r) * e
            H = 3.0 * e
        else:  # 2.5
            r *= np.sqrt(5.0)
            e = np.exp(-r)
            K = (1.0 + r + r * r / 3.0) * e
            H = (5.0 / 3.0) * (1.0 + r) * e
    else:  # RBF, Matern nu = inf
        K = np.multiply(D2, -0.5, out=blk.buffer(("K", id(kernel))))
        np.exp(K, out=K)
        H = K
    return ls, D2, K, H, extra


def _value(kernel, blk):
    """k(X, Z) of the block: an array (k, m), or a float for a constant."""
    t = type(kernel)
    if t in (Sum, Product):
        K1, K2 = _value(kernel.k1, blk), _value(kernel.k2, blk)
        op = np.add if t is Sum else np.multiply
        if np.ndim(K1) == 0 and np.ndim(K2) == 0:
            return float(op(K1, K2))
        return op(K1, K2, out=blk.buffer(("value", id(kernel))))
    if t is ConstantKernel:
        return float(kernel.constant_value)
    if t is WhiteKernel:
        return 0.0  # k(x, z) = 0 between distinct inputs (scikit-learn's k(X, Y))
    return blk.radial(kernel)[2]


def _scaled(parts, scale):
    theta, g_Z = parts
    return [scale * t for t in theta], (None if g_Z is None else scale * g_Z)


def _add_Z(a, b):
    if a is None:
        return b
    return a if b is None else a + b


def _contract(kernel, blk, W, wrt_theta, wrt_Z):
    """([<W, dK/d theta_j>, ... in theta order], <W, dK/dZ> (m, d) or None for zero).

    Linear in W, so a constant factor of a product scales the other factor's result
    instead of W.
    """
    t = type(kernel)
    if t in (Sum, Product):
        if t is Sum:
            W1 = W2 = W
        else:
            K1, K2 = _value(kernel.k1, blk), _value(kernel.k2, blk)
            W1 = W if np.ndim(K2) == 0 else blk.times(W, K2)
            W2 = W if np.ndim(K1) == 0 else blk.times(W, K1)
        p1 = _contract(kernel.k1, blk, W1, wrt_theta, wrt_Z)
        p2 = _contract(kernel.k2, blk, W2, wrt_theta, wrt_Z)
        if t is Product and np.ndim(K2) == 0:
            p1 = _scaled(p1, float(K2))
        if t is Product and np.ndim(K1) == 0:
            p2 = _scaled(p2, float(K1))
        return p1[0] + p2[0], _add_Z(p1[1], p2[1])
    if t is ConstantKernel:
        fixed = kernel.hyperparameter_constant_value.fixed
        total = 0.0 if (fixed or not wrt_theta) else float(np.sum(blk.colsum(W)))
        theta = [] if (fixed or not wrt_theta) else [float(kernel.constant_value) * total]
        return theta, None
    if t is WhiteKernel:
        # its gradient is noise_level * I on k(X, X): nothing between distinct inputs
        fixed = kernel.hyperparameter_noise_level.fixed
        return ([] if (fixed or not wrt_theta) else [0.0]), None
    return _contract_radial(kernel, blk, W, wrt_theta, wrt_Z)


def _contract_radial(kernel, blk, W, wrt_theta, wrt_Z):
    ls_fixed = kernel.hyperparameter_length_scale.fixed
    want_ls = wrt_theta and not ls_fixed
    is_rq = type(kernel) is RationalQuadratic
    want_alpha = wrt_theta and is_rq and not kernel.hyperparameter_alpha.fixed
    ls, D2, K, H, base = blk.radial(kernel)
    theta = []
    if want_alpha:
        # d k / d log a = k (-a log base + D2 / (2 base))   (scikit-learn's RationalQuadratic)
        a = float(kernel.alpha)
        KW = blk.times(W, K)
        theta.append(-a * _vdot(KW, np.log(base)) + 0.5 * _vdot(KW, D2 / base))
    if not (want_ls or wrt_Z):
        return theta, None
    HW = blk.times(W, H)
    anisotropic = np.iterable(kernel.length_scale) and len(kernel.length_scale) > 1
    g_Z = None
    if wrt_Z or (want_ls and anisotropic):
        # differences x - z enter through HW^T X and the column sums; centring both at
        # the mean of Z keeps the terms of the expansion of (x - z)^2 below small
        centre = blk.Z.mean(axis=0)
        Xs, Zs = (blk.X - centre) / ls, (blk.Z - centre) / ls
        P = blas_matmul(HW.T, Xs)  # (m, d)
        col = blk.colsum(HW)  # (m,)
        if wrt_Z:
            g_Z = (P - col[:, None] * Zs) / ls  # sum_i HW_ij (x_i - z_j) / ls^2
    if want_ls:
        if anisotropic:
            # sum_ij HW_ij (x_ik - z_jk)^2 / ls_k^2, expanded
            row = HW.sum(axis=1)
            theta.append(row @ Xs**2 - 2.0 * np.sum(Zs * P, axis=0) + col @ Zs**2)
        else:
            theta.append(_vdot(HW, D2))
    return theta, g_Z  # RationalQuadratic's theta order (scikit-learn's): alpha, length_scale


def _vdot(A, B):
    """sum(A o B) for two C-ordered (k, m) arrays, by BLAS ``ddot``."""
    return float(blas.ddot(A.ravel(), B.ravel()))


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
