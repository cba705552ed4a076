"""Tests for the experiment runner and report writer (with dummy experiments)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from robustep.datasets import DataUnavailableError
from robustep.experiments import base, discovery, progress
from robustep.experiments.report import (
    NumpyJSONEncoder,
    agreement_label,
    dump_json,
    markdown_table,
    markdown_to_html,
    table_title,
    titled,
    write_index,
)
from robustep.experiments.runner import (
    UnknownExperimentError,
    reproduce,
    resolve,
    run_experiment,
)

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 16  # enough for a file that is named .png


@pytest.fixture(autouse=True)
def registry(monkeypatch):
    """An empty registry; the built-in experiment modules are not imported."""
    reg: dict[str, base.Experiment] = {}
    monkeypatch.setattr(base, "_REGISTRY", reg)
    monkeypatch.setattr(discovery, "_load_builtin", lambda: None)
    monkeypatch.setattr(discovery, "_IMPORT_ERRORS", {})
    return reg


def make_experiment(name="dummy", *, run=None, report=None, claim="EP <converges> & wins."):
    calls = []

    def default_run(config, seed):
        calls.append((config, seed))
        return {"x": np.arange(3), "mean": np.float64(0.5), "n": config["n"], "seed": seed}

    def default_report(results, out_dir):
        (out_dir / "fig.png").write_bytes(PNG)
        return base.ExperimentSummary(
            measured=f"mean {results['mean']:.2f} over n={results['n']}",
            agrees=True,
            tables=[markdown_table(["a", "b"], [[1, 2.5]])],
            figures=["fig.png"],
            notes="smaller than the paper",
        )

    exp = base.Experiment(
        name=name,
        paper="Doe & Roe (2020)",
        source="Fig. 3",
        claim=claim,
        quick={"n": 3},
        full={"n": 300},
        run=run or default_run,
        report=report or default_report,
    )
    base.register(exp)
    return exp, calls


def _raise(exc):
    def run(config, seed):
        raise exc

    return run


# ---------------------------------------------------------------- JSON, tables


def test_json_encoder_handles_numpy_and_friends(tmp_path):
    @dataclasses.dataclass
    class D:
        a: int

    obj = {
        "arr": np.eye(2),
        "i": np.int32(3),
        "f": np.float32(0.5),
        "b": np.bool_(True),
        "p": Path("a/b"),
        "s": {2, 1},
        "d": D(1),
        "c": 1 + 2j,
        "nan": float("nan"),
        "t": (1, 2),
    }
    dump_json(obj, tmp_path / "r.json")
    back = json.loads((tmp_path / "r.json").read_text())
    assert back["arr"] == [[1.0, 0.0], [0.0, 1.0]] and back["i"] == 3 and back["f"] == 0.5
    assert back["b"] is True and back["p"] == "a/b" and back["s"] == [1, 2]
    assert back["d"] == {"a": 1} and back["c"] == [1.0, 2.0] and math.isnan(back["nan"])
    assert back["t"] == [1, 2]
    with pytest.raises(TypeError):
        json.dumps({"o": object()}, cls=NumpyJSONEncoder)


def test_markdown_table():
    t = markdown_table(["name", "value"], [["a|b", 1.234567], ["c", float("nan")]])
    assert t.splitlines() == ["| name | value |", "|---|---|", "| a\\|b | 1.235 |", "| c | nan |"]
    with pytest.raises(ValueError, match="as many cells"):
        markdown_table(["a"], [[1, 2]])


def test_markdown_to_html():
    t = markdown_table(["a|x", "<b>"], [[1, 2.0]])
    h = markdown_to_html("Intro & text\n\n" + t + "\ntrailing")
    assert h.splitlines() == [
        "<p>Intro &amp; text</p>",
        "<table><tr><th>a|x</th><th>&lt;b&gt;</th></tr>",
        "<tr><td>1</td><td>2</td></tr>",
        "</table>",
        "<p>trailing</p>",
    ]
    assert markdown_to_html("| not a table") == "<p>| not a table</p>"


def test_titled_tables():
    t = titled("Errors <per> method", markdown_table(["a"], [[1]]))
    assert table_title(t) == "Errors <per> method"
    assert table_title(markdown_table(["a"], [[1]])) is None
    h = markdown_to_html(t).splitlines()
    assert h[0] == "<p><strong>Errors &lt;per&gt; method</strong></p>"
    assert h[1] == "<table><tr><th>a</th></tr>"


def test_agreement_label():
    assert [agreement_label(v) for v in (True, False, None)] == ["yes", "no", "partly"]


# ---------------------------------------------------------------- one experiment


def test_run_experiment_writes_everything(tmp_path):
    exp, calls = make_experiment()
    rec = run_experiment(exp, tmp_path, mode="quick", seed=7)
    d = tmp_path / "dummy"
    assert rec.status == "ok" and rec.wall_time >= 0 and rec.out_dir == d
    assert calls == [({"n": 3}, 7)]
    assert json.loads((d / "results.json").read_text()) == {
        "x": [0, 1, 2],
        "mean": 0.5,
        "n": 3,
        "seed": 7,
    }
    meta = json.loads((d / "run.json").read_text())
    assert meta["status"] == "ok" and meta["seed"] == 7 and meta["config"] == {"n": 3}
    assert meta["summary"]["agrees"] is True
    readme = (d / "README.md").read_text()
    for text in ("# dummy", "Doe & Roe (2020)", "Fig. 3", "EP <converges>", "mean 0.50 over n=3"):
        assert text in readme
    assert "**Agrees with the paper:** yes" in readme
    assert "| a | b |" in readme and "![fig.png](fig.png)" in readme
    assert "smaller than the paper" in readme and '"n": 3' in readme and "wall time" in readme
    assert not (d / "traceback.txt").exists()
    page = (d / "index.html").read_text()
    assert "EP &lt;converges&gt;" in page and '<span class="yes">yes</span>' in page
    assert "<th>a</th>" in page and '<img src="fig.png"' in page and "results.json" in page
    assert '<a href="../index.html">' in page


def test_full_mode_uses_full_config(tmp_path):
    exp, calls = make_experiment()
    run_experiment(exp, tmp_path, mode="full")
    assert calls == [({"n": 300}, 0)]
    with pytest.raises(ValueError, match="mode must be one of"):
        run_experiment(exp, tmp_path, mode="medium")


def test_missing_figure_is_flagged(tmp_path):
    def report(results, out_dir):
        return base.ExperimentSummary("m", None, figures=["nothere.png"])

    exp, _ = make_experiment(report=report)
    run_experiment(exp, tmp_path)
    readme = (tmp_path / "dummy" / "README.md").read_text()
    assert "(missing: not written)" in readme and "partly" in readme
    assert "nothere.png (missing: not written)" in (tmp_path / "dummy" / "index.html").read_text()


def test_data_unavailable_is_no_data(tmp_path):
    exp, _ = make_experiment(run=_raise(DataUnavailableError("need sonar.csv from X")))
    rec = run_experiment(exp, tmp_path)
    assert rec.status == "no-data" and "sonar.csv" in rec.error
    assert not (tmp_path / "dummy" / "traceback.txt").exists()
    assert "data set is not available" in (tmp_path / "dummy" / "README.md").read_text()
    assert "need sonar.csv from X" in (tmp_path / "dummy" / "index.html").read_text()


def test_other_error_is_failure_with_traceback(tmp_path):
    exp, _ = make_experiment(run=_raise(ZeroDivisionError("boom")))
    rec = run_experiment(exp, tmp_path)
    assert rec.status == "failed" and rec.error_type == "ZeroDivisionError"
    tb = (tmp_path / "dummy" / "traceback.txt").read_text()
    assert "ZeroDivisionError: boom" in tb and "def run" not in tb
    assert "FAILED" in (tmp_path / "dummy" / "README.md").read_text()
    page = (tmp_path / "dummy" / "index.html").read_text()
    assert 'class="failed"' in page and "ZeroDivisionError: boom" in page


def test_failure_in_report_and_wrong_types(tmp_path):
    exp, _ = make_experiment("badreport", report=lambda r, d: {"measured": "x"})
    rec = run_experiment(exp, tmp_path)
    assert rec.status == "failed" and "ExperimentSummary" in rec.error
    assert (tmp_path / "badreport" / "results.json").is_file()  # raw results kept
    exp, _ = make_experiment("badrun", run=lambda c, s: [1, 2])
    rec = run_experiment(exp, tmp_path)
    assert rec.status == "failed" and "must return a dict" in rec.error


def test_rerun_removes_stale_traceback(tmp_path):
    exp, _ = make_experiment(run=_raise(RuntimeError("first")))
    run_experiment(exp, tmp_path)
    assert (tmp_path / "dummy" / "traceback.txt").exists()
    base._REGISTRY.clear()
    exp, _ = make_experiment()
    run_experiment(exp, tmp_path)
    assert not (tmp_path / "dummy" / "traceback.txt").exists()


def test_warnings_are_collected(tmp_path):
    import warnings

    def run(config, seed):
        for _ in range(3):
            warnings.warn("EP did not converge", RuntimeWarning, stacklevel=1)
        warnings.warn("other", UserWarning, stacklevel=1)
        return {}

    exp, _ = make_experiment(run=run, report=lambda r, d: base.ExperimentSummary("m", True))
    lines = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # would raise if the runner did not catch them
        rec = reproduce(["dummy"], tmp_path, log=lines.append)[0]
    assert rec.status == "ok"
    assert rec.warnings == [
        {"category": "RuntimeWarning", "message": "EP did not converge", "count": 3},
        {"category": "UserWarning", "message": "other", "count": 1},
    ]
    assert "4 warnings" in lines[0]
    readme = (tmp_path / "dummy" / "README.md").read_text()
    assert "3 × `RuntimeWarning`: EP did not converge" in readme
    assert "EP did not converge" in (tmp_path / "dummy" / "index.html").read_text()
    assert json.loads((tmp_path / "dummy" / "run.json").read_text())["warnings"][1]["count"] == 1


def test_index_is_written_on_interrupt(tmp_path):
    make_experiment("a")
    make_experiment("b", run=_raise(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        reproduce(["a", "b"], tmp_path, log=None)
    assert "a/index.html" in (tmp_path / "index.html").read_text()


def test_figures_are_closed(tmp_path):
    plt = pytest.importorskip("matplotlib.pyplot")

    def report(results, out_dir):
        fig, ax = plt.subplots()
        ax.plot([0, 1])
        ax.set(xlabel="x", ylabel="y")
        fig.savefig(out_dir / "plot.png", dpi=20)
        return base.ExperimentSummary("m", True, figures=["plot.png"])

    exp, _ = make_experiment(report=report)
    run_experiment(exp, tmp_path)
    assert plt.get_fignums() == []


# ---------------------------------------------------------------- several + index


def test_reproduce_all_continues_after_failures_and_writes_index(tmp_path):
    make_experiment("a-ok")
    make_experiment("b-nodata", run=_raise(DataUnavailableError("need pima.csv")))
    make_experiment("c-fail", run=_raise(KeyError("oops")))
    lines = []
    records = reproduce(["all"], tmp_path, seed=1, log=lines.append)
    assert [r.status for r in records] == ["ok", "no-data", "failed"]
    assert len(lines) == 5 and lines[0].startswith("[1/3] a-ok") and " s " in lines[0]
    assert "LACKED DATA" in lines[1] and "FAILED (KeyError" in lines[2]
    assert "1 ok, 1 lacked data, 1 failed" in lines[3] and "FAILED: c-fail" in lines[3]
    assert lines[4] == "Warnings: none."

    html = (tmp_path / "index.html").read_text()
    assert html.index("FAILED (1)") < html.index("<h2>Results</h2>") < html.index("Lacked data")
    assert "c-fail/traceback.txt" in html and "need pima.csv" in html
    assert '<a href="a-ok/index.html">a-ok</a>' in html and "b-nodata/index.html" in html
    assert '<img class="thumb" src="a-ok/fig.png"' in html
    assert "EP &lt;converges&gt; &amp; wins." in html and "<converges>" not in html
    assert '<td class="yes">yes</td>' in html and "Doe &amp; Roe (2020) (Fig. 3)" in html

    md = (tmp_path / "README.md").read_text()
    assert md.index("FAILED (1)") < md.index("## Results") < md.index("## Lacked data")
    assert "[a-ok](a-ok/README.md)" in md and "[fig.png](a-ok/fig.png)" in md
    assert "| yes |" in md and "mean 0.50 over n=3" in md and "| quick, seed 1, " in md


def test_quick_runs_say_they_are_smaller_than_the_papers(tmp_path):
    make_experiment("a-ok")
    lines = []
    reproduce(["a-ok"], tmp_path / "q", mode="quick", log=lines.append)
    assert "smaller problems than the papers" in lines[-2]
    assert "docs/full-runs/README.md" in lines[-2] and "--full" in lines[-2]
    for page in ("index.html", "README.md"):
        text = (tmp_path / "q" / page).read_text()
        assert "smaller problems than the papers" in text
        assert text.index("docs/full-runs/README.md") < text.index("Results")
    assert (
        "<code>robustep reproduce NAME --full</code>" in (tmp_path / "q" / "index.html").read_text()
    )
    lines = []
    reproduce(["a-ok"], tmp_path / "f", mode="full", log=lines.append)
    assert not any("smaller problems" in line for line in lines)
    assert "smaller problems" not in (tmp_path / "f" / "index.html").read_text()


def test_index_is_one_scannable_line_per_experiment(tmp_path):
    def report(results, out_dir):
        for name in ("first.png", "second.png"):
            (out_dir / name).write_bytes(PNG)
        return base.ExperimentSummary(
            measured="A long account of every number measured, only on the experiment page.",
            agrees=None,
            figures=["first.png", "second.png"],
            key_number="MCMC R-hat 1.74 > 1.1: reference not converged",
        )

    make_experiment("a-ok", report=report, claim="EP wins on Boston. It also wins elsewhere.")
    make_experiment("b-plain")
    reproduce(["all"], tmp_path, log=None)
    html = (tmp_path / "index.html").read_text()
    row = next(line for line in html.splitlines() if "a-ok/index.html" in line)
    assert "<td>MCMC R-hat 1.74 &gt; 1.1: reference not converged</td>" in row
    assert '<td class="partly">partly</td>' in row
    assert ">EP wins on Boston.</td>" in row and 'title="EP wins on Boston. It also' in row
    assert 'src="a-ok/first.png"' in row and "second.png" not in html
    assert "A long account" not in html
    plain = next(line for line in html.splitlines() if "b-plain/index.html" in line)
    assert "<td>mean 0.50 over n=3</td>" in plain  # no key number: the start of measured
    md = (tmp_path / "README.md").read_text()
    assert "| partly | MCMC R-hat 1.74 > 1.1: reference not converged |" in md
    assert "second.png" not in md and "A long account" not in md
    page = (tmp_path / "a-ok" / "index.html").read_text()
    assert "A long account" in page and "second.png" in page
    assert "<b>Deciding number:</b> MCMC R-hat 1.74" in page


def test_index_accumulates_earlier_runs(tmp_path):
    make_experiment("first")
    make_experiment("second")
    reproduce(["first"], tmp_path, log=None)
    records = reproduce(["second"], tmp_path, log=None)
    assert [r.name for r in records] == ["second"]
    listed = write_index(tmp_path)
    assert [r["name"] for r in listed] == ["first", "second"]
    assert "first/index.html" in (tmp_path / "index.html").read_text()


def test_index_with_nothing(tmp_path):
    assert reproduce(["all"], tmp_path, log=None) == []
    assert "No experiment produced results" in (tmp_path / "index.html").read_text()
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "run.json").write_text("{not json")
    assert write_index(tmp_path) == []


def test_resolve_names(tmp_path):
    make_experiment("a")
    make_experiment("b")
    assert [e.name for e in resolve(["b", "a", "b"])] == ["b", "a"]
    assert [e.name for e in resolve(["all"])] == ["a", "b"]
    with pytest.raises(UnknownExperimentError, match="unknown experiment 'zz'; valid names: a, b"):
        resolve(["a", "zz"])
    with pytest.raises(UnknownExperimentError, match="'zz'"):
        resolve(["all", "zz"])
    with pytest.raises(ValueError, match="no experiment named"):
        resolve([])
    with pytest.raises(ValueError, match="mode"):
        reproduce(["a"], tmp_path, mode="slow", log=None)


def test_import_errors_are_reported_as_failures(tmp_path, monkeypatch):
    tb = 'Traceback (most recent call last):\n  File "x.py"\nImportError: no module named zzz\n'
    monkeypatch.setattr(discovery, "_IMPORT_ERRORS", {"broken_mod": tb})
    lines = []
    records = reproduce(["all"], tmp_path, log=lines.append)
    assert [(r.name, r.status) for r in records] == [("broken_mod", "failed")]
    assert (tmp_path / "broken_mod" / "traceback.txt").read_text() == tb
    assert "no module named zzz" in (tmp_path / "index.html").read_text()
    assert any("FAILED to import" in line for line in lines)


def test_register_rejects_duplicate_names():
    exp, _ = make_experiment("dup")
    base.register(exp)  # same object: fine
    with pytest.raises(ValueError, match="already registered"):
        make_experiment("dup")


# ---------------------------------------------------------------- progress


def test_progress_plain_prints(capsys):
    assert list(progress(range(20), "sweeps")) == list(range(20))
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 10 and err[-1].strip().startswith("sweeps: 20/20")
    assert list(progress(iter(range(3)), "gen")) == [0, 1, 2]  # unknown length
    assert "gen: 3 (" in capsys.readouterr().err


def test_progress_disable(capsys):
    assert list(progress(range(5), "x", disable=True)) == list(range(5))
    assert capsys.readouterr().err == ""


def test_progress_under_the_runner_feeds_the_one_display(tmp_path, capsys):
    """Inside an experiment, progress() reports to the runner's display (no own output)."""
    seen = []

    def run(config, seed):
        return {"items": list(progress(range(4), "loop")), "mean": 0.5, "n": 4}

    exp, _ = make_experiment("looped", run=run)
    rec = run_experiment(exp, tmp_path, on_units=lambda u: seen.append((u.done, u.total)))
    assert rec.status == "ok"
    assert seen == [(0, 4), (1, 4), (2, 4), (3, 4), (4, 4)]
    assert "loop" not in capsys.readouterr().err


