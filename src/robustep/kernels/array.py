"""Stationary scikit-learn kernels evaluated on an array-API library (e.g. on a GPU).

:func:`kernel_matrix` computes ``kernel(X, Y)`` (and, for ``Y=None``, the gradient with
respect to the kernel's log hyperparameters, in the order of ``kernel.theta``) in the
namespace ``xp`` on a device, from the hyperparameters of a
``sklearn.gaussian_process.kernels`` object, for

* ``RBF`` (isotropic or anisotropic length scales),
* ``Matern`` with nu in {0.5, 1.5, 2.5, inf},
* ``RationalQuadratic``,
* ``ConstantKernel``, ``WhiteKernel``, and sums, products and exponentiations of these.

Other kernels (:func:`supports` is False) are computed by scikit-learn and moved.

The formulas are those of Rasmussen & Williams (2006) §4.2 (eqs. 4.9, 4.14, 4.17, 4.19)
in scikit-learn's parameterisation.  With the scaled squared distance
``D2 = sum_k (x_k - x'_k)^2 / l_k^2`` and ``D = sqrt(D2)``:

* RBF: k = exp(-D2 / 2); dk / dlog l_k = k * Delta_k, Delta_k = (x_k - x'_k)^2 / l_k^2;
* Matern: k(D) as in R&W eq. 4.17; dk / dlog l_k = g(D) * Delta_k with g(D) = -k'(D) / D:
  nu=1/2: exp(-D) / D (0 at D = 0, as scikit-learn); nu=3/2: 3 exp(-sqrt3 D);
  nu=5/2: 5/3 (1 + sqrt5 D) exp(-sqrt5 D);
* RationalQuadratic: b = 1 + D2 / (2 a), k = b^-a; dk / dlog l = D2 b^(-a-1),
  dk / dlog a = k (D2 / (2 b) - a log b);
* ConstantKernel c: dk / dlog c = c; WhiteKernel s: s I on K(X) only (zero between two
  different input sets, as scikit-learn: ``k(X, X)`` passed as ``Y`` gives zeros).

Squared distances use ||x||^2 + ||x'||^2 - 2 x.x' on centred inputs (one GEMM, no
(n, m, d) temporary), clipped at zero with an exact zero diagonal for K(X, X); the
anisotropic gradients need one (n, n) matrix per input dimension.
"""

from __future__ import annotations

import math

import numpy as np
from sklearn.gaussian_process.kernels import (
    RBF,
    ConstantKernel,
    Exponentiation,
    Matern,
    Product,
    RationalQuadratic,
    Sum,
    WhiteKernel,
)

from robustep import _array_api as aa

_MATERN_NU = (0.5, 1.5, 2.5, math.inf)


def supports(kernel) -> bool:
    """True when :func:`kernel_matrix` evaluates ``kernel`` in the array namespace."""
    if isinstance(kernel, Sum | Product):
        return supports(kernel.k1) and supports(kernel.k2)
    if isinstance(kernel, Exponentiation):
        return supports(kernel.kernel)
    if isinstance(kernel, Matern):  # Matern is a subclass of RBF: test it first
        return float(kernel.nu) in _MATERN_NU
    if isinstance(kernel, RationalQuadratic):
        return np.ndim(kernel.length_scale) == 0
    return isinstance(kernel, RBF | ConstantKernel | WhiteKernel) and type(kernel) in (
        RBF, ConstantKernel, WhiteKernel,
    )  # fmt: skip


