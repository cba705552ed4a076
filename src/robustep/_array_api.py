"""Small dispatch layer over the Python array API (numpy, array-api-strict, PyTorch, CuPy).

The array backends of the dense posterior (:mod:`robustep.posterior.backend`) and the
device kernels (:mod:`robustep.kernels.array`) are written against the standard
(https://data-apis.org/array-api/) through ``array_api_compat.array_namespace``.  The
standard lacks a few operations that dense EP needs in O(n^3); this module provides
them with a fast path per library and a standard fallback:

=====================  =========================================  ===========================
operation              fast path                                  fallback (standard only)
=====================  =========================================  ===========================
``cholesky``           numpy: LAPACK dpotrf; torch: cholesky_ex    ``xp.linalg.cholesky``
                       (no exception, ``info`` read once)
failure detection      LAPACK/torch ``info``; any library: a       exception, or a non-finite /
                       non-finite or non-positive diagonal         non-positive diagonal
``solve_triangular``   scipy / torch.linalg / cupyx.scipy.linalg   ``xp.linalg.solve``
``triangular_inverse`` LAPACK dtrtri / triangular solve with I     ``xp.linalg.inv``
``add_diagonal``       in-place on the diagonal view (numpy,        ``A + c * eye``
                       torch)
=====================  =========================================  ===========================

``array_api_compat`` is imported lazily: the default install (numpy, scipy,
scikit-learn) never needs it.  Install it with ``pip install robustep[torch]`` (or
``[cupy]``, or the ``test`` extra).
"""

from __future__ import annotations

import numpy as np

_EXTRA_ADVICE = "install it with `pip install robustep[torch]` (or robustep[cupy])"


def compat():
    """The ``array_api_compat`` module, or ImportError saying how to install it."""
    try:
        import array_api_compat
    except ImportError as exc:  # pragma: no cover - the test extra installs it
        raise ImportError(
            f"array backends need the package array-api-compat; {_EXTRA_ADVICE}"
        ) from exc
    return array_api_compat


def is_numpy_array(x) -> bool:
    """True for numpy arrays (and numpy scalars), which take the dense numpy path."""
    return isinstance(x, np.ndarray | np.generic)


def is_foreign_array(x) -> bool:
    """True for an array of another array-API library (torch, CuPy, array-api-strict, ...).

    Decided without importing those libraries: a numpy array, a list or a scalar is not
    foreign; an object with ``__array_namespace__`` is, and so is a torch tensor (whose
    namespace is provided by ``array_api_compat``).
    """
    if is_numpy_array(x) or isinstance(x, list | tuple | int | float):
        return False
    if hasattr(x, "__array_namespace__"):
        return True
    module = type(x).__module__ or ""
    return module.split(".")[0] in ("torch", "cupy", "jax", "jaxlib")


def namespace(*arrays):
    """``array_api_compat.array_namespace`` of the arrays (numpy -> array_api_compat.numpy)."""
    return compat().array_namespace(*arrays)


def device(x):
    """Device of an array-API array."""
    return compat().device(x)


def _kind(xp) -> str:
    c = compat()
    if c.is_numpy_namespace(xp):
        return "numpy"
    if c.is_torch_namespace(xp):
        return "torch"
    if c.is_cupy_namespace(xp):
        return "cupy"
    if c.is_jax_namespace(xp):
        return "jax"
    return "other"


def to_numpy(x, dtype=np.float64) -> np.ndarray:
    """Copy an array of any supported library (on any device) into a numpy array."""
    if is_numpy_array(x):
        return np.asarray(x, dtype=dtype)
    module = (type(x).__module__ or "").split(".")[0]
    if module == "torch":
        return x.detach().cpu().numpy().astype(dtype, copy=False)
    if module == "cupy":
        return x.get().astype(dtype, copy=False)
    try:
        return np.asarray(np.from_dlpack(x), dtype=dtype)
    except (TypeError, RuntimeError, BufferError, AttributeError):
        return np.asarray(x, dtype=dtype)


def from_numpy(xp, a, like):
    """``a`` (numpy or scalar) as an array of ``xp`` with ``like``'s dtype and device."""
    # a private writable copy: torch refuses to share read-only numpy memory
    return xp.asarray(np.array(a, dtype=np.float64), dtype=like.dtype, device=device(like))


def eye(xp, n, like):
    return xp.eye(n, dtype=like.dtype, device=device(like))


def add_diagonal(xp, A, value):
    """``A + value * I`` for a square matrix; in place when the library allows it (A is
    then returned, so pass only a matrix this code owns)."""
    kind = _kind(xp)
    if kind == "numpy":
        A[np.diag_indices_from(A)] += value
        return A
    if kind == "torch":
        A.diagonal().add_(value)
        return A
    return A + value * eye(xp, A.shape[0], A)


def fill_diagonal(xp, A, value):
    """A with its diagonal set to ``value``; in place for numpy and torch (A is returned)."""
    kind = _kind(xp)
    if kind == "numpy":
        np.fill_diagonal(A, value)
        return A
    if kind == "torch":
        A.diagonal().fill_(value)
        return A
    n = A.shape[0]
    mask = xp.astype(eye(xp, n, A), xp.bool)
    return xp.where(mask, xp.asarray(value, dtype=A.dtype, device=device(A)), A)


