"""Re-export of :class:`robustep.kernel_gradient.KernelWithGradient` (its former home).

K(theta) and dK/dlog theta on fixed training inputs live in :mod:`robustep.kernel_gradient`
so that the baselines (fVB's EM) can use them without importing from the estimators.
"""

from __future__ import annotations

from robustep.kernel_gradient import KernelWithGradient

__all__ = ["KernelWithGradient"]
