"""Stress grid for every EP estimator and method.

A fixed grid of hard configurations -- extreme fixed hyperparameters (length-scales
1e-3 ... 1e3, signal variances 1e-4 ... 1e4, ``optimizer=None``), duplicated and nearly
duplicated inputs, constant features, 1-20% flipped labels, Student-t nu from 1 to 30 with
0-30% gross outliers, n from 2 to 4000 (the largest cells with one method each), and
unbalanced classes (1 positive in 1000) -- is run for

* GPClassifier, methods auto (the default chain), ep, damped, power, rep, laplace,
* StudentTGPRegressor, methods auto, ep and fractional,
* StudentTProcessClassifier (EP),
* BayesPointMachine, methods ep and adf.

For each (estimator, method) it prints: runs, converged (``converged_``), warned (a
ConvergenceWarning during fit), NaN/inf (non-finite predictions or predictive standard
deviations, probabilities outside [0, 1] or not summing to 1; must be 0), silent
(``converged_`` False without a ConvergenceWarning; must be 0), undocumented (exceptions
other than ValueError/TypeError with a message; must be 0), documented (ValueError or
TypeError raised with a message -- counted, not failures), non-finite evidence (fits whose
``log_marginal_likelihood_value_`` is -inf or NaN; reported separately, see
docs/reliability.md), seconds (summed, median and slowest run) and, for method "auto",
the stage each converged fit ended in (``method_used_``: count).

Usage::

    nice python benchmarks/stress.py            # the full grid (docs/reliability.md)
    python benchmarks/stress.py --quick         # a small subset, < 60 s (tests/benchmarks)
    python benchmarks/stress.py --verbose       # one line per run
    python benchmarks/stress.py --methods auto  # the cells of the named methods only
    python benchmarks/stress.py --estimators BayesPointMachine,StudentTProcessClassifier
    python benchmarks/stress.py --step-noise --quick    # label-noise step cells, minutes

Exit status 1 when any of the three must-be-zero counts is not zero.

``--step-noise`` runs a second grid at the engine level: the label-noise step likelihood
(``NoisyStep``) at fixed hyperparameters on XOR and smooth class boundaries with 10-30%
flipped labels, n in {200, 300}, five seeds, for several ways of finding the EP fixed
point (the ``method="auto"`` chain, variants of it and a search evaluation's chain, the
engine's default, damped parallel EP, sequential EP, the double loop, and power EP with
the engine's default schedule or plain damped parallel sweeps, which is another
approximation); for each it prints runs, converged, total, median and slowest seconds,
sweeps and, for a chain, the stage that converged (``--candidates`` picks them,
``--max-iter`` sets the sweep budget).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
import traceback
import warnings
from collections import defaultdict

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

from robustep.estimators.bpm import BayesPointMachine
from robustep.estimators.gp_classifier import GPClassifier
from robustep.estimators.student_t_process import StudentTProcessClassifier
from robustep.estimators.student_t_regressor import StudentTGPRegressor

GPC_METHODS = ("auto", "ep", "damped", "power", "rep", "laplace")
TGP_METHODS = ("auto", "ep", "fractional")
BPM_METHODS = ("ep", "adf")


@dataclasses.dataclass
class Cell:
    """One run: an estimator factory and a data set."""

    estimator: str  # e.g. "GPClassifier"
    method: str
    name: str  # the hard configuration
    make: object  # () -> unfitted estimator
    X: np.ndarray
    y: np.ndarray
    X_test: np.ndarray


# ----------------------------------------------------------------------------- data
def _classification(n, d, rng, flip=0.0, positives=None):
    X = rng.uniform(-2, 2, (n, d))
    score = np.sin(2 * X[:, 0]) + (0.5 * X[:, 1] if d > 1 else 0.0)
    y = np.where(score > 0, 1, -1)
    if positives is not None:  # unbalanced: exactly `positives` of class 1
        y = -np.ones(n, dtype=int)
        y[np.argsort(-score)[:positives]] = 1
    if flip:
        idx = rng.choice(n, max(1, int(round(flip * n))), replace=False)
        y[idx] = -y[idx]
    if np.unique(y).size < 2:  # keep two classes (n = 2 with a flip, say)
        y[0] = -y[1] if n > 1 else y[0]
    return X, y


def _regression(n, d, rng, outliers=0.0):
    X = rng.uniform(-3, 3, (n, d))
    f = np.sin(2 * X[:, 0]) + (0.3 * X[:, 1] if d > 1 else 0.0)
    y = f + 0.1 * rng.standard_normal(n)
    if outliers:
        idx = rng.choice(n, max(1, int(round(outliers * n))), replace=False)
        y[idx] += rng.choice([-1.0, 1.0], idx.size) * rng.uniform(5, 20, idx.size)
    return X, y


def _duplicate(X, y, rng, near):
    """Every input twice; the copies' labels are kept (classification: some conflict)."""
    X2 = X + (1e-9 * rng.standard_normal(X.shape) if near else 0.0)
    return np.vstack([X, X2]), np.concatenate([y, y[::-1] if y.dtype.kind == "i" else y])


