"""Sparse EP on Dask arrays (robustep.posterior._dask): same fit as in memory, bad input.

Reference: the in-memory sparse model (tests/estimators/test_sparse.py checks that one against dense
linear algebra and dense EP).  Runs with the threaded scheduler and on a 2-worker
LocalCluster (processes=False keeps the start-up fast).
"""

import warnings

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

from sklearn.gaussian_process.kernels import RBF, ConstantKernel  # noqa: E402

from robustep.ep import expectation_propagation  # noqa: E402
from robustep.ep.sparse_evidence import fitc_log_Z_gradient  # noqa: E402
from robustep.estimators import GPClassifier, StudentTGPRegressor  # noqa: E402
from robustep.likelihoods import Probit  # noqa: E402
from robustep.posterior._dask import DaskFITCPrior  # noqa: E402
from robustep.posterior.sparse import FITCPrior  # noqa: E402

KERNEL = ConstantKernel(1.5) * RBF(0.8)


@pytest.fixture(scope="module")
def client():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cluster = distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
        )
        c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()


def _data(n=150, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = (np.sin(2 * X[:, 0]) + X[:, 1] > 0).astype(int)
    Z = rng.normal(size=(8, 2))
    return X, y, Z, rng


def _assert_same_classifier(a, b, Xt, atol=1e-8):
    np.testing.assert_allclose(a.predict_proba(Xt), b.predict_proba(Xt), atol=atol)
    np.testing.assert_allclose(a.site_precision_, b.site_precision_, atol=atol)
    np.testing.assert_allclose(a.site_shift_, b.site_shift_, atol=atol)
    np.testing.assert_allclose(
        a.log_marginal_likelihood_value_, b.log_marginal_likelihood_value_, atol=atol
    )
    np.testing.assert_allclose(a.inducing_points_, b.inducing_points_, atol=atol)


@pytest.mark.parametrize("scheduler", ["threads", "distributed"])
def test_prior_posterior_and_gradient_match_in_memory(scheduler, request):
    if scheduler == "distributed":
        request.getfixturevalue("client")
    X, y, Z, _ = _data(n=200)
    Xd = da.from_array(X, chunks=(45, 2))  # uneven chunks
    ref = expectation_propagation(
        FITCPrior.from_kernel(KERNEL, X, Z, jitter=1e-8), 2 * y - 1, Probit(), tol=1e-10
    )
    prior = DaskFITCPrior(KERNEL, Xd, Z, jitter=1e-8)
    res = expectation_propagation(prior, 2 * y - 1, Probit(), tol=1e-10)
    np.testing.assert_allclose(res.mean, ref.mean, atol=1e-10)
    np.testing.assert_allclose(res.var, ref.var, atol=1e-10)
    assert res.log_Z == pytest.approx(ref.log_Z, abs=1e-9)
    g_ref = fitc_log_Z_gradient(ref, KERNEL, X, Z, Probit(), 2 * y - 1)
    g = fitc_log_Z_gradient(res, KERNEL, Xd, Z, Probit(), 2 * y - 1)
    np.testing.assert_allclose(g[0], g_ref[0], atol=1e-8)
    np.testing.assert_allclose(g[2], g_ref[2], atol=1e-8)
    np.testing.assert_allclose(prior.dense_covariance(), ref.posterior.prior.dense_covariance())


@pytest.mark.parametrize("scheduler", ["threads", "distributed"])
def test_classifier_dask_equals_in_memory(scheduler, request):
    if scheduler == "distributed":
        request.getfixturevalue("client")
    X, y, Z, rng = _data()
    Xt = rng.normal(size=(30, 2))
    Xd, yd = da.from_array(X, chunks=(40, 2)), da.from_array(y, chunks=40)
    kw = dict(inducing_points=Z, random_state=0, tol=1e-9, optimizer=None)
    a = GPClassifier(KERNEL, **kw).fit(X, y)
    b = GPClassifier(KERNEL, **kw).fit(Xd, yd)
    assert b.n_features_in_ == 2 and b.converged_
    _assert_same_classifier(a, b, Xt)


@pytest.mark.slow  # ~20 s: an L-BFGS-B run through Dask's per-task overhead
def test_classifier_dask_optimised_equals_in_memory():
    """Hyperparameters optimised (inducing inputs fixed): the same L-BFGS-B path.

    With the inducing inputs optimised too the two runs agree only to the optimiser's
    stopping tolerance (rounding differences of the chunked sums change its path).
    """
    X, y, Z, rng = _data(n=60)
    y[:6] = 1 - y[:6]  # label noise keeps the amplitude off its bound
    Xt = rng.normal(size=(30, 2))
    Xd = da.from_array(X, chunks=(30, 2))
    kw = dict(inducing_points=Z, random_state=0, tol=1e-9, optimize_inducing=False)
    a = GPClassifier(KERNEL, **kw).fit(X, y)
    b = GPClassifier(KERNEL, **kw).fit(Xd, y)
    assert not np.allclose(a.kernel_.theta, KERNEL.theta)
    np.testing.assert_allclose(a.kernel_.theta, b.kernel_.theta, atol=1e-8)
    _assert_same_classifier(a, b, Xt)


def test_regressor_dask_equals_in_memory(client):
    rng = np.random.default_rng(3)
    X = rng.uniform(-3, 3, size=(120, 1))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=120)
    y[[5, 50, 90]] += [5.0, -6.0, 4.0]
    Z = np.linspace(-3, 3, 7)[:, None]
    Xd, yd = da.from_array(X, chunks=(50, 1)), da.from_array(y, chunks=50)
    a = StudentTGPRegressor(inducing_points=Z, optimizer=None).fit(X, y)
    b = StudentTGPRegressor(inducing_points=Z, optimizer=None).fit(Xd, yd)
    Xt = np.linspace(-3, 3, 20)[:, None]
    np.testing.assert_allclose(a.predict(Xt), b.predict(Xt), atol=1e-8)
    np.testing.assert_allclose(
        a.predict_log_density(Xt, np.sin(Xt[:, 0])),
        b.predict_log_density(Xt, np.sin(Xt[:, 0])),
        atol=1e-8,
    )
    assert b.negative_precision_.sum() > 0
    assert b.n_features_in_ == 1


