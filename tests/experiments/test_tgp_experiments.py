"""Tests of the Student-t GP experiments (tgp-examples, tgp-evidence, tgp-fixed, tgp-benchmark)."""

import json

import numpy as np
import pytest

from robustep.experiments import registered
from robustep.experiments.tgp_benchmark import bayesian_bootstrap
from robustep.experiments.tgp_examples import make_example, true_function


def test_registered_with_quick_and_full():
    reg = registered()
    for name in ["tgp-examples", "tgp-evidence", "tgp-fixed", "tgp-benchmark"]:
        e = reg[name]
        assert e.quick and e.full and "Jylänki" in e.paper and e.claim


def test_make_example_layout():
    for ex in (1, 2):
        X, y = make_example(ex, n_regular=20, random_state=0)
        assert X.shape == (22, 1) and y.shape == (22,)
        regular = X[2:, 0]
        assert not np.any((regular > 1.0) & (regular < 3.0)), "gap without regular data"
        assert np.all((X[:2, 0] > 1.0) & (X[:2, 0] < 3.0))
        assert y[0] > true_function(X[0, 0], ex) + 1 and y[1] < true_function(X[1, 0], ex) - 1
    with pytest.raises(ValueError):
        make_example(3)


def test_bayesian_bootstrap_interval():
    rng = np.random.default_rng(0)
    v = rng.normal(1.0, 1.0, 400)
    m, lo, hi = bayesian_bootstrap(v)
    assert lo < m < hi and hi - lo == pytest.approx(2 * 1.96 / 20, rel=0.2)


def _run(name, cfg, tmp_path):
    e = registered()[name]
    res = e.run({**e.quick, **cfg}, 0)
    json.dumps(res)
    s = e.report(res, tmp_path)
    assert s.measured and s.tables
    for f in s.figures:
        assert (tmp_path / f).exists()
    return res, s


@pytest.mark.slow
def test_examples_tiny(tmp_path):
    res, s = _run(
        "tgp-examples",
        {
            "n_regular": 12,
            "n_grid": 21,
            "methods": ["LA", "VB", "MCMC"],
            "n_mcmc": 30,
            "fig2_grid": 31,
            "optimize_df": False,
        },
        tmp_path,
    )
    assert set(res["examples"]["1"]["methods"]) == {"LA", "VB", "MCMC"}
    assert res["tilted"]["eta_1.0"]["n_modes"] >= 1
    # the report explains the number of modes from the run's own q(f1, f2 | y3..yn)
    m3 = res["tilted"]["magnitude_3"]
    assert len(m3["q_sd"]) == 2 and all(k >= 1 for k in m3["n_modes"])
    assert "cavity sd from it" in s.notes and "sigma_se^2 = 3" in s.notes


@pytest.mark.slow
def test_evidence_tiny(tmp_path):
    res, s = _run(
        "tgp-evidence",
        {"n_regular": 10, "n_grid": 2, "ais_temperatures": 20, "ais_chains": 4, "max_seq_iter": 20},
        tmp_path,
    )
    e = res["examples"]["1"]
    assert np.shape(e["ep"]) == (2, 2) and np.all(np.isfinite(e["ais"]))


def test_benchmark_tiny(tmp_path):
    res, s = _run(
        "tgp-benchmark",
        {
            "friedman_n": 25,
            "friedman_test": 30,
            "methods": ["GA", "LA1", "MCMC"],
            "mcmc_samples": 20,
        },
        tmp_path,
    )
    r = res["datasets"]["friedman"]
    assert len(r["LA1"]["lpd"]) == 30 and np.all(np.isfinite(r["GA"]["lpd"]))
    assert "concrete-quality" in s.notes or "not public" in s.notes


def test_fixed_tiny(tmp_path):
    from robustep.datasets import DataUnavailableError

    try:
        res, s = _run(
            "tgp-fixed", {"n_max": 40, "n_hyper": 6, "n_folds": 2, "n_fixed": 20}, tmp_path
        )
    except DataUnavailableError:
        pytest.skip("Boston housing data not available")
    assert len(res["predictions"]["EP"]["lpd"]) == res["n"]


def _same_with_two_jobs(name, cfg, drop=()):
    """Run ``name`` on a tiny config with jobs=1 and jobs=2; the results must match exactly."""
    from robustep.experiments.parallel import use_jobs

    e = registered()[name]
    cfg = {**e.quick, **cfg}

    def canonical(res):
        def strip(x):
            if isinstance(x, dict):
                return {k: strip(v) for k, v in x.items() if k not in drop}
            return x

        return json.dumps(strip(res), sort_keys=True)

    serial = e.run(cfg, 3)
    with use_jobs(2):
        parallel = e.run(cfg, 3)
    assert canonical(serial) == canonical(parallel)
    return serial


def test_benchmark_jobs_match_serial():
    res = _same_with_two_jobs(
        "tgp-benchmark",
        {
            "friedman_sets": 1,
            "friedman_n": 20,
            "friedman_test": 15,
            "methods": ["GA", "LA1", "MCMC"],
            "mcmc_samples": 10,
            "mcmc_chains": 2,
        },
        drop=("cpu", "cpu_split"),  # CPU seconds are measured, not computed
    )
    r = res["datasets"]["friedman"]
    assert len(r["MCMC"]["lpd"]) == 15 and len(r["MCMC"]["rhat_max"]) == 1
    assert len(r["MCMC"]["ess_param"]) == 1 and r["MCMC"]["ess_param"][0]
    assert res["mcmc"] == {
        "samples": 10,
        "chains": 2,
        "hyper_every": 1,
        "hyper_sampler": "slice",
    }


def test_fixed_jobs_match_serial():
    from robustep.datasets import DataUnavailableError

    try:
        res = _same_with_two_jobs(
            "tgp-fixed",
            {"n_max": 30, "n_hyper": 6, "hyper_chains": 2, "n_folds": 2, "n_fixed": 10},
        )
    except DataUnavailableError:
        pytest.skip("Boston housing data not available")
    assert res["hyper_chains"] == 2 and len(res["predictions"]["MCMC"]["lpd"]) == 30


def test_evidence_jobs_match_serial():
    res = _same_with_two_jobs(
        "tgp-evidence",
        {
            "n_regular": 8,
            "n_grid": 2,
            "half_width": 0.5,
            "ais_temperatures": 10,
            "ais_chains": 2,
            "max_seq_iter": 20,
            "fep_map": False,
        },
    )
    assert np.shape(res["examples"]["2"]["ais"]) == (2, 2)