class _Inputs:
    """X (and Y) on the device, centred, with cached squared distances per length scale."""

    def __init__(self, xp, X, Y, like):
        self.xp = xp
        X = np.asarray(X, dtype=float)
        shift = X.mean(axis=0) if X.shape[0] else 0.0
        self.X = aa.from_numpy(xp, X - shift, like)
        self.same = Y is None
        self.Y = self.X if Y is None else aa.from_numpy(xp, np.asarray(Y, dtype=float) - shift,
                                                         like)  # fmt: skip
        self.like = like
        self.n, self.m = X.shape[0], (X.shape[0] if Y is None else np.shape(Y)[0])

    def sq_dist(self, length_scale):
        """D2 (n, m) of the inputs scaled by ``length_scale`` (scalar or (d,))."""
        xp = self.xp
        ls = aa.from_numpy(xp, np.atleast_1d(np.asarray(length_scale, dtype=float)), self.like)
        A = self.X / ls
        B = A if self.same else self.Y / ls
        a2 = xp.sum(A * A, axis=1)
        b2 = a2 if self.same else xp.sum(B * B, axis=1)
        D2 = -2.0 * (A @ B.mT)
        D2 += a2[:, None]  # in place where the library allows (few (n, m) temporaries)
        D2 += b2[None, :]
        D2 = aa.clip_below(xp, D2, 0.0)
        if self.same:
            D2 = aa.fill_diagonal(xp, (D2 + D2.mT) * 0.5, 0.0)  # symmetric, zero diagonal
        return D2

    def per_dim_sq(self, length_scale):
        """[Delta_k] for every input dimension k, each (n, m)."""
        xp = self.xp
        ls = np.atleast_1d(np.asarray(length_scale, dtype=float))
        out = []
        for k in range(int(self.X.shape[1])):
            diff = self.X[:, k][:, None] - self.Y[:, k][None, :]
            out.append(diff * diff / float(ls[k] if ls.size > 1 else ls[0]) ** 2)
        del xp
        return out

    def full(self, value):
        return self.xp.full((self.n, self.m), float(value), dtype=self.like.dtype,
                            device=aa.device(self.like))  # fmt: skip


def _free(kernel, name):
    return not getattr(kernel, f"hyperparameter_{name}").fixed


def _stationary(kernel, inp, eval_gradient):
    """RBF / Matern / RQ: (K, [dK / dlog theta_j])."""
    xp = inp.xp
    ls = kernel.length_scale
    D2 = inp.sq_dist(ls)
    grads = []
    if isinstance(kernel, RationalQuadratic):
        a = float(kernel.alpha)
        b = 1.0 + D2 / (2.0 * a)
        K = b ** (-a)
        if eval_gradient:
            if _free(kernel, "alpha"):
                grads.append(K * (D2 / (2.0 * b) - a * xp.log(b)))
            if _free(kernel, "length_scale"):
                grads.append(D2 * b ** (-a - 1.0))
        return K, grads
    nu = float(kernel.nu) if isinstance(kernel, Matern) else math.inf
    if nu == math.inf:
        K = xp.exp(-0.5 * D2)
        g = K  # -k'(D) / D
    else:
        D = xp.sqrt(D2)
        if nu == 0.5:
            K = xp.exp(-D)
            g = xp.where(D > 0, K / xp.where(D > 0, D, xp.ones_like(D)), xp.zeros_like(D))
        elif nu == 1.5:
            e = xp.exp(-math.sqrt(3.0) * D)
            K = (1.0 + math.sqrt(3.0) * D) * e
            g = 3.0 * e
        else:
            e = xp.exp(-math.sqrt(5.0) * D)
            K = (1.0 + math.sqrt(5.0) * D + (5.0 / 3.0) * D2) * e
            g = (5.0 / 3.0) * (1.0 + math.sqrt(5.0) * D) * e
    if eval_gradient and _free(kernel, "length_scale"):
        if np.ndim(ls) == 0 or np.size(ls) == 1 and not getattr(kernel, "anisotropic", False):
            grads.append(g * D2)
        else:
            grads.extend(g * delta for delta in inp.per_dim_sq(ls))
    return K, grads


class _Diag:
    """value * I (the WhiteKernel on K(X, X)), kept lazy until it meets a matrix."""

    def __init__(self, value):
        self.value = float(value)


def _is_array(a):
    return not isinstance(a, float | _Diag)


def _materialise(a, inp):
    """A float (constant matrix) or _Diag as an (n, m) array; arrays pass through."""
    if isinstance(a, float):
        return inp.full(a)
    if isinstance(a, _Diag):
        return a.value * aa.eye(inp.xp, inp.n, inp.like)
    return a


def _add(a, b, inp, owned):
    """a + b; adds a _Diag to a matrix in place when this module owns the matrix."""
    if isinstance(a, _Diag) and _is_array(b):
        a, b = b, a
    if isinstance(a, _Diag) and isinstance(b, _Diag):
        return _Diag(a.value + b.value)
    if _is_array(a) and isinstance(b, _Diag):
        return aa.add_diagonal(inp.xp, a if owned(a) else a + 0.0, b.value)
    if isinstance(a, float) and isinstance(b, float):
        return a + b
    if isinstance(a, _Diag) or isinstance(b, _Diag):  # a float plus a _Diag
        return _add(_materialise(a, inp), b, inp, lambda _: True)
    return a + b  # array + array, array + float


