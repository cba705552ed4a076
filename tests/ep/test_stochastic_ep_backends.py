"""Stochastic power EP on array backends and on Dask input (robustep.ep.stochastic,
robustep.ep._stochastic_backend, robustep.ep._minibatches; docs/derivations/stochastic_ep.md
§6, §7).

* the array path (any array-API library) equals the numpy path: array-api-strict and
  numpy through array-api-compat here, PyTorch on the CPU where it is installed;
* the device kernel blocks and their gradients equal the numpy kernel rows and
  derivatives of robustep.kernels.inducing;
* Dask input: the batches are the rows of the blocks in the documented order (every row
  once per epoch, each block computed once), the result does not depend on the scheduler
  (threads or a distributed client), and learning from Dask reaches the optimum of
  learning in memory;
* what is not supported raises errors that say what to do.
"""

import warnings

import numpy as np
import pytest
from scipy.stats import norm
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Matern, WhiteKernel

from robustep.ep._minibatches import BlockBatches
from robustep.ep.stochastic import fit_stochastic_ep
from robustep.kernels.array import kernel_block, kernel_block_gradient
from robustep.kernels.inducing import (
    cross_covariance,
    inducing_gradient_mm,
    inducing_gradient_rows,
    theta_gradient_mm,
    theta_gradient_rows,
)
from robustep.likelihoods import Probit, StudentT

xs = pytest.importorskip("array_api_strict")


