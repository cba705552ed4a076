"""Accuracy of tilted moments against an independent numerical reference.

Reference construction (the acceptance criterion of the foundation issue):
substitute f = m + sqrt(v) x so that the cavity is N(x | 0, 1) whatever its width
(plain ``quad`` in f fails on narrow cavities), integrate x over [-40, 40] with
QUADPACK at relative tolerance 2e-14, splitting the range at the cavity mode (x = 0),
at the observation mode x_y = (y - m)/sqrt(v) and at x_y +- w 10^k (w = the likelihood
width in x units, k = -4..6) so that the multi-scale cusp of a heavy-tailed likelihood
is resolved, and shift the log-integrand by its maximum over a dense grid before
exponentiating.  The mean and the (centred) variance are computed in x.  The
reference is checked against an exact answer (the Voigt profile, Cauchy likelihood).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import integrate, optimize, special

from robustep.likelihoods import Gaussian, Logistic, NoisyStep, Probit, StudentT

TOL = 1e-6  # the acceptance threshold


# ----------------------------------------------------------------- reference
def reference_tilted(log_lik, m, v, scales=(), centres=(), extend=False):
    """(log Z, E[x], Var[x]) of exp(log_lik(m + sqrt(v) x)) N(x | 0, 1), x in [-40, 40].

    ``centres``: f-locations of likelihood features; ``scales``: their widths in f.
    ``extend``: widen the window to 40 cavity sds beyond every centre (for likelihoods
    that grow towards a centre, e.g. a step, which can pull the mass far from m).
    """
    sd = math.sqrt(v)
    lo, hi = -40.0, 40.0
    if extend:
        xs = [(c - m) / sd for c in centres]
        lo, hi = min([0.0, *xs]) - 40.0, max([0.0, *xs]) + 40.0
    # a ladder of breakpoints around the cavity mode: QUADPACK must not see only zeros
    # on a long first subinterval
    ladder = np.array([0.0, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0])
    pts = {float(p) for p in np.concatenate([ladder, -ladder]) if lo < p < hi}
    pts.add(0.0)
    grid = list(np.linspace(lo, hi, 4001))
    for c in centres:
        xc = (c - m) / sd
        if lo < xc < hi:
            pts.add(xc)
        grid.extend(np.clip(xc + np.linspace(-45.0, 45.0, 901), lo, hi))
        for w in scales:
            for k in range(-4, 7):
                for sgn in (-1.0, 1.0):
                    p = xc + sgn * (w / sd) * 10.0**k
                    if lo < p < hi:
                        pts.add(p)
                        grid.append(p)

    def logf(x):
        return -0.5 * x * x + log_lik(m + sd * x)

    if extend:  # the mode of a log-concave tilted density may lie far from both centres
        res = optimize.minimize_scalar(
            lambda x: min(-logf(x), 1e300),
            bounds=(lo, hi),
            method="bounded",
            options={"xatol": 1e-10},
        )
        grid.extend(np.clip(res.x + np.linspace(-45.0, 45.0, 901), lo, hi))
        pts.update(
            float(p) for p in np.concatenate([res.x + ladder, res.x - ladder]) if lo < p < hi
        )
    shift = max(logf(x) for x in grid)
    kw = dict(points=sorted(pts), epsabs=0.0, epsrel=2e-14, limit=5000)

    def f0(x):
        return math.exp(logf(x) - shift)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", integrate.IntegrationWarning)
        z = integrate.quad(f0, lo, hi, **kw)[0]
        mu = integrate.quad(lambda x: x * f0(x), lo, hi, **kw)[0] / z
        var = integrate.quad(lambda x: (x - mu) ** 2 * f0(x), lo, hi, **kw)[0] / z
    return math.log(z) + shift - 0.5 * math.log(2.0 * math.pi), mu, var


def student_t_reference(y, m, v, eta, df, scale):
    a = 0.5 * (df + 1.0)
    c = df * scale * scale
    log_c = math.lgamma(a) - math.lgamma(0.5 * df) - 0.5 * math.log(df * math.pi) - math.log(scale)

    def log_lik(f):
        r = y - f
        return eta * (log_c - a * math.log1p(r * r / c))

    return reference_tilted(log_lik, m, v, scales=(math.sqrt(c),), centres=(y,))


def errors(lik, y, m, v, eta, refs):
    """Relative error of Z, mean error in tilted sds, relative error of the variance."""
    log_Z, mean, var = lik.tilted_moments(y, m, v, eta)
    assert np.all(np.isfinite(log_Z) & np.isfinite(mean) & np.isfinite(var))
    assert np.all(var > 0)
    r_logz, r_mu, r_var = (np.array(t) for t in zip(*refs, strict=True))
    sd = np.sqrt(v)
    e_z = np.abs(np.expm1(log_Z - r_logz))
    e_m = np.abs((mean - m) / sd - r_mu) / np.sqrt(r_var)
    e_v = np.abs(var / v / r_var - 1.0)
    return e_z, e_m, e_v


def random_student_t_groups(rng, n_groups, sites_per_group):
    """Random (df, scale, eta) groups, each with random sites spanning the issue's ranges."""
    for _ in range(n_groups):
        df = float(np.exp(rng.uniform(np.log(0.5), np.log(100.0))))
        scale = float(np.exp(rng.uniform(np.log(0.05), np.log(5.0))))
        eta = float(rng.choice([0.1, 0.5, 0.8, 1.0]))
        n = sites_per_group
        v = 10.0 ** rng.uniform(-6, 6, n)
        d = rng.choice([-1.0, 1.0], n) * 10.0 ** rng.uniform(-3, 3, n)
        y = rng.normal(size=n) * 3
        yield df, scale, eta, y, y - d, v


