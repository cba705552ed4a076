"""Stochastic power EP for the sparse GP: minibatch site updates and hyperparameter learning.

Derivation: docs/derivations/stochastic_ep.md (equations E1–E12 cited below).  The model is
the pseudo-point posterior of :mod:`robustep.ep.pseudo_point` (Bui, Yan & Turner 2017):
``q(u) ∝ N(u | 0, K_mm) ∏_i t_i(h_i)``, ``h_i = a_iᵀu = E[f_i | u]``,
``a_i = K_mm⁻¹ k_i``, with power α on every exact factor ``p(y_i | f_i)`` and
``f_i | u ~ N(h_i, d_i)``, ``d_i = k_ii − k_iᵀ K_mm⁻¹ k_i`` (the FITC diagonal).  q(u) is held
in natural parameters ``(K_mm⁻¹ + Λ, b)`` with the site part ``(Λ, b)`` stored in the space
of the inducing values u (Hernández-Lobato & Hernández-Lobato, AISTATS 2016): a gradient
step in θ or Z changes ``K_mm`` but not ``(Λ, b)``, so every quantity except the per-point
terms costs O(m³), and the EP energy is a sum over data points plus O(m³) terms whose
minibatch estimate is unbiased (E6, E7).

Two kinds of sites:

* tied (stochastic EP, Li, Hernández-Lobato & Turner 2015): one average site
  ``f̄(u) = exp(b̄ᵀu − uᵀΛ̄u/2)``, q = p f̄ⁿ, O(m²) memory whatever n;
* per point: ``(β_i, γ_i)`` on ``h_i`` (O(n) memory) and their sum ``Σ β_i a_i a_iᵀ``,
  ``Σ γ_i a_i`` in u-space, updated incrementally; with learning it is recomputed at the
  current θ, Z at the start of every epoch (one O(n m²) pass per epoch).

Cost per step: O(|B| m² + m³) for a minibatch B; nothing of size n × n, and no pass over
the data except the per-epoch refresh of per-point sites.

X may be a Dask array chunked by rows (tied sites): the minibatches are then cut from one
block at a time, the next block computed meanwhile (:mod:`robustep.ep._minibatches`,
stochastic_ep.md §6).  ``device=`` runs the per-step linear algebra, the kernel blocks
and their gradients and Adam on an array-API library and device, e.g. PyTorch on a GPU
(:mod:`robustep.ep._stochastic_backend`, §8); numpy is the default.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import numpy as np

from robustep.ep._minibatches import BlockBatches, InMemoryBatches
from robustep.ep._stochastic_backend import NumpyBackend, backend_for, check_array_kernel
from robustep.ep.pseudo_point import check_inducing_power
from robustep.kernels._rows import row_chunks
from robustep.likelihoods.base import Likelihood
from robustep.posterior._dask import is_dask_array

__all__ = ["StochasticEPResult", "fit_stochastic_ep", "stochastic_ep_energy"]


# ----------------------------------------------------------------- Gaussians over u
class _Frame:
    """The prior factor at (kernel, Z): ``K = k(Z, Z) + jitter I = L Lᵀ``, ``C = K⁻¹``,
    on the arrays of backend ``be`` (Z is an array of that backend)."""

    def __init__(self, be, kernel, Z, jitter):
        self.be, self.kernel, self.Z = be, kernel, Z
        self.L = be.cholesky(be.kernel_mm(kernel, Z, jitter))
        self.log_det_K = be.log_det(self.L)
        self.C = be.cho_inverse(self.L)
        self._L_inv = None

    def L_inv(self):
        """L⁻¹ (m, m), computed once per frame."""
        if self._L_inv is None:
            self._L_inv = self.be.solve_lower(self.L, self.be.eye(self.L.shape[0]))
        return self._L_inv

    def rows(self, X):
        """(k_i rows (b, m), a_i = C k_i rows (b, m), k_ii (b,), d_i (b,)) of rows X."""
        be = self.be
        Kb = be.cross(self.kernel, X, self.Z)
        a = Kb @ self.C
        kd = be.kernel_diag(self.kernel, X)
        d = be.xp.maximum(kd - be.rowdot(Kb, a), 0.0)
        return Kb, a, kd, d


def _factor_A(frame, Lam):
    """Lower Cholesky factor of ``A = I + Lᵀ Lam L`` (symmetrised); LinAlgError when the
    Gaussian of precision ``C + Lam`` is improper (the whole check of a proposed step)."""
    be, L = frame.be, frame.L
    A = be.eye(L.shape[0]) + L.T @ Lam @ L
    return be.cholesky(0.5 * (A + A.T))


class _Gauss:
    """N(u | m, S) with precision ``C + Lam`` and shift ``b`` (eq. E1), via
    ``A = I + Lᵀ Lam L`` (``S = L A⁻¹ Lᵀ``): no inverse of an ill-conditioned K is formed
    for S itself.  ``G`` is the log normaliser without the (m/2) log 2π constant (E2)."""

    def __init__(self, frame: _Frame, Lam, b, L_A=None):
        be = frame.be
        L = frame.L
        # LinAlgError when q is improper; L_A: the factor of this (frame, Lam), if known
        self.L_A = _factor_A(frame, Lam) if L_A is None else L_A
        LAi_Lt = be.solve_lower(self.L_A, L.T)  # L_A⁻¹ Lᵀ
        self.S = LAi_Lt.T @ LAi_Lt
        self.mean = self.S @ b
        # C S C = L⁻ᵀ A⁻¹ L⁻¹ and C m
        LAi_Linv = be.solve_lower(self.L_A, frame.L_inv())
        self.CSC = LAi_Linv.T @ LAi_Linv
        self.Cm = frame.C @ self.mean
        log_det_A = be.log_det(self.L_A)
        self.G = 0.5 * float(b @ self.mean) + 0.5 * frame.log_det_K - 0.5 * log_det_A

    def projections(self, be, Kb):
        """(mean (b,), var (b,), s = rows of C S C k_i (b, m)) of h_i = a_iᵀu."""
        s = Kb @ self.CSC
        return Kb @ self.Cm, be.xp.maximum(be.rowdot(s, Kb), 0.0), s


def _log_normaliser_1d(xp, lam, nu):
    """Log normaliser of exp(ν h − λ h²/2) without the ½ log 2π constant."""
    return 0.5 * nu * nu / lam - 0.5 * xp.log(lam)


# -------------------------------------------------------------------- the tilted step
def _tilted(be, likelihood, y, m, v, d, alpha):
    """Power-α tilted quantities of ``p(y|f)^α N(f | m, v + d)`` (eqs. P4, P5, P9).

    y (b,) host targets; m, v, d (b,) arrays of ``be``.  The likelihood's moments are
    computed on the host (module docstring of ``_stochastic_backend``).
    Returns log Z (b,), ∂_m log Z (b,), ∂_V log Z (b,), tilted mean and variance of h.
    """
    V = v + d
    log_Z, mf, vf = likelihood.tilted_moments(y, be.to_host(m), be.to_host(V), alpha)
    mf = be.asarray(np.asarray(mf, dtype=float))
    vf = be.asarray(np.asarray(vf, dtype=float))
    g1 = (mf - m) / V
    g2 = (vf - V) / (V * V)
    r = v / V
    return (
        be.asarray(np.asarray(log_Z, dtype=float)),
        g1,
        0.5 * (g1 * g1 + g2),
        m + r * (mf - m),
        (v * d / V + r * r * vf),
    )


# ------------------------------------------------------------------------- the state
@dataclasses.dataclass
class _Sites:
    """Site parameters: tied (``Lam`` and ``b`` are the average site) or per point.

    ``Lam``, ``b`` are arrays of the learner's backend; the per-point ``beta``, ``gamma``
    stay in host memory (numpy), gathered and scattered per minibatch.
    """

    tied: bool
    n: int
    Lam: object  # (m, m): average site (tied) or sum of the per-point sites in u
    b: object  # (m,)
    beta: np.ndarray | None = None  # (n,) per point
    gamma: np.ndarray | None = None

    def q_natural(self):
        """Site part (Λ, b) of q's natural parameters."""
        return (self.n * self.Lam, self.n * self.b) if self.tied else (self.Lam, self.b)

    def copy(self, move=None):
        """A copy; ``move`` (e.g. a backend's ``to_host``) copies Lam and b instead."""
        move = move if move is not None else (lambda a: a.copy())
        return dataclasses.replace(
            self,
            Lam=move(self.Lam),
            b=move(self.b),
            beta=None if self.beta is None else self.beta.copy(),
            gamma=None if self.gamma is None else self.gamma.copy(),
        )