def _probit(n, m, seed=0, noise=0.3):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, 2))
    f = np.sin(1.5 * X[:, 0]) * np.cos(X[:, 1])
    y = np.where(f + noise * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y, X[rng.choice(n, m, replace=False)]


def _student(n, m, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-3, 3, size=(n, 2))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=n)
    y[: n // 10] += rng.choice([-1, 1], n // 10) * rng.uniform(3, 6, n // 10)
    return X, y, X[rng.choice(n, m, replace=False)]


CASES = {
    "probit-tied-ard": (_probit, ConstantKernel(2.0) * RBF([1.0, 1.5]), Probit(),
                        dict(tied_sites=True, damping=2.0)),
    "probit-point-white": (_probit, ConstantKernel(2.0) * RBF(1.0) + WhiteKernel(0.01),
                           Probit(), dict(tied_sites=False, damping=0.5)),
    "student-tied": (_student, ConstantKernel(1.0) * RBF(1.0), StudentT(3.0, 0.1),
                     dict(tied_sites=True, damping=1.0)),
    "student-point": (_student, ConstantKernel(1.0) * RBF(1.0), StudentT(3.0, 0.1),
                      dict(tied_sites=False, damping=0.3)),
}  # fmt: skip


def _fit(case, device, **extra):
    make, kernel, lik, kw = CASES[case]
    X, y, Z = make(240, 10)
    return fit_stochastic_ep(kernel, X, y, lik, Z, batch_size=48, n_epochs=3,
                             learning_rate=0.05, random_state=1, device=device,
                             **kw, **extra)  # fmt: skip


def _assert_same_fit(a, b):
    np.testing.assert_allclose(a.mean, b.mean, rtol=0, atol=1e-10)
    np.testing.assert_allclose(a.cov, b.cov, rtol=0, atol=1e-10)
    np.testing.assert_allclose(a.kernel.theta, b.kernel.theta, rtol=0, atol=1e-10)
    np.testing.assert_allclose(a.inducing_inputs, b.inducing_inputs, rtol=0, atol=1e-10)
    np.testing.assert_allclose(a.likelihood.get_log_params(), b.likelihood.get_log_params(),
                               rtol=0, atol=1e-10)  # fmt: skip
    energies = [[h["energy"] for h in r.history] for r in (a, b)]
    np.testing.assert_allclose(energies[0], energies[1], rtol=1e-10)
    if a.site_precision is not None:
        np.testing.assert_allclose(a.site_precision, b.site_precision, rtol=0, atol=1e-10)
        np.testing.assert_allclose(a.site_shift, b.site_shift, rtol=0, atol=1e-10)
    assert a.n_steps == b.n_steps and a.stopped == b.stopped
    assert type(a.mean) is np.ndarray and type(b.mean) is np.ndarray


# ------------------------------------------------------------------- array backends
@pytest.mark.parametrize("case", sorted(CASES))
def test_array_api_strict_equals_numpy(case):
    ref = _fit(case, None)
    got = _fit(case, xs.zeros(0, dtype=xs.float64))
    _assert_same_fit(ref, got)
    assert not np.allclose(ref.inducing_inputs, CASES[case][0](240, 10)[2])  # Z learned


def test_numpy_through_the_array_path_equals_numpy():
    pytest.importorskip("array_api_compat")
    _assert_same_fit(_fit("probit-tied-ard", None), _fit("probit-tied-ard", np.zeros(0)))


def test_keep_best_and_fixed_hyperparameters_on_the_array_path():
    fixed = dict(learn_kernel=False, learn_likelihood=False, learn_inducing=False)
    for case, extra in [("probit-point-white", fixed), ("probit-tied-ard", {"keep_best": True})]:
        _assert_same_fit(_fit(case, None, **extra), _fit(case, xs.zeros(0), **extra))


@pytest.mark.parametrize("case", ["probit-tied-ard", "student-point"])
def test_torch_cpu_equals_numpy(case):
    torch = pytest.importorskip("torch")
    pytest.importorskip("array_api_compat")
    got = _fit(case, "cpu")
    _assert_same_fit(_fit(case, None), got)
    # the template array: the same as the device string
    _assert_same_fit(got, _fit(case, torch.zeros(0, dtype=torch.float64)))


@pytest.mark.parametrize(
    "kernel",
    [ConstantKernel(2.0) * RBF(1.3), ConstantKernel(1.5) * RBF([1.0, 0.5, 2.0]) + WhiteKernel(0.1),
     RBF(0.7) * RBF([1.0, 2.0, 3.0]), ConstantKernel(2.0, "fixed") * RBF(1.0)],
    ids=["const-rbf", "ard-white", "rbf-product", "fixed-constant"],
)  # fmt: skip
def test_device_kernel_blocks_and_gradients_equal_numpy(kernel):
    rng = np.random.default_rng(0)
    X, Z = rng.normal(size=(30, 3)), rng.normal(size=(7, 3))
    W = rng.normal(size=(30, 7))
    W_mm = rng.normal(size=(7, 7))
    W_mm = W_mm + W_mm.T
    Xd, Zd = xs.asarray(X), xs.asarray(Z)
    np.testing.assert_allclose(np.asarray(kernel_block(kernel, Xd, Zd)),
                               cross_covariance(kernel, X, Z), atol=1e-13)  # fmt: skip
    np.testing.assert_allclose(np.asarray(kernel_block(kernel, Zd)), kernel(Z), atol=1e-13)
    g_t, g_Z = kernel_block_gradient(kernel, Xd, Zd, xs.asarray(W))
    np.testing.assert_allclose(g_t, theta_gradient_rows(kernel, X, Z, W, np.zeros(30)),
                               atol=1e-12)  # fmt: skip
    np.testing.assert_allclose(np.asarray(g_Z), inducing_gradient_rows(kernel, X, Z, W),
                               atol=1e-12)  # fmt: skip
    g_t, g_Z = kernel_block_gradient(kernel, Zd, None, xs.asarray(W_mm))
    np.testing.assert_allclose(g_t, theta_gradient_mm(kernel, Z, W_mm), atol=1e-12)
    np.testing.assert_allclose(np.asarray(g_Z), inducing_gradient_mm(kernel, Z, W_mm),
                               atol=1e-12)  # fmt: skip


def test_array_path_errors():
    X, y, Z = _probit(60, 5)
    with pytest.raises(ValueError, match="device=None"):
        fit_stochastic_ep(Matern(1.0), X, y, Probit(), Z, device=xs.zeros(0))
    with pytest.raises(TypeError, match="template array"):
        fit_stochastic_ep(RBF(1.0), X, y, Probit(), Z, device=3)
    try:
        import torch  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match=r"robustep\[torch\]"):
            fit_stochastic_ep(RBF(1.0), X, y, Probit(), Z, device="cuda")
    else:
        with pytest.raises(ValueError, match="dtype"):
            fit_stochastic_ep(RBF(1.0), X, y, Probit(), Z, device="cpu", dtype="float16")


# ------------------------------------------------------------------------------ Dask
da = pytest.importorskip("dask.array")


