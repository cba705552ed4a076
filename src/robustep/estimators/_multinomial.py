"""The multinomial probit core of GPClassifier (more than two classes, dense prior).

:class:`MultinomialCore`: the multinomial probit likelihood with nested EP (Riihimäki,
Jylänki & Vehtari 2013; :func:`robustep.ep.multiclass.nested_ep`): c latent GPs sharing
one kernel (or one copy of it per class), the evidence and its analytic gradient for the
kernel's log hyperparameters (the evidence search of estimators/_search.py, warm-started
sites), and predictive class probabilities that integrate over the latent predictive.
:func:`run_with_damping` is the damping schedule shared with the sparse core
(estimators/_multiclass_sparse.py).  The core knows nothing of scikit-learn's estimator
contract: it takes labels 0 .. c-1 and keeps its fitted state on itself.
"""

from __future__ import annotations

import numpy as np
from sklearn.utils import check_random_state

from robustep._config import get_config
from robustep.estimators._search import (
    Evaluation,
    EvaluationFailed,
    draw_starts,
    maximise_evidence,
)

__all__ = ["MULTINOMIAL_METHODS", "MultinomialCore", "multinomial_supported", "run_with_damping"]

#: GPClassifier methods that nested EP implements
MULTINOMIAL_METHODS = ("auto", "ep", "damped")


def multinomial_supported(estimator) -> str | None:
    """None if ``estimator``'s settings have a multinomial fit, else the reason (a sentence)."""
    if estimator.likelihood != "probit":
        return (
            f"likelihood={estimator.likelihood!r} has no multinomial version here (the "
            "multinomial likelihood is the multinomial probit)"
        )
    if estimator.method not in MULTINOMIAL_METHODS:
        return (
            f"method={estimator.method!r} is binary-only (nested EP supports 'auto', 'ep' "
            "and 'damped')"
        )
    if estimator.schedule != "parallel":
        return "nested EP updates its sites in parallel (schedule='parallel')"
    return None