def test_live_display_draws_one_status_line(tmp_path):
    import io
    import time

    from robustep.experiments.parallel import UnitProgress
    from robustep.experiments.runner import _clock, _Display

    assert _clock(75.2) == "1:15" and _clock(3725) == "1:02:05"
    stream = io.StringIO()
    display = _Display(3, live=True, stream=stream)
    display.begin(2, "rep-toy")
    display.on_units(UnitProgress(5, 20, 1, time.perf_counter() - 8.0))
    display.end()
    display.close()
    text = stream.getvalue()
    assert "[2/3] rep-toy" in text and "units 5/20, ~0:30 left (1 resumed)" in text
    assert text.endswith("\r\033[K") and "\n" not in text  # one line, cleared at the end


def test_live_display_of_experiments_side_by_side():
    import io
    import time

    from robustep.experiments.runner import _Display

    stream = io.StringIO()
    display = _Display(4, live=True, stream=stream)
    t0 = time.perf_counter()
    display.running({"a": t0 - 65.0, "b": t0})
    display.finished("a", ["b", "c", "d"])  # a is done: c starts beside b
    assert list(display.side_by_side) == ["b", "c"]
    display.finished("c", ["b", "d"])
    assert list(display.side_by_side) == ["b", "d"] and display.k == 2
    display.close()
    text = stream.getvalue()
    assert "[0/4 done] running: a 1:05, b 0:00" in text and "\n" not in text
