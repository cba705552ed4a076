"""benchmarks/tep_fixed_points.py --gaussian-ep: Gaussian EP of the linear model through the
GP engine's chain on the exact rank-k prior."""

from __future__ import annotations

import numpy as np

from _benchmarks import load_benchmark
from robustep.tep.ep import linear_tep


def _toy(n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 2))
    y = np.where(X[:, 0] + 0.5 * X[:, 1] + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
    return np.column_stack([X, np.ones(n)]), y


def test_gaussian_ep_runs_find_the_weight_space_fixed_point():
    """Every label noise converges from zero sites, Newton's method polishes it, and the
    fixed point is linear_tep's Gaussian EP (df = inf) in weight space."""
    module = load_benchmark("tep_fixed_points")
    Z, y = _toy()
    rows = module.gaussian_ep_runs(Z, y, noise=(0.3, 0.2))
    assert [r["eps"] for r in rows] == [0.3, 0.2]
    assert all(r["converged"] and r["start"] == "zero sites" and r["polished"] for r in rows)
    tau, nu = rows[1]["sites"]
    state, info = linear_tep(Z, y, df=np.inf, eps=0.2, max_iter=2000, tol=1e-10, damping=0.5)
    assert info.converged
    np.testing.assert_allclose(state.post_h, Z.T @ nu, atol=1e-3)
    np.testing.assert_allclose(state.post_lambda, np.eye(3) + Z.T @ (tau[:, None] * Z), atol=1e-2)


def test_gaussian_ep_runs_fall_back_to_the_previous_fixed_point(monkeypatch):
    """Where the run from zero sites fails, the previous label noise's fixed point starts a
    second run, whose sweeps are added; a row that fails both is not polished."""
    module = load_benchmark("tep_fixed_points")
    Z, y = _toy()
    run_chain, calls = module.run_chain, []

    def failing_from_zero(prior, y, likelihood, strategy, *, tol, init=None):
        res = run_chain(prior, y, likelihood, strategy, tol=tol, init=init)
        calls.append((likelihood.epsilon, init is not None, res.n_iter))
        if init is None and likelihood.epsilon < 0.3:
            res.converged = False
        return res

    monkeypatch.setattr(module, "run_chain", failing_from_zero)
    first, second = module.gaussian_ep_runs(Z, y, noise=(0.3, 0.2))
    assert first["start"] == "zero sites" and second["start"] == "warm"
    assert [c[:2] for c in calls] == [(0.3, False), (0.2, False), (0.2, True)]
    assert second["sweeps"] == calls[1][2] + calls[2][2] and second["polished"]
    calls.clear()
    (only,) = module.gaussian_ep_runs(Z, y, noise=(0.2,))  # no previous fixed point
    assert not only["converged"] and only["polished"] is None and only["sites"] is None
    assert [c[:2] for c in calls] == [(0.2, False)]


def test_gaussian_ep_table(capsys):
    module = load_benchmark("tep_fixed_points")
    module.main(["--gaussian-ep", "--names", "n=5"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| n=5 |")]
    assert len(rows) == len(module.GAUSSIAN_EP_NOISE)
    assert all(row.split("|")[4].strip() in ("True", "False") for row in rows)
