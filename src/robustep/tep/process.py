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
parallel (then the posterior is refactorised once, O(n^3)), with damping; after each step
the site shifts are rescaled so that the cavity z-scores do not jump with the global scale
factor |B|^{-1/df} (derivation §9; without it the method fails from ~200 points).
For df = inf this is exactly parallel EP for GP classification with the step likelihood.

Hyperparameter gradients (:func:`process_log_marginal_likelihood_gradient`, derivation
§8): the explicit derivative with sites held fixed, and the total derivative of the
converged evidence through the sensitivity of the EP fixed point (implicit function
theorem; O(n^3) whatever the number of hyperparameters).
"""

from __future__ import annotations

import numpy as np

from robustep.families.t_exponential import t_of_df
from robustep.linalg import InvalidSiteConfiguration
from robustep.posterior.dense import DenseSitePosterior
from robustep.tep.ep import TEPInfo
from robustep.tep.likelihood import (
    _t_log_density_and_tail,
    _t_logpdf_std,
    _tilted_u_moments,
    escort_tilted_marginal,
    step_levels,
    tilted_normaliser,
)

__all__ = [
    "ProcessPosterior",
    "process_posterior",
    "process_tep",
    "process_log_marginal_likelihood",
    "process_log_marginal_likelihood_gradient",
]


class ProcessPosterior:
    """Gaussian-form posterior of t-EP: Sigma_G = (K^-1 + diag(tau))^-1, mu = Sigma_G nu.

    Attributes: ``d`` (n,) = diag(Sigma_G), ``mu`` (n,), ``logdet_b`` = log|I + K diag(tau)|
    — all a parallel sweep, the evidence and the LOO diagnostics need — and ``sigma_g``
    (n, n), formed on first use only (the evidence gradient).  The factorisation is the
    engine's :class:`robustep.posterior.dense.DenseSitePosterior` (block form for negative
    tau, Jylänki et al. 2011 §4): one Cholesky and one triangular inverse per posterior,
    about a third of the flops of forming Sigma_G (docs/derivations/tep.md §10).
    ``mu`` may be rescaled in place of the sites' shifts (§9); Sigma_G and ``d`` do not
    depend on the shifts.
    """

    def __init__(self, site_posterior):
        self._site = site_posterior
        self.d = site_posterior.var
        self.mu = site_posterior.mean
        self.logdet_b = float(site_posterior.log_det)
        self._sigma_g = None

    @property
    def sigma_g(self):
        """Sigma_G (n, n), computed once on first use (O(n^3))."""
        if self._sigma_g is None:
            S = self._site.covariance()
            self._sigma_g = 0.5 * (S + S.T)
        return self._sigma_g

    def latent_variance(self, K_cross, k_diag):
        """k** - K*^T (K + T^-1)^-1 K* for K_cross (m, n) and k_diag (m,): (m,)."""
        return self._site.predict(K_cross, k_diag)[1]


def process_posterior(K, tau, nu):
    """Sigma_G = (K^-1 + diag(tau))^-1, mu = Sigma_G nu and log|I + K diag(tau)|.

    K : (n, n) prior scale matrix; tau, nu : (n,) scaled sites (tau may be negative).
    Returns a :class:`ProcessPosterior`, or None if the posterior is not proper
    (K^-1 + diag(tau) not positive definite, or non-finite values).
    """
    try:
        with np.errstate(all="ignore"):
            site = DenseSitePosterior(K, tau, nu)
    except (InvalidSiteConfiguration, np.linalg.LinAlgError, ValueError):
        return None
    if not np.all(np.isfinite(site.var)):  # positivity is checked by the factorisation
        return None
    return ProcessPosterior(site)


def _cavities(post, tau, nu):
    d = post.d
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


def process_tep(
    K,
    y,
    *,
    df,
    eps=0.0,
    max_iter=200,
    tol=1e-4,
    damping=0.5,
    tau=None,
    nu=None,
    rescale=True,
    warm_logdet=None,
    adaptive=False,
):
    """Parallel t-EP for the latent Student-t process.

    Parameters
    ----------
    K : (n, n) prior scale matrix; y : (n,) in {-1, +1}; df : degrees of freedom
    (np.inf: GP-EP); eps : label noise; damping : weight kept on the old sites;
    tau, nu : optional warm start (n,).
    rescale : after each trial step multiply the site shifts ``nu`` (hence the posterior
        mean) by ``r = exp(-(log|B_new| - log|B_old|) / (2 df))``, which keeps every cavity
        z-score ``y_i m_i / sqrt(v_i)`` at the value the step gave it before the change of
        the global scale factor ``|B|^{-1/df}`` (docs/derivations/tep.md §9).  ``r = 1`` at a
        fixed point, so the fixed points are EP's; without it parallel t-EP fails from a
        few hundred points.  No effect for df = inf.
    warm_logdet : log|B| of the warm start under the kernel it was computed with.  If
        given (and ``rescale``), ``nu`` is first multiplied by
        ``exp(-(log|B|_K - warm_logdet) / (2 df))``, the same z-score-preserving
        correction for the change of K (warm starts inside the evidence optimiser).
    adaptive : adapt the step length ``1 - damping`` between sweeps: x1.25 (at most 1)
        after a sweep whose undamped residual max|F(s) - s| shrank, x0.5 (at least
        ``(1 - damping) / 4``) after one where it grew.  Same fixed points, fewer sweeps.

    Returns (tau (n,), nu (n,), ProcessPosterior, TEPInfo).
    """
    n = K.shape[0]
    tau = np.zeros(n) if tau is None else np.array(tau, dtype=float)
    nu = np.zeros(n) if nu is None else np.array(nu, dtype=float)
    post = process_posterior(K, tau, nu)
    if post is None:  # bad warm start
        tau, nu = np.zeros(n), np.zeros(n)
        post = process_posterior(K, tau, nu)
    elif rescale and warm_logdet is not None and not np.isinf(df):
        r = np.exp(-(post.logdet_b - float(warm_logdet)) / (2.0 * df))
        nu = r * nu
        post.mu = r * post.mu
    history = []
    converged = False
    n_skipped = 0
    it = 0
    base = 1.0 - damping  # step length of the next sweep
    last_resid = np.inf
    for it in range(1, max_iter + 1):  # noqa: B007 (it is the iteration count afterwards)
        tau_new, nu_new, good = _site_update(post.d, post.mu, post.logdet_b, tau, nu, y, df, eps, n)
        n_skipped += int((~good).sum())
        tau_new = np.where(good, tau_new, tau)
        nu_new = np.where(good, nu_new, nu)
        resid = max(np.abs(tau_new - tau).max(), np.abs(nu_new - nu).max())
        step = base
        new_post = None
        ok_before = _cavities(post, tau, nu)[2]
        while step > 1e-3:
            tau_try = tau + step * (tau_new - tau)
            nu_try = nu + step * (nu_new - nu)
            new_post = process_posterior(K, tau_try, nu_try)
            # Jylänki et al. (2011) §4, modification 2: a step may not make a valid cavity
            # improper (an improper cavity blocks that site's update and the evidence).
            if new_post is not None and not np.any(
                ok_before & ~_cavities(new_post, tau_try, nu_try)[2]
            ):
                break
            new_post = None
            step *= 0.5
        if new_post is None:
            history.append(np.inf)
            break
        if rescale and not np.isinf(df):
            # §9: keep the cavity z-scores through the change of the global scale factor
            r = np.exp(-(new_post.logdet_b - post.logdet_b) / (2.0 * df))
            nu_try = r * nu_try
            new_post.mu = r * new_post.mu
        diff = max(np.abs(tau_try - tau).max(), np.abs(nu_try - nu).max())
        tau, nu, post = tau_try, nu_try, new_post
        if adaptive:  # on the undamped residual |F(s) - s|, not on the damped step
            if resid < last_resid:
                base = min(1.0, 1.25 * base)
            elif resid > last_resid:
                base = max(0.5 * base, 0.25 * (1.0 - damping))
            last_resid = resid
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
    d = post.d
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
    var = np.maximum(post.latent_variance(K_star.T, k_star_diag), 1e-12)
    if not np.isinf(df):
        var = var * np.exp(-post.logdet_b / df)
    return mean, var


# ---------------------------------------------------------------------- gradients
def _evidence_partials(post, tau, nu, y, df, eps):
    """The log evidence and its partial derivatives in the posterior quantities.

    The evidence (eqs. 39-42, derivation §5-6) depends on K only through
    ``d_i = Sigma_G,ii``, ``mu_i``, ``q = nu^T mu`` and ``L = log|B|``, and on the sites
    also directly.  Treating (d, mu, q, L, tau, nu) as independent variables, returns
    ``(lml, partials)`` with partials a dict of arrays ``d, mu, tau, nu`` (n,) and floats
    ``q, L`` (derivation §8, eqs. 8.3-8.6).  Returns (-inf, None) outside the domain.
    """
    n = tau.size
    d = post.d
    mu = post.mu
    L = post.logdet_b
    om = 1.0 - tau * d  # = Sigma_ii / s2c_i = |B_cav| / |B|
    if not np.all(om > 1e-12 * np.maximum(1.0, np.abs(tau * d))):
        return -np.inf, None
    s2c = d / om
    mc = (mu - nu * d) / om
    q = nu @ mu
    qc = q - 2 * nu * mu + nu**2 * d + tau * (mu - nu * d) ** 2 / om
    log_om = np.log(om)
    inf = np.isinf(df)
    v = s2c if inf else np.exp(-(L + log_om) / df) * s2c  # cavity t-scale of f_i
    sv = np.sqrt(v)
    z = y * mc / sv
    lz = tilted_normaliser(mc, v, df, y, eps)
    r = np.exp(np.log1p(-2.0 * eps) + _t_logpdf_std(z, df) - lz)  # d lz / d z
    # d log v / d(.) and d z / d(.)
    extra = 0.0 if inf else 1.0 / df
    dlogv_dd = 1.0 / d + tau / om * (1.0 + extra)
    dlogv_dtau = d / om * (1.0 + extra)
    dz_dd = y * (tau * mu - nu) / (om**2 * sv) - 0.5 * z * dlogv_dd
    dz_dmu = y / (om * sv)
    dz_dtau = y * mc * d / (om * sv) - 0.5 * z * dlogv_dtau
    dz_dnu = -y * d / (om * sv)
    dz_dL = 0.5 * z * extra  # d log v / dL = -1/df
    # cavity quadratic forms and log|B_cav| - log|B|
    dqc_dd = (nu - tau * mc) ** 2
    dqc_dmu = 2.0 * (tau * mc - nu)
    dqc_dtau = mc**2
    dqc_dnu = -2.0 * mc
    dlom_dd = -tau / om
    dlom_dtau = -d / om
    if inf:
        lml = lz.sum() + 0.5 * (qc - q).sum() - 0.5 * log_om.sum() + 0.5 * q - 0.5 * L
        g = {
            "d": r * dz_dd + 0.5 * dqc_dd - 0.5 * dlom_dd,
            "mu": r * dz_dmu + 0.5 * dqc_dmu,
            "tau": r * dz_dtau + 0.5 * dqc_dtau - 0.5 * dlom_dtau,
            "nu": r * dz_dnu + 0.5 * dqc_dnu,
            "q": 0.5,
            "L": -0.5,
        }
        return float(lml), g
    s = np.exp(-L / df)
    sc = np.exp(-(L + log_om) / df)
    E = np.exp(-2.0 * lz / df)
    N = 1.0 + s * E.sum() + (n - 1) * q / df - sc.sum() - qc.sum() / df
    if not N > 0:
        return -np.inf, None
    lml = -0.5 * df * np.log(N) - 0.5 * L
    c0 = -0.5 * df / N
    w = -2.0 * s * E * r / df  # dN / dz_i
    g = {
        "d": c0 * (w * dz_dd + sc / df * dlom_dd - dqc_dd / df),
        "mu": c0 * (w * dz_dmu - dqc_dmu / df),
        "tau": c0 * (w * dz_dtau + sc / df * dlom_dtau - dqc_dtau / df),
        "nu": c0 * (w * dz_dnu - dqc_dnu / df),
        "q": c0 * (-1.0 / df),
        "L": c0 * (-s * E.sum() / df + (w * dz_dL).sum() + sc.sum() / df) - 0.5,
    }
    return float(lml), g


def _tilted_rho(u0, n, a, b):
    """``rho = (b - a) f_n(u0) / (a + (b - a) P(u > u0))`` for the tilted t of
    :func:`robustep.tep.likelihood._tilted_u_moments`; then ``d mean / d u0 =
    rho (mean - u0)`` and ``d var / d u0 = rho (var - (mean - u0)^2)`` (derivation §8.4)."""
    logf, logp = _t_log_density_and_tail(u0, n)
    log_ba = np.log(b - a)
    log_z = log_ba + logp if a == 0.0 else np.logaddexp(np.log(a), log_ba + logp)
    return np.exp(log_ba + logf - log_z)


def _site_update_partials(d, mu, L, tau, nu, y, df, eps, n):
    """Partial derivatives of the per-site map :func:`_site_update` in its five inputs.

    Site i's update is a scalar function of (d_i, mu_i, L, tau_i, nu_i); it is
    differentiated in closed form (forward mode through the cavity, the escort-tilted
    moments and the site formula; derivation §8.4), vectorised over sites.  Returns two
    dicts (for tau_new and nu_new) of (n,) arrays keyed ``d, mu, L, tau, nu``, and the
    mask of regular sites (partials are set to 0 elsewhere).
    """
    inf = np.isinf(df)
    c_e = 1.0 if inf else df / (df + 2.0)  # escort scale factor
    kappa = 1.0 if inf else df / (df + 1.0)
    a_lev, b_lev = step_levels(eps, t_of_df(df, n))
    with np.errstate(all="ignore"):
        cp = 1.0 / d - tau  # cavity precision
        g0 = mu / d - nu
        mc = g0 / cp
        om = d * cp
        log_s2t = -np.log(cp) if inf else -(L + np.log(om)) / df - np.log(cp)
        s = np.sqrt(c_e * np.exp(log_s2t))
        u0 = -y * mc / s
        mean_u, _, var_u = _tilted_u_moments(u0, df + 2.0, a_lev, b_lev)
        rho = _tilted_rho(u0, df + 2.0, a_lev, b_lev)
        m_hat = mc + y * s * mean_u
        x = (c_e * var_u) ** kappa
        _, _, good = _site_update(d, mu, L, tau, nu, y, df, eps, n)
        good &= np.isfinite(rho)
        zero = np.zeros_like(d)
        one = np.ones_like(d)
        a_tau, a_nu = {}, {}
        for key in ("d", "mu", "L", "tau", "nu"):
            dd, dmu, dL, dtau, dnu = (
                one if k == key else zero for k in ("d", "mu", "L", "tau", "nu")
            )
            dcp = -dd / d**2 - dtau
            dmc = (dmu / d - mu * dd / d**2 - dnu) / cp - g0 * dcp / cp**2
            dom = dd * cp + d * dcp
            dlog_s2t = -dcp / cp if inf else -(dL + dom / om) / df - dcp / cp
            dlog_s = 0.5 * dlog_s2t
            du0 = -y * dmc / s - u0 * dlog_s
            dmean = rho * (mean_u - u0) * du0
            dvar = rho * (var_u - (mean_u - u0) ** 2) * du0
            dm_hat = dmc + y * s * (dlog_s * mean_u + dmean)
            dlog_x = kappa * dvar / var_u
            dtau_new = -dlog_x / x * cp + (1.0 / x - 1.0) * dcp
            dnu_new = dcp * (m_hat / x - mc) + cp * ((dm_hat - m_hat * dlog_x) / x - dmc)
            a_tau[key] = np.where(good, dtau_new, 0.0)
            a_nu[key] = np.where(good, dnu_new, 0.0)
    return a_tau, a_nu, good


def _site_map_jacobian(S, mu, d, a_t, a_n):
    """Jacobian (2n, 2n) of the parallel site map F(tau, nu), rows and columns ordered
    (tau, nu), from the posterior covariance S (n, n), mean mu (n,), variances d (n,) and
    the partials ``a_t``, ``a_n`` of the new sites (:func:`_site_update_partials`)."""
    n = mu.size
    S2 = S * S

    def block(a):  # rows: d F_i / d(tau_j), d F_i / d(nu_j)
        jt = -a["d"][:, None] * S2 - a["mu"][:, None] * S * mu[None, :] + np.outer(a["L"], d)
        jt[np.diag_indices(n)] += a["tau"]
        jn = a["mu"][:, None] * S
        jn[np.diag_indices(n)] += a["nu"]
        return jt, jn

    tt, tn = block(a_t)
    nt, nn = block(a_n)
    return np.block([[tt, tn], [nt, nn]])


def _implicit_coefficients(post, tau, nu, y, df, eps, g):
    """Add the fixed-point sensitivity term to the partials ``g`` (derivation §8.4).

    At an EP fixed point ``s = F(s, K)`` (s = (tau, nu); F = :func:`_site_update`, damping
    does not change the fixed point or its sensitivity), ``ds = (I - J)^-1 F_K dK``.  With
    ``lambda = (I - J)^-T dlml/ds`` the total derivative is the explicit one plus
    ``lambda^T F_K dK``, and because F_i depends on K only through (d_i, mu_i, L) this is
    absorbed into the coefficients of dd, dmu and dL.  O(n^3).  Returns a new dict.
    """
    n = tau.size
    S = post.sigma_g
    d = np.diag(S)
    mu = post.mu
    a_t, a_n, _ = _site_update_partials(d, mu, post.logdet_b, tau, nu, y, df, eps, n)
    # Jacobian of (d, mu, q, L) w.r.t. the sites, contracted with the evidence partials
    S2 = S * S
    Smu = S @ g["mu"]
    gs_tau = -S2 @ g["d"] - mu * Smu - g["q"] * mu**2 + g["L"] * d + g["tau"]
    gs_nu = Smu + 2.0 * g["q"] * mu + g["nu"]
    jac = _site_map_jacobian(S, mu, d, a_t, a_n)
    try:
        lam = np.linalg.solve(np.eye(2 * n) - jac.T, np.concatenate([gs_tau, gs_nu]))
    except np.linalg.LinAlgError:  # singular: the fixed point is not locally unique
        lam = np.full(2 * n, np.nan)
    lt, ln = lam[:n], lam[n:]
    out = dict(g)
    out["d"] = g["d"] + lt * a_t["d"] + ln * a_n["d"]
    out["mu"] = g["mu"] + lt * a_t["mu"] + ln * a_n["mu"]
    out["L"] = g["L"] + float(lt @ a_t["L"] + ln @ a_n["L"])
    return out


def process_log_marginal_likelihood_gradient(
    K, K_gradient, y, tau, nu, df, eps, post=None, implicit=False
):
    """t-EP log evidence and its gradient w.r.t. kernel hyperparameters (derivation §8).

    K : (n, n); K_gradient : (n, n, p) with ``K_gradient[..., k] = dK / dtheta_k`` (as
    returned by ``kernel(X, eval_gradient=True)``); tau, nu : sites.

    ``implicit=False``: the *explicit* gradient, sites held fixed (eq. 8.7):
    ``dlml/dtheta_k = sum(G * dK/dtheta_k)`` with
    ``G = A^T diag(g_d) A + (a b^T + b a^T)/2 + g_q b b^T + g_L W``, ``A = I - Sigma_G T``,
    ``b = nu - tau * mu``, ``a = A^T g_mu``, ``W = T - T Sigma_G T``.  Equals the total
    derivative for df = inf at an EP fixed point; for finite df it does not.

    ``implicit=True``: adds the sensitivity of the EP fixed point (eq. 8.9), giving the
    total derivative of the converged evidence; sites must be an EP fixed point.

    Cost O(n^3 + n^2 p).  Returns (lml, grad (p,)); grad is NaN outside the domain.
    """
    if post is None:
        post = process_posterior(K, tau, nu)
    p = K_gradient.shape[2]
    if post is None:
        return -np.inf, np.full(p, np.nan)
    lml, g = _evidence_partials(post, tau, nu, y, df, eps)
    if g is None:
        return -np.inf, np.full(p, np.nan)
    if implicit:
        g = _implicit_coefficients(post, tau, nu, y, df, eps, g)
    S = post.sigma_g
    mu = post.mu
    A = np.eye(tau.size) - S * tau[None, :]  # (I + K T)^-1
    b = nu - tau * mu  # A^T nu
    a = A.T @ g["mu"]
    G = A.T @ (g["d"][:, None] * A)
    G += 0.5 * (np.outer(a, b) + np.outer(b, a)) + g["q"] * np.outer(b, b)
    G += g["L"] * (np.diag(tau) - tau[:, None] * S * tau[None, :])
    grad = np.einsum("ij,ijk->k", G, K_gradient)
    return lml, grad
