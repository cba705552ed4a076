"""The Laplace (double-exponential) likelihood: closed forms against numerical integration."""

import numpy as np
import pytest
from scipy import integrate, optimize, stats

import robustep
from robustep.ep import expectation_propagation
from robustep.likelihoods import Laplace

# cavities (y - m, v): near, far (200 scales away), narrow (1e-4) and wide (1e4)
_CAVITIES = [(d, v) for d in (0.0, 0.3, -2.0, 15.0, -200.0) for v in (1e-4, 0.5, 30.0, 1e4)]


def _tilted_by_quadrature(lik, y, m, v, eta):
    """(Z / Z_closed, mean, var) of p(y|f)^eta N(f|m, v) by scipy.integrate.quad in u = f - y.

    The integrand is divided by the closed-form Z so that it is O(1) (the first value is
    then 1 when the closed-form log Z is right); each side of the kink u = 0 is a truncated
    Gaussian, integrated separately around its mode.
    """
    b = lik.scale
    a = eta / b
    mu, s = m - y, np.sqrt(v)
    log_Z = lik.tilted_moments([y], [m], [v], eta)[0][0]

    def dens(u):
        return np.exp(eta * lik.log_prob([y], [y + u])[0] + stats.norm.logpdf(u, mu, s) - log_Z)

    pieces = []
    mode_p, mode_n = max(0.0, mu - a * v), min(0.0, mu + a * v)
    for lo, hi, mode in (
        (max(0.0, mode_p - 40 * s), mode_p + 40 * s, mode_p),
        (mode_n - 40 * s, min(0.0, mode_n + 40 * s), mode_n),
    ):
        pts = [mode] if lo < mode < hi else None
        pieces.append((lo, hi, pts))

    def moment(g):
        return sum(
            integrate.quad(lambda u: g(u) * dens(u), lo, hi, points=pts, limit=400,
                           epsabs=0, epsrel=1e-11)[0]
            for lo, hi, pts in pieces
        )  # fmt: skip

    Z = moment(lambda u: 1.0)
    e_u = moment(lambda u: u) / Z
    var = moment(lambda u: (u - e_u) ** 2) / Z
    return Z, y + e_u, var


@pytest.mark.parametrize("eta", [0.5, 1.0])
def test_tilted_moments_against_quadrature(eta):
    lik = Laplace(scale=0.7)
    y = 1.3
    for d, v in _CAVITIES:
        m = y - d
        _, mean, var = lik.tilted_moments([y], [m], [v], eta)
        Z, mean_q, var_q = _tilted_by_quadrature(lik, y, m, v, eta)
        assert Z == pytest.approx(1.0, rel=1e-8), (d, v)
        assert mean[0] == pytest.approx(mean_q, rel=1e-8, abs=1e-9 * np.sqrt(v)), (d, v)
        assert var[0] == pytest.approx(var_q, rel=1e-7), (d, v)


def test_tilted_moments_are_finite_in_extreme_cavities():
    lik = Laplace(scale=0.05)
    y = np.zeros(6)
    m = np.array([0.0, 1e4, -1e4, 50.0, -3.0, 1e6])
    v = np.array([1e-12, 1e8, 1e-6, 1e6, 1e10, 1.0])
    for eta in (0.5, 1.0):
        log_Z, mean, var = lik.tilted_moments(y, m, v, eta)
        assert np.all(np.isfinite(log_Z) & np.isfinite(mean) & (var > 0))
    # a cavity far from y with a small variance: the tilted is the cavity shifted by a v
    log_Z, mean, var = lik.tilted_moments([0.0], [50.0], [1e-2], 1.0)
    a = 1.0 / 0.05
    assert mean[0] == pytest.approx(50.0 - a * 1e-2, rel=1e-12)
    assert var[0] == pytest.approx(1e-2, rel=1e-10)
    assert log_Z[0] == pytest.approx(-np.log(0.1) - a * 50.0 + 0.5 * a * a * 1e-2, rel=1e-12)


