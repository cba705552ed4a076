"""What an experiment is, and the registry that lists them.

An experiment module builds one :class:`Experiment` and passes it to
:func:`register`.  The runner calls ``run(config, seed)`` to get raw,
JSON-serialisable results, then ``report(results, out_dir)`` to write figures
into ``out_dir`` and return an :class:`ExperimentSummary` (tables as Markdown,
figure file names, the measured result in one sentence and whether it agrees
with the paper's claim).

An experiment that needs a data set that is not available raises
:class:`robustep.datasets.DataUnavailableError`; the report lists it as
"lacked data" instead of failing the whole run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from robustep.experiments import discovery


@dataclasses.dataclass
class ExperimentSummary:
    """What the report shows for one experiment.

    measured : one or two sentences with our numbers.
    agrees : True / False / None (None = partly or cannot tell; say why in ``measured``).
    tables : Markdown tables (strings).
    figures : file names (relative to the experiment's out_dir) of PNG figures.
    notes : differences from the paper's set-up and why.
    captions : one-line caption per figure file name (shown under the figure in the report).
    key_number : the one number (with its name and threshold) that decides ``agrees``,
        e.g. ``"MCMC R-hat 1.74 > 1.1: reference not converged"``; shown in the report's
        index beside the verdict.  Empty: the index shows the start of ``measured``.
    """

    measured: str
    agrees: bool | None
    tables: list[str] = dataclasses.field(default_factory=list)
    figures: list[str] = dataclasses.field(default_factory=list)
    notes: str = ""
    captions: dict[str, str] = dataclasses.field(default_factory=dict)
    key_number: str = ""


@dataclasses.dataclass(frozen=True)
class Experiment:
    """A registered reproduction of one figure/table of a paper.

    name : CLI name, e.g. ``"rep-toy"``.
    paper : short citation, e.g. ``"Qi & Guo (2012), long version"``.
    source : the figure/table/section reproduced, e.g. ``"Fig. 1"``.
    claim : the paper's claim in one sentence.
    quick, full : configurations (dicts passed to ``run``); quick takes seconds to a minute.
    run : ``run(config: dict, seed: int) -> dict`` raw JSON-serialisable results.
    report : ``report(results: dict, out_dir: Path) -> ExperimentSummary``.
    """

    name: str
    paper: str
    source: str
    claim: str
    quick: dict[str, Any]
    full: dict[str, Any]
    run: Callable[[dict, int], dict]
    report: Callable[[dict, Path], ExperimentSummary]


_REGISTRY: dict[str, Experiment] = {}


def register(experiment: Experiment) -> Experiment:
    """Add an experiment to the registry (names must be unique)."""
    if experiment.name in _REGISTRY and _REGISTRY[experiment.name] is not experiment:
        raise ValueError(f"an experiment named {experiment.name!r} is already registered")
    _REGISTRY[experiment.name] = experiment
    return experiment


def registered() -> dict[str, Experiment]:
    """All registered experiments, importing the built-in experiment modules first."""
    discovery._load_builtin()
    return dict(sorted(_REGISTRY.items()))
