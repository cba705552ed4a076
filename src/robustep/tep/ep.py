"""ADF and EP for the t-exponential family: the linear Bayes point machine.

Futami, Sato & Sugiyama (2017) §3.3-4.3.  The approximate posterior is a k-dim
Student-t ``St(mu, Sigma, df)`` (fixed df; ``t = 1 + 2/(df + k)``) written as a
t-factorisation (eq. 31) ``p0(w) (x)_t prod_i l~_i(w)``; natural parameters add.

Coordinates.  The engine stores natural parameters in the *scaled* coordinates
``Lambda = df (1 - t) theta2 / Psi0`` and ``h = -df (1 - t) theta1 / (2 Psi0)``,
a fixed linear map of ``theta`` (``Psi0`` is the prior's Psi), so sums and differences
of natural parameters are sums and differences of (Lambda, h).  For the prior,
``Lambda0 = Sigma0^-1`` and ``h0 = Sigma0^-1 mu0``; in general
``mu = Lambda^-1 h`` and ``Sigma = (|Lambda| / |Lambda0|)^{-1/df} Lambda^-1``
(derivation §2.3).  For ``df = inf`` this is ordinary Gaussian EP in
(precision, shift).

EP site update for factor j (eqs. 32-38): cavity by subtracting natural parameters
(eq. 33), escort moment matching by Theorem 1 (eq. 34; the noisy-step closed form
:func:`robustep.tep.likelihood.escort_tilted_moments`, tested equal to
:func:`~robustep.tep.likelihood.theorem1_moments`), site = new - cavity (eq. 38).
ADF (eqs. 16-18) is a single pass in which the cavity is the current posterior.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np
from scipy.special import gammaln, log_ndtr, stdtr

from robustep.families.t_exponential import t_of_df
from robustep.tep.likelihood import (
    escort_tilted_marginal,
    escort_tilted_moments,
    step_levels,
    tilted_normaliser,
)

__all__ = ["LinearTEPState", "TEPInfo", "linear_tep", "linear_log_marginal_likelihood"]


@dataclasses.dataclass
class LinearTEPState:
    """State of linear t-EP.

    prior_lambda (k, k), prior_h (k,): prior in scaled natural coordinates.
    site_lambda (n, k, k), site_h (n, k): sites.
    df : degrees of freedom (np.inf for Gaussian EP).
    """

    prior_lambda: np.ndarray
    prior_h: np.ndarray
    site_lambda: np.ndarray
    site_h: np.ndarray
    df: float

    @property
    def post_lambda(self):
        return self.prior_lambda + self.site_lambda.sum(0)

    @property
    def post_h(self):
        return self.prior_h + self.site_h.sum(0)


@dataclasses.dataclass
class TEPInfo:
    """n_iter, converged, max_diff (last sweep), history of max_diff, n_skipped updates.

    ``last_proper`` (sequential linear t-EP): the rank-one sites ``(tau (n,), nu (n,))`` at
    the end of the last sweep in which no update was skipped (every cavity proper), or
    None.  A run that does not converge keeps its last iterate; this is the state to
    evaluate the evidence at when the last iterate has an improper cavity.
    """

    n_iter: int
    converged: bool
    max_diff: float
    history: list
    n_skipped: int = 0
    last_proper: tuple | None = None


def _logdet_pd(a):
    try:
        c = np.linalg.cholesky(a)
    except np.linalg.LinAlgError:
        return None
    return 2.0 * np.log(np.diag(c)).sum()


def student_t_from_scaled(lam, h, logdet_lam0, df):
    """(Lambda, h) -> (mu, Sigma) or None if Lambda is not positive definite."""
    logdet = _logdet_pd(lam)
    if logdet is None:
        return None
    inv = np.linalg.inv(lam)
    inv = 0.5 * (inv + inv.T)
    mu = inv @ h
    if np.isinf(df):
        return mu, inv
    return mu, np.exp(-(logdet - logdet_lam0) / df) * inv


def scaled_from_student_t(mu, sigma, logdet_lam0, df):
    """(mu, Sigma) -> (Lambda, h): ``Lambda = s Sigma^-1`` with
    ``log s = (log|Sigma| + log|Lambda0|) / (df + k)`` (derivation §2.3)."""
    k = mu.size
    logdet_sig = _logdet_pd(sigma)
    if logdet_sig is None:
        return None
    prec = np.linalg.inv(sigma)
    prec = 0.5 * (prec + prec.T)
    if not np.isinf(df):
        prec = prec * np.exp((logdet_sig + logdet_lam0) / (df + k))
    return prec, prec @ mu


def linear_tep(
    X,
    y,
    *,
    df,
    eps=0.0,
    prior_mean=None,
    prior_cov=None,
    method="ep",
    max_iter=100,
    tol=1e-4,
    damping=0.0,
    site_form="rank1",
    clip_negative=False,
    state=None,
):
    """Run ADF or EP for the BPM posterior ``p(w) ∝ St(w; mu0, Sigma0, df) prod_i l_i(w)``.

    Parameters
    ----------
    X : (n, k) inputs (include a column of ones for an intercept).
    y : (n,) labels in {-1, +1}.
    df : Student-t degrees of freedom of prior and approximation (np.inf: Gaussian EP).
    eps : label-noise level of eq. (43), in [0, 0.5).
    prior_mean (k,), prior_cov (k, k) : prior location and scale (default 0, I).
    method : "ep" (sequential sweeps in data order until converged) or "adf" (one pass).
    damping : weight kept on the old site (0 = none).
    site_form : "full" — sites with all sufficient statistics (w, w w^T), full escort
        moment matching by Theorem 1 (k x k sites); "rank1" — sites with the statistics
        (<w, x_i>, <w, x_i>^2) only, matching the escort mean and variance of <w, x_i>
        (Theorem 1 projected on the site's statistics, closed form as in
        :mod:`robustep.tep.process`).  Both reduce to Gaussian EP for df = inf; "full"
        can make cavities improper on large data sets (updates are then skipped).
    state : optional warm start.

    Returns
    -------
    state : LinearTEPState, info : TEPInfo.
    """
    X = np.asarray(X, dtype=float)
    y = np.asarray(y, dtype=float)
    n, k = X.shape
    mu0 = np.zeros(k) if prior_mean is None else np.asarray(prior_mean, dtype=float)
    cov0 = np.eye(k) if prior_cov is None else np.asarray(prior_cov, dtype=float)
    if site_form not in ("full", "rank1"):
        raise ValueError(f"site_form must be 'full' or 'rank1', got {site_form!r}")
    if method not in ("ep", "adf"):
        raise ValueError(f"method must be 'ep' or 'adf', got {method!r}")
    lam0 = np.linalg.inv(cov0)
    logdet_lam0 = _logdet_pd(lam0)
    if state is None:
        state = LinearTEPState(lam0, lam0 @ mu0, np.zeros((n, k, k)), np.zeros((n, k)), float(df))
    if site_form == "rank1":
        return _linear_tep_rank1(
            X, y, state, df, eps, method, max_iter, tol, damping, clip_negative
        )
    V = X * y[:, None]
    lam = state.post_lambda
    h = state.post_h
    history = []
    n_skipped = 0
    converged = False
    sweeps = 1 if method == "adf" else max_iter
    it = 0
    for it in range(1, sweeps + 1):  # noqa: B007 (it is the iteration count afterwards)
        max_diff = 0.0
        for j in range(n):
            if method == "ep":
                lam_c = lam - state.site_lambda[j]
                h_c = h - state.site_h[j]
            else:
                lam_c, h_c = lam, h
            cav = student_t_from_scaled(lam_c, h_c, logdet_lam0, df)
            if cav is None:
                n_skipped += 1
                continue
            if site_form == "full":
                mu_new, sig_new = escort_tilted_moments(cav[0], cav[1], df, V[j], eps)
                new = None
                if np.all(np.isfinite(sig_new)) and np.all(np.isfinite(mu_new)):
                    new = scaled_from_student_t(mu_new, sig_new, logdet_lam0, df)
            else:
                new = _rank1_update(lam_c, h_c, cav, logdet_lam0, df, k, X[j], y[j], eps)
            if new is None:
                n_skipped += 1
                continue
            if method == "adf":
                d_lam, d_h = new[0] - lam_c, new[1] - h_c
                state.site_lambda[j] += d_lam
                state.site_h[j] += d_h
                lam, h = new
                continue
            s_lam = damping * state.site_lambda[j] + (1 - damping) * (new[0] - lam_c)
            s_h = damping * state.site_h[j] + (1 - damping) * (new[1] - h_c)
            max_diff = max(
                max_diff,
                np.abs(s_lam - state.site_lambda[j]).max(),
                np.abs(s_h - state.site_h[j]).max(),
            )
            state.site_lambda[j] = s_lam
            state.site_h[j] = s_h
            lam = lam_c + s_lam
            h = h_c + s_h
        history.append(max_diff)
        if method == "adf":
            converged = True
            break
        if max_diff < tol:
            converged = True
            break
    return state, TEPInfo(it, converged, history[-1] if history else 0.0, history, n_skipped)


def _rank1_update(lam_c, h_c, cav, logdet_lam0, df, k, x, y, eps):
    """Projected site update (site statistics <w, x>, <w, x>^2); returns new (Lambda, h) or None.

    Gaussian-form cavity marginal of f = <w, x>: (m, sigma2); its Student-t scale is
    s2t = (|Lambda_cav| / |Lambda0|)^{-1/df} sigma2.  With the escort-tilted marginal
    (m^, s^2): x = (s^2 / s2t)^{df / (df + 1)}, tau = (1/x - 1)/sigma2,
    nu = m^/(x sigma2) - m/sigma2 (derivation §6).
    """
    mu_c, sig_c = cav
    s2t = x @ sig_c @ x
    m = x @ mu_c
    scale = 1.0 if np.isinf(df) else np.exp(-(_logdet_pd(lam_c) - logdet_lam0) / df)
    sigma2 = s2t / scale
    m_hat, v_hat = escort_tilted_marginal(m, s2t, df, k, y, eps)
    ratio = v_hat / s2t
    xr = ratio if np.isinf(df) else ratio ** (df / (df + 1.0))
    tau = (1.0 / xr - 1.0) / sigma2
    nu = m_hat / (xr * sigma2) - m / sigma2
    if not (np.isfinite(tau) and np.isfinite(nu) and xr > 0):
        return None
    lam = lam_c + tau * np.outer(x, x)
    if _logdet_pd(lam) is None:
        return None
    return lam, h_c + nu * x


def _exp(x):
    """math.exp that returns inf instead of raising OverflowError (as np.exp does)."""
    return math.exp(x) if x < 709.0 else math.inf


@functools.lru_cache(maxsize=64)
def _t_log_const(n):
    """log of the standard Student-t density's normaliser with n dof."""
    return float(gammaln((n + 1.0) / 2.0) - gammaln(n / 2.0)) - 0.5 * math.log(math.pi * n)


