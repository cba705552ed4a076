"""benchmarks/learning.py: its quick form runs and reports finite numbers, the training
clock excludes evaluation, and the verdicts (time to SVGP's best log loss, hyperparameters
at a bound) follow from the curves.

The GPflow side runs in another Python (``--peer-python``); its test runs only where
/work/peers-venv (or $ROBUSTEP_PEER_PYTHON) has GPflow, and is slow (TensorFlow's start).
"""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from _benchmarks import load_benchmark

PEER_PYTHON = Path(os.environ.get("ROBUSTEP_PEER_PYTHON", "/work/peers-venv/bin/python"))


@pytest.fixture(scope="module")
def learning():
    yield load_benchmark("learning", "_learning_benchmark")
    sys.modules.pop("_learning_benchmark", None)


def _curve(points, key="log_loss"):
    return [{"epoch": i + 1, "train_s": t, key: v, "error": 0.2} for i, (t, v) in enumerate(points)]


def test_time_to_reach_and_bounds(learning):
    curve = _curve([(10.0, 0.5), (20.0, 0.4), (30.0, 0.35)])
    assert learning.time_to_reach(curve, "log_loss", 0.4) == 20.0
    assert learning.time_to_reach(curve, "log_loss", 0.3) is None
    assert learning.time_to_reach(curve, "log_loss", 0.36, budget=25.0) is None
    assert learning.time_to_reach(curve, "log_loss", 0.36, budget=30.0) == 30.0
    assert learning.at_bound(1e5) and learning.at_bound(0.995e5) and learning.at_bound(2e-5 / 2)
    assert learning.at_bound(3e5)  # beyond the bound counts too
    assert not learning.at_bound(0.9e5) and not learning.at_bound(1.0)


def test_classification_metrics_match_scikit_learn(learning):
    from scipy.special import ndtr
    from sklearn.metrics import log_loss

    rng = np.random.default_rng(0)
    mean, var = rng.normal(size=200), rng.uniform(0.1, 2.0, 200)
    y = np.where(rng.random(200) < ndtr(mean), 1, -1)
    p = ndtr(mean / np.sqrt(1 + var))
    got = learning.classification_metrics(mean, var, y)
    assert got["log_loss"] == pytest.approx(log_loss(y > 0, p), rel=1e-10)
    assert got["error"] == pytest.approx(np.mean((p > 0.5) != (y > 0)))


def _runs(robustep_points, svgp_points, amplitude=1.0):
    params = {"amplitude": amplitude, "length_scale": 2.0}
    common = {"params": params, "steps": 10, "eval_s": 0.1, "stopped": "budget"}
    return {
        "robustep": {**common, "curve": _curve(robustep_points)},
        "SVGP Adam": {**common, "curve": _curve(svgp_points)},
        "SVGP natgrad+Adam": {"error": "not run"},
    }


def test_classification_verdict(learning, capsys):
    cfg = {"budget": 600.0}
    svgp = [(100.0, 0.40), (300.0, 0.33), (600.0, 0.34)]  # best 0.33 after 300 s
    fast = [(60.0, 0.36), (140.0, 0.329), (600.0, 0.32)]
    assert learning.report_classification(_runs(fast, svgp), cfg) is True
    out = capsys.readouterr().out
    assert "| robustep | 0.3300 | 140 | 0.4667 |" in out
    assert "| SVGP natgrad+Adam | — |" in out and ": met." in out
    slow = [(60.0, 0.36), (200.0, 0.329)]  # reaches it, but after more than half the time
    assert learning.report_classification(_runs(slow, svgp), cfg) is False
    late = [(60.0, 0.36), (610.0, 0.32)]  # only after the budget
    assert learning.report_classification(_runs(late, svgp), cfg) is False
    bound = _runs(fast, svgp, amplitude=1e5)  # reaches it with the amplitude at its bound
    assert learning.report_classification(bound, cfg) is False
    assert "| robustep | 1e+05 | 2.0000 | amplitude |" in capsys.readouterr().out


