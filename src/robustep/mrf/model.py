"""Pairwise discrete Markov random fields and graph constructors.

The model is

    p(x) = (1/Z) prod_i psi_i(x_i) prod_{(i,j) in E} psi_ij(x_i, x_j)

(ICML paper §4.2, the MRF written before the RBP updates), stored in the log domain:
``log_unary[i, s] = log psi_i(s)`` and ``log_pairwise[e, s, t] = log psi_ij(s, t)`` for the
edge ``e = (i, j) = edges[e]`` (first axis belongs to ``edges[e, 0]``).

Variables may have different cardinalities.  Arrays are padded to the largest cardinality
``K``; padded states carry the log-potential :data:`PAD` (a large negative finite number,
so that ``exp`` gives exactly 0 and no ``-inf - -inf`` can produce a NaN).
"""

from __future__ import annotations

import dataclasses

import numpy as np

#: log-potential of padded (non-existent) states; finite so that arithmetic never gives NaN.
PAD = -1e30


@dataclasses.dataclass(frozen=True, eq=False)
class PairwiseMRF:
    """A pairwise MRF over discrete variables, potentials in the log domain.

    Parameters
    ----------
    log_unary : array (n, K)
        ``log psi_i(s)``; entries at states ``s >= cardinalities[i]`` are ignored.
    edges : int array (m, 2)
        Undirected edges ``(i, j)``, ``i != j``, each pair at most once.
    log_pairwise : array (m, K, K)
        ``log psi_ij(s, t)`` with ``s`` the state of ``edges[e, 0]`` and ``t`` of ``edges[e, 1]``.
    cardinalities : int array (n,), optional
        Number of states of each variable (default: all ``K``).

    Use :meth:`from_factors` to build a model from per-variable / per-edge arrays of
    different sizes.
    """

    log_unary: np.ndarray
    edges: np.ndarray
    log_pairwise: np.ndarray
    cardinalities: np.ndarray | None = None

    def __post_init__(self):
        lu = np.array(self.log_unary, dtype=float)
        if lu.ndim != 2 or lu.shape[1] < 1:
            raise ValueError(
                f"log_unary must be a 2-D array (n_variables, n_states); got shape {lu.shape}"
            )
        n, K = lu.shape
        E = np.asarray(self.edges)
        if E.size == 0:
            E = np.zeros((0, 2), dtype=np.intp)
        if E.ndim != 2 or E.shape[1] != 2:
            raise ValueError(f"edges must be an (m, 2) array of variable indices; got {E.shape}")
        if not np.issubdtype(E.dtype, np.integer):
            if not np.all(np.equal(np.mod(E, 1), 0)):
                raise ValueError("edges must contain integer variable indices")
        E = E.astype(np.intp)
        m = E.shape[0]
        if m and (E.min() < 0 or E.max() >= n):
            raise ValueError(f"edges refer to variables outside 0..{n - 1}")
        if np.any(E[:, 0] == E[:, 1]):
            k = int(np.flatnonzero(E[:, 0] == E[:, 1])[0])
            raise ValueError(
                f"edge {k} is a self-loop ({E[k, 0]}, {E[k, 1]}); fold it into log_unary"
            )
        key = np.sort(
            np.minimum(E[:, 0], E[:, 1]).astype(np.int64) * n + np.maximum(E[:, 0], E[:, 1])
        )
        dup = np.flatnonzero(key[1:] == key[:-1])
        if dup.size:
            a, b = divmod(int(key[dup[0]]), n)
            raise ValueError(
                f"edge ({a}, {b}) appears more than once; merge duplicates by adding their "
                "log-potentials"
            )
        lp = np.array(self.log_pairwise, dtype=float)
        if lp.shape != (m, K, K):
            raise ValueError(
                f"log_pairwise must have shape (m, K, K) = ({m}, {K}, {K}); got {lp.shape}"
            )
        if self.cardinalities is None:
            card = np.full(n, K, dtype=np.intp)
        else:
            card = np.asarray(self.cardinalities).astype(np.intp)
            if card.shape != (n,):
                raise ValueError(f"cardinalities must have shape ({n},); got {card.shape}")
            if card.min(initial=1) < 1 or card.max(initial=1) > K:
                raise ValueError(f"cardinalities must lie in 1..{K} (the width of log_unary)")
        valid = np.arange(K)[None, :] < card[:, None]  # (n, K)
        if not np.all(np.isfinite(lu[valid])):
            raise ValueError(
                "log_unary contains non-finite values; use a large negative finite number "
                "(e.g. -700) for impossible states"
            )
        vpair = valid[E[:, 0]][:, :, None] & valid[E[:, 1]][:, None, :]  # (m, K, K)
        if not np.all(np.isfinite(lp[vpair])):
            raise ValueError(
                "log_pairwise contains non-finite values; use a large negative finite number "
                "(e.g. -700) for impossible state pairs"
            )
        lu[~valid] = PAD
        lp[~vpair] = PAD
        for name, val in (("log_unary", lu), ("edges", E), ("log_pairwise", lp)):
            val.setflags(write=False)
            object.__setattr__(self, name, val)
        card.setflags(write=False)
        object.__setattr__(self, "cardinalities", card)

    # ------------------------------------------------------------------ properties
    @property
    def n_variables(self) -> int:
        return self.log_unary.shape[0]

    @property
    def n_edges(self) -> int:
        return self.edges.shape[0]

    @property
    def max_states(self) -> int:
        """K, the padded width of the potential arrays."""
        return self.log_unary.shape[1]

    @property
    def valid_states(self) -> np.ndarray:
        """Boolean (n, K): which padded states exist."""
        return np.arange(self.max_states)[None, :] < self.cardinalities[:, None]

    def degrees(self) -> np.ndarray:
        """Number of edges at each variable, shape (n,)."""
        return np.bincount(self.edges.ravel(), minlength=self.n_variables)

    def log_potential(self, x: np.ndarray) -> np.ndarray:
        """Unnormalised log p for configurations ``x`` of shape (..., n) (state indices)."""
        x = np.asarray(x, dtype=np.intp)
        out = self.log_unary[np.arange(self.n_variables), x].sum(-1)
        if self.n_edges:
            i, j = self.edges[:, 0], self.edges[:, 1]
            out = out + self.log_pairwise[np.arange(self.n_edges), x[..., i], x[..., j]].sum(-1)
        return out

    @classmethod
    def from_factors(cls, log_unaries, edges, log_pairwises) -> PairwiseMRF:
        """Build from a list of 1-D unary arrays (one per variable, any length) and a list of
        2-D pairwise arrays of shape ``(card[i], card[j])`` for ``edges[e] = (i, j)``."""
        card = np.array([len(np.atleast_1d(u)) for u in log_unaries], dtype=np.intp)
        n, K = len(card), int(card.max(initial=1))
        lu = np.full((n, K), PAD)
        for i, u in enumerate(log_unaries):
            lu[i, : card[i]] = u
        E = np.asarray(edges, dtype=np.intp).reshape(-1, 2)
        if len(log_pairwises) != len(E):
            raise ValueError(f"got {len(log_pairwises)} pairwise tables for {len(E)} edges")
        lp = np.full((len(E), K, K), PAD)
        for e, (i, j) in enumerate(E):
            t = np.asarray(log_pairwises[e], dtype=float)
            if t.shape != (card[i], card[j]):
                raise ValueError(
                    f"pairwise table {e} for edge ({i}, {j}) has shape {t.shape}; expected "
                    f"({card[i]}, {card[j]})"
                )
            lp[e, : card[i], : card[j]] = t
        return cls(lu, E, lp, card)


