import pytest

import robustep
from robustep import config, get_config


def test_override_is_scoped_and_restored():
    before = get_config().quadrature_points
    with config(quadrature_points=before + 7) as settings:
        assert settings.quadrature_points == before + 7
        assert get_config().quadrature_points == before + 7
        with config(jitter=1e-3):
            assert get_config().quadrature_points == before + 7
            assert get_config().jitter == 1e-3
    assert get_config().quadrature_points == before


def test_restored_after_exception():
    before = get_config().jitter
    with pytest.raises(RuntimeError), config(jitter=0.5):
        raise RuntimeError("boom")
    assert get_config().jitter == before


def test_unknown_setting_lists_valid_names():
    with pytest.raises(TypeError, match="valid settings are"), config(not_a_setting=1):
        pass


def test_top_level_exports():
    for name in ("GPClassifier", "StudentTGPRegressor", "BayesPointMachine",
                 "StudentTProcessClassifier"):  # fmt: skip
        assert hasattr(robustep, name)


# ----------------------------------------------------------------- BLAS threads
def _blas_threads():
    from threadpoolctl import threadpool_info

    return {p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"}


def test_blas_threads_setting_is_validated():
    for bad in (0, -1, "many", 1.5, True):
        with pytest.raises(ValueError, match="blas_threads"), config(blas_threads=bad):
            pass
    with config(blas_threads=3):
        assert get_config().blas_threads == 3


def test_blas_threads_for_follows_the_setting():
    from robustep._config import blas_threads_for

    limit = get_config().blas_threads_auto_max_n
    assert get_config().blas_threads == "auto"  # the documented default
    assert blas_threads_for(10) == 1 and blas_threads_for(limit) == 1
    assert blas_threads_for(limit + 1) is None
    with config(blas_threads=None):
        assert blas_threads_for(10) is None
    with config(blas_threads=2):
        assert blas_threads_for(10) == 2 and blas_threads_for(10**6) == 2


def test_blas_limit_applied_inside_a_fit_and_restored(monkeypatch):
    """threadpoolctl reports the configured limit inside GPClassifier's inference, and
    the caller's limit afterwards (also after an exception inside the fit)."""
    import numpy as np
    from threadpoolctl import threadpool_limits

    from robustep import GPClassifier

    if not _blas_threads():
        pytest.skip("threadpoolctl finds no BLAS library")
    seen = []
    from robustep.estimators._binary_dense import DenseBinaryCore

    original = DenseBinaryCore.infer

    def spy(self, prior, init=None, **kwargs):
        seen.append(_blas_threads())
        return original(self, prior, init, **kwargs)

    monkeypatch.setattr(DenseBinaryCore, "infer", spy)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 2))
    y = (X[:, 0] > 0).astype(int)
    with threadpool_limits(limits=2, user_api="blas"):  # the caller's setting
        GPClassifier(optimizer=None).fit(X, y)  # default "auto": 1 thread for n = 30
        assert seen[-1] == {1}
        assert _blas_threads() == {2}
        with config(blas_threads=None):  # left alone
            GPClassifier(optimizer=None).fit(X, y)
        assert seen[-1] == {2}
        with config(blas_threads=1):
            GPClassifier().fit(X, y)  # with the optimiser: every evaluation is limited
        assert len(seen) > 3 and all(s == {1} for s in seen[2:])
        assert _blas_threads() == {2}

        def failing(self, prior, init=None):
            seen.append(_blas_threads())
            raise RuntimeError("boom")

        monkeypatch.setattr(DenseBinaryCore, "infer", failing)
        with pytest.raises(RuntimeError, match="boom"), config(blas_threads=1):
            GPClassifier(optimizer=None).fit(X, y)
        assert seen[-1] == {1} and _blas_threads() == {2}


@pytest.mark.parametrize(
    "name", ["StudentTGPRegressor", "BayesPointMachine", "StudentTProcessClassifier"]
)
def test_every_estimator_fit_runs_under_the_blas_limit(monkeypatch, name):
    """The other estimators' fits are wrapped by limits_blas_threads: the limit holds inside
    fit (seen from its parameter validation, the first thing fit does) and the caller's
    limit is restored afterwards."""
    import numpy as np
    from threadpoolctl import threadpool_limits

    import robustep

    if not _blas_threads():
        pytest.skip("threadpoolctl finds no BLAS library")
    cls = getattr(robustep, name)
    seen = []
    original = cls._validate_params

    def spy(self):
        seen.append(_blas_threads())
        return original(self)

    monkeypatch.setattr(cls, "_validate_params", spy)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 2))
    y = X[:, 0] + 0.1 * rng.normal(size=20)
    if name != "StudentTGPRegressor":
        y = (y > 0).astype(int)
    with threadpool_limits(limits=2, user_api="blas"):
        with config(blas_threads=1):
            cls().fit(X, y)
        assert _blas_threads() == {2}
    assert seen == [{1}]


