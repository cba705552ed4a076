"""Label-noise multinomial probit: p(y = k | f) = ε/(c-1) + (1 - εc/(c-1)) P_mnp(k | f).

References used here (docs/derivations/multiclass.md, "Label-noise multinomial probit"):
* the mixture's tilted normaliser and moments (N2) against a 3-D Gauss–Hermite grid over
  the cavity, with the tolerance propagated from the inner EP's own error on the
  multinomial-probit part, measured against the same grid;
* the general-site posterior (N4) against the structured O(c n^3) one on nested-EP sites
  and against dense inverses with indefinite site blocks;
* the general EP loop at ε = 0 against nested EP (same fixed point, same log Z_EP);
* the evidence gradient (N6) against central finite differences;
* ε = 0 in GPClassifier is nested EP bit for bit (the general path is never entered).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, ConstantKernel
from sklearn.metrics import log_loss

from robustep._config import blas_thread_limit
from robustep.ep import multiclass_label_noise
from robustep.ep.multiclass import nested_ep
from robustep.ep.multiclass_label_noise import general_posterior, robust_nested_ep
from robustep.estimators import GPClassifier
from robustep.likelihoods.multinomial_probit import MultinomialProbit, site_natural_parameters
from robustep.likelihoods.noisy_multinomial_probit import (
    NoisyMultinomialProbit,
    mixture_moments,
)
from robustep.linalg import InvalidSiteConfiguration


def _gh_moments(log_lik, m, S, n_nodes=36):
    """log Z, mean, cov of exp(log_lik(F)) N(f | m, S) on a tensor Gauss–Hermite grid."""
    c = m.size
    x, w = np.polynomial.hermite_e.hermegauss(n_nodes)
    w = w / np.sqrt(2 * np.pi)
    Z = np.stack(np.meshgrid(*([x] * c), indexing="ij"), -1).reshape(-1, c)
    W = np.prod(np.stack(np.meshgrid(*([w] * c), indexing="ij"), -1).reshape(-1, c), 1)
    F = m + Z @ np.linalg.cholesky(S).T
    p = W * np.exp(log_lik(F))
    z = p.sum()
    mean = p @ F / z
    cov = (p[:, None] * (F - mean)).T @ (F - mean) / z
    return np.log(z), mean, cov


CAVITIES = [
    (1, np.array([0.3, -0.5, 0.8]),
     np.array([[1.5, 0.3, 0.2], [0.3, 1.0, -0.4], [0.2, -0.4, 2.0]])),
    (0, np.array([-1.0, 0.5, 0.0]), np.array([[0.6, 0.1, 0.0], [0.1, 0.8, 0.2], [0.0, 0.2, 0.5]])),
    (1, np.array([1.2, -0.8, 0.3]), np.array([[0.8, 0.2, 0.1], [0.2, 0.7, 0.0], [0.1, 0.0, 0.9]])),
]  # fmt: skip


@pytest.mark.parametrize("y, m, S", CAVITIES)
def test_mixture_formula_is_exact_given_exact_mnp_moments(y, m, S):
    """(N2) applied to the grid's multinomial-probit moments = the grid's mixture moments."""
    eps = 0.3
    noisy = NoisyMultinomialProbit(3, eps, quadrature_points=40)
    mnp = MultinomialProbit(3, quadrature_points=40)
    ref = _gh_moments(lambda F: noisy.log_prob(np.full(len(F), y), F), m, S)
    lz, mu, cov = _gh_moments(lambda F: mnp.log_prob(np.full(len(F), y), F), m, S)
    out = mixture_moments(np.array([lz]), mu[None], cov[None], m[None], S[None], noisy.a, noisy.b)
    assert abs(out[0][0] - ref[0]) < 1e-12
    np.testing.assert_allclose(out[1][0], ref[1], atol=1e-12)
    np.testing.assert_allclose(out[2][0], ref[2], atol=1e-12)


@pytest.mark.parametrize("y, m, S", CAVITIES)
def test_tilted_moments_against_quadrature_within_the_inner_ep_error(y, m, S):
    """Inner EP + (N2) vs the grid.  The only approximation is the inner EP's estimate of
    the multinomial-probit part (errors δ log Z, δμ, δΣ measured against the same grid);
    to first order (N2) passes on r δlogZ, r δμ + δr |μ - m|, ... with δr = r(1-r) δlogZ."""
    eps = 0.3
    noisy = NoisyMultinomialProbit(3, eps, quadrature_points=40)
    mnp = MultinomialProbit(3, quadrature_points=40)
    yy = np.array([y])
    lz_ep, mu_ep, cov_ep = mnp.tilted_moments(yy, m[None], S[None])
    lz, mu, cov = _gh_moments(lambda F: mnp.log_prob(np.full(len(F), y), F), m, S)
    e_z = abs(lz_ep[0] - lz)
    e_mu = np.max(np.abs(mu_ep[0] - mu))
    e_cov = np.max(np.abs(cov_ep[0] - cov))
    assert e_z < 5e-3 and e_mu < 5e-3 and e_cov < 1.5e-2  # test_multiclass.py's bounds

    log_Z, mean, cov_t = noisy.tilted_moments(yy, m[None], S[None])
    ref = _gh_moments(lambda F: noisy.log_prob(np.full(len(F), y), F), m, S)
    r = np.exp(np.log(noisy.b) + lz - ref[0])
    d = np.max(np.abs(mu - m))
    e_r = r * (1 - r) * e_z
    tol_z = r * e_z
    tol_mu = r * e_mu + e_r * d
    tol_cov = r * e_cov + e_r * (np.max(np.abs(cov - S)) + d**2) + 2 * r * (1 - r) * d * e_mu
    assert 0.05 < r < 0.95  # both components matter on these cavities
    assert abs(log_Z[0] - ref[0]) <= 1.5 * tol_z + 1e-9
    assert np.max(np.abs(mean[0] - ref[1])) <= 1.5 * tol_mu + 1e-9
    assert np.max(np.abs(cov_t[0] - ref[2])) <= 1.5 * tol_cov + 1e-9


def test_likelihood_limits_and_probabilities():
    rng = np.random.default_rng(0)
    f = rng.normal(size=(5, 4))
    y = rng.integers(0, 4, 5)
    mnp = MultinomialProbit(4)
    assert np.array_equal(NoisyMultinomialProbit(4, 0.0).log_prob(y, f), mnp.log_prob(y, f))
    P = NoisyMultinomialProbit(4, 0.6).class_probabilities(f)
    np.testing.assert_allclose(P.sum(1), 1.0, atol=1e-12)
    assert np.all(P >= 0.6 / 3)
    near = NoisyMultinomialProbit(4, 0.75 - 1e-9).class_probabilities(f)
    np.testing.assert_allclose(near, 0.25, atol=1e-8)  # ε -> (c-1)/c: labels carry nothing


# ------------------------------------------------------------------ the posterior
def _random_problem(n=14, c=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = rng.integers(0, c, n)
    K = (ConstantKernel(2.0) * RBF(1.0))(X)
    return X, y, K


@pytest.mark.parametrize("per_class", [False, True])
def test_general_posterior_equals_structured_on_nested_ep_sites(per_class):
    X, y, K = _random_problem(c=4)
    c = 4
    Ks = np.stack([K * (1 + 0.3 * j) for j in range(c)]) if per_class else np.stack([K] * c)
    ref = nested_ep(Ks, y, c, damping=0.3, tol=1e-8, max_iter=2000)
    prec, shift, _, _ = site_natural_parameters(y, ref.alpha, ref.beta)
    s = ref.posterior
    g = general_posterior(Ks, prec, shift)
    assert g.n_negative == 0
    np.testing.assert_allclose(g.mean, s.mean, atol=1e-10)
    np.testing.assert_allclose(g.cov, s.cov, atol=1e-10)
    np.testing.assert_allclose(g.gamma, s.gamma, atol=1e-10)
    assert abs(g.log_det - s.log_det) < 1e-10 and abs(g.quad - s.quad) < 1e-10
    Xs = np.random.default_rng(1).normal(size=(5, 2))
    kern = ConstantKernel(2.0) * RBF(1.0)
    Kc = np.stack([kern(Xs, X) * (1 + 0.3 * j * per_class) for j in range(c)])
    kd = np.stack([kern.diag(Xs) * (1 + 0.3 * j * per_class) for j in range(c)])
    for a, b in zip(g.predict(Kc, kd), s.predict(Kc, kd), strict=True):
        np.testing.assert_allclose(a, b, atol=1e-10)
    _, dK = kern(X, eval_gradient=True)
    dK = np.stack([dK * (1 + 0.3 * j * per_class) for j in range(c)])
    np.testing.assert_allclose(g.log_Z_gradient(dK), ref.log_Z_gradient(dK), atol=1e-10)


def test_general_posterior_with_indefinite_blocks_against_dense_inverse():
    rng = np.random.default_rng(4)
    n, c = 6, 3
    A = rng.normal(size=(n, n))
    Ks = np.stack([A @ A.T / n + (1 + j) * np.eye(n) for j in range(c)])  # well conditioned
    B = rng.normal(size=(n, c, c))
    W = 0.02 * (B + B.transpose(0, 2, 1))  # indefinite blocks, small enough
    nu = rng.normal(size=(n, c))
    g = general_posterior(Ks, W, nu)
    assert g.n_negative > 0
    Kb = np.zeros((c * n, c * n))
    Wb = np.zeros_like(Kb)
    for j in range(c):
        Kb[j * n : (j + 1) * n, j * n : (j + 1) * n] = Ks[j]
        for k in range(c):
            Wb[j * n + np.arange(n), k * n + np.arange(n)] = W[:, j, k]
    Sig = np.linalg.inv(np.linalg.inv(Kb) + Wb)
    mu = Sig @ nu.T.reshape(-1)
    np.testing.assert_allclose(g.mean, mu.reshape(c, n).T, atol=1e-10)
    idx = np.arange(n)
    np.testing.assert_allclose(g.cov, Sig.reshape(c, n, c, n)[:, idx, :, idx], atol=1e-10)
    assert abs(g.log_det - np.linalg.slogdet(np.eye(c * n) + Kb @ Wb)[1]) < 1e-10
    Kinv = np.linalg.inv(Kb)
    np.testing.assert_allclose(g.R, Kinv - Kinv @ Sig @ Kinv, atol=1e-9)
    with pytest.raises(InvalidSiteConfiguration, match="negative site-precision eigenvalues"):
        general_posterior(Ks, W - 3.0 * np.eye(c), nu)


# ------------------------------------------------------------------ the EP loop
def test_general_loop_at_zero_noise_is_nested_ep():
    X, y, K = _random_problem()
    ref = nested_ep(K, y, 3, damping=0.3, tol=1e-11, max_iter=3000)
    res = robust_nested_ep(K, y, 3, label_noise=0.0, damping=0.3, tol=1e-11, max_iter=3000)
    assert res.converged and ref.converged
    assert abs(res.log_Z - ref.log_Z) < 1e-9
    np.testing.assert_allclose(res.mean, ref.mean, atol=1e-9)
    np.testing.assert_allclose(res.cov, ref.cov, atol=1e-9)
    np.testing.assert_allclose(res.site_precision, ref.site_precision, atol=1e-9)
    np.testing.assert_allclose(res.responsibility, 1.0)


@pytest.mark.parametrize("eps", [0.1, 0.3])
def test_log_Z_gradient_against_finite_differences(eps):
    X, y, _ = _random_problem(n=16, seed=1)
    kernel = ConstantKernel(2.0) * RBF(1.0)

    def fit(theta):
        K = kernel.clone_with_theta(theta)(X)
        return robust_nested_ep(K, y, 3, label_noise=eps, damping=0.3, tol=1e-11, max_iter=3000)

    theta = kernel.theta
    _, dK = kernel(X, eval_gradient=True)
    res = fit(theta)
    assert res.converged and res.posterior.n_negative > 0  # indefinite sites are exercised
    h = 1e-5
    fd = [(fit(theta + h * e).log_Z - fit(theta - h * e).log_Z) / (2 * h) for e in np.eye(2)]
    np.testing.assert_allclose(res.log_Z_gradient(dK), fd, rtol=1e-5, atol=1e-6)


def test_per_class_kernel_gradient():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(12, 1))
    y = np.arange(12) % 3
    ks = [ConstantKernel(a) * RBF(ls) for a, ls in [(1.0, 0.5), (2.0, 1.0), (0.5, 2.0)]]

    def fit(thetas):
        Ks = np.stack([k.clone_with_theta(t)(X) for k, t in zip(ks, thetas, strict=True)])
        return robust_nested_ep(Ks, y, 3, label_noise=0.2, damping=0.3, tol=1e-11, max_iter=3000)

    thetas = [k.theta for k in ks]
    dK = np.stack([k(X, eval_gradient=True)[1] for k in ks])
    res = fit(thetas)
    h = 1e-5
    for j in range(3):
        one = np.zeros_like(dK)
        one[j] = dK[j]
        for p in range(2):
            tp = [t.copy() for t in thetas]
            tm = [t.copy() for t in thetas]
            tp[j][p] += h
            tm[j][p] -= h
            fd = (fit(tp).log_Z - fit(tm).log_Z) / (2 * h)
            assert abs(res.log_Z_gradient(one)[p] - fd) < 1e-6 + 1e-5 * abs(fd)


def test_hard_problem_stays_finite_and_warns():
    """Unlearnable labels and a huge amplitude: parallel EP with indefinite sites stalls at
    the positive-definiteness boundary; the state stays valid and the result says so."""
    X = np.linspace(0, 1, 15)[:, None]
    K = (ConstantKernel(100.0) * RBF(0.3))(X)
    y = np.arange(15) % 3
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        res = robust_nested_ep(K, y, 3, label_noise=0.1, damping=0.5, max_iter=50)
    assert not res.converged
    for a in (res.mean, res.cov, res.site_precision, res.posterior.R):
        assert np.all(np.isfinite(a))
    assert np.all(np.linalg.eigvalsh(res.cov) > 0)


def test_bad_input_says_what_to_do():
    X, y, K = _random_problem()
    with pytest.raises(ValueError, match=r"label_noise must be in \[0, \(c-1\)/c\)"):
        robust_nested_ep(K, y, 3, label_noise=0.7)
    with pytest.raises(ValueError, match="label_noise must be in"):
        NoisyMultinomialProbit(3, -0.1)
    with pytest.raises(ValueError, match="init must be"):
        robust_nested_ep(K, y, 3, label_noise=0.1, init=(np.zeros((14, 3)),) * 2)
    with pytest.raises(ValueError, match="label_noise"):  # the estimator's range [0, 0.5)
        GPClassifier(label_noise=0.6, optimizer=None).fit(X, y)
    with pytest.raises(ValueError, match="label-noise multinomial probit"):
        GPClassifier(label_noise=0.1, optimizer=None, multi_class="one_vs_rest").fit(X, y)
    with pytest.raises(ValueError, match="label-noise multinomial probit"):  # auto -> OvR
        GPClassifier(label_noise=0.1, optimizer=None, method="laplace").fit(X, y)


# ------------------------------------------------------------------ the estimator
def test_zero_label_noise_is_nested_ep_bit_for_bit(monkeypatch):
    X, y, K = _random_problem(n=30)
    clf = GPClassifier(ConstantKernel(2.0) * RBF(1.0), optimizer=None, method="damped",
                       damping=0.3, multi_class="multinomial", label_noise=0.0)  # fmt: skip

    def forbidden(*args, **kwargs):
        raise AssertionError("label_noise=0 must not use the general-site path")

    monkeypatch.setattr(multiclass_label_noise, "robust_nested_ep", forbidden)
    clf.fit(X, y)
    # the same BLAS thread limit as the fit: OpenBLAS's summation order depends on it
    with blas_thread_limit(len(y)):
        ref = nested_ep(K, y, 3, damping=0.3, max_iter=1000, tol=1e-4, warn=False)
    np.testing.assert_array_equal(clf.site_precision_, ref.site_precision)
    np.testing.assert_array_equal(clf.site_shift_, ref.site_shift)
    assert clf.log_marginal_likelihood_value_ == ref.log_Z
    Xs = np.random.default_rng(5).normal(size=(4, 2))
    mean, cov = ref.predict(clf.kernel_(Xs, X), clf.kernel_.diag(Xs))
    np.testing.assert_array_equal(
        clf.predict_proba(Xs), MultinomialProbit(3).predictive_probabilities(mean, cov)
    )


def _flipped_three_class_data(n, seed, flip):
    """Three Gaussian blobs; a fraction ``flip`` of labels replaced by another class."""
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 2.0], [-1.8, -1.0], [1.8, -1.0]])
    y = rng.integers(0, 3, n)
    X = centres[y] + 0.9 * rng.normal(size=(n, 2))
    noisy = y.copy()
    f = rng.random(n) < flip
    noisy[f] = (y[f] + rng.integers(1, 3, f.sum())) % 3
    return X, y, noisy


def test_estimator_with_label_noise_on_flipped_labels():
    """20 % flipped labels (13 of 60 here): label_noise=0.2 fits, converges, and predicts the
    clean test labels at least as well (log loss 0.406 vs 0.444 at label_noise=0)."""
    X, _, y_noisy = _flipped_three_class_data(60, 0, 0.2)
    Xt, yt, _ = _flipped_three_class_data(500, 1, 0.0)
    losses = {}
    for eps in (0.0, 0.2):
        with warnings.catch_warnings():
            warnings.simplefilter("error", ConvergenceWarning)
            clf = GPClassifier(multi_class="multinomial", label_noise=eps).fit(X, y_noisy)
        assert clf.converged_ and clf.multi_class_ == "multinomial"
        P = clf.predict_proba(Xt)
        np.testing.assert_allclose(P.sum(1), 1.0, atol=1e-12)
        losses[eps] = log_loss(yt, P)
    assert clf.site_precision_.shape == (60, 3, 3) and clf.site_shift_.shape == (60, 3)
    np.testing.assert_allclose(clf.site_precision_ @ np.ones(3), 0.0, atol=1e-10)
    assert np.all(P >= 0.1 - 1e-12)  # a + b p >= ε/(c-1)
    theta = clf.kernel_.theta
    value, grad = clf.log_marginal_likelihood(theta, eval_gradient=True)
    assert abs(value - clf.log_marginal_likelihood_value_) < 1e-3 and np.all(np.isfinite(grad))
    assert losses[0.2] <= losses[0.0]


def test_auto_with_label_noise_is_the_robust_multinomial():
    X, y, _ = _random_problem(n=24)
    clf = GPClassifier(ConstantKernel(2.0) * RBF(1.0), optimizer=None, label_noise=0.1).fit(X, y)
    assert clf.multi_class_ == "multinomial" and clf.converged_
    assert clf._state.core.label_noise == 0.1
    assert isinstance(clf._state.core.result, multiclass_label_noise.RobustMulticlassEPResult)


def test_warm_start_and_invalid_init():
    X, y, K = _random_problem()
    cold = robust_nested_ep(K, y, 3, label_noise=0.2, damping=0.3, tol=1e-8)
    warm = robust_nested_ep(K, y, 3, label_noise=0.2, damping=0.3, tol=1e-8,
                            init=cold.warm_state())  # fmt: skip
    assert warm.converged and warm.n_iter <= 2 and abs(warm.log_Z - cold.log_Z) < 1e-7
    bad = list(cold.warm_state())
    bad[2] = bad[2] - 50.0 * (np.eye(3) - 1.0 / 3)  # far too negative: no valid posterior
    with pytest.warns(RuntimeWarning, match="init gives an invalid posterior"):
        again = robust_nested_ep(K, y, 3, label_noise=0.2, damping=0.3, tol=1e-8, init=bad)
    assert abs(again.log_Z - cold.log_Z) < 1e-6
