"""robustep.posterior.make_prior builds the priors the estimators build, by name.

Each representation is compared with the prior built directly as the estimators build
it (dense K with check=False, FITC with the fixed relative jitter, its Λ = 0 power-EP
variant, the array backend, Dask): EP on both gives identical numbers.
"""

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

from robustep import _array_api as aa
from robustep.ep import expectation_propagation
from robustep.ep.pseudo_point import pseudo_point_prior
from robustep.estimators import _device, _sparse
from robustep.likelihoods import Probit, StudentT
from robustep.posterior import (
    DensePrior,
    DiagonalPlusLowRankPrior,
    FITCPrior,
    GaussianPrior,
    make_prior,
    prior_representations,
    register_prior,
)
from robustep.posterior import factory as factory_module

KERNEL = ConstantKernel(1.3) * RBF(0.8) + WhiteKernel(1e-3)


def _data(n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = np.where(X[:, 0] - 0.5 * X[:, 1] + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y, X[rng.choice(n, size=8, replace=False)]


def _same_ep(a, b, y, likelihood=None):
    likelihood = Probit() if likelihood is None else likelihood
    ra = expectation_propagation(a, y, likelihood, tol=1e-8)
    rb = expectation_propagation(b, y, likelihood, tol=1e-8)
    for name in ("site_precision", "site_shift", "mean", "var"):
        np.testing.assert_array_equal(np.asarray(getattr(ra, name)), np.asarray(getattr(rb, name)))
    assert ra.log_Z == rb.log_Z
    return ra


def test_dense_is_the_estimators_dense_prior():
    X, y, _ = _data()
    made = make_prior(KERNEL, X)
    assert type(made) is DensePrior
    _same_ep(made, DensePrior(KERNEL(X), check=False), y)
    with pytest.raises(ValueError, match="NaN or inf"):
        make_prior(ConstantKernel(np.inf), X, "dense")


@pytest.mark.parametrize("likelihood", [Probit(), StudentT(df=3.0, scale=0.5)])
def test_fitc_is_the_estimators_fitc_prior(likelihood):
    X, y, Z = _data()
    made = make_prior(KERNEL, X, "fitc", inducing_inputs=Z,
                      relative_jitter=_sparse.RELATIVE_JITTER)  # fmt: skip
    direct = FITCPrior.from_kernel(KERNEL, X, Z, jitter=_sparse.fixed_jitter(KERNEL, Z))
    assert made.jitter == direct.jitter
    _same_ep(made, direct, y if isinstance(likelihood, Probit) else X[:, 0], likelihood)
    absolute = make_prior(KERNEL, X, "fitc", inducing_inputs=Z, jitter=direct.jitter)
    np.testing.assert_array_equal(absolute.V, direct.V)
    with pytest.raises(ValueError, match="not both"):
        make_prior(KERNEL, X, "fitc", inducing_inputs=Z, jitter=1e-6, relative_jitter=1e-6)


def test_pseudo_point_is_the_power_ep_prior():
    X, y, Z = _data()
    made = make_prior(KERNEL, X, "fitc", inducing_inputs=Z, jitter=1e-6, pseudo_point=True)
    ref = pseudo_point_prior(FITCPrior.from_kernel(KERNEL, X, Z, jitter=1e-6))
    assert np.all(made.Lambda == 0) and np.any(made.conditional_var > 0)
    for name in ("V", "L_mm", "Lambda", "conditional_var", "K_nn_diag"):
        np.testing.assert_array_equal(getattr(made, name), getattr(ref, name))
    _same_ep(made, ref, y)


def test_array_is_the_device_prior():
    xs = pytest.importorskip("array_api_strict")
    like = xs.zeros(0, dtype=xs.float64)
    X, y, _ = _data(30)
    made = make_prior(KERNEL, X, "array", like=like)
    direct = _device.prior(KERNEL, X, like)[0]
    np.testing.assert_array_equal(aa.to_numpy(made.K), aa.to_numpy(direct.K))
    _same_ep(made, direct, y)


def test_dask_is_the_estimators_dask_prior():
    da = pytest.importorskip("dask.array")
    from robustep.posterior._dask import DaskFITCPrior

    X, y, Z = _data(60)
    Xd = da.from_array(X, chunks=(20, 2))
    made = make_prior(KERNEL, Xd, "dask", inducing_inputs=Z,
                      relative_jitter=_sparse.RELATIVE_JITTER)  # fmt: skip
    assert type(made) is DaskFITCPrior
    direct = DaskFITCPrior(KERNEL, Xd, Z, jitter=_sparse.fixed_jitter(KERNEL, Z))
    _same_ep(made, direct, y)


def test_diagonal_plus_low_rank_from_inducing_inputs_is_the_fitc_covariance():
    X, y, Z = _data()
    made = make_prior(KERNEL, X, "diagonal_plus_low_rank", inducing_inputs=Z, jitter=1e-6,
                      nugget=1e-3)  # fmt: skip
    fitc = FITCPrior.from_kernel(KERNEL, X, Z, jitter=1e-6)
    assert isinstance(made, DiagonalPlusLowRankPrior)
    np.testing.assert_allclose(
        made.dense_covariance(), fitc.dense_covariance() + 1e-3 * np.eye(X.shape[0]), atol=1e-12
    )


def test_registry(monkeypatch):
    monkeypatch.setattr(factory_module, "_BUILDERS", dict(factory_module._BUILDERS))
    assert {"dense", "array", "fitc", "dask", "diagonal_plus_low_rank"} <= set(
        prior_representations()
    )
    with pytest.raises(ValueError, match="unknown prior representation 'nope'.*dense"):
        make_prior(KERNEL, np.zeros((3, 2)), "nope")
    with pytest.raises(ValueError, match="already registered"):
        register_prior("dense", lambda kernel, X: None)

    def scaled(kernel, X, *, scale):
        return DensePrior(scale * kernel(X))

    register_prior("scaled", scaled)
    X = _data(10)[0]
    made = make_prior(KERNEL, X, "scaled", scale=2.0)
    assert isinstance(made, GaussianPrior)
    np.testing.assert_allclose(made.K, 2.0 * KERNEL(X))
    register_prior("scaled", lambda kernel, X: "not a prior", replace=True)
    with pytest.raises(TypeError, match="not a robustep.posterior.GaussianPrior"):
        make_prior(KERNEL, X, "scaled")
