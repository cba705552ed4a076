"""Heavy-tailed classification: the Student-t process classifier against the GP classifier.
========================================================================================

A cluster of training points of one class sits deep inside the other class. The
Student-t process (t-EP, Ding et al. 2011) can widen its posterior where the data
disagree with the prior. Shading: the predictive probability p(y = +1 | x) (colour bar);
black line: the decision boundary p(y = +1 | x) = 0.5; the titles give the test accuracy.
"""

import numpy as np
from _gallery import run
from matplotlib import pyplot as plt
from matplotlib.lines import Line2D

from robustep import GPClassifier, StudentTProcessClassifier
from robustep.plotting import PROBABILITY_CMAP, figure_legend


def _data(n, rng):
    X = rng.standard_normal((n, 2))
    y = np.where(X[:, 0] + 0.5 * X[:, 1] > 0, 1, -1)
    return X, y


def main(quick, out):
    rng = np.random.default_rng(0)
    n = 60 if quick else 150
    X, y = _data(n, rng)
    k = n // 10
    X_out = np.array([2.0, 1.0]) + 0.3 * rng.standard_normal((k, 2))
    X_train = np.vstack([X, X_out])
    y_train = np.concatenate([y, -np.ones(k, dtype=int)])  # wrong class, deep inside +1
    X_test, y_test = _data(1000, np.random.default_rng(1))

    models = {
        "GP classifier (probit EP)": GPClassifier(random_state=0),
        "Student-t process (t-EP)": StudentTProcessClassifier(random_state=0),
    }
    # the shaded frame holds every training point
    lo = np.minimum(X_train.min(axis=0) - 0.3, [-3.0, -3.0])
    hi = np.maximum(X_train.max(axis=0) + 0.3, [3.2, 3.0])
    xx, yy = np.meshgrid(np.linspace(lo[0], hi[0], 200), np.linspace(lo[1], hi[1], 200))
    grid = np.c_[xx.ravel(), yy.ravel()]
    cmap = plt.get_cmap(PROBABILITY_CMAP)
    colors = {-1: cmap(0.1), 1: cmap(0.9)}
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 4.4), sharey=True)
    for ax, (name, model) in zip(axes, models.items(), strict=True):
        model.fit(X_train, y_train)
        proba = model.predict_proba(grid)[:, 1].reshape(xx.shape)
        shading = ax.contourf(
            xx, yy, proba, levels=np.linspace(0, 1, 21), cmap=cmap, vmin=0, vmax=1, alpha=0.6
        )
        ax.contour(xx, yy, proba, levels=[0.5], colors="k", linewidths=1.2)
        for label, color in colors.items():
            ax.scatter(*X[y == label].T, color=color, s=12, edgecolors="k", linewidths=0.3)
        ax.scatter(*X_out.T, color=colors[-1], s=45, marker="X", edgecolors="k", linewidths=0.6)
        ax.set_title(f"{name}\ntest accuracy {model.score(X_test, y_test):.3f}")
        ax.set_xlabel("$x_1$")
    axes[0].set_ylabel("$x_2$")
    fig.colorbar(shading, ax=axes, label="p(y = +1 | x)", ticks=np.linspace(0, 1, 6))
    handles = [
        Line2D([], [], ls="", marker="o", mfc=colors[-1], mec="k", label="class -1"),
        Line2D([], [], ls="", marker="o", mfc=colors[1], mec="k", label="class +1"),
        Line2D(
            [], [], ls="", marker="X", ms=8, mfc=colors[-1], mec="k", label="outlying cluster (-1)"
        ),
        Line2D([], [], color="k", lw=1.2, label="p(y = +1 | x) = 0.5"),
    ]
    figure_legend(fig, handles, [h.get_label() for h in handles])
    path = out / "student_t_process_classification.png"
    fig.savefig(path)
    plt.close(fig)
    return path


if __name__ == "__main__":
    run(main)