def _refresh_sum(be, sites, frame, X):
    """Recompute Σ β_i a_i a_iᵀ and Σ γ_i a_i at the current θ, Z (one pass, O(n m²))."""
    m = frame.Z.shape[0]
    Lam, b = be.zeros((m, m)), be.zeros(m)
    for rows in row_chunks(X.shape[0], m):
        _, a, _, _ = frame.rows(be.asarray(X[rows]))
        Lam += (a * be.asarray(sites.beta[rows])[:, None]).T @ a
        b += a.T @ be.asarray(sites.gamma[rows])
    sites.Lam, sites.b = 0.5 * (Lam + Lam.T), b


def _site_step(be, sites, frame, Xb, yb, idx, likelihood, alpha, damping, q=None, rows=None):
    """Damped power-EP update of the sites of a minibatch (eqs. E3–E5).

    Xb (b, d) rows (an array of ``be``), yb (b,) host targets, idx (b,) their row indices
    (per-point sites only; None for tied sites).  Returns the number of points skipped
    for an improper cavity or tilted distribution.  The step is halved (up to 10 times)
    when it would make q improper.  ``rows``: ``frame.rows(Xb)`` when already computed.
    Returns (skipped, L_q): L_q is the factor ``_factor_A(frame, ·)`` of the updated q
    (None when no step was taken), for :func:`_energy_and_gradient` to reuse.
    """
    xp = be.xp
    Kb, a, _, d = rows if rows is not None else frame.rows(Xb)
    size = Xb.shape[0]
    n = sites.n
    if sites.tied:
        Lam_c, b_c = (n - alpha) * sites.Lam, (n - alpha) * sites.b
        cav = _Gauss(frame, Lam_c, b_c)
        mc, vc, _ = cav.projections(be, Kb)
        ok = vc > 0
    else:
        q = q if q is not None else _Gauss(frame, *sites.q_natural())
        mu, s2, _ = q.projections(be, Kb)
        lam = 1.0 / xp.maximum(s2, 1e-300)
        lam_c = lam - alpha * be.asarray(sites.beta[idx])
        nu_c = mu * lam - alpha * be.asarray(sites.gamma[idx])
        ok = (s2 > 0) & (lam_c > 0)
        lam_c = xp.where(ok, lam_c, 1.0)
        mc, vc = nu_c / lam_c, 1.0 / lam_c
    _, _, _, mh, vh = _tilted(be, likelihood, yb, mc, xp.where(ok, vc, 1.0), d, alpha)
    ok &= xp.isfinite(mh) & xp.isfinite(vh) & (vh > 0)
    vh = xp.where(ok, vh, 1.0)
    beta_new = xp.where(ok, (1.0 / vh - 1.0 / xp.where(ok, vc, 1.0)) / alpha, 0.0)
    gamma_new = xp.where(ok, (mh / vh - mc / xp.where(ok, vc, 1.0)) / alpha, 0.0)
    L_q = None  # the factor of q after the update (None: the sites did not move)
    if sites.tied:
        # the average of the minibatch's new sites replaces a share of the average site
        a_ok = a[ok]
        Lam_B = (a_ok * beta_new[ok][:, None]).T @ a_ok / size
        b_B = a_ok.T @ gamma_new[ok] / size
        eps = min(1.0, damping * size / n)
        for _ in range(11):
            Lam = (1.0 - eps) * sites.Lam + eps * 0.5 * (Lam_B + Lam_B.T)
            try:
                L_q = _factor_A(frame, n * Lam)
            except np.linalg.LinAlgError:
                eps *= 0.5
                continue
            sites.Lam, sites.b = Lam, (1.0 - eps) * sites.b + eps * b_B
            break
    else:
        dbeta = xp.where(ok, beta_new - be.asarray(sites.beta[idx]), 0.0)
        dgamma = xp.where(ok, gamma_new - be.asarray(sites.gamma[idx]), 0.0)
        eps = damping
        for _ in range(11):
            dLam = (a * (eps * dbeta)[:, None]).T @ a
            Lam = sites.Lam + 0.5 * (dLam + dLam.T)
            try:
                L_q = _factor_A(frame, Lam)
            except np.linalg.LinAlgError:
                eps *= 0.5
                continue
            sites.Lam, sites.b = Lam, sites.b + a.T @ (eps * dgamma)
            sites.beta[idx] += be.to_host(eps * dbeta)
            sites.gamma[idx] += be.to_host(eps * dgamma)
            break
    return be.count_false(ok), L_q


