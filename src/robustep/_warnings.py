"""Warnings that point at the user's code.

Python attributes a warning to the frame ``stacklevel`` levels up; inside a library the
right level depends on how deep the call chain is (a decorator, a helper, a core), so a
fixed ``stacklevel`` points at robustep's own files as soon as the chain changes.
:func:`warn` walks out of the robustep package and attributes the warning to the first
frame outside it: the line of the user's code that called robustep.
"""

from __future__ import annotations

import os
import sys
import warnings

__all__ = ["warn", "user_stacklevel"]

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def user_stacklevel() -> int:
    """The ``stacklevel`` that a ``warnings.warn`` call made by this function's caller
    needs to point at the first frame outside the robustep package."""
    frame = sys._getframe(1)  # the caller of this function: level 1 of its warn call
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
        level += 1
    return level


def warn(message, category=UserWarning) -> None:
    """``warnings.warn(message, category)`` attributed to the user's calling line."""
    warnings.warn(message, category, stacklevel=user_stacklevel())
