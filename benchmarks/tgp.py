"""Timing of robust EP vs Laplace for Student-t GP regression (Jylänki et al. 2011, Table 1).

Usage: .venv/bin/python benchmarks/tgp.py [--sizes 200 500 1000] [--optimise]

For each n: synthetic 1-D data (sin + 10% gross outliers), SE kernel, nu = 4, sigma = 0.5
(standardised targets); times (i) one inference at fixed hyperparameters and (ii), with
``--optimise``, the full StudentTGPRegressor fit (type-II MAP).  CPU process time, BLAS
limited to one thread.  The paper reports EP1 ≈ 0.8 × LA1 (with optimisation).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, ConstantKernel
from threadpoolctl import threadpool_limits


def data(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-5, 5, size=(n, 1))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(n)
    out = rng.choice(n, n // 10, replace=False)
    y[out] += rng.normal(0, 3, out.size)
    return X, (y - y.mean()) / y.std()


def timed(fn, repeat=1):
    best = np.inf
    for _ in range(repeat):
        t = time.process_time()
        out = fn()
        best = min(best, time.process_time() - t)
    return best, out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--sizes", type=int, nargs="+", default=[200, 500, 1000])
    p.add_argument("--optimise", action="store_true")
    args = p.parse_args(argv)
    from robustep.baselines.laplace import laplace_approximation
    from robustep.ep import expectation_propagation
    from robustep.estimators.student_t_regressor import StudentTGPRegressor
    from robustep.likelihoods import StudentT

    print("| n | EP fixed (s) | LA fixed (s) | EP/LA | EP fit (s) | LA fit (s) | EP/LA fit |")
    print("|---|---|---|---|---|---|---|")
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for n in args.sizes:
            X, y = data(n)
            K = (ConstantKernel(1.0) * RBF(1.0))(X)
            lik = StudentT(4.0, 0.5)
            t_ep, _ = timed(lambda K=K, y=y, lik=lik: expectation_propagation(K, y, lik), 2)
            t_la, _ = timed(lambda K=K, y=y, lik=lik: laplace_approximation(K, y, lik), 2)
            row = f"| {n} | {t_ep:.3f} | {t_la:.3f} | {t_ep / t_la:.2f} |"
            if args.optimise:
                f_ep, _ = timed(lambda X=X, y=y: StudentTGPRegressor(method="ep").fit(X, y))
                f_la, _ = timed(lambda X=X, y=y: StudentTGPRegressor(method="laplace").fit(X, y))
                row += f" {f_ep:.2f} | {f_la:.2f} | {f_ep / f_la:.2f} |"
            else:
                row += " – | – | – |"
            print(row, flush=True)


if __name__ == "__main__":
    from _harness import run_suite  # benchmarks/_harness.py

    sys.exit(run_suite("tgp", main, quick=["--sizes", "200", "500"]))
