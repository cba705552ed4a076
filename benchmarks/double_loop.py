"""Robust EP settings on Jylänki et al. (2011) example 2 (issue 2 §4; docs/benchmarks.md).

For four data seeds of example 2 (``robustep.experiments.tgp_examples.make_example``,
nu = 2, sigma = 0.1, sigma_se = 3, l = 0.88) prints, for the default robust EP with
``max_inner`` in {1, 2, 3, 5, 10}, whether it converged (tol 1e-4) and the iterations.

Usage: python benchmarks/double_loop.py [--max-iter 1000]
"""

from __future__ import annotations

import argparse
import warnings

from sklearn.gaussian_process.kernels import RBF, ConstantKernel

from robustep.ep import expectation_propagation
from robustep.experiments.tgp_examples import make_example
from robustep.likelihoods import StudentT


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-iter", type=int, default=1000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    args = parser.parse_args(argv)
    settings = [1, 2, 3, 5, 10]
    print("seed " + " ".join(f"{f'max_inner={m}':>14s}" for m in settings))
    for seed in args.seeds:
        X, y = make_example(2, random_state=seed)
        K = (ConstantKernel(3.0**2) * RBF(0.88))(X)
        cells = []
        for m in settings:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = expectation_propagation(
                    K, y, StudentT(2.0, 0.1), max_inner=m, max_iter=args.max_iter
                )
            cells.append(f"{res.n_iter:>6d} {'yes' if res.converged else 'no':>7s}")
        print(f"{seed:4d} " + " ".join(cells), flush=True)


if __name__ == "__main__":
    main()