def _constant_feature(X):
    return np.column_stack([X, np.full(X.shape[0], 3.0)])


def _fixed_kernel(variance, length_scale):
    return ConstantKernel(variance, "fixed") * RBF(length_scale, "fixed")


# ----------------------------------------------------------------------------- grid
def _data_cells(kind, rng, quick):
    """(name, X, y, kernel or None (default + optimiser), extra) for one problem kind."""
    out = []
    if kind == "clf":
        base = _classification(30 if quick else 60, 2, rng, flip=0.05)
        for ell in (1e-3, 1.0, 1e3):
            for var in (1e-4, 1.0, 1e4):
                if quick and (ell, var) not in ((1e-3, 1e4), (1e3, 1e-4)):
                    continue
                out.append((f"fixed ell={ell:g} var={var:g}", *base, _fixed_kernel(var, ell)))
        if not quick:
            out.append(("optimised hyperparameters", *base, None))
        for near in (False, True):
            X, y = _duplicate(*_classification(15 if quick else 40, 2, rng), rng, near)
            out.append(("near-duplicates" if near else "duplicates", X, y, _fixed_kernel(1, 1)))
        X, y = _classification(30 if quick else 60, 2, rng)
        out.append(("constant feature", _constant_feature(X), y, _fixed_kernel(1, 1)))
        out.append(("all features constant", np.ones((30, 3)), _classification(30, 1, rng)[1],
                    _fixed_kernel(1, 1)))  # fmt: skip
        for flip in () if quick else (0.01, 0.2):
            X, y = _classification(200, 2, rng, flip=flip)
            out.append((f"{flip:.0%} flipped labels", X, y, _fixed_kernel(4, 0.5)))
        for n in (2, 5) if quick else (2, 5, 300):
            X, y = _classification(n, 2, rng)
            out.append((f"n={n}", X, y, _fixed_kernel(1, 1)))
    else:
        for ell in (1e-3, 1.0, 1e3):
            for var in (1e-4, 1.0, 1e4):
                if quick and (ell, var) not in ((1e-3, 1e4), (1e3, 1e-4)):
                    continue
                X, y = _regression(60, 1, rng, outliers=0.1)
                out.append((f"fixed ell={ell:g} var={var:g}", X, y, _fixed_kernel(var, ell)))
        # nu x outlier fraction, with a fixed kernel (the optimiser on top multiplies the
        # cost of the hardest cells, e.g. nu = 30 with 30% outliers, by ~20)
        nu_cells = ((1.0, 0.3), (4.0, 0.3), (30.0, 0.0)) if quick else [
            (df, frac) for df in (1.0, 2.0, 4.0, 30.0) for frac in (0.0, 0.1, 0.3)
        ]  # fmt: skip
        for df, frac in nu_cells:
            X, y = _regression(40 if quick else 80, 1, rng, outliers=frac)
            spec = ("fixed", df, _fixed_kernel(1.0, 0.7))
            out.append((f"nu={df:g}, {frac:.0%} outliers", X, y, spec))
        if not quick:
            X, y = _regression(60, 1, rng, outliers=0.1)
            out.append(("optimised hyperparameters", X, y, None))
        for near in (False, True):
            X, y = _duplicate(*_regression(40, 1, rng, outliers=0.1), rng, near)
            out.append(("near-duplicates" if near else "duplicates", X, y, _fixed_kernel(1, 1)))
        X, y = _regression(60, 2, rng, outliers=0.1)
        out.append(("constant feature", _constant_feature(X), y, _fixed_kernel(1, 1)))
        for n in (2, 5) if quick else (2, 5, 300):
            X, y = _regression(n, 1, rng, outliers=0.2 if n > 2 else 0.0)
            out.append((f"n={n}", X, y, _fixed_kernel(1, 1)))
    return out


