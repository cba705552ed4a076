"""Tests of robustep.families.gaussian: natural <-> moment parameters and the EP cavity."""

import numpy as np
import pytest

from robustep.families.gaussian import cavity, log_normal_pdf, to_moments, to_natural


def test_round_trip():
    rng = np.random.default_rng(0)
    mean = rng.normal(scale=10, size=50)
    var = np.exp(rng.uniform(-12, 12, 50))
    prec, shift = to_natural(mean, var)
    np.testing.assert_allclose(prec, 1 / var)
    np.testing.assert_allclose(shift, mean / var)
    m2, v2 = to_moments(prec, shift)
    np.testing.assert_allclose(m2, mean, rtol=1e-13, atol=1e-300)
    np.testing.assert_allclose(v2, var, rtol=1e-14)


def test_negative_precision_round_trip_and_scalars():
    # a site with negative precision is still a valid (improper) natural parameter pair
    m, v = to_moments(-2.0, 3.0)
    assert m == pytest.approx(-1.5) and v == pytest.approx(-0.5)
    p, s = to_natural(m, v)
    assert p == pytest.approx(-2.0) and s == pytest.approx(3.0)
    p, s = to_natural([1.0], [4.0])
    assert p.shape == (1,) and s.shape == (1,)


def test_product_and_division_are_addition_and_subtraction():
    """Product of N(a, va) N(b, vb) has the natural parameters summed."""
    x = np.linspace(-6, 6, 20001)
    ma, va, mb, vb = 0.3, 0.7, -1.1, 2.5
    dens = np.exp(log_normal_pdf(x, ma, va) + log_normal_pdf(x, mb, vb))
    dx = x[1] - x[0]
    Z = dens.sum() * dx
    mean = (x * dens).sum() * dx / Z
    var = ((x - mean) ** 2 * dens).sum() * dx / Z
    pa, sa = to_natural(ma, va)
    pb, sb = to_natural(mb, vb)
    m, v = to_moments(pa + pb, sa + sb)
    assert mean == pytest.approx(m, abs=1e-8)
    assert var == pytest.approx(v, rel=1e-7)


def test_log_normal_pdf():
    from scipy.stats import norm

    x = np.array([-1.0, 0.0, 2.5])
    np.testing.assert_allclose(log_normal_pdf(x, 0.5, 2.0), norm.logpdf(x, 0.5, np.sqrt(2.0)))


@pytest.mark.parametrize("power", [1.0, 0.5, 0.1])
def test_cavity_matches_definition(power):
    rng = np.random.default_rng(1)
    n = 20
    site_prec = rng.uniform(-0.2, 2.0, n)
    site_shift = rng.normal(size=n)
    cav_prec_true = rng.uniform(0.1, 3.0, n)
    cav_shift_true = rng.normal(size=n)
    # q = cavity * site^power
    post_prec = cav_prec_true + power * site_prec
    post_var = 1 / post_prec
    post_mean = (cav_shift_true + power * site_shift) * post_var
    args = (post_mean.copy(), post_var.copy(), site_prec.copy(), site_shift.copy())
    cm, cv, cp = cavity(post_mean, post_var, site_prec, site_shift, power=power)
    np.testing.assert_allclose(cp, cav_prec_true, rtol=1e-10)
    np.testing.assert_allclose(cv, 1 / cav_prec_true, rtol=1e-10)
    np.testing.assert_allclose(cm, cav_shift_true / cav_prec_true, rtol=1e-9, atol=1e-12)
    for a, b in zip(args, (post_mean, post_var, site_prec, site_shift), strict=True):
        np.testing.assert_array_equal(a, b)  # inputs not mutated


def test_cavity_power_default_is_one():
    cm1, cv1, cp1 = cavity(np.array([0.2]), np.array([0.5]), np.array([1.0]), np.array([0.3]))
    cm2, cv2, cp2 = cavity(
        np.array([0.2]), np.array([0.5]), np.array([1.0]), np.array([0.3]), power=1.0
    )
    np.testing.assert_array_equal([cm1, cv1, cp1], [cm2, cv2, cp2])
    assert cp1[0] == pytest.approx(1.0)
    assert cm1[0] == pytest.approx(0.4 - 0.3)


def test_invalid_cavity_placeholders():
    post_mean = np.array([0.5, -1.0, 2.0, 0.0])
    post_var = np.array([0.5, 0.5, 0.25, 1.0])
    site_prec = np.array([1.0, 2.0, 10.0, 4.0])  # cavity precision 1, 0, -6, -3
    site_shift = np.array([0.1, 0.2, 0.3, 0.4])
    with np.errstate(all="raise"):
        cm, cv, cp = cavity(post_mean, post_var, site_prec, site_shift)
    np.testing.assert_allclose(cp, [1.0, 0.0, -6.0, -3.0])
    assert np.all(np.isfinite(cm)) and np.all(np.isfinite(cv))
    # invalid entries: placeholders equal to the posterior moments
    np.testing.assert_array_equal(cm[1:], post_mean[1:])
    np.testing.assert_array_equal(cv[1:], post_var[1:])
    assert cv[0] == pytest.approx(1.0)
    assert cm[0] == pytest.approx(0.5 / 0.5 - 0.1)
    # with power 0.25 the third cavity becomes valid: 4 - 2.5 > 0
    cm, cv, cp = cavity(post_mean, post_var, site_prec, site_shift, power=0.25)
    assert cp[2] == pytest.approx(1.5)
    assert cv[2] == pytest.approx(1 / 1.5)
    assert cm[2] == pytest.approx((2.0 / 0.25 - 0.25 * 0.3) / 1.5)
