"""Belief propagation and its damped, fractional and relaxed (RBP) variants."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

import robustep.mrf.bp as bpmod
from robustep.mrf import (
    PairwiseMRF,
    belief_propagation,
    complete_edges,
    enumerate_exact,
    fit_relaxation,
    grid_edges,
    ising,
    relaxed_objective,
)
from robustep.mrf.bp import _Engine, edge_matchings

SCHEDULES = ["parallel", "sequential", "residual"]


def random_tree(rng, n):
    return np.array([[i, int(rng.integers(0, i))] for i in range(1, n)])


def mixed_mrf(rng, n, E, scale=1.0):
    card = rng.integers(2, 4, size=n)
    return PairwiseMRF.from_factors(
        [rng.normal(0, scale, c) for c in card],
        E,
        [rng.normal(0, scale, (card[i], card[j])) for i, j in E],
    )


def loopy_weak(seed=0):
    rng = np.random.default_rng(seed)
    E = grid_edges(3, 3)
    return ising(rng.normal(0, 0.5, 9), E, rng.normal(0, 0.3, len(E)))


def frustrated(seed=0, n=7, beta=3.0):
    rng = np.random.default_rng(seed)
    E = complete_edges(n)
    return ising(rng.normal(0, 0.1, n), E, -np.abs(rng.normal(0, beta, len(E))))


# ---------------------------------------------------------------------- exactness on trees
@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("seed", [0, 1])
def test_bp_exact_on_trees(schedule, seed):
    rng = np.random.default_rng(seed)
    n = 9
    mrf = mixed_mrf(rng, n, random_tree(rng, n), scale=1.5)
    ex = enumerate_exact(mrf)
    r = belief_propagation(mrf, schedule=schedule)
    assert r.converged
    np.testing.assert_allclose(r.marginals, ex.marginals, atol=1e-10)
    np.testing.assert_allclose(r.edge_beliefs, ex.edge_marginals, atol=1e-10)
    assert r.log_Z == pytest.approx(ex.log_Z, abs=1e-10)


def test_bp_exact_on_ising_chain_with_strong_couplings():
    E = np.array([[i, i + 1] for i in range(7)])
    mrf = ising(np.linspace(-1, 1, 8), E, [-4.0, 3, -2, 5, -6, 2, 1])
    ex = enumerate_exact(mrf)
    r = belief_propagation(mrf)
    np.testing.assert_allclose(r.marginals, ex.marginals, atol=1e-10)
    assert r.log_Z == pytest.approx(ex.log_Z, abs=1e-10)


def test_no_edges_gives_unary_softmax_and_exact_log_z():
    lu = np.array([[0.0, 1.0], [2.0, -1.0]])
    r = belief_propagation(PairwiseMRF(lu, np.zeros((0, 2), int), np.zeros((0, 2, 2))))
    np.testing.assert_allclose(r.marginals, np.exp(lu) / np.exp(lu).sum(1, keepdims=True))
    assert r.log_Z == pytest.approx(np.log(np.exp(lu).sum(1)).sum())
    assert r.converged and r.n_iter == 0


# ---------------------------------------------------------------------- loopy behaviour
def test_schedules_reach_same_fixed_point_and_history_is_consistent():
    mrf = loopy_weak()
    res = [belief_propagation(mrf, schedule=s, tol=1e-12) for s in SCHEDULES]
    for r in res:
        assert r.converged
        assert len(r.history) >= 1 and r.history[-1] < 1e-12
        np.testing.assert_allclose(r.marginals, res[0].marginals, atol=1e-9)
        # at a BP fixed point the edge beliefs are consistent with the node beliefs
        np.testing.assert_allclose(r.edge_beliefs.sum(2), r.marginals[mrf.edges[:, 0]], atol=1e-9)
    assert len(res[0].history) == res[0].n_iter
    ex = enumerate_exact(mrf)
    assert np.abs(res[0].marginals - ex.marginals).max() < 0.02
    assert res[0].log_Z == pytest.approx(ex.log_Z, abs=0.02)


def test_damped_bp_has_the_bp_fixed_point():
    mrf = loopy_weak(1)
    a = belief_propagation(mrf, tol=1e-12)
    b = belief_propagation(mrf, method="damped", damping=0.5, tol=1e-12)
    np.testing.assert_allclose(a.marginals, b.marginals, atol=1e-9)
    assert b.n_iter > a.n_iter


def test_fractional_power_one_is_bp():
    mrf = frustrated(1, beta=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        a = belief_propagation(mrf, max_iter=30)
        b = belief_propagation(mrf, method="fractional", power=1.0, max_iter=30)
    np.testing.assert_array_equal(a.log_messages, b.log_messages)
    np.testing.assert_array_equal(a.history, b.history)


def test_fractional_kernel_matches_power_ep_formula():
    # eq. (F): m_{e->j}^α ∝ Σ_{x_i} ψ^α q_i(x_i) / m_{e->i}(x_i)^α
    mrf = loopy_weak(2)
    alpha = 0.7
    eng = _Engine(mrf, "fractional", 0.0, alpha, 0.1)
    for _ in range(3):
        eng.parallel_sweep()
    to_j, to_i, _ = eng.candidates()
    m = mrf.n_edges
    q = np.exp(eng.log_b.T)
    M = np.exp(eng.M.T)
    psi = np.exp(mrf.log_pairwise)
    for e, (i, j) in enumerate(mrf.edges):
        ref = (psi[e] ** alpha * (q[i] / M[m + e] ** alpha)[:, None]).sum(0) ** (1 / alpha)
        np.testing.assert_allclose(np.exp(to_j[:, e]), ref / ref.sum(), rtol=1e-12)
        ref = (psi[e] ** alpha * (q[j] / M[e] ** alpha)[None, :]).sum(1) ** (1 / alpha)
        np.testing.assert_allclose(np.exp(to_i[:, e]), ref / ref.sum(), rtol=1e-12)


def test_fractional_differs_from_bp_on_loops():
    mrf = loopy_weak(3)
    a = belief_propagation(mrf)
    b = belief_propagation(mrf, method="fractional", power=0.5)
    assert b.converged and np.abs(a.marginals - b.marginals).max() > 1e-4


@pytest.mark.parametrize("method, kw", [("bp", {}), ("damped", {"damping": 0.2}), ("relaxed", {})])
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_non_convergence_is_reported_never_nan(method, kw, schedule):
    mrf = frustrated(0, n=6, beta=4.0)
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        r = belief_propagation(mrf, method=method, schedule=schedule, max_iter=3, tol=1e-14, **kw)
    assert not r.converged and r.n_iter == 3
    for a in (r.marginals, r.edge_beliefs, r.history, r.log_messages):
        assert np.all(np.isfinite(a))
    assert np.isfinite(r.log_Z)
    np.testing.assert_allclose(r.marginals.sum(1), 1.0)


def test_huge_potentials_stay_finite():
    mrf = ising(np.full(6, 300.0), complete_edges(6), -400.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for meth, kw in [("bp", {}), ("fractional", {"power": 0.5}), ("relaxed", {})]:
            r = belief_propagation(mrf, method=meth, max_iter=20, **kw)
            assert np.all(np.isfinite(r.marginals)) and np.isfinite(r.log_Z)


@pytest.mark.parametrize(
    "method, kw", [("bp", {}), ("fractional", {"power": 0.8}), ("relaxed", {})]
)
def test_mixed_cardinalities_loopy(method, kw):
    rng = np.random.default_rng(5)
    mrf = mixed_mrf(rng, 6, complete_edges(6), scale=0.3)
    r = belief_propagation(mrf, method=method, **kw)
    assert r.converged
    np.testing.assert_allclose(r.marginals.sum(1), 1.0)
    assert np.all(r.marginals[~mrf.valid_states] == 0)
    ex = enumerate_exact(mrf)
    assert np.abs(r.marginals - ex.marginals).max() < 0.1


def test_edge_matchings_partition_edges_into_matchings():
    E = complete_edges(7)
    batches = edge_matchings(E, 7)
    allb = np.sort(np.concatenate(batches))
    np.testing.assert_array_equal(allb, np.arange(len(E)))
    for b in batches:
        nodes = E[b].ravel()
        assert len(np.unique(nodes)) == len(nodes)


# ---------------------------------------------------------------------- relaxed BP
def _rand_edge_inputs(rng, m, K=2, scale=2.0):
    lp = rng.normal(0, scale, (m, K, K))
    u_i, u_j = rng.normal(0, 1, (m, K)), rng.normal(0, 1, (m, K))
    mi = rng.normal(0, 2, (m, K))
    mj = rng.normal(0, 2, (m, K))
    mi -= np.log(np.exp(mi).sum(1, keepdims=True))
    mj -= np.log(np.exp(mj).sum(1, keepdims=True))
    return lp, u_i, u_j, mi, mj


def test_relaxed_objective_at_zero_is_mutual_information():
    rng = np.random.default_rng(0)
    lp, u_i, u_j, mi, mj = _rand_edge_inputs(rng, 5, K=3)
    Q = relaxed_objective(lp, u_i, u_j, mi, mj, np.zeros((5, 1)), 0.3)[:, 0]
    for e in range(5):
        P = np.exp(lp[e] + u_i[e][:, None] + u_j[e][None, :])
        P /= P.sum()
        I = np.sum(P * np.log(P / np.outer(P.sum(1), P.sum(0))))
        assert Q[e] == pytest.approx(I, abs=1e-12)
    # the penalty is c * b
    Q1 = relaxed_objective(lp, u_i, u_j, mi, mj, np.full((5, 1), 0.5), 0.3)[:, 0]
    Q1_nopen = relaxed_objective(lp, u_i, u_j, mi, mj, np.full((5, 1), 0.5), 0.0)[:, 0]
    np.testing.assert_allclose(Q1 - Q1_nopen, 0.15, atol=1e-12)


@pytest.mark.parametrize("c", [0.0, 0.01, 0.1, 1.0])
def test_chosen_b_minimises_penalised_relaxed_kl_against_fine_grid(c):
    rng = np.random.default_rng(int(c * 100))
    m = 40
    lp, u_i, u_j, mi, mj = _rand_edge_inputs(rng, m, K=2, scale=3.0)
    b = fit_relaxation(lp, u_i, u_j, mi, mj, c)
    assert np.all((b >= 0) & (b <= 1))
    grid = np.linspace(0, 1, 10001)
    Qg = np.concatenate(
        [
            relaxed_objective(lp, u_i, u_j, mi, mj, np.broadcast_to(g, (m, len(g))), c)
            for g in np.array_split(grid, 5)
        ],
        axis=1,
    )
    Qb = relaxed_objective(lp, u_i, u_j, mi, mj, b[:, None], c)[:, 0]
    assert np.all(Qb <= Qg.min(1) + 1e-9)
    if c <= 0.1:
        assert np.any(b > 0)  # the test exercises the relaxed branch


def test_large_penalty_gives_b_zero_exactly():
    rng = np.random.default_rng(1)
    lp, u_i, u_j, mi, mj = _rand_edge_inputs(rng, 40, scale=3.0)
    assert np.all(fit_relaxation(lp, u_i, u_j, mi, mj, 1e6) == 0.0)


def test_relaxed_messages_match_rbp_formula():
    # eq. (RBP): m_{e->j} ∝ Σ_{x_i} ψ(x_i, x_j) q_{i\e}(x_i) m_{e->i}(x_i)^b
    mrf = frustrated(2, n=5, beta=2.0)
    eng = _Engine(mrf, "relaxed", 0.0, 1.0, 0.01)
    for _ in range(4):
        eng.parallel_sweep()
    to_j, to_i, b = eng.candidates()
    assert np.any(b > 0)
    m = mrf.n_edges
    q = np.exp(eng.log_b.T)
    M = np.exp(eng.M.T)
    psi = np.exp(mrf.log_pairwise)
    for e, (i, j) in enumerate(mrf.edges):
        cav_i = q[i] / M[m + e] * M[m + e] ** b[e]
        ref = (psi[e] * cav_i[:, None]).sum(0)
        np.testing.assert_allclose(np.exp(to_j[:, e]), ref / ref.sum(), rtol=1e-10)
        cav_j = q[j] / M[e] * M[e] ** b[e]
        ref = (psi[e] * cav_j[None, :]).sum(1)
        np.testing.assert_allclose(np.exp(to_i[:, e]), ref / ref.sum(), rtol=1e-10)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_rbp_with_b_forced_to_zero_is_bp_exactly(schedule, monkeypatch):
    mrf = frustrated(3, n=6, beta=2.0)
    monkeypatch.setattr(bpmod, "fit_relaxation", lambda lp, *a, **k: np.zeros(lp.shape[0]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        a = belief_propagation(mrf, schedule=schedule, max_iter=25)
        b = belief_propagation(mrf, method="relaxed", schedule=schedule, max_iter=25)
    np.testing.assert_array_equal(a.log_messages, b.log_messages)
    np.testing.assert_array_equal(b.relaxation, 0.0)


@pytest.mark.parametrize("schedule", ["parallel", "sequential"])
def test_rbp_with_infinite_penalty_is_bp(schedule):
    mrf = frustrated(4, n=6, beta=2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        a = belief_propagation(mrf, schedule=schedule, max_iter=40)
        b = belief_propagation(
            mrf, method="relaxed", relaxation=1e6, schedule=schedule, max_iter=40
        )
        c = belief_propagation(
            mrf, method="relaxed", relaxation=1e-3, schedule=schedule, max_iter=40
        )
    np.testing.assert_array_equal(b.relaxation, 0.0)
    np.testing.assert_array_equal(a.log_messages, b.log_messages)
    assert np.any(c.relaxation > 0) or not np.array_equal(a.log_messages, c.log_messages)


def test_rbp_on_weak_couplings_keeps_b_zero():
    r = belief_propagation(loopy_weak(4), method="relaxed", relaxation=0.1)
    assert r.converged and np.all(r.relaxation == 0.0)
    assert r.relaxation.shape == (12,)


def test_result_fields_and_relaxation_only_for_rbp():
    mrf = loopy_weak()
    r = belief_propagation(mrf)
    n, m = mrf.n_variables, mrf.n_edges
    assert r.marginals.shape == (n, 2) and r.edge_beliefs.shape == (m, 2, 2)
    assert r.log_messages.shape == (2 * m, 2) and r.relaxation is None
    assert r.method == "bp" and r.schedule == "parallel"
    np.testing.assert_allclose(np.exp(r.log_messages).sum(1), 1.0)


# ---------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    "kw, exc, msg",
    [
        (dict(method="mean-field"), ValueError, "method must be one of"),
        (dict(schedule="random"), ValueError, "schedule must be one of"),
        (dict(method="damped", damping=1.0), ValueError, "weight kept on the old"),
        (dict(method="damped", damping=-0.1), ValueError, "damping must lie in"),
        (dict(method="damped"), ValueError, "damping=0.2"),
        (dict(damping=0.3), ValueError, "use method='damped'"),
        (dict(method="fractional", power=0.0), ValueError, "power must lie in"),
        (dict(method="fractional", power=1.5), ValueError, "power must lie in"),
        (dict(power=0.5), ValueError, "only used by method='fractional'"),
        (dict(method="relaxed", relaxation=-1.0), ValueError, "relaxation"),
        (dict(method="relaxed", relaxation=np.inf), ValueError, "relaxation"),
        (dict(max_iter=0), ValueError, "max_iter"),
        (dict(max_iter=2.5), ValueError, "max_iter"),
        (dict(tol=0.0), ValueError, "tol"),
        (dict(freeze_after=5), ValueError, "only used by method='relaxed'"),
        (dict(method="relaxed", freeze_after=-1), ValueError, "non-negative integer"),
        (dict(method="relaxed", freeze_after=2.5), ValueError, "non-negative integer"),
    ],
)
def test_validation_messages(kw, exc, msg):
    with pytest.raises(exc, match=msg):
        belief_propagation(loopy_weak(), **kw)


def test_rejects_non_model():
    with pytest.raises(TypeError, match="PairwiseMRF"):
        belief_propagation(np.zeros((3, 2)))


def test_keyword_only_signature():
    with pytest.raises(TypeError):
        belief_propagation(loopy_weak(), "bp")  # noqa


def test_sequential_matchings_equal_one_edge_at_a_time():
    mrf = frustrated(5, n=6, beta=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        r = belief_propagation(
            mrf, method="relaxed", relaxation=0.01, schedule="sequential", max_iter=2
        )
    eng = _Engine(mrf, "relaxed", 0.0, 1.0, 0.01)
    order = np.concatenate(edge_matchings(mrf.edges, mrf.n_variables))
    for _ in range(2):
        for e in order:
            sel = np.array([e])
            eng.apply(sel, *eng.candidates(sel))
    np.testing.assert_allclose(eng.M.T, r.log_messages, atol=1e-12)


def test_relaxed_fit_in_chunks_equals_one_batch():
    rng = np.random.default_rng(0)
    E = grid_edges(35, 35)  # 2380 edges: more than one chunk
    mrf = ising(rng.normal(0, 0.1, 35 * 35), E, -np.abs(rng.normal(0, 2.0, len(E))))
    eng = _Engine(mrf, "relaxed", 0.0, 1.0, 0.01)
    eng.parallel_sweep()
    _, _, b = eng.candidates()
    m = mrf.n_edges
    u_i = eng.log_b[:, eng.Ei] - eng.M[:, m:]
    u_j = eng.log_b[:, eng.Ej] - eng.M[:, :m]
    ref = fit_relaxation(mrf.log_pairwise, u_i.T, u_j.T, eng.M[:, m:].T, eng.M[:, :m].T, 0.01)
    np.testing.assert_array_equal(b, ref)


# ---------------------------------------------------------------------- the paper's residual R
def suppressive_grid(k, side=3):
    """Binary Ising on a side × side grid with strong suppressive couplings (rbp-ising's family)."""
    rng = np.random.default_rng([0, k])
    E = grid_edges(side, side)
    return ising(rng.normal(0, 0.1, side * side), E, -np.abs(rng.normal(0, 2.0, len(E))))


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_history_l2_is_the_two_norm_of_the_message_change(schedule):
    mrf = loopy_weak(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        runs = [
            belief_propagation(mrf, schedule=schedule, max_iter=t, tol=1e-30) for t in (1, 2, 3, 4)
        ]
    # R_t from a 4-sweep run equals the change between the messages after t−1 and t sweeps
    full = runs[-1]
    assert full.history_l2.shape == (4,)
    for t in (1, 2, 3):
        d = np.exp(runs[t].log_messages) - np.exp(runs[t - 1].log_messages)
        np.testing.assert_allclose(full.history_l2[t], np.sqrt(np.sum(d * d)), rtol=1e-10)
    assert full.first_below(1.0) == 1 and full.first_below(0.0) is None


# ---------------------------------------------------------------------- freezing b (rbp.md)
def _relaxed_fixed_point_gap(mrf, res):
    """max |exp M_new − exp M| of one parallel eq. (RBP) update at the result's b (frozen)."""
    eng = _Engine(mrf, "relaxed", 0.0, 1.0, 0.1)
    eng.M = np.ascontiguousarray(res.log_messages.T)
    eng.b = res.relaxation.copy()
    eng.frozen = True
    eng.log_b = eng._beliefs()
    to_j, to_i, b = eng.candidates()
    np.testing.assert_array_equal(b, res.relaxation)
    new = np.concatenate([to_j, to_i], axis=1)
    return float(np.abs(np.exp(new) - np.exp(eng.M)).max())


def test_frozen_relaxation_stops_the_limit_cycle():
    # this instance's b_ij flip at the 1e−6 level for ever when refitted (a limit cycle of the
    # argmin over b); frozen after 50 sweeps the messages converge
    mrf = suppressive_grid(0)
    kw = dict(method="relaxed", relaxation=0.1, schedule="sequential", max_iter=200, tol=1e-8)
    with pytest.warns(ConvergenceWarning):
        cyc = belief_propagation(mrf, **kw)
    assert not cyc.converged and cyc.history[-1] > 1e-7 and np.any(cyc.relaxation > 0)
    frz = belief_propagation(mrf, freeze_after=50, **kw)
    assert frz.converged and 50 < frz.n_iter < 200 and frz.frozen_at == 50
    assert cyc.frozen_at is None
    # the result is a fixed point of eq. (RBP) at the frozen b, with b ≠ 0 on some edges ...
    assert np.any(frz.relaxation > 0)
    assert _relaxed_fixed_point_gap(mrf, frz) < 1e-7
    # ... next to where the cycling run wanders (its oscillation is at the 1e−6 level)
    assert np.abs(frz.marginals - cyc.marginals).max() < 1e-4


@pytest.mark.parametrize("schedule", ["sequential", "residual"])
def test_frozen_relaxation_keeps_the_fixed_point_where_rbp_converges(schedule):
    # an instance where refitted RBP converges with b > 0 on several edges: freezing after a
    # burn-in lands on the same fixed point (the parallel schedule oscillates on this
    # bipartite antiferromagnet, for BP as well)
    mrf = suppressive_grid(1)
    kw = dict(method="relaxed", relaxation=0.1, schedule=schedule, max_iter=400, tol=1e-10)
    free = belief_propagation(mrf, **kw)
    assert free.converged and np.mean(free.relaxation > 0) > 0.2
    frz = belief_propagation(mrf, freeze_after=30, **kw)
    assert frz.converged
    # b frozen at sweep 30 equals the refitted b to a few line-search cells (8e−6 each), and
    # the fixed point moves with b by about that much
    np.testing.assert_allclose(frz.relaxation, free.relaxation, atol=1e-4)
    np.testing.assert_allclose(frz.marginals, free.marginals, atol=1e-5)
    assert (
        np.abs(frz.marginals - free.marginals).max()
        < 0.01 * np.abs(free.marginals - belief_propagation(mrf, schedule=schedule).marginals).max()
    )
    assert _relaxed_fixed_point_gap(mrf, frz) < 1e-8


def test_freeze_at_zero_sweeps_is_bp():
    mrf = suppressive_grid(1)
    bp = belief_propagation(mrf, schedule="sequential")
    frz = belief_propagation(mrf, method="relaxed", schedule="sequential", freeze_after=0)
    assert np.all(frz.relaxation == 0.0) and frz.frozen_at == 0
    np.testing.assert_array_equal(frz.log_messages, bp.log_messages)
