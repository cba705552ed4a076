"""EP1's hyperparameter search under other search-run policies (issue 12 §2, EP1 / LA1).

Usage:
    ROBUSTEP_DATA=/work/shared/datasets python benchmarks/tgp_search_variants.py \
        [--variants base iter60 damp0.5 pat2] [--units concrete:0 concrete:1 boston:0]

Each unit is fitted as EP1 in ``robustep reproduce tgp-benchmark --full``
(``tgp_benchmark._fit_predict``, one BLAS thread, CPU process time with the predictions)
with the search runs of ``StudentTGPRegressor`` changed for the whole process:

* ``base``: as shipped (at most 30 sweeps per warm-started search run, step halving after
  5 sweeps without progress, no double loop);
* ``iterK``: at most K sweeps per search run (``robustep.config(search_max_iter=K)``; its
  factorisation budget scales with it);
* ``dampD``: search runs start with damping D (step 1 - D) instead of 1;
* ``patP``: step halving after P sweeps without progress instead of 5
  (``robustep.config(stall_patience=P)``; this also changes runs outside the search).

Prints, per variant and unit, the CPU seconds, the inferences made (EP runs, failed ones
included), those that did not converge, and the fit (sigma, test MLPD), so that a policy
that merely moves the search elsewhere shows.  Each variant runs in a fresh process.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

_CHILD = r"""
import sys
import numpy as np
import robustep
import robustep.ep as ep_package
from robustep.estimators._regressor_inference import InferenceCore
from robustep.experiments import tgp_benchmark as tb

variant, units = sys.argv[1], sys.argv[2:]
settings = {}
if variant.startswith("iter"):
    settings["search_max_iter"] = int(variant[4:])
elif variant.startswith("damp"):
    damping, run = float(variant[4:]), ep_package.expectation_propagation

    def damped(*args, **kwargs):
        if kwargs.get("double_loop") == "never":  # a search run
            kwargs["damping"] = damping
        return run(*args, **kwargs)

    ep_package.expectation_propagation = damped
elif variant.startswith("pat"):
    settings["stall_patience"] = int(variant[3:])
elif variant != "base":
    raise SystemExit(f"unknown variant {variant!r}")
count = {"runs": 0, "failed": 0}
infer = InferenceCore.infer


def counted(core, *args, **kwargs):
    res = infer(core, *args, **kwargs)
    count["runs"] += 1
    count["failed"] += not res.converged
    return res


InferenceCore.infer = counted
config = dict(tb.EXPERIMENT.full)
splits = {}
for unit in units:
    ds, split = unit.split(":")
    split = int(split)
    if ds not in splits:
        splits[ds] = tb._splits(ds, config, 0)
    Xtr, ytr, Xte, yte, _ = splits[ds][split]
    count.update(runs=0, failed=0)
    with robustep.config(**settings):
        out = tb._fit_predict(
            "EP1", Xtr, ytr, Xte, yte, config, tb.unit_seed(0, tb._dataset_key(ds), split)
        )
    print(f"| {variant} | {ds} | {split} | {out[2]:.2f} | {count['runs']} | "
          f"{count['failed']} | {out[5][0]:.5f} | {np.mean(out[1]):.4f} |", flush=True)
"""


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variants", nargs="+", default=["base", "iter60", "damp0.5", "pat2"])
    p.add_argument(
        "--units", nargs="+", default=["concrete:0", "concrete:1", "boston:0", "boston:1"]
    )
    args = p.parse_args(argv)
    print("| variant | data set | split | CPU s | inferences | not converged | sigma | MLPD |")
    print("|---|---|---|---|---|---|---|---|")
    totals = {}
    for variant in args.variants:
        out = subprocess.run(
            [sys.executable, "-W", "ignore", "-c", _CHILD, variant, *args.units],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        print(out, end="")
        totals[variant] = sum(float(row.split("|")[4]) for row in out.splitlines() if row)
    print()
    for variant, total in totals.items():
        print(f"{variant}: {total:.1f} CPU s in all ({total / totals[args.variants[0]]:.2f} x)")
    return totals


if __name__ == "__main__":
    main()
