"""Why the Makefile and tests run BLAS with one thread (docs/benchmarks.md).

Times a 42 x 42 triangular solve (the size of one EP sweep on the 1-D examples)
with OpenBLAS's default thread count and with one thread, in the same run.

Usage: python benchmarks/blas_threads.py   (run it without OPENBLAS_NUM_THREADS set)
"""

from __future__ import annotations

import time

import numpy as np
import scipy.linalg
from threadpoolctl import threadpool_info, threadpool_limits


def per_call(L, b, repeat=200):
    start = time.perf_counter()
    for _ in range(repeat):
        scipy.linalg.solve_triangular(L, b, lower=True, check_finite=False)
    return (time.perf_counter() - start) / repeat


def main():
    rng = np.random.default_rng(0)
    L = np.tril(rng.random((42, 42))) + 5 * np.eye(42)
    b = rng.random((42, 3))
    threads = max((p.get("num_threads", 1) for p in threadpool_info()), default=1)
    default = per_call(L, b)
    with threadpool_limits(1):
        single = per_call(L, b)
    print(f"42x42 triangular solve: {default * 1e6:.1f} us with {threads} BLAS threads, "
          f"{single * 1e6:.1f} us with 1 thread (ratio {default / single:.0f})")  # fmt: skip


if __name__ == "__main__":
    main()
