"""The diagonal-plus-low-rank prior K = diag(d) + U U^T (robustep.posterior.low_rank).

Every quantity equals the dense posterior of the same K: the posterior for sites of both
signs, the refusal of indefinite configurations, EP's fixed point and log Z (probit and
Student-t, whose sites go negative), predictions and the evidence gradient, which is also
checked against finite differences of log Z_EP in d and U.
"""

import numpy as np
import pytest

from robustep.ep import expectation_propagation, log_Z_gradient
from robustep.likelihoods import NoisyStep, Probit, StudentT
from robustep.linalg import InvalidSiteConfiguration
from robustep.posterior import (
    DensePrior,
    DiagonalPlusLowRankPrior,
    make_prior,
)


def _prior(n=30, r=4, seed=0):
    rng = np.random.default_rng(seed)
    d = 0.05 + 0.2 * rng.random(n)
    U = rng.normal(size=(n, r)) / np.sqrt(r)
    return DiagonalPlusLowRankPrior(d, U), rng


def _sites(rng, n, negative=0.0):
    tau = rng.random(n) + 0.1
    neg = rng.random(n) < 0.3
    tau[neg] = -negative * rng.random(neg.sum())
    return tau, rng.normal(size=n)


def _targets(n, rng, kind):
    if kind == "probit":
        return np.where(rng.normal(size=n) > 0, 1.0, -1.0), Probit()
    y = np.sin(np.arange(n) / 3.0) + 0.1 * rng.normal(size=n)
    y[::6] += 5.0  # outliers: negative site precisions
    return y, StudentT(df=3.0, scale=0.2)


def test_posterior_equals_the_dense_one_for_sites_of_both_signs():
    prior, rng = _prior()
    K = prior.dense_covariance()
    tau, nu = _sites(rng, prior.n, negative=0.5)
    low = prior.posterior(tau, nu)
    dense = DensePrior(K).posterior(tau, nu)
    assert low.n_negative == dense.n_negative > 0
    for name in ("mean", "var", "alpha"):
        np.testing.assert_allclose(getattr(low, name), getattr(dense, name), atol=1e-10)
    np.testing.assert_allclose(low.log_det, dense.log_det, atol=1e-10)
    np.testing.assert_allclose(low.prior_term(), dense.prior_term(), atol=1e-10)
    np.testing.assert_allclose(low.R_matrix(), dense.R_matrix(), atol=1e-10)
    np.testing.assert_allclose(low.covariance(), dense.covariance(), atol=1e-10)
    shifted = low.with_site_shift(2.0 * nu)
    np.testing.assert_allclose(shifted.mean, dense.with_site_shift(2.0 * nu).mean, atol=1e-10)
    K_cross = rng.normal(size=(5, prior.n)) * 0.1
    k_diag = np.full(5, 3.0)
    for a, b in zip(low.predict(K_cross, k_diag), dense.predict(K_cross, k_diag), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-10)
    G = rng.normal(size=(prior.n, prior.n, 3))
    G = G + G.transpose(1, 0, 2)
    np.testing.assert_allclose(
        low.kernel_gradient_contraction(G), dense.kernel_gradient_contraction(G), atol=1e-10
    )


def test_refuses_exactly_the_indefinite_configurations():
    prior, rng = _prior(n=20, r=3, seed=1)
    K_inv = np.linalg.inv(prior.dense_covariance())
    outcomes = set()
    for scale in np.linspace(0.5, 40.0, 40):
        tau, nu = _sites(rng, prior.n, negative=scale)
        proper = np.linalg.eigvalsh(K_inv + np.diag(tau)).min() > 0
        try:
            prior.posterior(tau, nu)
            refused = False
        except InvalidSiteConfiguration:
            refused = True
        assert refused == (not proper), scale
        outcomes.add(refused)
    assert outcomes == {True, False}  # both cases were met


@pytest.mark.parametrize("kind", ["probit", "student_t"])
def test_ep_fixed_point_and_evidence_equal_dense_ep(kind):
    prior, rng = _prior(n=40, r=5, seed=2)
    y, lik = _targets(prior.n, rng, kind)
    K = prior.dense_covariance()
    states = []
    low = expectation_propagation(prior, y, lik, tol=1e-10, callback=lambda s: states.append(s))
    dense = expectation_propagation(DensePrior(K), y, lik, tol=1e-10)
    assert low.converged and dense.converged
    if kind == "student_t":
        assert np.any(low.site_precision < 0)
    np.testing.assert_allclose(low.site_precision, dense.site_precision, atol=1e-8)
    np.testing.assert_allclose(low.mean, dense.mean, atol=1e-10)
    np.testing.assert_allclose(low.var, dense.var, atol=1e-10)
    np.testing.assert_allclose(low.log_Z, dense.log_Z, rtol=1e-10)
    np.testing.assert_allclose(states[-1]["alpha"], dense.posterior.alpha, atol=1e-8)
    K_cross = 0.1 * rng.normal(size=(4, prior.n))
    for a, b in zip(low.predict(K_cross, np.ones(4)), dense.predict(K_cross, np.ones(4)),
                    strict=True):  # fmt: skip
        np.testing.assert_allclose(a, b, atol=1e-10)
    G = np.stack([K, np.diag(prior.d)], axis=-1)
    np.testing.assert_allclose(
        log_Z_gradient(low, G, lik, y)[0], log_Z_gradient(dense, G, lik, y)[0], atol=1e-8
    )


