"""The dense EP engine at its floor, in units of one Cholesky of K.

Prints, in one run on one machine (every time is a median of ``--repeat`` runs; the
Cholesky time is measured before and after the fits and its median is the unit):

1. **Floor** (probit, RBF kernel on 2-D inputs, n = ``--n`` (2000), ``--threads`` (2) BLAS
   threads through threadpoolctl and ``robustep.config(blas_threads=...)``, tol 1e-4,
   fixed hyperparameters): the whole EP fit in Cholesky-times, its O(n^3) sweeps and O(n^2)
   mean sweeps, and the Cholesky-equivalents spent per sweep, for

   * ``expectation_propagation(K, y, Probit())`` (includes the O(n^3) check of K),
   * the same on ``DensePrior(K, check=False)`` (no check: what the estimators run),
   * the same with ``mean_sweeps=0`` (the engine without mean sweeps),
   * the same with ``init="subset"`` (the start from FITC EP on a subset of the rows;
     docs/derivations/engine_floor.md §5),
   * ``GPClassifier(method="ep", optimizer=None).fit(X, y)`` (kernel, validation, EP,
     fitted attributes, leave-one-out diagnostics; from n = 2000 with the subset start),
     and the same fit with the cold start;
   * ``GPClassifier(method="laplace", optimizer=None).fit`` (Newton steps, one Cholesky
     each; "sweeps" are Newton steps);

   and the cost of the marginal variances' options per sweep: LAPACK ``dtrtri``,
   ``robustep.linalg.triangular_inverse`` (its BLAS-3 recursion, the one the engine uses)
   and ``dpotri`` (the full inverse), each / one Cholesky.
2. **Small problems**: ``GPClassifier(optimizer=None).fit`` at n = 50 and
   ``predict_proba`` on 1000 points, median wall-clock and CPU time of ``--small-repeat``
   runs, one BLAS thread (the library's default for n <= 2000).
3. With ``--sizes``: the engine table (probit and Student-t, n in ``--sizes``): Cholesky,
   sweeps, mean sweeps, and the whole run in Cholesky-times, for the engine, the engine
   before mean sweeps and the engine with ``init="subset"``.

Goals: the floor <= 15 Cholesky-times; the small fit <= 10 ms, predict_proba
<= 5 ms.  On a loaded machine the ratios move with the load; compare within one run.

4. With ``--short-length-scales [ELL ...]`` only: the cost of subnormal numbers under
   short length-scales, with K as the kernel gives it and with its entries below the
   resolution of its diagonal zeroed (``robustep.linalg.zero_below_resolution``;
   docs/derivations/engine_floor.md §8).

Usage: python benchmarks/engine.py [--n 2000] [--threads 2] [--repeat 3]
       [--sizes 500 1000 2000 4000] [--student-t]
       python benchmarks/engine.py --short-length-scales [1 0.05 0.0132]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np
from scipy.linalg import lapack
from sklearn.gaussian_process.kernels import RBF, ConstantKernel
from threadpoolctl import threadpool_limits

import robustep
from robustep.ep import expectation_propagation
from robustep.estimators import GPClassifier
from robustep.likelihoods import Probit, StudentT
from robustep.linalg import triangular_inverse
from robustep.posterior import DensePrior

KERNEL = ConstantKernel(2.0) * RBF(1.0)


def problem(n, kind, seed=0):
    """(X (n, 2), K (n, n), y (n,), likelihood) for "probit" or "student-t"."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, 2))
    K = KERNEL(X) + 1e-6 * np.eye(n)
    f = np.sin(X[:, 0]) + np.cos(1.5 * X[:, 1])
    if kind == "probit":
        y = np.where(f + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
        return X, K, y, Probit()
    y = f + 0.2 * rng.standard_normal(n)
    outliers = rng.random(n) < 0.05
    y[outliers] += rng.choice([-1, 1], outliers.sum()) * rng.uniform(3, 6, outliers.sum())
    return X, K, y, StudentT(df=4.0, scale=0.2)


def timed(fn, repeat):
    """(median wall seconds, median CPU seconds, last result) over ``repeat`` runs."""
    wall, cpu, out = [], [], None
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        out = fn()
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - t)
    return float(np.median(wall)), float(np.median(cpu)), out


