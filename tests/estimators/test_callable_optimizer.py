"""A callable ``optimizer`` (scikit-learn's convention) in every estimator with an evidence
search: dense and sparse GPClassifier (binary and multinomial), StudentTProcessClassifier
and dense and sparse StudentTGPRegressor."""

import numpy as np
import pytest
from scipy import optimize
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

from robustep.estimators import GPClassifier, StudentTGPRegressor, StudentTProcessClassifier
from robustep.estimators._optimizer import bounds_array, minimise


def lbfgs_callable(maxiter=None, evaluations=None):
    """L-BFGS-B as a callable optimizer (±inf bounds are open sides for it), capped at
    ``maxiter`` iterations if given; appends to ``evaluations`` per objective call."""

    def run(obj_func, initial_theta, bounds):
        def counted(theta):
            if evaluations is not None:
                evaluations.append(1)
            return obj_func(theta)

        options = {} if maxiter is None else {"maxiter": maxiter}
        sol = optimize.minimize(counted, initial_theta, jac=True, method="L-BFGS-B",
                                bounds=bounds, options=options)  # fmt: skip
        return sol.x, sol.fun

    return run


lbfgs = lbfgs_callable()


class Recorder:
    """A callable optimizer that evaluates the objective once and stays at the start."""

    def __init__(self):
        self.calls = []

    def __call__(self, obj_func, initial_theta, bounds):
        value, grad = obj_func(initial_theta)
        only_value = obj_func(initial_theta, eval_gradient=False)
        self.calls.append((initial_theta.copy(), np.array(bounds), value, grad, only_value))
        return initial_theta, value


def _binary(n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, 2))
    y = np.where(np.sin(X[:, 0]) + 0.3 * rng.normal(size=n) > 0, 1, 0)
    return X, y


def _regression(n=40, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, 1))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=n)
    y[:3] += 4.0  # outliers
    return X, y


# ------------------------------------------------------------------- the helper
def test_run_optimizer_passes_sklearn_convention():
    def objective(x):
        return float(x @ x), 2.0 * x

    rec = Recorder()
    x, f, _ = minimise(rec, objective, [1.0, 2.0], [(0.0, 5.0), (None, None)])
    theta, box, value, grad, only = rec.calls[0]
    np.testing.assert_array_equal(box, [[0.0, 5.0], [-np.inf, np.inf]])
    assert value == only == 5.0
    np.testing.assert_array_equal(grad, [2.0, 4.0])
    np.testing.assert_array_equal(x, [1.0, 2.0])
    assert f == 5.0
    # the string runs scipy's L-BFGS-B and honours its options
    x, f, _ = minimise("fmin_l_bfgs_b", objective, [1.0, 2.0], [(0.5, 5.0), (None, None)])
    np.testing.assert_allclose(x, [0.5, 0.0], atol=1e-6)


def test_bounds_array_open_sides():
    np.testing.assert_array_equal(
        bounds_array([(None, 1.0), (2.0, None)]), [[-np.inf, 1.0], [2.0, np.inf]]
    )


def test_bad_callable_results_get_clear_errors():
    def objective(x):
        return float(x @ x), 2.0 * x

    with pytest.raises(TypeError, match=r"return \(theta_opt, func_min\)"):
        minimise(lambda f, t, b: t, objective, [1.0, 2.0], [(None, None)] * 2)
    with pytest.raises(TypeError, match="shape"):
        minimise(lambda f, t, b: (t[:1], 0.0), objective, [1.0, 2.0], [(None, None)] * 2)
    with pytest.raises(ValueError, match="NaN"):
        minimise(
            lambda f, t, b: (np.full(2, np.nan), 0.0), objective, [1.0, 2.0], [(None, None)] * 2
        )


# ------------------------------------------------------------------- GPClassifier
def test_dense_classifier_callable_matches_default_search():
    X, y = _binary()
    default = GPClassifier(ConstantKernel(1.0) * RBF(1.0)).fit(X, y)
    custom = GPClassifier(ConstantKernel(1.0) * RBF(1.0), optimizer=lbfgs).fit(X, y)
    np.testing.assert_allclose(custom.kernel_.theta, default.kernel_.theta, atol=1e-8)
    np.testing.assert_allclose(
        custom.log_marginal_likelihood_value_, default.log_marginal_likelihood_value_, rtol=1e-10
    )


