"""Relaxed expectation propagation (REP) site update for factors of one latent value.

Qi & Guo, "Message passing with relaxed moment matching" (long version §3–4,
Appendix B; ICML version §3, §4.1).  The derivation, with every convention, is
in ``docs/derivations/rep.md``; the short version:

Conventions
-----------
* Gaussian factors in natural parameters ``exp(-precision f**2 / 2 + shift f)``
  (``robustep.families.gaussian``).  Site ``i`` has ``(tau_i, nu_i)``; its mean is
  ``m_i = nu_i / tau_i`` (``m_i = 0`` for a flat site, the paper's initial value).
* Cavity ``q\\i(f) = N(f | mu, s)`` (moment form, normalised).
* Relaxation factor (long version eq. 11): ``r_i(f) = exp(-b_i (f - m_i)**2 / 2)``,
  ``b_i >= 0`` a precision, centred at the *old* site's mean.
* Relaxed cavity (eq. 13): ``r_i q\\i ∝ N(f | mu_b, s_b)`` with
  ``1/s_b = 1/s + b`` and ``mu_b / s_b = mu / s + b m_i``.
* Relaxed tilted distribution ``p_b(f) = t_i(f) N(f | mu_b, s_b) / Z_b`` with moments
  ``(mu_hat, s_hat)``, and its Gaussian projection ``g_b = N(mu_hat, s_hat)``.
* Objective (Appendix B eq. 35): with the new belief eliminated analytically
  (``q r_i = g_b``, Section 3.2), the relaxed KL is the KL divergence between the
  normalised ``p_b`` and ``g_b``::

      Q(b) = E_pb[log t] - log Z_b + 1/2 log(s_hat / s_b) + 1/2
             - ((mu_hat - mu_b)**2 + s_hat) / (2 s_b)  +  c |b|

  (an equivalent, ungarbled form of eq. 36).  ``Q(b) - c b >= 0`` and vanishes
  when ``p_b`` is Gaussian.
* New belief ``q = g_b / r_i`` (``r_i`` appears on both sides of the KL and is not
  part of the belief, Section 3.2), hence the new site ``t_i = q / q\\i = g_b / (r_i q\\i)``::

      tau_new = 1/s_hat - (1/s + b),   nu_new = mu_hat/s_hat - (mu/s + b m_i)

  which is plain EP's moment-matching update at the relaxed cavity; ``b = 0`` gives
  exactly EP (steps (a)–(f), eqs. 12–17).

Everything is vectorised over sites; ``b`` is found by a grid search over
``beta = b s`` (log-spaced) followed by golden-section refinement in ``log beta``,
all sites at once, and compared with ``b = 0`` (the l1 penalty's kink).
"""

from __future__ import annotations

import functools

import numpy as np
from scipy import special

from robustep._config import get_config
from robustep.quadrature import gauss_hermite

__all__ = [
    "relaxed_cavity",
    "relaxed_kl_objective",
    "optimise_relaxation",
    "relaxed_moment_matching",
    "rep_site_update",
    "make_rep_update",
    "expected_log_likelihood",
]

#: Log10 range and size of the grid of beta = b * cavity_var searched before refinement.
_BETA_LOG10_RANGE = (-6.0, 6.0)
_BETA_GRID_SIZE = 37
_GOLDEN_ITERATIONS = 40
_INV_PHI = (np.sqrt(5.0) - 1.0) / 2.0


def site_means(site_precision, site_shift, cavity_var):
    """Old site means m_i = nu_i / tau_i, shape (n,); 0 where the site is (numerically) flat.

    A site counts as flat when ``|tau_i| * cavity_var_i <= 1e-10`` (the paper initialises
    ``m_i = 0, v_i = inf``).
    """
    tau = np.asarray(site_precision, dtype=float)
    nu = np.asarray(site_shift, dtype=float)
    flat = np.abs(tau) * np.asarray(cavity_var, dtype=float) <= 1e-10
    return np.where(flat, 0.0, nu / np.where(flat, 1.0, tau))


def relaxed_cavity(cavity_mean, cavity_var, site_mean, b):
    """Cavity times r_i (long version eq. 13), broadcast over arrays.

    Returns ``(mu_b, s_b)``: ``1/s_b = 1/s + b``, ``mu_b = s_b (mu/s + b m_i)``.
    """
    cavity_var = np.asarray(cavity_var, dtype=float)
    prec = 1.0 / cavity_var + b
    s_b = 1.0 / prec
    mu_b = s_b * (np.asarray(cavity_mean, dtype=float) / cavity_var + b * site_mean)
    return mu_b, s_b


