"""EP1 / LA1 CPU time of tgp-benchmark units (JMLR Table 1: EP1 ≈ 0.8 x LA1), in one process.

Usage:
    ROBUSTEP_DATA=/work/shared/datasets nice .venv/bin/python benchmarks/tgp_cost.py \
        [--friedman-sets 0 1 2] [--boston-folds 0] [--methods LA1 EP1] [--repeat 1]

Each (data set, split, method) is fitted exactly as a unit of ``robustep reproduce
tgp-benchmark --full`` (``tgp_benchmark._fit_predict``: ARD kernel, 2 random restarts,
one BLAS thread, CPU process time including the predictions).  The methods of one split
run back to back in this process, so their ratio is meaningful on a loaded machine where
absolute seconds are not.  Prints, per split, CPU seconds, the fitted sigma and nu and
the test MLPD of every method (to check that a speed change left the fits where they
were), and EP1/LA1; then the ratio of the summed CPU times per data set.  With
``--repeat r`` every unit runs r times (interleaved) and the minimum counts.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np


def main(argv=None):
    from robustep.experiments import tgp_benchmark as tb

    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--friedman-sets", type=int, nargs="*", default=[0, 1, 2])
    p.add_argument("--boston-folds", type=int, nargs="*", default=[0])
    p.add_argument("--concrete-folds", type=int, nargs="*", default=[])
    p.add_argument("--methods", nargs="+", default=["LA1", "EP1"])
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    wanted = {"friedman": args.friedman_sets, "boston": args.boston_folds}
    wanted["concrete"] = args.concrete_folds
    if not os.environ.get("ROBUSTEP_DATA") and (args.boston_folds or args.concrete_folds):
        print("set ROBUSTEP_DATA to the folder with the Boston and concrete CSV files")
    config = dict(tb.EXPERIMENT.full)
    totals = {}
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
    print()
    for ds, t in totals.items():
        if "EP1" in t and "LA1" in t:
            print(
                f"{ds}: EP1/LA1 CPU = {t['EP1'] / t['LA1']:.2f} "
                f"(EP1 {t['EP1']:.1f} s, LA1 {t['LA1']:.1f} s)"
            )
    return totals


if __name__ == "__main__":
    main()
