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
4. ``--digits``: ``GPClassifier()`` with its defaults on scikit-learn's digits (all 10
   classes, 64 features, standardised with the training set's mean and standard
   deviation; a stratified split with ``--digits-n`` training points, 1000 by default,
   the rest as test, random_state 0): wall and CPU seconds of the fit, test log loss and
   error, the fitted kernel and the evidence evaluations; and the same for scikit-learn's
   ``GaussianProcessClassifier()`` (one-vs-rest Laplace, its defaults, and once more
   from the median pairwise distance as length-scale, since from RBF(1.0) its search
   does not move on these data; ``--no-sklearn`` skips both).  The load average is
   printed next to the times: on a shared machine wall time is the CPU time stretched by
   the other processes.

Usage: ``python benchmarks/multiclass.py [--full] [--splits N] [--sizes 200 400]
[--classes 3 5 10] [--damping] [--digits [--digits-n 1000] [--no-sklearn]] [--no-accuracy]
[--no-cost] [--threads 1]``; the digits table alone: ``python benchmarks/multiclass.py
--digits --no-accuracy --no-cost --results benchmarks/results/multiclass.json``.
``--full`` runs the experiment's full configuration (10 splits, digits with 10 classes;
long) and the digits table; without it the quick configuration (about 15 CPU seconds).
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


def digits_split(n_train, seed=0):
    """Standardised digits: X_train (n_train, 64), X_test, y_train, y_test (stratified)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    X, y = load_digits(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, train_size=n_train, stratify=y, random_state=seed)
    scaler = StandardScaler().fit(Xtr)
    return scaler.transform(Xtr), scaler.transform(Xte), ytr, yte


def digits(n_train, with_sklearn=True):
    """Default-settings fits on digits (10 classes): robustep's and scikit-learn's."""
    import os

    from sklearn.gaussian_process import GaussianProcessClassifier
    from sklearn.metrics import log_loss

    from robustep import GPClassifier

    Xtr, Xte, ytr, yte = digits_split(n_train)
    models = [("robustep GPClassifier()", GPClassifier)]
    if with_sklearn:
        from scipy.spatial.distance import pdist
        from sklearn.gaussian_process.kernels import RBF, ConstantKernel

        median = float(np.median(pdist(Xtr)))

        def median_start():
            return GaussianProcessClassifier(ConstantKernel(1.0) * RBF(median))

        models.append(("scikit-learn GaussianProcessClassifier()", GaussianProcessClassifier))
        models.append((f"scikit-learn, start C(1) * RBF({median:.1f}) (median distance)",
                       median_start))  # fmt: skip
    print(f"\n## digits, 10 classes, n = {len(ytr)} train / {len(yte)} test, default settings")
    print("| model | wall s | CPU s | load average | test log loss | test error % | kernel | "
          "evaluations |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for label, cls in models:
        w0, c0 = time.perf_counter(), time.process_time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            model = cls().fit(Xtr, ytr)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        load = os.getloadavg()[0]
        P = model.predict_proba(Xte)
        error = 100.0 * np.mean(model.classes_[np.argmax(P, 1)] != yte)
        search = getattr(model, "optimizer_result_", None)
        if search is not None:
            core = model._state.core
            subset = getattr(core, "subset_search_result", None)
            evals = f"{search.n_evaluations} on all points"
            if subset is not None:
                evals = f"{subset.n_evaluations} on {len(core.subset)} + " + evals
            kernel = str(model.kernel_)
        else:  # scikit-learn's one-vs-rest: one kernel per class
            kernels = {str(e.kernel_) for e in model.base_estimator_.estimators_}
            kernel = kernels.pop() if len(kernels) == 1 else f"{len(kernels)} kernels"
            evals = "-"
        print(
            f"| {label} | {wall:.1f} | {cpu:.1f} | {load:.1f} | {log_loss(yte, P):.4f} | "
            f"{error:.2f} | {kernel} | {evals} |",
            flush=True,
        )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="the experiment's full configuration")
    parser.add_argument("--splits", type=int, default=None, help="override n_splits")
    parser.add_argument("--sizes", type=int, nargs="+", default=[200, 400])
    parser.add_argument("--classes", type=int, nargs="+", default=[3, 5, 10])
    parser.add_argument("--no-accuracy", action="store_true")
    parser.add_argument("--no-cost", action="store_true")
    parser.add_argument("--damping", action="store_true", help="also the damping table")
    parser.add_argument("--digits", action="store_true", help="the digits table (minutes)")
    parser.add_argument("--digits-n", type=int, default=1000, help="digits training points")
    parser.add_argument("--no-sklearn", action="store_true", help="digits: robustep only")
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
        if args.digits or args.full:
            digits(args.digits_n, with_sklearn=not args.no_sklearn)


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
