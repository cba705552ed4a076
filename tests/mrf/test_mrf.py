"""Model, constructors, UAI input/output and the exact (junction tree / enumeration) reference."""

from __future__ import annotations

import numpy as np
import pytest

from robustep.mrf import (
    PAD,
    PairwiseMRF,
    complete_edges,
    enumerate_exact,
    exact_marginals,
    grid_edges,
    ising,
    junction_tree,
    random_regular_edges,
    read_uai,
    uai_log_scale,
    write_uai,
)
from robustep.mrf.exact import min_fill_order


def random_mixed_mrf(rng, n, edges, max_card=3, scale=1.0):
    card = rng.integers(2, max_card + 1, size=n)
    un = [rng.normal(0, scale, c) for c in card]
    pw = [rng.normal(0, scale, (card[i], card[j])) for i, j in edges]
    return PairwiseMRF.from_factors(un, edges, pw)


def random_graph(rng, n, p):
    E = complete_edges(n)
    keep = rng.random(len(E)) < p
    return E[keep]


# ---------------------------------------------------------------------- model
def test_ising_convention_states_minus_plus():
    mrf = ising([0.3, -0.2], [[0, 1]], [0.7])
    np.testing.assert_allclose(mrf.log_unary, [[-0.3, 0.3], [0.2, -0.2]])
    np.testing.assert_allclose(mrf.log_pairwise[0], [[0.7, -0.7], [-0.7, 0.7]])
    # log p(x) = θ·x + J x0 x1 for x = (+1, −1) -> state indices (1, 0)
    assert mrf.log_potential(np.array([1, 0])) == pytest.approx(0.3 - 0.2 * -1 - 0.7)


def test_ising_scalar_coupling_broadcasts():
    E = grid_edges(2, 2)
    mrf = ising(np.zeros(4), E, -0.5)
    assert mrf.log_pairwise.shape == (4, 2, 2)
    assert np.all(mrf.log_pairwise[:, 0, 0] == -0.5)


def test_graph_constructors():
    E = grid_edges(3, 4)
    assert E.shape == (3 * 3 + 2 * 4, 2)
    assert grid_edges(3, 4, periodic=True).shape == (24, 2)
    assert complete_edges(5).shape == (10, 2)
    R = random_regular_edges(10, 3, rng=0)
    assert R.shape == (15, 2)
    assert np.all(np.bincount(R.ravel(), minlength=10) == 3)
    assert len({tuple(e) for e in R}) == 15 and np.all(R[:, 0] != R[:, 1])
    with pytest.raises(ValueError, match="no simple 3-regular graph on 5 nodes"):
        random_regular_edges(5, 3)
    with pytest.raises(ValueError, match="rows >= 1"):
        grid_edges(0, 3)


def test_model_is_immutable_and_padded():
    rng = np.random.default_rng(0)
    mrf = random_mixed_mrf(rng, 4, complete_edges(4))
    with pytest.raises(ValueError):
        mrf.log_unary[0, 0] = 1.0
    K = mrf.max_states
    for i in range(4):
        assert np.all(mrf.log_unary[i, mrf.cardinalities[i] :] == PAD)
    assert mrf.valid_states.sum() == mrf.cardinalities.sum()
    assert K == mrf.cardinalities.max()
    assert np.all(mrf.degrees() == 3)


@pytest.mark.parametrize(
    "kwargs, msg",
    [
        (dict(log_unary=np.zeros(3), edges=[[0, 1]], log_pairwise=np.zeros((1, 2, 2))), "2-D"),
        (
            dict(log_unary=np.zeros((3, 2)), edges=[0, 1], log_pairwise=np.zeros((1, 2, 2))),
            "(m, 2)",
        ),
        (
            dict(log_unary=np.zeros((3, 2)), edges=[[0, 3]], log_pairwise=np.zeros((1, 2, 2))),
            "outside",
        ),
        (
            dict(log_unary=np.zeros((3, 2)), edges=[[1, 1]], log_pairwise=np.zeros((1, 2, 2))),
            "self-loop",
        ),
        (
            dict(
                log_unary=np.zeros((3, 2)), edges=[[0, 1], [1, 0]], log_pairwise=np.zeros((2, 2, 2))
            ),
            "more than once",
        ),
        (
            dict(log_unary=np.zeros((3, 2)), edges=[[0, 1]], log_pairwise=np.zeros((1, 3, 2))),
            "shape",
        ),
        (
            dict(
                log_unary=np.array([[0, -np.inf], [0, 0]]),
                edges=[[0, 1]],
                log_pairwise=np.zeros((1, 2, 2)),
            ),
            "non-finite",
        ),
        (
            dict(
                log_unary=np.zeros((2, 2)), edges=[[0, 1]], log_pairwise=np.full((1, 2, 2), np.nan)
            ),
            "non-finite",
        ),
        (
            dict(
                log_unary=np.zeros((2, 2)),
                edges=[[0, 1]],
                log_pairwise=np.zeros((1, 2, 2)),
                cardinalities=[3, 2],
            ),
            "cardinalities",
        ),
        (
            dict(log_unary=np.zeros((2, 2)), edges=[[0.5, 1]], log_pairwise=np.zeros((1, 2, 2))),
            "integer",
        ),
    ],
)
def test_model_validation_messages(kwargs, msg):
    with pytest.raises(ValueError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        PairwiseMRF(**kwargs)


def test_padded_entries_may_be_anything():
    # -inf in a padded state is fine: it is overwritten by PAD
    lu = np.array([[0.0, 0.0, -np.inf], [0.1, 0.2, 0.3]])
    mrf = PairwiseMRF(lu, [[0, 1]], np.zeros((1, 3, 3)), cardinalities=[2, 3])
    assert mrf.log_unary[0, 2] == PAD


def test_from_factors_checks_table_shapes():
    with pytest.raises(ValueError, match="expected \\(2, 3\\)"):
        PairwiseMRF.from_factors([np.zeros(2), np.zeros(3)], [[0, 1]], [np.zeros((2, 2))])
    with pytest.raises(ValueError, match="2 pairwise tables for 1 edges"):
        PairwiseMRF.from_factors([np.zeros(2), np.zeros(3)], [[0, 1]], [np.zeros((2, 3))] * 2)


# ---------------------------------------------------------------------- exact reference
@pytest.mark.parametrize("seed", range(8))
def test_junction_tree_equals_enumeration_random_graphs(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 9))
    E = random_graph(rng, n, 0.5)
    mrf = random_mixed_mrf(rng, n, E, max_card=3, scale=1.5)
    jt, en = junction_tree(mrf), enumerate_exact(mrf)
    np.testing.assert_allclose(jt.marginals, en.marginals, atol=1e-12)
    np.testing.assert_allclose(jt.edge_marginals, en.edge_marginals, atol=1e-12)
    assert jt.log_Z == pytest.approx(en.log_Z, abs=1e-10)


