"""Newton's method on parallel EP's fixed-point equations (robustep.ep.newton,
docs/derivations/ep_stability.md §6): the fixed points of parallel, power and accelerated
EP reached from nearby starts, quadratic convergence, a fixed point that repels every
damping, the branch of fixed points followed in a hyperparameter, validation."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF

from _fixed_point_problems import probit_problem, xor_step
from robustep import config
from robustep.ep import (
    expectation_propagation,
    fixed_point_stability,
    newton_expectation_propagation,
)
from robustep.ep.accelerated import accelerated_expectation_propagation
from robustep.likelihoods import Gaussian, NoisyStep, Probit
from robustep.posterior import DensePrior, FITCPrior


def _perturbed(result, scale=0.05, seed=0):
    rng = np.random.default_rng(seed)
    factor = 1.0 + scale * rng.uniform(-1.0, 1.0, size=(2, result.site_precision.size))
    return result.site_precision * factor[0], result.site_shift * factor[1]


@pytest.mark.parametrize("power", [1.0, 0.5])
def test_reaches_parallel_eps_fixed_point_quadratically(power):
    """Probit: from sites 5% off EP's (power EP's) fixed point Newton's method returns to
    it within 1e-9 in a few steps, each residual below a constant times the previous one
    squared once the residual is small."""
    K, y = probit_problem()
    reference = expectation_propagation(K, y, Probit(), power=power, tol=1e-13, max_iter=3000)
    assert reference.converged
    res = newton_expectation_propagation(
        K, y, Probit(), _perturbed(reference), power=power, tol=1e-11
    )
    assert res.converged and res.n_iter <= 6
    assert set(res.history["phase"]) == {"newton"}
    np.testing.assert_allclose(res.site_precision, reference.site_precision, atol=1e-9)
    np.testing.assert_allclose(res.site_shift, reference.site_shift, atol=1e-9)
    assert res.log_Z == pytest.approx(reference.log_Z, abs=1e-10)
    r = np.asarray(res.history["residual"])
    assert np.all(np.diff(r) < 0)
    # pairs of successive residuals below 1e-2 whose second is above rounding (1e-12)
    late = [(b, a) for a, b in zip(r[:-1], r[1:], strict=False) if a < 1e-2 and b > 1e-12]
    assert late and all(b < 10.0 * a**2 for b, a in late)


def test_gaussian_likelihood_takes_one_step():
    """Gaussian sites do not depend on their cavities (J = 0, up to the finite
    differences' error): one full Newton step is one parallel sweep, which lands on the
    fixed point."""
    K, _ = probit_problem(12)
    y = np.random.default_rng(1).normal(size=12)
    res = newton_expectation_propagation(K, y, Gaussian(0.5), (np.zeros(12), np.zeros(12)))
    assert res.converged and res.n_iter == 1 and res.history["step"] == [1.0]
    np.testing.assert_allclose(res.site_precision, 1.0 / 0.5, rtol=1e-8)
    np.testing.assert_allclose(res.site_shift, y / 0.5, rtol=1e-8, atol=1e-8)


def test_reaches_a_fixed_point_that_repels_every_damping():
    """XOR, n = 40, seed 0, RBF(0.8), NoisyStep(0.1): a fixed point with a real
    eigenvalue near 1.16 (damped EP moves away from it at every damping,
    tests/ep/test_stability.py); Newton's method returns to it from sites 5% off."""
    K, y = xor_step(40, 0, 0.8)
    fixed = accelerated_expectation_propagation(K, y, NoisyStep(0.1), tol=1e-11, max_iter=2000)
    assert fixed.converged
    assert fixed_point_stability(K, y, NoisyStep(0.1), fixed).largest_real_part > 1.05
    res = newton_expectation_propagation(K, y, NoisyStep(0.1), _perturbed(fixed, 0.02), tol=1e-10)
    assert res.converged
    np.testing.assert_allclose(res.site_precision, fixed.site_precision, rtol=1e-6, atol=1e-6)
    assert res.log_Z == pytest.approx(fixed.log_Z, abs=1e-8)


def test_follows_a_branch_of_fixed_points_in_the_length_scale():
    """The misspecified XOR fit (n = 200, seed 6, NoisyStep(0.1)): from stage accelerated's
    fixed point at length-scale 0.5, Newton's method in steps of 0.04 reaches 0.54 and
    0.58, where no iterative EP run from zero sites converges (docs/reliability.md), and
    every point it reaches is a fixed point with an eigenvalue of real part above 1."""
    previous = None
    for ell in (0.5, 0.54, 0.58):
        K, y = xor_step(200, 6, ell)
        if previous is None:
            previous = accelerated_expectation_propagation(
                K, y, NoisyStep(0.1), tol=1e-4, tol_units="marginal"
            )
        else:
            previous = newton_expectation_propagation(K, y, NoisyStep(0.1), previous)
            assert previous.n_iter <= 6
        assert previous.converged
        assert fixed_point_stability(K, y, NoisyStep(0.1), previous).largest_real_part > 1.5


def test_stops_and_warns_when_it_cannot_converge():
    """max_iter=1 from a far start: not converged, with a ConvergenceWarning and a message
    that say so."""
    K, y = probit_problem()
    start = (np.full(40, 0.5), np.zeros(40))
    with pytest.warns(ConvergenceWarning, match="max_iter"):
        res = newton_expectation_propagation(K, y, Probit(), start, max_iter=1)
    assert not res.converged and res.n_iter == 1
    assert "did not converge (max_iter) after 1 iterations" in res.message


def test_accepts_a_prior_and_keeps_inputs():
    K, y = probit_problem(10)
    fixed = expectation_propagation(K, y, Probit(), tol=1e-12)
    sites = _perturbed(fixed)
    copies = (sites[0].copy(), sites[1].copy(), K.copy(), y.copy())
    a = newton_expectation_propagation(DensePrior(K), y, Probit(), sites)
    b = newton_expectation_propagation(K, y, Probit(), sites)
    np.testing.assert_array_equal(a.site_precision, b.site_precision)
    for kept, now in zip(copies, (sites[0], sites[1], K, y), strict=True):
        np.testing.assert_array_equal(kept, now)


def test_validation():
    K, y = probit_problem(6)
    good = (np.zeros(6), np.zeros(6))
    with pytest.raises(ValueError, match="shape"):
        newton_expectation_propagation(K, y, Probit(), (np.zeros(5), np.zeros(5)))
    with pytest.raises(TypeError, match="pair"):
        newton_expectation_propagation(K, y, Probit(), 3.0)
    with pytest.raises(ValueError, match="init must be None, a .* pair or an EPResult, got"):
        newton_expectation_propagation(K, y, Probit(), "subset")  # no subset start here
    with pytest.raises(ValueError, match="step"):
        newton_expectation_propagation(K, y, Probit(), good, step=2.0)
    with pytest.raises(ValueError, match="tol_units"):
        newton_expectation_propagation(K, y, Probit(), good, tol_units="nats")
    with pytest.raises(ValueError, match="power"):
        newton_expectation_propagation(K, y, Probit(), good, power=0.0)
    improper_cavity = np.array([0.82, 2.09, -0.26, 2.73, -1.33, 0.7])
    with pytest.raises(ValueError, match="1 of 6 cavities are invalid .* at init"):
        newton_expectation_propagation(K, y, Probit(), (improper_cavity, np.zeros(6)))
    with pytest.raises(ValueError, match="not positive definite at init"):
        newton_expectation_propagation(K, y, Probit(), (np.r_[-1.0, np.zeros(5)], np.zeros(6)))
    with config(stability_max_sites=5), pytest.raises(ValueError, match="stability_max_sites"):
        newton_expectation_propagation(K, y, Probit(), good)
    X = np.linspace(0, 1, 6)[:, None]
    fitc = FITCPrior.from_kernel(RBF(0.5), X, X[::2])
    with pytest.raises(ValueError, match="full posterior covariance"):
        newton_expectation_propagation(fitc, y, Probit(), good)
    fixed = expectation_propagation(K, y, Probit(), tol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a converged run does not warn
        assert newton_expectation_propagation(K, y, Probit(), _perturbed(fixed)).converged