def _mul(a, b, inp):
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, _Diag) or isinstance(b, _Diag):
            d, c = (a, b) if isinstance(a, _Diag) else (b, a)
            return _Diag(d.value * c)
        return a * b
    if isinstance(a, _Diag) and isinstance(b, _Diag):
        return _Diag(a.value * b.value)
    return _materialise(a, inp) * _materialise(b, inp)


def _pow(a, p):
    if isinstance(a, _Diag):
        return _Diag(a.value**p)
    return a**p


def _evaluate(kernel, inp, eval_gradient):
    """(K, [dK_j]) with constants kept as floats and white noise as _Diag (no (n, n)
    matrix of constants or identity is formed for ConstantKernel * k + WhiteKernel)."""
    if isinstance(kernel, Sum | Product):
        K1, g1 = _evaluate(kernel.k1, inp, eval_gradient)
        K2, g2 = _evaluate(kernel.k2, inp, eval_gradient)
        if isinstance(kernel, Sum):
            grads = g1 + g2
            # K1 / K2 may be modified in place unless a gradient is the same object
            owned = lambda A: not any(g is A for g in grads)
            return _add(K1, K2, inp, owned), grads
        return _mul(K1, K2, inp), [_mul(g, K2, inp) for g in g1] + [_mul(K1, g, inp) for g in g2]
    if isinstance(kernel, Exponentiation):
        K, g = _evaluate(kernel.kernel, inp, eval_gradient)
        p = float(kernel.exponent)
        return _pow(K, p), [_mul(_mul(p, _pow(K, p - 1.0), inp), gi, inp) for gi in g]
    if isinstance(kernel, ConstantKernel):
        c = float(kernel.constant_value)
        return c, ([c] if eval_gradient and _free(kernel, "constant_value") else [])
    if isinstance(kernel, WhiteKernel):
        K = _Diag(kernel.noise_level) if inp.same else 0.0
        return K, ([K] if eval_gradient and _free(kernel, "noise_level") else [])
    return _stationary(kernel, inp, eval_gradient)


def kernel_matrix(kernel, X, Y=None, *, like, eval_gradient=False):
    """``kernel(X, Y)`` as an array of ``like``'s library, dtype and device.

    Parameters
    ----------
    kernel : a scikit-learn kernel; computed in the namespace when :func:`supports` is
        True, else by scikit-learn (numpy, float64) and moved.
    X : (n, d) numpy inputs; Y : (m, d) or None (then K(X, X)).
    like : an array whose namespace, dtype and device the result takes.
    eval_gradient : also return dK / dlog theta, a list of (n, n) arrays in the order
        of ``kernel.theta`` (only with ``Y=None``, as scikit-learn).

    Returns
    -------
    K : (n, m); with ``eval_gradient``, (K, [dK_j]).
    """
    xp = aa.namespace(like)
    if eval_gradient and Y is not None:
        raise ValueError("the gradient is only available for Y=None (as scikit-learn)")
    if not supports(kernel):
        if eval_gradient:
            K, G = kernel(np.asarray(X, dtype=float), eval_gradient=True)
            return aa.from_numpy(xp, K, like), [aa.from_numpy(xp, G[:, :, j], like)
                                                for j in range(G.shape[2])]  # fmt: skip
        return aa.from_numpy(xp, kernel(np.asarray(X, dtype=float), Y), like)
    inp = _Inputs(xp, X, Y, like)
    K, grads = _evaluate(kernel, inp, eval_gradient)
    K = _materialise(K, inp)
    return (K, [_materialise(g, inp) for g in grads]) if eval_gradient else K


def kernel_diag(kernel, X, *, like):
    """``kernel.diag(X)`` (n,) in ``like``'s namespace (scikit-learn's, moved: O(n d))."""
    return aa.from_numpy(aa.namespace(like), kernel.diag(np.asarray(X, dtype=float)), like)


