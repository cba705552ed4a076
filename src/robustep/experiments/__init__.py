"""Registered reproductions of the papers' experiments (see :mod:`robustep.experiments.base`)."""

from __future__ import annotations

import importlib
import pkgutil
import traceback

from robustep.experiments.base import Experiment, ExperimentSummary, register, registered
from robustep.experiments.report import markdown_table
from robustep.experiments.runner import progress, reproduce, run_experiment

__all__ = [
    "Experiment",
    "ExperimentSummary",
    "import_errors",
    "markdown_table",
    "progress",
    "register",
    "registered",
    "reproduce",
    "run_experiment",
]

_NON_EXPERIMENT_MODULES = {"base", "report", "runner", "plotting"}


#: Experiment modules that raised on import: module name -> formatted traceback.
_IMPORT_ERRORS: dict[str, str] = {}


def _load_builtin() -> None:
    """Import every module in this package so that it can register its experiment.

    A module that raises on import does not stop the others: its traceback is
    kept (see :func:`import_errors`) and the runner reports it as a failure.
    """
    for info in pkgutil.iter_modules(__path__):
        if info.name not in _NON_EXPERIMENT_MODULES and not info.name.startswith("_"):
            try:
                importlib.import_module(f"{__name__}.{info.name}")
            except Exception:
                _IMPORT_ERRORS[info.name] = traceback.format_exc()
            else:
                _IMPORT_ERRORS.pop(info.name, None)


def import_errors() -> dict[str, str]:
    """Experiment modules that failed to import (module name -> traceback)."""
    _load_builtin()
    return dict(_IMPORT_ERRORS)
