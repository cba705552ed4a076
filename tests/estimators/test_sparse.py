"""Tests of the sparse (FITC) posterior and sparse EP (docs/derivations/sparse.md).

References used here:
- dense linear algebra on the explicit (n, n) FITC covariance K~ (eqs. S1–S13);
- dense EP on K itself when the inducing inputs are the training inputs (m = n);
- dense EP on K~ (m < n): the same model, so the same EP fixed point;
- central finite differences of log Z_EP for the gradients (S14, S15).
"""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import (
    RBF,
    ConstantKernel,
    Matern,
    RationalQuadratic,
    WhiteKernel,
)

from robustep import get_config
from robustep.ep import expectation_propagation
from robustep.ep.sparse_evidence import fitc_log_Z_gradient
from robustep.kernels._rows import Scratch
from robustep.kernels.inducing import (
    _contract_second_argument,
    cross_covariance,
    inducing_input_gradient,
    rows_gradient,
    supports_fast_rows,
    supports_input_gradient,
)
from robustep.likelihoods import Probit, StudentT
from robustep.linalg import InvalidSiteConfiguration
from robustep.posterior import DensePrior
from robustep.posterior.sparse import FITCPrior, FITCSitePosterior


# --------------------------------------------------------------------------- data
def _inputs(n=40, m=7, d=2, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)), rng.normal(size=(m, d)), rng


def _classification(n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, 1))
    y = np.where(np.sin(1.5 * X[:, 0]) + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y


def _outlier_regression(n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(-3, 3, size=(n, 1)), axis=0)
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=n)
    y[[3, 11, 20, 31]] += [4.0, -5.0, 6.0, -4.5]  # gross outliers: negative sites
    return X, y


