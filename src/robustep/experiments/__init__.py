"""Registered reproductions of the papers' experiments (see :mod:`robustep.experiments.base`)."""

from __future__ import annotations

import importlib
import pkgutil

from robustep.experiments.base import Experiment, ExperimentSummary, register, registered

__all__ = ["Experiment", "ExperimentSummary", "register", "registered"]

_NON_EXPERIMENT_MODULES = {"base", "report", "runner", "plotting"}


def _load_builtin() -> None:
    """Import every module in this package so that it can register its experiment."""
    for info in pkgutil.iter_modules(__path__):
        if info.name not in _NON_EXPERIMENT_MODULES and not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")
