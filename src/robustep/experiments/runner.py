"""Running registered experiments and writing their reports.

For each experiment the runner calls ``run(config, seed)``, saves the raw
results as ``OUT/NAME/results.json``, calls ``report(results, OUT/NAME)`` and
writes ``OUT/NAME/README.md`` and ``OUT/NAME/run.json``; at the end it rebuilds
``OUT/index.html`` and ``OUT/README.md`` (see :mod:`robustep.experiments.report`).

Outcomes:

* ``ok`` — results and summary written;
* ``no-data`` — the experiment raised
  :class:`robustep.datasets.DataUnavailableError`; listed under "Lacked data";
* ``failed`` — any other exception (in ``run`` or ``report``); the traceback is
  saved in ``OUT/NAME/traceback.txt`` and the remaining experiments still run.

Warnings raised during an experiment are collected (not printed): the console
line gives their number and the experiment's README lists them.

Exit status policy (used by the CLI): a reproduction that finishes exits 0
even if experiments failed or lacked data — failures are listed prominently at
the top of the index and in the final console line — so that ``make demo``
always produces a report.  Pass ``strict=True`` (``--strict``) to exit 1 when
an experiment failed (lacking data never makes the exit status non-zero).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from robustep.datasets import DataUnavailableError
from robustep.experiments.base import Experiment, ExperimentSummary, registered
from robustep.experiments.parallel import use_jobs
from robustep.experiments.report import (
    STATUS_FAILED,
    STATUS_NO_DATA,
    STATUS_OK,
    _plural,
    agreement_label,
    dump_json,
    write_experiment_readme,
    write_index,
)

__all__ = [
    "MODES",
    "RunRecord",
    "UnknownExperimentError",
    "progress",
    "reproduce",
    "resolve",
    "run_experiment",
]

T = TypeVar("T")

#: Configuration names an experiment declares.
MODES = ("quick", "full")


class UnknownExperimentError(KeyError):
    """A requested experiment name is not registered."""

    def __init__(self, unknown: Sequence[str], valid: Sequence[str]):
        self.unknown = list(unknown)
        self.valid = list(valid)
        names = ", ".join(repr(n) for n in self.unknown)
        choices = ", ".join(self.valid) if self.valid else "(none registered)"
        super().__init__(f"unknown experiment {names}; valid names: {choices}, or 'all'")

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


@dataclasses.dataclass
class RunRecord:
    """Outcome of one experiment run (also written to ``OUT/NAME/run.json``)."""

    name: str
    status: str  # "ok", "no-data" or "failed"
    wall_time: float
    out_dir: Path
    summary: ExperimentSummary | None = None
    error: str = ""
    error_type: str = ""
    warnings: list[dict] = dataclasses.field(default_factory=list)


def progress(
    iterable: Iterable[T], desc: str = "", total: int | None = None, *, disable: bool = False
) -> Iterator[T]:
    """Progress display for long loops inside experiments.

    Uses ``tqdm`` (dev extra) when installed, else prints ``desc: i/total`` to
    stderr about ten times over the loop (every item if ``total`` is unknown
    and the loop is short).  ``disable=True`` shows nothing.
    """
    if disable:
        yield from iterable
        return
    if total is None:
        try:
            total = len(iterable)  # type: ignore[arg-type]
        except TypeError:
            total = None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        tqdm = None
    if tqdm is not None:
        yield from tqdm(iterable, desc=desc, total=total, leave=False, file=sys.stderr)
        return
    step = max(1, (total or 10) // 10)
    start = time.perf_counter()
    i = 0
    for i, item in enumerate(iterable, 1):
        yield item
        if i % step == 0 or (total is not None and i == total):
            of = f"/{total}" if total is not None else ""
            elapsed = time.perf_counter() - start
            print(f"  {desc}: {i}{of} ({elapsed:.1f} s)", file=sys.stderr, flush=True)


def resolve(names: Sequence[str]) -> list[Experiment]:
    """Experiments for ``names`` (``"all"`` = every registered one), in the order given.

    Raises
    ------
    UnknownExperimentError
        If a name is not registered (the message lists the valid names).
    """
    reg = registered()
    if not names:
        raise ValueError("no experiment named; give one or more names, or 'all'")
    unknown = [n for n in names if n not in reg and n != "all"]
    if unknown:
        raise UnknownExperimentError(unknown, list(reg))
    if "all" in names:
        return list(reg.values())
    seen: dict[str, Experiment] = {}
    for n in names:
        seen.setdefault(n, reg[n])
    return list(seen.values())


def _version() -> str:
    try:
        from robustep import __version__

        return __version__
    except ImportError:  # pragma: no cover
        return "unknown"


def _close_figures() -> None:
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is not None:
        plt.close("all")


def _configuration(experiment: Experiment, mode: str, overrides: dict) -> dict:
    """The mode's configuration with ``overrides`` applied; unknown keys raise ValueError."""
    config = dict(getattr(experiment, mode))
    unknown = sorted(set(overrides) - set(config))
    if unknown:
        raise ValueError(
            f"{experiment.name} has no configuration entries {unknown}; "
            f"its {mode} configuration has: {sorted(config)}"
        )
    config.update(overrides)
    return config


