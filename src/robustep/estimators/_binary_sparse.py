"""The sparse binary GP classification core: the FITC prior in memory or over Dask chunks.

:func:`fit_sparse` returns a :class:`robustep.estimators._binary.BinaryFit`.  The prior is
built by :func:`robustep.posterior.factory.make_prior` in one representation chosen once
per fit: ``"fitc"`` (in-memory X) or ``"dask"`` (X a ``dask.array`` chunked by rows), both
on inducing inputs Z with the K_mm jitter fixed for the whole fit
(:func:`robustep.estimators._sparse.fixed_jitter`).  EP runs on it as on a dense prior
(:func:`robustep.estimators._binary.run_inference`); an inducing power α < 1 runs power
EP on the pseudo-point posterior instead (Bui, Yan & Turner 2017;
:mod:`robustep.ep.pseudo_point`, docs/derivations/sparse.md §8): ``inducing_power=α``, or
the default "auto" with optimised inducing inputs in memory
(:func:`robustep.estimators._sparse.inducing_power_of`).  The evidence search runs
over the kernel's log hyperparameters and, with ``optimize_inducing``, Z (FITC-EP: eq.
S14; power EP: P10, P11).  Predictions are made in row batches (O(batch m) memory).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from types import SimpleNamespace

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from robustep._config import get_config
from robustep.estimators import _learner, _sparse
from robustep.estimators._binary import (
    BinaryCore,
    BinaryFit,
    auto_strategy,
    fitted_attributes,
    fix_amplitude,
    run_inference,
)
from robustep.estimators._search import shorter_length_scale_starts
from robustep.posterior.factory import make_prior

__all__ = ["check_sparse", "fit_sparse"]

#: GPClassifier methods with a sparse version, and those that combine with α < 1
SPARSE_METHODS = ("auto", "ep", "damped", "power", "rep")
POWER_METHODS = ("auto", "ep", "damped")


def check_sparse(params):
    """Raise ValueError for options the sparse classifier does not support."""
    if params.device is not None:
        raise ValueError(
            "device and inducing_points cannot be combined yet; use device=None with "
            "inducing_points, or inducing_points=None with device"
        )
    if params.method not in SPARSE_METHODS:
        raise ValueError(
            f"method={params.method!r} has no sparse (inducing-point) version; with "
            f"inducing_points use method in {SPARSE_METHODS}, or inducing_points=None for "
            f"method={params.method!r}"
        )
    if params.schedule != "parallel":
        raise ValueError(
            "schedule='sequential' needs the (n, n) posterior covariance, which the sparse "
            "model never forms; use schedule='parallel' with inducing_points (or "
            "inducing_points=None)"
        )


class SparseBinaryCore(BinaryCore):
    """Binary inference on the FITC prior at any (kernel, Z).

    Parameters
    ----------
    params : the classifier's parameters; X : (n, d) inputs (numpy or dask.array);
    y : (n,) labels ±1; likelihood : the likelihood object; jitter : the fixed K_mm
    jitter; alpha : the inducing power α (1: FITC-EP).
    """

    def __init__(self, params, X, y, likelihood, jitter, alpha):
        super().__init__(params, X, y, likelihood)
        self.jitter = jitter
        self.alpha = alpha
        self.representation = "dask" if _sparse.is_dask_input(X) else "fitc"

    def infer(self, kernel, Z, init=None, search=False):
        """EP on the FITC prior (α = 1), or power EP with power α < 1 on the pseudo-point
        posterior ("ep", and "auto" with the probit likelihood: the engine's robust run;
        "damped": ``damping``, 0.5 for "adaptive"; "auto" with the label-noise step
        likelihood: :meth:`step_strategy`'s chain).  ``search``: an evaluation of the
        evidence search; with the step likelihood's "auto" its chain's search stages, to
        ``search_tol`` (at α = 1 :meth:`InferenceStrategy.search_stages
        <robustep.ep.InferenceStrategy.search_stages>`, as the dense classifier's),
        otherwise no difference."""
        params = self.params
        prior = make_prior(kernel, self.X, self.representation, inducing_inputs=Z,
                           jitter=self.jitter)  # fmt: skip
        step_auto = params.method == "auto" and params.likelihood == "step"
        if self.alpha == 1.0:
            return run_inference(params, prior, self.y, self.likelihood, init,
                                 search=search and step_auto)  # fmt: skip
        from robustep.ep.pseudo_point import pseudo_point_power_ep

        if step_auto:
            return pseudo_point_power_ep(
                prior, self.y, self.likelihood, inducing_power=self.alpha,
                strategy=self.step_strategy(search), tol=params.tol, init=init,
            )  # fmt: skip
        damping = 0.0
        if params.method == "damped":
            damping = 0.5 if params.damping == "adaptive" else float(params.damping)
        return pseudo_point_power_ep(
            prior, self.y, self.likelihood, inducing_power=self.alpha, damping=damping,
            max_iter=params.max_iter, tol=params.tol, init=init,
        )  # fmt: skip

    def step_strategy(self, search=False):
        """The chain of ``method="auto"`` with the label-noise step likelihood on the
        pseudo-point posterior (α < 1): the dense classifier's stages that look for a
        fixed point, Anderson-accelerated parallel sweeps, then damping 0.5 and 0.8, then
        the double loop (:func:`~robustep.estimators._binary.auto_strategy`), every site
        at power α; stage ``"power"`` is left out (α is this model's power already).
        The engine's one undamped run oscillates on this likelihood where these stages
        converge in tens of sweeps (docs/reliability.md, "The sparse step classifier").
        ``search``: the stages of a search evaluation, stage ``"accelerated"`` alone to
        ``search_tol`` (:meth:`~robustep.ep.InferenceStrategy.search_stages`)."""
        strategy = auto_strategy(self.params)
        kept = tuple(s for s in strategy.stages if s != "power")
        strategy = replace(strategy, stages=kept)
        if search:
            strategy = strategy.search_stages(damped_tol=get_config().search_tol)
        return strategy

    def gradient(self, res, kernel, Z, wrt_Z):
        """(d/d theta (p,), d/dZ (m, d) or empty) of log Z."""
        gk, _, gZ = _sparse._log_Z_gradient(res, kernel, self.X, Z, self.likelihood, self.y,
                                            wrt_Z, self.alpha)  # fmt: skip
        return gk, gZ

    def latent(self, fit, X):
        """The latent predictive mean and variance (m,) of ``fit`` at X (m, d), in row
        batches of ``PREDICT_BATCH``."""
        return _sparse.latent_moments(fit.result, fit.kernel, self._Z(fit), X)

    def evidence(self, fit, theta, eval_gradient=False):
        """log Z at log hyperparameters ``theta`` with ``fit``'s inducing inputs fixed (and
        its gradient (p,))."""
        kernel = fit.kernel.clone_with_theta(np.asarray(theta, dtype=float))
        Z = self._Z(fit)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                res = self.infer(kernel, Z)
        except (np.linalg.LinAlgError, ValueError, FloatingPointError):
            return (-np.inf, np.zeros_like(theta)) if eval_gradient else -np.inf
        value = float(res.log_Z)
        if not eval_gradient:
            return value
        return value, self.gradient(res, kernel, Z, False)[0]

    @staticmethod
    def _Z(fit):
        return fit.attributes["inducing_points_"]

    def search(self, kernel, Z, opt_Z):
        """The evidence search over [theta, vec(Z)] (estimators/_sparse.py's SearchSpace)."""
        params = self.params

        def infer(kernel, Z, _lik, init):
            return self.infer(kernel, Z, init, search=True)

        def gradient(res, kernel, Z, _lik, wrt_Z):
            gk, gZ = self.gradient(res, kernel, Z, wrt_Z)
            return gk, np.zeros(0), gZ

        space = _sparse.SearchSpace(infer, gradient, kernel, Z, 0, opt_Z)
        x0 = np.concatenate([kernel.theta, Z.ravel() if opt_Z else []])
        kb = [tuple(b) for b in np.asarray(kernel.bounds).reshape(-1, 2)]
        bounds = kb + _sparse._free_bounds(Z, opt_Z)
        starts = _sparse.restart_points(x0, bounds, params.n_restarts_optimizer,
                                        params.random_state, n_coordinates=len(kb))  # fmt: skip
        fallbacks = []
        if params.likelihood == "step":
            # a first evaluation that fails: again from shorter length-scales, as the dense
            # step classifier's search (search_fallback_starts; docs/reliability.md, "The
            # sparse step classifier")
            settings = get_config()
            shorter = shorter_length_scale_starts(
                kernel, settings.search_fallback_factor, settings.search_fallback_starts
            )
            fallbacks = [np.concatenate([theta, x0[len(kb) :]]) for theta in shorter]
        search = _sparse.optimise(space, x0, bounds, starts, optimizer=params.optimizer,
                                  fallback_starts=fallbacks)  # fmt: skip
        kernel, _, Z = space.unpack(search.x)
        return search, kernel, Z

    def learn_full_batch(self, kernel, Z, opt_Z):
        """The full-batch learner's run: :meth:`search`, as a
        :class:`~robustep.estimators._learner.Learned` with its sites as the warm start."""
        search, kernel, Z = self.search(kernel, Z, opt_Z)
        warm = None
        if search.state is not None:
            warm = (search.state.site_precision, search.state.site_shift)
        return _learner.Learned(kernel, self.likelihood, Z, search, warm)


def fit_sparse(params, X, y, likelihood, kernel, learner=None):
    """Fit the sparse binary model (after validation); returns its :class:`BinaryFit`.

    Parameters
    ----------
    params : the classifier's parameters; X : (n, d) float array or dask.array;
    y : (n,) labels ±1; likelihood : the likelihood object; kernel : the starting kernel;
    learner : what learns the kernel and Z with an optimizer
        (:func:`robustep.estimators._learner.resolve`; None: the full-batch evidence
        search).  The posterior is then one EP fit at the learned values either way.
    """
    from robustep._config import blas_thread_limit

    check_sparse(params)
    full_batch = learner is None or isinstance(learner, _learner.FullBatchLearner)
    if params.optimizer is not None and params.likelihood == "step" and full_batch:
        # the step evidence does not depend on the amplitude (FITC's prior scales with
        # it); the stochastic learner keeps its own parameterisation
        kernel = fix_amplitude(kernel)
    # α resolved and validated: α < 1 takes methods "auto", "ep", "damped" and in-memory X
    alpha = _sparse.inducing_power_of(params, POWER_METHODS, dask=_sparse.is_dask_input(X))
    _sparse.check_inducing_gradient(params, kernel)
    Z = _sparse.resolve_inducing_points(params.inducing_points, X, params.random_state)
    core = SparseBinaryCore(params, X, y, likelihood, _sparse.fixed_jitter(kernel, Z), alpha)
    opt_Z = bool(params.optimize_inducing)
    learned, init = None, None
    with blas_thread_limit(X.shape[0]):
        if params.optimizer is not None and (kernel.n_dims > 0 or opt_Z):
            problem = _learner.LearningProblem(
                kernel, X, y, likelihood, Z, alpha, core.jitter, learn_kernel=True,
                learn_inducing=opt_Z, learn_likelihood=(), random_state=params.random_state,
                search=lambda: core.learn_full_batch(kernel, Z, opt_Z),
            )  # fmt: skip
            learned = (learner or _learner.FullBatchLearner()).learn(problem)
            kernel, Z, init = learned.kernel, learned.Z, learned.warm
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            warnings.filterwarnings("ignore", message="init gives an invalid posterior")
            res = core.infer(kernel, Z, init)
    # the result over the latent f (attributes, LOO and predictions)
    res = res if alpha == 1.0 else res.latent_view()
    Z = np.array(Z, dtype=float)
    attrs = fitted_attributes(params, res, likelihood, y)
    attrs.update(kernel_=kernel, inducing_points_=Z, inducing_power_=alpha,
                 optimizer_result_=None if learned is None else learned.search)  # fmt: skip
    attrs.update(_learner.fitted_attributes(learned))

    eps = None if params.likelihood == "probit" else float(params.label_noise)
    return BinaryFit(kernel, res, attrs, core, eps, f"sparse {params.method}",
                     _sparse.search_advice(alpha))  # fmt: skip


# --------------------------------------------------------------------------- streaming
class StreamCore:
    """The predictor of a ``partial_fit`` stream: the FITC predictive from the stochastic
    learner's q(u) (:class:`~robustep.estimators._learner.InducingPosterior`)."""

    def latent(self, fit, X):
        """Latent predictive mean and variance (k,) at X (k, d), in row batches."""
        return _sparse.latent_moments(fit.result, fit.kernel,
                                      fit.attributes["inducing_points_"], X)  # fmt: skip

    def evidence(self, fit, theta, eval_gradient=False):
        raise ValueError(
            "log_marginal_likelihood(theta) needs the training data, which partial_fit does "
            "not keep; log_marginal_likelihood_value_ is the last batch's energy estimate, or "
            "fit the estimator on all the data with fit"
        )


@dataclass
class Stream:
    """What ``partial_fit`` carries from one call to the next: ``classes`` (2,), the
    learner, the K_mm jitter, the inducing power α (resolved on the first call), the
    points seen, the stochastic run to continue (``Learned``) and the :class:`BinaryFit`
    that predicts."""

    classes: np.ndarray
    learner: object
    jitter: float
    alpha: float
    n_seen: int
    learned: object
    fit: BinaryFit


def check_stream(est, classes):
    """Raise ValueError when ``est.partial_fit`` cannot start a stream."""
    if classes is None:
        raise ValueError(
            "the first call of partial_fit needs classes, the two labels of the stream (e.g. "
            "classes=[0, 1])"
        )
    if np.unique(np.asarray(classes)).size != 2:
        raise ValueError(f"partial_fit is binary: classes must hold two labels, got {classes!r}")
    if est.method not in ("auto", "ep"):
        raise ValueError(
            f"partial_fit runs stochastic power EP: method must be 'auto' or 'ep', got "
            f"{est.method!r}"
        )


def partial_fit(est, stream, X, y, classes):
    """One ``partial_fit`` step of GPClassifier ``est`` on a validated batch X (b, d),
    y (b,); ``stream`` is the previous :class:`Stream` (None on the first call).  Returns
    the next :class:`Stream`; writes nothing onto ``est``."""
    from sklearn.base import clone

    from robustep.estimators._binary import make_likelihood, starting_kernel

    params = SimpleNamespace(**est.get_params(deep=False))
    if stream is None:
        classes = np.unique(np.asarray(classes))
        learner = est.learner if isinstance(est.learner, _learner.StochasticLearner) else None
        learner = _learner.StochasticLearner() if learner is None else clone(learner)
        kernel = starting_kernel(est.kernel)
        likelihood = make_likelihood(params)
        if est.optimizer is not None and est.optimize_inducing:
            _sparse.check_inducing_gradient(params, kernel)
        Z = _sparse.resolve_inducing_points(est.inducing_points, X, est.random_state)
        jitter, n_seen, previous = _sparse.fixed_jitter(kernel, Z), 0, None
        alpha = _sparse.inducing_power_of(params, POWER_METHODS)
    else:
        classes, learner, jitter = stream.classes, stream.learner, stream.jitter
        alpha, n_seen, previous = stream.alpha, stream.n_seen, stream.learned.state
        kernel, likelihood, Z = previous.kernel, previous.likelihood, previous.inducing_inputs
    unknown = np.setdiff1d(np.unique(y), classes)
    if unknown.size:
        raise ValueError(
            f"y has labels {unknown.tolist()} that are not among classes "
            f"{classes.tolist()} given to the first partial_fit call"
        )
    y_pm = np.where(y == classes[1], 1.0, -1.0)
    n_seen += X.shape[0]
    problem = _learner.LearningProblem(
        kernel, X, y_pm, likelihood, Z, alpha, jitter,
        learn_kernel=est.optimizer is not None,
        learn_inducing=est.optimizer is not None and bool(est.optimize_inducing),
        learn_likelihood=(), random_state=est.random_state,
    )  # fmt: skip
    learned = _learner.continue_stream(learner, problem, previous, n_seen)
    run = learned.state
    attrs = {
        "kernel_": run.kernel,
        "inducing_points_": np.array(run.inducing_inputs, dtype=float),
        "inducing_power_": alpha if learner.power is None else float(learner.power),
        "converged_": True,
        "n_iter_": int(run.n_steps),
        "log_marginal_likelihood_value_": float(learned.search.log_evidence),
        "method_used_": "stochastic",
        "optimizer_result_": learned.search,
        **_learner.fitted_attributes(learned),
        "classes_": classes,
    }
    eps = None if est.likelihood == "probit" else float(est.label_noise)
    fit = BinaryFit(run.kernel, _learner.InducingPosterior(run), attrs, StreamCore(), eps,
                    "stochastic ep", _sparse.SEARCH_ADVICE)  # fmt: skip
    return Stream(classes, learner, jitter, alpha, n_seen, learned, fit)