def test_training_clock_excludes_evaluation(learning):
    from robustep.likelihoods import Probit

    X, y, Xt, yt = learning.classification_data(600, 100, d=2)
    Z0 = learning.kmeans_start(X, 8)
    pause = 0.2

    def evaluate(latent):
        time.sleep(pause)
        return learning.classification_metrics(*latent(Xt), yt)

    budget = 0.6
    t0 = time.perf_counter()
    run = learning.run_robustep(X, y, Z0, Probit(), budget, evaluate=evaluate,
                                eval_every=0.0, batch_size=100)  # fmt: skip
    wall = time.perf_counter() - t0
    curve = run["curve"]
    assert len(curve) >= 3 and run["stopped"] == "callback"
    # every epoch is a checkpoint; the sleeps are on the evaluation clock, not training's
    assert [p["epoch"] for p in curve] == list(range(1, len(curve) + 1))
    assert run["eval_s"] >= pause * len(curve)
    assert curve[-1]["train_s"] >= budget > curve[-2]["train_s"]
    assert curve[-1]["train_s"] + run["eval_s"] <= wall + 0.05
    assert all(b["train_s"] > a["train_s"] for a, b in zip(curve, curve[1:], strict=False))
    assert all(0 <= p["error"] <= 1 and math.isfinite(p["log_loss"]) for p in curve)
    assert set(run["params"]) == {"amplitude", "length_scale"}


def test_quick_form_runs(learning, tmp_path, capsys):
    figure = tmp_path / "curves.png"
    out = learning.main(["--quick", "--budget", "1.5", "--reg-budget", "1.5", "--figure",
                         str(figure), "--million-budget", "1", "--workers", "0",
                         "--figure-million", str(tmp_path / "million.png")])  # fmt: skip
    assert "million" in out  # the quick form without --parts (make bench) runs it too
    text = capsys.readouterr().out
    run = out["classification"]["robustep"]
    assert run["curve"] and run["curve"][-1]["train_s"] >= 1.5
    assert 0 < run["curve"][-1]["log_loss"] < math.log(2)
    for name in ("SVGP natgrad+Adam", "SVGP Adam"):
        assert out["classification"][name] == {"error": "not run (no --peer-python)"}
    reg = out["regression"]
    assert all(math.isfinite(reg[k]["curve"][-1]["mae"]) for k in reg if "curve" in reg[k])
    assert {"df", "scale"} <= set(reg["robustep, outliers"]["params"])
    ev_full, ev_sto = out["small_data"]["evidence"]
    assert abs(ev_sto - ev_full) < 0.05 * abs(ev_full)
    assert figure.stat().st_size > 10_000
    for heading in ("classification: final values", "classification: time to SVGP's best "
                    "log loss", "classification: hyperparameters at the end",
                    "regression: final values",
                    "small data: stochastic learner against the full-batch optimum"):  # fmt: skip
        assert f"### {heading}\n" in text


def test_suite_names(learning):
    assert learning._suite_name(["--full"]) == "learning"
    assert learning._suite_name(["--parts", "alpha", "--full"]) == "learning_alpha"
    assert learning._suite_name(["--full", "--parts", "tune"]) == "learning_tuning"
    assert learning._suite_name(["--parts", "alpha", "tune"]) == "learning"
    assert learning._suite_name(["--parts", "million", "--full"]) == "learning_million"


def _million_runs(dask_loss, ref_loss):
    def run(loss, **extra):
        return {"curve": _curve([(5.0, loss + 0.05), (9.0, loss)]), "steps": 10, "eval_s": 0.1,
                "stopped": "callback", "params": {}, "final": {"error": 0.2, "log_loss": loss},
                "epochs": 2, "alpha": 1.0, "fit_s": 12.0, "outside_learning_s": 3.0,
                **extra}  # fmt: skip

    peak = {"driver": 2**28, "workers": {"a": 2**27, "b": 3 * 2**26}}
    svgp = {"curve": _curve([(4.0, 0.5), (8.0, 0.4)]), "steps": 9, "eval_s": 0.1,
            "stopped": "budget", "params": {}}  # fmt: skip
    return {"robustep, Dask": run(dask_loss, peak_rss=peak),
            "robustep, in memory, n = 100": run(ref_loss), "SVGP Adam": svgp}  # fmt: skip


