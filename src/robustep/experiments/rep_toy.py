"""rep-toy: five 2-D points, linear kernel, one mislabeled point (Qi & Guo, Fig. 1).

Model: f(x) = wᵀx with w ~ N(0, I₂) (the linear kernel k(x, x') = xᵀx'), noisy-step
likelihood p(y|f) = ε + (1 - 2ε) Θ(y f), ε = 0.2.

Exact posterior of w.  In polar coordinates w = r (cos θ, sin θ) the likelihood
depends on θ only (Θ(y r xᵀu) = Θ(y xᵀu) for r > 0) and the prior factorises into a
uniform θ and a Rayleigh r, so

    E[w] = E[r] E_θ[u],  E[w wᵀ] = E[r²] E_θ[u uᵀ],  E[r] = √(π/2),  E[r²] = 2,

where E_θ is over p(θ) ∝ L(θ), piecewise constant between the angles where some
xᵢᵀu = 0: the integrals of cos, sin, cos², sin², sin·cos over each arc are exact.
Cross-checks: a Cartesian 2-D grid (midpoint rule) and self-normalised importance
sampling from the prior.

Approximate posteriors of w from the EP sites (τ̃ᵢ, ν̃ᵢ) on fᵢ = xᵢᵀw:
Σ_w = (I + Xᵀ diag(τ̃) X)⁻¹, μ_w = Σ_w Xᵀ ν̃.
Errors: squared Euclidean distance of means ‖μ - μ*‖² and squared Frobenius
distance of covariances ‖Σ - Σ*‖²_F; the relative mean error ‖μ - μ*‖₂ / s* with
s* = √(tr Σ*/2), the exact posterior's RMS standard deviation.

Second toy (one on which EP is visibly wrong).  The paper's toy is easy for EP
(relative mean error about 4%).  The second one is a principled hard case for a Gaussian
approximation, fixed by rule before REP was run on it: n = 8 points near the true boundary
x₂ = 0 (x₁ ~ U(−2, 2), x₂ ~ N(0, 0.3²)), labels sign(x₂) flipped with probability ε = 0.2, the
same noisy-step likelihood (ε = 0.2) and linear kernel.  Near the boundary the angular posterior
of w is broad and skewed, far from Gaussian.  Seeds (2024, k) are tried for k = 0, 1, 2, … and
the first data set on which converged EP's relative mean error is ≥ 5% is used (the
'visibly wrong' criterion, on EP only; REP plays no part in the choice): :func:`boundary_toy`.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from robustep.experiments.base import Experiment, ExperimentSummary, register
from robustep.experiments.report import titled
from robustep.plotting import figure_legend, legend, styled

# Fixed before any run (not tuned): two +1 points on the left, two -1 points on the
# right, and a +1 point far on the right (the mislabeled one, index 4).
TOY_X = np.array([[-2.0, 1.0], [-1.0, 2.0], [1.5, -0.5], [1.0, -2.0], [3.0, 1.5]])
TOY_Y = np.array([1.0, 1.0, -1.0, -1.0, 1.0])
# every EP variant's sweep budget and site-residual tolerance
_MAX_SWEEPS, _TOL = 300, 1e-9

# the second toy's generator and selection rule (module docstring), fixed before any REP run
BOUNDARY_TOY = {"n": 8, "x1_half_width": 2.0, "x2_std": 0.3, "flip": 0.2, "min_rel_err": 0.05}


# ---------------------------------------------------------------- exact posterior
def _likelihood_of_angle(theta, X, y, eps):
    u = np.stack([np.cos(theta), np.sin(theta)], axis=-1)
    right = (y[None, :] * (u @ X.T)) >= 0
    return np.prod(np.where(right, 1.0 - eps, eps), axis=1)


def exact_posterior(X, y, eps):
    """Exact posterior mean (2,), covariance (2, 2) and log evidence by exact arc integrals."""
    normals = np.arctan2(X[:, 1], X[:, 0])
    breaks = np.sort(np.mod(np.concatenate([normals + np.pi / 2, normals - np.pi / 2]), 2 * np.pi))
    edges = np.concatenate([breaks, [breaks[0] + 2 * np.pi]])
    a, b = edges[:-1], edges[1:]
    L = _likelihood_of_angle(0.5 * (a + b), X, y, eps)
    mass = np.sum(L * (b - a))
    e_u = (
        np.array([np.sum(L * (np.sin(b) - np.sin(a))), np.sum(L * (np.cos(a) - np.cos(b)))]) / mass
    )
    cc = np.sum(L * ((b - a) / 2 + (np.sin(2 * b) - np.sin(2 * a)) / 4)) / mass
    ss = np.sum(L * ((b - a) / 2 - (np.sin(2 * b) - np.sin(2 * a)) / 4)) / mass
    cs = np.sum(L * (np.sin(b) ** 2 - np.sin(a) ** 2) / 2) / mass
    mean = np.sqrt(np.pi / 2) * e_u
    second = 2.0 * np.array([[cc, cs], [cs, ss]])
    return mean, second - np.outer(mean, mean), float(np.log(mass / (2 * np.pi)))


def grid_posterior(X, y, eps, size=801, half_width=7.0):
    """Posterior mean and covariance of w by a Cartesian midpoint rule on [-h, h]²."""
    h = 2 * half_width / size
    g = -half_width + h * (np.arange(size) + 0.5)
    W1, W2 = np.meshgrid(g, g, indexing="ij")
    W = np.stack([W1.ravel(), W2.ravel()], axis=1)
    logw = -0.5 * np.sum(W**2, axis=1) + np.sum(
        np.log(np.where(y[None, :] * (W @ X.T) >= 0, 1.0 - eps, eps)), axis=1
    )
    p = np.exp(logw - logw.max())
    p /= p.sum()
    mean = p @ W
    D = W - mean
    return mean, (D * p[:, None]).T @ D


def importance_posterior(X, y, eps, n_samples, rng, chunk=1_000_000):
    """Self-normalised importance sampling from the prior; returns mean, cov, ESS."""
    s_w, s_ww, s_w2, s_1 = np.zeros(2), np.zeros((2, 2)), 0.0, 0.0
    done = 0
    while done < n_samples:
        m = min(chunk, n_samples - done)
        W = rng.standard_normal((m, 2))
        wt = np.prod(np.where(y[None, :] * (W @ X.T) >= 0, 1.0 - eps, eps), axis=1)
        s_1 += wt.sum()
        s_w2 += np.sum(wt**2)
        s_w += wt @ W
        s_ww += (W * wt[:, None]).T @ W
        done += m
    mean = s_w / s_1
    return mean, s_ww / s_1 - np.outer(mean, mean), float(s_1**2 / s_w2)


def relative_mean_error(mean, exact_mean, exact_cov) -> float:
    """‖μ − μ*‖₂ / √(tr Σ*/2): mean error in units of the exact posterior's RMS std."""
    scale = np.sqrt(np.trace(np.asarray(exact_cov)) / 2.0)
    return float(np.linalg.norm(np.asarray(mean) - np.asarray(exact_mean)) / scale)


