"""t-EP fixed points by Newton's method, and the evidence of fits that do not converge.

Cells of benchmarks/stress.py (docs/reliability.md, "t-exponential EP: valid fixed points").
"""

from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from _benchmarks import load_benchmark
from robustep import BayesPointMachine
from robustep.tep.ep import linear_tep, rank_one_sites, rank_one_state
from robustep.tep.fixed_point import (
    LinearRankOnePosterior,
    site_map_jacobian,
    solve_fixed_point,
)
from robustep.tep.process import _site_update


def _stress_cells():
    return load_benchmark("stress", "_stress_grid_tep").cells()


def _stress_cell(name):
    for cell in _stress_cells():
        if cell.estimator == "BayesPointMachine" and cell.method == "ep" and cell.name == name:
            return cell.X, cell.y
    raise KeyError(name)


def _fit(X, y, **params):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = BayesPointMachine(max_iter=300, **params).fit(X, y)
    warned = any(issubclass(w.category, ConvergenceWarning) for w in caught)
    return est, warned


def _toy(n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = np.where(X[:, 0] + 0.5 * X[:, 1] > 0, 1.0, -1.0)
    y[rng.choice(n, n // 5, replace=False)] *= -1
    return np.column_stack([X, np.ones(n)]), y


def _posterior(Z):
    def make(tau, nu):
        try:
            return LinearRankOnePosterior(Z, np.eye(Z.shape[1]), tau, nu)
        except np.linalg.LinAlgError:
            return None

    return make


@pytest.mark.parametrize("df", [np.inf, 10.0])
def test_site_map_jacobian_matches_finite_differences(df):
    Z, y = _toy()
    n, k = Z.shape
    state, _ = linear_tep(Z, y, df=df, eps=0.1, max_iter=3, damping=0.5)
    tau, nu = rank_one_sites(state, Z)
    make = _posterior(Z)

    def F(s):
        p = make(s[:n], s[n:])
        t, v, good = _site_update(p.d, p.mu, p.logdet_b, s[:n], s[n:], y, df, 0.1, k)
        assert good.all()
        return np.concatenate([t, v])

    s = np.concatenate([tau, nu])
    jac = site_map_jacobian(make(tau, nu), tau, nu, y, df, 0.1, k)
    fd = np.empty_like(jac)
    for j in range(2 * n):
        h = 1e-6 * max(1.0, abs(s[j]))
        e = np.zeros(2 * n)
        e[j] = h
        fd[:, j] = (F(s + e) - F(s - e)) / (2 * h)
    np.testing.assert_allclose(jac, fd, atol=1e-6 * np.abs(fd).max())


@pytest.mark.parametrize("df", [np.inf, 10.0])
def test_newton_root_is_a_fixed_point_of_the_sequential_sweep(df):
    """An independent check: one undamped sequential sweep from Newton's root moves no site."""
    Z, y = _toy(n=30, seed=1)
    found = None
    for sweeps in range(1, 6):
        state, _ = linear_tep(Z, y, df=df, eps=0.1, max_iter=sweeps, damping=0.5)
        tau0, nu0 = rank_one_sites(state, Z)
        found = solve_fixed_point(_posterior(Z), y, df, 0.1, Z.shape[1], tau0, nu0, tol=1e-10)
        if found is not None:
            break
    assert found is not None
    tau, nu, post, _ = found
    assert np.all(1.0 - tau * post.d > 0)
    state = rank_one_state(np.eye(3), np.zeros(3), Z, tau, nu, df)
    _, info = linear_tep(Z, y, df=df, eps=0.1, max_iter=1, damping=0.0, state=state)
    assert info.n_skipped == 0
    assert info.max_diff < 1e-7


def test_a_sweep_with_skipped_updates_is_not_convergence():
    """Identical inputs with conflicting labels: sequential t-EP skips every update after a
    few sweeps (improper cavities), which is not a fixed point."""
    X, y = _stress_cell("all features constant")
    Z = np.column_stack([X, np.ones(len(y))])
    with np.errstate(all="ignore"):
        _, info = linear_tep(Z, y.astype(float), df=10.0, eps=0.1, max_iter=60, damping=0.5)
    assert info.n_skipped > 0
    assert not info.converged


@pytest.mark.parametrize(
    "name",
    [
        "all features constant",
        "duplicates",
        "near-duplicates",
        "fixed ell=1 var=1",
        "fixed ell=0.001 var=1",
        "fixed ell=1000 var=1",
        "constant feature",
        "1% flipped labels",
        "20% flipped labels",
    ],
)
def test_stress_cells_with_a_valid_fixed_point_converge(name):
    X, y = _stress_cell(name)
    est, warned = _fit(X, y)
    assert est.converged_ and not warned
    assert np.isfinite(est.log_marginal_likelihood_value_)
    p = est.predict_proba(X)
    assert np.all(np.isfinite(p))


@pytest.mark.slow
def test_cell_without_a_fixed_point_found_warns_and_keeps_finite_evidence():
    """'n=300': no proper fixed point is found (docs/reliability.md); the fit says so and
    its evidence is that of a state with proper cavities, finite like the exact evidence
    (label_noise > 0)."""
    X, y = _stress_cell("n=300")
    est, warned = _fit(X, y)
    assert warned and not est.converged_ and not est.fixed_point_solved_
    assert np.isfinite(est.log_marginal_likelihood_value_)
    assert np.all(np.isfinite(est.predict_proba(X)))


def _exact_log_evidence_2d(Z, y, eps, nodes=200_000):
    """log of E_w[prod_i l_i(w)] for any spherical prior on w in 2-D: the likelihood depends
    only on the direction of w, which is uniform on the circle."""
    angles = (np.arange(nodes) + 0.5) * 2 * np.pi / nodes
    u = np.column_stack([np.cos(angles), np.sin(angles)])
    margins = (Z * y[:, None]) @ u.T  # (n, nodes)
    log_l = np.where(margins > 0, np.log1p(-eps), np.log(eps)).sum(0)
    top = log_l.max()
    return top + np.log(np.mean(np.exp(log_l - top)))


@pytest.mark.parametrize("df", [np.inf, 10.0])
def test_evidence_against_numerical_integration(df):
    """On 6 points in 2-D (no intercept) the EP evidence is finite, like the exact one, and
    close to it for Gaussian EP (t-EP's evidence is a looser approximation,
    docs/derivations/tep.md §5.2)."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(6, 2))
    y = np.where(X[:, 0] > 0, 1, -1)
    y[0] = -y[0]
    exact = _exact_log_evidence_2d(X, y.astype(float), 0.1)
    est, _ = _fit(X, y, df=df, fit_intercept=False)
    assert est.converged_
    assert np.isfinite(exact) and np.isfinite(est.log_marginal_likelihood_value_)
    tolerance = 0.5 if np.isinf(df) else 2.0
    assert abs(est.log_marginal_likelihood_value_ - exact) < tolerance


@pytest.mark.slow
def test_no_fixed_point_cell_is_a_fold_of_the_branch_from_gaussian_ep():
    """'n=300': the proper fixed point of Gaussian EP, followed in df, ends at a fold
    df* > 10 (the smallest singular value of I - dF/ds goes to 0 there), so this branch does
    not reach the estimator's df = 10 (docs/reliability.md)."""
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "tep_fixed_points.py"
    spec = importlib.util.spec_from_file_location("_tep_fixed_points", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    X, y = _stress_cell("n=300")
    Z = np.column_stack([X, np.ones(len(y))])
    gauss, end, smallest, reached = module.continuation(Z, y.astype(float))
    assert gauss and not reached
    assert 10.5 < end < 20.0
    assert smallest < 1e-3


@pytest.mark.parametrize("df", [np.inf, 10.0])
def test_low_rank_newton_step_equals_the_dense_solve(df):
    """The linear model's Newton step (Woodbury on diagonal-plus-rank-(k^2+2k+1)) equals
    the dense solve with the Jacobian of site_map_jacobian."""
    from robustep.tep.fixed_point import _newton_direction

    Z, y = _toy()
    n = Z.shape[0]
    state, _ = linear_tep(Z, y, df=df, eps=0.1, max_iter=3, damping=0.5)
    tau, nu = rank_one_sites(state, Z)
    post = _posterior(Z)(tau, nu)
    r = np.random.default_rng(0).normal(size=2 * n)
    step = _newton_direction(post, tau, nu, y, df, 0.1, 3, r)
    jac = site_map_jacobian(post, tau, nu, y, df, 0.1, 3)
    jac[np.diag_indices(2 * n)] -= 1.0
    np.testing.assert_allclose(step, np.linalg.solve(jac, -r), rtol=1e-8, atol=1e-10)


def test_follow_fixed_point_in_df_reaches_a_proper_fixed_point():
    """Continuation from Gaussian EP to df = 10 ends at a fixed point of the df = 10 map."""
    from robustep.tep.fixed_point import follow_fixed_point

    Z, y = _toy(n=30, seed=1)
    make = _posterior(Z)
    state, info = linear_tep(Z, y, df=np.inf, eps=0.1, max_iter=500, damping=0.5)
    assert info.converged
    tau, nu, post, x = follow_fixed_point(
        make, y, 3, *rank_one_sites(state, Z), lambda ld: (float(np.exp(ld)), 0.1),
        np.log(1e5), np.log(10.0), 0.5, tol=1e-10,
    )  # fmt: skip
    assert x == np.log(10.0) and post is not None
    t_new, n_new, good = _site_update(post.d, post.mu, post.logdet_b, tau, nu, y, 10.0, 0.1, 3)
    assert good.all()
    np.testing.assert_allclose(t_new, tau, atol=1e-8)
    np.testing.assert_allclose(n_new, nu, atol=1e-8)


def _process_cell(name):
    for cell in _stress_cells():
        if cell.estimator == "StudentTProcessClassifier" and cell.name == name:
            return cell.make().kernel(cell.X), cell.y.astype(float)
    raise KeyError(name)


@pytest.mark.slow
def test_process_cell_branch_folds_above_df_10_with_relative_tolerance():
    """StudentTProcessClassifier "20% flipped labels" (n = 200, label noise 0): the
    Gaussian-process EP fixed point has site precisions up to ~2e5, where rounding keeps
    every site's absolute change above 1e-5, so Newton's method polishes it only with the
    relative tolerance.  Followed in df, its branch ends at a fold df* above 10: there an
    eigenvalue of dF/ds reaches 1 (docs/reliability.md)."""
    from robustep.tep.fixed_point import follow_fixed_point
    from robustep.tep.process import process_posterior, process_tep

    K, y = _process_cell("20% flipped labels")
    n = y.size

    def make(tau, nu):
        return process_posterior(K, tau, nu)

    with np.errstate(all="ignore"):
        tau, nu, _, _ = process_tep(
            K, y, df=np.inf, eps=0.0, max_iter=3000, damping=0.5, adaptive=True, tol=1e-12
        )
    assert np.max(tau) > 1e5
    assert solve_fixed_point(make, y, np.inf, 0.0, n, tau, nu, tol=1e-5) is None
    found = solve_fixed_point(make, y, np.inf, 0.0, n, tau, nu, tol=1e-6, relative=True)
    assert found is not None
    t0, n0, post = found[:3]
    t_new, n_new, good = _site_update(post.d, post.mu, post.logdet_b, t0, n0, y, np.inf, 0.0, n)
    assert good.all()
    s = np.concatenate([t0, n0])
    change = np.concatenate([t_new - t0, n_new - n0]) / np.maximum(1.0, np.abs(s))
    assert np.abs(change).max() < 1e-6
    bottom = np.log(10.0)
    tau, nu, post, x = follow_fixed_point(
        make, y, n, t0, n0, lambda ld: (10.0 if ld == bottom else float(np.exp(ld)), 0.0),
        np.log(1e5), bottom, 0.5, tol=1e-6, max_solves=1000, relative=True,
    )  # fmt: skip
    assert x != bottom and 12.0 < np.exp(x) < 20.0
    eigenvalues = np.linalg.eigvals(site_map_jacobian(post, tau, nu, y, np.exp(x), 0.0, n))
    assert np.min(np.abs(eigenvalues - 1.0)) < 1e-2


def test_relative_tolerance_scales_each_component_by_the_sites_size():
    from robustep.tep.fixed_point import _is_root

    s = np.array([1e5, 0.5, -2e3, 0.0])
    r = np.array([5e-2, 5e-7, -1e-3, 0.0])
    assert not _is_root(r, s, 1e-6, relative=False)
    assert _is_root(r, s, 1e-6, relative=True)  # 5e-7, 5e-7, 5e-7: below 1e-6
    assert not _is_root(r * 3, s, 1e-6, relative=True)
    # a site below 1 in size is measured absolutely
    assert not _is_root(np.array([0, 2e-6, 0, 0]), s, 1e-6, relative=True)
