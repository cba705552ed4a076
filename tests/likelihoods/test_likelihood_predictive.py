"""The likelihood protocol: hyperparameter gradients, and the predictive of a new observation."""

import numpy as np
import pytest
from scipy import integrate, optimize, special, stats

import robustep
from robustep.likelihoods import Gaussian, Laplace, Likelihood, StudentT, predictive_mixture
from robustep.likelihoods.student_t import student_t_noise
from robustep.quadrature import gamma_scale_mixture_nodes


class _Fixed(Likelihood):
    """A toy likelihood without hyperparameters (N(y | f, 1))."""

    def tilted_moments(self, y, cavity_mean, cavity_var, power=1.0):
        return Gaussian(1.0).tilted_moments(y, cavity_mean, cavity_var, power)

    def log_prob(self, y, f):
        return Gaussian(1.0).log_prob(y, f)


def test_hyperparameters_without_gradients_are_refused_at_class_creation():
    with pytest.raises(TypeError) as err:

        class NoGradients(_Fixed):
            hyperparameter_names = ("width",)

    msg = str(err.value)
    assert "NoGradients" in msg and "width" in msg
    assert "tilted_log_Z_gradient" in msg and "log_prob_parameter_gradient" in msg

    with pytest.raises(TypeError, match="does not implement log_prob_parameter_gradient;"):

        class HalfGradients(_Fixed):
            hyperparameter_names = ("width",)

            def tilted_log_Z_gradient(self, y, cavity_mean, cavity_var, power=1.0):
                return np.zeros((np.size(cavity_mean), 1))


def test_likelihoods_without_hyperparameters_keep_empty_gradients():
    lik = _Fixed()
    assert lik.tilted_log_Z_gradient([0.0, 1.0], [0.0, 0.0], [1.0, 1.0]).shape == (2, 0)
    assert lik.log_prob_parameter_gradient([0.0, 1.0], [0.0, 0.0]).shape == (2, 0)

    class WithGradients(_Fixed):  # declaring and implementing is accepted
        hyperparameter_names = ("width",)

        def tilted_log_Z_gradient(self, y, cavity_mean, cavity_var, power=1.0):
            return np.zeros((np.size(cavity_mean), 1))

        def log_prob_parameter_gradient(self, y, f):
            return np.zeros((np.size(f), 1))

    assert WithGradients.hyperparameter_names == ("width",)


def test_default_predictive_uses_tilted_normaliser_and_refuses_cdf():
    lik = _Fixed()
    y, m, v = np.array([0.5, -2.0]), np.array([0.0, 1.0]), np.array([0.3, 2.0])
    np.testing.assert_allclose(
        lik.predictive_log_density(y, m, v), stats.norm.logpdf(y, m, np.sqrt(v + 1.0)), rtol=1e-13
    )
    with pytest.raises(NotImplementedError, match="predictive CDF"):
        lik.predictive_cdf(y, m, v)


def test_gaussian_predictive_closed_forms():
    lik = Gaussian(noise_variance=0.4)
    y, m, v = np.array([0.5, -2.0, 3.0]), np.array([0.0, 1.0, 3.5]), np.array([0.3, 2.0, 0.0])
    sd = np.sqrt(v + 0.4)
    np.testing.assert_allclose(lik.predictive_log_density(y, m, v), stats.norm.logpdf(y, m, sd))
    np.testing.assert_allclose(lik.predictive_cdf(y, m, v), stats.norm.cdf(y, m, sd))
    np.testing.assert_allclose(lik.predictive_cdf(y, m, v, upper=True), stats.norm.sf(y, m, sd))
    q = np.array([0.01, 0.5, 0.975])
    closed = lik.predictive_quantiles(q, m, v)
    np.testing.assert_allclose(closed, stats.norm.ppf(q[None], m[:, None], sd[:, None]))
    # the generic root finder of the base class reaches the closed form (its step
    # tolerance is 1e-10 (1 + bracket width))
    generic = Likelihood.predictive_quantiles(lik, q, m, v)
    np.testing.assert_allclose(generic, closed, rtol=1e-10, atol=1e-9)


def _student_t_convolved_cdf(y, m, v, df, s):
    def integrand(f):
        return stats.t.cdf((y - f) / s, df) * stats.norm.pdf(f, m, np.sqrt(v))

    sd = np.sqrt(v)
    return integrate.quad(integrand, m - 12 * sd, m + 12 * sd, epsabs=0, epsrel=1e-11)[0]


def test_student_t_predictive_against_quadrature_and_config():
    lik = StudentT(df=3.0, scale=0.4)
    y, m, v = np.array([0.2, 3.0, -1.5]), np.array([0.0, 0.5, 0.0]), np.array([0.5, 0.1, 2.0])
    F = lik.predictive_cdf(y, m, v)
    ref = [_student_t_convolved_cdf(*a, 3.0, 0.4) for a in zip(y, m, v, strict=True)]
    np.testing.assert_allclose(F, ref, rtol=1e-6)
    np.testing.assert_allclose(F + lik.predictive_cdf(y, m, v, upper=True), 1.0, rtol=1e-12)
    # the density of the quadrature is the CDF's derivative
    h = 1e-5
    _, p = lik.predictive_cdf_and_density(y, m, v)
    fd = (lik.predictive_cdf(y + h, m, v) - lik.predictive_cdf(y - h, m, v)) / (2 * h)
    np.testing.assert_allclose(p, fd, rtol=1e-7)
    # the node count is a setting: 4 nodes are visibly coarser than the default 96
    with robustep.config(student_t_predictive_nodes=4):
        coarse = lik.predictive_cdf(y, m, v)
    assert np.max(np.abs(coarse - ref)) > 1e-4