class MultinomialCore:
    """Nested-EP multinomial probit GP classification on labels 0 .. c-1 (a private core).

    Parameters mirror GPClassifier's: ``kernel`` (a scikit-learn kernel, shared by the c
    latent GPs; the caller passes a clone), ``damping`` (float, or "adaptive": start at 0.3,
    blocks of 50 iterations, the damping moving halfway to 1 after a block without
    progress),
    ``max_iter``, ``tol``, ``optimizer`` ("fmin_l_bfgs_b", a callable or None),
    ``n_restarts_optimizer``, ``random_state``, ``label_noise`` (ε > 0: the label-noise
    multinomial probit by :func:`robustep.ep.multiclass_label_noise.robust_nested_ep`, general
    c x c sites, possibly indefinite; ε = 0: nested EP, the same code as without it),
    ``per_class_kernel`` (True: each class's latent GP gets its own copy of ``kernel``'s
    hyperparameters, held as a CompoundKernel and optimised jointly with the evidence
    gradient, eq. M12 per class; False: one kernel shared by the c classes).

    After :meth:`fit`: ``kernel`` (fitted), ``result`` (MulticlassEPResult), ``n_classes``,
    ``search_result`` (the search's SearchResult or None); with more training points than
    ``robustep.get_config().multinomial_search_subset`` the search first runs on a
    stratified random subset (``subset``: its row indices; ``subset_search_result``), and
    ``multinomial_refine_maxiter`` L-BFGS-B iterations on all points start from its
    optimum (otherwise, and with a callable ``optimizer``, both are None).
    """

    def __init__(
        self,
        kernel,
        *,
        damping=0.0,
        max_iter=1000,
        tol=1e-4,
        optimizer="fmin_l_bfgs_b",
        n_restarts_optimizer=0,
        random_state=None,
        label_noise=0.0,
        per_class_kernel=False,
    ):
        self.kernel = kernel
        self.damping = damping
        self.max_iter = max_iter
        self.tol = tol
        self.optimizer = optimizer
        self.n_restarts_optimizer = n_restarts_optimizer
        self.random_state = random_state
        self.label_noise = label_noise
        self.per_class_kernel = per_class_kernel

    # ------------------------------------------------------------- inference
    def _infer(self, K, init=None):
        from robustep.ep.multiclass import nested_ep

        if self.label_noise:  # general c x c sites (ep/multiclass_label_noise.py)
            from functools import partial

            from robustep.ep.multiclass_label_noise import robust_nested_ep

            nested_ep = partial(robust_nested_ep, label_noise=float(self.label_noise))

        def run(damping, max_iter, init):
            return nested_ep(
                K, self.y, self.n_classes, damping=damping, max_iter=max_iter, tol=self.tol,
                init=init, warn=False,
            )  # fmt: skip

        return run_with_damping(run, self.damping, self.max_iter, init)

    def _evaluate(self, theta, eval_gradient, init=None):
        """(log Z_EP, its gradient (p,) or None, the nested-EP result) at ``theta``."""
        kernel = self._with_theta(theta)
        if self.per_class_kernel:
            K, K_gradient = _class_prior(kernel, self.X, eval_gradient)
        elif eval_gradient:
            K, K_gradient = kernel(self.X, eval_gradient=True)
        else:
            K = kernel(self.X)
        res = self._infer(K, init=init)
        value = float(res.log_Z)
        if not eval_gradient or not np.isfinite(value):
            return value, None if not eval_gradient else np.zeros_like(theta), res
        if self.per_class_kernel:  # theta: the c kernels' blocks, in class order
            return value, np.asarray(res.log_Z_gradient(K_gradient, per_class=True), float), res
        return value, np.asarray(res.log_Z_gradient(K_gradient), dtype=float), res

    def _with_theta(self, theta):
        """The kernel at log hyperparameters ``theta`` (per class: c blocks of p)."""
        if not self.per_class_kernel:
            return self.kernel.clone_with_theta(theta)
        from sklearn.gaussian_process.kernels import CompoundKernel

        # CompoundKernel.clone_with_theta fails in scikit-learn (its theta setter): by hand
        kernels = self.kernel.kernels
        blocks = np.split(np.asarray(theta, dtype=float), len(kernels))
        return CompoundKernel([k.clone_with_theta(t) for k, t in zip(kernels, blocks, strict=True)])

    def fit(self, X, y, n_classes):
        """X (n, d) float, y (n,) int in 0 .. n_classes-1.  Returns self."""
        self.X = np.asarray(X, dtype=float)
        self.y = np.asarray(y, dtype=int)
        self.n_classes = int(n_classes)
        if self.per_class_kernel and not hasattr(self.kernel, "kernels"):
            from sklearn.base import clone
            from sklearn.gaussian_process.kernels import CompoundKernel

            self.kernel = CompoundKernel([clone(self.kernel) for _ in range(self.n_classes)])
        self.search_result = self.subset = self.subset_search_result = None
        theta, res = None, None
        if self.optimizer is not None and self.kernel.n_dims > 0:
            options, restarts = None, self.n_restarts_optimizer
            subset = None  # a callable optimizer runs the user's search as it is
            if not callable(self.optimizer):
                subset = _search_subset(self.y, self.n_classes, self.random_state)
            self.subset = subset
            if subset is not None:  # start the search from a subset's optimum
                self.subset_search_result = self._subset_search(subset)
                options = {"maxiter": get_config().multinomial_refine_maxiter}
                restarts = 0  # the subset's search ran them
            self.search_result = self._optimise(options, restarts)
            theta, res = self.search_result.x, self.search_result.state
        if res is None or not np.allclose(theta, self.kernel.theta, rtol=0.0, atol=1e-12):
            K = _class_prior(self.kernel, self.X)[0] if self.per_class_kernel else None
            res = self._infer(self.kernel(self.X) if K is None else K)
        self.result = res
        return self

    def _subset_search(self, subset):
        """The evidence search on the rows ``subset`` of the training set (a core of its
        own, with the ``n_restarts_optimizer`` restarts); sets ``kernel`` to its best point
        and returns its SearchResult."""
        core = MultinomialCore(
            self.kernel, damping=self.damping, max_iter=self.max_iter, tol=self.tol,
            optimizer=self.optimizer, n_restarts_optimizer=self.n_restarts_optimizer,
            random_state=self.random_state,
            label_noise=self.label_noise, per_class_kernel=self.per_class_kernel,
        )  # fmt: skip
        core.X, core.y, core.n_classes = self.X[subset], self.y[subset], self.n_classes
        options = {"maxiter": get_config().multinomial_subset_maxiter}
        search = core._optimise(options, self.n_restarts_optimizer)
        self.kernel = core.kernel
        return search

    def _optimise(self, options=None, restarts=0):
        """The evidence search (estimators/_search.py) from ``kernel``'s hyperparameters and
        ``restarts`` random starts, with L-BFGS-B ``options``; sets ``kernel`` to its best
        point."""

        def evaluate(theta, context):
            value, grad, res = self._evaluate(theta, True, init=context.warm)
            if not (np.isfinite(value) and res.converged):
                raise EvaluationFailed
            return Evaluation(value, grad, state=res)

        bounds = self.kernel.bounds
        starts = draw_starts(
            self.kernel.theta, bounds, restarts,
            check_random_state(self.random_state) if restarts else None,
        )  # fmt: skip
        search = maximise_evidence(
            evaluate, self.kernel.theta, bounds, optimizer=self.optimizer, starts=starts,
            warm_of=_warm_state, options=options,
        )  # fmt: skip
        self.kernel = self._with_theta(search.x)
        return search

    def log_marginal_likelihood(self, theta, eval_gradient=False):
        """log Z_EP at log hyperparameters ``theta`` (and its gradient (p,))."""
        theta = np.asarray(theta, dtype=float)
        try:
            value, grad, _ = self._evaluate(theta, eval_gradient)
        except (np.linalg.LinAlgError, ValueError, FloatingPointError):
            return (-np.inf, np.zeros_like(theta)) if eval_gradient else -np.inf
        return (value, grad) if eval_gradient else value

    # --------------------------------------------------------------- predict
    def predict_latent(self, X):
        """Latent predictive mean (m, c) and covariance (m, c, c) at X (m, d)."""
        K_cross = self.kernel(X, self.X)
        k_diag = self.kernel.diag(X)
        if self.per_class_kernel:  # CompoundKernel: (m, n, c) and (m, c)
            K_cross, k_diag = np.moveaxis(K_cross, -1, 0), k_diag.T
        mean, cov = self.result.predict(K_cross, k_diag)
        mean = np.nan_to_num(mean, nan=0.0)
        return mean, cov

    def predict_proba(self, X):
        """p(y* = k | data) (m, c) by integrating the multinomial probit over the latent
        predictive (:meth:`MultinomialProbit.predictive_probabilities`); rows sum to 1."""
        from robustep.likelihoods.multinomial_probit import MultinomialProbit

        mean, cov = self.predict_latent(X)
        if self.label_noise:
            from robustep.likelihoods.noisy_multinomial_probit import NoisyMultinomialProbit

            lik = NoisyMultinomialProbit(self.n_classes, float(self.label_noise))
            return lik.predictive_probabilities(mean, cov)
        return MultinomialProbit(self.n_classes).predictive_probabilities(mean, cov)


