"""Array backends of the stochastic learner (:mod:`robustep.ep.stochastic`).

The learner's per-step linear algebra is written once against a backend: ``xp`` (the
array namespace) for the elementwise and matrix work, and the methods below for what the
array API lacks or what numpy does through LAPACK / scipy.  Two backends:

* :class:`NumpyBackend` (the default): the calls numpy code makes, so results on numpy
  are those of the plain numpy implementation, bit for bit (scipy's ``cholesky`` /
  ``cho_solve`` / ``solve_triangular``, ``einsum`` row dot products, the kernel rows and
  derivatives of :mod:`robustep.kernels.inducing`);
* :class:`ArrayBackend`: any array-API library and device (PyTorch on a GPU,
  array-api-strict in the tests) through :mod:`robustep._array_api` and the device
  kernels of :mod:`robustep.kernels.array` (RBF, ConstantKernel, WhiteKernel, sums and
  products).

What stays on the host in both: the scikit-learn kernel object (its log hyperparameters,
a few floats per step), the targets, the per-point site vectors and the likelihood's
tilted moments.  The standard has no error function, so the probit's log Φ and the
Student-t's quadrature run in numpy (the library's validated rules): per step the
cavity means and variances of the minibatch travel to the host and the tilted moments
back, O(|B|) numbers against the O(|B| m² + m³) work on the device.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import cho_solve, cholesky, solve_triangular

from robustep import _array_api as aa
from robustep.kernels.inducing import (
    cross_covariance,
    inducing_gradient_mm,
    inducing_gradient_rows,
    theta_gradient_mm,
    theta_gradient_rows,
)

__all__ = ["ArrayBackend", "NumpyBackend", "backend_for"]


class NumpyBackend:
    """numpy and scipy, float64 (the default)."""

    xp = np
    name = "numpy"

    def asarray(self, a):
        """A host numpy array (float64) as an array of this backend."""
        return a

    def to_host(self, a, dtype=np.float64):
        return np.asarray(a, dtype=dtype)

    def zeros(self, shape):
        return np.zeros(shape)

    def eye(self, m):
        return np.eye(m)

    def copy(self, a):
        return a.copy()

    def concat(self, arrays):
        return np.concatenate(arrays)

    def cholesky(self, A):
        """Lower Cholesky factor; ``numpy.linalg.LinAlgError`` when A is not positive
        definite."""
        return cholesky(A, lower=True)

    def cho_inverse(self, L):
        return cho_solve((L, True), np.eye(L.shape[0]))

    def solve_lower(self, L, B):
        return solve_triangular(L, B, lower=True)

    def log_det(self, L):
        """log |L Lᵀ| of a Cholesky factor."""
        return 2.0 * np.sum(np.log(np.diag(L)))

    def rowdot(self, A, B):
        """Row-wise dot products (k,) of two (k, m) arrays."""
        return np.einsum("ij,ij->i", A, B)

    def outer(self, a, b):
        return np.outer(a, b)

    def count_false(self, mask):
        return int(np.sum(~mask))

    def kernel_mm(self, kernel, Z, jitter):
        return np.asarray(kernel(Z), dtype=float) + jitter * np.eye(Z.shape[0])

    def cross(self, kernel, X, Z):
        return cross_covariance(kernel, X, Z)

    def kernel_diag(self, kernel, X):
        return np.asarray(kernel.diag(X), dtype=float)

    def kernel_gradients(self, kernel, X, Z, W_mm, W_nm, w_diag):
        """(<W_mm, dK_mm> + <W_nm, dK_nm> + <w_diag, d diag K_nn> in log θ (p,) numpy,
        the same in Z (m, d))."""
        g_theta = theta_gradient_mm(kernel, Z, W_mm) + theta_gradient_rows(kernel, X, Z, W_nm,
                                                                            w_diag)  # fmt: skip
        g_Z = inducing_gradient_mm(kernel, Z, W_mm) + inducing_gradient_rows(kernel, X, Z, W_nm)
        return np.asarray(g_theta, dtype=float), g_Z


class ArrayBackend:
    """An array-API library on a device, fixed by a template array ``like`` (its
    namespace, dtype and device)."""

    name = "array"

    def __init__(self, like):
        self.like = like
        self.xp = aa.namespace(like)

    def asarray(self, a):
        return aa.from_numpy(self.xp, a, self.like)

    def to_host(self, a, dtype=np.float64):
        return aa.to_numpy(a, dtype=dtype)

    def zeros(self, shape):
        return self.xp.zeros(shape, dtype=self.like.dtype, device=aa.device(self.like))

    def eye(self, m):
        return aa.eye(self.xp, m, self.like)

    def copy(self, a):
        return self.xp.asarray(a, copy=True)

    def concat(self, arrays):
        return self.xp.concat(arrays)

    def cholesky(self, A):
        L = aa.cholesky(self.xp, A)
        if L is None:
            raise np.linalg.LinAlgError("matrix is not positive definite")
        return L

    def cho_inverse(self, L):
        return aa.cho_solve(self.xp, L, self.eye(L.shape[0]))

    def solve_lower(self, L, B):
        return aa.solve_triangular(self.xp, L, B)

    def log_det(self, L):
        xp = self.xp
        return 2.0 * float(xp.sum(xp.log(aa.diagonal(xp, L))))

    def rowdot(self, A, B):
        return self.xp.sum(A * B, axis=1)

    def outer(self, a, b):
        return a[:, None] * b[None, :]

    def count_false(self, mask):
        return int(np.sum(~aa.to_numpy(mask, dtype=bool)))

    def kernel_mm(self, kernel, Z, jitter):
        from robustep.kernels.array import kernel_block

        return aa.add_diagonal(self.xp, kernel_block(kernel, Z), jitter)

    def cross(self, kernel, X, Z):
        from robustep.kernels.array import kernel_block

        return kernel_block(kernel, X, Z)

    def kernel_diag(self, kernel, X):
        # the kernels of the array path are stationary: k(x, x) is one number
        value = float(kernel.diag(np.zeros((1, int(X.shape[1]))))[0])
        return self.xp.full((int(X.shape[0]),), value, dtype=X.dtype, device=aa.device(X))

    def kernel_gradients(self, kernel, X, Z, W_mm, W_nm, w_diag):
        from robustep.kernels.array import kernel_block_gradient

        t_mm, z_mm = kernel_block_gradient(kernel, Z, None, W_mm)
        t_nm, z_nm = kernel_block_gradient(kernel, X, Z, W_nm)
        g_theta = t_mm + t_nm
        if g_theta.size and int(X.shape[0]):
            # d k(x, x) / dlog θ is the same at every x (stationary), from scikit-learn
            _, G0 = kernel(np.zeros((1, int(X.shape[1]))), eval_gradient=True)
            g_theta = g_theta + float(self.xp.sum(w_diag)) * G0[0, 0, :]
        return g_theta, z_mm + z_nm


def check_array_kernel(kernel):
    """ValueError unless the array path has ``kernel``'s blocks and gradients."""
    from robustep.kernels.array import supports_block

    if not supports_block(kernel):
        raise ValueError(
            f"device= needs a kernel built from RBF, ConstantKernel and WhiteKernel (sums "
            f"and products), got {kernel}; use device=None (numpy) for other kernels"
        )


def backend_for(device, dtype="float64"):
    """The backend of ``device``: None -> numpy; a string -> PyTorch on that device
    ("cpu", "cuda", "cuda:1") with ``dtype``; an array -> its library, dtype and device
    (e.g. ``array_api_strict.zeros(0)``)."""
    if device is None:
        return NumpyBackend()
    if isinstance(device, str):
        return ArrayBackend(aa.torch_template(device, dtype))
    if not aa.is_foreign_array(device) and not aa.is_numpy_array(device):
        raise TypeError(
            f"device must be None, a PyTorch device string or a template array, got "
            f"{type(device).__name__}"
        )
    return ArrayBackend(device)
