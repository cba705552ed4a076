"""The sparse (FITC inducing-point) multinomial core of GPClassifier (> 2 classes).

``GPClassifier(inducing_points=..., multi_class="multinomial" or "auto")`` on more than two
classes: c latent GPs sharing the kernel, each with the FITC prior on one set of inducing
inputs Z shared by all classes, multinomial probit likelihood, nested EP
(:func:`robustep.ep.multiclass_sparse.sparse_nested_ep`; docs/derivations/multiclass.md
§8).  O(n c^2 m^2 + c^3 m^3) per outer iteration, O(n c m) memory, no n x n array in
fitting or prediction (predictions in row batches of ``PREDICT_BATCH``).

Inducing inputs as for the binary sparse model (:mod:`robustep.estimators._sparse`): an
int m gives k-means centres of X, an (m, d) array gives them directly; with an optimizer
and ``optimize_inducing=True`` they are optimised jointly with the kernel's log
hyperparameters by L-BFGS-B with the analytic evidence gradient (eqs. M21, M22), with the K_mm
jitter fixed for the whole fit, or by the stochastic learner
(:mod:`robustep.estimators._learner`, ``learner="stochastic"`` or "auto" from
``stochastic_learner_min_n`` points: stochastic EP on pairwise probit factors,
:mod:`robustep.ep.stochastic_multiclass`), nested EP then running at the learned values.
The nested-EP damping schedule is the dense core's
(:class:`robustep.estimators._multinomial.MultinomialCore`).
"""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from robustep.estimators import _learner, _multinomial, _sparse

__all__ = ["SparseMultinomialCore"]


