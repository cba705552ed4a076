"""Where EP finds a fixed point for the misspecified label-noise step classifier.

The data: XOR with 20% flipped labels (``benchmarks/stress.py``'s ``step_noise_data``,
seed 5), fitted with ``NoisyStep(0.1)``, a label noise below the flip rate, under
``RBF(ell)`` (the step evidence does not depend on the amplitude).  For each length-scale
the script runs stage "accelerated" (``accelerated_expectation_propagation`` with the step
classifier's settings: marginal units, tol 1e-4, divergence 20, two restarts from zero
sites) from three starts:

* ``zero``: zero sites;
* ``continuation``: the fixed points at label noise 0.2 and 0.15 in turn, each the next
  run's start (at 0.2 the model is well specified and EP converges);
* ``power``: the fixed point of power EP (alpha 0.5, damping 0.5), the chain's last stage.

It prints, per run, whether it converged, its sweeps, its smallest residual, how it ended
(the engine's message) and the site precisions' range and negative count.  A run that is
"blocked" sits at the cavity limits: a step in every direction it tries makes a cavity
improper.  This is evidence about where a fixed point with proper cavities exists, not a
proof (docs/reliability.md, "Cost of the step classifier").

``--fit K`` instead runs ``GPClassifier(likelihood="step", label_noise=eps)`` with its
defaults on the same data, but ``K`` fallback starts (``robustep.config(
search_fallback_starts=K)``; the default is 2), and prints how its search and final fit
ended, then the default probit fit's seconds on the same data, the ratio, and both
fits' accuracy on 5000 noise-free test points, and last the step fit's final fit alone
(its fitted kernel fixed, ``optimizer=None``: one EP run from zero sites, what a cold
evaluation at the optimum costs) over the probit fit; ``--no-power-search`` leaves out the
search on power EP's evidence that follows a search whose every EP evaluation failed
(``robustep.config(search_power_fallback=False)``).  ``--power`` runs power EP at each
of ``--lengths`` from zero sites, by plain damped sweeps and by Anderson mixing.
``--stability`` runs stage "accelerated" and plain damped EP (damping 0.3, no cavity
safeguard) from zero sites at each length-scale and, for each run that converges, prints
the eigenvalues of the parallel EP map's Jacobian at its fixed point
(``robustep.ep.fixed_point_stability``): a largest real part of 1 or more means no
damping makes the fixed point attracting, so damped EP misses it from any start.
``--sequential`` adds to each length-scale of ``--stability`` sequential EP from zero
sites (the engine's ``schedule="sequential"``, damping 0 and 0.5, at most 300 sweeps).
``--newton`` with ``--lengths A,B`` follows branches of fixed points in the length-scale
by Newton's method (``robustep.ep.newton_expectation_propagation``, tol 1e-9 in site
units): from stage "accelerated"'s fixed point at A toward B, then from its fixed point
at B toward A, in steps of 0.02 (halved where Newton's method does not converge from the
previous fixed point, down to 0.001, where the branch is reported to end).  For each
point it prints the Newton steps, log Z, the largest real part of the Jacobian's
eigenvalues, and min |1 − λ|, which goes to 0 where the branch folds (I − J singular).
``--data``, ``--flip`` and ``--seed`` choose the data (default: XOR, 20% flips, seed 5).

Usage::

    python benchmarks/step_fixed_points.py                      # n = 2000 (minutes)
    python benchmarks/step_fixed_points.py --n 300 --lengths 1,0.25,0.0625
    python benchmarks/step_fixed_points.py --fit 3              # about 10 minutes
    python benchmarks/step_fixed_points.py --fit 2              # the default fit (1 minute)
    python benchmarks/step_fixed_points.py --fit 2 --no-power-search   # about 6 minutes
    python benchmarks/step_fixed_points.py --power --lengths 1,0.25
    python benchmarks/step_fixed_points.py --stability --n 200 --seed 6 \
        --lengths 0.8,0.7,0.66,0.62,0.6,0.56,0.54,0.52,0.5,0.48  # about 15 s
    python benchmarks/step_fixed_points.py --stability --sequential --n 200 --seed 6 \
        --lengths 0.8,0.66,0.6,0.56,0.52,0.5  # about 2 minutes
    python benchmarks/step_fixed_points.py --fit 2 --n 200 --seed 6   # seconds
    python benchmarks/step_fixed_points.py --newton --n 200 --seed 6 --lengths 0.8,0.5
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib.util
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF

from robustep import GPClassifier, config
from robustep.ep import (
    InferenceStrategy,
    expectation_propagation,
    fixed_point_stability,
    newton_expectation_propagation,
    run_chain,
)
from robustep.ep.accelerated import accelerated_expectation_propagation
from robustep.likelihoods import NoisyStep

#: the step classifier's chain, whose stages "accelerated" and "power" the runs use
STRATEGY = InferenceStrategy.auto(1000, accelerate=True, tol_units="marginal")
#: the estimator's default tolerance
TOL = 1e-4
#: the sweeps a sequential run of ``--stability --sequential`` may take
SEQUENTIAL_SWEEPS = 300


def step_kernel(X, ell):
    """RBF(ell) on X (n, d) with 1e-8 added to its diagonal: (n, n)."""
    K = RBF(ell)(X)
    K[np.diag_indices_from(K)] += 1e-8
    return K


@functools.cache
def _stress():
    """benchmarks/stress.py as a module, loaded once."""
    path = Path(__file__).resolve().parent / "stress.py"
    spec = importlib.util.spec_from_file_location("_stress_step_fixed_points", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def accelerated(K, y, eps, init=None):
    """Stage "accelerated" as a final fit runs it, from ``init``."""
    return accelerated_expectation_propagation(
        K, y, NoisyStep(eps), init=init, tol=TOL, tol_units=STRATEGY.tol_units,
        **STRATEGY.accelerated.engine_options(),
    )  # fmt: skip


def runs(K, y, eps):
    """(start, EPResult, sweeps before the last run) for the three starts."""
    yield "zero", accelerated(K, y, eps), 0
    previous, sweeps = None, 0
    for step in (0.2, 0.15):
        res = accelerated(K, y, step, previous)
        sweeps += res.n_iter
        if not res.converged:
            yield f"continuation (failed at {step:g})", res, sweeps
            break
        previous = (res.site_precision, res.site_shift)
    else:
        yield "continuation", accelerated(K, y, eps, previous), sweeps
    power = expectation_propagation(K, y, NoisyStep(eps), power=STRATEGY.power.power,
                                    damping=STRATEGY.power.damping, tol=TOL,
                                    tol_units=STRATEGY.tol_units)  # fmt: skip
    start = (power.site_precision, power.site_shift) if power.converged else None
    yield (
        "power" + ("" if power.converged else " (did not converge)"),
        accelerated(K, y, eps, start),
        power.n_iter,
    )


def fit(X, y, eps, fallback_starts, power_search=True, test=None):
    """The default step fit with ``fallback_starts`` fallback starts (and the search on
    power EP's evidence where every EP evaluation fails, unless ``power_search`` is
    False), then the default probit fit on the same data: a summary line each, with the
    accuracy on ``test`` (X, y) and the step fit's seconds over the probit fit's."""
    settings = dict(search_fallback_starts=fallback_starts, search_power_fallback=power_search)
    with config(**settings), warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        est = GPClassifier(likelihood="step", label_noise=eps).fit(X, y)
        seconds = time.perf_counter() - t0
    search = est.optimizer_result_
    t0 = time.perf_counter()
    probit = GPClassifier().fit(X, y)
    probit_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    with config(**settings), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        final = GPClassifier(likelihood="step", label_noise=eps, kernel=est.kernel_,
                             optimizer=None).fit(X, y)  # fmt: skip
    final_seconds = time.perf_counter() - t0
    if test is None:
        accuracy = ""
    else:
        accuracy = (f"; accuracy on {len(test[1])} noise-free test points: step "
                    f"{np.mean(est.predict(test[0]) == test[1]):.3f}, probit "
                    f"{np.mean(probit.predict(test[0]) == test[1]):.3f}")  # fmt: skip
    return (
        f"{fallback_starts} fallback starts, power-EP search {'on' if power_search else 'off'}: "
        f"{seconds:.1f} s; search: {search.n_evaluations} evaluations ({search.n_failures} "
        f"failed), {search.n_starts} starts, on {search.approximation or 'EP'}'s evidence, "
        f"length-scale {float(np.exp(search.x[-1])):.3g}, log evidence "
        f"{search.log_evidence:.2f}; final fit: converged_ {est.converged_}, method_used_ "
        f"{est.method_used_}, {sum(issubclass(w.category, ConvergenceWarning) for w in seen)} "
        f"ConvergenceWarning\nprobit fit: {probit_seconds:.1f} s, "
        f"{probit.optimizer_result_.n_evaluations} evaluations, length-scale "
        f"{float(probit.kernel_.k2.length_scale):.3g}; step / probit: "
        f"{seconds / probit_seconds:.1f}x{accuracy}\nthe step fit's final fit alone (its "
        f"kernel fixed, optimizer=None, from zero sites): {final_seconds:.2f} s, "
        f"{final.method_used_}, {final.n_iter_} sweeps; / probit fit: "
        f"{final_seconds / probit_seconds:.1f}x"
    )


def power_runs(X, y, eps, lengths):
    """Stage "power" of the chain at each length-scale, from zero sites, as its plain
    damped sweeps and as Anderson-accelerated power EP (``InferenceStrategy.power_fit``,
    which falls back to the plain sweeps where Anderson mixing fails): one line each."""
    plain_stage = dataclasses.replace(STRATEGY, stages=("power",))
    strategies = (plain_stage, STRATEGY.power_fit())
    print("| length-scale | plain: sweeps | s | Anderson: sweeps | s | log Z (plain) | "
          "log Z (Anderson) |\n|" + "---|" * 7)  # fmt: skip
    for ell in lengths:
        K = RBF(ell)(X)
        cells = []
        for strategy in strategies:
            t0 = time.perf_counter()
            res = run_chain(K, y, NoisyStep(eps), strategy, tol=TOL)
            seconds = time.perf_counter() - t0
            cells.append((f"{res.n_iter}{'' if res.converged else ' (failed)'}", seconds, res))
        (plain, t_plain, r_plain), (fast, t_fast, r_fast) = cells
        print(f"| {ell:g} | {plain} | {t_plain:.1f} | {fast} | {t_fast:.1f} | "
              f"{r_plain.log_Z:.4f} | {r_fast.log_Z:.4f} |", flush=True)  # fmt: skip


def sequential(K, y, eps, damping, max_iter=SEQUENTIAL_SWEEPS):
    """Sequential EP (rank-one updates, the engine's safeguards) from zero sites."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return expectation_propagation(
            K, y, NoisyStep(eps), schedule="sequential", damping=damping, tol=TOL,
            tol_units=STRATEGY.tol_units, max_iter=max_iter,
        )  # fmt: skip


