"""Peers in the same run: robustep against scikit-learn, GPy and GPflow.

Every library fits the *same* binary problems with the *same* kernel family and is timed in
the *same* run, on the same machine with the same BLAS threads; the table gives each
method's numbers and their ratios / differences to robustep's dense ``GPClassifier`` on the
same data and training size.

Problems (labels 0/1, one fixed test set each, training sets nested: the first n points of
one pool):

* ``synthetic``: x uniform on [-3, 3]^2, label 1[sin(1.5 x_1) + cos(x_2) > 0] with 10% of
  the labels flipped (training and test alike: the Bayes error is 10%); test set of
  ``--test`` points (2000).
* ``spambase``: UCI Spambase (``robustep.datasets.load_spambase``, packaged), features
  log(x + 0.1) standardised, shuffled once; the last 1000 points are the test set, so at
  most 3601 training points (larger n: a "not enough data" row).

Kernel: amplitude x isotropic RBF, sigma^2 exp(-|x - x'|^2 / (2 l^2)), started (or, with
``--fixed``, held) at sigma^2 = ``--amplitude`` (1), l = ``--length-scale`` (default
sqrt(d) for d input features: 1.41 synthetic, 7.55 Spambase) for every library.
Methods (a library that does not import gives one "not installed" row):

* robustep dense: ``GPClassifier(kernel)`` (probit, method "auto", EP);
* robustep sparse: ``GPClassifier(kernel, inducing_points=Z0)`` (FITC EP) with Z0 the
  ``--inducing`` (256) k-means centres of the training inputs (``MiniBatchKMeans``, seed 0,
  computed once outside the timing and shared with SVGP);
* robustep cuda: the dense model on ``device="cuda"`` (only when torch sees a CUDA device);
* scikit-learn: ``GaussianProcessClassifier(kernel)`` (Laplace, *logistic* likelihood);
* GPy: ``GPy.models.GPClassification`` (EP with GPy's sequential updates and tolerance,
  probit (Bernoulli) likelihood) with ``EP(ep_mode="nested")``: EP re-run at every
  hyperparameter evaluation, as robustep does (GPy's default "alternated" runs EP once and
  then optimises at those sites: ``--gpy-ep-mode alternated``);
* GPflow VGP and SVGP: ``gpflow.models.VGP`` / ``SVGP`` with ``Bernoulli()`` (probit), the
  ELBO, SVGP with inducing inputs Z0 and full-batch data.

Protocol.  Default: every library maximises its own evidence (robustep: EP's log Z;
scikit-learn: Laplace's; GPy: its EP's; GPflow: the ELBO, jointly with the variational
parameters, and SVGP's inducing inputs; robustep sparse optimises its inducing inputs too)
from the same initial values with L-BFGS-B.  Iteration caps: robustep and scikit-learn run
SciPy's L-BFGS-B with its defaults (15000 iterations; with 2 hyperparameters they stop in
tens) and cannot be capped from outside; GPy (``optimize(max_iters=...)``) and GPflow
(``Scipy().minimize(options={"maxiter": ...})``) stop after ``--maxiter`` (1000)
iterations, and the notes column says when a cap was reached.  ``--fixed``: no
hyperparameter is optimised (sigma^2 and l as above; the sparse models keep Z0); GPflow
still optimises its variational parameters (that *is* its inference), capped the same way.
``--fixed`` isolates inference speed.

Wall seconds: ``time.perf_counter`` around model construction, fit and ``predict`` of the
test set (imports, data and Z0 outside).  Test error at threshold 1/2 and mean log loss
(``sklearn.metrics.log_loss``) of the predicted probabilities.  The last columns compare
with robustep dense at the same data and n: time / its time, error - its error, log loss -
its log loss.  A cell is skipped, with the reason, when its projected memory exceeds
``--memory-fraction`` (0.5) of the physical memory (estimates: a per-method count of n x n
float64 arrays, e.g. GPflow VGP ~32 for q_sqrt, L-BFGS's history of the n^2 variational
parameters and TensorFlow's temporaries) or when its time projected from the previous size
(x (n'/n)^3 dense, x n'/n sparse) exceeds ``--max-seconds`` (1800; not for robustep dense,
the reference).

Usage: ``python benchmarks/peers.py [--quick] [--fixed] [--sizes 500 2000 8000]
[--data synthetic spambase] [--libraries robustep sklearn gpy gpflow] [--threads 2]
[--maxiter 1000] [--inducing 256] [--test 2000] [--gpy-ep-mode nested] [--max-seconds 1800]
[--json PATH]``.
``--quick``: n = 100, 200 test points, synthetic data, 16 inducing inputs, 50 iterations
(a few seconds without the peers).  Peers install with ``pip install robustep[peers]``;
they are never needed by the tests.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import platform
import sys
import time
import warnings

import numpy as np

FULL = {
    "sizes": [500, 2000, 8000],
    "test": 2000,
    "data": ["synthetic", "spambase"],
    "maxiter": 1000,
    "inducing": 256,
}
QUICK = {"sizes": [100], "test": 200, "data": ["synthetic"], "maxiter": 50, "inducing": 16}
SPAMBASE_TEST = 1000

# Rough peak memory of each method in n x n float64 arrays (dense) or n x m (sparse): the
# projection that decides whether a cell runs, not a measurement.
DENSE_ARRAYS = {
    "robustep dense": 6,  # K, its Cholesky, the inverse for the variances, gradient work
    "robustep cuda": 6,
    "scikit-learn Laplace": 7,  # K, K's gradient (n, n, 2), L, R, C
    "GPy EP": 8,  # K, Sigma, the posterior's Woodbury matrices, dL/dK
    "GPflow VGP": 32,  # q_sqrt (n^2), L-BFGS history 2 x 10 x n^2, TF temporaries
}
SPARSE_ARRAYS = 12  # n x m arrays of robustep sparse / SVGP


# ------------------------------------------------------------------------------- data
def _synthetic_draw(n, seed):
    """X (n, 2) uniform on [-3, 3]^2 and 0/1 labels 1[sin(1.5 x_1) + cos(x_2) > 0], 10% flipped;
    inputs and flips come from separate streams, so the first k points do not depend on n."""
    X = np.random.default_rng([seed, 0]).uniform(-3.0, 3.0, size=(n, 2))
    y = (np.sin(1.5 * X[:, 0]) + np.cos(X[:, 1]) > 0).astype(int)
    flip = np.random.default_rng([seed, 1]).random(n) < 0.10
    y[flip] = 1 - y[flip]
    return X, y


def synthetic(n_train, n_test, seed=0):
    """(X_train (n_train, 2), y_train (n_train,), X_test (n_test, 2), y_test (n_test,)): the
    training pool from ``seed`` (its first n points are the same for every n_train), the test
    set from ``seed + 1`` (the same whatever n_train)."""
    X, y = _synthetic_draw(n_train, seed)
    X_test, y_test = _synthetic_draw(n_test, seed + 1)
    return X, y, X_test, y_test


def spambase(seed=0):
    """(X_pool (3601, 57), y_pool, X_test (1000, 57), y_test), labels 1 = spam, features
    log(x + 0.1) standardised (on all 4601 points), shuffled with ``seed``."""
    from robustep.datasets import load_spambase

    X, y = load_spambase(download=False)
    X = np.log(np.asarray(X, float) + 0.1)
    X = (X - X.mean(0)) / np.maximum(X.std(0), 1e-12)
    idx = np.random.default_rng(seed).permutation(X.shape[0])
    X, y = X[idx], (np.asarray(y)[idx] > 0).astype(int)
    return X[:-SPAMBASE_TEST], y[:-SPAMBASE_TEST], X[-SPAMBASE_TEST:], y[-SPAMBASE_TEST:]


def kmeans_centres(X, m, seed=0):
    """(min(m, n), d) MiniBatchKMeans centres of X (n, d): the shared initial inducing inputs."""
    from sklearn.cluster import MiniBatchKMeans

    m = min(int(m), X.shape[0])
    km = MiniBatchKMeans(n_clusters=m, random_state=seed, n_init=3, batch_size=1024)
    return km.fit(X).cluster_centers_


# --------------------------------------------------------------------------- libraries
def try_import(name):
    """(module, None) or (None, reason); reason "not installed" when the package is absent,
    else the import error (a package that is installed but broken)."""
    try:
        return importlib.import_module(name), None
    except ModuleNotFoundError as err:
        if err.name is None or err.name.split(".")[0] == name.split(".")[0]:
            return None, "not installed"
        return None, f"not importable ({type(err).__name__}: {err})"
    except ImportError as err:
        if name in sys.modules and sys.modules[name] is None:
            return None, "not installed"
        return None, f"not importable ({type(err).__name__}: {err})"
    except Exception as err:  # noqa: BLE001 - a broken peer must not stop the benchmark
        return None, f"not importable ({type(err).__name__}: {err})"


def _tensorflow_threads(threads):
    """Import TensorFlow with ``threads`` intra-op threads (before its first operation)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    tf, reason = try_import("tensorflow")
    if tf is None:
        return None, reason
    try:
        tf.config.threading.set_intra_op_parallelism_threads(int(threads))
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:  # already initialised (an earlier import in this process)
        pass
    return tf, None


