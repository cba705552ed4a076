"""Sparse (FITC) multinomial GP classification: accuracy against dense, memory at large n.

docs/derivations/multiclass.md §8.

1. Accuracy: ``GPClassifier(multi_class="multinomial")`` dense against
   ``inducing_points=m`` (k-means start, hyperparameters and inducing inputs optimised) on
   a seeded nonlinear 3-class problem in 2-D (400 training, 1000 test points) and on wine
   (scikit-learn's bundled copy, standardised, one seeded 70/30 split): test accuracy,
   mean test negative log predictive density, log Z_EP, fit + predict seconds.
2. Large n: n = 2000, m = 50, 3 classes: fit (optimiser on) and predict 2000 points under
   tracemalloc; the peak against one n x n float64 array.

Usage: ``python benchmarks/multiclass_sparse.py [--m 10 25 50] [--n-large 2000]``.
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
import warnings

import numpy as np
from sklearn.datasets import load_wine
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from robustep.estimators import GPClassifier


def synthetic(n, rng):
    X = rng.uniform(-3, 3, size=(n, 2))
    f = np.stack([np.sin(1.5 * X[:, 0]), np.cos(1.5 * X[:, 1]), X[:, 0] * X[:, 1] / 6], 1)
    return X, np.argmax(f + 0.3 * rng.normal(size=(n, 3)), axis=1)


def problems():
    X, y = synthetic(1400, np.random.default_rng(1))
    yield "synthetic (n=400)", X[:400], y[:400], X[400:], y[400:]
    Xw, yw = load_wine(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(Xw, yw, test_size=0.3, random_state=0, stratify=yw)
    sc = StandardScaler().fit(Xtr)
    yield f"wine (n={len(ytr)})", sc.transform(Xtr), ytr, sc.transform(Xte), yte


def accuracy(ms):
    print("problem               model      acc    NLPD    log Z_EP   seconds")
    for name, Xtr, ytr, Xte, yte in problems():
        for m in [None, *ms]:
            if m is not None and m > len(ytr):
                continue
            t = time.process_time()
            est = GPClassifier(inducing_points=m, multi_class="multinomial", random_state=0)
            est.fit(Xtr, ytr)
            P = est.predict_proba(Xte)
            t = time.process_time() - t
            nlpd = -np.mean(np.log(np.maximum(P[np.arange(len(yte)), yte], 1e-300)))
            label = "dense" if m is None else f"m = {m}"
            print(
                f"{name:20s}  {label:8s}  {np.mean(P.argmax(1) == yte):.3f}  {nlpd:.4f}  "
                f"{est.log_marginal_likelihood_value_:9.2f}  {t:7.1f}"
            )


def large(n):
    rng = np.random.default_rng(7)
    X = rng.normal(size=(n, 2))
    y = np.argmax(X @ rng.normal(size=(2, 3)) + 0.5 * rng.normal(size=(n, 3)), axis=1)
    Xt = rng.normal(size=(n, 2))
    GPClassifier(inducing_points=5, random_state=0).fit(X[:40], y[:40]).predict(Xt[:5])
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    t = time.process_time()
    est = GPClassifier(inducing_points=50, random_state=0).fit(X, y)
    est.predict_proba(Xt)
    t = time.process_time() - t
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    print(
        f"n = {n}, m = 50, c = 3: fit + predict {n} points {t:.1f} CPU s, tracemalloc peak "
        f"{peak / 1e6:.1f} MB (one n x n float64 array: {8 * n * n / 1e6:.0f} MB), "
        f"train accuracy {est.score(X, y):.3f}"
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, nargs="+", default=[10, 25, 50])
    parser.add_argument("--n-large", type=int, default=2000)
    args = parser.parse_args(argv)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        accuracy(args.m)
        large(args.n_large)


if __name__ == "__main__":
    from _harness import run_suite  # benchmarks/_harness.py

    sys.exit(run_suite("multiclass_sparse", main, quick=["--m", "10", "25", "--n-large", "500"]))
