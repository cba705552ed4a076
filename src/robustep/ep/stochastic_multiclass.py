"""Stochastic power EP for the sparse multi-class GP classifier (tied sites per class).

Derivation: docs/derivations/stochastic_multiclass.md (equations C1–C12 cited below).  The
model follows Villacampa-Calvo & Hernández-Lobato (ICML 2017): c latent GPs sharing one
kernel and one set of inducing inputs Z (m, d), each with the pseudo-point (FITC) prior of
:mod:`robustep.ep.stochastic` (``h_ij = a_iᵀu_j``, ``f_ij | u_j ~ N(h_ij, d_i)``), and the
likelihood of point i with label y_i written as a product of pairwise factors

    p̃(y_i | f_i) = ∏_{k ≠ y_i} Φ((f_{i,y_i} − f_{ik}) / s),   s = √2          (C1)

each depending on one difference of two latent values.  Each factor is approximated by a
Gaussian site that factorises over the classes (a scalar Gaussian in ``h_{i,y_i}`` and one
in ``h_ik``), so q(U) = ∏_j N(u_j | m_j, S_j) stays a product over the classes and every
class reuses the binary machinery: the cavity marginals of each class, the tilted moments
of a probit factor on the difference (mean μ_y − μ_k, variance V_y + V_k, C4) and moment
matching per class (C5).

The sites are tied per class (stochastic EP, Li, Hernández-Lobato & Turner 2015): class j
has one average site ``f̄_j(u_j)`` standing for the ``N_j = n_j (c − 1) + (n − n_j)``
factors that touch it (C2), so memory is O(c m²) whatever n.

Which likelihood: (C1) is not the multinomial probit of nested EP
(:mod:`robustep.ep.multiclass_sparse`, ``p(y | f) = ∫ N(u) ∏_{k≠y} Φ(u + f_y − f_k) du``).
Each pairwise factor is that model's exact pairwise marginal ``P(f_y + ε_y > f_k + ε_k)``
with unit-variance class noise ε (hence s = √2), but the product drops the dependence
between the pairwise events (they share ε_y), so (C1) is smaller than the multinomial
probit for c > 2 (equal at c = 2).  The learner learns (θ, Z) under the energy of (C1);
the estimator then runs nested EP for the multinomial probit on all n at the learned
values (:class:`robustep.estimators._multiclass_sparse.SparseMultinomialCore`), as the
binary learner's estimators run one EP fit at the end.

Cost per step: O(|B| c m² + c m³) for a minibatch B; no array of size n × m or n × n.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import numpy as np

from robustep.ep._minibatches import InMemoryBatches
from robustep.ep._stochastic_backend import NumpyBackend
from robustep.ep.pseudo_point import check_inducing_power
from robustep.ep.stochastic import (
    _Adam,
    _adam_step,
    _factor_A,
    _Frame,
    _Gauss,
    _schedule,
    _stop_reason,
)
from robustep.kernels._rows import row_chunks
from robustep.likelihoods.probit import Probit

__all__ = [
    "PAIRWISE_SCALE",
    "StochasticMulticlassEPResult",
    "fit_stochastic_multiclass_ep",
    "pairwise_tilted_moments",
    "stochastic_multiclass_energy",
]

#: s of the pairwise factors Φ((f_y − f_k) / s) (eq. C1): the pairwise marginal of the
#: multinomial probit with unit-variance class noise
PAIRWISE_SCALE = float(np.sqrt(2.0))

_PROBIT = Probit()


# ------------------------------------------------------------------ the pairwise factor
def _pairwise(m_diff, V_diff, alpha, scale=PAIRWISE_SCALE):
    """log Z, ∂log Z/∂m_diff and ∂log Z/∂V_diff of ``∫ Φ(g/s)^α N(g | m_diff, V_diff) dg``
    (eqs. C3, C4); all (k,) arrays.  The probit's tilted moments of ``x = g/s``."""
    log_Z, mx, vx = _PROBIT.tilted_moments(
        np.ones_like(m_diff), m_diff / scale, V_diff / (scale * scale), alpha
    )
    g1 = scale * (mx - m_diff / scale) / V_diff
    e = 0.5 * (g1 * g1 + (scale * scale * vx - V_diff) / (V_diff * V_diff))
    return np.asarray(log_Z, dtype=float), g1, e


