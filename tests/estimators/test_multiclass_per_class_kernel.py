"""GPClassifier(multi_class_kernel="per_class"): one copy of the kernel's hyperparameters per
class in the multinomial model (docs/derivations/multiclass.md, "Per-class kernels").

* the evidence gradient for the (c p,) theta against central finite differences, with and
  without label noise;
* "shared" is nested EP with one kernel exactly as before (bit for bit);
* per-class fits optimise, converge and predict; bad combinations raise clear errors.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, CompoundKernel, ConstantKernel

from robustep._config import blas_thread_limit
from robustep.ep.multiclass import nested_ep
from robustep.estimators import GPClassifier


def _data(n=36, seed=0):
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 2.0], [-1.8, -1.0], [1.8, -1.0]])
    y = np.arange(n) % 3
    spread = np.array([0.9, 0.9, 0.4])[y, None]  # classes that differ
    return centres[y] + spread * rng.normal(size=(n, 2)), y


@pytest.mark.parametrize("label_noise", [0.0, 0.15])
def test_per_class_gradient_against_finite_differences(label_noise):
    X, y = _data()
    kernel = ConstantKernel(1.5) * RBF(1.0)
    clf = GPClassifier(kernel, optimizer=None, multi_class_kernel="per_class", tol=1e-10,
                       label_noise=label_noise, method="damped", damping=0.3)  # fmt: skip
    clf.fit(X, y)
    assert isinstance(clf.kernel_, CompoundKernel) and len(clf.kernel_.kernels) == 3
    theta = clf.kernel_.theta + np.array([0.2, -0.1, -0.3, 0.25, 0.1, 0.0])  # distinct classes
    value, grad = clf.log_marginal_likelihood(theta, eval_gradient=True)
    assert grad.shape == (6,)
    h = 1e-5
    fd = [
        (clf.log_marginal_likelihood(theta + h * e) - clf.log_marginal_likelihood(theta - h * e))
        / (2 * h)
        for e in np.eye(6)
    ]
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-6)


def test_shared_is_todays_nested_ep_bit_for_bit():
    X, y = _data()
    kernel = ConstantKernel(1.5) * RBF(1.0)
    a = GPClassifier(kernel, optimizer=None, method="damped", damping=0.3).fit(X, y)
    b = GPClassifier(kernel, optimizer=None, method="damped", damping=0.3,
                     multi_class_kernel="shared").fit(X, y)  # fmt: skip
    # references under the fit's BLAS thread limit: OpenBLAS's summation order depends on it
    with blas_thread_limit(len(y)):
        ref = nested_ep(kernel(X), y, 3, damping=0.3, max_iter=1000, tol=1e-4, warn=False)
    for clf in (a, b):
        np.testing.assert_array_equal(clf.site_precision_, ref.site_precision)
        assert clf.log_marginal_likelihood_value_ == ref.log_Z
    theta = kernel.theta + 0.1
    va, ga = a.log_marginal_likelihood(theta, eval_gradient=True)
    res = nested_ep(kernel.clone_with_theta(theta)(X), y, 3, damping=0.3, max_iter=1000,
                    tol=1e-4, warn=False)  # fmt: skip
    assert va == res.log_Z
    dK = kernel.clone_with_theta(theta)(X, eval_gradient=True)[1]
    np.testing.assert_array_equal(ga, res.log_Z_gradient(dK))


def test_per_class_fit_optimises_and_predicts():
    X, y = _data(45, seed=1)
    kernel = ConstantKernel(1.0) * RBF(1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        shared = GPClassifier(kernel).fit(X, y)
        per = GPClassifier(kernel, multi_class_kernel="per_class").fit(X, y)
    assert per.converged_ and per.kernel_.theta.shape == (6,)
    # the shared optimum is a point of the per-class space: per-class evidence is not lower
    tied = np.tile(shared.kernel_.theta, 3)
    assert per.log_marginal_likelihood_value_ >= per.log_marginal_likelihood(tied) - 1e-3
    assert abs(per.log_marginal_likelihood(tied) - shared.log_marginal_likelihood_value_) < 1e-3
    P = per.predict_proba(X)
    np.testing.assert_allclose(P.sum(1), 1.0, atol=1e-12)
    assert np.mean(per.predict(X) == y) > 0.8
    mean, std = per.predict_latent(X[:5], return_std=True)
    assert mean.shape == std.shape == (5, 3)


def test_per_class_bad_input():
    X, y = _data()
    with pytest.raises(ValueError, match="multi_class_kernel"):
        GPClassifier(multi_class_kernel="each", optimizer=None).fit(X, y)
    with pytest.raises(ValueError, match="dense multinomial model"):
        GPClassifier(multi_class_kernel="per_class", inducing_points=5, optimizer=None,
                     multi_class="multinomial").fit(X, y)  # fmt: skip