def resolve_methods(libraries, threads):
    """[(method name, library key, module or None, reason or None)] for ``libraries``."""
    out = []
    if "robustep" in libraries:
        out.append(("robustep dense", "robustep", importlib.import_module("robustep"), None))
        out.append(("robustep sparse", "robustep", sys.modules["robustep"], None))
        torch, reason = try_import("torch")
        if torch is not None:
            reason = None if torch.cuda.is_available() else "no CUDA device"
            if reason is None:
                torch.set_num_threads(int(threads))
        out.append(("robustep cuda", "torch", torch if reason is None else None, reason))
    if "sklearn" in libraries:
        out.append(("scikit-learn Laplace", "sklearn", importlib.import_module("sklearn"), None))
    if "gpy" in libraries:
        gpy, reason = try_import("GPy")
        out.append(("GPy EP", "GPy", gpy, reason))
    if "gpflow" in libraries:
        tf, reason = _tensorflow_threads(threads)
        gpflow = None
        if tf is not None:
            gpflow, reason = try_import("gpflow")
        out.append(("GPflow VGP", "gpflow", gpflow, reason))
        out.append(("GPflow SVGP", "gpflow", gpflow, reason))
    return out


def versions():
    """{package: version} of the numerical stack and of the peers that are imported."""
    out = {"python": platform.python_version()}
    for name in ("numpy", "scipy", "sklearn", "robustep", "torch", "GPy", "tensorflow",
                 "gpflow"):  # fmt: skip
        mod = sys.modules.get(name)
        if mod is not None:
            out[name] = getattr(mod, "__version__", "?")
    return out


