"""robustep.experiments.parallel and the runner's --jobs / --set plumbing."""

import dataclasses
import functools
import json
import os
import time
import warnings

import pytest

from robustep.cli import main
from robustep.experiments.parallel import n_jobs, parallel_map, save_units, use_jobs


def _square_and_warn(x, *, offset=0):
    if x == 2:
        warnings.warn(f"unit {x} warns", UserWarning, stacklevel=1)
    return x * x + offset


def _square(x):
    return x * x


def test_serial_by_default_and_in_order():
    assert n_jobs() == 1
    assert parallel_map(_square_and_warn, [3, 1, 0]) == [9, 1, 0]


def test_two_processes_same_results_and_warnings_forwarded():
    func = functools.partial(_square_and_warn, offset=1)
    with use_jobs(2):
        assert n_jobs() == 2
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = parallel_map(func, range(5))
    assert n_jobs() == 1
    assert out == [x * x + 1 for x in range(5)]
    assert [str(w.message) for w in caught] == ["unit 2 warns"]


def test_worker_exception_propagates():
    def boom(_):  # a local function cannot be pickled: the serial path must still run it
        raise RuntimeError("unit failed")

    with pytest.raises(RuntimeError, match="unit failed"):
        parallel_map(boom, [1])


@pytest.mark.parametrize("bad", [0, -2, 1.5, "2", True])
def test_bad_jobs_rejected(bad):
    with pytest.raises(ValueError, match="jobs"), use_jobs(bad):
        pass


def test_cli_set_overrides_recorded_and_unknown_key_rejected(tmp_path, capsys):
    rc = main(
        [
            "reproduce",
            "tgp-convergence",
            "--out",
            str(tmp_path),
            "--set",
            "max_iter=40",
            "--jobs",
            "2",
        ]
    )
    assert rc == 0
    meta = json.loads((tmp_path / "tgp-convergence" / "run.json").read_text())
    assert meta["config"]["max_iter"] == 40
    assert meta["overrides"] == {"max_iter": 40}
    assert meta["jobs"] == 2
    assert main(["reproduce", "tgp-convergence", "--out", str(tmp_path), "--set", "nope=1"]) == 2
    assert "no configuration entries ['nope']" in capsys.readouterr().err
    assert main(["reproduce", "all", "--out", str(tmp_path), "--set", "max_iter=1"]) == 2
    assert main(["reproduce", "tgp-convergence", "--out", str(tmp_path), "--set", "x"]) == 2


def test_rerender_rebuilds_the_report_from_saved_results(tmp_path, capsys):
    assert (
        main(["reproduce", "tgp-convergence", "--out", str(tmp_path), "--set", "max_iter=30"]) == 0
    )
    readme = tmp_path / "tgp-convergence" / "README.md"
    readme.unlink()
    assert main(["rerender", "tgp-convergence", "--out", str(tmp_path)]) == 0
    meta = json.loads((tmp_path / "tgp-convergence" / "run.json").read_text())
    assert readme.exists() and "rerendered" in meta and meta["config"]["max_iter"] == 30
    assert (tmp_path / "index.html").exists()
    assert main(["rerender", "tgp-convergence", "--out", str(tmp_path / "empty")]) == 2
    assert "no results.json" in capsys.readouterr().err


def _marked_square(folder, x):
    """Leaves a marker file per call, so that a test can count the calls across processes."""
    import pathlib

    (pathlib.Path(folder) / f"called-{x}-{os.getpid()}-{time.perf_counter_ns()}").touch()
    return x * x


def test_units_saved_as_they_finish_and_reused_with_two_processes(tmp_path):
    calls_dir = tmp_path / "calls"
    calls_dir.mkdir()
    units = tmp_path / "units"
    func = functools.partial(_marked_square, str(calls_dir))
    seen = []
    with use_jobs(2), save_units(units, seen.append):
        assert parallel_map(func, range(5)) == [x * x for x in range(5)]
    assert len(list(calls_dir.iterdir())) == 5
    files = sorted(p.name for p in units.glob("*.pkl"))
    assert [f[:8] for f in files] == [f"00-{i:05d}" for i in range(5)]
    assert [(p.done, p.total, p.loaded) for p in seen] == [(i, 5, 0) for i in range(6)]
    assert seen[-1].remaining_seconds() == 0.0
    # a second run reuses them all; another unit function (or configuration) does not
    (units / files[2]).unlink()
    seen.clear()
    with use_jobs(2), save_units(units, seen.append):
        assert parallel_map(func, range(5)) == [x * x for x in range(5)]
        assert parallel_map(func, [7]) == [49]  # the second call of the run: new file names
    assert len(list(calls_dir.iterdir())) == 7  # unit 2 again, and 7
    assert (seen[0].done, seen[0].loaded) == (4, 4) and seen[0].remaining_seconds() is None
    other = functools.partial(_marked_square, str(calls_dir) + "/")
    with save_units(units):
        parallel_map(other, [0])
    assert len(list(calls_dir.iterdir())) == 8


def test_progress_estimate_uses_the_units_weights(tmp_path):
    """Units of very different costs (tgp-benchmark: MCMC vs GA) dispatched longest first:
    the estimate counts work, not units."""
    import time

    seen = []
    with save_units(None, seen.append):
        assert parallel_map(_square, range(4), weights=[8.0, 1.0, 0.5, 0.5]) == [0, 1, 4, 9]
    assert [(p.work_done, p.work_total) for p in seen] == [
        (0.0, 10.0),
        (8.0, 10.0),
        (9.0, 10.0),
        (9.5, 10.0),
        (10.0, 10.0),
    ]
    after_first = dataclasses.replace(seen[1], started=time.perf_counter() - 80.0)
    assert after_first.remaining_seconds() == pytest.approx(20.0, rel=0.01)  # 80 s per 8
    unweighted = dataclasses.replace(after_first, work_total=None)
    assert unweighted.remaining_seconds() == pytest.approx(240.0, rel=0.01)  # 80 s per unit
    with pytest.raises(ValueError, match="weights must be 2 positive"):
        parallel_map(_square, range(2), weights=[1.0, 0.0])
    # resumed units count as loaded work
    units = tmp_path / "units"
    with save_units(units):
        parallel_map(_square, range(3), weights=[4.0, 2.0, 2.0])
    (sorted(units.glob("*.pkl"))[0]).unlink()
    seen.clear()
    with save_units(units, seen.append):
        parallel_map(_square, range(3), weights=[4.0, 2.0, 2.0])
    assert (seen[0].work_done, seen[0].work_loaded, seen[0].work_total) == (4.0, 4.0, 8.0)


def test_a_corrupt_unit_file_is_recomputed(tmp_path):
    with save_units(tmp_path):
        assert parallel_map(abs, [-2, -3]) == [2, 3]
    for f in tmp_path.glob("*.pkl"):
        f.write_bytes(b"truncated")
    with save_units(tmp_path):
        assert parallel_map(abs, [-2, -3]) == [2, 3]
