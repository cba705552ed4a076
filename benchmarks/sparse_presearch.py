"""Does a search on a subset shorten the sparse classifier's search on all the data? (issue 13)

Usage: python benchmarks/sparse_presearch.py [--n 10000] [--m 64] [--subset 2000]

The ≤ 5-minute goal for hyperparameter and inducing-input optimisation at n = 10⁵,
m = 512 fails on the number of L-BFGS-B evaluations (hundreds), each a warm-started EP
run plus the evidence gradient at full size.  A common remedy is to search on a random
subset first and start the full search from its optimum.  This script measures it on
the synthetic probit problem of ``benchmarks/sparse.py`` (d = 8), one BLAS thread, CPU
seconds: ``GPClassifier(ConstantKernel(1) * RBF(1), inducing_points=m)`` fitted directly,
against the same fit on ``--subset`` random rows followed by a fit on all rows that starts
from the subset's kernel and inducing inputs.  It prints the number of objective
evaluations of each search, the CPU time and the log evidence reached.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from sklearn.gaussian_process.kernels import RBF, ConstantKernel
from threadpoolctl import threadpool_limits

import robustep.estimators._sparse as sparse
from robustep.estimators import GPClassifier


def probit_data(n, d, rng):
    """The synthetic probit problem of benchmarks/sparse.py: X (n, d), y (n,) in {-1, 1}.

    Repeated rather than imported: a module named ``sparse`` would shadow the pydata
    package that dask imports (benchmarks/sparse.py drops its folder from sys.path)."""
    X = rng.uniform(-3, 3, size=(n, d))
    f = np.sin(1.5 * X[:, 0]) * np.cos(X[:, 1]) + 0.5 * np.sum(np.sin(X[:, 2:]), axis=1)
    return X, np.where(f + 0.3 * rng.normal(size=n) > 0, 1, -1)


class CountedObjective(sparse._Objective):
    """The sparse search's objective, counting its evaluations."""

    calls = 0

    def __call__(self, x):
        CountedObjective.calls += 1
        return super().__call__(x)


def fit(X, y, kernel, inducing_points):
    """(fitted classifier, objective evaluations, CPU seconds)."""
    CountedObjective.calls = 0
    t0 = time.process_time()
    est = GPClassifier(kernel, inducing_points=inducing_points, random_state=0).fit(X, y)
    return est, CountedObjective.calls, time.process_time() - t0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--m", type=int, default=64)
    parser.add_argument("--subset", type=int, default=2000)
    args = parser.parse_args(argv)
    X, y = probit_data(args.n, 8, np.random.default_rng(0))
    rows = np.random.default_rng(1).choice(args.n, args.subset, replace=False)
    start = ConstantKernel(1.0) * RBF(1.0)
    original = sparse._Objective
    sparse._Objective = CountedObjective
    try:
        with threadpool_limits(1), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            direct, n_direct, t_direct = fit(X, y, start, args.m)
            sub, n_sub, t_sub = fit(X[rows], y[rows], start, args.m)
            full, n_full, t_full = fit(X, y, sub.kernel_, sub.inducing_points_)
    finally:
        sparse._Objective = original
    print(f"n = {args.n}, m = {args.m}, d = 8, subset {args.subset} rows, one BLAS thread\n")
    print("| search | evaluations | CPU s | log evidence (all rows) | kernel |")
    print("|---|---|---|---|---|")
    print(f"| all rows | {n_direct} | {t_direct:.1f} | "
          f"{direct.log_marginal_likelihood_value_:.2f} | {direct.kernel_} |")  # fmt: skip
    print(f"| subset, then all rows | {n_sub} + {n_full} | {t_sub:.1f} + {t_full:.1f} | "
          f"{full.log_marginal_likelihood_value_:.2f} | {full.kernel_} |")  # fmt: skip


if __name__ == "__main__":
    main()
