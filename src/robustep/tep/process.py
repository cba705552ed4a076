"""EP for Student-t process classification (Futami et al. 2017, §5.2).

Latent ``f ~ St(0, K, df)`` in n dims (a Student-t process evaluated at the training
inputs, Shah, Wilson & Ghahramani 2014, with K the *scale* matrix) and the noisy step
likelihood ``l_i(f) = eps + (1 - 2 eps) Theta(y_i f_i)`` (eq. 43).

Sites (t-factorisation, eq. 31) depend on one latent value each:
``l~_i(f) = C~_i (x)_t exp_t(alpha_i f_i + beta_i f_i^2)``.  In the scaled natural
coordinates of :mod:`robustep.tep.ep` they are ``(tau_i e_i e_i^T, nu_i e_i)``, so the
posterior is ``St(mu, Sigma, df)`` with

    Sigma_G = (K^-1 + diag(tau))^-1,  mu = Sigma_G nu,  Sigma = |B|^{-1/df} Sigma_G,
    |B| = |I + K diag(tau)|,

i.e. GP-EP's algebra with one global scale factor (derivation §6).  Because each site
has only the sufficient statistics (f_i, f_i^2), the update matches the escort mean and
variance of f_i (the projection of Theorem 1 onto the site's statistics; the paper's
Appendix E is not available).  Closed form: with the cavity t-marginal
St(m, s2, df) and the escort-tilted mean/variance (m^, s^2),

    x = (s^2 / s2)^{df/(df+1)},  tau_i = (1/x - 1) / sigma2_cav,
    nu_i = m^/(x sigma2_cav) - m/sigma2_cav,

where ``sigma2_cav`` is the Gaussian-form cavity variance.  All sites are updated in
parallel (then the posterior is refactorised once, O(n^3)), with damping.
For df = inf this is exactly parallel EP for GP classification with the step likelihood.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy.linalg import cholesky, lu_factor, lu_solve

from robustep.tep.ep import TEPInfo
from robustep.tep.likelihood import escort_tilted_marginal, tilted_normaliser

__all__ = [
    "ProcessPosterior",
    "process_posterior",
    "process_tep",
    "process_log_marginal_likelihood",
]


@dataclasses.dataclass
class ProcessPosterior:
    """Gaussian-form posterior pieces: Sigma_G (n, n), mu (n,), logdet_b = log|B|."""

    sigma_g: np.ndarray
    mu: np.ndarray
    logdet_b: float


def process_posterior(K, tau, nu):
    """Sigma_G = (K^-1 + diag(tau))^-1, mu = Sigma_G nu and log|I + K diag(tau)|.

    Uses the symmetric Cholesky form B = I + S^1/2 K S^1/2 when tau >= 0 (Rasmussen &
    Williams 2006, Alg. 3.5), an LU solve otherwise.  Returns None if the posterior is
    not proper (some eigenvalue of Sigma_G non-positive or non-finite values).
    """
    n = K.shape[0]
    if np.all(tau >= 0):
        sq = np.sqrt(tau)
        b = np.eye(n) + sq[:, None] * K * sq[None, :]
        try:
            low = cholesky(b, lower=True)
        except np.linalg.LinAlgError:
            return None
        v = np.linalg.solve(low, sq[:, None] * K)
        sigma = K - v.T @ v
        logdet = 2.0 * np.log(np.diag(low)).sum()
    else:
        m = np.eye(n) + K * tau[None, :]  # I + K T
        sign, logdet = np.linalg.slogdet(m)
        if sign <= 0:
            return None
        sigma = lu_solve(lu_factor(m), K)  # (I + K T)^-1 K
        sigma = 0.5 * (sigma + sigma.T)
        if np.any(np.diag(sigma) <= 0):
            return None
    mu = sigma @ nu
    if not (np.all(np.isfinite(sigma)) and np.all(np.isfinite(mu))):
        return None
    return ProcessPosterior(sigma, mu, float(logdet))


def _cavities(post, tau, nu):
    d = np.diag(post.sigma_g)
    cav_prec = 1.0 / d - tau
    ok = cav_prec > 1e-12
    s2c = np.where(ok, 1.0 / np.where(ok, cav_prec, 1.0), d)
    mc = s2c * (post.mu / d - nu)
    return mc, s2c, ok


def _site_update(d, mu, logdet_b, tau, nu, y, df, eps, n):
    """Undamped parallel site update as a function of the posterior marginals (vectorised).

    Site i's new (tau_i, nu_i) depends on the current posterior only through
    ``d_i = Sigma_G,ii``, ``mu_i`` and ``log|B|`` (plus its own old site), which is what
    makes the implicit gradient of the evidence cheap (derivation §8).  ``logdet_b`` may
    be a scalar or an (n,) array.  Returns (tau_new, nu_new, good).
    """
    with np.errstate(all="ignore"):
        cav_prec = 1.0 / d - tau
        ok = cav_prec > 1e-12
        s2c = np.where(ok, 1.0 / np.where(ok, cav_prec, 1.0), d)
        mc = s2c * (mu / d - nu)
        scale_c = 1.0
        if not np.isinf(df):
            # |B_cav| = |B| (1 - tau_i Sigma_ii) = |B| Sigma_ii / s2c
            scale_c = np.exp(-(logdet_b + np.log(d / s2c)) / df)
        s2t = scale_c * s2c  # cavity Student-t marginal scale
        m_hat, v_hat = escort_tilted_marginal(mc, s2t, df, n, y, eps)
        ratio = v_hat / s2t
        x = ratio if np.isinf(df) else ratio ** (df / (df + 1.0))
        tau_new = (1.0 / x - 1.0) / s2c
        nu_new = m_hat / (x * s2c) - mc / s2c
    good = ok & np.isfinite(tau_new) & np.isfinite(nu_new) & (x > 0)
    return tau_new, nu_new, good


def process_tep(K, y, *, df, eps=0.0, max_iter=200, tol=1e-4, damping=0.5, tau=None, nu=None):
    """Parallel t-EP for the latent Student-t process.

    Parameters
    ----------
    K : (n, n) prior scale matrix; y : (n,) in {-1, +1}; df : degrees of freedom
    (np.inf: GP-EP); eps : label noise; damping : weight kept on the old sites;
    tau, nu : optional warm start (n,).

    Returns (tau (n,), nu (n,), ProcessPosterior, TEPInfo).
    """
    n = K.shape[0]
    tau = np.zeros(n) if tau is None else np.array(tau, dtype=float)
    nu = np.zeros(n) if nu is None else np.array(nu, dtype=float)
    post = process_posterior(K, tau, nu)
    if post is None:  # bad warm start
        tau, nu = np.zeros(n), np.zeros(n)
        post = process_posterior(K, tau, nu)
    history = []
    converged = False
    n_skipped = 0
    it = 0
    for it in range(1, max_iter + 1):  # noqa: B007 (it is the iteration count afterwards)
        tau_new, nu_new, good = _site_update(
            np.diag(post.sigma_g), post.mu, post.logdet_b, tau, nu, y, df, eps, n
        )
        n_skipped += int((~good).sum())
        tau_new = np.where(good, tau_new, tau)
        nu_new = np.where(good, nu_new, nu)
        step = 1.0 - damping
        new_post = None
        while step > 1e-3:
            tau_try = tau + step * (tau_new - tau)
            nu_try = nu + step * (nu_new - nu)
            new_post = process_posterior(K, tau_try, nu_try)
            if new_post is not None:
                break
            step *= 0.5
        if new_post is None:
            history.append(np.inf)
            break
        diff = max(np.abs(tau_try - tau).max(), np.abs(nu_try - nu).max())
        tau, nu, post = tau_try, nu_try, new_post
        history.append(float(diff))
        if diff < tol:
            converged = True
            break
    return (
        tau,
        nu,
        post,
        TEPInfo(it, converged, history[-1] if history else 0.0, history, n_skipped),
    )


def process_log_marginal_likelihood(K, y, tau, nu, df, eps, post=None):
    """EP marginal likelihood for the Student-t process (Theorem 2, eqs. 39-42; derivation §5-6).

    Same formula as :func:`robustep.tep.ep.linear_log_marginal_likelihood`, with the
    cavity quantities obtained from rank-one identities (zero prior mean, d0 = 1):
    ``mu_c^T Lambda_c mu_c = nu^T mu - 2 nu_i mu_i + nu_i^2 S_ii``
    ``+ tau_i (mu_i - nu_i S_ii)^2 / (1 - tau_i S_ii)``.
    """
    if post is None:
        post = process_posterior(K, tau, nu)
    if post is None:
        return -np.inf
    mc, s2c, ok = _cavities(post, tau, nu)
    if not np.all(ok):
        return -np.inf
    d = np.diag(post.sigma_g)
    mu = post.mu
    one_minus = d / s2c  # 1 - tau_i S_ii
    q = nu @ mu
    q_c = q - 2 * nu * mu + nu**2 * d + tau * (mu - nu * d) ** 2 / one_minus
    logdet_c = post.logdet_b + np.log(one_minus)
    if np.isinf(df):
        log_zhat = tilted_normaliser(mc, s2c, df, y, eps)
        phi = 0.5 * q - 0.5 * post.logdet_b
        phi_c = 0.5 * q_c - 0.5 * logdet_c
        return float(log_zhat.sum() + (phi_c - phi).sum() + phi)
    s = np.exp(-post.logdet_b / df)
    s_c = np.exp(-logdet_c / df)
    log_zhat = tilted_normaliser(mc, s_c * s2c, df, y, eps)
    p = q / df
    d_c = s_c + q_c / df
    bracket = (1.0 + np.sum(s * np.exp(-2.0 * log_zhat / df) + p - d_c) - p) / s
    if not bracket > 0:
        return -np.inf
    return float(-0.5 * df * np.log(bracket))


def process_predict_latent(K, tau, nu, post, K_star, k_star_diag, df):
    """Predictive latent Student-t at test inputs: location (m,), scale^2 (m,), dof.

    The joint (f, f*) approximate posterior with sites on f only has, by the same
    algebra, Gaussian-form mean ``K*^T (K + T^-1)^-1 T^-1 nu`` (computed as
    ``K*^T (nu - tau * mu)``), variance ``k** - K*^T (K + T^-1)^-1 K*`` and scale
    factor ``|B|^{-1/df}`` (the determinant ratio does not change when f* is added).
    K_star : (n, m) cross-covariances; k_star_diag : (m,).
    """
    mean = K_star.T @ (nu - tau * post.mu)
    # (K + T^-1)^-1 = T - T Sigma_G T  (Woodbury), valid for any sign of tau
    a = K_star * tau[:, None]
    var = (
        k_star_diag - np.einsum("ij,ij->j", K_star, a) + np.einsum("ij,ij->j", a, post.sigma_g @ a)
    )
    var = np.maximum(var, 1e-12)
    if not np.isinf(df):
        var = var * np.exp(-post.logdet_b / df)
    return mean, var
