"""robustep.experiments.parallel and the runner's --jobs / --set plumbing."""

import functools
import json
import warnings

import pytest

from robustep.cli import main
from robustep.experiments.parallel import n_jobs, parallel_map, use_jobs


def _square_and_warn(x, *, offset=0):
    if x == 2:
        warnings.warn(f"unit {x} warns", UserWarning, stacklevel=1)
    return x * x + offset


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
