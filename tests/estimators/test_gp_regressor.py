"""GPRegressor: GP regression with the likelihood as a parameter."""

import warnings

import numpy as np
import pytest
from scipy import stats
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel
from sklearn.utils.estimator_checks import parametrize_with_checks

import robustep
from robustep.estimators import GPRegressor, StudentTGPRegressor
from robustep.estimators._regressor_inference import InferenceCore
from robustep.estimators._regressor_search import LikelihoodSpace, resolve_bounds
from robustep.kernels.gradient import KernelWithGradient
from robustep.likelihoods import Gaussian, Laplace, Probit, StudentT


def _laplace_data(n, seed=0, b=0.3):
    rng = np.random.default_rng(seed)
    X = rng.uniform(0.0, 5.0, size=(n, 1))
    return X, np.sin(X[:, 0]) + rng.laplace(0.0, b, size=n)


def _kernel():
    return ConstantKernel(1.0) * RBF(1.0)


@parametrize_with_checks([GPRegressor(likelihood="laplace", optimizer=None)])
def test_sklearn_contract(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(estimator)


def test_exported():
    assert robustep.GPRegressor is GPRegressor
    assert issubclass(StudentTGPRegressor, GPRegressor)


# --------------------------------------------------------------- Laplace likelihood
def test_laplace_likelihood_learns_its_scale_and_covers():
    """A Laplace-noise fit with method="auto": the scale is learnt near the true b, the
    central 90% predictive interval covers new Laplace-noise observations at close to
    the nominal rate, and the LOO diagnostics are there."""
    b = 0.3
    X, y = _laplace_data(200, b=b)
    est = GPRegressor(_kernel(), likelihood=Laplace(scale=1.0)).fit(X, y)
    assert est.converged_ and est.method_used_ in ("ep", "damped", "double_loop")
    fitted_b = est.likelihood_.scale * est._y_std
    assert fitted_b == pytest.approx(b, rel=0.25)
    Xt, yt = _laplace_data(4000, seed=1, b=b)
    lo, hi = est.predict_interval(Xt, coverage=0.9)
    assert np.mean((yt > lo) & (yt < hi)) == pytest.approx(0.9, abs=0.03)
    assert np.all(np.abs(est.predict(Xt) - np.sin(Xt[:, 0])) < 0.4)
    assert np.all(np.isfinite(est.loo_log_predictive_)) and np.isfinite(est.loo_score())
    # the Laplace noise has variance 2 b^2: the LOO std includes it
    assert np.all(est.loo_std_ > np.sqrt(2.0) * fitted_b)
    assert np.all(est.loo_interval_[0] < est.loo_interval_[1])


def test_laplace_predictive_is_the_likelihoods():
    X, y = _laplace_data(40)
    est = GPRegressor(_kernel(), likelihood="laplace", optimizer=None, normalize_y=False)
    est.fit(X, y)
    Xt = np.linspace(0.0, 5.0, 7)[:, None]
    mean, std = est.predict(Xt, return_std=True)
    lik = est.likelihood_
    np.testing.assert_allclose(
        est.predict_log_density(Xt, y[:7]), lik.predictive_log_density(y[:7], mean, std**2),
        rtol=1e-12,
    )  # fmt: skip
    np.testing.assert_allclose(
        est.predict_quantiles(Xt, [0.1, 0.7]), lik.predictive_quantiles([0.1, 0.7], mean, std**2),
        rtol=1e-9,
    )  # fmt: skip


@pytest.mark.parametrize("method", ["auto", "fractional"])
def test_laplace_evidence_gradient_matches_finite_differences(method):
    """The search's gradient (kernel log theta and log b) against central differences of
    the approximate log evidence, through the core the search evaluates."""
    X, y = _laplace_data(25, seed=3)
    y = (y - y.mean()) / y.std()
    kernel = _kernel()
    core = InferenceCore(method, 0.5, y)
    kg = KernelWithGradient(kernel, X)
    space = LikelihoodSpace.of(Laplace(scale=0.4), resolve_bounds(Laplace(), None))
    x0 = np.concatenate([kernel.theta, space.x0()])
    p = kernel.theta.size

    def evidence(x):
        K, G = kg(x[:p])
        res = core.infer(K, space.unpack(x[p:]), tol=1e-12, max_iter=5000)
        assert res.converged
        return res, G

    res, G = evidence(x0)
    gk, gl = core.gradient(res, G, space.unpack(x0[p:]))
    grad = np.concatenate([gk, space.gradient(gl)])
    h = 1e-5
    fd = []
    for k in range(x0.size):
        e = np.eye(x0.size)[k] * h
        up = evidence(x0 + e)[0].log_marginal_likelihood
        down = evidence(x0 - e)[0].log_marginal_likelihood
        fd.append((up - down) / (2 * h))
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------- Gaussian likelihood
def test_gaussian_likelihood_with_ep_is_the_exact_gp():
    """EP with a Gaussian likelihood is exact: evidence and predictions equal the closed
    form (scikit-learn's GaussianProcessRegressor with alpha = the noise variance)."""
    X, y = _laplace_data(30, seed=2)
    kernel = ConstantKernel(1.3) * RBF(0.7)
    est = GPRegressor(kernel, likelihood=Gaussian(noise_variance=0.2), method="ep",
                      optimizer=None, normalize_y=False).fit(X, y)  # fmt: skip
    ref = GaussianProcessRegressor(kernel, alpha=0.2, optimizer=None).fit(X, y)
    assert est.log_marginal_likelihood_value_ == pytest.approx(
        ref.log_marginal_likelihood_value_, abs=1e-8
    )
    Xt = np.linspace(-1.0, 6.0, 9)[:, None]
    m, s = est.predict(Xt, return_std=True)
    m_ref, s_ref = ref.predict(Xt, return_std=True)
    np.testing.assert_allclose(m, m_ref, atol=1e-8)
    np.testing.assert_allclose(s, s_ref, atol=1e-8)
    lo, hi = est.predict_interval(Xt, coverage=0.9)
    half = stats.norm.ppf(0.95) * np.sqrt(s_ref**2 + 0.2)
    np.testing.assert_allclose(lo, m_ref - half, atol=1e-8)
    np.testing.assert_allclose(hi, m_ref + half, atol=1e-8)


def test_gaussian_likelihood_search_learns_the_noise_variance():
    X, y = _laplace_data(40, seed=4)
    est = GPRegressor(_kernel(), likelihood="gaussian", method="ep").fit(X, y)
    assert est.likelihood_.noise_variance != 0.25
    nv = est.likelihood_.noise_variance
    ys = (y - y.mean()) / y.std()  # the evidence is that of the standardised targets

    def exact(noise_variance):
        gp = GaussianProcessRegressor(est.kernel_, alpha=noise_variance, optimizer=None)
        return gp.fit(X, ys).log_marginal_likelihood_value_

    assert est.log_marginal_likelihood_value_ == pytest.approx(exact(nv), abs=1e-8)
    # at the optimum: no better noise variance nearby
    assert exact(nv) >= max(exact(nv * 1.01), exact(nv / 1.01))


# ------------------------------------------------------------------ the subclass
def test_student_t_regressor_is_gp_regressor_with_the_student_t():
    X, y = _laplace_data(30, seed=5)
    a = StudentTGPRegressor(_kernel(), df=4.0, scale=0.5).fit(X, y)
    b = GPRegressor(_kernel(), likelihood=StudentT(df=4.0, scale=0.5),
                    likelihood_bounds={"df": "fixed"}).fit(X, y)  # fmt: skip
    assert a.log_marginal_likelihood_value_ == b.log_marginal_likelihood_value_
    assert a.scale_ == b.likelihood_.scale and a.df_ == b.likelihood_.df == 4.0
    np.testing.assert_array_equal(a.predict(X), b.predict(X))


def test_likelihood_bounds_are_honoured_and_named_in_the_warning():
    X, y = _laplace_data(40, seed=6)
    with pytest.warns(ConvergenceWarning, match="likelihood_bounds"):
        est = GPRegressor(_kernel(), likelihood="laplace",
                          likelihood_bounds={"scale": (2.0, 3.0)}).fit(X, y)  # fmt: skip
    assert est.likelihood_.scale == pytest.approx(2.0)
    assert ("scale", "lower") in est.hyperparameters_at_bounds_
    fixed = GPRegressor(_kernel(), likelihood=Laplace(0.7), likelihood_bounds={"scale": "fixed"})
    assert fixed.fit(X, y).likelihood_.scale == 0.7
    with pytest.warns(ConvergenceWarning, match="likelihood_bounds"):
        t = StudentTGPRegressor(_kernel(), likelihood_bounds={"scale": (1.5, 2.0)}).fit(X, y)
    assert t.scale_ == pytest.approx(1.5)


def test_the_user_likelihood_is_not_modified():
    lik = Laplace(scale=0.8)
    X, y = _laplace_data(20)
    est = GPRegressor(_kernel(), likelihood=lik).fit(X, y)
    assert lik.scale == 0.8 and est.likelihood_ is not lik


# ------------------------------------------------------------------------ errors
@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"likelihood": "cauchy"}, "not known"),
        ({"likelihood": Probit()}, "real-valued"),
        ({"likelihood": "laplace", "method": "vb"}, r"StudentT likelihood.*'auto', 'ep'"),
        ({"likelihood": "laplace", "method": "mcmc"}, "scale-mixture"),
        ({"likelihood": "laplace", "method": "laplace"}, "second derivative"),
        ({"likelihood": "gaussian", "df_grid": True}, "df_grid"),
        ({"likelihood": "laplace", "likelihood_bounds": {"df": (1, 2)}}, "does not have"),
        ({"likelihood": "laplace", "likelihood_bounds": {"scale": (2, 1)}}, "low <= high"),
        ({"likelihood": "laplace", "likelihood_bounds": {"scale": "free"}}, "'fixed'"),
    ],
)
def test_bad_likelihood_gives_a_clear_error(kwargs, match):
    X, y = _laplace_data(10)
    with pytest.raises(ValueError, match=match):
        GPRegressor(**kwargs).fit(X, y)