# -------------------------------------------------------------- energy and gradient
def _energy_and_gradient(be, sites, frame, Xb, yb, idx, likelihood, alpha, want_grad=True,
                         w=None, rows=None, q_factor=None):  # fmt: skip
    """Minibatch estimate of the EP energy (E6, E7) and of its gradient (E8–E12).

    Xb (b, d) rows (an array of ``be``), yb (b,) host targets, idx (b,) their row indices
    (per-point sites only).  The sites are held fixed as Gaussian factors of u: the tied
    site ``(Λ̄, b̄)``, or the per-point sites ``β_i (w_iᵀu)²/2 − γ_i w_iᵀu`` with ``w``
    (b, m) the rows ``a_i`` at which they were formed (None: the current ``a_i``; the
    gradient is for that case).  Returns (energy, g_theta (p,) numpy, g_lik (q,) numpy,
    g_Z (m, d) array of ``be``); the data terms are scaled by n / |B|.  With
    ``want_grad=False`` the gradients are None.  ``rows``: ``frame.rows(Xb)`` when already
    computed; ``q_factor``: q's factor at this frame (from :func:`_site_step`), if known.
    """
    xp = be.xp
    n = sites.n
    scale = n / Xb.shape[0]
    Kb, a, _, d = rows if rows is not None else frame.rows(Xb)
    C = frame.C
    q = _Gauss(frame, *sites.q_natural(), L_A=q_factor)
    if sites.tied:
        ref = _Gauss(frame, (n - alpha) * sites.Lam, (n - alpha) * sites.b)
        cav_m, cav_v, s = ref.projections(be, Kb)
        # a point with v + d = 0 (on an inducing input where q pins h) has no tilted
        # distribution: it is left out of the estimate, as the site step leaves it out
        proper = cav_v + d > 0
        cav_v = xp.where(proper, cav_v, 1.0)
        log_Z, g1, e, _, _ = _tilted(be, likelihood, yb, cav_m, cav_v, d, alpha)
        ok = proper & xp.isfinite(log_Z)
        phi = log_Z / alpha
        # E6: G(q) − G(p) + (n/α)(G(c) − G(q)) + (1/α) Σ_i log Z_i
        glob = q.G - 0.5 * frame.log_det_K + (n / alpha) * (ref.G - q.G)
        W_mm = (
            0.5 * (1.0 - n / alpha) * (be.outer(q.Cm, q.Cm) + q.CSC)
            + 0.5 * (n / alpha) * (be.outer(ref.Cm, ref.Cm) + ref.CSC)
            - 0.5 * C
        )
        Cm_rows = None  # every row is ref.Cm: the products with it are outer products
        r_c = s - a
    else:
        w = a if w is None else w
        beta, gamma = be.asarray(sites.beta[idx]), be.asarray(sites.gamma[idx])
        aS = a @ q.S
        mu = w @ q.mean
        s2 = be.rowdot(w @ q.S, w)
        p = be.rowdot(aS, w)
        lam = 1.0 / xp.maximum(s2, 1e-300)
        lam_c = lam - alpha * beta
        ok = (s2 > 0) & (lam_c > 0)
        lam_c = xp.where(ok, lam_c, 1.0)
        nu_c = mu * lam - alpha * gamma
        m_cw, v_cw = nu_c / lam_c, 1.0 / lam_c
        rho = lam / lam_c
        kappa = rho * alpha * (beta * mu - gamma)
        # E11: the u-cavity q / t_i^α projected on h_i = a_iᵀu
        cav_m = a @ q.mean + kappa * p
        cav_v = be.rowdot(aS, a) + alpha * beta * rho * p * p
        proper = cav_v + d > 0
        cav_v = xp.where(proper, cav_v, 1.0)
        log_Z, g1, e, _, _ = _tilted(be, likelihood, yb, cav_m, cav_v, d, alpha)
        ok &= proper & xp.isfinite(log_Z)
        # E7: per-point term (1/α)[log Z_i + G_h(cavity) − G_h(q_i)]
        phi = (log_Z + _log_normaliser_1d(xp, lam_c, nu_c)
               - _log_normaliser_1d(xp, lam, mu * lam)) / alpha  # fmt: skip
        glob = q.G - 0.5 * frame.log_det_K
        W_mm = 0.5 * (be.outer(q.Cm, q.Cm) + q.CSC) - 0.5 * C
        if want_grad:
            s = Kb @ q.CSC  # rows of C S a_i
            Cm_rows = q.Cm[None, :] + kappa[:, None] * s
            r_c = rho[:, None] * s - a
            # E12: the normaliser difference through μ_i = a_iᵀm and σ_i² = a_iᵀSa_i
            h_mu = lam * (m_cw - mu) / alpha
            h_var = lam * lam * (0.5 * (m_cw * m_cw + v_cw) - m_cw * mu - 0.5 * (s2 - mu * mu))
            h_mu = scale * xp.where(ok, h_mu, 0.0)
            h_var = scale * xp.where(ok, h_var / alpha, 0.0)
    energy = glob + scale * float(xp.sum(xp.where(ok, phi, 0.0)))
    if not want_grad:
        return energy, None, None, None
    # E9: weights of dK_nm (rows), dK_mm and d diag K_nn
    g1 = scale * xp.where(ok, g1, 0.0) / alpha
    e = scale * xp.where(ok, e, 0.0) / alpha
    if Cm_rows is None:
        W_nm = g1[:, None] * ref.Cm[None, :] + 2.0 * e[:, None] * r_c
        X_mm = be.outer(r_c.T @ g1, ref.Cm) + (r_c * e[:, None]).T @ r_c
    else:
        W_nm = g1[:, None] * Cm_rows + 2.0 * e[:, None] * r_c
        X_mm = (r_c * g1[:, None]).T @ Cm_rows + (r_c * e[:, None]).T @ r_c
    if not sites.tied:
        X_mm += be.outer(s.T @ h_mu, q.Cm) + (s * h_var[:, None]).T @ s
    W_mm = W_mm + 0.5 * (X_mm + X_mm.T)
    g_theta, g_Z = be.kernel_gradients(frame.kernel, Xb, frame.Z, W_mm, W_nm, e)
    if likelihood.hyperparameter_names:
        ok_h = be.to_host(ok, dtype=bool)
        V_h = be.to_host(cav_v + d)
        G = likelihood.tilted_log_Z_gradient(yb[ok_h], be.to_host(cav_m)[ok_h], V_h[ok_h],
                                             alpha)  # fmt: skip
        g_lik = scale * np.sum(G, axis=0) / alpha
    else:
        g_lik = np.zeros(0)
    return energy, g_theta, g_lik, g_Z


