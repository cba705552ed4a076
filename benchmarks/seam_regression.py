"""Fixed points, evidences and predictions of every estimator x method x representation.

A structural change of robustep must move code, not numbers.  This script fits a grid of
small problems with every public estimator, method and prior representation, and records
what a user sees: the fitted sites, the log marginal likelihood, the fitted
hyperparameters and the predictions on held-out inputs.

    python benchmarks/seam_regression.py --save benchmarks/results/seam_reference.json
    python benchmarks/seam_regression.py --check benchmarks/results/seam_reference.json

``--speed`` times what a structural change must not slow down (best of repeats, one BLAS
thread): the default GPClassifier and StudentTGPRegressor fits at n = 50 and 500, the
sparse fits at n = 2e4 (m = 128, fixed kernel) and a sparse search (n = 2000, m = 32).  Run it
with this tree and with an older one (``PYTHONPATH=OLD/src python benchmarks/seam_regression.py
--speed``) in turns on an idle machine.

``--check`` refits the grid and compares it with the saved file: every array to a
relative and absolute tolerance of ``--rtol`` (default 1e-8: the last digits move when
BLAS sums in another order, e.g. after a change of thread count); it prints the worst
case per fit and exits 1 when one differs.  ``--only SUBSTRING`` runs the matching
cases.  The grid runs in about a minute on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

import numpy as np
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

import robustep
from robustep import (
    BayesPointMachine,
    GPClassifier,
    StudentTGPRegressor,
    StudentTProcessClassifier,
)
from robustep.ep import expectation_propagation
from robustep.likelihoods import NoisyStep, Probit, StudentT


def _binary_data(n=40, d=2, seed=0, flips=0.1):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.where(np.sin(2 * X[:, 0]) + X[:, 1] > 0, 1, 0)
    flip = rng.random(n) < flips
    y[flip] = 1 - y[flip]
    X_test = rng.normal(size=(15, d))
    return X, y, X_test


def _multiclass_data(n=45, seed=1):
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 1.5], [-1.3, -0.8], [1.3, -0.8]])
    labels = rng.integers(0, 3, n)
    X = centres[labels] + 0.8 * rng.normal(size=(n, 2))
    X_test = rng.normal(size=(12, 2))
    return X, labels, X_test


def _regression_data(n=40, seed=2):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, 1))
    y = np.sinc(X[:, 0]) + 0.1 * rng.standard_normal(n)
    y[:3] += 3.0
    X_test = np.linspace(-3, 3, 11)[:, None]
    return X, y, X_test


def _kernel():
    return ConstantKernel(1.0) * RBF(1.0)


def _attr(est, name):
    value = getattr(est, name, None)
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, float, np.integer, np.floating)):
        return float(value)
    if isinstance(value, str):
        return value
    return np.asarray(value, dtype=float)


def _classifier_record(est, X_test):
    out = {
        "log_marginal_likelihood": _attr(est, "log_marginal_likelihood_value_"),
        "site_precision": _attr(est, "site_precision_"),
        "site_shift": _attr(est, "site_shift_"),
        "n_iter": _attr(est, "n_iter_"),
        "converged": _attr(est, "converged_"),
        "method_used": _attr(est, "method_used_"),
        "predict_proba": np.asarray(est.predict_proba(X_test), dtype=float),
    }
    kernel = getattr(est, "kernel_", None)
    if kernel is not None:
        out["theta"] = np.asarray(kernel.theta, dtype=float)
    for name in ("loo_log_predictive_", "inducing_points_"):
        out[name.rstrip("_")] = _attr(est, name)
    return out


def _regressor_record(est, X_test):
    mean, std = est.predict(X_test, return_std=True)
    out = {
        "log_marginal_likelihood": _attr(est, "log_marginal_likelihood_value_"),
        "site_precision": _attr(est, "site_precision_"),
        "site_shift": _attr(est, "site_shift_"),
        "n_iter": _attr(est, "n_iter_"),
        "converged": _attr(est, "converged_"),
        "method_used": _attr(est, "method_used_"),
        "theta": np.asarray(est.kernel_.theta, dtype=float),
        "df": _attr(est, "df_"),
        "scale": _attr(est, "scale_"),
        "mean": np.asarray(mean, dtype=float),
        "std": np.asarray(std, dtype=float),
        "loo_log_predictive": _attr(est, "loo_log_predictive_"),
    }
    if est.method != "mcmc":
        lower, upper = est.predict_interval(X_test, coverage=0.9)
        out["interval"] = np.concatenate([lower, upper])
    return out


def _classifier_cases():
    X, y, X_test = _binary_data()
    Xm, ym, Xm_test = _multiclass_data()
    base = {"kernel": _kernel(), "random_state": 0}
    cases = {}
    for optimizer in (None, "fmin_l_bfgs_b"):
        tag = "fixed" if optimizer is None else "opt"
        for method, extra in (
            ("auto", {}),
            ("ep", {}),
            ("damped", {"damping": 0.5}),
            ("damped-adaptive", {"damping": "adaptive"}),
            ("power", {"power": 0.7}),
            ("rep", {"relaxation": 5.0}),
            ("laplace", {}),
        ):
            m = method.split("-")[0]
            cases[f"gpc/dense/probit/{method}/{tag}"] = (
                GPClassifier(method=m, optimizer=optimizer, **base, **extra),
                X,
                y,
                X_test,
            )
        cases[f"gpc/dense/step/auto/{tag}"] = (
            GPClassifier(likelihood="step", label_noise=0.1, optimizer=optimizer, **base),
            X,
            y,
            X_test,
        )
        cases[f"gpc/dense/probit/ep-sequential/{tag}"] = (
            GPClassifier(method="ep", schedule="sequential", optimizer=optimizer, **base),
            X,
            y,
            X_test,
        )
        for alpha in (1.0, 0.5):
            cases[f"gpc/sparse-a{alpha}/probit/auto/{tag}"] = (
                GPClassifier(inducing_points=8, inducing_power=alpha, optimizer=optimizer, **base),
                X,
                y,
                X_test,
            )
            cases[f"gpc/sparse-a{alpha}/step/auto/{tag}"] = (
                GPClassifier(
                    inducing_points=8,
                    inducing_power=alpha,
                    likelihood="step",
                    label_noise=0.1,
                    optimizer=optimizer,
                    **base,
                ),  # fmt: skip
                X,
                y,
                X_test,
            )
        cases[f"gpc/multinomial/probit/auto/{tag}"] = (
            GPClassifier(optimizer=optimizer, **base),
            Xm,
            ym,
            Xm_test,
        )
        cases[f"gpc/multinomial-sparse/probit/auto/{tag}"] = (
            GPClassifier(inducing_points=8, optimizer=optimizer, **base),
            Xm,
            ym,
            Xm_test,
        )
        cases[f"gpc/one-vs-rest/probit/auto/{tag}"] = (
            GPClassifier(multi_class="one_vs_rest", optimizer=optimizer, **base),
            Xm,
            ym,
            Xm_test,
        )
    cases["gpc/multinomial-label-noise/probit/auto/fixed"] = (
        GPClassifier(label_noise=0.05, optimizer=None, **base),
        Xm,
        ym,
        Xm_test,
    )
    cases["gpc/multinomial-per-class/probit/auto/opt"] = (
        GPClassifier(multi_class_kernel="per_class", **base),
        Xm,
        ym,
        Xm_test,
    )
    # hard cases: the later stages of method="auto" (damped EP, the double loop) run here
    rng = np.random.default_rng(3)
    X_xor = rng.uniform(-1, 1, size=(80, 2))
    y_xor = (X_xor[:, 0] * X_xor[:, 1] > 0).astype(int)
    flip = rng.random(80) < 0.2
    y_xor[flip] = 1 - y_xor[flip]
    hard_kernel = ConstantKernel(4.0) * RBF(0.5)
    for method in ("auto", "ep"):
        cases[f"gpc/dense/step/{method}/hard-fixed"] = (
            GPClassifier(
                hard_kernel, likelihood="step", label_noise=0.2, method=method, optimizer=None
            ),
            X_xor,
            y_xor,
            X_xor[:10],
        )
    cases["bpm/ep"] = (BayesPointMachine(), X, y, X_test)
    cases["bpm/adf"] = (BayesPointMachine(method="adf"), X, y, X_test)
    cases["stc/fixed"] = (StudentTProcessClassifier(_kernel(), optimizer=None), X, y, X_test)
    cases["stc/opt"] = (StudentTProcessClassifier(_kernel(), random_state=0), X, y, X_test)
    return cases


def _regressor_cases():
    X, y, X_test = _regression_data()
    cases = {}
    for optimizer in (None, "fmin_l_bfgs_b"):
        tag = "fixed" if optimizer is None else "opt"
        for method in ("auto", "ep", "fractional", "laplace", "vb", "fvb", "gaussian"):
            cases[f"tgp/dense/{method}/{tag}"] = (
                StudentTGPRegressor(_kernel(), method=method, optimizer=optimizer, random_state=0),
                X,
                y,
                X_test,
            )
        for alpha in (1.0, 0.5):
            cases[f"tgp/sparse-a{alpha}/auto/{tag}"] = (
                StudentTGPRegressor(
                    _kernel(),
                    inducing_points=8,
                    inducing_power=alpha,
                    optimizer=optimizer,
                    random_state=0,
                ),
                X,
                y,
                X_test,
            )
    for method in ("auto", "laplace", "vb"):
        cases[f"tgp/dense/{method}/opt-df"] = (
            StudentTGPRegressor(_kernel(), method=method, optimize_df=True, random_state=0),
            X,
            y,
            X_test,
        )
    # hard case: nu = 1.5, near-duplicate inputs, large signal variance
    rng = np.random.default_rng(4)
    X_hard = np.sort(rng.uniform(0, 3, size=(30, 1)), axis=0)
    X_hard[1::2] = X_hard[::2] + 1e-3
    y_hard = np.sin(3 * X_hard[:, 0]) + 0.05 * rng.standard_normal(30)
    y_hard[[3, 4, 17]] += np.array([4.0, -4.0, 6.0])
    for method in ("auto", "ep"):
        cases[f"tgp/dense/{method}/hard-fixed"] = (
            StudentTGPRegressor(
                ConstantKernel(25.0) * RBF(0.3),
                df=1.5,
                scale=0.05,
                method=method,
                optimizer=None,
                normalize_y=False,
            ),
            X_hard,
            y_hard,
            X_test,
        )
    cases["tgp/dense/auto/df-grid"] = (
        StudentTGPRegressor(_kernel(), df_grid=[2.0, 4.0, 8.0], random_state=0),
        X,
        y,
        X_test,
    )
    cases["tgp/dense/mcmc/fixed"] = (
        StudentTGPRegressor(
            _kernel(), method="mcmc", optimizer=None, n_samples=200, random_state=0
        ),
        X,
        y,
        X_test,
    )
    return cases


def _dask_cases():
    # This folder holds a script named sparse.py, which would shadow the `sparse` package
    # that dask imports when this file is run as a script.
    here = os.path.dirname(os.path.abspath(__file__))
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        import dask.array as da
    except ImportError:
        return {}
    finally:
        sys.path[:] = saved
    X, y, X_test = _binary_data()
    Xr, yr, Xr_test = _regression_data()
    return {
        "gpc/dask/probit/auto/opt": (
            GPClassifier(_kernel(), inducing_points=8, random_state=0),
            da.from_array(X, chunks=(16, 2)),
            da.from_array(y, chunks=16),
            X_test,
        ),
        "tgp/dask/auto/opt": (
            StudentTGPRegressor(_kernel(), inducing_points=8, random_state=0),
            da.from_array(Xr, chunks=(16, 1)),
            da.from_array(yr, chunks=16),
            Xr_test,
        ),
    }


def _engine_cases():
    X, y, _ = _binary_data()
    Xr, yr, _ = _regression_data()
    K = _kernel()(X) * 2.0
    Kr = RBF(1.0)(Xr)
    pm = np.where(y > 0, 1.0, -1.0)
    runs = {
        "engine/probit/parallel": (K, pm, Probit(), {}),
        "engine/probit/sequential": (K, pm, Probit(), {"schedule": "sequential"}),
        "engine/probit/power": (K, pm, Probit(), {"power": 0.6}),
        "engine/step/damped": (K, pm, NoisyStep(0.1), {"damping": 0.5}),
        "engine/student-t/robust": (Kr, yr, StudentT(df=3, scale=0.2), {"robust": True}),
        "engine/student-t/double-loop": (
            Kr,
            yr,
            StudentT(df=3, scale=0.2),
            {"double_loop": True},
        ),
    }
    return runs


def _auto_grid_module():
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "auto_grid.py")
    spec = importlib.util.spec_from_file_location("auto_grid", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _hard_auto_cases():
    """The hard regression of tests: parallel EP oscillates, method="auto" falls back."""
    grid = _auto_grid_module()
    rng = np.random.default_rng(300)
    X, y = grid._regression(40, rng, 0.2)
    X = grid._near_duplicates(X, rng)
    y = (y - y.mean()) / y.std()
    kernel = grid._tiny(3e-2)
    K = kernel(X)
    lik = StudentT(1.5, 0.5)
    X1 = np.random.default_rng(1).normal(size=(30, 1))
    y1 = np.where(X1[:, 0] > 0, 1.0, -1.0)
    K1 = (ConstantKernel(1e4) * RBF(1.0))(X1)
    from robustep.ep.chain import auto_expectation_propagation

    engine = {
        "engine/auto/hard-student-t": lambda: auto_expectation_propagation(K, y, lik),
        "engine/auto/failing-no-double-loop": lambda: auto_expectation_propagation(
            K1, y1, Probit(), max_iter=1, tol=1e-12, double_loop=False
        ),
        "engine/auto/failing": lambda: auto_expectation_propagation(
            K1, y1, Probit(), max_iter=1, tol=1e-12
        ),
    }
    estimators = {
        "tgp/dense/auto/hard-fixed-auto-grid": (
            StudentTGPRegressor(kernel, df=1.5, scale=0.5, optimizer=None, normalize_y=False),
            X,
            y,
            X[:7],
        ),
        "tgp/dense/auto/hard-opt-auto-grid": (
            StudentTGPRegressor(kernel, df=1.5, scale=0.5, normalize_y=False),
            X,
            y,
            X[:7],
        ),
        "gpc/dense/probit/auto/failing": (
            GPClassifier(
                ConstantKernel(1e4, "fixed") * RBF(1.0, "fixed"),
                max_iter=1,
                tol=1e-12,
                optimizer=None,
            ),
            X1,
            (y1 > 0).astype(int),
            X1[:7],
        ),
    }
    return engine, estimators


def _engine_record(res):
    return {
        "log_marginal_likelihood": float(res.log_Z),
        "site_precision": np.asarray(res.site_precision, dtype=float),
        "site_shift": np.asarray(res.site_shift, dtype=float),
        "mean": np.asarray(res.mean, dtype=float),
        "var": np.asarray(res.var, dtype=float),
        "n_iter": float(res.n_iter),
        "converged": bool(res.converged),
    }


def run_grid(only=None):
    """Fit every case (those whose name contains ``only``) and return name -> record."""
    records = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, (K, y, lik, kwargs) in _engine_cases().items():
            if only and only not in name:
                continue
            records[name] = _engine_record(expectation_propagation(K, y, lik, **kwargs))
        hard_engine, hard_estimators = _hard_auto_cases()
        for name, run in hard_engine.items():
            if only and only not in name:
                continue
            res = run()
            records[name] = _engine_record(res)
            records[name]["method_used"] = res.method_used
        for group, record in (
            (hard_estimators, None),
            (_classifier_cases(), _classifier_record),
            (_regressor_cases(), _regressor_record),
            (_dask_cases(), None),
        ):
            for name, (est, X, y, X_test) in group.items():
                if only and only not in name:
                    continue
                start = time.perf_counter()
                est.fit(X, y)
                recorder = record or (
                    _classifier_record if name.startswith("gpc") else _regressor_record
                )
                records[name] = recorder(est, X_test)
                print(f"  {name:48s} {time.perf_counter() - start:6.2f} s", flush=True)
    return records


def _to_json(records):
    def convert(v):
        if isinstance(v, np.ndarray):
            return {"array": v.ravel().tolist(), "shape": list(v.shape)}
        return v

    return {name: {k: convert(v) for k, v in rec.items()} for name, rec in records.items()}


def _from_json(data):
    def convert(v):
        if isinstance(v, dict) and "array" in v:
            return np.asarray(v["array"], dtype=float).reshape(v["shape"])
        return v

    return {name: {k: convert(v) for k, v in rec.items()} for name, rec in data.items()}


def compare(reference, records, rtol):
    """Worst relative difference per case, and the list of cases that differ."""
    failures = []
    for name, ref in reference.items():
        if name not in records:
            continue
        rec = records[name]
        worst, where = 0.0, ""
        for key, want in ref.items():
            got = rec.get(key)
            if want is None or got is None or isinstance(want, (str, bool)):
                if want != got and not (want is None and got is None):
                    failures.append((name, key, f"{want!r} -> {got!r}"))
                continue
            want_a, got_a = np.asarray(want, dtype=float), np.asarray(got, dtype=float)
            if want_a.shape != got_a.shape:
                failures.append((name, key, f"shape {want_a.shape} -> {got_a.shape}"))
                continue
            scale = np.maximum(np.abs(want_a), 1.0)
            both_inf = np.isinf(want_a) & (want_a == got_a)
            diff = np.where(both_inf, 0.0, np.abs(got_a - want_a) / scale)
            diff = np.where(np.isnan(want_a) & np.isnan(got_a), 0.0, diff)
            d = float(np.max(diff)) if diff.size else 0.0
            if not np.isfinite(d) or d > worst:
                worst, where = (d if np.isfinite(d) else np.inf), key
            if not d <= rtol:
                failures.append((name, key, f"max relative difference {d:.3g}"))
        print(f"  {name:48s} worst {worst:9.2e} ({where})")
    return failures


def speed():
    """Best-of-repeats seconds of the fits named in the module docstring."""
    rng = np.random.default_rng(0)
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in (50, 500):
            X = rng.normal(size=(n, 2))
            y = (np.sin(2 * X[:, 0]) + X[:, 1] > 0).astype(int)
            t = X[:, 0] + 0.1 * rng.standard_normal(n)
            t[:3] += 4
            repeats = 5 if n == 50 else 2
            out[f"GPClassifier n={n}"] = _best(GPClassifier(random_state=0), X, y, repeats)
            out[f"StudentTGPRegressor n={n}"] = _best(
                StudentTGPRegressor(random_state=0), X, t, repeats
            )
        n = 20000
        X = rng.normal(size=(n, 4))
        f = np.sin(X[:, 0]) + X[:, 1]
        y = (f + 0.3 * rng.normal(size=n) > 0).astype(int)
        t = f + 0.1 * rng.normal(size=n)
        fixed = dict(inducing_points=128, optimizer=None, random_state=0)
        out["sparse GPClassifier n=2e4 m=128 fixed"] = _best(
            GPClassifier(_kernel(), **fixed), X, y, 2
        )
        out["sparse StudentTGPRegressor n=2e4 m=128 fixed"] = _best(
            StudentTGPRegressor(_kernel(), **fixed), X, t, 2
        )
        out["sparse GPClassifier search n=2000 m=32"] = _best(
            GPClassifier(inducing_points=32, random_state=0), X[:2000], y[:2000], 2
        )
    for name, seconds in out.items():
        print(f"  {name:48s} {seconds:8.3f} s")
    return out


def _best(estimator, X, y, repeats):
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        estimator.fit(X, y)
        best = min(best, time.perf_counter() - start)
    return best


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--save", metavar="FILE")
    group.add_argument("--check", metavar="FILE")
    group.add_argument("--speed", action="store_true")
    parser.add_argument("--rtol", type=float, default=1e-8)
    parser.add_argument("--only", default=None)
    args = parser.parse_args(argv)
    if args.speed:
        speed()
        return 0
    start = time.perf_counter()
    records = run_grid(args.only)
    print(f"{len(records)} cases in {time.perf_counter() - start:.1f} s")
    if args.save:
        payload = {"robustep": robustep.__version__, "cases": _to_json(records)}
        with open(args.save, "w") as fh:
            json.dump(payload, fh)
        print(f"saved {args.save}")
        return 0
    with open(args.check) as fh:
        reference = _from_json(json.load(fh)["cases"])
    missing = sorted(set(reference) - set(records)) if not args.only else []
    failures = compare(reference, records, args.rtol)
    for name in missing:
        failures.append((name, "-", "case missing"))
    for name, key, what in failures:
        print(f"DIFFERS {name} {key}: {what}")
    print("identical within rtol" if not failures else f"{len(failures)} differences")
    return 1 if failures else 0


if __name__ == "__main__":
    from _harness import run_suite  # benchmarks/_harness.py

    sys.exit(
        run_suite(
            "seam_regression",
            main,
            quick=["--check", "benchmarks/results/seam_reference.json"],
            full=["--check", "benchmarks/results/seam_reference.json"],
        )
    )
