"""Annealed importance sampling (AIS) estimate of the GP marginal likelihood.

Neal (2001); used by Jylänki et al. (2011, Sec. 5.3, Fig. 4) as the reference
for the EP marginal likelihood.  The target is

    p(y | theta) = int N(f | 0, K) prod_i p(y_i | f_i) df.

Intermediate distributions p_t(f) ∝ N(f | 0, K) p(y | f)^beta_t with
0 = beta_0 < ... < beta_T = 1; each chain starts from the prior and its
log weight accumulates (beta_t - beta_{t-1}) log p(y | f_{t-1}).  The
transitions are elliptical slice sampling updates (Murray, Adams & MacKay
2010), which leave p_t invariant for any likelihood and need no tuning; they
are vectorised over chains.  The estimate is log mean_k exp(log w_k).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy import linalg
from sklearn.utils import check_random_state

from robustep.linalg import jittered_cholesky

__all__ = ["AISResult", "ais_log_marginal_likelihood", "annealing_schedule"]


@dataclasses.dataclass
class AISResult:
    """log_Z : the AIS estimate of log p(y|theta); log_weights : (n_chains,);
    std_error : delta-method standard error of log_Z; ess : effective number of chains."""

    log_Z: float
    log_weights: np.ndarray
    std_error: float
    ess: float


def annealing_schedule(n_temperatures: int, kind: str = "sigmoid", rate: float = 4.0):
    """Inverse temperatures beta_0 = 0 < ... < beta_T = 1, shape (T + 1,).

    "sigmoid" (Neal 2001 style, denser at both ends) or "geometric" (denser near 0).
    """
    if n_temperatures < 1:
        raise ValueError("n_temperatures must be >= 1")
    t = np.linspace(0.0, 1.0, n_temperatures + 1)
    if kind == "linear":
        return t
    if kind == "geometric":
        b = np.geomspace(1e-4, 1.0, n_temperatures)
        return np.concatenate([[0.0], b])
    if kind == "sigmoid":
        s = 1.0 / (1.0 + np.exp(-rate * (2.0 * t - 1.0)))
        return (s - s[0]) / (s[-1] - s[0])
    raise ValueError(f"unknown schedule {kind!r}; use 'sigmoid', 'geometric' or 'linear'")


def _elliptical_slice(f, loglik, beta, L, log_lik_fn, rng):
    """One vectorised elliptical slice sampling step for chains f (c, n) at temperature beta."""
    c, n = f.shape
    nu = rng.standard_normal((c, n)) @ L.T
    log_y = beta * loglik + np.log(rng.uniform(size=c))
    angle = rng.uniform(0.0, 2.0 * np.pi, size=c)
    lo, hi = angle - 2.0 * np.pi, angle.copy()
    new_f, new_ll = f.copy(), loglik.copy()
    active = np.ones(c, dtype=bool)
    for _ in range(100):  # shrinkage iterations, vectorised over chains
        idx = np.flatnonzero(active)
        if idx.size == 0:
            break
        prop = f[idx] * np.cos(angle[idx])[:, None] + nu[idx] * np.sin(angle[idx])[:, None]
        ll = log_lik_fn(prop)
        ok = beta * ll > log_y[idx]
        acc = idx[ok]
        new_f[acc], new_ll[acc] = prop[ok], ll[ok]
        active[acc] = False
        rej = idx[~ok]
        neg = angle[rej] < 0
        lo[rej] = np.where(neg, angle[rej], lo[rej])
        hi[rej] = np.where(neg, hi[rej], angle[rej])
        angle[rej] = rng.uniform(lo[rej], hi[rej])
    return new_f, new_ll


def ais_log_marginal_likelihood(
    K,
    y,
    likelihood,
    *,
    n_temperatures: int = 1000,
    n_chains: int = 16,
    n_steps: int = 1,
    schedule: str = "sigmoid",
    initial_sites=None,
    random_state=None,
) -> AISResult:
    """AIS estimate of log p(y | theta) for any likelihood with ``log_prob``.

    K : (n, n) prior covariance; y : (n,); n_steps : elliptical slice updates per temperature.
    initial_sites : None (anneal from the prior N(0, K)) or ``(site_precision, site_shift)``
        (n,) of a Gaussian approximation q(f) ∝ N(f|0,K) exp(-tau f^2/2 + nu f) (EP or Laplace
        sites; tau may be negative if q is proper) to anneal from instead:
        p_t ∝ q(f)^(1 - beta_t) [N(f|0,K) p(y|f)]^beta_t.  Worked in whitened coordinates
        f = L u, where q(u) has precision B = I + L^T diag(tau) L, so no K^-1 is formed;
        far shorter schedules suffice than from the prior.
    """
    K = np.asarray(K, float)
    y = likelihood.validate_targets(y)
    n = y.size
    if K.shape != (n, n):
        raise ValueError(f"K must have shape ({n}, {n}), got {K.shape}")
    if n_chains < 1 or n_steps < 1:
        raise ValueError("n_chains and n_steps must be >= 1")
    rng = check_random_state(random_state)
    L = jittered_cholesky(K, warn=False)[0]
    betas = annealing_schedule(n_temperatures, schedule)

    def log_lik_fn(F):
        # likelihoods take one-dimensional site arrays: flatten (chains, n) -> (chains * n,)
        Y = np.broadcast_to(y, F.shape).ravel()
        return np.sum(likelihood.log_prob(Y, F.ravel()).reshape(F.shape), axis=1)

    if initial_sites is None:
        f = rng.standard_normal((n_chains, n)) @ L.T
        ll = log_lik_fn(f)
        L_move, g, to_f = L, log_lik_fn, lambda F: F
    else:
        tau = np.asarray(initial_sites[0], float).reshape(n)
        nu_s = np.asarray(initial_sites[1], float).reshape(n)
        B = np.eye(n) + (L.T * tau) @ L
        C = linalg.cholesky(B, lower=True)  # raises if q is improper
        h = L.T @ nu_s
        u_mean = linalg.cho_solve((C, True), h)
        log_Zq = -np.sum(np.log(np.diag(C))) + 0.5 * h @ u_mean
        # chains hold u - u_mean ~ N(0, B^-1); B^-1 = C^-T C^-1 -> factor C^-T
        L_move = linalg.solve_triangular(C, np.eye(n), lower=True).T

        def to_f(U):
            return (U + u_mean) @ L.T

        def g(U):  # log p(y|f) - log site(f) + log Z_q, f = L (U + u_mean)
            F = to_f(U)
            return log_lik_fn(F) + 0.5 * (F**2) @ tau - F @ nu_s + log_Zq

        f = rng.standard_normal((n_chains, n)) @ L_move.T
        ll = g(f)
    log_w = np.zeros(n_chains)
    for t in range(1, betas.size):  # loop over temperatures
        log_w += (betas[t] - betas[t - 1]) * ll
        for _ in range(n_steps):
            f, ll = _elliptical_slice(f, ll, betas[t], L_move, g, rng)
    mx = log_w.max()
    w = np.exp(log_w - mx)
    log_Z = float(mx + np.log(w.mean()))
    ess = float(w.sum() ** 2 / np.sum(w**2))
    # delta method: var(log mean w) ≈ var(w) / (n mean(w)^2)
    se = float(np.sqrt(w.var(ddof=1) / (n_chains * w.mean() ** 2))) if n_chains > 1 else np.inf
    return AISResult(log_Z, log_w, se, ess)
