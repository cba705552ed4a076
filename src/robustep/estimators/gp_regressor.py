"""GP regression with any regression likelihood: ``GPRegressor``.

A scikit-learn shell over the private core: the inference per method
(estimators/_regressor_inference.py), the type-II MAP search of the kernel and the
likelihood's parameters (estimators/_regressor_search.py), the fits
(estimators/_regressor_fit.py, EP3's grid in estimators/_regressor_grid.py, the sparse
model in estimators/_sparse.py) and the predictions (estimators/_regressor_predictive.py).
The core returns a :class:`~robustep.estimators._regressor_fit.RegressorFit`; this class
sets its attributes from it.  :class:`~robustep.estimators.StudentTGPRegressor` is this
class with the Student-t likelihood's parameters as its own.
"""

from __future__ import annotations

import copy
import numbers

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Kernel
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted

from robustep._config import limits_blas_threads
from robustep._validation import validate_data as _validate_data
from robustep._warnings import warn
from robustep.estimators import _device, _learner
from robustep.estimators import _regressor_predictive as predictive
from robustep.estimators._regressor_fit import SearchSettings, fit_dense, fit_fvb, fit_mcmc
from robustep.estimators._regressor_grid import fit_df_grid, resolve_df_grid
from robustep.estimators._regressor_inference import (
    DEVICE_METHODS,
    EP_METHODS,
    LOO_METHODS,
    METHODS,
    InferenceCore,
    check_method,
)
from robustep.estimators._regressor_search import DEFAULT_BOUNDS, LikelihoodSpace, resolve_bounds
from robustep.estimators._search import reports_progress, warn_if_stuck
from robustep.likelihoods import Gaussian, Laplace, Likelihood, StudentT

__all__ = ["GPRegressor"]

#: likelihood=<string>: the likelihood with its default starting parameters
LIKELIHOODS = {
    "student_t": lambda: StudentT(df=4.0, scale=0.5),
    "gaussian": lambda: Gaussian(noise_variance=0.25),
    "laplace": lambda: Laplace(scale=0.5),
}


def resolve_likelihood(likelihood):
    """A copy of the likelihood object, or the one a string names (:data:`LIKELIHOODS`)."""
    if isinstance(likelihood, str):
        if likelihood not in LIKELIHOODS:
            raise ValueError(
                f"likelihood={likelihood!r} is not known; pass one of {sorted(LIKELIHOODS)} "
                "or a robustep.likelihoods.Likelihood object such as StudentT(df=4, scale=0.5)"
            )
        return LIKELIHOODS[likelihood]()
    if not isinstance(likelihood, Likelihood):
        raise ValueError(
            f"likelihood must be a robustep.likelihoods.Likelihood or one of "
            f"{sorted(LIKELIHOODS)}, got {likelihood!r}"
        )
    if type(likelihood).predictive_cdf is Likelihood.predictive_cdf:
        raise ValueError(
            f"{type(likelihood).__name__} is not a likelihood of a real-valued observation (it "
            "has no predictive_cdf); use a regression likelihood such as StudentT, Gaussian "
            "or Laplace (for labels use GPClassifier)"
        )
    return copy.copy(likelihood)


def _validate(estimator, X, y=None, reset=True):
    kwargs = dict(ensure_2d=True, dtype="numeric", reset=reset)
    if y is None:
        return _validate_data(estimator, X, **kwargs)
    return _validate_data(estimator, X, y, y_numeric=True, **kwargs)


