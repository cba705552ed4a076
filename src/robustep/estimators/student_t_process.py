"""Student-t process classification with EP for the t-exponential family.

Futami, Sato & Sugiyama (2017) §5.2-5.3; Student-t process prior of Shah, Wilson &
Ghahramani (2014).  Engine: :mod:`robustep.tep.process`; derivation in
docs/derivations/tep.md §6 (hyperparameter gradients: §8).
"""

from __future__ import annotations

import numbers
from functools import partial

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Kernel, WhiteKernel
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from robustep._config import limits_blas_threads
from robustep._validation import validate_data
from robustep._warnings import warn
from robustep.estimators._search import (
    Evaluation,
    EvaluationFailed,
    draw_starts,
    maximise_evidence,
    reports_progress,
)
from robustep.estimators.bpm import _binary_labels, _noisy_step_proba
from robustep.tep.process import (
    process_log_marginal_likelihood,
    process_log_marginal_likelihood_gradient,
    process_posterior,
    process_predict_latent,
    process_tep,
)

__all__ = ["StudentTProcessClassifier", "default_kernel"]


def default_kernel(n_features):
    """Futami et al. eq. (44): theta0 exp(-sum_d theta1_d (x_d - x'_d)^2) + theta2 + theta3 delta.

    Built as ``C(1) * RBF(ones(D)) + C(1) + WhiteKernel(1e-2)`` (ARD lengthscales
    ``l_d = (2 theta1_d)^{-1/2}``; the white kernel acts on training points only).
    """
    return (
        ConstantKernel(1.0) * RBF(length_scale=np.ones(n_features))
        + ConstantKernel(1.0)
        + WhiteKernel(1e-2)
    )


