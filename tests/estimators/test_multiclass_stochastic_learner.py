"""The stochastic learner of GPClassifier's sparse multinomial model (more than two
classes, inducing_points): learning by stochastic EP on pairwise probit factors
(robustep.ep.stochastic_multiclass), then nested EP on all points at the learned values."""

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

import robustep
from robustep import GPClassifier, StochasticLearner
from robustep.estimators._learner import LearnerResult

KERNEL = ConstantKernel(1.0) * RBF(1.0)


def _three_classes(n, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, 2))
    f = np.stack([np.sin(X[:, 0]), np.cos(X[:, 1]), X[:, 0] * X[:, 1] / 6], axis=1)
    return X, np.argmax(2.0 * f + 0.5 * rng.normal(size=f.shape), axis=1)


def _quick(**kw):
    return StochasticLearner(**{"batch_size": 100, "max_epochs": 6, "learning_rate": 0.05, **kw})


def _estimator(**kw):
    return GPClassifier(KERNEL, inducing_points=8, multi_class="multinomial", random_state=0, **kw)


def test_fit_predict_and_attributes():
    X, y = _three_classes(400)
    labels = np.array(["a", "b", "c"])[y]
    est = _estimator(learner=_quick()).fit(X, labels)
    p = est.predict_proba(X[:50])
    assert p.shape == (50, 3)
    np.testing.assert_allclose(p.sum(axis=1), 1.0)
    assert set(est.predict(X[:50])) <= {"a", "b", "c"}
    assert np.mean(est.predict(X) == labels) > 0.6
    assert est.multi_class_ == "multinomial" and est.learner_ == "stochastic"
    assert 1 <= est.n_epochs_ == len(est.history_) <= 6
    assert all("validation_log_loss" in record for record in est.history_)
    result = est.optimizer_result_
    assert isinstance(result, LearnerResult) and result.moved
    assert result.n_train == 360  # validation_fraction 0.1 held out
    assert est.inducing_points_.shape == (8, 2)
    assert not np.array_equal(est.kernel_.theta, KERNEL.theta)
    # the posterior is nested EP on all n at the learned values
    assert est.site_precision_.shape[0] == 400
    assert np.isfinite(est.log_marginal_likelihood_value_)
    assert est.log_marginal_likelihood_value_ == pytest.approx(est.log_marginal_likelihood())


def test_reproducible_with_random_state():
    X, y = _three_classes(300)
    a = _estimator(learner=_quick()).fit(X, y)
    b = _estimator(learner=_quick()).fit(X, y)
    np.testing.assert_array_equal(a.predict_proba(X[:20]), b.predict_proba(X[:20]))
    np.testing.assert_array_equal(a.inducing_points_, b.inducing_points_)
    c = _estimator(learner=_quick()).set_params(random_state=1).fit(X, y)
    assert not np.array_equal(a.kernel_.theta, c.kernel_.theta)


def test_auto_picks_the_stochastic_learner_by_training_set_size():
    X, y = _three_classes(200)
    sparse = _estimator(optimize_inducing=False, learner="auto")
    assert clone(sparse).fit(X, y).learner_ == "full_batch"  # default threshold 10000
    with robustep.config(stochastic_learner_min_n=200):
        fitted = clone(sparse).fit(X, y)
        assert fitted.learner_ == "stochastic" and fitted.history_
        # the dense multinomial model keeps the full-batch search
        dense = GPClassifier(KERNEL, multi_class="multinomial", optimizer=None).fit(X, y)
        assert dense.learner_ == "full_batch" and dense.history_ is None
    full = clone(sparse).set_params(learner="full_batch").fit(X, y)
    assert full.learner_ == "full_batch" and full.n_epochs_ is None


def test_clear_errors():
    X, y = _three_classes(150)
    with pytest.raises(ValueError, match="inducing_points"):
        GPClassifier(KERNEL, multi_class="multinomial", learner="stochastic").fit(X, y)
    with pytest.raises(ValueError, match="tied sites"):
        _estimator(learner=StochasticLearner(tied_sites=False)).fit(X, y)
    with pytest.raises(ValueError, match="optimizer=None"):
        _estimator(learner="stochastic", optimizer=None).fit(X, y)
    with pytest.raises(ValueError, match="batch_size"):
        _estimator(learner=StochasticLearner(batch_size=0)).fit(X, y)


@pytest.mark.slow
def test_stochastic_fit_is_close_to_the_full_batch_fit():
    # about 30 s: the full-batch multinomial search is the slow part
    X, y = _three_classes(1500, seed=2)
    Xt, yt = _three_classes(1000, seed=3)
    rows = np.arange(1000)

    def log_loss(est):
        return -np.mean(np.log(est.predict_proba(Xt)[rows, yt]))

    stochastic = _estimator(learner=StochasticLearner(batch_size=200, max_epochs=60)).fit(X, y)
    full = _estimator(learner="full_batch").fit(X, y)
    assert log_loss(stochastic) < log_loss(full) + 0.03
    assert np.mean(stochastic.predict(Xt) == full.predict(Xt)) > 0.95