def _log_Z(d, U, y, lik):
    prior = DiagonalPlusLowRankPrior(d, U)
    return expectation_propagation(prior, y, lik, tol=1e-12, max_iter=500).log_Z


@pytest.mark.parametrize("kind", ["probit", "student_t"])
def test_structure_gradient_matches_finite_differences(kind):
    prior, rng = _prior(n=15, r=2, seed=3)
    y, lik = _targets(prior.n, rng, kind)
    res = expectation_propagation(prior, y, lik, tol=1e-12, max_iter=500)
    grad_d, grad_U = res.posterior.structure_gradient()
    eps = 1e-5
    for i in (0, 4, 11):
        e = np.zeros(prior.n)
        e[i] = eps
        fd = (_log_Z(prior.d + e, prior.U, y, lik) - _log_Z(prior.d - e, prior.U, y, lik)) / (
            2 * eps
        )
        np.testing.assert_allclose(grad_d[i], fd, rtol=1e-5, atol=1e-7)
    for a, b in ((0, 0), (7, 1), (14, 0)):
        E = np.zeros_like(prior.U)
        E[a, b] = eps
        fd = (_log_Z(prior.d, prior.U + E, y, lik) - _log_Z(prior.d, prior.U - E, y, lik)) / (
            2 * eps
        )
        np.testing.assert_allclose(grad_U[a, b], fd, rtol=1e-5, atol=1e-7)
    # the same numbers as the dense contraction with dK/dd_i = e_i e_i^T
    G = np.zeros((prior.n, prior.n, 2))
    G[0, 0, 0] = 1.0
    G[:, 7, 1] = G[:, 7, 1] + prior.U[:, 1]
    G[7, :, 1] = G[7, :, 1] + prior.U[:, 1]  # dK/dU_71 = e_7 u_1^T + u_1 e_7^T
    np.testing.assert_allclose(
        res.posterior.kernel_gradient_contraction(G), [grad_d[0], grad_U[7, 1]], atol=1e-10
    )


def test_registered_in_the_factory_and_validates_its_inputs():
    prior, _ = _prior(n=10, r=2)
    made = make_prior(None, None, "diagonal_plus_low_rank", diagonal=prior.d, factor=prior.U)
    assert isinstance(made, DiagonalPlusLowRankPrior)
    np.testing.assert_array_equal(made.dense_covariance(), prior.dense_covariance())
    with pytest.raises(ValueError, match="zero or positive.*1 negative"):
        DiagonalPlusLowRankPrior(np.r_[prior.d[:-1], -1e-12], prior.U)
    with pytest.raises(ValueError, match="shape"):
        DiagonalPlusLowRankPrior(prior.d, prior.U[:-1])


def test_zero_diagonal_is_the_exact_linear_model():
    """d = 0 with n <= r: K = U U^T is positive definite, and the posterior, its log
    determinant and EP's fixed point equal the dense prior's of the same K."""
    rng = np.random.default_rng(3)
    n, r = 6, 9
    U = rng.normal(size=(n, r)) / np.sqrt(r)
    low = DiagonalPlusLowRankPrior(np.zeros(n), U)
    dense = DensePrior(U @ U.T)
    tau, nu = _sites(rng, n, negative=0.2)
    a, b = low.posterior(tau, nu), dense.posterior(tau, nu)
    np.testing.assert_allclose(a.mean, b.mean, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(a.var, b.var, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(a.log_det, b.log_det, rtol=1e-9)
    y = np.where(rng.normal(size=n) > 0, 1.0, -1.0)
    ra = expectation_propagation(low, y, Probit(), tol=1e-10, max_iter=500)
    rb = expectation_propagation(dense, y, Probit(), tol=1e-10, max_iter=500)
    assert ra.converged and rb.converged
    np.testing.assert_allclose(ra.site_precision, rb.site_precision, rtol=1e-7)
    np.testing.assert_allclose(ra.log_Z, rb.log_Z, rtol=1e-9)


def test_zero_diagonal_gives_weight_space_ep():
    """d = 0 with n > r (K of rank r): EP's fixed point is Gaussian EP of the linear model
    f = Z w, w ~ N(0, I), as robustep.tep.ep.linear_tep computes it independently in weight
    space (df = inf, rank-one sites): the same posterior natural parameters.  An indefinite
    weight-space precision is refused."""
    from robustep.tep.ep import linear_tep

    rng = np.random.default_rng(0)
    n = 40
    X = rng.standard_normal((n, 2))
    Z = np.column_stack([X, np.ones(n)])
    y = np.where(X[:, 0] + 0.5 * X[:, 1] + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
    prior = DiagonalPlusLowRankPrior(np.zeros(n), Z)
    res = expectation_propagation(prior, y, NoisyStep(0.2), tol=1e-10, max_iter=2000, damping=0.5)
    state, info = linear_tep(Z, y, df=np.inf, eps=0.2, max_iter=2000, tol=1e-10, damping=0.5)
    assert res.converged and info.converged
    np.testing.assert_allclose(state.post_h, Z.T @ res.site_shift, atol=1e-8)
    np.testing.assert_allclose(
        state.post_lambda, np.eye(3) + Z.T @ (res.site_precision[:, None] * Z), atol=1e-7
    )
    tau = np.zeros(n)
    tau[0] = -1.01 / float(Z[0] @ Z[0])  # 1 + tau_0 |z_0|^2 < 0: A has a negative direction
    with pytest.raises(InvalidSiteConfiguration):
        prior.posterior(tau, np.zeros(n))
