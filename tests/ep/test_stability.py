"""Local stability of parallel EP at a fixed point (robustep.ep.stability,
docs/derivations/ep_stability.md): the eigenvalues against the observed convergence rates
of plain and damped parallel EP, the damping formula against a grid, validation."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from _fixed_point_problems import probit_problem, xor_step
from robustep import config
from robustep.ep import (
    FixedPointStability,
    expectation_propagation,
    fixed_point_stability,
)
from robustep.ep.accelerated import accelerated_expectation_propagation
from robustep.likelihoods import Gaussian, NoisyStep, Probit


def _plain(K, y, likelihood, **options):
    """Parallel EP without safeguards: exactly the iteration x <- d x + (1 - d) g(x)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return expectation_propagation(
            K, y, likelihood, robust=False, mean_sweeps=0, double_loop="never", **options
        )


def _late_rate(residuals, low=1e-12, high=1e-7):
    """Geometric mean of the residual ratios while the residual falls from high to low."""
    r = np.asarray(residuals)
    window = np.flatnonzero((r < high) & (r > low))
    assert window.size >= 6, r
    first, last = window[0], window[-1]
    return (r[last] / r[first]) ** (1.0 / (last - first))


def test_gaussian_likelihood_has_a_zero_jacobian():
    """Each Gaussian site is the likelihood itself whatever its cavity: J = 0."""
    K, _ = probit_problem(12)
    y = np.random.default_rng(1).normal(size=12)
    res = _plain(K, y, Gaussian(0.5), tol=1e-12)
    found = fixed_point_stability(K, y, Gaussian(0.5), res)
    assert found.eigenvalues.shape == (24,)
    assert np.max(np.abs(found.eigenvalues)) < 1e-6
    assert found.smallest_damping == 0.0 and found.damping_converges
    assert found.residual < 1e-8
    assert found.n_factorisations == 1


@pytest.mark.parametrize(("power", "damping"), [(1.0, 0.0), (1.0, 0.5), (0.5, 0.0), (0.5, 0.7)])
def test_predicted_rate_matches_parallel_ep(power, damping):
    """Probit: the late residual ratio of (damped, power) parallel EP is the predicted
    asymptotic rate max |d + (1 - d) lambda| at its fixed point, to 1%."""
    K, y = probit_problem()
    fixed = _plain(K, y, Probit(), power=power, tol=1e-13, max_iter=3000)
    assert fixed.converged
    found = fixed_point_stability(K, y, Probit(), fixed)  # takes the result's power
    run = _plain(K, y, Probit(), power=power, damping=damping, tol=1e-13, max_iter=3000)
    assert run.converged
    predicted = found.rate(damping)
    assert 0.1 < predicted < 1.0
    assert _late_rate(run.history["residual"]) == pytest.approx(predicted, rel=0.01)


def test_forward_and_central_differences_agree():
    K, y = probit_problem(20)
    fixed = _plain(K, y, Probit(), tol=1e-12)
    central = fixed_point_stability(K, y, Probit(), fixed)
    forward = fixed_point_stability(K, y, Probit(), fixed, central=False)
    assert forward.n_factorisations == central.n_factorisations == 1
    assert forward.spectral_radius == pytest.approx(central.spectral_radius, rel=1e-4)
    pair = (fixed.site_precision, fixed.site_shift)
    assert fixed_point_stability(K, y, Probit(), pair).spectral_radius == pytest.approx(
        central.spectral_radius, rel=1e-12
    )


def _brute_force_jacobian(K, y, likelihood, res, h=1e-6):
    """The Jacobian of the whole parallel EP map by central differences in each site
    parameter, one engine evaluation (a posterior factorisation) per difference."""
    from robustep.ep.engine import _check_inputs, _Context, _evaluate
    from robustep.ep.updates import moment_matching_update

    prior, y = _check_inputs(K, y, likelihood, "parallel", 0.0, res.power, 1, 1.0)
    ctx = _Context(prior, y, likelihood, moment_matching_update, res.power, 0.0, 1.0, 1, None)
    x0 = np.concatenate([res.site_precision, res.site_shift])
    n = x0.size // 2

    def g(x):
        ev = _evaluate(ctx, x[:n], x[n:])
        return np.concatenate([ev.proposal_precision, ev.proposal_shift])

    jacobian = np.empty((2 * n, 2 * n))
    for i in range(2 * n):
        e = np.zeros(2 * n)
        e[i] = h * max(1.0, abs(x0[i]))
        jacobian[:, i] = (g(x0 + e) - g(x0 - e)) / (2.0 * e[i])
    return jacobian