# --------------------------------------------------- cross-covariance blocks on the device
# Inputs already on the device (the minibatch rows X (k, d) and the inducing inputs Z
# (m, d)): k(X, Z), and the contraction of its derivatives with a weight matrix W (k, m)
# in the log hyperparameters and in Z, the array-API counterpart of
# robustep.kernels.inducing.rows_gradient (docs/derivations/sparse.md, eqs. S14, S15).
# For the RBF, with Xs = X / l, Zs = Z / l, K = exp(-|xs - zs|^2 / 2) and HW = K o W:
#   <W, dK/dlog l>   = sum(HW o D2) (isotropic), or per dimension k (ARD)
#                      sum_ij HW_ij (xs_ik - zs_jk)^2
#                      = rowsum(HW) . Xs_k^2 - 2 (Zs o HW^T Xs)_k + colsum(HW) . Zs_k^2,
#   <W, dK/dZ>_j     = (HW^T Xs - colsum(HW)_j Zs_j) / l.
# ConstantKernel c: <W, dK/dlog c> = c sum(W); WhiteKernel s: s I on k(Z, Z) only;
# products by the product rule, sums term by term.


def supports_block(kernel) -> bool:
    """True when :func:`kernel_block` and :func:`kernel_block_gradient` handle ``kernel``:
    RBF (isotropic or ARD), ConstantKernel, WhiteKernel, and sums and products of them
    (exactly these classes: a subclass may change the formulas)."""
    t = type(kernel)
    if t in (Sum, Product):
        return supports_block(kernel.k1) and supports_block(kernel.k2)
    return t in (RBF, ConstantKernel, WhiteKernel)


def _check_block(kernel):
    if not supports_block(kernel):
        raise NotImplementedError(
            f"the array path has the kernel {type(kernel).__name__} neither as a block nor "
            "as a gradient (supported: RBF, ConstantKernel, WhiteKernel, their sums and "
            "products); use the numpy path (device=None)"
        )


class _Pair:
    """Rows X (k, d) and Z (m, d) on one device, with the RBF terms cached per kernel;
    ``same``: X is Z (the block k(Z, Z), where WhiteKernel adds its diagonal)."""

    def __init__(self, xp, X, Z, same):
        self.xp, self.X, self.Z, self.same = xp, X, Z, same
        self._rbf = {}

    def rbf(self, kernel):
        """(ls (d,) floats, Xs, Zs, D2, K) of an RBF factor."""
        key = id(kernel)
        if key not in self._rbf:
            xp = self.xp
            d = int(self.X.shape[1])
            ls = np.broadcast_to(np.asarray(kernel.length_scale, dtype=float), (d,))
            ls_dev = aa.from_numpy(xp, ls, self.X)
            Xs = self.X / ls_dev
            Zs = Xs if self.same else self.Z / ls_dev
            x2 = xp.sum(Xs * Xs, axis=1)
            z2 = x2 if self.same else xp.sum(Zs * Zs, axis=1)
            D2 = aa.clip_below(xp, x2[:, None] + z2[None, :] - 2.0 * (Xs @ Zs.T), 0.0)
            if self.same:
                D2 = aa.fill_diagonal(xp, (D2 + D2.T) * 0.5, 0.0)
            self._rbf[key] = (ls, Xs, Zs, D2, xp.exp(-0.5 * D2))
        return self._rbf[key]


def _block_value(kernel, pair):
    """k(X, Z): an array (k, m), a float (constant) or a _Diag (white noise on k(Z, Z))."""
    t = type(kernel)
    if t in (Sum, Product):
        K1, K2 = _block_value(kernel.k1, pair), _block_value(kernel.k2, pair)
        owned = lambda A: False  # noqa: E731 - the cached RBF values are shared
        if t is Sum:
            return _add(K1, K2, _PairInputs(pair), owned)
        return _mul(K1, K2, _PairInputs(pair))
    if t is ConstantKernel:
        return float(kernel.constant_value)
    if t is WhiteKernel:
        return _Diag(kernel.noise_level) if pair.same else 0.0
    return pair.rbf(kernel)[4]


class _PairInputs:
    """What _add / _mul / _materialise read of an input set, for a _Pair."""

    def __init__(self, pair):
        self.xp, self.like = pair.xp, pair.X
        self.n, self.m = int(pair.X.shape[0]), int(pair.Z.shape[0])

    def full(self, value):
        return self.xp.full((self.n, self.m), float(value), dtype=self.like.dtype,
                            device=aa.device(self.like))  # fmt: skip


def _weighted(W, K, inp):
    """W o K for a weight array W and a kernel value K (array, float or _Diag)."""
    if isinstance(K, float):
        return K * W
    return W * _materialise(K, inp)


