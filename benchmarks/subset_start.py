"""When the subset start of dense EP pays (docs/derivations/engine_floor.md §5).

Prints, in one run, each fit's time divided by the mean of an in-place Cholesky of
``I + K`` just before and just after it (as ``benchmarks/engine.py``), cold start (zero
sites) against ``init="subset"`` (FITC EP on a subset of the rows of K first):

1. the engine on probit problems with rough and smooth RBF kernels (n = ``--n``, 2-D
   inputs on [-3, 3]^2, labels from sin(3 x1) cos(4 x2) plus noise);
2. ``GPClassifier(optimizer=None).fit`` with methods "auto", "power" (0.5) and "damped"
   on the probit problem of ``benchmarks/engine.py`` with 10% flipped labels, with
   ``subset_start_min_n=None`` (cold) and 1 (subset);
3. with ``--step``: the ``method="auto"`` chain with the step likelihood (label noise
   0.1) on that problem, cold against ``init="subset"`` (about 10 minutes).

Usage: python benchmarks/subset_start.py [--n 2000] [--threads 2] [--step]
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from sklearn.gaussian_process.kernels import RBF, ConstantKernel
from threadpoolctl import threadpool_limits

import robustep
from engine import KERNEL, one_cholesky, problem  # benchmarks/engine.py (same folder)
from robustep.ep import expectation_propagation
from robustep.estimators import GPClassifier
from robustep.likelihoods import Probit
from robustep.posterior import DensePrior


def in_cholesky_times(fn, B):
    c0 = one_cholesky(B)[0]
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = fn()
    dt = time.perf_counter() - t0
    c1 = one_cholesky(B)[0]
    return dt / (0.5 * (c0 + c1)), out


def engine_kernels(n):
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, size=(n, 2))
    f = np.sin(3 * X[:, 0]) * np.cos(4 * X[:, 1])
    y = np.where(f + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
    print(f"\n## 1. engine, probit, n = {n}: Cholesky-times (sweeps)\n")
    print("| kernel | cold | subset | same fixed point (max abs diff of the means) |")
    print("|---|---|---|---|")
    for ell, amp in ((0.05, 2.0), (0.3, 2.0), (1.0, 30.0), (3.0, 100.0)):
        K = (ConstantKernel(amp) * RBF(ell))(X) + 1e-6 * np.eye(n)
        prior, B = DensePrior(K, check=False), K + np.eye(n)
        cold = in_cholesky_times(lambda p=prior: expectation_propagation(p, y, Probit()), B)
        warm = in_cholesky_times(
            lambda p=prior: expectation_propagation(p, y, Probit(), init="subset"), B
        )
        diff = np.max(np.abs(cold[1].mean - warm[1].mean))
        print(f"| {amp} * RBF({ell}) | {cold[0]:.1f} ({cold[1].n_iter}) | "
              f"{warm[0]:.1f} ({warm[1].n_iter}) | {diff:.1e} |", flush=True)  # fmt: skip


def classifier_methods(n):
    X, K, y, _ = problem(n, "probit")
    labels = (y > 0).astype(int)
    flip = np.random.default_rng(1).random(n) < 0.1
    labels = np.where(flip, 1 - labels, labels)
    B = K + np.eye(n)
    cases = [
        ("auto", dict(method="auto")),
        ("power 0.5", dict(method="power", power=0.5)),
        ("damped", dict(method="damped")),
    ]
    print(f"\n## 2. GPClassifier(optimizer=None).fit, probit, n = {n}, 10% flipped labels\n")
    print("| method | cold: chol-times (sweeps, converged) | subset | log evidence cold / subset |")
    print("|---|---|---|---|")
    for name, kw in cases:
        row = []
        for min_n in (None, 1):  # None: cold start; 1: the subset start at every size
            with robustep.config(subset_start_min_n=min_n):
                clf = GPClassifier(KERNEL, optimizer=None, **kw)
                ratio, _ = in_cholesky_times(lambda c=clf: c.fit(X, labels), B)
            row.append((ratio, clf.n_iter_, clf.converged_, clf.log_marginal_likelihood_value_))
        print(f"| {name} | {row[0][0]:.1f} ({row[0][1]}, {row[0][2]}) | {row[1][0]:.1f} "
              f"({row[1][1]}, {row[1][2]}) | {row[0][3]:.8f} / {row[1][3]:.8f} |",
              flush=True)  # fmt: skip


def step_likelihood(n):
    """The method="auto" chain with the step likelihood (label noise 0.1), cold against
    the subset start, on the classifier problem: the case the estimator leaves cold."""
    from robustep.ep.chain import auto_expectation_propagation
    from robustep.likelihoods import NoisyStep

    _, K, y, _ = problem(n, "probit")
    flip = np.random.default_rng(1).random(n) < 0.1
    y = np.where(flip, -y, y)
    prior, B = DensePrior(K, check=False), K + np.eye(n)
    print(f"\n## 3. step likelihood (label noise 0.1), method='auto' chain, n = {n}\n")
    print("| start | chol-times | sweeps | converged | log Z |")
    print("|---|---|---|---|---|")
    for init in (None, "subset"):
        ratio, res = in_cholesky_times(
            lambda i=init: auto_expectation_propagation(
                prior, y, NoisyStep(0.1), max_iter=200, init=i
            ),
            B,
        )
        print(f"| {init or 'cold'} | {ratio:.0f} | {res.n_iter} | {res.converged} | "
              f"{res.log_Z:.4f} |", flush=True)  # fmt: skip


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--step", action="store_true", help="also section 3 (about 10 min)")
    args = parser.parse_args(argv)
    with threadpool_limits(limits=args.threads), robustep.config(blas_threads=args.threads):
        engine_kernels(args.n)
        classifier_methods(args.n)
        if args.step:
            step_likelihood(args.n)


if __name__ == "__main__":
    main()
