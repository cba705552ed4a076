"""benchmarks/step_fixed_points.py: its three starts and its table."""

from __future__ import annotations

from _benchmarks import load_benchmark


def test_three_starts_per_length_scale():
    """On a well-specified small problem every start reaches EP's fixed point, the same
    one up to the tolerance; the continuation counts the sweeps of its two runs."""
    module = load_benchmark("step_fixed_points")
    X, y = module._stress().step_noise_data("xor", 60, 0.2, 5)
    K = module.step_kernel(X, 0.5)
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
    test = module._stress().step_noise_data("xor", 50, 0.0, 99)
    out = module.fit(X, y, 0.2, 0, test=test)
    first, second, third = out.splitlines()
    assert first.startswith("0 fallback starts, power-EP search on:")
    assert "method_used_ accelerated" in first and "0 ConvergenceWarning" in first
    assert "on EP's evidence" in first
    assert second.startswith("probit fit:") and "step / probit:" in second
    assert "accuracy on 50 noise-free test points" in second
    assert third.startswith("the step fit's final fit alone") and "accelerated" in third
    assert int(third.split(" sweeps")[0].split()[-1]) > 0


def test_fit_summary_where_ep_fails_everywhere():
    """The misspecified model (label noise 0.1 on 20% flips) with no fallback starts: the
    search runs on power EP's evidence, or without it keeps the start and warns."""
    module = load_benchmark("step_fixed_points")
    X, y = module._stress().step_noise_data("xor", 80, 0.2, 1)
    on = module.fit(X, y, 0.1, 0).splitlines()[0]
    assert "on power's evidence" in on and "method_used_ power" in on
    assert "0 ConvergenceWarning" in on
    off = module.fit(X, y, 0.1, 0, power_search=False).splitlines()[0]
    assert "power-EP search off" in off and "length-scale 1," in off
    assert "1 ConvergenceWarning" in off


def test_power_runs(capsys):
    """--power: plain and Anderson-accelerated power EP reach the same log Z."""
    module = load_benchmark("step_fixed_points")
    module.main(["--n", "60", "--lengths", "0.5", "--power"])
    row = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 0.5 |")]
    cells = row[0].strip("|").split("|")
    assert len(row) == 1 and "failed" not in row[0]
    assert abs(float(cells[5]) - float(cells[6])) < 1e-3


def test_stability_table(capsys):
    """--stability: one row per run and length-scale, with the eigenvalue summary where
    the run converged (the well-specified model at n = 40 converges in both)."""
    module = load_benchmark("step_fixed_points")
    module.main(["--stability", "--n", "40", "--eps", "0.2", "--lengths", "0.5",
                 "--data", "smooth", "--seed", "1"])  # fmt: skip
    out = capsys.readouterr().out
    assert out.startswith("smooth, 20% flips, n = 40, seed 1, NoisyStep(0.2)")
    rows = [line.strip("|").split("|") for line in out.splitlines() if line.startswith("| 0.5 |")]
    assert [row[1].strip() for row in rows] == ["accelerated", "damped 0.3"]
    for row in rows:
        assert "failed" not in row[2]
        radius, damping = float(row[6]), row[7].strip()
        assert radius > 0 and (damping == "none" or 0.0 <= float(damping) < 1.0)


def test_stability_table_with_sequential_runs(capsys):
    """--stability --sequential: two sequential rows per length-scale, which on the
    well-specified model reach the fixed point of the parallel runs (the same log Z and
    eigenvalues: parallel EP's fixed points are sequential EP's)."""
    module = load_benchmark("step_fixed_points")
    module.main(["--stability", "--sequential", "--n", "40", "--eps", "0.2", "--lengths",
                 "0.5", "--data", "smooth", "--seed", "1"])  # fmt: skip
    rows = [line.strip("|").split("|") for line in capsys.readouterr().out.splitlines()
            if line.startswith("| 0.5 |")]  # fmt: skip
    assert [row[1].strip() for row in rows] == [
        "accelerated", "damped 0.3", "sequential, damping 0", "sequential, damping 0.5",
    ]  # fmt: skip
    assert not any("failed" in row[2] for row in rows)
    log_Z = [float(row[4]) for row in rows]
    radius = [float(row[6]) for row in rows]
    assert max(log_Z) - min(log_Z) < 2e-3
    assert max(radius) - min(radius) < 0.05 * max(radius)


def test_sequential_run_is_capped_and_silent(recwarn):
    """A sequential run that cannot converge in its sweeps returns unconverged after
    exactly that many, without a ConvergenceWarning (the table reports it)."""
    module = load_benchmark("step_fixed_points")
    X, y = module._stress().step_noise_data("xor", 60, 0.2, 5)
    res = module.sequential(module.step_kernel(X, 0.5), y, 0.2, 0.0, max_iter=1)
    assert not res.converged and res.n_iter == 1
    assert not [w for w in recwarn if issubclass(w.category, module.ConvergenceWarning)]


def test_newton_branch_reaches_the_other_end(capsys):
    """--newton on a well-specified problem (one attracting fixed point per length-scale):
    the branch from 0.6 reaches 0.5 with the log Z that stage accelerated finds there, and
    the table prints both directions."""
    module = load_benchmark("step_fixed_points")
    X, y = module._stress().step_noise_data("smooth", 40, 0.2, 1)
    rows = module.newton_branch(X, y, 0.2, 0.6, 0.5, step=0.05)
    assert [round(r[0], 6) for r in rows] == [0.6, 0.55, 0.5]
    assert rows[0][1] == 0 and all(r[1] is not None and r[1] >= 1 for r in rows[1:])
    K = module.step_kernel(X, 0.5)
    assert abs(rows[-1][2] - module.accelerated(K, y, 0.2).log_Z) < 1e-3
    assert all(r[3] < 1.0 and r[4] > 0.0 for r in rows)
    module.main(["--newton", "--n", "40", "--eps", "0.2", "--data", "smooth", "--seed", "1",
                 "--lengths", "0.6,0.5"])  # fmt: skip
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 0.")]
    assert lines[0].startswith("| 0.6 | 0.6 | 0 |") and lines[-1].startswith("| 0.5 | 0.6 |")
