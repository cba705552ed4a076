"""Label-noise classification: a noisy step likelihood against the probit, with 15% flipped labels.
================================================================================================

The probit likelihood explains each flipped label by moving the latent function; the
robust step likelihood p(y | f) = eps + (1 - 2 eps) step(y f) attributes them to label
noise. Shown: the 0.5 contours and test accuracy on clean test labels.
"""

import numpy as np
from _gallery import run
from matplotlib import pyplot as plt
from sklearn.datasets import make_moons

from robustep import GPClassifier


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
    xx, yy = np.meshgrid(np.linspace(-1.7, 2.7, 120), np.linspace(-1.2, 1.7, 100))
    grid = np.c_[xx.ravel(), yy.ravel()]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.8), sharey=True)
    for ax, (name, model) in zip(axes, models.items(), strict=True):
        model.fit(X, y_noisy)
        proba = model.predict_proba(grid)[:, 1].reshape(xx.shape)
        ax.contourf(xx, yy, proba, levels=np.linspace(0, 1, 11), cmap="RdBu_r", alpha=0.5)
        ax.contour(xx, yy, proba, levels=[0.5], colors="k")
        ax.scatter(
            *X[~flipped].T, c=y_noisy[~flipped], cmap="RdBu_r", s=12, edgecolors="k", linewidths=0.3
        )
        ax.scatter(
            *X[flipped].T,
            c=y_noisy[flipped],
            cmap="RdBu_r",
            s=40,
            marker="X",
            edgecolors="k",
            linewidths=0.5,
            label="flipped label",
        )
        ax.set_title(f"{name}\ntest accuracy {model.score(X_test, y_test):.3f}", fontsize=9)
    for ax in axes:
        ax.set_xlabel("$x_1$")
    axes[0].set_ylabel("$x_2$")
    axes[0].legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    path = out / "label_noise_classification.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


if __name__ == "__main__":
    run(main)
