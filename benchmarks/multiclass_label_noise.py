"""Label-noise multinomial probit vs plain nested EP on 3-class data with flipped labels.

Three Gaussian blobs (the data of tests/estimators/test_multiclass_label_noise.py), a
fraction of the training labels replaced by another class uniformly; GPClassifier(multi_class=
"multinomial") with label_noise = 0 and = ε (kernel hyperparameters optimised), log loss
and accuracy on clean test labels, fit time.  Numbers in docs/derivations/multiclass.md §9.

    python benchmarks/multiclass_label_noise.py [--n 90] [--seeds 5] [--flip 0.2] [--eps 0.2]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

import numpy as np
from sklearn.metrics import log_loss

from robustep.estimators import GPClassifier


def flipped_three_class_data(n, seed, flip):
    """X (n, 2), clean labels (n,), labels with a fraction ``flip`` replaced (n,)."""
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 2.0], [-1.8, -1.0], [1.8, -1.0]])
    y = rng.integers(0, 3, n)
    X = centres[y] + 0.9 * rng.normal(size=(n, 2))
    noisy = y.copy()
    f = rng.random(n) < flip
    noisy[f] = (y[f] + rng.integers(1, 3, f.sum())) % 3
    return X, y, noisy


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=90)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--flip", type=float, default=0.2)
    ap.add_argument("--eps", type=float, default=0.2)
    args = ap.parse_args(argv)
    print("seed  flipped  eps   log_loss  accuracy  log_Z     fit_s  converged")
    for seed in range(args.seeds):
        X, y, noisy = flipped_three_class_data(args.n, 10 + seed, args.flip)
        Xt, yt, _ = flipped_three_class_data(500, 100 + seed, 0.0)
        for eps in (0.0, args.eps):
            t0 = time.perf_counter()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                clf = GPClassifier(multi_class="multinomial", label_noise=eps).fit(X, noisy)
            dt = time.perf_counter() - t0
            P = clf.predict_proba(Xt)
            ok = clf.converged_ and not caught
            print(
                f"{seed:4d}  {int(np.sum(noisy != y)):7d}  {eps:4.2f}  {log_loss(yt, P):8.4f}  "
                f"{np.mean(clf.predict(Xt) == yt):8.3f}  {clf.log_marginal_likelihood_value_:8.3f}"
                f"  {dt:5.1f}  {ok}"
            )


if __name__ == "__main__":
    from _harness import run_suite  # benchmarks/_harness.py

    sys.exit(run_suite("multiclass_label_noise", main, quick=["--seeds", "2"]))
