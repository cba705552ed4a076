"""Robust regression: a Student-t GP (EP) against a Gaussian GP on data with outliers.
===================================================================================

Ten percent of the targets are gross outliers. The Gaussian GP (scikit-learn's
GaussianProcessRegressor with a WhiteKernel) bends towards them; the Student-t GP fitted
by robust EP ignores them and keeps a tight band around the clean function. The bands
are the central 95% predictive intervals of a new observation y.
"""

import numpy as np
from _gallery import run
from matplotlib import pyplot as plt
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

from robustep import StudentTGPRegressor
from robustep.plotting import legend


def main(quick, out):
    rng = np.random.default_rng(0)
    n = 40 if quick else 120
    X = np.sort(rng.uniform(-4, 4, n))[:, None]
    f = np.sinc(X[:, 0] / 2)
    y = f + 0.1 * rng.standard_normal(n)
    outliers = rng.choice(n, size=n // 10, replace=False)
    y[outliers] += rng.choice([-1, 1], outliers.size) * rng.uniform(2, 4, outliers.size)
    X_plot = np.linspace(-4.5, 4.5, 300)[:, None]

    gauss = GaussianProcessRegressor(
        ConstantKernel() * RBF() + WhiteKernel(), normalize_y=True, random_state=0
    ).fit(X, y)
    mean_g, std_g = gauss.predict(X_plot, return_std=True)
    robust = StudentTGPRegressor(df=4.0, method="ep", random_state=0).fit(X, y)
    mean_t, _ = robust.predict(X_plot, return_std=True)
    low_t, high_t = robust.predict_interval(X_plot, coverage=0.95)

    truth = np.sinc(X_plot[:, 0] / 2)
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot(X_plot, truth, "k:", lw=1, label="true function")
    ax.plot(X_plot, mean_g, "C0", label="Gaussian GP mean")
    ax.fill_between(
        X_plot[:, 0],
        mean_g - 1.96 * std_g,
        mean_g + 1.96 * std_g,
        color="C0",
        alpha=0.15,
        label="Gaussian GP 95% interval",
    )
    ax.plot(X_plot, mean_t, "C3", label="Student-t GP (EP) mean")
    ax.fill_between(
        X_plot[:, 0], low_t, high_t, color="C3", alpha=0.15, label="Student-t GP 95% interval"
    )
    clean = np.setdiff1d(np.arange(n), outliers)
    ax.plot(X[clean], y[clean], "k.", ms=4, label="data")
    ax.plot(X[outliers], y[outliers], "x", color="C1", label="outliers")
    # every observation inside the frame: the limits come from the data
    pad = 0.05 * np.ptp(y)
    ax.set_ylim(min(y.min(), low_t.min()) - pad, max(y.max(), high_t.max()) + pad)
    ax.set_xlim(X_plot[0, 0], X_plot[-1, 0])
    ax.set_xlabel("input x")
    ax.set_ylabel("target y")
    err_g = np.mean(np.abs(mean_g - truth))
    err_t = np.mean(np.abs(mean_t - truth))
    ax.set_title(
        f"mean abs. error to the true function: Gaussian {err_g:.3f}, Student-t {err_t:.3f}"
    )
    legend(ax)
    path = out / "robust_regression.png"
    fig.savefig(path)
    plt.close(fig)
    return path


if __name__ == "__main__":
    run(main)