def one_cholesky(B):
    """(wall, CPU) seconds of LAPACK's Cholesky of B in place, as the fits factorise.

    The Fortran-ordered copy is made before the clock starts: passing the C-ordered B
    itself would time a 32 MB transposing copy too (24-25 ms at n = 2000, a quarter to a third of
    the factorisation), which would flatter every ratio.
    """
    F = np.asfortranarray(B)
    return timed(lambda: lapack.dpotrf(F, lower=1, clean=1, overwrite_a=1), 1)[:2]


def cholesky_time(K, repeat):
    """[(wall, CPU) seconds] of ``repeat`` Choleskys of I + K."""
    B = K + np.eye(K.shape[0])
    return [one_cholesky(B) for _ in range(repeat)]


def quiet(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn()


def ratio_to_cholesky(fn, B, repeat):
    """Median over ``repeat`` rounds of (wall, CPU) time of ``fn()`` divided by the mean of
    one Cholesky of B just before and one just after it (the load of a shared machine
    drifts; neighbouring measurements see about the same load); and the last result."""
    chol = lambda: one_cholesky(B)  # noqa: E731
    walls, cpus, out = [], [], None
    for _ in range(repeat):
        before = chol()
        wall, cpu, out = quiet(lambda: timed(fn, 1))
        after = chol()
        walls.append(wall / (0.5 * (before[0] + after[0])))
        cpus.append(cpu / (0.5 * (before[1] + after[1])))
    return float(np.median(walls)), float(np.median(cpus)), out


def floor(n, threads, repeat, kind="probit"):
    X, K, y, lik = problem(n, kind)
    labels = (y > 0).astype(int)
    prior = DensePrior(K, check=False)
    B = K + np.eye(n)
    with threadpool_limits(limits=threads, user_api="blas"), robustep.config(blas_threads=threads):
        chol = cholesky_time(K, repeat)
        L = lapack.dpotrf(B, lower=1, clean=1)[0]
        trtri = ratio_to_cholesky(lambda: lapack.dtrtri(L, lower=1), B, repeat)
        ours = ratio_to_cholesky(lambda: triangular_inverse(L), B, repeat)
        potri = ratio_to_cholesky(lambda: lapack.dpotri(L, lower=1), B, repeat)
        runs = {
            "EP(K), checks K": lambda: expectation_propagation(K, y, lik, tol=1e-4),
            "EP(DensePrior, no check)": lambda: expectation_propagation(prior, y, lik, tol=1e-4),
            "same, mean_sweeps=0 (before)": lambda: expectation_propagation(
                prior, y, lik, tol=1e-4, mean_sweeps=0
            ),
            "same, init='subset'": lambda: expectation_propagation(
                prior, y, lik, tol=1e-4, init="subset"
            ),
        }
        if kind == "probit":
            clf = GPClassifier(KERNEL, method="ep", optimizer=None, tol=1e-4)
            runs["GPClassifier(method='ep').fit"] = lambda: clf.fit(X, labels)._state.result

            def cold_fit():
                with robustep.config(subset_start_min_n=None):
                    return clf.fit(X, labels)._state.result

            runs["same, cold start (no subset)"] = cold_fit
            lap = GPClassifier(KERNEL, method="laplace", optimizer=None)
            runs["GPClassifier(method='laplace').fit"] = lambda: lap.fit(X, labels)._state.result
        results = {}
        for name, fn in runs.items():
            try:
                results[name] = ratio_to_cholesky(fn, B, repeat)
            except (TypeError, ValueError) as err:
                # an older checkout (PYTHONPATH) without init="subset" or
                # subset_start_min_n: its other rows still compare with this one
                results[name] = err
    c, cc = (float(np.median([t[i] for t in chol])) for i in (0, 1))
    print(f"\n{kind} EP floor: n = {n}, {threads} BLAS thread(s), tol 1e-4, median of {repeat}")
    print(f"one Cholesky of I + K: wall {c * 1e3:.1f} ms, CPU {cc * 1e3:.1f} ms")
    print("ratios: each run divided by the mean of the Choleskys just before and after it;")
    print("wall / wall and CPU / CPU (CPU time is less sensitive to the load)")
    print(f"marginal variances per sweep: dtrtri {trtri[0]:.2f} / {trtri[1]:.2f}, "
          f"linalg.triangular_inverse (used) {ours[0]:.2f} / {ours[1]:.2f}, dpotri "
          f"{potri[0]:.2f} / {potri[1]:.2f} Cholesky-times (wall / CPU)")  # fmt: skip
    print(f"{'run':32s} {'wall/chol':>9s} {'CPU/chol':>8s} {'sweeps':>6s} {'mean sw':>7s} "
          f"{'chol/sweep':>10s} {'conv':>5s}")  # fmt: skip
    for name, outcome in results.items():
        if isinstance(outcome, Exception):
            print(f"{name:32s} not run here: {outcome}", flush=True)
            continue
        wall, cpu, res = outcome
        sweeps = int(res.n_iter)
        mean = int(sum(getattr(res, "history", {}).get("mean_sweeps", [])))
        conv = str(bool(res.converged))
        print(f"{name:32s} {wall:9.1f} {cpu:8.1f} {sweeps:6d} {mean:7d} "
              f"{wall / max(sweeps, 1):10.2f} {conv:>5s}", flush=True)  # fmt: skip


def small(repeat):
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, (50, 2))
    y = (np.sin(X[:, 0]) + 0.3 * rng.standard_normal(50) > 0).astype(int)
    Xt = rng.uniform(-3, 3, (1000, 2))
    clf = GPClassifier(optimizer=None).fit(X, y)  # warm up imports and caches
    clf.predict_proba(Xt)
    fit = timed(lambda: clf.fit(X, y), repeat)
    proba = timed(lambda: clf.predict_proba(Xt), repeat)
    print(f"\nsmall problems (median of {repeat}; goals 10 ms and 5 ms):")
    print(f"GPClassifier(optimizer=None).fit, n = 50:   wall {fit[0] * 1e3:6.2f} ms, "
          f"CPU {fit[1] * 1e3:6.2f} ms ({clf.n_iter_} sweeps)")  # fmt: skip
    print(f"predict_proba, 1000 points:                 wall {proba[0] * 1e3:6.2f} ms, "
          f"CPU {proba[1] * 1e3:6.2f} ms")  # fmt: skip