def _ep(K, y, lik, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        return expectation_propagation(K, y, lik, **kw)


KERNEL = ConstantKernel(1.5) * RBF(0.7)


# ------------------------------------------------------------- posterior (S1–S13)
def _mixed_sites(n, rng, n_neg=4):
    tau = rng.uniform(0.1, 2.0, n)
    tau[:n_neg] = -0.05
    tau[n_neg] = 0.0
    return tau, rng.normal(size=n)


@pytest.mark.parametrize("kernel", [KERNEL, ConstantKernel(1.0) * RBF(1.0) + WhiteKernel(0.1)])
def test_posterior_matches_dense_on_fitc_covariance(kernel):
    X, Z, rng = _inputs()
    prior = FITCPrior.from_kernel(kernel, X, Z, jitter=1e-8)
    Kt = prior.dense_covariance()
    # (S1): Q_nn + diag(K_nn - Q_nn) from the kernel directly
    Kmm = kernel(Z) + 1e-8 * np.eye(Z.shape[0])
    Q = kernel(X, Z) @ np.linalg.solve(Kmm, kernel(Z, X))
    np.testing.assert_allclose(Kt, Q - np.diag(np.diag(Q)) + np.diag(kernel.diag(X)), atol=1e-12)
    tau, nu = _mixed_sites(X.shape[0], rng)
    sp = prior.posterior(tau, nu)
    dp = DensePrior(Kt).posterior(tau, nu)
    assert sp.n_negative == 4
    np.testing.assert_allclose(sp.mean, dp.mean, atol=1e-12)
    np.testing.assert_allclose(sp.var, dp.var, rtol=1e-10)
    np.testing.assert_allclose(sp.log_det, dp.log_det, atol=1e-10)  # (S11)
    np.testing.assert_allclose(sp.alpha, dp.alpha, atol=1e-10)
    np.testing.assert_allclose(sp.prior_term(), dp.prior_term(), atol=1e-10)
    # (S10): the FITC predictive, built densely: Cov(f*, f) = Q_*n, Var f* = k**
    Xs = rng.normal(size=(6, 2))
    Ksm = kernel(Xs, Z)
    Q_sn = Ksm @ np.linalg.solve(Kmm, kernel(Z, X))
    Kt_inv = np.linalg.inv(Kt)
    Sigma = dp.covariance()
    mean_ref = Q_sn @ dp.alpha
    var_ref = kernel.diag(Xs) - np.einsum(
        "ij,ij->i", Q_sn @ (Kt_inv - Kt_inv @ Sigma @ Kt_inv), Q_sn
    )
    mean, var = sp.predict(Ksm, kernel.diag(Xs))
    np.testing.assert_allclose(mean, mean_ref, atol=1e-10)
    np.testing.assert_allclose(var, var_ref, atol=1e-10)
    assert sp.predict(Ksm)[1] is None


def test_gradient_weights_match_dense_traces():
    """(S12)–(S14): <W_nm, dK_nm> + <W_mm, dK_mm> + <w, d diag K_nn> = 1/2 tr(M dK~)."""
    X, Z, rng = _inputs(n=30, m=5)
    n, m = X.shape[0], Z.shape[0]
    K_mm = KERNEL(Z)
    K_nm = KERNEL(X, Z)
    kd = KERNEL.diag(X)
    prior = FITCPrior(K_mm, K_nm, kd, jitter=0.0)
    tau, nu = _mixed_sites(n, rng)
    post = prior.posterior(tau, nu)
    dp = DensePrior(prior.dense_covariance()).posterior(tau, nu)
    M = np.outer(dp.alpha, dp.alpha) - dp.R_matrix()
    W_nm_rows, W_mm, w = post.gradient_weights()
    W_nm = W_nm_rows(slice(0, n))
    # random symmetric perturbations of the three blocks
    dA = rng.normal(size=(m, m))
    dA = dA + dA.T
    dB = rng.normal(size=(n, m))
    dd = rng.normal(size=n)
    Kmm_inv = np.linalg.inv(K_mm)
    P = Kmm_inv @ K_nm.T
    dQ = dB @ P + P.T @ dB.T - P.T @ dA @ P
    dKt = dQ - np.diag(np.diag(dQ)) + np.diag(dd)
    ref = 0.5 * np.sum(M * dKt)
    got = np.sum(W_nm * dB) + np.sum(W_mm * dA) + w @ dd
    np.testing.assert_allclose(got, ref, rtol=1e-9)


def test_invalid_configurations_raise():
    X, Z, _ = _inputs(n=20, m=4)
    prior = FITCPrior.from_kernel(KERNEL, X, Z, jitter=1e-8)
    n = X.shape[0]
    assert np.all(prior.Lambda > 0)
    # (S5): 1 + Lambda_i tau_i <= 0
    tau = np.zeros(n)
    i = int(np.argmax(prior.Lambda))
    tau[i] = -2.0 / prior.Lambda[i]
    with pytest.raises(InvalidSiteConfiguration):
        prior.posterior(tau, np.zeros(n))
    # (S7): A indefinite though every 1 + Lambda tau > 0 (m = n, Lambda = 0)
    K = KERNEL(X)
    exact = FITCPrior(K, K, np.diag(K), jitter=0.0)
    tau = np.full(n, -10.0)
    with pytest.raises(InvalidSiteConfiguration):
        exact.posterior(tau, np.zeros(n))
    # the dense prior agrees that these sites are invalid
    with pytest.raises(InvalidSiteConfiguration):
        DensePrior(K).posterior(tau, np.zeros(n))
    # the sequential schedule needs the (n, n) covariance
    with pytest.raises(ValueError, match="schedule='parallel'"):
        expectation_propagation(prior, np.ones(n), Probit(), schedule="sequential")
    with pytest.raises(NotImplementedError, match="parallel"):
        prior.posterior(np.ones(n), np.zeros(n)).covariance()


def test_bad_prior_inputs():
    X, Z, _ = _inputs(n=10, m=3)
    K_mm, K_nm, kd = KERNEL(Z), KERNEL(X, Z), KERNEL.diag(X)
    with pytest.raises(ValueError, match="shape"):
        FITCPrior(K_mm, K_nm[:, :2], kd)
    with pytest.raises(ValueError, match="NaN"):
        FITCPrior(K_mm, np.where(K_nm > 0.5, np.nan, K_nm), kd)
    with pytest.raises(ValueError, match="symmetric"):
        FITCPrior(K_mm + np.triu(np.ones((3, 3)), 1), K_nm, kd)
    with pytest.raises(ValueError, match="inconsistent"):
        FITCPrior(K_mm, K_nm, 0.1 * kd)
    with pytest.raises(ValueError, match="features"):
        FITCPrior.from_kernel(KERNEL, X, Z[:, :1])
    with pytest.raises(ValueError, match="jitter"):
        FITCPrior(K_mm, K_nm, kd, jitter=-1.0)
    with pytest.raises(np.linalg.LinAlgError, match="duplicate"):
        FITCPrior(np.ones((3, 3)), K_nm, kd, jitter=0.0)
    # duplicated inducing points: jitter=None repairs K_mm and records the jitter
    Zd = np.vstack([Z, Z[:1]])
    p = FITCPrior.from_kernel(KERNEL, X, Zd)
    assert p.jitter > 0 and p.m == 4
    # the caller's arrays are not modified
    K_nm0 = K_nm.copy()
    FITCPrior(K_mm, K_nm, kd)
    np.testing.assert_array_equal(K_nm, K_nm0)


# ------------------------------------------------------- EP exactness with m = n
def _check_same(res_s, res_d, Ks_s, Ks_d, kdiag, atol=1e-6):
    np.testing.assert_allclose(res_s.mean, res_d.mean, atol=atol)
    np.testing.assert_allclose(res_s.var, res_d.var, atol=atol)
    np.testing.assert_allclose(res_s.log_Z, res_d.log_Z, atol=atol)
    ms, vs = res_s.predict(Ks_s, kdiag)
    md, vd = res_d.predict(Ks_d, kdiag)
    np.testing.assert_allclose(ms, md, atol=atol)
    np.testing.assert_allclose(vs, vd, atol=atol)


@pytest.mark.parametrize(
    "case",
    [
        "probit",
        "probit-power",
        "probit-not-robust",
        "student-t",
        "student-t-double-loop",
        "student-t-damped",
        "student-t-power",
    ],
)
def test_inducing_equal_training_inputs_gives_dense_ep(case):
    if case.startswith("probit"):
        X, y = _classification()
        lik, kernel = Probit(), ConstantKernel(2.0) * RBF(0.8)
    else:
        X, y = _outlier_regression()
        lik, kernel = StudentT(df=3.0, scale=0.1), ConstantKernel(1.0) * RBF(1.0)
    kw = {"tol": 1e-10, "max_iter": 3000}
    if case == "probit-power":
        kw["power"] = 0.7
    if case == "student-t-double-loop":
        kw["double_loop"] = True
    if case == "student-t-damped":
        kw["damping"] = 0.5
    if case == "student-t-power":
        kw["power"] = 0.5
    if case == "probit-not-robust":
        kw["robust"] = False
    # a tiny nugget keeps K well conditioned; the same K goes to both
    K = kernel(X) + 1e-6 * np.eye(X.shape[0])
    sparse = FITCPrior(K, K, np.diag(K), jitter=0.0)
    assert np.max(sparse.Lambda) < 1e-10
    res_s = _ep(sparse, y, lik, **kw)
    res_d = _ep(K, y, lik, **kw)
    if case.startswith("student"):
        assert res_d.posterior.n_negative > 0 and res_s.posterior.n_negative > 0
    Xs = np.linspace(-3.5, 3.5, 9)[:, None]
    Ks = kernel(Xs, X)
    _check_same(res_s, res_d, Ks, Ks, kernel.diag(Xs) + 1e-6)


@pytest.mark.parametrize("lik_name", ["probit", "student-t"])
def test_fewer_inducing_points_equals_dense_ep_on_fitc_covariance(lik_name):
    """m < n: EP on FITCPrior reaches the fixed point of dense EP on the explicit K~."""
    if lik_name == "probit":
        X, y = _classification(n=50)
        lik = Probit()
    else:
        X, y = _outlier_regression(n=50)
        lik = StudentT(df=4.0, scale=0.1)
    kernel = ConstantKernel(1.5) * RBF(0.9)
    Z = np.linspace(-3, 3, 8)[:, None]
    prior = FITCPrior.from_kernel(kernel, X, Z, jitter=1e-8)
    Kt = prior.dense_covariance()
    res_s = _ep(prior, y, lik, tol=1e-10, max_iter=3000)
    # tol 1e-9 for the dense run: on this K~ (condition number ~4e5) its residual hovers at
    # 1e-10 - 3e-10 (round-off) for tens of sweeps whichever path it took
    res_d = _ep(Kt, y, lik, tol=1e-9, max_iter=3000)
    if lik_name == "student-t":
        assert res_s.posterior.n_negative > 0
    np.testing.assert_allclose(res_s.mean, res_d.mean, atol=1e-7)
    np.testing.assert_allclose(res_s.var, res_d.var, atol=1e-7)
    np.testing.assert_allclose(res_s.log_Z, res_d.log_Z, atol=1e-7)
    np.testing.assert_allclose(res_s.site_precision, res_d.site_precision, atol=1e-6)


# ------------------------------------------------------------- gradients (S14, S15)
class _SubclassedRBF(RBF):
    """An RBF that the fast row path does not take (exact types only): the general path."""


def _run(kernel, X, Z, y, lik):
    prior = FITCPrior.from_kernel(kernel, X, Z, jitter=1e-8)
    return _ep(prior, y, lik, tol=1e-11, max_iter=5000)


@pytest.mark.parametrize(
    "case",
    [
        ("probit", ConstantKernel(1.3) * RBF([0.9, 1.4])),
        ("student-t", ConstantKernel(1.3) * Matern(0.9, nu=1.5) + WhiteKernel(0.01)),
        ("probit", ConstantKernel(1.0) * RationalQuadratic(1.0, 1.5)),
        ("probit", ConstantKernel(1.0) * Matern([1.0, 0.8], nu=2.5)),
        ("probit", ConstantKernel(1.3) * _SubclassedRBF([0.9, 1.4])),
    ],
    ids=[
        "ard-rbf-probit",
        "matern32-white-student-t",
        "rq-probit",
        "matern52-probit",
        "general-path-probit",
    ],
)
def test_gradients_match_finite_differences(case):
    lik_name, kernel = case
    rng = np.random.default_rng(1)
    n, m = 40, 5
    X = rng.normal(size=(n, 2))
    Z = rng.normal(size=(m, 2))
    if lik_name == "probit":
        y = np.sign(np.sin(2 * X[:, 0]) + 0.3 * rng.normal(size=n))
        lik = Probit()
    else:
        y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=n)
        y[:4] += 6.0
        lik = StudentT(df=3.0, scale=0.2)
    res = _run(kernel, X, Z, y, lik)
    if lik_name == "student-t":
        assert res.posterior.n_negative > 0
    g_theta, g_lik, g_Z = fitc_log_Z_gradient(res, kernel, X, Z, lik, y)
    h = 1e-5

    def fd(f, x0):
        out = np.zeros_like(x0)
        for idx in np.ndindex(x0.shape):
            xp, xm = x0.copy(), x0.copy()
            xp[idx] += h
            xm[idx] -= h
            out[idx] = (f(xp) - f(xm)) / (2 * h)
        return out

    fd_theta = fd(lambda t: _run(kernel.clone_with_theta(t), X, Z, y, lik).log_Z, kernel.theta)
    np.testing.assert_allclose(g_theta, fd_theta, rtol=1e-5, atol=1e-6)
    fd_Z = fd(lambda z: _run(kernel, X, z, y, lik).log_Z, Z)
    np.testing.assert_allclose(g_Z, fd_Z, rtol=1e-5, atol=1e-6)
    if lik.hyperparameter_names:
        lp = lik.get_log_params()
        fd_lik = fd(lambda t: _run(kernel, X, Z, y, lik.with_log_params(t)).log_Z, lp)
        np.testing.assert_allclose(g_lik, fd_lik, rtol=1e-5, atol=1e-6)


