"""Multi-class GP classification: nested EP (multinomial probit) against one-vs-rest.
==================================================================================

Three classes of the wine data (two standardised principal components so that the
decision regions can be drawn). ``GPClassifier`` fits the multinomial probit model with
nested EP by default for more than two classes; ``multi_class="one_vs_rest"`` fits one
binary EP classifier per class. Shading: the predicted class (legend), darker where the
predicted class is more probable (colour bar); black lines: where the probability of
the predicted class is 0.5 and 0.8. The titles give test accuracy and log loss on a
held-out half.
"""

import numpy as np
from _gallery import run
from matplotlib import pyplot as plt
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize, to_rgb
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from sklearn.datasets import load_wine
from sklearn.decomposition import PCA
from sklearn.metrics import log_loss
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from robustep import GPClassifier
from robustep.plotting import class_colors, figure_legend


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
    lo, hi = Z.min(axis=0) - 0.5, Z.max(axis=0) + 0.5
    side = 80 if quick else 200
    xx, yy = np.meshgrid(np.linspace(lo[0], hi[0], side), np.linspace(lo[1], hi[1], side))
    grid = np.c_[xx.ravel(), yy.ravel()]
    colors = np.array([to_rgb(c) for c in class_colors(3)])
    fig, axes = plt.subplots(1, 2, figsize=(9.5, 4.5), sharey=True)
    for ax, (name, model) in zip(axes, models.items(), strict=True):
        model.fit(Z_train, y_train)
        proba = model.predict_proba(grid)
        top = proba.max(axis=1)
        # the predicted class's colour, faded to white where that class is uncertain
        # (probability 1/3) and full where it is certain: smooth at every pixel
        weight = ((top - 1 / 3) / (2 / 3))[:, None]
        rgb = 1 - weight * (1 - colors[proba.argmax(axis=1)])
        ax.imshow(
            rgb.reshape(*xx.shape, 3),
            origin="lower",
            extent=(lo[0], hi[0], lo[1], hi[1]),
            aspect="auto",
            interpolation="bilinear",
            alpha=0.55,
        )
        lines = ax.contour(
            xx, yy, top.reshape(xx.shape), levels=[0.5, 0.8], colors="k", linewidths=0.7
        )
        ax.clabel(lines, fmt="%.1f", fontsize=7)
        for k, color in enumerate(colors):
            ax.scatter(*Z_train[y_train == k].T, color=color, s=16, edgecolors="k", linewidths=0.4)
        loss = log_loss(y_test, model.predict_proba(Z_test), labels=model.classes_)
        ax.set_title(f"{name}\naccuracy {model.score(Z_test, y_test):.3f}, log loss {loss:.3f}")
        ax.set_xlabel("principal component 1")
    axes[0].set_ylabel("principal component 2")
    fig.colorbar(
        ScalarMappable(Normalize(1 / 3, 1), cmap="Greys"),
        ax=axes,
        label="probability of the predicted class",
        alpha=0.55,
    )
    handles = [Patch(color=c, alpha=0.55, label=f"class {k}") for k, c in enumerate(colors)]
    handles.append(Line2D([], [], color="k", lw=0.7, label="predicted-class probability 0.5, 0.8"))
    figure_legend(fig, handles, [h.get_label() for h in handles])
    path = out / "multiclass_classification.png"
    fig.savefig(path)
    plt.close(fig)
    return path


if __name__ == "__main__":
    run(main)
