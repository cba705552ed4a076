"""The dense binary GP classification core: K in memory (numpy) or on a PyTorch device.

:func:`fit_dense` returns a :class:`robustep.estimators._binary.BinaryFit`.  The prior
is built by :func:`robustep.posterior.factory.make_prior` in one representation chosen
once per fit: ``"dense"`` (a DensePrior of K in numpy), ``"array"`` (an ArrayPrior of
K on ``device``, estimators/_device.py) or, with GPClassifier(prior=
"diagonal_plus_low_rank"), a DiagonalPlusLowRankPrior read off the kernel.  With an
optimizer the kernel's log hyperparameters maximise the approximate evidence by the one
evidence search (estimators/_search.py) with its analytic gradient: EP's explicit
gradient (Seeger 2005; :func:`robustep.ep.log_Z_gradient`) or Laplace's (R&W eq. 5.23).
Each evaluation warm-starts from the previous one's state, and the fit is the best
evaluation itself.  The step classifier's search whose every EP evaluation fails runs
again on power EP's evidence (``robustep.config(search_power_fallback=True)``;
:meth:`robustep.ep.InferenceStrategy.power_search`), and its fit is then power EP's.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy import linalg
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state

from robustep._config import get_config
from robustep.ep.chain import warm_start
from robustep.estimators._binary import (
    BinaryCore,
    BinaryFit,
    fitted_attributes,
    fix_amplitude,
    log_evidence,
    run_inference,
)
from robustep.estimators._search import (
    Evaluation,
    EvaluationFailed,
    after_failed_search,
    draw_starts,
    is_search_evidence,
    maximise_evidence,
    shorter_length_scale_starts,
)
from robustep.posterior.factory import make_prior

__all__ = ["DenseBinaryCore", "fit_dense"]

#: what a user can change when the evidence search could not move
SEARCH_ADVICE = (
    "pass another starting kernel, set n_restarts_optimizer > 0 (with finite kernel bounds) "
    "or try method='power'"
)
#: added for the label-noise step likelihood, whose EP fixed points can be missing at the
#: longer length-scales when label_noise is below the share of flipped labels
#: (docs/reliability.md, "Cost of the step classifier": benchmarks/step_fixed_points.py);
#: warned only where the search on power EP's evidence that follows (search_power_fallback)
#: is switched off or fails too
STEP_SEARCH_ADVICE = (
    "; with likelihood='step', a label_noise below the share of mislabelled points can "
    "leave EP without a fixed point at the longer length-scales: a larger label_noise "
    "may let the search start"
)


def _numpy_kernel_gradient(kernel, X, options):
    K, K_gradient = kernel(X, eval_gradient=True)
    return {"K": K}, K_gradient


def _array_kernel_gradient(kernel, X, options):
    from robustep.kernels.array import kernel_matrix

    K, K_gradient = kernel_matrix(kernel, X, like=options["like"], eval_gradient=True)
    return {"K": K}, K_gradient


def _numpy_latent(result, kernel, X_train, X, options):
    return result.predict(kernel(X, X_train), kernel.diag(X))


def _array_latent(result, kernel, X_train, X, options):
    from robustep.estimators import _device

    return _device.predict_latent(kernel, X, X_train, result, options["like"])


def _numpy_ep_gradient(res, K_gradient, likelihood, y):
    post = getattr(res, "posterior", None)
    if getattr(post, "_all_positive", False) and not likelihood.hyperparameter_names:
        return post.kernel_gradient_contraction(K_gradient)
    from robustep.ep import log_Z_gradient

    return log_Z_gradient(res, K_gradient, likelihood, y)[0]


def _array_ep_gradient(res, K_gradient, likelihood, y):
    return res.posterior.kernel_gradient_contraction(K_gradient)


def _low_rank_kernel_gradient(kernel, X, options):
    from robustep.posterior.low_rank import kernel_structure

    # the "gradient" is d and U's derivatives
    d, U, dd, dU = kernel_structure(kernel, X, eval_gradient=True)
    return {"diagonal": d, "factor": U}, (dd, dU)


def _low_rank_ep_gradient(res, structure_gradient, likelihood, y):
    from robustep.posterior.low_rank import structure_evidence_gradient

    return structure_evidence_gradient(res.posterior, *structure_gradient)


@dataclass(frozen=True)
class _Representation:
    """A prior representation of the dense core: its make_prior name and options,
    ``kernel_gradient(kernel, X, options) -> (prior options, gradient)`` (the options built
    with the gradient, K or d and U, handed to make_prior; the gradient in the layout
    ``ep_gradient`` takes), the EP evidence
    gradient ``ep_gradient(result, gradient, likelihood, y) -> (p,)`` and the latent
    predictive ``latent(result, kernel, X_train, X, options) -> (mean, var)``."""

    name: str
    options: dict
    kernel_gradient: object
    ep_gradient: object
    latent: object


#: the representations a user can pick with GPClassifier(prior=...), beside "dense"
PRIORS = ("dense", "diagonal_plus_low_rank")


def representation(like=None, prior="dense", method="auto") -> _Representation:
    """The representation of GPClassifier's ``prior`` (:data:`PRIORS`): for ``"dense"``,
    ``"dense"`` (numpy) with ``like=None``, else ``"array"`` on ``like``'s device;
    ``"diagonal_plus_low_rank"``: K = diag(d) + U U^T read off the kernel
    (posterior/low_rank.py), numpy, EP methods, evidence gradient O(n r^2 + n r p)."""
    if prior == "diagonal_plus_low_rank":
        if like is not None or method == "laplace":
            raise ValueError(
                "prior='diagonal_plus_low_rank' runs the EP methods in numpy: use device=None "
                "and a method other than 'laplace', or prior='dense'"
            )
        return _Representation("diagonal_plus_low_rank", {}, _low_rank_kernel_gradient,
                               _low_rank_ep_gradient, _numpy_latent)  # fmt: skip
    if prior != "dense":
        raise ValueError(f"unknown prior {prior!r}; one of {', '.join(PRIORS)}")
    if like is None:
        # K's entries below its resolution zeroed where it holds subnormal ones, whose
        # arithmetic is slow (docs/derivations/engine_floor.md §8)
        return _Representation("dense", {"zero_subnormal": True}, _numpy_kernel_gradient,
                               _numpy_ep_gradient, _numpy_latent)  # fmt: skip
    return _Representation("array", {"like": like}, _array_kernel_gradient,
                           _array_ep_gradient, _array_latent)  # fmt: skip


class DenseBinaryCore(BinaryCore):
    """Binary inference on a dense prior at any log hyperparameters of a kernel.

    Parameters
    ----------
    params : the classifier's parameters (GPClassifier's ``get_params``, as attributes).
    X : (n, d) training inputs; y : (n,) labels ±1; likelihood : the likelihood object.
    kernel : the starting kernel (not modified).
    rep : the prior representation (:func:`representation`).
    """

    def __init__(self, params, X, y, likelihood, kernel, rep):
        super().__init__(params, X, y, likelihood)
        self.kernel = kernel
        self.rep = rep
        # whether inference runs power EP's strategies: set by optimise when the step
        # classifier's EP search failed everywhere (search_power_fallback)
        self.power_search = False

    def prior(self, kernel, built=None):
        """The prior of ``kernel`` at X in this core's representation; ``built``: the prior
        options computed with the gradient (K, or d and U), so nothing is built twice."""
        return make_prior(kernel, self.X, self.rep.name, **{**self.rep.options, **(built or {})})

    def infer(self, prior, init=None, search=False, probe=False):
        """The inference result of ``params.method`` on ``prior`` (:func:`run_inference`;
        ``search``: an evaluation of the evidence search; ``probe``: one far from every
        successful evaluation), or power EP's after a search on its evidence
        (``power_search``)."""
        return run_inference(
            self.params, prior, self.y, self.likelihood, init, search=search, probe=probe,
            power_search=self.power_search,
        )  # fmt: skip

    def evaluate(self, theta, eval_gradient, init=None, search=False, probe=False):
        """Inference at log hyperparameters ``theta``: (log evidence, gradient (p,) or None,
        the inference result, the prior).  ``search``: an evaluation of the evidence search,
        which raises EvaluationFailed for a result that did not converge or whose evidence
        is not finite, before computing the gradient; ``probe``: :func:`run_inference`'s."""
        kernel = self.kernel.clone_with_theta(theta)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            # a warm start that is invalid for the new hyperparameters restarts from the
            # prior: an internal detail of the optimisation, not a problem of the user's
            warnings.filterwarnings("ignore", message="init gives an invalid posterior")
            built = K_gradient = None
            if eval_gradient:  # K and dK from one kernel evaluation
                built, K_gradient = self.rep.kernel_gradient(kernel, self.X, self.rep.options)
            prior = self.prior(kernel, built)
            res = self.infer(prior, init=init, search=search, probe=probe)
            value = log_evidence(res)
            usable = is_search_evidence(res, power=self.power_search)
            if search and not (np.isfinite(value) and usable):
                raise EvaluationFailed
            grad = None
            if eval_gradient:
                grad = np.asarray(self.gradient(res, K_gradient), dtype=float)
        return value, grad, res, prior

    def gradient(self, res, K_gradient):
        """d log Z / d theta (p,) for the kernel's log hyperparameters, from dK."""
        if self.params.method == "laplace":
            from robustep.baselines.laplace_logconcave import (
                LogConcaveLaplaceResult,
                laplace_logconcave_gradient,
            )

            if isinstance(res, LogConcaveLaplaceResult):
                return laplace_logconcave_gradient(res, K_gradient)
            from robustep.baselines.laplace import laplace_log_marginal_likelihood_gradient

            return laplace_log_marginal_likelihood_gradient(
                res, K_gradient, self.likelihood, self.y
            )[0]
        return self.rep.ep_gradient(res, K_gradient, self.likelihood, self.y)

    def warm_state(self, res):
        """What the next evaluation starts from: EP's sites, or Laplace's alpha = K^-1 f;
        for ``method="auto"`` a light copy of the result (its sites, and the stage it
        converged in, where the next evaluation's chain begins:
        ``InferenceStrategy.resume``; :func:`robustep.ep.chain.warm_start`)."""
        if self.params.method == "laplace":
            return np.array(res.alpha, dtype=float)
        if self.params.method == "auto" and hasattr(res, "method_used"):
            return warm_start(res)
        return (np.array(res.site_precision), np.array(res.site_shift))

    def latent(self, fit, X):
        """The latent predictive mean and variance (m,) of ``fit`` at X (m, d)."""
        return self.rep.latent(fit.result, fit.kernel, self.X, X, self.rep.options)

    def evidence(self, fit, theta, eval_gradient=False):
        """:meth:`log_marginal_likelihood` around ``fit``'s kernel."""
        return self.log_marginal_likelihood(theta, eval_gradient)

    def log_marginal_likelihood(self, theta, eval_gradient=False):
        """The log evidence at ``theta`` (and its gradient): -inf (zero gradient) where
        inference fails."""
        try:
            value, grad, _, _ = self.evaluate(theta, eval_gradient)
        except (linalg.LinAlgError, ValueError, FloatingPointError):
            return (-np.inf, np.zeros_like(theta)) if eval_gradient else -np.inf
        return (value, grad) if eval_gradient else value

    def optimise(self):
        """The evidence search (estimators/_search.py) from ``kernel``'s theta."""
        params = self.params

        def evaluate(theta, context):
            value, grad, res, prior = self.evaluate(
                theta, context.gradient, init=context.warm, search=True, probe=context.probe
            )
            return Evaluation(value, grad, state=(res, prior))

        bounds = self.kernel.bounds
        rng = check_random_state(params.random_state) if params.n_restarts_optimizer else None
        starts = draw_starts(self.kernel.theta, bounds, params.n_restarts_optimizer, rng)
        settings = get_config()
        options = warm_jump = stall = stones = None
        first_probes = False
        first_step = fallback_step = None
        if params.likelihood == "step":
            # a far trial point's sites are a poor start for the next point, back near the
            # others: the nearest success's instead (search_warm_jump)
            warm_jump = settings.search_warm_jump
            # and a point far from its warm start through stepping stones (search_stone_step)
            if warm_jump is not None and settings.search_stone_step is not None:
                stones = (settings.search_stone_step, settings.search_stones)
            # a start's first evaluation, where a fallback start follows its failure, is
            # a probe too (search_first_restarts)
            first_probes = not settings.search_first_restarts
            # the step evidence at the search tolerance is noisy at SciPy's default ftol
            # (2.2e-9): the last line searches chase rounding (docs/reliability.md)
            options = {"ftol": settings.search_ftol}
            own_optimizer = isinstance(params.optimizer, str)  # a user's sees the plain evidence
            # and its failing line searches near the optimum: a start ends when they make
            # no progress (search_stall_evaluations)
            if settings.search_stall_evaluations and own_optimizer:
                stall = (settings.search_stall_evaluations, settings.search_stall_step,
                         settings.search_ftol)  # fmt: skip
            if own_optimizer:
                # an evaluation costs more sweeps the farther it lies from its warm start:
                # a short first step (search_first_step); from a fallback start the raw
                # first step lands on a bound where EP fails (search_fallback_first_step)
                first_step = settings.search_first_step
                fallback_step = settings.search_fallback_first_step
        # a first evaluation that fails (EP does not converge at the starting kernel):
        # again from shorter length-scales, where it is easier (search_fallback_starts)
        fallbacks = shorter_length_scale_starts(
            self.kernel, settings.search_fallback_factor, settings.search_fallback_starts
        )
        search = dict(
            optimizer=params.optimizer, starts=starts, options=options,
            warm_of=lambda state: self.warm_state(state[0]), fallback_starts=fallbacks,
            warm_jump=warm_jump, first_probes=first_probes, stall=stall,
            first_step=first_step, fallback_first_step=fallback_step, stones=stones,
        )  # fmt: skip
        step_auto = params.likelihood == "step" and params.method == "auto"
        power_fallback = step_auto and settings.search_power_fallback
        # where the power-EP search below follows, the last start's first evaluation is
        # a probe too
        result = maximise_evidence(
            evaluate, self.kernel.theta, bounds, followed=power_fallback, **search
        )
        if result.success or not power_fallback:
            return result
        # every evaluation failed in EP: the same search on power EP's evidence, whose fixed
        # points exist at the longer length-scales where EP's can be missing
        # (search_power_fallback; docs/reliability.md, "Cost of the step classifier")
        self.power_search = True
        # its first start's first step is at most the shorter of the two bounds
        bounded = [h for h in (first_step, fallback_step) if h is not None]
        search["first_step"] = min(bounded, default=None)
        power = maximise_evidence(evaluate, self.kernel.theta, bounds, **search)
        return after_failed_search(result, power, "power")

    def finite_or_prior(self, res, prior):
        """``res`` if its posterior is finite; otherwise the prior (sites = 0)."""
        mean, var = np.asarray(res.mean), np.asarray(res.var)
        if np.all(np.isfinite(mean)) and np.all(np.isfinite(var)) and np.all(var > 0):
            return res
        from robustep.ep import expectation_propagation

        n = self.X.shape[0]
        fallback = expectation_propagation(prior, self.y, self.likelihood, max_iter=1,
                                           tol=self.params.tol,
                                           init=(np.zeros(n), np.zeros(n)))  # fmt: skip
        fallback.converged = False
        return fallback