def test_likelihood_of_the_wrong_type_is_refused():
    X, y = _laplace_data(10)
    with pytest.raises((ValueError, TypeError), match="likelihood"):
        GPRegressor(likelihood=3).fit(X, y)


# ------------------------------------------------------------ sparse model, LOO glue
def test_sparse_laplace_regressor_learns_its_scale():
    X, y = _laplace_data(120, seed=7)
    dense = GPRegressor(_kernel(), likelihood="laplace").fit(X, y)
    sparse = GPRegressor(_kernel(), likelihood="laplace", inducing_points=15, random_state=0)
    sparse.fit(X, y)
    assert sparse.inducing_points_.shape == (15, 1) and sparse.converged_
    assert sparse.likelihood_.scale != 0.5
    assert sparse.likelihood_.scale == pytest.approx(dense.likelihood_.scale, rel=0.2)
    assert np.all(np.isfinite(sparse.loo_log_predictive_))


def test_set_regressor_loo_takes_the_estimators_components():
    """diagnostics.set_regressor_loo with (result, likelihood) pairs, or with the
    (result, likelihood, df, scale) tuples it also accepts, sets what fit sets."""
    from robustep import diagnostics

    X, y = _laplace_data(30, seed=8)
    est = StudentTGPRegressor(_kernel(), df=3.0).fit(X, y)
    res, lik = est._fit.components[0].res, est.likelihood_
    for comps in ([(res, lik)], [(res, lik, lik.df, lik.scale)]):
        other = StudentTGPRegressor()
        diagnostics.set_regressor_loo(other, comps, np.ones(1), est._y, est._y_mean, est._y_std)
        np.testing.assert_array_equal(other.loo_log_predictive_, est.loo_log_predictive_)
        np.testing.assert_array_equal(other.loo_interval_[1], est.loo_interval_[1])
        np.testing.assert_array_equal(other.outlier_scores_, est.outlier_scores_)


