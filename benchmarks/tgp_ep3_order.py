"""EP3's grid order compared on tgp-benchmark splits (issue 12 §2, docs/benchmarks.md).

Usage:
    ROBUSTEP_DATA=../shared/datasets OMP_NUM_THREADS=1 python benchmarks/tgp_ep3_order.py \
        [--datasets friedman boston] [--splits 0 3]

For each split, fits EP3 (``StudentTGPRegressor(method="ep", df_grid=True)``, ARD kernel,
2 restarts, the unit's seed, as ``tgp_benchmark._fit_predict`` does) twice: with the
committed order (``_regressor_grid.df_grid_order``: restarts at the smallest nu,
then upwards) and with the walk out from the grid value nearest nu = 4 used in the
full run of 2026-11-24.  Prints CPU seconds, test MLPD, the log evidence at every grid
value and where it is largest.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np


def walk_from(grid, df0=4.0):
    """The replaced order: start nearest df0 (log-log), up to the largest, then down."""
    grid = np.asarray(grid, dtype=float)
    rank = np.argsort(grid, kind="stable")
    t = np.log(np.log(grid[rank]))
    s = int(np.argmin(np.abs(t - np.log(np.log(df0)))))
    steps = [(s, None)] + [(k, k - 1) for k in range(s + 1, rank.size)]
    steps += [(k, k + 1) for k in range(s - 1, -1, -1)]
    return [
        (int(rank[k]), float(grid[rank[k]]), None if p is None else int(rank[p])) for k, p in steps
    ]


def fit_ep3(name, split, order, config, seed=0):
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel
    from threadpoolctl import threadpool_limits

    import robustep.estimators._regressor_grid as ep3_grid
    import robustep.estimators.student_t_regressor as st
    from robustep.experiments import tgp_benchmark as tb

    Xtr, ytr, Xte, yte, _ = tb._splits(name, config, seed)[split]
    mu, sd = Xtr.mean(0), Xtr.std(0)
    sd = np.where(sd > 0, sd, 1.0)
    kernel = ConstantKernel(1.0, (1e-3, 1e3)) * RBF(np.ones(Xtr.shape[1]), (1e-2, 1e3))
    committed = ep3_grid.df_grid_order
    if order is not None:
        ep3_grid.df_grid_order = order
    try:
        with threadpool_limits(1), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.process_time()
            est = st.StudentTGPRegressor(
                kernel, df=4.0, scale=0.5, method="ep", df_grid=True,
                n_restarts_optimizer=config["n_restarts"],
                random_state=tb.unit_seed(seed, tb._dataset_key(name), split),
            ).fit((Xtr - mu) / sd, ytr)  # fmt: skip
            cpu = time.process_time() - t0
    finally:
        ep3_grid.df_grid_order = committed
    mlpd = float(est.predict_log_density((Xte - mu) / sd, yte).mean())
    lml = np.array([c["res"].log_marginal_likelihood for c in est._components])
    return cpu, mlpd, lml, est.df_grid_


def main(argv=None):
    from robustep.experiments import tgp_benchmark as tb

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--datasets", nargs="+", default=["friedman"])
    p.add_argument("--splits", nargs="+", type=int, default=[0, 3])
    args = p.parse_args(argv)
    config = dict(tb.EXPERIMENT.full)
    print(
        "| data set | split | order | CPU s | MLPD | max log evidence (at nu) "
        "| log evidence at nu = 1.5 |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in args.datasets:
        for split in args.splits:
            for label, order in (("committed", None), ("walk from 4", walk_from)):
                cpu, mlpd, lml, grid = fit_ep3(name, split, order, config)
                j = int(np.argmax(lml))
                print(
                    f"| {name} | {split} | {label} | {cpu:.1f} | {mlpd:.3f} | "
                    f"{lml[j]:.2f} ({grid[j]:.2f}) | {lml[int(np.argmin(grid))]:.2f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
