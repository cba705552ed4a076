"""Student-t tilted moments when df is large (the near-Gaussian rule of StudentT)."""

import numpy as np
import pytest
from scipy import stats

import robustep.likelihoods.student_t as student_t_module
from robustep.likelihoods import StudentT


def _cases(n=60, seed=0):
    rng = np.random.default_rng(seed)
    scale = 10 ** rng.uniform(-2, 1, n)
    v = 10 ** rng.uniform(-4, 3, n)
    y = rng.choice([-1.0, 1.0], n) * 10 ** rng.uniform(-3, 1.3, n) * np.sqrt(v + scale**2)
    return y, np.zeros(n), v, scale


@pytest.mark.parametrize("df", [2100.0, 4000.0])
@pytest.mark.parametrize("power", [1.0, 0.5])
def test_near_gaussian_rule_matches_the_scale_mixture_rule_where_both_apply(df, power, monkeypatch):
    y, m, v, scale = _cases()
    for s in (0.01, 0.1, 0.5, 3.0):
        lik = StudentT(df, s)
        near = lik.tilted_moments(y, m, v, power)
        g_near = lik.tilted_log_Z_gradient(y, m, v, power)
        monkeypatch.setattr(student_t_module, "_LARGE_SHAPE", np.inf)
        mix = lik.tilted_moments(y, m, v, power)
        g_mix = lik.tilted_log_Z_gradient(y, m, v, power)
        monkeypatch.undo()
        np.testing.assert_allclose(near[0], mix[0], rtol=0, atol=1e-9)
        np.testing.assert_allclose(near[1], mix[1], rtol=0, atol=1e-9 * np.sqrt(mix[2]).max())
        np.testing.assert_allclose(near[2], mix[2], rtol=1e-8)
        np.testing.assert_allclose(g_near, g_mix, rtol=1e-6, atol=1e-8)


def test_huge_df_is_the_gaussian_convolution():
    y, m, v, _ = _cases(seed=1)
    s = 0.7
    mask = np.abs(y) < 5 * np.sqrt(v + s**2)  # r^4 / df corrections are negligible there
    y, m, v = y[mask], m[mask], v[mask]
    log_Z, mean, var = StudentT(1e9, s).tilted_moments(y, m, v)
    np.testing.assert_allclose(log_Z, stats.norm.logpdf(y, m, np.sqrt(v + s**2)), atol=1e-6)
    k = v / (v + s**2)
    np.testing.assert_allclose(mean, m + k * (y - m), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(var, v * s**2 / (v + s**2), rtol=1e-6)


@pytest.mark.parametrize("df", [1e4, 1e6, 1e8])
def test_extreme_inputs_stay_finite(df):
    """Narrow cavities far from the observation (the case that broke the mixture rule)."""
    y = np.array([0.0, 1.0, 10.0, 100.0, 1000.0, 0.5])
    for scale in (1e-4, 1e-2, 1.0, 10.0):
        for v in (1e-12, 1e-8, 1e-4, 1.0, 1e4):
            log_Z, mean, var = StudentT(df, scale).tilted_moments(y, np.zeros(6), np.full(6, v))
            assert np.all(np.isfinite(log_Z)) and np.all(np.isfinite(mean)) and np.all(var > 0)


def test_gradient_at_large_df_matches_finite_differences():
    y, m, v, _ = _cases(n=8, seed=2)
    df, s, h = 5e4, 0.3, 1e-5

    def log_Z(log_df, log_s):
        return StudentT(np.exp(log_df), np.exp(log_s)).tilted_moments(y, m, v)[0]

    g = StudentT(df, s).tilted_log_Z_gradient(y, m, v)
    fd_df = (log_Z(np.log(df) + h, np.log(s)) - log_Z(np.log(df) - h, np.log(s))) / (2 * h)
    fd_s = (log_Z(np.log(df), np.log(s) + h) - log_Z(np.log(df), np.log(s) - h)) / (2 * h)
    # FD in log df loses ~1e-6 to the cancellation of lgamma((df+1)/2) - lgamma(df/2)
    np.testing.assert_allclose(g[:, 0], fd_df, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(g[:, 1], fd_s, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("df", [1.05, 4.0, 100.0])
def test_extreme_cavities_fall_back_instead_of_failing(df):
    """Far outliers with tiny cavity variances broke the panel scheme (IndexError / NaN);
    those sites are redone by the near-Gaussian rule: the outlier is ignored."""
    lik = StudentT(df, 1.0)
    d = np.array([1e30, 1e150, 1e150, 1e30])
    v = np.array([1e-300, 1e-300, 1e-30, 1e-200])
    log_Z, mean, var = lik.tilted_moments(d, np.zeros(4), v)
    assert np.all(np.isfinite(log_Z))
    assert np.all(np.abs(mean) <= 1e-6 * np.sqrt(v))
    np.testing.assert_allclose(var, v, rtol=1e-6)
    assert np.all(np.isfinite(lik.tilted_log_Z_gradient(d, np.zeros(4), v)))


def test_subnormal_cavity_variance_gives_a_clear_error():
    with pytest.raises(FloatingPointError, match="not finite"):
        StudentT(4.0, 1.0).tilted_moments(np.array([1.0]), np.zeros(1), np.array([1e-320]))