# --------------------------------------------------- the final fit's tol and max_iter
def _final_residual(est):
    """The last recorded residual of the fitted EP run (largest site change)."""
    return est._fit.components[0].res.history["residual"][-1]


@pytest.mark.parametrize("cls", [GPRegressor, StudentTGPRegressor])
def test_tighter_tol_moves_the_fixed_point(cls):
    """A tighter tol runs the final fit to a smaller residual in more sweeps."""
    X, y = _laplace_data(30)
    kw = dict(kernel=_kernel(), method="ep", optimizer=None)
    loose = cls(**kw).fit(X, y)
    tight = cls(tol=1e-9, **kw).fit(X, y)
    assert loose.converged_ and tight.converged_
    assert _final_residual(loose) < 1e-4 and _final_residual(tight) < 1e-9
    assert _final_residual(tight) < _final_residual(loose)
    assert tight.n_iter_ > loose.n_iter_


@pytest.mark.parametrize("cls", [GPRegressor, StudentTGPRegressor])
@pytest.mark.parametrize("optimizer", [None, "fmin_l_bfgs_b"])
def test_max_iter_one_ends_not_converged(cls, optimizer):
    """max_iter bounds the final fit (not the search): one sweep ends unconverged."""
    X, y = _laplace_data(30)
    est = cls(kernel=_kernel(), method="ep", optimizer=optimizer, max_iter=1)
    with pytest.warns(ConvergenceWarning):
        est.fit(X, y)
    assert not est.converged_ and est.n_iter_ == 1


