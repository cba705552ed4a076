"""Tests of the scale-mixture Gibbs sampler, slice sampling and MCMC diagnostics."""

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

import _reference_student_t as st
from robustep.baselines.mcmc import (
    effective_sample_size,
    gibbs_student_t_gp,
    slice_sample_1d,
    split_rhat,
)


def test_rhat_and_ess_on_known_chains():
    rng = np.random.default_rng(0)
    iid = rng.standard_normal((4, 2000))
    assert split_rhat(iid) == pytest.approx(1.0, abs=0.01)
    assert effective_sample_size(iid) == pytest.approx(8000, rel=0.15)
    rho = 0.9
    ar = np.zeros((4, 4000))
    e = rng.standard_normal((4, 4000))
    for t in range(1, 4000):  # generating a reference AR(1) chain
        ar[:, t] = rho * ar[:, t - 1] + np.sqrt(1 - rho**2) * e[:, t]
    expected = 16000 * (1 - rho) / (1 + rho)
    assert effective_sample_size(ar) == pytest.approx(expected, rel=0.3)
    shifted = iid + np.array([0.0, 0.0, 0.0, 3.0])[:, None]
    assert split_rhat(shifted) > 1.2


def test_slice_sampler_normal_target():
    rng = np.random.default_rng(1)
    x, draws = 0.0, []
    for _ in range(4000):
        x, _ = slice_sample_1d(lambda t: -0.5 * (t - 2.0) ** 2 / 0.25, x, rng, width=1.0)
        draws.append(x)
    d = np.array(draws[200:])
    assert d.mean() == pytest.approx(2.0, abs=0.05)
    assert d.var() == pytest.approx(0.25, rel=0.1)


def test_fixed_hyperparameter_gibbs_matches_quadrature_one_site():
    kernel = ConstantKernel(1.5, "fixed") * RBF(1.0, "fixed")
    X, y = np.zeros((1, 1)), np.array([2.0])
    df, scale = 3.0, 0.3
    res = gibbs_student_t_gp(
        kernel,
        X,
        y,
        df=df,
        scale=scale,
        n_samples=6000,
        burn_in=200,
        sample_hyperparameters=False,
        random_state=0,
    )
    f = np.linspace(-8, 10, 20001)
    logp = -0.5 * f**2 / 1.5 + st.log_prob(2.0, f, df, scale)
    p = np.exp(logp - logp.max())
    p /= p.sum()
    mean = (p * f).sum()
    var = (p * (f - mean) ** 2).sum()
    se = np.sqrt(var / effective_sample_size(res.f[:, 0][None]))
    assert res.f[:, 0].mean() == pytest.approx(mean, abs=4 * se + 1e-3)
    assert res.f[:, 0].var() == pytest.approx(var, rel=0.1)
    # Rao-Blackwellised predictive at the training input has the same moments
    m, v = res.predict(X, max_draws=500)
    assert m[0] == pytest.approx(mean, abs=0.05)


def test_hyperparameter_sampling_recovers_noise_scale():
    rng = np.random.default_rng(2)
    n = 40
    X = np.sort(rng.uniform(-3, 3, size=(n, 1)), axis=0)
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_t(4, size=n)
    y[[5, 20]] += [3.0, -3.0]
    kernel = ConstantKernel(1.0) * RBF(1.0)
    res = gibbs_student_t_gp(
        kernel,
        X,
        y,
        df=4.0,
        scale=0.5,
        n_samples=80,
        burn_in=60,
        n_chains=2,
        hyper_every=2,
        random_state=3,
    )
    assert res.df.shape == (160,) and res.V.shape == (160, n)
    assert 0.03 < np.median(res.scale) < 0.4
    for name in ["log_scale", "log_df", "kernel_theta_0", "mean_f"]:
        assert np.isfinite(res.rhat[name]) and res.ess[name] > 1
    # outliers get inflated residual variances
    Vm = res.V.mean(axis=0)
    assert Vm[5] > 10 * np.median(Vm) and Vm[20] > 10 * np.median(Vm)
    lpd = res.log_predictive_density(X[:5], y[:5], max_draws=30)
    assert lpd.shape == (5,) and np.all(np.isfinite(lpd))