def _is_noisy_step(likelihood) -> bool:
    return type(likelihood).__name__ == "NoisyStep" and hasattr(likelihood, "epsilon")


def expected_log_likelihood(likelihood, y, mean, var, log_Z=None):
    """E[log t(f)] under the tilted distribution t(f) N(f | mean, var) / Z, shape (n,).

    Closed form for the noisy step likelihood t(f) = eps + (1 - 2 eps) Theta(y f)
    (long version eq. 36, first term); otherwise Gauss–Hermite quadrature with
    ``get_config().quadrature_points`` nodes on N(f | mean, var), using ``log_prob``.
    A likelihood may provide its own ``tilted_expected_log_prob(y, mean, var)``.
    """
    y, mean, var = np.broadcast_arrays(
        np.asarray(y, float), np.asarray(mean, float), np.asarray(var, float)
    )
    if hasattr(likelihood, "tilted_expected_log_prob"):
        return np.asarray(likelihood.tilted_expected_log_prob(y, mean, var), dtype=float)
    if _is_noisy_step(likelihood):
        eps = float(likelihood.epsilon)
        z = y * mean / np.sqrt(var)
        p_right = special.ndtr(z)
        p_wrong = special.ndtr(-z)
        right = special.xlogy(1.0 - eps, 1.0 - eps)
        wrong = special.xlogy(eps, eps)
        Z = (1.0 - eps) * p_right + eps * p_wrong
        return (right * p_right + wrong * p_wrong) / Z
    nodes, log_w = gauss_hermite(get_config().quadrature_points)  # E_{N(0,1)} rule
    weights = np.exp(log_w)
    f = mean[..., None] + np.sqrt(var)[..., None] * nodes
    logp = likelihood.log_prob(np.broadcast_to(y[..., None], f.shape).ravel(), f.ravel()).reshape(
        f.shape
    )
    if log_Z is None:
        log_Z = special.logsumexp(logp + log_w, axis=-1)
    p = np.exp(logp - np.asarray(log_Z)[..., None])
    integrand = np.where(p > 0, p * np.where(np.isfinite(logp), logp, 0.0), 0.0)
    return integrand @ weights


def relaxed_kl_objective(likelihood, y, cavity_mean, cavity_var, site_mean, b, relaxation):
    """Penalised relaxed KL Q(b) (Appendix B eq. 35), elementwise over broadcast arrays.

    Q(b) = KL(p_b || g_b) + c |b| where p_b ∝ t(f) N(f | mu_b, s_b) is the tilted
    distribution at the relaxed cavity and g_b its moment-matched Gaussian::

        Q(b) = E_pb[log t] - log Z_b + 1/2 log(s_hat / s_b) + 1/2
               - ((mu_hat - mu_b)^2 + s_hat) / (2 s_b) + c |b|

    Parameters
    ----------
    y, cavity_mean, cavity_var, site_mean, b : arrays broadcastable to a common shape
    relaxation : c >= 0 (scalar or broadcastable)

    Returns
    -------
    Q : array of the common shape.  Non-finite values (failed moments) are +inf.
    """
    y, mu, s, m, b = np.broadcast_arrays(
        *(np.asarray(a, dtype=float) for a in (y, cavity_mean, cavity_var, site_mean, b))
    )
    shape = y.shape
    mu_b, s_b = relaxed_cavity(mu, s, m, b)
    flat = [a.ravel() for a in (y, mu_b, s_b)]
    log_Z, mu_hat, s_hat = likelihood.tilted_moments(*flat, 1.0)
    e_log_t = expected_log_likelihood(likelihood, *flat, log_Z=log_Z)
    s_b = flat[2]
    with np.errstate(divide="ignore", invalid="ignore"):
        kl = (
            e_log_t
            - log_Z
            + 0.5 * np.log(s_hat / s_b)
            + 0.5
            - ((mu_hat - flat[1]) ** 2 + s_hat) / (2.0 * s_b)
        )
    kl = np.where(np.isfinite(kl), np.maximum(kl, 0.0), np.inf).reshape(shape)
    return kl + np.asarray(relaxation, dtype=float) * np.abs(b)