def _reference_batches(n_rows, batch, rng, epochs):
    """The documented order: per epoch a permutation of the blocks (the next epoch's is
    drawn when the last block of this one is fetched), the rows of each block permuted,
    leftovers opening the next batch, the epoch's remainder its last batch."""
    offsets = np.concatenate([[0], np.cumsum(n_rows)])
    order = list(rng.permutation(len(n_rows)))
    out = []
    for _ in range(epochs):
        this, carry, batches = order, np.empty(0, dtype=int), []
        for k, j in enumerate(this):
            if k == len(this) - 1:
                order = list(rng.permutation(len(n_rows)))
            rows = offsets[j] + rng.permutation(n_rows[j])
            rows = np.concatenate([carry, rows])
            stop = (rows.size // batch) * batch
            batches += [rows[s : s + batch] for s in range(0, stop, batch)]
            carry = rows[stop:]
        if carry.size:
            batches.append(carry)
        out.append(batches)
    return out


def test_block_batches_follow_the_documented_order_and_compute_each_block_once():
    n_rows = (70, 30, 55, 45)
    n = sum(n_rows)
    ids = np.arange(n, dtype=float)
    computed = []

    def block(x, block_info=None):
        computed.append(block_info[0]["chunk-location"][0])
        return x

    X = da.from_array(np.stack([ids, -ids], axis=1), chunks=(n_rows, 2)).map_blocks(
        block, dtype=float
    )
    y = np.where(ids % 3 == 0, 1.0, -1.0)
    src = BlockBatches(X, y, Probit().validate_targets, 40, np.random.default_rng(3))
    expected = _reference_batches(n_rows, 40, np.random.default_rng(3), epochs=3)
    try:
        for epoch in expected:
            got = list(src.epoch())
            assert len(got) == int(np.ceil(n / 40)) == len(epoch)
            for (idx, Xb, yb), rows in zip(got, epoch, strict=True):
                assert idx is None
                np.testing.assert_array_equal(Xb[:, 0], rows)
                np.testing.assert_array_equal(yb, y[rows])
    finally:
        src.close()
    # each block once per epoch; the next epoch's first block, prefetched, is computed
    # too unless close() cancelled it before the worker thread picked it up
    n_blocks = len(n_rows)
    assert 3 * n_blocks <= len(computed) <= 3 * n_blocks + 1
    for e in range(3):
        assert sorted(computed[e * n_blocks : (e + 1) * n_blocks]) == list(range(n_blocks))


def test_dask_fit_is_the_same_with_threads_and_with_a_distributed_client():
    distributed = pytest.importorskip("distributed")
    X, y, Z = _probit(400, 8)
    Xd = da.from_array(X, chunks=(90, 1))  # columns are merged into one chunk
    yd = da.from_array(y, chunks=50)  # rechunked to X's rows
    kw = dict(power=0.5, batch_size=64, n_epochs=2, learning_rate=0.05, random_state=4)
    a = fit_stochastic_ep(ConstantKernel(1.0) * RBF(1.0), Xd, yd, Probit(), Z, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the dashboard's port
        cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                           dashboard_address=None)  # fmt: skip
    with cluster, distributed.Client(cluster):
        b = fit_stochastic_ep(ConstantKernel(1.0) * RBF(1.0), Xd, y, Probit(), Z, **kw)
    np.testing.assert_array_equal(a.mean, b.mean)
    np.testing.assert_array_equal(a.inducing_inputs, b.inducing_inputs)
    assert a.n_steps == b.n_steps == 2 * 7


def test_dask_and_in_memory_learning_reach_the_same_optimum():
    X, y, Z = _probit(2000, 20, seed=1, noise=1.0)
    kernel = ConstantKernel(1.0) * RBF(1.0)
    kw = dict(power=1.0, batch_size=1000, n_epochs=40, learning_rate=0.2,
              learn_inducing=False, random_state=0)  # fmt: skip
    memory = fit_stochastic_ep(kernel, X, y, Probit(), Z, **kw)
    lazy = fit_stochastic_ep(kernel, da.from_array(X, chunks=(400, 2)),
                             da.from_array(y, chunks=400), Probit(), Z, **kw)  # fmt: skip
    assert not np.array_equal(memory.mean, lazy.mean)  # different batches ...
    # ... the same optimum: the evidence is flat along the amplitude (theta[0])
    assert np.all(np.abs(lazy.kernel.theta - memory.kernel.theta) < [0.15, 0.03])
    assert np.all(np.abs(memory.kernel.theta - kernel.theta) > 0.4)  # both moved
    Xs = np.random.default_rng(9).uniform(-3, 3, size=(300, 2))
    (m1, v1), (m2, v2) = memory.predict(Xs), lazy.predict(Xs)
    p1, p2 = norm.cdf(m1 / np.sqrt(1 + v1)), norm.cdf(m2 / np.sqrt(1 + v2))
    assert np.mean(np.abs(p1 - p2)) < 0.01
    assert np.max(np.abs(p1 - p2)) < 0.05
    assert np.max(np.abs(p1 - 0.5)) > 0.3  # not both at the prior


def test_dask_errors():
    X, y, Z = _probit(100, 5)
    Xd = da.from_array(X, chunks=(25, 2))
    kernel = RBF(1.0)
    with pytest.raises(ValueError, match="tied_sites=True"):
        fit_stochastic_ep(kernel, Xd, y, Probit(), Z, tied_sites=False, damping=0.5)
    unknown = Xd[da.from_array(y, chunks=25) > 0]
    with pytest.raises(ValueError, match="compute_chunk_sizes"):
        fit_stochastic_ep(kernel, unknown, y, Probit(), Z)
    with pytest.raises(ValueError, match="shape"):
        fit_stochastic_ep(kernel, Xd, y[:50], Probit(), Z)
    with pytest.raises(ValueError, match="-1 or \\+1|labels"):
        fit_stochastic_ep(kernel, Xd, da.from_array(np.zeros(100), chunks=25), Probit(), Z)
    with pytest.raises(ValueError, match="2-D"):
        fit_stochastic_ep(kernel, da.from_array(X[:, 0], chunks=25), y, Probit(), Z)
