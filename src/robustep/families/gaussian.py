"""Univariate Gaussian algebra in natural parameters.

Convention (stated once, used everywhere): a Gaussian factor
``exp(-precision * f**2 / 2 + shift * f)`` has natural parameters
``precision`` (tau, the inverse variance; may be negative for a site) and
``shift`` (nu = precision * mean).  Products add natural parameters,
division (the EP cavity) subtracts them.
"""

from __future__ import annotations

import numpy as np


def to_natural(mean, var):
    """Moment parameters (mean, var) -> natural parameters (precision, shift)."""
    mean = np.asarray(mean, dtype=float)
    var = np.asarray(var, dtype=float)
    precision = 1.0 / var
    return precision, mean * precision


def to_moments(precision, shift):
    """Natural parameters (precision, shift) -> (mean, var); precision must be non-zero."""
    precision = np.asarray(precision, dtype=float)
    var = 1.0 / precision
    return np.asarray(shift, dtype=float) * var, var


def cavity(post_mean, post_var, site_precision, site_shift, power=1.0):
    """Cavity distribution q(f) / t(f)^power in moment form.

    Jylänki et al. (2011) eq. (14): tau_-i = sigma_i^-2 - eta tau~_i,
    nu_-i = sigma_i^-2 mu_i - eta nu~_i.

    Returns
    -------
    cav_mean, cav_var, cav_precision : arrays (n,)
        ``cav_mean``/``cav_var`` are only meaningful where ``cav_precision > 0``;
        elsewhere they are NaN-free placeholders (mean = post_mean, var = post_var).
    """
    post_prec = 1.0 / np.asarray(post_var, dtype=float)
    cav_prec = post_prec - power * np.asarray(site_precision, dtype=float)
    cav_shift = post_prec * np.asarray(post_mean, dtype=float) - power * np.asarray(
        site_shift, dtype=float
    )
    ok = cav_prec > 0
    safe_prec = np.where(ok, cav_prec, post_prec)
    cav_var = 1.0 / safe_prec
    cav_mean = np.where(ok, cav_shift * cav_var, post_mean)
    return cav_mean, cav_var, cav_prec


def log_normal_pdf(x, mean, var):
    """log N(x | mean, var), elementwise."""
    x = np.asarray(x, dtype=float)
    return -0.5 * (np.log(2.0 * np.pi * var) + (x - mean) ** 2 / var)
