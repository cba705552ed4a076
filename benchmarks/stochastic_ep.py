r"""Stochastic power EP (robustep.ep.stochastic) on the probit problem of benchmarks/sparse.py.

Learns the kernel hyperparameters and the inducing inputs from minibatches
(:func:`robustep.ep.stochastic.fit_stochastic_ep`) on ``_probit_data`` of
benchmarks/sparse.py (d = 8, training data from seed 2, 20 000 test points from seed 99,
``ConstantKernel(1) * RBF(1)`` start, k-means inducing inputs as GPClassifier's
``inducing_points=m``), and prints after every epoch the training wall time (evaluation
excluded), the energy estimate, and the test error and mean negative log predictive
density (test log loss).

Usage::

    python benchmarks/stochastic_ep.py [--quick] [--n N] [--m M] [--epochs E] [--batch B]
        [--power A] [--lr LR] [--lr-decay-epochs T] [--damping D] [--per-point]
        [--max-time S] [--out FILE]
    # out of core: the training data as a Dask array built block by block (block j from
    # the generator seeded (2, j); never the whole array in one process), read by the
    # learner chunk by chunk; --workers W > 0 on a LocalCluster of W worker processes
    # (one thread each, 2 GiB memory limit), 0: Dask's threaded scheduler
    python benchmarks/stochastic_ep.py --dask --workers 2 --n 1000000 --chunk 50000
    # on a device (PyTorch), with a numpy baseline at --baseline-n for the ratio per step
    python benchmarks/stochastic_ep.py --device cuda --n 1000000 --max-time 240 --out F

``--quick``: n = 10⁴, m = 64, 3 epochs (seconds).  ``--out FILE`` writes a JSON record:
the command, the machine (benchmarks/_harness.py), the settings, the per-epoch table,
wall time, steps, seconds per step, the final test log loss and error, the learned
kernel, and with ``--dask`` the peak resident memory of every worker process and of the
driver (``getrusage`` maximum RSS, read from each worker at the end).  ``--device``: the
script checks PyTorch and array-api-compat first and exits with status 3 and a message
naming the missing package (and the JSON with ``"error"``) when one is missing; the
baseline runs numpy for ``--baseline-steps`` steps on the same problem at
``--baseline-n`` (the cost of a step does not depend on n).

Measured (``--n 100000 --m 256``, defaults: α = 0.5, tied sites, batch 1000, lr 0.05,
damping 2; one run on a shared 2-core machine whose load varied, one BLAS thread;
benchmarks/results/stochastic_ep_n100000_m256.txt): test log loss 0.396 after 20 s,
0.367 after 300 s, 0.343 after 410 s, 0.322 after 780 s (60 epochs, test error 0.145;
the first 300 s ran next to a test suite on the same cores).  Per-point sites
(``--per-point --damping 1 --max-time 300``, a quieter machine;
..._per_point.txt): 0.335 after 97 s, 0.322 after 243 s, 0.324 at the 292 s stop.
Dask (``--dask --workers 2 --n 100000 --max-time 900``, the same defaults, blocks of 50 000
rows; the 2-core machine at a load average of 8 to 11, so 0.36 s per step against about
0.13 above; benchmarks/results/stochastic_ep_dask_n100000_m256.json): test log loss
0.393 after epoch 1, 0.338 after 20, 0.333 at the 875 s stop (25 epochs, 2423 steps), the
in-memory run's 0.334 after the same 24 epochs; peak resident memory 170 MiB per worker,
282 MiB in the driver.

n = 10⁶ out of core (the target: within 0.01 of the in-memory log loss at n = 10⁵ in at
most 30 minutes, at most 2 GB per worker)::

    python benchmarks/stochastic_ep.py --dask --workers 2 --n 1000000 --chunk 50000 \
        --damping 20 --lr-decay-epochs 0.5 --epochs 60 --max-time 1700 \
        --out benchmarks/results/stochastic_ep_dask_n1000000_m256.json

``--damping 20`` and ``--lr-decay-epochs 0.5`` keep the tied site's step
``ε = δ |B| / n`` and the learning-rate decay per step those of the n = 10⁵ run (whose
epochs are ten times shorter), so the run follows it step by step with ten times the data.
Measured with ``--epochs 8 --max-time 900`` on the loaded 2-core machine (load average
9 to 14; benchmarks/results/stochastic_ep_dask_n1000000_m256_900s.json): test log loss
0.280 after epoch 1 (209 s), 0.265 at the 897 s stop (3401 steps, test error 0.118),
below the in-memory n = 10⁵ run's 0.322; peak resident memory 172 MiB per worker, 283 MiB
in the driver.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import shlex
import sys
import time

import numpy as np
from scipy.special import ndtr
from sklearn.cluster import KMeans
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

from robustep.ep.stochastic import fit_stochastic_ep
from robustep.likelihoods import Probit

D = 8
HERE = os.path.dirname(os.path.abspath(__file__))
# benchmarks/sparse.py would shadow the pydata `sparse` package that dask imports
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]


def _load(name, alias):
    """benchmarks/NAME.py loaded by path, as module ALIAS."""
    spec = importlib.util.spec_from_file_location(alias, os.path.join(HERE, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sparse_benchmark():
    return _load("sparse", "_sparse_benchmark")


def _block(generate, rows, j):
    """Block j of the lazy training data: (X (rows, d), y (rows,)) from seed (2, j)."""
    return generate(rows, D, np.random.default_rng([2, j]))


def _lazy_data(generate, n, chunk):
    """X (n, d) and y (n,) as Dask arrays, one task per block of ``chunk`` rows."""
    import dask
    import dask.array as da

    xs, ys = [], []
    for j, start in enumerate(range(0, n, chunk)):
        rows = min(chunk, n - start)
        part = dask.delayed(_block, pure=True)(generate, rows, j)
        xs.append(da.from_delayed(part[0], shape=(rows, D), dtype=float))
        ys.append(da.from_delayed(part[1], shape=(rows,), dtype=int))
    return da.concatenate(xs), da.concatenate(ys)


def _peak_rss_bytes():
    """Maximum resident set size of this process so far (bytes; Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _check_device(device):
    """None, or the message naming what ``device`` needs and is missing."""
    if device == "strict":
        return None if importlib.util.find_spec("array_api_strict") else (
            "--device strict needs array-api-strict (pip install array-api-strict)")  # fmt: skip
    missing = [p for p in ("torch", "array_api_compat") if importlib.util.find_spec(p) is None]
    if missing:
        names = " and ".join(p.replace("_", "-") for p in missing)
        wheel = (" (array-api-compat is pure Python: carry its wheel, "
                 "array_api_compat-1.16.0-py3-none-any.whl, and `pip install --no-index` it)"
                 if "array_api_compat" in missing else "")  # fmt: skip
        return f"--device {device} needs {names}, which is not installed{wheel}"
    return None


def _device_arg(device):
    if device == "strict":
        import array_api_strict as xs

        return xs.zeros(0, dtype=xs.float64)
    return device


EPOCH_COLUMNS = ["epoch", "step", "train s", "energy estimate", "test error", "test log loss"]
SUMMARY_COLUMNS = ["quantity", "value"]


def _tables(record):
    """The harness's tables (benchmarks/_harness.py) of a record: per epoch, and a summary."""
    rows = [[str(e["epoch"]), str(e["step"]), f"{e['train_s']:.1f}", f"{e['energy']:.1f}",
             f"{e['test_error']:.4f}", f"{e['test_log_loss']:.4f}"]
            for e in record.get("epochs", [])]  # fmt: skip
    keys = ("wall_s", "steps", "s_per_step", "stopped", "test_log_loss", "test_error",
            "kernel", "speedup_per_step", "error")  # fmt: skip
    summary = [[k, str(record[k])] for k in keys if k in record]
    for who, value in record.get("peak_rss_bytes", {}).get("workers", {}).items():
        summary.append([f"peak RSS MiB, worker {who}", f"{value / 2**20:.0f}"])
    if "peak_rss_bytes" in record:
        summary.append(["peak RSS MiB, driver",
                        f"{record['peak_rss_bytes']['driver'] / 2**20:.0f}"])  # fmt: skip
    return [{"name": "per epoch", "columns": EPOCH_COLUMNS, "rows": rows},
            {"name": "summary", "columns": SUMMARY_COLUMNS, "rows": summary}]  # fmt: skip


def _write(path, record):
    """The record as JSON in the harness's format (suite = the file's stem, its tables)."""
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        stem = os.path.splitext(os.path.basename(path))[0]
        record = {**record, "suite": stem, "source": "run", "tables": _tables(record)}
        with open(path, "w") as fh:
            json.dump(record, fh, indent=1, default=str)
        print(f"wrote {path}")


def _machine():
    try:
        return _load("_harness", "_stochastic_ep_harness").machine()
    except Exception as exc:  # noqa: BLE001 - the record is still useful without it
        return {"error": repr(exc)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--m", type=int, default=256)
    parser.add_argument("--epochs", type=int, default=60)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--power", type=float, default=0.5)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--lr-decay-epochs", type=float, default=5.0)
    parser.add_argument("--damping", type=float, default=2.0)
    parser.add_argument("--per-point", action="store_true", help="one site per point")
    parser.add_argument("--max-time", type=float, default=None)
    parser.add_argument("--test", type=int, default=20_000)
    parser.add_argument("--dask", action="store_true", help="training data as a Dask array")
    parser.add_argument(
        "--workers",
        type=int,
        default=2,
        help="--dask: LocalCluster worker processes (0: threads, no cluster)",
    )
    parser.add_argument("--chunk", type=int, default=50_000, help="--dask: rows per block")
    parser.add_argument(
        "--device",
        default=None,
        help="PyTorch device (cpu, cuda, cuda:1) or 'strict' (array-api-strict)",
    )
    parser.add_argument("--dtype", default="float64")
    parser.add_argument("--baseline-n", type=int, default=100_000)
    parser.add_argument("--baseline-steps", type=int, default=300)
    parser.add_argument("--out", default=None, help="write a JSON record to this path")
    args = parser.parse_args(argv)  # fmt: skip
    if args.quick:
        args.n, args.m, args.epochs, args.test = 10_000, 64, 3, 5_000
        args.chunk = min(args.chunk, 2_500)
        args.baseline_n, args.baseline_steps = 10_000, 20
    record = {"command": shlex.join(sys.argv),
              "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "settings": vars(args).copy(),
              "machine": _machine()}  # fmt: skip
    if args.device is not None:
        problem = _check_device(args.device)
        if problem:
            print(problem, file=sys.stderr)
            _write(args.out, {**record, "error": problem})
            return 3

    bench = _sparse_benchmark()
    Xt, yt = bench._probit_data(args.test, D, np.random.default_rng(99))
    kernel = ConstantKernel(1.0) * RBF(1.0)
    client = cluster = None
    if args.dask:
        import distributed

        X, y = _lazy_data(bench._probit_data, args.n, args.chunk)
        if args.workers > 0:
            cluster = distributed.LocalCluster(
                n_workers=args.workers, threads_per_worker=1, processes=True,
                memory_limit="2GiB", dashboard_address=None,
            )  # fmt: skip
            client = distributed.Client(cluster)
        # k-means on the first 20 m rows (the rows are exchangeable)
        sub = np.asarray(X[: min(args.n, 20 * args.m)].compute())
    else:
        X, y = bench._probit_data(args.n, D, np.random.default_rng(2))
        sub = X[np.random.default_rng(0).choice(args.n, min(args.n, 20 * args.m), replace=False)]
    Z = KMeans(args.m, n_init=1, random_state=0).fit(sub).cluster_centers_
    common = dict(power=args.power, batch_size=args.batch, learning_rate=args.lr,
                  lr_decay_epochs=args.lr_decay_epochs,
                  damping=args.damping, tied_sites=not args.per_point, random_state=0)  # fmt: skip

    if args.device is not None:
        # numpy baseline: seconds per step at a smaller n, the same problem otherwise
        Xb, yb = bench._probit_data(args.baseline_n, D, np.random.default_rng(2))
        t0 = time.perf_counter()
        base = fit_stochastic_ep(kernel, Xb, yb, Probit(), Z, n_epochs=10**6,
                                 max_steps=args.baseline_steps, **common)  # fmt: skip
        wall = time.perf_counter() - t0
        per_step = wall / max(base.n_steps, 1)
        record["baseline"] = {"device": "numpy", "n": args.baseline_n, "steps": base.n_steps,
                              "wall_s": wall, "s_per_step": per_step}  # fmt: skip
        print(f"numpy baseline: n = {args.baseline_n}, {base.n_steps} steps in {wall:.1f} s "
              f"({1e3 * wall / max(base.n_steps, 1):.1f} ms per step)", flush=True)  # fmt: skip

    evaluation = {"seconds": 0.0}
    table = []
    where = "dask, " + (f"{args.workers} worker processes" if args.workers > 0 else "threads") \
        if args.dask else "in memory"  # fmt: skip
    print(f"n = {args.n}, m = {args.m}, d = {D}, power = {args.power}, batch = {args.batch}, "
          f"damping = {args.damping}, "
          f"{'per-point' if args.per_point else 'tied'} sites, lr = {args.lr}, {where}, "
          f"device = {args.device or 'numpy'}")  # fmt: skip
    print("\n| epoch | train s | energy estimate | test error | test log loss |")
    print("|---|---|---|---|---|")

    def report(state, rec):
        t0 = time.perf_counter()
        mean, var = state.predict(Xt)
        p = ndtr(mean / np.sqrt(1.0 + var))
        err = float(np.mean(np.where(p > 0.5, 1, -1) != yt))
        mnlp = bench._mnlp(yt, p)
        train = rec["time"] - evaluation["seconds"]
        row = {"epoch": rec["epoch"], "step": rec["step"], "train_s": train}
        table.append({**row, "energy": rec["energy"], "test_error": err, "test_log_loss": mnlp})
        print(f"| {rec['epoch']} | {train:.1f} | {rec['energy']:.1f} | {err:.4f} | "
              f"{mnlp:.4f} |", flush=True)  # fmt: skip
        evaluation["seconds"] += time.perf_counter() - t0

    device = None if args.device is None else _device_arg(args.device)
    try:
        t0 = time.perf_counter()
        fit = fit_stochastic_ep(kernel, X, y, Probit(), Z, n_epochs=args.epochs,
                                callback=report, max_time=args.max_time, device=device,
                                dtype=args.dtype, **common)  # fmt: skip
        wall = time.perf_counter() - t0 - evaluation["seconds"]
        if client is not None:
            workers = client.run(_peak_rss_bytes)
            record["peak_rss_bytes"] = {"workers": workers, "driver": _peak_rss_bytes()}
            print("peak RSS (MiB): " + ", ".join(f"{w}: {v / 2**20:.0f}"
                                                 for w, v in workers.items())
                  + f"; driver {_peak_rss_bytes() / 2**20:.0f}")  # fmt: skip
    finally:
        if client is not None:
            client.close()
            cluster.close()
    if args.dask and client is None:
        record["peak_rss_bytes"] = {"driver": _peak_rss_bytes()}
    print(f"\ntraining wall time {wall:.1f} s ({fit.n_steps} steps, stopped: {fit.stopped}); "
          f"kernel {fit.kernel}")  # fmt: skip
    record.update(
        epochs=table, wall_s=wall, steps=fit.n_steps, stopped=fit.stopped,
        s_per_step=wall / max(fit.n_steps, 1), kernel=str(fit.kernel),
        test_log_loss=table[-1]["test_log_loss"] if table else None,
        test_error=table[-1]["test_error"] if table else None,
    )  # fmt: skip
    if "baseline" in record:
        record["speedup_per_step"] = record["baseline"]["s_per_step"] / record["s_per_step"]
        print(f"per step: {1e3 * record['s_per_step']:.1f} ms on {args.device}, "
              f"{record['speedup_per_step']:.1f}x the numpy baseline")  # fmt: skip
    _write(args.out, record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
