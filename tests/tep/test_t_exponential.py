"""q-algebra and the Student-t as a t-exponential family (Futami et al. 2017, eqs. 1-28, 40)."""

import numpy as np
import pytest
from scipy import integrate
from scipy.stats import multivariate_t
from scipy.stats import t as student_t

from robustep.families import t_exponential as te

Q = [0.5, 1.0, 1.3, 1.0 + 2.0 / 7.0]


@pytest.mark.parametrize("q", Q)
def test_q_product_and_division_rules(q):
    rng = np.random.default_rng(0)
    x, y = rng.uniform(0.3, 1.5, size=(2, 50))
    prod = te.q_product(x, y, q)
    ok = prod > 0
    # eq. (24): ln_q(x (x)_q y) = ln_q x + ln_q y (where the product is in its domain)
    np.testing.assert_allclose(te.log_t(prod[ok], q), te.log_t(x[ok], q) + te.log_t(y[ok], q))
    div = te.q_division(x, y, q)
    ok = div > 0
    # eq. (26): ln_q(x (/)_q y) = ln_q x - ln_q y
    np.testing.assert_allclose(te.log_t(div[ok], q), te.log_t(x[ok], q) - te.log_t(y[ok], q))
    # q-division inverts the q-product
    np.testing.assert_allclose(te.q_division(prod, y, q)[prod > 0], x[prod > 0])
    a, b = rng.uniform(-0.5, 0.5, size=(2, 50))
    # eqs. (25), (27): exp_q(a) (x)_q exp_q(b) = exp_q(a + b), and the same for (/)_q, a - b
    np.testing.assert_allclose(te.q_product(te.exp_t(a, q), te.exp_t(b, q), q), te.exp_t(a + b, q))
    np.testing.assert_allclose(te.q_division(te.exp_t(a, q), te.exp_t(b, q), q), te.exp_t(a - b, q))


@pytest.mark.parametrize("t", [0.7, 1.0, 1.25])
def test_pseudo_additivity_and_inverse(t):
    x, y = np.linspace(-0.6, 0.6, 7), np.linspace(0.5, -0.4, 7)
    # eq. (23): exp_t(x) exp_t(y) = exp_t(x + y + (1 - t) x y)
    np.testing.assert_allclose(
        te.exp_t(x, t) * te.exp_t(y, t), te.exp_t(x + y + (1 - t) * x * y, t)
    )
    np.testing.assert_allclose(te.log_t(te.exp_t(x, t), t), x)
    assert (te.exp_t(x, t) * te.exp_t(y, t) != te.exp_t(x + y, t)).any() or t == 1  # eq. (19)


def test_domain_rules():
    q = 1.5
    assert te.q_product(-1.0, 2.0, q) == 0.0
    assert te.q_product(0.0, 2.0, q) == 0.0
    # x^{1-q} + y^{1-q} - 1 <= 0 for large x, y when q > 1 -> 0
    assert te.q_product(100.0, 100.0, q) == 0.0
    assert te.q_division(1.0, 0.01, q) == 0.0  # 1 - 10 + 1 < 0
    assert te.exp_t(10.0, 1.5) == np.inf  # beyond the pole 1 + (1 - t) x <= 0
    assert te.exp_t(-10.0, 0.5) == 0.0
    with pytest.raises(ValueError):
        te.log_t(-1.0, 1.2)
    with pytest.raises(ValueError):
        te.t_of_df(-1.0, 2)


def _rand_t(k, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(k, k))
    return rng.normal(size=k), a @ a.T + 0.5 * np.eye(k)


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("df", [1.5, 4.0, 30.0])
def test_student_t_as_t_exponential_family(k, df):
    mu, sigma = _rand_t(k)
    t = te.t_of_df(df, k)
    assert np.isclose(-(df + k) / 2, 1 / (1 - t))
    th1, th2 = te.to_natural(mu, sigma, df)
    mu2, sigma2 = te.from_natural(th1, th2, df)
    np.testing.assert_allclose(mu2, mu, atol=1e-12)
    np.testing.assert_allclose(sigma2, sigma, atol=1e-12)
    g = te.log_partition(th1, th2, df)
    x = np.random.default_rng(1).normal(size=(5, k)) * 2
    lhs = te.exp_t(x @ th1 + np.einsum("ni,ij,nj->n", x, th2, x) - g, t)  # eq. (10)
    rhs = multivariate_t(loc=mu, shape=sigma, df=df).pdf(x)
    np.testing.assert_allclose(lhs, rhs, rtol=1e-10)
    np.testing.assert_allclose(np.exp(te.student_t_logpdf(x, mu, sigma, df)), rhs, rtol=1e-10)


