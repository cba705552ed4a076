"""Multi-class GP classification benchmark.

1. Accuracy: test error and log loss of nested EP (``GPClassifier(multi_class=
   "multinomial")``) against scikit-learn's ``GaussianProcessClassifier`` (one-vs-rest
   Laplace) on the same splits of iris, wine, the 3-class Thyroid and digits (3-class
   subset; all 10 classes with ``--full``) — the ``multiclass-uci`` experiment's run
   (src/robustep/experiments/multiclass_uci.py, protocol in its docstring), printed as a
   table.
2. Cost: CPU seconds of one nested-EP sweep at fixed hyperparameters for n points and c
   classes, as a multiple of one Cholesky factorisation of an n x n matrix timed in the
   same run (the O(c n^3) claim: about a constant times c).

3. ``--damping``: outer iterations of nested EP with and without damping on iris.

Usage: ``python benchmarks/multiclass.py [--full] [--splits N] [--sizes 200 400]
[--classes 3 5 10] [--damping] [--no-accuracy] [--no-cost] [--threads 1]``.  ``--full`` runs the
experiment's full configuration (10 splits, digits with 10 classes; long); without it the
quick configuration (about 15 CPU seconds).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

import numpy as np
from scipy import linalg
from sklearn.exceptions import ConvergenceWarning


def accuracy(full: bool, splits: int | None):
    from robustep.experiments.multiclass_uci import EXPERIMENT, run, summarise

    config = dict(EXPERIMENT.full if full else EXPERIMENT.quick)
    if splits is not None:
        config["n_splits"] = int(splits)
    t0 = time.process_time()
    results = run(config, 0)
    table = summarise(results)
    print(
        f"## multiclass-uci ({'full' if full else 'quick'}), {time.process_time() - t0:.1f} CPU s"
    )
    print(f"config: {config}\n")
    models = config["models"]
    print(
        "| data set | c | n train | "
        + " | ".join(f"{m} error % | {m} log loss" for m in models)
        + " |"
    )
    print("|---|---|---|" + "---|---|" * len(models))
    for d in config["datasets"]:
        cells = [table[(d, m)] for m in models]
        row = " | ".join(
            f"{t['error'][0]:.1f} ({t['error'][1]:.1f}) | "
            f"{t['log_loss'][0]:.3f} ({t['log_loss'][1]:.3f})"
            for t in cells
        )
        print(f"| {d} | {cells[0]['n_classes']} | {cells[0]['n_train']} | {row} |")


def cost(sizes, classes, repeat=3):
    from sklearn.gaussian_process.kernels import RBF

    from robustep.ep.multiclass import nested_ep

    print("\n## cost of one nested-EP iteration / one n x n Cholesky (same run, CPU time)")
    print("| n | c | Cholesky ms | nested EP ms / iteration | ratio | ratio / c |")
    print("|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for n in sizes:
        X = rng.normal(size=(n, 2))
        K = RBF(1.0)(X) + 1e-6 * np.eye(n)
        best = np.inf
        for _ in range(repeat):
            t = time.process_time()
            linalg.cholesky(K + np.eye(n), lower=True)
            best = min(best, time.process_time() - t)
        for c in classes:
            y = np.arange(n) % c
            per = np.inf
            for _ in range(repeat):
                t = time.process_time()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ConvergenceWarning)
                    res = nested_ep(K, y, c, max_iter=5, tol=1e-300, warn=False)
                per = min(per, (time.process_time() - t) / max(res.n_iter, 1))
            ratio = per / best
            print(
                f"| {n} | {c} | {1e3 * best:.1f} | {1e3 * per:.1f} | {ratio:.1f} | "
                f"{ratio / c:.1f} |"
            )


def damping_table():
    """Iterations of nested EP on iris (100 training points) with and without damping."""
    from sklearn.datasets import load_iris
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel

    from robustep.ep.multiclass import nested_ep

    X, y = load_iris(return_X_y=True)
    X = (X - X.mean(0)) / X.std(0)
    tr = np.random.default_rng(0).permutation(150)[:100]
    X, y = X[tr], y[tr]
    print("\n## nested EP iterations on iris (n = 100, tol 1e-4, max_iter 1000)")
    print("| sigma_f^2 | length-scale | damping 0 | damping 0.3 | damping 0.5 |")
    print("|---|---|---|---|---|")
    for amp, ls in [(1, 1), (10, 1), (100, 3), (1000, 3)]:
        K = (ConstantKernel(amp) * RBF(ls))(X)
        cells = []
        for d in (0.0, 0.3, 0.5):
            r = nested_ep(K, y, 3, damping=d, tol=1e-4, max_iter=1000, warn=False)
            cells.append(f"{r.n_iter}{'' if r.converged else ' (not converged)'}")
        print(f"| {amp} | {ls} | " + " | ".join(cells) + " |")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="the experiment's full configuration")
    parser.add_argument("--splits", type=int, default=None, help="override n_splits")
    parser.add_argument("--sizes", type=int, nargs="+", default=[200, 400])
    parser.add_argument("--classes", type=int, nargs="+", default=[3, 5, 10])
    parser.add_argument("--no-accuracy", action="store_true")
    parser.add_argument("--no-cost", action="store_true")
    parser.add_argument("--damping", action="store_true", help="also the damping table")
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads (default 1)")
    args = parser.parse_args(argv)
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=args.threads):
        if not args.no_accuracy:
            accuracy(args.full, args.splits)
        if not args.no_cost:
            cost(args.sizes, args.classes)
        if args.damping:
            damping_table()


if __name__ == "__main__":
    from _harness import run_suite  # benchmarks/_harness.py

    sys.exit(
        run_suite(
            "multiclass",
            main,
            quick=["--splits", "1", "--sizes", "200", "--classes", "3"],
            full="pass",
        )
    )