def stochastic_ep_energy(
    result, X, y, *, batch=None, want_grad=True, sites_at=None
) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """EP energy (E6 / E7) of a :class:`StochasticEPResult` at its sites, and its gradient.

    Parameters
    ----------
    result : :class:`StochasticEPResult`; X (n, d), y (n,) the training data (numpy).
    batch : indices (b,) of a minibatch (None: all points, the exact energy at the sites).
    want_grad : also return the gradients.
    sites_at : (kernel, Z) at which per-point sites are held as factors of u
        (``w_i = a_i`` there; E11), for evaluating the energy of the same sites at other
        hyperparameters (finite differences); None: the result's own.  The gradient is
        the one at ``sites_at=None``.

    Returns
    -------
    energy (float; the data terms scaled by n / b), g_theta (p,) w.r.t. ``kernel.theta``,
    g_lik (q,) w.r.t. the likelihood's log parameters, g_Z (m, d).
    """
    be = NumpyBackend()
    X = np.asarray(X, dtype=float)
    y = result.likelihood.validate_targets(y)
    idx = np.arange(X.shape[0]) if batch is None else np.asarray(batch)
    frame = _Frame(be, result.kernel, result.inducing_inputs, result.jitter)
    w = None
    if sites_at is not None and not result._sites.tied:
        Z_at = np.asarray(sites_at[1], dtype=float)
        w = _Frame(be, sites_at[0], Z_at, result.jitter).rows(X[idx])[1]
    return _energy_and_gradient(
        be, result._sites, frame, X[idx], y[idx], idx, result.likelihood, result.power,
        want_grad, w,
    )  # fmt: skip


