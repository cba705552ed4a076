"""The O(c n³) multi-class posterior (robustep.ep.multiclass): E_j K_j without a product.

E_j K_j = I - E_j D_j^{-1} (B_j^{-1} D^{1/2} K D^{1/2} = I - B_j^{-1}) against the explicit
product, for site weights π from zero (a cold start) to large, and the posterior's marginal
covariances against the dense inverse (K^{-1} + Π̃)^{-1}.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import linalg
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

from robustep.ep.multiclass import _E_times_K, multiclass_posterior
from robustep.likelihoods.multinomial_probit import site_natural_parameters
from robustep.linalg import cholesky_inverse, identity_plus_scaled


def _problem(n=40, amplitude=50.0, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    K = (ConstantKernel(amplitude) * RBF(1.5))(X) + 1e-8 * np.eye(n)
    # π from 0 and 1e-12 (saturated sites) to 3, as nested EP produces them
    pi = rng.choice([0.0, 1e-12, 1e-9, 1e-6, 1e-3, 0.3, 3.0], size=n)
    return K, pi


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_E_times_K_matches_the_product(seed):
    K, pi = _problem(seed=seed)
    n = K.shape[0]
    d = np.sqrt(pi)
    L = linalg.cholesky(identity_plus_scaled(K, d), lower=True)
    E = d[:, None] * cholesky_inverse(L) * d[None, :]
    reference = E @ K
    for columns in (slice(0, n), slice(5, 17)):
        H = _E_times_K(E, K, pi, columns)
        scale = np.max(np.abs(reference[:, columns]))
        np.testing.assert_allclose(H, reference[:, columns], rtol=0, atol=1e-9 * scale)


def test_posterior_marginals_against_the_dense_inverse():
    n, c = 25, 4
    rng = np.random.default_rng(3)
    X = rng.normal(size=(n, 2))
    K = (ConstantKernel(20.0) * RBF(1.0))(X) + 1e-8 * np.eye(n)
    y = rng.integers(0, c, n)
    alpha = rng.choice([0.0, 1e-10, 1e-4, 0.5], size=(n, c))
    beta = rng.normal(size=(n, c))
    alpha[np.arange(n), y] = beta[np.arange(n), y] = 0.0
    prec, shift, pi, _ = site_natural_parameters(y, alpha, beta)
    post = multiclass_posterior(np.broadcast_to(K, (c, n, n)), pi, shift)
    # dense reference, class-major f = (f^1; ...; f^c)
    P = np.zeros((c * n, c * n))
    for i in range(n):
        idx = np.arange(c) * n + i
        P[np.ix_(idx, idx)] = prec[i]
    Kbig = linalg.block_diag(*([K] * c))
    Sigma = Kbig - Kbig @ np.linalg.solve(np.eye(c * n) + P @ Kbig, P @ Kbig)
    mu = Sigma @ shift.T.reshape(-1)
    for i in range(n):
        idx = np.arange(c) * n + i
        np.testing.assert_allclose(post.cov[i], Sigma[np.ix_(idx, idx)], rtol=1e-7, atol=1e-7)
    np.testing.assert_allclose(post.mean, mu.reshape(c, n).T, rtol=1e-7, atol=1e-7)