def pairwise_tilted_moments(m_y, V_y, m_k, V_k, power=1.0, scale=PAIRWISE_SCALE):
    """Tilted normaliser and moments of one pairwise factor (eq. C4).

    ``Φ((f_y − f_k)/s)^α N(f_y | m_y, V_y) N(f_k | m_k, V_k)``, all arguments (k,) arrays
    (or scalars).  Returns (log Z, mean of f_y, variance of f_y, mean of f_k, variance of
    f_k), each (k,): the marginal moments that moment matching with a site factorised over
    the classes keeps (C5).
    """
    alpha = check_inducing_power(power)
    m_y, V_y, m_k, V_k = (np.atleast_1d(np.asarray(a, dtype=float)) for a in (m_y, V_y, m_k, V_k))
    V = V_y + V_k
    log_Z, g1, e = _pairwise(m_y - m_k, V, alpha, scale)
    curv = 2.0 * e - g1 * g1  # ∂² log Z / ∂m_diff²
    return (log_Z, m_y + V_y * g1, V_y + V_y * V_y * curv, m_k - V_k * g1, V_k + V_k * V_k * curv)


def _factors(yb, n_classes):
    """(rows (F,), other classes (F,)) of the pairs (i, k ≠ y_i) of a minibatch."""
    rows, cols = np.nonzero(np.arange(n_classes)[None, :] != yb[:, None])
    return rows, cols


def _factor_counts(y, n_classes):
    """N_j (c,): the pairwise factors that touch class j (eq. C2)."""
    n = y.shape[0]
    n_j = np.bincount(y, minlength=n_classes).astype(float)
    return n_j * (n_classes - 1) + (n - n_j)


# ------------------------------------------------------------------------- the state
@dataclasses.dataclass
class _ClassSites:
    """The average site of each class, ``Lam`` (c, m, m) and ``b`` (c, m), and ``N`` (c,)
    the number of factors each stands for: q_j's site part is ``(N_j Lam_j, N_j b_j)``."""

    Lam: np.ndarray
    b: np.ndarray
    N: np.ndarray

    def q_natural(self, j):
        return self.N[j] * self.Lam[j], self.N[j] * self.b[j]

    def cavity_natural(self, j, alpha):
        return (self.N[j] - alpha) * self.Lam[j], (self.N[j] - alpha) * self.b[j]

    def copy(self):
        return _ClassSites(self.Lam.copy(), self.b.copy(), self.N.copy())


def _cavities(be, sites, frame, Kb, alpha):
    """The tied cavity of each class (eq. C3): (Gaussians, means (b, c), variances (b, c),
    rows s_j = C S_c a_i of each class (c, b, m))."""
    c = sites.Lam.shape[0]
    gauss, means, variances, s_rows = [], [], [], []
    for j in range(c):
        cav = _Gauss(frame, *sites.cavity_natural(j, alpha))
        mc, vc, s = cav.projections(be, Kb)
        gauss.append(cav)
        means.append(mc)
        variances.append(vc)
        s_rows.append(s)
    return gauss, np.stack(means, axis=1), np.stack(variances, axis=1), s_rows


def _tilted_terms(yb, mc, vc, d, alpha):
    """The pairwise factors of a minibatch at the cavities mc, vc (b, c) (eqs. C3–C5).

    Returns (rows (F,), classes k (F,), log Z (F,), g1 (F,), e (F,), ok (F,)) for the F
    pairs (i, k ≠ y_i): g1 = ∂log Z/∂m_{i,y_i} = −∂log Z/∂m_ik, e = ∂log Z/∂V_{i,y_i} =
    ∂log Z/∂V_ik with V = v + d.
    """
    rows, cols = _factors(yb, mc.shape[1])
    ycol = yb[rows]
    m_diff = mc[rows, ycol] - mc[rows, cols]
    V_diff = vc[rows, ycol] + vc[rows, cols] + 2.0 * d[rows]
    ok = (vc[rows, ycol] > 0) & (vc[rows, cols] > 0) & (V_diff > 0)
    log_Z, g1, e = _pairwise(m_diff, np.where(ok, V_diff, 1.0), alpha)
    ok &= np.isfinite(log_Z) & np.isfinite(g1) & np.isfinite(e)
    return rows, cols, log_Z, g1, e, ok