# ----------------------------------------------------------------------------- methods
def _sk_kernel(cfg):
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel

    return ConstantKernel(cfg["amplitude"]) * RBF(cfg["length_scale"])


def _sk_hyper(kernel):
    return float(kernel.k1.constant_value), float(np.ravel(kernel.k2.length_scale)[0])


def fit_robustep(method, Xtr, ytr, Xte, cfg, Z0):
    """Test probabilities (n_test,) of class 1, fitted (sigma^2, l) and notes."""
    from robustep.estimators import GPClassifier

    kwargs = dict(optimizer=None if cfg["fixed"] else "fmin_l_bfgs_b", random_state=0)
    if method == "robustep sparse":
        kwargs["inducing_points"] = Z0
        kwargs["inducing_power"] = 1.0  # FITC EP, as the published rows (not the "auto" α)
    if method == "robustep cuda":
        kwargs["device"] = "cuda"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = GPClassifier(_sk_kernel(cfg), **kwargs).fit(Xtr, ytr)
        p = model.predict_proba(Xte)[:, 1]
    notes = [] if model.converged_ else ["EP not converged"]
    if method == "robustep sparse" and not cfg["fixed"]:
        notes.append(f"Z optimised ({Z0.size} coordinates)")
    notes += sorted({type(w.message).__name__ for w in caught if "Convergence" in str(w.category)})
    return p, _sk_hyper(model.kernel_), notes


def fit_sklearn(method, Xtr, ytr, Xte, cfg, Z0):
    from sklearn.gaussian_process import GaussianProcessClassifier

    optimizer = None if cfg["fixed"] else "fmin_l_bfgs_b"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = GaussianProcessClassifier(_sk_kernel(cfg), optimizer=optimizer, random_state=0)
        model.fit(Xtr, ytr)
        p = model.predict_proba(Xte)[:, 1]
    notes = sorted({w.category.__name__ for w in caught if "Convergence" in str(w.category)})
    return p, _sk_hyper(model.kernel_), notes


