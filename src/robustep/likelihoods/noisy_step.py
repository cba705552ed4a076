"""Noisy step classification likelihood (Qi & Guo, eq. 8): p(y|f) = eps + (1 - 2 eps) Theta(y f)."""

from __future__ import annotations

import math

import numpy as np

from robustep.likelihoods.base import (
    Likelihood,
    as_site_arrays,
    check_binary_targets,
    check_cavity,
    check_power,
)
from robustep.likelihoods.probit import log_ndtr_ratio


class NoisyStep(Likelihood):
    """Label-noise step likelihood ``p(y | f) = eps + (1 - 2 eps) Theta(y f)``, y in {-1, +1}.

    ``epsilon`` in [0, 0.5) is the label-flip probability (not learned).  Theta(0) = 1/2.

    Tilted moments are closed form for every power eta (Qi & Guo, Appendix C):
    ``p^eta = A + B Theta(y f)`` with A = eps^eta and B = (1 - eps)^eta - eps^eta, so with
    z = y m / sqrt(v):

        Z = A + B Phi(z),   mean = m + y sqrt(v) pi r0,
        var = v [(1 - pi) + pi delta0 + pi (1 - pi) r0^2],

    where r0 = N(z)/Phi(z), delta0 = 1 - r0 (z + r0) and pi = B Phi(z) / Z (the weight of
    the truncated-Gaussian component).  Every term is non-negative, so the variance does
    not cancel; eps = 0 gives the probit-like step (log Z = log Phi(z)).
    See docs/derivations/likelihoods.md.
    """

    def __init__(self, epsilon=0.0):
        from robustep._validation import real_scalar

        # epsilon is a label-flip probability
        self.epsilon = real_scalar(epsilon, "epsilon", lower=0.0, upper=0.5, lower_open=False)

    def validate_targets(self, y):
        """Labels as a float array (n,); raise ValueError unless all are -1 or +1."""
        return check_binary_targets(y)

    def _log_AB(self, eta):
        eps = self.epsilon
        log_A = eta * math.log(eps) if eps > 0 else -math.inf
        # B = (1-eps)^eta (1 - (eps/(1-eps))^eta) > 0 for eps < 1/2
        log_B = eta * math.log1p(-eps)
        if eps > 0:
            log_B += math.log1p(-((eps / (1.0 - eps)) ** eta))
        return log_A, log_B

    def tilted_moments(self, y, cavity_mean, cavity_var, power=1.0):
        """Closed-form (log_Z, mean, var), each (n,)."""
        eta = check_power(power)
        y, m, v = as_site_arrays(y, cavity_mean, cavity_var)
        check_cavity(m, v, y, binary=True)
        sd = np.sqrt(v)
        z = y * m / sd
        log_cdf, r0, delta0 = log_ndtr_ratio(z)
        log_A, log_B = self._log_AB(eta)
        if log_A == -math.inf:
            log_Z = log_B + log_cdf
            pi = np.ones_like(z)
            one_minus_pi = np.zeros_like(z)
        else:
            log_Z = np.logaddexp(log_A, log_B + log_cdf)
            pi = np.exp(log_B + log_cdf - log_Z)
            one_minus_pi = np.exp(log_A - log_Z)
        mean = m + y * sd * (pi * r0)
        var = v * (one_minus_pi + pi * delta0 + pi * one_minus_pi * r0 * r0)
        return log_Z, mean, var

    def log_prob(self, y, f):
        """log(eps + (1 - 2 eps) Theta(y f)), shape (n,); -inf where misclassified if eps = 0."""
        y, f = as_site_arrays(y, f)
        eps = self.epsilon
        log_lo = math.log(eps) if eps > 0 else -math.inf
        z = y * f
        return np.where(z > 0, math.log1p(-eps), np.where(z < 0, log_lo, math.log(0.5)))

    def log_prob_derivatives(self, y, f):
        """(log p, 0, 0, 0): the step is flat almost everywhere (no use for Laplace)."""
        logp = self.log_prob(y, f)
        zero = np.zeros_like(logp)
        return logp, zero, zero.copy(), zero.copy()
