"""The two hyperparameter updates of the Gibbs sampler on one tgp-benchmark split (issue 12 §2).

Usage:
    ROBUSTEP_DATA=/work/shared/datasets python benchmarks/mcmc_hyper.py \
        [--datasets boston] [--samplers slice metropolis] [--mcmc-samples 2000]

For each data set's first split of the full protocol (Friedman set 0, Boston fold 0,
concrete fold 0) it runs the MCMC unit of ``robustep reproduce tgp-benchmark --full``
exactly as the experiment does (``tgp_benchmark._fit_predict``: one chain, the full
configuration's ``mcmc_samples`` kept draws after a half-length burn-in, kernel
hyperparameters every ``mcmc_hyper_every`` sweeps, one BLAS thread, CPU process time)
once per hyperparameter sampler, and prints CPU seconds, the test MLPD, the largest split
R-hat and the smallest effective sample size over the scalar parameters (log sigma,
log nu, the kernel log-parameters), that ESS per CPU second, and the Metropolis
acceptance rate.  The ESS of the slowest-mixing parameter per second is the figure of
merit: a sampler that is cheaper per sweep but mixes worse gains nothing.
"""

from __future__ import annotations

import argparse
import os

import numpy as np


def main(argv=None):
    from robustep.experiments import tgp_benchmark as tb

    full = tb.EXPERIMENT.full
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=["boston"])
    p.add_argument("--samplers", nargs="+", default=["slice", "metropolis"])
    p.add_argument("--mcmc-samples", type=int, default=int(full["mcmc_samples"]))
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if not os.environ.get("ROBUSTEP_DATA") and {"boston", "concrete"} & set(args.datasets):
        print("set ROBUSTEP_DATA to the folder with boston-housing.csv and concrete.csv")
    print(
        f"kept draws {args.mcmc_samples}, burn-in {args.mcmc_samples // 2}, kernel "
        f"hyperparameters every {full['mcmc_hyper_every']} sweeps, one BLAS thread\n"
    )
    print(
        "| data set | n | sampler | CPU s | MLPD | max R-hat | min ESS (parameter) "
        "| min ESS / CPU s | acceptance |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for ds in args.datasets:
        Xtr, ytr, Xte, yte, _ = tb._splits(ds, dict(full), args.seed)[0]
        seed = tb.unit_seed(args.seed, tb._dataset_key(ds), 0)
        for sampler in args.samplers:
            config = dict(full, mcmc_hyper_sampler=sampler)
            out = tb._fit_predict(
                "MCMC", Xtr, ytr, Xte, yte, config, seed, n_samples=args.mcmc_samples
            )
            _, lpd, cpu, _, draws, _ = out
            scalars = {k: v for k, v in draws["ess"].items() if k != "mean_f"}
            worst = min(scalars, key=scalars.get)
            rhat = max(v for k, v in draws["rhat"].items() if k != "mean_f")
            acc = draws["hyper_acceptance"]
            print(
                f"| {ds} | {ytr.size} | {sampler} | {cpu:.1f} | {np.mean(lpd):.4f} | "
                f"{rhat:.3f} | {scalars[worst]:.1f} ({worst}) | {scalars[worst] / cpu:.3f} | "
                f"{'-' if acc is None else f'{acc:.2f}'} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
