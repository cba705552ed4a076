"""Independent closed-form Student-t math for the tests (not used by the library).

Written separately from :class:`robustep.likelihoods.StudentT` so that the baselines
and the production likelihood can be checked against it.

p(y | f) = Gamma((nu+1)/2) / (Gamma(nu/2) sqrt(nu pi) sigma)
           * (1 + (y - f)^2 / (nu sigma^2))^(-(nu+1)/2)          (Jylänki et al. 2011, Sec. 2)
"""

from __future__ import annotations

import numpy as np
from scipy.special import digamma, gammaln


def log_prob(y, f, df, scale):
    """log p(y | f) of the Student-t model, elementwise (broadcast)."""
    r2 = (np.asarray(y, float) - np.asarray(f, float)) ** 2
    return (
        gammaln(0.5 * (df + 1.0))
        - gammaln(0.5 * df)
        - 0.5 * np.log(df * np.pi)
        - np.log(scale)
        - 0.5 * (df + 1.0) * np.log1p(r2 / (df * scale**2))
    )


def log_prob_derivatives(y, f, df, scale):
    """(log p, d/df, d2/df2, d3/df3) with respect to f, elementwise.

    With r = y - f and s = nu sigma^2 + r^2:
    d1 = (nu+1) r / s,  d2 = (nu+1)(r^2 - nu sigma^2) / s^2,
    d3 = 2 (nu+1) r (r^2 - 3 nu sigma^2) / s^3.
    """
    r = np.asarray(y, float) - np.asarray(f, float)
    a = df * scale**2
    s = a + r**2
    d1 = (df + 1.0) * r / s
    d2 = (df + 1.0) * (r**2 - a) / s**2
    d3 = 2.0 * (df + 1.0) * r * (r**2 - 3.0 * a) / s**3
    return log_prob(y, f, df, scale), d1, d2, d3


def log_prob_log_param_gradient(y, f, df, scale):
    """d log p(y|f) / d (log nu, log sigma), shape (n, 2)."""
    r2 = (np.asarray(y, float) - np.asarray(f, float)) ** 2
    a = df * scale**2
    s = a + r2
    g_sigma = -1.0 + (df + 1.0) * r2 / s
    g_nu = df * (
        0.5 * digamma(0.5 * (df + 1.0))
        - 0.5 * digamma(0.5 * df)
        - 0.5 / df
        - 0.5 * np.log1p(r2 / a)
        + 0.5 * (df + 1.0) * r2 / (df * s)
    )
    return np.stack(np.broadcast_arrays(g_nu, g_sigma), axis=-1)


def log_predictive_density(y, mean, var, df, scale, n_nodes: int = 12):
    """log int p(y | f) N(f | mean, var) df, elementwise.

    Composite Gauss–Legendre quadrature in log space over breakpoints that
    resolve both the Gaussian (mean +- 10 sd) and the Student-t peak
    (y +- 30 sigma), whichever is narrower; used for predictive densities
    (Jylänki et al. 2011, Sec. 6.1) and as an independent check of the
    likelihoods' ``tilted_moments``.
    """
    y, mean, var = np.broadcast_arrays(
        np.asarray(y, float), np.asarray(mean, float), np.asarray(var, float)
    )
    sd = np.sqrt(np.maximum(var, 1e-300))
    lo = mean - 10.0 * sd
    hi = mean + 10.0 * sd
    brk = np.stack(
        [lo, y - 30.0 * scale, y - 3.0 * scale, y + 3.0 * scale, y + 30.0 * scale, hi], axis=-1
    )
    brk = np.sort(np.clip(brk, lo[..., None], hi[..., None]), axis=-1)
    n_panels = 8
    frac = np.linspace(0.0, 1.0, n_panels + 1)
    edges = brk[..., :-1, None] + (brk[..., 1:] - brk[..., :-1])[..., None] * frac
    edges = edges[..., :-1].reshape(*y.shape, -1)
    edges = np.concatenate([edges, hi[..., None]], axis=-1)  # (..., 5*n_panels + 1)
    x, w = np.polynomial.legendre.leggauss(n_nodes)
    half = 0.5 * (edges[..., 1:] - edges[..., :-1])
    mid = 0.5 * (edges[..., 1:] + edges[..., :-1])
    nodes = mid[..., None] + half[..., None] * x
    log_w = np.log(np.maximum(half[..., None] * w, 1e-300))
    log_integrand = log_prob(y[..., None, None], nodes, df, scale) - 0.5 * (
        np.log(2.0 * np.pi * var[..., None, None])
        + (nodes - mean[..., None, None]) ** 2 / var[..., None, None]
    )
    flat = (log_integrand + log_w).reshape(*y.shape, -1)
    m = flat.max(axis=-1)
    return m + np.log(np.exp(flat - m[..., None]).sum(axis=-1))