# ---------------------------------------------------------------------- Ising models
def ising(fields, edges, couplings) -> PairwiseMRF:
    """Binary Ising model p(x) ∝ exp(Σ_i θ_i x_i + Σ_(i,j) J_ij x_i x_j), x_i ∈ {−1, +1}.

    States are ordered (−1, +1): state index 0 is x = −1, index 1 is x = +1.

    Parameters
    ----------
    fields : array (n,)  θ_i.
    edges : int array (m, 2).
    couplings : array (m,) or scalar  J_ij (negative = suppressive / antiferromagnetic).
    """
    theta = np.asarray(fields, dtype=float)
    if theta.ndim != 1:
        raise ValueError(f"fields must be a 1-D array of length n; got shape {theta.shape}")
    E = np.asarray(edges, dtype=np.intp).reshape(-1, 2)
    J = np.asarray(couplings, dtype=float)
    if J.ndim > 1 or (J.ndim == 1 and J.shape[0] != E.shape[0]):
        raise ValueError(
            f"couplings must be a scalar or an array of length m = {E.shape[0]} (one per edge, "
            f"{E.shape[0]} edges); got shape {J.shape}"
        )
    J = np.broadcast_to(J, (E.shape[0],)).copy()
    spins = np.array([-1.0, 1.0])
    log_unary = theta[:, None] * spins[None, :]
    log_pairwise = J[:, None, None] * np.outer(spins, spins)[None, :, :]
    return PairwiseMRF(log_unary, E, log_pairwise)


