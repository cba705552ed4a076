"""benchmarks/peers.py --quick runs, gives robustep's rows with finite numbers, and reports
a peer that does not import as one "not installed" row.

The peers (GPy, GPflow) are optional extras that CI never installs: the tests hide them
(``sys.modules[name] = None``, which makes their import fail) whether or not they are
installed, so they never import TensorFlow and take a few seconds.
"""

from __future__ import annotations

import math
import sys

import pytest

from _benchmarks import load_benchmark

ROBUSTEP_ROWS = ("robustep dense", "robustep sparse", "scikit-learn Laplace")
PEER_ROWS = ("GPy EP", "GPflow VGP", "GPflow SVGP")


def _peers():
    return load_benchmark("peers", "_peers_benchmark")


@pytest.fixture
def no_peers(monkeypatch):
    for name in ("GPy", "gpflow", "tensorflow"):
        monkeypatch.setitem(sys.modules, name, None)


@pytest.mark.parametrize("fixed", [False, True], ids=["optimised", "fixed"])
def test_quick_table(no_peers, capsys, fixed):
    peers = _peers()
    rows = peers.main(["--quick", "--threads", "1"] + (["--fixed"] if fixed else []))
    out = capsys.readouterr().out
    by_method = {r["method"]: r for r in rows}
    for name in ROBUSTEP_ROWS:
        row = by_method[name]
        assert row["status"] == "ok", row
        assert row["data"] == "synthetic" and row["n"] == 100
        for key in ("seconds", "error", "log_loss", "time_ratio", "d_error", "d_log_loss"):
            assert math.isfinite(row[key]), (name, key, row)
        assert 0.0 <= row["error"] <= 0.5 and row["log_loss"] < math.log(2) + 0.1
        assert f"| synthetic | {name} | 100" in out
        if fixed:  # every library at the same hyperparameters
            assert (row["amplitude"], row["length_scale"]) == pytest.approx((1.0, math.sqrt(2)))
    dense = by_method["robustep dense"]
    assert dense["time_ratio"] == 1.0 and dense["d_error"] == 0.0
    for name in PEER_ROWS:
        assert by_method[name]["status"] == "not installed"
        assert f"| all | {name} | — | not installed |" in out
    assert by_method["robustep cuda"]["status"] in {"ok", "no CUDA device", "not installed"}
    assert "versions: " in out and "BLAS: " in out


def test_cells_are_skipped_by_projected_memory_and_time():
    peers = _peers()
    cfg = {"memory_fraction": 0.5, "max_seconds": 60.0}
    memory = peers.physical_memory()
    huge = int(math.sqrt(memory / 8)) + 1  # one n x n float64 array > all the memory
    assert peers.skip_reason("GPflow VGP", huge, 256, 2, None, cfg).startswith(
        "skipped: projected memory"
    )
    assert peers.skip_reason("robustep dense", 2000, 256, 2, None, cfg) is None
    # 2 s at n = 500 -> 128 s at n = 2000 dense (cubic), 8 s sparse (linear)
    assert "projected 128 s" in peers.skip_reason("GPy EP", 2000, 256, 2, (500, 2.0), cfg)
    assert peers.skip_reason("robustep dense", 2000, 256, 2, (500, 2.0), cfg) is None  # reference
    assert peers.skip_reason("GPflow SVGP", 2000, 256, 2, (500, 2.0), cfg) is None
