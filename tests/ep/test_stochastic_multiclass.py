"""Stochastic power EP for the sparse multi-class GP (robustep.ep.stochastic_multiclass,
docs/derivations/stochastic_multiclass.md)."""

import dataclasses

import numpy as np
import pytest
from scipy.stats import norm
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

from robustep.ep import stochastic as binary
from robustep.ep.stochastic_multiclass import (
    PAIRWISE_SCALE,
    _ClassSites,
    fit_stochastic_multiclass_ep,
    multinomial_probit_independent,
    pairwise_tilted_moments,
    stochastic_multiclass_energy,
)
from robustep.likelihoods import Probit
from robustep.likelihoods.multinomial_probit import MultinomialProbit

JITTER = 1e-6
FIXED = {"learn_kernel": False, "learn_inducing": False}


def _three_classes(n, m, seed=1, noise=1.0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, 2))
    f = np.stack([np.sin(X[:, 0]), np.cos(X[:, 1]), X[:, 0] * X[:, 1] / 6], axis=1)
    y = np.argmax(f + noise * rng.normal(size=f.shape), axis=1)
    Z = X[rng.choice(n, m, replace=False)]
    return X, y, Z


# ------------------------------------------------------------------ the pairwise factor
@pytest.mark.parametrize("alpha", [1.0, 0.5])
@pytest.mark.parametrize(
    "cavity",
    [(0.3, 1.2, -0.5, 0.7), (-2.0, 0.5, 1.5, 2.0), (4.0, 0.1, -3.0, 3.0), (0.0, 9.0, 0.2, 0.05)],
    ids=["near", "against", "far", "wide"],
)
def test_pairwise_tilted_moments_match_numerical_integration(alpha, cavity):
    m_y, V_y, m_k, V_k = cavity
    fy = np.linspace(m_y - 12 * np.sqrt(V_y), m_y + 12 * np.sqrt(V_y), 1201)
    fk = np.linspace(m_k - 12 * np.sqrt(V_k), m_k + 12 * np.sqrt(V_k), 1201)
    A, B = np.meshgrid(fy, fk, indexing="ij")
    w = (
        norm.cdf((A - B) / PAIRWISE_SCALE) ** alpha
        * norm.pdf(A, m_y, np.sqrt(V_y))
        * norm.pdf(B, m_k, np.sqrt(V_k))
    )
    cell = (fy[1] - fy[0]) * (fk[1] - fk[0])
    Z = w.sum() * cell
    mean_y, mean_k = (w * A).sum() * cell / Z, (w * B).sum() * cell / Z
    var_y = (w * (A - mean_y) ** 2).sum() * cell / Z
    var_k = (w * (B - mean_k) ** 2).sum() * cell / Z
    got = pairwise_tilted_moments(m_y, V_y, m_k, V_k, alpha)
    want = (np.log(Z), mean_y, var_y, mean_k, var_k)
    np.testing.assert_allclose(np.concatenate(got), want, rtol=1e-7, atol=1e-9)


def test_pairwise_factor_is_the_multinomial_probit_at_two_classes():
    # s = sqrt(2): each factor is the pairwise marginal of the multinomial probit, which
    # at c = 2 is the whole likelihood
    f = np.random.default_rng(0).normal(scale=2.0, size=(50, 2))
    y = np.random.default_rng(1).integers(0, 2, size=50)
    diff = f[np.arange(50), y] - f[np.arange(50), 1 - y]
    np.testing.assert_allclose(
        MultinomialProbit(2).log_prob(y, f), norm.logcdf(diff / PAIRWISE_SCALE), atol=1e-7
    )


def test_independent_predictive_matches_monte_carlo():
    rng = np.random.default_rng(3)
    mean = rng.normal(size=(6, 4))
    var = rng.uniform(0.1, 3.0, size=(6, 4))
    p = multinomial_probit_independent(mean, var)
    draws = mean[:, None, :] + np.sqrt(1.0 + var)[:, None, :] * rng.normal(size=(6, 200_000, 4))
    counts = np.stack([np.mean(np.argmax(draws, axis=2) == k, axis=1) for k in range(4)], 1)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(p, counts, atol=4e-3)


# --------------------------------------------------------------------- energy, gradient
def _sites_at_fixed_hyperparameters(kernel, X, y, Z, alpha, epochs=40):
    return fit_stochastic_multiclass_ep(kernel, X, y, 3, Z, power=alpha, batch_size=len(y),
                                        n_epochs=epochs, damping=0.5, jitter=JITTER,
                                        random_state=0, **FIXED)  # fmt: skip


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_energy_gradient_matches_finite_differences(alpha):
    X, y, Z = _three_classes(120, 7)
    kernel = ConstantKernel(1.5) * RBF([1.0, 1.4])
    fit = _sites_at_fixed_hyperparameters(kernel, X, y, Z, alpha)
    _, g_theta, g_Z = stochastic_multiclass_energy(fit, X, y)

    def energy(theta, Zs):
        moved = dataclasses.replace(fit, kernel=kernel.clone_with_theta(theta), inducing_inputs=Zs)
        return stochastic_multiclass_energy(moved, X, y, want_grad=False)[0]

    h, theta = 1e-5, fit.kernel.theta
    fd_theta = [(energy(theta + h * e, Z) - energy(theta - h * e, Z)) / (2 * h)
                for e in np.eye(theta.size)]  # fmt: skip
    np.testing.assert_allclose(g_theta, fd_theta, rtol=1e-5)
    fd_Z = np.zeros_like(Z)
    for index in np.ndindex(Z.shape):
        D = np.zeros_like(Z)
        D[index] = h
        fd_Z[index] = (energy(theta, Z + D) - energy(theta, Z - D)) / (2 * h)
    np.testing.assert_allclose(g_Z, fd_Z, rtol=1e-5, atol=1e-6 * np.max(np.abs(fd_Z)))