# ---------------------------------------------------------------------- graphs
def _check_count(value, name):
    """Raise TypeError unless ``value`` is an integer (a float like 2.5 or a string is not)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be given as integers; got {value!r}")


def grid_edges(rows: int, cols: int, periodic: bool = False) -> np.ndarray:
    """Edges of a rows × cols grid (node index r*cols + c), shape (m, 2); optionally a torus."""
    _check_count(rows, "rows")
    _check_count(cols, "cols")
    if rows < 1 or cols < 1:
        raise ValueError(f"grid needs rows >= 1 and cols >= 1; got rows={rows}, cols={cols}")
    idx = np.arange(rows * cols).reshape(rows, cols)
    parts = [
        np.stack([idx[:, :-1].ravel(), idx[:, 1:].ravel()], 1),
        np.stack([idx[:-1, :].ravel(), idx[1:, :].ravel()], 1),
    ]
    if periodic:
        if cols > 2:
            parts.append(np.stack([idx[:, -1], idx[:, 0]], 1))
        if rows > 2:
            parts.append(np.stack([idx[-1, :], idx[0, :]], 1))
    return np.concatenate(parts).astype(np.intp)


def complete_edges(n: int) -> np.ndarray:
    """All n(n−1)/2 edges (i, j), i < j, of the complete graph, shape (m, 2)."""
    _check_count(n, "n")
    if n < 0:
        raise ValueError(f"n must be the number of nodes, >= 0; got {n}")
    i, j = np.triu_indices(n, k=1)
    return np.stack([i, j], 1).astype(np.intp)


def random_regular_edges(n: int, degree: int, rng=None, max_tries: int = 1000) -> np.ndarray:
    """A uniformly random simple ``degree``-regular graph by the pairing model with rejection.

    Needs ``n * degree`` even and ``degree < n``.  Shape (n*degree/2, 2).
    """
    _check_count(n, "n")
    _check_count(degree, "degree")
    if degree < 0:
        raise ValueError(f"degree must be >= 0; got {degree}")
    if degree >= n or (n * degree) % 2:
        raise ValueError(
            f"no simple {degree}-regular graph on {n} nodes (need degree < n, n*degree even)"
        )
    rng = np.random.default_rng(rng)
    stubs = np.repeat(np.arange(n), degree)
    for _ in range(max_tries):
        pairs = rng.permutation(stubs).reshape(-1, 2)
        if np.any(pairs[:, 0] == pairs[:, 1]):
            continue
        key = np.sort(pairs, axis=1)
        if len(np.unique(key, axis=0)) == len(key):
            return key.astype(np.intp)
    raise RuntimeError(f"no simple graph found in {max_tries} tries; use a smaller degree")