def test_tilted_moment_identities():
    # mean = m + v d log Z / dm and var = v + v^2 d2 log Z / dm2 (finite differences)
    lik = Laplace(scale=0.4)
    y, v, h = 0.5, 0.8, 1e-4
    for eta in (0.5, 1.0):
        for m in (-1.0, 0.2, 0.5, 3.0):
            lz = [lik.tilted_moments([y], [m + k * h], [v], eta)[0][0] for k in (-1, 0, 1)]
            _, mean, var = lik.tilted_moments([y], [m], [v], eta)
            d1 = (lz[2] - lz[0]) / (2 * h)
            d2 = (lz[2] - 2 * lz[1] + lz[0]) / h**2
            assert mean[0] == pytest.approx(m + v * d1, abs=1e-7)
            assert var[0] == pytest.approx(v + v * v * d2, abs=1e-5)


def test_tilted_log_Z_gradient_against_finite_differences():
    y = np.array([0.0, 1.0, -3.0, 40.0])
    m = np.array([0.1, -0.5, 2.0, 0.0])
    v = np.array([0.3, 2.0, 1e-3, 50.0])
    h = 1e-5
    for eta in (0.5, 1.0):
        lik = Laplace(scale=0.6)
        g = lik.tilted_log_Z_gradient(y, m, v, eta)
        assert g.shape == (4, 1)
        up = lik.with_log_params([np.log(0.6) + h]).tilted_moments(y, m, v, eta)[0]
        dn = lik.with_log_params([np.log(0.6) - h]).tilted_moments(y, m, v, eta)[0]
        np.testing.assert_allclose(g[:, 0], (up - dn) / (2 * h), rtol=1e-6, atol=1e-7)


def test_pointwise_log_prob_and_derivatives():
    lik = Laplace(scale=0.8)
    y = np.array([0.0, 1.0, -2.0])
    f = np.array([0.5, 3.0, -2.5])
    np.testing.assert_allclose(lik.log_prob(y, f), stats.laplace.logpdf(y, f, 0.8), rtol=1e-14)
    logp, d1, d2, d3 = lik.log_prob_derivatives(y, f)
    h = 1e-6
    fd = (lik.log_prob(y, f + h) - lik.log_prob(y, f - h)) / (2 * h)
    np.testing.assert_allclose(d1, fd, rtol=1e-8)
    assert np.all(d2 == 0) and np.all(d3 == 0)
    # at the kink the first derivative is the subgradient 0
    assert lik.log_prob_derivatives([1.0], [1.0])[1][0] == 0.0
    g = lik.log_prob_parameter_gradient(y, f)
    up = lik.with_log_params([np.log(0.8) + h]).log_prob(y, f)
    dn = lik.with_log_params([np.log(0.8) - h]).log_prob(y, f)
    np.testing.assert_allclose(g[:, 0], (up - dn) / (2 * h), rtol=1e-7)


def test_parameters_and_validation():
    lik = Laplace(scale=2.0)
    assert Laplace.hyperparameter_names == ("scale",)
    np.testing.assert_allclose(lik.get_log_params(), [np.log(2.0)])
    assert lik.with_log_params([0.0]).scale == 1.0 and lik.scale == 2.0
    assert robustep.likelihoods.Laplace is Laplace
    for bad in (0.0, -1.0, np.nan, np.inf):
        with pytest.raises(ValueError, match="scale"):
            Laplace(scale=bad)
    with pytest.raises(ValueError, match="power"):
        lik.tilted_moments([0.0], [0.0], [1.0], power=1.5)


# ---------------------------------------------------------------------- predictive
def _convolved(fun, y, m, v, b):
    """int fun(y - f) N(f | m, v) df by quadrature (fun a Laplace(0, b) cdf/sf/pdf)."""
    s = np.sqrt(v)

    def integrand(f):
        return fun(y - f, 0.0, b) * stats.norm.pdf(f, m, s)

    lo, hi = m - 40 * s, m + 40 * s
    pts = [y] if lo < y < hi else None
    return integrate.quad(integrand, lo, hi, points=pts, limit=400, epsabs=0, epsrel=1e-12)[0]