def optimise_relaxation(likelihood, y, cavity_mean, cavity_var, site_mean, relaxation):
    """Minimise Q(b) over b >= 0 for every site at once (step (b)); returns (b, Q(b)), (n,) each.

    Vectorised 1-D search in ``beta = b * cavity_var``.  Since Q(b) - c b >= 0, a positive
    b can only beat b = 0 when ``b < Q(0) / c``; the search covers
    ``beta in [max(1e-6, beta_max 1e-12), beta_max]``, ``beta_max = min(1e6, Q(0) s / c)``
    (no search when ``beta_max <= 1e-6``), with a log-spaced grid of ``_BETA_GRID_SIZE``
    values, then golden-section refinement of ``log beta`` between the neighbours of the
    best grid point.  ``b = 0`` is kept unless a positive ``b`` has a strictly smaller
    objective, so c -> inf gives
    ``b = 0`` exactly.
    """
    y = np.asarray(y, dtype=float)
    mu = np.asarray(cavity_mean, dtype=float)
    s = np.asarray(cavity_var, dtype=float)
    m = np.asarray(site_mean, dtype=float)
    n = y.shape[0]
    if n == 0:
        return np.zeros(0), np.zeros(0)

    q0 = relaxed_kl_objective(likelihood, y, mu, s, m, np.zeros(n), relaxation)
    b = np.zeros(n)
    q = q0.copy()
    # Q(b) - c b >= 0, so a positive b can only win if c b < Q(0): b < Q(0) / c.
    c = float(relaxation)
    log_lo, log_hi = np.log(10.0) * np.asarray(_BETA_LOG10_RANGE)
    with np.errstate(divide="ignore"):
        log_top = np.log(q0 * s / c) if c > 0 else np.full(n, log_hi)
    log_top = np.minimum(np.where(np.isfinite(q0), log_top, log_hi), log_hi)
    idx = np.flatnonzero(log_top > log_lo)
    if idx.size == 0:
        return b, q
    top = log_top[idx]
    bottom = np.maximum(log_lo, top - np.log(10.0) * (_BETA_LOG10_RANGE[1] - _BETA_LOG10_RANGE[0]))
    frac = np.linspace(0.0, 1.0, _BETA_GRID_SIZE)
    grid = bottom[:, None] + (top - bottom)[:, None] * frac  # (k, G) log beta
    q_grid = relaxed_kl_objective(
        likelihood, y[idx, None], mu[idx, None], s[idx, None], m[idx, None],
        np.exp(grid) / s[idx, None], relaxation,
    )  # fmt: skip
    k = np.argmin(q_grid, axis=1)
    rows = np.arange(idx.size)
    best_q = q_grid[rows, k]
    keep = best_q < q0[idx]
    idx, grid, k, best_q, rows = idx[keep], grid[keep], k[keep], best_q[keep], rows[: keep.sum()]
    if idx.size == 0:
        return b, q
    step = grid[:, 1] - grid[:, 0]
    best_x = grid[rows, k]
    lo = best_x - step
    hi = np.minimum(best_x + step, grid[:, -1])
    # golden-section search on [lo, hi] for each refined site
    x1 = hi - _INV_PHI * (hi - lo)
    x2 = lo + _INV_PHI * (hi - lo)

    def obj_sub(log_beta):
        bb = np.exp(log_beta) / s[idx]
        return relaxed_kl_objective(likelihood, y[idx], mu[idx], s[idx], m[idx], bb, relaxation)

    f1, f2 = obj_sub(x1), obj_sub(x2)
    for _ in range(_GOLDEN_ITERATIONS):
        left = f1 < f2  # minimum in [lo, x2]
        hi = np.where(left, x2, hi)
        lo = np.where(left, lo, x1)
        new_x1 = hi - _INV_PHI * (hi - lo)
        new_x2 = lo + _INV_PHI * (hi - lo)
        x2_next = np.where(left, x1, new_x2)
        x1_next = np.where(left, new_x1, x2)
        f_eval = obj_sub(np.where(left, new_x1, new_x2))
        f1, f2 = np.where(left, f_eval, f2), np.where(left, f1, f_eval)
        x1, x2 = x1_next, x2_next
    x_best = np.where(f1 < f2, x1, x2)
    f_best = np.minimum(f1, f2)
    grid_better = best_q < f_best
    x_best = np.where(grid_better, best_x, x_best)
    f_best = np.where(grid_better, best_q, f_best)
    b[idx] = np.exp(x_best) / s[idx]
    q[idx] = f_best
    return b, q


