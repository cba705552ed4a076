"""Sparse (FITC inducing-point) fitting shared by GPClassifier and StudentTGPRegressor.

The estimators call into this module when ``inducing_points`` is not None; with None they
keep their dense code path untouched.  The model is the FITC prior
(:class:`robustep.posterior.sparse.FITCPrior`, docs/derivations/sparse.md): EP runs on it
unchanged (parallel schedule, damping, power, robust double loop), the evidence gradient
w.r.t. the kernel's log hyperparameters, the likelihood's log parameters and the inducing
inputs is :func:`robustep.ep.sparse_evidence.fitc_log_Z_gradient`, and predictions are
made in row batches (O(batch * m) memory, never an n x n or p x n array).

Inducing inputs: an int m gives the centres of ``MiniBatchKMeans(m)`` on the training
inputs (seeded by ``random_state``), an (m, d) array gives them directly; with an optimizer
and ``optimize_inducing=True`` they are optimised jointly with the hyperparameters by
L-BFGS-B (or the estimator's callable ``optimizer``).  The jitter added to K_mm is
fixed for a whole fit at 1e-6 times the mean prior variance of the initial inducing
inputs, so that every evaluation of the optimiser uses the same model and the gradient
is exact for it.

``inducing_power=α < 1`` replaces FITC-EP by power EP with power α on the pseudo-point
posterior (Bui, Yan & Turner 2017; :mod:`robustep.ep.pseudo_point`, docs/derivations/
sparse.md §8): the same inducing inputs, optimiser and predictions, the evidence (P7) and
its gradient (P10, P11).  α = 1 keeps the FITC code path.  The default
``inducing_power="auto"`` (:func:`inducing_power_of`) is α = 0.5 when the inducing
inputs are optimised in memory, where FITC-EP's evidence over-fits, and α = 1 otherwise.
"""

from __future__ import annotations

import dataclasses
import numbers
import warnings
from dataclasses import dataclass

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from robustep._config import get_config
from robustep.estimators import _learner
from robustep.estimators._optimizer import bounds_array
from robustep.estimators._search import (
    Evaluation,
    EvaluationFailed,
    draw_starts,
    is_search_evidence,
    maximise_evidence,
)
from robustep.posterior._dask import DaskFITCPrior, check_dask_inputs, is_dask_array
from robustep.posterior.sparse import FITCPrior

#: what a user can change when the evidence search could not move
SEARCH_ADVICE = (
    "pass another starting kernel or inducing_points, set n_restarts_optimizer > 0 (with "
    "finite kernel bounds), or try inducing_power=0.5"
)
#: the same at inducing power α < 1, without the suggestion of the power the fit has
_POWER_SEARCH_ADVICE = (
    "pass another starting kernel or inducing_points, or set n_restarts_optimizer > 0 (with "
    "finite kernel bounds)"
)


def search_advice(alpha):
    """:data:`SEARCH_ADVICE` for a fit at inducing power ``alpha``; where α is below 1
    already, without the suggestion of inducing_power=0.5."""
    return SEARCH_ADVICE if alpha == 1.0 else _POWER_SEARCH_ADVICE


#: largest number of rows the k-means of a Dask fit (int inducing_points) is run on
DASK_KMEANS_ROWS = 50_000

#: rows per prediction batch (K(X_batch, Z) is batch x m)
PREDICT_BATCH = 4096
#: jitter on K_mm relative to the mean prior variance at the initial inducing inputs
RELATIVE_JITTER = 1e-6

TGP_SPARSE_METHODS = ("auto", "ep", "fractional")


# --------------------------------------------------------------------------- validation
def is_dask_input(X) -> bool:
    """Whether X is a dask.array (fit then runs the sparse model chunk by chunk)."""
    return is_dask_array(X)