def boundary_toy(eps, max_tries: int = 100):
    """The second toy: points near the boundary with label noise (module docstring).

    Draws data sets from seeds (2024, k), k = 0, 1, …, and returns the first on which EP
    converges with relative mean error ≥ ``BOUNDARY_TOY["min_rel_err"]``:
    (X (n, 2), y (n,), k, EP relative errors of the data sets tried, in order).
    """
    cfg = BOUNDARY_TOY
    tried = []
    for k in range(max_tries):
        rng = np.random.default_rng([2024, k])
        n = int(cfg["n"])
        X = np.column_stack(
            [
                rng.uniform(-cfg["x1_half_width"], cfg["x1_half_width"], n),
                rng.normal(0.0, cfg["x2_std"], n),
            ]
        )
        y = np.where(X[:, 1] >= 0, 1.0, -1.0)
        y[rng.random(n) < cfg["flip"]] *= -1
        mean, cov, _ = exact_posterior(X, y, eps)
        ep = run_method(X, y, eps)
        rel = relative_mean_error(ep["mean"], mean, cov)
        tried.append(rel)
        if ep["converged"] and rel >= cfg["min_rel_err"]:
            return X, y, k, tried
    raise RuntimeError(f"no data set in {max_tries} tries met the second toy's rule")


# ----------------------------------------------------------- approximations
def weight_posterior(X, site_precision, site_shift):
    """Gaussian posterior of w implied by sites on f = X w: (mean (2,), cov (2, 2))."""
    prec = np.eye(X.shape[1]) + X.T @ (site_precision[:, None] * X)
    cov = np.linalg.inv(prec)
    return cov @ (X.T @ site_shift), cov


