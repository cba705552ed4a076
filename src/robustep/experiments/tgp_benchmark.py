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
and is omitted.  MLPD with 95% Bayesian-bootstrap intervals (Vehtari & Lampinen
2002), pairwise differences to MCMC, MAE, and CPU time relative to LA1.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, ConstantKernel
from sklearn.model_selection import KFold

from robustep.experiments.base import Experiment, ExperimentSummary, register

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


def _splits(name, config, seed):
    """Yield (X_train, y_train, X_test, y_test, f_test or None) for one data set."""
    from robustep.datasets import load_boston, load_concrete, make_friedman_outliers

    rng = np.random.default_rng(seed)
    if name == "friedman":
        for r in range(config["friedman_sets"]):
            X, y = make_friedman_outliers(config["friedman_n"], 10, random_state=seed + r)
            Xt = rng.uniform(size=(config["friedman_test"], 10))
            ft = _friedman_latent(Xt)
            yield X, y, Xt, ft + rng.standard_normal(ft.size), ft
        return
    X, y = (load_boston if name == "boston" else load_concrete)()
    n_max = config.get(f"{name}_n_max")
    if n_max and X.shape[0] > n_max:
        idx = rng.choice(X.shape[0], n_max, replace=False)
        X, y = X[idx], y[idx]
    k = config.get(f"{name}_folds", 10 if name == "boston" else 2)
    for tr, te in KFold(k, shuffle=True, random_state=seed).split(X):
        yield X[tr], y[tr], X[te], y[te], None


def _fit_predict(name, Xtr, ytr, Xte, yte, config, seed):
    from robustep.estimators.student_t_regressor import StudentTGPRegressor

    mu, sd = Xtr.mean(0), Xtr.std(0)
    sd = np.where(sd > 0, sd, 1.0)
    Xtr, Xte = (Xtr - mu) / sd, (Xte - mu) / sd
    d = Xtr.shape[1]
    kernel = ConstantKernel(1.0, (1e-3, 1e3)) * RBF(np.ones(d), (1e-2, 1e3))
    kw = dict(_SPEC[name])
    if name == "MCMC":
        kw.update(n_samples=config["mcmc_samples"])
    t0 = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
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
    return mean, lpd, time.process_time() - t0, bool(est.converged_)


def run(config: dict, seed: int) -> dict:
    """Per-point log densities and absolute errors of every method on every data set."""
    from threadpoolctl import threadpool_limits

    out = {"datasets": {}}
    with threadpool_limits(1):
        for ds in config["datasets"]:
            res = {
                m: {"lpd": [], "abs_err": [], "cpu": 0.0, "converged": []}
                for m in config["methods"]
            }
            for split, (Xtr, ytr, Xte, yte, fte) in enumerate(_splits(ds, config, seed)):
                target = yte if fte is None else fte
                for m in config["methods"]:
                    mean, lpd, cpu, conv = _fit_predict(m, Xtr, ytr, Xte, yte, config, seed + split)
                    res[m]["lpd"] += lpd.tolist()
                    res[m]["abs_err"] += np.abs(mean - target).tolist()
                    res[m]["cpu"] += cpu
                    res[m]["converged"].append(conv)
            out["datasets"][ds] = res
    return out


