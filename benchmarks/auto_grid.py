"""Hard-problem grid for ``method="auto"``.

A fixed grid of problems on which EP is known to struggle, each a few seeds and sizes:

* ``step-20%``: ``GPClassifier(likelihood="step", label_noise=0.2)`` on labels with 20%
  flipped, default kernel and evidence optimiser;
* ``t1.5-20%``: ``StudentTGPRegressor(df=1.5)`` with 20% gross outliers (+-5...20 sds),
  default kernel, scale and optimiser;
* ``tiny-ell``: fixed kernels with a tiny length-scale and a large signal variance,
  ``ConstantKernel(1e4) * RBF(ell)``, ell in {1e-3, 3e-2}, on inputs with near-duplicates
  (the probit classifier, the step classifier with 20% flips, and the Student-t regressor,
  nu = 1.5, 20% outliers).

For each problem it prints converged / total for the new default ``method="auto"`` next to
the old default ``method="ep"`` (both estimators), the number of fits that raised a
ConvergenceWarning, which stage ``method="auto"`` ended with (``method_used_``) and the
summed seconds.

Usage::

    nice python benchmarks/auto_grid.py           # the full grid (docs/reliability.md)
    python benchmarks/auto_grid.py --quick        # the subset run by tests/ep/test_auto.py
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections import Counter, defaultdict

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

from robustep.estimators.gp_classifier import GPClassifier
from robustep.estimators.student_t_regressor import StudentTGPRegressor


def _classification(n, rng, flip):
    X = rng.uniform(-2, 2, (n, 2))
    y = np.where(np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] > 0, 1, -1)
    idx = rng.choice(n, int(round(flip * n)), replace=False)
    y[idx] = -y[idx]
    return X, y


def _regression(n, rng, outliers):
    X = rng.uniform(-3, 3, (n, 1))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(n)
    idx = rng.choice(n, int(round(outliers * n)), replace=False)
    y[idx] += rng.choice([-1.0, 1.0], idx.size) * rng.uniform(5, 20, idx.size)
    return X, y


def _near_duplicates(X, rng):
    """Every second point moved by 1e-3: pairs of strongly correlated latents."""
    X = X.copy()
    X[1::2] = X[0::2][: X[1::2].shape[0]] + 1e-3 * rng.standard_normal(X[1::2].shape)
    return X


def _tiny(ell):
    return ConstantKernel(1e4, "fixed") * RBF(ell, "fixed")


def cells(quick=False):
    """(problem, label, make(new_default: bool) -> estimator, X, y) for the grid."""
    out = []
    seeds = (0,) if quick else (0, 1, 2)
    sizes_c = (40,) if quick else (50, 150)
    sizes_r = (30,) if quick else (40, 100)
    for seed in seeds:
        for n in sizes_c:
            rng = np.random.default_rng(seed)
            X, y = _classification(n, rng, 0.2)

            def make(new):
                kw = {} if new else {"method": "ep"}
                return GPClassifier(likelihood="step", label_noise=0.2, **kw)

            out.append(("step-20%", f"n={n} seed={seed}", make, X, y))
        for n in sizes_r:
            rng = np.random.default_rng(100 + seed)
            X, y = _regression(n, rng, 0.2)

            def make(new):
                return StudentTGPRegressor(df=1.5, **({} if new else {"method": "ep"}))

            out.append(("t1.5-20%", f"n={n} seed={seed}", make, X, y))
        for ell in (1e-3, 3e-2):
            if quick and ell == 1e-3:
                continue
            n = sizes_c[0]
            rng = np.random.default_rng(200 + seed)
            X, y = _classification(n, rng, 0.2)
            X = _near_duplicates(X, rng)

            def make(new, ell=ell):
                kw = {} if new else {"method": "ep"}
                return GPClassifier(_tiny(ell), optimizer=None, **kw)

            out.append(("tiny-ell probit", f"ell={ell:g} n={n} seed={seed}", make, X, y))

            def make(new, ell=ell):
                kw = {} if new else {"method": "ep"}
                return GPClassifier(
                    _tiny(ell), likelihood="step", label_noise=0.2, optimizer=None, **kw
                )

            out.append(("tiny-ell step", f"ell={ell:g} n={n} seed={seed}", make, X, y))
            n = sizes_r[0]
            rng = np.random.default_rng(300 + seed)
            Xr, yr = _regression(n, rng, 0.2)
            Xr = _near_duplicates(Xr, rng)

            def make(new, ell=ell):
                kw = {} if new else {"method": "ep"}
                return StudentTGPRegressor(_tiny(ell), df=1.5, optimizer=None, **kw)

            out.append(("tiny-ell t1.5", f"ell={ell:g} n={n} seed={seed}", make, Xr, yr))
    return out


def run_one(make, X, y, new):
    est = make(new)
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        est.fit(X, y)
    seconds = time.perf_counter() - t0
    warned = any(issubclass(w.category, ConvergenceWarning) for w in caught)
    return {
        "converged": bool(est.converged_),
        "warned": warned,
        "method_used": getattr(est, "method_used_", getattr(est, "method", "?")),
        "seconds": seconds,
    }


def run(quick=False, verbose=False):
    """Run the grid; returns {problem: {"new": [...], "old": [...]}}."""
    table = defaultdict(lambda: {"new": [], "old": []})
    for problem, label, make, X, y in cells(quick):
        for key, new in (("old", False), ("new", True)):
            r = run_one(make, X, y, new)
            table[problem][key].append(r)
            if verbose:
                print(f"{problem:16s} {label:24s} {key}: {r}", flush=True)
    return table


def format_table(table):
    lines = [
        "| problem | runs | new default: converged | warned | method_used_ | seconds "
        "| old default: converged | warned | seconds |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for problem, rows in table.items():
        new, old = rows["new"], rows["old"]
        used = Counter(r["method_used"] for r in new)
        used_s = ", ".join(f"{k} {v}" for k, v in sorted(used.items()))
        lines.append(
            f"| {problem} | {len(new)} | {sum(r['converged'] for r in new)}/{len(new)} "
            f"| {sum(r['warned'] for r in new)} | {used_s} "
            f"| {sum(r['seconds'] for r in new):.1f} "
            f"| {sum(r['converged'] for r in old)}/{len(old)} "
            f"| {sum(r['warned'] for r in old)} | {sum(r['seconds'] for r in old):.1f} |"
        )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    table = run(quick=args.quick, verbose=args.verbose)
    print(format_table(table))
    print(f"\n{time.perf_counter() - t0:.1f} s in all")


if __name__ == "__main__":
    from _harness import run_suite  # benchmarks/_harness.py

    sys.exit(run_suite("auto_grid", main, quick="pass"))