def test_minibatch_estimates_over_a_partition_average_to_the_full_energy():
    # the global terms are exact and the data terms are scaled by n / b, so the mean of
    # the estimates over equal batches that partition the data is the full value
    X, y, Z = _three_classes(200, 6)
    fit = _sites_at_fixed_hyperparameters(ConstantKernel(1.0) * RBF(1.0), X, y, Z, 0.5, 10)
    full = np.concatenate(
        [np.atleast_1d(v).ravel() for v in stochastic_multiclass_energy(fit, X, y)]
    )
    order = np.random.default_rng(0).permutation(200)
    parts = [
        np.concatenate([np.atleast_1d(v).ravel()
                        for v in stochastic_multiclass_energy(fit, X, y, batch=order[i:i + 50])])
        for i in range(0, 200, 50)
    ]  # fmt: skip
    np.testing.assert_allclose(np.mean(parts, axis=0), full, rtol=1e-10, atol=1e-10)
    assert np.max(np.abs(parts[0] - full)) > 1e-3  # one batch alone is not the full value


def test_two_classes_with_a_prior_class_reduce_to_the_binary_energy():
    # c = 2, α = 1, class 0's average site zero (q_0 = prior): integrating f_0 ~ N(0, k_ii)
    # out of Φ((f_1 − f_0)/s) gives the probit Φ(±f_1/σ), σ² = s² + k_ii, so the energy is
    # the binary tied energy (E6) of g = f_1/σ (kernel k/σ², u scaled by 1/σ)
    X, y, Z = _three_classes(150, 6)
    y2 = (y == 1).astype(int)
    kernel = ConstantKernel(0.8) * RBF(1.2)
    sigma2 = PAIRWISE_SCALE**2 + kernel.diag(X[:1])[0]
    g_kernel = ConstantKernel(0.8 / sigma2, "fixed") * RBF(1.2)
    bin_fit = binary.fit_stochastic_ep(g_kernel, X, 2.0 * y2 - 1.0, Probit(), Z, power=1.0,
                                       batch_size=150, n_epochs=30, damping=0.5, jitter=JITTER,
                                       learn_likelihood=False, **FIXED)  # fmt: skip
    lam, b = bin_fit._sites.Lam, bin_fit._sites.b  # over u/σ: Λ_u = Λ/σ², b_u = b/σ
    m = Z.shape[0]
    sites = _ClassSites(
        np.stack([np.zeros((m, m)), lam / sigma2]),
        np.stack([np.zeros(m), b / np.sqrt(sigma2)]),
        np.array([150.0, 150.0]),
    )
    mc_fit = fit_stochastic_multiclass_ep(kernel, X, y2, 2, Z, n_epochs=1, batch_size=150,
                                          jitter=JITTER * sigma2, **FIXED)  # fmt: skip
    mc_fit = dataclasses.replace(mc_fit, _sites=sites)
    e_bin = binary.stochastic_ep_energy(bin_fit, X, 2.0 * y2 - 1.0, want_grad=False)[0]
    e_mc = stochastic_multiclass_energy(mc_fit, X, y2, want_grad=False)[0]
    assert e_mc == pytest.approx(e_bin, rel=1e-9, abs=1e-8)
    # a nonzero class-0 site changes it (the check sees both classes)
    sites.Lam[0] = 0.1 * sites.Lam[1]
    assert abs(stochastic_multiclass_energy(mc_fit, X, y2, want_grad=False)[0] - e_bin) > 1e-3


