"""The fitted state of a binary GP classifier and the inference run shared by its cores.

The binary cores (:mod:`robustep.estimators._binary_dense` for the dense and device
priors, :mod:`robustep.estimators._binary_sparse` for the FITC, pseudo-point and Dask
priors) return a :class:`BinaryFit`; :class:`robustep.estimators.GPClassifier` copies its
``attributes`` onto itself and delegates every prediction to it.

Model: latent f ~ GP(0, k), labels y ∈ {-1, +1} with p(y|f) = Φ(y f) (``"probit"``) or
ε + (1 - 2ε) Θ(y f) (``"step"``, Qi & Guo, long version, eq. 8).  The predictive
probability of +1 at x* with latent N(μ*, σ*²) is Φ(μ*/√(1 + σ*²)) for the probit
(Rasmussen & Williams eq. 3.80) and ε + (1 - 2ε) Φ(μ*/σ*) for the step likelihood.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special

from robustep import diagnostics
from robustep._config import get_config
from robustep.posterior import DensePrior

__all__ = [
    "BinaryCore",
    "BinaryFit",
    "auto_strategy",
    "fix_amplitude",
    "fitted_attributes",
    "log_evidence",
    "make_likelihood",
    "run_inference",
]


def starting_kernel(kernel):
    """The classifier's starting kernel: a clone of ``kernel``, or ``ConstantKernel(1.0) *
    RBF(1.0)`` for None."""
    from sklearn.base import clone
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel

    return ConstantKernel(1.0) * RBF(1.0) if kernel is None else clone(kernel)


def fix_amplitude(kernel):
    """``kernel`` with its amplitude fixed, for the label-noise step likelihood.

    p(y | f) = ε + (1 - 2ε) Θ(y f) depends on f only through its sign, so scaling the GP
    by c (K -> c² K) changes neither the exact evidence nor EP's: EP's sites scale to
    (τ̃/c², ν̃/c), its cavities and tilted moments scale with them, and log Z_EP and the
    predictive probabilities ε + (1 - 2ε) Φ(μ*/σ*) are unchanged.  The amplitude is not
    identified, so the evidence search keeps it at its starting value: for a product
    with a ConstantKernel factor (``ConstantKernel(1.0) * RBF(1.0)``, the default) that
    factor's ``constant_value_bounds`` become "fixed" (``kernel_`` shows it); other
    kernels are returned unchanged.

    Parameters
    ----------
    kernel : a scikit-learn kernel (not modified).

    Returns
    -------
    A clone of ``kernel`` with the amplitude fixed, or ``kernel`` itself.
    """
    from sklearn.base import clone
    from sklearn.gaussian_process.kernels import ConstantKernel, Product

    if not isinstance(kernel, Product):
        return kernel
    for name in ("k1", "k2"):
        part = getattr(kernel, name)
        if isinstance(part, ConstantKernel) and not part.hyperparameter_constant_value.fixed:
            return clone(kernel).set_params(**{f"{name}__constant_value_bounds": "fixed"})
    return kernel


def make_likelihood(params):
    """The likelihood object of ``params.likelihood`` ("probit" or "step", ε = label_noise)."""
    from robustep.likelihoods import NoisyStep, Probit

    if params.likelihood == "probit":
        if params.label_noise != 0:
            raise ValueError(
                "label_noise applies to likelihood='step'; set label_noise=0 for 'probit'"
            )
        return Probit()
    return NoisyStep(float(params.label_noise))


def log_evidence(res) -> float:
    """The approximate log marginal likelihood of an inference result (EP or Laplace)."""
    value = getattr(res, "log_Z", None)
    if value is None:
        value = res.log_marginal_likelihood
    return float(value)


def auto_strategy(params):
    """The :class:`~robustep.ep.InferenceStrategy` of ``method="auto"`` for the classifier's
    ``params`` (``max_iter``, ``likelihood``, ``schedule``): :meth:`InferenceStrategy.auto
    <robustep.ep.InferenceStrategy.auto>`, for the label-noise step likelihood with
    Anderson-accelerated parallel EP first, then damping 0.5, then 0.8
    (docs/reliability.md, "Cost of the step classifier"), and the tolerance in units of
    q's marginals (its site precisions grow with n)."""
    from robustep.ep import InferenceStrategy

    step = params.likelihood == "step"
    return InferenceStrategy.auto(
        params.max_iter,
        trial_damping=0.5 if step else None,
        accelerate=step and params.schedule == "parallel",
        tol_units="marginal" if step else "sites",
    )


