"""Leave-one-out (LOO) predictive densities and outlier scores from EP's cavities.

EP already holds, for every site i, an approximation of the posterior of f_i given all
the *other* observations: the cavity (Opper & Winther 2000, §5 "leave-one-out
estimator"; Vehtari, Mononen, Tolvanen, Sivula & Winther, JMLR 17(103), 2016, "EP-LOO":
the cavity distribution is EP's approximation of the LOO posterior p(f_i | y_-i)).  The
LOO predictive density then costs one one-dimensional integral per site,

    log p(y_i | y_-i) ≈ log ∫ p(y_i | f_i) q_-i(f_i) df_i,                    (L1)

which is the tilted normaliser ``likelihood.tilted_moments(y_i, m_-i, v_-i, power=1)``
(log Z).  No refit: O(n) after the fit.

Which cavity (docs/derivations/loo.md).  A Gaussian site t~_i(f_i) =
exp(nu~_i f_i - tau~_i f_i^2 / 2) approximates the *whole* likelihood term p(y_i | f_i)
whatever the fractional power eta of the EP run (power EP matches
p^eta q / t~^eta, so t~ stands in for p, Minka 2004; Jylänki et al. 2011 eqs. 14-15).
So the LOO approximation is

    q_-i(f_i) ∝ q(f_i) / t~_i(f_i):   precision 1/v_i - tau~_i,  shift m_i/v_i - nu~_i,   (L2)

for every eta.  The engine's ``EPResult.cavity_mean/var`` are the eta-cavities
q / t~_i^eta, which keep a fraction 1 - eta of site i (an optimistic "leave-(1-eta)-in"
density); they coincide with (L2) only at eta = 1.  (L2) can be improper for eta < 1
(tau~_i > 1/v_i) although the eta-cavity is proper; such sites fall back to the eta-cavity
(or, if that is improper too, to the posterior marginal) and :func:`loo_cavity` reports
them (``fallback``), with a warning.  Nothing here returns NaN.

Pure functions over arrays; the estimators call them at the end of ``fit`` and set
``loo_log_predictive_`` and ``outlier_scores_`` (see each estimator).  :func:`plot_loo`
draws the LOO predictive of a fitted estimator (duck-typed).  Nothing here imports an
estimator.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
from scipy import special

from robustep.likelihoods import predictive_mixture
from robustep.likelihoods.student_t import student_t_noise

__all__ = [
    "LOOResult",
    "loo_cavity",
    "loo_from_sites",
    "mixture_loo",
    "student_t_loo_predictive",
    "loo_predictive",
    "noise_variance",
    "loo_score",
    "clear_loo_attributes",
    "classifier_loo_attributes",
    "set_classifier_loo",
    "multiclass_loo",
    "multiclass_loo_attributes",
    "set_multiclass_loo",
    "one_vs_rest_loo_attributes",
    "set_one_vs_rest_loo",
    "set_regressor_loo",
    "regressor_loo",
    "process_classifier_loo",
    "set_process_classifier_loo",
    "plot_learning_curve",
    "plot_loo",
    "LOO_ATTRIBUTES",
]

#: Fitted attributes set by the estimators that support LOO (removed by the others).
LOO_ATTRIBUTES = (
    "loo_log_predictive_",
    "outlier_scores_",
    "loo_mean_",
    "loo_std_",
    "loo_interval_",
    "loo_approximate_",
)


@dataclasses.dataclass
class LOOResult:
    """LOO quantities per training point, all shape (n,).

    Attributes
    ----------
    log_predictive : log p(y_i | y_-i) by (L1).
    cavity_mean, cavity_var : the LOO cavity (L2) of f_i (or the eta-cavity where
        ``fallback``).
    fallback : bool, sites where (L2) was improper and the eta-cavity was used.
    """

    log_predictive: np.ndarray
    cavity_mean: np.ndarray
    cavity_var: np.ndarray
    fallback: np.ndarray


def loo_cavity(mean, var, site_precision, site_shift, eta_cavity=None):
    """The LOO cavity q / t~_i (L2) from the posterior marginals and the sites.

    mean, var : (n,) marginal posterior moments of f; site_precision, site_shift : (n,)
    tau~, nu~.  eta_cavity : optional ((n,) mean, (n,) var), EP's own (power-eta)
    cavities.  Where (L2) is improper (power EP with a large positive site, or a run that
    did not reach a valid EP state) the eta-cavity is used if it is proper, else the
    posterior marginal q(f_i) itself; both keep (part of) y_i and are optimistic.
    Returns (cavity_mean (n,), cavity_var (n,), fallback (n,) bool); never NaN.
    """
    mean = np.asarray(mean, dtype=float)
    var = np.asarray(var, dtype=float)
    tau = np.asarray(site_precision, dtype=float)
    nu = np.asarray(site_shift, dtype=float)
    with np.errstate(all="ignore"):
        q_prec = 1.0 / var
        cav_prec = q_prec - tau
        # relative floor: a cavity precision at rounding level of 1/v is not a distribution
        ok = (cav_prec > 1e-10 * q_prec) & np.isfinite(cav_prec)
        safe = np.where(ok, cav_prec, 1.0)
        cav_var = np.where(ok, 1.0 / safe, var)
        cav_mean = np.where(ok, (mean * q_prec - nu) / safe, mean)
    fallback = ~ok
    if np.any(fallback) and eta_cavity is not None:
        em, ev = (np.asarray(a, dtype=float) for a in eta_cavity)
        use = fallback & np.isfinite(em) & np.isfinite(ev) & (ev > 0)
        cav_mean = np.where(use, em, cav_mean)
        cav_var = np.where(use, ev, cav_var)
    return cav_mean, cav_var, fallback


def loo_from_sites(likelihood, y, mean, var, site_precision, site_shift, eta_cavity=None,
                   warn=True):  # fmt: skip
    """LOO log predictive densities (L1) at the cavities (L2); returns a :class:`LOOResult`.

    likelihood : a :class:`robustep.likelihoods.Likelihood` (its ``tilted_moments`` at
    power 1 gives log ∫ p(y_i|f) N(f | m_-i, v_-i) df); y : (n,) targets as the likelihood
    takes them (±1 labels, standardised regression targets); the rest as in
    :func:`loo_cavity`.  Warns (UserWarning) when some sites used the eta-cavity, unless
    ``warn=False`` (the estimators record them in ``loo_approximate_`` instead).
    """
    cm, cv, fallback = loo_cavity(mean, var, site_precision, site_shift, eta_cavity)
    log_pred = np.asarray(likelihood.tilted_moments(np.asarray(y, float), cm, cv, 1.0)[0])
    if warn and np.any(fallback):
        warnings.warn(
            f"{int(fallback.sum())} of {fallback.size} LOO cavities q / t~_i are improper "
            "(power EP with a large positive site, or EP did not converge); EP's own cavity "
            "or the posterior marginal is used there, which is optimistic (it keeps part of "
            "the left-out observation)",
            UserWarning,
            stacklevel=2,
        )
    return LOOResult(log_pred, cm, cv, fallback)


def loo_from_ep_result(result, likelihood, y):
    """:func:`loo_from_sites` for an :class:`robustep.ep.EPResult` (any power)."""
    return loo_from_sites(
        likelihood,
        y,
        result.mean,
        result.var,
        result.site_precision,
        result.site_shift,
        eta_cavity=(result.cavity_mean, result.cavity_var),
    )


def mixture_loo(log_predictive, weights):
    """LOO log predictive of a posterior mixture over hyperparameters (an EP3 grid).

    With posterior weights w_j = p(theta_j | y) on a grid, p(theta_j | y_-i) ∝
    w_j / p(y_i | y_-i, theta_j), hence

        p(y_i | y_-i) = 1 / sum_j w_j / p(y_i | y_-i, theta_j)                   (L3)

    (the same identity as importance-sampling LOO, exact for a discrete posterior).
    log_predictive : (J, n) per-component values of (L1); weights : (J,) summing to 1.
    Returns (log p(y_i | y_-i) (n,), LOO weights (J, n), each column summing to 1).
    """
    lp = np.atleast_2d(np.asarray(log_predictive, dtype=float))
    logw = np.log(np.maximum(np.asarray(weights, dtype=float), 1e-300))[:, None]
    a = logw - lp  # log(w_j / p_j)
    mx = np.max(a, axis=0)
    log_sum = mx + np.log(np.sum(np.exp(a - mx), axis=0))
    return -log_sum, np.exp(a - log_sum)


# ------------------------------------------------------------------ Student-t predictive
def student_t_loo_predictive(y, cavity_means, cavity_vars, dfs, scales, weights=None,
                             coverage=0.95):  # fmt: skip
    """LOO predictive of the observation y_i = f_i + eps_i, eps ~ Student-t(nu, sigma).

    :func:`loo_predictive` with the likelihoods
    :func:`robustep.likelihoods.student_t.student_t_noise` (nu, sigma) (``inf`` =
    Gaussian noise); dfs, scales : (J,).
    """
    J = np.atleast_2d(np.asarray(cavity_means, dtype=float)).shape[0]
    dfs = np.broadcast_to(np.asarray(dfs, dtype=float), (J,))
    scales = np.broadcast_to(np.asarray(scales, dtype=float), (J,))
    liks = [student_t_noise(dfs[j], scales[j]) for j in range(J)]
    return loo_predictive(y, cavity_means, cavity_vars, liks, weights, coverage)


def noise_variance(likelihood) -> float:
    """Var eps of the additive noise of a regression likelihood (``inf`` when it has none,
    NaN when unknown): sigma^2 nu / (nu - 2) (Student-t, nu > 2), the Gaussian's
    variance, 2 b^2 (Laplace)."""
    from robustep.likelihoods import Gaussian, Laplace, StudentT

    if isinstance(likelihood, StudentT):
        nu = float(likelihood.df)
        return float(likelihood.scale) ** 2 * (nu / (nu - 2.0)) if nu > 2 else np.inf
    if isinstance(likelihood, Gaussian):
        return float(likelihood.noise_variance)
    if isinstance(likelihood, Laplace):
        return 2.0 * float(likelihood.scale) ** 2
    return np.nan


def loo_predictive(y, cavity_means, cavity_vars, likelihoods, weights=None, coverage=0.95):
    """LOO predictive of the observation y_i under p(y_i | f_i), f_i ~ its LOO cavity.

    y : (n,); cavity_means, cavity_vars : (J, n) LOO cavities of J mixture components
    (J = 1 for one set of hyperparameters; an EP3 grid otherwise); likelihoods : J
    regression likelihoods (``predictive_cdf``, ``predictive_quantiles``); weights :
    (J, n) LOO mixture weights (from :func:`mixture_loo`; default: J = 1).  All in
    standardised units.  Returns a dict of (n,) arrays:

    * ``mean``: the LOO predictive mean sum_j w_j m_j (the location; for a Student-t a
      mean exists for nu > 1);
    * ``std``: its standard deviation with the noise variance of each likelihood
      (:func:`noise_variance`): ``inf`` when some component has none (Student-t nu <= 2);
    * ``z``: the standardised LOO residual Phi^-1(F_-i(y_i)), the normal score of the LOO
      probability integral transform: (y_i - m_-i) / sd for Gaussian noise, finite for
      every nu, signed, N(0, 1) under the model;
    * ``lower``, ``upper``: the central ``coverage`` LOO predictive interval of y_i.
    """
    y = np.asarray(y, dtype=float)
    M = np.atleast_2d(np.asarray(cavity_means, dtype=float))
    V = np.atleast_2d(np.asarray(cavity_vars, dtype=float))
    W = np.ones((1, y.size)) if weights is None else np.atleast_2d(np.asarray(weights, float))
    mixture = predictive_mixture(list(likelihoods), M, V, W)
    F, G = mixture.cdf(y), mixture.cdf(y, upper=True)
    # the normal score from the smaller tail, accurate far out
    z = np.where(F < G, special.ndtri(np.maximum(F, 1e-300)), -special.ndtri(np.maximum(G, 1e-300)))
    mean = np.sum(W * M, axis=0)
    noise = np.array([noise_variance(lik) for lik in likelihoods], float)
    if np.all(np.isfinite(noise)):
        second = np.sum(W * (V + noise[:, None] + M**2), axis=0)
        std = np.sqrt(np.maximum(second - mean**2, 0.0))
    else:
        std = np.full(y.shape, np.inf if np.all(~np.isnan(noise)) else np.nan)
    # the interval from the mixture's quantiles (safeguarded Newton), all sites at once
    half = 0.5 * (1.0 - coverage)
    bounds = mixture.quantiles([half, 1.0 - half]).T
    return {"mean": mean, "std": std, "z": z, "lower": bounds[0], "upper": bounds[1]}


# ------------------------------------------------------------------ estimator helpers
def clear_loo_attributes(estimator):
    """Remove LOO attributes left by an earlier fit (methods without LOO do not set them)."""
    for name in LOO_ATTRIBUTES:
        if name in vars(estimator):
            delattr(estimator, name)


def _is_ep_result(res):
    return all(
        hasattr(res, name)
        for name in ("site_precision", "site_shift", "cavity_mean", "cavity_var", "mean", "var")
    )


def _unavailable(estimator, err):
    """Warn that the LOO diagnostics could not be computed (the fit itself stands)."""
    clear_loo_attributes(estimator)
    _warn_unavailable(type(estimator).__name__, err, stacklevel=4)


def _loo_attributes(log_predictive, approximate):
    """The LOO attributes by name: ``loo_log_predictive_`` (n,), ``outlier_scores_`` (n,)
    (its negative) and ``loo_approximate_`` (n,) bool."""
    return {
        "loo_log_predictive_": log_predictive,
        "outlier_scores_": -log_predictive,
        "loo_approximate_": approximate,
    }


def _warn_unavailable(name, err, stacklevel=3):
    """Warn that the LOO diagnostics could not be computed (the fit itself stands)."""
    warnings.warn(
        f"{name}: leave-one-out diagnostics are unavailable for this fit "
        f"({type(err).__name__}: {err}); the fitted model is unaffected",
        UserWarning,
        stacklevel=stacklevel,
    )
    return {}


def _attributes_or_warning(compute, estimator_name, require_finite=False):
    """The LOO attributes of ``compute()`` (a LOOResult), or ``{}`` with a UserWarning
    where it fails (or, with ``require_finite``, gives non-finite values)."""
    try:
        loo = compute()
    except (ValueError, ArithmeticError, np.linalg.LinAlgError) as err:
        return _warn_unavailable(estimator_name, err, stacklevel=5)
    if require_finite and not np.all(np.isfinite(loo.log_predictive)):
        return _warn_unavailable(estimator_name, ValueError("non-finite LOO values"), 5)
    return _loo_attributes(loo.log_predictive, loo.fallback)


def _set_deprecated(old, attributes_of, estimator, *args, **kwargs):
    """A deprecated ``set_*_loo``: warn, then set ``attributes_of(*args, **kwargs)`` on
    ``estimator`` (after removing earlier LOO attributes)."""
    warnings.warn(
        f"robustep.diagnostics.{old} is deprecated; use {attributes_of.__name__}, which "
        "returns the attributes by name instead of setting them on the estimator",
        DeprecationWarning,
        stacklevel=3,
    )
    clear_loo_attributes(estimator)
    for name, value in attributes_of(*args, **kwargs).items():
        setattr(estimator, name, value)


def classifier_loo_attributes(result, likelihood, y_pm, *, estimator_name="GPClassifier"):
    """The LOO attributes of a binary GP classifier, by name (empty without LOO values).

    ``result``: the fit's inference result; only an EP result (sites and cavities) gives
    LOO values, any other (Laplace) gives ``{}``.  y_pm : (n,) labels ±1.
    ``outlier_scores_ = -loo_log_predictive_``: the LOO surprise of the observed label
    (log 2 ≈ 0.69 for a coin flip; > 3 means a LOO probability below 0.05).  Where the
    values cannot be computed, a UserWarning names ``estimator_name`` and ``{}`` is
    returned.
    """
    if not _is_ep_result(result):
        return {}
    return _attributes_or_warning(
        lambda: loo_from_sites(
            likelihood, y_pm, result.mean, result.var, result.site_precision,
            result.site_shift, eta_cavity=(result.cavity_mean, result.cavity_var), warn=False,
        ),
        estimator_name,
    )  # fmt: skip


def set_classifier_loo(estimator, result, likelihood, y_pm):
    """Deprecated: :func:`classifier_loo_attributes` set on ``estimator``."""
    _set_deprecated("set_classifier_loo", classifier_loo_attributes, estimator, result,
                    likelihood, y_pm, estimator_name=type(estimator).__name__)  # fmt: skip


def multiclass_loo(likelihood, y, mean, cov, site_precision, site_shift):
    """LOO log predictive probabilities of a multi-class EP fit from its cavities.

    The multi-class analogue of (L1)-(L2): the cavity of the c-dimensional site i,
    q_-i(f_i) ∝ q(f_i) / t~_i(f_i) (precision cov_i^-1 - Π~_i, shift cov_i^-1 mean_i - ν~_i),
    is EP's approximation of p(f_i | y_-i), and

        log p(y_i | y_-i) ≈ log ∫ p(y_i | f_i) q_-i(f_i) df_i,

    the model's own predictive class probability (``likelihood.predictive_probabilities``,
    the same integral as ``predict_proba``) evaluated at the cavity instead of a test
    point's latent predictive.  Nested EP (Riihimäki et al. 2013) has power 1, so this is
    the cavity its outer EP used.

    likelihood : MultinomialProbit or NoisyMultinomialProbit (``predictive_probabilities``).
    y : (n,) int class indices.  mean (n, c), cov (n, c, c): posterior marginals.
    site_precision (n, c, c), site_shift (n, c): the outer sites.

    Returns :class:`LOOResult` (``log_predictive`` (n,); ``cavity_mean`` (n, c) and
    ``cavity_var`` (n, c, c), the cavity covariances; ``fallback`` (n,) bool where the
    cavity was not positive definite and the posterior marginal was used instead, which
    is optimistic).
    """
    from robustep.ep.multiclass import _cavities

    y = np.asarray(y, dtype=int)
    mean = np.asarray(mean, dtype=float)
    cov = np.asarray(cov, dtype=float)
    cav_m, cav_S, ok = _cavities(mean, cov, np.asarray(site_precision, float),
                                 np.asarray(site_shift, float))  # fmt: skip
    cav_m = np.where(ok[:, None], cav_m, mean)
    cav_S = np.where(ok[:, None, None], cav_S, cov)
    probs = likelihood.predictive_probabilities(cav_m, cav_S)
    with np.errstate(divide="ignore"):
        log_p = np.log(probs[np.arange(y.size), y])
    # a probability that underflows is still a number: the smallest positive double
    log_p = np.maximum(log_p, np.log(np.finfo(float).tiny))
    return LOOResult(log_p, cav_m, cav_S, ~ok)


def multiclass_loo_attributes(result, likelihood, y_index, *, estimator_name="GPClassifier"):
    """The LOO attributes of a multinomial (nested-EP) GPClassifier, by name.

    ``loo_log_predictive_`` (n,) = log p(y_i | y_-i) of the observed class
    (:func:`multiclass_loo`), ``outlier_scores_`` = its negative (log c for a uniform
    guess over c classes), ``loo_approximate_`` (n,) bool (posterior marginal used).
    ``{}`` with a UserWarning where they cannot be computed.
    """
    return _attributes_or_warning(
        lambda: multiclass_loo(
            likelihood, y_index, result.mean, result.cov, result.site_precision,
            result.site_shift,
        ),
        estimator_name,
        require_finite=True,
    )  # fmt: skip


def set_multiclass_loo(estimator, result, likelihood, y_index):
    """Deprecated: :func:`multiclass_loo_attributes` set on ``estimator``."""
    _set_deprecated("set_multiclass_loo", multiclass_loo_attributes, estimator, result,
                    likelihood, y_index, estimator_name=type(estimator).__name__)  # fmt: skip


def one_vs_rest_loo_attributes(estimators, y_index):
    """The LOO attributes of a one-vs-rest GPClassifier from its c binary fits', by name.

    Binary fit k gives p_k,i = p(class k | y_-i) from its own cavity (its LOO probability
    of its observed binary label, complemented where that label is "rest"); these are
    normalised over k as ``predict_proba`` normalises the binary probabilities, and
    ``loo_log_predictive_`` is the log of the observed class's share.  ``{}`` when any
    binary fit has no LOO values (e.g. method="laplace").
    """
    values = [getattr(est, "loo_log_predictive_", None) for est in estimators]
    if any(v is None for v in values):
        return {}
    rows = np.arange(len(y_index))
    P = np.empty((rows.size, len(estimators)))
    for k, lp in enumerate(values):
        p_observed = np.exp(np.asarray(lp, dtype=float))
        P[:, k] = np.where(y_index == k, p_observed, 1.0 - p_observed)
    total = P.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(total > 0, P[rows, y_index] / total, 1.0 / P.shape[1])
    log_p = np.log(np.maximum(share, np.finfo(float).tiny))
    approximate = np.any(
        [np.asarray(est.loo_approximate_, dtype=bool) for est in estimators], axis=0
    )
    return _loo_attributes(log_p, approximate)


def set_one_vs_rest_loo(estimator, estimators, y_index):
    """Deprecated: :func:`one_vs_rest_loo_attributes` set on ``estimator``."""
    _set_deprecated("set_one_vs_rest_loo", one_vs_rest_loo_attributes, estimator, estimators,
                    y_index)  # fmt: skip


def regressor_loo(components, weights, y, y_mean=0.0, y_std=1.0):
    """The LOO diagnostics of a GP regressor, in target units (a dict; raises ValueError,
    ArithmeticError or LinAlgError when they cannot be computed).

    components : list of (result, likelihood), one per set of hyperparameters (one, or
    an EP3 grid), each result an EP result (or any object with ``mean``, ``var``,
    ``site_precision``, ``site_shift``; cavities from (L2)) and the likelihood of a new
    observation (its tilted normaliser gives (L1), its predictive the interval).
    weights : (J,) posterior weights of the components (mixed by (L3)).
    y : (n,) standardised targets; y_mean, y_std : the standardisation.
    Keys: ``loo_log_predictive_`` (n,) (densities of y, so shifted by -log y_std),
    ``loo_mean_``, ``loo_std_`` (``inf`` without a noise variance, e.g. Student-t
    nu <= 2), ``loo_interval_`` ((n,), (n,)) central 95% LOO interval of y_i,
    ``outlier_scores_`` (n,) the standardised LOO residuals Phi^-1(F_-i(y_i)) (unitless),
    ``loo_approximate_`` (n,) bool.
    """
    lps, ms, vs, liks, approx = [], [], [], [], []
    for res, lik in components:
        eta_cav = None
        if hasattr(res, "cavity_mean"):
            eta_cav = (res.cavity_mean, res.cavity_var)
        loo = loo_from_sites(lik, y, res.mean, res.var, res.site_precision, res.site_shift,
                             eta_cavity=eta_cav, warn=False)  # fmt: skip
        approx.append(loo.fallback)
        lps.append(loo.log_predictive)
        ms.append(loo.cavity_mean)
        vs.append(loo.cavity_var)
        liks.append(lik)
    log_pred, loo_w = mixture_loo(np.array(lps), weights)
    pred = loo_predictive(y, np.array(ms), np.array(vs), liks, loo_w)
    return {
        "loo_log_predictive_": log_pred - np.log(y_std),
        "loo_mean_": pred["mean"] * y_std + y_mean,
        "loo_std_": pred["std"] * y_std,
        "loo_interval_": (pred["lower"] * y_std + y_mean, pred["upper"] * y_std + y_mean),
        "outlier_scores_": pred["z"],
        "loo_approximate_": np.any(np.array(approx), axis=0),
    }


def set_regressor_loo(estimator, components, weights, y, y_mean=0.0, y_std=1.0):
    """Set the attributes of :func:`regressor_loo` on ``estimator`` (warns and leaves them
    unset when they cannot be computed).

    components : list of (result, likelihood), or of (result, likelihood, df, scale) whose
    df and scale are ignored (the likelihood holds them).
    """
    clear_loo_attributes(estimator)
    pairs = [(c[0], c[1]) for c in components]
    try:
        values = regressor_loo(pairs, weights, y, y_mean, y_std)
    except (ValueError, ArithmeticError, np.linalg.LinAlgError) as err:
        return _unavailable(estimator, err)
    for name, value in values.items():
        setattr(estimator, name, value)


def process_classifier_loo(post, tau, nu, y_pm, df, eps, *, warn=True, return_fallback=False):
    """LOO log p(y_i | y_-i) (n,) of the Student-t process classifier from t-EP's cavities.

    The t-EP posterior is p(f) ⊗_t prod_j t~_j (Futami et al. 2017 eq. 31, the
    t-product adds natural parameters), so the t-cavity q ⊘_t t~_i = p(f) ⊗_t
    prod_{j != i} t~_j is t-EP's approximation of the posterior given y_-i with the other
    sites held fixed — the same statement as (L2) for Gaussian EP, and the same density as
    the predictive of a refit on y_-i (``process_predict_latent``) if its sites did not
    move.  Its marginal of f_i is St(m_-i, s_-i^2, df) with the Gaussian-form cavity
    (precision 1/Sigma_G,ii - tau_i, shift mu_i/Sigma_G,ii - nu_i) and the scale factor
    |B_-i|^{-1/df}, |B_-i| = |B| (1 - tau_i Sigma_G,ii) (docs/derivations/tep.md §6, §9).
    Then p(y_i | y_-i) ≈ eps + (1 - 2 eps) T_df(y_i m_-i / s_-i) — the ordinary (not
    escort) normaliser of the noisy step under that Student-t (eq. 43).  df = inf gives
    Gaussian EP with the step likelihood, where it is (L1).

    post : :class:`robustep.tep.process.ProcessPosterior`; tau, nu : (n,) scaled sites;
    y_pm : (n,) ±1.  Sites whose cavity is improper use the posterior marginal instead
    (optimistic), with a warning.
    """
    from robustep.tep.likelihood import tilted_normaliser

    d = post.d
    with np.errstate(all="ignore"):
        cav_prec = 1.0 / d - tau
        ok = cav_prec > 1e-10 / d
        s2c = np.where(ok, 1.0 / np.where(ok, cav_prec, 1.0), d)
        mc = np.where(ok, s2c * (post.mu / d - nu), post.mu)
        s2t = s2c
        if not np.isinf(df):
            s2t = np.exp(-(post.logdet_b + np.log(d / s2c)) / df) * s2c
    if warn and not np.all(ok):
        warnings.warn(
            f"{int((~ok).sum())} t-EP cavities are improper; the posterior marginal is used "
            "there (optimistic LOO values)",
            UserWarning,
            stacklevel=2,
        )
    lp = tilted_normaliser(mc, s2t, df, np.asarray(y_pm, float), eps)
    return (lp, ~np.broadcast_to(ok, np.shape(lp))) if return_fallback else lp


def set_process_classifier_loo(estimator, post, tau, nu, y_pm, df, eps):
    """Set ``loo_log_predictive_`` and ``outlier_scores_`` (= -loo_log_predictive_) on a
    Student-t process classifier (:func:`process_classifier_loo`)."""
    clear_loo_attributes(estimator)
    try:
        with np.errstate(all="ignore"):
            lp, approx = process_classifier_loo(
                post, tau, nu, y_pm, df, eps, warn=False, return_fallback=True
            )
            lp = np.asarray(lp, dtype=float)
    except (ValueError, ArithmeticError, np.linalg.LinAlgError) as err:
        return _unavailable(estimator, err)
    if not np.all(np.isfinite(lp)):
        return _unavailable(estimator, ValueError("non-finite LOO values"))
    estimator.loo_log_predictive_ = lp
    estimator.outlier_scores_ = -lp
    estimator.loo_approximate_ = np.asarray(approx, dtype=bool)


def loo_score(estimator, supported):
    """Mean of ``estimator.loo_log_predictive_``; a clear error when the fit has none.

    supported : text naming the methods that provide LOO (for the error message).
    """
    from sklearn.utils.validation import check_is_fitted

    check_is_fitted(estimator)
    values = getattr(estimator, "loo_log_predictive_", None)
    if values is None:
        method = getattr(estimator, "method_used_", getattr(estimator, "method", None))
        raise AttributeError(
            f"{type(estimator).__name__} fitted with method={method!r} has no leave-one-out "
            f"predictive densities: they come from EP's cavities, available for {supported}. "
            "Refit with one of those methods."
        )
    approx = getattr(estimator, "loo_approximate_", None)
    if approx is not None and np.any(approx):
        warnings.warn(
            f"{int(np.sum(approx))} of {np.size(approx)} leave-one-out values are approximate: "
            "their cavity q / t~_i is improper (power EP with a large site, or EP did not "
            "converge), so EP's own cavity or the posterior marginal was used there, which is "
            "optimistic; `loo_approximate_` marks them",
            UserWarning,
            stacklevel=3,
        )
    return float(np.mean(values))


def plot_loo(estimator, ax=None, threshold=None):
    """Plot the LOO predictive of a fitted estimator against its observations.

    Regressor (has ``loo_mean_``): observed y_i against the LOO predictive location
    m_-i with the central 95% LOO interval of y_i as error bars and the diagonal y = m;
    flagged (red): |standardised LOO residual| > ``threshold`` (default 3) or a negative
    site precision (``negative_precision_``).  Classifier: the LOO probability of the
    observed label p(y_i | y_-i) per point (sorted), flagged below ``threshold``
    (default 0.05).  Works with any matplotlib backend (Agg included).
    Returns the matplotlib Axes.
    """
    if ax is None:
        from robustep._optional import require

        plt = require("matplotlib.pyplot", "plot_loo")
        _, ax = plt.subplots(figsize=(5.0, 4.0))
    if getattr(estimator, "loo_log_predictive_", None) is None:
        raise AttributeError(
            f"{type(estimator).__name__} has no LOO diagnostics (loo_log_predictive_): fit "
            "it with an EP method first"
        )
    if hasattr(estimator, "loo_mean_"):
        threshold = 3.0 if threshold is None else float(threshold)
        y = np.asarray(estimator.y_train_, dtype=float)
        m = np.asarray(estimator.loo_mean_, dtype=float)
        lo, hi = np.asarray(estimator.loo_interval_[0]), np.asarray(estimator.loo_interval_[1])
        z = np.asarray(estimator.outlier_scores_, dtype=float)
        flag = np.abs(z) > threshold
        neg = getattr(estimator, "negative_precision_", None)
        if neg is not None:
            flag = flag | np.asarray(neg, dtype=bool)
        yerr = np.vstack([np.maximum(m - lo, 0.0), np.maximum(hi - m, 0.0)])
        ax.errorbar(m[~flag], y[~flag], xerr=yerr[:, ~flag], fmt="o", ms=3, lw=0.8,
                    color="tab:blue", alpha=0.7, label="observations")  # fmt: skip
        if np.any(flag):
            ax.errorbar(m[flag], y[flag], xerr=yerr[:, flag], fmt="o", ms=4, lw=0.8,
                        color="tab:red", label="flagged")  # fmt: skip
        span = [float(np.min([m.min(), y.min()])), float(np.max([m.max(), y.max()]))]
        ax.plot(span, span, color="0.5", lw=0.8, ls="--")
        ax.set_xlabel("LOO predictive location m_-i (95% interval of y_i)")
        ax.set_ylabel("observed y_i")
        ax.set_title(f"LOO: mean log p(y_i | y_-i) = {np.mean(estimator.loo_log_predictive_):.3f}")
    else:
        threshold = 0.05 if threshold is None else float(threshold)
        p = np.exp(np.asarray(estimator.loo_log_predictive_, dtype=float))
        order = np.argsort(p)
        flag = p[order] < threshold
        rank = np.arange(p.size)
        ax.scatter(rank[~flag], p[order][~flag], s=10, color="tab:blue", label="observations")
        if np.any(flag):
            ax.scatter(rank[flag], p[order][flag], s=14, color="tab:red", label="flagged")
        n_classes = len(getattr(estimator, "classes_", (0, 1)))
        ax.axhline(1.0 / max(n_classes, 2), color="0.5", lw=0.8, ls="--")  # chance level
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("training points, sorted")
        ax.set_ylabel("LOO probability of the observed label")
        ax.set_title(f"LOO: mean log p(y_i | y_-i) = {np.mean(estimator.loo_log_predictive_):.3f}")
    ax.legend(loc="best", fontsize="small")
    return ax


def plot_learning_curve(estimator, ax=None):
    """Plot the stochastic learner's epochs of a fitted estimator (its ``history_``).

    The epoch's mean energy estimate per training point (the power-EP energy of
    docs/derivations/stochastic_ep.md, E6/E7, higher is better) against the epoch, and,
    when the learner held points out, the held-out log loss (classifiers) or log
    predictive density (regressors) on a second y axis; the epoch the fit kept is marked.
    Works with any matplotlib backend (Agg included).  Returns the matplotlib Axes of the
    energy.
    """
    history = getattr(estimator, "history_", None)
    if not history:
        raise AttributeError(
            f"{type(estimator).__name__} has no learning curve (history_): fit it with "
            "inducing_points and learner='stochastic' (or a StochasticLearner) first"
        )
    if ax is None:
        from robustep._optional import require

        plt = require("matplotlib.pyplot", "plot_learning_curve")
        _, ax = plt.subplots(figsize=(5.0, 4.0))
    epochs = np.array([h["epoch"] for h in history])
    n = max(int(getattr(estimator.optimizer_result_, "n_train", 0)), 1)
    energy = np.array([h["energy"] for h in history]) / n
    ax.plot(epochs, energy, "o-", ms=3, color="tab:blue", label="energy estimate per point")
    ax.set_xlabel("epoch")
    ax.set_ylabel("energy estimate per training point", color="tab:blue")
    kept = getattr(getattr(estimator, "optimizer_result_", None), "best_epoch", None)
    for key, label in (
        ("validation_log_loss", "held-out log loss"),
        ("validation_log_density", "held-out log predictive density"),
    ):
        if key in history[0]:
            other = ax.twinx()
            values = [h[key] for h in history]
            other.plot(epochs, values, "s-", ms=3, color="tab:orange", label=label)
            other.set_ylabel(label, color="tab:orange")
            break
    if kept:
        ax.axvline(kept, color="0.5", lw=0.8, ls="--")
    stopped = getattr(getattr(estimator, "optimizer_result_", None), "stopped", "")
    ax.set_title(f"stochastic learner: {len(history)} epochs ({stopped})")
    return ax
