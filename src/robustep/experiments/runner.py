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
line gives their number, the experiment's README lists them, and the last
console line sums them up over the run.

Nothing finished is lost: an experiment's files are replaced only when its new run
has finished (or failed), so an interrupt (Ctrl-C) leaves the previous report of
that experiment and every experiment finished before it in place, and the index
is rebuilt.  While an experiment runs, each finished unit of its
:func:`~robustep.experiments.parallel.parallel_map` is saved in ``OUT/NAME/units/``
(removed once the experiment has finished); ``resume=True`` (``--resume``) skips
experiments whose ``run.json`` shows a finished run with the same mode, seed and
configuration, and reuses the saved units of the others.

On a terminal one status line shows the experiment (k of N), its elapsed time,
its units done / total with the estimated time left, and the total elapsed time.

With ``jobs`` > 1, a quick run of several experiments runs ``jobs`` whole experiments
side by side in forked worker processes (each experiment's units in its worker);
otherwise one experiment runs at a time, its units in ``jobs`` processes.

Exit status policy (used by the CLI): a reproduction that finishes exits 0
even if experiments failed or lacked data — failures are listed prominently at
the top of the index and in the final console line — so that ``make demo``
always produces a report.  Pass ``strict=True`` (``--strict``) to exit 1 when
an experiment failed (lacking data never makes the exit status non-zero).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime as _dt
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from robustep.datasets import DataUnavailableError
from robustep.experiments import discovery
from robustep.experiments.base import Experiment, ExperimentSummary, registered
from robustep.experiments.parallel import (
    UnitProgress,
    _check_jobs,
    notify_progress,
    save_units,
    use_jobs,
)
from robustep.experiments.report import (
    QUICK_MODE_NOTE,
    STATUS_FAILED,
    STATUS_NO_DATA,
    STATUS_OK,
    NumpyJSONEncoder,
    _plural,
    agreement_label,
    dump_json,
    write_experiment_readme,
    write_index,
)

__all__ = [
    "MODES",
    "RunRecord",
    "ReportFolderError",
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


class ReportFolderError(ValueError):
    """The report folder cannot be created or written to."""


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
    """Progress of a long loop inside an experiment.

    Under the runner the loop's count feeds the run's single status line (items
    done / total, estimated time left); elsewhere a line ``desc: i/total (t s)`` is
    printed on stderr about ten times over the loop.  ``disable=True`` shows nothing.
    """
    if disable:
        yield from iterable
        return
    if total is None:
        try:
            total = len(iterable)  # type: ignore[arg-type]
        except TypeError:
            total = None
    start = time.perf_counter()
    under_runner = total is not None and notify_progress(0, total, start)
    step = max(1, (total or 10) // 10)
    for i, item in enumerate(iterable, 1):
        yield item
        if under_runner:
            notify_progress(i, total, start)
        elif i % step == 0 or (total is not None and i == total):
            of = f"/{total}" if total is not None else ""
            elapsed = time.perf_counter() - start
            print(f"  {desc}: {i}{of} ({elapsed:.1f} s)", file=sys.stderr, flush=True)


def _clock(seconds: float) -> str:
    """``75.2`` -> ``"1:15"``; ``3725`` -> ``"1:02:05"``."""
    seconds = int(round(max(seconds, 0.0)))
    h, rest = divmod(seconds, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


class _Display:
    """The run's single progress display.

    On a terminal (``live``) one status line on ``stream`` is redrawn every second
    and whenever a unit finishes::

        [3/12] rep-toy  0:14  units 5/20, ~0:42 left  | total 1:37

    Elsewhere (a log file, a pipe) a plain line is written at most every 30 s while
    units finish, so long runs still show that they move.
    """

    def __init__(self, n: int, *, live: bool | None = None, stream=None):
        self.stream = stream if stream is not None else sys.stderr
        if live is None:
            isatty = getattr(self.stream, "isatty", None)
            live = bool(isatty and isatty()) and os.environ.get("TERM") != "dumb"
        self.live = live
        self.n = n
        self.k = 0
        self.name = ""
        self.started = time.perf_counter()
        self.exp_started = self.started
        self.units: UnitProgress | None = None
        self.side_by_side: dict[str, float] = {}
        self.last_plain = self.started
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self.live:
            self._thread = threading.Thread(target=self._tick, daemon=True)
            self._thread.start()

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            self._draw()

    def _status(self) -> str:
        now = time.perf_counter()
        if self.side_by_side:
            parts = ", ".join(f"{n} {_clock(now - t)}" for n, t in self.side_by_side.items())
            return (
                f"[{self.k}/{self.n} done] running: {parts}  | total {_clock(now - self.started)}"
            )
        text = f"[{self.k}/{self.n}] {self.name}  {_clock(now - self.exp_started)}"
        u = self.units
        if u is not None and u.total:
            text += f"  units {u.done}/{u.total}"
            left = u.remaining_seconds()
            if left is not None and u.done < u.total:
                text += f", ~{_clock(left)} left"
            if u.loaded:
                text += f" ({u.loaded} resumed)"
        return text + f"  | total {_clock(now - self.started)}"

    def _draw(self) -> None:
        with self._lock:
            if not self.name:
                return
            width = shutil.get_terminal_size((100, 20)).columns - 1
            self.stream.write("\r" + self._status()[:width] + "\033[K")
            self.stream.flush()

    def _clear(self) -> None:
        if self.live:
            with self._lock:
                self.stream.write("\r\033[K")
                self.stream.flush()

    def running(self, started: dict[str, float]) -> None:
        """Experiments that run side by side now (name -> start time)."""
        with self._lock:
            self.side_by_side = dict(started)
            self.name = ", ".join(started) or ""
        if self.live:
            self._draw()

    def finished(self, name: str, still_to_finish: list[str]) -> None:
        """One of the side-by-side experiments has finished; the next ones start."""
        self._clear()
        now = time.perf_counter()
        with self._lock:
            self.k += 1
            running = {n: t for n, t in self.side_by_side.items() if n != name}
            for n in still_to_finish:
                if len(running) >= max(len(self.side_by_side), 1):
                    break
                running.setdefault(n, now)
            self.side_by_side = running
            self.name = ", ".join(running)

    def begin(self, k: int, name: str) -> None:
        self.k, self.name, self.units = k, name, None
        self.exp_started = self.last_plain = time.perf_counter()
        if self.live:
            self._draw()

    def on_units(self, units: UnitProgress) -> None:
        self.units = units
        if self.live:
            self._draw()
        elif time.perf_counter() - self.last_plain >= 30.0 and units.done < units.total:
            self.last_plain = time.perf_counter()
            print(self._status(), file=self.stream, flush=True)

    def end(self) -> None:
        """Clear the status line before the experiment's result line is printed."""
        self._clear()
        with self._lock:
            self.name, self.units = "", None

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        self.end()


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
    resume: bool = False,
    on_units: Callable[[UnitProgress], Any] | None = None,
) -> RunRecord:
    """Run one experiment into ``out/NAME`` and write its files (not the index).

    ``jobs`` worker processes run the experiment's independent units
    (:mod:`robustep.experiments.parallel`); ``overrides`` replaces entries of the
    mode's configuration (unknown keys raise ``ValueError``); both are recorded in
    ``run.json``.  Never raises for errors of the experiment itself: they are
    recorded in the returned :class:`RunRecord` (status ``"no-data"`` or ``"failed"``).

    Finished units are saved in ``out/NAME/units/`` as they finish; ``resume=True``
    reuses the ones saved by an earlier, interrupted or failed run (without it they
    are deleted first).  ``on_units`` receives the units' progress.  The files of an
    earlier run of this experiment are replaced only once this run has finished, so
    a ``KeyboardInterrupt`` (which propagates) leaves them intact.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    overrides = dict(overrides or {})
    config = _configuration(experiment, mode, overrides)
    out_dir = Path(out) / experiment.name
    out_dir.mkdir(parents=True, exist_ok=True)
    units_dir = out_dir / "units"
    if not resume:
        shutil.rmtree(units_dir, ignore_errors=True)
    start = time.perf_counter()
    record = RunRecord(experiment.name, STATUS_OK, 0.0, out_dir)
    with (
        warnings.catch_warnings(record=True) as caught,
        use_jobs(jobs) as used_jobs,
        save_units(units_dir, on_units),
    ):
        warnings.simplefilter("always")
        _run_and_report(experiment, config, seed, out_dir, record)
    if record.status != STATUS_FAILED:  # a failed run keeps its units for --resume
        shutil.rmtree(units_dir, ignore_errors=True)
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
        _dump_json_atomic(meta, out_dir / "run.json")
    except (TypeError, ValueError) as exc:  # e.g. a config value JSON cannot hold
        meta["config"] = {k: repr(v) for k, v in config.items()}
        meta["config_error"] = str(exc)
        _dump_json_atomic(meta, out_dir / "run.json")
    write_experiment_readme(meta, out_dir)
    return record


def _run_and_report(
    experiment: Experiment, config: dict, seed: int, out_dir: Path, record: RunRecord
) -> None:
    """Call ``run`` and ``report``; record the outcome in ``record``.

    Never raises, except ``KeyboardInterrupt`` (and other non-``Exception`` exits),
    which leave the experiment's earlier files untouched.
    """
    results_file, traceback_file = out_dir / "results.json", out_dir / "traceback.txt"
    written = False
    try:
        results = experiment.run(dict(config), int(seed))
        if not isinstance(results, dict):
            raise TypeError(
                f"{experiment.name}: run() must return a dict of raw results, "
                f"got {type(results).__name__}"
            )
        _dump_json_atomic(results, results_file)
        written = True
        traceback_file.unlink(missing_ok=True)
        summary = experiment.report(results, out_dir)
        if not isinstance(summary, ExperimentSummary):
            raise TypeError(
                f"{experiment.name}: report() must return an ExperimentSummary, "
                f"got {type(summary).__name__}"
            )
        record.summary = summary
    except DataUnavailableError as exc:
        record.status, record.error, record.error_type = STATUS_NO_DATA, str(exc), "DataUnavailable"
        traceback_file.unlink(missing_ok=True)
        results_file.unlink(missing_ok=True)  # an earlier run's results describe another run
    except Exception as exc:  # one broken experiment must not stop the others
        if not written:
            results_file.unlink(missing_ok=True)
        record.status = STATUS_FAILED
        record.error = str(exc) or repr(exc)
        record.error_type = type(exc).__name__
        traceback_file.write_text(traceback.format_exc(), encoding="utf-8")
    finally:
        _close_figures()


def _dump_json_atomic(obj: Any, path: Path) -> None:
    """:func:`dump_json` into a temporary file, then rename: never a half-written file."""
    tmp = path.with_name("." + path.name + ".tmp")
    try:
        dump_json(obj, tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _summarise_warnings(caught: list, limit: int = 20) -> list[dict]:
    """Distinct warnings (category, message, count), most frequent first, at most ``limit``."""
    counts: dict[tuple[str, str], int] = {}
    for w in caught:
        key = (w.category.__name__, str(w.message))
        counts[key] = counts.get(key, 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])[:limit]
    return [{"category": c, "message": m, "count": n} for (c, m), n in ranked]


def _check_out(out: Path) -> None:
    """Create the report folder and make sure files can be written in it."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=out, prefix=".write-test-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ReportFolderError(
            f"cannot write the report folder {str(out)!r} ({reason}); choose another with --out DIR"
        ) from None


def _finished_earlier(exp: Experiment, out: Path, mode: str, seed: int, config: dict):
    """The record of a finished run of ``exp`` in ``out`` with this mode, seed and
    configuration (for ``resume``), else None."""
    try:
        meta = json.loads((out / exp.name / "run.json").read_text(encoding="utf-8"))
        same_config = json.loads(json.dumps(config, cls=NumpyJSONEncoder)) == meta.get("config")
        if not (
            meta.get("status") == STATUS_OK
            and meta.get("mode") == mode
            and meta.get("seed") == seed
            and same_config
            and (out / exp.name / "results.json").is_file()
        ):
            return None
        summary = ExperimentSummary(**meta["summary"])
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return RunRecord(
        exp.name,
        STATUS_OK,
        float(meta.get("wall_time", 0.0)),
        out / exp.name,
        summary,
        warnings=list(meta.get("warnings") or []),
    )


def reproduce(
    names: Sequence[str],
    out: str | Path = "report",
    *,
    mode: str = "quick",
    seed: int = 0,
    jobs: int = 1,
    overrides: dict[str, Any] | None = None,
    resume: bool = False,
    log: Callable[[str], Any] | None = print,
    live: bool | None = None,
) -> list[RunRecord]:
    """Run the named experiments (or ``["all"]``) into ``out`` and rebuild the index.

    ``jobs`` and ``overrides`` are passed to :func:`run_experiment` (overrides need
    exactly one experiment, since configuration keys differ between experiments).
    Arguments are checked before anything runs: an unknown name raises
    :class:`UnknownExperimentError`, bad ``mode``/``jobs``/``seed``/``overrides``
    raise ``ValueError``, and a folder that cannot be written
    :class:`ReportFolderError`.

    ``resume=True`` continues an interrupted run in the same ``out``: experiments
    that finished with this mode, seed and configuration are not run again, and
    the others reuse the units saved in ``out/NAME/units/``.

    ``log`` receives one line per experiment (status, elapsed time, warnings), a
    final summary line and a line summing up the warnings; pass ``None`` for
    silence.  ``live`` shows the status line on stderr (default: when stderr is a
    terminal).  A ``KeyboardInterrupt`` propagates after the index is rebuilt;
    the experiments finished before it keep their reports.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    _check_jobs(jobs)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise ValueError(f"seed must be a whole number in [0, 2**32), got {seed!r}")
    experiments = resolve(names)
    if overrides and len(experiments) != 1:
        raise ValueError("configuration overrides (--set) apply to exactly one experiment")
    if overrides:  # fail before any work if a key is unknown
        _configuration(experiments[0], mode, overrides)
    out = Path(out)
    _check_out(out)
    say = log or (lambda _msg: None)
    records = []
    total_start = time.perf_counter()
    width = max((len(e.name) for e in experiments), default=0)
    n_exp = len(experiments)
    todo: list[tuple[int, Experiment]] = []
    done: dict[int, tuple[RunRecord, bool]] = {}
    for i, exp in enumerate(experiments, 1):
        rec = None
        if resume:
            rec = _finished_earlier(
                exp, out, mode, seed, _configuration(exp, mode, dict(overrides or {}))
            )
        if rec is None:
            todo.append((i, exp))
        else:
            done[i] = (rec, True)
            say(_result_line(rec, i, n_exp, width, total_start, True))
    workers = _experiment_workers(jobs, mode, len(todo))
    pool = _start_pool(workers) if workers > 1 else None
    display = _Display(n_exp, live=live if log is not None else False)
    try:
        if pool is not None:  # quick runs: whole experiments side by side, one core each
            futures = {}
            for i, exp in todo:
                fut = pool.submit(
                    _run_experiment_by_name, exp.name, out, mode, seed, overrides, resume
                )
                futures[fut] = (i, exp)
            display.running({exp.name: time.perf_counter() for _, exp in todo[:workers]})
            pending = set(futures)
            while pending:
                finished, pending = concurrent.futures.wait(
                    pending, return_when=concurrent.futures.FIRST_COMPLETED
                )
                for fut in finished:
                    i, exp = futures[fut]
                    rec = fut.result()
                    done[i] = (rec, False)
                    queued = sorted(pending, key=lambda f: futures[f][0])
                    display.finished(exp.name, [futures[f][1].name for f in queued])
                    say(_result_line(rec, len(done), n_exp, width, total_start, False))
        else:
            for i, exp in todo:
                display.begin(i, exp.name)
                try:
                    rec = run_experiment(
                        exp,
                        out,
                        mode=mode,
                        seed=seed,
                        jobs=jobs,
                        overrides=overrides,
                        resume=resume,
                        on_units=display.on_units,
                    )
                finally:
                    display.end()
                done[i] = (rec, False)
                say(_result_line(rec, i, n_exp, width, total_start, False))
        records.extend(done[i][0] for i in sorted(done))
        if "all" in names:
            for module, tb in sorted(discovery.import_errors().items()):
                records.append(_record_import_error(module, tb, out, mode=mode, seed=seed))
                say(f"[import] {module}: FAILED to import ({_first_line(tb.splitlines()[-1])})")
    except BaseException:
        if pool is not None:  # Ctrl-C: stop the experiments still running, now
            for process in list(getattr(pool, "_processes", {}).values()):
                process.terminate()
        raise
    finally:  # also on Ctrl-C: the index lists what has finished
        display.close()
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        write_index(out)
    n_fail = sum(r.status == STATUS_FAILED for r in records)
    n_nodata = sum(r.status == STATUS_NO_DATA for r in records)
    line = (
        f"{_plural(len(records))} in {time.perf_counter() - total_start:.1f} s: "
        f"{len(records) - n_fail - n_nodata} ok, {n_nodata} lacked data, {n_fail} failed. "
        f"Report: {out / 'index.html'}"
    )
    if mode == "quick":
        line += "\n" + QUICK_MODE_NOTE
    if n_fail:
        failed = ", ".join(r.name for r in records if r.status == STATUS_FAILED)
        line += f"\nFAILED: {failed} (tracebacks in {out}/<name>/traceback.txt)"
    say(line)
    say(warnings_line(records))
    return records


def _experiment_workers(jobs: int, mode: str, n_todo: int) -> int:
    """Processes that run whole experiments side by side (1: one experiment at a time).

    Quick runs are many short experiments, several of them serial: with ``jobs`` > 1
    they run ``jobs`` experiments at a time, each on one core (forked workers, so the
    registry is the parent's).  Full runs are long, with many units each: they run one
    experiment at a time and its units in ``jobs`` processes.  The results are the same
    either way (every unit's random state comes from the seed and its index).
    """
    import multiprocessing

    jobs = _check_jobs(jobs)
    if mode != "quick" or jobs <= 1 or n_todo <= 1:
        return 1
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return min(jobs, n_todo)


def _start_pool(workers: int) -> concurrent.futures.ProcessPoolExecutor:
    """A pool of forked workers, all started now (before any thread of the display)."""
    import multiprocessing

    pool = concurrent.futures.ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("fork"),
        initializer=_ignore_sigint,  # Ctrl-C reaches the parent, which stops the workers
    )
    list(pool.map(_noop, range(workers)))  # fork every worker now
    return pool


def _noop(x: int) -> int:
    return x


def _ignore_sigint() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _run_experiment_by_name(
    name: str, out: Path, mode: str, seed: int, overrides: dict | None, resume: bool
) -> RunRecord:
    """Run one experiment in a worker process (its units serially, in this process)."""
    from robustep.experiments.base import _REGISTRY

    return run_experiment(
        _REGISTRY[name], out, mode=mode, seed=seed, jobs=1, overrides=overrides, resume=resume
    )


def _result_line(
    rec: RunRecord, i: int, n: int, width: int, total_start: float, resumed: bool
) -> str:
    """The console line of one finished experiment."""
    if rec.status == STATUS_OK:
        what = f"agrees: {agreement_label(rec.summary.agrees if rec.summary else None)}"
    elif rec.status == STATUS_NO_DATA:
        what = f"LACKED DATA ({_first_line(rec.error)})"
    else:
        what = f"FAILED ({rec.error_type}: {_first_line(rec.error)})"
    n_warn = sum(w["count"] for w in rec.warnings)
    if n_warn:
        what += f", {n_warn} warning{'s' if n_warn != 1 else ''} (see its README)"
    if resumed:
        what += ", finished earlier (--resume)"
    return (
        f"[{i}/{n}] {rec.name:<{width}}  {rec.wall_time:7.1f} s  {what}  "
        f"(elapsed {time.perf_counter() - total_start:.1f} s)"
    )


def warnings_line(records: Sequence[RunRecord]) -> str:
    """One line summing up the warnings of a run: total, and per experiment and category."""
    per_exp = []
    categories: dict[str, int] = {}
    for r in records:
        n = sum(w["count"] for w in r.warnings)
        if n:
            per_exp.append(f"{r.name} {n}")
        for w in r.warnings:
            categories[w["category"]] = categories.get(w["category"], 0) + w["count"]
    if not per_exp:
        return "Warnings: none."
    total = sum(categories.values())
    cats = ", ".join(f"{n} {c}" for c, n in sorted(categories.items(), key=lambda kv: -kv[1]))
    return (
        f"Warnings: {total} in {_plural(len(per_exp))} ({', '.join(per_exp)}; {cats}); "
        "each experiment's README lists them."
    )


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
