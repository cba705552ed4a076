"""rep-toy, rep-synthetic, rep-uci: registration, tiny runs and reports."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from robustep.datasets import DataUnavailableError
from robustep.experiments import registered, rep_synthetic, rep_toy, rep_uci

SHARED = Path(__file__).resolve().parents[3] / "shared" / "datasets"


def test_registered_with_quick_and_full():
    exps = registered()
    for name in ("rep-toy", "rep-synthetic", "rep-uci"):
        e = exps[name]
        assert e.quick and e.full and e.claim and e.source


def test_exact_toy_posterior_matches_grid_and_importance_sampling():
    X, y = rep_toy.TOY_X, rep_toy.TOY_Y
    mean, cov, log_Z = rep_toy.exact_posterior(X, y, 0.2)
    g_mean, g_cov = rep_toy.grid_posterior(X, y, 0.2, size=601)
    np.testing.assert_allclose(g_mean, mean, atol=5e-3)
    np.testing.assert_allclose(g_cov, cov, atol=5e-3)
    is_mean, is_cov, ess = rep_toy.importance_posterior(X, y, 0.2, 200_000,
                                                        np.random.default_rng(0))  # fmt: skip
    np.testing.assert_allclose(is_mean, mean, atol=1e-2)
    np.testing.assert_allclose(is_cov, cov, atol=1e-2)
    # evidence: prior probability-weighted likelihood, a number in (eps^5, (1-eps)^5)
    assert 0.2**5 < np.exp(log_Z) < 0.8**5


def test_exact_toy_posterior_without_noise_sources_is_prior():
    """eps = 0.5 makes the likelihood flat: the exact posterior is the prior N(0, I)."""
    mean, cov, log_Z = rep_toy.exact_posterior(rep_toy.TOY_X, rep_toy.TOY_Y, 0.5)
    np.testing.assert_allclose(mean, 0.0, atol=1e-12)
    np.testing.assert_allclose(cov, np.eye(2), atol=1e-12)


def test_weight_posterior_from_sites_is_gp_posterior():
    """The w-posterior built from sites reproduces the latent posterior of f = X w."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((5, 2))
    tau, nu = rng.uniform(0.1, 1, 5), rng.standard_normal(5)
    m, C = rep_toy.weight_posterior(X, tau, nu)
    K = X @ X.T  # singular (rank 2): use Sigma = K - K (K + T^-1)^-1 K
    Sigma = K - K @ np.linalg.solve(K + np.diag(1.0 / tau), K)
    np.testing.assert_allclose(X @ C @ X.T, Sigma, atol=1e-8)
    np.testing.assert_allclose(X @ m, Sigma @ nu, atol=1e-8)


def test_rep_toy_tiny_run_and_report(tmp_path):
    cfg = dict(rep_toy.EXPERIMENT.quick, powers=[0.8, 1.0], n_c=2, c_log10_range=[3.0, 4.0],
               grid_size=101, is_samples=20_000)  # fmt: skip
    res = rep_toy.run(cfg, 0)
    json.dumps(res)
    ep = res["methods"]["EP"]
    assert ep["converged"]
    # c = 1e4 is large: REP must equal EP on this toy
    assert res["rep_sweep"][-1]["err_mean"] == pytest.approx(ep["err_mean"], abs=1e-10)
    assert max(res["rep_sweep"][-1]["b"]) == 0.0
    # the second toy: REP vs EP reported on both, with relative mean errors
    second = res["second_toy"]
    assert len(second["rep_sweep"]) == len(res["c_values"])
    summary = rep_toy.report(res, tmp_path)
    assert summary.agrees in (True, False, None) and summary.measured
    assert "second toy" in summary.tables[-1] and "second toy" in summary.measured
    assert "rep_toy_both.png" in summary.figures and set(summary.captions) == set(summary.figures)
    for f in summary.figures:
        assert (tmp_path / f).stat().st_size > 0


def test_rep_toy_non_converged_runs_are_caught_and_reported(tmp_path):
    """REP at c = 1 does not converge on the paper's toy: a result, so no
    ConvergenceWarning escapes the run, and the report names the run."""
    cfg = dict(rep_toy.EXPERIMENT.quick, powers=[1.0], n_c=1, c_log10_range=[0.0, 0.0],
               grid_size=101, is_samples=20_000)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        res = rep_toy.run(cfg, 0)
    assert not res["rep_sweep"][0]["converged"] and res["rep_sweep"][0]["residual"] > 1e-9
    assert res["methods"]["EP"]["converged"] and res["methods"]["EP"]["residual"] < 1e-9
    failed = rep_toy.non_converged_runs(res)
    assert any(f.startswith("REP (c=1), paper's toy: 300 sweeps") for f in failed)
    assert not any(f.startswith("EP,") for f in failed)
    notes = rep_toy.report(res, tmp_path).notes
    assert "did not converge" in notes and "REP (c=1), paper's toy" in notes


