"""A regressor's fit as a value: the fitted components, their weights and the searches.

The public classes (estimators/gp_regressor.py) validate their parameters, build an
:class:`~robustep.estimators._regressor_inference.InferenceCore` and a
:class:`~robustep.estimators._regressor_search.LikelihoodSpace`, call one of the fits
here (dense, fVB's EM, MCMC; EP3's grid is estimators/_regressor_grid.py, the sparse
model estimators/_sparse.py) and set their attributes from the :class:`RegressorFit` it
returns.  Nothing here writes onto an estimator.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from robustep.estimators import _device
from robustep.estimators._regressor_inference import warm_of
from robustep.estimators._regressor_search import optimise


@dataclass
class Component:
    """One set of fitted hyperparameters: kernel, likelihood and the inference result."""

    kernel: object
    likelihood: object
    res: object


@dataclass
class RegressorFit:
    """A fitted regressor's state.

    components : [Component] (one; EP3: one per grid value); weights : (J,) their
    posterior weights; searches : the evidence searches run (``optimizer_result_``);
    search_failed : no evaluation of some search succeeded; at_bounds : [(name, side,
    value, bound)] of optimised hyperparameters on a bound; inducing_points : (m, d) or
    None; df_grid : EP3's grid or None; mcmc : the MCMC result or None; learned : what the
    sparse model's learner left (:class:`~robustep.estimators._learner.Learned`) or None.
    """

    components: list
    weights: np.ndarray
    searches: list = field(default_factory=list)
    search_failed: bool = False
    at_bounds: list = field(default_factory=list)
    inducing_points: np.ndarray | None = None
    df_grid: np.ndarray | None = None
    mcmc: object = None
    learned: object = None

    def add_search(self, outcome):
        """Record a :class:`~robustep.estimators._regressor_search.SearchOutcome`."""
        self.searches.append(outcome.search)
        self.search_failed = self.search_failed or outcome.failed
        seen = {(a[0], a[1]) for a in self.at_bounds}
        self.at_bounds += [a for a in outcome.at_bounds if (a[0], a[1]) not in seen]


@dataclass(frozen=True)
class SearchSettings:
    """The estimator's fit options: ``optimizer`` (None: no search), extra random
    starts, the device template array (None: numpy), and the final inference's EP
    tolerance ``tol`` and sweep budget ``max_iter`` (the estimator's parameters; the
    search's own runs keep :func:`robustep.get_config`'s ``search_tol`` and budgets)."""

    optimizer: object
    n_restarts: int
    like: object = None
    tol: float = 1e-4
    max_iter: int = 1000

    def run(self, core, kernel, space, X, rng, n_restarts=None, warm=None):
        return optimise(
            core, kernel, space, X, rng, optimizer=self.optimizer,
            n_restarts=self.n_restarts if n_restarts is None else int(n_restarts),
            warm=warm, like=self.like,
        )  # fmt: skip


def final(core, kernel, likelihood, X, settings, warm=None):
    """The final inference at fixed hyperparameters, to ``settings.tol`` within
    ``settings.max_iter`` sweeps (:class:`SearchSettings`)."""
    like = settings.like
    if core.prior != "dense":
        K = core.structured_prior(kernel, X, eval_gradient=False)[0]
    else:
        K = kernel(X) if like is None else _device.prior(kernel, X, like)[0]
    res = core.infer(
        K, likelihood, warm=warm_of(warm), max_iter=settings.max_iter, tol=settings.tol
    )
    return Component(kernel, likelihood, res)


def fit_dense(core, kernel, space, X, rng, settings):
    """The dense fit: the evidence search (with an optimizer), then the final inference."""
    fit = RegressorFit([], np.ones(1))
    lik = space.likelihood
    if settings.optimizer is not None:
        outcome = settings.run(core, kernel, space, X, rng)
        fit.add_search(outcome)
        kernel, lik = outcome.kernel, outcome.likelihood
    fit.components = [final(core, kernel, lik, X, settings)]
    return fit


def fit_fvb(kernel, X, y, likelihood, optimize_df, df_bounds):
    """Factorised VB with EM for the hyperparameters (§3.3)."""
    from robustep.baselines.variational import fvb_em

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        k, lik, res, n_it, conv = fvb_em(
            kernel, X, y, likelihood, optimize_df=optimize_df, bounds_df=df_bounds
        )
    res.converged = res.converged and conv
    return RegressorFit([Component(k, lik, res)], np.ones(1))


def fit_mcmc(kernel, X, y, likelihood, rng, *, sample_hyperparameters, sample_df, n_samples,
             hyper_every, hyper_sampler):  # fmt: skip
    """Scale-mixture Gibbs sampling (§3.1); the component holds the posterior means."""
    from robustep.baselines.mcmc import gibbs_student_t_gp
    from robustep.likelihoods import StudentT

    res = gibbs_student_t_gp(
        kernel, X, y, df=float(likelihood.df), scale=float(likelihood.scale),
        n_samples=int(n_samples), sample_hyperparameters=sample_hyperparameters,
        sample_df=sample_df, hyper_every=int(hyper_every), hyper_sampler=hyper_sampler,
        random_state=rng,
    )  # fmt: skip
    theta = res.kernel_theta.mean(axis=0)
    lik = StudentT(df=float(np.mean(res.df)), scale=float(np.mean(res.scale)))
    return RegressorFit([Component(kernel.clone_with_theta(theta), lik, res)], np.ones(1), mcmc=res)
