"""Deprecated alias of :mod:`robustep.kernels.gradient`.

K(theta) and dK/dlog theta on fixed training inputs (``KernelWithGradient``,
``RBFKernelGradient``, ``contract_kernel_gradient``, ...) live in
:mod:`robustep.kernels.gradient`; import them from there.
"""

import warnings

from robustep.kernels.gradient import (  # noqa: F401
    KernelWithGradient,
    RBFKernelGradient,
    __all__,
    as_kernel_gradient,
    contract_kernel_gradient,
    kernel_gradient_matvec,
    rbf_kernel_matrix,
)

warnings.warn(
    "robustep.kernel_gradient is deprecated; import from robustep.kernels.gradient",
    DeprecationWarning,
    stacklevel=2,
)
