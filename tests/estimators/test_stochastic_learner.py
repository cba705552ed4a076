"""The stochastic learner of the sparse estimators (robustep.StochasticLearner, learner=,
partial_fit) against the full-batch evidence search."""

import logging

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

import robustep
from robustep import GPClassifier, GPRegressor, StochasticLearner, StudentTGPRegressor
from robustep.ep.stochastic import fit_stochastic_ep
from robustep.estimators import _learner
from robustep.likelihoods import Probit

KERNEL = ConstantKernel(1.0) * RBF(1.0)


def _labels(n, seed=0, noise=0.3):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, 2))
    f = np.sin(1.5 * X[:, 0]) * np.cos(X[:, 1])
    return X, (f + noise * rng.normal(size=n) > 0).astype(int)


def _outliers(n, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, 1))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=n)
    k = n // 10
    y[:k] += rng.choice([-1, 1], k) * rng.uniform(3, 6, k)
    return X, y


def _quick(**kw):
    return StochasticLearner(**{"batch_size": 100, "max_epochs": 4, "learning_rate": 0.05, **kw})


# ------------------------------------------------------------------------ auto
def test_auto_picks_the_learner_by_training_set_size():
    X, y = _labels(200)
    sparse = GPClassifier(KERNEL, inducing_points=6, optimize_inducing=False, random_state=0)
    fitted = clone(sparse).fit(X, y)  # the default threshold is 10000 points
    assert fitted.learner_ == "full_batch" and fitted.history_ is None
    with robustep.config(stochastic_learner_min_n=200):
        fitted = clone(sparse).fit(X, y)
        assert fitted.learner_ == "stochastic"
        assert fitted.n_epochs_ == len(fitted.history_) >= 1
        # the dense model, a fixed kernel and a callable optimizer keep the full batch
        assert GPClassifier(KERNEL, optimizer=None).fit(X, y).learner_ == "full_batch"
        fixed = clone(sparse).set_params(optimizer=None).fit(X, y)
        assert fixed.learner_ == "full_batch" and fixed.optimizer_result_ is None
        for kwargs in (
            dict(sparse=False, optimizer="fmin_l_bfgs_b"),
            dict(sparse=True, optimizer=None),
            dict(sparse=True, optimizer=min),
        ):
            assert _learner.resolve("auto", n=200, **kwargs).name == "full_batch"
        for dask in (False, True):  # Dask X is read block by block
            picked = _learner.resolve("auto", n=200, sparse=True, optimizer="fmin_l_bfgs_b",
                                      dask=dask)  # fmt: skip
            assert picked.name == "stochastic"
    with robustep.config(stochastic_learner_min_n=201):
        assert _learner.resolve("auto", n=200, sparse=True, optimizer="fmin_l_bfgs_b").name == (
            "full_batch"
        )
    with robustep.config(stochastic_learner_min_n=None):
        assert _learner.resolve("auto", n=10**7, sparse=True, optimizer="fmin_l_bfgs_b").name == (
            "full_batch"
        )
    with pytest.raises(ValueError, match="stochastic_learner_min_n"):
        with robustep.config(stochastic_learner_min_n=0):
            pass


def test_regressor_auto_and_attributes():
    X, y = _outliers(300)
    with robustep.config(stochastic_learner_min_n=200):
        est = GPRegressor(inducing_points=10, random_state=0).fit(X, y)
    assert est.learner_ == "stochastic"
    assert "validation_log_density" in est.history_[0]
    assert est.optimizer_result_.stopped in ("early_stopping", "max_epochs")
    assert np.isfinite(est.log_marginal_likelihood_value_)
    lo, hi = est.predict_interval(X[:5])
    assert np.all(lo < hi)


# ------------------------------------------------------------- the same optimum
def _compare(n, m, learner, ev_tol, pred_tol, seed=0):
    X, y = _labels(n, seed)
    Xs = np.random.default_rng(9).uniform(-3, 3, size=(400, 2))
    common = dict(inducing_points=m, optimize_inducing=False, random_state=0)
    full = GPClassifier(KERNEL, learner="full_batch", **common).fit(X, y)
    stoch = GPClassifier(KERNEL, learner=learner, **common).fit(X, y)
    assert stoch.learner_ == "stochastic"
    gap = abs(stoch.log_marginal_likelihood_value_ - full.log_marginal_likelihood_value_)
    assert gap <= ev_tol * abs(full.log_marginal_likelihood_value_)
    dp = np.abs(stoch.predict_proba(Xs)[:, 1] - full.predict_proba(Xs)[:, 1])
    assert np.mean(dp) <= pred_tol
    return stoch


