"""Kernel matrices and their derivatives, below the posteriors and the estimators.

* :mod:`robustep.kernels.array`: stationary scikit-learn kernels and their gradients in
  any array-API namespace (the dense prior on a device);
* :mod:`robustep.kernels.gradient`: K(theta) and dK/dlog theta on fixed inputs as an
  operator (contractions and products without the (n, n, p) array);
* :mod:`robustep.kernels.inducing`: the inducing-point cross-covariances K(X, Z) and the
  derivatives of the FITC evidence in theta and Z.

Nothing here imports from robustep's posteriors, EP engines or estimators.
"""