def test_dense_classifier_callable_at_start_is_the_fixed_kernel_fit():
    X, y = _binary()
    rec = Recorder()
    est = GPClassifier(ConstantKernel(1.0) * RBF(1.0), optimizer=rec).fit(X, y)
    fixed = GPClassifier(ConstantKernel(1.0) * RBF(1.0), optimizer=None).fit(X, y)
    ((theta0, box, value, grad, _),) = rec.calls
    np.testing.assert_array_equal(box, est.kernel.bounds)
    np.testing.assert_allclose(est.kernel_.theta, fixed.kernel_.theta)
    # the objective is the negative evidence, its gradient the evidence gradient's negative
    lml, g = fixed.log_marginal_likelihood(theta0, eval_gradient=True)
    np.testing.assert_allclose(value, -lml, rtol=1e-6)
    np.testing.assert_allclose(grad, -g, rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(est.predict_proba(X), fixed.predict_proba(X), rtol=1e-6, atol=1e-8)


def test_sparse_classifier_callable_gets_inducing_inputs_unbounded():
    X, y = _binary(n=60)
    rec = Recorder()
    # FITC-EP as the fixed fit below ("auto" would run α = 0.5 with optimised inputs)
    est = GPClassifier(
        ConstantKernel(1.0) * RBF(1.0),
        inducing_points=5,
        inducing_power=1.0,
        optimizer=rec,
        random_state=0,
    ).fit(X, y)
    ((theta0, box, value, grad, only),) = rec.calls
    assert theta0.shape == box.shape[:1] == grad.shape == (2 + 5 * 2,)
    np.testing.assert_array_equal(box[:2], est.kernel.bounds)
    assert np.all(np.isinf(box[2:]))
    fixed = GPClassifier(
        ConstantKernel(1.0) * RBF(1.0), inducing_points=5, optimizer=None, random_state=0
    ).fit(X, y)
    np.testing.assert_allclose(est.inducing_points_, fixed.inducing_points_)
    np.testing.assert_allclose(value, -fixed.log_marginal_likelihood_value_, rtol=1e-6)


def test_sparse_classifier_capped_callable_stops_early():
    X, y = _binary(n=60)
    evaluations = []
    capped = lbfgs_callable(maxiter=3, evaluations=evaluations)
    est = GPClassifier(
        ConstantKernel(1.0) * RBF(1.0), inducing_points=5, optimizer=capped, random_state=0
    ).fit(X, y)
    start = GPClassifier(
        ConstantKernel(1.0) * RBF(1.0), inducing_points=5, optimizer=None, random_state=0
    ).fit(X, y)
    assert 3 <= len(evaluations) <= 10
    assert est.log_marginal_likelihood_value_ > start.log_marginal_likelihood_value_


def test_multinomial_classifier_callable():
    rng = np.random.default_rng(3)
    X = rng.uniform(-3, 3, size=(45, 2))
    y = np.digitize(X[:, 0] + 0.3 * rng.normal(size=45), [-1.0, 1.0])
    rec = Recorder()
    est = GPClassifier(
        ConstantKernel(1.0) * RBF(1.0), multi_class="multinomial", optimizer=rec
    ).fit(X, y)
    assert len(rec.calls) == 1 and est.multi_class_ == "multinomial"
    np.testing.assert_allclose(est.kernel_.theta, rec.calls[0][0])


# ------------------------------------------------------------------- Student-t process
def test_student_t_process_callable_matches_default_search():
    X, y = _binary(n=30)
    kernel = ConstantKernel(1.0) * RBF(1.0)
    default = StudentTProcessClassifier(kernel).fit(X, y)
    custom = StudentTProcessClassifier(kernel, optimizer=lbfgs).fit(X, y)
    # the default caps L-BFGS-B at 50 iterations; this small search stops well before
    np.testing.assert_allclose(custom.kernel_.theta, default.kernel_.theta, atol=1e-6)


# ------------------------------------------------------------------- Student-t regressor
@pytest.mark.parametrize("inducing_points", [None, 6])
def test_regressor_callable_at_start_keeps_the_start(inducing_points):
    X, y = _regression()
    rec = Recorder()
    kw = dict(df=4.0, scale=0.3, inducing_points=inducing_points, random_state=0)
    est = StudentTGPRegressor(ConstantKernel(1.0) * RBF(1.0), optimizer=rec, **kw).fit(X, y)
    ((theta0, box, value, grad, only),) = rec.calls
    k = 2 + 1  # kernel, log sigma (nu fixed by default)
    assert box.shape[0] == theta0.size == (k if inducing_points is None else k + 6)
    assert np.all(np.isfinite(box[:k]))
    if inducing_points is not None:
        assert np.all(np.isinf(box[k:]))
    assert value == pytest.approx(only) and np.all(np.isfinite(grad))
    np.testing.assert_allclose(est.kernel_.theta, theta0[:2])
    assert est.scale_ == pytest.approx(0.3) and est.df_ == pytest.approx(4.0)


def test_sparse_regressor_callable_search_improves_the_evidence():
    X, y = _regression()
    kw = dict(df=4.0, scale=0.3, inducing_points=6, random_state=0)
    fixed = StudentTGPRegressor(ConstantKernel(1.0) * RBF(1.0), optimizer=None, **kw).fit(X, y)
    est = StudentTGPRegressor(ConstantKernel(1.0) * RBF(1.0), optimizer=lbfgs, **kw).fit(X, y)
    assert est.log_marginal_likelihood_value_ > fixed.log_marginal_likelihood_value_ + 1.0
