"""Convergence of BayesPointMachine for (label_noise, damping) on six small data sets.

The evidence behind the defaults ``label_noise=0.1, damping=0.5`` (issue 12 §4;
docs/reliability.md, "BayesPointMachine defaults").  For each setting and data set it
prints whether t-EP (df = 10) converged within ``--max-iter`` sweeps, the sweeps, the
seconds and the training accuracy.  Data sets: the two-class problem of scikit-learn's
``check_classifiers_train`` (standardised blobs), iris versicolor vs virginica (raw
scale), two ``make_classification`` problems with 5% flipped labels, 200 points of
breast cancer (standardised) and the four-component mixture of Futami et al. §5.1.

    python benchmarks/bpm_defaults.py [--max-iter 300]
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from sklearn.datasets import load_breast_cancer, load_iris, make_blobs, make_classification
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import StandardScaler
from sklearn.utils import shuffle

from robustep.estimators import BayesPointMachine

SETTINGS = [(0.0, 0.0), (0.05, 0.0), (0.05, 0.5), (0.1, 0.0), (0.1, 0.5)]


def data_sets() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    X, y = make_blobs(n_samples=300, random_state=0)
    X, y = shuffle(X, y, random_state=7)
    X = StandardScaler().fit_transform(X)
    out = {"sklearn check": (X[y != 2], y[y != 2])}
    X, y = load_iris(return_X_y=True)
    out["iris 2 vs 3"] = (X[y != 0], y[y != 0])
    for seed in (0, 1):
        out[f"make_classification {seed}"] = make_classification(
            n_samples=150, n_features=4, flip_y=0.05, random_state=seed
        )
    X, y = load_breast_cancer(return_X_y=True)
    idx = np.random.default_rng(0).permutation(len(y))[:200]
    out["breast cancer 200"] = (StandardScaler().fit_transform(X[idx]), y[idx])
    rng = np.random.default_rng(1)
    comp = rng.choice(4, 300, p=[0.05, 0.25, 0.45, 0.25])
    centres = np.array([[1, 1], [-1, 1], [-1, -1], [1, -1]])
    X = centres[comp] + np.sqrt(0.05) * rng.normal(size=(300, 2))
    out["Futami §5.1 mixture"] = (X, np.where(np.isin(comp, [0, 3]), 1, -1))
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-iter", type=int, default=300)
    args = parser.parse_args(argv)
    sets = data_sets()
    print("| label_noise | damping | data set | converged | sweeps | seconds | train acc |")
    print("|---|---|---|---|---|---|---|")
    for eps, damping in SETTINGS:
        n_conv = 0
        for name, (X, y) in sets.items():
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                clf = BayesPointMachine(label_noise=eps, damping=damping, max_iter=args.max_iter)
                clf.fit(X, y)
            dt = time.perf_counter() - t0
            acc = float(np.mean(clf.predict(X) == y))
            n_conv += clf.converged_
            print(
                f"| {eps} | {damping} | {name} | {clf.converged_} | {clf.n_iter_} | "
                f"{dt:.1f} | {acc:.3f} |",
                flush=True,
            )
        print(f"| {eps} | {damping} | **all** | {n_conv}/{len(sets)} | | | |", flush=True)


if __name__ == "__main__":
    main()
