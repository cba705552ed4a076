"""Multi-class (multinomial probit, nested EP) with a FITC prior per class.

References (docs/derivations/multiclass.md §8):
* the posterior pieces (eqs. M14–M18) against dense linear algebra on the explicit
  (c n, c n) FITC covariance, for arbitrary valid sites;
* Z = X (m = n, no jitter): the sparse model is the dense one, so sparse nested EP equals
  dense nested EP (posterior, log Z_EP, latent predictive, class probabilities);
* m < n: sparse nested EP equals dense nested EP on the explicit FITC covariances;
* the evidence gradient (eqs. M21, M22) w.r.t. the kernel's log hyperparameters and the inducing
  inputs against central finite differences;
* GPClassifier(inducing_points=...) with > 2 classes: exact at Z = X, no n x n allocation
  at n = 2000 (tracemalloc), bad inducing inputs, one-vs-rest.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Matern

from robustep.ep.multiclass import nested_ep
from robustep.ep.multiclass_sparse import (
    MulticlassFITCPrior,
    multiclass_fitc_posterior,
    sparse_nested_ep,
)
from robustep.estimators import GPClassifier
from robustep.likelihoods.multinomial_probit import MultinomialProbit, site_natural_parameters
from robustep.posterior.sparse import FITCPrior

KERNEL = ConstantKernel(2.0) * RBF(1.0)


def _data(n, seed=0, c=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    W = rng.normal(size=(2, c))
    y = np.argmax(X @ W + 0.5 * rng.normal(size=(n, c)), axis=1)
    return X, y, rng


def _full(blocks_per_point, n, c):
    """(c n, c n) class-major matrix from per-point (n, c, c) blocks."""
    out = np.zeros((c * n, c * n))
    for i in range(n):
        idx = np.arange(c) * n + i
        out[np.ix_(idx, idx)] = blocks_per_point[i]
    return out


@pytest.mark.parametrize("per_class", [False, True])
def test_posterior_pieces_match_dense_algebra(per_class):
    """Eqs. M14–M18 and the gradient's R_ii (M21) against the explicit FITC covariance."""
    n, c, m = 15, 3, 5
    X, y, rng = _data(n, seed=1)
    Z = rng.normal(size=(m, 2))
    kernels = [ConstantKernel(1.0 + j) * RBF(0.7 + 0.3 * j) for j in range(c)]
    prior = MulticlassFITCPrior.from_kernel(kernels if per_class else KERNEL, X, Z, c, jitter=1e-8)
    alpha = np.abs(rng.normal(size=(n, c)))
    beta = rng.normal(size=(n, c))
    alpha[np.arange(n), y] = beta[np.arange(n), y] = 0.0
    Pi, nu, _, _ = site_natural_parameters(y, alpha, beta)
    post = multiclass_fitc_posterior(prior, Pi, nu)
    K = np.zeros((c * n, c * n))
    for j, Kj in enumerate(prior.dense_covariances()):
        K[j * n : (j + 1) * n, j * n : (j + 1) * n] = Kj
    P = _full(Pi, n, c)
    Sig = np.linalg.inv(np.linalg.inv(K) + P)
    mu = Sig @ nu.T.reshape(-1)
    np.testing.assert_allclose(post.mean, mu.reshape(c, n).T, atol=1e-9)
    idx = np.arange(c)[None, :] * n + np.arange(n)[:, None]  # (n, c)
    np.testing.assert_allclose(post.cov, Sig[idx[:, :, None], idx[:, None, :]], atol=1e-9)
    _, logdet = np.linalg.slogdet(np.eye(c * n) + K @ P)
    assert post.log_det == pytest.approx(logdet, abs=1e-9)
    # R = (K + Π̃^-1)^-1 = Π̃ (I + K Π̃)^-1; its point blocks are B_i - B_i Q_i B_i
    R = P @ np.linalg.inv(np.eye(c * n) + K @ P)
    R_blocks = post.B - post.B @ post.Q @ post.B
    np.testing.assert_allclose(R_blocks, R[idx[:, :, None], idx[:, None, :]], atol=1e-9)
    np.testing.assert_allclose(post.alpha, np.linalg.solve(K, mu).reshape(c, n).T, atol=1e-6)


