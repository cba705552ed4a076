"""Seed spread of the stochastic learner: the classification problem of
``benchmarks/learning.py`` (n = 10⁵, d = 8, m = 256, minibatch 1000, the learner's
benchmarked settings) run from the same start with different minibatch orders, in
parallel worker processes of one thread each; the test log loss and the kernel after a
fixed number of epochs, per seed and per variant.

Variants: ``warmup`` (the settings of ``learning.ROBUSTEP_SETTINGS``, which are those of
``StochasticLearner()``: one epoch of site updates at the starting hyperparameters first),
``no-warmup`` (the same without that epoch), and ``lr=X`` (``warmup`` with Adam's learning
rate X).

Usage::

    python benchmarks/learning_seeds.py --seeds 0-7 --variants no-warmup warmup --epochs 30 \\
        --jobs 16 --out results.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _learning():
    spec = importlib.util.spec_from_file_location("_learning_seeds_lb", HERE / "learning.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(seed, variant, epochs, n, m):
    """One learner run; returns its per-epoch test log loss and final kernel."""
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel

    from robustep.ep.stochastic import fit_stochastic_ep
    from robustep.likelihoods import Probit

    lb = _learning()
    X, y, Xt, yt = lb.classification_data(n, 20_000, 8)
    Z0 = lb.kmeans_start(X, m)
    cfg = dict(lb.ROBUSTEP_SETTINGS)
    warmup = int(cfg.pop("warmup_epochs", 0)) if variant != "no-warmup" else 0
    cfg.pop("warmup_epochs", None)
    if variant.startswith("lr="):
        cfg["learning_rate"] = float(variant[3:])
    curve = []
    t0 = time.perf_counter()

    def checkpoint(state, record):
        metrics = lb.classification_metrics(*state.predict(Xt), yt)
        curve.append({"epoch": record["epoch"], "log_loss": metrics["log_loss"],
                      "error": metrics["error"], "s": time.perf_counter() - t0})  # fmt: skip
        return record["epoch"] >= epochs

    kernel, state = ConstantKernel(1.0) * RBF(1.0), None
    common = dict(batch_size=1000, random_state=seed, **cfg)
    if warmup:
        state = fit_stochastic_ep(kernel, X, y, Probit(), Z0, n_epochs=warmup, learn_kernel=False,
                                  learn_inducing=False, **common)  # fmt: skip
    fit = fit_stochastic_ep(kernel, X, y, Probit(), Z0, n_epochs=10**9, callback=checkpoint,
                            state=state, **common)  # fmt: skip
    return {
        "seed": seed, "variant": variant, "curve": curve,
        "amplitude": float(fit.kernel.k1.constant_value),
        "length_scale": float(fit.kernel.k2.length_scale),
        "final_log_loss": curve[-1]["log_loss"], "best_log_loss": min(p["log_loss"] for p in curve),
    }  # fmt: skip


def _seeds(text):
    if "-" in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(s) for s in text.split(",")]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0-3")
    parser.add_argument("--variants", nargs="+", default=["no-warmup", "warmup"])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--m", type=int, default=256)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    tasks = [(s, v) for v in args.variants for s in _seeds(args.seeds)]
    with ProcessPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(run, s, v, args.epochs, args.n, args.m) for s, v in tasks]
        rows = [f.result() for f in futures]
    print("| variant | seed | test log loss after the last epoch | best | σ² | ℓ |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        cells = [
            r["variant"],
            r["seed"],
            f"{r['final_log_loss']:.4f}",
            f"{r['best_log_loss']:.4f}",
            f"{r['amplitude']:.3g}",
            f"{r['length_scale']:.3g}",
        ]
        print("| " + " | ".join(str(c) for c in cells) + " |")
    if args.out:
        Path(args.out).write_text(json.dumps({"argv": sys.argv, "runs": rows}, indent=1))


if __name__ == "__main__":
    main()
