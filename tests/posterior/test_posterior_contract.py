"""The seam between the EP engine and a prior: a prior written from the base classes alone.

:class:`MinimalPrior` implements only what :mod:`robustep.posterior.base` declares abstract
(plus the attributes it documents), with plain numpy linear algebra; the engine, its
callback, the evidence and the results must work with it and agree with
:class:`robustep.posterior.DensePrior`.
"""

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

from robustep.ep import expectation_propagation, log_Z_gradient
from robustep.likelihoods import Probit, StudentT
from robustep.linalg import InvalidSiteConfiguration
from robustep.posterior import DensePrior, GaussianPrior, SitePosterior


class MinimalPosterior(SitePosterior):
    """N(mu, Sigma), Sigma = (K^-1 + T)^-1 by eigen-decomposition: the contract only."""

    def __init__(self, K, tau, nu, need_var):
        self.site_precision = np.asarray(tau, dtype=float)
        self.site_shift = np.asarray(nu, dtype=float)
        self.n_negative = int(np.count_nonzero(self.site_precision < 0))
        B = np.eye(K.shape[0]) + K * self.site_precision[None, :]  # I + K T
        P = np.linalg.inv(K) + np.diag(self.site_precision)
        if np.linalg.eigvalsh(0.5 * (P + P.T)).min() <= 0:
            raise InvalidSiteConfiguration("K^-1 + T is indefinite")
        Sigma = np.linalg.inv(P)
        self.mean = Sigma @ self.site_shift
        self.var = np.diag(Sigma).copy() if need_var else None
        self.alpha = self.site_shift - self.site_precision * self.mean
        self.log_det = float(np.linalg.slogdet(B)[1])

    def predict(self, K_cross, k_diag=None):
        return np.asarray(K_cross) @ self.alpha, None


class MinimalPrior(GaussianPrior):
    def __init__(self, K):
        self.K = np.asarray(K, dtype=float)

    @property
    def n(self):
        return self.K.shape[0]

    def posterior(self, site_precision, site_shift, *, need_var=True):
        return MinimalPosterior(self.K, site_precision, site_shift, need_var)


def _problem(n=25, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    K = (ConstantKernel(1.5) * RBF(1.0))(X) + 1e-6 * np.eye(n)
    y = np.where(X[:, 0] + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)
    return K, y


@pytest.mark.parametrize("likelihood", [Probit(), StudentT(df=3.0, scale=0.3)])
def test_a_prior_from_the_base_runs_the_engine_with_a_callback(likelihood):
    K, y = _problem()
    if isinstance(likelihood, StudentT):
        y = np.sin(np.arange(K.shape[0])) + np.where(np.arange(K.shape[0]) % 7 == 0, 4.0, 0.0)
    seen = []

    def callback(state):
        seen.append(state)
        return False

    res = expectation_propagation(MinimalPrior(K), y, likelihood, tol=1e-9, callback=callback)
    ref = expectation_propagation(DensePrior(K), y, likelihood, tol=1e-9)
    assert res.converged and seen
    for key in ("mean", "alpha", "site_precision", "site_shift"):
        assert seen[-1][key].shape == (K.shape[0],)
    # the base posterior has no with_site_shift: no mean sweeps, the same fixed point
    assert sum(res.history["mean_sweeps"]) == 0
    np.testing.assert_allclose(res.site_precision, ref.site_precision, atol=1e-6)
    np.testing.assert_allclose(res.mean, ref.mean, atol=1e-6)
    np.testing.assert_allclose(res.log_Z, ref.log_Z, rtol=1e-7)
    np.testing.assert_allclose(seen[-1]["alpha"], res.posterior.alpha)
    np.testing.assert_allclose(K @ seen[-1]["alpha"], seen[-1]["mean"], atol=1e-8)


def test_defaults_of_the_base_name_the_class_and_what_to_implement():
    K, y = _problem(10)
    res = expectation_propagation(MinimalPrior(K), y, Probit())
    post = res.posterior
    with pytest.raises(NotImplementedError, match="MinimalPosterior.*kernel_gradient_contraction"):
        log_Z_gradient(res, np.ones((10, 10, 1)), Probit(), y)
    with pytest.raises(NotImplementedError, match="MinimalPosterior.*covariance"):
        post.covariance()
    with pytest.raises(NotImplementedError, match="MinimalPosterior.*with_site_shift"):
        post.with_site_shift(post.site_shift)
    assert not post.supports_site_shift
    assert MinimalPrior(K).convert_result(res) is res
    with pytest.raises(ValueError, match="sequential.*MinimalPrior"):
        expectation_propagation(MinimalPrior(K), y, Probit(), schedule="sequential")


def test_the_dense_posterior_declares_what_the_engine_uses():
    K, y = _problem(12)
    post = DensePrior(K).posterior(np.full(12, 0.5), y)
    assert post.supports_site_shift
    G = np.stack([K, np.eye(12)], axis=-1)
    R = np.linalg.inv(K + np.eye(12) / 0.5)
    ref = [0.5 * post.alpha @ G[..., k] @ post.alpha - 0.5 * np.sum(R * G[..., k]) for k in (0, 1)]
    np.testing.assert_allclose(post.kernel_gradient_contraction(G), ref, rtol=1e-10)
