"""inducing_power="auto", the sparse estimators' default: α = 0.5 (power EP on the
pseudo-point posterior) with optimised inducing inputs in memory, α = 1 (FITC-EP)
otherwise; ``inducing_power_`` is the α a fit ran with."""

import math
import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

import robustep
from robustep import GPClassifier, GPRegressor, StochasticLearner, StudentTGPRegressor

KERNEL = ConstantKernel(1.0) * RBF(1.0)


def _labels(n=60, seed=0):
    """X (n, 2) uniform on [-3, 3]², labels 1[sin(1.5 x₁) + cos(x₂) > 0] with 10% flipped."""
    X = np.random.default_rng([seed, 0]).uniform(-3.0, 3.0, size=(n, 2))
    y = (np.sin(1.5 * X[:, 0]) + np.cos(X[:, 1]) > 0).astype(int)
    flip = np.random.default_rng([seed, 1]).random(n) < 0.10
    y[flip] = 1 - y[flip]
    return X, y


def _three_classes(n=36, seed=1):
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 1.5], [-1.3, -0.8], [1.3, -0.8]])
    labels = np.arange(n) % 3
    return centres[labels] + 0.8 * rng.normal(size=(n, 2)), labels


def _targets(n=40, seed=2):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, 1))
    return X, np.sinc(X[:, 0]) + 0.1 * rng.standard_normal(n)


def _one_evaluation(objective, x0, bounds):
    """A callable optimizer (scikit-learn's protocol) that stays at its start: an optimizer
    is set, so the inducing inputs count as optimised, for the price of one evaluation."""
    return x0, objective(x0)[0]


