"""Relaxed EP site update (robustep.ep.rep): derivation checks (i)-(ii) and behaviour."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy import integrate, special
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF

from robustep.ep import expectation_propagation, moment_matching_update
from robustep.ep.rep import (
    expected_log_likelihood,
    make_rep_update,
    optimise_relaxation,
    relaxed_cavity,
    relaxed_kl_objective,
    relaxed_moment_matching,
    rep_site_update,
    site_means,
)
from robustep.likelihoods.gaussian import Gaussian
from robustep.likelihoods.noisy_step import NoisyStep
from robustep.likelihoods.probit import Probit

LIKELIHOODS = [NoisyStep(0.2), NoisyStep(0.05), Probit()]
IDS = ["step0.2", "step0.05", "probit"]


def _lik_values(lik, y, f):
    if isinstance(lik, NoisyStep):
        return np.where(y * f >= 0, 1.0 - lik.epsilon, lik.epsilon)
    return special.ndtr(y * f)


def _numerical_Q(lik, y, mu, s, m, b, c, site_precision, site_shift):
    """KL(t r q\\i || q r) (both normalised) + c b by quadrature; q = q\\i * new site."""
    mu_b, s_b = relaxed_cavity(mu, s, m, b)
    # new belief q = cavity * site; q r in moment form
    q_prec = 1.0 / s + site_precision
    q_shift = mu / s + site_shift
    qr_prec = q_prec + b
    qr_mean = (q_shift + b * m) / qr_prec
    qr_var = 1.0 / qr_prec
    lo, hi = mu_b - 12 * np.sqrt(s_b), mu_b + 12 * np.sqrt(s_b)

    def log_p_unnorm(f):
        return np.log(_lik_values(lik, y, f)) - 0.5 * (f - mu_b) ** 2 / s_b

    points = [0.0] if lo < 0 < hi else None
    Z = integrate.quad(lambda f: np.exp(log_p_unnorm(f)), lo, hi, points=points, limit=400,
                       epsabs=0, epsrel=1e-12)[0]  # fmt: skip

    def integrand(f):
        lp = log_p_unnorm(f) - np.log(Z)
        lq = -0.5 * np.log(2 * np.pi * qr_var) - 0.5 * (f - qr_mean) ** 2 / qr_var
        return np.exp(lp) * (lp - lq)

    kl = integrate.quad(integrand, lo, hi, points=points, limit=400, epsabs=1e-13,
                        epsrel=1e-11)[0]  # fmt: skip
    return kl + c * b


CASES = [
    # y, cavity mean, cavity var, old site mean, b, c
    (1.0, -1.5, 1.0, 2.0, 0.3, 0.1),
    (-1.0, 0.4, 2.5, -3.0, 1.7, 2.0),
    (1.0, 0.1, 0.3, 0.0, 0.0, 5.0),
    (1.0, 2.0, 4.0, -1.0, 10.0, 0.01),
    (-1.0, -0.5, 0.7, 4.0, 0.05, 20.0),
]


@pytest.mark.parametrize("lik", LIKELIHOODS, ids=IDS)
@pytest.mark.parametrize("case", CASES)
def test_closed_form_Q_matches_numerical_relaxed_kl(lik, case):
    """(ii) Q(b) (eq. 35, our closed form) = numerical KL(t r q\\i || q r) + c b with q from
    the site update — checks the formula and that q r is the moment-matched projection."""
    y, mu, s, m, b, c = case
    closed = relaxed_kl_objective(lik, y, mu, s, m, b, c)
    tau, nu = relaxed_moment_matching(lik, np.array([y]), np.array([mu]), np.array([s]),
                                      np.array([m]), np.array([b]))  # fmt: skip
    numeric = _numerical_Q(lik, y, mu, s, m, b, c, tau[0], nu[0])
    assert closed == pytest.approx(numeric, rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("lik", LIKELIHOODS, ids=IDS)
def test_expected_log_likelihood_against_quadrature(lik):
    y = np.array([1.0, -1.0, 1.0])
    mean = np.array([-1.0, 0.3, 2.0])
    var = np.array([0.5, 2.0, 1.0])
    got = expected_log_likelihood(lik, y, mean, var)
    for i in range(3):

        def w(f, i=i):
            return _lik_values(lik, y[i], f) * np.exp(-0.5 * (f - mean[i]) ** 2 / var[i])

        lo, hi = mean[i] - 15 * np.sqrt(var[i]), mean[i] + 15 * np.sqrt(var[i])
        Z = integrate.quad(w, lo, hi, points=[0.0], limit=200)[0]
        E = integrate.quad(lambda f, i=i: w(f) * np.log(_lik_values(lik, y[i], f)), lo, hi,
                           points=[0.0], limit=200)[0]  # fmt: skip
        assert got[i] == pytest.approx(E / Z, rel=1e-6, abs=1e-9)


def test_objective_is_kl_plus_penalty_and_nonnegative():
    lik = NoisyStep(0.1)
    b = np.logspace(-4, 3, 30)
    q0 = relaxed_kl_objective(lik, 1.0, -1.0, 2.0, 1.0, b, 0.0)
    q5 = relaxed_kl_objective(lik, 1.0, -1.0, 2.0, 1.0, b, 5.0)
    assert np.all(q0 >= 0)
    np.testing.assert_allclose(q5 - q0, 5.0 * b, rtol=1e-12)
    # huge relaxation: the relaxed tilted distribution becomes Gaussian
    assert relaxed_kl_objective(lik, 1.0, -1.0, 2.0, 1.0, 1e8, 0.0) < 1e-8


def test_relaxed_cavity_formula():
    mu_b, s_b = relaxed_cavity(1.0, 2.0, -3.0, 0.5)
    assert s_b == pytest.approx(1.0 / (0.5 + 0.5))
    assert mu_b == pytest.approx(s_b * (0.5 - 1.5))


def test_site_means_flat_sites_are_zero():
    m = site_means(np.array([2.0, 0.0, -0.5, 1e-14]), np.array([1.0, 3.0, 1.0, 1.0]), 1.0)
    np.testing.assert_allclose(m, [0.5, 0.0, -2.0, 0.0])


def test_gaussian_likelihood_relaxation_changes_nothing():
    """For a Gaussian t_i the projection is exact: the REP site equals t_i for every b."""
    lik = Gaussian(0.7)
    y = np.array([0.3, -1.2, 2.0])
    mu = np.array([0.0, 1.0, -0.5])
    s = np.array([1.0, 0.4, 3.0])
    m = np.array([5.0, -2.0, 0.1])
    for b in (0.0, 0.3, 10.0):
        tau, nu = relaxed_moment_matching(lik, y, mu, s, m, np.full(3, b))
        np.testing.assert_allclose(tau, 1 / 0.7, rtol=1e-10)
        np.testing.assert_allclose(nu, y / 0.7, rtol=1e-10)
    # and Q(b) = c b, so the optimiser keeps b = 0
    b, q = optimise_relaxation(lik, y, mu, s, m, 1e-3)
    np.testing.assert_array_equal(b, 0.0)


def test_b_zero_update_is_moment_matching_exactly():
    lik = NoisyStep(0.1)
    rng = np.random.default_rng(0)
    y = np.sign(rng.standard_normal(20))
    mu, s = rng.standard_normal(20), rng.uniform(0.1, 3, 20)
    tau_old, nu_old = rng.standard_normal(20), rng.standard_normal(20)
    p, sh, lz, info = rep_site_update(lik, y, mu, s, tau_old, nu_old, 1.0, relaxation=1e12)
    p0, sh0, lz0, _ = moment_matching_update(lik, y, mu, s, tau_old, nu_old, 1.0)
    np.testing.assert_array_equal(info["b"], 0.0)
    np.testing.assert_allclose(p, p0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(sh, sh0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(lz, lz0, rtol=0, atol=1e-12)


@pytest.mark.parametrize("lik", [NoisyStep(0.1), Probit()], ids=["step", "probit"])
def test_optimiser_matches_brute_force(lik):
    rng = np.random.default_rng(1)
    n = 12
    y = np.sign(rng.standard_normal(n))
    mu = 2 * rng.standard_normal(n)
    s = rng.uniform(0.2, 5, n)
    m = 3 * rng.standard_normal(n)
    for c in (0.003, 0.05, 1.0):
        b, q = optimise_relaxation(lik, y, mu, s, m, c)
        assert np.all(b >= 0)
        grid = np.concatenate([[0.0], np.logspace(-7, 7, 4001)])
        Q = relaxed_kl_objective(lik, y[:, None], mu[:, None], s[:, None], m[:, None],
                                 grid / s[:, None], c)  # fmt: skip
        np.testing.assert_allclose(q, relaxed_kl_objective(lik, y, mu, s, m, b, c), rtol=1e-12)
        assert np.all(q <= Q.min(axis=1) + 1e-7)


def test_vectorised_equals_site_by_site():
    lik = NoisyStep(0.2)
    rng = np.random.default_rng(2)
    n = 8
    args = (np.sign(rng.standard_normal(n)), 2 * rng.standard_normal(n),
            rng.uniform(0.2, 3, n), rng.standard_normal(n), rng.standard_normal(n))  # fmt: skip
    p, s, lz, info = rep_site_update(lik, *args, 1.0, relaxation=0.02)
    for i in range(n):
        pi, si, lzi, infoi = rep_site_update(lik, *(a[i : i + 1] for a in args), 1.0,
                                             relaxation=0.02)  # fmt: skip
        assert pi[0] == pytest.approx(p[i], rel=1e-12)
        assert si[0] == pytest.approx(s[i], rel=1e-12)
        assert infoi["b"][0] == pytest.approx(info["b"][i], rel=1e-12)
    assert np.any(info["b"] > 0)


def test_relaxation_goes_first_to_the_most_non_gaussian_site_and_shrinks_with_c():
    """The straddling cavity (most non-Gaussian tilted) relaxes first; b is nonincreasing in c."""
    lik = NoisyStep(0.05)
    y = np.ones(3)
    mu = np.array([3.0, -3.0, 0.0])  # confident-correct / confident-wrong / on the boundary
    s = np.ones(3)
    m = np.full(3, 5.0)
    b, _ = optimise_relaxation(lik, y, mu, s, m, 0.1)
    assert b[0] == 0.0 and b[1] == 0.0 and b[2] > 0.0
    bs = np.array([optimise_relaxation(lik, y, mu, s, m, c)[0] for c in (0.003, 0.01, 0.1, 1.0)])
    assert np.all(np.diff(bs, axis=0) <= 1e-9)
    np.testing.assert_array_equal(bs[-1], 0.0)


def test_invalid_arguments():
    lik = NoisyStep(0.1)
    one = np.ones(1)
    with pytest.raises(ValueError, match="power=1"):
        rep_site_update(lik, one, one, one, one, one, 0.8, relaxation=1.0)
    with pytest.raises(ValueError, match=">= 0"):
        make_rep_update(-1.0)
    assert "c=2" in make_rep_update(2.0).__name__


def _gp_problem(n=20, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, (n, 1))
    y = np.where(np.sin(X[:, 0]) + 0.3 * rng.standard_normal(n) > 0, 1.0, -1.0)
    y[:3] *= -1  # a few flipped labels
    K = RBF(1.0)(X) + 1e-8 * np.eye(n)
    return K, y


@pytest.mark.parametrize("schedule", ["parallel", "sequential"])
@pytest.mark.parametrize("lik", [NoisyStep(0.1), Probit()], ids=["step", "probit"])
def test_large_penalty_rep_equals_ep(lik, schedule):
    """(i) c -> inf: every b_i = 0 and REP equals EP to 1e-10 through the engine."""
    K, y = _gp_problem()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ep = expectation_propagation(K, y, lik, schedule=schedule, robust=False, tol=1e-9,
                                     max_iter=30)  # fmt: skip
        rep = expectation_propagation(K, y, lik, schedule=schedule, robust=False, tol=1e-9,
                                      max_iter=30, site_update=make_rep_update(1e12))  # fmt: skip
    np.testing.assert_array_equal(rep.site_info["b"], 0.0)
    assert rep.n_iter == ep.n_iter
    for a in ("site_precision", "site_shift", "mean", "var"):
        np.testing.assert_allclose(getattr(rep, a), getattr(ep, a), rtol=0, atol=1e-10)
    assert rep.log_Z == pytest.approx(ep.log_Z, abs=1e-10)


def test_rep_with_small_penalty_runs_and_reports_b():
    K, y = _gp_problem(seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        res = expectation_propagation(K, y, NoisyStep(0.1), site_update=make_rep_update(0.05),
                                      max_iter=300)  # fmt: skip
    b = res.site_info["b"]
    assert b.shape == y.shape and np.all(b >= 0)
    assert np.all(np.isfinite(res.mean)) and np.all(res.var > 0)


def test_as_printed_reading_adds_r_back_and_equals_divided_where_b_is_zero():
    lik = NoisyStep(0.2)
    y = np.array([-1.0, 1.0, -1.0])
    mu, s = np.array([2.0, 0.5, -0.3]), np.array([4.0, 1.0, 2.0])
    tau, nu = np.array([0.3, 0.2, -0.05]), np.array([-0.2, 0.1, 0.02])
    m = site_means(tau, nu, s)
    args = (lik, y, mu, s, tau, nu)
    div = rep_site_update(*args, relaxation=1e-3)
    prt = rep_site_update(*args, relaxation=1e-3, belief="as-printed")
    b = div[3]["b"]
    assert np.any(b > 0) and np.array_equal(b, prt[3]["b"])
    np.testing.assert_allclose(prt[0], div[0] + b, rtol=0, atol=1e-12)
    np.testing.assert_allclose(prt[1], div[1] + b * m, rtol=0, atol=1e-12)
    big = rep_site_update(*args, relaxation=1e8, belief="as-printed")
    ep = rep_site_update(*args, relaxation=1e8)
    np.testing.assert_array_equal(big[0], ep[0])
    with pytest.raises(ValueError, match="belief"):
        rep_site_update(*args, relaxation=1.0, belief="literal")
    with pytest.raises(ValueError, match="belief"):
        make_rep_update(1.0, belief="literal")


def test_penalty_scales_with_inputs_for_the_step_likelihood():
    """Posterior of w is scale-free for the step likelihood; b is a precision of f = x.w.

    So REP on inputs a X with penalty c equals REP on X with penalty c / a**2 (rep-toy
    relies on this to say that its c sweep covers every input scale).
    """
    from robustep.experiments.rep_toy import TOY_X, TOY_Y, run_method

    a = 10.0
    scaled = run_method(a * TOY_X, TOY_Y, 0.2, relaxation=20.0)
    unscaled = run_method(TOY_X, TOY_Y, 0.2, relaxation=20.0 / a**2)
    assert max(unscaled["b"]) > 0  # the check is about a case where REP relaxes
    np.testing.assert_allclose(scaled["mean"], unscaled["mean"], atol=1e-7)
    np.testing.assert_allclose(scaled["cov"], unscaled["cov"], atol=1e-7)
    np.testing.assert_allclose(np.asarray(scaled["b"]) * a**2, unscaled["b"], rtol=1e-6, atol=1e-12)


def test_printed_eq36_is_not_the_relaxed_kl():
    """The numbers quoted in docs/derivations/rep.md ("Which reading ... supports").

    Example: cavity N(2, 4), y = -1, eps = 0.2, old site mean -0.5. The relaxed KL (*)
    falls from 0.072 at b = 0 to 0.016 at b = 10, as a KL to a Gaussian must when the
    relaxed cavity narrows; eq. 36 evaluated term by term stays between 0.29 and 0.38.
    """
    lik = NoisyStep(0.2)
    h, lam, y, m = 2.0, 4.0, -1.0, -0.5
    bs = np.array([0.0, 1e-3, 1e-2, 0.1, 0.3, 1.0, 3.0, 10.0])
    ours = relaxed_kl_objective(lik, y, h, lam, m, bs, 0.0)
    printed = []
    for b in bs:
        mu_b, s_b = relaxed_cavity(h, lam, m, b)
        log_Z, mh, sh = (a[0] for a in lik.tilted_moments([y], [mu_b], [s_b]))
        e_log_t = expected_log_likelihood(lik, [y], [mu_b], [s_b])[0]
        v_b = 1.0 / (1.0 / sh - 1.0 / s_b)  # eq. 15 site relative to the relaxed cavity
        m_b = v_b * (mh / sh - mu_b / s_b)
        F = sh + mh**2  # eqs. 37-40
        terms = [
            e_log_t,
            (F - mh * m_b) / (2 * v_b),
            -0.5 * np.log(1 + (b + 1 / v_b) * lam),
            0.5 * np.log(b * lam + 1),
            -0.5 * b * (m**2 - 2 * m * mh + F),
            0.5 * (m - h) ** 2 / (lam + 1 / b) if b > 0 else 0.0,
            -log_Z,
        ]
        printed.append(sum(terms))
    assert ours[0] == pytest.approx(0.072, abs=1e-3) and ours[-1] == pytest.approx(0.016, abs=1e-3)
    assert 0.28 < min(printed) and max(printed) < 0.39