def test_second_toy_is_the_first_data_set_where_ep_is_visibly_wrong():
    X, y, k, tried = rep_toy.boundary_toy(0.2)
    assert X.shape == (8, 2) and set(np.unique(y)) <= {-1.0, 1.0}
    assert len(tried) == k + 1 and tried[-1] >= 0.05 and all(t < 0.05 for t in tried[:-1])
    # the rule looks at EP only: recomputing EP's relative error on the chosen set agrees
    mean, cov, _ = rep_toy.exact_posterior(X, y, 0.2)
    ep = rep_toy.run_method(X, y, 0.2)
    assert rep_toy.relative_mean_error(ep["mean"], mean, cov) == pytest.approx(tried[-1])
    # the exact posterior of the second toy agrees with the grid check (midpoint rule across
    # the likelihood's steps: error O(cell width 0.0175)), far below EP's error
    g_mean, g_cov = rep_toy.grid_posterior(X, y, 0.2, size=801)
    np.testing.assert_allclose(g_mean, mean, atol=4e-3)
    np.testing.assert_allclose(g_cov, cov, atol=4e-3)
    assert np.linalg.norm(np.subtract(ep["mean"], mean)) > 5 * np.linalg.norm(g_mean - mean)


def test_relative_mean_error_is_in_units_of_the_posterior_std():
    cov = np.diag([4.0, 0.25])  # RMS std √((4 + 0.25)/2)
    assert rep_toy.relative_mean_error([3.0, 4.0], [0.0, 0.0], cov) == pytest.approx(
        5.0 / np.sqrt(2.125)
    )


def test_rep_synthetic_tiny_run_and_report(tmp_path):
    cfg = dict(rep_synthetic.EXPERIMENT.quick, n_train_per_class=10, n_test_per_class=20,
               widths=[1.0], n_folds=2, cv_max_iter=3, max_iter=3, boundary_grid=5,
               flip_rates=[0.2])  # fmt: skip
    res = rep_synthetic.run(cfg, 0)
    json.dumps(res)
    assert len(res["runs"]) == 4
    for r in res["runs"]:
        assert 0.0 <= r["test_error"] <= 1.0 and r["n_iter"] <= 3
    summary = rep_synthetic.report(res, tmp_path)
    assert len(summary.tables) == 1 and "REP" in summary.tables[0]
    for f in summary.figures:
        assert (tmp_path / f).stat().st_size > 0


def test_synthetic_generator_shapes_and_labels():
    X, y = rep_synthetic.sample(30, np.random.default_rng(0))
    assert X.shape == (60, 2) and set(np.unique(y)) == {-1.0, 1.0}


