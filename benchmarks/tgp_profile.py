"""Per-unit CPU profile of ``robustep reproduce tgp-benchmark --full`` (JMLR Table 1).

Usage:
    ROBUSTEP_DATA=/work/shared/datasets nice .venv/bin/python benchmarks/tgp_profile.py \
        [--datasets friedman boston concrete] [--methods GA LA1 ...] [--mcmc-samples 100]
    ... benchmarks/tgp_profile.py --mcmc-sweeps   # seconds per Gibbs sweep only

For each data set it fits every method on the first split of the full protocol (Friedman:
set 0, n = 100; Boston: fold 0 of 10, n = 455; concrete: fold 0 of 2, n = 515) exactly as
the experiment's unit does (``tgp_benchmark._fit_predict``, one BLAS thread, CPU process
time).  MCMC is run with ``--mcmc-samples`` kept draws (plus the same half-length
burn-in) and its time is scaled linearly to the full configuration's ``mcmc_samples``
(the sampler's cost per sweep is constant).  Prints one row per (data set, method): CPU
seconds per unit, the share of the projected total, and the projected CPU total for the
full protocol (Friedman 10 sets, Boston 10 folds, concrete 2 folds), plus the projected
wall-clock time on 2 workers (total / 2, a lower bound: units are not divisible).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np


def mcmc_sweeps(datasets, n_sweeps=20, seed=0):
    """Seconds per Gibbs sweep with all hyperparameters sampled, on each data set's first
    split: the fast kernel path against scikit-learn's generic one, and one Cholesky."""
    import time

    from scipy import linalg
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel
    from threadpoolctl import threadpool_limits

    import robustep.baselines.mcmc as mcmc
    from robustep.experiments import tgp_benchmark as tb

    class Generic(mcmc._KernelMatrix):
        def __init__(self, kernel, X):
            super().__init__(kernel, X)
            self.D = None

    print("| data set | n | s / sweep generic kernel | s / sweep | one Cholesky (ms) |")
    print("|---|---|---|---|---|")
    for ds in datasets:
        Xtr, ytr, *_ = tb._splits(ds, dict(tb.EXPERIMENT.full), seed)[0]
        X = (Xtr - Xtr.mean(0)) / Xtr.std(0)
        y = (ytr - ytr.mean()) / ytr.std()
        k = ConstantKernel(1.0, (1e-3, 1e3)) * RBF(np.ones(X.shape[1]), (1e-2, 1e3))
        times = {}
        with threadpool_limits(1):
            for name, cls in (("fast", mcmc._KernelMatrix), ("generic", Generic)):
                orig, mcmc._KernelMatrix = mcmc._KernelMatrix, cls
                try:
                    t = time.process_time()
                    mcmc.gibbs_student_t_gp(k, X, y, n_samples=n_sweeps, burn_in=0, random_state=0)
                    times[name] = (time.process_time() - t) / n_sweeps
                finally:
                    mcmc._KernelMatrix = orig
            A = k(X) + np.eye(y.size)
            t = time.process_time()
            for _ in range(20):
                linalg.cholesky(A, lower=True)
            chol = (time.process_time() - t) / 20
        g, f = times["generic"], times["fast"]
        print(f"| {ds} | {y.size} | {g:.3f} | {f:.3f} | {chol * 1e3:.1f} |")


def main(argv=None):
    from robustep.experiments import tgp_benchmark as tb

    full = tb.EXPERIMENT.full
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--datasets", nargs="+", default=list(full["datasets"]))
    p.add_argument("--methods", nargs="+", default=list(full["methods"]))
    p.add_argument("--mcmc-samples", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--mcmc-sweeps", action="store_true", help="only time Gibbs sweeps (fast vs generic kernel)"
    )
    args = p.parse_args(argv)
    if args.mcmc_sweeps:
        return mcmc_sweeps(args.datasets)
    if not os.environ.get("ROBUSTEP_DATA") and {"boston", "concrete"} & set(args.datasets):
        print("set ROBUSTEP_DATA to the folder with boston-housing.csv and concrete.csv")
    config = dict(full)
    n_units = {"friedman": full["friedman_sets"], "boston": full["boston_folds"]}
    n_units["concrete"] = full["concrete_folds"]
    rows = []
    for ds in args.datasets:
        Xtr, ytr, Xte, yte, _ = tb._splits(ds, config, args.seed)[0]
        seed = tb.unit_seed(args.seed, tb._dataset_key(ds), 0)
        for m in args.methods:
            ns = args.mcmc_samples if m == "MCMC" else None
            out = tb._fit_predict(m, Xtr, ytr, Xte, yte, config, seed, n_samples=ns)
            cpu = out[2] * (full["mcmc_samples"] / args.mcmc_samples if m == "MCMC" else 1.0)
            rows.append((ds, ytr.size, m, cpu, n_units[ds]))
            print(f"# {ds} n={ytr.size} {m}: {cpu:.2f} s/unit", file=sys.stderr, flush=True)
    total = sum(r[3] * r[4] for r in rows)
    print("| data set | n | method | CPU s / unit | units | share of total | projected CPU s |")
    print("|---|---|---|---|---|---|---|")
    for ds, n, m, cpu, k in rows:
        print(f"| {ds} | {n} | {m} | {cpu:.2f} | {k} | {cpu * k / total:.1%} | {cpu * k:.0f} |")
    print(f"\nprojected total CPU: {total:.0f} s = {total / 60:.1f} min;")
    print(f"lower bound on wall clock with --jobs 2: {total / 120:.1f} min")
    la = {r[0]: r[3] for r in rows if r[2] == "LA1"}
    for ds, _, m, cpu, _ in rows:
        if ds in la and m == "EP1":
            print(f"EP1/LA1 CPU on {ds}: {cpu / la[ds]:.2f}")
    return np.array([r[3] for r in rows])


if __name__ == "__main__":
    main()
