"""Learning at user size: robustep's stochastic power-EP learner against GPflow's SVGP.

Every learner starts from the same kernel (σ² × isotropic RBF, σ² = ℓ = 1), the same
k-means inducing inputs Z0 and the same minibatch size, runs under the same number of
threads (BLAS for robustep, TensorFlow's intra-op pool for GPflow) and is given a budget
of *training* wall time.  At checkpoints (the end of the first epoch after every
``--eval-every`` seconds of training, and at the stop) it is evaluated on the test set;
the evaluation is timed apart and excluded from the training clock.

Parts (``--parts``; the default runs ``classification regression small-data``):

* ``classification``: the probit problem of benchmarks/sparse.py (d = 8, labels
  sign(f + 0.3 ε); training inputs from seed 2, test from seed 99).  robustep:
  :func:`robustep.ep.stochastic.fit_stochastic_ep` with :data:`ROBUSTEP_SETTINGS` (probit,
  learning θ and Z).  GPflow: ``SVGP`` with ``Bernoulli()`` (probit) and whitened q(u),
  (a) natural gradients on q(u) (γ = 0.1) with Adam on θ and Z, (b) Adam on everything.
  Tables: the final values, the time each learner needs to reach SVGP's best test log loss,
  the hyperparameters at the end (and whether one sits within 1% of the kernel's bounds,
  log-scale), the learning curves; the figure ``learning_curves.png``.
* ``regression``: Student-t regression, d = 8, y = f + 0.1 ε with 10% gross outliers
  (±U(2, 10)) in the training targets; robustep's learner with ``StudentT(4, 1)``
  learning ν and the scale too, trained on the contaminated targets and on the
  outlier-free ones; GPflow SVGP with ``StudentT`` (its ν is a fixed constant in GPflow:
  4) on the contaminated targets.  Test MAE of the predictive mean against the clean f.
* ``small-data``: on the n = 2000, 2-D probit set of tests/ep/test_stochastic_ep.py
  (m = 20 inducing inputs held fixed, α = 0.5), the optimum of the full-batch evidence
  (power EP, L-BFGS-B) against the learner's end point: both evidences and the mean and
  largest difference of the predictive probabilities.
* ``alpha``: the inducing power α with optimised inducing inputs on three data sets (the
  synthetic n = 2000 set of benchmarks/peers.py, Spambase, Pima), each by the full-batch
  search ``GPClassifier(inducing_points=Z0, inducing_power=α)`` and by the stochastic
  learner, against dense EP: test log loss, error, fitted amplitude and length-scale,
  time.  Results go to ``learning_alpha.json``.
* ``tune``: the tuning grid on a smaller proxy (``--tune-n`` points, ``--tune-budget``
  seconds each): robustep's learning rate, damping, site kind and batch size, and SVGP's
  Adam learning rate for both variants.  Results go to ``learning_tuning.json``.
* ``estimators``: ``GPClassifier(inducing_points=64)`` with ``learner="full_batch"`` and
  ``"stochastic"`` on the 2-d problem of docs/guide/large-data.md (n = 2000 … 10⁵; the
  full-batch search up to 2·10⁴): fit seconds, accuracy and log loss.  Results go to
  ``learning_estimators.json``.
* ``million``: n = 10⁶ side by side, on the classification problem (the same generator;
  the training rows as a Dask array of blocks of ``--chunk`` rows, block j from seed
  (2, j), generated on the workers; the same 20 000 test points).  robustep: the
  estimator as a user calls it, ``GPClassifier(kernel, inducing_points=Z0,
  learner=StochasticLearner(callback=...))`` (the default learner; the callback scores
  each epoch on the test set and stops the learner at the budget) fitting the Dask
  array on a ``LocalCluster`` of ``--workers`` worker processes with one thread each
  (0: Dask's threaded scheduler, no cluster), then its final EP fit over the chunks;
  the peak resident memory of every worker and of the driver.  GPflow's two SVGP
  variants train on the same rows in memory.  The reference: the same estimator in
  memory at n = ``--million-ref-n`` (10⁵; training rows from seed 2).  Z0: k-means of
  the first 20 m rows of the Dask array (a subsample; the rows are exchangeable),
  shared by every learner; m, minibatch and test set as the classification part, one
  thread.  Tables: final values (after learning and after the final EP fit), the
  verdict "within 0.01 of the reference's test log loss", the time to SVGP's best log
  loss, the learning curves; the figure ``learning_million_curves.png``.  Results go
  to ``learning_million.json``.  ``--quick`` runs it at n = 4000 (reference 2000) for a
  few seconds per learner.
* ``multiclass``: the sparse multinomial model, ``GPClassifier(inducing_points=m,
  multi_class="multinomial")`` with each learner (the stochastic one learns under pairwise
  probit factors, docs/derivations/stochastic_multiclass.md; nested EP at the end either
  way) on a 3-class 2-d problem (n = 2·10⁴, m = 32; the learner's defaults) and on digits
  (10 classes, 1000 training points, m = 32; the learner with ``batch_size=100``, since
  the default 1000 is the whole set): fit seconds, test accuracy and log loss.  Results
  go to ``learning_multiclass.json``.

robustep's learner is called through one function, :func:`run_robustep`.  The SVGP side
runs in another Python (``--peer-python PATH``, an environment with GPflow and TensorFlow;
robustep need not be installed there) as ``PATH benchmarks/learning.py --svgp-worker IN
OUT``, with data and results exchanged through files in a temporary folder; without
``--peer-python`` its rows say "not run".

Usage::

    python benchmarks/learning.py --quick [--peer-python PATH]   # under a minute
    # n = 10⁶ on Dask against SVGP in memory (four budgets of 1500 s, the final EP fits)
    python benchmarks/learning.py --parts million --full --peer-python PATH
    python benchmarks/learning.py --full --peer-python PATH      # the published numbers
    python benchmarks/learning.py --parts alpha --full            # learning_alpha.json
    python benchmarks/learning.py --parts tune --full --peer-python PATH
    python benchmarks/learning.py --parts estimators --full       # learning_estimators.json
    python benchmarks/learning.py --parts multiclass --full       # learning_multiclass.json

``--full``: n = 10⁵ training and 20 000 test points, m = 256, minibatch 1000, 2 threads,
600 s for each classification learner, 300 s for each regression learner, checkpoints every
30 s: about 50 minutes with the SVGP side (3 × 600 s + 3 × 300 s of training plus the
evaluations and TensorFlow's start).  ``--threads 1`` on a shared machine: two OpenBLAS
threads on oversubscribed cores slow robustep's m × m algebra by an order of magnitude
(TensorFlow's pool is not affected in the same way), which would measure the machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent

PARTS = ("classification", "regression", "small-data", "alpha", "tune", "estimators",
         "million", "multiclass")  # fmt: skip
DEFAULT_PARTS = ("classification", "regression", "small-data")
#: ``--quick`` without ``--parts`` (``make bench``) also runs the million part's quick form
QUICK_PARTS = (*DEFAULT_PARTS, "million")

FULL = {
    "n": 100_000, "test": 20_000, "d": 8, "m": 256, "batch": 1000, "threads": 2,
    "budget": 600.0, "peer_budget": 600.0, "reg_budget": 300.0, "eval_every": 30.0,
    "tune_n": 20_000, "tune_test": 5000, "tune_budget": 60.0, "alpha_m": 64,
    "alpha_max_train": 2000,
    "small_epochs": 40, "est_sizes": (2000, 10_000, 20_000, 100_000), "est_full_max": 20_000,
    "million_n": 1_000_000, "million_ref_n": 100_000, "million_budget": 1500.0,
    "million_threads": 1, "chunk": 50_000, "workers": 2,
    "mc_n": 20_000, "mc_m": 32, "digits_n": 1000, "digits_m": 32, "digits_batch": 100,
}  # fmt: skip
QUICK = {
    "n": 2000, "test": 1000, "d": 8, "m": 32, "batch": 200, "threads": 1,
    "budget": 4.0, "peer_budget": 4.0, "reg_budget": 3.0, "eval_every": 1.0,
    "tune_n": 2000, "tune_test": 500, "tune_budget": 2.0, "alpha_m": 16,
    "alpha_max_train": 300,
    "small_epochs": 10, "est_sizes": (500, 1000), "est_full_max": 1000,
    "million_n": 4000, "million_ref_n": 2000, "million_budget": 3.0,
    "million_threads": 1, "chunk": 1000, "workers": 2,
    "mc_n": 600, "mc_m": 16, "digits_n": 300, "digits_m": 8, "digits_batch": 50,
}  # fmt: skip

# robustep's learner as benchmarked: the settings the estimators' stochastic learner uses,
# its warm-up epoch included (StochasticLearner(warmup_epochs=1); benchmarks/learning_seeds.py
# measures what the warm-up changes)
ROBUSTEP_SETTINGS = {
    "power": 0.5,
    "learning_rate": 0.05,
    "lr_decay_epochs": 5.0,
    "damping": 2.0,
    "tied_sites": True,
    "warmup_epochs": 1,
}
SVGP_VARIANTS = {
    "SVGP natgrad+Adam": {"natgrad": True, "gamma": 0.1, "learning_rate": 0.01},
    "SVGP Adam": {"natgrad": False, "learning_rate": 0.01},
}
KERNEL_BOUNDS = (1e-5, 1e5)  # scikit-learn's defaults for ConstantKernel and RBF
BOUND_TOLERANCE = 0.01  # "at a bound": within 1% of it, on the log scale


# ------------------------------------------------------------------------------- data
def _sibling(name):
    """benchmarks/NAME.py, loaded by path once (``import sparse`` would find the pydata
    package, and the benchmarks folder need not be on sys.path)."""
    import importlib.util

    key = f"_benchmarks_{name.lstrip('_')}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, HERE / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


def classification_data(n, n_test, d=8):
    """The probit problem of benchmarks/sparse.py: X (n, d), y (n,) in ±1, X_test, y_test."""
    bench = _sibling("sparse")
    X, y = bench._probit_data(n, d, np.random.default_rng(2))
    Xt, yt = bench._probit_data(n_test, d, np.random.default_rng(99))
    return X, y, Xt, yt


def _regression_f(X):
    return np.sin(1.5 * X[:, 0]) * np.cos(X[:, 1]) + 0.5 * np.sum(np.sin(X[:, 2:]), axis=1)


def regression_data(n, n_test, d=8, outlier_fraction=0.1):
    """X (n, d) uniform on [-3, 3]^d, clean targets f + 0.1 ε, the same with a fraction of
    gross outliers (± U(2, 10)), and the clean test function: (X, y_clean, y_outliers,
    X_test, f_test)."""
    rng = np.random.default_rng(4)
    X = rng.uniform(-3, 3, size=(n, d))
    y_clean = _regression_f(X) + 0.1 * rng.normal(size=n)
    y_out = y_clean.copy()
    idx = rng.choice(n, int(outlier_fraction * n), replace=False)
    y_out[idx] += rng.choice([-1, 1], idx.size) * rng.uniform(2, 10, idx.size)
    Xt = np.random.default_rng(5).uniform(-3, 3, size=(n_test, d))
    return X, y_clean, y_out, Xt, _regression_f(Xt)


def kmeans_start(X, m, seed=0):
    """Z0 (m, d): k-means centres of a random subset of 20 m inputs (as stochastic_ep.py)."""
    from sklearn.cluster import KMeans

    rng = np.random.default_rng(seed)
    sub = X[rng.choice(X.shape[0], min(X.shape[0], 20 * m), replace=False)]
    return KMeans(m, n_init=1, random_state=seed).fit(sub).cluster_centers_


# ---------------------------------------------------------------------------- metrics
def classification_metrics(mean, var, y):
    """Test error and log loss of the probit predictive Φ(mean / √(1 + var)), y in ±1."""
    from scipy.special import log_ndtr

    z = mean / np.sqrt(1.0 + var)
    s = np.where(y > 0, 1.0, -1.0)
    return {
        "error": float(np.mean(np.sign(z + (z == 0)) != s)),
        "log_loss": float(-np.mean(log_ndtr(s * z))),
    }


def regression_metrics(mean, f_test):
    """Mean absolute error of the predictive mean against the clean function."""
    return {"mae": float(np.mean(np.abs(mean - f_test)))}


def time_to_reach(curve, key, target, budget=None):
    """Training seconds at the first checkpoint whose ``key`` is at most ``target`` (None:
    never, or only after ``budget`` seconds)."""
    for point in curve:
        if budget is not None and point["train_s"] > budget:
            return None
        if point[key] <= target:
            return point["train_s"]
    return None


def at_bound(value, bounds=KERNEL_BOUNDS, tolerance=BOUND_TOLERANCE):
    """Whether a positive hyperparameter lies within ``tolerance`` (log scale) of a bound,
    or beyond it."""
    log_v = math.log(value)
    return log_v <= math.log(bounds[0]) + tolerance or log_v >= math.log(bounds[1]) - tolerance


# -------------------------------------------------------------------- robustep's side
def run_robustep(
    X, y, Z0, likelihood, budget, *, evaluate, eval_every, batch_size, threads=1, seed=0,
    settings=None,
):  # fmt: skip
    """robustep's stochastic learner for ``budget`` seconds of training.

    The one place the benchmark calls robustep's learner (an estimator's
    ``fit(X, y)`` with a wall budget can replace it).

    Parameters
    ----------
    X : (n, d) inputs; y : (n,) targets for ``likelihood``; Z0 : (m, d) initial inducing
        inputs; likelihood : robustep likelihood (its parameters are learned).
    budget : seconds of training (evaluation excluded); checked at the end of each epoch.
    evaluate : callable ``(latent) -> dict`` of test metrics, given ``latent(X) -> (mean,
        var)``, the latent predictive of the current state.
    eval_every : seconds of training between checkpoints (at epoch ends).
    batch_size, threads, seed : minibatch size, BLAS threads, minibatch order.
    settings : overrides of :data:`ROBUSTEP_SETTINGS`.

    Returns
    -------
    dict
        ``curve`` (list of checkpoints: ``epoch``, ``train_s``, ``eval_s`` and the metrics),
        ``params`` (amplitude, length_scale and the likelihood's parameters at the end),
        ``stopped``, ``steps``, ``eval_s`` (evaluation seconds in all).
    """
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel

    blas_threads = _sibling("_harness").blas_threads
    from robustep.ep.stochastic import fit_stochastic_ep

    cfg = {**ROBUSTEP_SETTINGS, **(settings or {})}
    warmup = int(cfg.pop("warmup_epochs", 0))
    curve, clock = [], {"eval": 0.0, "last": -np.inf, "warmup": 0.0}

    def checkpoint(state, record):
        t0 = time.perf_counter()
        train_s = record["time"] + clock["warmup"] - clock["eval"]
        done = train_s >= budget
        if done or train_s - clock["last"] >= eval_every:
            clock["last"] = train_s
            curve.append({"epoch": record["epoch"], "train_s": train_s, **evaluate(state.predict)})
        clock["eval"] += time.perf_counter() - t0
        if curve:
            curve[-1]["eval_s"] = clock["eval"]
        return done

    kernel = ConstantKernel(1.0) * RBF(1.0)
    # the warm-up's epochs (site updates at the start) count as training time
    rng, state = (np.random.default_rng(seed) if warmup else seed), None
    with blas_threads(threads):
        if warmup:
            t0 = time.perf_counter()
            state = fit_stochastic_ep(
                kernel, X, y, likelihood, Z0, batch_size=batch_size, n_epochs=warmup,
                random_state=rng, learn_kernel=False, learn_likelihood=False,
                learn_inducing=False, **cfg,
            )  # fmt: skip
            clock["warmup"] = time.perf_counter() - t0
        fit = fit_stochastic_ep(
            kernel, X, y, likelihood, Z0, batch_size=batch_size, n_epochs=10**9,
            random_state=rng, callback=checkpoint, state=state, **cfg,
        )  # fmt: skip
    params = {
        "amplitude": float(fit.kernel.k1.constant_value),
        "length_scale": float(fit.kernel.k2.length_scale),
    }
    for name in fit.likelihood.hyperparameter_names:
        params[name] = float(getattr(fit.likelihood, name))
    return {
        "curve": curve,
        "params": params,
        "stopped": fit.stopped,
        "steps": fit.n_steps,
        "eval_s": clock["eval"],
    }


# ------------------------------------------------------------------------ GPflow's side
def run_svgp(
    peer_python, X, y, Z0, Xt, target_t, *, likelihood, budget, eval_every, batch_size,
    threads, learning_rate, natgrad, gamma=0.1, df=4.0, seed=0, timeout=None,
):  # fmt: skip
    """GPflow SVGP in ``peer_python`` (a subprocess running this file's worker).

    Parameters
    ----------
    peer_python : path of a Python with GPflow and TensorFlow.
    X (n, d), y (n,) : training data (y in ±1 for ``likelihood="bernoulli"``, real for
        ``"student_t"``); Z0 (m, d) : initial inducing inputs; Xt (k, d), target_t (k,) :
        the test inputs and labels (classification) or clean function values (regression).
    budget, eval_every, batch_size, threads, seed : as :func:`run_robustep`.
    learning_rate : Adam's step; natgrad : natural gradients (step ``gamma``) on q(u) and
        Adam on θ, Z (and the likelihood), else Adam on everything.
    df : the Student-t's degrees of freedom (fixed in GPflow).

    Returns
    -------
    dict
        As :func:`run_robustep` (``curve``, ``params``, ``stopped``, ``steps``, ``eval_s``),
        plus ``compile_s`` (TensorFlow's tracing of the step into a graph, before the
        training clock starts); or
        ``{"error": message}`` when the subprocess failed.
    """
    config = {
        "likelihood": likelihood, "budget": budget, "eval_every": eval_every,
        "batch_size": batch_size, "threads": threads, "learning_rate": learning_rate,
        "natgrad": natgrad, "gamma": gamma, "df": df, "seed": seed,
    }  # fmt: skip
    folder = tempfile.mkdtemp(prefix="robustep-learning-")
    try:
        inp, out = os.path.join(folder, "in.npz"), os.path.join(folder, "out.json")
        np.savez(inp, X=X, y=y, Z0=Z0, Xt=Xt, target_t=target_t, config=json.dumps(config))
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
        env.pop("PYTHONPATH", None)  # numpy and the rest from the peer's own environment
        proc = subprocess.run(
            [str(peer_python), str(Path(__file__).resolve()), "--svgp-worker", inp, out],
            capture_output=True, text=True, env=env, timeout=timeout,
        )  # fmt: skip
        if proc.returncode != 0 or not os.path.exists(out):
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            return {"error": f"exit {proc.returncode}: {' / '.join(tail)}"}
        with open(out) as fh:
            return json.load(fh)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _svgp_worker(inp, out):
    """The SVGP run inside the peer Python (imports only numpy, TensorFlow and GPflow)."""
    data = np.load(inp)
    cfg = json.loads(str(data["config"]))
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(int(cfg["threads"]))
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import gpflow

    X, Z0, Xt, target = data["X"], data["Z0"], data["Xt"], data["target_t"]
    classification = cfg["likelihood"] == "bernoulli"
    y = (data["y"] > 0).astype(float) if classification else data["y"].astype(float)
    n = X.shape[0]
    kernel = gpflow.kernels.SquaredExponential(variance=1.0, lengthscales=1.0)
    if classification:
        likelihood = gpflow.likelihoods.Bernoulli()  # probit link
    else:
        likelihood = gpflow.likelihoods.StudentT(scale=1.0, df=float(cfg["df"]))
    model = gpflow.models.SVGP(
        kernel, likelihood, gpflow.inducing_variables.InducingPoints(Z0.copy()), num_data=n
    )
    adam = gpflow.keras.tf_keras.optimizers.Adam(float(cfg["learning_rate"]))
    if cfg["natgrad"]:
        gpflow.set_trainable(model.q_mu, False)
        gpflow.set_trainable(model.q_sqrt, False)
        natgrad = gpflow.optimizers.NaturalGradient(gamma=float(cfg["gamma"]))
    variables = model.trainable_variables

    spec = [tf.TensorSpec([None, X.shape[1]], tf.float64), tf.TensorSpec([None, 1], tf.float64)]

    @tf.function(input_signature=spec)
    def step(Xb, Yb):
        def loss():
            return model.training_loss((Xb, Yb))

        if cfg["natgrad"]:
            natgrad.minimize(loss, var_list=[(model.q_mu, model.q_sqrt)])
        with tf.GradientTape() as tape:
            value = loss()
        adam.apply_gradients(zip(tape.gradient(value, variables), variables, strict=True))
        return value

    def evaluate():
        means, variances = [], []
        for start in range(0, Xt.shape[0], 5000):
            mu, var = model.predict_f(Xt[start : start + 5000])
            means.append(mu.numpy()[:, 0])
            variances.append(var.numpy()[:, 0])
        mean, var = np.concatenate(means), np.concatenate(variances)
        if classification:
            from scipy.special import log_ndtr

            z = mean / np.sqrt(1.0 + var)
            s = np.where(target > 0, 1.0, -1.0)
            return {
                "error": float(np.mean(np.sign(z + (z == 0)) != s)),
                "log_loss": float(-np.mean(log_ndtr(s * z))),
            }
        return {"mae": float(np.mean(np.abs(mean - target)))}

    # tracing the step into a graph: before the training clock starts, timed apart
    t0 = time.perf_counter()
    step.get_concrete_function()
    compile_s = time.perf_counter() - t0
    rng = np.random.default_rng(int(cfg["seed"]))
    b = int(min(cfg["batch_size"], n))
    budget, eval_every = float(cfg["budget"]), float(cfg["eval_every"])
    train_s, eval_s, last, steps, epoch = 0.0, 0.0, -np.inf, 0, 0
    curve, stopped = [], "budget"
    while train_s < budget:
        epoch += 1
        order = rng.permutation(n)
        for start in range(0, n, b):
            idx = order[start : start + b]
            t0 = time.perf_counter()
            try:
                value = step(tf.constant(X[idx]), tf.constant(y[idx, None])).numpy()
            except tf.errors.InvalidArgumentError:  # GPflow's check of a NaN step
                value = np.nan
            train_s += time.perf_counter() - t0
            steps += 1
            if not np.isfinite(value):
                stopped = f"non-finite step {steps}"
            done = train_s >= budget or stopped != "budget"
            if done or train_s - last >= eval_every:
                last = train_s
                t0 = time.perf_counter()
                curve.append({"epoch": epoch, "train_s": train_s, **evaluate()})
                eval_s += time.perf_counter() - t0
                curve[-1]["eval_s"] = eval_s
            if done:
                break
        if stopped != "budget":
            break
    params = {
        "amplitude": float(model.kernel.variance.numpy()),
        "length_scale": float(np.asarray(model.kernel.lengthscales.numpy()).ravel()[0]),
    }
    if not classification:
        params["scale"] = float(model.likelihood.scale.numpy())
        params["df"] = float(cfg["df"])
    record = {
        "curve": curve, "params": params, "stopped": stopped, "steps": steps,
        "eval_s": eval_s, "compile_s": compile_s,
        "versions": {"gpflow": gpflow.__version__, "tensorflow": tf.__version__},
    }  # fmt: skip
    with open(out, "w") as fh:
        json.dump(record, fh)


# ------------------------------------------------------------------------------ tables
def _fmt(value, digits=4):
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (int, np.integer)):
        return str(value)
    if abs(value) >= 1e4 or (value != 0 and abs(value) < 1e-3):
        return f"{value:.3g}"
    return f"{value:.{digits}g}" if abs(value) >= 10 else f"{value:.{digits}f}"


def _table(heading, columns, rows, note=None):
    """Print a Markdown table under a fixed ``###`` heading (its name in the results JSON)."""
    if note:
        print(f"\n{note}")
    print(f"\n### {heading}\n")
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(_fmt(c) for c in row) + " |")


def _final(run, key):
    return run["curve"][-1][key] if run.get("curve") else None


def _best(run, key, budget=None):
    values = [p[key] for p in run.get("curve", []) if budget is None or p["train_s"] <= budget]
    return min(values) if values else None


def _bound_flags(params):
    hits = [k for k in ("amplitude", "length_scale") if k in params and at_bound(params[k])]
    return ", ".join(hits) if hits else "none"


def _peer(args, name):
    return None if args.peer_python else {"error": "not run (no --peer-python)"}


# ---------------------------------------------------------------------- classification
def classification(cfg, args):
    from robustep.likelihoods import Probit

    X, y, Xt, yt = classification_data(cfg["n"], cfg["test"], cfg["d"])
    Z0 = kmeans_start(X, cfg["m"])

    def evaluate(latent):
        return classification_metrics(*latent(Xt), yt)

    print(
        f"\nClassification: probit data of benchmarks/sparse.py, n = {cfg['n']}, "
        f"{cfg['test']} test points, d = {cfg['d']}, m = {cfg['m']} (k-means Z0, shared), "
        f"minibatch {cfg['batch']}, {cfg['threads']} threads; budgets {cfg['budget']:g} s "
        f"(robustep) and {cfg['peer_budget']:g} s (SVGP), checkpoints every "
        f"{cfg['eval_every']:g} s of training; robustep settings {ROBUSTEP_SETTINGS}"
    )
    runs = {"robustep": run_robustep(
        X, y, Z0, Probit(), cfg["budget"], evaluate=evaluate, eval_every=cfg["eval_every"],
        batch_size=cfg["batch"], threads=cfg["threads"],
    )}  # fmt: skip
    for name, variant in SVGP_VARIANTS.items():
        runs[name] = _peer(args, name) or run_svgp(
            args.peer_python, X, y, Z0, Xt, yt, likelihood="bernoulli",
            budget=cfg["peer_budget"], eval_every=cfg["eval_every"], batch_size=cfg["batch"],
            threads=cfg["threads"], **variant,
        )  # fmt: skip
    report_classification(runs, cfg)
    return runs


def _time_to_peer_best(runs, peers):
    """Rows [learner, target, seconds to reach it, / the peer's seconds] of every run
    without an error, for the target = the best test log loss among ``peers``; returns
    (rows, the best peer's name, target, the peer's seconds)."""
    best_name = min(peers, key=lambda k: _best(peers[k], "log_loss"))
    target = _best(peers[best_name], "log_loss")
    t_peer = time_to_reach(peers[best_name]["curve"], "log_loss", target)
    rows = []
    for name, run in runs.items():
        if "error" not in run:
            t = time_to_reach(run["curve"], "log_loss", target)
            rows.append([name, target, t, None if t is None else t / t_peer])
    return rows, best_name, target, t_peer


def _time_to_peer_table(title, rows, note):
    """The table of :func:`_time_to_peer_best`'s rows."""
    _table(title, ["learner", "target log loss", "reached after s", "time / SVGP's time"],
           rows, note=note)  # fmt: skip


def _curves_table(title, runs):
    """The per-checkpoint test error and log loss of every run with a curve."""
    rows = [
        [name, p["epoch"], p["train_s"], p["error"], p["log_loss"]]
        for name, run in runs.items() if "curve" in run for p in run["curve"]
    ]  # fmt: skip
    _table(title, ["learner", "epoch", "trained s", "test error", "test log loss"], rows)


def report_classification(runs, cfg):
    """The classification tables; returns the done-when verdict (None without SVGP)."""
    rows = []
    for name, run in runs.items():
        if "error" in run:
            rows.append([name] + ["—"] * 8 + [run["error"]])
            continue
        rows.append([
            name, run["curve"][-1]["train_s"], run["steps"], run["curve"][-1]["epoch"],
            _final(run, "error"), _final(run, "log_loss"), _best(run, "log_loss"),
            run["eval_s"], run.get("compile_s"), run["stopped"],
        ])  # fmt: skip
    _table(
        "classification: final values",
        ["learner", "trained s", "steps", "epochs", "test error", "test log loss",
         "best log loss", "evaluation s", "graph tracing s", "stopped"],
        rows,
    )  # fmt: skip
    peers = {k: r for k, r in runs.items() if k != "robustep" and "error" not in r}
    verdict = None
    rows = []
    if peers:
        rows, best_name, target, t_peer = _time_to_peer_best(runs, peers)
        t_rob = time_to_reach(runs["robustep"]["curve"], "log_loss", target, cfg["budget"])
        no_bound = _bound_flags(runs["robustep"]["params"]) == "none"
        verdict = t_rob is not None and t_rob <= 0.5 * t_peer and no_bound
        note = (
            f"Target: the best test log loss of {best_name} ({target:.4f}, reached after "
            f"{t_peer:.1f} s of training).  Done when robustep reaches it within "
            f"{cfg['budget']:g} s in at most half that time and no hyperparameter ends at a "
            f"bound: {'met' if verdict else 'NOT met'}."
        )
    else:
        note = "No SVGP run: no target."
    _time_to_peer_table("classification: time to SVGP's best log loss", rows, note)
    rows = []
    for name, run in runs.items():
        if "error" in run:
            continue
        p = run["params"]
        rows.append([name, p["amplitude"], p["length_scale"], _bound_flags(p)])
    _table(
        "classification: hyperparameters at the end",
        ["learner", "amplitude σ²", "length-scale ℓ", "at a bound"],
        rows,
        note=f"Bounds: scikit-learn's kernel defaults {KERNEL_BOUNDS} for both (GPflow "
        f"itself has none); 'at a bound' = within {BOUND_TOLERANCE:g} in log.",
    )
    _curves_table("classification: learning curves", runs)
    return verdict


# -------------------------------------------------------------------------- regression
def regression(cfg, args):
    from robustep.likelihoods import StudentT

    X, y_clean, y_out, Xt, ft = regression_data(cfg["n"], cfg["test"] // 4, cfg["d"])
    Z0 = kmeans_start(X, cfg["m"])

    def evaluate(latent):
        return regression_metrics(latent(Xt)[0], ft)

    print(
        f"\nRegression: n = {cfg['n']}, d = {cfg['d']}, m = {cfg['m']}, 10% gross outliers "
        f"(± U(2, 10)) in the training targets, Student-t likelihood started at ν = 4, "
        f"s = 1; budget {cfg['reg_budget']:g} s each; test MAE against the clean f at "
        f"{Xt.shape[0]} points"
    )
    runs = {}
    for name, yy in (("robustep, outliers", y_out), ("robustep, outlier-free", y_clean)):
        runs[name] = run_robustep(
            X, yy, Z0, StudentT(4.0, 1.0), cfg["reg_budget"], evaluate=evaluate,
            eval_every=cfg["eval_every"], batch_size=cfg["batch"], threads=cfg["threads"],
        )  # fmt: skip
    runs["SVGP natgrad+Adam, outliers"] = _peer(args, "svgp") or run_svgp(
        args.peer_python, X, y_out, Z0, Xt, ft, likelihood="student_t",
        budget=cfg["reg_budget"], eval_every=cfg["eval_every"], batch_size=cfg["batch"],
        threads=cfg["threads"], **SVGP_VARIANTS["SVGP natgrad+Adam"],
    )  # fmt: skip
    report_regression(runs, cfg)
    return runs


def report_regression(runs, cfg):
    """The regression tables; returns the MAE ratio of robustep (outliers / outlier-free)."""
    clean = _final(runs["robustep, outlier-free"], "mae")
    rows = []
    for name, run in runs.items():
        if "error" in run:
            rows.append([name] + ["—"] * 8 + [run["error"]])
            continue
        p, mae = run["params"], _final(run, "mae")
        reach = time_to_reach(run["curve"], "mae", 1.1 * clean)
        rows.append([
            name, run["curve"][-1]["train_s"], run["steps"], mae, mae / clean, reach,
            p.get("df"), p.get("scale"), p["amplitude"], p["length_scale"],
        ])  # fmt: skip
    ratio = _final(runs["robustep, outliers"], "mae") / clean
    _table(
        "regression: final values",
        ["learner, training targets", "trained s", "steps", "test MAE", "MAE / outlier-free",
         "within 10% after s", "ν", "scale s", "amplitude σ²", "length-scale ℓ"],
        rows,
        note=f"Done when robustep on the contaminated targets comes within 10% of its "
        f"outlier-free MAE in {cfg['reg_budget']:g} s: ratio {ratio:.3f}, "
        f"{'met' if ratio <= 1.1 else 'NOT met'}.  GPflow's ν is held at 4.",
    )  # fmt: skip
    rows = [
        [name, p["epoch"], p["train_s"], p["mae"]]
        for name, run in runs.items() if "curve" in run for p in run["curve"]
    ]  # fmt: skip
    _table("regression: learning curves", ["learner", "epoch", "trained s", "test MAE"], rows)
    return ratio


# ----------------------------------------------------------------------- small data
def small_data(cfg, args):
    """The learner's end point against the full-batch optimum at n = 2000 (fixed Z)."""
    from scipy.optimize import minimize
    from scipy.special import ndtr
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel

    from robustep.ep.pseudo_point import pseudo_point_log_Z_gradient, pseudo_point_power_ep
    from robustep.ep.stochastic import fit_stochastic_ep
    from robustep.likelihoods import Probit
    from robustep.posterior.sparse import FITCPrior

    n, m, alpha, jitter = 2000, 20, 0.5, 1e-6
    rng = np.random.default_rng(1)
    X = rng.uniform(-3, 3, size=(n, 2))
    f = np.sin(1.5 * X[:, 0]) * np.cos(X[:, 1])
    y = np.where(f + rng.normal(size=n) > 0, 1.0, -1.0)
    Z = X[rng.choice(n, m, replace=False)]
    Xs = np.random.default_rng(9).uniform(-3, 3, size=(300, 2))
    kernel = ConstantKernel(1.0) * RBF(1.0)

    def power_ep(theta):
        k = kernel.clone_with_theta(theta)
        res = pseudo_point_power_ep(
            FITCPrior.from_kernel(k, X, Z, jitter=jitter), y, Probit(), inducing_power=alpha,
            tol=1e-8, max_iter=300,
        )  # fmt: skip
        return k, res

    def negative(theta):
        k, res = power_ep(theta)
        g = pseudo_point_log_Z_gradient(res, k, X, Z, Probit(), y, wrt_inducing=False)[0]
        return -res.log_Z, -g

    def probability(theta):
        k, res = power_ep(theta)
        mean, var = res.posterior.predict(k(Xs, Z), k.diag(Xs))
        return ndtr(mean / np.sqrt(1 + var))

    t0 = time.perf_counter()
    opt = minimize(negative, kernel.theta, jac=True, method="L-BFGS-B")
    t_full = time.perf_counter() - t0
    t0 = time.perf_counter()
    fit = fit_stochastic_ep(
        kernel, X, y, Probit(), Z, power=alpha, batch_size=500, n_epochs=cfg["small_epochs"],
        learning_rate=0.1, learn_inducing=False, tied_sites=False, jitter=jitter,
        random_state=0,
    )  # fmt: skip
    t_sto = time.perf_counter() - t0
    mean, var = fit.predict(Xs)
    p_sto = ndtr(mean / np.sqrt(1 + var))
    p_full = probability(opt.x)
    ev_full, ev_sto = -opt.fun, -negative(fit.kernel.theta)[0]
    amp = np.exp([opt.x[0], fit.kernel.theta[0]])
    ell = np.exp([opt.x[1], fit.kernel.theta[1]])
    rows = [
        ["log evidence (power EP at the θ)", ev_full, ev_sto,
         f"{abs(ev_sto - ev_full) / abs(ev_full):.2%} (≤ 1%)"],
        ["amplitude σ²", amp[0], amp[1], _fmt(amp[1] - amp[0])],
        ["length-scale ℓ", ell[0], ell[1], _fmt(ell[1] - ell[0])],
        ["test P(y = 1): mean abs. difference", "", "", _fmt(float(np.mean(np.abs(p_sto - p_full))))
         + " (≤ 0.01)"],
        ["test P(y = 1): largest abs. difference", "", "",
         _fmt(float(np.max(np.abs(p_sto - p_full))))],
        ["seconds", t_full, t_sto, ""],
    ]  # fmt: skip
    _table(
        "small data: stochastic learner against the full-batch optimum",
        ["quantity", "full batch (L-BFGS-B)", "stochastic", "difference"],
        rows,
        note=f"n = {n}, 2-D probit (noise 1), m = {m} fixed inducing inputs, α = {alpha}; "
        f"per-point sites, minibatch 500, {cfg['small_epochs']} epochs, learning rate 0.1; "
        "300 test inputs",
    )
    return {"evidence": (ev_full, ev_sto), "p_diff": float(np.mean(np.abs(p_sto - p_full)))}


# ------------------------------------------------------------------------------ alpha
def alpha_data(cfg):
    """{name: (X, y (0/1), X_test, y_test)}: synthetic n = 2000 (benchmarks/peers.py),
    Spambase (the first 2000 of its 3601 training points / 1000 test) and Pima
    (standardised, 500 / 268 at random); at most ``cfg["alpha_max_train"]`` training points
    each (the first ones)."""
    from robustep.datasets import load_pima

    peers = _sibling("peers")
    limit = cfg["alpha_max_train"]
    sets = {"synthetic": peers.synthetic(2000, 2000)}
    try:
        sets["Spambase"] = peers.spambase()
    except OSError as err:  # DataUnavailableError
        print(f"Spambase unavailable: {err}")
    try:
        X, y = load_pima(download=False)
        X = np.asarray(X, float)
        X = (X - X.mean(0)) / np.maximum(X.std(0), 1e-12)
        idx = np.random.default_rng(0).permutation(X.shape[0])
        X, y = X[idx], (np.asarray(y)[idx] > 0).astype(int)
        sets["Pima"] = (X[:500], y[:500], X[500:], y[500:])
    except OSError as err:
        print(f"Pima unavailable: {err}")
    return {k: (a[:limit], b[:limit], c, d) for k, (a, b, c, d) in sets.items()}


def alpha_study(cfg, args, powers=(1.0, 0.5, 0.1)):
    """Test log loss, error and fitted hyperparameters for each inducing power α."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel

    from robustep import GPClassifier
    from robustep.ep.stochastic import fit_stochastic_ep
    from robustep.likelihoods import Probit

    peers, blas_threads = _sibling("peers"), _sibling("_harness").blas_threads
    m, epochs = cfg["alpha_m"], cfg["alpha_epochs"]
    rows, results = [], []
    for data, (X, y, Xt, yt) in alpha_data(cfg).items():
        Z0 = peers.kmeans_centres(X, m)
        ys, yts = np.where(y > 0, 1.0, -1.0), np.where(yt > 0, 1.0, -1.0)
        batch = min(cfg["batch"], max(50, X.shape[0] // 8))
        kernel0 = ConstantKernel(1.0) * RBF(math.sqrt(X.shape[1]))
        fits = [("dense EP", None, None)]
        fits += [("full batch", a, None) for a in powers]
        fits += [("stochastic", a, None) for a in powers]
        for learner, a, _ in fits:
            t0 = time.perf_counter()
            with blas_threads(1), warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                if learner == "stochastic":
                    fit = fit_stochastic_ep(
                        kernel0, X, ys, Probit(), Z0, power=a,
                        batch_size=batch, n_epochs=epochs, random_state=0, **{
                            k: v for k, v in ROBUSTEP_SETTINGS.items()
                            if k not in ("power", "warmup_epochs")},
                    )  # fmt: skip
                    metrics = classification_metrics(*fit.predict(Xt), yts)
                    kernel = fit.kernel
                else:
                    extra = {} if a is None else {"inducing_points": Z0, "inducing_power": a}
                    est = GPClassifier(kernel0, random_state=0, **extra).fit(X, y)
                    p = np.clip(est.predict_proba(Xt)[:, 1], 1e-300, 1 - 1e-16)
                    metrics = {
                        "error": float(np.mean((p > 0.5) != (yt > 0))),
                        "log_loss": float(-np.mean(np.where(yt > 0, np.log(p), np.log1p(-p)))),
                    }
                    kernel = est.kernel_
            seconds = time.perf_counter() - t0
            params = {
                "amplitude": float(kernel.k1.constant_value),
                "length_scale": float(kernel.k2.length_scale),
            }
            results.append({"data": data, "learner": learner, "power": a, "seconds": seconds,
                            **metrics, **params})  # fmt: skip
            rows.append([
                data, X.shape[0], "—" if a is None else m, learner, "—" if a is None else a,
                metrics["log_loss"], metrics["error"], params["amplitude"],
                params["length_scale"], _bound_flags(params), seconds,
            ])  # fmt: skip
            print(f"  {data} {learner} alpha={a}: {metrics} {params} {seconds:.1f} s",
                  file=sys.stderr, flush=True)  # fmt: skip
    _table(
        "inducing power: fits",
        ["data", "n train", "m", "learner", "α", "test log loss", "test error",
         "amplitude σ²", "length-scale ℓ", "at a bound", "s"],
        rows,
        note=f"Inducing inputs optimised from the same MiniBatchKMeans start (m = {m}); "
        f"kernel C(1) * RBF(√d) (as benchmarks/peers.py); full batch: "
        f"GPClassifier(kernel, inducing_points=Z0, inducing_power=α) (L-BFGS-B on the "
        f"power-EP evidence); stochastic: the learner "
        f"with {ROBUSTEP_SETTINGS} for {epochs} epochs of minibatches of "
        f"min({cfg['batch']}, max(50, n / 8)); one BLAS thread",
    )  # fmt: skip
    return results


# ----------------------------------------------------------------------------- tuning
ROBUSTEP_GRID = [
    ("settings as benchmarked", {}, None),
    ("learning rate 0.02", {"learning_rate": 0.02}, None),
    ("learning rate 0.1", {"learning_rate": 0.1}, None),
    ("damping 1", {"damping": 1.0}, None),
    ("damping 4", {"damping": 4.0}, None),
    ("decay over 20 epochs", {"lr_decay_epochs": 20.0}, None),
    ("per-point sites, damping 1", {"tied_sites": False, "damping": 1.0}, None),
    ("minibatch 500", {}, 500),
    ("minibatch 2000", {}, 2000),
]
SVGP_LEARNING_RATES = (0.003, 0.01, 0.03)


def tune(cfg, args):
    """The tuning grid on the proxy: log loss at the end of each budget."""
    from robustep.likelihoods import Probit

    n, budget = cfg["tune_n"], cfg["tune_budget"]
    X, y, Xt, yt = classification_data(n, cfg["tune_test"], cfg["d"])
    Z0 = kmeans_start(X, cfg["m"])

    def evaluate(latent):
        return classification_metrics(*latent(Xt), yt)

    def row(label, run):
        if "error" in run:
            return [label, "—", "—", "—", "—", "—", run["error"]]
        return [label, _final(run, "log_loss"), _best(run, "log_loss"), _final(run, "error"),
                run["steps"], run["curve"][-1]["train_s"], ""]  # fmt: skip

    columns = ["setting", "final log loss", "best log loss", "final error", "steps",
               "trained s", "note"]  # fmt: skip
    eval_every = max(cfg["eval_every"] / 3, budget / 10)
    rows = []
    for label, overrides, batch in ROBUSTEP_GRID:
        run = run_robustep(
            X, y, Z0, Probit(), budget, evaluate=evaluate, eval_every=eval_every,
            batch_size=batch or cfg["batch"], threads=cfg["threads"], settings=overrides,
        )  # fmt: skip
        rows.append(row(label, run))
        print(f"  tuning robustep {label}: {rows[-1][1:3]}", file=sys.stderr, flush=True)
    _table(
        "tuning: robustep",
        columns,
        rows,
        note=f"Proxy: the classification problem at n = {n}, {cfg['tune_test']} test points, "
        f"m = {cfg['m']}, {budget:g} s of training each, {cfg['threads']} threads, minibatch "
        f"{cfg['batch']} unless stated; one setting changed at a time from {ROBUSTEP_SETTINGS}",
    )
    rows = []
    for name, variant in SVGP_VARIANTS.items():
        for lr in SVGP_LEARNING_RATES:
            label = f"{name}, Adam {lr:g}"
            run = _peer(args, name) or run_svgp(
                args.peer_python, X, y, Z0, Xt, yt, likelihood="bernoulli", budget=budget,
                eval_every=eval_every, batch_size=cfg["batch"], threads=cfg["threads"],
                **{**variant, "learning_rate": lr},
            )  # fmt: skip
            rows.append(row(label, run))
            print(f"  tuning {label}: {rows[-1][1:3]}", file=sys.stderr, flush=True)
    _table("tuning: SVGP", columns, rows)
    return rows


# -------------------------------------------------------------------------- estimators
def estimator_data(n, n_test, seed=0):
    """The 2-d probit problem of the large-data guide: labels of
    sin(2 x0) cos(x1) + 0.3 ε > 0, x uniform in [-3, 3]²; (X, y, X_test, y_test)."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n + n_test, 2))
    y = np.sin(2 * X[:, 0]) * np.cos(X[:, 1]) + 0.3 * rng.standard_normal(n + n_test) > 0
    return X[:n], y[:n], X[n:], y[n:]


def estimators(cfg, args):
    """``GPClassifier(inducing_points=64)`` with each learner (defaults otherwise) on the
    large-data guide's problem: whole-fit seconds, the learning part's seconds (the
    stochastic learner's last epoch), test accuracy and log loss on 5000 points."""
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel
    from sklearn.metrics import log_loss

    from robustep import GPClassifier

    rows = []
    for n in cfg["est_sizes"]:
        X, y, X_test, y_test = estimator_data(n, 5000)
        for learner in ("full_batch", "stochastic"):
            if learner == "full_batch" and n > cfg["est_full_max"]:
                rows.append([n, learner, "not run", "—", "—", "—"])
                continue
            clf = GPClassifier(ConstantKernel(1.0) * RBF(1.0), inducing_points=64,
                               learner=learner, random_state=0)  # fmt: skip
            start = time.perf_counter()
            clf.fit(X, y)
            seconds = time.perf_counter() - start
            learning = clf.history_[-1]["elapsed"] if clf.history_ else "—"
            p = clf.predict_proba(X_test)[:, 1]
            rows.append([n, learner, seconds, learning, clf.score(X_test, y_test),
                         log_loss(y_test, p, labels=[False, True])])  # fmt: skip
    _table(
        "estimators: GPClassifier(inducing_points=64) by learner",
        ["n", "learner", "fit s", "of which learning s", "test accuracy", "test log loss"],
        rows,
    )
    return rows


# ----------------------------------------------------------------------------- million
def million_data(n, chunk, d=8):
    """The classification problem's training rows as a Dask array: X (n, d) and y (n,) in
    ±1, block j of ``chunk`` rows generated from seed (2, j) where it is computed (the
    blocks of benchmarks/stochastic_ep.py's Dask run)."""
    import cloudpickle
    import dask
    import dask.array as da

    sparse = _sibling("sparse")
    # the worker processes cannot import benchmarks/sparse.py by its alias: send it by value
    cloudpickle.register_pickle_by_value(sparse)
    xs, ys = [], []
    for j, start in enumerate(range(0, n, chunk)):
        rows = min(chunk, n - start)
        part = dask.delayed(_million_block, pure=True)(sparse._probit_data, rows, d, j)
        xs.append(da.from_delayed(part[0], shape=(rows, d), dtype=float))
        ys.append(da.from_delayed(part[1], shape=(rows,), dtype=int))
    return da.concatenate(xs), da.concatenate(ys)


def _million_block(probit, rows, d, j):
    return probit(rows, d, np.random.default_rng([2, j]))


def _peak_rss(client=None):
    """Peak resident memory in bytes: {"driver": ..., "workers": {address: ...}} (Linux
    ``getrusage`` maximum RSS, in KiB, of each process so far)."""
    import resource

    def peak():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    out = {"driver": peak()}
    if client is not None:
        out["workers"] = client.run(peak)
    return out


def run_estimator(X, y, Z0, budget, *, evaluate, threads=1, seed=0, learner_options=None):
    """``GPClassifier(inducing_points=Z0)`` with the default stochastic learner on X (in
    memory or a Dask array), scored on the test set after every epoch (by the learner's
    ``callback``, timed apart from the training clock) and stopped at ``budget`` seconds
    of training; then its final EP fit and the fitted estimator's test metrics.

    Returns
    -------
    dict
        As :func:`run_robustep` (``curve``, ``params``, ``stopped``, ``steps``,
        ``eval_s``), plus ``final`` (the fitted estimator's test metrics), ``fit_s`` (the
        whole ``fit``, evaluation excluded), ``outside_learning_s`` (its part outside
        the learner's training clock: the input checks, the held-out split and the final
        EP fit), ``alpha`` (``inducing_power_``) and ``epochs``.
    """
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel

    import robustep
    from robustep import GPClassifier, StochasticLearner

    curve, clock = [], {"eval": 0.0}
    learner_options = learner_options or {}

    def checkpoint(state, record):
        t0 = time.perf_counter()
        train_s = record["elapsed"] - clock["eval"]
        curve.append({"epoch": record["epoch"], "train_s": train_s, **evaluate(state.predict)})
        clock["eval"] += time.perf_counter() - t0
        curve[-1]["eval_s"] = clock["eval"]
        return train_s >= budget

    est = GPClassifier(
        ConstantKernel(1.0) * RBF(1.0), inducing_points=Z0, random_state=seed,
        learner=StochasticLearner(callback=checkpoint, **learner_options),
    )  # fmt: skip
    with robustep.config(blas_threads=threads), _sibling("_harness").blas_threads(threads):
        t0 = time.perf_counter()
        est.fit(X, y)
        fit_s = time.perf_counter() - t0 - clock["eval"]

    def latent(X_new):
        mean, std = est.predict_latent(X_new, return_std=True)
        return mean, std**2

    learned = est.history_[-1]["elapsed"] - clock["eval"]
    return {
        "curve": curve,
        "params": {
            "amplitude": float(est.kernel_.k1.constant_value),
            "length_scale": float(est.kernel_.k2.length_scale),
        },
        "stopped": est.optimizer_result_.stopped,
        "steps": int(est.history_[-1]["steps"]),
        "epochs": int(est.n_epochs_),
        "eval_s": clock["eval"],
        "final": evaluate(latent),
        "fit_s": fit_s,
        "outside_learning_s": fit_s - learned,
        "alpha": float(est.inducing_power_),
    }


def million(cfg, args):
    """robustep's estimator on a Dask array of ``million_n`` rows against SVGP in memory,
    and the same estimator in memory at ``million_ref_n`` rows (module docstring)."""
    import importlib.util

    from sklearn.cluster import KMeans

    missing = [p for p in ("dask", "distributed") if importlib.util.find_spec(p) is None]
    if missing and (cfg["workers"] > 0 or "dask" in missing):
        print(f"\nmillion: not run, {' and '.join(missing)} missing (pip install robustep[dask])")
        return {}
    n, ref_n, m, d = cfg["million_n"], cfg["million_ref_n"], cfg["m"], cfg["d"]
    budget, threads = cfg["million_budget"], cfg["million_threads"]
    epochs = getattr(args, "warmup_epochs", None)
    warmup = {} if epochs is None else {"warmup_epochs": epochs}
    Xt, yt = _sibling("sparse")._probit_data(cfg["test"], d, np.random.default_rng(99))

    def evaluate(latent):
        return classification_metrics(*latent(Xt), yt)

    where = (
        f"a LocalCluster of {cfg['workers']} worker processes (1 thread each, memory "
        f"limit {args.memory_limit})"
        if cfg["workers"]
        else "Dask's threaded scheduler"
    )
    print(
        f"\nn = {n} on Dask: the classification problem, blocks of {cfg['chunk']} rows "
        f"generated on {where}; {cfg['test']} test points, d = {d}, m = {m} (k-means of the "
        f"first {min(n, 20 * m)} rows, shared), minibatch {cfg['batch']}, {threads} thread(s); "
        f"{budget:g} s of training per learner; reference: the same estimator in memory at "
        f"n = {ref_n}"
    )  # fmt: skip
    Xd, yd = million_data(n, cfg["chunk"], d)
    runs, client, cluster = {}, None, None
    if cfg["workers"] > 0:
        import distributed

        cluster = distributed.LocalCluster(
            n_workers=cfg["workers"], threads_per_worker=1, processes=True,
            memory_limit=args.memory_limit, dashboard_address=None,
        )  # fmt: skip
        client = distributed.Client(cluster)
    try:
        sub = np.asarray(Xd[: min(n, 20 * m)].compute())
        Z0 = KMeans(m, n_init=1, random_state=0).fit(sub).cluster_centers_
        runs["robustep, Dask"] = run_estimator(Xd, yd, Z0, budget, evaluate=evaluate,
                                               threads=threads, learner_options=warmup)  # fmt: skip
        runs["robustep, Dask"]["peak_rss"] = _peak_rss(client)
    finally:
        if client is not None:
            client.close()
            cluster.close()
    X_ref, y_ref, _, _ = classification_data(ref_n, 1, d)
    runs[f"robustep, in memory, n = {ref_n}"] = run_estimator(
        X_ref, y_ref, Z0, budget, evaluate=evaluate, threads=threads, learner_options=warmup
    )
    if args.peer_python:
        import dask

        with dask.config.set(scheduler="threads"):
            X_mem, y_mem = dask.compute(Xd, yd)
    for name, variant in SVGP_VARIANTS.items():
        runs[name] = _peer(args, name) or run_svgp(
            args.peer_python, X_mem, y_mem, Z0, Xt, yt, likelihood="bernoulli",
            budget=budget, eval_every=cfg["eval_every"], batch_size=cfg["batch"],
            threads=threads, **variant,
        )  # fmt: skip
    report_million(runs, cfg)
    return runs


def report_million(runs, cfg):
    """The million part's tables; returns the verdict "within 0.01 of the reference"."""
    n, ref_n = cfg["million_n"], cfg["million_ref_n"]
    dask_name, ref_name = "robustep, Dask", f"robustep, in memory, n = {ref_n}"
    rows = []
    for name, run in runs.items():
        if "error" in run:
            rows.append([name] + ["—"] * 13 + [run["error"]])
            continue
        final = run.get("final", {})
        workers = run.get("peak_rss", {}).get("workers", {})
        rows.append([
            name, ref_n if name == ref_name else n, run.get("alpha"),
            run["curve"][-1]["train_s"], run.get("epochs", run["curve"][-1]["epoch"]),
            run["steps"], _final(run, "error"), _final(run, "log_loss"),
            _best(run, "log_loss"), final.get("error"), final.get("log_loss"),
            run.get("fit_s"), run.get("outside_learning_s"),
            max(workers.values()) / 2**20 if workers else None, run["stopped"],
        ])  # fmt: skip
    _table(
        "million: final values",
        ["learner", "n", "α", "trained s", "epochs", "steps", "test error", "test log loss",
         "best log loss", "error after EP fit", "log loss after EP fit", "fit s",
         "outside learning s", "peak worker MiB", "stopped"],
        rows,
        note="robustep: the learner's last epoch (trained s, test error and log loss), then "
        "the estimator after its final EP fit on all n ('after EP fit'); 'fit s' is the "
        "whole fit without the test scoring, 'outside learning s' its part outside the "
        "learner's clock (input checks, held-out split, the final EP fit).",
    )  # fmt: skip
    peaks = runs.get(dask_name, {}).get("peak_rss", {})
    rows = [[f"worker {who}", v / 2**20] for who, v in peaks.get("workers", {}).items()]
    if "driver" in peaks:
        rows.append(["driver", peaks["driver"] / 2**20])
    _table("million: peak resident memory", ["process", "MiB"], rows)
    verdict, rows = None, []
    if dask_name in runs and ref_name in runs:
        big, ref = runs[dask_name], runs[ref_name]
        for label, key in (("last epoch", None), ("after the final EP fit", "final")):
            a = _final(big, "log_loss") if key is None else big[key]["log_loss"]
            b = _final(ref, "log_loss") if key is None else ref[key]["log_loss"]
            rows.append([label, b, a, a - b, a - b <= 0.01])
        verdict = bool(rows[-1][-1])
    _table(
        "million: against the in-memory learner",
        ["test log loss", f"in memory, n = {ref_n}", f"Dask, n = {n}", "difference",
         "within 0.01"],
        rows,
        note=f"Done when robustep on the Dask array at n = {n} ends within 0.01 of the "
        f"in-memory estimator's test log loss at n = {ref_n} (after the final EP fits): "
        f"{'met' if verdict else 'NOT met' if verdict is not None else 'not run'}.",
    )  # fmt: skip
    peers = {k: r for k, r in runs.items() if k.startswith("SVGP") and "error" not in r}
    rows = []
    if peers:
        rows, best_name, target, t_peer = _time_to_peer_best(runs, peers)
        note = (f"Target: the best test log loss of {best_name} ({target:.4f}, after "
                f"{t_peer:.1f} s of training).")  # fmt: skip
    else:
        note = "No SVGP run: no target."
    _time_to_peer_table("million: time to SVGP's best log loss", rows, note)
    _curves_table("million: learning curves", runs)
    return verdict


# -------------------------------------------------------------------------- multiclass
def multiclass_data(n, n_test, seed=0):
    """A 3-class 2-d problem: the label is the argmax of three smooth functions of x plus
    0.5 ε, x uniform in [-3, 3]²; (X, y, X_test, y_test)."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n + n_test, 2))
    x0, x1 = X[:, 0], X[:, 1]
    f = np.stack([np.sin(x0), np.cos(x1), np.sin(x0 + x1)], axis=1)
    y = np.argmax(2.0 * f + 0.5 * rng.standard_normal(f.shape), axis=1)
    return X[:n], y[:n], X[n:], y[n:]


def multiclass(cfg, args):
    """The sparse multinomial ``GPClassifier`` with each learner (defaults otherwise) on a
    3-class problem and on digits: whole-fit seconds, the learning part's seconds (the
    stochastic learner's last epoch), epochs, test accuracy and log loss."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.metrics import log_loss

    from robustep import GPClassifier, StochasticLearner

    Xtr, Xte, ytr, yte = _sibling("multiclass").digits_split(cfg["digits_n"])
    problems = [
        ("digits, 10 classes", Xtr, ytr, Xte, yte, cfg["digits_m"],
         StochasticLearner(batch_size=cfg["digits_batch"])),
        ("3 classes, 2-d", *multiclass_data(cfg["mc_n"], 5000), cfg["mc_m"], "stochastic"),
    ]  # fmt: skip
    rows = []
    for name, X, y, X_test, y_test, m, stochastic in problems:
        for learner in (stochastic, "full_batch"):
            clf = GPClassifier(inducing_points=m, multi_class="multinomial", learner=learner,
                               random_state=0)  # fmt: skip
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                clf.fit(X, y)
            seconds = time.perf_counter() - start
            learning = clf.history_[-1]["elapsed"] if clf.history_ else "—"
            p = clf.predict_proba(X_test)
            label = (
                learner if isinstance(learner, str) else f"stochastic, batch {learner.batch_size}"
            )
            rows.append([name, len(y), m, label, seconds, learning, clf.n_epochs_ or "—",
                         clf.score(X_test, y_test), log_loss(y_test, p, labels=clf.classes_),
                         str(clf.kernel_)])  # fmt: skip
            print(f"  multiclass {name} {learner}: {rows[-1][4:]}", file=sys.stderr, flush=True)
    _table(
        "multiclass: sparse multinomial GPClassifier by learner",
        ["problem", "n", "m", "learner", "fit s", "of which learning s", "epochs",
         "test accuracy", "test log loss", "kernel"],
        rows,
    )  # fmt: skip
    return rows


# ------------------------------------------------------------------------------ figure
def plot_curves(classification_runs, regression_runs, path, title="classification"):
    """Test log loss and error (classification) and test MAE (regression) against the
    seconds of training; one line per learner."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("classification", "log_loss", "test log loss"),
              ("classification", "error", "test error")]  # fmt: skip
    if regression_runs:
        panels.append(("regression", "mae", "test MAE (clean f)"))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6))
    for ax, (part, key, label) in zip(np.atleast_1d(axes), panels, strict=True):
        runs = classification_runs if part == "classification" else regression_runs
        for name, run in (runs or {}).items():
            if run.get("curve"):
                t = [p["train_s"] for p in run["curve"]]
                ax.plot(t, [p[key] for p in run["curve"]], marker=".", label=name)
        ax.set_xlabel("training wall time (s)")
        ax.set_ylabel(label)
        ax.set_title(title if part == "classification" else part)
        ax.legend(fontsize=7)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# -------------------------------------------------------------------------------- main
def main(argv=None):
    RESULTS = _sibling("_harness").RESULTS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="reduced sizes (< 1 minute)")
    parser.add_argument("--full", action="store_true", help="the published configuration")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(DEFAULT_PARTS))
    parser.add_argument("--peer-python", default=None,
                        help="a Python with GPflow and TensorFlow for the SVGP side")  # fmt: skip
    for key in ("n", "test", "m", "batch", "threads", "tune_n", "alpha_m", "alpha_max_train"):
        parser.add_argument("--" + key.replace("_", "-"), type=int, default=None)
    for key in ("budget", "peer_budget", "reg_budget", "eval_every", "tune_budget"):
        parser.add_argument("--" + key.replace("_", "-"), type=float, default=None)
    for key in ("million_n", "million_ref_n", "chunk", "workers"):
        parser.add_argument("--" + key.replace("_", "-"), type=int, default=None)
    parser.add_argument("--million-budget", type=float, default=None)
    parser.add_argument("--warmup-epochs", type=int, default=None,
                        help="million: the estimators' StochasticLearner(warmup_epochs=); "
                             "default: the learner's default")  # fmt: skip
    parser.add_argument("--memory-limit", default="4GiB",
                        help="million: memory limit of each Dask worker")  # fmt: skip
    parser.add_argument("--figure", default=None, help="where the learning-curve figure goes")
    parser.add_argument("--figure-million", default=None,
                        help="where the million part's figure goes")  # fmt: skip
    args = parser.parse_args(argv)
    if args.quick and "--parts" not in (argv if argv is not None else sys.argv[1:]):
        args.parts = list(QUICK_PARTS)
    cfg = dict(QUICK if args.quick else FULL)
    cfg["alpha_epochs"] = 5 if args.quick else 100
    for key in list(cfg):
        if getattr(args, key, None) is not None:
            cfg[key] = getattr(args, key)
    if args.peer_python and not Path(args.peer_python).exists():
        parser.error(f"--peer-python {args.peer_python}: no such file")
    print(f"# Learning at user size ({'quick' if args.quick else 'full'} form)")
    out = {"config": cfg}
    if "classification" in args.parts:
        out["classification"] = classification(cfg, args)
    if "regression" in args.parts:
        out["regression"] = regression(cfg, args)
    if "classification" in args.parts or "regression" in args.parts:
        figure = args.figure or RESULTS / (
            "learning_curves.png" if args.full else "local/learning_curves.png"
        )
        out["figure"] = plot_curves(out.get("classification"), out.get("regression"), figure)
        print(f"\nfigure: {Path(figure).name}")
    if "small-data" in args.parts:
        out["small_data"] = small_data(cfg, args)
    if "alpha" in args.parts:
        out["alpha"] = alpha_study(cfg, args)
    if "tune" in args.parts:
        out["tune"] = tune(cfg, args)
    if "estimators" in args.parts:
        out["estimators"] = estimators(cfg, args)
    if "million" in args.parts:
        out["million"] = million(cfg, args)
    if out.get("million"):
        figure = args.figure_million or RESULTS / (
            "learning_million_curves.png" if args.full else "local/learning_million_curves.png"
        )
        out["million_figure"] = plot_curves(out["million"], None, figure,
                                            title=f"n = {cfg['million_n']}")  # fmt: skip
        print(f"\nfigure: {Path(figure).name}")
    if "multiclass" in args.parts:
        out["multiclass"] = multiclass(cfg, args)
    return out


def _suite_name(argv):
    """learning, or learning_alpha / learning_tuning / learning_estimators /
    learning_million / learning_multiclass for a run of only that part."""
    if "--parts" in argv:
        parts = argv[argv.index("--parts") + 1 :]
        parts = parts[: next((i for i, a in enumerate(parts) if a.startswith("--")), None)]
        if parts == ["alpha"]:
            return "learning_alpha"
        if parts == ["tune"]:
            return "learning_tuning"
        if parts == ["estimators"]:
            return "learning_estimators"
        if parts == ["million"]:
            return "learning_million"
        if parts == ["multiclass"]:
            return "learning_multiclass"
    return "learning"


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--svgp-worker":
        _svgp_worker(sys.argv[2], sys.argv[3])
    else:
        from _harness import run_suite

        sys.exit(run_suite(_suite_name(sys.argv[1:]), main, quick="pass", full="pass"))