@pytest.mark.parametrize(("y", "m", "v"), [(0.3, 0.0, 0.5), (4.0, 0.0, 0.2), (-6.0, 1.0, 2.0),
                                           (0.0, 0.0, 1e-3), (2.0, -1.0, 9.0)])  # fmt: skip
def test_predictive_against_quadrature(y, m, v):
    b = 0.6
    lik = Laplace(scale=b)
    F = lik.predictive_cdf([y], [m], [v])[0]
    G = lik.predictive_cdf([y], [m], [v], upper=True)[0]
    assert F == pytest.approx(_convolved(stats.laplace.cdf, y, m, v, b), rel=1e-9)
    assert G == pytest.approx(_convolved(stats.laplace.sf, y, m, v, b), rel=1e-9)
    assert F + G == pytest.approx(1.0, rel=1e-13)
    dens = np.exp(lik.predictive_log_density([y], [m], [v])[0])
    assert dens == pytest.approx(_convolved(stats.laplace.pdf, y, m, v, b), rel=1e-9)
    F2, p2 = lik.predictive_cdf_and_density([y], [m], [v])
    assert F2[0] == F and p2[0] == pytest.approx(dens, rel=1e-14)
    # the predictive density is the tilted normaliser at power 1
    assert np.log(dens) == pytest.approx(lik.tilted_moments([y], [m], [v])[0][0], rel=1e-13)


def test_predictive_tails_keep_relative_accuracy():
    lik = Laplace(scale=0.5)
    # 30 noise scales out: P ~ 1e-7; the tail is the Laplace's exponential one
    for y in (15.0, -15.0):
        tail = lik.predictive_cdf([y], [0.0], [0.1], upper=y > 0)[0]
        assert tail == pytest.approx(_convolved(stats.laplace.sf if y > 0 else stats.laplace.cdf,
                                                y, 0.0, 0.1, 0.5), rel=1e-8)  # fmt: skip
    # 300 noise scales out (P ~ 1e-130): exp(-a |mu| + a^2 v / 2) / 2 with a = 1 / b
    far = lik.predictive_cdf([-150.0], [0.0], [1.0])[0]
    assert far == pytest.approx(0.5 * np.exp(-150.0 / 0.5 + 0.5 / 0.25), rel=1e-10)


def test_predictive_quantiles_round_trip_and_limits():
    b = 0.7
    lik = Laplace(scale=b)
    q = np.array([1e-4, 0.025, 0.3, 0.5, 0.9, 0.9999])
    m = np.array([0.0, 2.0, -5.0])
    v = np.array([0.4, 1e-2, 3.0])
    Q = lik.predictive_quantiles(q, m, v)
    assert Q.shape == (3, q.size)
    for k, qk in enumerate(q):
        np.testing.assert_allclose(lik.predictive_cdf(Q[:, k], m, v), qk, rtol=1e-8)
    # brentq on the quadrature CDF agrees
    x = optimize.brentq(lambda t: _convolved(stats.laplace.cdf, t, 2.0, 1e-2, b) - 0.9, -10, 10,
                        xtol=1e-13)  # fmt: skip
    assert Q[1, 4] == pytest.approx(x, abs=1e-8)
    # no latent uncertainty: the Laplace quantiles; negligible noise: the Gaussian ones
    Q0 = lik.predictive_quantiles(q, m, 1e-14)
    np.testing.assert_allclose(Q0, stats.laplace.ppf(q[None, :], m[:, None], b), atol=1e-6)
    Qg = Laplace(scale=1e-9).predictive_quantiles(q, m, v)
    gauss = stats.norm.ppf(q[None, :], m[:, None], np.sqrt(v)[:, None])
    np.testing.assert_allclose(Qg, gauss, atol=1e-7)
    assert np.isneginf(lik.predictive_quantiles([0.0], m, v)).all()
    assert np.isposinf(lik.predictive_quantiles([1.0], m, v)).all()