def _site_step(be, sites, frame, Kb, a, d, yb, alpha, damping):
    """Damped tied-site update of every class from a minibatch (eqs. C5, C6).

    Returns the number of pairwise factors skipped (improper cavity or tilted).  The step
    of a class is halved (up to 10 times) when it would make q_j improper.
    """
    c = sites.Lam.shape[0]
    _, mc, vc, _ = _cavities(be, sites, frame, Kb, alpha)
    rows, cols, _, g1, e, ok = _tilted_terms(yb, mc, vc, d, alpha)
    curv = np.where(ok, 2.0 * e - g1 * g1, 0.0)
    g1 = np.where(ok, g1, 0.0)
    size = yb.shape[0]
    beta_sum, gamma_sum = np.zeros((size, c)), np.zeros((size, c))
    count = np.zeros(c)
    # the class y_i side of each pair moves by +v g1, the class k side by −v g1 (C5)
    for cls, sign in ((yb[rows], 1.0), (cols, -1.0)):
        v = vc[rows, cls]
        m = mc[rows, cls]
        vh = np.where(ok, v + v * v * curv, 1.0)
        v_safe = np.where(ok, v, 1.0)
        beta = np.where(ok, (1.0 / vh - 1.0 / v_safe) / alpha, 0.0)
        gamma = np.where(ok, ((m + sign * v * g1) / vh - m / v_safe) / alpha, 0.0)
        np.add.at(beta_sum, (rows, cls), beta)
        np.add.at(gamma_sum, (rows, cls), gamma)
        count += np.bincount(cls, minlength=c)
    for j in range(c):
        Lam_B = (a * beta_sum[:, j, None]).T @ a / count[j]
        b_B = a.T @ gamma_sum[:, j] / count[j]
        eps = min(1.0, damping * count[j] / sites.N[j])
        for _ in range(11):
            Lam = (1.0 - eps) * sites.Lam[j] + eps * 0.5 * (Lam_B + Lam_B.T)
            try:
                _factor_A(frame, sites.N[j] * Lam)
            except np.linalg.LinAlgError:
                eps *= 0.5
                continue
            sites.Lam[j], sites.b[j] = Lam, (1.0 - eps) * sites.b[j] + eps * b_B
            break
    return int(np.sum(~ok))


# -------------------------------------------------------------- energy and gradient
def _energy_and_gradient(be, sites, frame, Xb, yb, n, alpha, want_grad=True, rows=None):
    """Minibatch estimate of the tied energy (eq. C7) and its gradient (C8–C10).

    Xb (b, d), yb (b,) int labels; n the number of training points (the data terms are
    scaled by n / b).  Returns (energy, g_theta (p,), g_Z (m, d)); the gradients are None
    with ``want_grad=False``.
    """
    c = sites.Lam.shape[0]
    scale = n / Xb.shape[0]
    Kb, a, _, d = rows if rows is not None else frame.rows(Xb)
    C = frame.C
    cav, mc, vc, s_rows = _cavities(be, sites, frame, Kb, alpha)
    f_rows, cols, log_Z, g1, e, ok = _tilted_terms(yb, mc, vc, d, alpha)
    glob = 0.0
    W_mm = -0.5 * c * C
    for j in range(c):
        q = _Gauss(frame, *sites.q_natural(j))
        N_j = sites.N[j]
        # C7: G(q_j) − G(p) + (N_j/α)(G(c_j) − G(q_j))
        glob += q.G - 0.5 * frame.log_det_K + (N_j / alpha) * (cav[j].G - q.G)
        if want_grad:
            W_mm = W_mm + (
                0.5 * (1.0 - N_j / alpha) * (np.outer(q.Cm, q.Cm) + q.CSC)
                + 0.5 * (N_j / alpha) * (np.outer(cav[j].Cm, cav[j].Cm) + cav[j].CSC)
            )
    energy = glob + scale * float(np.sum(np.where(ok, log_Z, 0.0))) / alpha
    if not want_grad:
        return energy, None, None
    # C9: per (point, class) weights of the cavity mean and of V = v + d
    size = Xb.shape[0]
    g1 = scale * np.where(ok, g1, 0.0) / alpha
    e = scale * np.where(ok, e, 0.0) / alpha
    G1, E = np.zeros((size, c)), np.zeros((size, c))
    np.add.at(G1, (f_rows, yb[f_rows]), g1)
    np.add.at(G1, (f_rows, cols), -g1)
    np.add.at(E, (f_rows, yb[f_rows]), e)
    np.add.at(E, (f_rows, cols), e)
    W_nm = np.zeros_like(Kb)
    X_mm = np.zeros_like(C)
    for j in range(c):
        mu = cav[j].Cm
        r = s_rows[j] - a
        W_nm += G1[:, j, None] * mu[None, :] + 2.0 * E[:, j, None] * r
        X_mm += np.outer(r.T @ G1[:, j], mu) + (r * E[:, j, None]).T @ r
    W_mm = W_mm + 0.5 * (X_mm + X_mm.T)
    g_theta, g_Z = be.kernel_gradients(frame.kernel, Xb, frame.Z, W_mm, W_nm, E.sum(axis=1))
    return energy, g_theta, g_Z


