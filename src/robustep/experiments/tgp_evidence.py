"""tgp-evidence: EP and fractional-EP log evidence against AIS (Jylänki et al. 2011, Fig. 4).

For each 1-D example of :mod:`robustep.experiments.tgp_examples`, on a grid of
(log l, log sigma_se^2) with nu and sigma fixed at the EP MAP (eta = 1) values:

* log Z_EP: sequential EP with damping 0.2 (delta = 0.8), falling back to the
  robust parallel EP / double loop where the sequential run does not converge
  (those grid points are marked, as the black dots of Fig. 4);
* log Z_fEP: robust parallel EP with eta = 0.5;
* log Z_AIS: annealed importance sampling (:mod:`robustep.baselines.importance`),
  annealed from EP's Gaussian approximation to the exact posterior (Neal 2001 allows
  any proper initial distribution; the estimate is consistent whatever it is).

Reported: mean absolute error of EP and fEP against AIS over the grid, the sign
of the mean error (over- or under-estimation), and the number of grid points
where sequential EP fails.  The fractional-EP MAP (``fep_map``, default on) is
marked too, as the circle of Fig. 4.

Parallel units: the MAP fit of each example, then one unit per (example, grid
point) whose AIS random state derives from (seed, example, i, j), so the results
do not depend on ``--jobs``.
"""

from __future__ import annotations

import warnings
from functools import partial
from pathlib import Path

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

from robustep.experiments.base import Experiment, ExperimentSummary, register
from robustep.experiments.parallel import unit_seed
from robustep.plotting import legend, styled


def _map_fit(item, config):
    """EP (eta = 1) and fractional EP (eta = 0.5) type-II MAP on one example."""
    from threadpoolctl import threadpool_limits

    from robustep.estimators.student_t_regressor import StudentTGPRegressor
    from robustep.experiments.tgp_examples import _kernel, make_example

    ex, seed = item
    X, y = make_example(ex, n_regular=config["n_regular"], random_state=seed)
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", UserWarning)
        est = StudentTGPRegressor(_kernel(), method="ep", optimize_df=True).fit(X, y)
        out = {
            "X": X,
            "ys": est._y,
            "df": float(est.df_),
            "scale": float(est.scale_),
            "theta": est.kernel_.theta,  # (log sigma_se^2, log l)
        }
        if config.get("fep_map", True):
            fest = StudentTGPRegressor(
                _kernel(), method="fractional", power=0.5, optimize_df=True
            ).fit(X, y)
            out.update(
                fep_theta=fest.kernel_.theta, fep_df=float(fest.df_), fep_scale=float(fest.scale_)
            )
    return out


def _grid_point(item, config):
    """log Z of sequential EP (robust EP fallback), fractional EP and AIS at one grid point."""
    from threadpoolctl import threadpool_limits

    from robustep.baselines.importance import ais_log_marginal_likelihood
    from robustep.ep import expectation_propagation
    from robustep.likelihoods import StudentT

    X, ys, df, scale, ll, ls, point_seed = item
    lik = StudentT(df=df, scale=scale)
    rng = np.random.default_rng(point_seed)
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", UserWarning)
        K = (ConstantKernel(np.exp(ls)) * RBF(np.exp(ll)))(X)
        r = expectation_propagation(
            K, ys, lik, schedule="sequential", damping=0.2, max_iter=config["max_seq_iter"]
        )
        seq_fail = not r.converged
        if not r.converged:
            r = expectation_propagation(K, ys, lik)
        ep = r.log_Z if r.converged else np.nan
        rf = expectation_propagation(K, ys, lik, power=0.5)
        fep = rf.log_Z if rf.converged else np.nan
        # AIS annealed from EP's Gaussian approximation (a proper q; the estimate
        # stays consistent whatever q is), or from the prior if EP failed.
        sites = (r.site_precision, r.site_shift) if r.converged else None
        try:
            a = ais_log_marginal_likelihood(
                K,
                ys,
                lik,
                n_temperatures=config["ais_temperatures"],
                n_chains=config["ais_chains"],
                initial_sites=sites,
                random_state=rng.integers(2**31),
            )
        except np.linalg.LinAlgError:
            a = ais_log_marginal_likelihood(
                K,
                ys,
                lik,
                n_temperatures=10 * config["ais_temperatures"],
                n_chains=config["ais_chains"],
                random_state=rng.integers(2**31),
            )
    return float(ep), float(fep), float(a.log_Z), float(a.std_error), bool(seq_fail)