@pytest.mark.parametrize(
    ("case", "power"), [("probit", 1.0), ("probit", 0.5), ("step", 1.0), ("step", 0.7)]
)
def test_jacobian_matches_brute_force_differences_of_the_whole_map(case, power):
    """The chain-rule Jacobian (one factorisation, per-site differences) against central
    differences of the whole parallel EP map (4n factorisations), entry by entry."""
    from robustep.ep.engine import _check_inputs, _Context, _evaluate
    from robustep.ep.stability import _jacobian
    from robustep.ep.updates import moment_matching_update

    if case == "probit":
        K, y = probit_problem(15)
        likelihood = Probit()
        res = _plain(K, y, likelihood, power=power, tol=1e-10)
    else:
        K, y = xor_step(15, 3, 0.5)
        likelihood = NoisyStep(0.1)
        res = accelerated_expectation_propagation(K, y, likelihood, power=power, tol=1e-10)
    assert res.converged
    prior, yy = _check_inputs(K, y, likelihood, "parallel", 0.0, power, 1, 1.0)
    ctx = _Context(prior, yy, likelihood, moment_matching_update, power, 0.0, 1.0, 1, None)
    ev = _evaluate(ctx, res.site_precision, res.site_shift)
    reference = _brute_force_jacobian(K, y, likelihood, res)
    scale = np.max(np.abs(reference))
    assert scale > 0.1
    for central in (True, False):
        J = _jacobian(ctx, ev, 1e-6, central)
        assert np.max(np.abs(J - reference)) < (1e-7 if central else 1e-5) * scale


def _perturbed_run(K, y, likelihood, fixed, damping, seed=0, size=1e-6, sweeps=400):
    """Damped parallel EP from the fixed point moved by ``size`` (relative): its final
    distance from the fixed point's sites over the starting distance."""
    rng = np.random.default_rng(seed)
    x = np.concatenate([fixed.site_precision, fixed.site_shift])
    start = x * (1.0 + size * rng.standard_normal(x.size))
    n = K.shape[0]
    run = _plain(K, y, likelihood, damping=damping, init=(start[:n], start[n:]),
                 tol=1e-13, max_iter=sweeps)  # fmt: skip
    end = np.concatenate([run.site_precision, run.site_shift])
    return np.max(np.abs(end - x)) / np.max(np.abs(start - x))


def test_threshold_damping_separates_divergence_from_convergence():
    """XOR, n = 40, seed 3, RBF(0.5), NoisyStep(0.1): undamped parallel EP oscillates away
    from the fixed point (spectral radius about 1.1); damping below the predicted
    threshold still moves away, damping above it returns."""
    K, y = xor_step(40, 3, 0.5)
    fixed = accelerated_expectation_propagation(K, y, NoisyStep(0.1), tol=1e-11, max_iter=2000)
    assert fixed.converged
    found = fixed_point_stability(K, y, NoisyStep(0.1), fixed)
    threshold = found.smallest_damping
    assert found.spectral_radius > 1.05 and 0.1 < threshold < 0.3
    assert _perturbed_run(K, y, NoisyStep(0.1), fixed, 0.0) > 100.0
    assert _perturbed_run(K, y, NoisyStep(0.1), fixed, threshold - 0.08) > 10.0
    assert _perturbed_run(K, y, NoisyStep(0.1), fixed, threshold + 0.15) < 1e-3


def test_a_real_eigenvalue_above_one_repels_every_damping():
    """XOR, n = 40, seed 0, RBF(0.8), NoisyStep(0.1): Anderson mixing finds a fixed point
    with a real eigenvalue near 1.16; damped parallel EP started 1e-6 from it moves
    away at every damping, and ever more slowly as the damping grows."""
    K, y = xor_step(40, 0, 0.8)
    fixed = accelerated_expectation_propagation(K, y, NoisyStep(0.1), tol=1e-11, max_iter=2000)
    assert fixed.converged
    found = fixed_point_stability(K, y, NoisyStep(0.1), fixed)
    assert found.largest_real_part > 1.05
    assert not found.damping_converges
    assert found.smallest_damping is None and found.best_damping is None
    for damping in (0.0, 0.5, 0.9):
        assert found.rate(damping) > 1.0
        assert _perturbed_run(K, y, NoisyStep(0.1), fixed, damping, sweeps=2000) > 100.0