def check_student_t_accuracy(n_groups, sites_per_group, seed):
    rng = np.random.default_rng(seed)
    worst = np.zeros(3)
    for df, scale, eta, y, m, v in random_student_t_groups(rng, n_groups, sites_per_group):
        refs = [student_t_reference(*args, eta, df, scale) for args in zip(y, m, v, strict=True)]
        errs = errors(StudentT(df, scale), y, m, v, eta, refs)
        worst = np.maximum(worst, [e.max() for e in errs])
    assert np.all(worst <= TOL), f"worst errors (Z, mean/sd, var) = {worst}"
    return worst


# ------------------------------------------------------------- Student-t
def test_reference_matches_exact_voigt_profile():
    # Cauchy (df = 1) likelihood, power 1: Z is the Voigt profile at y - m.
    rng = np.random.default_rng(3)
    for _ in range(30):
        v = 10.0 ** rng.uniform(-6, 6)
        d = 10.0 ** rng.uniform(-3, 3)
        s = 10.0 ** rng.uniform(-1, 0.5)
        log_Z, _, _ = student_t_reference(d, 0.0, v, 1.0, 1.0, s)
        exact = special.voigt_profile(d, math.sqrt(v), s)
        assert abs(math.expm1(log_Z - math.log(exact))) < 1e-10


def test_student_t_cauchy_matches_voigt_profile():
    rng = np.random.default_rng(4)
    v = 10.0 ** rng.uniform(-6, 6, 200)
    d = 10.0 ** rng.uniform(-3, 3, 200)
    log_Z, _, _ = StudentT(1.0, 0.3).tilted_moments(d, np.zeros(200), v)
    exact = special.voigt_profile(d, np.sqrt(v), 0.3)
    assert np.max(np.abs(np.expm1(log_Z - np.log(exact)))) < 1e-8


def test_student_t_accuracy_fast():
    """A few hundred random cases (12 (df, scale, power) groups x 25 sites)."""
    check_student_t_accuracy(n_groups=12, sites_per_group=25, seed=0)


@pytest.mark.slow
def test_student_t_accuracy_thousands_of_cases():
    """4000 random cases spanning the issue's whole range."""
    worst = check_student_t_accuracy(n_groups=80, sites_per_group=50, seed=2026)
    print("\nStudent-t worst errors over 4000 cases (Z, mean/sd, var):", worst)


def test_student_t_hand_picked_extremes():
    """Corners: tiny/huge cavities, far observations, extreme df and powers."""
    cases = []
    for v in (1e-6, 1e-2, 1.0, 1e2, 1e6):
        for d in (0.0, 1e-3, 1.0, 30.0, 1e3):
            cases.append((v, d))
    v = np.array([c[0] for c in cases])
    d = np.array([c[1] for c in cases])
    y = np.full(v.size, 0.3)
    m = y - d
    for df in (0.5, 100.0):
        for scale in (0.05, 5.0):
            for eta in (0.1, 1.0):
                refs = [
                    student_t_reference(*args, eta, df, scale) for args in zip(y, m, v, strict=True)
                ]
                errs = errors(StudentT(df, scale), y, m, v, eta, refs)
                assert max(e.max() for e in errs) <= TOL, (df, scale, eta, [e.max() for e in errs])


