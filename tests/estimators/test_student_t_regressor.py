"""Tests of StudentTGPRegressor (robust GP regression, Jylänki et al. 2011)."""

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel
from sklearn.utils.estimator_checks import parametrize_with_checks

import _reference_student_t as st
import robustep
from robustep.estimators._regressor_inference import InferenceCore
from robustep.estimators.student_t_regressor import StudentTGPRegressor, default_df_grid


def _data(n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = np.sort(rng.uniform(-3, 3, size=(n, 1)), axis=0)
    y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(n)
    out = np.array([5, n // 2, n - 6])
    y[out] += np.array([3.0, -3.0, 2.5])
    Xt = np.linspace(-2.8, 2.8, 30)[:, None]
    yt = np.sin(Xt[:, 0]) + 0.1 * rng.standard_normal(30)
    return X, y, Xt, yt, out


@parametrize_with_checks([StudentTGPRegressor(method="laplace")])
def test_sklearn_contract(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(estimator)


@pytest.mark.slow
@parametrize_with_checks([StudentTGPRegressor(), StudentTGPRegressor(optimizer=None)])
def test_sklearn_contract_default_ep(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(estimator)


@pytest.mark.parametrize("method", ["ep", "fractional", "laplace", "vb", "fvb", "gaussian"])
def test_methods_fit_predict_finite(method):
    X, y, Xt, yt, _ = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = StudentTGPRegressor(method=method).fit(X, y)
    m, s = est.predict(Xt, return_std=True)
    lp = est.predict_log_density(Xt, yt)
    assert np.all(np.isfinite(m)) and np.all(s > 0) and np.all(np.isfinite(lp))
    assert est.log_predictive_score(Xt, yt) == pytest.approx(lp.mean())
    from sklearn.metrics import r2_score

    assert est.score(Xt, yt) == pytest.approx(r2_score(yt, m))
    assert np.isfinite(est.log_marginal_likelihood_value_)
    assert est.df_ == 4.0 and est.scale_ > 0


def test_student_t_beats_gaussian_with_outliers():
    X, y, Xt, yt, _ = _data()
    ep = StudentTGPRegressor(method="ep").fit(X, y)
    ga = StudentTGPRegressor(method="gaussian").fit(X, y)
    assert ep.log_predictive_score(Xt, yt) > ga.log_predictive_score(Xt, yt) + 0.3
    assert np.mean(np.abs(ep.predict(Xt) - yt)) < np.mean(np.abs(ga.predict(Xt) - yt))


def test_outlier_diagnostics_flag_planted_outliers():
    X, y, _, _, out = _data()
    est = StudentTGPRegressor(method="ep").fit(X, y)
    assert set(out) <= set(np.flatnonzero(est.negative_precision_))
    assert est.site_precision_.shape == (len(y),)
    ok = np.isfinite(est.cavity_var_)
    assert ok.sum() >= len(y) - 1 and np.all(est.cavity_var_[ok] > 0)
    # the leave-one-out mean of an outlier is far from its observation, near the clean curve
    assert np.all(np.abs(est.cavity_mean_[out] - y[out]) > 2.0)


def test_optimizer_none_keeps_hyperparameters_and_kernel_is_cloned():
    X, y, _, _, _ = _data()
    kernel = ConstantKernel(0.7) * RBF(1.3)
    est = StudentTGPRegressor(kernel, df=3.0, scale=0.2, optimizer=None).fit(X, y)
    assert est.kernel_.get_params() == kernel.get_params()
    assert est.kernel_ is not kernel
    assert (est.df_, est.scale_) == (3.0, 0.2)
    est2 = StudentTGPRegressor(kernel, df=3.0, scale=0.2, method="laplace").fit(X, y)
    assert est2.kernel_.theta.tolist() != kernel.theta.tolist()
    assert kernel.theta.tolist() == (ConstantKernel(0.7) * RBF(1.3)).theta.tolist()


def test_gaussian_method_matches_sklearn_gpr():
    X, y, Xt, _, _ = _data()
    kernel = ConstantKernel(0.9) * RBF(1.1)
    est = StudentTGPRegressor(kernel, scale=0.3, method="gaussian", optimizer=None).fit(X, y)
    ref = GaussianProcessRegressor(kernel, alpha=0.3**2, optimizer=None, normalize_y=True)
    ref.fit(X, y)
    m, s = est.predict(Xt, return_std=True)
    mr, sr = ref.predict(Xt, return_std=True)
    np.testing.assert_allclose(m, mr, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(s, sr, rtol=1e-5)
    ys = (y - y.mean()) / y.std()
    assert est.log_marginal_likelihood_value_ == pytest.approx(
        ref.log_marginal_likelihood_value_, rel=1e-6
    )
    assert np.allclose(ref.y_train_, ys)


def test_predict_log_density_quadrature_and_units():
    X, y, Xt, yt, _ = _data()
    est = StudentTGPRegressor(method="laplace", optimizer=None).fit(X, y)
    lp = est.predict_log_density(Xt[:3], yt[:3])
    m, s = est.predict(Xt[:3], return_std=True)
    # direct quadrature in target units: p(y|f) is Student-t with scale sigma * std(y)
    sd = y.std()
    f = np.linspace(-20, 20, 200001)
    for i in range(3):
        dens = (
            np.exp(st.log_prob(yt[i], f, est.df_, est.scale_ * sd))
            * np.exp(-0.5 * (f - m[i]) ** 2 / s[i] ** 2)
            / np.sqrt(2 * np.pi * s[i] ** 2)
        )
        assert lp[i] == pytest.approx(np.log(np.trapezoid(dens, f)), abs=1e-6)


def test_ep3_grid_weights():
    X, y, Xt, yt, _ = _data(n=25)
    grid = default_df_grid()
    assert grid.size == 15 and grid[0] == pytest.approx(1.5) and grid[-1] == pytest.approx(20.0)
    assert np.allclose(np.diff(np.log(np.log(grid))), np.diff(np.log(np.log(grid)))[0])
    est = StudentTGPRegressor(method="laplace", df_grid=[2.0, 4.0, 10.0]).fit(X, y)
    assert est.df_weights_.shape == (3,) and est.df_weights_.sum() == pytest.approx(1.0)
    assert est.df_ in (2.0, 4.0, 10.0)
    assert np.all(np.isfinite(est.predict_log_density(Xt, yt)))
    with pytest.raises(ValueError, match="df_grid"):
        StudentTGPRegressor(method="mcmc", df_grid=True).fit(X, y)


def test_ep3_grid_order_walks_up_from_the_smallest_df():
    from robustep.estimators._regressor_grid import df_grid_order as _df_grid_order

    grid = default_df_grid()
    order = _df_grid_order(grid)
    assert [j for j, _, _ in order] == list(range(grid.size))
    assert order[0][2] is None and [p for _, _, p in order[1:]] == list(range(grid.size - 1))
    # an unsorted grid is walked in increasing nu; indices refer to the given order
    got = _df_grid_order(np.array([10.0, 2.0, 4.0, 1.5]))
    assert [j for j, _, _ in got] == [3, 1, 2, 0]
    assert [p for _, _, p in got] == [None, 3, 1, 2]


def test_ep3_optimises_every_grid_value():
    """Each grid value gets its own search (not just the first), also the small-nu values
    whose first evaluation may fail, which must not stay at their starting point."""
    X, y, _, _, _ = _data(n=30)
    grid = [1.5, 2.5, 4.0, 8.0]
    est = StudentTGPRegressor(method="ep", df_grid=grid).fit(X, y)
    assert est.converged_
    scales = [c["scale"] for c in est._components]
    assert len(set(np.round(scales, 8))) == len(grid)
    for c, nu in zip(est._components, grid, strict=True):
        fixed = StudentTGPRegressor(
            kernel=c["kernel"], method="ep", df=nu, scale=c["scale"], optimizer=None
        ).fit(X, y)
        other = StudentTGPRegressor(
            kernel=c["kernel"], method="ep", df=nu, scale=c["scale"] * 1.3, optimizer=None
        ).fit(X, y)
        # a (local) optimum of the evidence in sigma at every grid value
        assert fixed.log_marginal_likelihood_value_ >= other.log_marginal_likelihood_value_


def _record_infer(monkeypatch, fail_warm_search=False):
    """Wrap the regressor core's inference; record (warm given, max_iter, tol, converged,
    sweeps) per call.  ``fail_warm_search``: a warm-started search evaluation returns a
    result marked not converged (what a poor neighbour's sites did in tgp-benchmark)."""
    calls = []
    original = InferenceCore.infer

    def infer(self, K, lik, warm=None, max_iter=1000, tol=1e-4, search=False):
        res = original(self, K, lik, warm=warm, max_iter=max_iter, tol=tol, search=search)
        if fail_warm_search and warm is not None and tol > 1e-3 and max_iter > 30:
            res.converged = False
        calls.append((warm is not None, max_iter, tol, bool(res.converged), int(res.n_iter)))
        return res

    monkeypatch.setattr(InferenceCore, "infer", infer)
    return calls


def test_ep3_final_fits_start_from_the_search_at_the_optimum(monkeypatch):
    """Each grid value's final fit (tol 1e-4) is warm-started from the search's inference
    at the optimum (the same hyperparameters): a few sweeps, and the same fit as from
    zero sites."""
    X, y, _, _, _ = _data(n=30)
    calls = _record_infer(monkeypatch)
    est = StudentTGPRegressor(method="ep", df_grid=[2.0, 4.0, 8.0]).fit(X, y)
    finals = [c for c in calls if c[2] == 1e-4]
    assert len(finals) == 3 and all(w and conv for w, _, _, conv, _ in finals)
    assert max(n for *_, n in finals) <= 10
    for comp in est._components:
        cold = StudentTGPRegressor(
            kernel=comp["kernel"], method="ep", df=comp["df"], scale=comp["scale"],
            optimizer=None,
        ).fit(X, y)  # fmt: skip
        assert comp["res"].log_marginal_likelihood == pytest.approx(
            cold.log_marginal_likelihood_value_, abs=1e-6
        )


def test_ep3_warm_start_that_fails_is_retried_cold(monkeypatch):
    """A grid value whose first evaluation does not converge from the neighbour's sites
    (within warm_first_max_iter sweeps) repeats it from zero sites, so its search still
    moves: every grid value ends at its own optimum."""

    X, y, _, _, _ = _data(n=30)
    calls = _record_infer(monkeypatch, fail_warm_search=True)
    grid = [1.5, 3.0, 6.0]
    est = StudentTGPRegressor(method="ep", df_grid=grid).fit(X, y)
    assert est.converged_
    settings = robustep.get_config()
    warm_firsts = [i for i, c in enumerate(calls) if c[0] and c[1] == settings.warm_first_max_iter]
    assert len(warm_firsts) == len(grid) - 1  # one per warm-started grid value
    for i in warm_firsts:  # each followed by the cold retry with the full budget
        warm, max_iter, tol, conv, _ = calls[i + 1]
        assert not warm and max_iter == settings.final_max_iter and tol > 1e-3 and conv
    assert len({round(c["scale"], 8) for c in est._components}) == len(grid)


def test_ep3_neighbour_that_did_not_converge_is_no_warm_start(monkeypatch):
    """Sites of a grid value whose final fit did not converge are not passed on."""
    from robustep.estimators import _regressor_grid
    from robustep.estimators._regressor_fit import SearchSettings

    X, y, _, _, _ = _data(n=25)
    seen = []  # the warm start each grid value's search gets
    original = SearchSettings.run

    def run(self, core, kernel, space, X, rng, n_restarts=None, warm=None):
        seen.append(warm)
        return original(self, core, kernel, space, X, rng, n_restarts, warm)

    original_final = _regressor_grid.final

    def final(core, kernel, lik, X, settings, warm=None):
        comp = original_final(core, kernel, lik, X, settings, warm=warm)
        comp.res.converged = lik.df != 2.0  # the first grid value "fails"
        return comp

    monkeypatch.setattr(SearchSettings, "run", run)
    monkeypatch.setattr(_regressor_grid, "final", final)
    StudentTGPRegressor(method="ep", df_grid=[2.0, 4.0, 8.0]).fit(X, y)
    assert seen[0] is None and seen[1] is None and seen[2] is not None


def test_failed_search_is_reported(monkeypatch):
    """A search in which no inference converges leaves the hyperparameters unoptimised:
    the fit must say so (converged_ False and a ConvergenceWarning), never claim success."""
    X, y, _, _, _ = _data(n=20)
    kernel = ConstantKernel(1.0) * RBF(1.0)
    calls = {"n": 0}
    original = InferenceCore.infer

    def fails_in_search(self, K, lik, warm=None, max_iter=1000, tol=1e-4, search=False):
        calls["n"] += 1
        if tol > 1e-3:  # only the search's evaluations (site tolerance 1e-2) fail
            raise FloatingPointError
        return original(self, K, lik, warm=warm, max_iter=max_iter, tol=tol, search=search)

    monkeypatch.setattr(InferenceCore, "infer", fails_in_search)
    with pytest.warns(ConvergenceWarning, match="no point where the inference converged"):
        est = StudentTGPRegressor(kernel, method="ep", n_restarts_optimizer=1).fit(X, y)
    assert not est.converged_ and calls["n"] > 1
    assert est.scale_ == 0.5 and est.kernel_.theta == pytest.approx(kernel.theta)


def test_search_evaluation_out_of_factorisations_is_a_failed_evaluation(monkeypatch):
    """With no factorisations allowed, every search evaluation after the first (which has
    the final fit's budget) fails unless its warm start is already a fixed point: the fit
    still ends, next to the starting hyperparameters, and the search reports its failures."""

    X, y, Xt, _, _ = _data(n=20)
    kernel = ConstantKernel(1.0) * RBF(1.0)
    with warnings.catch_warnings(), robustep.config(search_factorisations_per_sweep=0):
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = StudentTGPRegressor(kernel, method="ep").fit(X, y)
    np.testing.assert_allclose(est.kernel_.theta, kernel.theta, atol=0.05)
    assert est.scale_ == pytest.approx(0.5, rel=0.05)
    assert est.optimizer_result_.n_failures > 0
    assert np.all(np.isfinite(est.predict(Xt)))


@pytest.mark.parametrize("method", ["ep", "auto"])
def test_search_budget_leaves_a_converging_search_unchanged(monkeypatch, method):

    X, y, _, _, _ = _data(n=30)
    kernel = ConstantKernel(1.0) * RBF(1.0)
    est = StudentTGPRegressor(kernel, method=method).fit(X, y)
    with robustep.config(search_factorisations_per_sweep=10**6):
        unlimited = StudentTGPRegressor(kernel, method=method).fit(X, y)
    np.testing.assert_array_equal(est.kernel_.theta, unlimited.kernel_.theta)
    assert est.scale_ == unlimited.scale_


def test_optimize_df_changes_df():
    X, y, _, _, _ = _data()
    est = StudentTGPRegressor(method="laplace", optimize_df=True).fit(X, y)
    assert est.df_ != 4.0 and 1.05 <= est.df_ <= 1000


def test_mcmc_method_and_diagnostics():
    X, y, Xt, yt, _ = _data(n=25)
    est = StudentTGPRegressor(method="mcmc", n_samples=60, random_state=0).fit(X, y)
    assert est.log_marginal_likelihood_value_ is None
    assert "rhat" in est.mcmc_diagnostics_ and "log_scale" in est.mcmc_diagnostics_["ess"]
    m, s = est.predict(Xt, return_std=True)
    assert np.all(np.isfinite(m)) and np.all(s > 0)
    assert np.all(np.isfinite(est.predict_log_density(Xt, yt)))
    est2 = StudentTGPRegressor(method="mcmc", n_samples=60, random_state=0).fit(X, y)
    np.testing.assert_allclose(est2.predict(Xt), m)


def test_convergence_warning(monkeypatch):
    import robustep.baselines.variational as variational

    orig = variational.variational_bounds
    monkeypatch.setattr(
        variational, "variational_bounds", lambda *a, **k: orig(*a, **{**k, "max_iter": 1})
    )
    X, y, _, _, _ = _data()
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        est = StudentTGPRegressor(method="vb", optimizer=None).fit(X, y)
    assert est.converged_ is False
    assert np.all(np.isfinite(est.predict(X)))


# ------------------------------------------------ predictions of y, bounds
def test_one_point_fit_warns_hyperparameters_at_bounds():
    with pytest.warns(ConvergenceWarning, match="on their bounds"):
        est = StudentTGPRegressor().fit([[0.0]], [1.0])
    assert ("k1__constant_value", "lower") in est.hyperparameters_at_bounds_
    X, y, _, _, _ = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        est = StudentTGPRegressor(method="laplace").fit(X, y)
    assert est.hyperparameters_at_bounds_ == []


def _mc_y(est, Xt, n_mc, rng):
    """Monte Carlo draws of a new y at Xt: f from the latent predictive, then Student-t noise."""
    if est.method == "mcmc":
        M, V, idx = est._mcmc.predictive_components(Xt, max_draws=200)
        s = rng.integers(0, len(idx), size=n_mc)
        f = M[s] + np.sqrt(V[s]) * rng.standard_normal((n_mc, Xt.shape[0]))
        noise = est._mcmc.scale[idx][s, None] * rng.standard_t(est._mcmc.df[idx][s, None])
        return (f + noise) * est._y_std + est._y_mean
    m, s = est.predict(Xt, return_std=True)
    f = m + s * rng.standard_normal((n_mc, Xt.shape[0]))
    return f + est.scale_ * est._y_std * rng.standard_t(est.df_, size=f.shape)


@pytest.mark.parametrize(
    "kw",
    [dict(method="laplace"), dict(method="ep", df=2.5), dict(method="mcmc", n_samples=40)],
)
def test_predictive_quantiles_match_monte_carlo(kw):
    X, y, Xt, _, _ = _data(n=30)
    Xt = np.vstack([Xt[::6], [[6.0]]])  # in the data and far from it (latent std > sigma)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        est = StudentTGPRegressor(random_state=0, **kw).fit(X, y)
    q = np.array([0.025, 0.1, 0.5, 0.9, 0.975])
    Q = est.predict_quantiles(Xt, q)
    assert Q.shape == (Xt.shape[0], q.size) and np.all(np.diff(Q, axis=1) > 0)
    n_mc = 200_000
    ys = _mc_y(est, Xt, n_mc, np.random.default_rng(1))
    frac = np.mean(ys[:, :, None] <= Q[None], axis=0)  # empirical CDF at our quantiles
    se = np.sqrt(q * (1 - q) / n_mc)
    assert np.all(np.abs(frac - q) < 5 * se + 1e-4), np.abs(frac - q) / se
    lo, hi = est.predict_interval(Xt, coverage=0.8)
    np.testing.assert_allclose(lo, Q[:, 1], rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(hi, Q[:, 3], rtol=1e-8, atol=1e-8)
    if est.method != "mcmc":  # one Gaussian latent: the y interval is wider than f's band
        m, s = est.predict(Xt, return_std=True)
        assert np.all(hi - lo > 2 * 1.2815 * s)


def test_predictive_quantiles_limits():
    from scipy import stats

    from robustep.estimators.student_t_regressor import student_t_gaussian_quantiles as stq

    q = np.array([0.001, 0.05, 0.3, 0.5, 0.8, 0.999])
    m, v, s = np.array([[0.3, -2.0, 5.0]]), np.array([[0.5, 2.0, 1e-3]]), 0.7
    gauss = m.T + np.sqrt(v.T + s**2) * stats.norm.ppf(q)[None]
    np.testing.assert_allclose(stq(q, m, v, [np.inf], [s]), gauss, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(stq(q, m, v, [1e7], [s]), gauss, rtol=1e-5, atol=1e-5)
    # no latent uncertainty: Student-t quantiles; no noise: Gaussian latent quantiles
    tq = m.T + s * stats.t.ppf(q, 3.0)[None]
    np.testing.assert_allclose(stq(q, m, np.zeros_like(v), [3.0], [s]), tq, rtol=1e-5, atol=2e-5)
    lat = m.T + np.sqrt(v.T) * stats.norm.ppf(q)[None]
    np.testing.assert_allclose(stq(q, m, v, [3.0], [1e-9]), lat, rtol=1e-6, atol=1e-6)
    # heavy tails: quantiles of the convolution exceed the Gaussian ones with the same scales
    assert stq([0.999], m, v, [1.5], [s])[0, 0] > gauss[0, -1]
    assert np.all(np.isneginf(stq([0.0], m, v, [3.0], [s]))) and np.all(
        np.isposinf(stq([1.0], m, v, [3.0], [s]))
    )


def test_predictive_interval_argument_validation():
    X, y, Xt, _, _ = _data(n=20)
    est = StudentTGPRegressor(method="laplace", optimizer=None).fit(X, y)
    for bad in (0.0, 1.0, 1.5, -0.2, True, "0.9", np.nan):
        with pytest.raises(ValueError, match="coverage"):
            est.predict_interval(Xt, coverage=bad)
    for bad in (1.2, -0.1, [0.5, np.nan], [], "a", [[0.1, 2.0]]):
        with pytest.raises(ValueError, match="q must"):
            est.predict_quantiles(Xt, bad)
    q = np.array([0.9, 0.1])
    Q = est.predict_quantiles(Xt, q)
    assert q.tolist() == [0.9, 0.1] and Q.shape == (Xt.shape[0], 2)
    assert np.all(Q[:, 0] > Q[:, 1])
    assert est.predict_quantiles(Xt, 0.5).shape == (Xt.shape[0],)


def test_log_predictive_scorer_in_model_selection():
    from sklearn.model_selection import cross_val_score

    from robustep.metrics import log_predictive_scorer

    X, y, _, _, _ = _data(n=30)
    est = StudentTGPRegressor(optimizer=None)
    scores = cross_val_score(est, X, y, cv=3, scoring=log_predictive_scorer)
    fitted = est.fit(X[:20], y[:20])
    assert np.all(np.isfinite(scores))
    assert log_predictive_scorer(fitted, X[20:], y[20:]) == fitted.log_predictive_score(
        X[20:], y[20:]
    )
