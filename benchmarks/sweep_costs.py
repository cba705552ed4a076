"""Where a dense parallel EP sweep spends its time, and what the host-side site work costs.

Prints, in one run (the numbers quoted in docs/benchmarks.md "Engine floor" and in
docs/derivations/array_backends.md §4):

1. **Marginal variances inside a fit** (probit, RBF on 2-D inputs, n = ``--n``,
   ``--threads`` BLAS threads, tol 1e-4): every LAPACK ``dtrtri`` call the posterior makes
   during ``expectation_propagation``, timed as it happens and immediately repeated on the
   same factor, against the same call and one Cholesky of the final ``I + S K S`` repeated
   in isolation (best of 5; the Cholesky in place on a Fortran-ordered copy made before
   the clock starts, as the fits factorise).
   Then the same ``dtrtri`` right after a product ``K @ x`` by numpy, right after the same
   product by SciPy's BLAS (``robustep.linalg.blas_matmul``) and after a 0.3 s pause
   (median of 5 each).  numpy and SciPy wheels bundle separate OpenBLAS builds; numpy's
   idle threads spin for a while after its product and share the cores with SciPy's
   LAPACK.  Before 2026-11-24 the dense posterior made its products with numpy, and the
   in-fit calls ran at about twice the isolated time (docs/derivations/engine_floor.md §5).
2. **Forming and factorising I + S K S** (same n and threads, median of 5): the
   full two-pass product against ``linalg.identity_plus_scaled`` (upper triangle in row
   blocks), and LAPACK's Cholesky of a C-ordered matrix (f2py first copies it to
   Fortran order) against the in-place Cholesky of a Fortran-ordered one (the unit of
   ``benchmarks/engine.py``).
3. **Per-site (host) work** at ``--sites`` sites: ``Probit().tilted_moments`` and
   ``StudentT(df=4, scale=0.2).tilted_moments`` (best of 5, one thread).

Usage: python benchmarks/sweep_costs.py [--n 2000] [--threads 2] [--sites 30000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy.linalg import lapack
from sklearn.gaussian_process.kernels import RBF, ConstantKernel
from threadpoolctl import threadpool_limits

import robustep
import robustep.posterior.dense as dense
from robustep.ep import expectation_propagation
from robustep.likelihoods import Probit, StudentT
from robustep.linalg import blas_matmul, identity_plus_scaled
from robustep.posterior import DensePrior


def best_ms(fn, repeat=5):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * min(times)


def in_fit_trtri(n, threads):
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (n, 2))
    y = np.sign(np.sin(X[:, 0]) + 0.3 * rng.standard_normal(n))
    K = (ConstantKernel(2.0) * RBF(1.0))(X)
    calls = []
    original = dense.triangular_inverse

    def timed(L):
        t0 = time.perf_counter()
        out = original(L)
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        original(L)
        calls.append((1e3 * first, 1e3 * (time.perf_counter() - t0)))
        return out

    with threadpool_limits(limits=threads, user_api="blas"), robustep.config(blas_threads=threads):
        prior = DensePrior(K, check=False)
        expectation_propagation(prior, y, Probit(), tol=1e-4)  # warm-up
        dense.triangular_inverse = timed
        try:
            res = expectation_propagation(prior, y, Probit(), tol=1e-4)
        finally:
            dense.triangular_inverse = original
        post = dense.DenseSitePosterior(K, res.site_precision, res.site_shift, need_var=False)
        L = post._L1
        w = np.sqrt(res.site_precision)
        B = np.eye(n) + w[:, None] * K * w[None, :]
        iso_trtri = best_ms(lambda: lapack.dtrtri(L, lower=1))
        iso_chol = min(in_place_cholesky_ms(B) for _ in range(5))
        after = {name: [] for name in ("numpy K @ x", "SciPy BLAS K x", "0.3 s pause")}
        x = rng.standard_normal(n)
        for _ in range(5):
            for name in after:
                if name == "numpy K @ x":
                    K @ x
                elif name == "SciPy BLAS K x":
                    blas_matmul(K, x)
                else:
                    time.sleep(0.3)
                after[name].append(best_ms(lambda: lapack.dtrtri(L, lower=1), repeat=1))
    print(f"## 1. dtrtri inside a fit (n = {n}, {threads} BLAS thread(s), {res.n_iter} sweeps)\n")
    print("| call | in the fit, ms | immediate repeat, ms |")
    print("|---|---|---|")
    for k, (first, again) in enumerate(calls, 1):
        print(f"| {k} | {first:.0f} | {again:.0f} |")
    print(f"\nin isolation (best of 5): dtrtri {iso_trtri:.0f} ms, Cholesky {iso_chol:.0f} ms")
    print("dtrtri right after (median of 5): " + "; ".join(
        f"{name} {np.median(ms):.0f} ms" for name, ms in after.items()) + "\n")  # fmt: skip


def in_place_cholesky_ms(B):
    F = np.asfortranarray(B)
    t0 = time.perf_counter()
    lapack.dpotrf(F, lower=1, overwrite_a=1)
    return 1e3 * (time.perf_counter() - t0)


def forming_and_factorising(n, threads):
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (n, 2))
    K = (ConstantKernel(2.0) * RBF(1.0))(X)
    w = rng.uniform(0.3, 1.0, n)

    def full_product():
        B = np.multiply(K, w[None, :])
        B *= w[:, None]
        B.flat[:: n + 1] += 1.0
        return B

    def median_ms(fn):
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return 1e3 * float(np.median(times))

    with threadpool_limits(limits=threads, user_api="blas"):
        t_full = median_ms(full_product)
        t_upper = median_ms(lambda: identity_plus_scaled(K, w))
        C = full_product()
        t_copy = median_ms(lambda: lapack.dpotrf(C, lower=1, clean=1))
        t_inplace = float(np.median([in_place_cholesky_ms(C) for _ in range(5)]))
    print(f"## 2. Forming and factorising I + S K S (n = {n}, {threads} BLAS thread(s), "
          "median of 5)\n")  # fmt: skip
    print(f"forming: full product {t_full:.1f} ms, upper triangle in row blocks "
          f"{t_upper:.1f} ms")  # fmt: skip
    print(f"Cholesky: of the C-ordered matrix (with f2py's copy) {t_copy:.1f} ms, in place "
          f"on a Fortran-ordered one {t_inplace:.1f} ms\n")  # fmt: skip


def site_work(sites):
    rng = np.random.default_rng(0)
    m = rng.standard_normal(sites)
    v = rng.uniform(0.1, 2.0, sites)
    with threadpool_limits(limits=1):
        t_probit = best_ms(
            lambda: Probit().tilted_moments(np.sign(rng.standard_normal(sites)), m, v)
        )
        y = rng.standard_normal(sites)
        t_t = best_ms(lambda: StudentT(df=4, scale=0.2).tilted_moments(y, m, v))
    print(f"## 3. Per-site work on the host, {sites} sites, one thread (best of 5)\n")
    print(f"Probit tilted moments {t_probit:.1f} ms; Student-t tilted moments {t_t:.0f} ms")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sites", type=int, default=30_000)
    args = parser.parse_args(argv)
    in_fit_trtri(args.n, args.threads)
    forming_and_factorising(args.n, args.threads)
    site_work(args.sites)


if __name__ == "__main__":
    main()