def _synthetic(eigenvalues):
    return FixedPointStability(np.asarray(eigenvalues, dtype=complex), 0.0, 0)


def test_smallest_damping_formula():
    """An eigenvalue at -1.5 needs damping 0.2 (d + (1 - d)(-1.5) = -1 at d = 0.2)."""
    found = _synthetic([-1.5, 0.3])
    assert found.smallest_damping == pytest.approx(0.2)
    assert found.rate(0.2) == pytest.approx(1.0)
    assert found.spectral_radius == pytest.approx(1.5)
    assert _synthetic([0.5, -0.9]).smallest_damping == 0.0
    assert _synthetic([1.0, 0.2]).smallest_damping is None
    assert _synthetic([]).smallest_damping == 0.0 and _synthetic([]).rate(0.3) == 0.0


@pytest.mark.parametrize("seed", range(5))
def test_damping_formula_and_best_damping_against_a_grid(seed):
    """Random eigenvalues with real parts below 1: rate(d) < 1 exactly above the
    threshold, and best_damping attains the grid's smallest rate."""
    rng = np.random.default_rng(seed)
    lam = rng.uniform(-3.0, 0.95, 6) + 1j * rng.uniform(-2.0, 2.0, 6)
    lam = np.concatenate([lam, lam.conj()])
    found = _synthetic(lam)
    grid = np.linspace(0.0, 0.999, 2000)
    rates = np.array([found.rate(d) for d in grid])
    threshold = found.smallest_damping
    assert np.all(rates[grid > threshold + 1e-3] < 1.0)
    assert np.all(rates[grid < threshold - 1e-3] > 1.0)
    assert found.rate(found.best_damping) <= rates.min() + 1e-6


def test_validation():
    K, y = probit_problem(6)
    good = (np.zeros(6), np.zeros(6))
    with pytest.raises(ValueError, match="shape"):
        fixed_point_stability(K, y, Probit(), (np.zeros(5), np.zeros(5)))
    with pytest.raises(ValueError, match="NaN or inf"):
        fixed_point_stability(K, y, Probit(), (np.full(6, np.nan), np.zeros(6)))
    with pytest.raises(TypeError, match="pair"):
        fixed_point_stability(K, y, Probit(), 3.0)
    with pytest.raises(ValueError, match="step"):
        fixed_point_stability(K, y, Probit(), good, step=0.0)
    with pytest.raises(ValueError, match="power"):
        fixed_point_stability(K, y, Probit(), good, power=1.5)
    with pytest.raises(TypeError, match="Likelihood"):
        fixed_point_stability(K, y, "probit", good)
    # a proper posterior whose second cavity is improper (precision -0.59)
    improper_cavity = np.array([0.82, 2.09, -0.26, 2.73, -1.33, 0.7])
    with pytest.raises(ValueError, match="1 of 6 cavities are invalid"):
        fixed_point_stability(K, y, Probit(), (improper_cavity, np.zeros(6)))
    with pytest.raises(ValueError, match="not positive definite"):
        fixed_point_stability(K, y, Probit(), (np.r_[-1.0, np.zeros(5)], np.zeros(6)))
    with pytest.raises(ValueError, match="damping"):
        _synthetic([0.5]).rate(1.0)
    with config(stability_max_sites=5), pytest.raises(ValueError, match="stability_max_sites"):
        fixed_point_stability(K, y, Probit(), good)


def test_inputs_are_not_modified():
    K, y = probit_problem(8)
    fixed = _plain(K, y, Probit(), tol=1e-10)
    sites = (fixed.site_precision.copy(), fixed.site_shift.copy())
    K_copy, y_copy = K.copy(), y.copy()
    fixed_point_stability(K, y, Probit(), sites)
    np.testing.assert_array_equal(sites[0], fixed.site_precision)
    np.testing.assert_array_equal(K, K_copy)
    np.testing.assert_array_equal(y, y_copy)