# ------------------------------------------------------------------------- result
@dataclasses.dataclass
class StochasticMulticlassEPResult:
    """Fitted state of :func:`fit_stochastic_multiclass_ep`.

    Attributes
    ----------
    kernel : the fitted scikit-learn kernel (shared by the classes); inducing_inputs : Z
    (m, d); n_classes : c; power : α; jitter : added to K_mm's diagonal.
    mean (c, m), cov (c, m, m) : q(u_j) = N(mean[j], cov[j]) over each class's inducing
    values.
    history : list of dicts per epoch (``epoch``, ``step``, ``energy``, ``time``,
    ``skipped``), as :class:`~robustep.ep.stochastic.StochasticEPResult`'s.
    n_steps : minibatch steps taken; stopped : "n_epochs", "max_steps", "max_time" or
    "callback".
    """

    kernel: object
    inducing_inputs: np.ndarray
    n_classes: int
    power: float
    jitter: float
    mean: np.ndarray
    cov: np.ndarray
    history: list
    n_steps: int
    stopped: str
    _sites: _ClassSites = dataclasses.field(repr=False, default=None)
    _adam: _Adam = dataclasses.field(repr=False, default=None)

    def predict(self, X_new):
        """FITC predictive of the c latent values at X_new (k, d): (mean (k, c), var (k, c)),
        independent across the classes under q."""
        X_new = np.asarray(X_new, dtype=float)
        frame = _Frame(NumpyBackend(), self.kernel, self.inducing_inputs, self.jitter)
        k, c = X_new.shape[0], self.n_classes
        mean, var = np.empty((k, c)), np.empty((k, c))
        for rows in row_chunks(k, self.inducing_inputs.shape[0]):
            _, a, _, d = frame.rows(X_new[rows])
            mean[rows] = a @ self.mean.T
            for j in range(c):
                var[rows, j] = d + np.einsum("ij,ij->i", a @ self.cov[j], a)
        return mean, var

    def predict_proba(self, X_new):
        """Multinomial probit class probabilities (k, c) of q's independent latent
        marginals (eq. C12): the model nested EP fits, so held-out scores of the learner
        and of the final fit are comparable."""
        mean, var = self.predict(X_new)
        return multinomial_probit_independent(mean, var)


def multinomial_probit_independent(mean, var, n_nodes=48):
    """p(y = k) = ∫ N(f | mean, diag(var)) p_MNP(k | f) df for independent latent values
    (eq. C12): with w_j = f_j + ε_j ~ N(μ_j, 1 + v_j) independent,
    ``p(k) = E_{w_k}[∏_{j≠k} Φ((w_k − μ_j)/√(1 + v_j))]``, one Gauss–Hermite integral per
    class.  mean, var (p, c); returns (p, c), rows normalised to 1."""
    from scipy.special import log_ndtr, logsumexp

    from robustep.quadrature import gauss_hermite

    mean = np.asarray(mean, dtype=float)
    sd = np.sqrt(1.0 + np.maximum(np.asarray(var, dtype=float), 0.0))
    x, log_w = gauss_hermite(n_nodes)
    p, c = mean.shape
    log_p = np.empty((p, c))
    for k in range(c):
        wk = mean[:, k, None] + sd[:, k, None] * x[None, :]  # (p, nodes)
        z = (wk[:, None, :] - mean[:, :, None]) / sd[:, :, None]  # (p, c, nodes)
        terms = log_ndtr(z)
        terms[:, k, :] = 0.0
        log_p[:, k] = logsumexp(terms.sum(axis=1) + log_w[None, :], axis=1)
    return np.exp(log_p - logsumexp(log_p, axis=1, keepdims=True))