def test_million_verdict_and_memory(learning, capsys):
    cfg = {"million_n": 1000, "million_ref_n": 100}
    assert learning.report_million(_million_runs(0.309, 0.30), cfg) is True
    out = capsys.readouterr().out
    assert "| after the final EP fit | 0.3000 | 0.3090 | 0.0090 | yes |" in out
    assert "| worker b | 192 |" in out and "| driver | 256 |" in out
    # the largest worker in the final values; SVGP's best (0.4) reached after 8 s, robustep
    # after 5 s
    assert "| 0.2000 | 0.3090 | 12 | 3.0000 | 192 | callback |" in out
    assert "| robustep, Dask | 0.4000 | 5.0000 | 0.6250 |" in out
    assert learning.report_million(_million_runs(0.311, 0.30), cfg) is False
    assert ": NOT met." in capsys.readouterr().out


def test_million_part_reads_a_dask_array(learning, tmp_path, capsys):
    pytest.importorskip("dask.array")
    out = learning.main(["--quick", "--parts", "million", "--workers", "0",
                         "--million-budget", "0.5", "--figure-million",
                         str(tmp_path / "million.png")])  # fmt: skip
    runs = out["million"]
    big, ref = runs["robustep, Dask"], runs["robustep, in memory, n = 2000"]
    assert big["alpha"] == 1.0 and ref["alpha"] == 0.5  # FITC-EP on Dask, α = 0.5 in memory
    for run in (big, ref):
        assert run["curve"] and 0 < run["final"]["log_loss"] < math.log(2)
        assert run["fit_s"] > run["outside_learning_s"] > 0
    assert big["peak_rss"]["driver"] > 0 and "workers" not in big["peak_rss"]
    assert "### million: against the in-memory learner\n" in capsys.readouterr().out
    assert (tmp_path / "million.png").stat().st_size > 10_000


@pytest.mark.slow
@pytest.mark.skipif(not PEER_PYTHON.exists(), reason="no Python with GPflow (peers venv)")
def test_svgp_worker_runs(learning):
    X, y, Xt, yt = learning.classification_data(500, 200, d=2)
    Z0 = learning.kmeans_start(X, 8)
    run = learning.run_svgp(PEER_PYTHON, X, y, Z0, Xt, yt, likelihood="bernoulli", budget=1.0,
                            eval_every=0.3, batch_size=100, threads=1, learning_rate=0.01,
                            natgrad=True)  # fmt: skip
    assert "error" not in run, run
    assert run["curve"][-1]["train_s"] >= 1.0 and run["steps"] > 5
    assert all(0 <= p["error"] <= 1 and p["log_loss"] < 1 for p in run["curve"])
    assert run["params"]["amplitude"] > 0 and run["compile_s"] > 0


def test_multiclass_part_rows(learning, monkeypatch):
    """The multiclass part fits both learners on both problems and reports finite
    numbers: accuracy in [0, 1], a positive log loss, epochs only for the learner."""
    monkeypatch.setattr(learning, "multiclass_data", _small_multiclass(learning.multiclass_data))
    cfg = dict(learning.QUICK, digits_n=120, digits_m=4, digits_batch=40, mc_n=150, mc_m=4)
    rows = learning.multiclass(cfg, None)
    assert [r[3] for r in rows] == ["stochastic, batch 40", "full_batch", "stochastic",
                                    "full_batch"]  # fmt: skip
    for row in rows:
        accuracy, loss = row[7], row[8]
        assert 0.0 <= accuracy <= 1.0 and math.isfinite(loss) and loss > 0
    assert rows[0][6] != "—" and rows[1][6] == "—"


def _small_multiclass(generate):
    """The 3-class generator with a 300-point test set (the part asks for 5000)."""
    return lambda n, n_test, seed=0: generate(n, min(n_test, 300), seed)
