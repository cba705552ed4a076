"""Likelihood API: validation, derivatives (finite differences), limits, robustness.

Accuracy against numerical references lives in tests/likelihoods/test_likelihood_accuracy.py.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from robustep.likelihoods import Gaussian, Likelihood, Logistic, NoisyStep, Probit, StudentT

REGRESSION = [Gaussian(0.3), StudentT(4.0, 0.5), StudentT(0.7, 2.0)]
CLASSIFICATION = [Probit(), Logistic(), NoisyStep(0.0), NoisyStep(0.1)]
ALL = REGRESSION + CLASSIFICATION
SMOOTH = REGRESSION + [Probit(), Logistic()]  # log p has derivatives in f
LEARNABLE = [Gaussian(0.3), StudentT(4.0, 0.5), StudentT(0.7, 2.0)]


def _ids(liks):
    return [repr(lik) for lik in liks]


def _data(lik, n=12, seed=0, v_range=(-1.5, 0.5)):
    rng = np.random.default_rng(seed)
    if lik in CLASSIFICATION or isinstance(lik, (Probit, Logistic, NoisyStep)):
        y = rng.choice([-1.0, 1.0], n)
    else:
        y = rng.normal(size=n) * 2
    m = rng.normal(size=n) * 1.5
    v = 10.0 ** rng.uniform(*v_range, n)
    return y, m, v


# ------------------------------------------------------------------ API
def test_exports_and_protocol():
    for lik in ALL:
        assert isinstance(lik, Likelihood)
    assert Gaussian.hyperparameter_names == ("noise_variance",)
    assert StudentT.hyperparameter_names == ("df", "scale")
    for cls in (Probit, Logistic, NoisyStep):
        assert cls.hyperparameter_names == ()


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: Gaussian(0.0), "noise_variance"),
        (lambda: Gaussian(-1.0), "noise_variance"),
        (lambda: Gaussian(np.nan), "noise_variance"),
        (lambda: StudentT(df=0.0), "df"),
        (lambda: StudentT(df=-2.0), "df"),
        (lambda: StudentT(df=np.inf), "df"),
        (lambda: StudentT(scale=0.0), "scale"),
        (lambda: StudentT(scale=-1.0), "scale"),
        (lambda: NoisyStep(0.5), "epsilon"),
        (lambda: NoisyStep(-0.1), "epsilon"),
    ],
)
def test_constructor_validation(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@pytest.mark.parametrize("lik", CLASSIFICATION, ids=_ids(CLASSIFICATION))
def test_classification_targets(lik):
    y = lik.validate_targets([1, -1, -1.0, 1.0])
    assert y.dtype == float and y.shape == (4,)
    with pytest.raises(ValueError, match=r"-1 and \+1"):
        lik.validate_targets([0, 1, 1])
    with pytest.raises(ValueError, match=r"-1 and \+1"):
        lik.validate_targets([1.0, np.nan])
    with pytest.raises(ValueError, match="one-dimensional"):
        lik.validate_targets([[1, -1]])


@pytest.mark.parametrize("lik", REGRESSION, ids=_ids(REGRESSION))
def test_regression_targets(lik):
    assert np.array_equal(lik.validate_targets([0.5, -3, 2]), [0.5, -3.0, 2.0])
    with pytest.raises(ValueError, match="NaN or inf"):
        lik.validate_targets([0.5, np.inf])


@pytest.mark.parametrize("lik", ALL, ids=_ids(ALL))
@pytest.mark.parametrize("power", [0.0, -0.5, 1.5, np.nan, "a"])
def test_power_validation(lik, power):
    y, m, v = _data(lik, 3)
    with pytest.raises(ValueError, match="power"):
        lik.tilted_moments(y, m, v, power)


@pytest.mark.parametrize("lik", ALL, ids=_ids(ALL))
def test_cavity_validation(lik):
    y, m, v = _data(lik, 3)
    with pytest.raises(ValueError, match="cavity_var"):
        lik.tilted_moments(y, m, np.array([1.0, -1.0, 1.0]))
    with pytest.raises(ValueError, match="cavity_var"):
        lik.tilted_moments(y, m, np.array([1.0, 0.0, 1.0]))
    with pytest.raises(ValueError, match="cavity_mean"):
        lik.tilted_moments(y, np.array([np.nan, 0.0, 0.0]), v)


@pytest.mark.parametrize("lik", ALL, ids=_ids(ALL))
def test_shapes_and_no_mutation(lik):
    y, m, v = _data(lik, 7)
    f = m.copy()
    saved = [a.copy() for a in (y, m, v, f)]
    for power in (1.0, 0.5):
        out = lik.tilted_moments(y, m, v, power)
        assert all(o.shape == (7,) for o in out)
        g = lik.tilted_log_Z_gradient(y, m, v, power)
        assert g.shape == (7, len(lik.hyperparameter_names))
    assert lik.log_prob(y, f).shape == (7,)
    assert lik.log_prob_parameter_gradient(y, f).shape == (7, len(lik.hyperparameter_names))
    if lik in SMOOTH:
        assert all(d.shape == (7,) for d in lik.log_prob_derivatives(y, f))
    for a, b in zip((y, m, v, f), saved, strict=True):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("lik", ALL, ids=_ids(ALL))
def test_empty_input(lik):
    out = lik.tilted_moments(np.zeros(0), np.zeros(0), np.zeros(0))
    assert all(o.shape == (0,) for o in out)


def test_with_log_params_roundtrip():
    lik = StudentT(3.0, 0.2)
    new = lik.with_log_params(np.log([5.0, 0.7]))
    assert (new.df, new.scale) == pytest.approx((5.0, 0.7))
    assert (lik.df, lik.scale) == (3.0, 0.2)
    assert np.allclose(new.get_log_params(), np.log([5.0, 0.7]))


# ---------------------------------------------------------- consistency
@pytest.mark.parametrize("lik", ALL, ids=_ids(ALL))
@pytest.mark.parametrize("power", [1.0, 0.5, 0.1])
def test_tilted_moments_are_derivatives_of_log_Z(lik, power):
    """mean = m + v dlogZ/dm and var = v + v^2 d2logZ/dm2 (central differences)."""
    y, m, v = _data(lik, 10, seed=1)
    log_Z, mean, var = lik.tilted_moments(y, m, v, power)
    h = 1e-4 * np.sqrt(v)
    lp = lik.tilted_moments(y, m + h, v, power)[0]
    lm = lik.tilted_moments(y, m - h, v, power)[0]
    d1 = (lp - lm) / (2 * h)
    d2 = (lp - 2 * log_Z + lm) / h**2
    assert np.allclose(mean, m + v * d1, rtol=1e-6, atol=1e-6 * np.sqrt(v))
    assert np.allclose(var, v + v * v * d2, rtol=1e-3, atol=1e-3 * v)


@pytest.mark.parametrize("lik", SMOOTH, ids=_ids(SMOOTH))
def test_log_prob_derivatives_finite_differences(lik):
    rng = np.random.default_rng(2)
    y, _, _ = _data(lik, 15, seed=2)
    f = rng.normal(size=15) * 3
    logp, d1, d2, d3 = lik.log_prob_derivatives(y, f)
    assert np.allclose(logp, lik.log_prob(y, f))
    h = 1e-5
    up, dn = lik.log_prob_derivatives(y, f + h), lik.log_prob_derivatives(y, f - h)
    assert np.allclose(d1, (up[0] - dn[0]) / (2 * h), rtol=1e-6, atol=1e-8)
    assert np.allclose(d2, (up[1] - dn[1]) / (2 * h), rtol=1e-6, atol=1e-8)
    assert np.allclose(d3, (up[2] - dn[2]) / (2 * h), rtol=1e-5, atol=1e-7)


def test_student_t_second_derivative_can_be_positive():
    _, _, d2, _ = StudentT(4.0, 1.0).log_prob_derivatives(np.array([10.0]), np.array([0.0]))
    assert d2[0] > 0


def test_student_t_derivatives_at_huge_residuals_are_their_limits():
    """A residual whose square overflows (a diverged Laplace step) gives d1, d2, d3 -> 0,
    not inf / inf (they raised RuntimeWarnings in the full tgp-benchmark run)."""
    lik = StudentT(1.5, 0.1)
    f = np.array([1e200, -1e200, 1e155, 3.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, d1, d2, d3 = lik.log_prob_derivatives(np.zeros(4), f)
    assert np.all(d1[:3] == 0.0) and np.all(d2[:3] == 0.0) and np.all(d3[:3] == 0.0)
    # the ordinary case against the textbook form
    nu, c, r = 1.5, 1.5 * 0.01, -3.0
    q = c + r * r
    assert d2[3] == pytest.approx((nu + 1) * (r * r - c) / q**2, rel=1e-13)
    assert d3[3] == pytest.approx(2 * (nu + 1) * r * (r * r - 3 * c) / q**3, rel=1e-13)


def test_student_t_derivatives_at_a_huge_scale_are_their_limits():
    """A trial sigma whose square overflows (an L-BFGS step with log sigma unbounded
    above: the 24 RuntimeWarnings of the 2026-11-24 full tgp-benchmark run, raised in the
    Laplace searches) gives log p finite and d1, d2, d3 -> 0, not inf / inf, also where
    the residual's square overflows as well."""
    f = np.array([0.1, 1e200, -0.5])
    for scale in (1e160, 1e200):
        lik = StudentT(4.0, scale)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            logp, d1, d2, d3 = lik.log_prob_derivatives(np.zeros(3), f)
        assert np.all(np.isfinite(logp))
        assert np.all(d1 == 0.0) and np.all(d2 == 0.0) and np.all(d3 == 0.0)
        np.testing.assert_allclose(logp, lik.log_prob(np.zeros(3), f), rtol=1e-14)


