"""Tilted-moment throughput of the site likelihoods (sites per second).

Usage::

    .venv/bin/python benchmarks/likelihoods.py [--n 100000] [--repeat 3]

Prints, for 10^5 sites, the Student-t tilted moments per second (the foundation
issue's goal is >= 1e6 /s on the 2-core development machine) in two regimes:

* ``typical``: cavities as met inside EP (var in [0.01, 2], |m - y| ~ 2), df = 4;
* ``hard``: the accuracy-test ranges (var 1e-6..1e6, |m - y| up to 1e3).

and the other likelihoods for comparison.  Both wall-clock and process CPU time are
reported (best of ``--repeat``): on a shared machine the CPU rate is the more stable
number.  Single-threaded NumPy; no Python loop over sites.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from robustep import get_config
from robustep.likelihoods import Gaussian, Logistic, NoisyStep, Probit, StudentT


def _rate(fn, n, repeat):
    fn()  # warm-up (rule caches)
    best_wall, best_cpu = np.inf, np.inf
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        best_wall = min(best_wall, time.perf_counter() - w0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    return n / best_wall, n / best_cpu


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="number of sites")
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    args = parser.parse_args(argv)
    n = args.n
    rng = np.random.default_rng(0)

    y = rng.standard_normal(n)
    typical = (y, y + 2.0 * rng.standard_normal(n), np.exp(rng.uniform(np.log(0.01), np.log(2), n)))
    d = rng.choice([-1.0, 1.0], n) * 10.0 ** rng.uniform(-3, 3, n)
    hard = (y, y - d, 10.0 ** rng.uniform(-6, 6, n))
    labels = rng.choice([-1.0, 1.0], n)
    cls = (labels, 2.0 * rng.standard_normal(n), np.exp(rng.uniform(np.log(0.01), np.log(2), n)))

    cfg = get_config()
    print(
        f"tilted moments per second, n = {n} sites, best of {args.repeat} "
        f"(student_t_quadrature_points = {cfg.student_t_quadrature_points}, "
        f"quadrature_points = {cfg.quadrature_points})"
    )
    print(f"{'likelihood':<28}{'regime':<10}{'power':>6}{'wall /s':>12}{'cpu /s':>12}")
    rows = []
    for power in (1.0, 0.5):
        for regime, data in (("typical", typical), ("hard", hard)):
            rows.append(("StudentT(df=4, scale=0.5)", StudentT(4.0, 0.5), regime, data, power))
    rows.append(("StudentT(df=0.5, scale=0.1)", StudentT(0.5, 0.1), "hard", hard, 0.1))
    rows.append(("StudentT(df=100, scale=1)", StudentT(100.0, 1.0), "hard", hard, 1.0))
    rows += [
        ("Gaussian(0.1)", Gaussian(0.1), "typical", typical, 1.0),
        ("Probit()", Probit(), "typical", cls, 1.0),
        ("Probit()", Probit(), "typical", cls, 0.5),
        ("NoisyStep(0.05)", NoisyStep(0.05), "typical", cls, 0.5),
        ("Logistic()", Logistic(), "typical", cls, 1.0),
    ]
    for name, lik, regime, data, power in rows:
        wall, cpu = _rate(
            lambda lik=lik, data=data, p=power: lik.tilted_moments(*data, p), n, args.repeat
        )
        print(f"{name:<28}{regime:<10}{power:>6}{wall:>12.3g}{cpu:>12.3g}")


if __name__ == "__main__":
    from _harness import run_suite  # benchmarks/_harness.py

    sys.exit(run_suite("likelihoods", main, quick=["--n", "20000", "--repeat", "1"]))