def test_gradient_of_log_partition_is_escort_moment():
    """eq. (3): grad g_t(theta) = E_escort[Phi]; escort = St(mu, df Sigma/(df+2), df+2)."""
    mu, sigma = _rand_t(2, seed=3)
    df = 5.0
    th1, th2 = te.to_natural(mu, sigma, df)
    eta1, eta2 = te.expected_sufficient_statistics(mu, sigma)
    h = 1e-6
    for i in range(2):
        e = np.zeros(2)
        e[i] = h
        fd = (te.log_partition(th1 + e, th2, df) - te.log_partition(th1 - e, th2, df)) / (2 * h)
        assert np.isclose(fd, eta1[i], rtol=1e-6)
    E = np.array([[0.3, 0.1], [0.1, -0.2]]) * np.abs(th2).max() * 1e-4
    fd = (te.log_partition(th1, th2 + E, df) - te.log_partition(th1, th2 - E, df)) / 2
    assert np.isclose(fd, (eta2 * E).sum(), rtol=1e-5)
    m, s, n = te.escort_parameters(mu, sigma, df)
    np.testing.assert_allclose(s * n / (n - 2), sigma)  # escort covariance = Sigma
    np.testing.assert_allclose(te.from_expected_sufficient_statistics(eta1, eta2)[1], sigma)


def test_escort_moments_numerically_1d():
    mu, s2, df = 0.4, 1.7, 3.0
    t = te.t_of_df(df, 1)
    dens = lambda x: student_t.pdf(x, df, loc=mu, scale=np.sqrt(s2)) ** t  # noqa: E731
    z = integrate.quad(dens, -np.inf, np.inf)[0]
    m1 = integrate.quad(lambda x: x * dens(x), -np.inf, np.inf)[0] / z
    m2 = integrate.quad(lambda x: x * x * dens(x), -np.inf, np.inf)[0] / z
    assert np.isclose(m1, mu, atol=1e-8) and np.isclose(m2 - m1**2, s2, rtol=1e-7)


@pytest.mark.parametrize("g_shift", [0.0, -0.3, 0.2])
def test_theorem2_integral_1d(g_shift):
    """eq. (40): int exp_t(<Phi,theta> - g) = exp_t((g_t - g)/Psi)^{(3-t)/2} for k = 1."""
    mu, sigma, df = np.array([0.3]), np.array([[0.8]]), 4.0
    t = te.t_of_df(df, 1)
    th1, th2 = te.to_natural(mu, sigma, df)
    g = te.log_partition(th1, th2, df) + g_shift
    f = lambda x: te.exp_t(th1[0] * x + th2[0, 0] * x * x - g, t)  # noqa: E731
    num = integrate.quad(f, -np.inf, np.inf)[0]
    assert np.isclose(te.log_integral_exp_t(th1, th2, g, df), np.log(num), rtol=1e-8)
    psi = np.exp(te.log_psi(sigma, df))
    paper = te.exp_t((te.log_partition(th1, th2, df) - g) / psi, t) ** ((3 - t) / 2)
    assert np.isclose(paper, num, rtol=1e-8)


def test_t_to_one_limit():
    mu, sigma = _rand_t(2, seed=5)
    th1, th2 = te.to_natural(mu, sigma, 1e9)
    g1, g2 = te.to_natural(mu, sigma, np.inf)
    np.testing.assert_allclose(th1, g1, rtol=1e-6)
    np.testing.assert_allclose(th2, g2, rtol=1e-6)
    np.testing.assert_allclose(te.exp_t(0.3, 1 + 1e-9), np.exp(0.3), rtol=1e-8)
