"""Bayes point machine with a Student-t prior, fitted by t-exponential EP or ADF.

Futami, Sato & Sugiyama (2017) §5.1 (Appendix D of the paper is unavailable; our
derivation is in docs/derivations/tep.md).
"""

from __future__ import annotations

import numbers

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from robustep._config import get_config, limits_blas_threads
from robustep._validation import binary_labels, validate_data
from robustep._warnings import warn
from robustep.tep.ep import (
    linear_log_marginal_likelihood,
    linear_posterior,
    linear_tep,
    rank_one_sites,
    rank_one_state,
)
from robustep.tep.fixed_point import (
    LinearRankOnePosterior,
    continue_from_gaussian_ep,
    solve_fixed_point,
)
from robustep.tep.likelihood import _t_cdf

__all__ = ["BayesPointMachine"]


def _binary_labels(y, estimator_name="this classifier"):
    """Validate binary targets; return (classes_ (2,), y_pm (n,) in {-1, +1})."""
    return binary_labels(y, estimator_name)


def _noisy_step_proba(m, s2, df, eps):
    """P(y = +1) = eps + (1 - 2 eps) T_df(m / sqrt(s2)) for f ~ St(m, s2, df) (vectorised)."""
    z = m / np.sqrt(np.maximum(s2, 1e-300))
    return eps + (1.0 - 2.0 * eps) * _t_cdf(z, df)


