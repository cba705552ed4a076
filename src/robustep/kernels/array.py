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