# ------------------------------------------------- closed forms and quadrature
def _log_probit(y, eta):
    return lambda f: eta * float(special.log_ndtr(y * f))


def _log_logistic(y, eta):
    return lambda f: -eta * float(np.logaddexp(0.0, -y * f))


def _sites(rng, n, v_range=(-2, 1)):
    y = rng.choice([-1.0, 1.0], n)
    m = rng.normal(size=n) * 2
    v = 10.0 ** rng.uniform(*v_range, n)
    return y, m, v


@pytest.mark.parametrize("eta", [0.1, 0.5, 0.8, 1.0])
def test_gaussian_closed_form_against_reference(eta):
    rng = np.random.default_rng(5)
    lik = Gaussian(0.3)
    y, m, v = rng.normal(size=20), rng.normal(size=20) * 3, 10.0 ** rng.uniform(-6, 6, 20)

    def log_lik(yy):
        return lambda f: -0.5 * eta * (math.log(2 * math.pi * 0.3) + (yy - f) ** 2 / 0.3)

    refs = [
        reference_tilted(log_lik(yy), mm, vv, scales=(math.sqrt(0.3 / eta),), centres=(yy,))
        for yy, mm, vv in zip(y, m, v, strict=True)
    ]
    errs = errors(lik, y, m, v, eta, refs)
    assert max(e.max() for e in errs) < 1e-9


@pytest.mark.parametrize("eta", [0.1, 0.5, 1.0])
@pytest.mark.parametrize("name", ["probit", "logistic"])
def test_classification_quadrature_against_reference(name, eta):
    rng = np.random.default_rng(6)
    lik, log_lik = (Probit(), _log_probit) if name == "probit" else (Logistic(), _log_logistic)
    y, m, v = _sites(rng, 40, v_range=(-6, 6))
    m = m * 10.0 ** rng.uniform(-1, 2, 40)
    refs = [
        reference_tilted(log_lik(yy, eta), mm, vv, scales=(1.0,), centres=(0.0,), extend=True)
        for yy, mm, vv in zip(y, m, v, strict=True)
    ]
    errs = errors(lik, y, m, v, eta, refs)
    assert max(e.max() for e in errs) < 1e-8


@pytest.mark.parametrize("eta", [1e-3, 0.5, 1.0])
@pytest.mark.parametrize("name", ["probit", "logistic"])
def test_classification_quadrature_far_wide_cavities(name, eta):
    # wide cavities far from the switch: on the wrong side (mass piled against the switch,
    # or a bump a few of its widths from it) and far on the label's side (a bump narrow
    # against its distance from the switch)
    lik, log_lik = (Probit(), _log_probit) if name == "probit" else (Logistic(), _log_logistic)
    v = 10.0 ** np.array([4.0, 5.0, 6.0, 6.0, 8.0, 8.0, 10.0, 10.0, 12.0])
    c = np.array([-10.0, -30.0, -10.0, -100.0, -10.0, 5.0, 3.0, 7.0, 3.0])  # m in cavity sds
    m = c * np.sqrt(v)
    y = np.ones_like(v)
    refs = [
        reference_tilted(log_lik(1.0, eta), mm, vv, scales=(1.0,), centres=(0.0,), extend=True)
        for mm, vv in zip(m, v, strict=True)
    ]
    errs = errors(lik, y, m, v, eta, refs)
    assert max(e.max() for e in errs) < TOL, [e.max() for e in errs]


def test_probit_closed_form_extreme_cavities():
    # closed form at power 1 over the whole range, incl. z << 0 (log_ndtr, continued fraction)
    rng = np.random.default_rng(7)
    y, m, v = _sites(rng, 40, v_range=(-6, 6))
    m = m * 10.0 ** rng.uniform(-1, 3, 40)
    lik = Probit()
    refs = [
        reference_tilted(_log_probit(yy, 1.0), mm, vv, scales=(1.0,), centres=(0.0,), extend=True)
        for yy, mm, vv in zip(y, m, v, strict=True)
    ]
    errs = errors(lik, y, m, v, 1.0, refs)
    assert max(e.max() for e in errs) < 1e-8