def stability_rows(X, y, eps, lengths, damping=0.3, sequential_dampings=()):
    """Per length-scale, two runs from zero sites: stage "accelerated", and plain damped
    parallel EP (``damping``, no cavity safeguard: a sweep that makes a cavity improper is
    taken, and that site waits), then sequential EP at each of ``sequential_dampings``;
    for each run that converged, the stability of parallel EP at its fixed point.  One
    table row per run."""
    print("| length-scale | run | sweeps | smallest residual | log Z | largest Re λ | "
          "spectral radius | smallest damping |\n|" + "---|" * 8)  # fmt: skip
    for ell in lengths:
        K = step_kernel(X, ell)
        plain = _stress().plain_damped_ep(K, y, NoisyStep(eps), damping, tol=TOL,
                                          tol_units=STRATEGY.tol_units, max_iter=1000)  # fmt: skip
        rows = [("accelerated", accelerated(K, y, eps)), (f"damped {damping:g}", plain)]
        rows += [(f"sequential, damping {d:g}", sequential(K, y, eps, d))
                 for d in sequential_dampings]  # fmt: skip
        for name, res in rows:
            row = (f"| {ell:g} | {name} | {res.n_iter}{'' if res.converged else ' (failed)'} | "
                   f"{min(res.history['residual']):.2g} | ")  # fmt: skip
            if not res.converged:
                print(row + "– | – | – | – |", flush=True)
                continue
            found = fixed_point_stability(K, y, NoisyStep(eps), res)
            smallest = found.smallest_damping
            print(row + f"{res.log_Z:.3f} | {found.largest_real_part:.3g} | "
                  f"{found.spectral_radius:.3g} | "
                  f"{'none' if smallest is None else f'{smallest:.2g}'} |", flush=True)  # fmt: skip


