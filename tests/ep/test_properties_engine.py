"""Property-based tests of the EP engine.

For random PSD priors -- well conditioned, rank-deficient (K = A A^T with rank < n) and
badly conditioned (long length-scales, condition numbers up to ~1e16) -- random targets,
every likelihood, schedule, damping, power and robustness setting,
``expectation_propagation`` either raises a documented error (ValueError with a message,
e.g. for a K that is not PSD to within jitter) or returns finite means, positive finite
variances and a finite log Z.  A run that did not converge always comes with a
ConvergenceWarning and says so in ``message``; never NaN, never a silent failure.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.exceptions import ConvergenceWarning

import _hypothesis_profiles as profiles
from robustep.ep import expectation_propagation
from robustep.likelihoods import Gaussian, Logistic, NoisyStep, Probit, StudentT

LIKELIHOODS = {
    "gaussian": lambda: Gaussian(0.1),
    "student_t_1": lambda: StudentT(1.0, 0.1),
    "student_t_4": lambda: StudentT(4.0, 0.5),
    "probit": Probit,
    "logistic": Logistic,
    "noisy_step": lambda: NoisyStep(0.05),
    "step": lambda: NoisyStep(0.0),
}


@st.composite
def problems(draw):
    n = draw(st.integers(1, 8))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kind = draw(st.sampled_from(["rbf", "rank_deficient", "ill_conditioned", "duplicates"]))
    variance = 10.0 ** draw(st.floats(-3, 3))
    x = rng.normal(size=(n, 2))
    if kind == "duplicates":  # repeated and nearly repeated inputs
        x = x[rng.integers(0, max(1, n // 2), n)] + 1e-9 * rng.normal(size=(n, 2))
    ell = 10.0 ** draw(st.floats(-2, 2))
    if kind == "ill_conditioned":
        ell = 10.0 ** draw(st.floats(1, 3))
    if kind == "rank_deficient":
        r = draw(st.integers(1, max(1, n - 1)))
        a = rng.normal(size=(n, r))
        K = variance * (a @ a.T) / r
    else:
        d2 = np.sum((x[:, None, :] - x[None, :, :]) ** 2, axis=-1)
        K = variance * np.exp(-0.5 * d2 / ell**2)
    K = 0.5 * (K + K.T)
    name = draw(st.sampled_from(sorted(LIKELIHOODS)))
    lik = LIKELIHOODS[name]()
    if name in ("gaussian", "student_t_1", "student_t_4"):
        y = 10.0 ** draw(st.floats(-2, 3)) * rng.standard_t(2.0, size=n)
    else:
        y = rng.choice([-1.0, 1.0], size=n)
    options = dict(
        schedule=draw(st.sampled_from(["parallel", "sequential"])),
        damping=draw(st.sampled_from([0.0, 0.3, 0.5, 0.9])),
        power=draw(st.sampled_from([1.0, 0.5, 0.1])),
        robust=draw(st.booleans()),
        double_loop=draw(st.sampled_from([None, True, False])),
        max_iter=draw(st.sampled_from([3, 20])),
    )
    return K, y, lik, options


def check_run(problem):
    K, y, lik, options = problem
    K0, y0 = K.copy(), y.copy()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            res = expectation_propagation(K, y, lik, **options)
        except ValueError as err:  # documented: invalid input (e.g. K not PSD)
            assert str(err), "a ValueError must say what is wrong"
            return None
    np.testing.assert_array_equal(K, K0)
    np.testing.assert_array_equal(y, y0)
    assert np.all(np.isfinite(res.mean)), res.message
    assert np.all(np.isfinite(res.var)) and np.all(res.var > 0), res.message
    assert np.isfinite(res.log_Z), res.message
    assert np.all(np.isfinite(res.site_precision)) and np.all(np.isfinite(res.site_shift))
    conv_warnings = [w for w in caught if issubclass(w.category, ConvergenceWarning)]
    if res.converged:
        assert res.n_invalid_cavities == 0
    else:
        assert conv_warnings, f"silent non-convergence: {res.message}"
        assert "did not converge" in res.message
    return res


@given(problems())
def test_engine_finite_or_documented_error(problem):
    check_run(problem)


@pytest.mark.slow
@settings(max_examples=profiles.SLOW_EXAMPLES * 3)
@given(problems())
def test_engine_finite_or_documented_error_many(problem):
    check_run(problem)