def fit_dense(params, X, y, likelihood, kernel, like=None):
    """Fit the dense binary model; returns its :class:`BinaryFit`.

    Parameters
    ----------
    params : the classifier's parameters; X : (n, d) float inputs; y : (n,) labels ±1;
    likelihood : the likelihood object; kernel : the starting kernel (a clone);
    like : None (numpy) or the template array of ``device`` (estimators/_device.py).
    ``params.prior`` picks the representation (:func:`representation`).
    """
    from robustep._config import blas_thread_limit

    rep = representation(like, getattr(params, "prior", "dense"), params.method)
    searched = params.optimizer is not None and kernel.n_dims > 0
    if searched and params.likelihood == "step":
        kernel = fix_amplitude(kernel)  # the step evidence does not depend on it
    core = DenseBinaryCore(params, X, y, likelihood, kernel, rep)
    search, res, prior = None, None, None
    # BLAS threads as robustep.config(blas_threads=...) says (one thread for n <= 2000
    # by default); the previous limits are restored on return
    with blas_thread_limit(X.shape[0]):
        if searched and kernel.n_dims > 0:
            search = core.optimise()
            core.kernel = kernel = kernel.clone_with_theta(search.x)
            if search.state is not None:
                res, prior = search.state
        if res is None or not np.allclose(search.x, kernel.theta, rtol=0.0, atol=1e-12):
            prior = core.prior(kernel)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                res = core.infer(prior)
        elif getattr(res, "tol", params.tol) > params.tol:
            # the search's best state converged to the search tolerance (its damped
            # stage): refine it to the estimator's tol from there
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                res = core.infer(prior, init=core.warm_state(res))
        res = core.finite_or_prior(res, prior)
    attrs = fitted_attributes(params, res, likelihood, y)
    attrs.update(kernel_=kernel, inducing_points_=None, optimizer_result_=search)
    eps = None if params.likelihood == "probit" else float(params.label_noise)
    advice = SEARCH_ADVICE if eps is None else SEARCH_ADVICE + STEP_SEARCH_ADVICE
    return BinaryFit(kernel, res, attrs, core, eps, params.method, advice)
