"""The regressors' type-II MAP search: kernel and likelihood parameters together.

The search coordinates are x = [kernel log theta (p,), the likelihood's free log
parameters] with flat priors on them, so the MAP is the maximum of the approximate
marginal likelihood in those coordinates (Jylänki et al. 2011, §6.2).  The likelihood's
free parameters are those of ``hyperparameter_names`` whose bounds are not "fixed"
(:class:`LikelihoodSpace`), noise widths ("scale", "noise_variance") first.  The search
itself is :func:`robustep.estimators._search.maximise_evidence`, the one every estimator
uses; :func:`optimise` returns a :class:`SearchOutcome` and writes nothing elsewhere.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np

from robustep._config import get_config
from robustep.estimators import _device
from robustep.estimators._regressor_inference import warm_of
from robustep.estimators._search import (
    Evaluation,
    EvaluationFailed,
    draw_starts,
    is_search_evidence,
    maximise_evidence,
)
from robustep.kernels.gradient import KernelWithGradient

#: parameters that set the width of the noise: searched first, upper bound left open
NOISE_WIDTHS = ("scale", "noise_variance")
#: default bounds of likelihood parameters (standardised-target units); the lower bound of
#: a noise width keeps EP away from near-noise-free fits, where it converges very slowly
DEFAULT_BOUNDS = {"scale": (1e-2, 1e2), "noise_variance": (1e-4, 1e4), "df": (1.05, 1000.0)}
#: bounds of a parameter not listed in DEFAULT_BOUNDS
OTHER_BOUNDS = (1e-5, 1e5)


def resolve_bounds(likelihood, likelihood_bounds):
    """{name: (low, high) or "fixed"} for each of ``likelihood.hyperparameter_names``.

    ``likelihood_bounds``: None or a dict overriding :data:`DEFAULT_BOUNDS` per name with
    a pair 0 < low <= high or "fixed" (as scikit-learn kernels take theirs).
    """
    names = tuple(likelihood.hyperparameter_names)
    given = {} if likelihood_bounds is None else dict(likelihood_bounds)
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise ValueError(
            f"likelihood_bounds names {unknown}, which {type(likelihood).__name__} does not "
            f"have; its parameters are {list(names)}"
        )
    out = {}
    for name in names:
        b = given.get(name, DEFAULT_BOUNDS.get(name, OTHER_BOUNDS))
        if isinstance(b, str):
            if b != "fixed":
                raise ValueError(
                    f"likelihood_bounds[{name!r}] must be a pair or 'fixed', got {b!r}"
                )
            out[name] = b
            continue
        try:
            low, high = (float(v) for v in b)
        except (TypeError, ValueError) as err:
            raise ValueError(
                f"likelihood_bounds[{name!r}] must be a pair (low, high) or 'fixed', got {b!r}"
            ) from err
        if not (0.0 < low <= high < np.inf):
            raise ValueError(
                f"likelihood_bounds[{name!r}] = {b!r} must satisfy 0 < low <= high < inf"
            )
        out[name] = (low, high)
    return out


@dataclass(frozen=True)
class LikelihoodSpace:
    """The likelihood's part of the search coordinates.

    likelihood : the starting likelihood (fixed parameters keep its values);
    free : the searched parameter names, noise widths first; bounds : (len(free), 2)
    log-space bounds.
    """

    likelihood: object
    free: tuple
    bounds: np.ndarray

    @classmethod
    def of(cls, likelihood, bounds, searched=True):
        """The space of ``likelihood`` with ``bounds`` from :func:`resolve_bounds`;
        ``searched=False`` fixes every parameter."""
        names = [n for n in likelihood.hyperparameter_names if searched and bounds[n] != "fixed"]
        free = tuple(sorted(names, key=lambda n: n not in NOISE_WIDTHS))
        logb = np.log(np.array([bounds[n] for n in free], float).reshape(-1, 2))
        return cls(likelihood, free, logb)

    def x0(self):
        return np.array([np.log(getattr(self.likelihood, n)) for n in self.free], float)

    def unpack(self, lp):
        """The likelihood at free log parameters ``lp``."""
        new = copy.copy(self.likelihood)  # fixed parameters keep their exact values
        for n, v in zip(self.free, lp, strict=True):
            # the upper bound of a noise width is open (see optimise)
            setattr(new, n, float(np.exp(min(float(v), 700.0) if n in NOISE_WIDTHS else v)))
        return new

    def gradient(self, grads):
        """The free parameters' gradient (len(free),) from {name: d/dlog parameter}."""
        return np.array([grads.get(n, 0.0) for n in self.free], float)

    def open_bounds(self):
        """Optimiser bounds: as ``bounds`` with the upper bound of a noise width open."""
        return [
            (b[0], None) if n in NOISE_WIDTHS else tuple(b)
            for n, b in zip(self.free, self.bounds, strict=True)
        ]


@dataclass
class SearchOutcome:
    """What a search found: kernel and likelihood at its best point, the search result
    (``optimizer_result_``), the inference there (a warm start; None if none), whether no
    evaluation succeeded, and [(name, "lower" | "upper", value, bound)] on bounds."""

    kernel: object
    likelihood: object
    search: object
    state: object
    failed: bool
    at_bounds: list = field(default_factory=list)


