"""GP classification benchmark.

1. Fit time of ``GPClassifier`` with fixed hyperparameters (EP, probit, tol 1e-4, parallel
   schedule; also REP with the step likelihood) for n = 500, 1000, 2000 on 2-D synthetic
   data, as a multiple of one Cholesky factorisation of K timed in the same run
   (goal: EP <= 15 Cholesky at n = 2000).
2. Fit time with hyperparameter optimisation (L-BFGS-B on the EP evidence) on Pima.
3. If GPy is importable, the same-run speed ratio against GPy's EP classifier.
4. Against scikit-learn's GaussianProcessClassifier (Laplace, L-BFGS-B) on
   breast cancer (70/30 split, random_state=0, 398 training points, standardised on the
   training part) and Pima (768, standardised), all with kernel C(1) * RBF(1) and one BLAS
   thread: our time / scikit-learn's time for ``GPClassifier()`` (EP) and
   ``GPClassifier(method="laplace")``, wall clock and process CPU time, best of
   ``--repeat`` interleaved fits; the log evidence of each fit; and (unless
   ``--no-best``) the best EP evidence a multi-start optimisation with tight EP
   tolerance finds, with the check of our evidence gradient against finite differences.

Usage: ``python benchmarks/gpc.py [--sizes 500 1000 2000] [--data-home DIR]
[--only-sklearn] [--no-best]``
"""

from __future__ import annotations

import argparse
import sys
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


def _sklearn_data(data_home):
    from sklearn.datasets import load_breast_cancer
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    from robustep.datasets import DataUnavailableError, load_pima

    X, y = load_breast_cancer(return_X_y=True)
    X_train, _, y_train, _ = train_test_split(X, y, test_size=0.3, random_state=0)
    sets = {"breast cancer": (StandardScaler().fit(X_train).transform(X_train), y_train)}
    try:
        X, y = load_pima(data_home=data_home, download=False)
        sets["Pima"] = ((X - X.mean(0)) / X.std(0), y)
    except DataUnavailableError as err:
        print(f"Pima: skipped ({err})")
    return sets


def _timed_fit(make, X, y):
    model = make()
    wall, cpu = time.perf_counter(), time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(X, y)
    return model, time.perf_counter() - wall, time.process_time() - cpu


def best_ep_evidence(X, y, tol=1e-8):
    """Multi-start maximum of the EP evidence (EP to ``tol``), and the starts' optima.

    Starts: signal variance 1, e^3, e^6, e^9 x length scale 1, e^2, e^4 (12 L-BFGS-B runs).
    """
    optima = []
    for log_c in (0.0, 3.0, 6.0, 9.0):
        for log_l in (0.0, 2.0, 4.0):
            kernel = ConstantKernel(np.exp(log_c)) * RBF(np.exp(log_l))
            clf = GPClassifier(kernel, tol=tol, max_iter=3000)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                clf.fit(X, y)
            optima.append((clf.log_marginal_likelihood_value_, clf.kernel_.theta))
    return max(optima, key=lambda o: o[0]), optima


def gradient_check(X, y, theta, tol_fit=1e-4, h=1e-4):
    """Largest |explicit EP gradient (EP to tol_fit) - central difference of the evidence
    converged to 1e-10| over the hyperparameters at theta, and the gradient's norm."""
    kernel = ConstantKernel(1.0) * RBF(1.0)
    loose = GPClassifier(kernel.clone_with_theta(theta), optimizer=None, tol=tol_fit).fit(X, y)
    _, grad = loose.log_marginal_likelihood(theta, eval_gradient=True)
    tight = GPClassifier(kernel.clone_with_theta(theta), optimizer=None, tol=1e-10,
                         max_iter=5000).fit(X, y)  # fmt: skip
    fd = np.array([(tight.log_marginal_likelihood(theta + h * e)
                    - tight.log_marginal_likelihood(theta - h * e)) / (2 * h)
                   for e in np.eye(theta.size)])  # fmt: skip
    return float(np.max(np.abs(grad - fd))), float(np.linalg.norm(fd))


