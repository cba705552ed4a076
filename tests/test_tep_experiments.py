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