def _escort_marginal_scalar(m, s2, df, y, a, b):
    """Scalar :func:`robustep.tep.likelihood.escort_tilted_marginal` for the sequential loop.

    The same formulas (derivation §6) with Python floats instead of 1-element arrays: the
    sequential sweep calls it once per site update, where NumPy's per-call overhead was
    most of the cost.  ``(a, b)`` are the step levels ``(eps^t, (1 - eps)^t)``.  Tested
    equal to the vectorised function (tests/estimators/test_bpm.py).
    """
    n = df + 2.0
    inf = math.isinf(df)
    sc2 = s2 if inf else df * s2 / n
    if not sc2 > 0.0:
        return math.nan, math.nan
    s = math.sqrt(sc2)
    u0 = -y * m / s
    if inf:
        logf = -0.5 * (math.log(2.0 * math.pi) + u0 * u0)
        logp = float(log_ndtr(-u0))
        second_u_base = 1.0
    else:
        logf = _t_log_const(n) - 0.5 * (n + 1.0) * math.log1p(u0 * u0 / n)
        tail = float(stdtr(n, -u0))
        logp = math.log(tail) if tail > 0.0 else float(log_ndtr(-u0))
        second_u_base = n / (n - 2.0)
    if a == 0.0:
        if inf:
            r = _exp(logf - logp)
            mean_u, var_u = r, 1.0 + u0 * r - r * r
        else:
            r = (n + u0 * u0) / (n - 1.0) * _exp(logf - logp)
            mean_u = r
            var_u = (u0 * (n - 1.0) * r + n) / (n - 2.0) - r * r
    else:
        p = _exp(logp)
        f = _exp(logf)
        zt = a + (b - a) * p
        if inf:
            e_u, e_u2 = f, p + u0 * f
        else:
            e_u = (n + u0 * u0) * f / (n - 1.0)
            e_u2 = (u0 * (n + u0 * u0) * f + n * p) / (n - 2.0)
        mean_u = (b - a) * e_u / zt
        var_u = (a * second_u_base + (b - a) * e_u2) / zt - mean_u * mean_u
    var_u = max(var_u, 1e-300)
    # NumPy scalars: the caller's arithmetic then gives inf/NaN (skipped updates) rather
    # than raising ZeroDivisionError, as it did with the vectorised function
    return np.float64(m + y * s * mean_u), np.float64(var_u * sc2)


