"""Tests of robustep.linalg: jittered Cholesky and the split site posterior factorisation.

Every SitePosterior quantity is compared with dense inverses of
Sigma = (K^-1 + diag(tau))^-1 computed independently in the test.
"""

import warnings

import numpy as np
import pytest

from robustep._config import config
from robustep.linalg import InvalidSiteConfiguration, jittered_cholesky
from robustep.posterior import DenseSitePosterior as SitePosterior


def _rbf(x, var=1.5, ell=0.7, noise=1e-6):
    d = x[:, None] - x[None, :]
    return var * np.exp(-0.5 * d**2 / ell**2) + noise * np.eye(x.size)


def _dense(K, tau, nu):
    """Reference posterior from dense inverses."""
    n = K.shape[0]
    Sigma = np.linalg.inv(np.linalg.inv(K) + np.diag(tau))
    Sigma = 0.5 * (Sigma + Sigma.T)
    mu = Sigma @ nu
    sign, logdet = np.linalg.slogdet(np.eye(n) + K @ np.diag(tau))
    assert sign > 0
    return Sigma, mu, logdet


def _problem(n=12, seed=0):
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(-3, 3, n))
    return x, _rbf(x, noise=0.05), rng


def _site_cases():
    x, K, rng = _problem()
    n = x.size
    nu = rng.normal(size=n)
    tau_pos = rng.uniform(0.2, 3.0, n)
    tau_mixed = tau_pos.copy()
    tau_mixed[[2, 7]] = [-0.05, -0.08]  # mildly negative (Student-t outliers)
    tau_zero = tau_pos.copy()
    tau_zero[[0, 5, 9]] = 0.0
    tau_tiny = tau_pos.copy()
    tau_tiny[[1, 4]] = [1e-9, 1e-13]  # |tau| Sigma_ii tiny: cancellation guard
    tau_tiny[8] = -1e-10
    tau_huge = tau_pos.copy()
    tau_huge[[3, 6]] = 1e8
    return {
        "positive": (K, tau_pos, nu),
        "mixed": (K, tau_mixed, nu),
        "zero": (K, tau_zero, nu),
        "all_zero": (K, np.zeros(n), nu * 0),
        "tiny": (K, tau_tiny, nu),
        "huge": (K, tau_huge, nu),
    }


CASES = _site_cases()