def run_experiment(
    experiment: Experiment,
    out: str | Path,
    *,
    mode: str = "quick",
    seed: int = 0,
    jobs: int = 1,
    overrides: dict[str, Any] | None = None,
) -> RunRecord:
    """Run one experiment into ``out/NAME`` and write its files (not the index).

    ``jobs`` worker processes run the experiment's independent units
    (:mod:`robustep.experiments.parallel`); ``overrides`` replaces entries of the
    mode's configuration (unknown keys raise ``ValueError``); both are recorded in
    ``run.json``.  Never raises for errors of the experiment itself: they are
    recorded in the returned :class:`RunRecord` (status ``"no-data"`` or ``"failed"``).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    overrides = dict(overrides or {})
    config = _configuration(experiment, mode, overrides)
    out_dir = Path(out) / experiment.name
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in ("traceback.txt", "results.json"):
        (out_dir / stale).unlink(missing_ok=True)
    start = time.perf_counter()
    record = RunRecord(experiment.name, STATUS_OK, 0.0, out_dir)
    with warnings.catch_warnings(record=True) as caught, use_jobs(jobs) as used_jobs:
        warnings.simplefilter("always")
        _run_and_report(experiment, config, seed, out_dir, record)
    record.warnings = _summarise_warnings(caught)
    record.wall_time = time.perf_counter() - start
    meta: dict[str, Any] = {
        "name": experiment.name,
        "paper": experiment.paper,
        "source": experiment.source,
        "claim": experiment.claim,
        "status": record.status,
        "mode": mode,
        "seed": int(seed),
        "jobs": used_jobs,
        "overrides": overrides,
        "config": config,
        "wall_time": record.wall_time,
        "finished": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "version": _version(),
        "summary": dataclasses.asdict(record.summary) if record.summary else None,
        "error": record.error,
        "error_type": record.error_type,
        "warnings": record.warnings,
    }
    try:
        dump_json(meta, out_dir / "run.json")
    except (TypeError, ValueError) as exc:  # e.g. a config value JSON cannot hold
        meta["config"] = {k: repr(v) for k, v in config.items()}
        meta["config_error"] = str(exc)
        dump_json(meta, out_dir / "run.json")
    write_experiment_readme(meta, out_dir)
    return record


def _run_and_report(
    experiment: Experiment, config: dict, seed: int, out_dir: Path, record: RunRecord
) -> None:
    """Call ``run`` and ``report``; record the outcome in ``record`` (never raises)."""
    try:
        results = experiment.run(dict(config), int(seed))
        if not isinstance(results, dict):
            raise TypeError(
                f"{experiment.name}: run() must return a dict of raw results, "
                f"got {type(results).__name__}"
            )
        dump_json(results, out_dir / "results.json")
        summary = experiment.report(results, out_dir)
        if not isinstance(summary, ExperimentSummary):
            raise TypeError(
                f"{experiment.name}: report() must return an ExperimentSummary, "
                f"got {type(summary).__name__}"
            )
        record.summary = summary
    except DataUnavailableError as exc:
        record.status, record.error, record.error_type = STATUS_NO_DATA, str(exc), "DataUnavailable"
    except Exception as exc:  # one broken experiment must not stop the others
        record.status = STATUS_FAILED
        record.error = str(exc) or repr(exc)
        record.error_type = type(exc).__name__
        (out_dir / "traceback.txt").write_text(traceback.format_exc(), encoding="utf-8")
    finally:
        _close_figures()


def _summarise_warnings(caught: list, limit: int = 20) -> list[dict]:
    """Distinct warnings (category, message, count), most frequent first, at most ``limit``."""
    counts: dict[tuple[str, str], int] = {}
    for w in caught:
        key = (w.category.__name__, str(w.message))
        counts[key] = counts.get(key, 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])[:limit]
    return [{"category": c, "message": m, "count": n} for (c, m), n in ranked]


def reproduce(
    names: Sequence[str],
    out: str | Path = "report",
    *,
    mode: str = "quick",
    seed: int = 0,
    jobs: int = 1,
    overrides: dict[str, Any] | None = None,
    log: Callable[[str], Any] | None = print,
) -> list[RunRecord]:
    """Run the named experiments (or ``["all"]``) into ``out`` and rebuild the index.

    ``jobs`` and ``overrides`` are passed to :func:`run_experiment` (overrides need
    exactly one experiment, since configuration keys differ between experiments).

    ``log`` receives one line per experiment (status and elapsed time) and a
    final summary line; pass ``None`` for silence.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    experiments = resolve(names)
    if overrides and len(experiments) != 1:
        raise ValueError("configuration overrides (--set) apply to exactly one experiment")
    if overrides:  # fail before any work if a key is unknown
        _configuration(experiments[0], mode, overrides)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    say = log or (lambda _msg: None)
    records = []
    total_start = time.perf_counter()
    width = max((len(e.name) for e in experiments), default=0)
    try:
        for i, exp in enumerate(experiments, 1):
            rec = run_experiment(exp, out, mode=mode, seed=seed, jobs=jobs, overrides=overrides)
            records.append(rec)
            if rec.status == STATUS_OK:
                what = f"agrees: {agreement_label(rec.summary.agrees)}"
            elif rec.status == STATUS_NO_DATA:
                what = "LACKED DATA"
            else:
                what = f"FAILED ({rec.error_type}: {_first_line(rec.error)})"
            n_warn = sum(w["count"] for w in rec.warnings)
            if n_warn:
                what += f", {n_warn} warning{'s' if n_warn != 1 else ''} (see its README)"
            say(
                f"[{i}/{len(experiments)}] {exp.name:<{width}}  {rec.wall_time:7.1f} s  "
                f"{what}  (elapsed {time.perf_counter() - total_start:.1f} s)"
            )
        if "all" in names:
            from robustep.experiments import import_errors

            for module, tb in sorted(import_errors().items()):
                records.append(_record_import_error(module, tb, out, mode=mode, seed=seed))
                say(f"[import] {module}: FAILED to import ({_first_line(tb.splitlines()[-1])})")
    finally:  # also on Ctrl-C: the index lists what has finished
        write_index(out)
    n_fail = sum(r.status == STATUS_FAILED for r in records)
    n_nodata = sum(r.status == STATUS_NO_DATA for r in records)
    line = (
        f"{_plural(len(records))} in {time.perf_counter() - total_start:.1f} s: "
        f"{len(records) - n_fail - n_nodata} ok, {n_nodata} lacked data, {n_fail} failed. "
        f"Report: {out / 'index.html'}"
    )
    if n_fail:
        failed = ", ".join(r.name for r in records if r.status == STATUS_FAILED)
        line += f"\nFAILED: {failed} (tracebacks in {out}/<name>/traceback.txt)"
    say(line)
    return records