def _linear_tep_rank1(X, y, state, df, eps, method, max_iter, tol, damping, clip_negative):
    """Sequential rank-one t-EP / ADF, Sherman-Morrison updates of C = Lambda^-1 (O(k^2) per site).

    Site j is (tau_j x_j x_j^T, nu_j x_j); recovered from ``state.site_lambda`` (which
    must be of that form) and written back at the end.
    """
    n, k = X.shape
    sq = np.einsum("ij,ij->i", X, X)
    # recover scalar sites from a (possibly warm-started) rank-one state
    tau = np.zeros(n)
    nu = np.zeros(n)
    nz = sq > 0
    tau[nz] = np.einsum("ij,ijk,ik->i", X[nz], state.site_lambda[nz], X[nz]) / sq[nz] ** 2
    nu[nz] = np.einsum("ij,ij->i", X[nz], state.site_h[nz]) / sq[nz]
    lam0 = state.prior_lambda
    logdet0 = _logdet_pd(lam0)
    lam = lam0 + np.einsum("i,ij,ik->jk", tau, X, X)
    h = state.prior_h + X.T @ nu
    logdet = _logdet_pd(lam)
    if logdet is None:
        tau[:], nu[:] = 0.0, 0.0
        lam, h, logdet = lam0.copy(), state.prior_h.copy(), logdet0
    C = np.linalg.inv(lam)
    mu = C @ h
    finite_df = not np.isinf(df)
    a_lev, b_lev = step_levels(eps, t_of_df(df, k))
    history = []
    n_skipped = 0
    converged = False
    last_proper = None
    sweeps = 1 if method == "adf" else max_iter
    it = 0
    for it in range(1, sweeps + 1):
        max_diff = 0.0
        skipped_before = n_skipped
        for j in range(n):
            x = X[j]
            cx = C @ x
            s2p = float(x @ cx)
            mp = float(x @ mu)
            if method == "ep":
                one_minus = 1.0 - tau[j] * s2p  # |Lambda_cav| / |Lambda|
                if not (s2p > 0 and one_minus > 0):
                    n_skipped += 1
                    continue
                s2c = s2p / one_minus
                mc = s2c * (mp / s2p - nu[j])
                logdet_c = logdet + np.log(one_minus)
                tau_old, nu_old = tau[j], nu[j]
            else:
                s2c, mc, logdet_c = s2p, mp, logdet
                tau_old, nu_old = 0.0, 0.0
            scale = np.exp(-(logdet_c - logdet0) / df) if finite_df else 1.0
            s2t = scale * s2c
            m_hat, v_hat = _escort_marginal_scalar(mc, s2t, df, float(y[j]), a_lev, b_lev)
            ratio = v_hat / s2t
            xr = ratio ** (df / (df + 1.0)) if finite_df else ratio
            t_new = (1.0 / xr - 1.0) / s2c
            if clip_negative and t_new < 0:  # keep the mean matched, variance as close as allowed
                t_new, xr = 0.0, 1.0
            n_new = m_hat / (xr * s2c) - mc / s2c
            if not (np.isfinite(t_new) and np.isfinite(n_new) and xr > 0):
                n_skipped += 1
                continue
            if method == "ep":
                t_new = damping * tau_old + (1 - damping) * t_new
                n_new = damping * nu_old + (1 - damping) * n_new
            d_tau = t_new - tau_old if method == "ep" else t_new
            d_nu = n_new - nu_old if method == "ep" else n_new
            denom = 1.0 + d_tau * s2p
            if not denom > 0:
                n_skipped += 1
                continue
            C = C - (d_tau / denom) * np.outer(cx, cx)
            logdet = logdet + np.log(denom)
            h = h + d_nu * x
            mu = C @ h
            if method == "ep":
                max_diff = max(max_diff, abs(d_tau), abs(d_nu))
                tau[j], nu[j] = t_new, n_new
            else:
                tau[j] += d_tau
                nu[j] += d_nu
        if method == "ep" and it % 20 == 0:  # refactorise to limit round-off
            lam = lam0 + np.einsum("i,ij,ik->jk", tau, X, X)
            h = state.prior_h + X.T @ nu
            ld = _logdet_pd(lam)
            if ld is not None:
                logdet, C = ld, np.linalg.inv(lam)
                mu = C @ h
        history.append(max_diff)
        clean = n_skipped == skipped_before  # no cavity was improper in this sweep
        if clean:
            last_proper = (tau.copy(), nu.copy())
        # a sweep that skipped updates is no evidence of a fixed point (with every site
        # skipped max_diff is 0)
        if method == "adf" or (max_diff < tol and clean):
            converged = True
            break
    state.site_lambda, state.site_h = _rank_one_site_arrays(X, tau, nu)
    last = history[-1] if history else 0.0
    return state, TEPInfo(it, converged, last, history, n_skipped, last_proper)