@pytest.mark.parametrize("name", sorted(CASES))
def test_site_posterior_matches_dense(name):
    K, tau, nu = CASES[name]
    Kc, tc, nc = K.copy(), tau.copy(), nu.copy()
    Sigma, mu, logdet = _dense(K, tau, nu)
    post = SitePosterior(K, tau, nu)
    assert post.n_negative == int(np.sum(tau < 0))
    np.testing.assert_allclose(post.mean, mu, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(post.var, np.diag(Sigma), rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(post.covariance(), Sigma, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(post.log_det, logdet, rtol=1e-9, atol=1e-9)
    # mu = K alpha
    np.testing.assert_allclose(K @ post.alpha, mu, rtol=1e-8, atol=1e-9)
    # R = (K + T^-1)^-1 = T - T Sigma T (valid also where tau = 0 or tau < 0)
    T = np.diag(tau)
    R_ref = T - T @ Sigma @ T
    np.testing.assert_allclose(post.R_matrix(), R_ref, rtol=1e-6, atol=1e-8 * max(1, tau.max()))
    # inputs not mutated
    np.testing.assert_array_equal(K, Kc)
    np.testing.assert_array_equal(tau, tc)
    np.testing.assert_array_equal(nu, nc)


def test_variance_relative_accuracy_with_huge_and_tiny_sites():
    """Variances that are tiny (huge tau) or near the prior (tiny tau) stay relatively accurate."""
    K, tau, nu = CASES["huge"]
    post = SitePosterior(K, tau, nu)
    # exact for an isolated huge site: Sigma_ii ~ 1/tau_i
    Sigma, _, _ = _dense(K, tau, nu)
    np.testing.assert_allclose(post.var[[3, 6]], np.diag(Sigma)[[3, 6]], rtol=1e-6)
    K, tau, nu = CASES["tiny"]
    post = SitePosterior(K, tau, nu)
    Sigma, _, _ = _dense(K, tau, nu)
    np.testing.assert_allclose(post.var, np.diag(Sigma), rtol=1e-10)


def test_need_var_false():
    K, tau, nu = CASES["mixed"]
    post = SitePosterior(K, tau, nu, need_var=False)
    assert post.var is None
    np.testing.assert_allclose(post.mean, _dense(K, tau, nu)[1], rtol=1e-8)


def test_solve_A_mixed_sign():
    K, tau, nu = CASES["mixed"]
    post = SitePosterior(K, tau, nu)
    s = np.sqrt(np.abs(tau))
    A = np.diag(np.sign(tau) + (tau == 0)) + s[:, None] * K * s[None, :]
    b = np.random.default_rng(3).normal(size=(tau.size, 3))
    b0 = b.copy()
    np.testing.assert_allclose(A @ post.solve_A(b), b, atol=1e-9)
    np.testing.assert_allclose(A @ post.solve_A(b[:, 0]), b[:, 0], atol=1e-9)
    np.testing.assert_array_equal(b, b0)  # LAPACK works on copies of the caller's b
    # every site negative (an empty positive block) and small enough for a valid posterior
    neg = -0.01 * np.abs(tau) - 1e-3
    post = SitePosterior(K, neg, nu)
    s = np.sqrt(np.abs(neg))
    A = -np.eye(neg.size) + s[:, None] * K * s[None, :]
    np.testing.assert_allclose(A @ post.solve_A(b), b, atol=1e-9)


@pytest.mark.parametrize("name", sorted(CASES))
def test_quadratic_forms_match_dense_inverse(name):
    """diag(X^T A^-1 X) by forward solves equals the forms with the dense A^-1."""
    K, tau, nu = CASES[name]
    post = SitePosterior(K, tau, nu)
    s = np.sqrt(np.abs(tau))
    A = np.diag(np.where(tau < 0, -1.0, 1.0)) + s[:, None] * K * s[None, :]
    X = np.random.default_rng(4).normal(size=(tau.size, 5))
    expected = np.einsum("ij,ij->j", X, np.linalg.solve(A, X))
    np.testing.assert_allclose(post.quadratic_forms(X), expected, rtol=1e-8, atol=1e-10)
    # a Fortran-ordered X, which LAPACK could overwrite in place, is left as it was
    X_f = np.asfortranarray(X)
    np.testing.assert_allclose(post.quadratic_forms(X_f), expected, rtol=1e-8, atol=1e-10)
    np.testing.assert_array_equal(X_f, X)


@pytest.mark.parametrize("name", ["positive", "mixed", "zero"])
def test_predict_matches_dense(name):
    K, tau, nu = CASES[name]
    x, _, _ = _problem()
    xs = np.linspace(-4, 4, 7)
    Ks = 1.5 * np.exp(-0.5 * (xs[:, None] - x[None, :]) ** 2 / 0.7**2)
    kss = np.full(xs.size, 1.5)
    Ks_copy = Ks.copy()
    post = SitePosterior(K, tau, nu)
    Sigma, mu, _ = _dense(K, tau, nu)
    # predictive: m* = Ks K^-1 mu, v* = kss - Ks (K^-1 - K^-1 Sigma K^-1) Ks^T
    Kinv = np.linalg.inv(K)
    m_ref = Ks @ Kinv @ mu
    v_ref = kss - np.einsum("ij,jk,ik->i", Ks, Kinv - Kinv @ Sigma @ Kinv, Ks)
    m, v = post.predict(Ks, kss)
    np.testing.assert_allclose(m, m_ref, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(v, v_ref, rtol=1e-6, atol=1e-8)
    m2, v2 = post.predict(Ks)
    assert v2 is None
    np.testing.assert_allclose(m2, m)
    np.testing.assert_array_equal(Ks, Ks_copy)
    # predicting at the training inputs returns the posterior marginals
    m3, v3 = post.predict(K, np.diag(K))
    np.testing.assert_allclose(m3, post.mean, atol=1e-9)
    np.testing.assert_allclose(v3, post.var, rtol=1e-6, atol=1e-10)


def test_single_site_negative_precision_limit():
    """1 site: valid iff 1 + K tau > 0, i.e. tau > -1/K."""
    K = np.array([[2.0]])
    post = SitePosterior(K, np.array([-0.4]), np.array([0.3]), need_var=False)
    var = 1.0 / (1.0 / 2.0 - 0.4)
    np.testing.assert_allclose(post.mean, [var * 0.3])
    np.testing.assert_allclose(post.log_det, np.log(1 - 0.8))
    with pytest.raises(InvalidSiteConfiguration, match="negative site"):
        SitePosterior(K, np.array([-0.6]), np.array([0.3]))


@pytest.mark.parametrize("n", [1, 3])
def test_all_sites_negative_variances(n):
    """All sites negative but valid (e.g. a lone Student-t outlier): variances must work.

    Regression test: P empty used to make _diag_A_inverse call dtrtri on a 0x0 factor.
    """
    x = np.linspace(0, 1, n)
    K = np.exp(-((x[:, None] - x[None, :]) ** 2)) + 0.1 * np.eye(n)
    tau = np.full(n, -0.02)
    nu = np.linspace(-1, 1, n)
    post = SitePosterior(K, tau, nu)
    Sigma, mu, logdet = _dense(K, tau, nu)
    np.testing.assert_allclose(post.var, np.diag(Sigma), rtol=1e-8)
    np.testing.assert_allclose(post.mean, mu, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(post.log_det, logdet, rtol=1e-10)


def test_invalid_when_negative_sites_too_negative():
    K, tau, nu = CASES["mixed"]
    bad = tau.copy()
    bad[[2, 7]] = -50.0
    assert np.any(np.linalg.eigvalsh(np.linalg.inv(K) + np.diag(bad)) < 0)
    with pytest.raises(InvalidSiteConfiguration, match="indefinite"):
        SitePosterior(K, bad, nu)
    # it is a LinAlgError, so generic handlers catch it too
    assert issubclass(InvalidSiteConfiguration, np.linalg.LinAlgError)


def test_validity_boundary_matches_eigenvalues():
    """Scan a negative site precision: SitePosterior is valid iff K^-1 + T is PD."""
    K, tau, nu = CASES["positive"]
    for t in [-0.1, -0.3, -0.6, -1.0, -2.0, -5.0]:
        tt = tau.copy()
        tt[4] = t
        pd = np.linalg.eigvalsh(np.linalg.inv(K) + np.diag(tt)).min() > 1e-9
        if pd:
            post = SitePosterior(K, tt, nu)
            np.testing.assert_allclose(post.var, np.diag(_dense(K, tt, nu)[0]), rtol=1e-7)
        else:
            with pytest.raises(InvalidSiteConfiguration):
                SitePosterior(K, tt, nu)


def test_empty_problem():
    post = SitePosterior(np.zeros((0, 0)), np.zeros(0), np.zeros(0))
    assert post.mean.shape == (0,)
    assert post.log_det == 0.0
    assert post.R_matrix().shape == (0, 0)


# ------------------------------------------------------------------ jittered Cholesky
def test_jittered_cholesky_success_no_jitter():
    _, K, _ = _problem()
    Kc = K.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        L, added = jittered_cholesky(K)
    assert added == 0.0
    np.testing.assert_allclose(L @ L.T, K, atol=1e-12)
    assert np.allclose(L, np.tril(L))
    U, _ = jittered_cholesky(K, lower=False)
    np.testing.assert_allclose(U.T @ U, K, atol=1e-12)
    assert np.allclose(U, np.triu(U))
    np.testing.assert_array_equal(K, Kc)


def test_jittered_cholesky_adds_jitter_with_warning():
    x = np.linspace(0, 1, 30)
    K = _rbf(x, noise=0.0)  # numerically singular
    K[0, 0] -= 1e-9  # make sure the plain factorisation fails
    Kc = K.copy()
    assert np.linalg.eigvalsh(K).min() < 0
    with pytest.warns(RuntimeWarning, match="jitter"):
        L, added = jittered_cholesky(K, jitter=1e-10)
    assert added > 0
    np.testing.assert_allclose(L @ L.T, K + added * np.eye(x.size), atol=1e-10)
    np.testing.assert_array_equal(K, Kc)


def test_jittered_cholesky_uses_config():
    K = np.array([[1.0, 1.0], [1.0, 1.0 - 1e-6]])  # indefinite by 1e-6
    with config(jitter=1e-3, max_jitter_tries=1), pytest.warns(RuntimeWarning):
        _, added = jittered_cholesky(K)
    assert added == pytest.approx(1e-3 * np.mean(np.diag(K)))
    with config(jitter=1e-12, max_jitter_tries=1):
        with pytest.raises(np.linalg.LinAlgError, match="not positive"):
            jittered_cholesky(K)


def test_jittered_cholesky_clear_failure():
    A = np.array([[1.0, 0.0], [0.0, -1.0]])
    with pytest.raises(np.linalg.LinAlgError, match="not positive\\s+definite"):
        jittered_cholesky(A, max_tries=3)
    with pytest.raises(ValueError, match="square"):
        jittered_cholesky(np.ones((2, 3)))
    with pytest.raises(ValueError, match="NaN"):
        jittered_cholesky(np.array([[1.0, np.nan], [np.nan, 1.0]]))


def test_jittered_cholesky_can_stay_silent():
    A = np.ones((3, 3))  # rank one: needs jitter
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        L, added = jittered_cholesky(A, warn=False)
    assert added > 0
    np.testing.assert_allclose(L @ L.T, A + added * np.eye(3), atol=1e-12)


def test_flat_sites_need_no_factorisation_and_give_the_prior():
    rng = np.random.default_rng(3)
    A = rng.standard_normal((6, 6))
    K = A @ A.T + 0.1 * np.eye(6)
    post = SitePosterior(K, np.zeros(6), np.zeros(6))
    np.testing.assert_array_equal(post.var, np.diag(K))
    np.testing.assert_array_equal(post.mean, 0.0)
    assert post.log_det == 0.0
    # a flat-precision site with a shift still gives mean K nu (the site is exp(nu f))
    nu = rng.standard_normal(6)
    np.testing.assert_allclose(SitePosterior(K, np.zeros(6), nu).mean, K @ nu, rtol=1e-12)


@pytest.mark.parametrize("case", ["positive", "mixed"])
@pytest.mark.parametrize("layout", ["C", "F", "strided"])
def test_site_posterior_independent_of_the_layout_of_K(layout, case):
    """The row-block scaling of I + W K W (upper triangle only) and the in-place blocks of
    the split factorisation read K in any memory layout and give the posterior of the
    C-ordered K."""
    K, tau, nu = CASES[case]
    if layout == "F":
        Kl = np.asfortranarray(K)
    elif layout == "strided":
        big = np.zeros((2 * K.shape[0], 2 * K.shape[1]))
        big[::2, ::2] = K
        Kl = big[::2, ::2]
    else:
        Kl = K
    Sigma, mu, logdet = _dense(K, tau, nu)
    post = SitePosterior(Kl, tau, nu)
    np.testing.assert_allclose(post.var, np.diag(Sigma), rtol=1e-9)
    np.testing.assert_allclose(post.mean, mu, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(post.log_det, logdet, rtol=1e-10)


def test_site_posterior_with_more_rows_than_one_scaling_block():
    """n above the 256-row block of the I + W K W scaling: every block lands in place."""
    rng = np.random.default_rng(3)
    x = np.sort(rng.uniform(-20, 20, 600))
    K = _rbf(x, noise=0.1)
    tau = rng.uniform(0.1, 2.0, x.size)
    nu = rng.normal(size=x.size)
    Sigma, mu, logdet = _dense(K, tau, nu)
    post = SitePosterior(K, tau, nu)
    np.testing.assert_allclose(post.var, np.diag(Sigma), rtol=1e-8)
    np.testing.assert_allclose(post.mean, mu, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(post.log_det, logdet, rtol=1e-10)


@pytest.mark.parametrize("a_layout", ["C", "F", "strided"])
@pytest.mark.parametrize("b_shape", [(5,), (5, 3), (5, 1)])
def test_blas_matmul_equals_numpy(a_layout, b_shape):
    from robustep.linalg import blas_matmul

    rng = np.random.default_rng(0)
    A = rng.normal(size=(4, 10))
    A = {"C": A[:, :5].copy(), "F": np.asfortranarray(A[:, :5]), "strided": A[:, ::2]}[a_layout]
    for B in (rng.normal(size=b_shape), np.asfortranarray(rng.normal(size=b_shape))):
        for b in (B, B[::-1]):
            A0, b0 = A.copy(), b.copy()
            np.testing.assert_allclose(blas_matmul(A, b), A @ b, rtol=1e-13, atol=1e-14)
            np.testing.assert_array_equal(A, A0)  # inputs untouched
            np.testing.assert_array_equal(b, b0)


def test_blas_matmul_falls_back_to_numpy():
    from robustep.linalg import blas_matmul

    A32 = np.ones((3, 2), dtype=np.float32)
    assert blas_matmul(A32, np.ones(2, dtype=np.float32)).dtype == np.float32
    np.testing.assert_array_equal(blas_matmul(np.ones((3, 0)), np.ones(0)), np.zeros(3))
    Ac = np.ones((2, 2), dtype=complex)
    np.testing.assert_array_equal(blas_matmul(Ac, Ac), Ac @ Ac)
    with pytest.raises(ValueError):
        blas_matmul(np.ones((3, 2)), np.ones(3))  # shape mismatch: numpy's own error


@pytest.mark.parametrize("n", [1, 7, 600])
def test_identity_plus_scaled_lower_triangle(n):
    from robustep.linalg import identity_plus_scaled

    rng = np.random.default_rng(n)
    A = rng.normal(size=(n, n))
    K = A @ A.T
    w = rng.uniform(0.0, 2.0, n)
    K0 = K.copy()
    B = identity_plus_scaled(K, w)
    assert B.flags.f_contiguous and B.shape == (n, n)
    ref = np.eye(n) + w[:, None] * K * w[None, :]
    np.testing.assert_array_equal(np.tril(B), np.tril(ref))  # the same bits
    np.testing.assert_array_equal(K, K0)
    from scipy.linalg import lapack

    L, info = lapack.dpotrf(B, lower=1, clean=1, overwrite_a=1)
    assert info == 0
    np.testing.assert_allclose(L @ L.T, ref, rtol=1e-10, atol=1e-10 * np.abs(ref).max())
    # overwrite: the same lower triangle, built in K's own memory
    K1 = K0.copy()
    B1 = identity_plus_scaled(K1, w, overwrite=True)
    assert np.shares_memory(B1, K1) and B1.flags.f_contiguous
    np.testing.assert_array_equal(np.tril(B1), np.tril(ref))
    frozen = K0.copy()
    frozen.flags.writeable = False
    fortran = [np.asfortranarray(K0)] if n > 1 else []  # (a 1 x 1 array is both orders)
    for bad in [frozen, K0.astype(np.float32), *fortran]:
        with pytest.raises(ValueError, match="C-ordered"):
            identity_plus_scaled(bad, w, overwrite=True)


@pytest.mark.parametrize("n", [1, 5, 64, 160, 161, 200, 455])
def test_triangular_and_cholesky_inverse_match_lapack_and_read_the_lower_triangle(n):
    """The BLAS-3 recursion (n > 160) and the direct dtrtri path (n <= 160) give L^-1 and
    B^-1 = L^-T L^-1 of an independent dense inverse, from the lower triangle alone."""
    from scipy.linalg import lapack

    from robustep.linalg import cholesky_inverse, triangular_inverse

    rng = np.random.default_rng(n)
    A = rng.normal(size=(n, n))
    B = A @ A.T + n * np.eye(n)
    L = np.tril(lapack.dpotrf(B, lower=1)[0])
    L_dirty = L + np.triu(rng.normal(size=(n, n)), 1)  # garbage above the diagonal
    L0 = L_dirty.copy()
    X = triangular_inverse(L_dirty)
    np.testing.assert_array_equal(L_dirty, L0)  # not modified
    ref = np.linalg.inv(L)
    np.testing.assert_allclose(X, ref, rtol=0, atol=1e-13 * np.abs(ref).max())
    assert not np.triu(X, 1).any()  # exactly lower triangular
    # clean=True (L's strict upper triangle is zero, as dpotrf(clean=1) leaves it): the
    # same result bit for bit, in the same memory order, without clearing
    clean = triangular_inverse(L, clean=True)
    np.testing.assert_array_equal(clean, triangular_inverse(L))
    assert clean.flags.c_contiguous == triangular_inverse(L).flags.c_contiguous
    Binv = cholesky_inverse(L_dirty)
    ref_B = np.linalg.inv(B)
    np.testing.assert_allclose(Binv, ref_B, rtol=0, atol=1e-12 * np.abs(ref_B).max())
    np.testing.assert_array_equal(Binv, Binv.T)


@pytest.mark.parametrize("n", [3, 300])
def test_triangular_inverse_of_a_singular_factor_is_a_clear_error(n):
    from robustep.linalg import triangular_inverse

    L = np.tril(np.ones((n, n)))
    L[n // 2, n // 2] = 0.0
    with pytest.raises(np.linalg.LinAlgError, match="singular triangular factor"):
        triangular_inverse(L)


def test_plus_diagonal_is_a_plus_diag_and_leaves_a_alone():
    from robustep.linalg import plus_diagonal

    rng = np.random.default_rng(3)
    A = rng.normal(size=(5, 5))
    A_before = A.copy()
    d = rng.uniform(size=5)
    np.testing.assert_array_equal(plus_diagonal(A, d), A + np.diag(d))
    np.testing.assert_array_equal(A, A_before)
    np.testing.assert_array_equal(plus_diagonal(A, 2.0), A + 2.0 * np.eye(5))


def _short_rbf(n=300, ell=0.0132, seed=0):
    from sklearn.gaussian_process.kernels import RBF

    X = np.random.default_rng(seed).uniform(-1.0, 1.0, size=(n, 2))
    return RBF(ell)(X)


def _subnormal(A):
    return int(np.count_nonzero((A != 0) & (np.abs(A) < np.finfo(float).tiny)))


def test_zero_below_resolution_leaves_a_matrix_without_subnormal_entries_alone():
    """A K with no subnormal entry (length-scale 0.2: entries down to 1e-30, below the
    resolution) comes back as the same array, bit for bit."""
    from robustep.linalg import zero_below_resolution

    K = _short_rbf(ell=0.2)
    assert K.min() < 1e-20 and _subnormal(K) == 0
    before = K.copy()
    assert zero_below_resolution(K) is K
    assert np.array_equal(K, before)


def test_zero_below_resolution_zeroes_what_rounding_cannot_see():
    """Under length-scale 0.0132 K holds subnormal entries; zeroed in place are exactly
    the entries below eps sqrt(K_ii K_jj), the diagonal is kept, none subnormal is left,
    and the site posterior (mixed-sign sites) moves by rounding only."""
    from robustep.linalg import zero_below_resolution

    K = _short_rbf()
    assert _subnormal(K) > 0
    raw = K.copy()
    out = zero_below_resolution(K)
    assert out is K and _subnormal(K) == 0
    eps = np.finfo(float).eps
    small = np.abs(raw) < eps * np.sqrt(np.outer(np.diag(raw), np.diag(raw)))
    assert small.any() and np.all(K[small] == 0) and np.array_equal(K[~small], raw[~small])
    np.testing.assert_array_equal(np.diag(K), np.diag(raw))
    rng = np.random.default_rng(1)
    tau = rng.uniform(0.1, 5.0, K.shape[0])
    tau[:30] = -0.3
    nu = rng.normal(size=K.shape[0])
    a, b = SitePosterior(raw, tau, nu), SitePosterior(K, tau, nu)
    np.testing.assert_allclose(b.var, a.var, rtol=1e-12)
    np.testing.assert_allclose(b.mean, a.mean, rtol=1e-12, atol=1e-14)
    assert b.log_det == pytest.approx(a.log_det, rel=1e-13)


def test_classifier_at_a_short_length_scale_matches_the_engine_on_the_raw_kernel():
    """The classifier's dense prior (make_prior) has its K zeroed below the resolution:
    its fit at a fixed short length-scale equals EP on the kernel's own K to rounding, and
    the caller's X is untouched."""
    from sklearn.gaussian_process.kernels import RBF

    from robustep import GPClassifier
    from robustep.ep import expectation_propagation
    from robustep.likelihoods import Probit

    X = np.random.default_rng(2).uniform(-1.0, 1.0, size=(200, 2))
    y = np.where(X[:, 0] > 0, 1, -1)
    X0 = X.copy()
    est = GPClassifier(RBF(0.0132), method="ep", optimizer=None, tol=1e-10).fit(X, y)
    K = RBF(0.0132)(X)
    assert _subnormal(K) > 0
    ref = expectation_propagation(K, y.astype(float), Probit(), tol=1e-10)
    np.testing.assert_allclose(est.site_precision_, ref.site_precision, rtol=1e-9)
    assert est.log_marginal_likelihood_value_ == pytest.approx(ref.log_Z, rel=1e-12)
    np.testing.assert_array_equal(X, X0)


def test_make_prior_zeroes_a_copy_of_a_callers_k_and_its_own_in_place():
    """make_prior(..., "dense", zero_subnormal=True) (the dense classifier's prior): a
    caller's K with subnormal entries is copied, zeroed below the resolution and left as
    it was; a K without them is used as it is; a K built from the kernel is zeroed the
    same.  Without the option K is used as given."""
    from sklearn.gaussian_process.kernels import RBF

    from robustep.estimators._binary_dense import representation
    from robustep.linalg import zero_below_resolution
    from robustep.posterior import make_prior

    assert representation().options == {"zero_subnormal": True}
    X = np.random.default_rng(0).uniform(-1.0, 1.0, size=(300, 2))
    K = RBF(0.0132)(X)
    before = K.copy()
    prior = make_prior(None, None, "dense", K=K, zero_subnormal=True)
    assert np.array_equal(K, before) and prior.K is not K
    np.testing.assert_array_equal(prior.K, zero_below_resolution(before.copy()))
    assert _subnormal(prior.K) == 0
    built = make_prior(RBF(0.0132), X, "dense", zero_subnormal=True)
    np.testing.assert_array_equal(built.K, prior.K)
    plain = RBF(0.5)(X)
    assert make_prior(None, None, "dense", K=plain, zero_subnormal=True).K is plain
    assert make_prior(None, None, "dense", K=K).K is K
