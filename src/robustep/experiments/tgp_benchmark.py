"""tgp-benchmark: predictions with estimated hyperparameters (Jylänki et al. 2011, Fig. 6, Tab. 1).

Methods (§6.2): GA (Gaussian likelihood), LA1/LA2, EP1/EP2/EP3, fVB1/fVB2,
VB1/VB2 (1: nu = 4 fixed, 2: nu optimised, 3: EP with the 15-value nu grid) and
MCMC (scale-mixture Gibbs with slice-sampled hyperparameters).  Squared
exponential ARD kernel, inputs and targets standardised, nu initialised at 4,
sigma at 0.5 and sigma_se^2 at 1; length-scales start at 1 (plus
``n_restarts`` random restarts).

Data: Friedman #1 with 5 irrelevant inputs, 10% outliers (``make_friedman_outliers``),
``n_train`` training points and 1000 test points (MAE against the noise-free
latent function, MLPD of test targets with the regular N(0, 1) noise); Boston
housing (K-fold CV); concrete compressive strength (2-fold CV).  The
concrete-*quality* data of the paper (Vehtari & Lampinen 2002) is not public
and is omitted.  MLPD and MAE with 95% Bayesian-bootstrap intervals (Vehtari &
Lampinen 2002), pairwise differences to MCMC, and CPU time relative to LA1.

Configuration keys besides the paper's sizes: ``n_restarts`` (extra optimiser
starts), ``mcmc_samples`` (kept MCMC draws per split, in total over
``mcmc_chains`` independent chains that run as separate units and are pooled),
``mcmc_hyper_every`` (update the kernel hyperparameters every this many Gibbs
sweeps; split R-hat and ESS per split are in the results and the report),
``mcmc_hyper_sampler`` ("slice" or "metropolis": how they are updated, see
:func:`robustep.baselines.mcmc.gibbs_student_t_gp`),
``{boston,concrete}_folds`` (K of the K-fold CV) and ``{boston,concrete}_folds_used``
(evaluate only the first folds of that K-fold split: the training-set size stays
the paper's, the test set shrinks; for runs on a CPU budget).

Parallel units: one per (data set, split, method) and per MCMC chain, dispatched
longest first; each unit's random state is derived from (seed, data set, split[,
chain]), so the results do not depend on ``--jobs``.
"""

from __future__ import annotations

import time
import warnings
import zlib
from functools import partial
from pathlib import Path

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, ConstantKernel
from sklearn.model_selection import KFold

from robustep.experiments.base import Experiment, ExperimentSummary, register
from robustep.experiments.parallel import unit_seed
from robustep.plotting import legend, styled

ALL_METHODS = ("GA", "LA1", "LA2", "EP1", "EP2", "EP3", "fVB1", "fVB2", "VB1", "VB2", "MCMC")
_SPEC = {
    "GA": dict(method="gaussian"),
    "LA1": dict(method="laplace"),
    "LA2": dict(method="laplace", optimize_df=True),
    "EP1": dict(method="ep"),
    "EP2": dict(method="ep", optimize_df=True),
    "EP3": dict(method="ep", df_grid=True),
    "fVB1": dict(method="fvb"),
    "fVB2": dict(method="fvb", optimize_df=True),
    "VB1": dict(method="vb"),
    "VB2": dict(method="vb", optimize_df=True),
    "MCMC": dict(method="mcmc", optimize_df=True),
}


def _friedman_latent(X):
    return (
        10 * np.sin(np.pi * X[:, 0] * X[:, 1])
        + 20 * (X[:, 2] - 0.5) ** 2
        + 10 * X[:, 3]
        + 5 * X[:, 4]
    )


def _dataset_key(name: str) -> int:
    """A stable integer for a data set name (adding a data set changes no other's seeds)."""
    return zlib.crc32(name.encode())


