"""Triangular and Cholesky inverses: LAPACK against robustep.linalg's BLAS-3 recursion.

Prints, for each order n (one BLAS thread unless ``--threads``; best of 5 repeats of a
batch, milliseconds): one in-place Cholesky (``dpotrf`` of a Fortran-ordered copy made
before the clock starts), LAPACK ``dtrtri``, ``robustep.linalg.triangular_inverse``
(block recursion with ``dtrmm``), LAPACK ``dpotri`` followed by the symmetrisation the
library used with it before (``np.tril(B) + np.tril(B, -1).T``) and
``robustep.linalg.cholesky_inverse`` (the recursion, ``dlauum`` and ``B + B.T``), the
ratios old / new, and the largest relative difference between the two results.

Usage: python benchmarks/triangular_inverse.py [--sizes 100 250 455 1000 2000] [--threads 1]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy.linalg import lapack
from threadpoolctl import threadpool_limits

from robustep.linalg import cholesky_inverse, triangular_inverse


def best_ms(fn, reps):
    fn()
    best = np.inf
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - t0) / reps)
    return 1e3 * best


def lapack_cholesky_inverse(L):
    low, info = lapack.dpotri(L, lower=1)
    low = np.tril(low)
    return low + np.tril(low, -1).T


def row(n, rng):
    """One table row at order n."""
    A = rng.normal(size=(n, n))
    B = np.asfortranarray(A @ A.T + n * np.eye(n))
    L = lapack.dpotrf(B, lower=1, clean=True)[0]
    reps = max(1, int(2e8 / n**3))
    work = np.empty_like(B)

    def chol():
        work[...] = B
        lapack.dpotrf(work, lower=1, overwrite_a=1)

    t_chol = best_ms(chol, reps)
    t_trtri = best_ms(lambda: lapack.dtrtri(L, lower=1), reps)
    t_ours = best_ms(lambda: triangular_inverse(L), reps)
    t_potri = best_ms(lambda: lapack_cholesky_inverse(L), reps)
    t_chinv = best_ms(lambda: cholesky_inverse(L), reps)
    ref_t = lapack.dtrtri(L, lower=1)[0]
    ref_c = lapack_cholesky_inverse(L)
    diff = max(
        np.abs(triangular_inverse(L) - ref_t).max() / np.abs(ref_t).max(),
        np.abs(cholesky_inverse(L) - ref_c).max() / np.abs(ref_c).max(),
    )
    return (f"| {n} | {t_chol:.3f} | {t_trtri:.3f} | {t_ours:.3f} | {t_trtri / t_ours:.2f} | "
            f"{t_potri:.3f} | {t_chinv:.3f} | {t_potri / t_chinv:.2f} | {diff:.1e} |")  # fmt: skip


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 250, 455, 1000, 2000])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    print(f"one batch per cell, best of 5, {args.threads} BLAS thread(s); milliseconds")
    print("| n | dpotrf | dtrtri | triangular_inverse | ratio | dpotri | cholesky_inverse "
          "| ratio | max rel. diff |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    with threadpool_limits(args.threads):
        for n in args.sizes:
            print(row(n, rng), flush=True)


if __name__ == "__main__":
    main()