def _record_import_error(module: str, tb: str, out: Path, *, mode: str, seed: int) -> RunRecord:
    """Write the files of an experiment module that could not be imported."""
    out_dir = out / module
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "traceback.txt").write_text(tb, encoding="utf-8")
    last = tb.strip().splitlines()[-1] if tb.strip() else "import failed"
    error_type, _, message = last.partition(": ")
    meta = {
        "name": module,
        "paper": "(module robustep.experiments." + module + " failed to import)",
        "source": "",
        "claim": "",
        "status": STATUS_FAILED,
        "mode": mode,
        "seed": int(seed),
        "config": {},
        "wall_time": 0.0,
        "finished": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "version": _version(),
        "summary": None,
        "error": "import failed: " + (message or last),
        "error_type": error_type or "ImportError",
    }
    dump_json(meta, out_dir / "run.json")
    write_experiment_readme(meta, out_dir)
    return RunRecord(module, STATUS_FAILED, 0.0, out_dir, None, meta["error"], meta["error_type"])


def _first_line(text: str) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first[:120] + ("…" if len(first) > 120 else "")


def rerender(names: Sequence[str], out: str | Path = "report") -> list[str]:
    """Rebuild the reports of finished runs in ``out`` from their saved ``results.json``.

    No computation is repeated: each experiment's ``report`` is called on the saved raw
    results, and its ``run.json``, README and the index are rewritten (the configuration,
    timings and warnings of the original run are kept). Returns the names re-rendered.
    """
    out = Path(out)
    done = []
    for exp in resolve(names):
        out_dir = out / exp.name
        results_file, meta_file = out_dir / "results.json", out_dir / "run.json"
        if not (results_file.exists() and meta_file.exists()):
            raise FileNotFoundError(
                f"{out_dir} has no results.json/run.json to re-render; run "
                f"'robustep reproduce {exp.name} --out {out}' first"
            )
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
        results = json.loads(results_file.read_text(encoding="utf-8"))
        summary = exp.report(results, out_dir)
        _close_figures()
        meta["summary"] = dataclasses.asdict(summary)
        meta["rerendered"] = _dt.datetime.now().astimezone().isoformat(timespec="seconds")
        dump_json(meta, meta_file)
        write_experiment_readme(meta, out_dir)
        done.append(exp.name)
    write_index(out)
    return done