def _splits(name, config, seed):
    """[(X_train, y_train, X_test, y_test, f_test or None)] for one data set.

    Every replicate/fold draws from its own stream derived from (seed, data set, index).
    """
    from robustep.datasets import load_boston, load_concrete, make_friedman_outliers

    key = _dataset_key(name)
    if name == "friedman":
        out = []
        for r in range(config["friedman_sets"]):
            X, y = make_friedman_outliers(
                config["friedman_n"], 10, random_state=unit_seed(seed, key, r, 0)
            )
            rng = np.random.default_rng(unit_seed(seed, key, r, 1))
            Xt = rng.uniform(size=(config["friedman_test"], 10))
            ft = _friedman_latent(Xt)
            out.append((X, y, Xt, ft + rng.standard_normal(ft.size), ft))
        return out
    if name not in ("boston", "concrete"):
        raise ValueError(f"unknown data set {name!r}: use 'friedman', 'boston' or 'concrete'")
    X, y = (load_boston if name == "boston" else load_concrete)()
    n_max = config.get(f"{name}_n_max")
    if n_max and X.shape[0] > n_max:
        rng = np.random.default_rng(unit_seed(seed, key))
        idx = rng.choice(X.shape[0], n_max, replace=False)
        X, y = X[idx], y[idx]
    k = config.get(f"{name}_folds", 10 if name == "boston" else 2)
    folds = KFold(k, shuffle=True, random_state=unit_seed(seed, key))
    splits = [(X[tr], y[tr], X[te], y[te], None) for tr, te in folds.split(X)]
    used = config.get(f"{name}_folds_used")  # evaluate only the first folds (same training size)
    return splits[: int(used)] if used else splits


def _standardised_inputs_and_kernel(Xtr, Xte):
    """(Xtr, Xte) standardised by the training columns, and the ARD kernel every method
    starts from (§6.2)."""
    mu, sd = Xtr.mean(0), Xtr.std(0)
    sd = np.where(sd > 0, sd, 1.0)
    Xtr, Xte = (Xtr - mu) / sd, (Xte - mu) / sd
    kernel = ConstantKernel(1.0, (1e-3, 1e3)) * RBF(np.ones(Xtr.shape[1]), (1e-2, 1e3))
    return Xtr, Xte, kernel


def _fit_predict(name, Xtr, ytr, Xte, yte, config, seed, n_samples=None):
    """One method on one split: (mean, lpd, CPU s, converged, MCMC draws, (sigma, nu))."""
    from threadpoolctl import threadpool_limits

    from robustep.estimators.student_t_regressor import StudentTGPRegressor

    Xtr, Xte, kernel = _standardised_inputs_and_kernel(Xtr, Xte)
    kw = dict(_SPEC[name])
    if name == "MCMC":
        kw.update(
            n_samples=int(n_samples or config["mcmc_samples"]),
            **{f"mcmc_{k}": v for k, v in _mcmc_hyper(config).items()},
        )
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        t0 = time.process_time()
        est = StudentTGPRegressor(
            kernel,
            df=4.0,
            scale=0.5,
            random_state=seed,
            n_restarts_optimizer=config["n_restarts"],
            **kw,
        )
        est.fit(Xtr, ytr)
        mean = est.predict(Xte)
        lpd = est.predict_log_density(Xte, yte)
        cpu = time.process_time() - t0
    draws = None
    if name == "MCMC":  # scalar parameters per kept draw, for R-hat over pooled chains
        m = est._mcmc
        diag = est.mcmc_diagnostics_
        names = ["log_scale", "log_df"] + [
            f"kernel_theta_{j}" for j in range(m.kernel_theta.shape[1])
        ]
        draws = {
            "draws": np.column_stack([np.log(m.scale), np.log(m.df), m.kernel_theta]),
            "names": names,
            # this chain's split R-hat and ESS per scalar parameter (and of mean f)
            "rhat": {k: float(v) for k, v in diag["rhat"].items()},
            "ess": {k: float(v) for k, v in diag["ess"].items()},
            "sweeps": int(m.n_iter),
            **_mcmc_hyper(config),
            "hyper_acceptance": diag.get("hyper_acceptance"),
        }
    return mean, lpd, cpu, bool(est.converged_), draws, (float(est.scale_), float(est.df_))


