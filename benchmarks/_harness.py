"""What every maintained benchmark suite shares: timing, BLAS threads, the machine, results.

A suite is a script in ``benchmarks/`` with a ``main(argv)`` that prints its tables as
Markdown. Its ``__main__`` block hands ``main`` to :func:`run_suite`, which adds the common
command line and writes the printed tables, the command and the machine to a JSON file::

    python benchmarks/engine.py --quick      # reduced sizes, seconds to a minute or two
    python benchmarks/engine.py --full       # the configuration of the published numbers
    python benchmarks/engine.py --results F  # write the JSON to F instead
    python benchmarks/engine.py --no-results # print only

Where the results go: ``--full`` writes ``benchmarks/results/NAME.json`` (the files the
Performance page, docs/performance.md, renders its tables from); any other run writes
``benchmarks/results/local/NAME.json``, which git ignores.

The JSON format (also of the files marked ``"source": "docs"``, whose numbers were copied
from earlier measurements with their commands)::

    {"suite": NAME, "source": "run" | "docs", "date": ISO date, "command": str,
     "machine": {...}, "elapsed": {"wall_s": float, "cpu_s": float},
     "tables": [{"name": str, "columns": [str], "rows": [[str]],
                 optional "command", "date", "machine", "note"}],
     "output": the printed text (runs only)}

A table's own ``command``, ``date`` and ``machine`` override the file's.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import json
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
PACKAGES = ("robustep", "numpy", "scipy", "scikit-learn", "threadpoolctl", "dask", "torch")


# ---------------------------------------------------------------------------- timing
def measure(fn: Callable[[], object], repeat: int = 3) -> dict:
    """Call ``fn`` ``repeat`` times; wall-clock and process-CPU seconds, best and median.

    Returns
    -------
    dict
        ``best_wall``, ``median_wall``, ``best_cpu``, ``median_cpu`` (seconds) and
        ``value``, the last call's return value.
    """
    walls, cpus, value = [], [], None
    for _ in range(max(1, int(repeat))):
        w0, c0 = time.perf_counter(), time.process_time()
        value = fn()
        cpus.append(time.process_time() - c0)
        walls.append(time.perf_counter() - w0)
    return {
        "best_wall": min(walls),
        "median_wall": statistics.median(walls),
        "best_cpu": min(cpus),
        "median_cpu": statistics.median(cpus),
        "value": value,
    }


@contextlib.contextmanager
def blas_threads(n: int | None):
    """Limit the BLAS libraries of this process to ``n`` threads (``None``: leave them)."""
    if n is None:
        yield
        return
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=int(n), user_api="blas"):
        yield


# --------------------------------------------------------------------------- machine
def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        return None


def machine() -> dict:
    """The machine and software a result was measured with."""
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    try:
        from threadpoolctl import threadpool_info

        blas = [
            {k: p.get(k) for k in ("internal_api", "version", "num_threads", "filepath")}
            for p in threadpool_info()
            if p.get("user_api") == "blas"
        ]
    except ImportError:
        blas = []
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "versions": versions,
        "blas": blas,
        "load_average": load,
        "env": {
            k: os.environ[k]
            for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
            if k in os.environ
        },
    }


# --------------------------------------------------------------------------- results
def parse_tables(text: str) -> list[dict]:
    """The Markdown pipe tables in printed text, each named by the line above it.

    The name is the nearest preceding heading (``#`` line) or, failing that, the nearest
    preceding non-empty line, shortened to 160 characters; repeated names get a suffix.
    """
    tables, lines, i, seen = [], text.splitlines(), 0, {}
    last_heading, last_line = "", ""
    while i < len(lines):
        line = lines[i].strip()
        is_table = (
            line.startswith("|")
            and i + 1 < len(lines)
            and lines[i + 1].strip().startswith("|")
            and set(lines[i + 1].strip()) <= set("|-: ")
        )
        if not is_table:
            if line.startswith("#"):
                last_heading, last_line = line.lstrip("#").strip(), ""
            elif line:
                last_line = line
            i += 1
            continue
        columns = _cells(line)
        rows, i = [], i + 2
        while i < len(lines) and lines[i].strip().startswith("|"):
            rows.append(_cells(lines[i].strip()))
            i += 1
        name = (last_line if last_line and not last_heading else last_heading or last_line)[:160]
        name = name or "table"
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            name = f"{name} ({seen[name]})"
        tables.append({"name": name, "columns": columns, "rows": rows})
        last_line = ""
    return tables


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def write_results(
    name: str,
    tables: list[dict],
    path: Path | str,
    *,
    command: str,
    elapsed: dict | None = None,
    source: str = "run",
    output: str | None = None,
) -> Path:
    """Write one suite's results (format in this module's docstring) to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "suite": name,
        "source": source,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "machine": machine(),
        "elapsed": elapsed,
        "tables": tables,
    }
    if output is not None:
        record["output"] = output
    path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
    return path


class _Tee(io.TextIOBase):
    def __init__(self, stream):
        self.stream, self.buffer_ = stream, io.StringIO()

    def write(self, s):
        self.buffer_.write(s)
        return self.stream.write(s)

    def flush(self):
        self.stream.flush()


def run_suite(
    name: str,
    main: Callable[[list[str]], object],
    *,
    quick: Sequence[str] | str = "pass",
    full: Sequence[str] | str = (),
    argv: Sequence[str] | None = None,
) -> int:
    """Run a suite's ``main`` with the common command line; save what it printed.

    Parameters
    ----------
    name : str
        The suite's name: the results file is ``NAME.json``.
    main : callable
        The suite's ``main(argv)``; its return value is the exit status (``None``: 0).
    quick, full : sequence of str or "pass"
        What ``--quick`` / ``--full`` become on the suite's own command line: ``"pass"``
        hands the flag on unchanged (the suite knows it), a sequence of arguments is put
        in its place (``()`` for ``--full`` where the default run is the full one).
    argv : sequence of str, optional
        The command line without the program name (default ``sys.argv[1:]``).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    command = "python " + " ".join(shlex.quote(a) for a in [_script_path(), *argv])
    out, save, is_full, suite_argv = None, True, False, []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--results":
            out = argv[i + 1]
            i += 2
            continue
        if a == "--no-results":
            save = False
        elif a == "--quick":
            suite_argv += ["--quick"] if quick == "pass" else list(quick)
        elif a == "--full":
            is_full = True
            suite_argv += ["--full"] if full == "pass" else list(full)
        else:
            suite_argv.append(a)
        i += 1
    tee = _Tee(sys.stdout)
    w0, c0 = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(tee):
        status = main(suite_argv)
    elapsed = {
        "wall_s": round(time.perf_counter() - w0, 3),
        "cpu_s": round(time.process_time() - c0, 3),
    }
    status = status if isinstance(status, int) else 0  # some suites return their rows
    if save:
        if out is None:
            out = RESULTS / (f"{name}.json" if is_full else f"local/{name}.json")
        text = tee.buffer_.getvalue()
        tables = parse_tables(text)
        path = write_results(name, tables, out, command=command, elapsed=elapsed, output=text)
        print(f"results: {len(tables)} tables -> {_relative(path)}", file=sys.stderr)
    return status


def _script_path() -> str:
    return _relative(Path(sys.argv[0]).resolve()) if sys.argv and sys.argv[0] else "?"


def _relative(path: Path) -> str:
    try:
        return str(Path(path).resolve().relative_to(RESULTS.parent.parent))
    except ValueError:
        return str(path)
