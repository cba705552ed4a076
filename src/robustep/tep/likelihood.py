"""The noisy step likelihood (Futami et al. 2017, eq. 43) under a Student-t.

``l(w) = eps + (1 - 2 eps) Theta(y <w, x>)``, so ``l(w)^t = a + (b - a) Theta(v^T w)``
with ``a = eps^t``, ``b = (1 - eps)^t`` and ``v = y x``: a power of a noisy step is
again a noisy step.  Projections of a Student-t are univariate Student-t, so every
integral below is a univariate Student-t CDF (``scipy.special.stdtr``) or density.
Derivations: docs/derivations/tep.md §4.

Half-space moments of ``w ~ St(mu, S, n)`` (k-dim), ``s = sqrt(v^T S v)``,
``u0 = -v^T mu / s``, ``f_n`` the standard t density, ``P = T_n(-u0)``:

* ``E[(w - mu) 1{v^T w > 0}] = (S v / s) (n + u0^2) f_n(u0) / (n - 1)``
* ``E[u^2 1{u > u0}] = [u0 (n + u0^2) f_n(u0) + n P] / (n - 2)``
* ``Cov(w | v^T w) = (n + u^2) / (n - 1) (S - S v v^T S / s^2)``.
"""

from __future__ import annotations

import numpy as np
from scipy.special import gammaln, log_ndtr, ndtr, stdtr

from robustep.families.t_exponential import escort_parameters, log_psi, t_of_df

__all__ = [
    "step_levels",
    "noisy_step_Z1",
    "noisy_step_Z2",
    "noisy_step_grad_Z1",
    "theorem1_moments",
    "tilted_normaliser",
    "escort_tilted_moments",
    "escort_tilted_marginal",
]


def _check_eps(eps):
    eps = float(eps)
    if not 0.0 <= eps < 0.5:
        raise ValueError(f"label_noise (eps) must be in [0, 0.5), got {eps}")
    return eps


def step_levels(eps, t):
    """Levels (a, b) of ``l^t = a + (b - a) Theta``: ``a = eps^t``, ``b = (1 - eps)^t``."""
    eps = _check_eps(eps)
    return eps**t, (1.0 - eps) ** t


def _t_logpdf_std(u, n):
    """log density of the standard univariate Student-t with n dof (n may be inf)."""
    if np.isinf(n):
        return -0.5 * (np.log(2 * np.pi) + u**2)
    return (
        gammaln((n + 1) / 2.0)
        - gammaln(n / 2.0)
        - 0.5 * np.log(np.pi * n)
        - 0.5 * (n + 1) * np.log1p(u**2 / n)
    )


def _t_cdf(z, n):
    return ndtr(z) if np.isinf(n) else stdtr(n, z)


def noisy_step_Z1(mu, sigma, df, v, eps):
    """Z1 = int p(w) l(w)^t dw (eq. 35) for p = St(mu, Sigma, df) in k dims.

    ``= a + (b - a) T_df(v^T mu / sqrt(v^T Sigma v))``.
    Shapes: mu (k,), sigma (k, k), v (k,).
    """
    mu = np.atleast_1d(mu)
    t = t_of_df(df, mu.size)
    a, b = step_levels(eps, t)
    z = v @ mu / np.sqrt(v @ sigma @ v)
    return a + (b - a) * _t_cdf(z, df)


def _c_escort(sigma, df):
    """int p^t dw = df / ((df + k) Psi) (derivation §4.2); 1 for df = inf."""
    k = np.atleast_2d(sigma).shape[0]
    if np.isinf(df):
        return 1.0
    return df / (df + k) * np.exp(-log_psi(sigma, df))


def noisy_step_Z2(mu, sigma, df, v, eps):
    """Z2 = int p(w)^t l(w)^t dw (eq. 36, with the *unnormalised* escort p^t).

    ``= c [a + (b - a) T_{df+2}(v^T mu / sqrt(v^T S v))]`` with ``S = df Sigma / (df + 2)``
    and ``c = int p^t = df / ((df + k) Psi)``.  (With the normalised escort, Theorem 1
    needs the extra factor ``c``; see docs/derivations/tep.md §3.)
    """
    mu = np.atleast_1d(mu)
    t = t_of_df(df, mu.size)
    a, b = step_levels(eps, t)
    m, s_mat, n = escort_parameters(mu, sigma, df)
    z = v @ m / np.sqrt(v @ s_mat @ v)
    return _c_escort(sigma, df) * (a + (b - a) * _t_cdf(z, n))


