"""Leave-one-out outlier detection from EP's cavities, without refitting.
======================================================================

A Student-t GP regression on data with a few gross outliers. EP's cavity distributions
give every point's leave-one-out predictive density ``p(y_i | y_-i)`` at no extra cost;
``outlier_scores_`` (a standardised LOO residual) flags the outliers, and
``robustep.diagnostics.plot_loo`` draws the LOO predictive against the observations.
"""

import numpy as np
from _gallery import run
from matplotlib import pyplot as plt

from robustep import StudentTGPRegressor
from robustep.diagnostics import plot_loo
from robustep.plotting import legend


def main(quick, out):
    rng = np.random.default_rng(1)
    n = 40 if quick else 100
    X = np.sort(rng.uniform(0, 10, n))[:, None]
    y = np.sin(X[:, 0]) + 0.2 * rng.standard_normal(n)
    outliers = rng.choice(n, size=max(3, n // 20), replace=False)
    y[outliers] += rng.choice([-1, 1], outliers.size) * 3.0
    reg = StudentTGPRegressor(df=4.0, random_state=0).fit(X, y)

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.9))
    plot_loo(reg, ax=axes[0])
    scores = np.abs(reg.outlier_scores_)
    flagged = scores > 3.0
    axes[1].stem(X[:, 0], scores, basefmt=" ", markerfmt=".")
    axes[1].plot(
        X[outliers, 0],
        scores[outliers],
        "o",
        mfc="none",
        color="C3",
        ms=9,
        label="planted outliers",
    )
    axes[1].axhline(3.0, color="k", ls=":", lw=1, label="|score| = 3")
    hits = np.intersect1d(np.flatnonzero(flagged), outliers).size
    axes[1].set_title(
        f"|LOO outlier score|: {hits}/{outliers.size} planted outliers flagged, "
        f"{int(flagged.sum()) - hits} other points",
        fontsize=9,
    )
    axes[1].set_xlabel("input x")
    axes[1].set_ylabel("|standardised LOO residual|")
    legend(axes[1])
    path = out / "loo_outlier_detection.png"
    fig.savefig(path)
    plt.close(fig)
    return path


if __name__ == "__main__":
    run(main)
