"""Device support of the estimators: the kernel matrix, the fit and the evidence gradient
on a PyTorch device (``device="cpu"``, ``"cuda"``, ``"cuda:1"``), predictions back in numpy.

With ``device`` set, :class:`robustep.estimators.GPClassifier` (and, for its EP methods,
:class:`robustep.estimators.StudentTGPRegressor`) builds K on the device
(:mod:`robustep.kernels.array` for the stationary kernels; others by scikit-learn and
moved), runs EP on an :class:`robustep.posterior.ArrayPrior` (every O(n^2) / O(n^3)
operation on the device; the O(n) per-site work in numpy), and computes the evidence
gradient on the device:

    d log Z / d theta_j = sum_ik M_ik dK_j,ik,  M = 1/2 alpha alpha^T - 1/2 R,
    R = (K + T~^-1)^-1

(Seeger 2005; :func:`robustep.ep.log_Z_gradient`).  The functions take ``like`` (an
array fixing namespace, dtype and device) so that they also run on any array-API
library, e.g. array-api-strict in the tests.
"""

from __future__ import annotations

import numpy as np

from robustep import _array_api as aa


def torch_like(device, dtype="float64"):
    """An empty torch tensor on ``device`` with ``dtype``: the template of all arrays
    (:func:`robustep._array_api.torch_template`, with its install and device errors)."""
    return aa.torch_template(device, dtype)


def check_fit(estimator, y, methods=None):
    """What ``device`` supports (dense EP); returns the template array.

    ``methods``: the estimator's methods that run on a device (StudentTGPRegressor's EP
    methods); None: every method but "laplace" (GPClassifier).  More than two classes:
    one-vs-rest fits its binary classifiers on the device; the multinomial core runs in
    numpy (estimators/_multiclass.py does not use ``device``).
    """
    if methods is not None and estimator.method not in methods:
        listed = ", ".join(repr(m) for m in methods)
        raise ValueError(
            f"device is supported by the EP methods ({listed}); use one of them, or "
            f"device=None with method={estimator.method!r}"
        )
    if estimator.method == "laplace":
        raise ValueError("device is supported by the EP methods; use device=None with "
                         "method='laplace'")  # fmt: skip
    if getattr(estimator, "inducing_points", None) is not None:
        raise ValueError("device is supported by the dense model; use device=None with "
                         "inducing_points")  # fmt: skip
    return torch_like(estimator.device, estimator.dtype)


def prior(kernel, X, like, eval_gradient=False):
    """(ArrayPrior of K(X, X) on ``like``'s device, [dK_j] or None)."""
    from robustep.kernels.array import kernel_matrix
    from robustep.posterior import ArrayPrior

    if eval_gradient:
        K, grads = kernel_matrix(kernel, X, like=like, eval_gradient=True)
    else:
        K, grads = kernel_matrix(kernel, X, like=like), None
    return ArrayPrior(K, check=False), grads


def ep_gradient(result, grads):
    """Explicit EP evidence gradient (p,) numpy, from the device posterior and [dK_j]
    (:meth:`robustep.posterior.ArraySitePosterior.kernel_gradient_contraction`)."""
    return result.posterior.kernel_gradient_contraction(grads)


def predict_latent(kernel, X, X_train, result, like):
    """Latent predictive mean and variance (m,) numpy float64, computed on the device."""
    from robustep.kernels.array import kernel_matrix

    K_cross = kernel_matrix(kernel, X, X_train, like=like)
    k_diag = kernel.diag(np.asarray(X, dtype=float))
    mean, var = result.predict(K_cross, k_diag)
    return aa.to_numpy(mean), aa.to_numpy(var)