def table(sizes, repeat, threads):
    print(f"\nengine table ({threads} BLAS thread(s); tol 1e-4; K checked; median of {repeat})")
    print(f"{'lik':9s} {'n':>5s} {'chol s':>8s} {'sweeps':>6s} {'mean sw':>7s} "
          f"{'total/chol':>10s} {'before: sweeps':>14s} {'/chol':>6s} "
          f"{'subset: sweeps':>14s} {'/chol':>6s} {'conv':>5s}")  # fmt: skip

    def run(K, y, lik, mean_sweeps, init=None):
        fit = lambda: expectation_propagation(  # noqa: E731
            K, y, lik, tol=1e-4, mean_sweeps=mean_sweeps, init=init
        )
        return quiet(lambda: timed(fit, repeat))

    with threadpool_limits(limits=threads, user_api="blas"):
        for n in sizes:
            for kind in ("probit", "student-t"):
                _, K, y, lik = problem(n, kind)
                chol = float(np.median([t[0] for t in cholesky_time(K, repeat)]))
                total, _, res = run(K, y, lik, "auto")
                before, _, res0 = run(K, y, lik, 0)
                subset, _, res1 = run(K, y, lik, "auto", init="subset")
                mean = int(sum(res.history["mean_sweeps"]))
                conv = str(res.converged and res0.converged and res1.converged)
                print(f"{kind:9s} {n:5d} {chol:8.4f} {res.n_iter:6d} {mean:7d} "
                      f"{total / chol:10.1f} {res0.n_iter:14d} {before / chol:6.1f} "
                      f"{res1.n_iter:14d} {subset / chol:6.1f} {conv:>5s}", flush=True)  # fmt: skip