def test_rep_uci_missing_data_propagates(tmp_path, monkeypatch):
    # no other place to find the file: not $ROBUSTEP_DATA, not ~/robustep_data, and
    # (as if this installation had lost them) not the copies shipped with robustep
    from robustep.datasets import _files

    monkeypatch.setattr(_files, "PACKAGED_DIR", tmp_path / "no-packaged")
    monkeypatch.delenv("ROBUSTEP_DATA", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    cfg = dict(rep_uci.EXPERIMENT.quick, datasets=["heart"], data_home=str(tmp_path))
    with pytest.raises(DataUnavailableError):
        rep_uci.run(cfg, 0)


@pytest.mark.slow
@pytest.mark.skipif(not (SHARED / "haberman.csv").exists(), reason="shared data not present")
def test_rep_uci_tiny_run_and_report(tmp_path):
    cfg = dict(rep_uci.EXPERIMENT.quick, datasets=["haberman"], splits=2, powers=[0.8],
               relaxations=[10.0], max_iter=30, data_home=str(SHARED))  # fmt: skip
    res = rep_uci.run(cfg, 0)
    json.dumps(res)
    splits = res["tasks"]["haberman"]
    assert len(splits) == 2
    assert set(splits[0]["errors"]) == set(rep_uci.METHODS)
    summary = rep_uci.report(res, tmp_path)
    assert "haberman" in summary.tables[0]
    assert (tmp_path / "rep_uci_errors.png").exists()


@pytest.mark.skipif(not (SHARED / "pima-indians-diabetes.csv").exists(), reason="no data")
def test_pima_complete_cases_are_the_mass_rows():
    X, y, n_train, n_test = rep_uci.load("pima", {"data_home": str(SHARED)})
    assert X.shape == (532, 7) and n_train + n_test == 532


# ------------------------------------------------------------------ jobs = 2 gives the same
def _serial_and_two_jobs(run, cfg, seed=3):
    from threadpoolctl import threadpool_limits

    from robustep.experiments.parallel import use_jobs

    with threadpool_limits(1):  # the workers use one BLAS thread: compare like with like
        serial = run(cfg, seed)
    with use_jobs(2):
        parallel = run(cfg, seed)
    for res in (serial, parallel):
        assert res.pop("unit_cpu_seconds")
    assert json.dumps(serial, sort_keys=True) == json.dumps(parallel, sort_keys=True)
    return serial


def test_rep_synthetic_jobs_do_not_change_results():
    cfg = dict(rep_synthetic.EXPERIMENT.quick, repetitions=2, n_train_per_class=10,
               n_test_per_class=20, widths=[0.5, 1.0], n_folds=2, cv_max_iter=3, max_iter=3,
               boundary_grid=5, flip_rates=[0.1, 0.2])  # fmt: skip
    res = _serial_and_two_jobs(rep_synthetic.run, cfg)
    units = [(r["repetition"], r["flip_rate"]) for r in res["runs"][::4]]
    assert units == [(0, 0.1), (0, 0.2), (1, 0.1), (1, 0.2)]
    assert res["example"]["rate"] == 0.2
    # a unit's random numbers depend on (seed, repetition, rate) only
    alone = rep_synthetic.run(dict(cfg, repetitions=1, flip_rates=[0.2]), 3)
    assert json.dumps(alone["runs"]) == json.dumps(res["runs"][4:8])


@pytest.mark.skipif(
    not all((SHARED / f).exists() for f in ("haberman.csv", "statlog-heart.dat")),
    reason="shared data not present",
)
def test_rep_uci_jobs_do_not_change_results():
    cfg = dict(rep_uci.EXPERIMENT.quick, datasets=["heart", "haberman"], splits=1,
               powers=[0.8], relaxations=[10.0], max_iter=10, data_home=str(SHARED))  # fmt: skip
    res = _serial_and_two_jobs(rep_uci.run, cfg)
    assert list(res["tasks"]) == ["heart", "haberman"]
    assert [len(v) for v in res["tasks"].values()] == [1, 1]
    # a split's random numbers depend on (seed, data set, flip rate, split) only
    alone = rep_uci.run(dict(cfg, datasets=["haberman"]), 3)
    assert json.dumps(alone["tasks"]["haberman"]) == json.dumps(res["tasks"]["haberman"])


def test_rep_synthetic_counts_the_paper_rule_and_the_strict_one():
    rng = np.random.default_rng(4)
    X, y = rep_synthetic.sample(25, rng)
    y[rng.choice(y.size, 5, replace=False)] *= -1
    from sklearn.gaussian_process.kernels import RBF

    kernel = RBF(1.0)
    K = kernel(X) + 1e-8 * np.eye(y.size)
    cfg = dict(rep_synthetic.EXPERIMENT.quick, max_iter=60)
    res, R, stop = rep_synthetic.fit_method(K, y, 0.1, "EP", cfg)
    # the paper's loop stops at the first sweep with R < 1e-3; the run goes on to the strict test
    assert stop["converged"] and stop["strict"] and res.converged
    first = 2 + int(np.flatnonzero(np.array(R) < 1e-3)[0])  # R[k] compares sweeps k+1, k+2
    assert stop["sweep"] == first < res.n_iter
    # the latent mean k(X*, X) α equals the result's predictive mean (checked at the end)
    Xt, _ = rep_synthetic.sample(7, rng)
    np.testing.assert_allclose(
        rep_synthetic._alpha_mean(res.posterior.alpha, kernel, X, Xt),
        rep_synthetic._latent_mean(res, kernel, X, Xt),
        rtol=1e-8,
        atol=1e-10,
    )
    # without strict_tol (configurations before it existed) the run stops at the paper's rule
    cfg.pop("strict_tol")
    res2, R2, stop2 = rep_synthetic.fit_method(K, y, 0.1, "EP", cfg)
    assert res2.n_iter == stop2["sweep"] == first and stop2["strict"] is None
    np.testing.assert_allclose(stop2["alpha"], stop["alpha"], rtol=1e-12)
