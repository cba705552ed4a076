"""Benchmark: parallel BP sweeps on a large Ising grid.

Prints directed message updates per second (goal >= 1e7/s on 2 cores) and peak memory.

    .venv/bin/python benchmarks/mrf.py                 # 1000 x 1000 grid, 20 sweeps
    .venv/bin/python benchmarks/mrf.py --side 300 --sweeps 10

PGMax (JAX) is not benchmarked: JAX is not installed in this environment and the project
does not depend on it, so no comparison run is made.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
import warnings

import numpy as np

from robustep.mrf import belief_propagation, grid_edges, ising


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--side", type=int, default=1000, help="grid side (n = side^2 variables)")
    ap.add_argument("--sweeps", type=int, default=20, help="parallel BP sweeps to time")
    ap.add_argument("--beta", type=float, default=0.3, help="coupling scale J ~ N(0, beta^2)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    E = grid_edges(args.side, args.side)
    n = args.side * args.side
    mrf = ising(rng.normal(0, 0.1, n), E, rng.normal(0, args.beta, len(E)))
    t_build = time.perf_counter() - t0
    m = mrf.n_edges
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # MiB (Linux: KiB)

    # time a 1-sweep run and a (1 + sweeps)-sweep run: the difference is the pure sweep time
    # (setup, final beliefs and Bethe log Z cancel)
    times, cpu = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a fixed number of sweeps: convergence not required
        for k in (1, 1 + args.sweeps):
            t0, c0 = time.perf_counter(), time.process_time()
            res = belief_propagation(mrf, max_iter=k, tol=1e-300)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    dt = times[1] - times[0]
    dcpu = cpu[1] - cpu[0]
    updates = 2 * m * args.sweeps
    print(f"grid {args.side}x{args.side}: n={n} variables, m={m} edges, {2 * m} directed messages")
    print(
        f"model build: {t_build:.2f} s; one-sweep call (setup + sweep + outputs): {times[0]:.2f} s"
    )
    print(
        f"parallel BP: {args.sweeps} sweeps in {dt:.2f} s -> {updates / dt:.3g} directed "
        f"message updates/s (goal >= 1e7/s); whole call incl. setup: "
        f"{2 * m * (1 + args.sweeps) / times[1]:.3g} /s"
    )
    print(
        f"  CPU time of those sweeps: {dcpu:.2f} s -> {updates / dcpu:.3g} updates per CPU-second "
        "(equals the wall-clock rate on an otherwise idle core; numpy runs single-threaded "
        f"here; load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)"
    )
    print(
        f"last max message change {res.history[-1]:.3g}; finite: {np.isfinite(res.marginals).all()}"
    )
    print(f"peak RSS: {rss1:.0f} MiB (after model build: {rss0:.0f} MiB)")
    print("PGMax: not run (needs JAX, which is not installed here; no network installs).")
    print(f"numpy {np.__version__}, python {sys.version.split()[0]}")


if __name__ == "__main__":
    from _harness import run_suite  # benchmarks/_harness.py

    sys.exit(run_suite("mrf", main, quick=["--side", "300", "--sweeps", "5"]))
