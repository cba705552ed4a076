"""Probit (cumulative Gaussian) classification likelihood p(y | f) = Phi(y f), y in {-1, +1}."""

from __future__ import annotations

import numpy as np
from scipy.special import erfcx, log_ndtr

from robustep.likelihoods.base import (
    Likelihood,
    as_site_arrays,
    check_binary_targets,
    check_cavity,
    check_power,
)
from robustep.quadrature import log_switch_likelihood_moments

_LOG_SQRT_2PI = 0.5 * np.log(2.0 * np.pi)
_SQRT2 = np.sqrt(2.0)
_Z_SWITCH = -5.0  # below this, use the continued fraction for the inverse Mills ratio
_CF_TERMS = 60


def _mills_continued_fraction(w):
    """Tails T1, T2 of the continued fraction of the Mills ratio for w = -z > 0.

    Phi(-w)/phi(w) = 1/(w + T1), T_k = k/(w + T_{k+1})  (Laplace's continued fraction),
    so the inverse Mills ratio is r = phi(z)/Phi(z) = w + T1 and
    1 - r (z + r) = T1 (T2 - T1) without cancellation.
    """
    t = np.zeros_like(w)
    t2 = t
    for k in range(_CF_TERMS, 0, -1):  # loop over terms, not over data
        t2 = t
        t = k / (w + t)
    return t, t2


def log_ndtr_ratio(z):
    """Stable ``(log Phi(z), r, delta)`` with r = phi(z)/Phi(z) and delta = 1 - r (z + r).

    ``delta`` (in (0, 1]) is the variance of N(0, 1) truncated to x > -z; for z < -5 it is
    computed from the continued fraction, where the textbook formula cancels
    catastrophically (delta ~ 1/z^2).  Shapes follow ``z``.
    """
    z = np.asarray(z, dtype=float)
    log_cdf = log_ndtr(z)
    low = z < _Z_SWITCH
    # the direct formula only where it is used: for very negative z (|z| > 1e8) the
    # difference -z^2/2 - log Phi(z) loses all digits and exp() overflows
    z_hi = np.where(low, 0.0, z)
    r = np.exp(-0.5 * z_hi * z_hi - _LOG_SQRT_2PI - log_ndtr(z_hi))
    delta = 1.0 - r * (z_hi + r)
    if np.any(low):
        w = -z[low]
        t1, t2 = _mills_continued_fraction(w)
        r = r.copy()
        r[low] = w + t1
        delta[low] = t1 * (t2 - t1)
    return log_cdf, r, delta


def log_ndtr_difference(z0, d):
    """``log Phi(z0 + d) - log Phi(z0)`` without the rounding of two huge logarithms.

    For z = z0 + d < 0 and z0 < 0, ``log Phi(z) = -z^2 / 2 + log(erfcx(-z / sqrt 2) / 2)``:
    the quadratic parts are differenced as ``-d (2 z0 + d) / 2`` from the exact offset d
    and the erfcx parts are O(log|z|).  Otherwise ``log_ndtr(z0 + d) - log_ndtr(z0)``.
    Shapes broadcast.
    """
    z0, d = np.broadcast_arrays(np.asarray(z0, dtype=float), np.asarray(d, dtype=float))
    z = z0 + d
    both = (z < 0) & (z0 < 0)
    z0n = np.where(both, z0, -1.0)
    dn = np.where(both, d, 0.0)
    zn = z0n + dn
    tail = -0.5 * dn * (2.0 * z0n + dn) + np.log(erfcx(-zn / _SQRT2) / erfcx(-z0n / _SQRT2))
    return np.where(both, tail, log_ndtr(z) - log_ndtr(z0))


class Probit(Likelihood):
    """Probit likelihood ``p(y | f) = Phi(y f)`` with labels y in {-1, +1}.

    Power 1: closed form (Rasmussen & Williams 2006, eqs. 3.58 and 3.82):
    z = y m / sqrt(1 + v), log Z = log Phi(z), mean = m + y v r / sqrt(1 + v),
    var = v (1 + v delta) / (1 + v) with r = N(z)/Phi(z), delta = 1 - r (z + r).
    Power eta < 1: :func:`robustep.quadrature.log_switch_likelihood_moments` (adaptive
    Gauss–Hermite on the Laplace approximation for cavity variance <= 1, Gauss–Legendre
    in asinh(y f) for wider cavities).
    """

    def validate_targets(self, y):
        """Labels as a float array (n,); raise ValueError unless all are -1 or +1."""
        return check_binary_targets(y)

    def tilted_moments(self, y, cavity_mean, cavity_var, power=1.0):
        """(log_Z, mean, var), each (n,)."""
        eta = check_power(power)
        y, m, v = as_site_arrays(y, cavity_mean, cavity_var)
        check_cavity(m, v, y, binary=True)
        if eta == 1.0:
            s = np.sqrt(1.0 + v)
            z = y * m / s
            log_Z, r, delta = log_ndtr_ratio(z)
            mean = m + y * v * r / s
            var = v * (1.0 + v * delta) / (1.0 + v)
            return log_Z, mean, var
        # eta < 1: log-concave switch rule (adaptive Gauss–Hermite / asinh Gauss–Legendre)
        return log_switch_likelihood_moments(
            log_ndtr,
            lambda g: log_ndtr_ratio(g)[1],
            lambda g: log_ndtr_ratio(g)[2] - 1.0,
            y,
            m,
            v,
            eta,
            left_range=9.5 / np.sqrt(eta),  # Phi(-L)^eta < exp(-eta L^2 / 2) = e^-45
            log_p_difference=log_ndtr_difference,
        )

    def log_prob(self, y, f):
        """log Phi(y f), shape (n,)."""
        y, f = as_site_arrays(y, f)
        return log_ndtr(y * f)

    def log_prob_derivatives(self, y, f):
        """(log p, d/df, d2/df2, d3/df3) of log Phi(y f), each (n,)."""
        y, f = as_site_arrays(y, f)
        z = y * f
        logp, r, delta = log_ndtr_ratio(z)
        d2 = -(1.0 - delta)  # = -r (z + r)
        # g''' = r [(z + r)(z + 2 r) - 1]; z + r = (1 - delta)/r avoids cancellation for z << 0
        zr = np.where(z < _Z_SWITCH, (1.0 - delta) / np.maximum(r, 1e-300), z + r)
        d3 = r * (zr * (zr + r) - 1.0)
        return logp, y * r, d2, y * d3