def _half_space_moments(mu, s_mat, n, v):
    """P, E[(w-mu)1], E[(w-mu)(w-mu)^T 1] over {v^T w > 0} for w ~ St(mu, S, n)."""
    s2 = v @ s_mat @ v
    s = np.sqrt(s2)
    u0 = -(v @ mu) / s
    p = _t_cdf(-u0, n)
    sv = s_mat @ v
    if np.isinf(n):
        f = np.exp(_t_logpdf_std(u0, n))
        e_u = f
        e_u2 = u0 * f + p
        e_h = p
    else:
        f = np.exp(_t_logpdf_std(u0, n))
        e_u = (n + u0**2) * f / (n - 1.0)
        e_u2 = (u0 * (n + u0**2) * f + n * p) / (n - 2.0)
        e_h = (n * p + e_u2) / (n - 1.0)
    g = sv / s * e_u
    proj = np.outer(sv, sv) / s2
    second = (s_mat - proj) * e_h + proj * e_u2
    return p, g, second


def noisy_step_grad_Z1(mu, sigma, df, v, eps):
    """Gradient of Z1 with respect to the natural parameters (theta1, theta2) of St(mu, Sigma, df).

    Uses ``d exp_t(u) / du = exp_t(u)^t`` and ``grad g_t = eta``:
    ``grad_theta Z1 = int p^t l^t (Phi - eta) dw = (b - a) c E_esc[(Phi - eta) 1{v^T w > 0}]``
    (derivation §4.3).  Returns (g1 (k,), g2 (k, k) symmetric), the derivative with
    respect to ``theta2`` taken entrywise (``<Phi, theta> = theta1^T w + w^T theta2 w``).
    """
    mu = np.atleast_1d(np.asarray(mu, dtype=float))
    sigma = np.atleast_2d(np.asarray(sigma, dtype=float))
    t = t_of_df(df, mu.size)
    a, b = step_levels(eps, t)
    m, s_mat, n = escort_parameters(mu, sigma, df)
    p, g, second = _half_space_moments(m, s_mat, n, v)
    c = _c_escort(sigma, df)
    g1 = g
    g2 = second + np.outer(mu, g) + np.outer(g, mu) - sigma * p
    return (b - a) * c * g1, (b - a) * c * g2


def theorem1_moments(mu, sigma, df, v, eps):
    """Escort moment matching by Theorem 1 (eq. 34): ``eta = eta_cav + grad Z1 / Z2``.

    Given the cavity St(mu, Sigma, df) and one noisy-step factor, returns the
    (mu_new, Sigma_new) of the Student-t whose escort moments equal those of the
    tilted distribution ``p_cav(w) l(w)`` (the t-divergence projection, eq. 17).
    """
    mu = np.atleast_1d(np.asarray(mu, dtype=float))
    g1, g2 = noisy_step_grad_Z1(mu, sigma, df, v, eps)
    z2 = noisy_step_Z2(mu, sigma, df, v, eps)
    eta1 = mu + g1 / z2
    eta2 = sigma + np.outer(mu, mu) + g2 / z2
    sig = eta2 - np.outer(eta1, eta1)
    return eta1, 0.5 * (sig + sig.T)


def tilted_normaliser(m, s2, df, y, eps):
    """log of ``int p(f) l(f) df`` for the univariate marginal p = St(m, s2, df) of f = <w, x>.

    Vectorised: m, s2, y arrays (n,).  ``= log(eps + (1 - 2 eps) T_df(y m / s))``.
    """
    z = y * m / np.sqrt(s2)
    if eps == 0.0:
        if np.isinf(df):
            return log_ndtr(z)
        return np.log(np.maximum(stdtr(df, z), 1e-300))
    return np.log(eps + (1.0 - 2.0 * eps) * _t_cdf(z, df))


def _t_log_density_and_tail(u0, n):
    """(log f_n(u0), log P(u > u0)) of the standard Student-t with n dof (n = inf: normal)."""
    logf = _t_logpdf_std(u0, n)
    if np.isinf(n):
        return logf, log_ndtr(-u0)
    with np.errstate(divide="ignore"):
        logp = np.log(stdtr(n, -u0))
    return logf, np.where(np.isfinite(logp), logp, log_ndtr(-u0))  # only for huge n