def _gpc(method, kernel):
    kw = dict(method=method, max_iter=300)
    if kernel is None:
        return lambda: GPClassifier(**kw)
    return lambda: GPClassifier(kernel, optimizer=None, **kw)


def _stpc(kernel):
    if kernel is None:
        return lambda: StudentTProcessClassifier(max_iter=300)
    return lambda: StudentTProcessClassifier(kernel, optimizer=None, max_iter=300)


def _tgp(method, spec):
    if spec is None:
        return lambda: StudentTGPRegressor(method=method)
    if isinstance(spec, tuple):  # ("fixed", nu, kernel): nothing optimised
        return lambda: StudentTGPRegressor(
            spec[2], method=method, df=spec[1], scale=0.1, optimizer=None
        )
    return lambda: StudentTGPRegressor(spec, method=method, optimizer=None, scale=0.1)


def cells(quick=False, seed=0):
    """The grid, in a fixed order (the data depend only on ``seed``)."""
    rng = np.random.default_rng(seed)
    clf = _data_cells("clf", rng, quick)
    reg = _data_cells("reg", rng, quick)
    test_clf = rng.uniform(-2.5, 2.5, (50, 2))
    test_reg = rng.uniform(-3.5, 3.5, (50, 2))

    def test_for(X, test):
        d = X.shape[1]
        t = test[:, :d] if d <= test.shape[1] else np.column_stack(
            [test, np.full((test.shape[0], d - test.shape[1]), 3.0)]
        )  # fmt: skip
        return t

    out = []
    for name, X, y, kernel in clf:
        Xt = test_for(X, test_clf)
        for m in GPC_METHODS:
            out.append(Cell("GPClassifier", m, name, _gpc(m, kernel), X, y, Xt))
        out.append(Cell("StudentTProcessClassifier", "ep", name, _stpc(kernel), X, y, Xt))
        # the linear BPM has no kernel: scale the inputs like the length-scale instead
        Xb = X / kernel.k2.length_scale if kernel is not None else X
        Xbt = Xt / kernel.k2.length_scale if kernel is not None else Xt
        for m in BPM_METHODS:
            out.append(
                Cell("BayesPointMachine", m, name,
                     lambda m=m: BayesPointMachine(method=m, max_iter=300), Xb, y, Xbt)
            )  # fmt: skip
    for name, X, y, spec in reg:
        Xt = test_for(X, test_reg)
        for m in TGP_METHODS:
            out.append(Cell("StudentTGPRegressor", m, name, _tgp(m, spec), X, y, Xt))
    if not quick:
        # large and unbalanced cells: one method each, fixed kernels (they stay cheap)
        X, y = _classification(1000, 2, rng, positives=1)
        Xt = test_clf
        out.append(Cell("GPClassifier", "ep", "1 positive in 1000", _gpc("ep", _fixed_kernel(1, 1)),
                        X, y, Xt))  # fmt: skip
        out.append(Cell("BayesPointMachine", "ep", "1 positive in 1000",
                        lambda: BayesPointMachine(max_iter=300), X, y, Xt))  # fmt: skip
        X, y = _classification(4000, 2, rng, flip=0.05)
        out.append(Cell("GPClassifier", "ep", "n=4000", _gpc("ep", _fixed_kernel(1, 0.5)),
                        X, y, Xt))  # fmt: skip
        out.append(Cell("BayesPointMachine", "ep", "n=4000",
                        lambda: BayesPointMachine(max_iter=300), X, y, Xt))  # fmt: skip
        # the Student-t process classifier is the slowest (more than 8 minutes at
        # n = 1000 on the loaded machine): 1 positive in 300, and n = 600
        X, y = _classification(300, 2, rng, positives=1)
        out.append(Cell("StudentTProcessClassifier", "ep", "1 positive in 300",
                        _stpc(_fixed_kernel(1, 1)), X, y, Xt))  # fmt: skip
        X, y = _classification(600, 2, rng, flip=0.05)
        out.append(Cell("StudentTProcessClassifier", "ep", "n=600",
                        _stpc(_fixed_kernel(1, 0.5)), X, y, Xt))  # fmt: skip
        X, y = _regression(2000, 1, rng, outliers=0.1)
        out.append(Cell("StudentTGPRegressor", "ep", "n=2000, 10% outliers",
                        _tgp("ep", _fixed_kernel(1, 0.5)), X, y, test_reg[:, :1]))  # fmt: skip
    return out


