"""GP classification benchmark (issue 3).

1. Fit time of ``GPClassifier`` with fixed hyperparameters (EP, probit, tol 1e-4, parallel
   schedule; also REP with the step likelihood) for n = 500, 1000, 2000 on 2-D synthetic
   data, as a multiple of one Cholesky factorisation of K timed in the same run
   (goal: EP <= 15 Cholesky at n = 2000).
2. Fit time with hyperparameter optimisation (L-BFGS-B on the EP evidence) on Pima.
3. If GPy is importable, the same-run speed ratio against GPy's EP classifier.

Usage: ``python benchmarks/gpc.py [--sizes 500 1000 2000] [--data-home DIR]``
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from scipy import linalg
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

from robustep.estimators.gp_classifier import GPClassifier


def _data(n, rng):
    X = rng.uniform(-3, 3, (n, 2))
    y = np.where(np.sin(X[:, 0]) + 0.5 * X[:, 1] + 0.3 * rng.standard_normal(n) > 0, 1, -1)
    return X, y


def _best_time(fn, repeat):
    best = np.inf
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def fixed_hyperparameters(sizes, repeat=3):
    rng = np.random.default_rng(0)
    kernel = ConstantKernel(2.0) * RBF(1.0)
    rows = []
    for n in sizes:
        X, y = _data(n, rng)
        K = kernel(X) + 1e-8 * np.eye(n)
        t_chol = _best_time(lambda K=K: linalg.cholesky(K, lower=True), max(repeat, 5))
        res = {}
        for label, kw in (
            ("EP probit", {}),
            ("REP step (c=10)", {"method": "rep", "likelihood": "step", "label_noise": 0.1}),
        ):
            clf = GPClassifier(kernel, optimizer=None, tol=1e-4, **kw)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                t = _best_time(lambda clf=clf, X=X, y=y: clf.fit(X, y), repeat)
            res[label] = (t, clf.n_iter_, clf.converged_)
        rows.append((n, t_chol, res))
        print(f"n={n}: cholesky {t_chol * 1e3:.1f} ms", flush=True)
        for label, (t, it, conv) in res.items():
            print(f"   {label:18s} {t:7.3f} s = {t / t_chol:7.1f} x cholesky "
                  f"({it} sweeps, converged={conv})", flush=True)  # fmt: skip
    return rows


def pima_optimisation(data_home):
    from robustep.datasets import DataUnavailableError, load_pima

    try:
        X, y = load_pima(data_home=data_home, download=False)
    except DataUnavailableError as err:
        print(f"Pima: skipped ({err})")
        return None
    X = (X - X.mean(0)) / X.std(0)
    clf = GPClassifier(ConstantKernel(1.0) * RBF(1.0))
    t = time.perf_counter()
    clf.fit(X, y)
    t = time.perf_counter() - t
    print(f"Pima (n={X.shape[0]}) EP probit with hyperparameter optimisation: {t:.2f} s, "
          f"kernel {clf.kernel_}, "
          f"log evidence {clf.log_marginal_likelihood_value_:.3f}")  # fmt: skip
    return t


def gpy_ratio(n=500):
    try:
        import GPy  # noqa: F401
    except ImportError:
        print("GPy not installed: no comparison")
        return None
    rng = np.random.default_rng(1)
    X, y = _data(n, rng)
    kern = GPy.kern.RBF(2, variance=2.0, lengthscale=1.0)
    t = time.perf_counter()
    GPy.core.GP(X, (y[:, None] > 0).astype(float), kernel=kern,
                likelihood=GPy.likelihoods.Bernoulli(),
                inference_method=GPy.inference.latent_function_inference.EP())  # fmt: skip
    t_gpy = time.perf_counter() - t
    clf = GPClassifier(ConstantKernel(2.0) * RBF(1.0), optimizer=None)
    t = time.perf_counter()
    clf.fit(X, y)
    t_ours = time.perf_counter() - t
    print(f"n={n}: GPy EP {t_gpy:.3f} s, ours {t_ours:.3f} s, ratio GPy/ours {t_gpy / t_ours:.2f}")
    return t_gpy / t_ours


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[500, 1000, 2000])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--data-home", default=None)
    args = parser.parse_args(argv)
    fixed_hyperparameters(args.sizes, args.repeat)
    pima_optimisation(args.data_home)
    gpy_ratio()


if __name__ == "__main__":
    main()
