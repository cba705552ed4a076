"""BLAS threads and EP fits: why robustep limits them (docs/benchmarks.md, issue 17 §4).

1. A 42 x 42 triangular solve (the size of one EP sweep on the 1-D examples) with
   OpenBLAS's default thread count and with one thread, in the same run.
2. A ``GPClassifier()`` fit with evidence optimisation on breast cancer (398 training
   points, standardised) with the BLAS library's default threads
   (``robustep.config(blas_threads=None)``) and with the library's default setting
   (``blas_threads="auto"``: one thread for n <= 2000), on the machine as it is and with
   ``--busy`` extra busy Python processes started by this script (and stopped by it).

Usage: python benchmarks/blas_threads.py [--busy 2] [--repeat 2]
(run it without OPENBLAS_NUM_THREADS / OMP_NUM_THREADS set: with them at 1 there is
nothing to compare).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import warnings

import numpy as np
import scipy.linalg
from sklearn.exceptions import ConvergenceWarning
from threadpoolctl import threadpool_info, threadpool_limits

import robustep
from robustep import GPClassifier


def per_call(L, b, repeat=200):
    start = time.perf_counter()
    for _ in range(repeat):
        scipy.linalg.solve_triangular(L, b, lower=True, check_finite=False)
    return (time.perf_counter() - start) / repeat


def blas_threads():
    return max((p.get("num_threads", 1) for p in threadpool_info() if p["user_api"] == "blas"),
               default=1)  # fmt: skip


def triangular_solve():
    rng = np.random.default_rng(0)
    L = np.tril(rng.random((42, 42))) + 5 * np.eye(42)
    b = rng.random((42, 3))
    default = per_call(L, b)
    with threadpool_limits(1):
        single = per_call(L, b)
    print(f"   42x42 triangular solve: {default * 1e6:.1f} us with {blas_threads()} BLAS "
          f"threads, {single * 1e6:.1f} us with 1 thread (ratio {default / single:.1f})",
          flush=True)  # fmt: skip


def _breast_cancer():
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    X, y = load_breast_cancer(return_X_y=True)
    X_train, _, y_train, _ = train_test_split(X, y, test_size=0.3, random_state=0)
    return StandardScaler().fit(X_train).transform(X_train), y_train


def gpc_fit(X, y, repeat):
    """Best-of-``repeat`` wall time of GPClassifier().fit with each blas_threads setting."""
    out = {}
    for setting in (None, "auto"):
        best = np.inf
        for _ in range(repeat):
            with robustep.config(blas_threads=setting), warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                start = time.perf_counter()
                GPClassifier().fit(X, y)
                best = min(best, time.perf_counter() - start)
        out[setting] = best
    print(f"   GPClassifier() fit, breast cancer (n={X.shape[0]}): "
          f"{out[None]:.2f} s with {blas_threads()} BLAS threads (blas_threads=None), "
          f"{out['auto']:.2f} s with the default blas_threads='auto' (1 thread) "
          f"(ratio {out[None] / out['auto']:.1f})", flush=True)  # fmt: skip
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy", type=int, default=2, help="busy processes for the loaded run")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        if os.environ.get(var):
            print(f"note: {var}={os.environ[var]} is set; the BLAS default is then that value")
    X, y = _breast_cancer()
    print(f"machine as found (load average {os.getloadavg()[0]:.1f}, "
          f"{os.cpu_count()} CPUs):", flush=True)  # fmt: skip
    triangular_solve()
    gpc_fit(X, y, args.repeat)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(args.busy)]  # fmt: skip
    try:
        time.sleep(1.0)
        print(f"with {args.busy} extra busy processes (load average "
              f"{os.getloadavg()[0]:.1f}):", flush=True)  # fmt: skip
        triangular_solve()
        gpc_fit(X, y, args.repeat)
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