# ----------------------------------------------------------------------------- running
def _finite_outputs(est, X_test, classifier):
    """True when every prediction is finite and probabilities are valid."""
    ok = True
    if classifier:
        p = est.predict_proba(X_test)
        ok &= bool(np.all(np.isfinite(p)) and np.all((p >= 0) & (p <= 1)))
        ok &= bool(np.allclose(p.sum(axis=1), 1.0))
        labels = est.predict(X_test)
        ok &= bool(np.all(np.isin(labels, est.classes_)))
    else:
        mean, std = est.predict(X_test, return_std=True)
        ok &= bool(np.all(np.isfinite(mean)) and np.all(np.isfinite(std)) and np.all(std >= 0))
    return ok


def _finite_evidence(est):
    lml = getattr(est, "log_marginal_likelihood_value_", None)
    return lml is None or bool(np.isfinite(lml))


def run_cell(cell):
    """Fit and predict once; return a dict of outcomes."""
    t0 = time.perf_counter()
    out = dict(converged=False, warned=False, nonfinite=False, evidence=False, silent=False,
               undocumented=False, documented=False, error="", method_used=None)  # fmt: skip
    X0, y0 = cell.X.copy(), cell.y.copy()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            est = cell.make()
            est.fit(cell.X, cell.y)
            classifier = hasattr(est, "classes_")
            out["nonfinite"] = not _finite_outputs(est, cell.X_test, classifier)
            out["evidence"] = not _finite_evidence(est)
        out["warned"] = any(issubclass(w.category, ConvergenceWarning) for w in caught)
        out["converged"] = bool(getattr(est, "converged_", True))
        out["method_used"] = getattr(est, "method_used_", None)
        out["silent"] = not out["converged"] and not out["warned"]
        if not (np.array_equal(X0, cell.X) and np.array_equal(y0, cell.y)):
            out["undocumented"], out["error"] = True, "fit modified the caller's arrays"
    except (ValueError, TypeError) as err:
        if str(err):
            out["documented"], out["error"] = True, f"{type(err).__name__}: {err}"
        else:
            out["undocumented"], out["error"] = True, f"{type(err).__name__} without a message"
    except Exception as err:  # noqa: BLE001 -- counting them is the point
        out["undocumented"] = True
        out["error"] = f"{type(err).__name__}: {err}\n{traceback.format_exc(limit=4)}"
    out["seconds"] = time.perf_counter() - t0
    return out


def run(quick=False, verbose=False, seed=0, methods=None, estimators=None):
    """Run the grid (the cells of ``methods`` and ``estimators`` only, when given); return
    {(estimator, method): counts} and the failing runs."""
    table = defaultdict(lambda: defaultdict(float))
    failures = []
    for cell in cells(quick, seed):
        if methods is not None and cell.method not in methods:
            continue
        if estimators is not None and cell.estimator not in estimators:
            continue
        r = run_cell(cell)
        row = table[(cell.estimator, cell.method)]
        row["runs"] += 1
        for key in (
            "converged",
            "warned",
            "nonfinite",
            "evidence",
            "silent",
            "undocumented",
            "documented",
        ):
            row[key] += int(r[key])
        row["seconds"] += r["seconds"]
        row.setdefault("times", []).append(r["seconds"])
        if cell.method == "auto" and r["converged"] and r["method_used"]:
            row.setdefault("used", defaultdict(int))[r["method_used"]] += 1
        bad = r["nonfinite"] or r["silent"] or r["undocumented"]
        if bad:
            failures.append((cell, r))
        if verbose or bad:
            flags = [k for k in ("converged", "warned", "nonfinite", "evidence", "silent",
                                 "undocumented", "documented") if r[k]]  # fmt: skip
            print(f"{cell.estimator:27s} {cell.method:8s} {cell.name:32s} {r['seconds']:7.2f}s "
                  f"{' '.join(flags)} {r['error'].splitlines()[0] if r['error'] else ''}",
                  flush=True)  # fmt: skip
    return table, failures


