"""Dense EP on an array backend (GPU) against numpy on the CPU, in one run.

For each n and likelihood (probit; Student-t with 5 % outliers, which has negative sites)
on 2-D inputs with a fixed ConstantKernel(2) * RBF(1) + 1e-6 I prior, tol 1e-4, robust
parallel EP from zero sites, prints:

* chol: one Cholesky of K on the device (seconds, best of 3);
* sweep: the median wall time between two consecutive EP sweeps (factorisation,
  marginal variances, the O(n) per-site work in numpy, and the transfers);
* sweeps, total: the number of sweeps and the whole ``expectation_propagation`` call
  (K built beforehand; its build time is the "K" column);
* other: the share of the total spent outside ``prior.posterior`` (the factorisations):
  the per-site work in numpy (tilted moments, damping, line search), the engine's O(n^2)
  mean sweeps and the engine's bookkeeping;
* the same on numpy (LAPACK, the machine's BLAS threads) for n <= --cpu-max-n.

Usage:
    python benchmarks/gpu.py                               # on the GPU, if there is one
    python benchmarks/gpu.py --device cuda                 # n = 2000 ... 30000, float64
    python benchmarks/gpu.py --device cuda --dtype float32
    python benchmarks/gpu.py --device cuda --sizes 2000 10000 --cpu-max-n 5000
    python benchmarks/gpu.py --quick --device cpu          # torch on the CPU, small n
    python benchmarks/gpu.py --quick --device strict       # array-api-strict (checks only)

--device takes a PyTorch device ("cuda", "cuda:1", "cpu"), "cupy" (CuPy's current GPU),
"strict" (array-api-strict, slow: for checking the script without PyTorch) or "auto"
(the default: a GPU if PyTorch or CuPy finds one, else a message and exit status 0, so
that `make bench` passes on machines without a GPU).
--accuracy compares float32 with float64 on the device instead.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

from robustep import _array_api as aa
from robustep.ep import expectation_propagation
from robustep.kernels.array import kernel_matrix
from robustep.likelihoods import Probit, StudentT
from robustep.posterior import ArrayPrior, DensePrior

SIZES = [2000, 5000, 10_000, 20_000, 30_000]
QUICK_SIZES = [300, 600]
KERNEL = ConstantKernel(2.0) * RBF(1.0) + WhiteKernel(1e-6)


def find_gpu():
    """ "cuda" (PyTorch with CUDA) or "cupy" when a GPU is usable, else None."""
    try:
        import torch

        if torch.cuda.is_available():
            return "cuda"
    except ImportError:
        pass
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            return "cupy"
    except Exception:  # noqa: BLE001 - any CuPy / driver failure means "no GPU"
        pass
    return None


def make_like(device, dtype):
    """An empty array fixing the namespace, dtype and device; and its synchronise()."""
    if device == "strict":
        import array_api_strict as xs

        return xs.zeros(0, dtype=getattr(xs, dtype)), lambda: None
    if device == "cupy":
        import cupy

        return cupy.zeros(0, dtype=dtype), lambda: cupy.cuda.Device().synchronize()
    import torch

    dev = torch.device(device)
    like = torch.zeros(0, dtype=getattr(torch, dtype), device=dev)
    if dev.type == "cuda":
        return like, lambda: torch.cuda.synchronize(dev)
    return like, lambda: None


def problem(n, kind, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, 2))
    f = np.sin(X[:, 0]) + np.cos(1.5 * X[:, 1])
    if kind == "probit":
        return X, np.where(f + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0), Probit()
    y = f + 0.2 * rng.standard_normal(n)
    out = rng.random(n) < 0.05
    y[out] += rng.choice([-1, 1], out.sum()) * rng.uniform(3, 6, out.sum())
    return X, y, StudentT(df=4.0, scale=0.2)


def timed(fn, sync):
    sync()
    t = time.perf_counter()
    value = fn()
    sync()
    return value, time.perf_counter() - t


def run_one(K_prior, y, lik, chol, sync, tol):
    """(chol s, sweep s, sweeps, total s, share of the total outside the factorisations,
    converged) of one EP fit on a prior."""
    t_chol = min(timed(chol, sync)[1] for _ in range(3))  # best of 3
    stamps = []
    in_posterior = [0.0]
    factorise = K_prior.posterior

    def posterior(*args, **kwargs):  # time spent in the O(n^3) factorisations
        t = time.perf_counter()
        try:
            return factorise(*args, **kwargs)
        finally:
            sync()
            in_posterior[0] += time.perf_counter() - t

    K_prior.posterior = posterior

    def callback(_info):
        stamps.append(time.perf_counter())

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        res, total = timed(
            lambda: expectation_propagation(K_prior, y, lik, tol=tol, callback=callback), sync
        )
    del K_prior.posterior
    gaps = np.diff(stamps)
    sweep = statistics.median(gaps) if gaps.size else total
    return t_chol, sweep, res.n_iter, total, 1.0 - in_posterior[0] / total, res.converged


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device",
        default="auto",
        help='PyTorch device ("cuda", "cuda:1", "cpu"), "cupy", "strict", or "auto" (a GPU '
        "if PyTorch or CuPy finds one; otherwise the script says so and stops)",
    )
    parser.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    parser.add_argument("--sizes", type=int, nargs="+", default=None)
    parser.add_argument(
        "--cpu-max-n",
        type=int,
        default=5000,
        help="largest n also run with numpy on the CPU (0: none)",
    )
    parser.add_argument(
        "--likelihoods", nargs="+", default=["probit", "student_t"], choices=["probit", "student_t"]
    )
    parser.add_argument("--tol", type=float, default=1e-4)
    parser.add_argument(
        "--quick", action="store_true", help=f"sizes {QUICK_SIZES} (checks that the script works)"
    )
    parser.add_argument(
        "--accuracy", action="store_true", help="instead: float32 against float64 on the device"
    )
    args = parser.parse_args(argv)  # fmt: skip
    sizes = args.sizes or (QUICK_SIZES if args.quick else SIZES)
    if args.device == "auto":
        args.device = find_gpu()
        if args.device is None:
            print("benchmarks/gpu.py: no GPU found (PyTorch with CUDA, or CuPy); pass "
                  "--device cpu (PyTorch) or --device strict to run it on the CPU")  # fmt: skip
            return
    if args.accuracy:
        return float32_accuracy(args.device, sizes, args.likelihoods, args.tol)
    like, sync = make_like(args.device, args.dtype)
    xp = aa.namespace(like)
    np_xp = aa.namespace(np.zeros(0))
    # warm-up: library initialisation (CUDA context, cuSOLVER handles) is not timed
    aa.cholesky(xp, aa.eye(xp, 64, like))
    sync()
    print(f"device: {args.device} ({type(like).__module__}, {args.dtype}); numpy on the CPU "
          f"for n <= {args.cpu_max_n}; tol {args.tol:g}")  # fmt: skip
    header = ("| likelihood | n | backend | K s | chol s | sweep s | sweeps | total s | "
              "total / chol | other | converged |")  # fmt: skip
    print(header)
    print("|" + "---|" * 11)
    for kind in args.likelihoods:
        for n in sizes:
            X, y, lik = problem(n, kind)
            rows = []
            K_dev, t_k = timed(lambda X=X: kernel_matrix(KERNEL, X, like=like), sync)
            prior = ArrayPrior(K_dev, check=False)
            rows.append((args.device, t_k, *run_one(
                prior, y, lik, lambda K=K_dev: aa.cholesky(xp, K), sync, args.tol)))  # fmt: skip
            del prior, K_dev
            if n <= args.cpu_max_n:
                K, t_k = timed(lambda X=X: KERNEL(X), lambda: None)
                rows.append(("numpy", t_k, *run_one(
                    DensePrior(K, check=False), y, lik, lambda K=K: aa.cholesky(np_xp, K),
                    lambda: None, args.tol)))  # fmt: skip
            for backend, t_k, t_chol, sweep, sweeps, total, other, conv in rows:
                print(f"| {kind} | {n} | {backend} | {t_k:.3g} | {t_chol:.3g} | {sweep:.3g} | "
                      f"{sweeps} | {total:.3g} | {total / t_chol:.1f} | {other:.0%} | {conv} |",
                      flush=True)  # fmt: skip


def float32_accuracy(device, sizes, likelihoods, tol, max_iter=200):
    """EP in float32 against float64 on one device: largest differences of the results."""
    from scipy.special import ndtr

    print(f"device: {device}; float32 against float64, tol {tol:g}")
    print("| likelihood | n | max abs d mean | max rel d var | abs d log Z | max abs d p(y=1) "
          "| sweeps 64 / 32 | converged 64 / 32 |")  # fmt: skip
    print("|" + "---|" * 8)
    for kind in likelihoods:
        for n in sizes:
            X, y, lik = problem(n, kind)
            out = {}
            for dtype in ("float64", "float32"):
                like, _ = make_like(device, dtype)
                prior = ArrayPrior(kernel_matrix(KERNEL, X, like=like), check=False)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ConvergenceWarning)
                    out[dtype] = expectation_propagation(prior, y, lik, tol=tol, max_iter=max_iter)
            a, b = out["float64"], out["float32"]
            p64 = ndtr(a.mean / np.sqrt(1 + a.var))
            p32 = ndtr(b.mean / np.sqrt(1 + b.var))
            print(f"| {kind} | {n} | {np.max(np.abs(a.mean - b.mean)):.2g} | "
                  f"{np.max(np.abs(a.var - b.var) / a.var):.2g} | {abs(a.log_Z - b.log_Z):.2g} | "
                  f"{np.max(np.abs(p64 - p32)):.2g} | {a.n_iter} / {b.n_iter} | "
                  f"{a.converged} / {b.converged} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    from _harness import run_suite  # benchmarks/_harness.py

    sys.exit(run_suite("gpu", main, quick="pass"))