def test_inducing_equal_training_inputs_gives_dense_nested_ep():
    """m = n, Z = X, no jitter: the FITC prior is the dense prior, nested EP agrees to 1e-6."""
    n, c = 40, 3
    X, y, rng = _data(n)
    K = KERNEL(X)
    prior = MulticlassFITCPrior([FITCPrior(K, K, np.diag(K), jitter=0.0)] * c)
    dense = nested_ep(K, y, c, damping=0.3, tol=1e-10, max_iter=2000)
    sparse = sparse_nested_ep(prior, y, c, damping=0.3, tol=1e-10, max_iter=2000)
    assert dense.converged and sparse.converged and dense.n_iter == sparse.n_iter
    np.testing.assert_allclose(sparse.mean, dense.mean, atol=1e-6)
    np.testing.assert_allclose(sparse.cov, dense.cov, atol=1e-6)
    assert sparse.log_Z == pytest.approx(dense.log_Z, abs=1e-6)
    assert sparse.posterior.log_det == pytest.approx(dense.posterior.log_det, abs=1e-6)
    Xs = rng.normal(size=(9, 2))
    m1, S1 = dense.predict(KERNEL(Xs, X), KERNEL.diag(Xs))
    m2, S2 = sparse.predict(KERNEL(Xs, X), KERNEL.diag(Xs))
    np.testing.assert_allclose(m2, m1, atol=1e-6)
    np.testing.assert_allclose(S2, S1, atol=1e-6)
    lik = MultinomialProbit(c)
    np.testing.assert_allclose(
        lik.predictive_probabilities(m2, S2), lik.predictive_probabilities(m1, S1), atol=1e-6
    )


@pytest.mark.parametrize("per_class", [False, True])
def test_fewer_inducing_points_equal_dense_nested_ep_on_fitc_covariance(per_class):
    n, c, m = 30, 3, 8
    X, y, rng = _data(n, seed=2)
    Z = rng.normal(size=(m, 2))
    kernel = (
        [ConstantKernel(1.0 + j) * RBF(0.8 + 0.4 * j) for j in range(c)] if per_class else KERNEL
    )
    prior = MulticlassFITCPrior.from_kernel(kernel, X, Z, c, jitter=1e-8)
    assert prior.shared is not per_class
    dense = nested_ep(prior.dense_covariances(), y, c, damping=0.3, tol=1e-10, max_iter=2000)
    sparse = sparse_nested_ep(prior, y, c, damping=0.3, tol=1e-10, max_iter=2000)
    np.testing.assert_allclose(sparse.mean, dense.mean, atol=1e-8)
    np.testing.assert_allclose(sparse.cov, dense.cov, atol=1e-8)
    assert sparse.log_Z == pytest.approx(dense.log_Z, abs=1e-8)


def _fd_fit(X, y, Z, c):
    def fit(kernel, Z=Z):
        prior = MulticlassFITCPrior.from_kernel(kernel, X, Z, c, jitter=1e-8)
        return sparse_nested_ep(prior, y, c, damping=0.3, tol=1e-11, max_iter=3000)

    return fit


def test_gradient_against_finite_differences_theta_and_Z():
    n, c, m = 20, 3, 5
    X, y, rng = _data(n, seed=3)
    Z = rng.normal(size=(m, 2))
    kernel = ConstantKernel(2.0) * Matern(length_scale=[1.0, 1.5], nu=2.5)
    fit = _fd_fit(X, y, Z, c)
    res = fit(kernel)
    assert res.converged
    g_theta, g_Z = res.log_Z_gradient(kernel, X, Z, wrt_inducing=True)
    h, th = 1e-5, kernel.theta
    fd = [
        (
            fit(kernel.clone_with_theta(th + h * e)).log_Z
            - fit(kernel.clone_with_theta(th - h * e)).log_Z
        )
        / (2 * h)
        for e in np.eye(th.size)
    ]
    np.testing.assert_allclose(g_theta, fd, rtol=1e-5, atol=1e-6)
    for a, b in [(0, 0), (2, 1), (4, 0)]:
        E = np.zeros_like(Z)
        E[a, b] = h
        fd_z = (fit(kernel, Z + E).log_Z - fit(kernel, Z - E).log_Z) / (2 * h)
        assert g_Z[a, b] == pytest.approx(fd_z, rel=1e-5, abs=1e-6)