def test_validate_dask_returns_n_features_and_leaves_the_estimator_alone():
    from robustep.estimators._sparse import validate_dask

    X, y, Z, _ = _data(n=60)
    est = GPClassifier(inducing_points=Z)
    before = dict(vars(est))
    Xd, yv, n_features = validate_dask(est, da.from_array(X, chunks=(20, 2)), y, classifier=True)
    assert n_features == 2
    assert vars(est) == before
    np.testing.assert_array_equal(yv, y)


def test_int_inducing_points_on_dask():
    X, y, _, _ = _data()
    Xd = da.from_array(X, chunks=(50, 2))
    est = GPClassifier(inducing_points=6, optimizer=None, random_state=0).fit(Xd, y)
    assert est.inducing_points_.shape == (6, 2)
    assert est.score(X, y) > 0.8


def test_bad_dask_input():
    X, y, Z, _ = _data(n=60)
    Xd = da.from_array(X, chunks=(20, 2))
    with pytest.raises(ValueError, match="do not match"):
        GPClassifier(inducing_points=Z).fit(Xd, da.from_array(y, chunks=25))
    with pytest.raises(ValueError, match="rechunk"):
        GPClassifier(inducing_points=Z).fit(da.from_array(X, chunks=(20, 1)), y)
    with pytest.raises(ValueError, match="inducing_points"):
        GPClassifier().fit(Xd, y)
    Xn = X.copy()
    Xn[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        GPClassifier(inducing_points=Z).fit(da.from_array(Xn, chunks=(20, 2)), y)
    with pytest.raises(ValueError, match="rows but y has"):
        GPClassifier(inducing_points=Z).fit(Xd, y[:50])
    with pytest.raises(ValueError, match="exceeds"):
        StudentTGPRegressor(inducing_points=61).fit(Xd, y.astype(float))