def bayesian_bootstrap(values, n_boot=2000, seed=0, level=0.95):
    """Mean and central credible interval of the mean of ``values`` (Dirichlet(1) weights)."""
    v = np.asarray(values, float)
    rng = np.random.default_rng(seed)
    w = rng.dirichlet(np.ones(v.size), size=n_boot)
    means = w @ v
    a = (1 - level) / 2
    return float(v.mean()), float(np.quantile(means, a)), float(np.quantile(means, 1 - a))


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
            f"**{ds}**",
            "",
            "| method | MLPD [95% BB] | MAE | vs MCMC: ΔLPD [95% BB] | "
            "CPU (rel. LA1) | converged |",
            "|---|---|---|---|---|---|",
        ]
        stats = {m: bayesian_bootstrap(res[m]["lpd"]) for m in methods}
        base_cpu = res.get("LA1", {}).get("cpu") or 1.0
        for m in methods:
            s = stats[m]
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
                f"{np.mean(res[m]['abs_err']):.3f} | {dtxt} | {rel:.2f} | "
                f"{sum(res[m]['converged'])}/{len(res[m]['converged'])} |"
            )
        tables.append("\n".join(rows))
        if "GA" in stats:
            others = [stats[m][0] for m in methods if m != "GA"]
            st_better_than_ga.append(all(o > stats["GA"][0] for o in others))
        if "EP1" in stats and "LA1" in stats:
            ep_vs_la.append(stats["EP1"][0] - stats["LA1"][0])
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        ys = np.arange(len(methods))
        axes[0].errorbar(
            [stats[m][0] for m in methods],
            ys,
            xerr=[
                [stats[m][0] - stats[m][1] for m in methods],
                [stats[m][2] - stats[m][0] for m in methods],
            ],
            fmt="o",
        )
        axes[0].set_yticks(ys, methods)
        axes[0].set_title(f"{ds}: MLPD (95% BB)")
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
            )
            axes[1].axvline(0, color="k", lw=0.5)
            axes[1].set_yticks(ys, methods)
            axes[1].set_title(f"{ds}: pairwise vs MCMC")
        fig.tight_layout()
        fname = f"fig6_{ds}.png"
        fig.savefig(out_dir / fname, dpi=100)
        plt.close(fig)
        figures.append(fname)
    cpu = ["| method | mean rel. CPU | max rel. CPU |", "|---|---|---|"] + [
        f"| {m} | {np.mean(v):.2f} | {np.max(v):.2f} |" for m, v in cpu_rows.items()
    ]
    tables.append("**Table 1 (CPU time relative to LA1)**\n\n" + "\n".join(cpu))
    measured = (
        f"Student-t methods beat GA in MLPD on {sum(st_better_than_ga)}/{len(st_better_than_ga)} "
        f"data sets; EP1 − LA1 MLPD: "
        + ", ".join(f"{d:+.3f}" for d in ep_vs_la)
        + "; EP1/LA1 CPU: "
        + ", ".join(f"{v:.2f}" for v in cpu_rows.get("EP1", []))
    )
    agrees = None
    if st_better_than_ga and ep_vs_la:
        agrees = bool(all(st_better_than_ga) and np.mean(ep_vs_la) > 0)
        cpu = cpu_rows.get("EP1", [])
        if agrees and cpu and np.mean(cpu) > 1.5:
            agrees = None  # accuracy agrees, but EP1 is much slower than the paper's 0.8 x LA1
    return ExperimentSummary(
        measured=measured,
        agrees=agrees,
        tables=tables,
        figures=figures,
        notes=(
            "The concrete-quality data set (215 experiments, 27 inputs; Vehtari & Lampinen 2002) "
            "is not public and is omitted. Friedman test MLPD uses test targets with the regular "
            "N(0,1) noise and MAE the noise-free latent function. Quick mode uses fewer data sets, "
            "folds, methods and MCMC draws (see the config), so it checks the pipeline more than "
            "the paper's numbers. 'agrees' = every Student-t method beats GA in MLPD on every data "
            "set and EP1 beats LA1 on average; 'partly' when that holds but EP1 costs more than "
            "1.5 x LA1 (the paper: about 0.8 x)."
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
            "n_restarts": 0,
        },
        full={
            "datasets": ["friedman", "boston", "concrete"],
            "friedman_sets": 10,
            "friedman_n": 100,
            "friedman_test": 1000,
            "methods": list(ALL_METHODS),
            "mcmc_samples": 2000,
            "n_restarts": 2,
            "boston_folds": 10,
            "concrete_folds": 2,
        },
        run=run,
        report=report,
    )
)
