"""The three registered t-EP experiments run end to end on tiny configurations."""

import json

import numpy as np
import pytest

from robustep.experiments import tep_bpm_permutation, tep_outliers, tep_uci

_MODULES = {
    "tep-bpm-permutation": tep_bpm_permutation,
    "tep-outliers": tep_outliers,
    "tep-uci": tep_uci,
}


def registered():
    """Our three experiments only (importing every registered module is slow)."""
    return {k: m.EXPERIMENT for k, m in _MODULES.items()}


def _run(name, config, tmp_path):
    exp = registered()[name]
    res = exp.run(config, 0)
    json.dumps(res)  # JSON-serialisable
    summary = exp.report(res, tmp_path)
    for fig in summary.figures:
        assert (tmp_path / fig).exists()
    assert summary.tables and summary.measured
    return res, summary


def test_registered():
    from robustep.experiments.base import _REGISTRY

    for name, exp in registered().items():
        assert _REGISTRY[name] is exp and exp.name == name
        assert set(exp.quick) == set(exp.full)


def test_bpm_permutation_tiny(tmp_path):
    cfg = {
        "n": 60,
        "n_test": 200,
        "df": 10.0,
        "label_noise": 0.0,
        "n_permutations": 2,
        "max_iter": 100,
        "tol": 1e-6,
    }
    res, s = _run("tep-bpm-permutation", cfg, tmp_path)
    ep = [r["w"] for r in res["runs"] if r["method"] == "ep"]
    np.testing.assert_allclose(ep[0], ep[1], atol=1e-5)


def test_outliers_tiny(tmp_path):
    cfg = {
        "n": 20,
        "n_outliers": 2,
        "n_test": 100,
        "df": 10.0,
        "label_noise": 0.0,
        "max_iter": 100,
        "grid": 11,
        "optimizer": None,
    }
    _run("tep-outliers", cfg, tmp_path)


def test_uci_tiny_synthetic(tmp_path):
    cfg = {
        "datasets": ["synthetic"],
        "flips": [0.1],
        "n_splits": 1,
        "train_fraction": 0.3,
        "max_n": 60,
        "ard": False,
        "df": 10.0,
        "label_noise": 0.05,
        "max_iter": 100,
        "optimizer": None,
    }
    res, s = _run("tep-uci", cfg, tmp_path)
    assert {r["model"] for r in res["results"]} == {"GPC", "STC"}


def test_uci_missing_data_propagates(monkeypatch, tmp_path):
    import robustep.datasets as ds

    def missing(*a, **k):
        raise ds.DataUnavailableError("no file")

    monkeypatch.setattr(ds, "load_pima", missing)
    cfg = dict(registered()["tep-uci"].quick, datasets=["pima"])
    with pytest.raises(ds.DataUnavailableError):
        registered()["tep-uci"].run(cfg, 0)


# ------------------------------------------------------------------ jobs = 2 gives the same
def _same_with_two_jobs(name, cfg):
    from robustep.experiments.parallel import use_jobs

    exp = registered()[name]
    serial = exp.run(cfg, 3)
    with use_jobs(2):
        parallel = exp.run(cfg, 3)
    serial.pop("unit_cpu_seconds", None)
    parallel.pop("unit_cpu_seconds", None)
    assert json.dumps(serial, sort_keys=True) == json.dumps(parallel, sort_keys=True)
    return serial


def test_bpm_permutation_jobs_do_not_change_results():
    cfg = {
        "n": 40,
        "n_test": 100,
        "df": 10.0,
        "label_noise": 0.0,
        "n_permutations": 3,
        "max_iter": 50,
        "tol": 1e-6,
        "labels": "xor",
    }
    res = _same_with_two_jobs("tep-bpm-permutation", cfg)
    assert [r["perm"] for r in res["runs"]] == [0, 0, 1, 1, 2, 2]
    # different permutations were drawn (ADF depends on the order)
    adf = [r["w"] for r in res["runs"] if r["method"] == "adf"]
    assert not np.allclose(adf[0], adf[1])


def test_outliers_jobs_do_not_change_results():
    cfg = {
        "n": 16,
        "n_outliers": 2,
        "n_test": 50,
        "df": 10.0,
        "label_noise": 0.0,
        "max_iter": 50,
        "grid": 7,
        "optimizer": None,
    }
    res = _same_with_two_jobs("tep-outliers", cfg)
    assert set(res["models"]) == {"STC", "GPC"}


def test_uci_jobs_do_not_change_results():
    cfg = {
        "datasets": ["synthetic"],
        "flips": [0.0, 0.1],
        "n_splits": 2,
        "train_fraction": 0.3,
        "max_n": 40,
        "ard": False,
        "df": 10.0,
        "label_noise": 0.05,
        "max_iter": 50,
        "optimizer": None,
    }
    res = _same_with_two_jobs("tep-uci", cfg)
    rows = res["results"]
    assert [(r["split"], r["flip"], r["model"]) for r in rows[:4]] == [
        (0, 0.0, "GPC"),
        (0, 0.0, "STC"),
        (0, 0.1, "GPC"),
        (0, 0.1, "STC"),
    ]


def test_uci_units_share_splits_and_nest_flips():
    X, y = tep_uci._load("synthetic", 0)
    cfg = {"max_n": None, "train_fraction": 0.5}
    base = {"d": 0, "dataset": "synthetic", "split": 1}
    data = {
        flip: tep_uci.unit_data(cfg, 5, X, y, dict(base, flip=flip)) for flip in (0.0, 0.05, 0.1)
    }
    clean = data[0.0][1]
    for flip in (0.05, 0.1):
        np.testing.assert_array_equal(data[flip][0], data[0.0][0])  # same split
        np.testing.assert_array_equal(data[flip][3], data[0.0][3])
        assert np.sum(data[flip][1] != clean) == round(flip * len(clean))
    assert np.all((data[0.05][1] != clean) <= (data[0.1][1] != clean))  # nested flips
    other = tep_uci.unit_data(cfg, 5, X, y, dict(base, split=0, flip=0.0))
    assert not np.array_equal(other[0], data[0.0][0])