class BayesPointMachine(ClassifierMixin, BaseEstimator):
    """Linear classifier with a Student-t prior on the weights (Bayes point machine).

    Model: ``w ~ St(0, I, df)`` (k = n_features [+ 1 for the intercept]) and
    ``p(y_i | x_i, w) = eps + (1 - 2 eps) Theta(y_i <w, x_i>)`` (Futami et al. eq. 43).
    The posterior is approximated by ``St(mu, Sigma, df)`` using EP for the
    t-exponential family (t-factorisation, Theorem 1 escort moment matching) or ADF
    (one pass, t-divergence projection, eqs. 16-18).  ``df=np.inf`` gives Minka's
    Gaussian BPM.

    Parameters
    ----------
    df : float > 0 or np.inf, degrees of freedom of prior and approximation.
    label_noise : float in [0, 0.5), default 0.1, eps of eq. (43): the assumed rate of
        flipped labels.  ``label_noise=0`` states that the training data are linearly
        separable; on data that are not, the exact posterior does not exist (every w
        misclassifies a point, so the evidence is 0) and EP shrinks w to 0 (the fit then
        warns and falls back to the prior).  The default therefore allows label noise.
    method : "ep" or "adf".
    fit_intercept : bool, append a constant input 1 (its weight gets the same prior).
    max_iter : int, maximum EP sweeps.
    tol : float, convergence threshold on the largest change of any site's natural parameters.
    damping : float in [0, 1), default 0.5, weight kept on the old site parameters
        (0 = none; 0.5 is also the Student-t process classifier's default).  Undamped
        sequential EP with the noisy step oscillates on many noisy data sets.

    The two defaults were chosen for convergence on six data sets, not for one score
    (docs/reliability.md, "BayesPointMachine defaults"); the step likelihood is
    scale-free in w, so the prior scale (identity) does not change predictions.

    Sites are rank-one (statistics <w, x_i> and <w, x_i>^2; see
    :func:`robustep.tep.ep.linear_tep`).  EP with the noisy step may fail to converge
    on noisy data, for finite and infinite df alike (docs/derivations/tep.md §7); then the
    fixed-point equations are solved by Newton's method and a trust-region method
    (:func:`robustep.tep.fixed_point.solve_fixed_point`), and if that finds no proper
    fixed point a ConvergenceWarning is raised and the fit keeps the last iterate whose
    cavities are all proper and whose evidence is finite (zero sites, the prior, at worst),
    so ``log_marginal_likelihood_value_`` is finite whenever label_noise > 0
    (docs/reliability.md, "t-exponential EP: valid fixed points").

    Attributes
    ----------
    classes_ (2,), coef_ (1, n_features), intercept_ (1,), posterior_mean_ (k,),
    posterior_scale_ (k, k) (Student-t scale matrix), converged_, n_iter_,
    fixed_point_solved_ (the damped sweeps did not converge and the fixed point was found
    by Newton's method on the fixed-point equations,
    :func:`robustep.tep.fixed_point.solve_fixed_point`),
    log_marginal_likelihood_value_ (EP evidence, Theorem 2; for ADF the sum of the
    sequential log normalisers), n_features_in_.
    """

    _parameter_constraints = {
        "df": [Interval(numbers.Real, 0, np.inf, closed="right")],
        "label_noise": [Interval(numbers.Real, 0, 0.5, closed="left")],
        "method": [StrOptions({"ep", "adf"})],
        "fit_intercept": ["boolean"],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "tol": [Interval(numbers.Real, 0, None, closed="left")],
        "damping": [Interval(numbers.Real, 0, 1, closed="left")],
    }

    def __init__(
        self,
        *,
        df=10.0,
        label_noise=0.1,
        method="ep",
        fit_intercept=True,
        max_iter=1000,
        tol=1e-4,
        damping=0.5,
    ):
        self.damping = damping
        self.df = df
        self.label_noise = label_noise
        self.method = method
        self.fit_intercept = fit_intercept
        self.max_iter = max_iter
        self.tol = tol

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags

    def _design(self, X):
        return np.hstack([X, np.ones((X.shape[0], 1))]) if self.fit_intercept else X

    @limits_blas_threads
    def fit(self, X, y):
        """Fit the posterior. X (n, d), y (n,) with exactly two distinct labels. Returns self."""
        self._validate_params()
        X, y = validate_data(self, X, y, dtype=np.float64)
        self.classes_, y_pm = binary_labels(y, type(self).__name__)
        Z = self._design(X)
        df = float(self.df)
        eps = float(self.label_noise)
        with np.errstate(all="ignore"):
            state, info = linear_tep(
                Z,
                y_pm,
                df=df,
                eps=eps,
                method=self.method,
                max_iter=self.max_iter,
                tol=self.tol,
                damping=float(self.damping),
            )
            self.fixed_point_solved_ = False
            if self.method == "ep" and not info.converged:
                found = self._solve_fixed_point(Z, y_pm, df, eps, state)
                if found is not None:
                    state, self.fixed_point_solved_ = found, True
                    info.converged = True
            mu, sigma, lml = self._posterior_and_evidence(state, info, Z, y_pm, eps)
        if mu is None:  # never return NaN predictions: fall back to the prior
            mu, sigma = np.zeros(Z.shape[1]), np.eye(Z.shape[1])
            info.converged = False
        self.converged_ = bool(info.converged)
        self.n_iter_ = int(info.n_iter)
        if not self.converged_:
            warn(
                f"t-EP did not converge in {self.n_iter_} sweeps (last max site change "
                f"{info.max_diff:.3g} > tol={self.tol}) and no fixed point was found by "
                "Newton's method; the posterior and the evidence are those of the last "
                "iterate with proper cavities. Increase max_iter or label_noise.",
                ConvergenceWarning,
            )
        self.posterior_mean_ = mu
        self.posterior_scale_ = sigma
        d = X.shape[1]
        self.coef_ = mu[:d].reshape(1, -1)
        self.intercept_ = np.array([mu[d] if self.fit_intercept else 0.0])
        self.log_marginal_likelihood_value_ = float(lml)
        return self

    def _solve_fixed_point(self, Z, y_pm, df, eps, state):
        """A proper t-EP fixed point by Newton's method, or None (docs/reliability.md).

        Starts, in order: the last iterate, zero sites, and the sites after 1, 2, 3, 5 and 8
        sweeps from zero at damping ``self.damping``, 0.8 and 0.9 (the fixed point
        lies in a small basin of Newton's method on some data sets); the first start from
        which Newton's method reaches a root with every cavity proper wins (O(n k^4) per
        step).  Then, for at most ``robustep.config(tep_fixed_point_max_sites=...)``
        points, the dogleg trust-region method from the first sweep's sites (at most 100
        evaluations of a dense 2n x 2n Jacobian).  Last, continuation from Gaussian EP
        with more label noise
        (:func:`robustep.tep.fixed_point.continue_from_gaussian_ep`).
        """
        n, k = Z.shape
        lam0, h0 = state.prior_lambda, state.prior_h
        first_sweep = []  # the sites after one sweep at self.damping, once computed

        def posterior(tau, nu):
            try:
                return LinearRankOnePosterior(Z, lam0, tau, nu)
            except np.linalg.LinAlgError:
                return None

        def starts():
            yield rank_one_sites(state, Z)
            yield np.zeros(n), np.zeros(n)
            for damping in dict.fromkeys((float(self.damping), 0.8, 0.9)):
                early, done = None, 0
                for sweeps in (1, 2, 3, 5, 8):
                    early, _ = linear_tep(
                        Z, y_pm, df=df, eps=eps, max_iter=sweeps - done, damping=damping,
                        state=early,
                    )  # fmt: skip
                    done = sweeps
                    sites = rank_one_sites(early, Z)
                    if not first_sweep:
                        first_sweep.append(sites)
                    yield sites

        found = None
        for tau0, nu0 in starts():
            found = solve_fixed_point(posterior, y_pm, df, eps, k, tau0, nu0, tol=self.tol)
            if found is not None:
                break
        if found is None and n <= get_config().tep_fixed_point_max_sites:
            # the trust-region method from the first sweep's sites: slower, reaches further
            found = solve_fixed_point(
                posterior, y_pm, df, eps, k, *first_sweep[0], tol=self.tol,
                max_newton=100, method="dogbox",
            )  # fmt: skip
        if found is None:
            path = continue_from_gaussian_ep(
                Z, y_pm, df, eps, posterior, damping=float(self.damping),
                tol=min(self.tol, 1e-8),
            )  # fmt: skip
            found = (path.tau, path.nu) if path.reached else None
        if found is None:
            return None
        return rank_one_state(lam0, h0, Z, found[0], found[1], df)

    def _posterior_and_evidence(self, state, info, Z, y_pm, eps):
        """(mu, Sigma, log evidence) of the state the fit keeps.

        The final state when its posterior is proper and (EP) its evidence finite;
        otherwise, for EP, the last sweep's state with every cavity proper
        (``info.last_proper``), and then zero sites (the prior, whose t-EP evidence is
        always finite).  (None, None, -inf) if no state has a proper posterior.
        """
        candidates = [state]
        if self.method == "ep":
            if info.last_proper is not None:
                candidates.append(rank_one_state(
                    state.prior_lambda, state.prior_h, Z, *info.last_proper, state.df
                ))  # fmt: skip
            zeros = np.zeros(Z.shape[0])
            candidates.append(
                rank_one_state(state.prior_lambda, state.prior_h, Z, zeros, zeros, state.df)
            )
        for candidate in candidates:
            try:
                mu, sigma = linear_posterior(candidate)
            except FloatingPointError:
                continue
            if not (np.all(np.isfinite(mu)) and np.all(np.isfinite(sigma))):
                continue
            if self.method == "adf":
                return mu, sigma, float(np.sum(_adf_log_normalisers(candidate, Z, y_pm, eps)))
            lml = linear_log_marginal_likelihood(candidate, Z, y_pm, eps)
            if np.isfinite(lml):
                if candidate is not state:
                    info.converged = False
                return mu, sigma, float(lml)
        return None, None, -np.inf

    def _predictive(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        Z = self._design(X)
        m = Z @ self.posterior_mean_
        s2 = np.einsum("ij,jk,ik->i", Z, self.posterior_scale_, Z)
        return m, np.maximum(s2, 1e-300)

    def decision_function(self, X):
        """Standardised predictive margin ``<mu, x> / sqrt(x^T Sigma x)``, shape (n,).

        Its sign is the sign of the posterior-mean score ``<coef_, x> + intercept_`` and it
        is monotone in ``predict_proba``.
        """
        m, s2 = self._predictive(X)
        return m / np.sqrt(s2)

    def predict_proba(self, X):
        """Predictive probabilities int p(y|x,w) St(w; mu, Sigma, df) dw, shape (n, 2)."""
        m, s2 = self._predictive(X)
        p1 = _noisy_step_proba(m, s2, float(self.df), float(self.label_noise))
        p1 = np.clip(np.nan_to_num(p1, nan=0.5), 0.0, 1.0)
        return np.column_stack([1.0 - p1, p1])

    def predict(self, X):
        """Class labels, shape (n,)."""
        check_is_fitted(self)
        return self.classes_[(self.decision_function(X) > 0).astype(int)]


def _adf_log_normalisers(state, Z, y_pm, eps):
    """ADF evidence: log normalisers of the sequential projections (n,).

    Recomputed from the stored ADF increments: before point j the posterior is the prior
    plus sites 0..j-1.
    """
    from robustep.tep.ep import _logdet_pd, student_t_from_scaled
    from robustep.tep.likelihood import tilted_normaliser

    lam, h = state.prior_lambda.copy(), state.prior_h.copy()
    ld0 = _logdet_pd(lam)
    out = np.empty(Z.shape[0])
    for j in range(Z.shape[0]):
        cav = student_t_from_scaled(lam, h, ld0, state.df)
        if cav is None:
            return np.array([-np.inf])
        v = Z[j] * y_pm[j]
        out[j] = tilted_normaliser(v @ cav[0], v @ cav[1] @ v, state.df, 1.0, eps)
        lam = lam + state.site_lambda[j]
        h = h + state.site_h[j]
    return out
