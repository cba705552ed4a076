"""ADF / EP for the t-exponential family: Gaussian limit, evidence, order (in)dependence."""

import numpy as np
import pytest
from scipy import integrate, optimize

from _reference_gaussian_ep import gaussian_bpm_ep, gaussian_gpc_ep
from robustep.families import t_exponential as te
from robustep.tep.ep import linear_log_marginal_likelihood, linear_posterior, linear_tep
from robustep.tep.likelihood import tilted_normaliser
from robustep.tep.process import process_log_marginal_likelihood, process_posterior, process_tep


def _data(n=8, seed=0, k=2, noise=0.5):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, k))
    y = np.where(X @ np.r_[1.0, -0.5, 0.2][:k] + noise * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y


@pytest.mark.parametrize("site_form", ["rank1", "full"])
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_large_df_is_gaussian_ep(site_form, eps):
    X, y = _data(noise=0.5 if eps > 0 else 0.0)  # eps = 0 needs separable data
    m_ref, c_ref, lz_ref, _ = gaussian_bpm_ep(X, y, eps, np.eye(2))
    for df in [np.inf, 1e7]:
        st, info = linear_tep(X, y, df=df, eps=eps, tol=1e-10, max_iter=500, site_form=site_form)
        assert info.converged
        m, c = linear_posterior(st)
        np.testing.assert_allclose(m, m_ref, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(c, c_ref, rtol=1e-5, atol=1e-7)
        assert np.isclose(linear_log_marginal_likelihood(st, X, y, eps), lz_ref, atol=1e-5)


def test_process_large_df_is_gp_ep():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(10, 1))
    K = np.exp(-0.5 * (x - x.T) ** 2) + 0.05 * np.eye(10)
    y = np.where(x[:, 0] + 0.4 * rng.normal(size=10) > 0, 1.0, -1.0)
    m_ref, c_ref, lz_ref = gaussian_gpc_ep(K, y, 0.05)
    for df in [np.inf, 1e8]:
        tau, nu, post, info = process_tep(K, y, df=df, eps=0.05, tol=1e-11, max_iter=2000)
        assert info.converged
        np.testing.assert_allclose(post.mu, m_ref, atol=1e-6)
        np.testing.assert_allclose(post.sigma_g, c_ref, atol=1e-6)
        assert np.isclose(
            process_log_marginal_likelihood(K, y, tau, nu, df, 0.05), lz_ref, atol=1e-5
        )


@pytest.mark.parametrize("df", [3.0, 10.0])
def test_process_engine_equals_linear_engine(df):
    """Latent STC = linear model with X = I and prior scale K (rank-one sites), any df."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(7, 1))
    K = np.exp(-0.5 * (x - x.T) ** 2) + 0.1 * np.eye(7)
    y = np.where(x[:, 0] > 0, 1.0, -1.0)
    y[0] *= -1
    tau, nu, post, _ = process_tep(K, y, df=df, eps=0.05, tol=1e-11, max_iter=3000)
    st, _ = linear_tep(np.eye(7), y, df=df, eps=0.05, prior_cov=K, tol=1e-11, max_iter=3000)
    m, c = linear_posterior(st)
    np.testing.assert_allclose(post.mu, m, atol=1e-7)
    np.testing.assert_allclose(np.exp(-post.logdet_b / df) * post.sigma_g, c, atol=1e-7)
    assert np.isclose(
        process_log_marginal_likelihood(K, y, tau, nu, df, 0.05),
        linear_log_marginal_likelihood(st, np.eye(7), y, 0.05),
        atol=1e-7,
    )


@pytest.mark.parametrize("df", [3.0, 10.0])
def test_evidence_exact_for_one_point(df):
    X, y = np.array([[0.7, -1.2]]), np.array([1.0])
    mu0, s0 = np.array([0.3, 0.1]), np.array([[1.0, 0.2], [0.2, 0.5]])
    st, _ = linear_tep(X, y, df=df, eps=0.1, prior_mean=mu0, prior_cov=s0, tol=1e-12)
    # exact: int St(w) l(w) dw is a 1-D Student-t integral
    exact = tilted_normaliser(X[0] @ mu0, X[0] @ s0 @ X[0], df, 1.0, 0.1)
    assert np.isclose(linear_log_marginal_likelihood(st, X, y, 0.1), exact, atol=1e-10)
    # and by brute-force integration on a 2-D grid
    g = np.linspace(-60, 60, 1201)
    W = np.stack(np.meshgrid(g, g, indexing="ij"), -1)
    dens = np.exp(te.student_t_logpdf(W, mu0, s0, df)) * (0.1 + 0.8 * (W @ X[0] > 0))
    assert np.isclose(np.exp(exact), dens.sum() * (g[1] - g[0]) ** 2, rtol=5e-3)


def test_evidence_formula_eq42_by_quadrature():
    """eqs. (39)-(42): solve each site normaliser C~_j numerically from
    int p_cav (x)_t l~_j = Z^_j and integrate p0 (x)_t prod l~_j by quadrature (k = 1)."""
    df, eps = 4.0, 0.1
    X = np.array([[1.0], [0.5], [-0.8]])
    y = np.array([1.0, 1.0, 1.0])
    st, _ = linear_tep(X, y, df=df, eps=eps, prior_mean=[0.2], tol=1e-12, max_iter=500)
    t = te.t_of_df(df, 1)
    c0 = df * (1 - t) / np.exp(te.log_psi(np.eye(1), df))  # scaled <-> canonical
    canon = lambda lam, h: (-2 * h / c0, lam / c0)  # noqa: E731
    th1, th2 = canon(st.post_lambda, st.post_h)

    def integral(g):
        f = lambda w: te.exp_t(th1[0] * w + th2[0, 0] * w * w - g, t)  # noqa: E731
        return integrate.quad(f, -np.inf, np.inf)[0]

    logdet0 = 0.0
    g0 = te.log_partition(*canon(st.prior_lambda, st.prior_h), df)
    lt_sum = 0.0
    for j in range(3):
        lam_c, h_c = st.post_lambda - st.site_lambda[j], st.post_h - st.site_h[j]
        a1, a2 = canon(lam_c, h_c)
        g_c = te.log_partition(a1, a2, df)
        mu_c, s_c = te.from_natural(a1, a2, df)
        zhat = np.exp(tilted_normaliser(X[j] @ mu_c, X[j] @ s_c @ X[j], df, y[j], eps))
        # int exp_t(<Phi, theta> - g_c + L_j) = Zhat_j  (q-product of the cavity and the site)
        lj = optimize.brentq(
            lambda L, g_c=g_c, zhat=zhat: integral(g_c - L) - zhat, -5, 5, xtol=1e-13
        )
        lt_sum += lj
    del logdet0
    z_ep = integral(g0 - lt_sum)
    assert np.isclose(linear_log_marginal_likelihood(st, X, y, eps), np.log(z_ep), atol=1e-6)


def test_ep_order_independent_adf_order_dependent():
    X, y = _data(n=30, seed=4, noise=0.0)
    y[:2] *= -1  # two flipped labels (a case where t-EP converges; see the derivation notes)
    perm = np.random.default_rng(0).permutation(30)
    out = {}
    for method in ["ep", "adf"]:
        res = []
        for order in [np.arange(30), perm]:
            st, _ = linear_tep(
                X[order], y[order], df=5.0, eps=0.1, method=method, tol=1e-10, max_iter=1000
            )
            res.append(linear_posterior(st)[0])
        out[method] = np.abs(res[0] - res[1]).max()
    assert out["ep"] < 1e-6
    assert out["adf"] > 1e-3


def test_full_site_form_fixed_point():
    """Full Theorem-1 EP on a small problem: at convergence every site reproduces itself."""
    X, y = _data(n=6, seed=5)
    st, info = linear_tep(X, y, df=4.0, eps=0.1, tol=1e-12, max_iter=1000, site_form="full")
    assert info.converged
    m1 = linear_posterior(st)[0]
    st2, info2 = linear_tep(
        X, y, df=4.0, eps=0.1, tol=1e-12, max_iter=1, site_form="full", state=st
    )
    np.testing.assert_allclose(linear_posterior(st2)[0], m1, atol=1e-9)


def test_process_posterior_negative_sites():
    K = np.array([[1.0, 0.5], [0.5, 1.0]])
    tau, nu = np.array([-0.3, 2.0]), np.array([0.1, 0.2])
    post = process_posterior(K, tau, nu)
    ref = np.linalg.inv(np.linalg.inv(K) + np.diag(tau))
    np.testing.assert_allclose(post.sigma_g, ref, atol=1e-12)
    assert np.isclose(post.logdet_b, np.linalg.slogdet(np.eye(2) + K @ np.diag(tau))[1])
    assert process_posterior(K, np.array([-5.0, 0.0]), nu) is None


def test_process_posterior_rejects_indefinite_sigma_with_positive_diagonal():
    """Sigma_G with two negative eigenvalues has a positive determinant and, here, a
    positive diagonal; it is still not a posterior, so process_posterior returns None."""
    Q = np.linalg.qr(np.array([[1.0, 1.0, 1.0], [1.0, -1.0, 0.0], [1.0, 1.0, -2.0]]).T)[0]
    sigma = Q @ np.diag([5.0, -1.0, -1.0]) @ Q.T  # Q's first column is (1, 1, 1)/sqrt(3)
    assert np.all(np.diag(sigma) > 0) and np.linalg.det(sigma) > 0
    tau = np.full(3, -2.0)
    K = np.linalg.inv(np.linalg.inv(sigma) - np.diag(tau))  # K^-1 + T = sigma^-1
    assert np.all(np.linalg.eigvalsh(K) > 0)
    assert np.linalg.slogdet(np.eye(3) + K @ np.diag(tau))[0] > 0
    assert process_posterior(K, tau, np.zeros(3)) is None
    # the same K with a proper site configuration is accepted, and d = diag(Sigma_G)
    post = process_posterior(K, np.array([0.5, -0.1, 0.0]), np.ones(3))
    ref = np.linalg.inv(np.linalg.inv(K) + np.diag([0.5, -0.1, 0.0]))
    np.testing.assert_allclose(post.d, np.diag(ref), rtol=1e-12)
    np.testing.assert_allclose(post.mu, ref @ np.ones(3), rtol=1e-12)
    np.testing.assert_allclose(post.sigma_g, ref, rtol=1e-12, atol=1e-14)


def test_bad_arguments():
    X, y = _data(n=3)
    with pytest.raises(ValueError, match="method"):
        linear_tep(X, y, df=3.0, method="vb")
    with pytest.raises(ValueError, match="site_form"):
        linear_tep(X, y, df=3.0, site_form="diag")
