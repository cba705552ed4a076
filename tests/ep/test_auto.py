"""method="auto": parallel EP -> damped EP -> power EP -> double loop (ep/chain.py)."""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

from _benchmarks import load_benchmark
from robustep.ep import expectation_propagation
from robustep.ep.chain import auto_expectation_propagation
from robustep.estimators import GPClassifier, StudentTGPRegressor
from robustep.likelihoods import Probit, StudentT


def _grid_module():
    return load_benchmark("auto_grid", "auto_grid")


def test_defaults_are_auto():
    assert GPClassifier().method == "auto"
    assert StudentTGPRegressor().method == "auto"


def test_easy_problem_uses_parallel_ep_and_matches_ep():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2))
    y = (X[:, 0] + 0.3 * rng.normal(size=40) > 0).astype(int)
    kernel = ConstantKernel(2.0, "fixed") * RBF(1.0, "fixed")
    auto = GPClassifier(kernel, optimizer=None, tol=1e-8).fit(X, y)
    ep = GPClassifier(kernel, method="ep", optimizer=None, tol=1e-8).fit(X, y)
    assert auto.method_used_ == "ep" and ep.method_used_ == "ep"
    np.testing.assert_allclose(auto.site_precision_, ep.site_precision_, atol=1e-6)
    np.testing.assert_allclose(auto.predict_proba(X), ep.predict_proba(X), atol=1e-7)


def test_hard_problem_falls_back_and_reaches_the_ep_fixed_point():
    """nu = 1.5, near-duplicate inputs, large signal variance: plain parallel EP oscillates;
    the chain converges, to a fixed point of EP (one more plain EP sweep moves nothing)."""
    grid = _grid_module()
    rng = np.random.default_rng(300)
    X, y = grid._regression(40, rng, 0.2)
    X = grid._near_duplicates(X, rng)
    y = (y - y.mean()) / y.std()
    K = grid._tiny(3e-2)(X)
    lik = StudentT(1.5, 0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        res = auto_expectation_propagation(K, y, lik)
    assert res.converged
    # stage 2 (EP's fixed point), not the power stage's different approximation
    assert res.method_used == "damped"
    assert [t[0] for t in res.methods_tried][0] == "ep" and not res.methods_tried[0][1]
    assert res.n_iter == sum(t[2] for t in res.methods_tried)
    again = expectation_propagation(K, y, lik, init=res, max_iter=1, double_loop=False)
    assert again.converged


def test_all_stages_fail_warns_once_naming_them():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(30, 1))
    y = np.where(X[:, 0] > 0, 1, 0)
    clf = GPClassifier(ConstantKernel(1e4, "fixed") * RBF(1.0, "fixed"), max_iter=1,
                       tol=1e-12, optimizer=None)  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf.fit(X, y)
    msgs = [str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning)]
    assert len(msgs) == 1
    assert "parallel EP" in msgs[0] and "damped EP" in msgs[0] and "double-loop" in msgs[0]
    assert "power EP" in msgs[0] and "a different approximation" in msgs[0]
    assert not clf.converged_
    assert np.all(np.isfinite(clf.predict_proba(X)))


def test_without_double_loop_the_chain_stops_after_power_ep():
    """double_loop=False (inner runs of a hyperparameter search): stages 1-3 only."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(30, 1))
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    K = (ConstantKernel(1e4) * RBF(1.0))(X)
    res = auto_expectation_propagation(K, y, Probit(), max_iter=1, tol=1e-12, double_loop=False)
    assert [t[0] for t in res.methods_tried] == ["ep", "damped", "power"]
    assert not res.converged and "double-loop" not in res.message
    full = auto_expectation_propagation(K, y, Probit(), max_iter=1, tol=1e-12)
    assert [t[0] for t in full.methods_tried] == ["ep", "damped", "double_loop", "power"]


def test_explicit_ep_is_unchanged():
    """method="ep" still runs the engine's default (robust parallel EP + double loop)."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(30, 2))
    y = (X[:, 0] > 0).astype(int)
    kernel = ConstantKernel(3.0, "fixed") * RBF(0.7, "fixed")
    clf = GPClassifier(kernel, method="ep", optimizer=None).fit(X, y)
    res = expectation_propagation(kernel(X), np.where(y == 1, 1.0, -1.0), Probit())
    np.testing.assert_array_equal(clf.site_precision_, res.site_precision)
    assert clf.n_iter_ == res.n_iter


def test_auto_grid_quick_converges_without_warning():
    """The quick subset of benchmarks/auto_grid.py: method="auto" (the default) converges
    on every cell and never warns (docs/reliability.md has the full grid).  5.5 s on the
    2-core machine (14 s when it was loaded by other jobs)."""
    grid = _grid_module()
    for problem, label, make, X, y in grid.cells(quick=True):
        out = grid.run_one(make, X, y, new=True)
        assert out["converged"], (problem, label, out)
        assert not out["warned"], (problem, label, out)


def test_chain_power_runs_every_stage_at_that_power():
    """run_chain(power=α): each stage looks for power EP's fixed point (the pseudo-point
    posterior's chain), the one damped power-EP sweeps reach."""
    import dataclasses

    import pytest

    from robustep.ep import InferenceStrategy, run_chain
    from robustep.likelihoods import NoisyStep

    rng = np.random.default_rng(4)
    X = rng.uniform(-2, 2, size=(60, 2))
    y = np.where(X[:, 0] * X[:, 1] > 0, 1.0, -1.0)
    y[rng.random(60) < 0.2] *= -1
    K = (ConstantKernel(2.0) * RBF(0.7))(X)
    lik = NoisyStep(0.2)
    reference = expectation_propagation(K, y, lik, power=0.5, damping=0.5, tol=1e-10,
                                        max_iter=5000)  # fmt: skip
    assert reference.converged
    auto = InferenceStrategy.auto(1000, trial_damping=0.5, accelerate=True)
    for stages in (("accelerated",), ("ep",), ("damped",), ("double_loop",)):
        res = run_chain(K, y, lik, dataclasses.replace(auto, stages=stages), power=0.5, tol=1e-10)
        assert res.converged and res.method_used == stages[0]
        np.testing.assert_allclose(res.log_Z, reference.log_Z, rtol=1e-9)
        np.testing.assert_allclose(res.mean, reference.mean, rtol=1e-7, atol=1e-9)
    # power 1 (the default) is EP's fixed point, not power EP's
    ep = run_chain(K, y, lik, dataclasses.replace(auto, stages=("accelerated",)), tol=1e-10)
    assert abs(ep.log_Z - reference.log_Z) > 1e-3
    with pytest.raises(ValueError, match="power must be in"):
        run_chain(K, y, lik, auto, power=0.0)
    with pytest.raises(ValueError, match="stage 'power'"):
        run_chain(K, y, lik, auto, power=0.5)