def _subnormal(A):
    A = np.asarray(A)
    return int(np.count_nonzero((A != 0) & (np.abs(A) < np.finfo(float).tiny)))


def resolution(n, lengths, repeat):
    """Short length-scales (docs/derivations/engine_floor.md §8): per length-scale of an
    RBF kernel on n points uniform in [-1, 1]^2, the subnormal entries of K and of the
    Cholesky factor of I + W K W (site precisions uniform in [0.1, 5], a tenth of them
    -0.3), and the seconds of dpotrf and of a dense site posterior (with negative sites)
    on K as the kernel gives it and with its entries below the resolution of the diagonal
    zeroed (``robustep.linalg.zero_below_resolution``); one BLAS thread, medians of
    ``repeat``."""
    from robustep.linalg import zero_below_resolution
    from robustep.posterior.dense import DenseSitePosterior

    rng = np.random.default_rng(0)
    X = rng.uniform(-1.0, 1.0, size=(n, 2))
    tau = rng.uniform(0.1, 5.0, n)
    tau[: n // 10] = -0.3
    nu = rng.normal(size=n)
    w = np.sqrt(np.abs(tau))
    print(f"\nshort length-scales (n = {n}, one BLAS thread, median of {repeat}):")
    print(f"{'ell':>8s} {'K':>8s} {'subnormal: K':>13s} {'factor':>8s} {'dpotrf s':>9s} "
          f"{'posterior s':>11s}")  # fmt: skip
    with threadpool_limits(limits=1, user_api="blas"):
        for ell in lengths:
            raw = RBF(ell)(X)
            for name, K in (("as given", raw), ("zeroed", zero_below_resolution(raw.copy()))):
                B = np.asfortranarray(w[:, None] * K * w[None, :] + np.eye(n))
                times = []
                for _ in range(repeat):
                    t0 = time.perf_counter()
                    L, _ = lapack.dpotrf(B, lower=1, clean=1)
                    t1 = time.perf_counter()
                    DenseSitePosterior(K, tau, nu)
                    times.append((t1 - t0, time.perf_counter() - t1))
                chol, post = np.median(times, axis=0)
                print(f"{ell:8.4g} {name:>8s} {_subnormal(K):13d} {_subnormal(L):8d} "
                      f"{chol:9.3f} {post:11.3f}", flush=True)  # fmt: skip


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--small-repeat", type=int, default=30)
    parser.add_argument("--sizes", type=int, nargs="*", default=[])
    parser.add_argument("--student-t", action="store_true", help="also the Student-t floor")
    parser.add_argument("--short-length-scales", type=float, nargs="*", metavar="ELL",
                        help="only the short length-scale table (section 8)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.short_length_scales is not None:
        resolution(args.n, args.short_length_scales or [1.0, 0.05, 0.0132], args.repeat)
        return
    print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")
    floor(args.n, args.threads, args.repeat)
    if args.student_t:
        floor(args.n, args.threads, args.repeat, kind="student-t")
    small(args.small_repeat)
    if args.sizes:
        table(args.sizes, args.repeat, args.threads)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    from _harness import run_suite  # benchmarks/_harness.py

    sys.exit(
        run_suite("engine", main, quick=["--n", "500", "--repeat", "1", "--small-repeat", "5"])
    )
