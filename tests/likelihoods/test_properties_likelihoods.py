"""Property-based tests of the likelihoods' tilted moments.

For random finite cavities -- means up to +-1e6, variances 1e-12 ... 1e12 -- random
powers in (0, 1] and every likelihood in robustep.likelihoods, ``tilted_moments``
returns a finite log Z, a finite mean and a finite, positive variance that agree with a
dense log-space trapezoid integration (``_reference_likelihoods.dense_tilted_moments``,
itself accurate to about 3e-6) to ``TOL`` = 2e-5:

* |log Z - log Z_ref| <= TOL + 1e-10 |log Z_ref|  (relative error of Z; the second term
  allows for rounding when log Z is very negative, e.g. -2.5e5 = a Gaussian 700 sds off,
  whose log-densities are summed in double precision),
* |mean - mean_ref| <= TOL sd_ref + 1e-13 (|mean_ref| + |m|)  (in tilted sds, plus
  rounding of a mean 1e6 that is known to 1e-6),
* |var / var_ref - 1| <= TOL.

The limits power -> 1, nu -> infinity (Student-t -> Gaussian) and epsilon -> 0
(noisy step) hold to the same tolerance.  The default run draws a few examples per
test (profile "default", tests/_hypothesis_profiles.py); the slow-marked copies draw
many more (``HYPOTHESIS_PROFILE=slow pytest -m slow
tests/likelihoods/test_properties_likelihoods.py``).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import _hypothesis_profiles as profiles
from _reference_likelihoods import dense_tilted_moments
from robustep.likelihoods import Gaussian, Logistic, NoisyStep, Probit, StudentT

TOL = 2e-5  # production (<= 1e-6, test_likelihood_accuracy.py) + reference (~3e-6)


def _log_uniform(lo, hi):
    return st.floats(lo, hi).map(lambda e: float(10.0**e))


likelihoods = st.one_of(
    _log_uniform(-4, 4).map(Gaussian),
    st.just(Probit()),
    st.just(Logistic()),
    st.floats(0.0, 0.45).map(NoisyStep),
    st.tuples(_log_uniform(np.log10(0.5), 4), _log_uniform(-2, 2)).map(lambda a: StudentT(*a)),
)
signed_magnitudes = st.one_of(
    st.just(0.0),
    st.tuples(st.sampled_from([-1.0, 1.0]), _log_uniform(-6, 6)).map(lambda a: a[0] * a[1]),
)
powers = st.one_of(st.just(1.0), st.floats(1e-3, 1.0))


@st.composite
def cases(draw):
    lik = draw(likelihoods)
    if isinstance(lik, (Gaussian, StudentT)):
        y = draw(st.floats(-100.0, 100.0))
    else:
        y = draw(st.sampled_from([-1.0, 1.0]))
    return lik, y, draw(signed_magnitudes), draw(_log_uniform(-12, 12)), draw(powers)


def _moments(lik, y, m, v, eta):
    out = lik.tilted_moments(np.array([y]), np.array([m]), np.array([v]), eta)
    return tuple(float(a[0]) for a in out)


def _assert_close(got, ref, m, what):
    log_Z, mean, var = got
    r_log_Z, r_mean, r_var = ref
    assert abs(log_Z - r_log_Z) <= TOL + 1e-10 * abs(r_log_Z), (what, got, ref)
    assert abs(mean - r_mean) <= TOL * np.sqrt(r_var) + 1e-13 * (abs(r_mean) + abs(m)), (
        what,
        got,
        ref,
    )
    assert abs(var / r_var - 1.0) <= TOL, (what, got, ref)


def _check_against_reference(case):
    lik, y, m, v, eta = case
    got = _moments(lik, y, m, v, eta)
    assert all(np.isfinite(got)), (case, got)
    assert got[2] > 0, (case, got)
    _assert_close(got, dense_tilted_moments(lik, y, m, v, eta), m, case)


def _check_limits(case):
    lik, y, m, v, eta = case
    # power -> 1: continuity at the standard-EP end of (0, 1] (closed forms at power 1,
    # quadrature below); d log Z / d power = E[log p] ~ log Z, so the step is tiny
    _assert_close(_moments(lik, y, m, v, 1.0 - 1e-13), _moments(lik, y, m, v, 1.0), m, "power")
    r = (abs(y - m) + 40.0 * np.sqrt(v)) / lik.scale if isinstance(lik, StudentT) else 0.0
    if isinstance(lik, StudentT) and r <= 1e2:  # nu -> infinity: Gaussian, variance scale^2
        # the distance is O(r^4 / (nu s^4)) for residuals r up to |y - m| + 40 sqrt(v).
        # Known limitation: for nu >~ 1e19 the near-Gaussian rule's mean drifts (5e-5 tilted
        # sds at nu = 1e19, r = 560; 0.9% at nu = 1e28, r = 1e5; log Z stays exact), so
        # residuals beyond 100 scales (nu up to 1e16) are not checked here.
        big = StudentT(max(1e15, 1e8 * r**4), lik.scale)
        gauss = Gaussian(lik.scale**2)
        _assert_close(_moments(big, y, m, v, eta), _moments(gauss, y, m, v, eta), m, "nu")
    if isinstance(lik, NoisyStep):  # epsilon -> 0: the noiseless step
        # p^eta = eps^eta + ((1 - eps)^eta - eps^eta) Theta: a mixture with weight
        # w ~ eps^eta / Z_step on the cavity, which moves the variance by about
        # w (1 + (m - mean_step)^2 / var_step) relative; checked where that is < TOL / 2
        eps = max(10.0 ** (-12.0 / eta), 1e-300)
        step = _moments(NoisyStep(0.0), y, m, v, eta)
        w = np.exp(eta * np.log(eps) - step[0])
        if w * (1.0 + v / step[2] + (m - step[1]) ** 2 / step[2]) < 0.5 * TOL:
            _assert_close(_moments(NoisyStep(eps), y, m, v, eta), step, m, "epsilon")


def test_reference_matches_closed_forms():
    """The dense reference reproduces the Gaussian and probit (power 1) closed forms."""
    rng = np.random.default_rng(0)
    for _ in range(8):
        m = rng.choice([-1.0, 1.0]) * 10.0 ** rng.uniform(-3, 6)
        v = 10.0 ** rng.uniform(-12, 12)
        y = rng.uniform(-100, 100)
        s2 = 10.0 ** rng.uniform(-4, 4)
        eta = rng.uniform(0.01, 1.0)
        # Gaussian: N(y | f, s2)^eta N(f | m, v) is Gaussian in f
        a = s2 / eta
        exact_var = 1.0 / (1.0 / v + 1.0 / a)
        exact_mean = exact_var * (m / v + y / a)
        exact_log_Z = (
            -0.5 * np.log(2 * np.pi * (v + a)) - 0.5 * (y - m) ** 2 / (v + a)
            - 0.5 * eta * np.log(2 * np.pi * s2) + 0.5 * np.log(2 * np.pi * a)
        )  # fmt: skip
        ref = dense_tilted_moments(Gaussian(s2), y, m, v, eta)
        _assert_close((exact_log_Z, exact_mean, exact_var), ref, m, "gaussian reference")
    # probit, power 1: Z = Phi(z), z = y m / sqrt(1 + v)
    from scipy.special import log_ndtr

    for m in (-30.0, -3.0, 2.0):
        for v in (1e-6, 1e4):
            z = m / np.sqrt(1.0 + v)
            r_log_Z = dense_tilted_moments(Probit(), 1.0, m, v, 1.0)[0]
            assert abs(r_log_Z - float(log_ndtr(z))) <= 2e-6 * max(1.0, abs(r_log_Z))


@given(cases())
def test_tilted_moments_finite_and_match_dense_integration(case):
    _check_against_reference(case)


@given(cases())
def test_tilted_moment_limits(case):
    _check_limits(case)


@pytest.mark.slow
@settings(max_examples=profiles.SLOW_EXAMPLES * 5)
@given(cases())
def test_tilted_moments_match_dense_integration_many(case):
    _check_against_reference(case)
    _check_limits(case)


@pytest.mark.parametrize(
    "case",
    [
        # cavity far on the wrong side: a near-half-Gaussian piled against the switch
        (Logistic(), -1.0, 1e6, 1e6, 1.0),
        (Logistic(), -1.0, 1e5, 1e5, 1.0),
        (Logistic(), 1.0, -1e5, 1e8, 0.5),
        (Probit(), -1.0, 1e4, 1e5, 0.5),
        # a bump ~10 of its widths from the switch (level interval reaches the switch)
        (Logistic(), 1.0, -1e4, 1e6, 1e-3),
        # cavity far on the label's side: a bump narrow against its distance from the switch
        (Logistic(), 1.0, 7e5, 1e10, 1.0),
        (Probit(), -1.0, -5e5, 1e10, 0.3),
    ],
)
def test_classification_quadrature_wide_cavity(case):
    _check_against_reference(case)


def test_probit_power_limit_wide_cavity():
    _check_limits((Probit(), -1.0, 1e4, 1e5, 1.0))


@pytest.mark.parametrize("v", [10.0**-10.5, 1e-6, 1.0, 10.0])
def test_probit_fractional_far_tail_cavity(v):
    """log Phi ~ -5e11 at the cavity: its rounding must not perturb the node weights."""
    _check_limits((Probit(), -1.0, 1e6, v, 1.0))
    _check_against_reference((Probit(), -1.0, 1e6, v, 0.5))