def stochastic_multiclass_energy(result, X, y, *, batch=None, want_grad=True):
    """Tied energy (eq. C7) of a :class:`StochasticMulticlassEPResult` at its sites, and its
    gradient at fixed sites (C8–C10).

    X (n, d), y (n,) int labels 0 .. c-1: the training data; batch : indices (b,) of a
    minibatch (None: every point, the exact energy).  Returns (energy (the data terms
    scaled by n / b), g_theta (p,) w.r.t. ``kernel.theta``, g_Z (m, d)).
    """
    be = NumpyBackend()
    X = np.asarray(X, dtype=float)
    y = _labels(y, result.n_classes)
    idx = np.arange(X.shape[0]) if batch is None else np.asarray(batch)
    frame = _Frame(be, result.kernel, result.inducing_inputs, result.jitter)
    return _energy_and_gradient(be, result._sites, frame, X[idx], y[idx], X.shape[0],
                                result.power, want_grad)  # fmt: skip


def _labels(y, n_classes):
    y = np.asarray(y)
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
        raise ValueError("y must be a 1-D array of integer class indices 0 .. n_classes-1")
    if y.size and (y.min() < 0 or y.max() >= n_classes):
        raise ValueError(
            f"y must hold class indices in 0 .. {n_classes - 1}; got values in "
            f"{y.min()} .. {y.max()}"
        )
    return y.astype(np.intp)


