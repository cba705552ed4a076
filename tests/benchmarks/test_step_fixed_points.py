"""benchmarks/step_fixed_points.py: its three starts and its table."""

from __future__ import annotations

from _benchmarks import load_benchmark


def test_three_starts_per_length_scale():
    """On a well-specified small problem every start reaches EP's fixed point, the same
    one up to the tolerance; the continuation counts the sweeps of its two runs."""
    module = load_benchmark("step_fixed_points")
    X, y = module._stress().step_noise_data("xor", 60, 0.2, 5)
    K = module.RBF(0.5)(X)
    K[module.np.diag_indices_from(K)] += 1e-8
    rows = list(module.runs(K, y, 0.2))
    assert [r[0] for r in rows] == ["zero", "continuation", "power"]
    assert all(res.converged for _, res, _ in rows)
    assert rows[1][2] > 0 and rows[2][2] > 0 and rows[0][2] == 0
    log_Z = [res.log_Z for _, res, _ in rows]
    assert max(log_Z) - min(log_Z) < 1e-3


def test_table(capsys):
    module = load_benchmark("step_fixed_points")
    module.main(["--n", "40", "--lengths", "0.5"])
    out = capsys.readouterr().out
    assert "NoisyStep(0.1)" in out
    assert sum(line.startswith("| 0.5 |") for line in out.splitlines()) == 3


def test_fit_summary():
    """--fit K: the default fit with K fallback starts, summarised in one line."""
    module = load_benchmark("step_fixed_points")
    X, y = module._stress().step_noise_data("xor", 60, 0.2, 5)
    line = module.fit(X, y, 0.2, 0)
    assert line.startswith("0 fallback starts:") and "method_used_ accelerated" in line
    assert "0 ConvergenceWarning" in line
