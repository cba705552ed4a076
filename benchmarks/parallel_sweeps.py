"""How many parallel EP sweeps probit GP classification needs, and what would cut them.

The fixed-hyperparameter fit of issue 3 (goal: at most 15 Cholesky-times at n = 2000)
is dominated by ``sweeps x (Cholesky + triangular inverse)``, so the sweep count decides
whether the goal can be met. This script prints, for the data of ``benchmarks/gpc.py``:

1. sweeps to a largest site change < 1e-4 for damping 0, 0.1, 0.2, 0.3 (engine as shipped);
2. sweeps when the undamped parallel map is accelerated by Anderson mixing of depth m
   (a probe written against the engine's internal ``_evaluate``; not used by the library).

Usage: ``OPENBLAS_NUM_THREADS=1 python benchmarks/parallel_sweeps.py [--sizes 500 1000 2000]``
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

from robustep.ep import engine, expectation_propagation
from robustep.ep.updates import moment_matching_update
from robustep.likelihoods import Probit
from robustep.linalg import InvalidSiteConfiguration
from robustep.posterior import DensePrior


def _problem(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (n, 2))
    f = np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.3 * rng.standard_normal(n)
    y = np.where(f > 0, 1.0, -1.0)
    K = (ConstantKernel(2.0) * RBF(1.0))(X) + 1e-8 * np.eye(n)
    return K, y


def anderson_sweeps(K, y, depth, tol=1e-4, max_sweeps=100):
    """Sweeps of Anderson-mixed parallel EP (plain step when a mixed step is invalid)."""
    n = len(y)
    prior = DensePrior(K, check=False)
    ctx = engine._Context(prior, y, Probit(), moment_matching_update, 1.0, 0.0, tol, 1000, None)
    x = np.zeros(2 * n)
    ev = engine._evaluate(ctx, x[:n], x[n:])
    xs, fs = [], []
    for sweep in range(max_sweeps):
        f = np.concatenate([ev.proposal_precision, ev.proposal_shift]) - x
        if np.max(np.abs(f)) < tol:
            return sweep
        xs, fs = (xs + [x.copy()])[-(depth + 1) :], (fs + [f.copy()])[-(depth + 1) :]
        x_new = x + f
        if depth and len(fs) > 1:
            dF = np.diff(np.array(fs), axis=0).T
            dX = np.diff(np.array(xs), axis=0).T
            gamma = np.linalg.lstsq(dF, f, rcond=None)[0]
            x_new = x + f - (dX + dF) @ gamma
        try:
            ev_new = engine._evaluate(ctx, x_new[:n], x_new[n:])
            if not np.all(ev_new.valid):
                raise InvalidSiteConfiguration("invalid cavity")
        except InvalidSiteConfiguration:
            x_new, xs, fs = x + f, [], []
            ev_new = engine._evaluate(ctx, x_new[:n], x_new[n:])
        x, ev = x_new, ev_new
    return max_sweeps


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[500, 1000, 2000])
    args = parser.parse_args(argv)
    print("n     damping 0 / 0.1 / 0.2 / 0.3     Anderson depth 0 / 2 / 3 / 5")
    for n in args.sizes:
        K, y = _problem(n)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            damped = [
                expectation_propagation(K, y, Probit(), tol=1e-4, damping=d, mean_sweeps=0).n_iter
                for d in (0.0, 0.1, 0.2, 0.3)
            ]
        mixed = [anderson_sweeps(K, y, m) for m in (0, 2, 3, 5)]
        print(f"{n:<5} {' / '.join(map(str, damped)):<30} {' / '.join(map(str, mixed))}")


if __name__ == "__main__":
    main()