def run_method(
    X,
    y,
    eps,
    *,
    power=1.0,
    damping=0.0,
    relaxation=None,
    belief="divided",
    max_iter=None,
    tol=None,
):
    """Sequential EP variant on the toy; returns a JSON-friendly dict.

    ``belief`` is REP's reading of step (e) (``robustep.ep.rep.rep_site_update``).
    A run that does not converge within ``max_iter`` sweeps is a result here (REP at small
    c): its ConvergenceWarning is caught and ``converged`` False, the number of sweeps and
    the last site residual are recorded and reported (:func:`non_converged_runs`).
    """
    from robustep.ep import expectation_propagation
    from robustep.ep.rep import make_rep_update
    from robustep.likelihoods import NoisyStep

    max_iter = _MAX_SWEEPS if max_iter is None else max_iter
    tol = _TOL if tol is None else tol
    K = X @ X.T
    update = None if relaxation is None else make_rep_update(relaxation, belief=belief)
    kwargs = {} if update is None else {"site_update": update}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        res = expectation_propagation(
            K,
            y,
            NoisyStep(eps),
            schedule="sequential",
            damping=damping,
            power=power,
            max_iter=max_iter,
            tol=tol,
            **kwargs,
        )
    residuals = (getattr(res, "history", None) or {}).get("residual") or [np.nan]
    mean, cov = weight_posterior(X, np.asarray(res.site_precision), np.asarray(res.site_shift))
    out = {
        "mean": mean.tolist(),
        "cov": cov.tolist(),
        "converged": bool(res.converged),
        "n_iter": int(res.n_iter),
        "residual": float(residuals[-1]),
        "finite": bool(np.all(np.isfinite(mean)) and np.all(np.isfinite(cov))),
    }
    if relaxation is not None:
        out["b"] = np.asarray(res.site_info.get("b", np.zeros(len(y)))).tolist()
    return out


def non_converged_runs(results: dict) -> list[str]:
    """One label per run of ``results`` (:func:`run`) that did not converge, with its
    sweeps and last site residual, e.g. "REP (c=1), paper's toy: 300 sweeps, residual 0.069"."""
    cs = results["c_values"]
    second = results.get("second_toy") or {}
    runs = [(f"{k}, paper's toy", e) for k, e in results["methods"].items()]
    runs += [(f"PEP (u={u:g}), paper's toy", e)
             for u, e in zip(results["powers"], results["pep_sweep"], strict=True)]  # fmt: skip
    runs += [(f"REP (c={c:g}), paper's toy", e)
             for c, e in zip(cs, results["rep_sweep"], strict=True)]  # fmt: skip
    runs += [(f"REP as printed (c={c:g}), paper's toy", e)
             for c, e in zip(cs, results["printed_sweep"], strict=True)]  # fmt: skip
    check = results["scale_check"]
    runs += [(f"REP (c={check['c']:g}), inputs scaled by {check['scale']:g}", check["scaled"])]
    runs += [(f"{k}, second toy", e) for k, e in second.get("methods", {}).items()]
    runs += [(f"REP (c={c:g}), second toy", e)
             for c, e in zip(cs, second.get("rep_sweep", []), strict=True)]  # fmt: skip
    return [
        f"{label}: {e['n_iter']} sweeps, residual {_fmt(e.get('residual', np.nan))}"
        for label, e in runs
        if not e["converged"]
    ]


def _errors(entry, mean, cov):
    m = np.asarray(entry["mean"])
    c = np.asarray(entry["cov"])
    entry["err_mean"] = float(np.sum((m - mean) ** 2))
    entry["err_cov"] = float(np.sum((c - cov) ** 2))
    return entry


def _compare_methods(X, y, eps, config, mean, cov) -> dict:
    """EP, DEP, PEP and REP at the configured settings, with errors against (mean, cov)."""
    methods = {
        "EP": run_method(X, y, eps),
        f"DEP ({config['damping']})": run_method(X, y, eps, damping=float(config["damping"])),
        f"PEP (u={config['power']})": run_method(X, y, eps, power=float(config["power"])),
        f"REP (c={config['relaxation']:g})": run_method(
            X, y, eps, relaxation=float(config["relaxation"])
        ),
    }
    for entry in methods.values():
        _errors(entry, mean, cov)
    return methods


