"""Tests for the ``robustep`` command line (dummy experiments registered in the test)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import robustep.experiments as experiments_pkg
from robustep.cli import main
from robustep.datasets import DataUnavailableError
from robustep.experiments import base


@pytest.fixture(autouse=True)
def registry(monkeypatch):
    """An empty registry; the built-in experiment modules are not imported."""
    reg: dict[str, base.Experiment] = {}
    monkeypatch.setattr(base, "_REGISTRY", reg)
    monkeypatch.setattr(experiments_pkg, "_load_builtin", lambda: None)
    monkeypatch.setattr(experiments_pkg, "_IMPORT_ERRORS", {})
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
    monkeypatch.setattr(experiments_pkg, "_IMPORT_ERRORS", {"bad": "Traceback\nSyntaxError: x"})
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
    assert "interrupted; partial report" in capsys.readouterr().err
    assert (tmp_path / "index.html").is_file()


def test_unknown_name(tmp_path, capsys):
    add("alpha")
    add("beta")
    assert main(["reproduce", "alpha", "gamma", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown experiment 'gamma'" in err and "valid names: alpha, beta, or 'all'" in err
    assert not (tmp_path / "alpha").exists()  # nothing ran


@pytest.mark.parametrize(
    "argv",
    [[], ["reproduce"], ["reproduce", "a", "--quick", "--full"], ["reproduce", "a", "--seed", "x"]],
)
def test_usage_errors(argv, capsys):
    assert main(argv) == 2
    assert "usage:" in capsys.readouterr().err


def test_help(capsys):
    assert main(["reproduce", "--help"]) == 0
    assert "--strict" in capsys.readouterr().out


def test_python_dash_m():
    proc = subprocess.run(
        [sys.executable, "-m", "robustep", "--help"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and "reproduce" in proc.stdout
