"""Parallel t-EP for the Student-t process at n = 200, 400, 614 (docs/derivations/tep.md §9).

On ``n`` standardised Pima training points (the first ``n`` of tep-uci's full-size 80/20
split 0; n = 614 is the whole training set) with the eq. 44 kernel at its starting values
and nu = 10, runs ``process_tep`` from zero sites (tol 1e-4, damping 0.5, one BLAS thread)

* without the z-score-preserving rescaling (``rescale=False``, the method before issue 12),
* with it (``rescale=True``, the default), and
* with it and the adaptive step length the evidence optimiser uses (``adaptive=True``),

and prints sweeps, converged, CPU seconds and the log|B| path (every 5th sweep and the last).

Usage: ``ROBUSTEP_DATA=/work/shared/datasets python benchmarks/stc_large_n.py
[--n 200 400 614] [--df 10]``
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from threadpoolctl import threadpool_limits

from robustep.estimators.student_t_process import default_kernel
from robustep.experiments import tep_uci
from robustep.tep import process


def _logdet_path(K, y, df, n_iter, **kw):
    """log|B| after sweeps 0, 5, 10, ... and the last, by re-running the same sweeps."""
    path = []
    for k in sorted({*range(0, n_iter, 5), n_iter}):
        if k == 0:
            path.append((0, 0.0))
            continue
        _, _, post, _ = process.process_tep(K, y, df=df, max_iter=k, tol=0.0, **kw)
        path.append((k, post.logdet_b if post is not None else float("nan")))
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[200, 400, 614])
    parser.add_argument("--df", type=float, default=10.0)
    parser.add_argument("--max-iter", type=int, default=1000)
    args = parser.parse_args(argv)
    config = dict(tep_uci.EXPERIMENT.full)
    X, y = tep_uci._load("pima", 0)
    unit = {"d": 0, "dataset": "pima", "split": 0, "flip": 0.0, "model": "STC"}
    Xtr, ytr, _, _ = tep_uci.unit_data(config, 0, X, y, unit)
    ytr = ytr.astype(float)
    variants = {
        "no rescaling": {"rescale": False},
        "rescaled": {"rescale": True},
        "rescaled + adaptive": {"rescale": True, "adaptive": True},
    }
    print("| n | variant | sweeps | converged | CPU s | log det B after sweep k (k: value) |")
    print("|---|---|---|---|---|---|")
    for n in args.n:
        K = default_kernel(Xtr.shape[1])(Xtr[:n])
        for label, kw in variants.items():
            with threadpool_limits(limits=1), np.errstate(all="ignore"):
                t0 = time.process_time()
                _, _, _, info = process.process_tep(
                    K, ytr[:n], df=args.df, max_iter=args.max_iter, tol=1e-4, **kw
                )
                seconds = time.process_time() - t0
                path = _logdet_path(K, ytr[:n], args.df, info.n_iter, **kw)
            blocked = " (blocked)" if info.history and np.isinf(info.history[-1]) else ""
            path_s = ", ".join(f"{k}: {v:.0f}" for k, v in path)
            print(
                f"| {n} | {label} | {info.n_iter}{blocked} | {info.converged} | {seconds:.2f} | "
                f"{path_s} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