class StudentTProcessClassifier(ClassifierMixin, BaseEstimator):
    """Binary classifier with a Student-t process latent function and the noisy step likelihood.

    ``f ~ TP(df, 0, k)`` (f at the training inputs is ``St(0, K, df)`` with scale matrix K),
    ``p(y | f) = eps + (1 - 2 eps) Theta(y f)`` (eq. 43).  The posterior of f is
    approximated by a Student-t with the same df through EP for the t-exponential
    family; kernel hyperparameters maximise the approximate log evidence (Theorem 2).

    Parameters
    ----------
    kernel : sklearn kernel or None (None: :func:`default_kernel`, eq. 44).
    df : float > 0 or np.inf (np.inf: Gaussian process classification with EP).
    label_noise : eps in [0, 0.5).
    optimizer : "fmin_l_bfgs_b", callable or None (keep the kernel's hyperparameters).
        A callable is called as ``optimizer(obj_func, initial_theta, bounds) ->
        (theta_opt, func_min)`` like scikit-learn's GaussianProcessClassifier.
    n_restarts_optimizer : extra L-BFGS starts from log-uniform draws within the bounds.
    max_iter, tol : EP iterations / threshold on the largest site change.
    random_state : seed or RandomState for the restarts.
    damping : weight kept on the old sites in the parallel EP updates.
    gradient : {"auto", "implicit", "explicit", "finite-difference"}, default "auto"
        How L-BFGS-B gets the gradient of the converged t-EP log evidence w.r.t. the log
        hyperparameters (docs/derivations/tep.md §8).

        * "implicit": analytic total derivative.  It is the explicit term plus the
          sensitivity of the EP fixed point, by the implicit function theorem (eqs.
          8.8-8.11).  Cost: one EP run plus O(n^3) linear algebra per gradient, whatever
          the number of hyperparameters.  Agrees with finite differences of the
          converged evidence to ~1e-7.
        * "explicit": derivative with the sites held fixed (eq. 8.7).  It is exact for
          df = inf, but for finite df the t-EP fixed point is not stationary for the
          evidence.  There it is far off: relative error 0.8-2.8 and angles of 40-89
          degrees on small noisy problems, with the amplitude derivative of the wrong
          sign.  L-BFGS-B then stops at clearly worse points.
        * "finite-difference": central differences (step 1e-4) of the converged evidence,
          EP re-run warm-started: 2 EP runs per hyperparameter per gradient.  It is also
          inaccurate unless the EP tolerance is tiny: the warm-started runs stop after a
          few sweeps.  On Sonar the error is 1.8% at the default inner tolerance 1e-8
          and 4e-5 at 1e-10, where it costs ~100 times more than "implicit" for the 63
          ARD hyperparameters (docs/derivations/tep.md §8).  Kept as a
          reference.
        * "auto": "explicit" for df = inf (exact there), "implicit" otherwise.  An
          evaluation whose analytic gradient is not finite falls back to finite
          differences.

    Inner EP runs (tolerance ``min(tol, 1e-8)``; at 1e-6 the evidence carries errors of
    ~1e-4 that stall the line search) start from the sites of the previous evaluation,
    rescaled for the change of log|B| (§9); a blocked warm start is retried from zero
    sites, and a run that does not converge is continued with heavier damping
    ``1 - (1 - damping) / 4``.
    Points where EP still does not converge are kept out of the search by a smooth
    penalty (§8.6); if the optimiser could not leave its start because of them, the fit
    warns and sets ``converged_ = False``.
    L-BFGS-B runs at most 50 iterations per start.

    verbose : bool, default False
        Print one line per evaluation of the hyperparameter search to stderr (evaluation
        count, failures, approximate log evidence, elapsed time); quiet otherwise.  The
        same lines are INFO records of the ``robustep.search`` logger.

    Attributes
    ----------
    classes_, kernel_ (fitted clone), X_train_, site_tau_, site_nu_ (scaled site
    parameters), converged_ (False if the final EP run did not converge or if the
    evidence optimiser could not move from its start), n_iter_ (sweeps of the final EP
    run, all attempts), log_marginal_likelihood_value_, n_features_in_,
    optimizer_stuck_ (the optimiser stayed at its start after rejecting points where EP
    did not converge), n_rejected_evaluations_,
    loo_log_predictive_ (n,) log p(y_i | y_-i) from t-EP's cavities (the t-cavity
    q ⊘_t t~_i is t-EP's posterior without site i; :mod:`robustep.diagnostics`), its mean
    :meth:`loo_score`, outlier_scores_ (n,) = -loo_log_predictive_ (LOO surprise of the
    observed label), loo_approximate_ (n,) bool (improper cavity: posterior marginal
    used, optimistic; ``loo_score`` warns).

    There is no ``method="auto"``: t-EP has no double loop, and ``fit`` already chains
    its fallbacks (warm start, zero sites, heavier damping; see above).
    """

    _parameter_constraints = {
        "kernel": [None, Kernel],
        "df": [Interval(numbers.Real, 0, np.inf, closed="right")],
        "label_noise": [Interval(numbers.Real, 0, 0.5, closed="left")],
        "optimizer": [StrOptions({"fmin_l_bfgs_b"}), callable, None],
        "n_restarts_optimizer": [Interval(numbers.Integral, 0, None, closed="left")],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "tol": [Interval(numbers.Real, 0, None, closed="left")],
        "random_state": ["random_state"],
        "verbose": ["boolean"],
        "damping": [Interval(numbers.Real, 0, 1, closed="left")],
        "gradient": [StrOptions({"auto", "implicit", "explicit", "finite-difference"})],
    }

    def __init__(
        self,
        kernel=None,
        *,
        df=10.0,
        label_noise=0.0,
        optimizer="fmin_l_bfgs_b",
        n_restarts_optimizer=0,
        max_iter=1000,
        tol=1e-4,
        random_state=None,
        verbose=False,
        damping=0.5,
        gradient="auto",
    ):
        self.kernel = kernel
        self.df = df
        self.label_noise = label_noise
        self.optimizer = optimizer
        self.n_restarts_optimizer = n_restarts_optimizer
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state
        self.verbose = verbose
        self.damping = damping
        self.gradient = gradient

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags

    # ------------------------------------------------------------------ internals
    def _df(self):
        return float(self.df)

    def _run_ep(self, K, y, warm=None):
        return self._run_ep_tol(K, y, warm, self.tol)

    def _run_ep_tol(self, K, y, warm, tol):
        """EP at ``tol``, robust to bad warm starts.  Returns process_tep's tuple.

        1. From the warm start ``(tau, nu, log|B|)`` if given, with ``nu`` rescaled for
           the change of K (``warm_logdet``, derivation §9).
        2. If that run is blocked (no step keeps the cavities proper): from zero sites.
        3. If that does not converge either: continued from its last iterate with heavier
           damping ``1 - (1 - damping) / 4`` (parallel t-EP can fall into a limit cycle
           at damping 0.5, mostly for small df).

        The returned info counts the sweeps of all attempts; ``converged`` is the last's.
        """
        run = {"df": self._df(), "eps": float(self.label_noise), "tol": tol, "adaptive": True}
        damping = float(self.damping)
        tries = []
        with np.errstate(all="ignore"):
            if warm is not None:
                logdet = warm[2] if len(warm) > 2 else None
                res = process_tep(
                    K,
                    y,
                    damping=damping,
                    max_iter=self.max_iter,
                    tau=warm[0],
                    nu=warm[1],
                    warm_logdet=logdet,
                    **run,
                )
                tries.append(res)
            blocked = tries and tries[-1][3].history and np.isinf(tries[-1][3].history[-1])
            if not tries or blocked or tries[-1][2] is None:
                tries.append(process_tep(K, y, damping=damping, max_iter=self.max_iter, **run))
            if not tries[-1][3].converged and tries[-1][2] is not None:
                heavy = 1.0 - (1.0 - damping) / 4.0
                tau, nu = tries[-1][0], tries[-1][1]
                tries.append(
                    process_tep(K, y, damping=heavy, max_iter=self.max_iter, tau=tau, nu=nu, **run)
                )
        tau, nu, post, info = tries[-1]
        for earlier in tries[:-1]:
            info.n_iter += earlier[3].n_iter
            info.n_skipped += earlier[3].n_skipped
        info.history = [h for t in tries for h in t[3].history]
        return tau, nu, post, info

    def _lml_at(self, kernel, X, y, warm, tol):
        K = kernel(X)
        tau, nu, post, info = self._run_ep_tol(K, y, warm, tol)
        with np.errstate(all="ignore"):
            lml = process_log_marginal_likelihood(
                K, y, tau, nu, self._df(), float(self.label_noise), post=post
            )
        warm = (tau, nu, post.logdet_b) if post is not None else None
        return lml, warm, info.converged

    def _gradient_mode(self):
        if self.gradient == "auto":
            return "explicit" if np.isinf(self._df()) else "implicit"
        return self.gradient

    def _evaluate(self, theta, kernel, X, y, warm):
        """Converged log evidence at ``theta`` and its gradient (``self.gradient``).

        EP is warm-started from ``warm``, the sites of the previous successful evaluation.
        Analytic modes: one EP run and O(n^3) work (docs/derivations/tep.md §8);
        "finite-difference": central differences of the *converged* evidence, EP re-run
        warm-started at theta +- h e_i (2 EP runs per hyperparameter).  Raises
        EvaluationFailed where EP does not converge or the evidence is not finite.
        """
        inner_tol = min(self.tol, 1e-8)
        mode = self._gradient_mode()
        kern = kernel.clone_with_theta(theta)
        if mode == "finite-difference":
            lml, new_warm, converged = self._lml_at(kern, X, y, warm, inner_tol)
        else:
            K, K_gradient = kern(X, eval_gradient=True)
            tau, nu, post, info = self._run_ep_tol(K, y, warm, inner_tol)
            converged = info.converged
            new_warm = (tau, nu, post.logdet_b) if post is not None else None
            if not converged:  # not a fixed point: neither value nor gradient is valid
                raise EvaluationFailed
            with np.errstate(all="ignore"):
                lml, grad = process_log_marginal_likelihood_gradient(
                    K,
                    K_gradient,
                    y,
                    tau,
                    nu,
                    self._df(),
                    float(self.label_noise),
                    post=post,
                    implicit=mode == "implicit",
                )
            if np.isfinite(lml) and np.all(np.isfinite(grad)):
                return Evaluation(lml, grad, state=new_warm)
            # otherwise fall back to finite differences for this evaluation
        if not (np.isfinite(lml) and converged):
            raise EvaluationFailed
        grad = np.zeros_like(theta)
        h = 1e-4
        for i in range(theta.size):
            e = np.zeros_like(theta)
            e[i] = h
            fp = self._lml_at(kernel.clone_with_theta(theta + e), X, y, new_warm, inner_tol)[0]
            fm = self._lml_at(kernel.clone_with_theta(theta - e), X, y, new_warm, inner_tol)[0]
            grad[i] = (fp - fm) / (2 * h) if np.isfinite(fp) and np.isfinite(fm) else 0.0
        return Evaluation(lml, grad, state=new_warm)

    def _search_evaluation(self, theta, context, *, kernel, X, y):
        return self._evaluate(theta, kernel, X, y, context.warm)

    # ------------------------------------------------------------------ API
    @reports_progress
    @limits_blas_threads
    def fit(self, X, y):
        """Fit hyperparameters (optional) and the EP posterior. X (n, d), y (n,) two labels."""
        self._validate_params()
        X, y = validate_data(self, X, y, dtype=np.float64)
        self.classes_, y_pm = _binary_labels(y, type(self).__name__)
        kernel = default_kernel(X.shape[1]) if self.kernel is None else clone(self.kernel)
        self.X_train_ = X
        if self.optimizer is not None and kernel.n_dims > 0:
            bounds = kernel.bounds
            starts = draw_starts(
                kernel.theta, bounds, self.n_restarts_optimizer,
                check_random_state(self.random_state),
            )  # fmt: skip
            search = maximise_evidence(
                partial(self._search_evaluation, kernel=kernel, X=X, y=y_pm),
                kernel.theta, bounds, optimizer=self.optimizer, starts=starts,
                options={"maxiter": 50},
            )  # fmt: skip
            # the sites at the optimum: the final EP run starts from its fixed point
            kernel, warm = kernel.clone_with_theta(search.x), search.state
            # the search "could not move" if no evaluation converged, or if it stayed at its
            # start after rejecting points (EP failed there): the start is then not shown
            # to be an optimum
            self.optimizer_stuck_ = search.stuck_reason() is not None
            self.n_rejected_evaluations_ = int(search.n_failures)
            self.optimizer_result_ = search
        else:
            warm = None
            self.optimizer_stuck_ = False
            self.n_rejected_evaluations_ = 0
            self.optimizer_result_ = None
        self.kernel_ = kernel
        K = kernel(X)
        tau, nu, post, info = self._run_ep(K, y_pm, warm)
        ok = post is not None and np.all(np.isfinite(post.mu))
        if not ok:  # never NaN predictions: fall back to the prior
            tau, nu = np.zeros(len(y_pm)), np.zeros(len(y_pm))
            post = process_posterior(K, tau, nu)
            info.converged = False
        self.site_tau_, self.site_nu_, self._post = tau, nu, post
        self.converged_ = bool(info.converged) and not self.optimizer_stuck_
        self.n_iter_ = int(info.n_iter)
        if not info.converged:
            warn(
                f"t-EP did not converge in {self.n_iter_} iterations (last max site change "
                f"{info.max_diff:.3g} > tol={self.tol}); increase max_iter or damping.",
                ConvergenceWarning,
            )
        elif self.optimizer_stuck_:
            warn(
                "the evidence optimiser could not move from its starting hyperparameters: "
                f"inner EP did not converge at {self.n_rejected_evaluations_} of the points it "
                "tried, so the start is not shown to be an optimum; try damping closer to 1, "
                "a different starting kernel or n_restarts_optimizer > 0.",
                ConvergenceWarning,
            )
        with np.errstate(all="ignore"):
            self.log_marginal_likelihood_value_ = float(
                process_log_marginal_likelihood(
                    K, y_pm, tau, nu, self._df(), float(self.label_noise), post=post
                )
            )
        from robustep import diagnostics  # LOO from the t-cavities (diagnostics.py)

        diagnostics.set_process_classifier_loo(
            self, post, tau, nu, y_pm, self._df(), float(self.label_noise)
        )
        return self

    def loo_score(self):
        """Mean leave-one-out log predictive probability of the training labels.

        mean_i log p(y_i | y_-i) from t-EP's cavities (``loo_log_predictive_``, see
        :func:`robustep.diagnostics.process_classifier_loo`).
        """
        from robustep import diagnostics

        return diagnostics.loo_score(self, "t-EP")

    def latent_predictive(self, X):
        """Predictive Student-t of f at X: (location (m,), scale^2 (m,)); dof = df."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        K_star = self.kernel_(self.X_train_, X)
        # k(x*, x*) includes the delta term of eq. (44) (a new point has its own nugget,
        # which plays the role of probit noise for the step likelihood); the cross
        # covariances do not (sklearn's WhiteKernel is 0 for X != Y calls).
        kss = self.kernel_.diag(X)
        return process_predict_latent(
            None, self.site_tau_, self.site_nu_, self._post, K_star, kss, self._df()
        )

    def decision_function(self, X):
        """Standardised predictive location ``m / s`` of f, shape (n,) (monotone in the proba)."""
        m, s2 = self.latent_predictive(X)
        return m / np.sqrt(s2)

    def predict_proba(self, X):
        """p(y | x) = eps + (1 - 2 eps) T_df(m / s), shape (n, 2)."""
        m, s2 = self.latent_predictive(X)
        p1 = _noisy_step_proba(m, s2, self._df(), float(self.label_noise))
        p1 = np.clip(np.nan_to_num(p1, nan=0.5), 0.0, 1.0)
        return np.column_stack([1.0 - p1, p1])

    def predict(self, X):
        """Class labels, shape (n,)."""
        check_is_fitted(self)
        return self.classes_[(self.decision_function(X) > 0).astype(int)]
