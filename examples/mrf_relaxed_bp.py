"""Marginals of an Ising model: BP, damped BP and relaxed BP against the exact marginals.
======================================================================================

A 6 x 6 grid with random fields and couplings of growing strength. For each strength,
the mean total-variation error of the node marginals against the junction tree's exact
ones, and whether each method converged.
"""

import warnings

import numpy as np
from _gallery import run
from matplotlib import pyplot as plt
from sklearn.exceptions import ConvergenceWarning

from robustep.mrf import belief_propagation, exact_marginals, grid_edges, ising
from robustep.plotting import legend


def main(quick, out):
    side = 4 if quick else 6
    strengths = np.linspace(0.1, 1.5, 4 if quick else 12)
    edges = grid_edges(side, side)
    rng = np.random.default_rng(0)
    fields = rng.uniform(-0.2, 0.2, side * side)
    signs = rng.choice([-1.0, 1.0], len(edges))  # frustrated couplings
    methods = {
        "BP": dict(method="bp"),
        "damped BP (0.5)": dict(method="damped", damping=0.5),
        "relaxed BP": dict(method="relaxed", relaxation=0.1, freeze_after=50),
    }
    errors = {name: [] for name in methods}
    converged = {name: [] for name in methods}
    for s in strengths:
        mrf = ising(fields, edges, s * signs)
        exact = exact_marginals(mrf).marginals
        for name, kwargs in methods.items():
            with warnings.catch_warnings():  # non-convergence is what the figure shows
                warnings.simplefilter("ignore", ConvergenceWarning)
                res = belief_propagation(mrf, max_iter=300 if quick else 1000, tol=1e-8, **kwargs)
            errors[name].append(np.mean(np.abs(res.marginals[:, 0] - exact[:, 0])))
            converged[name].append(res.converged)
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for k, name in enumerate(methods):
        err, conv = np.array(errors[name]), np.array(converged[name])
        ax.plot(strengths, err, "-", color=f"C{k}", label=name)
        ax.plot(strengths[conv], err[conv], "o", color=f"C{k}", ms=5)
        ax.plot(strengths[~conv], err[~conv], "x", color=f"C{k}", ms=7)
    ax.set_xlabel("coupling strength")
    ax.set_ylabel("mean TV error of node marginals")
    ax.set_yscale("log")
    ax.set_title(f"{side}x{side} frustrated Ising grid (o converged, x not)", fontsize=9)
    legend(ax)
    path = out / "mrf_relaxed_bp.png"
    fig.savefig(path)
    plt.close(fig)
    return path


if __name__ == "__main__":
    run(main)