def test_gradient_per_class_kernels():
    n, c, m = 18, 3, 5
    X, y, rng = _data(n, seed=4)
    Z = rng.normal(size=(m, 2))
    kernels = [ConstantKernel(1.0 + j) * RBF(0.8 + 0.3 * j) for j in range(c)]
    fit = _fd_fit(X, y, Z, c)
    g, _ = fit(kernels).log_Z_gradient(kernels, X, Z)
    assert g.shape == (2 * c,)
    h = 1e-5
    fd = []
    for j in range(c):
        th = kernels[j].theta
        for e in np.eye(th.size):
            up, down = list(kernels), list(kernels)
            up[j] = kernels[j].clone_with_theta(th + h * e)
            down[j] = kernels[j].clone_with_theta(th - h * e)
            fd.append((fit(up).log_Z - fit(down).log_Z) / (2 * h))
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-6)


def test_prior_and_engine_input_errors():
    X, y, _ = _data(10)
    K = KERNEL(X)
    one = FITCPrior(K, K, np.diag(K), jitter=0.0)
    with pytest.raises(ValueError, match="one FITCPrior per class"):
        MulticlassFITCPrior([one])
    with pytest.raises(TypeError, match="FITCPrior"):
        MulticlassFITCPrior([one, K])
    with pytest.raises(ValueError, match="list of 3 kernels"):
        MulticlassFITCPrior.from_kernel([KERNEL, KERNEL], X, X[:4], 3)
    prior = MulticlassFITCPrior([one] * 3)
    with pytest.raises(TypeError, match="MulticlassFITCPrior"):
        sparse_nested_ep(K, y, 3)
    with pytest.raises(ValueError, match="n_classes"):
        sparse_nested_ep(prior, y, 4)
    with pytest.raises(ValueError, match="entries"):
        sparse_nested_ep(prior, y[:5])
    with pytest.raises(ValueError, match="damping"):
        sparse_nested_ep(prior, y, damping=1.0)


# ------------------------------------------------------------------ GPClassifier
def test_classifier_inducing_equal_training_inputs_matches_dense(monkeypatch):
    import robustep.estimators._sparse as sp

    monkeypatch.setattr(sp, "RELATIVE_JITTER", 0.0)  # Z = X is then exactly the dense model
    X, y, rng = _data(45, seed=5)
    Xt = rng.normal(size=(20, 2))
    kw = dict(kernel=KERNEL, optimizer=None, multi_class="multinomial", tol=1e-10)
    dense = GPClassifier(**kw).fit(X, y)
    sparse = GPClassifier(inducing_points=X, **kw).fit(X, y)
    assert sparse.multi_class_ == "multinomial"
    np.testing.assert_array_equal(sparse.inducing_points_, X)
    assert dense.inducing_points_ is None
    np.testing.assert_allclose(sparse.predict_proba(Xt), dense.predict_proba(Xt), atol=1e-6)
    np.testing.assert_allclose(
        sparse.predict_latent(Xt, return_std=True), dense.predict_latent(Xt, return_std=True),
        atol=1e-6,
    )  # fmt: skip
    assert sparse.log_marginal_likelihood_value_ == pytest.approx(
        dense.log_marginal_likelihood_value_, abs=1e-6
    )
    theta = KERNEL.theta + 0.2
    v1, g1 = sparse.log_marginal_likelihood(theta, eval_gradient=True)
    v2, g2 = dense.log_marginal_likelihood(theta, eval_gradient=True)
    assert v1 == pytest.approx(v2, abs=1e-5)
    np.testing.assert_allclose(g1, g2, atol=1e-4)


