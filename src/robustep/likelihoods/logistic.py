"""Logistic classification likelihood p(y | f) = sigmoid(y f), y in {-1, +1}."""

from __future__ import annotations

import numpy as np
from scipy.special import expit

from robustep.likelihoods.base import (
    Likelihood,
    as_site_arrays,
    check_binary_targets,
    check_cavity,
    check_power,
)
from robustep.quadrature import log_switch_likelihood_moments


class Logistic(Likelihood):
    """Logistic likelihood ``p(y | f) = 1 / (1 + exp(-y f))``.

    Tilted moments for every power by :func:`robustep.quadrature.log_switch_likelihood_moments`
    (adaptive Gauss–Hermite on the Laplace approximation for cavity variance <= 1,
    Gauss–Legendre in asinh(y f) for wider cavities, over the tilted density's level
    interval when the cavity is far from the decision boundary).
    """

    def validate_targets(self, y):
        """Labels as a float array (n,); raise ValueError unless all are -1 or +1."""
        return check_binary_targets(y)

    def tilted_moments(self, y, cavity_mean, cavity_var, power=1.0):
        """(log_Z, mean, var), each (n,), by Gauss–Hermite quadrature."""
        eta = check_power(power)
        y, m, v = as_site_arrays(y, cavity_mean, cavity_var)
        check_cavity(m, v, y, binary=True)
        return log_switch_likelihood_moments(
            lambda g: -np.logaddexp(0.0, -g),
            lambda g: expit(-g),
            lambda g: -expit(g) * expit(-g),
            y,
            m,
            v,
            eta,
            left_range=45.0 / eta,  # sigmoid(g)^eta < exp(eta g)
        )

    def log_prob(self, y, f):
        """log sigmoid(y f) = -log(1 + exp(-y f)), shape (n,)."""
        y, f = as_site_arrays(y, f)
        return -np.logaddexp(0.0, -y * f)

    def log_prob_derivatives(self, y, f):
        """(log p, d/df, d2/df2, d3/df3), each (n,)."""
        y, f = as_site_arrays(y, f)
        z = y * f
        p = expit(z)  # sigmoid(z)
        q = expit(-z)  # 1 - sigmoid(z), accurate for large z
        pq = p * q
        return -np.logaddexp(0.0, -z), y * q, -pq, -y * pq * (q - p)
