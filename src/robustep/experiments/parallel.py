"""Run the independent units of an experiment (splits, repetitions, folds) in parallel.

``robustep reproduce ... --jobs N`` sets the number of worker processes for the
duration of the run; experiments call :func:`parallel_map` on their units and get
the results back in order.  With one job (the default) it is a plain loop in this
process, so tests and quick runs behave exactly as before.

Workers are joblib's ``loky`` processes (joblib ships with scikit-learn), each
limited to one BLAS thread so that N workers use N cores.  Warnings raised inside
a unit are collected and re-emitted in the parent, so the report's "warnings
during the run" section is the same with and without ``--jobs``.

Inside the runner (:func:`save_units`) every finished unit is also saved, as soon
as it finishes, to ``OUT/NAME/units/CALL-INDEX-HASH.pkl`` — ``CALL`` counts the
experiment's ``parallel_map`` calls, ``INDEX`` is the unit's position and ``HASH``
a digest of the unit function (with its bound configuration and seed), the unit
and the robustep version.  ``robustep reproduce ... --resume`` loads those files
instead of recomputing the units, so an interrupted run continues where it
stopped; a changed configuration, seed or version gives other hashes, and the
units are computed afresh.  The runner also passes a callback that shows
"units done / total" on the console.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import hashlib
import os
import pickle
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "UnitProgress",
    "n_jobs",
    "notify_progress",
    "parallel_map",
    "save_units",
    "unit_seed",
    "use_jobs",
]

_N_JOBS: contextvars.ContextVar[int] = contextvars.ContextVar("robustep_n_jobs", default=1)


def _check_jobs(jobs: int) -> int:
    if isinstance(jobs, bool) or not isinstance(jobs, int | float) or int(jobs) != jobs:
        raise ValueError(f"jobs must be a whole number, got {jobs!r}")
    jobs = int(jobs)
    if jobs == -1:
        return os.cpu_count() or 1
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1 (or -1 for all cores), got {jobs}")
    return jobs


def unit_seed(*keys) -> int:
    """A 32-bit seed derived from integer ``keys`` (e.g. seed, data set, split), the same
    whichever order or process the units run in."""
    import numpy as np

    return int(np.random.SeedSequence([int(k) for k in keys]).generate_state(1)[0])


def n_jobs() -> int:
    """Worker processes experiments may use now (1 unless inside :func:`use_jobs`)."""
    return _N_JOBS.get()


@contextlib.contextmanager
def use_jobs(jobs: int) -> Iterator[int]:
    """Within this block :func:`parallel_map` uses ``jobs`` processes (-1: all cores)."""
    token = _N_JOBS.set(_check_jobs(jobs))
    try:
        yield _N_JOBS.get()
    finally:
        _N_JOBS.reset(token)


@dataclasses.dataclass(frozen=True)
class UnitProgress:
    """State of one :func:`parallel_map` call, passed to the runner's callback.

    done : units finished (including ``loaded``); total : units in this call;
    loaded : units read back from ``units/`` (``--resume``) instead of computed;
    started : ``time.perf_counter()`` when the call began computing;
    work_done, work_total, work_loaded : the same in the units' relative costs when the
    experiment passed ``weights`` to :func:`parallel_map` (None otherwise).
    """

    done: int
    total: int
    loaded: int
    started: float
    work_done: float | None = None
    work_total: float | None = None
    work_loaded: float | None = None

    def remaining_seconds(self) -> float | None:
        """Estimated seconds left for this call (None before the first computed unit).

        Elapsed time per unit of work computed so far, times the work left: in units, or
        in the relative costs when known (units of very different sizes, dispatched
        longest first, would otherwise make the estimate far too long)."""
        if self.done >= self.total:
            return 0.0
        computed = self.done - self.loaded
        if computed <= 0:
            return None
        elapsed = time.perf_counter() - self.started
        if self.work_total is not None:
            work = self.work_done - self.work_loaded
            if work > 0:
                return elapsed / work * (self.work_total - self.work_done)
        return elapsed / computed * (self.total - self.done)


@dataclasses.dataclass
class _Store:
    directory: Path | None
    on_progress: Callable[[UnitProgress], Any] | None
    calls: int = 0


_STORE: contextvars.ContextVar[_Store | None] = contextvars.ContextVar(
    "robustep_unit_store", default=None
)


@contextlib.contextmanager
def save_units(
    directory: str | Path | None, on_progress: Callable[[UnitProgress], Any] | None = None
) -> Iterator[None]:
    """Within this block :func:`parallel_map` saves each finished unit into ``directory``
    and reuses units already saved there (``None``: save nothing, only report progress);
    ``on_progress(UnitProgress)`` is called as units finish."""
    store = _Store(Path(directory) if directory is not None else None, on_progress)
    token = _STORE.set(store)
    try:
        yield
    finally:
        _STORE.reset(token)


def notify_progress(done: int, total: int, started: float) -> bool:
    """Report a loop's progress to the runner's display (if it shows one); False when
    not under the runner."""
    store = _STORE.get()
    if store is None:
        return False
    if store.on_progress is not None:
        store.on_progress(UnitProgress(done, total, 0, started))
    return True


def _version() -> str:
    try:
        from robustep import __version__

        return str(__version__)
    except ImportError:  # pragma: no cover
        return "unknown"


def _unit_file(directory: Path, call: int, index: int, func: Callable, item: Any) -> Path | None:
    """File of one unit, or None when the unit cannot be pickled (it is then not saved)."""
    try:
        blob = pickle.dumps((_version(), func, item), protocol=4)
    except Exception:  # a local function or an unpicklable item: run it, do not save it
        return None
    digest = hashlib.sha256(blob).hexdigest()[:16]
    return directory / f"{call:02d}-{index:05d}-{digest}.pkl"


def _load(path: Path | None) -> tuple[bool, Any]:
    if path is None or not path.is_file():
        return False, None
    try:
        with path.open("rb") as fh:
            return True, pickle.load(fh)
    except Exception:  # a truncated or unreadable file: compute the unit again
        return False, None


def _save(path: Path, payload: Any) -> None:
    """Write atomically (temporary file, then rename), so an interrupt leaves no half file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".pkl")
    try:
        with os.fdopen(fd, "wb") as fh:
            pickle.dump(payload, fh, protocol=4)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _run_unit(
    func: Callable, item: Any, index: int, path: Path | None
) -> tuple[int, Any, list[tuple[type, str]]]:
    """Call ``func(item)`` collecting its warnings; save the outcome to ``path`` if given."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = func(item)
    collected = [(w.category, str(w.message)) for w in caught]
    if path is not None:
        try:
            _save(path, (result, collected))
        except (OSError, pickle.PicklingError, TypeError, AttributeError):
            pass  # saving is a convenience for --resume; the run goes on without it
    return index, result, collected


def parallel_map(
    func: Callable[[Any], Any], items: Iterable[Any], weights: Sequence[float] | None = None
) -> list[Any]:
    """``[func(item) for item in items]``, over :func:`n_jobs` processes when > 1.

    ``func`` must be picklable (a module-level function or a ``functools.partial``
    of one) when more than one job is used.  Results keep the order of ``items``.
    An exception in a unit is raised here, as in the serial loop (units finished
    before it stay saved when the runner saves units).  ``weights``: optional relative
    cost of each item (positive, finite), used only for the progress estimate.
    """
    items = list(items)
    if weights is not None:
        weights = [float(w) for w in weights]
        if len(weights) != len(items) or not all(0 < w < float("inf") for w in weights):
            raise ValueError(f"weights must be {len(items)} positive finite numbers, one per item")
    store = _STORE.get()
    call = 0
    if store is not None:
        call = store.calls
        store.calls += 1
    paths: list[Path | None] = [None] * len(items)
    if store is not None and store.directory is not None:
        paths = [_unit_file(store.directory, call, i, func, it) for i, it in enumerate(items)]
    results: list[Any] = [None] * len(items)
    todo = []
    for i, path in enumerate(paths):
        found, payload = _load(path)
        if found:
            results[i] = payload[0]
            for category, message in payload[1]:
                warnings.warn(message, category, stacklevel=2)
        else:
            todo.append(i)
    loaded = len(items) - len(todo)
    started = time.perf_counter()
    done = loaded
    work = None
    if weights is not None:
        work_loaded = sum(weights) - sum(weights[i] for i in todo)
        work = {"done": work_loaded, "total": sum(weights), "loaded": work_loaded}

    def tick() -> None:
        if store is not None and store.on_progress is not None:
            extra = {} if work is None else {
                "work_done": work["done"], "work_total": work["total"],
                "work_loaded": work["loaded"],
            }  # fmt: skip
            store.on_progress(UnitProgress(done, len(items), loaded, started, **extra))

    tick()
    jobs = min(n_jobs(), len(todo))
    if jobs <= 1:
        outcomes: Iterable = (_run_unit(func, items[i], i, paths[i]) for i in todo)
        ctx = contextlib.nullcontext()
    else:
        from joblib import Parallel, delayed, parallel_config

        ctx = parallel_config(backend="loky", inner_max_num_threads=1)
        outcomes = None  # built inside the context below
    with ctx:
        if outcomes is None:
            outcomes = Parallel(n_jobs=jobs, return_as="generator_unordered")(
                delayed(_run_unit)(func, items[i], i, paths[i]) for i in todo
            )
        for i, result, caught in outcomes:
            for category, message in caught:
                warnings.warn(message, category, stacklevel=2)
            results[i] = result
            done += 1
            if work is not None:
                work["done"] += weights[i]
            tick()
    return results
