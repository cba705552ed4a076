"""The multi-class fits composed by :class:`~robustep.estimators.GPClassifier`.

As scikit-learn's ``_gpc.py`` composes a binary core with a one-vs-rest wrapper, the public
``GPClassifier`` hands data with more than two classes to :func:`fit_multiclass`, which
returns one fitted state:

* :class:`MultinomialFit` — a multinomial probit core with nested EP (Riihimäki, Jylänki &
  Vehtari 2013): dense (:class:`robustep.estimators._multinomial.MultinomialCore`, shared
  or per-class kernel, label noise) or on the FITC prior
  (:class:`robustep.estimators._multiclass_sparse.SparseMultinomialCore`);
* :class:`OneVsRestFit` — one binary classifier per class (class k against the rest),
  built by a factory the caller passes (``fit_binary(X, y01)``, a fitted binary
  estimator), probabilities normalised over the classes as scikit-learn's one-vs-rest.

Both expose ``attributes`` (the fitted attributes by name), ``predict_latent``,
``decision_function``, ``predict_proba``, ``predict_index`` and
``log_marginal_likelihood``, on validated inputs.  Nothing here writes onto the estimator.
"""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from robustep import diagnostics
from robustep._warnings import warn
from robustep.estimators import _learner
from robustep.estimators._multinomial import MultinomialCore, multinomial_supported

__all__ = ["MultinomialFit", "OneVsRestFit", "fit_multiclass", "n_distinct_classes"]

#: what a user can change when the multinomial evidence search could not move
SEARCH_ADVICE = (
    "pass another starting kernel or set n_restarts_optimizer > 0 (with finite kernel bounds)"
)


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


def _resolve(params, n_classes):
    """'multinomial' or 'one_vs_rest' for ``params.multi_class`` on c > 2 classes."""
    reason = multinomial_supported(params)
    if params.multi_class == "one_vs_rest":
        return "one_vs_rest"
    if params.multi_class == "multinomial":
        if reason is not None:
            raise ValueError(
                f"y contains {n_classes} classes and multi_class='multinomial', but {reason}. "
                "Change that setting, or pass multi_class='one_vs_rest' (or 'auto', which "
                "falls back to one-vs-rest)."
            )
        return "multinomial"
    return "multinomial" if reason is None else "one_vs_rest"


def _check_label_noise(params, mode, n_classes):
    """label_noise > 0 with likelihood='probit' and > 2 classes: the label-noise multinomial
    probit (dense multinomial model only); ValueError otherwise."""
    if mode != "multinomial" or params.inducing_points is not None:
        raise ValueError(
            "label_noise with likelihood='probit' and more than two classes is the label-noise "
            "multinomial probit: it needs the dense multinomial model (multi_class="
            "'multinomial' or 'auto', methods 'auto', 'ep' or 'damped', inducing_points=None); "
            "otherwise set label_noise=0 (or use likelihood='step' with one-vs-rest)"
        )
    from robustep.likelihoods.noisy_multinomial_probit import check_label_noise

    check_label_noise(params.label_noise, n_classes)


def fit_multiclass(params, X, y, fit_binary):
    """Fit the multi-class model on validated X (n, d) and y with > 2 classes.

    Parameters
    ----------
    params : the classifier's parameters (GPClassifier's ``get_params``, as attributes).
    X : (n, d) float inputs; y : (n,) labels with more than two classes.
    fit_binary : ``fit_binary(X, y01) -> fitted binary estimator`` (one-vs-rest only).

    Returns
    -------
    (classes (c,), MultinomialFit or OneVsRestFit).  Attributes (beyond the binary ones'
    names): ``multi_class_`` ("multinomial" / "one_vs_rest"); multinomial: ``kernel_``,
    ``site_precision_`` (n, c, c), ``site_shift_`` (n, c), ``log_marginal_likelihood_value_``
    (nested EP's log Z_EP), ``inducing_points_`` ((m, d) or None); one-vs-rest:
    ``estimators_`` (c binary classifiers), ``kernel_`` (a CompoundKernel of their
    kernels, as scikit-learn's), ``log_marginal_likelihood_value_`` (their mean).
    """
    from sklearn.utils.multiclass import check_classification_targets

    from robustep._validation import _advised

    try:
        check_classification_targets(y)
    except ValueError as exc:  # pragma: no cover - n_distinct_classes filtered these
        new = _advised(exc)
        raise (exc if new is None else new) from exc
    classes, y_index = np.unique(y, return_inverse=True)
    c = classes.size
    mode = _resolve(params, c)
    if params.likelihood == "probit" and params.label_noise != 0:
        _check_label_noise(params, mode, c)
    per_class = params.multi_class_kernel == "per_class"
    if per_class and mode == "multinomial" and params.inducing_points is not None:
        raise ValueError(
            "multi_class_kernel='per_class' is implemented for the dense multinomial model; "
            "pass inducing_points=None, or multi_class_kernel='shared'"
        )
    if mode == "one_vs_rest":
        state = OneVsRestFit.fit(fit_binary, X, y_index, c)
    else:
        state = MultinomialFit.fit(params, X, y_index, c, per_class)
    state.attributes.update(X_train_=np.asarray(X, dtype=float), multi_class_=mode)
    return classes, state