def run(config: dict, seed: int) -> dict:
    """Evidence surfaces of EP, fEP and AIS on both examples.

    Stage 1: the EP (and fEP) MAP fit of each example, one unit each.  Stage 2: one unit
    per (example, grid point), its AIS random state derived from (seed, example, i, j);
    both stages go through :func:`~robustep.experiments.parallel.parallel_map`.
    """
    from robustep.experiments.parallel import parallel_map

    examples = (1, 2)
    fits = parallel_map(partial(_map_fit, config=config), [(ex, seed) for ex in examples])
    grids, items, keys = {}, [], []
    for ex, fit in zip(examples, fits, strict=True):
        th = fit["theta"]
        hw, ng = config["half_width"], config["n_grid"]
        log_l = np.linspace(th[1] - hw, th[1] + hw, ng)
        log_s2 = np.linspace(th[0] - hw, th[0] + hw, ng)
        grids[ex] = (log_l, log_s2)
        for i, ll in enumerate(log_l):
            for j, ls in enumerate(log_s2):
                keys.append((ex, i, j))
                s = unit_seed(seed, ex, i, j)
                items.append((fit["X"], fit["ys"], fit["df"], fit["scale"], ll, ls, s))
    done = parallel_map(partial(_grid_point, config=config), items)
    out = {"examples": {}}
    for ex, fit in zip(examples, fits, strict=True):
        log_l, log_s2 = grids[ex]
        shape = (log_l.size, log_s2.size)
        ep, fep, ais, ais_se = (np.full(shape, np.nan) for _ in range(4))
        seq_fail = np.zeros(shape, dtype=bool)
        for (e, i, j), r in zip(keys, done, strict=True):
            if e == ex:
                ep[i, j], fep[i, j], ais[i, j], ais_se[i, j], seq_fail[i, j] = r
        out["examples"][str(ex)] = {
            "log_l": log_l.tolist(),
            "log_sigma_se2": log_s2.tolist(),
            "df": fit["df"],
            "scale": fit["scale"],
            "map_theta": np.asarray(fit["theta"]).tolist(),
            "ep": ep.tolist(),
            "fep": fep.tolist(),
            "ais": ais.tolist(),
            "ais_se": ais_se.tolist(),
            "sequential_failed": seq_fail.tolist(),
        }
        if "fep_theta" in fit:
            out["examples"][str(ex)]["fep_map"] = {
                "theta": np.asarray(fit["fep_theta"]).tolist(),
                "df": fit["fep_df"],
                "scale": fit["fep_scale"],
            }
    return out


#: Average absolute log-evidence error (nats) against AIS within which a method counts as
#: close to AIS in example 1.
MAE_CLOSE = 0.5
#: Largest factor between the fractional-EP MAP and the EP MAP of sigma or nu for which
#: the two MAPs count as the same mode (Fig. 4 shows them close together).
MAP_RATIO_MAX = 2.0


def verdict(
    mae1: float,
    bias_ep2: float,
    bias_fep2: float,
    gaussian_ex2: bool,
    map_ratios: dict[str, dict[str, float]],
) -> tuple[bool | None, str]:
    """The verdict of tgp-evidence and the numbers that decide it.

    Parameters
    ----------
    mae1 : float
        Larger of EP's and fEP's mean absolute log-evidence error against AIS, example 1.
    bias_ep2, bias_fep2 : float
        Mean error (method - AIS) of EP and fEP in example 2.
    gaussian_ex2 : bool
        Whether example 2's EP MAP of nu is at its upper bound (a practically Gaussian
        model, on which the example-2 claim cannot be tested).
    map_ratios : dict
        Per example, ``{"sigma": r, "nu": r}``: fractional-EP MAP / EP MAP.

    Returns
    -------
    agrees : bool or None
        False when example 1's error exceeds :data:`MAE_CLOSE`; otherwise True only when
        EP's example-2 error is above fEP's, example 2 is testable and every MAP ratio
        is within a factor :data:`MAP_RATIO_MAX` of 1; None ("partly") when example 2 is
        untestable or a ratio is outside that range; False when EP's example-2 error is
        not above fEP's.
    key_number : str
        The deciding numbers, for the report's index.
    """
    key = f"ex. 1 MAE vs AIS {mae1:.3f} (limit {MAE_CLOSE})"
    if not mae1 < MAE_CLOSE:
        return False, key
    far = [
        f"ex. {ex} {name} x{r:.3g}"
        for ex, rs in sorted(map_ratios.items())
        for name, r in rs.items()
        if not (1 / MAP_RATIO_MAX <= r <= MAP_RATIO_MAX)
    ]
    if gaussian_ex2:
        agrees: bool | None = None
        key += "; ex. 2 untestable (nu at its bound)"
    else:
        agrees = bool(bias_ep2 > bias_fep2)
        key += f"; ex. 2 bias EP {bias_ep2:+.3f} vs fEP {bias_fep2:+.3f}"
    if far:
        key += f"; fEP MAP / EP MAP far from 1: {', '.join(far)}"
        if agrees:
            agrees = None
    return agrees, key


