"""Sparse (inducing-point) EP on 10^5 points: label-noise classification at scale.
===============================================================================

``GPClassifier(inducing_points=m)`` fits the FITC sparse GP with robust EP in O(n m^2)
per sweep and never forms an n x n matrix. Here 10^5 training points with 10% flipped
labels, 128 inducing inputs (k-means), fixed hyperparameters; the figure shows the
predictive probability p(y = 1 | x) (shading, colour bar) with the decision boundary
p = 0.5 (black line), the inducing inputs and a sample of the data, with the fit's wall
time and test accuracy against the noise-free labels.
"""

import time

import numpy as np
from _gallery import run
from matplotlib import pyplot as plt
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

from robustep import GPClassifier
from robustep.plotting import PROBABILITY_CMAP, figure_legend


def _truth(X):
    return np.sin(2 * X[:, 0]) * np.cos(1.5 * X[:, 1]) > 0


def main(quick, out):
    rng = np.random.default_rng(0)
    n = 5_000 if quick else 100_000
    m = 32 if quick else 128
    X = rng.uniform(-3, 3, size=(n, 2))
    y = _truth(X)
    y = np.where(rng.random(n) < 0.1, ~y, y)  # 10% label noise
    X_test = rng.uniform(-3, 3, size=(5000, 2))
    clf = GPClassifier(
        ConstantKernel(4.0) * RBF(0.6),
        likelihood="step",
        label_noise=0.1,
        inducing_points=m,
        optimizer=None,
        random_state=0,
    )
    start = time.perf_counter()
    clf.fit(X, y)
    seconds = time.perf_counter() - start
    accuracy = clf.score(X_test, _truth(X_test))

    xx, yy = np.meshgrid(np.linspace(-3, 3, 150), np.linspace(-3, 3, 150))
    proba = clf.predict_proba(np.c_[xx.ravel(), yy.ravel()])[:, 1].reshape(xx.shape)
    cmap = plt.get_cmap(PROBABILITY_CMAP)
    fig, ax = plt.subplots(figsize=(6.5, 6))
    cs = ax.contourf(
        xx, yy, proba, levels=np.linspace(0, 1, 21), cmap=cmap, vmin=0, vmax=1, alpha=0.6
    )
    ax.contour(xx, yy, proba, levels=[0.5], colors="k", linewidths=1)
    show = rng.choice(n, size=min(n, 1500), replace=False)
    for label, color in ((False, cmap(0.1)), (True, cmap(0.9))):
        keep = show[y[show] == label]
        ax.scatter(*X[keep].T, color=color, s=3, alpha=0.6, label=f"label {int(label)} (sample)")
    ax.plot(*clf.inducing_points_.T, "k^", ms=5, label=f"{m} inducing inputs")
    ax.plot([], [], "k-", lw=1, label="p(y = 1 | x) = 0.5")
    fig.colorbar(cs, ax=ax, label="p(y = 1 | x)", ticks=np.linspace(0, 1, 6))
    ax.set_title(
        f"n = {n:,}, 10% flipped labels: fit {seconds:.1f} s,\n"
        f"test accuracy (clean labels) {accuracy:.3f}"
    )
    ax.set_xlabel("$x_1$")
    ax.set_ylabel("$x_2$")
    handles, labels = ax.get_legend_handles_labels()
    figure_legend(fig, handles, labels, ncol=2, markerscale=2)
    path = out / "sparse_large_n.png"
    fig.savefig(path)
    plt.close(fig)
    return path


if __name__ == "__main__":
    run(main)