def _block_contract(kernel, pair, W, wrt_Z):
    """([<W, dK/dlog theta_j>] in theta order (floats), <W, d k(X, Z)/dZ> (m, d) or None)."""
    xp = pair.xp
    t = type(kernel)
    if t is Sum:
        p1 = _block_contract(kernel.k1, pair, W, wrt_Z)
        p2 = _block_contract(kernel.k2, pair, W, wrt_Z)
        return p1[0] + p2[0], _add_none(p1[1], p2[1])
    if t is Product:
        inp = _PairInputs(pair)
        K1, K2 = _block_value(kernel.k1, pair), _block_value(kernel.k2, pair)
        p1 = _block_contract(kernel.k1, pair, _weighted(W, K2, inp), wrt_Z)
        p2 = _block_contract(kernel.k2, pair, _weighted(W, K1, inp), wrt_Z)
        return p1[0] + p2[0], _add_none(p1[1], p2[1])
    if t is ConstantKernel:
        if kernel.hyperparameter_constant_value.fixed:
            return [], None
        return [float(kernel.constant_value) * float(xp.sum(W))], None
    if t is WhiteKernel:
        if kernel.hyperparameter_noise_level.fixed:
            return [], None
        trace = float(xp.sum(aa.diagonal(xp, W))) if pair.same else 0.0
        return [float(kernel.noise_level) * trace], None
    ls, Xs, Zs, D2, K = pair.rbf(kernel)
    HW = K * W
    theta, g_Z = [], None
    anisotropic = np.iterable(kernel.length_scale) and len(kernel.length_scale) > 1
    want_ls = not kernel.hyperparameter_length_scale.fixed
    if wrt_Z or (want_ls and anisotropic):
        P = HW.T @ Xs  # (m, d)
        col = xp.sum(HW, axis=0)
        ls_dev = aa.from_numpy(xp, ls, pair.X)
        if wrt_Z:
            g_Z = (P - col[:, None] * Zs) / ls_dev
    if want_ls:
        if anisotropic:
            row = xp.sum(HW, axis=1)
            g = row @ (Xs * Xs) - 2.0 * xp.sum(Zs * P, axis=0) + col @ (Zs * Zs)
            theta.extend(float(v) for v in aa.to_numpy(g))
        else:
            theta.append(float(xp.sum(HW * D2)))
    return theta, g_Z


def _add_none(a, b):
    if a is None:
        return b
    return a if b is None else a + b


def kernel_block(kernel, X, Z=None):
    """``kernel(X, Z)`` (k, m) for X (k, d) and Z (m, d) arrays on one device; Z=None:
    ``kernel(X)`` (k, k) (WhiteKernel adds its diagonal only there, as scikit-learn)."""
    _check_block(kernel)
    xp = aa.namespace(X)
    pair = _Pair(xp, X, X if Z is None else Z, Z is None)
    K = _block_value(kernel, pair)
    return _materialise(K, _PairInputs(pair))


def kernel_block_gradient(kernel, X, Z, W, *, wrt_Z=True):
    """Contractions of the derivatives of ``kernel(X, Z)`` with W (k, m), on the device.

    Parameters
    ----------
    kernel : a kernel of :func:`supports_block`.
    X : (k, d) rows; Z : (m, d), or None for the block ``kernel(X)`` itself (then W must be
        symmetric, and the Z-gradient is that of ``kernel(X)`` in X through both arguments).
    W : (k, m) weights.
    wrt_Z : also return the gradient in Z.

    Returns
    -------
    g_theta : (p,) numpy float64, ``<W, dK/dlog theta_j>`` in the order of
        ``kernel.theta``.
    g_Z : (m, d) array of X's namespace, ``<W, dK/dZ>``, or None (``wrt_Z=False``).
    """
    _check_block(kernel)
    xp = aa.namespace(X)
    same = Z is None
    pair = _Pair(xp, X, X if same else Z, same)
    theta, g_Z = _block_contract(kernel, pair, W, wrt_Z)
    g_theta = np.asarray(theta, dtype=float)
    if g_theta.shape != kernel.theta.shape:  # pragma: no cover - a layout this path lacks
        raise RuntimeError(
            f"array kernel gradient has {g_theta.size} entries for a kernel with "
            f"{kernel.theta.size} hyperparameters ({kernel}); please report this"
        )
    if wrt_Z:
        if g_Z is None:
            g_Z = xp.zeros(Z.shape if not same else X.shape, dtype=X.dtype, device=aa.device(X))
        elif same:
            g_Z = 2.0 * g_Z  # both arguments of a symmetric contraction
    return g_theta, g_Z
