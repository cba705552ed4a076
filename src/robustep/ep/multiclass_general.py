"""Deprecated alias of :mod:`robustep.ep.multiclass_label_noise`.

The robust nested EP with general c x c site blocks for the label-noise multinomial probit
lives in :mod:`robustep.ep.multiclass_label_noise`; import it from there.  This module
re-exports every name of that module and warns on import.
"""

import warnings

from robustep.ep import multiclass_label_noise as _module

globals().update({k: v for k, v in vars(_module).items() if not k.startswith("__")})
__all__ = list(_module.__all__)

warnings.warn(
    "robustep.ep.multiclass_general is deprecated; import from robustep.ep.multiclass_label_noise",
    DeprecationWarning,
    stacklevel=2,
)