def _unit(item, config):
    """One independent unit: method ``item[0]`` (MCMC: one chain) on one split."""
    name, seed, n_samples, (Xtr, ytr, Xte, yte) = item
    return _fit_predict(name, Xtr, ytr, Xte, yte, config, seed, n_samples)


def _mcmc_hyper(config):
    """How MCMC updates the kernel hyperparameters: {"hyper_every", "hyper_sampler"}
    from the configuration (defaults: every sweep, slice sampling)."""
    return {
        "hyper_every": int(config.get("mcmc_hyper_every", 1)),
        "hyper_sampler": str(config.get("mcmc_hyper_sampler", "slice")),
    }


def _mcmc_chains(config):
    """(number of chains, kept draws per chain): ``mcmc_samples`` kept draws in total."""
    k = max(1, int(config.get("mcmc_chains", 1)))
    return k, max(1, int(round(config["mcmc_samples"] / k)))


def _pool_mcmc(parts):
    """Pool equal-length MCMC chains: mean of means, log of the mean density, and the
    diagnostics {"rhat": max split R-hat, "ess": min ESS, "ess_param": the parameter with
    that ESS, "cpu": CPU s} over the scalar parameters (log sigma, log nu, kernel log
    parameters); None for other methods."""
    from scipy.special import logsumexp

    from robustep.baselines.mcmc import effective_sample_size, split_rhat

    means, lpds, cpus, convs, draws, hyper = zip(*parts, strict=True)
    if draws[0] is None:
        return means[0], lpds[0], cpus[0], convs[0], None, hyper[0]
    lpd = logsumexp(np.vstack(lpds), axis=0) - np.log(len(parts))
    names = draws[0]["names"] if isinstance(draws[0], dict) else None
    # (chains, draws, parameters); units saved before the diagnostics were an array
    D = np.stack([d["draws"] if isinstance(d, dict) else d for d in draws])
    rhats = [split_rhat(D[:, :, j]) for j in range(D.shape[2])]
    esss = [effective_sample_size(D[:, :, j]) for j in range(D.shape[2])]
    rhat, ess = max(rhats), min(esss)
    hyper = tuple(float(v) for v in np.mean(hyper, axis=0))
    diag = {"rhat": float(rhat), "ess": float(ess), "cpu": float(sum(cpus))}
    if names is not None:
        diag["ess_param"] = names[int(np.argmin(esss))]
        diag["rhat_param"] = names[int(np.argmax(rhats))]
    conv = bool(rhat < 1.1 and all(convs))
    return np.mean(means, axis=0), lpd, float(sum(cpus)), conv, diag, hyper


# Relative cost per unit (LA1 = 1), used only to start long units first: CPU seconds
# measured on Boston fold 0 on an idle machine with the current evidence search
# (LA1 = 22 s, MCMC with 2000 draws).
_COST = {"GA": 0.5, "LA1": 1, "LA2": 0.8, "EP1": 1.5, "EP2": 1.4, "EP3": 8.6}
_COST.update({"fVB1": 2.5, "fVB2": 2.5, "VB1": 1.6, "VB2": 1.5, "MCMC": 11})