_FAST_KERNELS = [
    RBF(1.3),
    ConstantKernel(1.7) * RBF([0.7, 1.9, 1.1]),
    Matern(0.8, nu=0.5),
    ConstantKernel(0.6) * Matern([0.9, 1.4, 0.6], nu=1.5),
    Matern(1.1, nu=2.5) + WhiteKernel(0.2),
    Matern([1.0, 0.5, 2.0], nu=np.inf),
    RationalQuadratic(1.2, 0.6),
    RationalQuadratic(0.9, 2.0, alpha_bounds="fixed") * ConstantKernel(2.0),
    RBF(1.5) * Matern(2.0, nu=1.5) + ConstantKernel(0.3),
    ConstantKernel(2.0, constant_value_bounds="fixed") * RBF([1.0, 2.0, 3.0]),
    ConstantKernel(1.0) * RBF(1.0, length_scale_bounds="fixed") + WhiteKernel(0.1, "fixed"),
]


@pytest.mark.parametrize("kernel", _FAST_KERNELS, ids=[str(k) for k in _FAST_KERNELS])
def test_fast_row_contractions_match_scikit_learn(kernel):
    """The one-distance-computation contractions (eqs. S14, S15) against scikit-learn's
    eval_gradient on the stacked inputs and the general inducing-input derivative."""
    rng = np.random.default_rng(3)
    k, m, d = 23, 9, 3
    X, Z = rng.normal(size=(k, d)), rng.normal(size=(m, d))
    Z[0] = X[0]  # a zero distance (Matern 1/2: H = 0 there, as in scikit-learn)
    W, w = rng.normal(size=(k, m)), rng.normal(size=k)
    assert supports_fast_rows(kernel)
    _, G = kernel(np.vstack([X, Z]), eval_gradient=True)
    ref_theta = np.einsum("ij,ijp->p", W, G[:k, k:]) + np.einsum("i,iip->p", w, G[:k, :k])
    ref_Z = _contract_second_argument(kernel, X, Z, W)
    scratch = Scratch()
    for _ in range(2):  # the second call reuses the scratch buffers
        g_theta, g_Z = rows_gradient(kernel, X, Z, W, w, scratch=scratch)
        np.testing.assert_allclose(g_theta, ref_theta, rtol=1e-11, atol=1e-12)
        np.testing.assert_allclose(g_Z, ref_Z, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(cross_covariance(kernel, X, Z), kernel(X, Z), rtol=1e-13)
    assert rows_gradient(kernel, X, Z, W, w, wrt_Z=False)[1] is None
    no_diag = rows_gradient(kernel, X, Z, W, None, wrt_Z=False)[0]
    ref_no_diag = np.einsum("ij,ijp->p", W, G[:k, k:])
    np.testing.assert_allclose(no_diag, ref_no_diag, rtol=1e-11, atol=1e-12)


def test_fast_path_only_for_exact_kernel_types():
    from sklearn.gaussian_process.kernels import DotProduct, Exponentiation

    assert not supports_fast_rows(_SubclassedRBF(1.0))
    assert not supports_fast_rows(ConstantKernel(1.0) * _SubclassedRBF(1.0))
    assert not supports_fast_rows(Matern(1.0, nu=1.0))
    assert not supports_fast_rows(Exponentiation(RBF(1.0), 2.0))
    assert not supports_fast_rows(DotProduct(1.0) + RBF(1.0))
    X, Z, _ = _inputs(n=10, m=3)
    kernel = DotProduct(1.0) + RBF(1.0)
    np.testing.assert_array_equal(cross_covariance(kernel, X, Z), kernel(X, Z))


def test_unsupported_kernel_for_inducing_gradient():
    from sklearn.gaussian_process.kernels import DotProduct

    X, Z, _ = _inputs(n=10, m=3)
    kernel = DotProduct(1.0)
    assert not supports_input_gradient(kernel)
    assert supports_input_gradient(KERNEL + WhiteKernel(0.1))
    prior = FITCPrior.from_kernel(kernel + WhiteKernel(0.1), X, Z)
    post = prior.posterior(np.ones(10), np.zeros(10))
    with pytest.raises(NotImplementedError, match="optimize_inducing=False"):
        inducing_input_gradient(kernel, X, Z, post.gradient_weights())


def test_chunked_passes_match_one_block(monkeypatch):
    """Row chunking (used for large n) gives the same posterior as one block."""
    import robustep.kernels._rows as rows_module
    import robustep.posterior.sparse as sparse

    X, Z, rng = _inputs(n=50, m=6)
    tau, nu = _mixed_sites(50, rng)
    prior = FITCPrior.from_kernel(KERNEL, X, Z, jitter=1e-8)
    full = prior.posterior(tau, nu)
    M_diag, s, _ = full.gradient_sums()
    args = (KERNEL, X, Z, full.alpha, full._beta, M_diag, s, full._A_inverse(), True)
    g_full = prior.gradient_rows(*args)
    monkeypatch.setattr(rows_module, "_CHUNK_ENTRIES", 7 * 6)  # 7 rows per chunk
    monkeypatch.setattr(sparse, "_FAST_CHUNK_ENTRIES", 7 * 6)
    prior_c = FITCPrior.from_kernel(KERNEL, X, Z, jitter=1e-8)
    chunked = FITCSitePosterior(prior_c, tau, nu)
    np.testing.assert_allclose(prior_c.V, prior.V, atol=1e-14)
    np.testing.assert_allclose(chunked.mean, full.mean, atol=1e-12)
    np.testing.assert_allclose(chunked.var, full.var, atol=1e-12)
    np.testing.assert_allclose(chunked.log_det, full.log_det, atol=1e-12)
    # the gradient's row pass (a scratch reused across chunks, the last one shorter)
    g_chunked = prior_c.gradient_rows(*args)
    np.testing.assert_allclose(g_chunked[0], g_full[0], rtol=1e-12)
    np.testing.assert_allclose(g_chunked[1], g_full[1], rtol=1e-12, atol=1e-14)


# ------------------------------------------------------------------------ estimators
def _gpc_data(n=120, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = (np.sin(2 * X[:, 0]) + X[:, 1] > 0).astype(int)
    return X, y, rng


def test_classifier_inducing_equal_training_inputs_matches_dense():
    from robustep.estimators import GPClassifier

    X, y, rng = _gpc_data(n=60)
    Xt = rng.normal(size=(25, 2))
    dense = GPClassifier(optimizer=None).fit(X, y)
    assert dense.inducing_points_ is None
    sparse = GPClassifier(optimizer=None, inducing_points=X).fit(X, y)
    np.testing.assert_array_equal(sparse.inducing_points_, X)
    # the only difference is the K_mm jitter (1e-6 relative)
    np.testing.assert_allclose(sparse.predict_proba(Xt), dense.predict_proba(Xt), atol=1e-4)
    np.testing.assert_allclose(
        sparse.log_marginal_likelihood_value_, dense.log_marginal_likelihood_value_, atol=1e-3
    )


def test_classifier_sparse_fit_and_options():
    from robustep.estimators import GPClassifier

    X, y, rng = _gpc_data(n=80)
    Xt = rng.normal(size=(40, 2))
    a = GPClassifier(inducing_points=10, random_state=0, optimizer=None).fit(X, y)
    b = GPClassifier(inducing_points=10, random_state=0, optimizer=None).fit(X, y)
    assert a.inducing_points_.shape == (10, 2)
    np.testing.assert_array_equal(a.inducing_points_, b.inducing_points_)  # seeded k-means
    fixed = GPClassifier(
        inducing_points=a.inducing_points_, optimize_inducing=False, random_state=0
    ).fit(X, y)
    np.testing.assert_array_equal(fixed.inducing_points_, a.inducing_points_)
    # FITC-EP for both, so that the evidences compare ("auto" gives α = 0.5 to moved)
    moved = GPClassifier(
        inducing_points=a.inducing_points_, inducing_power=1.0, random_state=0
    ).fit(X, y)
    assert not np.allclose(moved.inducing_points_, a.inducing_points_)
    assert moved.log_marginal_likelihood_value_ >= fixed.log_marginal_likelihood_value_ - 1e-6
    assert fixed.log_marginal_likelihood_value_ >= a.log_marginal_likelihood_value_ - 1e-6
    for est in (a, fixed, moved):
        assert est.converged_
        p = est.predict_proba(Xt)
        assert p.shape == (40, 2) and np.all(np.isfinite(p))
        assert est.score(X, y) > 0.8
    for method, kw in [("damped", {"damping": 0.3}), ("power", {"power": 0.7}), ("rep", {})]:
        est = GPClassifier(method=method, inducing_points=8, optimizer=None, **kw).fit(X, y)
        assert est.converged_ and est.score(X, y) > 0.8


def test_classifier_sparse_lml_gradient():
    from robustep.estimators import GPClassifier

    X, y, _ = _gpc_data(n=60)
    est = GPClassifier(inducing_points=8, random_state=0, optimizer=None, tol=1e-10).fit(X, y)
    theta = est.kernel_.theta + 0.1
    value, grad = est.log_marginal_likelihood(theta, eval_gradient=True)
    h = 1e-5
    fd = [
        (est.log_marginal_likelihood(theta + h * e) - est.log_marginal_likelihood(theta - h * e))
        / (2 * h)
        for e in np.eye(theta.size)
    ]
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-6)
    assert value == pytest.approx(est.log_marginal_likelihood(theta))


def test_prediction_batches(monkeypatch):
    import robustep.estimators._sparse as sp
    from robustep.estimators import GPClassifier

    X, y, rng = _gpc_data(n=60)
    Xt = rng.normal(size=(23, 2))
    est = GPClassifier(inducing_points=6, optimizer=None, random_state=0).fit(X, y)
    one = est.predict_latent(Xt, return_std=True)
    monkeypatch.setattr(sp, "PREDICT_BATCH", 5)
    many = est.predict_latent(Xt, return_std=True)
    np.testing.assert_allclose(one, many, atol=1e-13)


def test_regressor_sparse():
    from robustep.estimators import StudentTGPRegressor

    X, y = _outlier_regression(n=60)
    Xt = np.linspace(-3, 3, 30)[:, None]
    dense = StudentTGPRegressor(optimizer=None).fit(X, y)
    assert dense.inducing_points_ is None
    same = StudentTGPRegressor(optimizer=None, inducing_points=X).fit(X, y)
    np.testing.assert_allclose(same.predict(Xt), dense.predict(Xt), atol=1e-4)
    assert same.negative_precision_.sum() > 0
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        fitted = StudentTGPRegressor(inducing_points=10, random_state=0).fit(X, y)
        frac = StudentTGPRegressor(
            inducing_points=10, method="fractional", random_state=0, optimizer=None
        ).fit(X, y)
    assert fitted.inducing_points_.shape == (10, 1)
    assert np.mean(np.abs(fitted.predict(Xt) - np.sin(Xt[:, 0]))) < 0.15
    lo, hi = fitted.predict_interval(Xt)
    assert np.all(lo < hi)
    assert np.all(np.isfinite(frac.predict_log_density(X, y)))


@pytest.mark.parametrize("inducing_power", [1.0, 0.5])
def test_regressor_sparse_search_runs(monkeypatch, inducing_power):
    """The sparse search has the dense search's run policy: a start's first (cold)
    evaluation runs the whole chain, every later one is a warm-started search run with
    the search's sweep and factorisation budget and no double loop."""
    import robustep.ep.pseudo_point as pseudo_point
    from robustep.estimators import StudentTGPRegressor
    from robustep.estimators._regressor_inference import InferenceCore

    calls = []
    infer = InferenceCore.infer
    power_ep = pseudo_point.pseudo_point_power_ep

    def spy_infer(core, K, lik, warm=None, max_iter=1000, tol=1e-4, search=False):
        calls.append((warm is None, max_iter, search))
        return infer(core, K, lik, warm=warm, max_iter=max_iter, tol=tol, search=search)

    def spy_power_ep(prior, y, lik, **kw):
        budget = kw.get("max_factorisations")
        calls.append((kw["init"] is None, kw["max_iter"], kw.get("double_loop") == "never"))
        if budget is not None:
            assert budget == get_config().search_factorisations_per_sweep * kw["max_iter"]
        return power_ep(prior, y, lik, **kw)

    monkeypatch.setattr(InferenceCore, "infer", spy_infer)
    monkeypatch.setattr(pseudo_point, "pseudo_point_power_ep", spy_power_ep)
    X, y = _outlier_regression(n=60)
    est = StudentTGPRegressor(
        inducing_points=10, inducing_power=inducing_power, random_state=0
    ).fit(X, y)
    assert est.converged_
    first, *search, final = calls
    assert first == (True, get_config().sparse_first_max_iter, False)
    assert len(search) > 3
    assert all(s == (False, get_config().search_max_iter, True) for s in search)
    assert final[1] == get_config().final_max_iter and not final[2]


def test_sparse_search_keeps_the_last_warm_start_after_a_failure():
    """A failed evaluation returns the penalty bowl and leaves the warm start at the last
    successful evaluation's sites (the line search comes back towards it)."""
    from types import SimpleNamespace

    from robustep.estimators._sparse import SearchSpace, optimise

    seen = []

    def infer(kernel, Z, lik, init):
        seen.append(init)
        k = len(seen)
        return SimpleNamespace(
            log_Z=-float(k), converged=k != 2, site_precision=np.full(3, k), site_shift=np.zeros(3)
        )

    def gradient(res, kernel, Z, lik, wrt_Z):
        return np.zeros(1), np.zeros(0), np.zeros((2, 1))

    space = SearchSpace(infer, gradient, KERNEL.k2, np.zeros((2, 1)), 0, False)
    x = KERNEL.k2.theta
    values = []

    def three_points(obj_func, theta, bounds):
        for step in (0.0, 0.5, 0.25):
            values.append(obj_func(theta + step))
        return theta, values[0][0]

    search = optimise(space, x, [(None, None)] * x.size, optimizer=three_points)
    value, grad = values[1]  # not converged: the penalty around the best point
    assert value > 1e3 - 1.0 and np.allclose(grad, 2e3 * 0.5)
    assert seen[0] is None
    np.testing.assert_array_equal(seen[1][0], np.full(3, 1))
    np.testing.assert_array_equal(seen[2][0], np.full(3, 1))  # not reset by the failure
    assert search.n_evaluations == 3 and search.n_failures == 1
    np.testing.assert_array_equal(search.x, x)  # the best evaluation: log Z = -1 at x


@pytest.mark.parametrize(
    "inducing, match",
    [
        (0, "at least 1"),
        (-3, "at least 1"),
        (61, "exceeds the number of training points"),
        (np.full((3, 2), np.nan), "NaN"),
        (np.zeros((3, 3)), "features"),
        (np.zeros(3), "2-D"),
        (np.zeros((61, 2)), "exceeds"),
        (2.5, "inducing_points"),
        ("ten", "inducing_points"),
    ],
)
def test_bad_inducing_points(inducing, match):
    from robustep.estimators import GPClassifier, StudentTGPRegressor

    X, y, _ = _gpc_data(n=60)
    with pytest.raises(ValueError, match=match):
        GPClassifier(inducing_points=inducing, optimizer=None).fit(X, y)
    with pytest.raises(ValueError, match=match):
        StudentTGPRegressor(inducing_points=inducing, optimizer=None).fit(X, y.astype(float))


def test_unsupported_sparse_options():
    from robustep.estimators import GPClassifier, StudentTGPRegressor

    X, y, _ = _gpc_data(n=40)
    with pytest.raises(ValueError, match="method='laplace' has no sparse"):
        GPClassifier(method="laplace", inducing_points=5).fit(X, y)
    with pytest.raises(ValueError, match="schedule='parallel'"):
        GPClassifier(schedule="sequential", inducing_points=5).fit(X, y)
    from sklearn.gaussian_process.kernels import DotProduct

    with pytest.raises(ValueError, match="optimize_inducing=False"):
        GPClassifier(DotProduct(1.0), inducing_points=5).fit(X, y)
    est = GPClassifier(DotProduct(1.0), inducing_points=5, optimize_inducing=False).fit(X, y)
    assert est.inducing_points_.shape == (5, 2)
    # > 2 classes: the sparse multinomial model (tests/estimators/test_multiclass_sparse.py)
    est = GPClassifier(inducing_points=5, optimizer=None).fit(X, np.arange(40) % 3)
    assert est.multi_class_ == "multinomial" and est.inducing_points_.shape == (5, 2)
    yr = X[:, 0].copy()
    with pytest.raises(ValueError, match="method='vb' has no sparse"):
        StudentTGPRegressor(method="vb", inducing_points=5).fit(X, yr)
    with pytest.raises(ValueError, match="df_grid"):
        StudentTGPRegressor(df_grid=True, inducing_points=5).fit(X, yr)


@pytest.mark.parametrize("signs", ["positive", "mixed", "negative", "zero"])
def test_gram_block_equals_the_explicit_product(signs):
    from robustep.posterior.sparse import gram_block

    rng = np.random.default_rng(7)
    Vr = rng.normal(size=(40, 6))
    beta = {
        "positive": rng.uniform(0.1, 2.0, 40),
        "mixed": rng.uniform(-1.0, 2.0, 40),
        "negative": -rng.uniform(0.1, 2.0, 40),
        "zero": np.zeros(40),
    }[signs]
    gamma = rng.normal(size=40)
    V0 = Vr.copy()
    G, b = gram_block(Vr, beta, gamma)
    np.testing.assert_allclose(G, Vr.T @ (beta[:, None] * Vr), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(G, G.T)
    np.testing.assert_allclose(b, Vr.T @ gamma, rtol=1e-12, atol=1e-13)
    np.testing.assert_array_equal(Vr, V0)
    G0, b0 = gram_block(Vr[:0], beta[:0], gamma[:0])
    np.testing.assert_array_equal(G0, np.zeros((6, 6)))
    np.testing.assert_array_equal(b0, np.zeros(6))
