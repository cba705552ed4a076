"""Small, independent Gaussian EP references for the noisy step likelihood (tests only).

Written separately from the t-EP engines (different parametrisation and formulas:
derivatives of the log tilted normaliser, Minka 2001 §3.3 / Rasmussen & Williams 2006
Alg. 3.5) so that the limit df -> inf of t-EP can be checked against it.

Likelihood ``p(y | f) = eps + (1 - 2 eps) Phi_step(y f)``; with a Gaussian cavity
N(f; m, s2): ``Z = eps + (1 - 2 eps) Phi(z)``, ``z = y m / sqrt(s2)``,
``d log Z / dm = y (1 - 2 eps) phi(z) / (Z sqrt(s2))``,
``d^2 log Z / dm^2 = -(1 - 2 eps) phi(z) z / (Z s2) - (d log Z / dm)^2``.
"""

from __future__ import annotations

import numpy as np
from scipy.special import log_ndtr, ndtr

__all__ = ["gaussian_bpm_ep", "gaussian_gpc_ep"]


def _tilted(m, s2, y, eps):
    z = y * m / np.sqrt(s2)
    phi = np.exp(-0.5 * z * z) / np.sqrt(2 * np.pi)
    if eps == 0:
        logz = log_ndtr(z)
        ratio = np.exp(-0.5 * z * z - log_ndtr(z)) / np.sqrt(2 * np.pi)  # phi / Z
    else:
        zz = eps + (1 - 2 * eps) * ndtr(z)
        logz = np.log(zz)
        ratio = (1 - 2 * eps) * phi / zz
    d1 = y * ratio / np.sqrt(s2)
    d2 = -ratio * z / s2 - d1 * d1
    return logz, d1, d2


def gaussian_bpm_ep(X, y, eps, prior_cov, max_iter=500, tol=1e-10):
    """Sequential Gaussian EP for w ~ N(0, prior_cov), p(y_i|w) = noisy step of <w, x_i>.

    Sites ``exp(-tau_i (x_i^T w)^2 / 2 + nu_i x_i^T w)``.  Returns (mean (k,), cov (k, k),
    log Z_EP, n_sweeps).
    """
    n, k = X.shape
    P0 = np.linalg.inv(prior_cov)
    tau, nu = np.zeros(n), np.zeros(n)
    for sweep in range(max_iter):  # noqa: B007 (sweep is returned)
        change = 0.0
        for i in range(n):
            x = X[i]
            P = P0 + (X * tau[:, None]).T @ X
            C = np.linalg.inv(P)
            mean = C @ (X.T @ nu)
            sp, mp = x @ C @ x, x @ mean
            s2 = 1.0 / (1.0 / sp - tau[i])
            m = s2 * (mp / sp - nu[i])
            _, d1, d2 = _tilted(m, s2, y[i], eps)
            m_hat, v_hat = m + s2 * d1, s2 + s2 * s2 * d2
            t_new, n_new = 1.0 / v_hat - 1.0 / s2, m_hat / v_hat - m / s2
            change = max(change, abs(t_new - tau[i]), abs(n_new - nu[i]))
            tau[i], nu[i] = t_new, n_new
        if change < tol:
            break
    P = P0 + (X * tau[:, None]).T @ X
    C = np.linalg.inv(P)
    mean = C @ (X.T @ nu)

    # log Z_EP via Gaussian normalisers: log int N(w;0,S0) prod t~_i, t~_i normalised so
    # that int q_cav t~_i = Z_i (Minka 2001, eq. 3.52 in natural-parameter form)
    def a_fun(Pm, h):  # log int exp(-w'Pw/2 + h'w) dw (without 2 pi factors)
        return 0.5 * h @ np.linalg.solve(Pm, h) - 0.5 * np.linalg.slogdet(Pm)[1]

    h = X.T @ nu
    total = a_fun(P, h) - a_fun(P0, np.zeros(k))
    for i in range(n):
        x = X[i]
        Pc, hc = P - tau[i] * np.outer(x, x), h - nu[i] * x
        Cc = np.linalg.inv(Pc)
        logz, _, _ = _tilted(x @ Cc @ hc, x @ Cc @ x, y[i], eps)
        total += logz + a_fun(Pc, hc) - a_fun(P, h)
    return mean, C, float(total), sweep + 1


def gaussian_gpc_ep(K, y, eps, max_iter=500, tol=1e-10):
    """Sequential Gaussian EP for GP classification (R&W Alg. 3.5 with the noisy step).

    With X = I and prior covariance K the linear model is the latent GP.
    Returns (posterior mean (n,), posterior cov (n, n), log Z_EP).
    """
    return_vals = gaussian_bpm_ep(np.eye(K.shape[0]), y, eps, K, max_iter=max_iter, tol=tol)
    mean, cov, logz, _ = return_vals
    return mean, cov, logz
