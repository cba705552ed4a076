"""EP1 / LA1 CPU time of tgp-benchmark units (JMLR Table 1: EP1 ≈ 0.8 x LA1), in one process.

Usage:
    ROBUSTEP_DATA=/work/shared/datasets nice .venv/bin/python benchmarks/tgp_cost.py \
        [--friedman-sets 0 1 2] [--boston-folds 0] [--methods LA1 EP1] [--repeat 1] \
        [--concrete-folds 0 1] [--evaluations]

Each (data set, split, method) is fitted exactly as a unit of ``robustep reproduce
tgp-benchmark --full`` (``tgp_benchmark._fit_predict``: ARD kernel, 2 random restarts,
one BLAS thread, CPU process time including the predictions).  The methods of one split
run back to back in this process, so their ratio is meaningful on a loaded machine where
absolute seconds are not.  Prints, per split, CPU seconds, the fitted sigma and nu and
the test MLPD of every method (to check that a speed change left the fits where they
were), and EP1/LA1; then the ratio of the summed CPU times per data set.  With
``--repeat r`` every unit runs r times (interleaved) and the minimum counts.

``--methods`` takes the table's names (LA1, EP1, EP2, ...) and AUTO, the estimator's
default ``method="auto"`` with the same protocol.

``--evaluations`` adds, after each unit, what its hyperparameter search's EP runs cost
(the runs with the search's sweep budget, ``robustep.config``'s ``search_max_iter``; the
same measurement runs on commits before the factorisation budget, with ``PYTHONPATH`` set
to their ``src``):
how many converged, failed (not converged within the budget; either marked when the run
entered the double loop) or ran out of posterior factorisations, their CPU seconds, and
the factorisations they made (in all and in the largest run) -- the measurement behind
``search_factorisations_per_sweep`` (docs/benchmarks.md, "Search evaluations that fail").

``--per-evaluation`` adds, after each unit, what one successful objective evaluation of
its hyperparameter search costs on average: the evaluations (evidence gradients formed),
the inferences (EP runs, Laplace mode searches, ...; failed ones included), posterior
factorisations and Student-t tilted-moment quadratures (EP) or Newton steps (Laplace) per
inference, and the unit's CPU milliseconds per evaluation -- why EP1 costs more than LA1
at the same number of evaluations (docs/benchmarks.md, "Twelfth session").

``--fixed`` adds, per split, the analogue of the paper's "fixed" row of Table 1 (EP 5.5 x
LA with the hyperparameters fixed): EP1's optimum is found once (one start), then
``method="ep"`` and ``method="laplace"`` are fitted from cold at those hyperparameters
(``optimizer=None``, predictions included), ``--repeat`` times each (minimum), and their
CPU ratio printed -- the cost of one inference without the search around it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np


class SearchRunLog:
    """Records every search EP run of StudentTGPRegressor (wraps the core's ``infer`` and counts
    ``DensePrior.posterior`` calls) while installed."""

    def __init__(self):
        from robustep.estimators._regressor_inference import InferenceCore
        from robustep.posterior import DensePrior

        self.core_cls, self.prior_cls = InferenceCore, DensePrior
        # (outcome, CPU s, factorisations); outcome: converged or failed (either "in the
        # double loop" when the run entered it), or budget (out of factorisations; an
        # "auto" run that ran out in a stage counts as failed)
        self.runs = []
        self.factorisations = 0
        self._infer = InferenceCore.infer
        self._posterior = DensePrior.posterior
        log = self

        def posterior(prior, *args, **kwargs):
            log.factorisations += 1
            return log._posterior(prior, *args, **kwargs)

        # a search run has the search's sweep budget
        import robustep

        budget = robustep.get_config().search_max_iter

        def infer(core, *args, **kwargs):
            search = kwargs.get("max_iter") == budget
            if not (search and core.method in ("ep", "fractional", "auto")):
                return log._infer(core, *args, **kwargs)
            t0, f0 = time.process_time(), log.factorisations
            res = log._infer(core, *args, **kwargs)
            outcome = "converged" if res.converged else "failed"
            if "(max_factorisations)" in res.message:  # the engine's status in the message
                outcome = "budget"
            elif "double-loop" in res.history["phase"]:
                outcome += " in the double loop"
            log.runs.append((outcome, time.process_time() - t0, log.factorisations - f0))
            return res

        InferenceCore.infer = infer
        DensePrior.posterior = posterior

    def close(self):
        self.core_cls.infer = self._infer
        self.prior_cls.posterior = self._posterior

    def summary(self):
        """One line per outcome: runs, CPU s, factorisations (and the largest run's)."""
        parts = []
        for outcome in sorted({r[0] for r in self.runs}):
            runs = [r for r in self.runs if r[0] == outcome]
            parts.append(
                f"{outcome} {len(runs)} runs, {sum(r[1] for r in runs):.1f} CPU s, "
                f"{sum(r[2] for r in runs)} factorisations (largest run "
                f"{max(r[2] for r in runs)})"
            )
        self.runs = []
        return "; ".join(parts) or "no search runs"


class EvaluationCounts:
    """Counts, while installed, the evidence gradients (one per successful objective
    evaluation), the inferences with their Newton steps (Laplace), the dense posterior
    factorisations and the Student-t quadratures (tilted moments and their gradients)."""

    def __init__(self):
        from robustep.estimators._regressor_inference import InferenceCore
        from robustep.likelihoods import StudentT
        from robustep.posterior import DensePrior

        self.counts = dict.fromkeys(
            ("evaluations", "inferences", "newton", "factorisations", "quadratures"), 0
        )
        cls = InferenceCore
        self._patched = [
            (cls, "gradient", cls.gradient, "evaluations"),
            (cls, "infer", cls.infer, "inferences"),
            (DensePrior, "posterior", DensePrior.posterior, "factorisations"),
            (StudentT, "tilted_moments", StudentT.tilted_moments, "quadratures"),
            (StudentT, "tilted_log_Z_gradient", StudentT.tilted_log_Z_gradient, "quadratures"),
        ]
        for owner, name, original, key in self._patched:
            setattr(owner, name, self._counting(original, key))

    def _counting(self, original, key):
        counts = self.counts

        def wrapper(*args, **kwargs):
            counts[key] += 1
            out = original(*args, **kwargs)
            if key == "inferences" and hasattr(out, "mode"):  # a Laplace result
                counts["newton"] += int(getattr(out, "n_iter", 0))
            return out

        return wrapper

    def summary(self, cpu_seconds):
        """One line for the unit just fitted; resets the counts."""
        c = self.counts
        per = max(c["inferences"], 1)
        line = (
            f"{c['evaluations']} evaluations, {c['inferences']} inferences; per inference "
            f"{c['factorisations'] / per:.2f} EP factorisations, {c['quadratures'] / per:.2f} "
            f"Student-t quadratures, {c['newton'] / per:.2f} Newton steps; "
            f"{1e3 * cpu_seconds / max(c['evaluations'], 1):.2f} CPU ms per evaluation"
        )
        for key in c:
            c[key] = 0
        return line

    def close(self):
        for owner, name, original, _ in self._patched:
            setattr(owner, name, original)


def fixed_hyperparameter_cpu(Xtr, ytr, Xte, yte, seed, repeat=1):
    """{"ep": CPU s, "laplace": CPU s} of a cold fit and the predictions at EP1's optimum.

    The inputs are standardised and the kernel built as for every tgp-benchmark unit; the
    optimum comes from one EP1 search (no restarts)."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from threadpoolctl import threadpool_limits

    from robustep.estimators.student_t_regressor import StudentTGPRegressor
    from robustep.experiments.tgp_benchmark import _standardised_inputs_and_kernel

    Xtr, Xte, kernel = _standardised_inputs_and_kernel(Xtr, Xte)
    cpu = {"ep": np.inf, "laplace": np.inf}
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = StudentTGPRegressor(
            kernel, df=4.0, scale=0.5, method="ep", random_state=seed, n_restarts_optimizer=0
        ).fit(Xtr, ytr)
        for _ in range(repeat):
            for method in cpu:
                t0 = time.process_time()
                est = StudentTGPRegressor(
                    ref.kernel_, df=4.0, scale=ref.scale_, method=method, optimizer=None
                ).fit(Xtr, ytr)
                est.predict(Xte)
                est.predict_log_density(Xte, yte)
                cpu[method] = min(cpu[method], time.process_time() - t0)
    return cpu


def main(argv=None):
    from robustep.experiments import tgp_benchmark as tb

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--friedman-sets", type=int, nargs="*", default=[0, 1, 2])
    p.add_argument("--boston-folds", type=int, nargs="*", default=[0])
    p.add_argument("--concrete-folds", type=int, nargs="*", default=[])
    p.add_argument("--methods", nargs="+", default=["LA1", "EP1"])
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--evaluations", action="store_true", help="the search runs' costs")
    p.add_argument(
        "--per-evaluation", action="store_true", help="the work of one objective evaluation"
    )
    p.add_argument(
        "--fixed", action="store_true", help="EP / LA CPU at fixed hyperparameters (cold)"
    )
    args = p.parse_args(argv)
    # AUTO: the estimator's default method="auto" (not a method of the paper's table)
    tb._SPEC.setdefault("AUTO", dict(method="auto"))
    log = SearchRunLog() if args.evaluations else None
    counts = EvaluationCounts() if args.per_evaluation else None
    wanted = {"friedman": args.friedman_sets, "boston": args.boston_folds}
    wanted["concrete"] = args.concrete_folds
    if not os.environ.get("ROBUSTEP_DATA") and (args.boston_folds or args.concrete_folds):
        print("set ROBUSTEP_DATA to the folder with the Boston and concrete CSV files")
    config = dict(tb.EXPERIMENT.full)
    totals, fixed_totals = {}, {}
    print("| data set | split | method | CPU s | sigma | nu | MLPD |")
    print("|---|---|---|---|---|---|---|")
    for ds, splits in wanted.items():
        if not splits:
            continue
        all_splits = tb._splits(ds, config, args.seed)
        for split in splits:
            Xtr, ytr, Xte, yte, _ = all_splits[split]
            seed = tb.unit_seed(args.seed, tb._dataset_key(ds), split)
            cpu = {m: np.inf for m in args.methods}
            out = {}
            for _ in range(args.repeat):
                for m in args.methods:
                    o = tb._fit_predict(m, Xtr, ytr, Xte, yte, config, seed)
                    cpu[m] = min(cpu[m], o[2])
                    out[m] = o
                    if log is not None:
                        print(f"# {ds} split {split} {m} search runs: {log.summary()}")
                    if counts is not None:
                        print(f"# {ds} split {split} {m}: {counts.summary(o[2])}")
            for m in args.methods:
                sigma, nu = out[m][5]
                mlpd = float(np.mean(out[m][1]))
                print(
                    f"| {ds} | {split} | {m} | {cpu[m]:.2f} | {sigma:.5f} | {nu:.3g} | {mlpd:.4f} |"
                )
                totals.setdefault(ds, {}).setdefault(m, 0.0)
                totals[ds][m] += cpu[m]
            if "EP1" in cpu and "LA1" in cpu:
                print(
                    f"# {ds} split {split}: EP1/LA1 = {cpu['EP1'] / cpu['LA1']:.2f}",
                    file=sys.stderr,
                )
            if args.fixed:
                fixed = fixed_hyperparameter_cpu(Xtr, ytr, Xte, yte, seed, args.repeat)
                print(
                    f"# {ds} split {split} fixed at EP1's optimum: EP {fixed['ep']:.3f} s, "
                    f"LA {fixed['laplace']:.3f} s, EP/LA = {fixed['ep'] / fixed['laplace']:.2f}"
                )
                for m, c in fixed.items():
                    fixed_totals.setdefault(ds, {}).setdefault(m, 0.0)
                    fixed_totals[ds][m] += c
    print()
    for ds, t in totals.items():
        if "EP1" in t and "LA1" in t:
            print(
                f"{ds}: EP1/LA1 CPU = {t['EP1'] / t['LA1']:.2f} "
                f"(EP1 {t['EP1']:.1f} s, LA1 {t['LA1']:.1f} s)"
            )
    for ds, t in fixed_totals.items():
        print(
            f"{ds}: EP/LA CPU at fixed hyperparameters = {t['ep'] / t['laplace']:.2f} "
            f"(EP {t['ep']:.2f} s, LA {t['laplace']:.2f} s)"
        )
    if log is not None:
        log.close()
    if counts is not None:
        counts.close()
    return totals


if __name__ == "__main__":
    main()
