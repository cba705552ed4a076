"""Deprecated alias of :mod:`robustep.ep.pseudo_point`.

Power EP on the pseudo-point posterior (Bui, Yan & Turner 2017) lives in
:mod:`robustep.ep.pseudo_point`; import it from there.  This module re-exports every name
of that module and warns on import.
"""

import warnings

from robustep.ep import pseudo_point as _module

globals().update({k: v for k, v in vars(_module).items() if not k.startswith("__")})
__all__ = list(_module.__all__)

warnings.warn(
    "robustep.ep.sparse_power is deprecated; import from robustep.ep.pseudo_point",
    DeprecationWarning,
    stacklevel=2,
)