def run_with_damping(run, damping, max_iter, init=None):
    """Nested EP ``run(damping, max_iter, init)`` with a fixed or the adaptive damping.

    ``damping="adaptive"``: :meth:`AdaptiveDamping.nested_ep
    <robustep.ep.AdaptiveDamping.nested_ep>` (start at 0.3, blocks of 50 iterations, each
    warm-started from the last; after a block without progress the damping moves halfway
    to 1).  Parallel nested EP without damping oscillates for large kernel amplitudes
    (docs/derivations/multiclass.md §3).  Returns the last run's result with ``n_iter``
    the total over the blocks.
    """
    if damping != "adaptive":
        return run(float(damping), max_iter, init)
    from robustep.ep.strategy import AdaptiveDamping

    return AdaptiveDamping.nested_ep().run(
        lambda damping, n, start, _: run(damping, n, start),
        max_iter,
        init,
        warm_state=_warm_state,
    )


def _search_subset(y, n_classes, random_state):
    """Indices (m,) of a stratified random subset for the first stage of the evidence
    search, or None when the training set has at most ``multinomial_search_subset`` points.

    Each class keeps its share of the m points (at least one; every point of a class that
    has fewer), drawn with ``random_state`` (seed 0 when None).  A posterior sweep on the
    subset costs (m / n)^3 of one on all points.
    """
    m = get_config().multinomial_search_subset
    n = y.shape[0]
    if m is None or n <= m:
        return None
    # a fixed seed without random_state: the fit stays deterministic, as without the subset
    rng = check_random_state(0 if random_state is None else random_state)
    chosen = []
    for k in range(n_classes):
        members = np.flatnonzero(y == k)
        take = min(members.size, max(1, int(round(m * members.size / n))))
        chosen.append(rng.permutation(members)[:take])
    return np.sort(np.concatenate(chosen))


def _class_prior(kernel, X, eval_gradient=False):
    """K (c, n, n) and dK (c, n, n, p) (or None) of a CompoundKernel of c kernels (p each)."""
    if not eval_gradient:
        return np.moveaxis(kernel(X), -1, 0), None
    K, dK = kernel(X, eval_gradient=True)  # (n, n, c), (n, n, p, c)
    return np.moveaxis(K, -1, 0), np.moveaxis(dK, -1, 0)


def _warm_state(res):
    """``init`` for the next nested-EP run: the inner sites (and the outer ones with noise)."""
    warm = getattr(res, "warm_state", None)
    return (res.alpha, res.beta) if warm is None else warm()