def _core_likelihood(core, n_classes):
    """The likelihood object of a multinomial core (label noise or not)."""
    eps = float(getattr(core, "label_noise", 0.0))
    if eps:
        from robustep.likelihoods.noisy_multinomial_probit import NoisyMultinomialProbit

        return NoisyMultinomialProbit(n_classes, eps)
    from robustep.likelihoods.multinomial_probit import MultinomialProbit

    return MultinomialProbit(n_classes)


class _MulticlassFit:
    """What both multi-class states share: the attributes, the convergence warning, the
    predicted class index."""

    #: the settings a ConvergenceWarning suggests
    hint = "method='damped', a larger max_iter or a larger tol"
    #: what a user can change when the evidence search could not move (None: no search)
    advice = None

    def __init__(self, attributes):
        self.attributes = attributes

    def warn_if_not_converged(self, estimator):
        """The ConvergenceWarning of a fit (fitted ``estimator``) that did not converge."""
        if estimator.converged_:
            return
        warn(
            f"{estimator.multi_class_} {estimator.method} inference on "
            f"{len(estimator.classes_)} classes did not converge ({estimator.n_iter_} "
            f"iterations, max_iter={estimator.max_iter}, tol={estimator.tol}); the last "
            f"finite state is kept. Try {self.hint}.",
            ConvergenceWarning,
        )

    def predict_index(self, X):
        """Index (m,) into ``classes_``: the most probable class."""
        return np.argmax(self.predict_proba(X), axis=1)