def validate_dask(est, X, y, *, classifier=False):
    """Validate Dask training data for ``est.fit``; returns (X, y, n_features).

    X must be a 2-D dask array chunked by rows, y a 1-D array (numpy or dask chunked like
    X's rows); both finite.  Dask inputs need the sparse model (``est.inducing_points`` set).
    ``est`` is only read; the caller stores ``n_features`` as its ``n_features_in_``.

    Returns
    -------
    X : dask array, shape (n_samples, n_features)
    y : ndarray, shape (n_samples,)
        Computed into memory; float for regression, as given for classification.
    n_features : int
    """
    if est.inducing_points is None:
        raise ValueError(
            "Dask inputs need the sparse model: pass inducing_points (an int m or an (m, "
            "n_features) array), or compute X and y into memory for the dense model"
        )
    check_dask_inputs(X, y)
    import dask
    import dask.array as da

    y = np.asarray(y.compute() if is_dask_array(y) else y)
    if y.ndim != 1:
        raise ValueError(f"y must be 1-D, got shape {y.shape}")
    finite_X = da.isfinite(X).all()
    (finite_X,) = dask.compute(finite_X)
    if not finite_X:
        raise ValueError("X contains NaN or inf; remove or impute those rows before fit")
    if not classifier:
        y = y.astype(float)
        if not np.all(np.isfinite(y)):
            raise ValueError("y contains NaN or inf; remove those rows before fit")
    if X.shape[0] < 1:
        raise ValueError("X is empty: pass at least one sample")
    return X, y, int(X.shape[1])


def check_inducing_gradient(est, kernel):
    """With an optimizer and optimize_inducing, the kernel needs an analytic d/dZ."""
    from robustep.kernels.inducing import supports_input_gradient

    if est.optimizer is not None and est.optimize_inducing and not supports_input_gradient(kernel):
        raise ValueError(
            f"optimize_inducing=True needs the kernel's derivative with respect to the inducing "
            f"inputs, which is implemented for RBF, Matern (nu in 0.5, 1.5, 2.5, inf), "
            f"RationalQuadratic, ConstantKernel, WhiteKernel and their sums and products, not "
            f"for {kernel}; pass optimize_inducing=False (the hyperparameters are still "
            "optimised)"
        )


def inducing_power_of(est, allowed_methods, *, dask=False):
    """The power α a sparse fit of ``est`` runs with: its ``inducing_power``, resolved.

    Parameters
    ----------
    est : the estimator's parameters (read: ``inducing_power``, ``method``, ``optimizer``,
        ``optimize_inducing``; an absent ``inducing_power`` counts as 1).
    allowed_methods : tuple of str
        The methods with a power-α version (``POWER_METHODS`` of the classifier,
        ``TGP_POWER_METHODS`` of the regressors).
    dask : bool
        X is a dask.array (power EP with α < 1 is in-memory only).

    Returns
    -------
    float in (0, 1]
        "auto": ``get_config().auto_inducing_power`` (0.5) when the inducing inputs are
        optimised (``optimize_inducing`` with an optimizer), X is in memory and the method
        is in ``allowed_methods``; 1 (FITC-EP) otherwise.  With free inducing inputs the
        FITC-EP evidence rewards an over-fitted model (Bauer, van der Wilk & Rasmussen
        2016): on three binary data sets with m = 64 inducing inputs the full-batch search
        drove the amplitude to 1343, 1e5 (its bound) and 4.6e4 where dense EP finds 1.43,
        39.6 and 3.6, and power EP with α = 0.5 (Bui, Yan & Turner 2017) to 1.38, 120 and
        3.43 (``python benchmarks/learning.py --parts alpha --full``).  With fixed
        inducing inputs FITC-EP has no such freedom and stays the default.  A number is
        validated: α < 1 needs a method in ``allowed_methods`` and in-memory X (a
        ValueError says what to change otherwise): the fractional power η of method
        "power"/"fractional" is a different approximation and is not combined with α,
        and relaxed EP has no power-α version.
    """
    from robustep.ep.pseudo_point import check_inducing_power

    power = getattr(est, "inducing_power", 1.0)
    if isinstance(power, str) and power == "auto":
        optimised = est.optimizer is not None and bool(est.optimize_inducing)
        if optimised and not dask and est.method in allowed_methods:
            return float(get_config().auto_inducing_power)
        return 1.0
    alpha = check_inducing_power(power)
    if alpha < 1.0:
        if est.method not in allowed_methods:
            raise ValueError(
                f"inducing_power={alpha:g} (power EP on the pseudo-point posterior) works with "
                f"method in {allowed_methods}, not method={est.method!r} (the fractional "
                "power η of method 'power'/'fractional' tempers the sites under the FITC "
                "prior, a different approximation); pass inducing_power=1 or another method"
            )
        if dask:
            raise ValueError(
                "inducing_power < 1 is not implemented for Dask inputs; compute X into "
                "memory, or pass inducing_power=1 (FITC-EP)"
            )
    return alpha