def test_probit_derivatives_far_tail_are_finite():
    f = np.array([-1e6, -1e3, -40.0, -5.1, -4.9, 0.0, 40.0, 1e6])
    for d in Probit().log_prob_derivatives(np.ones(8), f):
        assert np.all(np.isfinite(d))
    _, d1, d2, _ = Probit().log_prob_derivatives(np.ones(8), f)
    assert np.allclose(d1[:2], -f[:2], rtol=1e-5)  # r ~ -z
    assert np.allclose(d2[:2], -1.0, rtol=1e-5)


def _fd_log_params(func, lik, h=1e-5):
    theta = lik.get_log_params()
    cols = []
    for j in range(theta.size):
        e = np.zeros_like(theta)
        e[j] = h
        cols.append(
            (func(lik.with_log_params(theta + e)) - func(lik.with_log_params(theta - e))) / (2 * h)
        )
    return np.stack(cols, axis=1)


@pytest.mark.parametrize("lik", LEARNABLE, ids=_ids(LEARNABLE))
def test_log_prob_parameter_gradient_finite_differences(lik):
    rng = np.random.default_rng(3)
    y, f = rng.normal(size=10) * 2, rng.normal(size=10)
    g = lik.log_prob_parameter_gradient(y, f)
    fd = _fd_log_params(lambda L: L.log_prob(y, f), lik)
    assert np.allclose(g, fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("lik", LEARNABLE, ids=_ids(LEARNABLE))
@pytest.mark.parametrize("power", [1.0, 0.8, 0.1])
@pytest.mark.parametrize("v_range", [(-1.5, 0.5), (-6, 6)])
def test_tilted_log_Z_gradient_finite_differences(lik, power, v_range):
    y, m, v = _data(lik, 20, seed=4, v_range=v_range)
    m = y - (y - m) * 10.0 ** np.random.default_rng(5).uniform(-2, 2, 20)
    g = lik.tilted_log_Z_gradient(y, m, v, power)
    fd = _fd_log_params(lambda L: L.tilted_moments(y, m, v, power)[0], lik, h=1e-4)
    assert np.allclose(g, fd, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- limits
POSITIVE = [lik for lik in ALL if not (isinstance(lik, NoisyStep) and lik.epsilon == 0)]


@pytest.mark.parametrize("lik", POSITIVE, ids=_ids(POSITIVE))
def test_power_to_zero_gives_the_cavity(lik):
    # p^eta -> 1 where p > 0 (not for the hard step, eps = 0: 0^eta = 0 for every eta)
    y, m, v = _data(lik, 8, seed=6)
    log_Z, mean, var = lik.tilted_moments(y, m, v, 1e-9)
    assert np.allclose(log_Z, 0.0, atol=1e-6)
    assert np.allclose(mean, m, atol=1e-6 * np.sqrt(v))
    assert np.allclose(var, v, rtol=1e-6)


@pytest.mark.parametrize("lik", ALL, ids=_ids(ALL))
def test_power_is_continuous_at_one(lik):
    # the closed form / quadrature switch at power 1 (probit) must not jump
    y, m, v = _data(lik, 8, seed=7)
    a = lik.tilted_moments(y, m, v, 1.0)
    b = lik.tilted_moments(y, m, v, 1.0 - 1e-9)
    for x1, x2 in zip(a, b, strict=True):
        assert np.allclose(x1, x2, rtol=1e-7, atol=1e-7)


def test_narrow_cavity_limit_is_the_likelihood():
    # v -> 0: log Z -> power * log p(y | m), mean -> m
    for lik in SMOOTH:
        y, m, _ = _data(lik, 6, seed=8)
        v = np.full(6, 1e-10)
        for power in (1.0, 0.5):
            log_Z, mean, var = lik.tilted_moments(y, m, v, power)
            assert np.allclose(log_Z, power * lik.log_prob(y, m), rtol=1e-6, atol=1e-6)
            assert np.allclose(mean, m, atol=1e-6)
            assert np.allclose(var, v, rtol=1e-4)


def test_noisy_step_epsilon_zero_is_a_step():
    from scipy.special import log_ndtr

    y, m, v = _data(Probit(), 10, seed=9)
    for power in (1.0, 0.3):
        log_Z, _, _ = NoisyStep(0.0).tilted_moments(y, m, v, power)
        assert np.allclose(log_Z, log_ndtr(y * m / np.sqrt(v)), rtol=1e-13)
    # the probit with a vanishing noise scale tends to the step: Probit(f / s) with s -> 0
    s = 1e-4
    lz_p, mu_p, var_p = Probit().tilted_moments(y, m / s, v / s**2)
    lz_s, mu_s, var_s = NoisyStep(0.0).tilted_moments(y, m, v)
    assert np.allclose(lz_p, lz_s, atol=1e-6)
    assert np.allclose(mu_p * s, mu_s, atol=1e-5)
    assert np.allclose(var_p * s**2, var_s, rtol=1e-4)


def test_gaussian_student_t_large_df_limit():
    y, m, v = _data(Gaussian(1.0), 10, seed=10)
    a = StudentT(1e7, 0.4).tilted_moments(y, m, v, 0.5)
    b = Gaussian(0.16).tilted_moments(y, m, v, 0.5)
    for x1, x2 in zip(a, b, strict=True):  # the t differs from the Gaussian by O(r^2/df)
        assert np.allclose(x1, x2, rtol=1e-4, atol=1e-5)


# -------------------------------------------------------------- robustness
@pytest.mark.parametrize("lik", ALL, ids=_ids(ALL))
@pytest.mark.parametrize("power", [1.0, 0.5, 0.1])
def test_extreme_inputs_never_nan(lik, power):
    rng = np.random.default_rng(11)
    n = 400
    v = 10.0 ** rng.uniform(-6, 6, n)
    m = rng.choice([-1.0, 1.0], n) * 10.0 ** rng.uniform(-3, 3, n)
    if isinstance(lik, (Probit, Logistic, NoisyStep)):
        y = rng.choice([-1.0, 1.0], n)
    else:
        y = m + rng.choice([-1.0, 1.0], n) * 10.0 ** rng.uniform(-3, 3, n)
    log_Z, mean, var = lik.tilted_moments(y, m, v, power)
    for arr in (log_Z, mean, var):
        assert np.all(np.isfinite(arr))
    assert np.all(var > 0)
    if isinstance(lik, (Gaussian, Probit, Logistic)):  # log-concave: the variance shrinks
        assert np.all(var <= v * (1 + 1e-9))
    assert np.all(log_Z <= 1e-10) or not isinstance(lik, (Probit, Logistic, NoisyStep))


def test_student_t_blocks_agree_with_single_sites():
    rng = np.random.default_rng(12)
    n = 2500  # spans several internal blocks
    y = rng.normal(size=n)
    m = y + rng.normal(size=n) * 10
    v = 10.0 ** rng.uniform(-3, 3, n)
    lik = StudentT(3.0, 0.5)
    full = lik.tilted_moments(y, m, v, 0.8)
    idx = rng.choice(n, 20, replace=False)
    for i in idx:
        one = lik.tilted_moments(y[i : i + 1], m[i : i + 1], v[i : i + 1], 0.8)
        for a, b in zip(full, one, strict=True):
            assert a[i] == pytest.approx(b[0], rel=1e-12, abs=1e-300)


def test_student_t_accepts_broadcastable_and_list_inputs():
    lik = StudentT(4.0, 1.0)
    a = lik.tilted_moments([0.0, 1.0], 0.5, [1.0, 2.0])
    b = lik.tilted_moments(np.array([0.0, 1.0]), np.array([0.5, 0.5]), np.array([1.0, 2.0]))
    for x1, x2 in zip(a, b, strict=True):
        assert np.array_equal(x1, x2)


@pytest.mark.parametrize("lik", ALL, ids=_ids(ALL))
def test_bad_targets_in_tilted_moments_raise(lik):
    y, m, v = _data(lik, 3)
    y = y.copy()
    y[1] = np.nan
    with pytest.raises(ValueError):
        lik.tilted_moments(y, m, v)
    if lik in CLASSIFICATION:
        with pytest.raises(ValueError, match=r"-1 or \+1"):
            lik.tilted_moments(np.array([1.0, 0.0, 1.0]), m, v)