# ---------------------------------------------------------------------------- EP
def _dense_log_evidence(K, y, lik):
    """log int p(y_1 | f_1) p(y_2 | f_2) N(f | 0, K) df over f in R^2.

    The inner integral over f_2 given f_1 (f_2 | f_1 ~ N(c f_1, w)) is the Laplace
    predictive density (checked against quadrature above); the outer one is
    scipy.integrate.quad with a break point at the kink f_1 = y_1.
    """
    c = K[0, 1] / K[0, 0]
    w = K[1, 1] - c * K[0, 1]
    s1 = np.sqrt(K[0, 0])

    def integrand(f1):
        inner = lik.predictive_log_density([y[1]], [c * f1], [w])[0]
        return np.exp(lik.log_prob([y[0]], [f1])[0] + inner) * stats.norm.pdf(f1, 0.0, s1)

    lo, hi = -15 * s1, 15 * s1
    pts = [y[0]] if lo < y[0] < hi else None
    Z = integrate.quad(integrand, lo, hi, points=pts, limit=400, epsabs=0, epsrel=1e-12)[0]
    return np.log(Z)


@pytest.mark.parametrize(
    ("K", "y", "b"),
    [
        (np.array([[1.0, 0.6], [0.6, 1.0]]), np.array([0.3, 2.5]), 0.5),
        (np.array([[2.0, 1.5], [1.5, 2.0]]), np.array([-1.0, 4.0]), 0.3),
    ],
)
def test_ep_log_evidence_against_two_dimensional_quadrature(K, y, b):
    lik = Laplace(scale=b)
    res = expectation_propagation(K, y, lik, tol=1e-10, max_iter=500)
    assert res.converged
    exact = _dense_log_evidence(K, y, lik)
    # EP is close for this log-concave likelihood (measured 2e-4 and 6e-4 relative)
    assert res.log_Z == pytest.approx(exact, rel=1e-3)
    seq = expectation_propagation(K, y, lik, tol=1e-10, max_iter=500, schedule="sequential")
    np.testing.assert_allclose(seq.mean, res.mean, atol=1e-9)
    assert seq.log_Z == pytest.approx(res.log_Z, abs=1e-9)


def test_ep_regression_with_outliers_is_robust():
    rng = np.random.default_rng(3)
    x = np.linspace(0.0, 5.0, 40)
    truth = np.sin(x)
    y = truth + 0.1 * rng.standard_normal(40)
    y[[8, 25]] += np.array([6.0, -5.0])  # two gross outliers
    K = np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2) + 1e-8 * np.eye(40)
    res = expectation_propagation(K, y, Laplace(scale=0.1), tol=1e-8)
    assert res.converged
    gauss = expectation_propagation(K, y, robustep.likelihoods.Gaussian(0.02), tol=1e-8)
    err_laplace = np.abs(res.mean - truth)[[8, 25]].max()
    err_gauss = np.abs(gauss.mean - truth)[[8, 25]].max()
    # the Laplace fit stays near the truth at the outliers; the Gaussian one is dragged
    assert err_laplace < 0.3 and err_gauss > 3 * err_laplace


def test_power_ep_double_loop_and_loo_accept_the_likelihood():
    from robustep import diagnostics

    rng = np.random.default_rng(3)
    x = np.linspace(0.0, 5.0, 30)
    y = np.sin(x) + 0.1 * rng.standard_normal(30)
    y[5] += 5.0
    K = np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2) + 1e-8 * np.eye(30)
    lik = Laplace(scale=0.1)
    assert expectation_propagation(K, y, lik, power=0.5, tol=1e-8).converged
    res = expectation_propagation(K, y, lik, tol=1e-8)
    dl = expectation_propagation(K, y, lik, tol=1e-8, double_loop=True)
    assert dl.converged and dl.log_Z == pytest.approx(res.log_Z, abs=1e-7)
    loo = diagnostics.loo_from_sites(lik, y, res.mean, res.var, res.site_precision,
                                     res.site_shift)  # fmt: skip
    np.testing.assert_allclose(
        loo.log_predictive,
        lik.predictive_log_density(y, loo.cavity_mean, loo.cavity_var),
        rtol=1e-10,
    )
    assert loo.log_predictive[5] < np.min(np.delete(loo.log_predictive, 5))  # the outlier
