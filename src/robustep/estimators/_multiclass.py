"""Multi-class cores composed by :class:`~robustep.estimators.GPClassifier`.

As scikit-learn's ``_gpc.py`` composes a binary core with a one-vs-rest wrapper, the public
``GPClassifier`` hands data with more than two classes to one of two private cores:

* :class:`MultinomialCore` — the multinomial probit likelihood with nested EP
  (Riihimäki, Jylänki & Vehtari 2013; :func:`robustep.ep.multiclass.nested_ep`): c latent
  GPs sharing one kernel, the evidence and its analytic gradient for the kernel's log
  hyperparameters (L-BFGS-B, warm-started sites), and predictive class probabilities that
  integrate over the latent predictive;
* :func:`fit_one_vs_rest` — one binary ``GPClassifier`` per class (class k against the
  rest), probabilities normalised over the classes as scikit-learn's one-vs-rest does.

The cores know nothing of scikit-learn's estimator contract; ``GPClassifier`` validates
input, maps labels to 0 .. c-1 and copies the results into its trailing-underscore
attributes.
"""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state

from robustep import diagnostics
from robustep.estimators._search import (
    Evaluation,
    EvaluationFailed,
    draw_starts,
    maximise_evidence,
    warn_if_stuck,
)

__all__ = ["MultinomialCore", "fit_one_vs_rest", "multinomial_supported"]

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
    multinomial probit by :func:`robustep.ep.multiclass_general.robust_nested_ep`, general
    c x c sites, possibly indefinite; ε = 0: nested EP, the same code as without it),
    ``per_class_kernel`` (True: each class's latent GP gets its own copy of ``kernel``'s
    hyperparameters, held as a CompoundKernel and optimised jointly with the evidence
    gradient, eq. M12 per class; False: one kernel shared by the c classes).

    After :meth:`fit`: ``kernel`` (fitted), ``result`` (MulticlassEPResult), ``n_classes``.
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

        if self.label_noise:  # general c x c sites (ep/multiclass_general.py)
            from functools import partial

            from robustep.ep.multiclass_general import robust_nested_ep

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
        self.search_result = None
        theta, res = None, None
        if self.optimizer is not None and self.kernel.n_dims > 0:
            self.search_result = self._optimise()
            theta, res = self.search_result.x, self.search_result.state
        if res is None or not np.allclose(theta, self.kernel.theta, rtol=0.0, atol=1e-12):
            K = _class_prior(self.kernel, self.X)[0] if self.per_class_kernel else None
            res = self._infer(self.kernel(self.X) if K is None else K)
        self.result = res
        return self

    def _optimise(self):
        """The evidence search (estimators/_search.py); sets ``kernel`` to its best point."""

        def evaluate(theta, context):
            value, grad, res = self._evaluate(theta, True, init=context.warm)
            if not (np.isfinite(value) and res.converged):
                raise EvaluationFailed
            return Evaluation(value, grad, state=res)

        bounds = self.kernel.bounds
        starts = draw_starts(
            self.kernel.theta, bounds, self.n_restarts_optimizer,
            check_random_state(self.random_state) if self.n_restarts_optimizer else None,
        )  # fmt: skip
        search = maximise_evidence(
            evaluate, self.kernel.theta, bounds, optimizer=self.optimizer, starts=starts,
            warm_of=_warm_state,
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


def fit_one_vs_rest(estimator, X, y_index, n_classes):
    """One binary GPClassifier per class (class k -> 1, the rest -> 0); list of fitted clones.

    ``estimator`` is the (unfitted) GPClassifier whose parameters every binary fit uses.
    """
    estimators = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for k in range(n_classes):
            est = clone(estimator)
            estimators.append(est.fit(X, (y_index == k).astype(int)))
    return estimators


def one_vs_rest_proba(estimators, X):
    """Probabilities (m, c): each binary classifier's p(class k), normalised over k."""
    P = np.column_stack([est.predict_proba(X)[:, 1] for est in estimators])
    total = P.sum(axis=1, keepdims=True)
    uniform = np.full_like(P, 1.0 / P.shape[1])
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(total > 0, P / total, uniform)
    return out


# --------------------------------------------------------------------------------------
# What GPClassifier calls (kept here so that gp_classifier.py only dispatches)
# --------------------------------------------------------------------------------------
def n_distinct_classes(y) -> int:
    """Number of classes in ``y`` if it is a multi-class target (> 2 labels), else 0.

    Continuous or otherwise invalid targets return 0, so that the binary path raises its
    usual error (``binary_labels``) for them.
    """
    from sklearn.utils.multiclass import type_of_target

    try:
        kind = type_of_target(y, input_name="y")
    except ValueError:
        return 0
    return int(np.unique(y).size) if kind == "multiclass" else 0


def _resolve(estimator, n_classes):
    """'multinomial' or 'one_vs_rest' for ``estimator.multi_class`` on c > 2 classes."""
    reason = multinomial_supported(estimator)
    if estimator.multi_class == "one_vs_rest":
        return "one_vs_rest"
    if estimator.multi_class == "multinomial":
        if reason is not None:
            raise ValueError(
                f"y contains {n_classes} classes and multi_class='multinomial', but {reason}. "
                "Change that setting, or pass multi_class='one_vs_rest' (or 'auto', which "
                "falls back to one-vs-rest)."
            )
        return "multinomial"
    return "multinomial" if reason is None else "one_vs_rest"


def forget_multiclass(estimator):
    """Drop the attributes of a previous multi-class fit (before a binary fit)."""
    for name in ("multi_class_", "estimators_"):
        if name in vars(estimator):
            delattr(estimator, name)


#: fitted attributes set by validate_data before the multi-class fit starts
_KEEP = ("n_features_in_", "feature_names_in_")


def fit_multiclass(estimator, X, y):
    """Fit ``estimator`` (a GPClassifier) on validated X (n, d) and y with > 2 classes.

    Sets the estimator's fitted attributes and returns it.  Attributes (beyond the binary
    ones' names): ``classes_`` (c,), ``multi_class_`` ("multinomial" / "one_vs_rest");
    multinomial: ``kernel_`` (shared by the c latent GPs), ``site_precision_`` (n, c, c),
    ``site_shift_`` (n, c), ``log_marginal_likelihood_value_`` (nested EP's log Z_EP),
    ``inducing_points_`` ((m, d) with ``inducing_points``: the FITC model of
    estimators/_multiclass_sparse.py; else None); one-vs-rest: ``estimators_`` (c binary
    GPClassifiers), ``kernel_`` (a CompoundKernel of their kernels, as scikit-learn's),
    ``log_marginal_likelihood_value_`` (their mean).
    """
    from sklearn.gaussian_process.kernels import RBF, CompoundKernel, ConstantKernel
    from sklearn.utils.multiclass import check_classification_targets

    from robustep._config import blas_thread_limit
    from robustep._validation import _advised

    try:
        check_classification_targets(y)
    except ValueError as exc:  # pragma: no cover - n_distinct_classes filtered these
        new = _advised(exc)
        raise (exc if new is None else new) from exc
    classes, y_index = np.unique(y, return_inverse=True)
    c = classes.size
    mode = _resolve(estimator, c)
    if estimator.likelihood == "probit" and estimator.label_noise != 0:
        _check_label_noise(estimator, mode, c)
    per_class = getattr(estimator, "multi_class_kernel", "shared") == "per_class"
    if per_class and mode == "multinomial" and estimator.inducing_points is not None:
        raise ValueError(
            "multi_class_kernel='per_class' is implemented for the dense multinomial model; "
            "pass inducing_points=None, or multi_class_kernel='shared'"
        )
    for name in list(vars(estimator)):  # fitted attributes of a previous (binary) fit
        if name.endswith("_") and not name.startswith("_") and name not in _KEEP:
            delattr(estimator, name)
    estimator.classes_ = classes
    estimator.X_train_ = np.asarray(X, dtype=float)
    estimator.multi_class_ = mode
    if mode == "one_vs_rest":
        estimators = fit_one_vs_rest(estimator, X, y_index, c)
        estimator.estimators_ = estimators
        estimator.kernel_ = CompoundKernel([est.kernel_ for est in estimators])
        estimator.converged_ = all(est.converged_ for est in estimators)
        estimator.n_iter_ = int(max(est.n_iter_ for est in estimators))
        estimator.log_marginal_likelihood_value_ = float(
            np.mean([est.log_marginal_likelihood_value_ for est in estimators])
        )
        used = {getattr(est, "method_used_", estimator.method) for est in estimators}
        estimator.method_used_ = used.pop() if len(used) == 1 else "mixed"
        estimator.optimizer_result_ = None  # one search per binary fit: estimators_[k]
        estimator._mc = _OneVsRest(estimators)
        diagnostics.set_one_vs_rest_loo(estimator, estimators, y_index)
    else:
        kernel = (
            ConstantKernel(1.0) * RBF(1.0) if estimator.kernel is None else clone(estimator.kernel)
        )
        # parallel nested EP without damping oscillates for large kernel amplitudes
        # (docs/derivations/multiclass.md §3): "ep" uses the adaptive damping schedule
        damping = "adaptive" if estimator.method in ("auto", "ep") else estimator.damping
        options = dict(
            damping=damping,
            max_iter=estimator.max_iter,
            tol=estimator.tol,
            optimizer=estimator.optimizer,
            n_restarts_optimizer=estimator.n_restarts_optimizer,
            random_state=estimator.random_state,
        )
        if estimator.inducing_points is not None:  # FITC per class: _multiclass_sparse.py
            from robustep.estimators._multiclass_sparse import SparseMultinomialCore

            core = SparseMultinomialCore(
                kernel, estimator.inducing_points,
                optimize_inducing=estimator.optimize_inducing, **options,
            )  # fmt: skip
        else:
            core = MultinomialCore(
                kernel,
                label_noise=float(estimator.label_noise),
                per_class_kernel=per_class,
                **options,
            )
        with blas_thread_limit(X.shape[0]):
            core.fit(X, y_index, c)
        estimator.inducing_points_ = getattr(core, "Z", None)
        res = core.result
        estimator.kernel_ = core.kernel
        estimator.converged_ = bool(res.converged)
        estimator.n_iter_ = int(res.n_iter)
        estimator.log_marginal_likelihood_value_ = float(res.log_Z)
        estimator.site_precision_ = np.array(res.site_precision)
        estimator.site_shift_ = np.array(res.site_shift)
        estimator.method_used_ = "damped"
        estimator.optimizer_result_ = core.search_result
        estimator._mc = _Multinomial(core)
        diagnostics.set_multiclass_loo(estimator, res, _core_likelihood(core, c), y_index)
    if not estimator.converged_:
        hint = (
            "method='damped' (damping='adaptive'), a larger max_iter or a larger tol"
            if mode == "multinomial"
            else "method='damped', a larger max_iter or a larger tol"
        )
        warnings.warn(
            f"{mode} {estimator.method} inference on {c} classes did not converge "
            f"({estimator.n_iter_} iterations, max_iter={estimator.max_iter}, "
            f"tol={estimator.tol}); the last finite state is kept. Try {hint}.",
            ConvergenceWarning,
            stacklevel=3,
        )
    warn_if_stuck(
        estimator.optimizer_result_,
        "pass another starting kernel or set n_restarts_optimizer > 0 (with finite kernel bounds)",
        stacklevel=3,
    )
    return estimator


def _core_likelihood(core, n_classes):
    """The likelihood object of a multinomial core (label noise or not)."""
    eps = float(getattr(core, "label_noise", 0.0))
    if eps:
        from robustep.likelihoods.noisy_multinomial_probit import NoisyMultinomialProbit

        return NoisyMultinomialProbit(n_classes, eps)
    from robustep.likelihoods.multinomial_probit import MultinomialProbit

    return MultinomialProbit(n_classes)


def _check_label_noise(estimator, mode, n_classes):
    """label_noise > 0 with likelihood='probit' and > 2 classes: the label-noise multinomial
    probit (dense multinomial model only); ValueError otherwise."""
    if mode != "multinomial" or estimator.inducing_points is not None:
        raise ValueError(
            "label_noise with likelihood='probit' and more than two classes is the label-noise "
            "multinomial probit: it needs the dense multinomial model (multi_class="
            "'multinomial' or 'auto', methods 'auto', 'ep' or 'damped', inducing_points=None); "
            "otherwise set label_noise=0 (or use likelihood='step' with one-vs-rest)"
        )
    from robustep.likelihoods.noisy_multinomial_probit import check_label_noise

    check_label_noise(estimator.label_noise, n_classes)


class _Multinomial:
    """GPClassifier's public methods for a multinomial fit."""

    def __init__(self, core):
        self.core = core

    @staticmethod
    def _X(estimator, X):
        from sklearn.utils.validation import check_is_fitted

        from robustep.estimators.gp_classifier import _validate

        check_is_fitted(estimator)
        return _validate(estimator, X, reset=False)

    def predict_proba(self, estimator, X):
        return self.core.predict_proba(self._X(estimator, X))

    def decision_function(self, estimator, X):
        """log predictive probabilities (m, c): argmax is ``predict``."""
        p = self.predict_proba(estimator, X)
        with np.errstate(divide="ignore"):
            return np.log(p)

    def predict_latent(self, estimator, X, return_std=False):
        mean, cov = self.core.predict_latent(self._X(estimator, X))
        if not return_std:
            return mean
        var = np.diagonal(cov, axis1=1, axis2=2)
        return mean, np.sqrt(np.maximum(np.nan_to_num(var, nan=0.0), 0.0))

    def log_marginal_likelihood(self, estimator, theta, eval_gradient):
        self.core.kernel = estimator.kernel_
        return self.core.log_marginal_likelihood(theta, eval_gradient)


class _OneVsRest:
    """GPClassifier's public methods for a one-vs-rest fit."""

    def __init__(self, estimators):
        self.estimators = estimators

    def predict_proba(self, estimator, X):
        _Multinomial._X(estimator, X)
        return one_vs_rest_proba(self.estimators, X)

    def decision_function(self, estimator, X):
        """Each binary classifier's score (m, c) (argmax is ``predict``)."""
        _Multinomial._X(estimator, X)
        return np.column_stack([est.decision_function(X) for est in self.estimators])

    def predict_latent(self, estimator, X, return_std=False):
        _Multinomial._X(estimator, X)
        out = [est.predict_latent(X, return_std=True) for est in self.estimators]
        mean = np.column_stack([o[0] for o in out])
        if not return_std:
            return mean
        return mean, np.column_stack([o[1] for o in out])

    def log_marginal_likelihood(self, estimator, theta, eval_gradient):
        """Mean over the binary classifiers of their log Z at theta.

        theta : (c p,) one block of p log hyperparameters per class, in the order of
        ``classes_`` (``kernel_.theta`` of the CompoundKernel), or (p,) shared by all.
        """
        c = len(self.estimators)
        p = self.estimators[0].kernel_.n_dims
        theta = np.asarray(theta, dtype=float)
        if theta.shape == (c * p,):
            thetas = theta.reshape(c, p)
        elif theta.shape == (p,):
            thetas = np.tile(theta, (c, 1))
        else:
            raise ValueError(
                f"theta must have {c * p} entries (kernel_.theta: {p} per class) or {p} "
                f"(shared by the {c} classes); got shape {theta.shape}"
            )
        vals = [
            est.log_marginal_likelihood(t, eval_gradient)
            for est, t in zip(self.estimators, thetas, strict=True)
        ]
        if not eval_gradient:
            return float(np.mean(vals))
        grads = np.array([v[1] for v in vals])  # (c, p): d mean / d block k = grad_k / c
        grad = grads.mean(axis=0) if theta.shape == (p,) else grads.reshape(-1) / c
        return float(np.mean([v[0] for v in vals])), grad