class GPRegressor(RegressorMixin, BaseEstimator):
    """Gaussian process regression with any regression likelihood, fitted by EP.

    Parameters
    ----------
    kernel : sklearn kernel, default ``ConstantKernel(1.0) * RBF(1.0)``
        Prior covariance (log-space hyperparameters); cloned, never modified.
    likelihood : "student_t", "gaussian", "laplace" or a robustep.likelihoods.Likelihood
        The observation model p(y_i | f_i) and the start of its parameters: an object
        such as ``StudentT(df=4, scale=0.5)``, ``Gaussian(noise_variance=0.25)`` or
        ``Laplace(scale=0.5)`` (copied, never modified), or a string for one of those.
        Its ``hyperparameter_names`` are optimised in log space jointly with the kernel
        (type-II MAP, one evidence search), and its predictive distribution gives
        :meth:`predict_interval`, :meth:`predict_quantiles`, :meth:`predict_log_density`
        and the leave-one-out diagnostics.
    likelihood_bounds : None or dict
        Bounds of the likelihood's parameters in the search, per name: a pair
        (low, high) with 0 < low <= high, or "fixed" (kept at its starting value), as
        scikit-learn kernels take theirs.  The Student-t's ``df`` is kept fixed unless
        given a range here (e.g. ``{"df": (1.05, 1000)}``).  Unnamed parameters keep the
        defaults: scale in [0.01, 100], noise_variance in [1e-4, 1e4]
        (standardised-target units when ``normalize_y``), others in [1e-5, 1e5].  The
        upper bound of a noise width (scale, noise_variance) is not enforced during the
        search (L-BFGS-B's first step would otherwise throw it there).
    method : {"auto", "ep", "fractional", "laplace", "vb", "fvb", "mcmc", "gaussian"}
        The approximation (Jylänki et al. 2011, §3): "auto" (EP's fixed point by parallel
        EP, then damped EP, then the double loop, and power EP only if none converges),
        "ep" (robust parallel EP, §4) and
        "fractional" (power EP with eta = ``power``) work with every likelihood;
        "laplace" with a likelihood that implements ``log_prob_derivatives``; "vb",
        "fvb", "mcmc" and "gaussian" (exact GP regression with noise variance
        ``scale**2``) use the Student-t's scale-mixture form and need the StudentT
        likelihood.
    power : float in (0, 1]
        Fractional EP power eta (``method="fractional"``).
    prior : {"dense", "diagonal_plus_low_rank"}, default "dense"
        How the dense model holds its prior covariance K = kernel(X) (the same model, the
        same numbers).  "dense": the n x n matrix.  "diagonal_plus_low_rank": K = diag(d) +
        U U^T read off a kernel whose covariance has that form (WhiteKernel plus DotProduct
        or ConstantKernel terms, each optionally times a ConstantKernel, e.g.
        ``WhiteKernel() + DotProduct()``), with O(n r^2) posteriors and evidence
        gradients (robustep.posterior.low_rank); a ValueError names the supported kernels
        for any other.  Methods "auto", "ep" and "fractional", in numpy, without
        ``inducing_points``.
    max_iter : int >= 1, default 1000
        Maximum EP sweeps of the final fit at the found hyperparameters (per stage of
        the "auto" chain; Newton iterations for "laplace", at most 100).  The
        hyperparameter search's own runs keep their budgets from
        :func:`robustep.get_config` (``search_max_iter``, ``final_max_iter`` for a
        start's cold first evaluation).  A final fit that ends unconverged sets
        ``converged_`` False and raises a ConvergenceWarning.
    tol : float > 0, default 1e-4
        Convergence tolerance of the final fit's EP on the largest change of site
        natural parameters, as :class:`~robustep.estimators.GPClassifier`'s ``tol``;
        the search's runs use the looser ``search_tol`` of :func:`robustep.get_config`.
        Dense and sparse (``inducing_points``) models, and each value of EP3's grid.
    df_grid : None, True or array of nu values
        EP3 (StudentT likelihood only): nu fixed at each value, the other
        hyperparameters optimised for each, the predictions mixed (§6.2).
    optimizer, n_restarts_optimizer, normalize_y, n_samples, mcmc_hyper_every,
    mcmc_hyper_sampler, random_state, inducing_points, optimize_inducing, device, dtype,
    inducing_power :
        As in :class:`~robustep.estimators.StudentTGPRegressor`; a callable optimizer
        searches over [kernel log hyperparameters, the likelihood's free log parameters
        (noise widths first), the inducing inputs].

    learner : {"auto", "full_batch", "stochastic"} or StochasticLearner, default "auto"
        What learns the kernel, the likelihood's free parameters and the inducing inputs
        of the sparse model: "full_batch", the evidence search over full O(n m^2) EP runs;
        "stochastic" or a :class:`~robustep.StochasticLearner`, stochastic power EP with
        Adam on minibatch gradients of the power-EP energy (an epoch costs about one EP
        sweep; the likelihood's bounds and ``n_restarts_optimizer`` do not apply), needing
        ``inducing_points`` and the optimizer (a ``dask.array`` X is read block by block,
        tied sites); "auto": the stochastic learner
        with ``inducing_points``, ``optimizer="fmin_l_bfgs_b"`` and at least
        ``robustep.get_config().stochastic_learner_min_n`` (10000) training points.  The
        posterior is one EP fit at the learned values either way.  See
        docs/guide/large-data.md, "Learning at scale".
    verbose : bool, default False
        Print one line per evaluation of the hyperparameter search to stderr (evaluation
        count, failures, approximate log evidence, elapsed time), or one line per epoch of
        the stochastic learner (steps, energy estimate, held-out log density, elapsed,
        time left); quiet otherwise.  The same lines are INFO records of the
        ``robustep.search`` logger.

    Attributes
    ----------
    kernel_, likelihood_ : the fitted kernel and likelihood (the most probable EP3 one).
    converged_, n_iter_, log_marginal_likelihood_value_, site_precision_, site_shift_,
    negative_precision_, cavity_mean_, cavity_var_, hyperparameters_at_bounds_,
    optimizer_result_, method_used_, inducing_points_, inducing_power_, df_grid_,
    df_weights_, mcmc_diagnostics_, loo_* and outlier_scores_ :
        As in :class:`~robustep.estimators.StudentTGPRegressor`.
    learner_, history_, n_epochs_ :
        "full_batch" or "stochastic"; the stochastic learner's epochs (one dict each:
        ``epoch``, ``steps``, ``energy``, ``validation_log_density`` with a held-out
        split, ``elapsed``) and their number (None otherwise).  With the stochastic
        learner ``optimizer_result_.stopped`` says why it stopped ("converged",
        "early_stopping", "max_epochs", "max_time", "interrupted").

    :meth:`partial_fit` (``inducing_points``) continues the stochastic learner over
    batches; its posterior is the learner's q(u), ``log_marginal_likelihood_value_`` the
    last batch's energy estimate, and the site and leave-one-out attributes are None.
    """

    _parameter_constraints: dict = {
        "kernel": [Kernel, None],
        "likelihood": [Likelihood, str],
        "likelihood_bounds": [dict, None],
        "method": [StrOptions(set(METHODS))],
        "power": [Interval(numbers.Real, 0.0, 1.0, closed="right")],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "tol": [Interval(numbers.Real, 0.0, None, closed="neither")],
        "df_grid": [None, "array-like", "boolean"],
        "optimizer": [StrOptions({"fmin_l_bfgs_b"}), callable, None],
        "n_restarts_optimizer": [Interval(numbers.Integral, 0, None, closed="left")],
        "normalize_y": ["boolean"],
        "n_samples": [Interval(numbers.Integral, 1, None, closed="left")],
        "mcmc_hyper_every": [Interval(numbers.Integral, 1, None, closed="left")],
        "mcmc_hyper_sampler": [StrOptions({"slice", "metropolis"})],
        "random_state": ["random_state"],
        "verbose": ["boolean"],
        "inducing_points": [None, numbers.Integral, "array-like"],
        "optimize_inducing": ["boolean"],
        "inducing_power": [Interval(numbers.Real, 0.0, 1.0, closed="right"), StrOptions({"auto"})],
        "device": [str, None],
        "dtype": [StrOptions({"float64", "float32"})],
        "prior": [StrOptions({"dense", "diagonal_plus_low_rank"})],
        "learner": [StrOptions(set(_learner.LEARNER_NAMES)), _learner.StochasticLearner],
    }

    def __init__(
        self,
        kernel=None,
        *,
        likelihood="student_t",
        likelihood_bounds=None,
        method="auto",
        power=0.5,
        max_iter=1000,
        tol=1e-4,
        optimizer="fmin_l_bfgs_b",
        n_restarts_optimizer=0,
        normalize_y=True,
        random_state=None,
        verbose=False,
        df_grid=None,
        inducing_points=None,
        optimize_inducing=True,
        inducing_power="auto",
        device=None,
        dtype="float64",
        n_samples=2000,
        mcmc_hyper_every=1,
        mcmc_hyper_sampler="slice",
        prior="dense",
        learner="auto",
    ):
        self.kernel = kernel
        self.likelihood = likelihood
        self.likelihood_bounds = likelihood_bounds
        self.method = method
        self.power = power
        self.max_iter = max_iter
        self.tol = tol
        self.optimizer = optimizer
        self.n_restarts_optimizer = n_restarts_optimizer
        self.normalize_y = normalize_y
        self.random_state = random_state
        self.verbose = verbose
        self.df_grid = df_grid
        self.inducing_points = inducing_points
        self.optimize_inducing = optimize_inducing
        self.inducing_power = inducing_power
        self.device = device
        self.dtype = dtype
        self.n_samples = n_samples
        self.mcmc_hyper_every = mcmc_hyper_every
        self.mcmc_hyper_sampler = mcmc_hyper_sampler
        self.prior = prior
        self.learner = learner

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # R^2 on scikit-learn's tiny random check data is not a fair target for a
        # heavy-tailed noise model with few points
        tags.regressor_tags.poor_score = True
        return tags

    def _more_tags(self):  # pragma: no cover - scikit-learn < 1.6
        return {"poor_score": True}

    # ------------------------------------------------------------ likelihood
    def _likelihood_and_bounds(self):
        """(starting likelihood, {name: (low, high) or "fixed"}) from the parameters."""
        lik = resolve_likelihood(self.likelihood)
        bounds = resolve_bounds(lik, self.likelihood_bounds)
        if "df" in bounds and "df" not in (self.likelihood_bounds or {}):
            # the degrees of freedom are learnt only when asked (a range in
            # likelihood_bounds): their evidence is flat over heavy tails, and the
            # paper's EP1 keeps nu fixed (Jylanki et al. 2011, §6.2)
            bounds["df"] = "fixed"
        return lik, bounds

    def _set_likelihood_attributes(self, likelihood):
        """Fitted likelihood attributes (subclasses add their parameters' own)."""
        self.likelihood_ = likelihood

    # ----------------------------------------------------------------- fit
    @reports_progress
    @limits_blas_threads
    def fit(self, X, y):
        """Fit the hyperparameters and the posterior approximation; returns self.

        X : (n, d) inputs; y : (n,) real targets.
        """
        self._validate_params()
        if y is None:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y is None"
            )
        from robustep.estimators import _sparse

        if _sparse.is_dask_input(X):  # Dask arrays: the sparse model over X's row chunks
            X, y, self.n_features_in_ = _sparse.validate_dask(self, X, y)
        else:
            X, y = _validate(self, X, y, reset=True)
        lik, bounds = self._likelihood_and_bounds()
        grid_on = self.df_grid is not None and self.df_grid is not False
        check_method(self.method, lik, grid_on)
        like = None
        if self.device is not None:  # dense EP only (estimators/_device.py)
            if self.dtype != "float64":
                raise ValueError(
                    "dtype='float32' does not work with the regressor's likelihoods: EP does "
                    "not converge in float32 (the informative sites make I + S K S "
                    "ill-conditioned; docs/performance.md#gpu, 'float32 against float64'); use "
                    "dtype='float64'"
                )
            like = _device.check_fit(self, y, methods=DEVICE_METHODS)
        y = np.asarray(y, dtype=float)
        if self.method in ("mcmc", "gaussian", "fvb") and grid_on:
            raise ValueError(
                f"df_grid (EP3) needs an approximate marginal likelihood; method={self.method!r} "
                "does not support it — use method='ep', 'fractional', 'laplace' or 'vb'"
            )
        self._y_mean, self._y_std = 0.0, 1.0
        if self.normalize_y:
            std = float(np.std(y))
            self._y_mean = float(np.mean(y))
            self._y_std = std if std > 0 and np.isfinite(std) else 1.0
        self._X = X
        self._y = (y - self._y_mean) / self._y_std
        kernel = (
            ConstantKernel(1.0, (1e-5, 1e5)) * RBF(1.0, (1e-5, 1e5))
            if self.kernel is None
            else clone(self.kernel)
        )
        rng = check_random_state(self.random_state)
        if self.inducing_power not in ("auto", 1) and self.inducing_points is None:
            raise ValueError("inducing_power applies to the sparse model: pass inducing_points, "
                             "or inducing_power='auto' for the dense model")  # fmt: skip
        if "df" in bounds and (self.method == "gaussian" or grid_on):
            bounds["df"] = "fixed"  # no df in the Gaussian reference; EP3 fixes it per value
        if self.prior != "dense" and (
            self.method not in EP_METHODS
            or self.device is not None
            or self.inducing_points is not None
        ):
            raise ValueError(f"prior={self.prior!r} runs the EP methods ('auto', 'ep', "
                             "'fractional') of the dense model in numpy: pass device=None "
                             "and inducing_points=None, or prior='dense'")  # fmt: skip
        core = InferenceCore(self.method, float(self.power), self._y, self.device, self.prior)
        space = LikelihoodSpace.of(lik, bounds, searched=self.optimizer is not None)
        settings = SearchSettings(
            self.optimizer, int(self.n_restarts_optimizer), like,
            tol=float(self.tol), max_iter=int(self.max_iter),
        )  # fmt: skip
        learner = _learner.resolve(
            self.learner, n=X.shape[0], sparse=self.inducing_points is not None,
            optimizer=self.optimizer, dask=_sparse.is_dask_input(X),
        )  # fmt: skip
        self.__dict__.pop("_stream", None)  # fit starts afresh after partial_fit
        alpha = None
        if self.inducing_points is not None:  # sparse FITC model: estimators/_sparse.py
            _sparse.check_regressor(self)
            alpha = _sparse.inducing_power_of(self, _sparse.TGP_POWER_METHODS,
                                              dask=_sparse.is_dask_input(X))  # fmt: skip
            _sparse.check_inducing_gradient(self, kernel)
            Z = _sparse.resolve_inducing_points(self.inducing_points, X, self.random_state)
            fit = _sparse.fit_regressor(
                core, kernel, space, X, Z, rng, settings, alpha=alpha,
                optimize_inducing=self.optimize_inducing, learner=learner,
                score_offset=-float(np.log(self._y_std)),
            )  # fmt: skip
        elif self.method == "mcmc":
            sample = self.optimizer is not None
            fit = fit_mcmc(
                kernel, X, self._y, lik, rng, sample_hyperparameters=sample,
                sample_df=sample and "df" in space.free, n_samples=self.n_samples,
                hyper_every=self.mcmc_hyper_every, hyper_sampler=self.mcmc_hyper_sampler,
            )  # fmt: skip
        elif self.method == "fvb" and self.optimizer is not None:
            df_bounds = bounds["df"] if bounds["df"] != "fixed" else DEFAULT_BOUNDS["df"]
            fit = fit_fvb(kernel, X, self._y, lik, "df" in space.free, df_bounds)
        elif grid_on:
            grid = resolve_df_grid(self.df_grid)
            fit = fit_df_grid(core, kernel, space, grid, X, rng, settings)
        else:
            fit = fit_dense(core, kernel, space, X, rng, settings)
        self._fit, self._core, self._like = fit, core, like
        self.inducing_power_ = alpha
        self._set_attributes(fit)
        return self

    @available_if(_learner.has_partial_fit)
    @reports_progress
    def partial_fit(self, X, y):
        """One pass of the stochastic learner over a batch (sparse model, ``inducing_points``).

        As scikit-learn's incremental estimators: the first call fixes the model from its
        batch: the target standardisation (``normalize_y``: this batch's mean and std),
        the inducing inputs (k-means centres of this batch for an int
        ``inducing_points``, at most its size), the K_mm jitter and the starting kernel
        and likelihood.  Every call runs one epoch of stochastic power EP with tied sites
        over its batch, continuing the average site, the kernel hyperparameters and the
        likelihood's free parameters (learned when ``optimizer`` is not None), the
        inducing inputs (``optimize_inducing``) and the Adam state; the average site
        stands for every point seen so far.  The learner's parameters come from
        ``learner`` when it is a :class:`~robustep.StochasticLearner`, else its defaults.
        ``fit`` starts afresh.

        X : (b, d); y : (b,) real targets.  Returns ``self``.
        """
        from robustep.estimators import _sparse

        first = not hasattr(self, "_stream")
        if first:
            self._validate_params()
            _sparse.check_stream(self)
        _learner.check_batch_in_memory(X)
        X, y = _validate(self, X, y, reset=first)
        y = np.asarray(y, dtype=float)
        if first:
            y_mean, y_std = 0.0, 1.0
            if self.normalize_y:
                std = float(np.std(y))
                y_mean, y_std = float(np.mean(y)), std if std > 0 and np.isfinite(std) else 1.0
            lik, bounds = self._likelihood_and_bounds()
            space = LikelihoodSpace.of(lik, bounds, searched=self.optimizer is not None)
            kernel = (
                ConstantKernel(1.0, (1e-5, 1e5)) * RBF(1.0, (1e-5, 1e5))
                if self.kernel is None
                else clone(self.kernel)
            )
            stream = _sparse.start_stream(self, X, kernel, space, y_mean, y_std)
        else:
            stream = self._stream
        stream = _sparse.continue_regressor_stream(self, stream, X, y)
        self._stream = stream
        self._y_mean, self._y_std = stream.y_mean, stream.y_std
        self._set_stream_attributes(stream)
        return self

    def _set_stream_attributes(self, stream):
        """The fitted attributes of a ``partial_fit`` stream (no training data kept)."""
        from robustep import diagnostics

        diagnostics.clear_loo_attributes(self)
        learned, fit = stream.learned, stream.fit
        run = learned.state
        self.df_grid_ = self.df_weights_ = self.mcmc_diagnostics_ = None
        self.inducing_points_ = fit.inducing_points
        self.inducing_power_ = (
            stream.alpha if stream.learner.power is None else float(stream.learner.power)
        )
        self.optimizer_result_ = learned.search
        self.method_used_ = "stochastic"
        for key, value in _learner.fitted_attributes(learned).items():
            setattr(self, key, value)
        self.hyperparameters_at_bounds_ = []
        self.kernel_ = run.kernel
        self._set_likelihood_attributes(run.likelihood)
        self.X_train_ = self.y_train_ = None
        self.converged_ = True
        self.n_iter_ = int(run.n_steps)
        self.log_marginal_likelihood_value_ = float(learned.search.log_evidence)
        self.site_precision_ = self.site_shift_ = self.negative_precision_ = None
        self.cavity_mean_ = self.cavity_var_ = None
        self._fit, self._core, self._like, self._X = fit, stream.core, None, None

    def _set_attributes(self, fit):
        from robustep import diagnostics

        name = type(self).__name__
        diagnostics.clear_loo_attributes(self)  # set again below for the methods with LOO
        self.df_grid_ = fit.df_grid
        self.df_weights_ = None if fit.df_grid is None else fit.weights.copy()
        self.inducing_points_ = fit.inducing_points
        self.mcmc_diagnostics_ = None
        if fit.df_grid is not None:  # EP3: one search per grid value
            self.optimizer_result_ = list(fit.searches) or None
        else:
            self.optimizer_result_ = fit.searches[-1] if fit.searches else None
        self.method_used_ = self.method
        for key, value in _learner.fitted_attributes(fit.learned).items():
            setattr(self, key, value)
        best = fit.components[int(np.argmax(fit.weights))]
        res = best.res
        self.hyperparameters_at_bounds_ = [(a[0], a[1]) for a in fit.at_bounds]
        if fit.at_bounds:
            text = "; ".join(
                f"{n} = {value:.3g} is at its {side} bound {bound:.3g}"
                for n, side, value, bound in fit.at_bounds
            )
            warn(
                f"{name}(method={self.method!r}): optimised hyperparameters ended on their "
                f"bounds ({text}). The fit may be degenerate (too few or constant data); "
                "widen the bounds (the kernel's bounds, or likelihood_bounds={name: "
                "(low, high)} for the likelihood's parameters) or add data and fit again.",
                ConvergenceWarning,
            )
        self.kernel_ = best.kernel
        self._set_likelihood_attributes(best.likelihood)
        self.X_train_ = self._X
        self.y_train_ = self._y * self._y_std + self._y_mean
        if fit.mcmc is not None:
            self.mcmc_diagnostics_ = {
                "rhat": dict(res.rhat),
                "ess": dict(res.ess),
                "hyper_acceptance": res.hyper_acceptance,
            }
            self.converged_ = bool(all(np.isfinite(v) and v < 1.1 for v in res.rhat.values()))
            self.n_iter_ = int(res.n_iter)
            self.log_marginal_likelihood_value_ = None
            self.site_precision_ = self.site_shift_ = None
            self.negative_precision_ = np.zeros(self._y.size, dtype=bool)
            self.cavity_mean_ = self.cavity_var_ = None
            return
        self._set_posterior_attributes(fit, res)
        self._warn_about_fit(fit)

    def _set_posterior_attributes(self, fit, res):
        from robustep import diagnostics
        from robustep.estimators._regressor_inference import sites_of

        self.converged_ = bool(all(bool(c.res.converged) for c in fit.components))
        self.converged_ = self.converged_ and not fit.search_failed
        self.n_iter_ = int(sum(int(c.res.n_iter) for c in fit.components))
        lml = np.array([float(c.res.log_marginal_likelihood) for c in fit.components])
        lml = lml[np.isfinite(lml)]
        if len(fit.components) == 1:
            self.log_marginal_likelihood_value_ = float(res.log_marginal_likelihood)
        elif lml.size == 0:
            self.log_marginal_likelihood_value_ = -np.inf
        else:  # log of the (grid-)averaged evidence
            mx = lml.max()
            self.log_marginal_likelihood_value_ = float(mx + np.log(np.mean(np.exp(lml - mx))))
        prec, shift = sites_of(res, self._y)
        self.site_precision_, self.site_shift_ = prec, shift
        self.negative_precision_ = prec < 0
        cm, cv = predictive.cavity_moments(res, prec, shift)
        self.cavity_mean_ = cm * self._y_std + self._y_mean
        self.cavity_var_ = cv * self._y_std**2
        self.method_used_ = getattr(res, "method_used", self.method)
        if self.method in LOO_METHODS:
            comps = predictive.loo_components(fit, self._core)
            try:
                loo = diagnostics.regressor_loo(
                    comps, fit.weights, self._y, self._y_mean, self._y_std
                )
            except (ValueError, ArithmeticError, np.linalg.LinAlgError) as err:
                warn(
                    f"{type(self).__name__}: leave-one-out diagnostics are unavailable for this "
                    f"fit ({type(err).__name__}: {err}); the fitted model is unaffected",
                    UserWarning,
                )
            else:
                for key, value in loo.items():
                    setattr(self, key, value)

    def _warn_about_fit(self, fit):
        name = f"{type(self).__name__}(method={self.method!r})"
        if fit.search_failed:
            warn(
                f"{name}: the hyperparameter search found no point where the inference "
                "converged, so the hyperparameters were not optimised (converged_ is False); "
                "try a larger noise scale, method='auto' or method='fractional'",
                ConvergenceWarning,
            )
        elif any(search.stuck_reason() for search in fit.searches):
            warn_if_stuck(
                next(search for search in fit.searches if search.stuck_reason()),
                "pass another starting kernel or likelihood, or set n_restarts_optimizer > 0",
            )
        elif not self.converged_ and self.method == "auto":
            msgs = [c.res.message for c in fit.components if not c.res.converged]
            warn(f"{type(self).__name__}: {msgs[0]}", ConvergenceWarning)
        elif not self.converged_:
            warn(
                f"{name}: the posterior approximation did not converge; results may be "
                "inaccurate (try fixing the likelihood's shape parameters, a larger noise "
                "scale, or method='fractional')",
                ConvergenceWarning,
            )

    # -------------------------------------------------------------- predict
    def _component_moments(self, X):
        """Per-component latent (means (J, m), vars (J, m)) at validated X, standardised."""
        return predictive.component_moments(self._fit, X, self._X, self._like)

    def _predictive_mixture(self, X):
        """The predictive of y at validated X (m, d) in standardised units, a
        :class:`robustep.likelihoods.PredictiveMixture` over the EP3 grid or MCMC draws."""
        return predictive.predictive(self._fit, self._core, X, self._X, self._like)

    def predict_quantiles(self, X, q):
        """Quantiles of the predictive distribution of the *observation* y at X.

        The predictive of y is the likelihood convolved with the Gaussian latent
        q(f* | D) (Jylänki et al. 2011, eq. 3 and §2), mixed over the EP3 grid or the
        MCMC draws; its quantiles come from the likelihood's predictive CDF by
        safeguarded Newton inversion (:meth:`robustep.likelihoods.PredictiveMixture.quantiles`).

        X : (m, d); q : float or array-like of probabilities in [0, 1].
        Returns (m,) for a scalar q, else (m, len(q)), in target units.
        """
        check_is_fitted(self)
        scalar = np.ndim(q) == 0
        try:
            qa = np.asarray(q, dtype=float).reshape(-1)
        except (TypeError, ValueError) as err:
            raise ValueError(
                f"q must be a float or an array-like of floats in [0, 1], got {q!r}"
            ) from err
        if qa.size == 0 or not np.all(np.isfinite(qa)) or np.any((qa < 0) | (qa > 1)):
            raise ValueError(f"q must contain probabilities in [0, 1], got {q!r}")
        X = _validate(self, X, reset=False)
        Q = self._predictive_mixture(X).quantiles(qa)
        Q = Q * self._y_std + self._y_mean
        return Q[:, 0] if scalar else Q

    def predict_interval(self, X, coverage=0.95):
        """Central predictive interval of the observation y at X: (lower (m,), upper (m,)).

        The (1 - coverage)/2 and (1 + coverage)/2 quantiles of :meth:`predict_quantiles`
        (the noise convolved with the latent posterior); ``coverage`` in (0, 1).  Unlike
        ``predict(X, return_std=True)``, which gives the latent f's std, this interval
        contains a new noisy y with probability ``coverage`` under the model.
        """
        if (
            isinstance(coverage, bool)
            or not isinstance(coverage, numbers.Real)
            or not (0.0 < float(coverage) < 1.0)
        ):
            raise ValueError(f"coverage must be a number in (0, 1) such as 0.95, got {coverage!r}")
        c = float(coverage)
        Q = self.predict_quantiles(X, [0.5 * (1.0 - c), 0.5 * (1.0 + c)])
        return Q[:, 0], Q[:, 1]

    def predict(self, X, return_std=False):
        """Posterior mean (and std) of the *latent* function f at X (m, d), in target units.

        Returns mean (m,), and with ``return_std`` also std (m,): the standard deviation
        of q(f* | D), **not** of a new observation y* (use :meth:`predict_interval` or
        :meth:`predict_quantiles` for y).  For EP3 and MCMC the moments are those of the
        mixture over the grid or draws.
        """
        check_is_fitted(self)
        X = _validate(self, X, reset=False)
        M, V = self._component_moments(X)
        w = self._fit.weights[:, None]
        mean = np.sum(w * M, axis=0)
        var = np.sum(w * (V + M**2), axis=0) - mean**2
        mean = mean * self._y_std + self._y_mean
        if not return_std:
            return mean
        return mean, np.sqrt(np.maximum(var, 1e-12)) * self._y_std

    def predict_log_density(self, X, y):
        """log int p(y_i | f) q(f | x_i) df per test point, shape (m,) (§6.1).

        For MCMC the density is averaged over posterior draws; for EP3 over the grid.
        """
        check_is_fitted(self)
        X = _validate(self, X, reset=False)
        y = np.asarray(y, dtype=float).reshape(-1)
        if y.shape[0] != X.shape[0]:
            raise ValueError(f"X has {X.shape[0]} rows but y has {y.shape[0]} entries")
        ys = (y - self._y_mean) / self._y_std
        if self._fit.mcmc is not None:
            lp = self._fit.mcmc.log_predictive_density(X, ys, max_draws=predictive.MCMC_DRAWS)
        else:
            lp = self._predictive_mixture(X).log_density(ys)
        return lp - np.log(self._y_std)

    def loo_score(self):
        """Mean leave-one-out log predictive density of the training targets (target units).

        mean_i log p(y_i | y_-i) from the cavities (see ``loo_log_predictive_``); raises
        AttributeError for methods without it.
        """
        from robustep import diagnostics

        return diagnostics.loo_score(self, f"method in {LOO_METHODS}")

    def score(self, X, y, sample_weight=None):
        """Coefficient of determination R^2 of ``predict(X)`` against y, as every
        scikit-learn regressor (and so ``cross_val_score`` and ``GridSearchCV`` by default).

        The mean log predictive density of the whole predictive distribution is
        :meth:`log_predictive_score` (scorer: :func:`robustep.metrics.log_predictive_scorer`).
        """
        return super().score(X, y, sample_weight=sample_weight)

    def log_predictive_score(self, X, y, sample_weight=None):
        """Mean log predictive density (MLPD) of y at X, mean_i log p(y_i | x_i, data):
        higher is better; it rewards calibrated predictive intervals, which R^2 ignores."""
        lp = self.predict_log_density(X, y)
        return float(np.average(lp, weights=sample_weight))
