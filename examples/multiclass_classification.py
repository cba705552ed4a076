"""Multi-class GP classification: nested EP (multinomial probit) against one-vs-rest.
==================================================================================

Three classes of the wine data (two standardised principal components so that the
decision regions can be drawn). ``GPClassifier`` fits the multinomial probit model with
nested EP by default for more than two classes; ``multi_class="one_vs_rest"`` fits one
binary EP classifier per class. Shown: the predicted class regions, test accuracy and
log loss on a held-out half.
"""

import numpy as np
from _gallery import run
from matplotlib import pyplot as plt
from matplotlib.colors import ListedColormap
from sklearn.datasets import load_wine
from sklearn.decomposition import PCA
from sklearn.metrics import log_loss
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from robustep import GPClassifier


def main(quick, out):
    X, y = load_wine(return_X_y=True)
    Z = make_pipeline(StandardScaler(), PCA(n_components=2)).fit_transform(X)
    Z_train, Z_test, y_train, y_test = train_test_split(
        Z, y, train_size=60 if quick else 0.5, stratify=y, random_state=0
    )
    models = {
        "multinomial probit (nested EP)": GPClassifier(random_state=0),
        "one-vs-rest (binary EP)": GPClassifier(multi_class="one_vs_rest", random_state=0),
    }
    xx, yy = np.meshgrid(np.linspace(-4.5, 4.5, 80), np.linspace(-3.5, 4, 80))
    grid = np.c_[xx.ravel(), yy.ravel()]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.9), sharey=True)
    for ax, (name, model) in zip(axes, models.items(), strict=True):
        model.fit(Z_train, y_train)
        proba = model.predict_proba(grid)
        ax.pcolormesh(
            xx,
            yy,
            proba.argmax(axis=1).reshape(xx.shape),
            shading="nearest",
            cmap=ListedColormap(["C0", "C1", "C2"]),
            alpha=0.25,
            vmin=0,
            vmax=2,
        )
        ax.contour(
            xx,
            yy,
            proba.max(axis=1).reshape(xx.shape),
            levels=[0.5, 0.8],
            colors="k",
            linewidths=0.6,
        )
        for k in range(3):
            ax.scatter(
                *Z_train[y_train == k].T,
                color=f"C{k}",
                s=14,
                edgecolors="k",
                linewidths=0.3,
                label=f"class {k}",
            )
        loss = log_loss(y_test, model.predict_proba(Z_test), labels=model.classes_)
        ax.set_title(
            f"{name}\naccuracy {model.score(Z_test, y_test):.3f}, log loss {loss:.3f}", fontsize=9
        )
    for ax in axes:
        ax.set_xlabel("$x_1$")
    axes[0].set_ylabel("$x_2$")
    axes[0].legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    path = out / "multiclass_classification.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


if __name__ == "__main__":
    run(main)
