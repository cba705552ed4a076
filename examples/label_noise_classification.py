"""Label-noise classification: a noisy step likelihood against the probit, with 15% flipped labels.
================================================================================================

The probit likelihood explains each flipped label by moving the latent function; the
robust step likelihood p(y | f) = eps + (1 - 2 eps) step(y f) attributes them to label
noise. Shading: the predictive probability p(y = 1 | x) (colour bar); black line: the
decision boundary p(y = 1 | x) = 0.5; the titles give the accuracy on clean test labels.
"""

import numpy as np
from _gallery import run
from matplotlib import pyplot as plt
from matplotlib.lines import Line2D
from sklearn.datasets import make_moons

from robustep import GPClassifier
from robustep.plotting import PROBABILITY_CMAP, figure_legend


def main(quick, out):
    n = 60 if quick else 200
    X, y = make_moons(n_samples=n, noise=0.2, random_state=0)
    X_test, y_test = make_moons(n_samples=500, noise=0.2, random_state=1)
    rng = np.random.default_rng(0)
    flipped = rng.random(n) < 0.15
    y_noisy = np.where(flipped, 1 - y, y)

    models = {
        "probit (EP)": GPClassifier(likelihood="probit", random_state=0),
        "step, label noise 0.15 (EP)": GPClassifier(
            likelihood="step", label_noise=0.15, random_state=0
        ),
    }
    xx, yy = np.meshgrid(np.linspace(-1.7, 2.7, 200), np.linspace(-1.2, 1.7, 150))
    grid = np.c_[xx.ravel(), yy.ravel()]
    cmap = plt.get_cmap(PROBABILITY_CMAP)
    colors = {0: cmap(0.1), 1: cmap(0.9)}
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 4.4), sharey=True)
    for ax, (name, model) in zip(axes, models.items(), strict=True):
        model.fit(X, y_noisy)
        proba = model.predict_proba(grid)[:, 1].reshape(xx.shape)
        shading = ax.contourf(
            xx, yy, proba, levels=np.linspace(0, 1, 21), cmap=cmap, vmin=0, vmax=1, alpha=0.6
        )
        ax.contour(xx, yy, proba, levels=[0.5], colors="k", linewidths=1.2)
        for label, color in colors.items():
            keep = (y_noisy == label) & ~flipped
            ax.scatter(*X[keep].T, color=color, s=14, edgecolors="k", linewidths=0.3)
            keep = (y_noisy == label) & flipped
            ax.scatter(*X[keep].T, color=color, s=45, marker="X", edgecolors="k", linewidths=0.6)
        ax.set_title(f"{name}\ntest accuracy {model.score(X_test, y_test):.3f}")
        ax.set_xlabel("$x_1$")
    axes[0].set_ylabel("$x_2$")
    fig.colorbar(shading, ax=axes, label="p(y = 1 | x)", ticks=np.linspace(0, 1, 6))
    handles = [
        Line2D([], [], ls="", marker="o", mfc=colors[0], mec="k", label="label 0"),
        Line2D([], [], ls="", marker="o", mfc=colors[1], mec="k", label="label 1"),
        Line2D([], [], ls="", marker="X", ms=8, mfc="0.7", mec="k", label="flipped label"),
        Line2D([], [], color="k", lw=1.2, label="p(y = 1 | x) = 0.5"),
    ]
    figure_legend(fig, handles, [h.get_label() for h in handles])
    path = out / "label_noise_classification.png"
    fig.savefig(path)
    plt.close(fig)
    return path


if __name__ == "__main__":
    run(main)