@styled
def report(results: dict, out_dir: Path) -> ExperimentSummary:
    """Contour maps (EP, fEP, AIS) per example and the MAE table."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = [
        "| example | method | MAE vs AIS | mean error (method − AIS) | seq. EP failures | "
        "median AIS s.e. |",
        "|---|---|---|---|---|---|",
    ]
    fig, axes = plt.subplots(2, 3, figsize=(14, 8.5))
    summary = {}
    for r_i, (ex, e) in enumerate(sorted(results["examples"].items())):
        ll, ls = np.asarray(e["log_l"]), np.asarray(e["log_sigma_se2"])
        ais = np.asarray(e["ais"], float)
        fail = np.asarray(e["sequential_failed"], bool)
        finite = ais[np.isfinite(ais)]
        levels = np.linspace(np.nanpercentile(finite, 10), np.nanmax(finite), 12)
        for c_i, key in enumerate(("ep", "fep", "ais")):
            Z = np.asarray(e[key], float)
            ax = axes[r_i, c_i]
            cs = ax.contour(ll, ls, Z.T, levels=levels)
            ax.clabel(cs, levels=cs.levels[::3], fmt="%.1f", fontsize=7)
            if key == "ep" and fail.any():
                I, J = np.nonzero(fail)
                ax.plot(ll[I], ls[J], "k.", ms=4, label="sequential EP failed")
            ax.plot(*e["map_theta"][::-1], "kx", label="EP MAP")
            if "fep_map" in e:  # Fig. 4 marks the fractional-EP mode with a circle
                ax.plot(*e["fep_map"]["theta"][::-1], "ko", mfc="none", label="fractional-EP MAP")
            ax.set_title(f"ex. {ex}: {key.upper()}")
            ax.set_xlabel("log length-scale log l (l in x units)")
            ax.set_ylabel("log signal variance log σ²_se (y units²)")
            legend(ax)
            if c_i == 2:
                fig.colorbar(
                    cs, ax=axes[r_i, :], label=f"ex. {ex}: log Z (nats; same levels per row)"
                )
            if key != "ais":
                d = Z - ais
                # AIS runs that had to start from the prior (EP failed there) have large
                # standard errors and are biased low with the quick schedule: leave them out.
                reliable = np.asarray(e["ais_se"], float) < 0.5
                ok = np.isfinite(d) & reliable
                mae = float(np.mean(np.abs(d[ok]))) if ok.any() else float("nan")
                bias = float(np.mean(d[ok])) if ok.any() else float("nan")
                summary[(ex, key)] = (mae, bias)
                rows.append(
                    f"| {ex} | {key.upper()} | {mae:.3f} | {bias:+.3f} | "
                    f"{int(fail.sum())}/{fail.size} | "
                    f"{float(np.nanmedian(e['ais_se'])):.3f} (excluded: "
                    f"{int(np.sum(~reliable))} points with AIS s.e. >= 0.5) |"
                )
    fig.savefig(out_dir / "fig4_evidence.png")
    plt.close(fig)
    mae1 = max(summary.get(("1", "ep"), (np.inf,))[0], summary.get(("1", "fep"), (np.inf,))[0])
    bias_ep2 = summary.get(("2", "ep"), (0, 0))[1]
    bias_fep2 = summary.get(("2", "fep"), (0, 0))[1]
    measured = (
        "MAE vs AIS: "
        + ", ".join(
            f"ex. {k[0]} {k[1].upper()} {v[0]:.3f} (bias {v[1]:+.3f})"
            for k, v in sorted(summary.items())
        )
        + "; sequential EP (delta=0.8) failures: "
        + ", ".join(
            f"ex. {ex} {int(np.sum(e['sequential_failed']))}/{np.size(e['sequential_failed'])}"
            for ex, e in sorted(results["examples"].items())
        )
    )
    map_ratios = {
        ex: {"sigma": e["fep_map"]["scale"] / e["scale"], "nu": e["fep_map"]["df"] / e["df"]}
        for ex, e in sorted(results["examples"].items())
        if "fep_map" in e
    }
    if map_ratios:
        measured += "; fEP MAP / EP MAP: " + ", ".join(
            f"ex. {ex} sigma x{r['sigma']:.2f}, nu x{r['nu']:.2f}" for ex, r in map_ratios.items()
        )
    # When the EP MAP of nu sits at the estimator's upper bound the model is practically
    # Gaussian there: EP, fEP and AIS coincide and example 2's claim cannot be tested.
    from robustep.estimators.student_t_regressor import _DF_BOUNDS

    ex2 = results["examples"].get("2", {})
    gaussian_ex2 = ex2.get("df", 0.0) >= 0.999 * _DF_BOUNDS[1]
    if gaussian_ex2:
        measured += (
            f"; in example 2 the EP MAP of nu is at its upper bound ({ex2['df']:.0f}), so the "
            "model is practically Gaussian there and EP = fEP = AIS: the example-2 claim "
            "cannot be tested on our data"
        )
    agrees, key_number = verdict(mae1, bias_ep2, bias_fep2, gaussian_ex2, map_ratios)
    return ExperimentSummary(
        measured=measured,
        agrees=agrees,
        key_number=key_number,
        tables=["\n".join(rows)],
        figures=["fig4_evidence.png"],
        captions={
            "fig4_evidence.png": "Log marginal likelihood over (log l, log σ²_se) by EP, "
            "fractional EP and AIS for the two examples (JMLR Fig. 4); x marks the EP MAP."
        },
        notes=(
            "Data sets built from the paper's description (tgp-examples). Grid centred on our EP "
            "MAP of (log sigma_se^2, log l) (x; o: the fractional-EP MAP), nu and sigma at the EP "
            "MAP with nu optimised. Where "
            "sequential EP fails, the value shown for EP comes from robust parallel EP with the "
            "double-loop fallback (the paper uses the double loop there too). 'agrees' checks that "
            "both EP and fEP are within 0.5 nats of AIS on average in example 1 and that EP's "
            "error is above fEP's in example 2 (EP over-, fEP under-estimates); 'partly' when "
            "example 2's nu MAP is at its bound (a practically Gaussian model) or when the "
            f"fractional-EP MAP of sigma or nu differs from the EP MAP by more than a factor "
            f"{MAP_RATIO_MAX:g} (the paper's two MAPs are close)."
        ),
    )


EXPERIMENT = register(
    Experiment(
        name="tgp-evidence",
        paper="Jylänki, Vanhatalo & Vehtari (2011), JMLR",
        source="Fig. 4 (Sec. 5.3)",
        claim=(
            "EP and fractional EP log marginal likelihoods are close to AIS in example 1; in "
            "example 2 EP overestimates and fEP slightly underestimates it; sequential EP fails "
            "to converge at small length-scales."
        ),
        quick={  # a 3 x 3 grid around each MAP: under 45 s on one core
            "n_regular": 30,
            "n_grid": 3,
            "half_width": 1.5,
            "ais_temperatures": 300,
            "ais_chains": 8,
            "max_seq_iter": 100,
            "fep_map": True,
        },
        full={
            "n_regular": 40,
            "n_grid": 12,
            "half_width": 2.0,
            "ais_temperatures": 3000,
            "ais_chains": 32,
            "max_seq_iter": 500,
            "fep_map": True,
        },
        run=run,
        report=report,
    )
)