class MultinomialFit(_MulticlassFit):
    """A fitted multinomial (nested-EP) core and the attributes it gives."""

    hint = "method='damped' (damping='adaptive'), a larger max_iter or a larger tol"
    advice = SEARCH_ADVICE

    def __init__(self, core, attributes):
        super().__init__(attributes)
        self.core = core

    @classmethod
    def fit(cls, params, X, y_index, n_classes, per_class):
        """Fit the dense or sparse multinomial core on labels 0 .. c-1."""
        from robustep._config import blas_thread_limit
        from robustep.estimators._binary import starting_kernel

        kernel = starting_kernel(params.kernel)
        # parallel nested EP without damping oscillates for large kernel amplitudes
        # (docs/derivations/multiclass.md §3): "ep" uses the adaptive damping schedule
        damping = "adaptive" if params.method in ("auto", "ep") else params.damping
        names = ("max_iter", "tol", "optimizer", "n_restarts_optimizer", "random_state")
        options = {name: getattr(params, name) for name in names}
        options["damping"] = damping
        learner = _learner.resolve(
            params.learner, n=X.shape[0], sparse=params.inducing_points is not None,
            optimizer=params.optimizer,
        )  # fmt: skip
        if params.inducing_points is not None:  # FITC per class: _multiclass_sparse.py
            from robustep.estimators._multiclass_sparse import SparseMultinomialCore

            core = SparseMultinomialCore(
                kernel, params.inducing_points, optimize_inducing=params.optimize_inducing,
                **options,
            )  # fmt: skip
        else:
            core = MultinomialCore(kernel, label_noise=float(params.label_noise),
                                   per_class_kernel=per_class, **options)  # fmt: skip
        with blas_thread_limit(X.shape[0]):
            if params.inducing_points is not None:
                core.fit(X, y_index, n_classes, learner)
            else:
                core.fit(X, y_index, n_classes)
        res = core.result
        attributes = {
            "inducing_points_": getattr(core, "Z", None),
            "kernel_": core.kernel,
            "converged_": bool(res.converged),
            "n_iter_": int(res.n_iter),
            "log_marginal_likelihood_value_": float(res.log_Z),
            "site_precision_": np.array(res.site_precision),
            "site_shift_": np.array(res.site_shift),
            "method_used_": "damped",
            "optimizer_result_": core.search_result,
            **_learner.fitted_attributes(getattr(core, "learned", None)),
        }
        likelihood = _core_likelihood(core, n_classes)
        attributes.update(diagnostics.multiclass_loo_attributes(res, likelihood, y_index))
        return cls(core, attributes)

    def predict_proba(self, X):
        """p(y* = k | data) (m, c), rows summing to 1."""
        return self.core.predict_proba(X)

    def decision_function(self, X):
        """log predictive probabilities (m, c): argmax is ``predict``."""
        p = self.predict_proba(X)
        with np.errstate(divide="ignore"):
            return np.log(p)

    def predict_latent(self, X, return_std=False):
        """The c latent GPs' mean (m, c) (and std (m, c)) at X."""
        mean, cov = self.core.predict_latent(X)
        if not return_std:
            return mean
        var = np.diagonal(cov, axis1=1, axis2=2)
        return mean, np.sqrt(np.maximum(np.nan_to_num(var, nan=0.0), 0.0))

    def log_marginal_likelihood(self, theta, eval_gradient=False):
        return self.core.log_marginal_likelihood(theta, eval_gradient)


class OneVsRestFit(_MulticlassFit):
    """c fitted binary classifiers (class k against the rest) and the attributes they give.

    No search of its own: each binary fit has one (``estimators_[k].optimizer_result_``).
    """

    def __init__(self, estimators, attributes):
        super().__init__(attributes)
        self.estimators = estimators

    @classmethod
    def fit(cls, fit_binary, X, y_index, n_classes):
        """``fit_binary(X, (y_index == k))`` for each class k (ConvergenceWarnings silenced:
        the multi-class fit warns once)."""
        from sklearn.gaussian_process.kernels import CompoundKernel

        estimators = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            for k in range(n_classes):
                estimators.append(fit_binary(X, (y_index == k).astype(int)))
        used = {est.method_used_ for est in estimators}
        attributes = {
            "estimators_": estimators,
            "kernel_": CompoundKernel([est.kernel_ for est in estimators]),
            "converged_": all(est.converged_ for est in estimators),
            "n_iter_": int(max(est.n_iter_ for est in estimators)),
            "log_marginal_likelihood_value_": float(
                np.mean([est.log_marginal_likelihood_value_ for est in estimators])
            ),
            "method_used_": used.pop() if len(used) == 1 else "mixed",
            "optimizer_result_": None,
        }
        attributes.update(diagnostics.one_vs_rest_loo_attributes(estimators, y_index))
        return cls(estimators, attributes)

    def predict_proba(self, X):
        """Each binary classifier's p(class k) (m, c), normalised over k."""
        P = np.column_stack([est.predict_proba(X)[:, 1] for est in self.estimators])
        total = P.sum(axis=1, keepdims=True)
        uniform = np.full_like(P, 1.0 / P.shape[1])
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(total > 0, P / total, uniform)

    def decision_function(self, X):
        """Each binary classifier's score (m, c) (argmax is ``predict``)."""
        return np.column_stack([est.decision_function(X) for est in self.estimators])

    def predict_latent(self, X, return_std=False):
        """Each binary classifier's latent mean (m, c) (and std (m, c))."""
        out = [est.predict_latent(X, return_std=True) for est in self.estimators]
        mean = np.column_stack([o[0] for o in out])
        if not return_std:
            return mean
        return mean, np.column_stack([o[1] for o in out])

    def log_marginal_likelihood(self, theta, eval_gradient=False):
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