def _fit(est, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return est.fit(X, y)


# ------------------------------------------------------------------ resolution
def test_default_is_auto():
    for cls in (GPClassifier, GPRegressor, StudentTGPRegressor):
        assert cls().inducing_power == "auto"


@pytest.mark.parametrize(
    ("options", "alpha"),
    [
        ({}, 0.5),  # optimised inducing inputs, in memory, method "auto"
        ({"method": "ep"}, 0.5),
        ({"method": "damped"}, 0.5),
        ({"optimize_inducing": False}, 1.0),  # fixed Z: FITC-EP
        ({"optimizer": None}, 1.0),  # no search: Z fixed as well
        ({"method": "power"}, 1.0),  # no power-α version of fractional EP
        ({"method": "rep"}, 1.0),  # nor of relaxed EP
    ],
)
def test_classifier_auto_resolves(options, alpha):
    X, y = _labels(40)
    options = {"optimizer": _one_evaluation, **options}
    est = _fit(GPClassifier(KERNEL, inducing_points=6, random_state=0, **options), X, y)
    assert est.inducing_power_ == alpha
    assert isinstance(est.inducing_power_, float)


def test_auto_is_the_explicit_power_it_resolves_to():
    X, y = _labels()
    for options, alpha in (({}, 0.5), ({"optimize_inducing": False}, 1.0)):
        auto = _fit(GPClassifier(KERNEL, inducing_points=6, random_state=0, **options), X, y)
        given = GPClassifier(KERNEL, inducing_points=6, inducing_power=alpha, random_state=0)
        given = _fit(given.set_params(**options), X, y)
        assert given.inducing_power_ == alpha
        np.testing.assert_array_equal(auto.site_precision_, given.site_precision_)
        np.testing.assert_array_equal(auto.kernel_.theta, given.kernel_.theta)
        np.testing.assert_array_equal(auto.inducing_points_, given.inducing_points_)


def test_a_number_keeps_its_meaning():
    X, y = _labels()
    for alpha in (1.0, 0.3):
        est = _fit(GPClassifier(KERNEL, inducing_points=6, inducing_power=alpha), X, y)
        assert est.inducing_power_ == alpha
    # α = 1 with optimised inducing inputs stays FITC-EP: the fit of "auto" under a
    # configured power of 1
    one = _fit(GPClassifier(KERNEL, inducing_points=6, inducing_power=1.0, random_state=0), X, y)
    with robustep.config(auto_inducing_power=1.0):
        auto = _fit(GPClassifier(KERNEL, inducing_points=6, random_state=0), X, y)
    assert auto.inducing_power_ == 1.0
    np.testing.assert_array_equal(one.site_precision_, auto.site_precision_)
    assert one.log_marginal_likelihood_value_ == auto.log_marginal_likelihood_value_


def test_configured_auto_power():
    X, y = _labels()
    with robustep.config(auto_inducing_power=0.2):
        est = _fit(GPClassifier(KERNEL, inducing_points=6, random_state=0), X, y)
    assert est.inducing_power_ == 0.2
    for bad in (0.0, 1.5, True, float("nan"), "0.5"):
        with pytest.raises(ValueError, match="auto_inducing_power"):
            with robustep.config(auto_inducing_power=bad):
                pass


def test_dense_model_has_no_inducing_power():
    X, y = _labels(30)
    assert _fit(GPClassifier(KERNEL, optimizer=None), X, y).inducing_power_ is None
    Xr, yr = _targets(30)
    reg = _fit(StudentTGPRegressor(KERNEL, optimizer=None), Xr, yr)
    assert reg.inducing_power_ is None
    # a number other than 1 still asks for the sparse model
    with pytest.raises(ValueError, match="inducing_power applies to the sparse model"):
        GPClassifier(KERNEL, inducing_power=0.5).fit(X, y)
    with pytest.raises(ValueError, match="inducing_power applies to the sparse model"):
        GPRegressor(KERNEL, inducing_power=0.5).fit(Xr, yr)
    with pytest.raises(ValueError, match="inducing_power"):
        GPClassifier(KERNEL, inducing_power="half").fit(X, y)


def test_multiclass_inducing_power():
    X, y = _three_classes()
    kw = dict(inducing_points=4, random_state=0, optimizer=None)
    # the multinomial model is FITC-EP only; one-vs-rest's binary fits resolve "auto"
    sparse = _fit(GPClassifier(KERNEL, **kw), X, y)
    assert sparse.multi_class_ == "multinomial" and sparse.inducing_power_ == 1.0
    dense = _fit(GPClassifier(KERNEL, optimizer=None), X, y)
    assert dense.inducing_power_ is None
    ovr = GPClassifier(KERNEL, inducing_points=4, multi_class="one_vs_rest", random_state=0)
    ovr = _fit(ovr, X, y)
    assert ovr.inducing_power_ == 0.5
    assert [e.inducing_power_ for e in ovr.estimators_] == [0.5, 0.5, 0.5]
    # a number below 1 is still binary only with the multinomial model
    with pytest.raises(ValueError, match="binary only"):
        GPClassifier(KERNEL, inducing_power=0.5, **kw).fit(X, y)


def test_dask_input_runs_fitc_ep():
    da = pytest.importorskip("dask.array")
    X, y = _labels(40)
    Xd, yd = da.from_array(X, chunks=(20, 2)), da.from_array(y, chunks=20)
    est = _fit(GPClassifier(KERNEL, inducing_points=5, random_state=0), Xd, yd)
    assert est.inducing_power_ == 1.0
    Xr, yr = _targets()
    reg = StudentTGPRegressor(KERNEL, inducing_points=5, random_state=0)
    reg = _fit(reg, da.from_array(Xr, chunks=(20, 1)), da.from_array(yr, chunks=20))
    assert reg.inducing_power_ == 1.0
    with pytest.raises(ValueError, match="Dask"):
        GPClassifier(KERNEL, inducing_points=5, inducing_power=0.5).fit(Xd, yd)


@pytest.mark.parametrize("cls", [GPRegressor, StudentTGPRegressor])
def test_regressor_auto_resolves(cls):
    X, y = _targets()
    for options, alpha in (
        ({}, 0.5),
        ({"method": "ep"}, 0.5),
        ({"method": "fractional"}, 1.0),
        ({"optimize_inducing": False}, 1.0),
        ({"optimizer": None}, 1.0),
        ({"inducing_power": 0.3}, 0.3),
    ):
        options = {"optimizer": _one_evaluation, **options}
        est = _fit(cls(KERNEL, inducing_points=6, random_state=0, **options), X, y)
        assert est.inducing_power_ == alpha, options
    auto = _fit(cls(KERNEL, inducing_points=6, random_state=0), X, y)
    given = _fit(cls(KERNEL, inducing_points=6, inducing_power=0.5, random_state=0), X, y)
    np.testing.assert_array_equal(auto.site_precision_, given.site_precision_)
    np.testing.assert_array_equal(auto.kernel_.theta, given.kernel_.theta)


# ------------------------------------------------------------ stochastic learner
@pytest.fixture
def powers(monkeypatch):
    """The ``power`` of every stochastic power-EP run, in call order."""
    from robustep.ep import stochastic

    seen = []
    run = stochastic.fit_stochastic_ep

    def recorded(*args, **kwargs):
        seen.append(kwargs["power"])
        return run(*args, **kwargs)

    monkeypatch.setattr(stochastic, "fit_stochastic_ep", recorded)
    return seen


def _quick(**kw):
    return StochasticLearner(batch_size=30, max_epochs=2, **kw)


def test_stochastic_learner_runs_the_resolved_power(powers):
    X, y = _labels()
    est = _fit(GPClassifier(KERNEL, inducing_points=6, learner=_quick(), random_state=0), X, y)
    assert set(powers) == {0.5} and est.inducing_power_ == 0.5 and est.learner_ == "stochastic"
    fixed = GPClassifier(KERNEL, inducing_points=6, optimize_inducing=False, learner=_quick())
    _fit(fixed, X, y)
    assert powers[-1] == 1.0 and fixed.inducing_power_ == 1.0
    # the learner's own power overrides the estimator's for learning
    _fit(GPClassifier(KERNEL, inducing_points=6, learner=_quick(power=0.2)), X, y)
    assert powers[-1] == 0.2
    Xr, yr = _targets()
    _fit(GPRegressor(KERNEL, inducing_points=6, learner=_quick(), random_state=0), Xr, yr)
    assert powers[-1] == 0.5


def test_partial_fit_runs_the_resolved_power(powers):
    X, y = _labels(60)
    est = GPClassifier(KERNEL, inducing_points=6, random_state=0)
    est.partial_fit(X[:30], y[:30], classes=[0, 1]).partial_fit(X[30:], y[30:])
    assert powers == [0.5, 0.5] and est.inducing_power_ == 0.5
    fixed = GPClassifier(KERNEL, inducing_points=6, optimize_inducing=False, random_state=0)
    assert fixed.partial_fit(X, y, classes=[0, 1]).inducing_power_ == 1.0
    assert powers[-1] == 1.0
    learner = StochasticLearner(power=0.2)
    own = GPClassifier(KERNEL, inducing_points=6, learner=learner, random_state=0)
    assert own.partial_fit(X, y, classes=[0, 1]).inducing_power_ == 0.2
    assert powers[-1] == 0.2
    Xr, yr = _targets()
    reg = GPRegressor(KERNEL, inducing_points=6, random_state=0)
    reg.partial_fit(Xr[:20], yr[:20]).partial_fit(Xr[20:], yr[20:])
    assert powers[-2:] == [0.5, 0.5] and reg.inducing_power_ == 0.5
    reg = GPRegressor(KERNEL, inducing_points=6, optimizer=None, random_state=0)
    assert reg.partial_fit(Xr, yr).inducing_power_ == 1.0 and powers[-1] == 1.0


# -------------------------------------------------------------- over-fitting guard
def test_auto_guards_against_fitc_over_fitting():
    """With free inducing inputs FITC-EP's evidence drives the amplitude to thousands
    where dense EP finds a few; the default (α = 0.5) stays near dense EP."""
    X, y = _labels(100)
    kernel = ConstantKernel(1.0) * RBF(math.sqrt(2.0))
    amplitude = {}
    for name, options in (
        ("dense", {}),
        ("fitc", {"inducing_points": 8, "inducing_power": 1.0}),
        ("auto", {"inducing_points": 8}),
    ):
        est = _fit(GPClassifier(kernel, random_state=0, **options), X, y)
        amplitude[name] = est.kernel_.k1.constant_value
    assert amplitude["fitc"] > 100 * amplitude["dense"]
    assert amplitude["dense"] / 5 < amplitude["auto"] < 5 * amplitude["dense"]