def test_classifier_sparse_multinomial_optimises_and_predicts_in_batches(monkeypatch):
    import robustep.estimators._sparse as sp

    X, y, rng = _data(150, seed=6)
    Xt = rng.normal(size=(31, 2))
    fixed = GPClassifier(inducing_points=12, optimize_inducing=False, random_state=0).fit(X, y)
    moved = GPClassifier(inducing_points=12, random_state=0).fit(X, y)
    assert fixed.multi_class_ == moved.multi_class_ == "multinomial"
    km = GPClassifier(inducing_points=12, random_state=0, optimizer=None).fit(X, y)
    np.testing.assert_array_equal(fixed.inducing_points_, km.inducing_points_)  # seeded k-means
    assert not np.allclose(moved.inducing_points_, fixed.inducing_points_)
    assert moved.log_marginal_likelihood_value_ >= fixed.log_marginal_likelihood_value_ - 1e-6
    assert fixed.log_marginal_likelihood_value_ >= km.log_marginal_likelihood_value_ - 1e-6
    for est in (fixed, moved):
        assert est.converged_ and est.score(X, y) > 0.7
        assert est.site_precision_.shape == (150, 3, 3)
    one = moved.predict_proba(Xt)
    monkeypatch.setattr(sp, "PREDICT_BATCH", 7)
    np.testing.assert_allclose(moved.predict_proba(Xt), one, atol=1e-12)
    assert np.allclose(one.sum(axis=1), 1.0)
    # lml at the fitted theta with the fitted Z reproduces the fitted value
    assert moved.log_marginal_likelihood(moved.kernel_.theta) == pytest.approx(
        moved.log_marginal_likelihood_value_, abs=1e-3
    )


def test_classifier_large_n_without_n_by_n_allocation():
    """n = 2000, m = 50, 3 classes: fit (with the optimiser) and predict allocate far less
    than one n x n float64 array (32 MB)."""
    X, y, rng = _data(2000, seed=7)
    Xt = rng.normal(size=(2000, 2))
    GPClassifier(inducing_points=5, random_state=0).fit(X[:40], y[:40]).predict(Xt[:5])  # imports
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        est = GPClassifier(inducing_points=50, random_state=0).fit(X, y)
        p = est.predict_proba(Xt)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert est.multi_class_ == "multinomial" and est.inducing_points_.shape == (50, 2)
    assert p.shape == (2000, 3) and np.all(np.isfinite(p))
    assert est.score(X, y) > 0.7
    assert peak < 8 * 2000**2, f"peak {peak / 1e6:.1f} MB"


@pytest.mark.parametrize(
    "inducing, match",
    [
        (0, "at least 1"),
        (61, "exceeds the number of training points"),
        (np.full((3, 2), np.nan), "NaN"),
        (np.zeros((3, 3)), "features"),
    ],
)
def test_bad_inducing_points_multiclass(inducing, match):
    X, y, _ = _data(60)
    for mode in ("multinomial", "one_vs_rest"):
        with pytest.raises(ValueError, match=match):
            GPClassifier(inducing_points=inducing, optimizer=None, multi_class=mode).fit(X, y)


def test_one_vs_rest_with_inducing_points():
    X, y, rng = _data(80, seed=8)
    est = GPClassifier(inducing_points=8, multi_class="one_vs_rest", random_state=0).fit(X, y)
    assert est.multi_class_ == "one_vs_rest"
    assert all(e.inducing_points_.shape == (8, 2) for e in est.estimators_)
    p = est.predict_proba(rng.normal(size=(10, 2)))
    assert p.shape == (10, 3) and np.allclose(p.sum(axis=1), 1.0)
    # settings the multinomial model lacks fall back to sparse one-vs-rest under "auto"
    auto = GPClassifier(inducing_points=8, method="power", optimizer=None).fit(X, y)
    assert auto.multi_class_ == "one_vs_rest"
    with pytest.raises(ValueError, match="binary-only"):
        GPClassifier(inducing_points=8, method="power", multi_class="multinomial").fit(X, y)


def test_dask_inputs_with_several_classes_need_one_vs_rest():
    da = pytest.importorskip("dask.array")
    X, y, _ = _data(60, seed=9)
    Xd = da.from_array(X, chunks=(20, 2))
    with pytest.raises(ValueError, match="multi_class='one_vs_rest'"):
        GPClassifier(inducing_points=6, optimizer=None).fit(Xd, y)
    est = GPClassifier(inducing_points=6, optimizer=None, multi_class="one_vs_rest").fit(Xd, y)
    assert est.predict_proba(X[:5]).shape == (5, 3)