def test_junction_tree_on_grid_and_disconnected():
    rng = np.random.default_rng(3)
    E = np.concatenate([grid_edges(3, 4), [[12, 13]]])  # plus a separate pair, node 14 isolated
    mrf = ising(rng.normal(size=15), E, rng.normal(0, 2, len(E)))
    jt, en = exact_marginals(mrf), exact_marginals(mrf, method="enumerate")
    np.testing.assert_allclose(jt.marginals, en.marginals, atol=1e-12)
    assert jt.log_Z == pytest.approx(en.log_Z, abs=1e-10)
    assert jt.max_clique_size <= 5  # min-fill finds width <= 4 on a 3 x 4 grid


def test_junction_tree_strong_couplings_stays_finite():
    E = complete_edges(8)
    mrf = ising(np.zeros(8), E, -50.0)
    r = junction_tree(mrf)
    assert np.all(np.isfinite(r.marginals)) and np.isfinite(r.log_Z)
    np.testing.assert_allclose(r.marginals, 0.5, atol=1e-12)  # symmetric model


def test_min_fill_order_on_tree_has_no_fill():
    E = np.array([[0, 1], [1, 2], [1, 3], [3, 4]])
    order, cliques = min_fill_order(5, E)
    assert sorted(order) == list(range(5))
    assert max(len(c) for c in cliques) == 2


def test_exact_marginals_errors():
    mrf = ising(np.zeros(3), [[0, 1]], 1.0)
    with pytest.raises(ValueError, match="'junction_tree' or 'enumerate'"):
        exact_marginals(mrf, method="bogus")
    with pytest.raises(TypeError, match="PairwiseMRF"):
        exact_marginals("not a model")
    big = ising(np.zeros(30), complete_edges(30)[:5], 1.0)
    with pytest.raises(ValueError, match="use method='junction_tree'"):
        enumerate_exact(big)


# ---------------------------------------------------------------------- UAI format
def test_uai_round_trip(tmp_path):
    rng = np.random.default_rng(1)
    mrf = random_mixed_mrf(rng, 5, complete_edges(5)[[0, 2, 5, 7, 9]], max_card=3)
    path = tmp_path / "m.uai"
    write_uai(mrf, path)
    back = read_uai(path)
    a, b = enumerate_exact(mrf), enumerate_exact(back)
    np.testing.assert_allclose(back.cardinalities, mrf.cardinalities)
    np.testing.assert_array_equal(back.edges, mrf.edges)
    np.testing.assert_allclose(a.marginals, b.marginals, atol=1e-14)
    assert a.log_Z == pytest.approx(b.log_Z + uai_log_scale(mrf), abs=1e-12)


def test_read_uai_merges_factors_and_handles_zeros(tmp_path):
    text = """MARKOV
3
2 2 2
5
1 0
2 0 1
2 1 0
2 1 2
1 0

2
1 3

4
1 2 3 4

4
1 1 1 5

4
0 1 1 1

2
2 1
"""
    p = tmp_path / "t.uai"
    p.write_text(text)
    mrf = read_uai(p)
    assert mrf.n_variables == 3 and mrf.n_edges == 2
    np.testing.assert_allclose(mrf.log_unary[0], np.log([1 * 2, 3 * 1]))
    # factor (1, 0) [[1,1],[1,5]] transposed and multiplied into (0, 1) [[1,2],[3,4]]
    np.testing.assert_allclose(mrf.log_pairwise[0], np.log([[1, 2], [3, 20]]))
    assert mrf.log_pairwise[1, 0, 0] == -690.0


@pytest.mark.parametrize(
    "text, msg",
    [
        ("BAYES\n1\n2\n0\n", "only MARKOV"),
        ("MARKOV\n3\n2 2 2\n1\n3 0 1 2\n", "only unary and pairwise"),
        ("MARKOV\n1\n2\n1\n1 0\n3\n1 2 3\n", "3 entries; expected 2"),
        ("MARKOV\n1\n2\n1\n1 0\n2\n1\n", "truncated"),
        ("MARKOV\n1\n2\n1\n1 0\n2\n1 -2\n", "negative"),
    ],
)
def test_read_uai_errors(tmp_path, text, msg):
    p = tmp_path / "bad.uai"
    p.write_text(text)
    with pytest.raises(ValueError, match=msg):
        read_uai(p)
