"""tgp-convergence: convergence of EP variants on a hard Student-t GP problem.

Reproduces Jylänki, Vanhatalo & Vehtari (2011), §5.2 and Fig. 3 on their
example 2 (data: :func:`robustep.experiments.tgp_examples.make_example`, the
strongly nonlinear function with two conflicting outliers in a gap; the paper
publishes no numbers, so the data are rebuilt from its description), with the
paper's hyperparameters nu = 2, sigma = 0.1, sigma_se = 3, l = 0.88.

For each algorithm we record, per iteration, -log Z_EP (NaN where some cavity
is invalid) and the site precisions of y1..y4: the two outliers and the two
regular observations nearest to them.  Panels (a)–(f) of the paper: sequential
EP with step delta = 0.8 and 0.5 (``damping`` = 1 - delta), parallel EP with
delta = 0.5, the double loop without and with 5 parallel initial sweeps, and
parallel fractional EP (eta = 0.5, no damping); we add our default robust EP.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

from robustep.ep import expectation_propagation
from robustep.experiments.base import Experiment, ExperimentSummary, register
from robustep.experiments.runner import progress
from robustep.experiments.tgp_examples import make_example
from robustep.likelihoods import StudentT
from robustep.plotting import figure_legend, styled

# name -> (panel, keyword arguments of expectation_propagation)
ALGORITHMS = {
    "sequential EP, delta=0.8": ("a", dict(schedule="sequential", damping=0.2)),
    "sequential EP, delta=0.5": ("b", dict(schedule="sequential", damping=0.5)),
    "parallel EP, delta=0.5": ("c", dict(schedule="parallel", damping=0.5, robust=False)),
    "double loop": ("d", dict(double_loop=True, n_parallel_init=0)),
    "double loop, 5 parallel init": ("e", dict(double_loop=True, n_parallel_init=5)),
    "fractional EP, eta=0.5": ("f", dict(power=0.5, robust=False)),
    "robust EP (default)": ("-", dict()),
}

# What the paper reports for each panel (§5.2).
PAPER = {
    "a": "oscillates, no convergence in 100 sweeps",
    "b": "oscillations decay, converges very slowly",
    "c": "does not converge; large oscillations",
    "d": "no oscillation, very slow (>100 iterations)",
    "e": "much faster than (d); small drift after 20 iterations",
    "f": "converges without damping",
    "-": "(not in the paper)",
}


def _problem(seed):
    X, y = make_example(2, random_state=seed)
    kernel = ConstantKernel(3.0**2) * RBF(0.88)
    K = kernel(X)
    # y1, y2 = rows 0, 1 (the outliers); y3, y4 = the regular points nearest to them
    regular = np.arange(2, len(y))
    nearest = regular[np.argsort(np.abs(X[regular, 0] - X[:2, 0].mean()))[:2]]
    return X, y, K, np.concatenate([[0, 1], nearest])


def run(config: dict, seed: int) -> dict:
    X, y, K, tracked = _problem(seed)
    likelihood = StudentT(df=2.0, scale=0.1)
    out = {"x": X[:, 0].tolist(), "y": y.tolist(), "tracked": tracked.tolist(), "runs": {}}
    for name, (panel, kwargs) in progress(list(ALGORITHMS.items()), "tgp-convergence"):
        precisions = []

        def keep(info, precisions=precisions):
            precisions.append(info["site_precision"][tracked].tolist())

        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            res = expectation_propagation(
                K, y, likelihood, max_iter=config["max_iter"], tol=config["tol"],
                callback=keep, **kwargs,
            )  # fmt: skip
        out["runs"][name] = {
            "panel": panel,
            "converged": bool(res.converged),
            "n_iter": int(res.n_iter),
            "seconds": time.perf_counter() - start,
            "log_Z": res.log_Z if np.isfinite(res.log_Z) else None,
            "neg_log_Z": [(-v if np.isfinite(v) else None) for v in res.history["log_Z"]],
            "max_change": res.history["max_change"],
            "residual": res.history["residual"],
            "phase": res.history["phase"],
            "site_precision": precisions,
            "message": res.message,
        }
    return out


@styled
def report(results: dict, out_dir: Path) -> ExperimentSummary:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    runs = results["runs"]
    names = list(runs)
    fig, axes = plt.subplots(
        2, len(names), figsize=(2.5 * len(names), 5.6), sharex="col", sharey="row", squeeze=False
    )
    for j, name in enumerate(names):
        r = runs[name]
        nl = np.array([np.nan if v is None else v for v in r["neg_log_Z"]], dtype=float)
        finite = nl[np.isfinite(nl)]
        # distance to the run's last value on a symmetric log scale: the final
        # oscillations (below 1 nat) and the early transients (tens of nats) both show
        last = finite[-1] if finite.size else 0.0
        axes[0, j].plot(np.arange(1, nl.size + 1), nl - last, lw=1, color="C0")
        axes[0, j].set_yscale("symlog", linthresh=0.1)
        axes[0, j].yaxis.get_major_locator().set_params(numticks=8)
        axes[0, j].set_title(f"({r['panel']}) {name}", wrap=True)
        sp = np.array(r["site_precision"], dtype=float)
        if sp.size:
            for k in range(sp.shape[1]):
                axes[1, j].plot(
                    np.arange(1, sp.shape[0] + 1), sp[:, k], lw=1, color=f"C{k + 1}",
                    label=f"site of y{k + 1}",
                )  # fmt: skip
        axes[1, j].set_xscale("log")
        axes[1, j].set_xlabel("iteration")
        axes[0, j].tick_params(labelbottom=False)
    for ax in axes.ravel():
        ax.xaxis.set_minor_formatter(NullFormatter())  # decades only: no crowded labels
    axes[0, 0].set_ylabel("−log Z_EP − its last value\n(nats, symmetric log scale)")
    axes[1, 0].set_ylabel("site precision τ̃ (1/y units²)")
    handles, labels = axes[1, 0].get_legend_handles_labels()
    figure_legend(fig, handles, labels)
    fig.savefig(out_dir / "convergence.png")
    plt.close(fig)

    rows = ["| panel | algorithm | paper | converged | iterations | -log Z_EP | seconds |",
            "|---|---|---|---|---|---|---|"]  # fmt: skip
    for name in names:
        r = runs[name]
        lz = "undefined" if r["log_Z"] is None else f"{-r['log_Z']:.4f}"
        rows.append(
            f"| {r['panel']} | {name} | {PAPER[r['panel']]} | {'yes' if r['converged'] else 'no'} "
            f"| {r['n_iter']} | {lz} | {r['seconds']:.2f} |"
        )
    table = "\n".join(rows)

    conv = {n: runs[n]["converged"] for n in names}
    by_panel = {runs[n]["panel"]: runs[n] for n in names}
    par_fails = not by_panel["c"]["converged"]
    robust_ok = conv["robust EP (default)"] and by_panel["d"]["converged"]
    frac_ok = by_panel["f"]["converged"]
    seq_08 = by_panel["a"]["converged"]
    agrees = par_fails and robust_ok and frac_ok
    both_dl = by_panel["d"]["converged"] and by_panel["e"]["converged"]
    measured = (
        f"Parallel EP with delta=0.5 {'fails to converge' if par_fails else 'converges'}; "
        f"the double loop converges in {by_panel['d']['n_iter']} iterations without and "
        f"{by_panel['e']['n_iter']} with 5 parallel initial sweeps "
        f"({'both converged' if both_dl else 'not both converged'}); "
        f"fractional EP (eta=0.5) {'converges' if frac_ok else 'does not converge'} in "
        f"{by_panel['f']['n_iter']} sweeps; our default robust EP "
        f"{'converges' if conv['robust EP (default)'] else 'does not converge'} in "
        f"{runs['robust EP (default)']['n_iter']} iterations. Sequential EP with delta=0.8 "
        f"{'converges' if seq_08 else 'does not converge'} on our data "
        f"(the paper saw oscillations)."
    )  # fmt: skip
    notes = (
        "The paper's data set is not published: we rebuilt example 2 from its description, so "
        "the exact iteration counts differ; which algorithms converge is the comparable "
        "finding. Iterations of the double loop are inner-loop steps (each one factorisation "
        "and one or more tilted-moment evaluations in its line search); -log Z_EP is the EP "
        "objective for the current reference marginals in the double loop. Where -log Z_EP is "
        "undefined (a cavity precision is not positive) the curve has a gap."
    )
    caption = (
        "EP's negative log marginal likelihood, less its value at the last iteration (top, "
        "symmetric log scale: 0 once the run settles), and the site precisions of the "
        "observations (bottom) along the iterations of each algorithm (JMLR Fig. 3); "
        "gaps: -log Z_EP undefined."
    )
    return ExperimentSummary(
        measured=measured, agrees=agrees, tables=[table], figures=["convergence.png"], notes=notes,
        captions={"convergence.png": caption},
        key_number=(
            f"parallel EP (delta=0.5) {'fails' if par_fails else 'converges'}; robust EP and "
            f"double loop {'converge' if robust_ok else 'do not both converge'}; fractional EP "
            f"{'converges' if frac_ok else 'does not converge'}"
        ),
    )  # fmt: skip


EXPERIMENT = register(
    Experiment(
        name="tgp-convergence",
        paper="Jylänki, Vanhatalo & Vehtari (2011), JMLR",
        source="§5.2, Fig. 3",
        claim=(
            "On example 2 parallel EP (delta=0.5) oscillates without converging, while the "
            "double loop converges (faster after 5 parallel initial sweeps) and fractional EP "
            "(eta=0.5) converges without damping."
        ),
        quick={"max_iter": 300, "tol": 1e-4},
        full={"max_iter": 1000, "tol": 1e-4},
        run=run,
        report=report,
    )
)
