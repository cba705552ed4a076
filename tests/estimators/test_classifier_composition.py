"""GPClassifier composes fitted states returned by private cores that never write onto it.

The binary cores (estimators/_binary_dense.py, _binary_sparse.py) and the multi-class fit
(estimators/_multiclass.py) return a state with the fitted attributes by name; the
estimator sets them in one place and delegates its predictions to the state.  The LOO
helpers of robustep.diagnostics return attributes too (the ``set_*`` ones are deprecated).
"""

import ast
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

import robustep
from robustep import GPClassifier, diagnostics
from robustep.estimators import _binary, _binary_dense, _binary_sparse, _multiclass
from robustep.likelihoods.multinomial_probit import MultinomialProbit

KERNEL = ConstantKernel(1.0) * RBF(1.0)
CORES = ["_binary.py", "_binary_dense.py", "_binary_sparse.py", "_multiclass.py",
         "_multinomial.py", "_multiclass_sparse.py"]  # fmt: skip


def _binary_data(n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = (X[:, 0] + 0.4 * rng.normal(size=n) > 0).astype(int)
    return X, y


def _three_classes(n=45, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    return X, np.digitize(X[:, 0], [-0.5, 0.5])


def _params(**kwargs):
    return SimpleNamespace(**GPClassifier(KERNEL, **kwargs).get_params(deep=False))


@pytest.mark.parametrize("name", CORES)
def test_cores_write_no_attribute_of_another_object(name):
    """Every attribute assignment in a core module is to ``self`` (or a local state)."""
    path = Path(robustep.__file__).parent / "estimators" / name
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets = node.targets if isinstance(node, ast.Assign) else []
        for target in targets:
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                assert target.value.id in ("self", "core", "fallback"), (
                    f"{name}:{node.lineno} writes {target.value.id}.{target.attr}"
                )


@pytest.mark.parametrize("inducing", [None, 6])
def test_binary_core_returns_what_the_estimator_sets(inducing):
    X, y = _binary_data()
    kw = dict(optimizer=None, method="ep", inducing_points=inducing, random_state=0)
    clf = GPClassifier(KERNEL, **kw).fit(X, y)
    params = _params(**kw)
    y_pm = np.where(y == 1, 1.0, -1.0)
    lik = _binary.make_likelihood(params)
    if inducing is None:
        state = _binary_dense.fit_dense(params, X, y_pm, lik, KERNEL)
    else:
        state = _binary_sparse.fit_sparse(params, X, y_pm, lik, KERNEL)
    assert isinstance(state, _binary.BinaryFit)
    assert set(state.attributes) <= set(vars(clf))
    for name in ("log_marginal_likelihood_value_", "site_precision_", "loo_log_predictive_"):
        np.testing.assert_array_equal(state.attributes[name], getattr(clf, name))
    np.testing.assert_array_equal(state.predict_proba(X), clf.predict_proba(X))
    theta = clf.kernel_.theta + 0.3
    assert state.log_marginal_likelihood(theta) == clf.log_marginal_likelihood(theta)


def test_one_vs_rest_builds_its_binary_fits_with_the_given_factory():
    X, y = _three_classes()
    calls = []

    def fit_binary(X, y01):
        calls.append(np.asarray(y01).copy())
        return GPClassifier(KERNEL, optimizer=None).fit(X, y01)

    classes, state = _multiclass.fit_multiclass(
        _params(multi_class="one_vs_rest", optimizer=None), X, y, fit_binary
    )
    np.testing.assert_array_equal(classes, [0, 1, 2])
    assert isinstance(state, _multiclass.OneVsRestFit) and len(calls) == 3
    for k, y01 in enumerate(calls):
        np.testing.assert_array_equal(y01, (y == k).astype(int))
    assert state.attributes["multi_class_"] == "one_vs_rest"
    assert state.attributes["estimators_"] is state.estimators
    np.testing.assert_allclose(state.predict_proba(X).sum(axis=1), 1.0)


def test_refit_drops_the_attributes_of_the_previous_model():
    X, y = _binary_data()
    X3, y3 = _three_classes()
    clf = GPClassifier(KERNEL, optimizer=None, method="rep").fit(X, y)
    assert hasattr(clf, "relaxation_b_")
    clf.set_params(method="ep").fit(X, y)
    assert not hasattr(clf, "relaxation_b_")
    clf.set_params(multi_class="one_vs_rest").fit(X3, y3)
    assert clf.multi_class_ == "one_vs_rest" and len(clf.estimators_) == 3
    assert not hasattr(clf, "site_precision_")
    clf.fit(X, y)
    assert not hasattr(clf, "estimators_") and not hasattr(clf, "multi_class_")
    assert clf.predict_proba(X).shape == (X.shape[0], 2)


def test_loo_attribute_helpers_return_what_the_deprecated_setters_set():
    X, y = _binary_data()
    clf = GPClassifier(KERNEL, optimizer=None, method="ep").fit(X, y)
    state = clf._state
    attrs = diagnostics.classifier_loo_attributes(state.result, state.core.likelihood, state.core.y)
    assert set(attrs) == {"loo_log_predictive_", "outlier_scores_", "loo_approximate_"}
    np.testing.assert_array_equal(attrs["outlier_scores_"], -attrs["loo_log_predictive_"])
    target = SimpleNamespace(loo_mean_=1.0)  # an earlier attribute is removed
    with pytest.warns(DeprecationWarning, match="classifier_loo_attributes"):
        diagnostics.set_classifier_loo(target, state.result, state.core.likelihood, state.core.y)
    assert not hasattr(target, "loo_mean_")
    np.testing.assert_array_equal(target.loo_log_predictive_, clf.loo_log_predictive_)

    laplace = GPClassifier(KERNEL, optimizer=None, method="laplace").fit(X, y)
    assert diagnostics.classifier_loo_attributes(laplace._state.result, None, None) == {}

    X3, y3 = _three_classes()
    ovr = GPClassifier(KERNEL, optimizer=None, multi_class="one_vs_rest").fit(X3, y3)
    target = SimpleNamespace()
    with pytest.warns(DeprecationWarning, match="one_vs_rest_loo_attributes"):
        diagnostics.set_one_vs_rest_loo(target, ovr.estimators_, y3)
    np.testing.assert_array_equal(target.loo_log_predictive_, ovr.loo_log_predictive_)


def test_multinomial_loo_unavailable_warns_and_sets_nothing():
    X3, y3 = _three_classes()
    clf = GPClassifier(KERNEL, optimizer=None, multi_class="multinomial").fit(X3, y3)
    res = clf._state.core.result
    broken = SimpleNamespace(
        mean=res.mean,
        cov=np.full_like(res.cov, np.nan),
        site_precision=res.site_precision,
        site_shift=res.site_shift,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        attrs = diagnostics.multiclass_loo_attributes(
            broken, MultinomialProbit(3), y3, estimator_name="Mine"
        )
    assert attrs == {}
    assert any("Mine: leave-one-out diagnostics are unavailable" in str(w.message)
               for w in caught)  # fmt: skip


def test_array_representation_matches_dense(monkeypatch):
    """The "array" prior (``device=``) gives the dense fit's state: here on
    array-api-strict, standing in for a PyTorch device."""
    xs = pytest.importorskip("array_api_strict")
    from robustep.estimators import _device

    monkeypatch.setattr(_device, "torch_like", lambda device, dtype: xs.zeros(0, dtype=xs.float64))
    X, y = _binary_data()
    dense = GPClassifier(KERNEL, method="ep").fit(X, y)
    array = GPClassifier(KERNEL, method="ep", device="cpu").fit(X, y)
    assert array._state.core.rep.name == "array" and dense._state.core.rep.name == "dense"
    np.testing.assert_allclose(array.kernel_.theta, dense.kernel_.theta, rtol=1e-8)
    np.testing.assert_allclose(array.predict_proba(X), dense.predict_proba(X), atol=1e-12)
    theta = dense.kernel_.theta + 0.2
    value, grad = array.log_marginal_likelihood(theta, eval_gradient=True)
    ref_value, ref_grad = dense.log_marginal_likelihood(theta, eval_gradient=True)
    assert value == pytest.approx(ref_value, rel=1e-12)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-9)
