"""EP engine cost in units of one Cholesky factorisation of K (issue 2, §5).

For n in {500, 1000, 2000, 4000}, an RBF kernel on 2-D inputs, and the probit
and Student-t likelihoods, prints in one run on one machine:

* the time of one parallel EP sweep (factorisation + marginal variances +
  tilted moments + site update) divided by one Cholesky of K (goal <= 2);
* sweeps to convergence (tol 1e-4, robust parallel EP, zero initial sites);
* the whole EP run in Cholesky-times (goal for probit at n = 2000: <= 15).

Usage: python benchmarks/engine.py [--sizes 500 1000 2000 4000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import scipy.linalg
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

from robustep.ep import expectation_propagation
from robustep.ep.engine import _Context, _evaluate, _parallel_step
from robustep.ep.updates import moment_matching_update
from robustep.likelihoods import Probit, StudentT


def best_time(fn, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def problem(n, kind, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, 2))
    K = (ConstantKernel(2.0) * RBF(1.0))(X) + 1e-6 * np.eye(n)
    f = np.sin(X[:, 0]) + np.cos(1.5 * X[:, 1])
    if kind == "probit":
        y = np.where(f + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
        return K, y, Probit()
    y = f + 0.2 * rng.standard_normal(n)
    outliers = rng.random(n) < 0.05
    y[outliers] += rng.choice([-1, 1], outliers.sum()) * rng.uniform(3, 6, outliers.sum())
    return K, y, StudentT(df=4.0, scale=0.2)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[500, 1000, 2000, 4000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    print(f"{'lik':8s} {'n':>5s} {'chol s':>8s} {'sweep/chol':>10s} {'sweeps':>6s} "
          f"{'total/chol':>10s} {'conv':>5s}")  # fmt: skip
    for n in args.sizes:
        for kind in ("probit", "student-t"):
            K, y, lik = problem(n, kind)
            chol = best_time(lambda K=K: scipy.linalg.cholesky(K, lower=True), args.repeat)
            # one parallel sweep from a converged-ish state (after 3 sweeps from zero)
            ctx = _Context(K, y, lik, moment_matching_update, 1.0, 0.0, 1e-4, 10**6, None)
            ev = _evaluate(ctx, np.zeros(n), np.zeros(n))
            for _ in range(3):
                ev = _parallel_step(ctx, ev, 1.0, True)[0]
            sweep = best_time(
                lambda ctx=ctx, ev=ev: _parallel_step(ctx, ev, 1.0, True), args.repeat
            )
            t = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = expectation_propagation(K, y, lik, tol=1e-4)
            total = time.perf_counter() - t
            print(f"{kind:8s} {n:5d} {chol:8.4f} {sweep / chol:10.2f} {res.n_iter:6d} "
                  f"{total / chol:10.1f} {str(res.converged):>5s}", flush=True)  # fmt: skip
    try:
        import GPy  # noqa: F401

        print("GPy is installed: compare with benchmarks/gpc.py")
    except ImportError:
        print(
            "GPy is not installed (pip install GPy==1.15 to compare); issue reference: "
            "GPy 1.15 EP at n=2000 took 170 s (about 3400 Cholesky-times) on this machine."
        )


if __name__ == "__main__":
    main()
