"""Run the independent units of an experiment (splits, repetitions, folds) in parallel.

``robustep reproduce ... --jobs N`` sets the number of worker processes for the
duration of the run; experiments call :func:`parallel_map` on their units and get
the results back in order.  With one job (the default) it is a plain loop in this
process, so tests and quick runs behave exactly as before.

Workers are joblib's ``loky`` processes (joblib ships with scikit-learn), each
limited to one BLAS thread so that N workers use N cores.  Warnings raised inside
a worker are collected there and re-emitted in the parent, so the report's
"warnings during the run" section is the same with and without ``--jobs``.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any

__all__ = ["n_jobs", "use_jobs", "parallel_map", "unit_seed"]

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


def _call_collecting_warnings(func: Callable, item: Any) -> tuple[Any, list[tuple[type, str]]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = func(item)
    return result, [(w.category, str(w.message)) for w in caught]


def parallel_map(func: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
    """``[func(item) for item in items]``, over :func:`n_jobs` processes when > 1.

    ``func`` must be picklable (a module-level function or a ``functools.partial``
    of one) when more than one job is used.  Results keep the order of ``items``.
    An exception in a worker is raised here, as in the serial loop.
    """
    items = list(items)
    jobs = min(n_jobs(), len(items))
    if jobs <= 1:
        return [func(item) for item in items]
    from joblib import Parallel, delayed, parallel_config

    with parallel_config(backend="loky", inner_max_num_threads=1):
        pairs = Parallel(n_jobs=jobs)(
            delayed(_call_collecting_warnings)(func, item) for item in items
        )
    results = []
    for result, caught in pairs:
        for category, message in caught:
            warnings.warn(message, category, stacklevel=2)
        results.append(result)
    return results