def test_default_tol_and_max_iter_are_the_former_final_fit():
    """The defaults are the final fit's former fixed 1e-4 and config.final_max_iter."""
    X, y = _laplace_data(30)
    kw = dict(kernel=_kernel(), df_grid=[2.0, 6.0], n_restarts_optimizer=0, random_state=0)
    default = StudentTGPRegressor(**kw).fit(X, y)
    explicit = StudentTGPRegressor(tol=1e-4, max_iter=robustep.get_config().final_max_iter,
                                   **kw).fit(X, y)  # fmt: skip
    assert default.get_params()["tol"] == 1e-4 and default.get_params()["max_iter"] == 1000
    assert default.log_marginal_likelihood_value_ == explicit.log_marginal_likelihood_value_
    np.testing.assert_array_equal(default.site_precision_, explicit.site_precision_)


@pytest.mark.parametrize("params", [{"tol": 0.0}, {"tol": -1.0}, {"max_iter": 0},
                                    {"max_iter": 2.5}])  # fmt: skip
def test_tol_and_max_iter_are_validated(params):
    X, y = _laplace_data(10)
    with pytest.raises(ValueError, match="tol|max_iter"):
        GPRegressor(**params).fit(X, y)


def test_sparse_model_takes_tol_and_max_iter():
    """The sparse model's final fit runs at the estimator's tol and max_iter too."""
    X, y = _laplace_data(40)
    kw = dict(kernel=_kernel(), method="ep", optimizer=None, inducing_points=8, random_state=0)
    loose = GPRegressor(**kw).fit(X, y)
    tight = GPRegressor(tol=1e-9, **kw).fit(X, y)
    assert loose.converged_ and tight.converged_ and tight.n_iter_ > loose.n_iter_
    with pytest.warns(ConvergenceWarning):
        one = GPRegressor(max_iter=1, **kw).fit(X, y)
    assert not one.converged_ and one.n_iter_ == 1