# --------------------------------------------------------------------------- Adam
class _Adam:
    """Adam (Kingma & Ba 2015) for ascent: x ← x + lr m̂ / (√v̂ + ε), on ``be``'s arrays."""

    def __init__(self, be, size, beta1=0.9, beta2=0.999, eps=1e-8):
        # arrays and numbers only (no backend object), so that a fitted state pickles
        self.size = int(size)
        self.m, self.v = be.zeros(size), be.zeros(size)
        self.beta1, self.beta2, self.eps, self.t = beta1, beta2, eps, 0

    def copy(self, be, convert=None):
        """An independent copy whose moments are arrays of backend ``be`` (``convert``:
        applied to each moment first, e.g. the source backend's ``to_host``)."""
        convert = convert if convert is not None else (lambda a: a)
        new = _Adam(be, self.size, self.beta1, self.beta2, self.eps)
        new.m, new.v = be.copy(be.asarray(convert(self.m))), be.copy(be.asarray(convert(self.v)))
        new.t = self.t
        return new

    def step(self, x, grad, lr):
        self.t += 1
        self.m = self.beta1 * self.m + (1 - self.beta1) * grad
        self.v = self.beta2 * self.v + (1 - self.beta2) * grad * grad
        mh = self.m / (1 - self.beta1**self.t)
        vh = self.v / (1 - self.beta2**self.t)
        return x + lr * mh / (vh**0.5 + self.eps)


# ------------------------------------------------------------------------- result
@dataclasses.dataclass
class StochasticEPResult:
    """Fitted state of :func:`fit_stochastic_ep` (numpy arrays, whatever the device).

    Attributes
    ----------
    kernel : the fitted scikit-learn kernel; inducing_inputs : Z (m, d);
    likelihood : the fitted likelihood; power : α; jitter : added to K_mm's diagonal.
    mean (m,), cov (m, m) : q(u) = N(mean, cov) over the inducing values.
    site_precision, site_shift : (n,) per-point sites (β_i, γ_i) on h_i, or None (tied).
    history : list of dicts per epoch: ``epoch``, ``step``, ``energy`` (mean of the
        minibatch estimates over the epoch), ``time`` (s since the start), ``skipped``.
    n_steps : minibatch steps taken (over every run continued through ``state``);
        stopped : "n_epochs", "max_steps", "max_time" or "callback".
    """

    kernel: object
    inducing_inputs: np.ndarray
    likelihood: Likelihood
    power: float
    jitter: float
    mean: np.ndarray
    cov: np.ndarray
    site_precision: np.ndarray | None
    site_shift: np.ndarray | None
    history: list
    n_steps: int
    stopped: str
    _sites: _Sites = dataclasses.field(repr=False, default=None)
    _adam: _Adam = dataclasses.field(repr=False, default=None)

    def predict(self, X_new):
        """FITC predictive of the latent f at X_new (k, d) (eq. S10): (mean (k,), var (k,))."""
        X_new = np.asarray(X_new, dtype=float)
        frame = _Frame(NumpyBackend(), self.kernel, self.inducing_inputs, self.jitter)
        mean = np.empty(X_new.shape[0])
        var = np.empty(X_new.shape[0])
        for rows in row_chunks(X_new.shape[0], self.inducing_inputs.shape[0]):
            Kb, a, _, d = frame.rows(X_new[rows])
            mean[rows] = a @ self.mean
            var[rows] = d + np.einsum("ij,ij->i", a @ self.cov, a)
        return mean, var


def _schedule(value, default_decay):
    if callable(value):
        return value
    value = float(value)
    return lambda t: value / np.sqrt(1.0 + t / default_decay) if default_decay else value