@pytest.mark.parametrize("eps", [0.0, 0.01, 0.2])
@pytest.mark.parametrize("eta", [0.1, 0.5, 1.0])
def test_noisy_step_closed_form_against_reference(eps, eta):
    rng = np.random.default_rng(8)
    y, m, v = _sites(rng, 25, v_range=(-4, 4))
    m[:5] = -y[:5] * 10.0 ** rng.uniform(0, 2, 5) * np.sqrt(v[:5])  # deep on the wrong side
    lik = NoisyStep(eps)
    lo = eta * math.log(eps) if eps > 0 else -math.inf
    hi = eta * math.log1p(-eps)

    def ref(yy, mm, vv):
        # the step sits at f = 0: split there (x0 = -m/sd) and integrate both halves exactly
        return reference_tilted(
            lambda f: hi if yy * f > 0 else lo, mm, vv, centres=(0.0,), extend=True
        )

    refs = [ref(*args) for args in zip(y, m, v, strict=True)]
    errs = errors(lik, y, m, v, eta, refs)
    assert max(e.max() for e in errs) < 1e-8


def test_log_ndtr_difference_far_tail():
    from robustep.likelihoods.probit import log_ndtr_difference

    # moderate arguments: the plain difference is exact enough
    z0 = np.array([-30.0, -3.0, 0.5, 4.0])
    d = np.array([0.7, -1.1, -2.0, 0.3])
    expect = special.log_ndtr(z0 + d) - special.log_ndtr(z0)
    assert np.max(np.abs(log_ndtr_difference(z0, d) - expect)) < 1e-12
    # z0 = -1e6: log Phi ~ -5e11 is rounded to ~6e-5; the difference must keep ~1e-12.
    # Asymptotic series log Phi(z) = -z^2/2 - log(-z) - log sqrt(2 pi) + O(z^-2), z^-2 = 1e-12
    z0 = -1e6
    d = np.array([-3e-5, 1e-6, 2e-3, 0.5])
    z = z0 + d  # rounded to ~1e-10: a difference of log Phi at z0 + d and z0 loses d's digits
    expect = -0.5 * d * (2.0 * z0 + d) - np.log1p(d / z0)
    got = log_ndtr_difference(z0, d)
    assert np.max(np.abs(got - expect)) < 1e-11
    assert np.max(np.abs((special.log_ndtr(z) - special.log_ndtr(z0)) - expect)) > 1e-6


def test_log_concave_level_interval():
    from robustep.quadrature import log_concave_level_interval

    # psi(g) = -(g - m)^2 / (2 v) - g^4 / 4: strongly concave with psi'' <= -1 / v, mode by Newton
    m = np.array([3.0, -40.0, 0.0])
    v = np.array([2.0, 1e4, 0.5])
    depth = 45.0

    def psi(g, mm, vv):
        return -0.5 * (g - mm) ** 2 / vv - 0.25 * g**4

    modes = np.array([
        optimize.brentq(lambda g, mm=mm, vv=vv: -(g - mm) / vv - g**3, -100.0, 100.0)
        for mm, vv in zip(m, v, strict=True)
    ])  # fmt: skip
    lo, hi = log_concave_level_interval(
        lambda g, g0: psi(g, m, v) - psi(g0, m, v),
        lambda g: -(g - m) / v - g**3,
        modes,
        v,
        depth,
    )
    for k in range(3):
        args = (m[k], v[k], psi(modes[k], m[k], v[k]) - depth)

        def h(g, mm, vv, target):
            return psi(g, mm, vv) - target

        r_lo = optimize.brentq(h, modes[k] - 100.0, modes[k], args=args, xtol=1e-14)
        r_hi = optimize.brentq(h, modes[k], modes[k] + 100.0, args=args, xtol=1e-14)
        # from outside (up to rounding), to a relative 1e-6 of the distance to the mode
        slack = 1e-10 * (r_hi - r_lo)
        assert r_lo - 1e-5 * (modes[k] - r_lo) <= lo[k] <= r_lo + slack
        assert r_hi - slack <= hi[k] <= r_hi + 1e-5 * (r_hi - modes[k])
