"""Heavy-tailed classification: the Student-t process classifier against the GP classifier.
========================================================================================

A cluster of training points of one class sits deep inside the other class. The
Student-t process (t-EP, Ding et al. 2011) can widen its posterior where the data
disagree with the prior; the figure shows both decision regions and their test accuracy.
"""

import numpy as np
from _gallery import run
from matplotlib import pyplot as plt

from robustep import GPClassifier, StudentTProcessClassifier


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
    xx, yy = np.meshgrid(np.linspace(-3, 3.2, 100), np.linspace(-3, 3, 100))
    grid = np.c_[xx.ravel(), yy.ravel()]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.9), sharey=True)
    for ax, (name, model) in zip(axes, models.items(), strict=True):
        model.fit(X_train, y_train)
        proba = model.predict_proba(grid)[:, 1].reshape(xx.shape)
        ax.contourf(xx, yy, proba, levels=np.linspace(0, 1, 11), cmap="RdBu_r", alpha=0.5)
        ax.contour(xx, yy, proba, levels=[0.5], colors="k")
        ax.scatter(*X.T, c=y, cmap="RdBu_r", s=10, edgecolors="k", linewidths=0.3)
        ax.scatter(
            *X_out.T,
            c="C0",
            s=40,
            marker="X",
            edgecolors="k",
            linewidths=0.5,
            label="outlying cluster (class -1)",
        )
        ax.set_title(f"{name}\ntest accuracy {model.score(X_test, y_test):.3f}", fontsize=9)
    for ax in axes:
        ax.set_xlabel("$x_1$")
    axes[0].set_ylabel("$x_2$")
    axes[0].legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    path = out / "student_t_process_classification.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


if __name__ == "__main__":
    run(main)