def sklearn_comparison(data_home, repeat=3, best=True):
    from sklearn.gaussian_process import GaussianProcessClassifier
    from threadpoolctl import threadpool_limits

    makers = {
        "scikit-learn": lambda: GaussianProcessClassifier(ConstantKernel(1.0) * RBF(1.0)),
        "ours EP": lambda: GPClassifier(),
        "ours Laplace": lambda: GPClassifier(method="laplace"),
    }
    ratios = {}
    for name, (X, y) in _sklearn_data(data_home).items():
        times = {label: [np.inf, np.inf] for label in makers}
        fitted = {}
        with threadpool_limits(limits=1, user_api="blas"):
            for _ in range(repeat):  # interleaved, so that load changes hit all alike
                for label, make in makers.items():
                    model, wall, cpu = _timed_fit(make, X, y)
                    times[label] = [min(times[label][0], wall), min(times[label][1], cpu)]
                    fitted[label] = model
        print(f"{name} (n={X.shape[0]}, d={X.shape[1]}), best of {repeat}:", flush=True)
        sk_wall, sk_cpu = times["scikit-learn"]
        for label, (wall, cpu) in times.items():
            model = fitted[label]
            print(f"   {label:13s} {wall:6.2f} s wall ({wall / sk_wall:4.2f} x scikit-learn), "
                  f"{cpu:6.2f} s CPU ({cpu / sk_cpu:4.2f} x), "
                  f"log evidence {model.log_marginal_likelihood_value_:9.3f}, "
                  f"kernel {model.kernel_}", flush=True)  # fmt: skip
            ratios[(name, label)] = (wall / sk_wall, cpu / sk_cpu)
        if best:
            ours = fitted["ours EP"]
            with threadpool_limits(limits=1, user_api="blas"):
                (best_value, best_theta), optima = best_ep_evidence(X, y)
                at_tight = GPClassifier(ours.kernel_, optimizer=None, tol=1e-8,
                                        max_iter=3000).fit(X, y)  # fmt: skip
                err, norm = gradient_check(X, y, ours.kernel_.theta)
            values = sorted(v for v, _ in optima)
            print(f"   best EP evidence of 12 starts (EP tol 1e-8): {best_value:.3f} at "
                  f"signal variance {np.exp(best_theta[0]):.4g}, length scale "
                  f"{np.exp(best_theta[1]):.4g} (the starts' optima range "
                  f"{values[0]:.3f} .. {values[-1]:.3f}); default fit's kernel at EP tol "
                  f"1e-8: {at_tight.log_marginal_likelihood_value_:.3f} (gap "
                  f"{best_value - at_tight.log_marginal_likelihood_value_:.3f} nats)")  # fmt: skip
            print(f"   gradient at the default fit's kernel (EP tol 1e-4) vs central "
                  f"differences of the evidence at EP tol 1e-10: largest error {err:.2e} "
                  f"(gradient norm {norm:.2e})", flush=True)  # fmt: skip
    return ratios


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[500, 1000, 2000])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--data-home", default=None)
    parser.add_argument(
        "--only-sklearn",
        action="store_true",
        help="run only the comparison with scikit-learn (section 4)",
    )
    parser.add_argument(
        "--no-best",
        action="store_true",
        help="skip the multi-start search for the best EP evidence",
    )
    args = parser.parse_args(argv)  # fmt: skip
    if not args.only_sklearn:
        fixed_hyperparameters(args.sizes, args.repeat)
        pima_optimisation(args.data_home)
        gpy_ratio()
    sklearn_comparison(args.data_home, max(args.repeat, 1), best=not args.no_best)


if __name__ == "__main__":
    from _harness import run_suite  # benchmarks/_harness.py

    sys.exit(run_suite("gpc", main, quick=["--sizes", "500", "1000", "--repeat", "1"]))
