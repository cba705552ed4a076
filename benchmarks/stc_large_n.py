"""Why t-EP for the Student-t process fails at a few hundred points (docs/derivations/tep.md).

Runs damped parallel t-EP sweeps (step 0.5) on ``--n`` standardised Pima training points
with the default eq. 44 kernel and nu = 10, and prints per sweep: log|B|, the cavity
t-scale factor exp(-(log|B| + log(d_i / s2c_i)) / nu) (median over sites) and the range of
the new site precisions, until the posterior scale matrix stops being positive definite.

Usage: ``ROBUSTEP_DATA=../shared/datasets python benchmarks/stc_large_n.py [--n 200]``
"""

from __future__ import annotations

import argparse

import numpy as np
from sklearn.model_selection import train_test_split

from robustep.datasets import load_pima
from robustep.estimators.student_t_process import default_kernel
from robustep.tep import process


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--df", type=float, default=10.0)
    parser.add_argument("--sweeps", type=int, default=10)
    args = parser.parse_args(argv)
    X, y = load_pima()
    X = (X - X.mean(0)) / X.std(0)
    X, _, y, _ = train_test_split(X, y, train_size=args.n, random_state=0)
    K = default_kernel(X.shape[1])(X)
    n = len(y)
    tau, nu = np.zeros(n), np.zeros(n)
    post = process.process_posterior(K, tau, nu)
    print("sweep  log|B|  median cavity scale factor  new site precision range")
    for sweep in range(args.sweeps):
        d = np.diag(post.sigma_g)
        tau_new, nu_new, good = process._site_update(
            d, post.mu, post.logdet_b, tau, nu, y.astype(float), args.df, 0.0, n
        )
        _, s2c, _ = process._cavities(post, tau, nu)
        factor = np.exp(-(post.logdet_b + np.log(d / s2c)) / args.df)
        print(
            f"{sweep:5d}  {post.logdet_b:6.1f}  {np.median(factor):26.2e}  "
            f"[{np.nanmin(tau_new):.2f}, {np.nanmax(tau_new):.2f}]"
        )
        tau = tau + 0.5 * (np.where(good, tau_new, tau) - tau)
        nu = nu + 0.5 * (np.where(good, nu_new, nu) - nu)
        post = process.process_posterior(K, tau, nu)
        if post is None:
            print(f"after sweep {sweep}: the posterior scale matrix is not positive definite")
            break


if __name__ == "__main__":
    main()
