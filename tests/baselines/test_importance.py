"""Tests of annealed importance sampling against exact and numerically integrated evidence."""

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

import _reference_student_t as st
from _reference_likelihoods import GaussianReference, StudentTReference
from robustep.baselines.importance import ais_log_marginal_likelihood, annealing_schedule


def test_schedule_endpoints_and_monotone():
    for kind in ["sigmoid", "geometric", "linear"]:
        b = annealing_schedule(50, kind)
        assert b[0] == 0.0 and b[-1] == pytest.approx(1.0)
        assert np.all(np.diff(b) > 0)
    with pytest.raises(ValueError, match="schedule"):
        annealing_schedule(5, "cubic")


def test_gaussian_likelihood_exact_marginal():
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, size=(8, 1))
    K = (ConstantKernel(1.0) * RBF(1.0))(X)
    y = np.sin(2 * X[:, 0]) + 0.2 * rng.standard_normal(8)
    lik = GaussianReference(0.05)
    Ky = K + 0.05 * np.eye(8)
    exact = -0.5 * (y @ np.linalg.solve(Ky, y) + np.linalg.slogdet(2 * np.pi * Ky)[1])
    res = ais_log_marginal_likelihood(K, y, lik, n_temperatures=400, n_chains=32, random_state=1)
    assert res.log_Z == pytest.approx(exact, abs=max(0.1, 4 * res.std_error))


def test_student_t_one_dimensional_quadrature():
    lik = StudentTReference(2.0, 0.2)
    y, k = np.array([1.4]), 1.3
    exact = st.log_predictive_density(y[0], 0.0, k, lik.df, lik.scale)
    res = ais_log_marginal_likelihood(
        np.array([[k]]), y, lik, n_temperatures=200, n_chains=64, random_state=2
    )
    assert res.log_Z == pytest.approx(exact, abs=0.05)


def test_student_t_two_dimensional_bimodal_quadrature():
    # Two conflicting observations at nearby inputs: a bimodal posterior.
    lik = StudentTReference(2.0, 0.1)
    X = np.array([[0.0], [0.3]])
    K = (ConstantKernel(1.0) * RBF(1.0))(X)
    y = np.array([1.0, -1.0])
    m = 400
    x, w = np.polynomial.legendre.leggauss(m)
    g, ww = 6 * x, 6 * w
    F1, F2 = np.meshgrid(g, g, indexing="ij")
    F = np.stack([F1.ravel(), F2.ravel()], 1)
    logN = (
        -0.5 * np.einsum("ij,jk,ik->i", F, np.linalg.inv(K), F)
        - 0.5 * np.linalg.slogdet(2 * np.pi * K)[1]
    )
    v = (
        logN
        + lik.log_prob(y[0], F[:, 0])
        + lik.log_prob(y[1], F[:, 1])
        + np.log(np.outer(ww, ww).ravel())
    )
    exact = v.max() + np.log(np.exp(v - v.max()).sum())
    res = ais_log_marginal_likelihood(K, y, lik, n_temperatures=300, n_chains=64, random_state=3)
    assert res.log_Z == pytest.approx(exact, abs=0.08)
    assert res.ess > 5


def test_validation():
    with pytest.raises(ValueError, match="shape"):
        ais_log_marginal_likelihood(np.eye(2), np.zeros(3), StudentTReference())


def test_annealing_from_gaussian_sites_matches_quadrature():
    from robustep.baselines.laplace import laplace_approximation

    lik = StudentTReference(2.0, 0.1)
    X = np.array([[0.0], [0.3]])
    K = (ConstantKernel(1.0) * RBF(1.0))(X)
    y = np.array([1.0, 0.4])
    la = laplace_approximation(K, y, lik)
    # a proper Gaussian q broader than the (overconfident) Laplace fit
    sites = (0.3 * la.W, 0.3 * (la.W * la.mode + la.grad_log_lik))
    x, w = np.polynomial.legendre.leggauss(400)
    g, ww = 6 * x, 6 * w
    F1, F2 = np.meshgrid(g, g, indexing="ij")
    F = np.stack([F1.ravel(), F2.ravel()], 1)
    logN = (
        -0.5 * np.einsum("ij,jk,ik->i", F, np.linalg.inv(K), F)
        - 0.5 * np.linalg.slogdet(2 * np.pi * K)[1]
    )
    v = logN + lik.log_prob(y[0], F[:, 0]) + lik.log_prob(y[1], F[:, 1])
    v = v + np.log(np.outer(ww, ww).ravel())
    exact = v.max() + np.log(np.exp(v - v.max()).sum())
    res = ais_log_marginal_likelihood(
        K, y, lik, n_temperatures=200, n_chains=64, initial_sites=sites, random_state=4
    )
    assert res.log_Z == pytest.approx(exact, abs=0.03)