def _prior(kernel, X, Z, jitter):
    """The FITC prior of ``kernel``: in memory, or over X's chunks for a Dask X."""
    if is_dask_array(X):
        return DaskFITCPrior(kernel, X, Z, jitter=jitter)
    return FITCPrior.from_kernel(kernel, X, Z, jitter=jitter)


def resolve_inducing_points(inducing_points, X, random_state):
    """Inducing inputs Z (m, d) from ``inducing_points`` (int m or (m, d) array), or None.

    int m: the m cluster centres of MiniBatchKMeans on X (seeded by ``random_state``;
    m = n gives X itself).  Raises ValueError with what to do for m < 1, m > n, NaN or inf,
    and a wrong number of features.
    """
    if inducing_points is None:
        return None
    n, d = X.shape
    if isinstance(inducing_points, numbers.Integral) and not isinstance(inducing_points, bool):
        m = int(inducing_points)
        _check_m(m, n)
        if is_dask_array(X):
            # k-means on at most DASK_KMEANS_ROWS rows drawn with random_state
            from sklearn.utils import check_random_state

            rng = check_random_state(random_state)
            k = min(n, DASK_KMEANS_ROWS)
            idx = np.sort(rng.choice(n, k, replace=False)) if k < n else np.arange(n)
            X = np.asarray(X[idx].compute(), dtype=float)
            n = X.shape[0]
        if m == n:
            return np.array(X, dtype=float)
        from sklearn.cluster import MiniBatchKMeans

        km = MiniBatchKMeans(
            n_clusters=m, random_state=_seed_of(random_state), n_init=3, batch_size=max(1024, 3 * m)
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            km.fit(X)
        Z = np.asarray(km.cluster_centers_, dtype=float)
        return _deduplicate(Z, X, random_state)
    if isinstance(inducing_points, (bool, numbers.Real, str)):
        raise ValueError(
            "inducing_points must be None, an int m (number of k-means inducing inputs) or an "
            f"(m, n_features) array, got {inducing_points!r}"
        )
    try:
        Z = np.array(inducing_points, dtype=float)
    except (TypeError, ValueError) as err:
        raise ValueError(
            "inducing_points must be None, an int or an (m, n_features) array of numbers"
        ) from err
    if Z.ndim != 2:
        raise ValueError(
            f"inducing_points must be a 2-D (m, n_features) array, got shape {Z.shape}; for one "
            "feature use Z.reshape(-1, 1)"
        )
    if Z.shape[1] != d:
        raise ValueError(
            f"inducing_points has {Z.shape[1]} features but X has {d}; pass an array of shape "
            f"(m, {d})"
        )
    _check_m(Z.shape[0], n)
    if not np.all(np.isfinite(Z)):
        raise ValueError(
            "inducing_points contains NaN or inf; pass finite inducing inputs (or an int m "
            "for k-means centres)"
        )
    return Z


def _check_m(m, n):
    if m < 1:
        raise ValueError(
            f"inducing_points must be at least 1, got {m}; pass e.g. inducing_points=256, or "
            "None for the dense model"
        )
    if m > n:
        raise ValueError(
            f"inducing_points={m} exceeds the number of training points ({n}); pass at most "
            f"{n} (m = n reproduces the dense model), or None for the dense model"
        )


def _seed_of(random_state):
    from sklearn.utils import check_random_state

    return check_random_state(random_state).randint(np.iinfo(np.int32).max)


def _deduplicate(Z, X, random_state):
    """Replace (numerically) duplicated k-means centres by distinct training inputs."""
    _, idx = np.unique(np.round(Z, 12), axis=0, return_index=True)
    if idx.size == Z.shape[0]:
        return Z
    from sklearn.utils import check_random_state

    rng = check_random_state(random_state)
    keep = Z[np.sort(idx)]
    extra = np.asarray(X[np.sort(rng.choice(X.shape[0], Z.shape[0] - keep.shape[0],
                                            replace=False))], dtype=float)  # fmt: skip
    return np.vstack([keep, extra])


def fixed_jitter(kernel, Z):
    """The absolute K_mm jitter of a fit: RELATIVE_JITTER * mean prior variance at Z."""
    scale = float(np.mean(kernel.diag(Z)))
    return RELATIVE_JITTER * (scale if np.isfinite(scale) and scale > 0 else 1.0)


# --------------------------------------------------------------------------- predictions
def latent_moments(result, kernel, Z, X, *, batch=PREDICT_BATCH):
    """FITC predictive latent mean (p,) and variance (p,) at X (p, d), in row batches."""
    p = X.shape[0]
    mean, var = np.empty(p), np.empty(p)
    for start in range(0, p, batch):
        rows = slice(start, min(start + batch, p))
        mean[rows], var[rows] = result.predict(kernel(X[rows], Z), kernel.diag(X[rows]))
    return mean, var


# --------------------------------------------------------------------------- optimiser
class SearchSpace:
    """The search coordinates x = [kernel theta, likelihood log params, vec(Z)] of a sparse
    fit, and the evaluation of -log Z and its gradient there for the evidence search.

    infer(kernel, Z, lik_params, init) -> EPResult, where ``init`` is the last successful
    evaluation's (site_precision, site_shift) in the same start (None before the first);
    gradient(res, kernel, Z, lik_params, wrt_Z) -> (gk, gl, gZ).
    """

    def __init__(self, infer, gradient, kernel, Z, n_lik, optimize_inducing):
        self.infer = infer
        self.gradient = gradient
        self.kernel = kernel
        self.Z0 = Z
        self.p = kernel.theta.size
        self.n_lik = n_lik
        self.opt_Z = optimize_inducing

    def unpack(self, x):
        kernel = self.kernel.clone_with_theta(x[: self.p])
        lik = x[self.p : self.p + self.n_lik]
        Z = x[self.p + self.n_lik :].reshape(self.Z0.shape) if self.opt_Z else self.Z0
        return kernel, lik, Z

    def evaluate(self, x, context):
        """The log evidence at x and its gradient (estimators/_search.py's ``evaluate``)."""
        kernel, lik, Z = self.unpack(x)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            warnings.filterwarnings("ignore", message="init gives an invalid posterior")
            res = self.infer(kernel, Z, lik, context.warm)
        value = float(res.log_Z)
        if not (np.isfinite(value) and is_search_evidence(res)):
            raise EvaluationFailed
        gk, gl, gZ = self.gradient(res, kernel, Z, lik, self.opt_Z)
        grad = np.concatenate([gk, gl, gZ.ravel() if self.opt_Z else []])
        return Evaluation(value, grad, state=res)


def _sites_of(res):
    return (res.site_precision, res.site_shift)


def optimise(space, x0, bounds, starts=(), maxiter=200, optimizer="fmin_l_bfgs_b",
             callable_bounds=None, fallback_starts=()):  # fmt: skip
    """The evidence search (estimators/_search.py) over ``space`` from x0 and each extra
    start: L-BFGS-B (at most ``maxiter`` iterations) or the user's callable ``optimizer``;
    ``fallback_starts``: tried in order while no evaluation has succeeded
    (``maximise_evidence``).  Returns the
    :class:`~robustep.estimators._search.SearchResult`."""
    return maximise_evidence(
        space.evaluate, x0, bounds, optimizer=optimizer, starts=starts, warm_of=_sites_of,
        options={"maxiter": maxiter}, callable_bounds=callable_bounds,
        fallback_starts=fallback_starts,
    )  # fmt: skip


def restart_points(x0, bounds, n_restarts, random_state, *, n_coordinates):
    """Extra starts drawn uniformly within the (finite) kernel bounds (classifiers' rule)."""
    if n_restarts <= 0:
        return []
    from sklearn.utils import check_random_state

    return draw_starts(x0, bounds_array(bounds), n_restarts, check_random_state(random_state),
                       n_coordinates=n_coordinates)  # fmt: skip


def _free_bounds(Z, optimize_inducing):
    return [(None, None)] * (Z.size if optimize_inducing else 0)


# --------------------------------------------------------------------------- shared
TGP_POWER_METHODS = ("auto", "ep")


def _log_Z_gradient(res, kernel, X, Z, lik, y, wrt_Z, alpha):
    """(d/d theta, d/d log lik params, d/dZ) of log Z: FITC-EP (S14) or power EP (P10)."""
    if alpha == 1.0:
        from robustep.ep.sparse_evidence import fitc_log_Z_gradient

        return fitc_log_Z_gradient(res, kernel, X, Z, lik, y, wrt_inducing=wrt_Z)
    from robustep.ep.pseudo_point import pseudo_point_log_Z_gradient

    return pseudo_point_log_Z_gradient(res, kernel, X, Z, lik, y, wrt_inducing=wrt_Z)


# --------------------------------------------------------------------------- regressor
def check_regressor(est):
    if est.method not in TGP_SPARSE_METHODS:
        raise ValueError(
            f"method={est.method!r} has no sparse (inducing-point) version; with "
            f"inducing_points use method in {TGP_SPARSE_METHODS}, or inducing_points=None for "
            f"method={est.method!r}"
        )
    if est.df_grid is not None and est.df_grid is not False:
        raise ValueError(
            "df_grid (EP3) is not available with inducing_points; use optimize_df=True "
            "(EP2) or inducing_points=None"
        )


def fit_regressor(core, kernel, space, X, Z, rng, settings, *, alpha=1.0,
                  optimize_inducing=True, learner=None, score_offset=0.0):  # fmt: skip
    """Sparse regressor fit (targets already standardised in ``core.y``); returns a
    :class:`robustep.estimators._regressor_fit.RegressorFit` with ``inducing_points``.

    learner : what learns (θ, the likelihood's free parameters, Z) with an optimizer
    (:func:`robustep.estimators._learner.resolve`; None: the full-batch search below);
    score_offset : added to the stochastic learner's held-out log density (target units).

    core : the :class:`~robustep.estimators._regressor_inference.InferenceCore`; space :
    the likelihood's :class:`~robustep.estimators._regressor_search.LikelihoodSpace`;
    Z : (m, d) initial inducing inputs; settings : the
    :class:`~robustep.estimators._regressor_fit.SearchSettings`; alpha : power EP's α on
    the pseudo-point posterior.  Type-II MAP over (log theta, the likelihood's free log
    parameters, Z) as in the dense regressor, with the search-run policy of
    :func:`robustep.get_config`: the first evaluation of each start (every one until an
    evaluation succeeds) runs the whole chain for at most ``sparse_first_max_iter``
    sweeps, later ones are warm-started search runs (:meth:`InferenceStrategy.search_run
    <robustep.ep.InferenceStrategy.search_run>`: ``search_max_iter`` sweeps, no double
    loop, a budget of posterior factorisations), all at tol ``search_tol``; the final fit
    runs at tol 1e-4.
    """
    from robustep.ep import InferenceStrategy
    from robustep.estimators._regressor_fit import Component, RegressorFit
    from robustep.estimators._regressor_search import at_bounds, hyperparameter_names

    config = get_config()
    y = core.y
    jitter = fixed_jitter(kernel, Z)

    def infer_at(kernel, Z, lik, warm, max_iter=1000, tol=1e-4, search_run=False):
        prior = _prior(kernel, X, Z, jitter)
        if alpha == 1.0:
            return core.infer(prior, lik, warm=warm, max_iter=max_iter, tol=tol, search=search_run)
        from robustep.ep.pseudo_point import pseudo_point_power_ep

        # the engine's robust run, as the core's "ep" search runs
        options = (
            InferenceStrategy.search_run(max_iter).engine_options()
            if search_run
            else {"max_iter": max_iter}
        )
        with warnings.catch_warnings():  # as the core: the caller checks convergence
            warnings.simplefilter("ignore", ConvergenceWarning)
            warnings.filterwarnings("ignore", message="init gives an invalid posterior")
            res = pseudo_point_power_ep(
                prior, y, lik, inducing_power=alpha, init=warm, tol=tol, **options
            )  # fmt: skip
        res.log_marginal_likelihood = float(res.log_Z)
        return res

    def infer(kernel, Z, lp, init):
        # no warm start: the start's first evaluation (or every one until one succeeds)
        lik = space.unpack(lp)
        if init is None:
            return infer_at(kernel, Z, lik, None, config.sparse_first_max_iter, config.search_tol)
        return infer_at(kernel, Z, lik, init, config.search_max_iter, config.search_tol, True)

    def gradient(res, kernel, Z, lp, wrt_Z):
        lik = space.unpack(lp)
        gk, gl, gZ = _log_Z_gradient(res, kernel, X, Z, lik, y, wrt_Z, alpha)
        return gk, space.gradient(dict(zip(lik.hyperparameter_names, gl, strict=True))), gZ

    opt_Z = bool(optimize_inducing)
    lik = space.likelihood
    fit = RegressorFit([], np.ones(1))
    warm = None

    def full_batch(kernel=kernel, Z=Z):
        p = kernel.theta.size
        n_lik = len(space.free)
        search_space = SearchSpace(infer, gradient, kernel, Z, n_lik, opt_Z)
        bounds = np.vstack([np.asarray(kernel.bounds, float).reshape(-1, 2), space.bounds])
        # the open upper bound of a noise width, as the dense fit
        opt_bounds = [tuple(b) for b in bounds[:p]] + space.open_bounds()
        x0 = np.concatenate([kernel.theta, space.x0()])
        x0 = np.clip(x0, bounds[:, 0], bounds[:, 1])
        x0 = np.concatenate([x0, Z.ravel() if opt_Z else []])
        full_bounds = [tuple(b) for b in bounds] + _free_bounds(Z, opt_Z)
        starts = draw_starts(x0, bounds_array(full_bounds), settings.n_restarts, rng,
                             radius=2.0, n_coordinates=p)  # fmt: skip
        search = optimise(
            search_space, x0, opt_bounds + _free_bounds(Z, opt_Z), starts,
            optimizer=settings.optimizer, callable_bounds=full_bounds,
        )  # fmt: skip
        x = search.x
        fit.search_failed = not search.success
        fit.at_bounds = at_bounds(hyperparameter_names(kernel, space), x, bounds)
        kernel, lp, Z = search_space.unpack(x)
        return _learner.Learned(kernel, space.unpack(lp), Z, search, search.state)

    if settings.optimizer is not None:
        problem = _learner.LearningProblem(
            kernel, X, y, lik, Z, alpha, jitter, learn_kernel=True, learn_inducing=opt_Z,
            learn_likelihood=space.free, random_state=rng, search=full_batch, classifier=False,
            score_offset=score_offset,
        )  # fmt: skip
        fit.learned = (learner or _learner.FullBatchLearner()).learn(problem)
        fit.searches.append(fit.learned.search)
        kernel, lik, Z, warm = (fit.learned.kernel, fit.learned.likelihood, fit.learned.Z,
                                fit.learned.warm)  # fmt: skip
    res = infer_at(kernel, Z, lik, warm, settings.max_iter, settings.tol)
    if alpha < 1.0:
        view = res.latent_view()
        view.log_marginal_likelihood = res.log_marginal_likelihood
        res = view
    fit.inducing_points = np.array(Z, dtype=float)
    fit.components = [Component(kernel, lik, res)]
    return fit


# --------------------------------------------------------------------------- streaming
@dataclass
class RegressorStream:
    """What a regressor's ``partial_fit`` carries between calls: the target
    standardisation, the learner, the likelihood's search space, the K_mm jitter, the
    inducing power α (resolved on the first call), the points seen, the starting
    (kernel, likelihood, Z) of the first call, the inference core (for the noise model of
    predictions), the last
    :class:`~robustep.estimators._learner.Learned` (None before the first batch) and the
    :class:`~robustep.estimators._regressor_fit.RegressorFit` that predicts."""

    y_mean: float
    y_std: float
    learner: object
    space: object
    jitter: float
    alpha: float
    n_seen: int
    start: tuple
    core: object
    learned: object = None
    fit: object = None


def check_stream(est):
    """Raise ValueError when a regressor's ``partial_fit`` cannot start a stream."""
    if est.method not in TGP_POWER_METHODS:
        raise ValueError(
            f"partial_fit runs stochastic power EP: method must be 'auto' or 'ep', got "
            f"{est.method!r}"
        )
    if est.device is not None:
        raise ValueError("partial_fit runs in numpy: pass device=None")


def start_stream(est, X, kernel, space, y_mean, y_std):
    """The :class:`RegressorStream` of a regressor's first ``partial_fit`` batch X (b, d)."""
    from sklearn.base import clone

    from robustep.estimators._regressor_inference import InferenceCore

    if est.optimizer is not None and est.optimize_inducing:
        check_inducing_gradient(est, kernel)
    learner = est.learner if isinstance(est.learner, _learner.StochasticLearner) else None
    learner = _learner.StochasticLearner() if learner is None else clone(learner)
    Z = resolve_inducing_points(est.inducing_points, X, est.random_state)
    core = InferenceCore(est.method, float(est.power), np.zeros(0), None)
    alpha = inducing_power_of(est, TGP_POWER_METHODS)
    return RegressorStream(y_mean, y_std, learner, space, fixed_jitter(kernel, Z), alpha, 0,
                           (kernel, space.likelihood, Z), core)  # fmt: skip


def continue_regressor_stream(est, stream, X, y):
    """One ``partial_fit`` step on the batch X (b, d), y (b,) in target units; returns the
    next :class:`RegressorStream` (``stream`` is not modified)."""
    from robustep.estimators._regressor_fit import Component, RegressorFit

    previous = None if stream.learned is None else stream.learned.state
    kernel, likelihood, Z = stream.start
    n_seen = stream.n_seen + X.shape[0]
    problem = _learner.LearningProblem(
        kernel, X, (y - stream.y_mean) / stream.y_std, likelihood, Z,
        stream.alpha, stream.jitter,
        learn_kernel=est.optimizer is not None,
        learn_inducing=est.optimizer is not None and bool(est.optimize_inducing),
        learn_likelihood=stream.space.free, random_state=est.random_state, classifier=False,
    )  # fmt: skip
    learned = _learner.continue_stream(stream.learner, problem, previous, n_seen)
    run = learned.state
    Z = np.array(run.inducing_inputs, dtype=float)
    fit = RegressorFit([Component(run.kernel, run.likelihood, _learner.InducingPosterior(run))],
                       np.ones(1), inducing_points=Z, learned=learned)  # fmt: skip
    return dataclasses.replace(stream, n_seen=n_seen, learned=learned, fit=fit)
