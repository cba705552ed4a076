"""Registered reproductions of the papers' experiments (see :mod:`robustep.experiments.base`)."""

from __future__ import annotations

from robustep.experiments.base import Experiment, ExperimentSummary, register, registered
from robustep.experiments.discovery import import_errors
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
