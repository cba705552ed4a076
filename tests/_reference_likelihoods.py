"""Small, independent likelihood implementations used to test the baselines.

They implement the :class:`robustep.likelihoods.base.Likelihood` protocol with
closed forms (Gaussian) or brute-force quadrature (Student-t tilted moments),
so the baselines can be checked without depending on the production
likelihood classes (which are tested against these in turn).
"""

from __future__ import annotations

import numpy as np

import _reference_student_t as st
from robustep.likelihoods.base import Likelihood


class StudentTReference(Likelihood):
    """Student-t p(y|f) with ``df`` (nu) and ``scale`` (sigma); learnable (log nu, log sigma)."""

    hyperparameter_names = ("df", "scale")

    def __init__(self, df=4.0, scale=0.5):
        self.df = float(df)
        self.scale = float(scale)

    def log_prob(self, y, f):
        return st.log_prob(y, f, self.df, self.scale)

    def log_prob_derivatives(self, y, f):
        return st.log_prob_derivatives(y, f, self.df, self.scale)

    def log_prob_parameter_gradient(self, y, f):
        return st.log_prob_log_param_gradient(y, f, self.df, self.scale)

    def tilted_moments(self, y, cavity_mean, cavity_var, power=1.0):
        y, m, v = np.broadcast_arrays(*(np.asarray(a, float) for a in (y, cavity_mean, cavity_var)))
        sd = np.sqrt(v)
        lo = np.minimum(m - 12 * sd, y - 60 * self.scale)
        hi = np.maximum(m + 12 * sd, y + 60 * self.scale)
        t = np.linspace(0.0, 1.0, 4001)
        x = lo[:, None] + (hi - lo)[:, None] * t
        dx = (hi - lo)[:, None] / (t.size - 1)
        lg = power * self.log_prob(y[:, None], x) - 0.5 * (
            np.log(2 * np.pi * v[:, None]) + (x - m[:, None]) ** 2 / v[:, None]
        )
        mx = lg.max(axis=1, keepdims=True)
        w = np.exp(lg - mx) * dx
        z = w.sum(axis=1)
        mean = (w * x).sum(axis=1) / z
        var = (w * (x - mean[:, None]) ** 2).sum(axis=1) / z
        return np.log(z) + mx[:, 0], mean, var

    def tilted_log_Z_gradient(self, y, cavity_mean, cavity_var, power=1.0):
        """power * E_tilted[d log p / d log(nu, sigma)], shape (n, 2), by the same grid."""
        y, m, v = np.broadcast_arrays(*(np.asarray(a, float) for a in (y, cavity_mean, cavity_var)))
        sd = np.sqrt(v)
        lo = np.minimum(m - 12 * sd, y - 60 * self.scale)
        hi = np.maximum(m + 12 * sd, y + 60 * self.scale)
        x = lo[:, None] + (hi - lo)[:, None] * np.linspace(0.0, 1.0, 4001)
        lg = power * self.log_prob(y[:, None], x) - 0.5 * (x - m[:, None]) ** 2 / v[:, None]
        w = np.exp(lg - lg.max(axis=1, keepdims=True))
        w /= w.sum(axis=1, keepdims=True)
        g = st.log_prob_log_param_gradient(y[:, None], x, self.df, self.scale)
        return power * np.einsum("ij,ijk->ik", w, g)


class GaussianReference(Likelihood):
    """Gaussian p(y|f) = N(y | f, noise_variance); learnable (log noise_variance,)."""

    hyperparameter_names = ("noise_variance",)

    def __init__(self, noise_variance=0.1):
        self.noise_variance = float(noise_variance)

    def log_prob(self, y, f):
        s2 = self.noise_variance
        return -0.5 * (np.log(2 * np.pi * s2) + (np.asarray(y) - np.asarray(f)) ** 2 / s2)

    def log_prob_derivatives(self, y, f):
        s2 = self.noise_variance
        r = np.asarray(y, float) - np.asarray(f, float)
        z = np.zeros_like(r)
        return self.log_prob(y, f), r / s2, z - 1.0 / s2, z

    def log_prob_parameter_gradient(self, y, f):
        s2 = self.noise_variance
        r2 = (np.asarray(y, float) - np.asarray(f, float)) ** 2
        return (-0.5 + 0.5 * r2 / s2)[:, None]

    def tilted_moments(self, y, cavity_mean, cavity_var, power=1.0):
        s2 = self.noise_variance / power
        y, m, v = np.broadcast_arrays(*(np.asarray(a, float) for a in (y, cavity_mean, cavity_var)))
        log_Z = (
            -0.5 * (np.log(2 * np.pi * (v + s2)) + (y - m) ** 2 / (v + s2))
            + power * (-0.5 * np.log(2 * np.pi * self.noise_variance))
            + 0.5 * np.log(2 * np.pi * s2)
        )
        var = 1.0 / (1.0 / v + 1.0 / s2)
        mean = var * (m / v + y / s2)
        return log_Z, mean, var