def test_validation():
    with pytest.raises(ValueError):
        gibbs_student_t_gp(RBF(), np.zeros((3, 1)), np.zeros(2))
    with pytest.raises(ValueError):
        gibbs_student_t_gp(RBF(), np.zeros((2, 1)), np.zeros(2), df=-1.0)


def test_kernel_matrix_fast_path_matches_sklearn():
    from sklearn.gaussian_process.kernels import Matern

    from robustep.baselines.mcmc import _KernelMatrix

    rng = np.random.default_rng(4)
    X = rng.standard_normal((15, 3))
    for kernel in (ConstantKernel(2.0) * RBF(np.ones(3)), ConstantKernel(0.5) * RBF(0.7)):
        km = _KernelMatrix(kernel, X)
        assert km.D is not None
        for _ in range(3):
            th = kernel.theta + rng.normal(0, 0.5, kernel.theta.size)
            K = kernel.clone_with_theta(th)(X)
            np.testing.assert_allclose(km(th), K, rtol=1e-12, atol=1e-14)
            E = km.state(th)
            for j in range(th.size):
                for t in (th[j] + 0.3, th[j] - 0.3, np.log(1e-2)):  # shorter l: K underflows
                    th2 = th.copy()
                    th2[j] = t
                    ref = kernel.clone_with_theta(th2)(X)
                    np.testing.assert_allclose(
                        km.coordinate(E, th, j, t), ref, rtol=1e-10, atol=1e-300
                    )
                    np.testing.assert_allclose(km.state(th2), km.update(E, th, j, t), rtol=1e-10)
    # from a tiny length-scale (K = I numerically) back to a long one: no overflow, exact
    th = np.log([1.0, 1e-2, 1e-2, 1e-2])
    kernel = ConstantKernel(2.0) * RBF(np.ones(3))
    km = _KernelMatrix(kernel, X)
    t = np.log(5.0)
    th2 = th.copy()
    th2[1] = t
    np.testing.assert_allclose(
        km.coordinate(km.state(th), th, 1, t), kernel.clone_with_theta(th2)(X), rtol=1e-10
    )
    other = ConstantKernel(1.0) * Matern(1.0)
    km = _KernelMatrix(other, X)
    assert km.D is None
    np.testing.assert_allclose(km(other.theta), other(X))