def _batches(X, y, likelihood, tied_sites, batch_size, rng):
    """(minibatch source, n, d, batch size) of X, y: in memory, or block by block for a
    Dask array X (tied sites only)."""
    if is_dask_array(X):
        if not tied_sites:
            raise ValueError(
                "per-point sites (tied_sites=False) keep one site per row and need every "
                "row once per epoch in memory; with a Dask array X use tied_sites=True "
                "(memory O(m²)), or pass X.compute() if it fits in memory"
            )
        if X.ndim != 2:
            raise ValueError(f"X must be 2-D (n, d), got shape {X.shape}")
        b = int(min(max(1, batch_size), X.shape[0]))
        src = BlockBatches(X, y, likelihood.validate_targets, b, rng)
        return src, src.n, int(X.shape[1]), b
    if is_dask_array(y):
        y = y.compute()
    X = np.asarray(X, dtype=float)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (n, d), got shape {X.shape}")
    y = likelihood.validate_targets(y)
    if y.shape != (X.shape[0],):
        raise ValueError("y must have shape (n,) and Z shape (m, d) with X's d")
    b = int(min(max(1, batch_size), X.shape[0]))
    return InMemoryBatches(X, y, b, rng), X.shape[0], X.shape[1], b


def fit_stochastic_ep(
    kernel,
    X,
    y,
    likelihood,
    Z,
    *,
    power=0.5,
    batch_size=256,
    n_epochs=10,
    max_steps=None,
    learning_rate=0.01,
    lr_decay_epochs=5.0,
    damping=0.5,
    tied_sites=True,
    learn_kernel=True,
    learn_likelihood=True,
    learn_inducing=True,
    site_steps=1,
    jitter=1e-6,
    random_state=None,
    callback: Callable | None = None,
    max_time=None,
    keep_best=False,
    state: StochasticEPResult | None = None,
    n_data=None,
    device=None,
    dtype="float64",
) -> StochasticEPResult:
    """Stochastic power EP with minibatch learning of θ, the likelihood parameters and Z.

    Each step draws a minibatch B (an epoch is a random permutation cut into batches),
    updates the sites of B by damped power EP (``site_steps`` times; eqs. E3–E5), then
    takes one Adam ascent step along the minibatch estimate of the gradient of the EP
    energy (E8–E12) in (log θ, log ψ, Z) (Hernández-Lobato & Hernández-Lobato 2016).

    Parameters
    ----------
    kernel : scikit-learn kernel (its ``theta``, the free log hyperparameters, is learned).
    X : (n, d) inputs, in memory or a Dask array chunked by rows (then read block by
        block: an epoch visits the blocks in a random order, computing each once and
        the next one meanwhile, and cuts each block's permuted rows into batches;
        tied sites only; docs/derivations/stochastic_ep.md §6).
    y : (n,) targets for ``likelihood`` (in memory, or a Dask array with X).
    likelihood : :class:`~robustep.likelihoods.Likelihood` (Probit, StudentT, ...).
    Z : (m, d) initial inducing inputs.
    power : α in (0, 1] (Bui, Yan & Turner 2017): 1 = FITC-EP, → 0 the VFE.
    batch_size : |B| (at most n).
    n_epochs, max_steps : stop after this many epochs / steps (whichever first).
    learning_rate : Adam's step, a float decayed as ``lr / sqrt(1 + t / (lr_decay_epochs
        · steps per epoch))`` (``lr_decay_epochs=0``: constant), or a callable of the
        step t.
    damping : weight of the new site in each visit (constant schedule).  Per-point sites:
        ``t_i ← t_i^{1−δ} t_i,new^δ``; tied sites: the average site moves by
        ``ε = min(1, δ |B| / n)`` towards the minibatch average (SEP's 1/n per point
        times δ; δ > 1 is allowed there and makes the tied site follow faster).
    tied_sites : True: one average site (memory O(m²)); False: one site per point (O(n)).
    learn_kernel, learn_likelihood, learn_inducing : which parameters take gradient steps
        (all False: EP at fixed hyperparameters).  ``learn_likelihood`` may also name the
        likelihood parameters that are learned (a sequence of names from its
        ``hyperparameter_names``); the others keep their values.
    site_steps : site updates on each minibatch before its gradient step.
    jitter : added to the diagonal of K_mm (a constant: it does not enter the gradient).
    random_state : int or numpy Generator, for the minibatch order.
    callback : called after every epoch as ``callback(result_so_far, record)``; returning
        True stops the run.
    max_time : seconds (callbacks included); the run stops after the first step that
        passes it and records that partial epoch in ``history``.
    keep_best : return the state after the epoch with the highest energy estimate instead
        of the last one (the estimates are minibatch averages: noisy, and biased towards
        early epochs while the sites lag behind the parameters).
    state : a previous :class:`StochasticEPResult` to continue from: its sites, Adam
        moments and step count (the learning-rate schedule goes on from there).  Pass its
        ``kernel``, ``likelihood`` and ``inducing_inputs`` as the starting values; the site
        structure (``tied_sites``) must be the same, and per-point sites need the same X.
    n_data : tied sites only: the number of data points the average site stands for
        (q = p f̄^n_data; the minibatch energy is scaled by n_data / |B|).  Default n;
        a stream (``partial_fit``) passes the number of points seen so far, of which X is
        the newest batch.
    device : None (numpy, the default); a PyTorch device ("cpu", "cuda", "cuda:1"): the
        per-step linear algebra, the kernel blocks and their gradients and Adam run there
        (the kernel: RBF, ConstantKernel, WhiteKernel, sums and products; the likelihood's
        tilted moments stay in numpy, O(|B|) numbers per step); or a template array of
        any array-API library (its namespace, dtype and device, e.g.
        ``array_api_strict.zeros(0)``).
    dtype : "float64" (default) or "float32", with a PyTorch ``device``.

    Returns
    -------
    StochasticEPResult
        The last state (or the best, ``keep_best``); ``history`` covers every epoch.
        Its arrays are numpy whatever ``device``.
    """
    alpha = check_inducing_power(power)
    if not isinstance(likelihood, Likelihood):
        raise TypeError(f"likelihood must be a robustep Likelihood, got {type(likelihood)}")
    be = backend_for(device, dtype)
    if be.name != "numpy":
        check_array_kernel(kernel)
    rng = np.random.default_rng(random_state)
    source, n, d, b_size = _batches(X, y, likelihood, tied_sites, batch_size, rng)
    Z = np.array(Z, dtype=float)
    m = Z.shape[0]
    if Z.ndim != 2 or Z.shape[1] != d:
        raise ValueError("y must have shape (n,) and Z shape (m, d) with X's d")
    if not (np.isfinite(damping) and damping > 0 and (tied_sites or damping <= 1)):
        raise ValueError(
            f"damping must be in (0, 1] for per-point sites and > 0 for tied sites (the "
            f"average site then moves by min(1, damping * batch_size / n)), got {damping!r}"
        )
    try:
        return _learn(
            be, source, kernel, likelihood, Z, n, m, b_size, alpha, rng,
            n_epochs=n_epochs, max_steps=max_steps, learning_rate=learning_rate,
            lr_decay_epochs=lr_decay_epochs, damping=damping, tied_sites=tied_sites,
            learn=(learn_kernel, learn_likelihood, learn_inducing), site_steps=site_steps,
            jitter=jitter, callback=callback, max_time=max_time, keep_best=keep_best,
            state=state, n_data=n_data,
        )  # fmt: skip
    finally:
        source.close()