def run_inference(
    params, prior, y, likelihood, init=None, search=False, probe=False, power_search=False
):
    """Run ``params.method`` on a Gaussian prior; returns the inference result.

    Parameters
    ----------
    params : the classifier's parameters (``method``, ``damping``, ``power``,
        ``relaxation``, ``schedule``, ``max_iter``, ``tol``, ``likelihood``).
    prior : a :class:`robustep.posterior.GaussianPrior` (``"laplace"``: a DensePrior).
    y : (n,) labels ±1.  likelihood : the likelihood object.
    init : warm start: EP's (site_precision (n,), site_shift (n,)) or Laplace's
        alpha = K^-1 f (n,); None starts from the prior.
    search : an evaluation of the evidence search: ``method="auto"`` then runs
        :meth:`InferenceStrategy.search_stages <robustep.ep.InferenceStrategy.search_stages>`
        (parallel and damped EP only; the search discards a run that does not converge).
    probe : with ``search``, an evaluation farther than ``search_warm_jump`` from every
        successful one (an optimiser's far trial step), or a start's first evaluation
        while a fallback start would follow its failure (``search_first_restarts``):
        ``search_stages(probe=True)``.
    power_search : ``method="auto"`` after a search on power EP's evidence (the step
        classifier's, where every evaluation of its EP search failed): with ``search``
        :meth:`InferenceStrategy.power_search
        <robustep.ep.InferenceStrategy.power_search>`, else
        :meth:`~robustep.ep.InferenceStrategy.power_fit`.
    """
    if params.method == "laplace":
        # probit is log-concave: Newton steps on B = I + W^1/2 K W^1/2 (one Cholesky
        # each; R&W Alg. 3.1), warm-started from a previous alpha = K^-1 f
        from robustep.baselines.laplace_logconcave import laplace_logconcave

        K = prior.K
        return laplace_logconcave(K, y, likelihood, max_iter=max(params.max_iter, 1),
                                  init_alpha=init)  # fmt: skip
    from robustep.ep import expectation_propagation

    # the subset start: the same fixed point, fewer O(n^3) sweeps (ep/subset_start.py);
    # measured to pay for the probit likelihood only (docs/derivations/engine_floor.md §5)
    min_n = get_config().subset_start_min_n
    if (
        init is None
        and min_n is not None
        and params.likelihood == "probit"
        and params.schedule == "parallel"
        and isinstance(prior, DensePrior)
        and prior.n >= min_n
    ):
        init = "subset"
    kwargs = dict(schedule=params.schedule, max_iter=params.max_iter, tol=params.tol, init=init)
    if params.method == "auto":  # parallel -> damped -> double loop (ep/chain.py)
        from robustep.ep import run_chain

        strategy = auto_strategy(params)
        if search and power_search:
            strategy = strategy.power_search(damped_tol=get_config().search_tol, probe=probe)
        elif search:
            # damped sweeps to the search tolerance: the final fit refines the best state
            strategy = strategy.search_stages(damped_tol=get_config().search_tol, probe=probe)
        elif power_search:
            strategy = strategy.power_fit()
        return run_chain(prior, y, likelihood, strategy, schedule=params.schedule,
                         tol=params.tol, init=init)  # fmt: skip
    if params.method == "ep":
        return expectation_propagation(prior, y, likelihood, **kwargs)
    if params.method == "power":
        return expectation_propagation(prior, y, likelihood, power=float(params.power), **kwargs)
    if params.method == "rep":
        from robustep.ep.rep import make_rep_update

        update = make_rep_update(float(params.relaxation))
        return expectation_propagation(prior, y, likelihood, site_update=update, **kwargs)
    if params.damping != "adaptive":  # damped
        return expectation_propagation(prior, y, likelihood, damping=float(params.damping),
                                       **kwargs)  # fmt: skip
    return _adaptive_damped(params, prior, y, likelihood, init)


def _adaptive_damped(params, prior, y, likelihood, init):
    """Damped EP with adaptive damping (:class:`robustep.ep.AdaptiveDamping`: from 0.5,
    moving halfway to 1 after each block of 50 sweeps without progress)."""
    from robustep.ep import AdaptiveDamping, expectation_propagation

    def block(damping, max_iter, init, max_factorisations):
        return expectation_propagation(
            prior, y, likelihood, schedule=params.schedule, damping=damping,
            max_iter=max_iter, tol=params.tol, init=init, max_factorisations=max_factorisations,
        )  # fmt: skip

    return AdaptiveDamping().run(block, params.max_iter, init)