def newton_branch(X, y, eps, start, stop, step=0.02, smallest=1e-3):
    """Rows (length-scale, Newton steps, log Z, largest Re λ, min |1 − λ|) along the
    branch of fixed points through stage "accelerated"'s fixed point at ``start``,
    followed toward ``stop`` by Newton's method; the first row is the start (0 Newton
    steps).  A row (length-scale, None, ...) marks where the branch ends: no step of at
    least ``smallest`` converged."""

    def row(ell, K, res, steps):
        found = fixed_point_stability(K, y, NoisyStep(eps), res)
        return (ell, steps, res.log_Z, found.largest_real_part,
                float(np.min(np.abs(1.0 - found.eigenvalues))))  # fmt: skip

    K = step_kernel(X, start)
    previous = accelerated(K, y, eps)
    if not previous.converged:
        return [(start, None, np.nan, np.nan, np.nan)]
    rows, ell, direction = [row(start, K, previous, 0)], start, np.sign(stop - start)
    while direction * (stop - ell) > 1e-12:
        h = min(step, abs(stop - ell))
        while h >= smallest:
            target = stop if h == abs(stop - ell) else ell + direction * h
            K = step_kernel(X, target)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                try:
                    res = newton_expectation_propagation(K, y, NoisyStep(eps), previous, tol=1e-9)
                except ValueError:  # an improper cavity at the previous fixed point
                    res = None
            if res is not None and res.converged:
                break
            h *= 0.5
        else:
            rows.append((ell, None, np.nan, np.nan, np.nan))
            return rows
        rows.append(row(target, K, res, res.n_iter))
        previous, ell = res, target
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--lengths", default="1,0.25,0.0625,0.03,0.0156")
    parser.add_argument("--eps", type=float, default=0.1)
    parser.add_argument("--fit", type=int, metavar="K", help="the default fit, K fallback starts")
    parser.add_argument("--no-power-search", action="store_true",
                        help="--fit without the search on power EP's evidence")  # fmt: skip
    parser.add_argument("--power", action="store_true",
                        help="plain and Anderson-accelerated power EP at --lengths")  # fmt: skip
    parser.add_argument("--stability", action="store_true",
                        help="parallel EP's stability at the fixed points")  # fmt: skip
    parser.add_argument("--sequential", action="store_true",
                        help="--stability with sequential EP runs as well")  # fmt: skip
    parser.add_argument("--newton", action="store_true",
                        help="follow branches of fixed points between two --lengths")  # fmt: skip
    parser.add_argument("--data", choices=("xor", "smooth"), default="xor")
    parser.add_argument("--flip", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args(argv)
    stress = _stress()
    X, y = stress.step_noise_data(args.data, args.n, args.flip, args.seed)
    if args.fit is not None:
        test = stress.step_noise_data(args.data, 5000, 0.0, 99)
        print(fit(X, y, args.eps, args.fit, not args.no_power_search, test))
        return
    if args.power:
        power_runs(X, y, args.eps, [float(v) for v in args.lengths.split(",")])
        return
    print(f"{args.data}, {args.flip:.0%} flips, n = {args.n}, seed {args.seed}, "
          f"NoisyStep({args.eps:g})\n")  # fmt: skip
    if args.newton:
        a, b = (float(v) for v in args.lengths.split(","))
        print("| from | length-scale | Newton steps | log Z | largest Re λ | min abs(1 − λ) "
              "|\n|" + "---|" * 6)  # fmt: skip
        for start, stop in ((a, b), (b, a)):
            for ell, steps, log_Z, real, gap in newton_branch(X, y, args.eps, start, stop):
                if steps is None:
                    print(f"| {start:g} | {ell:.4g} | the branch ends | | | |", flush=True)
                else:
                    print(f"| {start:g} | {ell:.4g} | {steps} | {log_Z:.4f} | {real:.3f} | "
                          f"{gap:.2g} |", flush=True)  # fmt: skip
        return
    if args.stability:
        stability_rows(X, y, args.eps, [float(v) for v in args.lengths.split(",")],
                       sequential_dampings=(0.0, 0.5) if args.sequential else ())  # fmt: skip
        return
    print("| length-scale | start | converged | sweeps (before) | smallest residual | how it "
          "ended | site precisions | negative sites | log Z | s |\n|" + "---|" * 10)  # fmt: skip
    for ell in (float(v) for v in args.lengths.split(",")):
        K = step_kernel(X, ell)
        t0 = time.perf_counter()
        for start, res, before in runs(K, y, args.eps):
            ended = "converged" if res.converged else res.message.split("(")[1].split(")")[0]
            print(f"| {ell:g} | {start} | {res.converged} | {res.n_iter} ({before}) | "
                  f"{min(res.history['residual']):.2g} | {ended} | "
                  f"{res.site_precision.min():.3g} to {res.site_precision.max():.3g} | "
                  f"{int(np.sum(res.site_precision < 0))} | {res.log_Z:.2f} | "
                  f"{time.perf_counter() - t0:.1f} |", flush=True)  # fmt: skip
            t0 = time.perf_counter()


if __name__ == "__main__":
    main()
