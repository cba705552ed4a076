"""Which stress cells of BayesPointMachine(method="ep") have a valid t-EP fixed point.

For every BayesPointMachine "ep" cell of ``benchmarks/stress.py`` (df = 10, label_noise =
0.1, the estimator's defaults; cells with the same data are run once) it prints:

* sweeps: whether damped sequential t-EP (damping 0.5, 300 sweeps) converges;
* fit: ``converged_`` of ``BayesPointMachine(max_iter=300)``, which solves the fixed-point
  equations by Newton's method and the dogleg trust-region method when the sweeps do not
  converge (``fixed_point_solved_``), and its ``log_marginal_likelihood_value_``;
* Gaussian EP: whether EP with df = inf has a proper fixed point at label_noise = 0.1,
  followed by Newton's method from its fixed point at label_noise eps0 = 0.45 (then 0.3)
  down to 0.1 (continuation in the label noise,
  :func:`robustep.tep.fixed_point.follow_fixed_point`);
* branch to df = 10: that fixed point followed from df = 1e5 down to df = 10 at
  label_noise = 0.1 (continuation in log df, shorter steps near trouble).  Either it
  reaches df = 10, or it ends at a fold df* > 10: the smallest singular value of
  ``I - dF/ds`` (F the site map) goes to 0 as df -> df*, so the branch of fixed points
  turns back there and does not exist at df = 10;
* exact log evidence: ``log E[prod_i l_i(w)]`` under the prior, a Monte Carlo average over
  2e5 directions (the noisy step depends only on the direction of w, and both the
  Gaussian and the Student-t prior are spherical, so the direction is uniform);
* valid: "yes" when a proper t-EP fixed point at df = 10 was found (by the fit or the
  continuation), "none found" otherwise.  The smallest singular value (a dense SVD) is
  computed up to ``robustep.config(tep_fixed_point_max_sites=...)`` points.

``--gaussian-ep``: for the BayesPointMachine cells (those of ``--names``, default
"n=4000"), whether the GP engine's EP chain finds Gaussian EP's fixed point of the linear
model at each label noise of ``GAUSSIAN_EP_NOISE`` (0.45 down to 0.1): the exact rank-k
prior ``K = Z Z^T`` (``DiagonalPlusLowRankPrior`` with a zero diagonal: EP in weight
space, O(n k^2) a sweep, no jitter), the label-noise step classifier's chain
(``InferenceStrategy.auto(1000, accelerate=True, tol_units="marginal")``, tol 1e-4) from
zero sites and, where that fails, from the last fixed point found (at a larger label
noise); a fixed point found is then polished by Newton's method (relative tolerance
1e-6).  The continuations above follow one branch by Newton's method; these are the
library's iterative methods, run from zero sites first.

``--process``: the StudentTProcessClassifier cells (label_noise = 0, df = 10) with at most
``--max-n`` points (200) that do not converge: whether Newton's method (11 starts) or the
trust-region method finds a proper fixed point for df = inf and for df = 10, and where the
branch of the Gaussian-process EP fixed point, followed in df, ends.  The continuations
accept a fixed point when every site's change is below the tolerance relative to the
site's size (``relative=True`` of :func:`robustep.tep.fixed_point.solve_fixed_point`):
site precisions reach 1e5-1e7 on these cells, where rounding keeps absolute changes
above 1e-5.

Usage::

    python benchmarks/tep_fixed_points.py            # all cells (a few minutes)
    python benchmarks/tep_fixed_points.py --process  # the Student-t process cells
    python benchmarks/tep_fixed_points.py --process --max-n 600 --names n=600
    python benchmarks/tep_fixed_points.py --names "20% flipped labels"
    python benchmarks/tep_fixed_points.py --gaussian-ep   # "n=4000" (about two minutes)
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from robustep import BayesPointMachine, get_config
from robustep.ep import InferenceStrategy, run_chain
from robustep.likelihoods import NoisyStep
from robustep.posterior import DiagonalPlusLowRankPrior
from robustep.tep.ep import linear_tep
from robustep.tep.fixed_point import (
    LinearRankOnePosterior,
    continue_from_gaussian_ep,
    follow_in_df,
    site_map_jacobian,
    solve_fixed_point,
)

DF, EPS = 10.0, 0.1
#: the label noises of ``--gaussian-ep``, in order
GAUSSIAN_EP_NOISE = (0.45, 0.4, 0.35, 0.3, 0.25, 0.2, 0.175, 0.15, 0.14, 0.13, 0.12, 0.11, 0.1)
#: the chain of ``--gaussian-ep``: the label-noise step classifier's
GAUSSIAN_EP_CHAIN = InferenceStrategy.auto(1000, accelerate=True, tol_units="marginal")
#: the relative tolerance of the Newton polish of ``--gaussian-ep``'s fixed points
POLISH_TOL = 1e-6


def _stress():
    path = Path(__file__).resolve().parent / "stress.py"
    spec = importlib.util.spec_from_file_location("_stress_grid_tep_cells", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def bpm_cells():
    """[(names, X, y)] of the BayesPointMachine "ep" stress cells, same data merged."""
    out = []
    for cell in _stress().cells():
        if cell.estimator != "BayesPointMachine" or cell.method != "ep":
            continue
        for entry in out:
            if (
                entry[1].shape == cell.X.shape
                and np.array_equal(entry[1], cell.X)
                and (np.array_equal(entry[2], cell.y))
            ):
                entry[0].append(cell.name)
                break
        else:
            out.append(([cell.name], cell.X, cell.y))
    return out


def exact_log_evidence(Z, y, eps, directions=200_000, seed=0, chunk=20_000):
    """log E_u[prod_i l_i(u)] over directions u uniform on the sphere (Monte Carlo)."""
    rng = np.random.default_rng(seed)
    V = Z * y[:, None]
    logs = []
    for start in range(0, directions, chunk):
        u = rng.standard_normal((Z.shape[1], min(chunk, directions - start)))
        log_l = np.where(V @ u > 0, np.log1p(-eps), np.log(eps)).sum(0)
        logs.append(log_l)
    log_l = np.concatenate(logs)
    top = log_l.max()
    return float(top + np.log(np.mean(np.exp(log_l - top))))


def _posterior(Z):
    k = Z.shape[1]

    def make(tau, nu):
        try:
            return LinearRankOnePosterior(Z, np.eye(k), tau, nu)
        except np.linalg.LinAlgError:
            return None

    return make


def _smallest_singular_value(post, tau, nu, y, df, k):
    jac = site_map_jacobian(post, tau, nu, y, df, EPS, k)
    jac[np.diag_indices(jac.shape[0])] -= 1.0
    return float(np.linalg.svd(jac, compute_uv=False)[-1])


def continuation(Z, y, singular_values=True, starts=(0.45, 0.3), relative=True):
    """Follow the proper fixed point of Gaussian EP (df = inf) from label noise eps0 (each
    of ``starts``) to 0.1, then in log df from 1e5 down to 10
    (:func:`robustep.tep.fixed_point.continue_from_gaussian_ep`, the estimator's last
    fallback, here with tighter tolerances and more steps).  Returns, for the first path
    that reaches df = 10 or else the last one: (Gaussian EP fixed point at 0.1 found, end
    of the df branch: 10.0 or the fold df*, the smallest singular value of I - dF/ds at
    the last point (None unless ``singular_values``: a dense SVD), reached df = 10)."""
    path = continue_from_gaussian_ep(
        Z, y, DF, EPS, _posterior(Z), damping=0.5, tol=1e-9, df_tol=1e-10,
        sweeps=(1, 2, 3, 5, 300), starts=starts, max_solves=400, df_max_solves=1000,
        relative=relative,
    )  # fmt: skip
    sv = None
    if singular_values and path.gaussian and path.post is not None:
        sv = _smallest_singular_value(path.post, path.tau, path.nu, y, path.df_end, Z.shape[1])
    return path.gaussian, path.df_end, sv, path.reached


def run(names=None):
    rows = []
    limit = get_config().tep_fixed_point_max_sites  # dense SVDs up to this size
    for cell_names, X, y in bpm_cells():
        if names and not set(names) & set(cell_names):
            continue
        t0 = time.perf_counter()
        Z = np.column_stack([X, np.ones(len(y))])
        yf = y.astype(float)
        with np.errstate(all="ignore"):
            _, info = linear_tep(Z, yf, df=DF, eps=EPS, max_iter=300, damping=0.5)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = BayesPointMachine(max_iter=300).fit(X, y)
        row = {
            "cell": " / ".join(cell_names),
            "n": len(y),
            "sweeps": info.converged,
            "fit": est.converged_,
            "newton": est.fixed_point_solved_,
            "evidence": est.log_marginal_likelihood_value_,
            "exact": exact_log_evidence(Z, yf, EPS),
        }
        if not est.converged_:
            gauss, end, sv, reached = continuation(Z, yf, singular_values=len(y) <= limit)
            row.update(gauss=gauss, end=end, sv=sv, valid="yes" if reached else "none found")
        else:
            row.update(gauss=None, end=None, sv=None, valid="yes")
        row["seconds"] = time.perf_counter() - t0
        rows.append(row)
        print(row, flush=True)
    return rows


def format_rows(rows):
    lines = [
        "| cell | n | sweeps converge | fit converged_ | by Newton / trust region | fit log "
        "evidence | exact log evidence | Gaussian EP fixed point | df branch ends at | "
        "valid t-EP fixed point |",
        "|" + "---|" * 10,
    ]

    def show(v, fmt="{}"):
        return "-" if v is None else fmt.format(v)

    for r in rows:
        end = r["end"]
        if end is not None:
            end = (
                "df = 10 (reached)"
                if end <= DF
                else f"fold at df* = {end:.4g} (σ_min {r['sv']:.1g})"
            )
        lines.append(
            f"| {r['cell']} | {r['n']} | {r['sweeps']} | {r['fit']} | {r['newton']} | "
            f"{r['evidence']:.2f} | {r['exact']:.2f} | {show(r['gauss'])} | {show(end)} | "
            f"{r['valid']} |"
        )
    return "\n".join(lines)


def gaussian_ep_runs(Z, y, noise=GAUSSIAN_EP_NOISE, strategy=GAUSSIAN_EP_CHAIN, tol=1e-4):
    """Gaussian EP of the linear model f = Z w, w ~ N(0, I), at each label noise of
    ``noise``: the chain from zero sites, then (where it fails) from the last converged
    fixed point; each converged one polished by Newton's method (relative tolerance
    ``POLISH_TOL``, :func:`robustep.tep.fixed_point.solve_fixed_point`).  A list of dicts:
    eps, converged, start ("zero sites" or "warm"), sweeps (of the runs made), polished
    (None where not converged), and the smallest residual and site precisions' range of
    the converged run (else of the run from zero sites), and sites: its (tau, nu), each (n,)
    (None where not converged)."""
    prior = DiagonalPlusLowRankPrior(np.zeros(len(y)), Z)
    rows, previous = [], None
    for eps in noise:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = run_chain(prior, y, NoisyStep(eps), strategy, tol=tol)
            start, sweeps = "zero sites", res.n_iter
            if not res.converged and previous is not None:
                warm = run_chain(prior, y, NoisyStep(eps), strategy, tol=tol, init=previous)
                sweeps += warm.n_iter
                if warm.converged:
                    res, start = warm, "warm"
        polished = None
        if res.converged:
            previous = (res.site_precision, res.site_shift)
            polished = solve_fixed_point(
                _posterior(Z), y, np.inf, eps, Z.shape[1], res.site_precision, res.site_shift,
                tol=POLISH_TOL, relative=True,
            ) is not None  # fmt: skip
        tau = res.site_precision
        rows.append(dict(eps=eps, converged=bool(res.converged), start=start, sweeps=sweeps,
                         polished=polished, residual=float(np.min(res.history["residual"])),
                         tau=(float(tau.min()), float(tau.max())),
                         sites=(tau, res.site_shift) if res.converged else None))  # fmt: skip
    return rows


def gaussian_ep(names=("n=4000",)):
    """The ``--gaussian-ep`` table of the BayesPointMachine cells named ``names``."""
    print("| cell | n | label noise | converged | from | sweeps | Newton polish | "
          "smallest residual | site precisions |\n|" + "---|" * 9)  # fmt: skip
    for cell_names, X, y in bpm_cells():
        if not set(names) & set(cell_names):
            continue
        Z = np.column_stack([X, np.ones(len(y))])
        for row in gaussian_ep_runs(Z, y.astype(float)):
            print(f"| {' / '.join(cell_names)} | {len(y)} | {row['eps']:g} | {row['converged']} "
                  f"| {row['start'] if row['converged'] else '-'} | {row['sweeps']} | "
                  f"{ {None: '-', True: 'converges', False: 'fails'}[row['polished']]} | "
                  f"{row['residual']:.2g} | {row['tau'][0]:.3g} to {row['tau'][1]:.3g} |",
                  flush=True)  # fmt: skip


def process_cells(max_n=200):
    """[(name, K, y)] of the StudentTProcessClassifier cells that do not converge, n <= max_n."""
    out = []
    for cell in _stress().cells():
        if cell.estimator != "StudentTProcessClassifier" or len(cell.y) > max_n:
            continue
        est = cell.make()
        if est.kernel is None:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(cell.X, cell.y)
        if not est.converged_:
            out.append((cell.name, est.kernel_(cell.X), cell.y.astype(float)))
    return out


def process_row(name, K, y, df=DF, eps=0.0):
    """Newton's method from 11 starts and the trust-region method, for df and for df = inf;
    the Gaussian-process EP fixed point (damped sweeps polished by Newton's method to 1e-6
    relative to each site's size: site precisions reach 1e5-1e7 on these cells) followed
    in log df down to df: the end of that branch and sigma_min there."""
    from robustep.tep.process import process_posterior, process_tep

    n = y.size

    def make(tau, nu):
        return process_posterior(K, tau, nu)

    row = {"cell": name, "n": n}
    for model_df in (np.inf, df):
        starts = [(np.zeros(n), np.zeros(n))]
        for damping in (0.5, 0.9):
            tau = nu = None
            for _ in range(5):
                with np.errstate(all="ignore"):
                    tau, nu, post, _ = process_tep(
                        K, y, df=model_df, eps=eps, max_iter=1, damping=damping, tau=tau, nu=nu
                    )
                if post is None:
                    break
                starts.append((tau, nu))
        found = any(
            solve_fixed_point(make, y, model_df, eps, n, *start, tol=1e-6) is not None
            for start in starts
        ) or (len(starts) > 1 and solve_fixed_point(
            make, y, model_df, eps, n, *starts[1], tol=1e-6, max_newton=100, method="dogbox"
        ) is not None)  # fmt: skip
        row["found df=inf" if np.isinf(model_df) else "found df"] = found
    with np.errstate(all="ignore"):
        tau, nu, _, info = process_tep(
            K, y, df=np.inf, eps=eps, max_iter=3000, damping=0.5, adaptive=True, tol=1e-12
        )
    start = solve_fixed_point(make, y, np.inf, eps, n, tau, nu, tol=1e-6, relative=True)
    row.update(gp_ep=start is not None, end=None, sv=None, largest_site=float(np.max(tau)))
    if start is not None:
        tau, nu, post, row["end"] = follow_in_df(
            make, y, n, start[0], start[1], df, eps, tol=1e-6, max_solves=1000, relative=True
        )
        if post is not None:
            row["sv"] = _smallest_singular_value_eps(post, tau, nu, y, row["end"], n, eps)
    print(row, flush=True)
    return row


def _smallest_singular_value_eps(post, tau, nu, y, df, k, eps):
    jac = site_map_jacobian(post, tau, nu, y, df, eps, k)
    jac[np.diag_indices(jac.shape[0])] -= 1.0
    return float(np.linalg.svd(jac, compute_uv=False)[-1])


def format_process_rows(rows):
    lines = [
        "| cell | n | fixed point found, df = inf | fixed point found, df = 10 | GP-EP fixed "
        "point | its branch in df ends at |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        end = "-"
        if r["end"] is not None:
            sv = "" if r["sv"] is None else f" (σ_min {r['sv']:.1g})"
            end = "df = 10 (reached)" if r["end"] <= DF else f"fold at df* = {r['end']:.4g}{sv}"
        lines.append(
            f"| {r['cell']} | {r['n']} | {r['found df=inf']} | {r['found df']} | "
            f"{r['gp_ep']} | {end} |"
        )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--names", nargs="*", default=None, help="cell names (default: all)")
    parser.add_argument(
        "--process", action="store_true",
        help="the StudentTProcessClassifier cells (n <= --max-n) that do not converge instead",
    )  # fmt: skip
    parser.add_argument(
        "--max-n", type=int, default=200, help="--process: the largest cell (default 200)"
    )
    parser.add_argument(
        "--gaussian-ep", action="store_true",
        help="whether the EP chain finds Gaussian EP's fixed point on the --names cells "
        "(default n=4000) from label noise 0.45 down to 0.1",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.gaussian_ep:
        gaussian_ep(args.names or ("n=4000",))
        return
    if args.process:
        rows = [
            process_row(name, K, y)
            for name, K, y in process_cells(args.max_n)
            if not args.names or name in args.names
        ]
        print(format_process_rows(rows))
        return
    print(format_rows(run(args.names)))


if __name__ == "__main__":
    main()