def test_stochastic_fit_approaches_the_full_batch_optimum_small():
    # measured: evidence 0.07% apart, probabilities 0.009 on average
    learner = StochasticLearner(100, 40, 0.1, early_stopping=False, validation_fraction=0.0)
    _compare(600, 10, learner, 0.01, 0.02)


@pytest.mark.slow
def test_stochastic_fit_reaches_the_full_batch_optimum():
    # n = 2000: evidence within 1%, predicted probabilities within 0.01 on average
    learner = StochasticLearner(500, 40, 0.1, early_stopping=False, validation_fraction=0.0)
    _compare(2000, 20, learner, 0.01, 0.01)


# ------------------------------------------------------------------- stopping
def test_early_stopping_keeps_the_best_held_out_epoch():
    X, y = _labels(300)
    learner = _quick(max_epochs=50, n_iter_no_change=2, tol=10.0)
    est = GPClassifier(KERNEL, inducing_points=10, random_state=0, learner=learner).fit(X, y)
    assert est.optimizer_result_.stopped == "early_stopping"
    assert est.n_epochs_ == 3 == len(est.history_)  # no epoch improves by tol = 10
    losses = [h["validation_log_loss"] for h in est.history_]
    assert est.optimizer_result_.best_epoch == int(np.argmin(losses)) + 1
    # without a held-out split the energy estimate is monitored
    learner = _quick(max_epochs=50, n_iter_no_change=2, tol=10.0, validation_fraction=0.0)
    est = GPClassifier(KERNEL, inducing_points=10, random_state=0, learner=learner).fit(X, y)
    assert est.optimizer_result_.stopped == "converged" and est.n_epochs_ == 3
    assert "validation_log_loss" not in est.history_[0]
    # early_stopping=False runs max_epochs
    learner = _quick(max_epochs=3, tol=10.0, early_stopping=False)
    est = GPClassifier(KERNEL, inducing_points=10, random_state=0, learner=learner).fit(X, y)
    assert est.optimizer_result_.stopped == "max_epochs" and est.n_epochs_ == 3


def test_max_time_is_respected():
    X, y = _labels(2000)
    learner = _quick(batch_size=20, max_epochs=10_000, early_stopping=False, max_time=0.3)
    est = GPClassifier(KERNEL, inducing_points=10, random_state=0, learner=learner).fit(X, y)
    assert est.optimizer_result_.stopped == "max_time"
    assert est.history_[-1]["elapsed"] < 0.3 + 3.0  # one step and one score past it (loaded)
    assert est.history_[-1]["steps"] < 10_000 * 100
    est.predict_proba(X[:3])


def test_keyboard_interrupt_keeps_the_last_finished_epoch(monkeypatch):
    X, y = _labels(600)
    original = _learner._Monitor.__call__

    def interrupted(self, result, record):
        stop = original(self, result, record)
        if len(self.history) == 3:
            raise KeyboardInterrupt
        return stop

    monkeypatch.setattr(_learner._Monitor, "__call__", interrupted)
    learner = _quick(max_epochs=20, early_stopping=False)
    est = GPClassifier(KERNEL, inducing_points=10, random_state=0, learner=learner)
    with pytest.warns(UserWarning, match="interrupted"):
        est.fit(X, y)
    assert est.optimizer_result_.stopped == "interrupted" and est.n_epochs_ == 3
    assert est.optimizer_result_.best_epoch == 3
    assert est.predict_proba(X[:5]).shape == (5, 2)


def test_reproducible_with_random_state():
    X, y = _labels(500)
    est = GPClassifier(KERNEL, inducing_points=10, random_state=3, learner=_quick())
    a, b = clone(est).fit(X, y), clone(est).fit(X, y)
    np.testing.assert_array_equal(a.kernel_.theta, b.kernel_.theta)
    np.testing.assert_array_equal(a.inducing_points_, b.inducing_points_)
    np.testing.assert_array_equal(a.predict_proba(X), b.predict_proba(X))
    assert [h["energy"] for h in a.history_] == [h["energy"] for h in b.history_]
    c = clone(est).set_params(random_state=4).fit(X, y)
    assert not np.array_equal(a.kernel_.theta, c.kernel_.theta)