# --------------------------------------------------------------------------- the run
def fit_stochastic_multiclass_ep(
    kernel,
    X,
    y,
    n_classes,
    Z,
    *,
    power=1.0,
    batch_size=256,
    n_epochs=10,
    max_steps=None,
    learning_rate=0.01,
    lr_decay_epochs=5.0,
    damping=0.5,
    learn_kernel=True,
    learn_inducing=True,
    site_steps=1,
    jitter=1e-6,
    random_state=None,
    callback: Callable | None = None,
    max_time=None,
    state: StochasticMulticlassEPResult | None = None,
) -> StochasticMulticlassEPResult:
    """Stochastic power EP for c latent GPs with pairwise probit factors, learning θ and Z.

    The multi-class counterpart of :func:`robustep.ep.stochastic.fit_stochastic_ep` with
    tied sites (Villacampa-Calvo & Hernández-Lobato 2017; docs/derivations/
    stochastic_multiclass.md).  Each step draws a minibatch B (an epoch is a random
    permutation cut into batches), updates every class's average site from the pairwise
    factors of B by damped power EP (``site_steps`` times; eqs. C3–C6), then takes one Adam
    ascent step along the minibatch estimate of the gradient of the energy (C7–C10) in
    (log θ, Z).

    Parameters
    ----------
    kernel : scikit-learn kernel shared by the c latent GPs (its ``theta`` is learned).
    X : (n, d) inputs (in memory); y : (n,) integer labels 0 .. n_classes-1.
    n_classes : c >= 2.
    Z : (m, d) initial inducing inputs, shared by the classes.
    power : α in (0, 1]; 1 (the default) is FITC-EP, the sparse multinomial model's.
    batch_size, n_epochs, max_steps, learning_rate, lr_decay_epochs, site_steps, jitter,
    random_state, callback, max_time : as :func:`~robustep.ep.stochastic.fit_stochastic_ep`.
    damping : δ > 0: class j's average site moves by ``ε_j = min(1, δ F_j / N_j)`` towards
        the minibatch's average, F_j the minibatch's factors that touch class j (C6).
    learn_kernel, learn_inducing : which parameters take gradient steps (both False: EP at
        fixed hyperparameters).
    state : a previous :class:`StochasticMulticlassEPResult` on the same y (its class
        counts) and number of inducing inputs to continue from: its sites, Adam moments
        and step count.  Pass its ``kernel`` and ``inducing_inputs`` as the starting
        values.

    Returns
    -------
    StochasticMulticlassEPResult
        The last state; ``history`` covers every epoch.
    """
    alpha = check_inducing_power(power)
    c = int(n_classes)
    if c < 2:
        raise ValueError(f"n_classes must be at least 2, got {n_classes!r}")
    X = np.asarray(X, dtype=float)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (n, d), got shape {X.shape}")
    y = _labels(y, c)
    Z = np.array(Z, dtype=float)
    if y.shape != (X.shape[0],) or Z.ndim != 2 or Z.shape[1] != X.shape[1]:
        raise ValueError("y must have shape (n,) and Z shape (m, d) with X's d")
    if not (np.isfinite(damping) and damping > 0):
        raise ValueError(f"damping must be > 0, got {damping!r}")
    be = NumpyBackend()
    rng = np.random.default_rng(random_state)
    n, m = X.shape[0], Z.shape[0]
    b_size = int(min(max(1, batch_size), n))
    source = InMemoryBatches(X, y, b_size, rng)
    steps_per_epoch = int(np.ceil(n / b_size))
    lr_at = _schedule(learning_rate, lr_decay_epochs * steps_per_epoch)
    learning = bool(learn_kernel or learn_inducing)
    sites = _ClassSites(np.zeros((c, m, m)), np.zeros((c, m)), _factor_counts(y, c))
    p = kernel.theta.size
    x = np.concatenate([kernel.theta, Z.ravel()])
    mask = np.concatenate([np.full(p, float(bool(learn_kernel))),
                           np.full(Z.size, float(bool(learn_inducing)))])  # fmt: skip
    adam, t_start = _Adam(be, x.shape[0]), 0
    if state is not None:
        if (
            state._sites is None
            or state._sites.Lam.shape != sites.Lam.shape
            or not np.array_equal(state._sites.N, sites.N)
        ):
            raise ValueError(
                "state must be a StochasticMulticlassEPResult of the same classes, class "
                "counts and number of inducing inputs as this run"
            )
        sites = state._sites.copy()
        if state._adam is not None and state._adam.size == x.shape[0]:
            adam = state._adam.copy(be)
        t_start = int(state.n_steps)

    def unpack(x):
        return kernel.clone_with_theta(x[:p]), x[p:].reshape(m, -1)

    def snapshot(x, history, t, stopped):
        k, Zc = unpack(x)
        frame = _Frame(be, k, Zc, jitter)
        gauss = [_Gauss(frame, *sites.q_natural(j)) for j in range(c)]
        return StochasticMulticlassEPResult(
            kernel=k, inducing_inputs=Zc.copy(), n_classes=c, power=alpha, jitter=jitter,
            mean=np.stack([g.mean for g in gauss]), cov=np.stack([g.S for g in gauss]),
            history=list(history), n_steps=t, stopped=stopped, _sites=sites.copy(),
            _adam=adam.copy(be),
        )  # fmt: skip

    t0 = time.perf_counter()
    history, t, stopped = [], t_start, "n_epochs"
    for epoch in range(int(n_epochs)):
        frame = _Frame(be, *unpack(x), jitter)
        energies, skipped = [], 0
        for _, Xb, yb in source.epoch():
            rows = frame.rows(Xb)
            Kb, a, _, d = rows
            for _ in range(site_steps):
                skipped += _site_step(be, sites, frame, Kb, a, d, yb, alpha, damping)
            if learning:
                E, g_t, g_Z = _energy_and_gradient(be, sites, frame, Xb, yb, n, alpha,
                                                   rows=rows)  # fmt: skip
                x_new, new_frame = _adam_step(
                    be, adam, x, np.concatenate([g_t, g_Z.ravel()]) * mask, float(lr_at(t)),
                    lambda x: _Frame(be, *unpack(x), jitter),
                    lambda: (sites.q_natural(j)[0] for j in range(c)),
                )  # fmt: skip
                if new_frame is not None:
                    x, frame = x_new, new_frame
                energies.append(E)
            t += 1
            stopped = _stop_reason(t, max_steps, time.perf_counter() - t0, max_time) or stopped
            if stopped != "n_epochs":
                break
        if not learning:
            energies.append(
                _energy_and_gradient(be, sites, frame, Xb, yb, n, alpha, want_grad=False)[0]
            )
        record = {
            "epoch": epoch + 1, "step": t, "energy": float(np.mean(energies)),
            "time": time.perf_counter() - t0, "skipped": skipped,
        }  # fmt: skip
        history.append(record)
        if callback is not None and callback(snapshot(x, history, t, "running"), record):
            stopped = "callback"
            break
        if stopped in ("max_steps", "max_time"):
            break
    return snapshot(x, history, t, stopped)