def format_table(table):
    head = ("| estimator | method | runs | converged | warned | NaN/inf | silent | undocumented "
            "| documented errors | non-finite evidence | seconds | median (s) | slowest (s) "
            "| method_used_ |")  # fmt: skip
    lines = [head, "|" + "---|" * 14]
    for (est, method), row in sorted(table.items()):
        times = row.get("times") or [0.0]
        used = ", ".join(f"{k} {v}" for k, v in sorted(row.get("used", {}).items()))
        lines.append(
            f"| {est} | {method} | {row['runs']:.0f} | {row['converged']:.0f} | "
            f"{row['warned']:.0f} | {row['nonfinite']:.0f} | {row['silent']:.0f} | "
            f"{row['undocumented']:.0f} | {row['documented']:.0f} | {row['evidence']:.0f} | "
            f"{row['seconds']:.1f} | {np.median(times):.2f} | {max(times):.1f} | "
            f"{used or '-'} |"
        )
    return "\n".join(lines)


# ------------------------------------------------------------- label-noise step cells
def _auto(max_iter):
    """The estimators' ``method="auto"`` chain (:meth:`InferenceStrategy.auto`)."""
    from robustep.ep import InferenceStrategy

    return InferenceStrategy.auto(max_iter)


def _old_auto(max_iter):
    """The chain before the power stage: parallel EP, adaptive damping from 0.5 in blocks of
    50 sweeps, then the double loop with no factorisation limit."""
    from robustep.ep import InferenceStrategy

    return InferenceStrategy(stages=("ep", "damped", "double_loop"), max_iter=max_iter)


def _auto_adaptive(max_iter):
    """The default chain with stage "damped" an adaptive schedule from 0.8 (blocks of 50)."""
    from robustep.ep import AdaptiveDamping, InferenceStrategy

    return dataclasses.replace(
        InferenceStrategy.auto(max_iter), damping=AdaptiveDamping(start=0.8, block=50)
    )


def _auto_trial(max_iter):
    """The classifier's chain for the step likelihood: stage "damped" tries damping 0.5
    first (``InferenceStrategy.auto(max_iter, trial_damping=0.5)``)."""
    from robustep.ep import InferenceStrategy

    return InferenceStrategy.auto(max_iter, trial_damping=0.5)


def _auto_accelerated(max_iter):
    """The classifier's chain for the step likelihood: Anderson-accelerated parallel EP,
    then stage "damped" with damping 0.5 first
    (``InferenceStrategy.auto(max_iter, trial_damping=0.5, accelerate=True)``)."""
    from robustep.ep import InferenceStrategy

    return InferenceStrategy.auto(max_iter, trial_damping=0.5, accelerate=True)


def _auto_accelerated_no_after_power(max_iter):
    """``_auto_accelerated`` without stage "accelerated"'s second run from power EP's fixed
    point (``AcceleratedStage(after_power=False)``)."""
    strategy = _auto_accelerated(max_iter)
    return dataclasses.replace(
        strategy, accelerated=dataclasses.replace(strategy.accelerated, after_power=False)
    )


def _search(max_iter):
    """The chain of a hyperparameter-search evaluation at the default search budgets."""
    from robustep.ep import InferenceStrategy

    return InferenceStrategy.search_run()


# ways of finding the EP fixed point on the label-noise step likelihood: keyword arguments
# of robustep.ep.expectation_propagation, or a function of max_iter giving the
# InferenceStrategy of a chain ("auto": InferenceStrategy.auto, the estimators' default);
# "power 0.5 ..." is power EP, a different approximation
STEP_CANDIDATES = {
    "auto": _auto,
    "auto adaptive 0.8": _auto_adaptive,
    "old auto": _old_auto,
    "classifier": ("classifier", {}),
    "sparse classifier": ("classifier", {"inducing_points": 64, "random_state": 0}),
    "auto trial 0.5": _auto_trial,
    "auto accelerated": _auto_accelerated,
    "auto accelerated no after-power": _auto_accelerated_no_after_power,
    "search": _search,
    "ep": {},
    "damped 0.8": {"damping": 0.8, "double_loop": False},
    "damped 0.5": {"damping": 0.5, "double_loop": False},
    "sequential": {"schedule": "sequential"},
    "double loop": {"double_loop": True, "n_parallel_init": 10, "max_inner": 10},
    "power 0.5": {"power": 0.5},
    "power 0.5 damped 0.5": {"power": 0.5, "damping": 0.5, "double_loop": False},
}
STEP_DEFAULT = ("auto", "old auto", "ep", "damped 0.8", "power 0.5 damped 0.5")