def relaxed_moment_matching(likelihood, y, cavity_mean, cavity_var, site_mean, b):
    """New site for a given relaxation b (steps (c)–(e)), arrays (n,) -> (precision, shift).

    Moment matching at the relaxed cavity r_i q\\i = N(mu_b, s_b) gives g_b = N(mu_hat, s_hat);
    the new belief is q = g_b / r_i, so the site is t_i = g_b / (r_i q\\i)::

        tau_new = 1/s_hat - 1/s_b,   nu_new = mu_hat/s_hat - mu_b/s_b

    (1/s_b = 1/s + b, mu_b/s_b = mu/s + b m_i).  b = 0 is EP's moment matching.
    """
    mu_b, s_b = relaxed_cavity(cavity_mean, cavity_var, site_mean, b)
    _, mu_hat, s_hat = likelihood.tilted_moments(np.asarray(y, dtype=float), mu_b, s_b, 1.0)
    return 1.0 / s_hat - 1.0 / s_b, mu_hat / s_hat - mu_b / s_b


BELIEF_READINGS = ("divided", "as-printed")


def rep_site_update(
    likelihood,
    y,
    cavity_mean,
    cavity_var,
    site_precision,
    site_shift,
    power=1.0,
    *,
    relaxation,
    belief="divided",
):
    """REP site update, steps (b)–(e) of the long version §4 (eqs. 13–16), for a subset of sites.

    Signature of the engine's ``site_update`` hook (bind ``relaxation`` with
    :func:`make_rep_update`).  All arrays have shape (n,) (the sites being updated).

    ``belief`` picks the reading of step (e) (docs/derivations/rep.md):
    ``"divided"`` (default) — the new belief is ``q = g_b / r_i`` as eq. 5 and §3.2 say, so
    ``t_i = g_b / (r_i q\\i)``; ``"as-printed"`` — eqs. 15–16 as printed (``+ b_i`` in eq. 16),
    which make the new belief ``q = g_b`` itself, so ``t_i = g_b / q\\i``.  Both choose ``b``
    with the same Q(b) and coincide wherever ``b = 0``.

    Returns
    -------
    new_precision, new_shift : (n,) undamped new site parameters
    log_Z : (n,) log of int t_i(f) q\\i(f) df at the *unrelaxed* cavity (what EP's
        evidence formula needs; REP's evidence is EP's formula at REP's sites)
    info : {"b": (n,) relaxation precisions, "relaxation_objective": (n,) Q(b)}
    """
    if power != 1.0:
        raise ValueError(
            f"REP is defined for power=1 (got power={power}); use method='power' for power EP"
        )
    if relaxation < 0:
        raise ValueError(f"relaxation (the penalty c) must be >= 0, got {relaxation}")
    if belief not in BELIEF_READINGS:
        raise ValueError(f"belief must be one of {BELIEF_READINGS}, got {belief!r}")
    y = np.asarray(y, dtype=float)
    mu = np.asarray(cavity_mean, dtype=float)
    s = np.asarray(cavity_var, dtype=float)
    m = site_means(site_precision, site_shift, s)
    if np.isinf(relaxation):
        b = np.zeros_like(mu)
        q = relaxed_kl_objective(likelihood, y, mu, s, m, b, 0.0)
    else:
        b, q = optimise_relaxation(likelihood, y, mu, s, m, relaxation)
    log_Z, mu_hat, s_hat = likelihood.tilted_moments(y, mu, s, 1.0)
    new_precision = 1.0 / s_hat - 1.0 / s
    new_shift = mu_hat / s_hat - mu / s
    relaxed = b > 0
    if np.any(relaxed):
        new_precision[relaxed], new_shift[relaxed] = relaxed_moment_matching(
            likelihood, y[relaxed], mu[relaxed], s[relaxed], m[relaxed], b[relaxed]
        )
        if belief == "as-printed":  # t_i = g_b / q\i = (g_b / (r_i q\i)) * r_i
            new_precision[relaxed] += b[relaxed]
            new_shift[relaxed] += b[relaxed] * m[relaxed]
    return new_precision, new_shift, log_Z, {"b": b, "relaxation_objective": q}


def make_rep_update(relaxation: float, belief: str = "divided"):
    """The REP ``site_update`` callable for penalty weight c = ``relaxation``.

    ``belief``: reading of step (e), ``"divided"`` (default) or ``"as-printed"``
    (see :func:`rep_site_update`).

    Example::

        res = expectation_propagation(K, y, lik, site_update=make_rep_update(10.0))
        b = res.site_info["b"]
    """
    relaxation = float(relaxation)
    if not relaxation >= 0:
        raise ValueError(f"relaxation (the penalty c) must be >= 0, got {relaxation}")
    if belief not in BELIEF_READINGS:
        raise ValueError(f"belief must be one of {BELIEF_READINGS}, got {belief!r}")
    update = functools.partial(rep_site_update, relaxation=relaxation, belief=belief)
    update.__name__ = f"rep_site_update(c={relaxation:g}, belief={belief!r})"
    return update
