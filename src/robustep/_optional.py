"""Optional dependencies: import them where they are needed, with a message that says how
to install them."""

from __future__ import annotations

import importlib
import importlib.util

__all__ = ["has_module", "require"]

#: extra of ``pip install robustep[EXTRA]`` that brings each optional module
_EXTRA = {"matplotlib": "experiments", "dask": "dask", "torch": "torch", "cupy": "cupy"}


def has_module(name: str) -> bool:
    """Whether the top-level module ``name`` can be imported (without importing it)."""
    return importlib.util.find_spec(name) is not None


def require(name: str, what: str):
    """Import and return module ``name``; ImportError naming the extra that installs it.

    what : what needs it, e.g. ``"robustep reproduce"``.
    """
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        top = name.split(".")[0]
        extra = _EXTRA.get(top)
        how = f"pip install 'robustep[{extra}]'" if extra else f"pip install {top}"
        raise ImportError(f"{what} needs {top}, which is not installed: {how}") from exc