def step_noise_data(boundary, n, flip, seed):
    """X (n, 2) uniform in [-1, 1]^2 and labels y (n,) in {-1, +1} of an "xor" boundary
    (x0 x1 > 0) or a "smooth" one (x1 > sin(3 x0) / 2), each label flipped with
    probability ``flip``."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 1.0, size=(n, 2))
    if boundary == "xor":
        y = np.where(X[:, 0] * X[:, 1] > 0, 1.0, -1.0)
    else:
        y = np.where(X[:, 1] > 0.5 * np.sin(3.0 * X[:, 0]), 1.0, -1.0)
    flipped = rng.random(n) < flip
    y[flipped] = -y[flipped]
    return X, y


def plain_damped_ep(K, y, likelihood, damping, **options):
    """Damped parallel EP without the engine's safeguards: exactly x <- d x + (1 - d) g(x)
    (``robust=False``: a sweep that makes a cavity improper is taken, and that site
    waits; no mean sweeps, no double loop); ``options`` go to
    ``expectation_propagation`` and its ConvergenceWarning is silenced (the caller reads
    ``converged``)."""
    from robustep.ep import expectation_propagation

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return expectation_propagation(
            K, y, likelihood, damping=damping, robust=False, mean_sweeps=0,
            double_loop="never", **options,
        )  # fmt: skip


def step_noise_cells(quick=False, sizes=(200, 300), seeds=range(5, 10)):
    """(boundary, flip, label_noise, n, seed, signal variance, length-scale) of the grid.

    Quick: XOR with 20% flips and the smooth boundary with 10%, n in {200, 300}, seeds 5-9,
    ConstantKernel(4) * RBF(0.5), the likelihood's label noise equal to the flip rate.
    Full: 10%, 20% and 30% flips on both boundaries, and XOR with 20% flips fitted with
    label noise 0.1, also at the default starting kernel ConstantKernel(1) * RBF(1) (a
    search's first evaluation).
    """
    if quick:
        specs = [("xor", 0.2, 0.2), ("smooth", 0.1, 0.1)]
        hypers = [(4.0, 0.5)]
    else:
        specs = [(b, f, f) for b in ("xor", "smooth") for f in (0.1, 0.2, 0.3)]
        specs.append(("xor", 0.2, 0.1))
        hypers = [(4.0, 0.5), (1.0, 1.0)]
    return [
        (boundary, flip, eps, n, seed, variance, ell)
        for variance, ell in hypers
        for boundary, flip, eps in specs
        for n in sizes
        for seed in seeds
    ]


def _fit_classifier(X, y, **params):
    """Seconds, the fitted GPClassifier and whether fit warned (default kernel, optimised)."""
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = GPClassifier(**params).fit(X, y)
    warned = any(issubclass(w.category, ConvergenceWarning) for w in caught)
    return time.perf_counter() - t0, est, warned


def run_step_noise(cell_list, candidates=STEP_DEFAULT, max_iter=1000, verbose=False,
                   repeats=1):  # fmt: skip
    """Run each candidate on each cell; return {(cell label, candidate): counts}.

    Candidate ``"classifier"`` fits ``GPClassifier(likelihood="step", label_noise=eps)``
    with its defaults (default kernel, evidence search; the cell's kernel is not used) and
    ``GPClassifier()`` (probit) on the same data, and records the ratio of their seconds;
    ``"sparse classifier"`` does the same with ``inducing_points=64, random_state=0`` for
    both (64 inducing inputs drawn from X and optimised, inducing power "auto").
    With ``repeats`` > 1 both fits run that many times in turn (probit, step, probit, ...)
    and each counts its fastest run: the probit fits take 0.03-0.15 s at n <= 300, where
    one run's time scatters by up to 1.5x (the fits are deterministic).
    """
    from robustep.ep import expectation_propagation, run_chain
    from robustep.likelihoods import NoisyStep
    from robustep.posterior import DensePrior

    table = defaultdict(lambda: defaultdict(float))
    for boundary, flip, eps, n, seed, variance, ell in cell_list:
        X, y = step_noise_data(boundary, n, flip, seed)
        K = DensePrior((ConstantKernel(variance) * RBF(ell))(X), check=False)
        noise = "" if eps == flip else f" eps={eps:g}"
        label = f"{boundary} {flip:.0%}{noise} n={n} s2={variance:g} ell={ell:g}"
        for name in candidates:
            kwargs = STEP_CANDIDATES[name]
            ratio = seconds = None
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                if isinstance(kwargs, tuple):  # ("classifier", its common parameters)
                    common = kwargs[1]
                    probit_times, step_times = [], []
                    for _ in range(repeats):
                        probit_times.append(_fit_classifier(X, y, **common)[0])
                        step_seconds, res, warned = _fit_classifier(
                            X, y, likelihood="step", label_noise=eps, **common
                        )
                        step_times.append(step_seconds)
                    res.converged = res.converged_ and not warned
                    res.n_iter, res.method_used = res.n_iter_, res.method_used_
                    seconds = min(step_times)
                    ratio = seconds / min(probit_times)
                elif callable(kwargs):
                    res = run_chain(K, y, NoisyStep(eps), kwargs(max_iter))
                else:
                    res = expectation_propagation(K, y, NoisyStep(eps), max_iter=max_iter, **kwargs)
            if seconds is None:
                seconds = time.perf_counter() - t0
            row = table[(label, name)]
            if ratio is not None:
                row.setdefault("ratios", []).append(ratio)
            row["runs"] += 1
            row["converged"] += bool(res.converged)
            row["seconds"] += seconds
            row["max_seconds"] = max(row["max_seconds"], seconds)
            row.setdefault("times", []).append(seconds)
            row["sweeps"] += int(res.n_iter)
            used = getattr(res, "method_used", None)
            if used is not None and res.converged:
                row.setdefault("used", defaultdict(int))[used] += 1
            if verbose:
                used = getattr(res, "method_used", "")
                extra = "" if ratio is None else f" ratio to probit {ratio:.1f}"
                search = getattr(res, "optimizer_result_", None)
                if search is not None:  # the classifier's evidence search
                    extra += (f" (search: {search.n_starts} starts, {search.n_evaluations} "
                              f"evaluations, {search.n_failures} failed; kernel_ "
                              f"{res.kernel_}; site precisions "
                              f"{res.site_precision_.min():.3g} to "
                              f"{res.site_precision_.max():.3g})")  # fmt: skip
                print(f"{label:34s} seed {seed} {name:12s} {res.converged!s:5s} "
                      f"{res.n_iter:5d} sweeps {seconds:7.2f}s {used}{extra}",
                      flush=True)  # fmt: skip
    return table


def format_step_noise(table):
    """One row per (cell, candidate): runs, converged, total / median / slowest seconds,
    sweeps, for a chain the stage that converged (stage: runs), and for candidate
    ``"classifier"`` and ``"sparse classifier"`` the median and worst ratio of its seconds
    to the probit fit's."""
    lines = ["| cell | candidate | runs | converged | seconds | median (s) | slowest run (s) "
             "| sweeps | converged in | ratio to probit (median) | (worst) |",
             "|" + "---|" * 11]  # fmt: skip
    for (label, name), row in table.items():
        used = ", ".join(f"{k}: {v}" for k, v in sorted(row.get("used", {}).items()))
        ratios = row.get("ratios")
        ratio = f"{np.median(ratios):.2g} | {max(ratios):.2g}" if ratios else "- | -"
        lines.append(
            f"| {label} | {name} | {row['runs']:.0f} | {row['converged']:.0f} | "
            f"{row['seconds']:.1f} | {np.median(row['times']):.1f} | {row['max_seconds']:.1f} "
            f"| {row['sweeps']:.0f} | {used or '-'} | {ratio} |"
        )
    return "\n".join(lines)


def parse_seeds(parser, text):
    """Seeds from "A-B" (A to B) or "A,B,..."; a malformed value is a usage error."""
    try:
        if "-" in text:
            lo, hi = (int(v) for v in text.split("-"))
            seeds = list(range(lo, hi + 1))
        else:
            seeds = [int(v) for v in text.split(",")]
    except ValueError:
        parser.error(f"--seeds takes a range A-B or comma-separated integers, got {text!r}")
    if not seeds:
        parser.error(f"--seeds gives no seed: {text!r}")
    return seeds


def _settings(parser, pairs):
    """``robustep.config`` with the ``--config NAME=VALUE`` pairs (JSON values, as the
    ``robustep`` command's ``--set``: ``null`` for None), or a null context."""
    from robustep import config
    from robustep.cli import _parse_overrides

    try:
        settings = _parse_overrides(pairs, flag="--config")
        with config(**settings):  # settings are checked on entry
            pass
    except (TypeError, ValueError) as error:
        parser.error(str(error))
    return config(**settings)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small subset (< 60 s)")
    parser.add_argument("--verbose", action="store_true", help="one line per run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--step-noise", action="store_true", help="the label-noise step cells instead"
    )
    parser.add_argument(
        "--candidates",
        default=",".join(STEP_DEFAULT),
        help=f"--step-noise: comma-separated, of {', '.join(STEP_CANDIDATES)}",
    )
    parser.add_argument("--max-iter", type=int, default=1000, help="--step-noise: sweeps")
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="--step-noise, candidate classifier: run the step and probit fits this many "
        "times each and time the fastest run of each (default 1)",
    )
    parser.add_argument(
        "--sizes", default="200,300", help="--step-noise: comma-separated n (default 200,300)"
    )
    parser.add_argument(
        "--seeds", default="5-9", help="--step-noise: seeds, a range A-B or comma-separated"
    )
    parser.add_argument(
        "--kernels",
        default=None,
        help="--step-noise: 'start' for the default starting kernel only (s2=1, ell=1)",
    )
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="--step-noise: run under robustep.config(NAME=VALUE) (VALUE in JSON; "
        "repeatable), e.g. --config search_first_step=null",
    )
    parser.add_argument(
        "--methods", default=None, help="comma-separated: run the cells of these methods only"
    )
    parser.add_argument(
        "--estimators", default=None, help="comma-separated: run the cells of these estimators only"
    )
    args = parser.parse_args(argv)
    if args.step_noise:
        names = [c.strip() for c in args.candidates.split(",")]
        unknown = [c for c in names if c not in STEP_CANDIDATES]
        if unknown:
            parser.error(f"unknown candidates {unknown}; choose from {list(STEP_CANDIDATES)}")
        sizes = tuple(int(v) for v in args.sizes.split(","))
        seeds = parse_seeds(parser, args.seeds)
        cell_list = step_noise_cells(args.quick, sizes, seeds)
        if args.kernels == "start":
            cell_list = [c for c in cell_list if c[5:] == (1.0, 1.0)] or [
                c[:5] + (1.0, 1.0) for c in cell_list
            ]
            cell_list = list(dict.fromkeys(cell_list))
        if args.repeats < 1:
            parser.error(f"--repeats must be at least 1, got {args.repeats}")
        with _settings(parser, args.config):
            table = run_step_noise(cell_list, names, args.max_iter, args.verbose, args.repeats)
        print(format_step_noise(table))
        return 0
    t0 = time.perf_counter()
    methods = None if args.methods is None else {m.strip() for m in args.methods.split(",")}
    estimators = (
        None if args.estimators is None else {e.strip() for e in args.estimators.split(",")}
    )
    table, failures = run(args.quick, args.verbose, args.seed, methods, estimators)
    print(format_table(table))
    keys = ("runs", "nonfinite", "silent", "undocumented", "evidence")
    total = {k: sum(r[k] for r in table.values()) for k in keys}
    print(
        f"\n{total['runs']:.0f} runs in {time.perf_counter() - t0:.0f} s: "
        f"{total['nonfinite']:.0f} NaN/inf predictions, {total['silent']:.0f} silent failures, "
        f"{total['undocumented']:.0f} undocumented exceptions; "
        f"{total['evidence']:.0f} fits with a non-finite log marginal likelihood"
    )
    for cell, r in failures:
        print(f"\nFAILED {cell.estimator} {cell.method} {cell.name}: {r['error']}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