def test_verbose_prints_one_line_per_epoch(capsys):
    X, y = _labels(300)
    GPClassifier(KERNEL, inducing_points=8, random_state=0, learner=_quick(max_epochs=3),
                 verbose=True).fit(X, y)  # fmt: skip
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "stochastic learner" in ln]
    assert len(lines) == 3 and "epoch 1/3" in lines[0] and "held-out log loss" in lines[0]
    assert "left" in lines[0]
    GPClassifier(KERNEL, inducing_points=8, random_state=0, learner=_quick(max_epochs=3)).fit(X, y)
    assert "stochastic learner" not in capsys.readouterr().err
    assert not logging.getLogger("robustep.search").handlers


# ---------------------------------------------------------------- partial_fit
def test_classifier_partial_fit_approaches_fit():
    X, y = _labels(2000)
    Xs, ys = _labels(1000, seed=5)
    full = GPClassifier(KERNEL, inducing_points=15, random_state=0).fit(X, y)
    learner = StochasticLearner(batch_size=250, learning_rate=0.05)
    stream = GPClassifier(KERNEL, inducing_points=15, random_state=0, learner=learner)
    first = None
    for _ in range(6):
        for start in range(0, 2000, 250):
            stream.partial_fit(X[start : start + 250], y[start : start + 250], classes=[0, 1])
            if first is None:
                first = np.abs(stream.predict_proba(Xs)[:, 1] - full.predict_proba(Xs)[:, 1])
    last = np.abs(stream.predict_proba(Xs)[:, 1] - full.predict_proba(Xs)[:, 1])
    assert np.mean(last) < 0.5 * np.mean(first) and np.mean(last) < 0.05
    assert stream.score(Xs, ys) > full.score(Xs, ys) - 0.03
    assert stream.learner_ == "stochastic" and stream.n_epochs_ == 48
    assert stream.n_iter_ == 48  # one step per batch of 250
    np.testing.assert_array_equal(stream.classes_, [0, 1])
    assert stream.predict(Xs[:4]).dtype == ys.dtype
    with pytest.raises(ValueError, match="partial_fit does not keep"):
        stream.log_marginal_likelihood(stream.kernel_.theta)
    # fit starts afresh (the dense model here) and a later partial_fit starts a new stream
    stream.set_params(inducing_points=None, learner="auto").fit(X[:200], y[:200])
    assert stream.inducing_points_ is None


def test_regressor_partial_fit_learns_through_outliers():
    X, y = _outliers(1600)
    Xs = np.linspace(-3, 3, 100)[:, None]
    learner = StochasticLearner(batch_size=200, learning_rate=0.05)
    est = StudentTGPRegressor(inducing_points=15, random_state=0, learner=learner)
    for _ in range(5):
        for start in range(0, 1600, 200):
            est.partial_fit(X[start : start + 200], y[start : start + 200])
    rmse = np.sqrt(np.mean((est.predict(Xs) - np.sin(2 * Xs[:, 0])) ** 2))
    assert rmse < 0.15
    assert est.scale_ < 0.5  # the outliers do not inflate the noise scale
    assert est.site_precision_ is None and est.learner_ == "stochastic"
    lo, hi = est.predict_interval(Xs[:3])
    assert np.all(lo < hi)


def test_student_t_regressor_stochastic_fit_on_outliers():
    X, y = _outliers(1000)
    Xs = np.linspace(-3, 3, 100)[:, None]
    learner = StochasticLearner(batch_size=100, max_epochs=30, learning_rate=0.05)
    est = StudentTGPRegressor(inducing_points=15, random_state=0, learner=learner).fit(X, y)
    rmse = np.sqrt(np.mean((est.predict(Xs) - np.sin(2 * Xs[:, 0])) ** 2))
    assert rmse < 0.1 and est.scale_ < 0.3
    assert est.df_ == 4.0  # fixed unless optimize_df
    assert np.isfinite(est.log_marginal_likelihood_value_)
    assert est.loo_log_predictive_.shape == (1000,)  # the final EP fit's diagnostics


def test_one_vs_rest_binary_fits_use_the_learner():
    X, y = _labels(240)
    y3 = np.where(X[:, 1] > 1.0, 2, y)
    est = GPClassifier(KERNEL, inducing_points=6, multi_class="one_vs_rest", random_state=0,
                       learner=_quick(max_epochs=2)).fit(X, y3)  # fmt: skip
    assert [e.learner_ for e in est.estimators_] == ["stochastic"] * 3
    assert est.predict_proba(X[:4]).shape == (4, 3)