def hyperparameter_names(kernel, space):
    """Names of the search coordinates (kernel hyperparameters, then the likelihood's)."""
    names = []
    for hp in kernel.hyperparameters:
        if not hp.fixed:
            k = int(hp.n_elements)
            names += [hp.name] if k == 1 else [f"{hp.name}[{i}]" for i in range(k)]
    return names + list(space.free)


def at_bounds(names, x, bounds):
    """[(name, side, value, bound)] of coordinates of x on their (log-space) bounds, as
    scikit-learn's GaussianProcessRegressor notes them."""
    out = []
    for j, name in enumerate(names):
        lo, hi = bounds[j]
        tol = 1e-5 * max(1.0, abs(lo), abs(hi))  # log space, like np.isclose in sklearn
        side = "lower" if x[j] <= lo + tol else "upper" if x[j] >= hi - tol else None
        if side is not None:
            bound = float(np.exp(lo if side == "lower" else hi))
            out.append((name, side, float(np.exp(x[j])), bound))
    return out


def optimise(core, kernel, space, X, rng, *, optimizer, n_restarts, warm=None, like=None):
    """Type-II MAP of (log theta, the likelihood's free log parameters) from ``kernel`` and
    ``space.likelihood``; returns a :class:`SearchOutcome`.

    core : :class:`~robustep.estimators._regressor_inference.InferenceCore`; X : (n, d);
    ``like``: the device template array (None: numpy); ``warm``: a previous inference to
    start the first start's inference from (EP3 passes the neighbouring grid value's).
    The first evaluation of every start has the final fit's sweep budget (there is nothing
    to warm-start from yet, and a failed first evaluation would leave the optimiser
    nowhere to go), or ``warm_first_max_iter`` (:func:`robustep.get_config`) from a warm
    start followed, if that does not converge, by a cold start with the final fit's
    budget; later ones have ``search_max_iter``, all at ``search_tol``.  If no evaluation
    of any start succeeds, the outcome keeps the starting values and ``failed`` is True.
    """
    p = kernel.theta.size
    # K and a lazy dK/dlog theta operator (ConstantKernel * RBF), else scikit-learn's
    # kernel call and its dense gradient (robustep/kernels/gradient.py)
    if core.prior != "dense":  # (the structured prior, its gradient layout)

        def kernel_and_gradient(theta):
            return core.structured_prior(kernel.clone_with_theta(theta), X)

    elif like is None:
        kernel_and_gradient = KernelWithGradient(kernel, X)
    else:  # (ArrayPrior of K, [dK_j]) on the device

        def kernel_and_gradient(theta):
            return _device.prior(kernel.clone_with_theta(theta), X, like, True)

    must_converge = core.method in ("ep", "fractional", "auto", "laplace")
    settings = get_config()

    def evaluate(x, context):
        lik = space.unpack(x[p:])
        K, Kg = kernel_and_gradient(x[:p])
        warm_start = warm_of(context.warm)
        budget = settings.search_max_iter
        if context.first:
            budget = settings.final_max_iter if warm_start is None else settings.warm_first_max_iter
        res = core.infer(K, lik, warm=warm_start, max_iter=budget, tol=settings.search_tol,
                         search=not context.first)  # fmt: skip
        if context.first and warm_start is not None and must_converge and not res.converged:
            # nothing to back off to yet: try the start once more from cold
            res = core.infer(K, lik, warm=None, max_iter=settings.final_max_iter,
                             tol=settings.search_tol)  # fmt: skip
        value = float(res.log_marginal_likelihood)
        # A non-converged EP evidence is not a stationary value and its explicit gradient
        # is wrong, nor is a Laplace evidence away from the mode (its implicit gradient
        # assumes the mode); either is a failed evaluation.
        if not np.isfinite(value) or (must_converge and not is_search_evidence(res)):
            raise EvaluationFailed
        gk, gl = core.gradient(res, Kg, lik)
        return Evaluation(value, np.concatenate([gk, space.gradient(gl)]), res)

    bounds = np.vstack([np.asarray(kernel.bounds, float).reshape(-1, 2), space.bounds])
    # L-BFGS-B takes a full gradient-length first step when every variable is boxed, which
    # throws sigma to its bound on the first iteration (gradients of ~40 are common);
    # leaving the upper bound of a noise width open makes its first step unit length.
    # Large noise is harmless for every method.
    opt_bounds = [tuple(b) for b in bounds[:p]] + space.open_bounds()
    x0 = np.concatenate([kernel.theta, space.x0()])
    x0 = np.clip(x0, bounds[:, 0], bounds[:, 1])
    starts = draw_starts(x0, bounds, n_restarts, rng, radius=2.0, n_coordinates=p)
    search = maximise_evidence(
        evaluate, x0, opt_bounds, optimizer=optimizer, starts=starts, warm=warm,
        options={"maxiter": 200, "ftol": settings.search_ftol}, callable_bounds=bounds,
    )  # fmt: skip
    x = search.x
    return SearchOutcome(
        kernel=kernel.clone_with_theta(x[:p]),
        likelihood=space.unpack(x[p:]),
        search=search,
        state=search.state,
        failed=not search.success,
        at_bounds=at_bounds(hyperparameter_names(kernel, space), x, bounds),
    )