# --------------------------------------------------------- learning vs the full batch
def test_learning_reaches_the_full_batch_end_point():
    # the deterministic full-batch counterpart of the learner: every point in every step,
    # two site sweeps per step, and Adam until θ stops where the fixed-site gradient of the
    # energy vanishes at the sites' fixed point (docs/derivations/stochastic_multiclass.md
    # §5; a root finder on converged fixed points gives the same θ to 3e-4)
    X, y, Z = _three_classes(300, 10)
    kernel = ConstantKernel(0.2) * RBF(3.0)
    common = dict(learn_inducing=False, jitter=JITTER, random_state=0)
    ref = fit_stochastic_multiclass_ep(kernel, X, y, 3, Z, batch_size=300, n_epochs=200,
                                       learning_rate=0.1, damping=0.85, site_steps=2,
                                       **common)  # fmt: skip
    e_ref, g_ref, _ = stochastic_multiclass_energy(ref, X, y)
    g_start = stochastic_multiclass_energy(_sites_at_fixed_hyperparameters(kernel, X, y, Z, 1.0),
                                           X, y)[1]  # fmt: skip
    assert np.max(np.abs(g_ref)) < 1e-3 * np.max(np.abs(g_start))
    fit = fit_stochastic_multiclass_ep(kernel, X, y, 3, Z, batch_size=100, n_epochs=100,
                                       learning_rate=0.05, damping=0.2, **common)  # fmt: skip
    # the energy at the learner's θ with the sites at their full-batch fixed point
    settled = fit_stochastic_multiclass_ep(fit.kernel, X, y, 3, Z, batch_size=300,
                                           n_epochs=100, damping=0.85, state=fit,
                                           **FIXED)  # fmt: skip
    e_fit = stochastic_multiclass_energy(settled, X, y, want_grad=False)[0]
    assert abs(e_fit - e_ref) < 0.01 * abs(e_ref)
    Xs = np.random.default_rng(9).uniform(-3, 3, size=(300, 2))
    p_ref, p = ref.predict_proba(Xs), fit.predict_proba(Xs)
    assert np.max(np.abs(p - p_ref)) < 0.02
    # the learning moved: the start is worse and predicts otherwise
    at_start = _sites_at_fixed_hyperparameters(kernel, X, y, Z, 1.0, epochs=100)
    assert stochastic_multiclass_energy(at_start, X, y, want_grad=False)[0] < e_ref - 5
    assert np.max(np.abs(at_start.predict_proba(Xs) - p_ref)) > 0.1


# ------------------------------------------------------------------------------ the API
def test_reproducible_continues_and_stops():
    X, y, Z = _three_classes(200, 6)
    kernel = ConstantKernel(1.0) * RBF(1.0)
    kw = dict(batch_size=64, n_epochs=3, random_state=7)
    a = fit_stochastic_multiclass_ep(kernel, X, y, 3, Z, **kw)
    b = fit_stochastic_multiclass_ep(kernel, X, y, 3, Z, **kw)
    np.testing.assert_array_equal(a.mean, b.mean)
    np.testing.assert_array_equal(a.inducing_inputs, b.inducing_inputs)
    assert not np.array_equal(a.inducing_inputs, Z)  # Z was learned
    assert a.mean.shape == (3, 6) and a.cov.shape == (3, 6, 6)
    assert [h["epoch"] for h in a.history] == [1, 2, 3] and a.n_steps == 12
    c = fit_stochastic_multiclass_ep(kernel, X, y, 3, Z, **{**kw, "random_state": 8})
    assert not np.array_equal(a.mean, c.mean)
    mean, var = a.predict(X[:5])
    assert mean.shape == var.shape == (5, 3) and np.all(var > 0)
    np.testing.assert_allclose(a.predict_proba(X[:5]).sum(axis=1), 1.0)
    d = fit_stochastic_multiclass_ep(a.kernel, X, y, 3, a.inducing_inputs, state=a, **kw)
    assert d.n_steps == 24
    assert not np.array_equal(d.mean, a.mean)
    stop = fit_stochastic_multiclass_ep(kernel, X, y, 3, Z, callback=lambda s, r: True, **kw)
    assert stop.stopped == "callback" and len(stop.history) == 1
    steps = fit_stochastic_multiclass_ep(kernel, X, y, 3, Z, max_steps=5, **kw)
    assert steps.stopped == "max_steps" and steps.n_steps == 5
    timed = fit_stochastic_multiclass_ep(kernel, X, y, 3, Z, max_time=0.0, **kw)
    assert timed.stopped == "max_time" and timed.n_steps == 1


def test_bad_arguments():
    X, y, Z = _three_classes(50, 5)
    kernel = RBF(1.0)
    with pytest.raises(ValueError, match="inducing_power"):
        fit_stochastic_multiclass_ep(kernel, X, y, 3, Z, power=1.5)
    with pytest.raises(ValueError, match="n_classes"):
        fit_stochastic_multiclass_ep(kernel, X, y, 1, Z)
    with pytest.raises(ValueError, match="class indices"):
        fit_stochastic_multiclass_ep(kernel, X, y + 1, 3, Z)
    with pytest.raises(ValueError, match="integer"):
        fit_stochastic_multiclass_ep(kernel, X, y.astype(float), 3, Z)
    with pytest.raises(ValueError, match="2-D"):
        fit_stochastic_multiclass_ep(kernel, X[:, 0], y, 3, Z)
    with pytest.raises(ValueError, match="shape"):
        fit_stochastic_multiclass_ep(kernel, X, y, 3, Z[:, :1])
    with pytest.raises(ValueError, match="damping"):
        fit_stochastic_multiclass_ep(kernel, X, y, 3, Z, damping=0.0)
    other = fit_stochastic_multiclass_ep(kernel, X, y, 3, Z[:4], n_epochs=1)
    with pytest.raises(ValueError, match="state"):
        fit_stochastic_multiclass_ep(kernel, X, y, 3, Z, state=other)