def fitted_attributes(params, res, likelihood, y, *, estimator_name="GPClassifier"):
    """The fitted attributes (a dict by name) that a binary inference result gives.

    ``site_precision_`` / ``site_shift_`` (n,) (Laplace: W and W f + d log p(y|f)),
    ``relaxation_b_`` (n,) for REP, ``converged_``, ``n_iter_``,
    ``log_marginal_likelihood_value_``, ``method_used_`` and the LOO attributes of an EP
    result (:func:`robustep.diagnostics.classifier_loo`).
    """
    attrs = {
        "converged_": bool(res.converged),
        "n_iter_": int(res.n_iter),
        "log_marginal_likelihood_value_": log_evidence(res),
    }
    if params.method == "laplace":
        W = np.asarray(res.W, dtype=float).copy()
        attrs["site_precision_"] = W
        attrs["site_shift_"] = W * res.mode + res.grad_log_lik
    else:
        attrs["site_precision_"] = np.asarray(res.site_precision, dtype=float).copy()
        attrs["site_shift_"] = np.asarray(res.site_shift, dtype=float).copy()
    if params.method == "rep":
        info = getattr(res, "site_info", None) or {}
        b = info.get("b", np.zeros(np.shape(attrs["site_precision_"])[0]))
        attrs["relaxation_b_"] = np.asarray(b, dtype=float).copy()
    attrs["method_used_"] = getattr(res, "method_used", params.method)
    attrs.update(
        diagnostics.classifier_loo_attributes(res, likelihood, y, estimator_name=estimator_name)
    )
    return attrs


class BinaryCore:
    """What every binary core holds: the classifier's parameters (``params``, as
    attributes), the training inputs X (n, d), the labels y (n,) ±1 and the likelihood."""

    def __init__(self, params, X, y, likelihood):
        self.params = params
        self.X = X
        self.y = y
        self.likelihood = likelihood


@dataclass
class BinaryFit:
    """What a binary fit leaves: the fitted kernel, the inference result and the predictor.

    Attributes
    ----------
    kernel : the fitted kernel.
    result : the inference result at ``kernel`` (EP or Laplace; over the latent f).
    attributes : the fitted attributes of GPClassifier by name (``kernel_``,
        ``converged_``, ``site_precision_`` ...).
    core : the core that made the fit, with ``latent(fit, X) -> (mean (m,), var (m,))``
        (the latent predictive at X (m, d)) and ``evidence(fit, theta, eval_gradient)``
        (the log evidence at log hyperparameters theta (p,), and its gradient (p,); -inf
        where inference fails).
    label_noise : ε of the step likelihood; None for the probit.
    what : how the inference is named in a convergence warning ("ep", "sparse ep", ...).
    advice : what a user can change when the evidence search could not move.
    """

    kernel: object
    result: object
    attributes: dict
    core: object
    label_noise: float | None
    what: str
    advice: str

    def warn_if_not_converged(self, estimator):
        """The ConvergenceWarning of a fit that did not converge (ep/chain.py)."""
        from robustep.ep.chain import warn_if_not_converged

        warn_if_not_converged(estimator, self.result, self.what)

    def predict_latent(self, X, return_std=False):
        """Latent mean (m,) (and std (m,)) at validated X (m, d)."""
        k_diag = self.kernel.diag(X)
        mean, var = self.core.latent(self, X)
        mean = np.nan_to_num(np.asarray(mean, dtype=float), nan=0.0)
        if not return_std:
            return mean
        var = np.asarray(var, dtype=float)
        var = np.where(np.isfinite(var), np.maximum(var, 0.0), np.asarray(k_diag, float))
        return mean, np.sqrt(var)

    def decision_function(self, X):
        """z (m,): μ*/√(1 + σ*²) (probit) or μ*/σ* (step); z > 0 means class +1."""
        mean, std = self.predict_latent(X, return_std=True)
        if self.label_noise is None:
            return mean / np.sqrt(1.0 + std**2)
        tiny = np.finfo(float).tiny
        return np.where(std > tiny, mean / np.maximum(std, tiny), np.sign(mean) * 1e300)

    def predict_proba(self, X):
        """(m, 2): p(-1), p(+1) = ε + (1 - 2ε) Φ(z) (ε = 0 for the probit)."""
        z = self.decision_function(X)
        eps = 0.0 if self.label_noise is None else float(self.label_noise)
        p1 = eps + (1.0 - 2.0 * eps) * special.ndtr(z)
        return np.column_stack([1.0 - p1, p1])

    def predict_index(self, X):
        """Index (m,) into ``classes_``: 1 where z > 0."""
        return (self.decision_function(X) > 0).astype(int)

    def log_marginal_likelihood(self, theta, eval_gradient=False):
        """The log evidence at log hyperparameters ``theta`` (and its gradient)."""
        return self.core.evidence(self, np.asarray(theta, dtype=float), eval_gradient)
