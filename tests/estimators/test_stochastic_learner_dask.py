"""The estimators' stochastic learner on Dask input: read block by block, never whole.

The Dask fits run under dask's synchronous scheduler (no cluster).  Against the same data
in memory: one block makes the learner's batches coincide with the in-memory ones (the
same draws), so the learned values are equal; blocks of 500 rows give other batches and
another held-out split, and the learned values agree within the learner's noise.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

import robustep
from robustep import GPClassifier, GPRegressor, StochasticLearner, StudentTGPRegressor
from robustep.estimators import _learner

dask = pytest.importorskip("dask")
da = pytest.importorskip("dask.array")

KERNEL = ConstantKernel(1.0) * RBF(1.0)


@pytest.fixture(autouse=True)
def _synchronous():
    with dask.config.set(scheduler="synchronous"):
        yield


def _labels(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, 2))
    f = np.sin(1.5 * X[:, 0]) * np.cos(X[:, 1])
    return X, (f + 0.3 * rng.normal(size=n) > 0).astype(int)


def _outliers(n, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, 1))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=n)
    y[: n // 10] += rng.choice([-1, 1], n // 10) * rng.uniform(3, 6, n // 10)
    return X, y


def _dask(X, y, rows):
    return da.from_array(X, chunks=(rows, X.shape[1])), da.from_array(y, chunks=rows)


def test_one_block_learns_exactly_what_memory_learns():
    X, y = _labels(3000)
    Xd, yd = _dask(X, y, 3000)
    learner = StochasticLearner(250, 5, validation_fraction=0.0, early_stopping=False)
    # a Dask X runs FITC-EP (α = 1); the in-memory fit is asked for the same model
    common = dict(inducing_points=X[:10], learner=learner, random_state=0)
    memory = GPClassifier(KERNEL, inducing_power=1, **common).fit(X, y)
    blocks = GPClassifier(KERNEL, **common).fit(Xd, yd)
    assert blocks.learner_ == memory.learner_ == "stochastic"
    assert blocks.inducing_power_ == 1.0 and blocks.X_train_ is Xd
    np.testing.assert_array_equal(blocks.kernel_.theta, memory.kernel_.theta)
    np.testing.assert_array_equal(blocks.inducing_points_, memory.inducing_points_)
    assert [h["energy"] for h in blocks.history_] == [h["energy"] for h in memory.history_]
    # the final EP fit over the chunks: the in-memory fit's to rounding
    assert blocks.log_marginal_likelihood_value_ == pytest.approx(
        memory.log_marginal_likelihood_value_, rel=1e-8
    )
    np.testing.assert_allclose(blocks.predict_proba(X[:50]), memory.predict_proba(X[:50]),
                               atol=1e-8)  # fmt: skip


def test_regressors_one_block_learn_what_memory_learns():
    X, y = _outliers(1500)
    Xd, yd = _dask(X, y, 1500)
    learner = StochasticLearner(250, 3, validation_fraction=0.0, early_stopping=False)
    for est in (GPRegressor(likelihood="student_t"), StudentTGPRegressor()):
        est.set_params(inducing_points=X[:8], learner=learner, random_state=0)
        memory = clone(est).set_params(inducing_power=1).fit(X, y)
        blocks = clone(est).fit(Xd, yd)
        assert blocks.learner_ == "stochastic"
        np.testing.assert_array_equal(blocks.kernel_.theta, memory.kernel_.theta)
        assert blocks.likelihood_.scale == memory.likelihood_.scale
        assert blocks.log_marginal_likelihood_value_ == pytest.approx(
            memory.log_marginal_likelihood_value_, rel=1e-8
        )


def test_blocks_of_500_learn_the_same_hyperparameters():
    # other batches and another held-out split: the same values within the learner's
    # noise (measured over four data seeds: length-scales within 8%, the weakly
    # identified amplitude within 37%, mean probabilities within 0.01)
    X, y = _labels(3000)
    Xs = np.random.default_rng(9).uniform(-3, 3, size=(400, 2))
    learner = StochasticLearner(250, 20, 0.1, early_stopping=False)
    common = dict(inducing_points=X[:10], optimize_inducing=False, learner=learner,
                  random_state=0)  # fmt: skip
    memory = GPClassifier(KERNEL, inducing_power=1, **common).fit(X, y)
    blocks = GPClassifier(KERNEL, **common).fit(*_dask(X, y, 500))
    log_amplitude, log_length = np.abs(blocks.kernel_.theta - memory.kernel_.theta)
    assert log_length <= 0.15 and log_amplitude <= 0.5
    dp = np.abs(blocks.predict_proba(Xs)[:, 1] - memory.predict_proba(Xs)[:, 1])
    assert np.mean(dp) <= 0.02
    # the held-out split: validation_fraction of n, drawn from one block of six
    assert blocks.optimizer_result_.n_train == 2700
    assert all("validation_log_loss" in h for h in blocks.history_)


class _BlocksPerCompute:
    """Which blocks of X each dask computation loads (the synchronous scheduler runs a
    computation's tasks in the thread that started it)."""

    def __init__(self):
        self.local = threading.local()
        self.loads = []  # one list of block numbers per computation
        self.recording = False

    def start(self, dsk):
        self.local.loads = []
        if self.recording:
            self.loads.append(self.local.loads)

    def load(self, X, j):
        self.local.loads.append(j)
        return X


def _counted(X, rows, counter):
    """X as a Dask array whose block j is produced by ``counter.load`` (one task each)."""
    parts = [
        da.from_delayed(dask.delayed(counter.load, pure=False)(X[s : s + rows], j),
                        shape=(min(rows, X.shape[0] - s), X.shape[1]), dtype=float)
        for j, s in enumerate(range(0, X.shape[0], rows))
    ]  # fmt: skip
    return da.concatenate(parts)


def test_learning_reads_one_block_per_computation(monkeypatch):
    X, y = _labels(3000)
    counter = _BlocksPerCompute()
    Xd = _counted(X, 500, counter)
    learn = _learner._learn_stochastic

    def recorded(learner, problem):
        counter.recording = True
        try:
            return learn(learner, problem)
        finally:
            counter.recording = False

    monkeypatch.setattr(_learner, "_learn_stochastic", recorded)
    learner = StochasticLearner(250, 3, early_stopping=False)
    with dask.callbacks.Callback(start=counter.start):
        est = GPClassifier(KERNEL, inducing_points=X[:10], learner=learner,
                           random_state=0).fit(Xd, y)  # fmt: skip
    assert est.learner_ == "stochastic" and est.n_epochs_ == 3
    loads = [c for c in counter.loads if c]
    # never the whole of X in one computation: the held-out block once, then one block
    # per computation, every block in every epoch
    assert max(len(c) for c in loads) == 1
    assert len(loads) >= 1 + 3 * 6
    assert sorted({c[0] for c in loads}) == list(range(6))


def test_auto_picks_the_stochastic_learner_for_large_dask_input():
    X, y = _labels(600)
    Xd, yd = _dask(X, y, 200)
    est = GPClassifier(KERNEL, inducing_points=X[:6], random_state=0)
    with robustep.config(stochastic_learner_min_n=600):
        fitted = clone(est).fit(Xd, yd)
        assert fitted.learner_ == "stochastic" and fitted.history_
        assert fitted.optimizer_result_.n_train == 540  # 10% held out
        with robustep.config(stochastic_validation_max_rows=25):
            assert clone(est).fit(Xd, yd).optimizer_result_.n_train == 575
    with robustep.config(stochastic_learner_min_n=601):
        assert clone(est).fit(Xd, yd).learner_ == "full_batch"
    with pytest.raises(ValueError, match="stochastic_validation_max_rows"):
        with robustep.config(stochastic_validation_max_rows=0):
            pass


def test_one_vs_rest_binary_fits_read_the_blocks():
    X, _ = _labels(600)
    y3 = np.digitize(X[:, 0], [-1.0, 1.0])
    est = GPClassifier(KERNEL, inducing_points=6, multi_class="one_vs_rest", random_state=0,
                       learner=StochasticLearner(100, 2)).fit(*_dask(X, y3, 200))  # fmt: skip
    assert [e.learner_ for e in est.estimators_] == ["stochastic"] * 3
    assert est.predict_proba(X[:4]).shape == (4, 3)


def test_callback_sees_each_epoch_and_can_stop_the_learner():
    X, y = _labels(600)
    seen = []

    def callback(state, record):
        mean, var = state.predict(X[:5])
        assert mean.shape == var.shape == (5,) and np.all(var > 0)
        seen.append(record["epoch"])
        return record["epoch"] == 2

    learner = StochasticLearner(100, 10, callback=callback)
    for data in ((X, y), _dask(X, y, 200)):
        seen.clear()
        est = GPClassifier(KERNEL, inducing_points=X[:6], learner=learner,
                           random_state=0).fit(*data)  # fmt: skip
        assert seen == [1, 2] and est.n_epochs_ == 2
        assert est.optimizer_result_.stopped == "callback"


def test_clear_errors_with_dask_input():
    X, y = _labels(400)
    Xd, yd = _dask(X, y, 100)
    per_point = StochasticLearner(tied_sites=False)
    with pytest.raises(ValueError, match="tied_sites=True"):
        GPClassifier(KERNEL, inducing_points=5, learner=per_point).fit(Xd, yd)
    with pytest.raises(ValueError, match="tied_sites=True"):
        _learner.resolve(per_point, n=400, sparse=True, optimizer="fmin_l_bfgs_b", dask=True)
    with pytest.raises(ValueError, match="in-memory batches"):
        GPClassifier(KERNEL, inducing_points=5).partial_fit(Xd, y, classes=[0, 1])
    with pytest.raises(ValueError, match="in-memory batches"):
        GPRegressor(inducing_points=5).partial_fit(Xd, y.astype(float))
    y3 = np.where(X[:, 1] > 1.0, 2, y)
    with pytest.raises(ValueError, match="one_vs_rest"):
        GPClassifier(KERNEL, inducing_points=5, learner="stochastic").fit(Xd, y3)
