"""Sparse (FITC) robust EP: exactness, accuracy, speed, memory, robustness.

Prints, in one run:

1. Exactness: inducing inputs = training inputs (m = n, no jitter): sparse EP vs dense EP,
   largest differences of means, variances, log Z and predictive probabilities (probit) /
   predictive means and variances (Student-t, with negative sites).
2. Accuracy: synthetic 2-D and Spambase (``robustep.datasets.load_spambase``, features
   log(x + 0.1) and standardised), n training points, m k-means inducing inputs, both
   models at the *same* hyperparameters (kernel fitted by the dense GPClassifier on 500
   training points): test error and mean negative log predictive density (MNLP).
3. Speed: probit, d = 8, m inducing inputs, fixed hyperparameters: time per parallel sweep
   for several n (must grow linearly); EP to tol 1e-4 at the large n, and the cost of one
   optimiser evaluation there (warm-started EP + gradient w.r.t. theta and Z); a whole
   GPClassifier fit with hyperparameter and inducing-input optimisation at a smaller size
   (n = 1e4, m = 128 in the full run: at n = 1e5, m = 512 L-BFGS-B over 4096 inducing
   coordinates needs hundreds of evaluations, far beyond the issue's 5 minutes).
4. Memory: peak resident memory of a fixed-hyperparameter probit fit at large n (a
   subprocess; ru_maxrss of the child).
5. Robustness: Student-t regression with 10% gross outliers, fitted sparse with the
   hyperparameters optimised (inducing inputs fixed at the k-means centres: the joint
   optimisation of m x d inducing coordinates needs hundreds of L-BFGS evaluations):
   converged (no ConvergenceWarning) and its test MAE on clean
   test points vs the same model fitted on outlier-free data.

6. Dask: probit on a 2-worker LocalCluster (one thread each, separate processes), X
   generated as a Dask array chunked by rows, m inducing inputs, fixed hyperparameters:
   time per sweep and the whole fit to tol 1e-4, and the same in memory for comparison.

Usage: ``python benchmarks/sparse.py [--quick]``; ``--quick`` runs reduced sizes in under a
minute (the full run needs an idle machine: several minutes and ~2 GB).  ``--only
optimise --opt-n 100000 --opt-m 512`` runs section 3's optimising fit alone at the
issue's size (about 30 minutes on 2 cores; it prints the objective evaluations, the
search's evidence against time and the test error); ``--opt-maxiter K`` caps its
L-BFGS-B iterations at K through a callable ``optimizer``, ``--opt-fixed-inducing``
optimises the kernel alone (the k-means inducing inputs fixed).  ``--only floor`` (with
the same ``--opt-n``/``--opt-m``) times the BLAS passes that any optimiser evaluation at
that size makes and prints that floor against a measured evaluation.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings

# This file is named sparse.py: drop its folder from sys.path so that `import sparse`
# (the pydata package, which dask tries to import) does not find this script.
if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
    sys.path.pop(0)

import numpy as np
from scipy.special import ndtr
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

FULL = {
    "exact_n": 300,
    "acc_n": 4000,
    "acc_m": 256,
    "acc_test": 2000,
    "speed_ns": [10_000, 30_000, 100_000, 300_000],
    "speed_m": 512,
    "speed_fit_n": 100_000,
    "opt_n": 10_000,
    "opt_m": 128,
    "mem_n": 200_000,
    "mem_m": 512,
    "t_n": 100_000,
    "t_m": 256,
    "dask_n": 1_000_000,
    "dask_m": 256,
    "dask_chunk": 100_000,
    "dask_processes": True,
}
QUICK = {
    "exact_n": 80,
    "acc_n": 800,
    "acc_m": 64,
    "acc_test": 1000,
    "speed_ns": [2_000, 6_000, 20_000],
    "speed_m": 128,
    "speed_fit_n": 20_000,
    "opt_n": 1_000,
    "opt_m": 16,
    "mem_n": 20_000,
    "mem_m": 128,
    "t_n": 1_000,
    "t_m": 32,
    "dask_n": 10_000,
    "dask_m": 64,
    "dask_chunk": 2_500,
    "dask_processes": False,
}


def _probit_data(n, d, rng):
    X = rng.uniform(-3, 3, size=(n, d))
    f = np.sin(1.5 * X[:, 0]) * np.cos(X[:, 1]) + 0.5 * np.sum(np.sin(X[:, 2:]), axis=1)
    y = np.where(f + 0.3 * rng.normal(size=n) > 0, 1, -1)
    return X, y


def _mnlp(y, p):
    """Mean negative log predictive density of labels y (n,) in {-1, 1} (or {0, 1})
    under P(y = 1) = p (n,)."""
    return float(-np.mean(np.log(np.clip(np.where(y > 0, p, 1 - p), 1e-300, None))))


def _kernel():
    return ConstantKernel(2.0) * RBF(1.0)


def _quiet():
    ctx = warnings.catch_warnings()
    ctx.__enter__()
    warnings.simplefilter("ignore", ConvergenceWarning)
    return ctx


# ------------------------------------------------------------------------- 1 exactness
def exactness(cfg):
    from robustep.ep import expectation_propagation
    from robustep.likelihoods import Probit, StudentT
    from robustep.posterior.sparse import FITCPrior

    rng = np.random.default_rng(0)
    n = cfg["exact_n"]
    rows = []
    for name in ("probit", "student-t"):
        if name == "probit":
            X, y = _probit_data(n, 2, rng)
            lik = Probit()
        else:
            X = rng.uniform(-3, 3, size=(n, 2))
            y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=n)
            out = rng.choice(n, n // 10, replace=False)
            y[out] += rng.choice([-1, 1], out.size) * rng.uniform(3, 6, out.size)
            lik = StudentT(df=3.0, scale=0.1)
        kernel = ConstantKernel(1.0) * RBF(1.0)
        K = kernel(X) + 1e-6 * np.eye(n)
        Xs = rng.uniform(-3, 3, size=(200, 2))
        Ks, kd = kernel(Xs, X), kernel.diag(Xs) + 1e-6
        rd = expectation_propagation(K, y, lik, tol=1e-9, max_iter=2000)
        rs = expectation_propagation(
            FITCPrior(K, K, np.diag(K), jitter=0.0), y, lik, tol=1e-9, max_iter=2000
        )
        md, vd = rd.predict(Ks, kd)
        ms, vs = rs.predict(Ks, kd)
        if name == "probit":
            pd, ps = ndtr(md / np.sqrt(1 + vd)), ndtr(ms / np.sqrt(1 + vs))
            pred = float(np.max(np.abs(pd - ps)))
        else:
            pred = float(max(np.max(np.abs(md - ms)), np.max(np.abs(vd - vs))))
        rows.append(
            (name, n, rd.posterior.n_negative, np.max(np.abs(rd.mean - rs.mean)),
             np.max(np.abs(rd.var - rs.var)), abs(rd.log_Z - rs.log_Z), pred)
        )  # fmt: skip
    print("\n### 1. Exactness (m = n, inducing = training inputs, no jitter)\n")
    print(
        "| likelihood | n | negative sites | max|Δmean| | max|Δvar| | |Δlog Z| | max|Δpredictive| |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]:.1e} | {r[4]:.1e} | {r[5]:.1e} | {r[6]:.1e} |")
    return rows


# ------------------------------------------------------------------------- 2 accuracy
def _spambase(rng):
    from robustep.datasets import load_spambase

    X, y = load_spambase()
    X = np.log(np.asarray(X, float) + 0.1)
    X = (X - X.mean(0)) / np.maximum(X.std(0), 1e-12)
    idx = rng.permutation(X.shape[0])
    return X[idx], np.asarray(y)[idx]


def accuracy(cfg):
    from robustep.ep import expectation_propagation
    from robustep.estimators import GPClassifier
    from robustep.estimators._sparse import resolve_inducing_points
    from robustep.likelihoods import Probit
    from robustep.posterior.sparse import FITCPrior

    rng = np.random.default_rng(1)
    n, m = cfg["acc_n"], cfg["acc_m"]
    sets = {}
    X, y = _probit_data(n + cfg["acc_test"], 2, rng)
    sets["synthetic 2-D"] = (X[:n], y[:n], X[n:], y[n:])
    try:
        X, y = _spambase(rng)
        nt = min(n, X.shape[0] - 500)
        sets["Spambase"] = (X[:nt], y[:nt], X[nt:], y[nt:])
    except OSError as err:  # DataUnavailableError
        print(f"Spambase unavailable: {err}")
    print(f"\n### 2. Accuracy (m = {m}, same hyperparameters for both)\n")
    print("| data | n train | n test | kernel | dense error | sparse error | dense MNLP | "
          "sparse MNLP | dense s | sparse s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for name, (Xtr, ytr, Xte, yte) in sets.items():
        sub = GPClassifier(random_state=0).fit(Xtr[:500], ytr[:500])
        kernel = sub.kernel_
        res = {}
        for kind in ("dense", "sparse"):
            t0 = time.perf_counter()
            ctx = _quiet()
            if kind == "dense":
                r = expectation_propagation(kernel(Xtr), ytr, Probit(), tol=1e-4)
                mu, var = r.predict(kernel(Xte, Xtr), kernel.diag(Xte))
            else:
                Z = resolve_inducing_points(m, Xtr, 0)
                prior = FITCPrior.from_kernel(kernel, Xtr, Z, jitter=1e-6 * kernel.diag(Z[:1])[0])
                r = expectation_propagation(prior, ytr, Probit(), tol=1e-4)
                mu, var = r.predict(kernel(Xte, Z), kernel.diag(Xte))
            ctx.__exit__(None, None, None)
            p = np.clip(ndtr(mu / np.sqrt(1 + var)), 1e-12, 1 - 1e-12)
            err = float(np.mean(np.where(p > 0.5, 1, -1) != yte))
            mnlp = _mnlp(yte, p)
            res[kind] = (err, mnlp, time.perf_counter() - t0)
        d, s = res["dense"], res["sparse"]
        rows.append((name, res))
        print(
            f"| {name} | {len(ytr)} | {len(yte)} | {kernel} | {100 * d[0]:.2f}% | "
            f"{100 * s[0]:.2f}% | {d[1]:.4f} | {s[1]:.4f} | {d[2]:.1f} | {s[2]:.1f} |"
        )
    return rows


# ------------------------------------------------------------------------- 3 speed
def speed(cfg):
    from robustep.ep import expectation_propagation
    from robustep.estimators._sparse import resolve_inducing_points
    from robustep.likelihoods import Probit
    from robustep.posterior.sparse import FITCPrior

    m, d = cfg["speed_m"], 8
    kernel = ConstantKernel(2.0) * RBF(2.5)
    print(f"\n### 3. Speed (probit, d = {d}, m = {m}, fixed hyperparameters {kernel})\n")
    print("| n | build prior s | s per sweep (5 sweeps) | s per sweep / n x 1e6 |")
    print("|---|---|---|---|")
    rng = np.random.default_rng(2)
    Zfix = rng.uniform(-3, 3, size=(m, d))
    for n in cfg["speed_ns"]:
        X, y = _probit_data(n, d, rng)
        t0 = time.perf_counter()
        prior = FITCPrior.from_kernel(kernel, X, Zfix, jitter=1e-6 * 2.0)
        t_build = time.perf_counter() - t0
        ctx = _quiet()
        t0 = time.perf_counter()
        r = expectation_propagation(prior, y, Probit(), max_iter=5, tol=1e-12, robust=False)
        t_sweep = (time.perf_counter() - t0) / r.n_iter
        ctx.__exit__(None, None, None)
        print(f"| {n} | {t_build:.2f} | {t_sweep:.3f} | {1e6 * t_sweep / n:.2f} |")
    n = cfg["speed_fit_n"]
    X, y = _probit_data(n, d, rng)
    t0 = time.perf_counter()
    Z = resolve_inducing_points(m, X, 0)
    t_km = time.perf_counter() - t0
    t0 = time.perf_counter()
    prior = FITCPrior.from_kernel(kernel, X, Z, jitter=1e-6 * 2.0)
    r = expectation_propagation(prior, y, Probit(), tol=1e-4)
    t_fit = time.perf_counter() - t0
    print(f"\nn = {n}, m = {m}: k-means {t_km:.1f} s; prior + EP to tol 1e-4: {t_fit:.1f} s, "
          f"{r.n_iter} sweeps, converged={r.converged}")  # fmt: skip
    from robustep.ep.sparse_evidence import fitc_log_Z_gradient

    t_warm, n_warm, t_grad = _evaluation_seconds(kernel, X, Z, y, r)
    # the same kernel with one length scale per input (ARD): the same K, so r is its fixed
    # point too; scikit-learn's ARD gradient was the slowest case of the row pass
    kernel_ard = ConstantKernel(2.0) * RBF(np.full(d, 2.5))
    t0 = time.perf_counter()
    fitc_log_Z_gradient(r, kernel_ard, X, Z, Probit(), y, wrt_inducing=True)
    t_grad_ard = time.perf_counter() - t0
    print(f"one optimiser evaluation at this size: warm-started prior + EP after a 1% step in "
          f"theta {t_warm:.1f} s ({n_warm} sweeps), gradient w.r.t. theta and Z "
          f"({m * d} coordinates) {t_grad:.1f} s; the same with an ARD RBF ({d} length "
          f"scales) {t_grad_ard:.1f} s")  # fmt: skip
    optimise(cfg, rng)


def _evaluation_seconds(kernel, X, Z, y, r):
    """What one optimiser evaluation costs next to the converged probit EP result ``r``
    (kernel, X (n, d), Z (m, d)): (seconds of the prior and the warm-started EP after a
    1% step in theta, its sweeps, seconds of the gradient w.r.t. theta and Z at ``r``)."""
    from robustep.ep import expectation_propagation
    from robustep.ep.sparse_evidence import fitc_log_Z_gradient
    from robustep.likelihoods import Probit
    from robustep.posterior.sparse import FITCPrior

    t0 = time.perf_counter()
    fitc_log_Z_gradient(r, kernel, X, Z, Probit(), y, wrt_inducing=True)
    t_grad = time.perf_counter() - t0
    t0 = time.perf_counter()
    ctx = _quiet()
    r2 = expectation_propagation(
        FITCPrior.from_kernel(kernel.clone_with_theta(kernel.theta + 0.01), X, Z, jitter=2e-6),
        y, Probit(), tol=1e-4, init=r,
    )  # fmt: skip
    ctx.__exit__(None, None, None)
    return time.perf_counter() - t0, r2.n_iter, t_grad


def _blas_passes(n, m, rng, repeat=3):
    """{BLAS call: (best of ``repeat`` seconds, flops)} of the three row passes of a sparse
    evaluation on a whole (m, n) Fortran-ordered V^T (n, m as in ``floor``)."""
    from scipy.linalg import blas

    Vt = np.asfortranarray(rng.normal(size=(m, n)))  # V^T, as the row blocks are stored
    L = np.tril(rng.normal(size=(m, m))) + m * np.eye(m)
    A = rng.normal(size=(m, m))

    def best_of(fn):
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times)

    return {
        "dtrmm (m x m triangular times m x n)": (
            best_of(lambda: blas.dtrmm(1.0, L, Vt, lower=1)), n * m * m),
        "dsyrk (one triangle of V^T V)": (
            best_of(lambda: blas.dsyrk(1.0, Vt, trans=0, lower=0)), n * m * m),
        "dgemm (m x m times m x n)": (best_of(lambda: blas.dgemm(1.0, A, Vt)), 2 * n * m * m),
    }  # fmt: skip


def floor(cfg):
    """The arithmetic floor of one optimiser evaluation at n = opt_n, m = opt_m, d = 8
    (a <= 5-minute search): every evaluation re-whitens the n x m cross-covariance
    for the new theta and Z (V = K_nm L_mm^-T: ``dtrmm``, n m^2 flops), factorises the
    posterior at least once (the Gram matrix V^T diag(beta) V, ``dsyrk``, n m^2 flops, and
    the marginal variances, ``dtrmm``, n m^2 flops) and forms the gradient's n x m
    weights W_nm (``dgemm``, 2 n m^2, and ``dtrmm``, n m^2 flops): 6 n m^2 flops.  Times
    those BLAS calls on whole (n, m) float64 arrays (the most efficient case) with this
    process's BLAS threads and prints the floor against a measured evaluation and the
    number of evaluations a 300-s search could afford at the floor."""
    from robustep.ep import expectation_propagation
    from robustep.estimators._sparse import resolve_inducing_points
    from robustep.likelihoods import Probit
    from robustep.posterior.sparse import FITCPrior

    n, m, d = cfg["opt_n"], cfg["opt_m"], 8
    print(f"\n### Floor of one optimiser evaluation (n = {n}, m = {m}, d = {d}, float64)\n")
    rng = np.random.default_rng(5)
    passes = _blas_passes(n, m, rng)
    print("| BLAS call | s | GFLOP/s |\n|---|---|---|")
    for name, (secs, flops) in passes.items():
        print(f"| {name} | {secs:.3f} | {flops / secs / 1e9:.1f} |")
    t_trmm, t_syrk, t_gemm = (v[0] for v in passes.values())
    t_floor = 3 * t_trmm + t_syrk + t_gemm
    X, y = _probit_data(n, d, rng)
    kernel = ConstantKernel(2.0) * RBF(2.5)
    Z = resolve_inducing_points(m, X, 0)
    ctx = _quiet()
    r = expectation_propagation(FITCPrior.from_kernel(kernel, X, Z, jitter=2e-6), y, Probit())
    ctx.__exit__(None, None, None)
    t_warm, n_warm, t_grad = _evaluation_seconds(kernel, X, Z, y, r)
    print(f"\nfloor of one evaluation (3 dtrmm + dsyrk + dgemm, 6 n m^2 flops): {t_floor:.2f} s; "
          f"a measured one: prior + warm-started EP {t_warm:.2f} s ({n_warm} sweeps) + "
          f"gradient w.r.t. theta and Z {t_grad:.2f} s = {t_warm + t_grad:.2f} s "
          f"({(t_warm + t_grad) / t_floor:.1f} x the floor); 300 s buy at most "
          f"{int(300 // t_floor)} evaluations at the floor, "
          f"{int(300 // (t_warm + t_grad))} measured")  # fmt: skip


def capped_lbfgs(maxiter):
    """A callable ``optimizer`` (scikit-learn's convention): L-BFGS-B with at most
    ``maxiter`` iterations, the estimators' default search otherwise."""
    from scipy.optimize import minimize

    def run(obj_func, initial_theta, bounds):  # L-BFGS-B takes the ±inf rows as open
        sol = minimize(obj_func, initial_theta, jac=True, method="L-BFGS-B", bounds=bounds,
                       options={"maxiter": maxiter})  # fmt: skip
        return sol.x, sol.fun

    return run


def optimise(cfg, rng=None):
    """GPClassifier with hyperparameter and inducing-input optimisation at n = opt_n,
    m = opt_m (d = 8): wall-clock and CPU seconds, objective evaluations, evidence, test
    error and MNLP on ``opt_test`` held-out points; the search's best evidence against
    elapsed time after 10, 20, 30, 50, 100, 150 evaluations; ``opt_maxiter`` caps the
    L-BFGS-B iterations through a callable ``optimizer``; ``opt_fixed_inducing`` keeps
    the k-means inducing inputs."""
    import logging

    from robustep.estimators import GPClassifier

    trace = []  # (seconds since the fit started, -log evidence) per objective evaluation

    class Trace(logging.Handler):  # the evidence search logs every evaluation at INFO
        def emit(self, record):
            value = getattr(record, "log_evidence", None)
            trace.append((time.perf_counter() - t0, 1e25 if value is None else -value))

    d = 8
    rng = np.random.default_rng(2) if rng is None else rng
    n, mo = cfg["opt_n"], cfg["opt_m"]
    X, y = _probit_data(n, d, rng)
    Xt, yt = _probit_data(cfg.get("opt_test", 20_000), d, np.random.default_rng(99))
    cap = cfg.get("opt_maxiter")
    optimizer = "fmin_l_bfgs_b" if cap is None else capped_lbfgs(int(cap))
    opt_z = not cfg.get("opt_fixed_inducing", False)
    search_log = logging.getLogger("robustep.search")
    handler, level = Trace(level=logging.DEBUG), search_log.level
    search_log.addHandler(handler)
    search_log.setLevel(logging.DEBUG)
    t0, c0 = time.perf_counter(), time.process_time()
    ctx = _quiet()
    try:
        est = GPClassifier(ConstantKernel(1.0) * RBF(1.0), inducing_points=mo,
                           optimizer=optimizer, optimize_inducing=opt_z,
                           random_state=0).fit(X, y)  # fmt: skip
    finally:
        ctx.__exit__(None, None, None)
        search_log.removeHandler(handler)
        search_log.setLevel(level)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    proba = est.predict_proba(Xt)[:, 1]
    err = float(np.mean(est.predict(Xt) != yt))
    mnlp = _mnlp(yt, proba)
    search = "L-BFGS-B" if cap is None else f"L-BFGS-B capped at {cap} iterations (callable)"
    what = "hyperparameter and inducing-input" if opt_z else "hyperparameter (k-means Z fixed)"
    print(f"GPClassifier(inducing_points={mo}) with {what} "
          f"optimisation ({search}), n = {n}, d = {d}: {wall:.1f} s ({cpu:.1f} CPU s), "
          f"{len(trace)} objective evaluations, log evidence "
          f"{est.log_marginal_likelihood_value_:.2f}, kernel {est.kernel_}, "
          f"converged={est.converged_}; {len(yt)} test points: error {err:.4f}, "
          f"MNLP {mnlp:.4f}")  # fmt: skip
    if trace:
        best = np.minimum.accumulate([v for _, v in trace])
        print("\n| evaluations | seconds | best log evidence so far |\n|---|---|---|")
        for k in sorted({10, 20, 30, 50, 100, 150, len(trace)}):
            if k <= len(trace):
                print(f"| {k} | {trace[k - 1][0]:.1f} | {-best[k - 1]:.2f} |")


# ------------------------------------------------------------------------- 4 memory
_MEM_CHILD = """
import sys, time, resource, warnings
import numpy as np

def _probit_data(n, d, rng):
    X = rng.uniform(-3, 3, size=(n, d))
    f = np.sin(1.5 * X[:, 0]) * np.cos(X[:, 1]) + 0.5 * np.sum(np.sin(X[:, 2:]), axis=1)
    return X, np.where(f + 0.3 * rng.normal(size=n) > 0, 1, -1)

from sklearn.gaussian_process.kernels import RBF, ConstantKernel
from robustep.ep import expectation_propagation
from robustep.likelihoods import Probit
from robustep.posterior.sparse import FITCPrior
n, m = int(sys.argv[1]), int(sys.argv[2])
rng = np.random.default_rng(3)
X, y = _probit_data(n, 8, rng)
Z = X[rng.choice(n, m, replace=False)]
kernel = ConstantKernel(2.0) * RBF(2.5)
t0 = time.perf_counter()
prior = FITCPrior.from_kernel(kernel, X, Z, jitter=2e-6)
r = expectation_propagation(prior, y, Probit(), tol=1e-4)
mu, var = r.predict(kernel(X[:4096], Z), kernel.diag(X[:4096]))
print(r.n_iter, r.converged, time.perf_counter() - t0,
      resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0)
"""


def memory(cfg):
    n, m = cfg["mem_n"], cfg["mem_m"]
    out = subprocess.run(
        [sys.executable, "-c", _MEM_CHILD, str(n), str(m)],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    n_iter, conv, secs, rss = out[0], out[1], float(out[2]), float(out[3])
    print(f"\n### 4. Memory\n\nn = {n}, m = {m}, d = 8, probit, fixed hyperparameters: "
          f"{n_iter} sweeps, converged={conv}, {secs:.1f} s, peak RSS {rss:.0f} MB "
          f"(V alone: {n * m * 8 / 2**20:.0f} MB)")  # fmt: skip
    return rss


# ------------------------------------------------------------------------- 5 robustness
def robustness(cfg):
    from robustep.estimators import StudentTGPRegressor

    rng = np.random.default_rng(4)
    n, m = cfg["t_n"], cfg["t_m"]
    X = rng.uniform(-3, 3, size=(n, 2))
    f = np.sin(1.5 * X[:, 0]) + 0.5 * np.cos(X[:, 1])
    y_clean = f + 0.1 * rng.normal(size=n)
    y_out = y_clean.copy()
    idx = rng.choice(n, n // 10, replace=False)
    y_out[idx] += rng.choice([-1, 1], idx.size) * rng.uniform(2, 10, idx.size)
    Xt = rng.uniform(-3, 3, size=(5000, 2))
    ft = np.sin(1.5 * Xt[:, 0]) + 0.5 * np.cos(Xt[:, 1])
    print(
        f"\n### 5. Student-t regression, n = {n}, m = {m} (k-means, fixed), 10% gross "
        "outliers, hyperparameters optimised\n"
    )
    print("| training targets | converged | ConvergenceWarnings | test MAE (clean f) | "
          "fit s | negative sites |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    maes = {}
    for name, yy in (("with outliers", y_out), ("outlier-free", y_clean)):
        t0 = time.perf_counter()
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always", ConvergenceWarning)
            est = StudentTGPRegressor(
                inducing_points=m, optimize_inducing=False, random_state=0
            ).fit(X, yy)
        n_warn = sum(issubclass(x.category, ConvergenceWarning) for x in w)
        mae = float(np.mean(np.abs(est.predict(Xt) - ft)))
        maes[name] = mae
        print(
            f"| {name} | {est.converged_} | {n_warn} | {mae:.6f} | "
            f"{time.perf_counter() - t0:.1f} | {int(est.negative_precision_.sum())} |"
        )
    print(
        f"\nMAE ratio (outliers / outlier-free): {maes['with outliers'] / maes['outlier-free']:.4f}"
    )
    return maes


# ------------------------------------------------------------------------- 6 dask
def _dask_labels(Xc):
    f = np.sin(1.5 * Xc[:, 0]) * np.cos(Xc[:, 1]) + 0.5 * np.sum(np.sin(Xc[:, 2:]), axis=1)
    return np.where(f > 0, 1.0, -1.0)


def dask_fit(cfg):
    import dask.array as da
    from distributed import Client, LocalCluster

    from robustep.ep import expectation_propagation
    from robustep.likelihoods import Probit
    from robustep.posterior._dask import DaskFITCPrior
    from robustep.posterior.sparse import FITCPrior

    n, m, chunk, d = cfg["dask_n"], cfg["dask_m"], cfg["dask_chunk"], 8
    kernel = ConstantKernel(2.0) * RBF(2.5)
    rng = np.random.default_rng(5)
    Z = rng.uniform(-3, 3, size=(m, d))
    kind = "processes" if cfg["dask_processes"] else "threads, processes=False"
    print(f"\n### 6. Dask (probit, n = {n}, m = {m}, d = {d}, chunks of {chunk} rows, "
          f"2-worker LocalCluster, {kind})\n")  # fmt: skip
    print("| where | build prior s | s per sweep | sweeps | fit to tol 1e-4 s | converged |")
    print("|---|---|---|---|---|---|")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cluster = LocalCluster(
            n_workers=2, threads_per_worker=1, dashboard_address=None,
            processes=cfg["dask_processes"],
        )  # fmt: skip
        client = Client(cluster)
    try:
        X = da.random.RandomState(6).uniform(-3, 3, size=(n, d), chunks=(chunk, d)).persist()
        y = X.map_blocks(_dask_labels, drop_axis=1, dtype=float).compute()
        rows = []
        for where in ("Dask", "in memory"):
            t0 = time.perf_counter()
            if where == "Dask":
                prior = DaskFITCPrior(kernel, X, Z, jitter=2e-6)
            else:
                prior = FITCPrior.from_kernel(kernel, X.compute(), Z, jitter=2e-6)
            t_build = time.perf_counter() - t0
            ctx = _quiet()
            t0 = time.perf_counter()
            r3 = expectation_propagation(prior, y, Probit(), max_iter=3, tol=1e-12, robust=False)
            t_sweep = (time.perf_counter() - t0) / r3.n_iter
            t0 = time.perf_counter()
            r = expectation_propagation(prior, y, Probit(), tol=1e-4)
            t_fit = time.perf_counter() - t0 + t_build
            ctx.__exit__(None, None, None)
            rows.append(r)
            print(f"| {where} | {t_build:.1f} | {t_sweep:.2f} | {r.n_iter} | {t_fit:.1f} | "
                  f"{r.converged} |")  # fmt: skip
            del prior
        print(
            f"\nmax |Δ mean| Dask vs in memory: {np.max(np.abs(rows[0].mean - rows[1].mean)):.1e}"
        )
    finally:
        client.close()
        cluster.close()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="reduced sizes (< 1 minute)")
    parser.add_argument(
        "--only",
        nargs="+",
        default=None,
        choices=[
            "exactness",
            "accuracy",
            "speed",
            "memory",
            "robustness",
            "dask",
            "optimise",
            "floor",
        ],
    )
    parser.add_argument("--opt-n", type=int, help="n of the optimising fit (speed, optimise)")
    parser.add_argument("--opt-m", type=int, help="m of the optimising fit (speed, optimise)")
    parser.add_argument(
        "--opt-maxiter", type=int, help="cap the optimising fit's L-BFGS-B iterations (callable)"
    )
    parser.add_argument(
        "--opt-fixed-inducing",
        action="store_true",
        help="the optimising fit keeps its k-means inducing inputs (optimize_inducing=False)",
    )
    args = parser.parse_args(argv)
    cfg = dict(QUICK if args.quick else FULL)
    if args.opt_n is not None:
        cfg["opt_n"] = args.opt_n
    if args.opt_m is not None:
        cfg["opt_m"] = args.opt_m
    if args.opt_maxiter is not None:
        cfg["opt_maxiter"] = args.opt_maxiter
    if args.opt_fixed_inducing:
        cfg["opt_fixed_inducing"] = True
    print(f"## Sparse EP benchmark ({'quick' if args.quick else 'full'})")
    print(json.dumps(cfg))
    t0 = time.perf_counter()
    parts = {"exactness": exactness, "accuracy": accuracy, "speed": speed, "memory": memory,
             "robustness": robustness, "dask": dask_fit}  # fmt: skip
    for name, fn in parts.items():
        if args.only is None or name in args.only:
            fn(cfg)
    if args.only is not None and "floor" in args.only:
        floor(cfg)
    if args.only is not None and "optimise" in args.only:  # the speed section's last fit alone
        print("\n### Optimisation\n")
        optimise(cfg)
    print(f"\ntotal {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    import importlib.util

    # benchmarks/_harness.py by its path: this file's folder is not on sys.path (above)
    _spec = importlib.util.spec_from_file_location(
        "_harness", os.path.join(os.path.dirname(os.path.abspath(__file__)), "_harness.py")
    )
    _harness = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_harness)
    run_suite = _harness.run_suite

    sys.exit(run_suite("sparse", main, quick="pass"))