def _tilted_u_moments(u0, n, a, b):
    """Moments of u ~ t_n (standard; n = inf: normal) tilted by a + (b - a) 1{u > u0}.

    Returns (mean, second moment, variance) of the tilted u, vectorised and stable in
    the tails (ratios f / P in log space when a = 0).
    """
    u0 = np.asarray(u0, dtype=float)
    logf, logp = _t_log_density_and_tail(u0, n)
    if np.isinf(n):
        var_u = 1.0
        if a == 0.0:
            r = np.exp(logf - logp)  # Mills ratio phi / Phi
            mean = r
            second = 1.0 + u0 * r
            var = 1.0 + u0 * r - r * r
        else:
            p = np.exp(logp)
            f = np.exp(logf)
            zt = a + (b - a) * p
            mean = (b - a) * f / zt
            second = (a * var_u + (b - a) * (p + u0 * f)) / zt
            var = second - mean**2
    else:
        var_u = n / (n - 2.0)
        if a == 0.0:
            r = (n + u0**2) / (n - 1.0) * np.exp(logf - logp)
            mean = r
            second = (u0 * (n - 1.0) * r + n) / (n - 2.0)
        else:
            p = np.exp(logp)
            f = np.exp(logf)
            zt = a + (b - a) * p
            e_u = (n + u0**2) * f / (n - 1.0)
            e_u2 = (u0 * (n + u0**2) * f + n * p) / (n - 2.0)
            mean = (b - a) * e_u / zt
            second = (a * var_u + (b - a) * e_u2) / zt
        var = second - mean**2
    return mean, second, np.maximum(var, 1e-300)


def escort_tilted_moments(mu, sigma, df, v, eps):
    """Stable closed form of :func:`theorem1_moments` (same result, derivation §4.4).

    Under the escort St(mu, S, n) of the cavity (S = df Sigma/(df+2), n = df + 2) times
    ``l^t``: with ``s = sqrt(v^T S v)``, ``u = (v^T w - v^T mu)/s`` and tilted moments
    (E u, E u^2, Var u) of the 1-D problem,
    ``mu_new = mu + S v E[u] / s`` and
    ``Sigma_new = E[h] (S - S v v^T S / s^2) + S v v^T S Var[u] / s^2``,
    ``E[h] = (n + E[u^2]) / (n - 1)`` (1 for df = inf).
    """
    mu = np.atleast_1d(np.asarray(mu, dtype=float))
    t = t_of_df(df, mu.size)
    a, b = step_levels(eps, t)
    m, s_mat, n = escort_parameters(mu, sigma, df)
    sv = s_mat @ v
    s2 = v @ sv
    s = np.sqrt(s2)
    u0 = -(v @ m) / s
    mean_u, second_u, var_u = _tilted_u_moments(u0, n, a, b)
    e_h = 1.0 if np.isinf(n) else (n + second_u) / (n - 1.0)
    proj = np.outer(sv, sv) / s2
    sig = e_h * (s_mat - proj) + proj * var_u
    return m + sv / s * mean_u, 0.5 * (sig + sig.T)


def escort_tilted_marginal(m, s2, df, k, y, eps):
    """Escort moments of the tilted distribution, projected on f = <w, x> (vectorised).

    The cavity marginal of f is St(m, s2, df) (a projection of the k-dim cavity); its
    escort marginal is St(m, df s2 / (df + 2), df + 2).  The escort of the tilted
    distribution p_cav l is proportional to p_cav^t l^t, whose marginal in f is the escort
    marginal times ``a + (b - a) Theta(y f)``.  Returns (mean, var) of that, arrays (n,).
    ``k`` is the dimension of the full Student-t (it sets t).
    """
    m = np.asarray(m, dtype=float)
    s2 = np.asarray(s2, dtype=float)
    t = t_of_df(df, k)
    a, b = step_levels(eps, t)
    n = df + 2.0
    sc2 = s2 if np.isinf(df) else df * s2 / n
    s = np.sqrt(sc2)
    u0 = -y * m / s  # in the coordinate u = y (f - m) / s the step is at u > u0
    mean_u, _, var_u = _tilted_u_moments(u0, n, a, b)
    return m + y * s * mean_u, var_u * sc2