def run(config: dict, seed: int) -> dict:
    """Per-point log densities and absolute errors of every method on every data set.

    Units (data set, split, method) — MCMC split further into ``mcmc_chains`` chains —
    are independent and run through :func:`~robustep.experiments.parallel.parallel_map`,
    longest first; each unit's random state is derived from (seed, data set, split[, chain]).
    """
    from robustep.experiments.parallel import parallel_map

    n_chains, per_chain = _mcmc_chains(config)
    keys, items, cost, targets = [], [], [], {}
    for ds in config["datasets"]:
        dkey = _dataset_key(ds)
        for split, (Xtr, ytr, Xte, yte, fte) in enumerate(_splits(ds, config, seed)):
            targets[ds, split] = yte if fte is None else fte
            data = (Xtr, ytr, Xte, yte)
            fit_seed = unit_seed(seed, dkey, split)
            for m in config["methods"]:
                chains = range(n_chains) if m == "MCMC" else [0]
                for c in chains:
                    s = fit_seed if c == 0 else unit_seed(seed, dkey, split, c)
                    keys.append((ds, split, m, c))
                    items.append((m, s, per_chain if m == "MCMC" else None, data))
                    cost.append(_COST.get(m, 1) * len(ytr) ** 3 / (n_chains if m == "MCMC" else 1))
    order = sorted(range(len(items)), key=lambda i: -cost[i])  # longest first
    done = parallel_map(
        partial(_unit, config=config), [items[i] for i in order], [cost[i] for i in order]
    )
    by_key = {keys[i]: r for i, r in zip(order, done, strict=True)}

    out = {
        "datasets": {},
        "mcmc": {
            "samples": n_chains * per_chain,
            "chains": n_chains,
            **_mcmc_hyper(config),
        },
        "splits": {ds: sum(1 for k in targets if k[0] == ds) for ds in config["datasets"]},
    }
    for ds in config["datasets"]:
        res = {
            m: {"lpd": [], "abs_err": [], "cpu": 0.0, "converged": [], "scale": [], "df": []}
            for m in config["methods"]
        }
        for split in range(out["splits"][ds]):
            for m in config["methods"]:
                chains = range(n_chains) if m == "MCMC" else [0]
                parts = [by_key[ds, split, m, c] for c in chains]
                mean, lpd, cpu, conv, rhat, (scale, df) = _pool_mcmc(parts)
                res[m]["lpd"] += np.asarray(lpd).tolist()
                res[m]["abs_err"] += np.abs(mean - targets[ds, split]).tolist()
                res[m]["cpu"] += cpu
                res[m]["converged"].append(conv)
                res[m]["scale"].append(scale)  # fitted sigma (MCMC: posterior mean)
                res[m]["df"].append(df)
                if m == "MCMC" and rhat is not None:
                    res[m].setdefault("rhat_max", []).append(rhat["rhat"])
                    res[m].setdefault("ess_min", []).append(rhat["ess"])
                    res[m].setdefault("ess_param", []).append(rhat.get("ess_param", ""))
                    res[m].setdefault("rhat_param", []).append(rhat.get("rhat_param", ""))
                    res[m].setdefault("cpu_split", []).append(rhat["cpu"])
        out["datasets"][ds] = res
    return out


_TITLES = {
    "friedman": "Friedman #1 (simulated, 10% outliers)",
    "boston": "Boston housing",
    "concrete": "Compressive strength (concrete, Yeh 1998)",
}
# Table 1 of the paper: (mean, max) CPU time relative to LA1 over its four data sets (SM = MCMC).
_PAPER_CPU = {
    "GA": (0.07, 0.09),
    "LA1": (1.0, 1.0),
    "LA2": (0.8, 1.2),
    "EP1": (0.8, 1.1),
    "EP2": (7.0, 16),
    "EP3": (13, 26),
    "fVB1": (15, 39),
    "fVB2": (8.9, 22),
    "VB1": (1.6, 3.3),
    "VB2": (1.8, 3.8),
    "MCMC": (280, 440),
}


def _mcmc_table(ds, r):
    """Markdown table of MCMC's convergence per split (split R-hat, smallest ESS), or ''."""
    if not r.get("rhat_max"):
        return ""
    rows = [
        f"**{_TITLES.get(ds, ds)}: MCMC convergence per split** (scalar parameters: log "
        "sigma, log nu, kernel log parameters; R-hat < 1.1 counts as converged)",
        "",
        "| split | split R-hat max (parameter) | ESS min (parameter) | CPU s |",
        "|---|---|---|---|",
    ]
    n = len(r["rhat_max"])
    rp = r.get("rhat_param", [""] * n)
    ep = r.get("ess_param", [""] * n)
    cpu = r.get("cpu_split", [float("nan")] * n)
    for i in range(n):
        rows.append(
            f"| {i} | {r['rhat_max'][i]:.3f} ({rp[i]}) | {r['ess_min'][i]:.0f} ({ep[i]}) | "
            f"{cpu[i]:.0f} |"
        )
    return "\n".join(rows)