# --------------------------------------------------------------------- errors
def test_clear_errors():
    X, y = _labels(100)
    with pytest.raises(ValueError, match="inducing_points"):
        GPClassifier(KERNEL, learner="stochastic").fit(X, y)
    with pytest.raises(ValueError, match="inducing_points"):
        GPRegressor(learner=StochasticLearner()).fit(X, y.astype(float))
    # partial_fit exists with inducing_points only (scikit-learn's available_if)
    assert not hasattr(GPClassifier(KERNEL), "partial_fit")
    assert hasattr(GPClassifier(KERNEL, inducing_points=5), "partial_fit")
    for est in (GPClassifier(KERNEL), GPRegressor()):
        with pytest.raises(AttributeError, match="partial_fit") as info:
            est.partial_fit(X, y.astype(float))
        assert "pass inducing_points" in str(info.value.__cause__)  # the reason, chained
    with pytest.raises(ValueError, match="classes"):
        GPClassifier(KERNEL, inducing_points=5).partial_fit(X, y)
    est = GPClassifier(KERNEL, inducing_points=5).partial_fit(X, y, classes=[0, 1])
    with pytest.raises(ValueError, match="not among classes"):
        est.partial_fit(X[:3], [0, 1, 2])
    with pytest.raises(ValueError, match="optimizer=None"):
        GPClassifier(KERNEL, inducing_points=5, optimizer=None, learner="stochastic").fit(X, y)
    with pytest.raises(ValueError, match="batch_size"):
        GPClassifier(KERNEL, inducing_points=5, learner=StochasticLearner(batch_size=0)).fit(X, y)
    with pytest.raises(ValueError, match="validation_fraction"):
        StochasticLearner(validation_fraction=1.0).check()
    with pytest.raises(ValueError, match="damping"):
        StochasticLearner(tied_sites=False, damping=2.0).check()
    with pytest.raises(ValueError, match="learner"):
        GPClassifier(KERNEL, inducing_points=5, learner="sgd").fit(X, y)
    with pytest.raises(ValueError, match="tied sites"):
        per_point = StochasticLearner(tied_sites=False)
        GPClassifier(KERNEL, inducing_points=5, learner=per_point).partial_fit(X, y, [0, 1])
    with pytest.raises(ValueError, match="Dask X"):
        _learner.resolve(StochasticLearner(tied_sites=False), n=100, sparse=True,
                         optimizer="fmin_l_bfgs_b", dask=True)  # fmt: skip
    X3 = np.vstack([X, X[:30] + 5.0])
    y3 = np.concatenate([y, np.full(30, 2)])
    with pytest.raises(ValueError, match="inducing_points"):  # the dense multinomial model
        GPClassifier(KERNEL, learner="stochastic").fit(X3, y3)


# ----------------------------------------------------- fit_stochastic_ep's boundary
def test_fit_stochastic_ep_continues_a_state():
    X, y = _labels(400)
    yp = np.where(y == 1, 1.0, -1.0)
    Z = X[:8]
    kw = dict(power=0.5, batch_size=100, random_state=0)
    a = fit_stochastic_ep(KERNEL, X, yp, Probit(), Z, n_epochs=2, **kw)
    b = fit_stochastic_ep(a.kernel, X, yp, a.likelihood, a.inducing_inputs, n_epochs=1,
                          state=a, **kw)  # fmt: skip
    assert b.n_steps == a.n_steps + 4 and b._adam.t == a._adam.t + 4
    assert not np.array_equal(a.kernel.theta, b.kernel.theta)
    # n_data scales the tied site: the same average site stands for more points
    c = fit_stochastic_ep(a.kernel, X, yp, a.likelihood, a.inducing_inputs, n_epochs=1,
                          state=a, n_data=4000, learn_kernel=False, learn_inducing=False,
                          **kw)  # fmt: skip
    assert np.trace(c.cov) < np.trace(b.cov)
    with pytest.raises(ValueError, match="n_data"):
        fit_stochastic_ep(KERNEL, X, yp, Probit(), Z, n_data=10, **kw)
    with pytest.raises(ValueError, match="n_data"):
        fit_stochastic_ep(KERNEL, X, yp, Probit(), Z, n_data=1000, tied_sites=False, **kw)
    with pytest.raises(ValueError, match="site structure"):
        fit_stochastic_ep(KERNEL, X, yp, Probit(), Z, state=a, tied_sites=False, **kw)


