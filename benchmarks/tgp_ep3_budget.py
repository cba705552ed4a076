"""EP3's search with another sweep budget per evaluation (issue 12 §2).

Usage: ROBUSTEP_DATA=/work/shared/datasets python benchmarks/tgp_ep3_budget.py 30 60 \
           [--dataset boston] [--split 0] [--trace]

Runs tgp-benchmark's EP3 unit on one split (default Boston fold 0) exactly as the full
configuration does (``tgp_benchmark._fit_predict``, one BLAS thread, CPU process time)
once per value of ``StudentTGPRegressor``'s search budget (``robustep.config``'s
``search_max_iter``: EP sweeps per optimiser evaluation; 30 is the default), and prints
the CPU time, the test MLPD, how many EP runs converged or failed and their median
sweeps.  A run that fails is an optimiser evaluation that is thrown away; the question is
whether a larger budget (fewer failures) or a smaller one (cheaper failures) shortens the
unit.
"""

from __future__ import annotations

import argparse
import collections
import time

import numpy as np


def main(argv=None):
    import robustep
    from robustep.estimators._regressor_inference import InferenceCore
    from robustep.experiments import tgp_benchmark as tb

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("budgets", nargs="+", type=int)
    parser.add_argument("--dataset", default="boston", choices=["friedman", "boston", "concrete"])
    parser.add_argument("--split", type=int, default=0)
    parser.add_argument(
        "--trace", action="store_true",
        help="also print every EP run with the full sweep budget (first evaluations of a "
        "search start and final fits): nu, sigma, warm start, budget, tolerance, sweeps, "
        "converged, CPU s",
    )  # fmt: skip
    args = parser.parse_args(argv)
    full = dict(tb.EXPERIMENT.full)
    Xtr, ytr, Xte, yte, _ = tb._splits(args.dataset, full, 0)[args.split]
    seed = tb.unit_seed(0, tb._dataset_key(args.dataset), args.split)
    original_budget = robustep.get_config().search_max_iter
    original_infer = InferenceCore.infer
    sweeps = collections.defaultdict(list)
    trace = []

    def counted_infer(self, K, lik, warm=None, max_iter=1000, tol=1e-4, search=False):
        t0 = time.process_time()
        res = original_infer(self, K, lik, warm=warm, max_iter=max_iter, tol=tol, search=search)
        sweeps["converged" if res.converged else "failed"].append(int(res.n_iter))
        if max_iter > original_budget:
            trace.append((lik.df, lik.scale, warm is not None, max_iter, tol, int(res.n_iter),
                          bool(res.converged), time.process_time() - t0))  # fmt: skip
        return res

    print("| search budget (sweeps) | CPU s | MLPD | EP runs converged / failed "
          "| median sweeps converged / failed |")  # fmt: skip
    print("|---|---|---|---|---|")
    InferenceCore.infer = counted_infer
    try:
        for budget in args.budgets:
            sweeps.clear()
            trace.clear()
            with robustep.config(search_max_iter=budget):
                _, lpd, cpu, *_ = tb._fit_predict("EP3", Xtr, ytr, Xte, yte, full, seed)
            ok, bad = sweeps["converged"], sweeps["failed"]
            print(f"| {budget} | {cpu:.1f} | {np.mean(lpd):.4f} | {len(ok)} / {len(bad)} | "
                  f"{np.median(ok) if ok else 0:.0f} / {np.median(bad) if bad else 0:.0f} |",
                  flush=True)  # fmt: skip
            if args.trace:
                print("  nu | sigma | warm | budget | tol | sweeps | converged | CPU s")
                for row in trace:
                    print("  {:.3f} | {:.5f} | {} | {} | {:g} | {} | {} | {:.2f}".format(*row))
    finally:
        InferenceCore.infer = original_infer


if __name__ == "__main__":
    main()