class SparseMultinomialCore(_multinomial.MultinomialCore):
    """Nested-EP multinomial probit on the FITC prior, labels 0 .. c-1 (a private core).

    Parameters: ``kernel`` (one scikit-learn kernel shared by the classes; the caller
    passes a clone), ``inducing_points`` (int m or (m, d) array), ``optimize_inducing``,
    ``damping`` (float, or "adaptive" as in MultinomialCore), and MultinomialCore's
    ``max_iter``, ``tol``, ``optimizer`` ("fmin_l_bfgs_b", a callable or None),
    ``n_restarts_optimizer``, ``random_state`` (no label noise, one shared kernel).

    After :meth:`fit`: ``kernel`` (fitted), ``Z`` (m, d) the inducing inputs (optimised or
    not), ``jitter`` (the K_mm jitter of the fit), ``result``
    (:class:`~robustep.ep.multiclass_sparse.SparseMulticlassEPResult`), ``n_classes``.
    """

    def __init__(
        self, kernel, inducing_points, *, optimize_inducing=True, damping="adaptive", **options
    ):
        super().__init__(kernel, damping=damping, **options)
        self.inducing_points = inducing_points
        self.optimize_inducing = optimize_inducing

    # ------------------------------------------------------------- inference
    def _prior(self, kernel, Z):
        from robustep.ep.multiclass_sparse import MulticlassFITCPrior

        return MulticlassFITCPrior.from_kernel(
            kernel, self.X, Z, self.n_classes, jitter=self.jitter
        )

    def _infer(self, kernel, Z, init=None):
        """Nested EP at (kernel, Z), warm-started from inner sites ``init`` = (alpha, beta)."""
        from robustep.ep.multiclass_sparse import sparse_nested_ep

        prior = self._prior(kernel, Z)

        def run(damping, max_iter, init):
            return sparse_nested_ep(
                prior, self.y, self.n_classes, damping=damping, max_iter=max_iter,
                tol=self.tol, init=init, warn=False,
            )  # fmt: skip

        return _multinomial.run_with_damping(run, self.damping, self.max_iter, init)

    def fit(self, X, y, n_classes, learner=None):
        """X (n, d) float, y (n,) int in 0 .. n_classes-1.  Returns self.

        learner : what learns the kernel and Z when there is an optimizer
        (:func:`robustep.estimators._learner.resolve`; None: the full-batch evidence
        search).  The stochastic learner learns them under the energy of pairwise probit
        factors (:mod:`robustep.ep.stochastic_multiclass`); nested EP then runs on all n
        at the learned values either way.  After the fit, ``learned`` is the learner's
        :class:`~robustep.estimators._learner.Learned` (None without a search).
        """
        self.X = np.asarray(X, dtype=float)
        self.y = np.asarray(y, dtype=int)
        self.n_classes = int(n_classes)
        opt_Z = bool(self.optimize_inducing) and self.optimizer is not None
        if opt_Z:
            _sparse.check_inducing_gradient(self, self.kernel)
        Z = _sparse.resolve_inducing_points(self.inducing_points, self.X, self.random_state)
        self.jitter = _sparse.fixed_jitter(self.kernel, Z)
        last = [None]  # the latest result, for warm starts (see infer)

        def infer(kernel, Z, _lik, init):
            # the search passes the previous result's (site_precision, site_shift); nested
            # EP warm-starts from that result's inner sites instead
            prev = last[0]
            ab = None
            if init is not None and prev is not None and init[0] is prev.site_precision:
                ab = (prev.alpha, prev.beta)
            last[0] = res = self._infer(kernel, Z, ab)
            return res

        def gradient(res, kernel, Z, _lik, wrt_Z):
            gk, gZ = res.log_Z_gradient(kernel, self.X, Z, wrt_inducing=wrt_Z)
            return gk, np.zeros(0), gZ

        def search():
            space = _sparse.SearchSpace(infer, gradient, self.kernel, Z, 0, opt_Z)
            x0 = np.concatenate([self.kernel.theta, Z.ravel() if opt_Z else []])
            kbounds = [tuple(b) for b in np.asarray(self.kernel.bounds, float).reshape(-1, 2)]
            bounds = kbounds + _sparse._free_bounds(Z, opt_Z)
            starts = _sparse.restart_points(
                x0, bounds, self.n_restarts_optimizer, self.random_state, n_coordinates=len(kbounds)
            )
            result = _sparse.optimise(space, x0, bounds, starts, optimizer=self.optimizer)
            kernel, _, Z_found = space.unpack(result.x)
            best = result.state
            warm = None if best is None else (best.alpha, best.beta)
            return _learner.Learned(kernel, None, Z_found, result, warm)

        init = None
        self.search_result = self.learned = None
        if self.optimizer is not None and (self.kernel.n_dims > 0 or opt_Z):
            problem = _learner.LearningProblem(
                self.kernel, self.X, self.y, None, Z, 1.0, self.jitter, learn_kernel=True,
                learn_inducing=opt_Z, learn_likelihood=(), random_state=self.random_state,
                search=search, n_classes=self.n_classes,
            )  # fmt: skip
            self.learned = (learner or _learner.FullBatchLearner()).learn(problem)
            self.search_result = self.learned.search
            self.kernel, Z, init = self.learned.kernel, self.learned.Z, self.learned.warm
        self.Z = np.array(Z, dtype=float)
        self.result = self._infer(self.kernel, self.Z, init)
        return self

    def log_marginal_likelihood(self, theta, eval_gradient=False):
        """log Z_EP at log hyperparameters ``theta`` with the fitted inducing inputs fixed
        (and its gradient (p,))."""
        theta = np.asarray(theta, dtype=float)
        kernel = self.kernel.clone_with_theta(theta)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                res = self._infer(kernel, self.Z)
        except (np.linalg.LinAlgError, ValueError, FloatingPointError):
            return (-np.inf, np.zeros_like(theta)) if eval_gradient else -np.inf
        value = float(res.log_Z)
        if not eval_gradient:
            return value
        if not np.isfinite(value):
            return value, np.zeros_like(theta)
        gk, _ = res.log_Z_gradient(kernel, self.X, self.Z)
        return value, gk

    # --------------------------------------------------------------- predict
    def predict_latent(self, X, *, batch=_sparse.PREDICT_BATCH):
        """Latent predictive mean (p, c) and covariance (p, c, c) at X (p, d), in row batches
        (K(X_batch, Z) is batch x m)."""
        X = np.asarray(X, dtype=float)
        p, c = X.shape[0], self.n_classes
        mean, cov = np.empty((p, c)), np.empty((p, c, c))
        for start in range(0, p, batch):
            rows = slice(start, min(start + batch, p))
            mean[rows], cov[rows] = self.result.predict(
                self.kernel(X[rows], self.Z), self.kernel.diag(X[rows])
            )
        return np.nan_to_num(mean, nan=0.0), cov

    def predict_proba(self, X, *, batch=_sparse.PREDICT_BATCH):
        """p(y* = k | data) (p, c), rows summing to 1 (the dense core's predictive)."""
        from robustep.likelihoods.multinomial_probit import MultinomialProbit

        X = np.asarray(X, dtype=float)
        lik = MultinomialProbit(self.n_classes)
        out = np.empty((X.shape[0], self.n_classes))
        for start in range(0, X.shape[0], batch):
            rows = slice(start, min(start + batch, X.shape[0]))
            mean, cov = self.predict_latent(X[rows], batch=batch)
            out[rows] = lik.predictive_probabilities(mean, cov)
        return out
