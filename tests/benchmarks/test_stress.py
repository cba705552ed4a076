"""The quick stress grid (benchmarks/stress.py --quick) has no NaN/inf predictions, no
silent non-convergence and no undocumented exception.

The quick grid takes a few seconds (102 fits), so CI runs it by default; the full grid and
its table are in docs/reliability.md.
"""

from __future__ import annotations

from _benchmarks import load_benchmark


def _stress():
    return load_benchmark("stress", "_stress_grid")


def test_grid_is_fixed_and_covers_every_estimator_and_method():
    stress = _stress()
    quick = stress.cells(quick=True)
    again = stress.cells(quick=True)
    assert [(c.estimator, c.method, c.name) for c in quick] == [
        (c.estimator, c.method, c.name) for c in again
    ]
    assert all((a.X == b.X).all() and (a.y == b.y).all() for a, b in zip(quick, again, strict=True))
    pairs = {(c.estimator, c.method) for c in quick}
    expected = (
        {("GPClassifier", m) for m in stress.GPC_METHODS}
        | {("StudentTGPRegressor", m) for m in stress.TGP_METHODS}
        | {("BayesPointMachine", m) for m in stress.BPM_METHODS}
        | {("StudentTProcessClassifier", "ep")}
    )
    assert pairs == expected
    # the default method="auto" chain is stressed for both estimators that offer it
    assert ("GPClassifier", "auto") in pairs and ("StudentTGPRegressor", "auto") in pairs


def test_run_cell_counts_a_silent_failure_and_an_undocumented_exception():
    """The counters can fail: a fake estimator that does not converge without warning, and
    one that raises RuntimeError, are both counted."""
    import numpy as np

    stress = _stress()

    class Silent:
        converged_ = False

        def fit(self, X, y):
            self.classes_ = np.array([-1, 1])
            return self

        def predict_proba(self, X):
            return np.full((len(X), 2), 0.5)

        def predict(self, X):
            return np.ones(len(X), dtype=int)

    class Broken(Silent):
        def fit(self, X, y):
            raise RuntimeError("boom")

    X, y = np.zeros((4, 1)), np.array([-1, 1, -1, 1])
    r = stress.run_cell(stress.Cell("Fake", "m", "c", Silent, X, y, X))
    assert r["silent"] and not r["undocumented"]
    r = stress.run_cell(stress.Cell("Fake", "m", "c", Broken, X, y, X))
    assert r["undocumented"] and "boom" in r["error"]


def test_quick_stress_grid_has_no_nan_no_silent_failure_no_undocumented_exception():
    stress = _stress()
    table, failures = stress.run(quick=True)
    assert sum(row["runs"] for row in table.values()) >= 80
    totals = {k: sum(row[k] for row in table.values()) for k in ("nonfinite", "silent",
                                                                 "undocumented")}  # fmt: skip
    assert totals == {"nonfinite": 0, "silent": 0, "undocumented": 0}, [
        (c.estimator, c.method, c.name, r["error"]) for c, r in failures
    ]
    # method "auto" records the stage of every converged fit, and the table shows it
    for estimator in ("GPClassifier", "StudentTGPRegressor"):
        row = table[(estimator, "auto")]
        assert sum(row["used"].values()) == row["converged"] > 0
        assert len(row["times"]) == row["runs"]
    assert "| GPClassifier | auto |" in stress.format_table(table)


def test_methods_filter_runs_only_those_cells():
    stress = _stress()
    table, _ = stress.run(quick=True, methods={"laplace"})
    assert set(table) == {("GPClassifier", "laplace")}
    assert table[("GPClassifier", "laplace")]["runs"] == 8


def test_estimators_filter_runs_only_those_cells():
    stress = _stress()
    table, _ = stress.run(quick=True, estimators={"BayesPointMachine"}, methods={"adf"})
    assert set(table) == {("BayesPointMachine", "adf")}


def test_step_candidate_without_the_run_after_power():
    """Candidate "auto accelerated no after-power" is the classifier's step chain with
    AcceleratedStage.after_power off, and only that changed."""
    import dataclasses

    stress = _stress()
    chain = stress.STEP_CANDIDATES["auto accelerated"](100)
    off = stress.STEP_CANDIDATES["auto accelerated no after-power"](100)
    assert chain.accelerated.after_power and not off.accelerated.after_power
    assert dataclasses.replace(off.accelerated, after_power=True) == chain.accelerated
    assert dataclasses.replace(off, accelerated=chain.accelerated) == chain


def test_seeds_option_takes_a_range_or_a_list():
    import argparse

    import pytest

    stress, parser = _stress(), argparse.ArgumentParser()
    assert stress.parse_seeds(parser, "5-7") == [5, 6, 7]
    assert stress.parse_seeds(parser, "8,9") == [8, 9]
    assert stress.parse_seeds(parser, "3") == [3]
    for bad in ("a-b", "7-5", "1,,2"):
        with pytest.raises(SystemExit):
            stress.parse_seeds(parser, bad)
