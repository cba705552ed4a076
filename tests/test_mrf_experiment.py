"""The registered ``rbp-ising`` experiment (ICML §6.2, Fig. 9) on a tiny configuration."""

from __future__ import annotations

import json

import pytest

from robustep.experiments import base
from robustep.experiments.base import ExperimentSummary
from robustep.experiments.rbp_ising import EXPERIMENT, _graph

TINY = {
    "graphs": ["grid:2x3", "complete:4"],
    "conditions": {"weak": 0.25, "strong": 2.0},
    "field_std": 0.1,
    "instances": 2,
    "c_sweep": [0.1, 1.0],
    "schedule": "sequential",
    "max_iter": 15,
    "tol": 1e-8,
}


def test_rbp_ising_runs_and_reports(tmp_path):
    res = EXPERIMENT.run(TINY, 0)
    text = json.dumps(res)  # JSON-serialisable
    assert json.loads(text)["seed"] == 0
    assert set(res["results"]) == {
        "grid:2x3|weak",
        "grid:2x3|strong",
        "complete:4|weak",
        "complete:4|strong",
    }
    row = res["results"]["complete:4|strong"][0]
    assert set(row["methods"]) == {
        "BP",
        "damped BP (step 0.8)",
        "fractional BP (power 0.8)",
        "RBP (c = 0.1)",
    }
    for v in row["methods"].values():
        assert 0 <= v["mae"] <= v["max_err"] <= 1
    assert row["c_sweep"]["0.1"] == row["methods"]["RBP (c = 0.1)"]
    # the same seed gives the same numbers
    assert EXPERIMENT.run(TINY, 0)["results"] == res["results"]

    summary = EXPERIMENT.report(res, tmp_path)
    assert isinstance(summary, ExperimentSummary)
    assert summary.agrees in (True, False, None)
    assert len(summary.tables) == 3 and all(t.startswith("|") for t in summary.tables)
    for f in summary.figures:
        assert (tmp_path / f).stat().st_size > 1000
    assert "Mean absolute error" in summary.measured
    assert "garbled" in summary.notes


def test_rbp_ising_is_registered_with_paper_sizes():
    # the registry itself (registered() would also import other engineers' modules)
    exp = base._REGISTRY["rbp-ising"]
    assert exp is EXPERIMENT
    assert exp.source == "ICML §6.2, Fig. 9"
    assert exp.full["instances"] == 50
    assert exp.quick["instances"] < exp.full["instances"]


def test_unknown_graph_spec():
    with pytest.raises(ValueError, match="use 'grid:RxC' or 'complete:N'"):
        _graph("torus:3")


def test_benchmark_script_runs_on_a_small_grid(capsys):
    import runpy
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "mrf.py"
    mod = runpy.run_path(str(path))
    mod["main"](["--side", "20", "--sweeps", "2"])
    out = capsys.readouterr().out
    assert "directed message updates/s" in out and "peak RSS" in out and "PGMax" in out


@pytest.mark.slow
def test_rbp_ising_quick_configuration(tmp_path):
    res = EXPERIMENT.run(EXPERIMENT.quick, 0)
    summary = EXPERIMENT.report(res, tmp_path)
    assert summary.agrees in (True, False, None)
    assert len(res["results"]) == 4


def test_rbp_ising_jobs_do_not_change_results():
    from robustep.experiments.parallel import use_jobs

    serial = EXPERIMENT.run(TINY, 1)
    with use_jobs(2):
        parallel = EXPERIMENT.run(TINY, 1)
    assert json.dumps(serial["results"], sort_keys=True) == json.dumps(
        parallel["results"], sort_keys=True
    )
    assert [len(v) for v in serial["results"].values()] == [2, 2, 2, 2]