def run(config: dict, seed: int) -> dict:
    """Exact, grid and IS posteriors; EP, DEP, PEP, REP at the paper's settings and sweeps."""
    X, y, eps = TOY_X, TOY_Y, float(config["epsilon"])
    mean, cov, log_Z = exact_posterior(X, y, eps)
    g_mean, g_cov = grid_posterior(X, y, eps, size=int(config["grid_size"]))
    rng = np.random.default_rng(seed)
    is_mean, is_cov, ess = importance_posterior(X, y, eps, int(config["is_samples"]), rng)
    methods = _compare_methods(X, y, eps, config, mean, cov)
    powers = [float(u) for u in config["powers"]]
    cs = [float(c) for c in np.logspace(*config["c_log10_range"], int(config["n_c"]))]
    pep_sweep = [_errors(run_method(X, y, eps, power=u), mean, cov) for u in powers]
    rep_sweep = [_errors(run_method(X, y, eps, relaxation=c), mean, cov) for c in cs]
    printed_sweep = [
        _errors(run_method(X, y, eps, relaxation=c, belief="as-printed"), mean, cov) for c in cs
    ]
    # For the step likelihood the posterior of w does not change when X is scaled by a, but
    # f-space precisions (and so b) scale by 1/a**2: REP(a X, c) must equal REP(X, c / a**2).
    scale, c_ref = 10.0, float(config["relaxation"])
    scaled = run_method(scale * X, y, eps, relaxation=c_ref)
    unscaled = run_method(X, y, eps, relaxation=c_ref / scale**2)
    scale_check = {
        "scale": scale,
        "c": c_ref,
        "max_abs_mean_diff": float(np.max(np.abs(np.subtract(scaled["mean"], unscaled["mean"])))),
        "max_abs_cov_diff": float(np.max(np.abs(np.subtract(scaled["cov"], unscaled["cov"])))),
        "scaled": _errors(scaled, mean, cov),
    }
    # the second toy (EP visibly wrong): the same methods and c sweep, REP as derived
    X2, y2, k2, tried = boundary_toy(eps)
    mean2, cov2, log_Z2 = exact_posterior(X2, y2, eps)
    methods2 = _compare_methods(X2, y2, eps, config, mean2, cov2)
    rep_sweep2 = [_errors(run_method(X2, y2, eps, relaxation=c), mean2, cov2) for c in cs]
    second = {
        "X": X2.tolist(),
        "y": y2.tolist(),
        "seed": [2024, k2],
        "ep_rel_errors_tried": tried,
        "exact": {"mean": mean2.tolist(), "cov": cov2.tolist(), "log_Z": log_Z2},
        "methods": methods2,
        "rep_sweep": rep_sweep2,
    }
    return {
        "X": X.tolist(),
        "y": y.tolist(),
        "epsilon": eps,
        "second_toy": second,
        "exact": {"mean": mean.tolist(), "cov": cov.tolist(), "log_Z": log_Z},
        "grid": {"mean": g_mean.tolist(), "cov": g_cov.tolist()},
        "importance": {"mean": is_mean.tolist(), "cov": is_cov.tolist(), "ess": ess},
        "methods": methods,
        "powers": powers,
        "pep_sweep": pep_sweep,
        "c_values": cs,
        "rep_sweep": rep_sweep,
        "printed_sweep": printed_sweep,
        "scale_check": scale_check,
    }


# ------------------------------------------------------------------ report
def _fmt(x):
    return f"{x:.3g}" if np.isfinite(x) else "nan"


def _non_converged_note(results: dict) -> str:
    """The report's sentence on the runs that did not converge (none: empty)."""
    failed = non_converged_runs(results)
    if not failed:
        return ""
    return (
        f" Runs that did not converge within {_MAX_SWEEPS} sweeps to a site residual of "
        f"{_TOL:g} are part of the result, not a defect (REP at small c and the as-printed "
        "reading; 'converged False' in the tables, REP's as crosses in rep_toy_both.png; "
        "their ConvergenceWarnings are caught): " + "; ".join(failed) + "."
    )


