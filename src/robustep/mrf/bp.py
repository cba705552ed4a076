"""Loopy belief propagation on pairwise MRFs: BP, damped BP, fractional BP and relaxed BP.

All four methods are EP with a fully factorised approximation q(x) = Π_i q_i(x_i) on the
edge factors ψ_ij (ICML paper §2, §4.2; Minka 2001).  They share one message kernel and one
loop; a method only chooses how the cavity is formed and how the message is raised
(docs/derivations/rbp.md, eq. (K)):

    cav_{i\\ij}(x_i)  = log q_i(x_i) − M_{ij→i}(x_i) + β_ij M_{ij→i}(x_i)
    M_{ij→j}(x_j)    = (1/a) log Σ_{x_i} exp(a log ψ_ij(x_i, x_j) + cav_{i\\ij}(x_i))   (+ const)

    BP          : β = 0,        a = 1
    damped BP   : as BP, then M ← (1 − δ) M_new + δ M_old   (δ = ``damping``, weight on OLD)
    fractional  : β = 1 − α,    a = α   (power EP / fractional BP, α = ``power``)
    relaxed     : β = b_ij,     a = 1   (RBP, b_ij ∈ [0, 1] fitted per edge by minimising the
                                          penalised relaxed KL, docs/derivations/rbp.md eq. (Q))

Messages are log-domain, normalised so that Σ_x exp M(x) = 1; for edge e = (i, j) the
array ``M[e]`` is the message into j (from i's side) and ``M[m + e]`` the message into i.
The parallel schedule is vectorised over all edges (no Python loop per message).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning

from robustep._warnings import warn
from robustep.mrf.model import PAD, PairwiseMRF

METHODS = ("bp", "damped", "fractional", "relaxed")
SCHEDULES = ("parallel", "sequential", "residual")


@dataclasses.dataclass
class BPResult:
    """Outcome of :func:`belief_propagation`.

    Attributes
    ----------
    marginals : (n, K) single-node beliefs q_i (rows sum to 1; padded states are 0).
    edge_beliefs : (m, K, K) pairwise beliefs b_ij(x_i, x_j) ∝ ψ_ij q_{i\\ij} q_{j\\ij}.
    log_Z : Bethe approximation of log Z evaluated at (marginals, edge_beliefs).
    converged : whether the largest message change fell below ``tol``.
    n_iter : number of sweeps (parallel: iterations; sequential/residual: m edge updates each).
    history : (n_iter,) largest change max_x |exp M_new(x) − exp M_old(x)| in each sweep.
    history_l2 : (n_iter,) the paper's residual R_t = ‖p_t − p_{t−1}‖₂ over all 2m messages and
        K states (p = exp M, the messages' mean parameters) between consecutive sweeps (ICML
        §6.1: "we required R < 10⁻³"; docs/derivations/rbp.md, "Convergence").
    relaxation : (m,) fitted b_ij of the last update of each edge ("relaxed"), else None.
    frozen_at : sweep after which the relaxation strengths were frozen (``freeze_after``),
        or None when they were refitted in every update.
    log_messages : (2m, K) final normalised log messages (see module docstring for layout).
    method, schedule : as passed.
    """

    marginals: np.ndarray
    edge_beliefs: np.ndarray
    log_Z: float
    converged: bool
    n_iter: int
    history: np.ndarray
    relaxation: np.ndarray | None
    log_messages: np.ndarray
    method: str
    schedule: str
    history_l2: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0))
    frozen_at: int | None = None

    def first_below(self, tol_l2: float = 1e-3) -> int | None:
        """First sweep t (1-based) with R_t < ``tol_l2``: where a run that stops by the paper's
        rule R < 10⁻³ (ICML §6.1) would have stopped; None if no sweep got there."""
        hit = np.flatnonzero(self.history_l2 < tol_l2)
        return int(hit[0]) + 1 if hit.size else None


# ---------------------------------------------------------------------- small helpers
def _lse(x: np.ndarray, axis) -> np.ndarray:
    """log Σ exp over ``axis`` (int or tuple), stable; input values must be finite."""
    mx = np.max(x, axis=axis, keepdims=True)
    out = np.log(np.sum(np.exp(x - mx), axis=axis, keepdims=True)) + mx
    return np.squeeze(out, axis=axis)


def _lse_rows(rows: list[np.ndarray]) -> np.ndarray:
    """Elementwise log Σ_k exp(rows[k]) of a short list of equal-shape arrays (K small).

    Looping over the K states with contiguous length-m arrays is much faster in numpy than
    reducing a short trailing axis (and than ``np.logaddexp``, which is not vectorised).
    """
    if len(rows) == 1:
        return np.array(rows[0], dtype=float, copy=True)
    if len(rows) == 2:  # log(e^a + e^b) = max(a, b) + log1p(e^{−|a − b|})
        a, b = rows
        d = np.subtract(a, b)
        np.abs(d, out=d)
        np.negative(d, out=d)
        np.exp(d, out=d)
        np.log1p(d, out=d)
        d += np.maximum(a, b)
        return d
    mx = np.maximum(rows[0], rows[1])
    for r in rows[2:]:
        np.maximum(mx, r, out=mx)
    acc = np.exp(rows[0] - mx)
    for r in rows[1:]:
        acc += np.exp(r - mx)
    np.log(acc, out=acc)
    acc += mx
    return acc


def _lse2_into(a, b, out, tmp):
    """out = log(e^a + e^b) = max(a, b) + log1p(e^{−|a − b|}) without temporaries.

    ``out`` may alias ``a`` or ``b``; ``tmp`` is scratch of the same shape.
    """
    np.subtract(a, b, out=tmp)
    np.abs(tmp, out=tmp)
    np.negative(tmp, out=tmp)
    np.exp(tmp, out=tmp)
    np.log1p(tmp, out=tmp)
    np.maximum(a, b, out=out)
    out += tmp
    return out


def _kernel(lpT, cav_i, cav_j, a, out_j=None, out_i=None):
    r"""Kernel eq. (K) in state-major layout: messages into j and into i, normalised.

    lpT : (K, K, m') a·log ψ_ij[x_i, x_j] with the edge axis last (contiguous rows).
    cav_i, cav_j : (K, m') cavity log-beliefs of the two ends (β already applied).
    a : 1 for BP / RBP; α for fractional BP, where m^α ∝ Σ ψ^α q^{\α} (rbp.md eq. (F)).
    out_j, out_i : optional (K, m') arrays (or views) to write the results into.
    Returns (to_j, to_i), each (K, m') with Σ_x exp = 1 per column.
    """
    K, m_ = lpT.shape[0], lpT.shape[2]
    to_j = np.empty((K, m_)) if out_j is None else out_j
    to_i = np.empty((K, m_)) if out_i is None else out_i
    if K == 2:  # binary fast path: the same sums, written without temporaries
        s0, s1, tmp = np.empty(m_), np.empty(m_), np.empty(m_)
        for t in range(2):  # into j: log Σ_{x_i} ψ(x_i, t) e^{cav_i(x_i)}
            np.add(lpT[0, t], cav_i[0], out=s0)
            np.add(lpT[1, t], cav_i[1], out=s1)
            _lse2_into(s0, s1, to_j[t], tmp)
        for s in range(2):  # into i: log Σ_{x_j} ψ(s, x_j) e^{cav_j(x_j)}
            np.add(lpT[s, 0], cav_j[0], out=s0)
            np.add(lpT[s, 1], cav_j[1], out=s1)
            _lse2_into(s0, s1, to_i[s], tmp)
        if a != 1.0:
            to_j /= a
            to_i /= a
        for out in (to_j, to_i):  # normalise: Σ_x exp M(x) = 1
            _lse2_into(out[0], out[1], s0, tmp)
            out[0] -= s0
            out[1] -= s0
        return to_j, to_i
    for t in range(K):
        to_j[t] = _lse_rows([lpT[s, t] + cav_i[s] for s in range(K)])
    for s in range(K):
        to_i[s] = _lse_rows([lpT[s, t] + cav_j[t] for t in range(K)])
    if a != 1.0:
        to_j /= a
        to_i /= a
    for out in (to_j, to_i):  # normalise: Σ_x exp M(x) = 1
        z = _lse_rows(list(out))
        for t in range(K):
            out[t] -= z
    return to_j, to_i


def relaxed_objective(logpsi, u_i, u_j, m_i, m_j, b, c):
    """Penalised relaxed KL Q(b) of rbp.md eq. (Q), for each edge and each candidate b.

    Q(b) = I_{p̃_b}(x_i; x_j) + c·b,   p̃_b(x_i, x_j) ∝ ψ_ij e^{u_i + b m_i} e^{u_j + b m_j},

    i.e. the relaxed KL after the closed-form minimisation over q (the mutual information of
    the relaxed tilted edge distribution) plus the l1 penalty (ICML paper eq. (5), §3.3).

    Parameters
    ----------
    logpsi : (m, K, K) log ψ_ij.
    u_i, u_j : (m, K) cavity log-beliefs log q_{i\\ij} = log q_i − M_{ij→i} (and for j).
    m_i, m_j : (m, K) old log messages M_{ij→i}, M_{ij→j} (the relaxation factor's parameters).
    b : (m, G) candidate relaxation factors in [0, 1].
    c : penalty weight.

    Returns (m, G).
    """
    b = np.asarray(b, dtype=float)
    A = u_i[:, None, :] + b[:, :, None] * m_i[:, None, :]  # (m, G, K)
    B = u_j[:, None, :] + b[:, :, None] * m_j[:, None, :]
    L = logpsi[:, None, :, :] + A[..., :, None] + B[..., None, :]  # (m, G, K, K)
    L -= _lse(L, (2, 3))[..., None, None]
    P = np.exp(L)
    Pi, Pj = P.sum(axis=3), P.sum(axis=2)
    # I = Σ P log P − Σ P_i log P_i − Σ P_j log P_j   (0 log 0 = 0)
    mi = (
        np.sum(P * L, axis=(2, 3))
        - np.sum(Pi * np.log(np.maximum(Pi, 1e-300)), axis=2)
        - np.sum(Pj * np.log(np.maximum(Pj, 1e-300)), axis=2)
    )
    return np.maximum(mi, 0.0) + c * b


def fit_relaxation(logpsi, u_i, u_j, m_i, m_j, c, n_grid: int = 33, n_stages: int = 4):
    """Minimise Q(b) of :func:`relaxed_objective` over b ∈ [0, 1] for every edge.

    Line search by nested grids: ``n_grid`` points on [0, 1], then ``n_grid`` points on the
    two cells around the best point, ``n_stages`` times (final resolution
    (n_grid − 1)^−1 · (2 / (n_grid − 1))^(n_stages − 1), about 8e−6 by default).  b = 0 is kept
    whenever Q(0) ≤ Q(b) (so a large c gives b = 0 exactly and RBP is BP).  Vectorised over
    edges; returns b (m,).
    """
    m = logpsi.shape[0]
    t = np.linspace(0.0, 1.0, n_grid)
    lo, hi = np.zeros(m), np.ones(m)
    best_b, best_f, Q0 = None, None, None
    for _ in range(n_stages):
        bb = lo[:, None] + (hi - lo)[:, None] * t[None, :]  # (m, G)
        Q = relaxed_objective(logpsi, u_i, u_j, m_i, m_j, bb, c)
        if Q0 is None:
            Q0 = Q[:, 0]  # the first grid starts at b = 0
        k = np.argmin(Q, axis=1)
        fk = Q[np.arange(m), k]
        bk = bb[np.arange(m), k]
        if best_f is None:
            best_b, best_f = bk, fk
        else:
            better = fk < best_f
            best_b = np.where(better, bk, best_b)
            best_f = np.where(better, fk, best_f)
        h = (hi - lo) / (n_grid - 1)
        lo = np.clip(best_b - h, 0.0, 1.0)
        hi = np.clip(best_b + h, 0.0, 1.0)
    return np.where(Q0 <= best_f, 0.0, best_b)


# ---------------------------------------------------------------------- the engine
class _Engine:
    """Arrays and update kernels shared by the three schedules.

    Internally state-major: M (K, 2m) log messages (M[:, e] into Ej[e], M[:, m + e] into
    Ei[e]), log_b (K, n) unnormalised log beliefs, lpT (K, K, m) (a·)log ψ.
    """

    def __init__(self, mrf: PairwiseMRF, method, damping, power, relaxation):
        self.mrf = mrf
        n, K, m = mrf.n_variables, mrf.max_states, mrf.n_edges
        self.n, self.K, self.m = n, K, m
        self.Ei = mrf.edges[:, 0]
        self.Ej = mrf.edges[:, 1]
        self.logpsi = mrf.log_pairwise
        self.method = method
        self.damping = float(damping)
        self.a = float(power) if method == "fractional" else 1.0
        self.c = float(relaxation)
        self.lpT = np.ascontiguousarray(np.transpose(mrf.log_pairwise, (1, 2, 0)) * self.a)
        self.UT = np.ascontiguousarray(mrf.log_unary.T)
        self.valid = mrf.valid_states
        logk = np.log(mrf.cardinalities.astype(float))
        vT = self.valid.T
        # uniform messages over the valid states of the receiving variable
        self.M = np.concatenate(
            [
                np.where(vT[:, self.Ej], -logk[self.Ej], PAD),
                np.where(vT[:, self.Ei], -logk[self.Ei], PAD),
            ],
            axis=1,
        )
        # scatter matrix: node ← directed message (sum of incoming log messages)
        rows = np.concatenate([self.Ej, self.Ei])
        self.S = sp.csr_matrix((np.ones(2 * m), (rows, np.arange(2 * m))), shape=(n, 2 * m))
        self.b = np.zeros(m) if method == "relaxed" else None
        self.frozen = False  # True: reuse self.b instead of refitting (``freeze_after``)
        self.P = None  # cache of exp(M) for the parallel schedule
        self.log_b = self._beliefs()

    def _beliefs(self):
        # log q_i = log ψ_i + Σ_{e ∋ i} M_{e→i}   (unnormalised), one sparse matvec per state
        if not self.m:
            return self.UT.copy()
        lb = np.empty((self.K, self.n))
        for t in range(self.K):
            lb[t] = self.S @ self.M[t]
        lb += self.UT
        return lb

    def candidates(self, sel=None, out=None):
        """New (undamped) messages for edges ``sel`` (all if None) from the current beliefs.

        Returns (to_j, to_i, b) with to_j, to_i (K, m') and b (m',) or None.
        """
        m = self.m
        if sel is None:
            Ei, Ej, lpT = self.Ei, self.Ej, self.lpT
            Mf, Mb = self.M[:, :m], self.M[:, m:]
        else:
            Ei, Ej, lpT = self.Ei[sel], self.Ej[sel], self.lpT[:, :, sel]
            Mf, Mb = self.M[:, sel], self.M[:, m + sel]
        u_i = np.take(self.log_b, Ei, axis=1)  # log q_{i\ij}: cavity of i w.r.t. edge ij
        u_i -= Mb
        u_j = np.take(self.log_b, Ej, axis=1)
        u_j -= Mf
        b = None
        if self.method == "fractional":
            beta = 1.0 - self.a  # cavity q_i / m^α   (power EP, Minka 2004): rbp.md eq. (F)
            u_i += beta * Mb
            u_j += beta * Mf
        elif self.method == "relaxed" and self.frozen:
            b = self.b if sel is None else self.b[sel]  # frozen strengths: rbp.md "Freezing"
            u_i += b * Mb
            u_j += b * Mf
        elif self.method == "relaxed":
            lp = self.logpsi if sel is None else self.logpsi[sel]
            # rbp.md eq. (Q), in chunks to bound the (m', 33, K, K) work arrays
            ch = max(1, 2**18 // (33 * self.K * self.K))
            b = np.concatenate(
                [
                    fit_relaxation(
                        lp[k : k + ch],
                        u_i[:, k : k + ch].T,
                        u_j[:, k : k + ch].T,
                        Mb[:, k : k + ch].T,
                        Mf[:, k : k + ch].T,
                        self.c,
                    )
                    for k in range(0, lp.shape[0], ch)
                ]
            )
            u_i += b * Mb  # cavity times relaxation factor, q_{i\ij} r_ij: rbp.md eq. (R)
            u_j += b * Mf
        if out is None:
            to_j, to_i = _kernel(lpT, u_i, u_j, self.a)
        else:
            to_j, to_i = _kernel(lpT, u_i, u_j, self.a, out[:, :m], out[:, m:])
        return to_j, to_i, b

    def damp(self, new, old):
        """M ← (1 − δ) M_new + δ M_old in the log domain, renormalised (GUIDE: δ on OLD)."""
        if self.damping == 0.0:
            return new
        out = (1.0 - self.damping) * new + self.damping * old
        out -= _lse_rows(list(out))
        return out

    def l2_change(self, M_old):
        """‖exp M − exp M_old‖₂ over all messages and valid states (the paper's R)."""
        d = np.exp(self.M) - np.exp(M_old)
        return float(np.sqrt(np.sum(d * d)))

    @staticmethod
    def change(new, old):
        """max over states of |exp new − exp old| per column, shape (columns,)."""
        if new.shape[1] == 0:
            return np.zeros(0)
        d = np.exp(new)
        d -= np.exp(old)
        np.abs(d, out=d)
        return d.max(axis=0)

    # ------------------------------------------------------------------ schedules
    def parallel_sweep(self):
        new = np.empty_like(self.M)
        _, _, b = self.candidates(out=new)
        new = self.damp(new, self.M)
        # largest change in probability; exp(M_old) is cached from the previous sweep.  For
        # K = 2 the change of state 0 equals that of state 1 (p_1 = 1 − p_0): one row suffices.
        rows = slice(0, 1) if self.K == 2 else slice(None)
        P_new = np.exp(new[rows])
        if self.P is None:
            self.P = np.exp(self.M[rows])
        d = np.subtract(P_new, self.P)
        np.abs(d, out=d)
        diff = float(d.max(initial=0.0))
        if not np.isfinite(diff) or not np.isfinite(new[-1]).all():
            return np.inf  # a NaN/inf propagates into the max (the last row checks K = 2)
        self.M, self.P = new, P_new
        if b is not None:
            self.b = b
        self.log_b = self._beliefs()
        return diff

    def apply(self, sel, to_j, to_i, b):
        """Install new messages for the edges ``sel`` (a matching: no two share a node, or a
        single edge) and update their endpoints' beliefs; returns the largest change."""
        m = self.m
        nj = self.damp(to_j, self.M[:, sel])
        ni = self.damp(to_i, self.M[:, m + sel])
        if not (np.all(np.isfinite(nj)) and np.all(np.isfinite(ni))):
            return np.inf
        diff = max(
            float(np.max(self.change(nj, self.M[:, sel]), initial=0.0)),
            float(np.max(self.change(ni, self.M[:, m + sel]), initial=0.0)),
        )
        i, j = self.Ei[sel], self.Ej[sel]
        self.log_b[:, j] += nj - self.M[:, sel]
        self.log_b[:, i] += ni - self.M[:, m + sel]
        for v in (i, j):  # keep beliefs bounded (they are unnormalised)
            self.log_b[:, v] -= self.log_b[:, v].max(axis=0)
        self.M[:, sel], self.M[:, m + sel] = nj, ni
        self.P = None
        if b is not None:
            self.b[sel] = b
        return diff

    # ------------------------------------------------------------------ outputs
    def result(self, converged, n_iter, history, schedule, history_l2, frozen_at) -> BPResult:
        m = self.m
        self.log_b = self._beliefs()
        lb = self.log_b.T  # (n, K)
        M = self.M.T  # (2m, K)
        lq = lb - _lse(lb, 1)[:, None]
        q = np.exp(lq)
        u_i = lb[self.Ei] - M[m:]
        u_j = lb[self.Ej] - M[:m]
        L = self.logpsi + u_i[:, :, None] + u_j[:, None, :]
        L = L - _lse(L, (1, 2))[:, None, None] if m else L
        B = np.exp(L)
        # Bethe: log Z = Σ_e E_b[log ψ_e] + Σ_i E_q[log ψ_i] + Σ_e H(b_e) + Σ_i (1 − d_i) H(q_i)
        vq = self.valid
        Hq = -np.sum(np.where(vq, q * lq, 0.0), axis=1)
        if m:
            vp = vq[self.Ei][:, :, None] & vq[self.Ej][:, None, :]
            e_terms = np.sum(np.where(vp, B * (self.logpsi - L), 0.0))
        else:
            e_terms = 0.0
        U = self.mrf.log_unary
        log_Z = e_terms + np.sum(np.where(vq, q * U, 0.0)) + np.sum((1 - self.mrf.degrees()) * Hq)
        return BPResult(
            marginals=np.where(vq, q, 0.0),
            edge_beliefs=B,
            log_Z=float(log_Z),
            converged=bool(converged),
            n_iter=int(n_iter),
            history=np.asarray(history, dtype=float),
            relaxation=None if self.b is None else self.b.copy(),
            log_messages=np.ascontiguousarray(M),
            method=self.method,
            schedule=schedule,
            history_l2=np.asarray(history_l2, dtype=float),
            frozen_at=frozen_at,
        )


def edge_matchings(edges: np.ndarray, n: int) -> list[np.ndarray]:
    """Split the edges into matchings by greedy edge colouring (edge order 0..m−1).

    Edges of one matching share no variable, so updating them together gives exactly the
    same messages as updating them one after the other: the "sequential" schedule sweeps the
    matchings in turn, each vectorised.  Greedy colouring uses at most 2·max_degree − 1
    colours.
    """
    used: list[set[int]] = [set() for _ in range(n)]
    colour = np.empty(len(edges), dtype=np.intp)
    for e, (i, j) in enumerate(edges):
        c = 0
        taken = used[i] | used[j]
        while c in taken:
            c += 1
        colour[e] = c
        used[i].add(c)
        used[j].add(c)
    return [np.flatnonzero(colour == c) for c in range(int(colour.max(initial=-1)) + 1)]


def _validate(mrf, method, schedule, damping, power, relaxation, max_iter, tol, freeze_after):
    if not isinstance(mrf, PairwiseMRF):
        raise TypeError(
            f"mrf must be a robustep.mrf.PairwiseMRF; got {type(mrf).__name__} "
            "(build one with PairwiseMRF(...) or robustep.mrf.ising(...))"
        )
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}; got {method!r}")
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}; got {schedule!r}")
    if not (0.0 <= damping < 1.0):
        raise ValueError(
            f"damping must lie in [0, 1) (the weight kept on the old message); got {damping}"
        )
    if not (0.0 < power <= 1.0):
        raise ValueError(f"power must lie in (0, 1]; got {power}")
    if not (np.isfinite(relaxation) and relaxation >= 0.0):
        raise ValueError(
            f"relaxation (the l1 penalty weight c) must be finite and >= 0; got {relaxation}"
        )
    if method == "bp" and damping != 0.0:
        raise ValueError("method='bp' takes no damping; use method='damped' with damping > 0")
    if method == "damped" and damping == 0.0:
        raise ValueError(
            "method='damped' needs damping in (0, 1), the weight on the old message "
            "(a step size of 0.8 is damping=0.2)"
        )
    if method != "fractional" and power != 1.0:
        raise ValueError(f"power={power} is only used by method='fractional'")
    if int(max_iter) != max_iter or max_iter < 1:
        raise ValueError(f"max_iter must be a positive integer; got {max_iter}")
    if not (tol > 0):
        raise ValueError(f"tol must be > 0; got {tol}")
    if freeze_after is not None:
        if method != "relaxed":
            raise ValueError(
                f"freeze_after={freeze_after} freezes RBP's relaxation strengths and is only "
                "used by method='relaxed'; leave it None for other methods"
            )
        if isinstance(freeze_after, bool) or int(freeze_after) != freeze_after or freeze_after < 0:
            raise ValueError(
                "freeze_after must be None or a non-negative integer number of burn-in sweeps "
                f"after which b_ij stop being refitted; got {freeze_after!r}"
            )


def belief_propagation(
    mrf: PairwiseMRF,
    *,
    method: str = "bp",
    schedule: str = "parallel",
    damping: float = 0.0,
    power: float = 1.0,
    relaxation: float = 0.1,
    max_iter: int = 1000,
    tol: float = 1e-9,
    freeze_after: int | None = None,
) -> BPResult:
    """Loopy belief propagation and its damped, fractional and relaxed variants.

    Parameters
    ----------
    mrf : PairwiseMRF with n variables, m edges, K (padded) states.
    method : "bp" | "damped" | "fractional" | "relaxed" (RBP, ICML paper §4.2).
    schedule : "parallel" (all messages from the old beliefs, vectorised), "sequential"
        (one edge at a time, both messages of an edge at once, EP style as in the paper's
        "pick an edge"; edges are ordered by the matchings of :func:`edge_matchings` and each
        matching is vectorised, which is exactly equivalent), or
        "residual" (always the edge whose messages would change most; Elidan et al. 2006).
    damping : δ ∈ [0, 1), the weight on the OLD log message (0 = none).  Allowed with
        "damped", "fractional" and "relaxed"; a step size s in the papers is δ = 1 − s.
    power : α ∈ (0, 1] for "fractional" (power EP, Minka 2004; fractional BP, Wiegerinck &
        Heskes 2003); α = 1 is BP.
    relaxation : c ≥ 0, the l1 penalty weight for "relaxed" (ICML eq. (5)); c → ∞ is BP.
    max_iter : maximum number of sweeps.
    tol : convergence when max |exp M_new − exp M_old| < tol over all messages in a sweep.
        ``history_l2`` also records the paper's residual R (ICML §6.1), so a caller can apply
        the paper's rule R < 10⁻³ as well (:meth:`BPResult.first_below`).
    freeze_after : "relaxed" only.  None (default): b_ij is refitted at every edge update.  An
        integer T ≥ 0: after T burn-in sweeps (T edge updates per edge for "residual" counted as
        T·m updates) every b_ij keeps its last fitted value and only the messages iterate, a
        fixed map whose fixed points are those of eq. (RBP) at the frozen b.  This removes the
        limit cycles of the argmin over b (docs/derivations/rbp.md, "Freezing the relaxation
        strengths"); T = 0 freezes b = 0, i.e. plain BP.

    Returns
    -------
    BPResult.  A run that does not converge warns with ``ConvergenceWarning`` and returns the
    last finite messages with ``converged=False``; values are never NaN.
    """
    _validate(mrf, method, schedule, damping, power, relaxation, max_iter, tol, freeze_after)
    eng = _Engine(mrf, method, damping, power, relaxation)
    m = mrf.n_edges
    history: list[float] = []
    history_l2: list[float] = []
    converged = m == 0
    n_iter = 0
    frozen_at = None

    def maybe_freeze(done_sweeps):
        nonlocal frozen_at
        if freeze_after is not None and not eng.frozen and done_sweeps >= freeze_after:
            eng.frozen, frozen_at = True, int(done_sweeps)

    maybe_freeze(0)
    if schedule == "parallel" and m:
        for it in range(1, max_iter + 1):
            M_old = eng.M
            d = eng.parallel_sweep()
            n_iter = it
            if not np.isfinite(d):
                break
            history.append(d)
            history_l2.append(eng.l2_change(M_old))
            maybe_freeze(it)
            if d < tol:
                converged = True
                break
    elif schedule == "sequential" and m:
        batches = edge_matchings(mrf.edges, mrf.n_variables)
        for it in range(1, max_iter + 1):
            n_iter = it
            M_old = eng.M.copy()
            dmax = 0.0
            for sel in batches:  # a matching: same result as updating its edges one by one
                to_j, to_i, b = eng.candidates(sel)
                dmax = max(dmax, eng.apply(sel, to_j, to_i, b))
            eng.log_b = eng._beliefs()  # recompute from the messages: no drift from += updates
            if not np.isfinite(dmax):
                break
            history.append(dmax)
            history_l2.append(eng.l2_change(M_old))
            maybe_freeze(it)
            if dmax < tol:
                converged = True
                break
    elif schedule == "residual" and m:
        converged, n_iter = _residual(eng, max_iter, tol, history, history_l2, maybe_freeze)
        if freeze_after is not None and eng.frozen:
            frozen_at = int(freeze_after)
    if not converged:
        last = history[-1] if history else float("nan")
        warn(
            f"belief propagation (method={method!r}, schedule={schedule!r}) did not converge "
            f"in {n_iter} sweeps (last largest message change {last:.3g}, tol {tol:g}); "
            "results are the last finite messages. Try damping, a smaller power, RBP or a "
            "larger max_iter.",
            ConvergenceWarning,
        )
    return eng.result(converged, n_iter, history, schedule, history_l2, frozen_at)


def _residual_candidates(eng: _Engine):
    """Damped candidate messages (to_j, to_i) and b of every edge from the current state."""
    m = eng.m
    to_j, to_i, b = eng.candidates()
    to_j = eng.damp(to_j, eng.M[:, :m])
    to_i = eng.damp(to_i, eng.M[:, m:])
    return to_j.copy(), to_i.copy(), None if b is None else np.array(b, copy=True)


def _residual(eng: _Engine, max_iter, tol, history, history_l2, maybe_freeze):
    """Residual BP: repeatedly update the edge whose new messages differ most from the old."""
    m = eng.m
    # incident edges of every node (CSR over node -> edge ids)
    nodes = np.concatenate([eng.Ei, eng.Ej])
    eids = np.concatenate([np.arange(m), np.arange(m)])
    order = np.argsort(nodes, kind="stable")
    ptr = np.searchsorted(nodes[order], np.arange(eng.n + 1))
    inc = eids[order]

    cj, ci, cb = _residual_candidates(eng)
    resid = np.maximum(eng.change(cj, eng.M[:, :m]), eng.change(ci, eng.M[:, m:]))
    sweep_max = 0.0
    M_old = eng.M.copy()
    for upd in range(1, max_iter * m + 1):
        e = int(np.argmax(resid))
        if resid[e] < tol:
            history.append(float(resid[e]))
            return True, int(np.ceil(upd / m))
        # candidates are stored already damped; install them undamped-on-top
        saved, eng.damping = eng.damping, 0.0
        sel = np.array([e])
        d = eng.apply(sel, cj[:, sel], ci[:, sel], None if cb is None else cb[sel])
        eng.damping = saved
        if not np.isfinite(d):
            return False, int(np.ceil(upd / m))
        sweep_max = max(sweep_max, d)
        i, j = eng.Ei[e], eng.Ej[e]
        aff = np.unique(np.concatenate([inc[ptr[i] : ptr[i + 1]], inc[ptr[j] : ptr[j + 1]]]))
        nj, ni, nb = eng.candidates(aff)
        nj = eng.damp(nj, eng.M[:, aff])
        ni = eng.damp(ni, eng.M[:, m + aff])
        cj[:, aff], ci[:, aff] = nj, ni
        if cb is not None:
            cb[aff] = nb
        resid[aff] = np.maximum(eng.change(nj, eng.M[:, aff]), eng.change(ni, eng.M[:, m + aff]))
        if upd % m == 0:
            history.append(sweep_max)
            history_l2.append(eng.l2_change(M_old))
            M_old = eng.M.copy()
            sweep_max = 0.0
            was_frozen = eng.frozen
            maybe_freeze(upd // m)
            if eng.frozen and not was_frozen:  # candidates from now on use the frozen b
                cj, ci, cb = _residual_candidates(eng)
                resid = np.maximum(eng.change(cj, eng.M[:, :m]), eng.change(ci, eng.M[:, m:]))
    return False, max_iter