# ------------------------------------------------- search-run and engine tuning
@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("search_tol", 0.0),
        ("search_tol", float("nan")),
        ("search_ftol", -1e-6),
        ("search_max_iter", 0),
        ("search_max_iter", 2.5),
        ("search_factorisations_per_sweep", -1),
        ("search_fallback_starts", -1),
        ("search_fallback_factor", 1.0),
        ("search_fallback_factor", 0.0),
        ("final_max_iter", 0),
        ("warm_first_max_iter", True),
        ("sparse_first_max_iter", None),
        ("stall_patience", 0),
        ("search_stall_evaluations", 0),
        ("search_stall_evaluations", 2.5),
        ("search_stall_step", -1e-2),
        ("mean_sweep_fraction", -0.1),
        ("mean_sweep_fraction", float("inf")),
    ],
)
def test_tuning_settings_are_validated(name, value):
    with pytest.raises(ValueError, match=name), config(**{name: value}):
        pass


def test_tuning_defaults():
    s = get_config()
    assert (s.search_tol, s.search_max_iter, s.search_ftol) == (1e-2, 30, 1e-6)
    assert (s.search_factorisations_per_sweep, s.final_max_iter) == (2, 1000)
    assert (s.warm_first_max_iter, s.sparse_first_max_iter) == (200, 100)
    assert (s.stall_patience, s.mean_sweep_fraction) == (5, 0.3)
    assert (s.search_stall_evaluations, s.search_stall_step) == (5, 1e-2)
    assert s.search_fallback_first_step == 0.5
    for bad in (0.0, -1.0, float("nan"), "1"):
        with pytest.raises((ValueError, TypeError), match="search_fallback_first_step"):
            with config(search_fallback_first_step=bad):
                pass
    with config(search_fallback_first_step=None):
        assert get_config().search_fallback_first_step is None
    assert (s.search_stone_step, s.search_stones) == (0.175, 3)
    for name, bad in (("search_stone_step", 0.0), ("search_stone_step", "x"),
                      ("search_stones", 0), ("search_stones", 1.5)):  # fmt: skip
        with pytest.raises((ValueError, TypeError), match=name):
            with config(**{name: bad}):
                pass
    with config(search_stone_step=None):
        assert get_config().search_stone_step is None
    assert s.search_power_fallback is True
    with pytest.raises(ValueError, match="search_power_fallback"):
        with config(search_power_fallback="yes"):
            pass
    assert s.search_first_step == 0.25
    with config(search_first_step=None):
        assert get_config().search_first_step is None
    for bad in (0, -0.5, float("inf"), "0.25", True):
        with pytest.raises(ValueError, match="search_first_step"):
            with config(search_first_step=bad):
                pass


def _search_engine_calls(monkeypatch, **settings):
    """(max_iter, tol, double_loop, max_factorisations) of every engine run of a
    StudentTGPRegressor(method="ep") fit under ``settings``."""
    import warnings

    import numpy as np
    from sklearn.exceptions import ConvergenceWarning

    import robustep.ep as ep_package
    from robustep.ep.engine import expectation_propagation as engine

    calls = []

    def spy(K, y, lik, **kw):
        calls.append((kw["max_iter"], kw["tol"], kw.get("double_loop"),
                      kw.get("max_factorisations")))  # fmt: skip
        return engine(K, y, lik, **kw)

    monkeypatch.setattr(ep_package, "expectation_propagation", spy)
    rng = np.random.default_rng(0)
    X = rng.uniform(-3, 3, size=(25, 1))
    y = np.sin(X[:, 0]) + 0.1 * rng.normal(size=25)
    with config(**settings), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        robustep.StudentTGPRegressor(method="ep", n_restarts_optimizer=0).fit(X, y)
    return calls


def test_search_settings_change_what_a_search_runs(monkeypatch):
    default = _search_engine_calls(monkeypatch)
    changed = _search_engine_calls(
        monkeypatch, search_max_iter=7, search_factorisations_per_sweep=3, search_tol=0.05,
        final_max_iter=900,
    )  # fmt: skip
    for calls, (sweeps, budget, tol, final) in [
        (default, (30, 60, 1e-2, 1000)),
        (changed, (7, 21, 0.05, 900)),
    ]:
        first, *search, last = calls
        assert first == (final, tol, None, None)  # a start's first evaluation: cold
        assert len(search) > 2
        assert all(c == (sweeps, tol, "never", budget) for c in search)
        # the final fit: the estimator's max_iter and tol, whatever the search's settings
        assert last == (1000, 1e-4, None, None)


def test_stall_patience_and_mean_sweep_fraction_reach_the_engine():
    import warnings

    import numpy as np
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel

    from robustep.ep import expectation_propagation
    from robustep.likelihoods import Probit

    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 1))
    y = np.where(X[:, 0] + 0.3 * rng.normal(size=40) > 0, 1.0, -1.0)
    K = (ConstantKernel(4.0) * RBF(1.0))(X)
    sweeps = {}
    for patience in (1, 5):  # tol below round-off: the run ends when it stalls
        with config(stall_patience=patience), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = expectation_propagation(K, y, Probit(), tol=1e-300, double_loop="never")
        assert "stalled" in res.message
        sweeps[patience] = res.n_iter
    assert sweeps[1] < sweeps[5]
    mean_sweeps = {}
    for fraction in (0.3, 1e9):
        with config(mean_sweep_fraction=fraction):
            res = expectation_propagation(K, y, Probit(), tol=1e-8)
        mean_sweeps[fraction] = sum(res.history["mean_sweeps"])
    assert mean_sweeps[0.3] > 0 and mean_sweeps[1e9] == 0
