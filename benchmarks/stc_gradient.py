"""Hyperparameter gradients of the Student-t process evidence (docs/derivations/tep.md §8.5–8.6).

``--gap``: on the synthetic problems of §8.5 (x in R^4, y = sign(sin x1 + x2/2), 10% labels
flipped, eps = 0.05; ARD kernel of eq. 44 or isotropic C*RBF + C + white; at the starting
hyperparameters and at a random perturbation), print how far the explicit (sites fixed)
gradient is from the total one (implicit function theorem, eq. 8.9), and the total gradient's
distance to central differences of the converged evidence.

``--optimum``: fit ``StudentTProcessClassifier`` with each gradient mode on 80 points
(x in R^5, y = 1{sin(1.5 x1) + 0.7 x2 > 0}, 10% flipped; eq. 44 kernel) and print the log
evidence reached, the error on 2000 noise-free test points and the fit time (§8.6 table).

``--sonar``: on Sonar (166 training points, 63 ARD hyperparameters, nu = 10) print the
distance between the estimator's finite-difference and implicit gradients, and the time of one
warm evaluation of each, for inner EP tolerances 1e-6, 1e-8 and 1e-10.

Usage: ``OPENBLAS_NUM_THREADS=1 ROBUSTEP_DATA=../shared/datasets python benchmarks/stc_gradient.py
[--gap] [--optimum] [--sonar] [--sizes 50 100 150] [--df 10 3]``
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, WhiteKernel
from sklearn.gaussian_process.kernels import ConstantKernel as C

from robustep.estimators.student_t_process import StudentTProcessClassifier, default_kernel
from robustep.tep.process import (
    process_log_marginal_likelihood,
    process_log_marginal_likelihood_gradient,
    process_tep,
)

EPS = 0.05


def _converged_sites(K, y, df, warm=None, tol=1e-10):
    kw = {} if warm is None else {"tau": warm[0], "nu": warm[1]}
    with np.errstate(all="ignore"):
        return process_tep(K, y, df=df, eps=EPS, tol=tol, max_iter=20000, damping=0.8, **kw)


def _angle(a, b):
    return np.degrees(np.arccos(np.clip(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)), -1, 1)))


def gap(sizes, dfs):
    print("n    kernel point df   |g_expl - g_tot|/|g_tot|  angle   |g_tot - FD|/|FD|")
    for n in sizes:
        for kind in ("ARD", "iso"):
            rng = np.random.default_rng(n)
            X = rng.normal(size=(n, 4))
            y = np.where(np.sin(X[:, 0]) + 0.5 * X[:, 1] > 0, 1.0, -1.0)
            y[rng.random(n) < 0.1] *= -1
            base = (
                default_kernel(4)
                if kind == "ARD"
                else C(1.0) * RBF(1.0) + C(1.0) + WhiteKernel(1e-2)
            )
            for point in ("init", "rand"):
                kern = base
                if point == "rand":
                    kern = base.clone_with_theta(base.theta + rng.normal(0, 0.7, base.theta.size))
                K, K_grad = kern(X, eval_gradient=True)
                for df in dfs:
                    tau, nu, post, info = _converged_sites(K, y, df)
                    if not info.converged:
                        print(f"{n:<4} {kind:<6} {point:<5} {df:<4g} EP did not converge")
                        continue
                    args = (K, K_grad, y, tau, nu, df, EPS)
                    _, g_expl = process_log_marginal_likelihood_gradient(*args, post=post)
                    _, g_tot = process_log_marginal_likelihood_gradient(
                        *args, post=post, implicit=True
                    )
                    h, theta, fd = 1e-4, kern.theta, np.zeros(kern.theta.size)
                    for i in range(theta.size):
                        vals = []
                        for sign in (1.0, -1.0):
                            Kx = kern.clone_with_theta(theta + sign * h * np.eye(theta.size)[i])(X)
                            t2, n2, p2, _ = _converged_sites(Kx, y, df, (tau, nu), 1e-12)
                            vals.append(process_log_marginal_likelihood(Kx, y, t2, n2, df, EPS, p2))
                        fd[i] = (vals[0] - vals[1]) / (2 * h)
                    rel = np.linalg.norm(g_expl - g_tot) / np.linalg.norm(g_tot)
                    rel_fd = np.linalg.norm(g_tot - fd) / np.linalg.norm(fd)
                    print(
                        f"{n:<4} {kind:<6} {point:<5} {df:<4g} {rel:24.2f}  "
                        f"{_angle(g_expl, g_tot):5.0f}°  {rel_fd:.1e}"
                    )


def optimum():
    def data(n, seed, flip):
        rng = np.random.default_rng(seed)
        X = rng.normal(size=(n, 5))
        clean = (np.sin(1.5 * X[:, 0]) + 0.7 * X[:, 1] > 0).astype(int)
        y = np.where(rng.random(n) < flip, 1 - clean, clean)
        return X, y, clean

    print("seed df  mode               log evidence  test error  time (s)")
    for seed in (0, 1):
        X, y, _ = data(80, seed, 0.1)
        Xt, _, yt = data(2000, 100 + seed, 0.0)
        for df in (10.0, 3.0):
            modes = ("implicit", "explicit") + (("finite-difference",) if df == 10.0 else ())
            for mode in modes:
                clf = StudentTProcessClassifier(df=df, label_noise=EPS, gradient=mode)
                t = time.perf_counter()
                clf.fit(X, y)
                t = time.perf_counter() - t
                err = np.mean(clf.predict(Xt) != yt)
                print(
                    f"{seed:<4} {df:<3g} {mode:<18} {clf.log_marginal_likelihood_value_:12.2f}"
                    f"  {100 * err:9.1f}%  {t:8.1f}"
                )


def sonar():
    from sklearn.model_selection import train_test_split

    from robustep.datasets import load_sonar

    X, y = load_sonar()
    Xtr, Xte, ytr, yte = train_test_split(X, y, train_size=166, random_state=0, stratify=y)
    mu, sd = Xtr.mean(0), Xtr.std(0)
    Xtr, Xte = (Xtr - mu) / sd, (Xte - mu) / sd
    ypm = np.where(ytr == 1, 1.0, -1.0)
    kern = default_kernel(60)
    print("inner tol  |g_FD - g_impl|/|g_impl|  warm eval: implicit (s)  finite differences (s)")
    for tol in (1e-6, 1e-8, 1e-10):
        grads, times = {}, {}
        for mode in ("implicit", "finite-difference"):
            clf = StudentTProcessClassifier(
                df=10.0, label_noise=EPS, gradient=mode, tol=tol, max_iter=100000
            )
            # converge once, then time a warm-started evaluation
            warm = clf._evaluate(kern.theta, kern, Xtr, ypm, None).state
            t = time.perf_counter()
            grads[mode] = clf._evaluate(kern.theta, kern, Xtr, ypm, warm).gradient
            times[mode] = time.perf_counter() - t
        a, b = grads["implicit"], grads["finite-difference"]
        print(
            f"{tol:<9g}  {np.linalg.norm(a - b) / np.linalg.norm(a):26.1e}  "
            f"{times['implicit']:24.2f}  {times['finite-difference']:22.2f}"
        )
    print("full fit   log evidence  test error  time (s)")
    for mode in ("implicit", "explicit"):
        clf = StudentTProcessClassifier(df=10.0, label_noise=EPS, gradient=mode)
        t = time.perf_counter()
        clf.fit(Xtr, ytr)
        t = time.perf_counter() - t
        err = np.mean(clf.predict(Xte) != yte)
        print(f"{mode:<9}  {clf.log_marginal_likelihood_value_:12.1f}  {100 * err:9.1f}%  {t:8.1f}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gap", action="store_true")
    parser.add_argument("--optimum", action="store_true")
    parser.add_argument("--sonar", action="store_true")
    parser.add_argument("--sizes", type=int, nargs="+", default=[50, 100, 150])
    parser.add_argument("--df", type=float, nargs="+", default=[10.0, 3.0])
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore", ConvergenceWarning)
    if args.gap or not (args.sonar or args.optimum):
        gap(args.sizes, args.df)
    if args.optimum:
        optimum()
    if args.sonar:
        sonar()


if __name__ == "__main__":
    main()