def bayesian_bootstrap(values, n_boot=2000, seed=0, level=0.95):
    """Mean and central credible interval of the mean of ``values`` (Dirichlet(1) weights)."""
    v = np.asarray(values, float)
    rng = np.random.default_rng(seed)
    w = rng.dirichlet(np.ones(v.size), size=n_boot)
    means = w @ v
    a = (1 - level) / 2
    return float(v.mean()), float(np.quantile(means, a)), float(np.quantile(means, 1 - a))


@styled
def report(results: dict, out_dir: Path) -> ExperimentSummary:
    """Fig. 6 (MLPD with intervals, pairwise vs MCMC) and Table 1 (relative CPU times)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tables, figures = [], []
    st_better_than_ga = []
    ep_vs_la = []
    cpu_rows = {}
    for ds, res in results["datasets"].items():
        methods = list(res)
        rows = [
            f"**{_TITLES.get(ds, ds)}**",
            "",
            "| method | MLPD [95% BB] | MAE [95% BB] | vs MCMC: ΔLPD [95% BB] | "
            "CPU (rel. LA1) | converged |",
            "|---|---|---|---|---|---|",
        ]
        stats = {m: bayesian_bootstrap(res[m]["lpd"]) for m in methods}
        base_cpu = res.get("LA1", {}).get("cpu") or 1.0
        for m in methods:
            s = stats[m]
            ae = bayesian_bootstrap(res[m]["abs_err"])
            if "MCMC" in res:
                diff = np.asarray(res[m]["lpd"]) - np.asarray(res["MCMC"]["lpd"])
                dd = bayesian_bootstrap(diff)
                dtxt = f"{dd[0]:+.3f} [{dd[1]:+.3f}, {dd[2]:+.3f}]"
            else:
                dtxt = "–"
            rel = res[m]["cpu"] / base_cpu
            cpu_rows.setdefault(m, []).append(rel)
            rows.append(
                f"| {m} | {s[0]:.3f} [{s[1]:.3f}, {s[2]:.3f}] | "
                f"{ae[0]:.3f} [{ae[1]:.3f}, {ae[2]:.3f}] | {dtxt} | {rel:.2f} | "
                f"{sum(res[m]['converged'])}/{len(res[m]['converged'])} |"
            )
        tables.append("\n".join(rows))
        mc_rows = _mcmc_table(ds, res.get("MCMC", {}))
        if mc_rows:
            tables.append(mc_rows)
        if "GA" in stats:
            others = [stats[m][0] for m in methods if m != "GA"]
            st_better_than_ga.append(all(o > stats["GA"][0] for o in others))
        if "EP1" in stats and "LA1" in stats:
            ep_vs_la.append(stats["EP1"][0] - stats["LA1"][0])
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.8))
        ys = np.arange(len(methods))
        axes[0].errorbar(
            [stats[m][0] for m in methods],
            ys,
            xerr=[
                [stats[m][0] - stats[m][1] for m in methods],
                [stats[m][2] - stats[m][0] for m in methods],
            ],
            fmt="o",
            label="mean over test points, 95% Bayesian-bootstrap interval",
        )
        axes[0].set_yticks(ys, methods)
        axes[0].set_ylabel("method")
        axes[0].set_xlabel("mean log predictive density (nats per test point)")
        legend(axes[0], outside="below")
        axes[0].set_title(f"{_TITLES.get(ds, ds)}: MLPD (95% BB)")
        if "MCMC" in res:
            dd = [
                bayesian_bootstrap(np.asarray(res[m]["lpd"]) - np.asarray(res["MCMC"]["lpd"]))
                for m in methods
            ]
            axes[1].errorbar(
                [d[0] for d in dd],
                ys,
                xerr=[[d[0] - d[1] for d in dd], [d[2] - d[0] for d in dd]],
                fmt="o",
                label="mean of (method − MCMC), 95% Bayesian-bootstrap interval",
            )
            axes[1].axvline(0, color="k", lw=0.5, label="MCMC (reference)")
            axes[1].set_yticks(ys, methods)
            axes[1].set_ylabel("method")
            axes[1].set_xlabel("log predictive density − MCMC's (nats per test point)")
            legend(axes[1], outside="below")
            axes[1].set_title(f"{_TITLES.get(ds, ds)}: pairwise vs MCMC")
        fname = f"fig6_{ds}.png"
        fig.savefig(out_dir / fname)
        plt.close(fig)
        figures.append(fname)
    cpu = [
        "| method | mean rel. CPU | max rel. CPU | paper mean | paper max |",
        "|---|---|---|---|---|",
    ] + [
        f"| {m} | {np.mean(v):.2f} | {np.max(v):.2f} | {_PAPER_CPU[m][0]:g} | "
        f"{_PAPER_CPU[m][1]:g} |"
        for m, v in cpu_rows.items()
    ]
    tables.append("**Table 1 (CPU time relative to LA1)**\n\n" + "\n".join(cpu))
    measured = (
        f"Student-t methods beat GA in MLPD on {sum(st_better_than_ga)}/{len(st_better_than_ga)} "
        f"data sets; EP1 − LA1 MLPD: "
        + ", ".join(f"{d:+.3f}" for d in ep_vs_la)
        + "; EP1/LA1 CPU: "
        + ", ".join(f"{v:.2f}" for v in cpu_rows.get("EP1", []))
    )
    at_bound = {}  # fits that ended at the estimator's lower bound of sigma (0.01)
    for res in results["datasets"].values():
        for m, r in res.items():
            if m != "GA" and r.get("scale"):
                k, n = at_bound.get(m, (0, 0))
                at_bound[m] = (k + sum(v <= 0.0101 for v in r["scale"]), n + len(r["scale"]))
    flagged = {m: kn for m, kn in at_bound.items() if kn[0]}
    if flagged:
        measured += "; fits with sigma at its 0.01 lower bound: " + ", ".join(
            f"{m} {k}/{n}" for m, (k, n) in flagged.items()
        )
    mc = results.get("mcmc")
    mcmc_note = (
        f"MCMC: {mc['samples']} kept draws per split in {mc['chains']} chain(s), each after a "
        "burn-in of half its length (the paper does not give its chain lengths); f, the "
        "scale mixture, sigma and nu are drawn every Gibbs sweep and the kernel "
        f"hyperparameters once every {mc.get('hyper_every', 1)} sweep(s)"
        + (
            ", by joint random-walk Metropolis after half the burn-in (slice sampling "
            "before it; proposal covariance from those draws, fixed after the burn-in). "
            if mc.get("hyper_sampler") == "metropolis"
            else ", by coordinate-wise slice sampling. "
        )
        if mc
        else ""
    )
    for ds, res in results["datasets"].items():
        r = res.get("MCMC", {})
        if r.get("rhat_max"):
            mcmc_note += (
                f"MCMC on {ds}: split R-hat max {max(r['rhat_max']):.3f} (median "
                f"{np.median(r['rhat_max']):.3f}), effective sample size min "
                f"{min(r['ess_min']):.0f} (median {np.median(r['ess_min']):.0f}) over the "
                "scalar parameters (log sigma, log nu, kernel log parameters), per split. "
            )
    if results.get("splits"):
        mcmc_note += (
            "Splits evaluated: "
            + ", ".join(f"{ds} {k}" for ds, k in results["splits"].items())
            + " (paper: 10 Friedman sets, 10-fold Boston, 2-fold compressive strength). "
        )
    agrees = None
    if st_better_than_ga and ep_vs_la:
        agrees = bool(all(st_better_than_ga) and np.mean(ep_vs_la) > 0)
        cpu = cpu_rows.get("EP1", [])
        if agrees and cpu and np.mean(cpu) > 1.5:
            agrees = None  # accuracy agrees, but EP1 is much slower than the paper's 0.8 x LA1
    cpu_ep1 = cpu_rows.get("EP1", [])
    key = (
        f"Student-t beats GA on {sum(st_better_than_ga)} of {len(st_better_than_ga)} data sets; "
        f"mean EP1 - LA1 MLPD {np.mean(ep_vs_la) if ep_vs_la else float('nan'):+.3f}; "
        f"EP1/LA1 CPU {np.mean(cpu_ep1) if cpu_ep1 else float('nan'):.2f} (limit 1.5)"
    )
    return ExperimentSummary(
        measured=measured,
        agrees=agrees,
        key_number=key,
        tables=tables,
        figures=figures,
        captions={
            f: "Mean log predictive density of every method (left) and its paired difference to "
            "MCMC (right) on the test points of " + f[len("fig6_") : -len(".png")] + ", with 95% "
            "Bayesian-bootstrap intervals (JMLR Fig. 6)."
            for f in figures
        },
        notes=(
            "The concrete-quality data set of the paper (215 experiments, 27 inputs; Vehtari & "
            "Lampinen 2002) is not public and is omitted, so Fig. 6(e)-(f) is missing and our "
            "Table 1 averages over three data sets instead of four. "
            + mcmc_note
            + "Friedman test MLPD uses test targets with the regular "
            "N(0,1) noise and MAE the noise-free latent function. Quick mode uses fewer data sets, "
            "folds, methods and MCMC draws (see the config), so it checks the pipeline more than "
            "the paper's numbers. 'agrees' = every Student-t method beats GA in MLPD on every data "
            "set and EP1 beats LA1 on average; 'partly' when that holds but EP1 costs more than "
            "1.5 x LA1 (the paper: about 0.8 x). Table 1's third row (28 preselected fixed "
            "hyperparameter configurations) is not reproduced."
        ),
    )


EXPERIMENT = register(
    Experiment(
        name="tgp-benchmark",
        paper="Jylänki, Vanhatalo & Vehtari (2011), JMLR",
        source="Fig. 6, Table 1 (Sec. 6.2)",
        claim=(
            "The Student-t model beats the Gaussian model with every approximation; EP (EP1/EP2) "
            "is significantly better than LA, VB and fVB in most data sets and closest to MCMC; "
            "EP1 costs about 0.8 x LA1 in CPU time, EP2/EP3 and fVB much more."
        ),
        quick={
            "datasets": ["friedman"],
            "friedman_sets": 1,
            "friedman_n": 60,
            "friedman_test": 300,
            "methods": ["GA", "LA1", "EP1", "VB1", "fVB1", "MCMC"],
            "mcmc_samples": 100,
            "mcmc_chains": 1,
            "n_restarts": 2,  # with 0, EP1 more often ends at sigma = 0.01 (GA-like MLPD)
        },
        full={
            "datasets": ["friedman", "boston", "concrete"],
            "friedman_sets": 10,
            "friedman_n": 100,
            "friedman_test": 1000,
            "methods": list(ALL_METHODS),
            "mcmc_samples": 2000,
            "mcmc_chains": 1,
            # kernel hyperparameters every 3rd Gibbs sweep (f, V, sigma, nu every sweep):
            # 2.5x cheaper per sweep at n = 455, R-hat and ESS in the report
            "mcmc_hyper_every": 3,
            # coordinate-wise slice sampling, the paper's sampler (§6.2): on Boston fold 0
            # 212 against 93 CPU s for random-walk Metropolis ("metropolis"), but over ten
            # folds Metropolis met R-hat < 1.1 in 3, slice sampling in 8
            # (docs/full-runs/tgp-benchmark)
            "mcmc_hyper_sampler": "slice",
            "n_restarts": 2,
            "boston_folds": 10,
            "concrete_folds": 2,
            "boston_folds_used": None,
            "concrete_folds_used": None,
        },
        run=run,
        report=report,
    )
)