def test_fit_stochastic_ep_learns_named_likelihood_parameters():
    from robustep.likelihoods import StudentT

    X, y = _outliers(300)
    kw = dict(power=0.5, batch_size=100, n_epochs=3, random_state=0, learn_kernel=False)
    fit = fit_stochastic_ep(KERNEL, X, y, StudentT(df=4.0, scale=1.0), X[:8],
                            learn_likelihood=("scale",), **kw)  # fmt: skip
    assert fit.likelihood.df == 4.0 and fit.likelihood.scale != 1.0
    with pytest.raises(ValueError, match="learn_likelihood"):
        fit_stochastic_ep(KERNEL, X, y, StudentT(), X[:8], learn_likelihood=("nu",), **kw)


# ----------------------------------------------------------------------- plot
def test_plot_learning_curve():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    from robustep.diagnostics import plot_learning_curve

    X, y = _labels(300)
    est = GPClassifier(KERNEL, inducing_points=8, random_state=0, learner=_quick()).fit(X, y)
    ax = plot_learning_curve(est)
    assert len(ax.lines[0].get_xdata()) == est.n_epochs_
    assert ax.get_xlabel() == "epoch" and ax.get_ylabel()
    assert est.optimizer_result_.n_train == 270  # 30 of the 300 points held out
    np.testing.assert_allclose(ax.lines[0].get_ydata(), [h["energy"] / 270 for h in est.history_])
    full = GPClassifier(KERNEL, inducing_points=8, optimizer=None).fit(X, y)
    with pytest.raises(AttributeError, match="history_"):
        plot_learning_curve(full)


def test_fitted_stochastic_estimators_pickle_and_continue():
    """A fitted state (sites, Adam moments) holds arrays only: pickling keeps the
    predictions, and a stream continues from the unpickled estimator as from the original."""
    import pickle

    X, y = _labels(600)
    learner = StochasticLearner(batch_size=100, learning_rate=0.05)
    est = GPClassifier(KERNEL, inducing_points=8, random_state=0, learner=learner)
    est.partial_fit(X[:300], y[:300], classes=[0, 1])
    copy = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(copy.predict_proba(X), est.predict_proba(X))
    est.partial_fit(X[300:], y[300:])
    copy.partial_fit(X[300:], y[300:])
    np.testing.assert_allclose(copy.predict_proba(X), est.predict_proba(X), rtol=0, atol=1e-12)
    fitted = GPClassifier(KERNEL, inducing_points=8, random_state=0, learner=_quick(max_epochs=2))
    fitted.fit(X, y)
    np.testing.assert_array_equal(
        pickle.loads(pickle.dumps(fitted)).predict_proba(X), fitted.predict_proba(X)
    )


def test_warmup_epochs_settle_the_sites_before_learning(monkeypatch):
    """warmup_epochs: that many epochs of site updates with every parameter fixed, then the
    learning continues from those sites (one call with state=); 0 learns from the start."""
    from robustep.ep import stochastic

    calls = []
    original = stochastic.fit_stochastic_ep

    def recording(*args, **kwargs):
        calls.append(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(stochastic, "fit_stochastic_ep", recording)
    X, y = _labels(400)
    est = GPClassifier(KERNEL, inducing_points=8, random_state=0,
                       learner=_quick(warmup_epochs=2))  # fmt: skip
    est.fit(X, y)
    warm, main = calls
    assert warm["n_epochs"] == 2 and warm["callback"] is None
    assert not (warm["learn_kernel"] or warm["learn_inducing"] or warm["learn_likelihood"])
    assert main["state"] is not None and main["learn_kernel"] and main["learn_inducing"]
    assert len(est.history_) == est.n_epochs_  # the warm-up epochs are not in history_
    calls.clear()
    cold = clone(est).set_params(learner=_quick(warmup_epochs=0)).fit(X, y)
    assert len(calls) == 1 and calls[0].get("state") is None
    assert not np.array_equal(cold.kernel_.theta, est.kernel_.theta)
    with pytest.raises(ValueError, match="warmup_epochs"):
        clone(est).set_params(learner=_quick(warmup_epochs=-1)).fit(X, y)
