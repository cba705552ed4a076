"""Tests for the ``robustep`` command line (dummy experiments registered in the test)."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from robustep.cli import main
from robustep.datasets import DataUnavailableError
from robustep.experiments import base, discovery
from robustep.experiments.parallel import parallel_map


@pytest.fixture(autouse=True)
def registry(monkeypatch):
    """An empty registry; the built-in experiment modules are not imported."""
    reg: dict[str, base.Experiment] = {}
    monkeypatch.setattr(base, "_REGISTRY", reg)
    monkeypatch.setattr(discovery, "_load_builtin", lambda: None)
    monkeypatch.setattr(discovery, "_IMPORT_ERRORS", {})
    return reg


def add(name, run=None):
    def default_run(config, seed):
        return {"config": config, "seed": seed}

    def report(results, out_dir):
        return base.ExperimentSummary(f"ran with {results['config']} seed {results['seed']}", True)

    base.register(
        base.Experiment(
            name=name,
            paper="Roe (2021)",
            source="Table 2",
            claim=f"claim of {name}",
            quick={"size": "quick"},
            full={"size": "full"},
            run=run or default_run,
            report=report,
        )
    )


def _raiser(exc):
    def run(config, seed):
        raise exc

    return run


def test_list(capsys):
    add("alpha")
    add("beta")
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "alpha  Roe (2021), Table 2" in out and "claim of beta" in out


def test_list_empty_and_import_warning(capsys, monkeypatch):
    monkeypatch.setattr(discovery, "_IMPORT_ERRORS", {"bad": "Traceback\nSyntaxError: x"})
    assert main(["list"]) == 0
    captured = capsys.readouterr()
    assert "No experiments are registered" in captured.out
    assert "'bad' failed to import: SyntaxError: x" in captured.err


def test_reproduce_defaults(tmp_path, monkeypatch, capsys):
    add("alpha")
    monkeypatch.chdir(tmp_path)
    assert main(["reproduce", "alpha"]) == 0
    meta = json.loads((tmp_path / "report" / "alpha" / "run.json").read_text())
    assert meta["mode"] == "quick" and meta["seed"] == 0 and meta["config"] == {"size": "quick"}
    assert (tmp_path / "report" / "index.html").is_file()
    assert (tmp_path / "report" / "README.md").is_file()
    out = capsys.readouterr().out
    assert "[1/1] alpha" in out and "1 ok, 0 lacked data, 0 failed" in out


def test_reproduce_full_out_seed(tmp_path):
    add("alpha")
    add("beta")
    assert main(["reproduce", "all", "--full", "--out", str(tmp_path / "r"), "--seed", "5"]) == 0
    for name in ("alpha", "beta"):
        results = json.loads((tmp_path / "r" / name / "results.json").read_text())
        assert results == {"config": {"size": "full"}, "seed": 5}
    assert main(["reproduce", "beta", "--quick", "--out", str(tmp_path / "q")]) == 0
    assert not (tmp_path / "q" / "alpha").exists()


def test_failures_exit_zero_unless_strict(tmp_path, capsys):
    add("good")
    add("nodata", run=_raiser(DataUnavailableError("need heart.dat")))
    add("broken", run=_raiser(RuntimeError("kaput")))
    assert main(["reproduce", "all", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "FAILED: broken" in out and "LACKED DATA" in out
    assert "kaput" in (tmp_path / "index.html").read_text()
    assert main(["reproduce", "all", "--strict", "--out", str(tmp_path)]) == 1
    # lacking data alone is not a failure, even with --strict
    assert main(["reproduce", "good", "nodata", "--strict", "--out", str(tmp_path / "s")]) == 0


def test_interrupt(tmp_path, capsys):
    add("stop", run=_raiser(KeyboardInterrupt()))
    assert main(["reproduce", "stop", "--out", str(tmp_path)]) == 130
    assert "interrupted; the experiments finished before keep" in capsys.readouterr().err
    assert (tmp_path / "index.html").is_file()


def test_unknown_name(tmp_path, capsys):
    add("alpha")
    add("beta")
    assert main(["reproduce", "alpha", "gamma", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown experiment 'gamma'" in err and "valid names: alpha, beta, or 'all'" in err
    assert not (tmp_path / "alpha").exists()  # nothing ran


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        ([], "required: COMMAND"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["reproduce"], "required: NAME"),
        (["reproduce", "alpha", "--quick", "--full"], "not allowed with argument"),
        (["reproduce", "alpha", "--seed", "x"], "expected a whole number, got 'x'"),
        (["reproduce", "alpha", "--seed", "-1"], "--seed: must be in [0, 2**32)"),
        (["reproduce", "alpha", "--jobs", "0"], "--jobs: must be >= 1, or -1 for all cores"),
        (["reproduce", "alpha", "--jobs", "two"], "--jobs: expected a whole number"),
        (["reproduce", "alpha", "--bogus"], "unrecognized arguments: --bogus"),
        (["reproduce", "gamma"], "unknown experiment 'gamma'; valid names: alpha, beta, or 'all'"),
        (["reproduce", "alpha", "--set", "size=[quick"], "VALUE is not valid JSON"),
        (["reproduce", "alpha", "--set", "size={'a': 1}"], "VALUE is not valid JSON"),
        (["reproduce", "alpha", "--set", "size"], "--set expects KEY=VALUE"),
        (["reproduce", "alpha", "--set", "nope=1"], "no configuration entries ['nope']"),
        (["reproduce", "all", "--set", "size=1"], "apply to exactly one experiment"),
        (["rerender", "alpha"], "has no results.json/run.json"),
        (["rerender", "gamma"], "unknown experiment 'gamma'"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(argv, says, tmp_path, monkeypatch, capsys):
    """Usage errors: status 2, one line on stderr saying what is wrong, no traceback."""
    add("alpha")
    add("beta")
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert says in err and len(err.splitlines()) == 1, err
    assert err.startswith("robustep") and "Traceback" not in captured.out + captured.err
    assert not (tmp_path / "report" / "alpha").exists()  # nothing ran


def test_unwritable_out_is_a_usage_error(tmp_path, capsys):
    add("alpha")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    for out in (blocker, blocker / "sub"):
        assert main(["reproduce", "alpha", "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "cannot write the report folder" in err
        assert "choose another with --out DIR" in err


def test_bare_word_set_value_is_a_string(tmp_path):
    add("alpha")
    assert main(["reproduce", "alpha", "--out", str(tmp_path), "--set", "size=pima"]) == 0
    assert json.loads((tmp_path / "alpha" / "results.json").read_text())["config"] == {
        "size": "pima"
    }


def test_later_failure_or_interrupt_keeps_finished_results(tmp_path, capsys):
    """A failure or Ctrl-C in a later experiment never removes finished reports."""
    add("alpha")
    add("beta")
    assert main(["reproduce", "alpha", "beta", "--out", str(tmp_path)]) == 0
    before = (tmp_path / "beta" / "results.json").read_text()
    base._REGISTRY.pop("beta")
    add("beta", run=_raiser(KeyboardInterrupt()))
    add("gamma")
    assert main(["reproduce", "gamma", "beta", "--out", str(tmp_path)]) == 130
    err = capsys.readouterr().err
    assert "interrupted" in err and "--resume" in err and len(err.strip().splitlines()) == 1
    # gamma finished before the interrupt; beta keeps its earlier, finished run
    assert (tmp_path / "gamma" / "results.json").is_file()
    assert (tmp_path / "beta" / "results.json").read_text() == before
    assert json.loads((tmp_path / "beta" / "run.json").read_text())["status"] == "ok"
    index = (tmp_path / "index.html").read_text()
    assert all(f"{n}/index.html" in index for n in ("alpha", "beta", "gamma"))
    # a failure after a finished experiment: both keep what they produced
    base._REGISTRY.pop("beta")
    add("beta", run=_raiser(RuntimeError("kaput")))
    assert main(["reproduce", "alpha", "beta", "--out", str(tmp_path / "f")]) == 0
    assert (tmp_path / "f" / "alpha" / "results.json").is_file()
    assert (tmp_path / "f" / "beta" / "traceback.txt").is_file()


_UNIT_LOG = "units.log"


def _logged_unit(folder, i):
    """A unit that logs its call and, while a flag file exists, is interrupted at i = 3."""
    folder = Path(folder)
    with (folder / _UNIT_LOG).open("a") as fh:
        fh.write(f"{i}\n")
    if i == 1:
        warnings.warn("unit 1 warns", UserWarning, stacklevel=1)
    if i == 3 and (folder / "interrupt").exists():
        raise KeyboardInterrupt
    return i * i


def test_resume_continues_from_the_finished_units(tmp_path, capsys):
    work = tmp_path / "work"
    work.mkdir()

    def run(config, seed):
        squares = parallel_map(functools.partial(_logged_unit, str(work)), range(6))
        return {"squares": squares, "seed": seed, "config": config}

    add("units", run=run)
    add("first")
    out = str(tmp_path / "r")
    log = work / _UNIT_LOG

    def calls():
        return [int(v) for v in log.read_text().split()] if log.exists() else []

    (work / "interrupt").touch()
    assert main(["reproduce", "first", "units", "--out", out]) == 130
    assert calls() == [0, 1, 2, 3]
    assert len(list((tmp_path / "r" / "units" / "units").glob("*.pkl"))) == 3
    (work / "interrupt").unlink()
    capsys.readouterr()
    assert main(["reproduce", "first", "units", "--out", out, "--resume"]) == 0
    assert calls() == [0, 1, 2, 3, 3, 4, 5]  # only the unfinished units ran
    stdout = capsys.readouterr().out
    assert "first" in stdout and "finished earlier (--resume)" in stdout
    results = json.loads((tmp_path / "r" / "units" / "results.json").read_text())
    assert results["squares"] == [i * i for i in range(6)]
    meta = json.loads((tmp_path / "r" / "units" / "run.json").read_text())
    assert meta["warnings"] == [{"category": "UserWarning", "message": "unit 1 warns", "count": 1}]
    assert not (tmp_path / "r" / "units" / "units").exists()  # removed once finished
    # everything finished: --resume runs nothing; another seed or no --resume runs again
    assert main(["reproduce", "units", "--out", out, "--resume"]) == 0
    assert len(calls()) == 7
    assert main(["reproduce", "units", "--out", out, "--resume", "--seed", "1"]) == 0
    assert len(calls()) == 13
    assert main(["reproduce", "units", "--out", out]) == 0
    assert len(calls()) == 19


def test_warnings_summary_line(tmp_path, capsys):
    def run(config, seed):
        warnings.warn("watch out", RuntimeWarning, stacklevel=1)
        warnings.warn("watch out", RuntimeWarning, stacklevel=1)
        return {"config": config, "seed": seed}

    add("noisy", run=run)
    add("quiet")
    assert main(["reproduce", "all", "--out", str(tmp_path)]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("Warnings: 2 in 1 experiment (noisy 2; 2 RuntimeWarning)")
    assert main(["reproduce", "quiet", "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == "Warnings: none."


def test_help(capsys):
    assert main(["reproduce", "--help"]) == 0
    assert "--strict" in capsys.readouterr().out


def test_python_dash_m():
    proc = subprocess.run(
        [sys.executable, "-m", "robustep", "--help"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and "reproduce" in proc.stdout


def _pid_run(config, seed):
    import os

    return {"config": config, "seed": seed, "pid": os.getpid()}


def test_quick_runs_experiments_side_by_side_with_jobs(tmp_path, capsys):
    """--quick --jobs 2: whole experiments in two worker processes; same results."""
    import os

    for name in ("a", "b", "c"):
        add(name, run=_pid_run)
    add("d", run=_raiser(RuntimeError("kaput")))
    assert main(["reproduce", "all", "--jobs", "2", "--out", str(tmp_path / "p")]) == 0
    out = capsys.readouterr().out
    assert all(f"[{k}/4]" in out for k in range(1, 5)) and "FAILED: d" in out
    pids = set()
    for name in ("a", "b", "c"):
        res = json.loads((tmp_path / "p" / name / "results.json").read_text())
        assert res["config"] == {"size": "quick"} and res["seed"] == 0
        pids.add(res["pid"])
    assert os.getpid() not in pids
    assert (tmp_path / "p" / "d" / "traceback.txt").is_file()
    index = (tmp_path / "p" / "index.html").read_text()
    assert all(f"{n}/index.html" in index for n in "abcd")
    # full runs (and single experiments) run in this process, their units in the workers
    assert main(["reproduce", "a", "b", "--full", "--jobs", "2", "--out", str(tmp_path / "f")]) == 0
    res = json.loads((tmp_path / "f" / "b" / "results.json").read_text())
    assert res["pid"] == os.getpid() and res["config"] == {"size": "full"}
