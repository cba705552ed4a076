"""Gaussian observation model p(y | f) = N(y | f, noise_variance)."""

from __future__ import annotations

import numpy as np
from scipy import special

from robustep.likelihoods.base import Likelihood, as_site_arrays, check_cavity, check_power

_LOG_2PI = np.log(2.0 * np.pi)


class Gaussian(Likelihood):
    """Gaussian likelihood with learnable ``noise_variance`` (sigma^2 > 0).

    Tilted moments are closed form for every power eta: ``N(y | f, s2)^eta`` is the
    unnormalised Gaussian ``(2 pi s2)^((1 - eta)/2) eta^(-1/2) N(f | y, s2 / eta)``, so

        log Z = (1 - eta)/2 log(2 pi s2) - 1/2 log(eta) + log N(y | m, v + s2/eta),

    and the tilted distribution is the product of two Gaussians
    (Jylänki et al. 2011, eq. 14 with a Gaussian site).  See docs/derivations/likelihoods.md.
    """

    hyperparameter_names = ("noise_variance",)

    def __init__(self, noise_variance=1.0):
        from robustep._validation import real_scalar

        self.noise_variance = real_scalar(noise_variance, "noise_variance", lower=0.0)

    # -------------------------------------------------------------- tilted
    def tilted_moments(self, y, cavity_mean, cavity_var, power=1.0):
        """Closed-form (log_Z, mean, var), each (n,); see the class docstring."""
        eta = check_power(power)
        y, m, v = as_site_arrays(y, cavity_mean, cavity_var)
        check_cavity(m, v, y)
        s2e = self.noise_variance / eta  # variance of the site N(f | y, s2/eta)
        tot = v + s2e
        d = y - m
        log_Z = (
            0.5 * (1.0 - eta) * np.log(2.0 * np.pi * self.noise_variance)
            - 0.5 * np.log(eta)
            - 0.5 * (_LOG_2PI + np.log(tot) + d * d / tot)
        )
        # Product of N(f|m,v) and N(f|y,s2e): gain k = v / (v + s2e).
        k = v / tot
        mean = m + k * d
        var = v * s2e / tot
        return log_Z, mean, var

    def tilted_log_Z_gradient(self, y, cavity_mean, cavity_var, power=1.0):
        """d log_Z / d log(noise_variance), shape (n, 1)."""
        eta = check_power(power)
        y, m, v = as_site_arrays(y, cavity_mean, cavity_var)
        check_cavity(m, v, y)
        s2e = self.noise_variance / eta
        tot = v + s2e
        d = y - m
        # d/dlog s2 of log N(y|m, v + s2/eta) = (s2/eta) * 1/2 (d^2/tot^2 - 1/tot)
        g = 0.5 * (1.0 - eta) + 0.5 * s2e * (d * d / tot - 1.0) / tot
        return g[:, None]

    # ----------------------------------------------------------- pointwise
    def log_prob(self, y, f):
        """log N(y | f, noise_variance), shape (n,)."""
        y, f = as_site_arrays(y, f)
        s2 = self.noise_variance
        return -0.5 * (_LOG_2PI + np.log(s2) + (y - f) ** 2 / s2)

    def log_prob_derivatives(self, y, f):
        """(log p, d/df, d2/df2, d3/df3), each (n,)."""
        y, f = as_site_arrays(y, f)
        s2 = self.noise_variance
        r = y - f
        logp = -0.5 * (_LOG_2PI + np.log(s2) + r * r / s2)
        return logp, r / s2, np.full_like(r, -1.0 / s2), np.zeros_like(r)

    def log_prob_parameter_gradient(self, y, f):
        """d log p / d log(noise_variance), shape (n, 1)."""
        y, f = as_site_arrays(y, f)
        s2 = self.noise_variance
        return (0.5 * ((y - f) ** 2 / s2 - 1.0))[:, None]

    # ----------------------------------------------------------- predictive
    # With f ~ N(m, v) the observation y = f + eps is N(m, v + noise_variance): closed forms.
    def predictive_log_density(self, y, mean, var):
        """log N(y | mean, var + noise_variance), shape (n,); ``var`` >= 0."""
        y, m, v = as_site_arrays(y, mean, var)
        t = v + self.noise_variance
        return -0.5 * (np.log(2 * np.pi * t) + (y - m) ** 2 / t)

    def predictive_cdf(self, y, mean, var, upper=False):
        """Phi(+-(y - mean) / sqrt(var + noise_variance)), shape (n,)."""
        y, m, v = as_site_arrays(y, mean, var)
        z = (y - m) / np.sqrt(v + self.noise_variance)
        return special.ndtr(-z if upper else z)

    def predictive_cdf_and_density(self, y, mean, var):
        """(CDF (n,), density (n,)) of N(mean, var + noise_variance) at y."""
        y, m, v = as_site_arrays(y, mean, var)
        sd = np.sqrt(v + self.noise_variance)
        z = (y - m) / sd
        return special.ndtr(z), np.exp(-0.5 * z * z) / (np.sqrt(2.0 * np.pi) * sd)

    def predictive_quantiles(self, q, mean, var, tol=None):
        """mean + sqrt(var + noise_variance) Phi^-1(q), shape (n, Q) (``tol`` is unused)."""
        q = np.asarray(q, dtype=float).reshape(-1)
        m, v = as_site_arrays(mean, var)
        return m[:, None] + np.sqrt(v + self.noise_variance)[:, None] * special.ndtri(q)[None, :]

    def noise_scale(self):
        """The noise standard deviation sqrt(noise_variance)."""
        return float(np.sqrt(self.noise_variance))