def test_student_t_mixture_matches_a_direct_scale_mixture_and_brentq():
    """The mixture quantiles are the roots of sum_j w_j E_lambda[Phi(...)] (96 nodes)."""
    dfs, scales, w = [1.5, 4.0, np.inf], [0.3, 0.5, 0.2], np.array([0.2, 0.5, 0.3])
    M = np.array([[0.0, 1.0], [0.5, -1.0], [-0.2, 0.0]])
    V = np.array([[0.2, 1.0], [0.05, 0.5], [0.3, 0.1]])

    def cdf(x, i):
        total = 0.0
        for j in range(3):
            lam, wk = gamma_scale_mixture_nodes(dfs[j], 96)
            sd = np.sqrt(V[j, i] + scales[j] ** 2 / lam)
            total += w[j] * (special.ndtr((x - M[j, i]) / sd) @ wk)
        return total

    mix = predictive_mixture([student_t_noise(d, s) for d, s in zip(dfs, scales, strict=True)],
                             M, V, w)  # fmt: skip
    q = [0.025, 0.5, 0.95]
    Q = mix.quantiles(q)
    for i in range(2):
        for k, qk in enumerate(q):
            root = optimize.brentq(lambda x, i=i, qk=qk: cdf(x, i) - qk, -50, 50, xtol=1e-14)
            assert Q[i, k] == pytest.approx(root, abs=1e-9)
        assert mix.cdf(np.array([0.3, 0.3]))[i] == pytest.approx(cdf(0.3, i), rel=1e-14)


def test_mixture_weights_per_point_and_log_density():
    liks = [Laplace(0.5), Gaussian(0.3)]
    M = np.array([[0.0, 1.0, 2.0], [0.5, 0.5, -1.0]])
    V = np.array([[0.2, 0.4, 0.1], [1.0, 0.2, 0.3]])
    w = np.array([0.25, 0.75])
    y = np.array([0.1, 2.0, -0.5])
    a = predictive_mixture(liks, M, V, w)
    b = predictive_mixture(liks, M, V, np.repeat(w[:, None], 3, axis=1))
    np.testing.assert_allclose(a.cdf(y), b.cdf(y), rtol=1e-15)
    np.testing.assert_allclose(a.quantiles([0.1, 0.9]), b.quantiles([0.1, 0.9]), rtol=1e-15)
    dens = sum(wj * np.exp(lik.predictive_log_density(y, m, v))
               for lik, m, v, wj in zip(liks, M, V, w, strict=True))  # fmt: skip
    np.testing.assert_allclose(a.log_density(y), np.log(dens), rtol=1e-13)
    np.testing.assert_allclose(b.log_density(y), np.log(dens), rtol=1e-13)
    F = sum(wj * lik.predictive_cdf(y, m, v) for lik, m, v, wj in zip(liks, M, V, w, strict=True))
    np.testing.assert_allclose(a.cdf(y), F, rtol=1e-15)
    # weights normalised: (1, 3) gives the same as (0.25, 0.75)
    np.testing.assert_allclose(predictive_mixture(liks, M, V, [1.0, 3.0]).cdf(y), F, rtol=1e-15)
    # per-point weights change the mixture point by point
    W = np.array([[1.0, 0.0, 0.5], [0.0, 1.0, 0.5]])
    c = predictive_mixture(liks, M, V, W).cdf(y)
    expect = [liks[0].predictive_cdf(y, M[0], V[0])[0], liks[1].predictive_cdf(y, M[1], V[1])[1],
              0.5 * (liks[0].predictive_cdf(y, M[0], V[0])[2]
                     + liks[1].predictive_cdf(y, M[1], V[1])[2])]  # fmt: skip
    np.testing.assert_allclose(c, expect, rtol=1e-15)
    with pytest.raises(ValueError, match="same J components"):
        predictive_mixture(liks[:1], M, V)


def test_regressor_predictive_is_the_likelihood_mixture():
    from sklearn.gaussian_process.kernels import RBF

    from robustep.estimators.student_t_regressor import (
        StudentTGPRegressor,
        student_t_gaussian_quantiles,
    )

    rng = np.random.default_rng(0)
    X = rng.uniform(0, 4, size=(25, 1))
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(25)
    reg = StudentTGPRegressor(RBF(1.0), df=4.0, scale=0.3, optimizer=None).fit(X, y)
    Xt = np.linspace(0, 4, 5)[:, None]
    mix = reg._predictive_mixture(Xt)
    lo, hi = reg.predict_interval(Xt, coverage=0.9)
    probs = [0.5 * (1.0 - 0.9), 0.5 * (1.0 + 0.9)]  # as predict_interval forms them
    Q = mix.quantiles(probs) * reg._y_std + reg._y_mean
    np.testing.assert_array_equal(lo, Q[:, 0])
    np.testing.assert_array_equal(hi, Q[:, 1])
    ys = (np.cos(Xt[:, 0]) - reg._y_mean) / reg._y_std
    np.testing.assert_allclose(
        reg.predict_log_density(Xt, np.cos(Xt[:, 0])),
        mix.log_density(ys) - np.log(reg._y_std),
        rtol=1e-14,
    )
    # the public quantile function gives the same numbers from (means, variances, df, scale)
    M, V = reg._component_moments(Xt)
    np.testing.assert_array_equal(
        student_t_gaussian_quantiles(probs, M, V, [reg.df_], [reg.scale_]),
        mix.quantiles(probs),
    )