def rank_one_sites(state, X):
    """The scalar sites ``(tau (n,), nu (n,))`` of a rank-one state (sites ``tau_j x_j x_j^T``,
    ``nu_j x_j``); X (n, k)."""
    sq = np.einsum("ij,ij->i", X, X)
    tau = np.zeros(X.shape[0])
    nu = np.zeros(X.shape[0])
    nz = sq > 0
    tau[nz] = np.einsum("ij,ijk,ik->i", X[nz], state.site_lambda[nz], X[nz]) / sq[nz] ** 2
    nu[nz] = np.einsum("ij,ij->i", X[nz], state.site_h[nz]) / sq[nz]
    return tau, nu


def _rank_one_site_arrays(X, tau, nu):
    """The site arrays ``(tau_j x_j x_j^T (n, k, k), nu_j x_j (n, k))`` of scalar sites."""
    return tau[:, None, None] * np.einsum("ij,ik->ijk", X, X), nu[:, None] * X


def rank_one_state(prior_lambda, prior_h, X, tau, nu, df):
    """A :class:`LinearTEPState` with rank-one sites ``(tau_j x_j x_j^T, nu_j x_j)``."""
    return LinearTEPState(prior_lambda, prior_h, *_rank_one_site_arrays(X, tau, nu), float(df))