def test_fast_kernel_path_gives_the_same_chain(monkeypatch):
    import robustep.baselines.mcmc as mcmc

    rng = np.random.default_rng(5)
    X = rng.uniform(-2, 2, size=(25, 2))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(25)
    kernel = ConstantKernel(1.0) * RBF(np.ones(2))
    kw = dict(n_samples=30, burn_in=10, random_state=0)
    fast = gibbs_student_t_gp(kernel, X, y, **kw)

    class Slow(mcmc._KernelMatrix):
        def __init__(self, kernel, X):
            super().__init__(kernel, X)
            self.D = None  # the generic scikit-learn path

    monkeypatch.setattr(mcmc, "_KernelMatrix", Slow)
    slow = gibbs_student_t_gp(kernel, X, y, **kw)
    np.testing.assert_allclose(fast.kernel_theta, slow.kernel_theta, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(fast.scale, slow.scale, rtol=5e-3)
    np.testing.assert_allclose(fast.df, slow.df, rtol=5e-3)
    # f = f0 + K (K + V)^-1 (...) amplifies rounding of K where V is tiny; the chains
    # above stay identical, so these differences do not feed back.
    np.testing.assert_allclose(fast.f, slow.f, atol=1e-2)


def test_random_walk_metropolis_truncated_gaussian_target():
    """Correlated 2-D Gaussian truncated to a box: the chain's mean and covariance match
    the target's, computed on a grid."""
    from robustep.baselines.mcmc import random_walk_metropolis

    mean = np.array([0.5, -0.2])
    cov = np.array([[1.0, 0.8], [0.8, 1.0]])
    prec = np.linalg.inv(cov)
    lower, upper = np.array([-1.0, -2.0]), np.array([2.5, 1.0])

    def logp(x):
        d = x - mean
        return -0.5 * d @ prec @ d

    rng = np.random.default_rng(4)
    chol = np.linalg.cholesky(2.38**2 / 2 * cov)
    x, lp, draws, accepted = np.zeros(2), None, [], 0
    for _ in range(30000):
        x, lp, acc = random_walk_metropolis(
            logp, x, rng, chol=chol, n_steps=1, lower=lower, upper=upper, lp0=lp
        )
        accepted += acc
        draws.append(x)
    d = np.array(draws[1000:])
    assert np.all(d >= lower) and np.all(d <= upper)
    g1, g2 = np.meshgrid(np.linspace(-1, 2.5, 701), np.linspace(-2, 1, 601), indexing="ij")
    pts = np.stack([g1.ravel(), g2.ravel()], axis=1) - mean
    w = np.exp(-0.5 * np.einsum("ij,jk,ik->i", pts, prec, pts))
    w /= w.sum()
    ref_mean = w @ (pts + mean)
    c = pts + mean - ref_mean
    ref_cov = (w[:, None] * c).T @ c
    ess = min(effective_sample_size(d[:, k][None]) for k in range(2))
    se = np.sqrt(np.diag(ref_cov) / ess)
    assert np.all(np.abs(d.mean(axis=0) - ref_mean) < 4 * se)
    np.testing.assert_allclose(np.cov(d, rowvar=False), ref_cov, rtol=0.15, atol=0.03)
    assert 0.1 < accepted / 30000 < 0.7


def test_metropolis_hyperparameters_match_the_slice_sampler():
    """The same posterior of the kernel hyperparameters from both hyperparameter samplers
    (small problem, long chains: agreement within Monte Carlo error)."""
    rng = np.random.default_rng(5)
    n = 25
    X = np.sort(rng.uniform(-3, 3, size=(n, 1)), axis=0)
    y = np.sin(X[:, 0]) + 0.2 * rng.standard_t(4, size=n)
    kernel = ConstantKernel(1.0) * RBF(1.0)
    runs = {}
    for sampler in ("slice", "metropolis"):
        runs[sampler] = gibbs_student_t_gp(
            kernel,
            X,
            y,
            n_samples=1500,
            burn_in=400,
            n_chains=2,
            hyper_sampler=sampler,
            random_state=6,
        )
    met = runs["metropolis"]
    assert 0.1 < met.hyper_acceptance < 0.7 and runs["slice"].hyper_acceptance is None
    for j in range(2):
        a, b = runs["slice"].kernel_theta[:, j], met.kernel_theta[:, j]
        ess_a = effective_sample_size(a.reshape(2, -1))
        ess_b = effective_sample_size(b.reshape(2, -1))
        se = np.sqrt(a.var() / ess_a + b.var() / ess_b)
        assert abs(a.mean() - b.mean()) < 4 * se, (j, a.mean(), b.mean(), se)
        assert met.rhat[f"kernel_theta_{j}"] < 1.1


def test_hyper_sampler_validation():
    X, y = np.zeros((3, 1)), np.zeros(3)
    with pytest.raises(ValueError, match="hyper_sampler"):
        gibbs_student_t_gp(RBF(), X, y, hyper_sampler="hmc")
    with pytest.raises(ValueError, match="hyper_steps"):
        gibbs_student_t_gp(RBF(), X, y, hyper_sampler="metropolis", hyper_steps=0)