def clip_below(xp, A, low):
    """max(A, low) elementwise; in place for numpy and torch (A is returned)."""
    kind = _kind(xp)
    if kind == "numpy":
        return np.maximum(A, low, out=A)
    if kind == "torch":
        return A.clamp_(min=low)
    return xp.clip(A, low, None)


def diagonal(xp, A):
    """Main diagonal of a square matrix, shape (n,)."""
    return xp.linalg.diagonal(A) if hasattr(xp, "linalg") else xp.diagonal(A)


def cholesky(xp, A):
    """Lower Cholesky factor of a symmetric matrix, or None when it is not positive definite.

    Failure is detected per library: LAPACK's / torch's ``info`` (no exception on the
    fast paths), an exception of the fallback, and for every library a non-finite or
    non-positive diagonal of the result (CuPy, by default, returns NaN instead of
    raising).
    """
    kind = _kind(xp)
    if kind == "numpy":
        from scipy.linalg import lapack

        L, info = lapack.dpotrf(A, lower=1, clean=True) if A.dtype == np.float64 else \
            lapack.spotrf(A, lower=1, clean=True)  # fmt: skip
        return L if info == 0 else None
    if kind == "torch":
        import torch

        L, info = torch.linalg.cholesky_ex(A, upper=False)
        if int(info) != 0:
            return None
    else:
        try:
            L = xp.linalg.cholesky(A, upper=False)
        except (np.linalg.LinAlgError, ValueError, RuntimeError):
            return None
    d = diagonal(xp, L)
    if not bool(xp.all(xp.isfinite(d))) or not bool(xp.all(d > 0)):
        return None
    return L


def solve_triangular(xp, L, B, *, trans=False):
    """Solve ``L X = B`` (or ``L^T X = B`` with ``trans``) for lower-triangular L.

    B is (n,) or (n, m).  Fast paths: scipy (numpy), torch.linalg, cupyx.scipy.linalg;
    otherwise the standard's general ``xp.linalg.solve`` (LU; O(n^3) even for one
    right-hand side, acceptable for the strict test namespace).
    """
    kind = _kind(xp)
    vector = B.ndim == 1
    if kind == "numpy":
        import scipy.linalg

        return scipy.linalg.solve_triangular(L, B, lower=True, trans=int(trans),
                                             check_finite=False)  # fmt: skip
    if kind == "cupy":
        import cupyx.scipy.linalg

        return cupyx.scipy.linalg.solve_triangular(L, B, lower=True, trans=int(trans))
    B2 = xp.reshape(B, (B.shape[0], 1)) if vector else B
    if kind == "torch":
        import torch

        X = torch.linalg.solve_triangular(L.mT if trans else L, B2, upper=bool(trans))
    elif kind == "jax":  # pragma: no cover - not installed in the tests
        import jax.scipy.linalg

        X = jax.scipy.linalg.solve_triangular(L, B2, lower=True, trans=int(trans))
    else:
        X = xp.linalg.solve(L.mT if trans else L, B2)
    return xp.reshape(X, (B.shape[0],)) if vector else X


def cho_solve(xp, L, B):
    """Solve ``L L^T X = B``; B is (n,) or (n, m)."""
    return solve_triangular(xp, L, solve_triangular(xp, L, B), trans=True)


def triangular_inverse(xp, L):
    """Inverse of a lower-triangular matrix, shape (n, n) (n^3/3 flops with LAPACK dtrtri)."""
    kind = _kind(xp)
    if kind == "numpy":
        from robustep.linalg import triangular_inverse as dtrtri

        return dtrtri(L)
    if kind in ("torch", "cupy", "jax"):
        return solve_triangular(xp, L, eye(xp, L.shape[0], L))
    return xp.linalg.inv(L)


def column_sq_norms(xp, A):
    """sum_i A_ij^2 for every column j, shape (m,) (no (n, m) temporary on torch)."""
    if _kind(xp) == "torch":
        import torch

        return torch.linalg.vector_norm(A, dim=0) ** 2
    return xp.sum(A * A, axis=0)


_FLOAT_DTYPES = ("float64", "float32")


def torch_template(device, dtype="float64"):
    """An empty PyTorch tensor on ``device`` ("cpu", "cuda", "cuda:1", ...) with ``dtype``
    ("float64" or "float32"): the template fixing namespace, dtype and device.

    ImportError saying how to install PyTorch and array-api-compat when either is missing;
    ValueError for a dtype or device PyTorch cannot use.
    """
    try:
        import torch
    except ImportError as exc:
        raise ImportError(
            f"device={device!r} needs PyTorch (and array-api-compat); install them with "
            "`pip install robustep[torch]`, or use device=None (numpy)"
        ) from exc
    compat()
    if dtype not in _FLOAT_DTYPES:
        raise ValueError(f"dtype must be one of {_FLOAT_DTYPES}, got {dtype!r}")
    try:
        return torch.zeros(0, dtype=getattr(torch, dtype), device=torch.device(device))
    except (RuntimeError, AssertionError, ValueError) as exc:
        raise ValueError(
            f"device={device!r} is not usable by PyTorch ({exc}); pass 'cpu', 'cuda', "
            "'cuda:1', ... or None (numpy)"
        ) from exc
