"""benchmarks/_harness.py (the suites' shared command line and results files) and the
results-table directive of docs/performance.md (docs/_ext/robustep_results.py)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from _benchmarks import load_benchmark, load_module

ROOT = Path(__file__).resolve().parents[2]


harness = load_benchmark("_harness", "_harness")

PRINTED = """load average 1.0
## Speed
note above the table
| n | s |
|---|---|
| 100 | 0.5 |
| 200 | 1.0 |

| n | s |
|---|---|
| 300 | 2 |
no heading above
| a | b |
|:--|--:|
| x | y |
"""


def test_parse_tables_names_each_table_by_the_line_above_it():
    tables = harness.parse_tables(PRINTED)
    assert [t["name"] for t in tables] == ["Speed", "Speed (2)", "Speed (3)"]
    assert tables[0]["columns"] == ["n", "s"]
    assert tables[0]["rows"] == [["100", "0.5"], ["200", "1.0"]]
    assert tables[2]["rows"] == [["x", "y"]]
    # without a heading, the line above names the table
    assert [t["name"] for t in harness.parse_tables("a note\n| a |\n|---|\n| 1 |\n")] == ["a note"]


def test_run_suite_maps_quick_and_full_and_writes_the_results(tmp_path, capsys):
    seen = []

    def main(argv):
        seen.append(list(argv))
        print(PRINTED)
        return 3

    out = tmp_path / "r.json"
    status = harness.run_suite(
        "demo",
        main,
        quick=["--n", "10"],
        full="pass",
        argv=["--quick", "--x", "--results", str(out)],
    )
    assert status == 3 and seen[-1] == ["--n", "10", "--x"]
    record = json.loads(out.read_text())
    assert record["suite"] == "demo" and record["source"] == "run"
    assert record["command"].endswith("--quick --x --results " + str(out))
    assert [t["name"] for t in record["tables"]][:1] == ["Speed"]
    machine = record["machine"]
    assert machine["cores"] >= 1 and machine["python"] and "numpy" in machine["versions"]
    assert record["elapsed"]["wall_s"] >= 0 and "load average 1.0" in record["output"]
    assert "Speed" in capsys.readouterr().out  # the suite's own output is still printed

    harness.run_suite("demo", main, full="pass", argv=["--full", "--no-results"])
    assert seen[-1] == ["--full"]
    # a suite that returns its rows exits 0; --quick passes through by default
    assert harness.run_suite("demo", lambda a: [1], argv=["--quick", "--no-results"]) == 0


def test_measure_gives_best_and_median():
    calls = []
    t = harness.measure(lambda: calls.append(1) or len(calls), repeat=3)
    assert len(calls) == 3 and t["value"] == 3
    assert 0 <= t["best_wall"] <= t["median_wall"] and 0 <= t["best_cpu"] <= t["median_cpu"]


# ------------------------------------------------------------------- results-table
def _directive_calls():
    text = (ROOT / "docs" / "performance.md").read_text()
    pattern = r"```\{results-table\} (\S+)\n:table: ([^\n]+)\n(?::columns: ([^\n]+)\n)?```"
    return re.findall(pattern, text)


def test_every_table_of_the_performance_page_is_in_its_results_file():
    pytest.importorskip("sphinx")
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    try:
        ext = load_module(ROOT / "docs" / "_ext" / "robustep_results.py", "robustep_results")
    finally:
        sys.path.remove(str(ROOT / "docs" / "_ext"))
    calls = _directive_calls()
    assert len(calls) >= 10
    for path, name, columns in calls:
        cols = [c.strip() for c in columns.split(",")] if columns else None
        table = ext.load_table(ROOT / path, name, cols)
        assert table["command"] and table["date"] and table["machine"], (path, name)
        assert all(len(row) <= len(table["columns"]) for row in table["rows"]), (path, name)
        assert ext.describe_machine(table["machine"])
    with pytest.raises(ValueError, match="has no table"):
        ext.load_table(ROOT / "benchmarks/results/engine.json", "no such table")
    with pytest.raises(ValueError, match="no columns"):
        ext.load_table(ROOT / "benchmarks/results/engine.json", "larger sizes", ["nope"])


def test_published_results_files_follow_the_harness_format():
    files = sorted((ROOT / "benchmarks" / "results").glob("*.json"))
    files = [f for f in files if f.name != "seam_reference.json"]
    assert files
    for f in files:
        record = json.loads(f.read_text())
        assert record["suite"] == f.stem and record["source"] in ("run", "docs")
        for table in record["tables"]:
            assert table["name"] and table["columns"] and isinstance(table["rows"], list)
            if record["source"] == "docs":  # copied numbers keep their own provenance
                assert table["command"] and table["date"], (f.name, table["name"])