def fit_gpy(method, Xtr, ytr, Xte, cfg, Z0):
    import GPy

    kern = GPy.kern.RBF(Xtr.shape[1], variance=cfg["amplitude"], lengthscale=cfg["length_scale"])
    notes = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = GPy.inference.latent_function_inference.EP(ep_mode=cfg["gpy_ep_mode"])
        model = GPy.models.GPClassification(
            Xtr, ytr[:, None].astype(float), kernel=kern, inference_method=ep
        )
        if not cfg["fixed"]:
            model.optimize(max_iters=cfg["maxiter"])
            run = model.optimization_runs[-1]
            notes.append(f"{run.funct_eval} evaluations, {run.status}")
        p = np.asarray(model.predict(Xte)[0]).ravel()
    hyper = (float(model.kern.variance.values[0]), float(model.kern.lengthscale.values[0]))
    return p, hyper, notes


def fit_gpflow(method, Xtr, ytr, Xte, cfg, Z0):
    import gpflow

    kern = gpflow.kernels.SquaredExponential(
        variance=cfg["amplitude"], lengthscales=cfg["length_scale"]
    )
    Y = ytr[:, None].astype(float)
    notes = []
    if method == "GPflow VGP":
        model = gpflow.models.VGP((Xtr, Y), kernel=kern, likelihood=gpflow.likelihoods.Bernoulli())
        loss = model.training_loss
    else:
        model = gpflow.models.SVGP(
            kern, gpflow.likelihoods.Bernoulli(), Z0.copy(), num_data=Xtr.shape[0]
        )
        loss = model.training_loss_closure((Xtr, Y))
        if cfg["fixed"]:
            gpflow.set_trainable(model.inducing_variable, False)
        else:
            notes.append(f"Z optimised ({Z0.size} coordinates)")
    if cfg["fixed"]:
        gpflow.set_trainable(model.kernel, False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = gpflow.optimizers.Scipy().minimize(
            loss, model.trainable_variables, options={"maxiter": cfg["maxiter"]}
        )
        p = model.predict_y(Xte)[0].numpy().ravel()
    notes.append(f"{res.nit} iterations" + (", cap reached" if res.nit >= cfg["maxiter"] else ""))
    hyper = (float(model.kernel.variance.numpy()), float(model.kernel.lengthscales.numpy()))
    return p, hyper, notes


RUNNERS = {
    "robustep dense": fit_robustep,
    "robustep sparse": fit_robustep,
    "robustep cuda": fit_robustep,
    "scikit-learn Laplace": fit_sklearn,
    "GPy EP": fit_gpy,
    "GPflow VGP": fit_gpflow,
    "GPflow SVGP": fit_gpflow,
}
SPARSE = {"robustep sparse", "GPflow SVGP"}


# ------------------------------------------------------------------------- projections
def physical_memory():
    """Bytes of physical memory (os.sysconf), or None where unknown."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def projected_bytes(method, n, m, d):
    """Rough peak bytes of ``method`` at n training points, m inducing inputs, d features."""
    if method in SPARSE:
        return 8 * (SPARSE_ARRAYS * n * m + 10 * m * m + 4 * n * d)
    return 8 * DENSE_ARRAYS[method] * n * n


def skip_reason(method, n, m, d, last, cfg):
    """Why the (method, n) cell is skipped, or None.  ``last``: (n, seconds) of the same
    method at the previous size, or None.  The reference, robustep dense, is skipped only
    for memory."""
    limit = cfg["memory_fraction"] * (physical_memory() or math.inf)
    need = projected_bytes(method, n, m, d)
    if need > limit:
        return f"skipped: projected memory {need / 2**30:.1f} GiB > {limit / 2**30:.1f} GiB"
    if last is not None and method != "robustep dense":
        n0, t0 = last
        t = t0 * (n / n0) ** (1 if method in SPARSE else 3)
        if t > cfg["max_seconds"]:
            limit = cfg["max_seconds"]
            return f"skipped: projected {t:.0f} s (from {t0:.1f} s at n = {n0}) > {limit:.0f} s"
    return None


# --------------------------------------------------------------------------------- run
def warm_up(available, cfg):
    """Fit each method once on 40 points, untimed: lazy imports and first-call set-up of
    every library stay out of the table (GPflow's per-model tf.function tracing does not)."""
    Xtr, ytr, Xte, _ = synthetic(40, 10, seed=99)
    Z0 = Xtr[:4]
    for name in available:
        try:
            RUNNERS[name](name, Xtr, ytr, Xte, {**cfg, "maxiter": 2, "length_scale": 1.0}, Z0)
        except Exception:  # noqa: BLE001, S110 - the timed run reports failures
            pass


def run(cfg, methods, log=print):
    """Rows (dicts) of the table: one per (data, n, method) plus one per missing library."""
    from sklearn.metrics import log_loss

    rows = []
    for name, _, module, reason in methods:
        if module is None:
            rows.append({"data": "all", "method": name, "n": None, "status": reason})
    available = [name for name, _, module, _ in methods if module is not None]
    warm_up(available, cfg)
    for data in cfg["data"]:
        if data == "synthetic":
            Xp, yp, Xte, yte = synthetic(max(cfg["sizes"]), cfg["test"])
        elif data == "spambase":
            Xp, yp, Xte, yte = spambase()
        else:
            raise ValueError(f"unknown data set {data!r}; use 'synthetic' or 'spambase'")
        dcfg = {**cfg, "length_scale": cfg["length_scale"] or math.sqrt(Xp.shape[1])}
        last = {}
        for n in cfg["sizes"]:
            if n > Xp.shape[0]:
                status = f"not enough data ({Xp.shape[0]} training points)"
                for name in available:
                    rows.append({"data": data, "method": name, "n": n, "status": status})
                continue
            Xtr, ytr = Xp[:n], yp[:n]
            Z0 = kmeans_centres(Xtr, cfg["inducing"])
            for name in available:
                m = len(Z0) if name in SPARSE else None
                row = {"data": data, "method": name, "n": n, "m": m}
                reason = skip_reason(name, n, len(Z0), Xtr.shape[1], last.get(name), cfg)
                if reason is not None:
                    rows.append({**row, "status": reason})
                    log(f"# {data} n={n} {name}: {reason}", file=sys.stderr)
                    continue
                t0 = time.perf_counter()
                try:
                    p, hyper, notes = RUNNERS[name](name, Xtr, ytr, Xte, dcfg, Z0)
                except Exception as err:  # noqa: BLE001 - report a failing peer, go on
                    rows.append({**row, "status": f"failed: {type(err).__name__}: {err}"[:160]})
                    log(f"# {data} n={n} {name}: failed {err!r}", file=sys.stderr)
                    continue
                seconds = time.perf_counter() - t0
                last[name] = (n, seconds)
                p = np.clip(np.asarray(p, float), 1e-15, 1 - 1e-15)
                rows.append({
                    **row, "status": "ok", "seconds": seconds,
                    "error": float(np.mean((p > 0.5) != (yte == 1))),
                    "log_loss": float(log_loss(yte, p, labels=[0, 1])),
                    "amplitude": hyper[0], "length_scale": hyper[1], "notes": notes,
                })  # fmt: skip
                log(f"# {data} n={n} {name}: {seconds:.2f} s", file=sys.stderr)
    _relative(rows)
    return rows


def _relative(rows):
    """Add time / robustep dense's, error - its, log loss - its (same data, n) to the rows."""
    ref = {(r["data"], r["n"]): r for r in rows
           if r["method"] == "robustep dense" and r["status"] == "ok"}  # fmt: skip
    for r in rows:
        base = ref.get((r["data"], r["n"]))
        if r["status"] == "ok" and base is not None:
            r["time_ratio"] = r["seconds"] / base["seconds"]
            r["d_error"] = r["error"] - base["error"]
            r["d_log_loss"] = r["log_loss"] - base["log_loss"]


def table(rows):
    """The markdown table of ``rows`` (a string)."""
    lines = [
        "| data | method | n | wall s | test error | log loss | time / robustep | Δ error | "
        "Δ log loss | σ², ℓ | notes |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        n = "—" if r["n"] is None else str(r["n"]) + (f" (m = {r['m']})" if r.get("m") else "")
        if r["status"] != "ok":
            lines.append(f"| {r['data']} | {r['method']} | {n} | {r['status']} |" + "  |" * 7)
            continue
        rel = ("—", "—", "—")
        if "time_ratio" in r:
            rel = (f"{r['time_ratio']:.2f}", f"{r['d_error']:+.3f}", f"{r['d_log_loss']:+.3f}")
        lines.append(
            f"| {r['data']} | {r['method']} | {n} | {r['seconds']:.2f} | {r['error']:.3f} | "
            f"{r['log_loss']:.3f} | {rel[0]} | {rel[1]} | {rel[2]} | "
            f"{r['amplitude']:.3g}, {r['length_scale']:.3g} | {'; '.join(r['notes'])} |"
        )
    return "\n".join(lines)


def header(cfg, threads):
    """Markdown lines: machine, BLAS threads, versions, protocol settings."""
    from threadpoolctl import threadpool_info

    blas = ", ".join(
        f"{p.get('internal_api')} {p.get('version')} ({p.get('num_threads')} threads)"
        for p in threadpool_info() if p.get("user_api") == "blas"
    )  # fmt: skip
    mem = physical_memory()
    mode = "fixed hyperparameters" if cfg["fixed"] else "each library optimises its evidence"
    return "\n".join([
        f"## Peers, {mode} ({time.strftime('%Y-%m-%d %H:%M %Z')})",
        "",
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, "
        f"{'?' if mem is None else f'{mem / 2**30:.0f} GiB'}; threads: {threads} "
        f"(threadpoolctl, robustep.config(blas_threads), TensorFlow intra-op, torch); BLAS: {blas}",
        "versions: " + ", ".join(f"{k} {v}" for k, v in versions().items()),
        f"settings: sizes {cfg['sizes']}, synthetic test {cfg['test']} points, Spambase test "
        f"{SPAMBASE_TEST}, initial σ² = {cfg['amplitude']}, ℓ = {cfg['length_scale'] or '√d'}, "
        f"GPy/GPflow maxiter {cfg['maxiter']}, GPy ep_mode {cfg['gpy_ep_mode']}, "
        f"inducing m = {cfg['inducing']}",
        "",
    ])  # fmt: skip


def main(argv=None):
    """Parse ``argv``, run, print the header and the table; returns the rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n = 100, 200 test points (seconds)")
    parser.add_argument("--fixed", action="store_true", help="no hyperparameter optimisation")
    parser.add_argument("--sizes", type=int, nargs="+", default=None)
    parser.add_argument("--test", type=int, default=None, help="synthetic test-set size")
    parser.add_argument("--data", nargs="+", choices=["synthetic", "spambase"], default=None)
    parser.add_argument("--libraries", nargs="+", choices=["robustep", "sklearn", "gpy", "gpflow"],
                        default=["robustep", "sklearn", "gpy", "gpflow"])  # fmt: skip
    parser.add_argument("--maxiter", type=int, default=None, help="GPy / GPflow L-BFGS cap")
    parser.add_argument("--inducing", type=int, default=None, help="inducing inputs m")
    parser.add_argument(
        "--gpy-ep-mode",
        choices=["nested", "alternated"],
        default="nested",
        help="GPy's EP: re-run per evaluation (nested) or once (alternated)",
    )
    parser.add_argument("--amplitude", type=float, default=1.0)
    parser.add_argument("--length-scale", type=float, default=None, help="default sqrt(d)")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0))
                        if hasattr(os, "sched_getaffinity") else os.cpu_count())  # fmt: skip
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=1800.0,
        help="skip a cell whose time projected from the last n exceeds this",
    )
    parser.add_argument("--memory-fraction", type=float, default=0.5)
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    args = parser.parse_args(argv)
    base = QUICK if args.quick else FULL
    cfg = {
        "sizes": args.sizes or base["sizes"],
        "test": args.test or base["test"],
        "data": args.data or base["data"],
        "maxiter": args.maxiter or base["maxiter"],
        "inducing": args.inducing or base["inducing"],
        "amplitude": args.amplitude,
        "length_scale": args.length_scale,
        "fixed": args.fixed,
        "gpy_ep_mode": args.gpy_ep_mode,
        "max_seconds": args.max_seconds,
        "memory_fraction": args.memory_fraction,
    }
    if min(cfg["sizes"]) < 2 or cfg["test"] < 1 or cfg["maxiter"] < 1 or cfg["inducing"] < 1:
        parser.error("--sizes >= 2, --test, --maxiter and --inducing >= 1")
    from threadpoolctl import threadpool_limits

    import robustep

    methods = resolve_methods(args.libraries, args.threads)  # imports before the limits
    with threadpool_limits(limits=args.threads), robustep.config(blas_threads=args.threads):
        print(header(cfg, args.threads), flush=True)
        rows = run(cfg, methods)
    print(table(rows), flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"config": cfg, "versions": versions(), "rows": rows}, fh, indent=1)
    return rows


if __name__ == "__main__":
    from _harness import run_suite  # benchmarks/_harness.py

    sys.exit(run_suite("peers", main, quick="pass"))