def linear_posterior(state):
    """(mu (k,), Sigma (k, k)) of the approximate posterior St(mu, Sigma, df)."""
    lam0 = state.prior_lambda
    out = student_t_from_scaled(state.post_lambda, state.post_h, _logdet_pd(lam0), state.df)
    if out is None:
        raise FloatingPointError("posterior natural parameters are not proper")
    return out


def linear_log_marginal_likelihood(state, X, y, eps):
    """EP marginal likelihood of the t-factorisation (Theorem 2, eqs. 39-42).

    Site normalisers are chosen so that ``int p_cav (x)_t l~_j dw`` equals the tilted
    normaliser ``Z^_j = int p_cav l_j dw`` (exact for one data point).  With
    ``s(theta) = Psi(theta) / Psi0 = (|Lambda| / |Lambda0|)^{-1/df}`` and
    ``d(theta) = s + mu^T Lambda mu / df`` (so ``D = 1 - (1 - t) g_t = Psi0 d``):

    ``log Z_EP = -(df/2) log([d0 + sum_j (s Z^_j^{-2/df} + p - d_cav,j) - p] / s)``,
    ``p = mu^T Lambda mu / df`` (derivation §5).  For df = inf the Gaussian EP formula.
    """
    X = np.asarray(X, dtype=float)
    y = np.asarray(y, dtype=float)
    df = state.df
    lam0, h0 = state.prior_lambda, state.prior_h
    logdet0 = _logdet_pd(lam0)
    lam, h = state.post_lambda, state.post_h
    post = student_t_from_scaled(lam, h, logdet0, df)
    if post is None:
        return -np.inf
    logdet = _logdet_pd(lam)
    mu = post[0]
    q = mu @ h  # mu^T Lambda mu
    q0 = h0 @ np.linalg.solve(lam0, h0)
    terms = []
    for j in range(X.shape[0]):
        lam_c = lam - state.site_lambda[j]
        h_c = h - state.site_h[j]
        cav = student_t_from_scaled(lam_c, h_c, logdet0, df)
        if cav is None:
            return -np.inf
        v = X[j] * y[j]
        log_zhat = tilted_normaliser(v @ cav[0], v @ cav[1] @ v, df, 1.0, eps)
        ld_c = _logdet_pd(lam_c)
        q_c = cav[0] @ h_c
        terms.append((log_zhat, ld_c, q_c))
    log_zhat, ld_c, q_c = (np.array(a) for a in zip(*terms, strict=True))
    if np.isinf(df):
        phi = 0.5 * q - 0.5 * logdet
        phi0 = 0.5 * q0 - 0.5 * logdet0
        phi_c = 0.5 * q_c - 0.5 * ld_c
        return float(log_zhat.sum() + (phi_c - phi).sum() + phi - phi0)
    s = np.exp(-(logdet - logdet0) / df)
    s_c = np.exp(-(ld_c - logdet0) / df)
    p = q / df
    d0 = np.exp(0.0) + q0 / df
    d_c = s_c + q_c / df
    bracket = (d0 + np.sum(s * np.exp(-2.0 * log_zhat / df) + p - d_c) - p) / s
    if not bracket > 0:
        return -np.inf
    return float(-0.5 * df * np.log(bracket))