def _learn(be, source, kernel, likelihood, Z, n, m, b_size, alpha, rng, *, n_epochs,
           max_steps, learning_rate, lr_decay_epochs, damping, tied_sites, learn,
           site_steps, jitter, callback, max_time, keep_best, state, n_data):  # fmt: skip
    """The minibatch loop of :func:`fit_stochastic_ep` on backend ``be``."""
    learn_kernel, learn_likelihood, learn_inducing = learn
    xp = be.xp
    steps_per_epoch = int(np.ceil(n / b_size))
    lr_at = _schedule(learning_rate, lr_decay_epochs * steps_per_epoch)
    lik_mask = _likelihood_mask(likelihood, learn_likelihood)
    learning = bool(learn_kernel or np.any(lik_mask) or learn_inducing)
    n_sites = _sites_count(n, n_data, tied_sites)

    if tied_sites:
        sites = _Sites(True, n_sites, be.zeros((m, m)), be.zeros(m))
    else:
        sites = _Sites(False, n, be.zeros((m, m)), be.zeros(m), np.zeros(n), np.zeros(n))

    p_k, p_l = kernel.theta.size, likelihood.get_log_params().size
    x = be.asarray(np.concatenate([kernel.theta, likelihood.get_log_params(), Z.ravel()]))
    mask = be.asarray(np.concatenate(
        [np.full(p_k, float(bool(learn_kernel))), lik_mask.astype(float),
         np.full(Z.size, float(bool(learn_inducing)))]
    ))  # fmt: skip
    adam, t_start = _Adam(be, x.shape[0]), 0
    if state is not None:
        sites, adam, t_start = _continued(be, state, tied_sites, n, n_sites, m, x.shape[0], adam)

    def unpack(x):
        head = be.to_host(x[: p_k + p_l])
        return (
            kernel.clone_with_theta(head[:p_k]),
            likelihood.with_log_params(head[p_k:]) if p_l else likelihood,
            xp.reshape(x[p_k + p_l :], (m, -1)),
        )

    def snapshot(x, sites, history, t, stopped, adam=adam):
        k, lik, Zc = unpack(x)
        frame = _Frame(be, k, Zc, jitter)
        q = _Gauss(frame, *sites.q_natural())
        s = sites.copy(move=lambda a: be.to_host(a).copy())
        return StochasticEPResult(
            kernel=k, inducing_inputs=be.to_host(Zc), likelihood=lik, power=alpha,
            jitter=jitter, mean=be.to_host(q.mean), cov=be.to_host(q.S),
            site_precision=None if s.tied else s.beta, site_shift=None if s.tied else s.gamma,
            history=list(history), n_steps=t, stopped=stopped, _sites=s,
            _adam=adam.copy(NumpyBackend(), convert=be.to_host),
        )  # fmt: skip

    t0 = time.perf_counter()
    history, best, best_energy, t = [], None, -np.inf, t_start
    stopped = "n_epochs"
    for epoch in range(int(n_epochs)):
        cur_k, cur_lik, cur_Z = unpack(x)
        frame = _Frame(be, cur_k, cur_Z, jitter)
        if not tied_sites and learning and epoch > 0:
            _refresh_sum(be, sites, frame, source.X)
        energies, skipped = [], 0
        for idx, X_rows, yb in source.epoch():
            Xb = be.asarray(X_rows)
            rows = frame.rows(Xb)  # shared by the site updates and the gradient of this step
            q_factor = None
            for _ in range(site_steps):
                n_skipped, L_q = _site_step(be, sites, frame, Xb, yb, idx, cur_lik, alpha,
                                            damping, rows=rows)  # fmt: skip
                skipped += n_skipped
                q_factor = L_q if L_q is not None else q_factor
            if learning:
                # the gradient at the minibatch's refreshed sites (E13)
                E, g_t, g_l, g_Z = _energy_and_gradient(be, sites, frame, Xb, yb, idx,
                                                        cur_lik, alpha, rows=rows,
                                                        q_factor=q_factor)  # fmt: skip
                grad = be.concat([be.asarray(g_t), be.asarray(g_l), xp.reshape(g_Z, (-1,))])
                x_new, new_frame = _adam_step(
                    be, adam, x, grad * mask, float(lr_at(t)),
                    lambda x: _Frame(be, *unpack(x)[::2], jitter),
                    lambda: (sites.q_natural()[0],),
                )  # fmt: skip
                if new_frame is not None:
                    x, frame = x_new, new_frame
                    cur_k, cur_lik, cur_Z = unpack(x)
                energies.append(E)
            t += 1
            stopped = _stop_reason(t, max_steps, time.perf_counter() - t0, max_time) or stopped
            if stopped != "n_epochs":
                break
        if not learning:
            energies.append(_energy_and_gradient(
                be, sites, frame, Xb, yb, idx, cur_lik, alpha, want_grad=False)[0])  # fmt: skip
        record = {
            "epoch": epoch + 1, "step": t, "energy": float(np.mean(energies)),
            "time": time.perf_counter() - t0, "skipped": skipped,
        }  # fmt: skip
        history.append(record)
        if keep_best and np.isfinite(record["energy"]) and record["energy"] > best_energy:
            best_energy, best = (
                record["energy"],
                (be.copy(x), sites.copy(move=be.copy), t, adam.copy(be)),
            )
        if callback is not None and callback(snapshot(x, sites, history, t, "running"), record):
            stopped = "callback"
            break
        if stopped in ("max_steps", "max_time"):
            break
    if keep_best and best is not None:
        x, sites, _, adam = best
    return snapshot(x, sites, history, t, stopped, adam)