@styled
def report(results: dict, out_dir: Path) -> ExperimentSummary:
    """Table of errors, decision boundaries and error-vs-u / error-vs-c figures."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    exact_m = np.asarray(results["exact"]["mean"])
    exact_c = np.asarray(results["exact"]["cov"])
    ep = results["methods"]["EP"]
    rows = [
        "| posterior | mean of w | ‖μ−μ*‖² | ‖Σ−Σ*‖²_F | converged | sweeps |",
        "|---|---|---|---|---|---|",
        f"| exact (arc integrals) | ({exact_m[0]:.4f}, {exact_m[1]:.4f}) | 0 | 0 | – | – |",
    ]
    for name in ("grid", "importance"):
        m = np.asarray(results[name]["mean"])
        c = np.asarray(results[name]["cov"])
        rows.append(
            f"| {name} check | ({m[0]:.4f}, {m[1]:.4f}) | {_fmt(np.sum((m - exact_m) ** 2))} "
            f"| {_fmt(np.sum((c - exact_c) ** 2))} | – | – |"
        )
    for name, e in results["methods"].items():
        m = e["mean"]
        extra = ""
        if "b" in e:
            extra = " b = [" + ", ".join(f"{v:.3g}" for v in e["b"]) + "]"
        rows.append(
            f"| {name}{extra} | ({m[0]:.4f}, {m[1]:.4f}) | {_fmt(e['err_mean'])} "
            f"| {_fmt(e['err_cov'])} | {e['converged']} | {e['n_iter']} |"
        )
    table1 = "\n".join(rows)

    cs = np.asarray(results["c_values"])
    rep_m = np.array([e["err_mean"] for e in results["rep_sweep"]])
    rep_c = np.array([e["err_cov"] for e in results["rep_sweep"]])
    rep_conv = [e["converged"] for e in results["rep_sweep"]]
    us = np.asarray(results["powers"])
    pep_m = np.array([e["err_mean"] for e in results["pep_sweep"]])
    pep_c = np.array([e["err_cov"] for e in results["pep_sweep"]])
    printed = results.get("printed_sweep") or [None] * len(cs)
    sweep_rows = [
        "| c | REP ‖μ−μ*‖² | REP ‖Σ−Σ*‖²_F | max b | converged "
        "| as printed ‖μ−μ*‖² | as printed ‖Σ−Σ*‖²_F | as printed converged |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c, e, p in zip(cs, results["rep_sweep"], printed, strict=True):
        tail = (
            f"| {_fmt(p['err_mean'])} | {_fmt(p['err_cov'])} | {p['converged']} |"
            if p
            else "| – | – | – |"
        )
        sweep_rows.append(
            f"| {c:.3g} | {_fmt(e['err_mean'])} | {_fmt(e['err_cov'])} "
            f"| {_fmt(max(e.get('b', [0.0])))} | {e['converged']} " + tail
        )
    sweep_rows.append(
        f"| EP | {_fmt(ep['err_mean'])} | {_fmt(ep['err_cov'])} | 0 | {ep['converged']} "
        f"| {_fmt(ep['err_mean'])} | {_fmt(ep['err_cov'])} | {ep['converged']} |"
    )
    pep_rows = ["| u | PEP ‖μ−μ*‖² | PEP ‖Σ−Σ*‖²_F | converged |", "|---|---|---|---|"]
    for u, e in zip(us, results["pep_sweep"], strict=True):
        pep_rows.append(
            f"| {u:.2f} | {_fmt(e['err_mean'])} | {_fmt(e['err_cov'])} | {e['converged']} |"
        )

    # figures
    second = results.get("second_toy")
    toys = [("paper's toy (ours: five points)", results, exact_m)]
    if second:
        toys.append(
            (f"second toy (near the boundary, seed {second['seed']})", second,
             np.asarray(second["exact"]["mean"]))
        )  # fmt: skip
    fig, axes = plt.subplots(1, len(toys), figsize=(5 * len(toys), 5), squeeze=False)
    for ax, (title, toy, ex_m) in zip(axes[0], toys, strict=True):
        X = np.asarray(toy["X"])
        y = np.asarray(toy["y"])
        ax.scatter(*X[y > 0].T, marker="x", c="red", s=60, label="training point, y = +1")
        ax.scatter(*X[y < 0].T, marker="o", facecolors="none", edgecolors="blue", s=60,
                   label="training point, y = −1")  # fmt: skip
        lines = {"exact posterior mean": ex_m}
        lines.update({k: np.asarray(v["mean"]) for k, v in toy["methods"].items()})
        styles = ["k-", "g--", "c-.", "m:", "r--"]
        for (name, w), st in zip(lines.items(), styles, strict=False):
            d = np.array([-w[1], w[0]]) / max(np.linalg.norm(w), 1e-300)
            ax.axline((0.0, 0.0), (d[0], d[1]), ls=st[1:], color=st[0], label=f"boundary: {name}")
        span = max(3.5, 1.1 * float(np.abs(X).max()))
        ax.set_xlim(-span, span)
        ax.set_ylim(-span, span)
        ax.set_aspect("equal")
        ax.set_xlabel("input x₁ (dimensionless)")
        ax.set_ylabel("input x₂ (dimensionless)")
        ax.set_title(f"{title}:\nboundaries wᵀx = 0 at posterior means")
    # one legend below the panels: the boundaries cross the whole of each panel
    figure_legend(fig, *axes[0, 0].get_legend_handles_labels(), ncol=4)
    fig.savefig(out_dir / "rep_toy_boundaries.png")
    plt.close(fig)

    fig, axes = plt.subplots(2, 2, figsize=(9, 7))
    for ax, vals, lab in ((axes[0, 0], pep_m, "mean"), (axes[0, 1], pep_c, "covariance")):
        ax.plot(us, vals, "o-", label="PEP (markers: powers run)")
        ax.axhline(ep[f"err_{'mean' if lab == 'mean' else 'cov'}"], color="k", ls="--", label="EP")
        ax.set_xlabel("power u (dimensionless)")
        ax.set_ylabel(
            "‖μ − μ*‖² (squared w units)" if lab == "mean" else "‖Σ − Σ*‖²_F (squared w² units)"
        )
        ax.set_title(f"paper's toy: PEP, error of the {lab}")
        legend(ax)
    pr_m = np.array([p["err_mean"] if p else np.nan for p in printed])
    pr_c = np.array([p["err_cov"] if p else np.nan for p in printed])
    for ax, vals, pvals, lab in (
        (axes[1, 0], rep_m, pr_m, "mean"),
        (axes[1, 1], rep_c, pr_c, "covariance"),
    ):
        ax.semilogx(cs, vals, "o-", label="REP (as derived, rep.md)")
        if np.any(np.isfinite(pvals)):
            ax.semilogx(cs, pvals, "s:", label="REP, eq. 16 as printed")
        ax.axhline(ep[f"err_{'mean' if lab == 'mean' else 'cov'}"], color="k", ls="--", label="EP")
        ax.set_xlabel("l1 penalty weight c (precision units of f, log scale)")
        ax.set_ylabel(
            "‖μ − μ*‖² (squared w units)" if lab == "mean" else "‖Σ − Σ*‖²_F (squared w² units)"
        )
        ax.set_title(f"paper's toy: REP, error of the {lab}")
        legend(ax)
    fig.savefig(out_dir / "rep_toy_errors.png")
    plt.close(fig)
    figures = ["rep_toy_boundaries.png", "rep_toy_errors.png"]

    # both toys: REP vs EP in relative mean error (units of the exact posterior's std)
    both_rows, both_parts = [], []
    if second:
        fig, ax = plt.subplots(figsize=(7, 6))
        both_rows = [
            "| toy | EP rel. mean error | REP (c = 20) rel. mean error | best REP over the c sweep "
            "(c) | c where REP beats EP on mean and cov. | EP / REP (c = 20) ‖Σ−Σ*‖²_F |",
            "|---|---|---|---|---|---|",
        ]
        for (title, toy, ex_m), col in zip(toys, ("C0", "C3"), strict=True):
            ex_c = np.asarray(toy["exact"]["cov"]) if "exact" in toy else exact_c
            ep_t = toy["methods"]["EP"]
            rep_t = toy["methods"][next(k for k in toy["methods"] if k.startswith("REP"))]
            rel = np.array([relative_mean_error(e["mean"], ex_m, ex_c) for e in toy["rep_sweep"]])
            conv = np.array([e["converged"] for e in toy["rep_sweep"]])
            ep_rel = relative_mean_error(ep_t["mean"], ex_m, ex_c)
            rep_rel = relative_mean_error(rep_t["mean"], ex_m, ex_c)
            wins = [
                c
                for c, e in zip(cs, toy["rep_sweep"], strict=True)
                if e["converged"]
                and e["err_mean"] < ep_t["err_mean"]
                and e["err_cov"] < ep_t["err_cov"]
            ]
            k = int(np.nanargmin(np.where(conv, rel, np.nan))) if conv.any() else None
            best = f"{rel[k]:.1%} ({cs[k]:.3g})" if k is not None else "— (none converged)"
            both_rows.append(
                f"| {title} | {ep_rel:.1%} | {rep_rel:.1%} | {best} | {len(wins)}/{len(cs)} "
                f"| {_fmt(ep_t['err_cov'])} / {_fmt(rep_t['err_cov'])} |"
            )
            both_parts.append(
                f"{title}: EP {ep_rel:.1%}, REP (c=20) {rep_rel:.1%}, REP beats EP on both "
                f"errors for {len(wins)}/{len(cs)} values of c"
            )
            ax.semilogx(cs[conv], rel[conv], "o-", color=col, label=f"REP, {title} (converged)")
            if (~conv).any():
                ax.semilogx(cs[~conv], rel[~conv], "x", color=col, ms=8,
                            label=f"REP, {title} (not converged)")  # fmt: skip
            ax.axhline(ep_rel, color=col, ls="--", label=f"EP, {title}")
        ax.axhline(0.05, color="gray", ls=":", label="5% ('visibly wrong')")
        ax.set_yscale("log")
        ax.set_xlabel("l1 penalty weight c (precision units of f, log scale)")
        ax.set_ylabel("‖μ − μ*‖₂ / √(tr Σ*/2) (fraction of posterior std)")
        ax.set_title("REP vs EP on both toys: mean error relative to the exact std")
        figure_legend(fig, *ax.get_legend_handles_labels(), ncol=1)
        fig.savefig(out_dir / "rep_toy_both.png")
        plt.close(fig)
        figures.append("rep_toy_both.png")

    # verdict
    ok = np.isfinite(rep_m) & np.asarray(rep_conv)
    better = ok & (rep_m < ep["err_mean"]) & (rep_c < ep["err_cov"])
    tol = 1e-8 * max(ep["err_mean"], 1e-12)
    to_ep = bool(ok[-1] and abs(rep_m[-1] - ep["err_mean"]) <= max(tol, 1e-12))
    pep_worse = bool(np.all(pep_m[us < 1] >= ep["err_mean"] - 1e-12))
    n_better = int(better.sum())
    frac = n_better / len(cs)
    c_better = cs[better]
    rng_txt = f"c ∈ [{c_better.min():.3g}, {c_better.max():.3g}]" if n_better else "no c"
    rep_named = results["methods"][next(k for k in results["methods"] if k.startswith("REP"))]
    measured = (
        f"EP errors: mean {_fmt(ep['err_mean'])}, cov {_fmt(ep['err_cov'])}; "
        f"REP (c=20): mean {_fmt(rep_named['err_mean'])}, cov {_fmt(rep_named['err_cov'])}. "
        f"REP beats EP on both errors for {n_better}/{len(cs)} values of c ({rng_txt}); "
        f"REP equals EP at c={cs[-1]:.3g}: {to_ep}; PEP mean error ≥ EP's for all u<1: "
        f"{pep_worse}."
    )
    if printed[0] is not None:
        p_ok = np.array([p["converged"] and np.isfinite(p["err_mean"]) for p in printed])
        p_better = p_ok & (pr_m < ep["err_mean"]) & (pr_c < ep["err_cov"])
        measured += (
            f" With step (e) read as printed (new belief includes r_i), REP beats EP on both "
            f"errors for {int(p_better.sum())}/{len(cs)} values of c."
        )
    sc = results.get("scale_check")
    if sc:
        measured += (
            f" Scaling the inputs by {sc['scale']:g} is the same as dividing c by "
            f"{sc['scale'] ** 2:g} (largest difference {sc['max_abs_mean_diff']:.1e} in the "
            f"mean of w), so the c sweep covers every input scale."
        )
    if second:
        measured += " Relative mean error ‖μ−μ*‖₂/√(tr Σ*/2): " + "; ".join(both_parts) + "."
    wide = frac >= 0.3
    agrees = True if (wide and to_ep and pep_worse) else (False if n_better == 0 else None)
    notes = (
        "The paper's five points are not published; ours are fixed in "
        "robustep.experiments.rep_toy.TOY_X (chosen before any run, not tuned). The exact "
        "posterior is computed by exact arc integrals (polar coordinates), cross-checked by a "
        "2-D grid and by importance sampling (the paper used IS with 1e8 samples). All EP "
        "variants run the sequential schedule (the paper's algorithm); errors are squared "
        "Euclidean/Frobenius distances. REP follows docs/derivations/rep.md (new belief = "
        "projection divided by r_i; the long version's eq. 16 prints +b_i, which would "
        "double-count r_i; that reading is shown in the 'as printed' columns). The penalty "
        "c·b is not scale-free: for the step likelihood the posterior of w is the same for "
        "inputs a·x, while b (a precision of f) scales as 1/a², so REP(a·X, c) = REP(X, c/a²) "
        "(checked in every run). The paper's c = 20 therefore refers to its own, unpublished "
        "input scale; a sweep over six decades of c covers the input scales in between."
        + (
            " Second toy (one on which EP is visibly wrong): chosen by a rule fixed before REP "
            "was run on it — eight "
            "points near the true boundary x₂ = 0 (x₁ ~ U(−2, 2), x₂ ~ N(0, 0.3²)), labels "
            "sign(x₂) flipped with probability 0.2, same likelihood and kernel; the first seed "
            f"(2024, k), k = 0, 1, …, on which converged EP's relative mean error is ≥ 5% (k = "
            f"{second['seed'][1]}; EP's relative errors on the seeds tried: "
            + ", ".join(f"{v:.1%}" for v in second["ep_rel_errors_tried"])
            + "). REP's results on it are reported as they came out."
            if second
            else ""
        )
        + _non_converged_note(results)
    )
    return ExperimentSummary(
        measured=measured,
        agrees=agrees,
        key_number=(
            f"REP beats EP on both errors for {n_better} of {len(cs)} values of c (needed: "
            f"30%); REP = EP at the largest c: {'yes' if to_ep else 'no'}; PEP worse than EP: "
            f"{'yes' if pep_worse else 'no'}"
        ),
        tables=[
            titled("Posterior mean and errors per method, against the exact posterior", table1),
            titled(
                "REP over the penalty weight c (as derived and as printed)", "\n".join(sweep_rows)
            ),
            titled("Power EP over the power u", "\n".join(pep_rows)),
        ]
        + (
            [titled("REP against EP on both toys (relative mean error)", "\n".join(both_rows))]
            if both_rows
            else []
        ),
        figures=figures,
        notes=notes,
        captions={
            "rep_toy_boundaries.png": "Training points and the decision boundaries wᵀx = 0 at "
            "the exact and approximate posterior means of w, for each toy.",
            "rep_toy_errors.png": "Paper's toy: squared errors of the posterior mean and "
            "covariance of w for PEP against its power u (top) and REP against c (bottom); "
            "dashed: EP.",
            "rep_toy_both.png": "Both toys: REP's mean error relative to the exact posterior's "
            "std against c (dashed: EP; crosses: REP did not converge).",
        },
    )


EXPERIMENT = register(
    Experiment(
        name="rep-toy",
        paper="Qi & Guo, Message passing with relaxed moment matching (long version / ICML)",
        source="Fig. 1 (long version Fig. 1; ICML Figs. 1–2)",
        claim=(
            "On 5 points with one mislabeled (ε = 0.2, linear kernel) REP (c = 20) matches the "
            "exact posterior, REP is more accurate than EP over a wide range of c and reduces to "
            "EP for large c, while PEP's mean error is never below EP's."
        ),
        # quick: fewer powers and c values, c from 0.1 (REP runs at c < 0.1 and the
        # as-printed variant at small c hit max_iter, ~10 s each): under 45 s on one core
        quick={
            "epsilon": 0.2,
            "damping": 0.5,
            "power": 0.8,
            "relaxation": 20.0,
            "powers": [0.2, 0.4, 0.6, 0.8, 1.0],
            "c_log10_range": [-1.0, 4.0],
            "n_c": 6,
            "grid_size": 401,
            "is_samples": 200_000,
        },
        full={
            "epsilon": 0.2,
            "damping": 0.5,
            "power": 0.8,
            "relaxation": 20.0,
            "powers": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0],
            "c_log10_range": [-2.0, 4.0],
            "n_c": 25,
            "grid_size": 1601,
            "is_samples": 20_000_000,
        },
        run=run,
        report=report,
    )
)
