"""Find and import the built-in experiment modules so that each registers its experiment.

Every module of :mod:`robustep.experiments` other than the machinery listed in
``_NON_EXPERIMENT_MODULES`` (and private ones) is an experiment module that calls
:func:`robustep.experiments.base.register` on import.  The modules are found on disk and
imported by name, so this module imports none of them statically.
"""

from __future__ import annotations

import importlib
import pkgutil
import traceback
from pathlib import Path

_PACKAGE = __name__.rpartition(".")[0]
_PACKAGE_DIR = str(Path(__file__).resolve().parent)

_NON_EXPERIMENT_MODULES = {"base", "discovery", "parallel", "plotting", "report", "runner"}

#: Experiment modules that raised on import: module name -> formatted traceback.
_IMPORT_ERRORS: dict[str, str] = {}


def _load_builtin() -> None:
    """Import every experiment module of the package so that it can register its experiment.

    A module that raises on import does not stop the others: its traceback is
    kept (see :func:`import_errors`) and the runner reports it as a failure.
    """
    for info in pkgutil.iter_modules([_PACKAGE_DIR]):
        if info.name not in _NON_EXPERIMENT_MODULES and not info.name.startswith("_"):
            try:
                importlib.import_module(f"{_PACKAGE}.{info.name}")
            except Exception:
                _IMPORT_ERRORS[info.name] = traceback.format_exc()
            else:
                _IMPORT_ERRORS.pop(info.name, None)


def import_errors() -> dict[str, str]:
    """Experiment modules that failed to import (module name -> traceback)."""
    _load_builtin()
    return dict(_IMPORT_ERRORS)