def _adam_step(be, adam, x, grad, lr, frame_at, precisions):
    """Adam's step from ``x`` (the moments move either way), kept when the gradient is
    finite and the new point keeps K_mm and every q proper.

    frame_at(x) -> the :class:`_Frame` at x; precisions() -> the site precisions of the
    q's to check there (each as for :func:`_factor_A`).  Returns (x, frame) at the new
    point, or (x, None) when the step is refused.
    """
    if not bool(be.xp.all(be.xp.isfinite(grad))):
        return x, None
    x_new = adam.step(x, grad, lr)
    try:
        frame = frame_at(x_new)
        for Lam in precisions():
            _factor_A(frame, Lam)
    except np.linalg.LinAlgError:
        return x, None  # the step made K_mm or a q improper: skip it
    return x_new, frame


def _stop_reason(t, max_steps, elapsed, max_time):
    """ "max_steps" or "max_time" once that budget is spent, else None."""
    if max_steps is not None and t >= max_steps:
        return "max_steps"
    if max_time is not None and elapsed >= max_time:
        return "max_time"
    return None


def _likelihood_mask(likelihood, learn_likelihood):
    """(q,) bool: which of the likelihood's log parameters take gradient steps."""
    names = tuple(likelihood.hyperparameter_names)
    if isinstance(learn_likelihood, (bool, np.bool_)):
        return np.full(len(names), bool(learn_likelihood))
    chosen = set(learn_likelihood)
    unknown = sorted(chosen - set(names))
    if unknown:
        raise ValueError(
            f"learn_likelihood names {unknown}, which {type(likelihood).__name__} does not "
            f"have; its parameters are {list(names)}"
        )
    return np.array([name in chosen for name in names], dtype=bool)


def _sites_count(n, n_data, tied_sites):
    """The number of data points the sites stand for (``n_data``, tied sites only)."""
    if n_data is None:
        return n
    if not tied_sites:
        raise ValueError("n_data applies to tied sites (tied_sites=True) only")
    if int(n_data) < n:
        raise ValueError(f"n_data must be at least the number of rows of X ({n}), got {n_data}")
    return int(n_data)


def _continued(be, state, tied_sites, n, n_sites, m, size, adam):
    """(sites, Adam, step count) of a run that continues ``state``."""
    sites = state._sites
    if sites is None or sites.tied != bool(tied_sites) or sites.Lam.shape != (m, m):
        raise ValueError(
            "state must be a StochasticEPResult with the same site structure (tied_sites) and "
            "number of inducing inputs as this run"
        )
    sites = sites.copy(move=lambda a: be.copy(be.asarray(a)))
    if sites.tied:
        sites.n = n_sites
    elif sites.n != n:
        raise ValueError("per-point sites continue on the same X only (same number of rows)")
    if state._adam is not None and state._adam.size == size:
        adam = state._adam.copy(be)
    return sites, adam, int(state.n_steps)
