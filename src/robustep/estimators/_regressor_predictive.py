"""Predictions and leave-one-out glue of a fitted regressor (a RegressorFit).

The predictive of a new observation y at x is the likelihood convolved with the latent
q(f* | D) (Jylänki et al. 2011, eq. 3), a :class:`robustep.likelihoods.PredictiveMixture`
over the EP3 grid or the MCMC draws; its quantiles, CDF and density are the likelihood's
``predictive_*`` methods.  Everything here is in standardised units.
"""

from __future__ import annotations

import numpy as np

from robustep.estimators import _device
from robustep.likelihoods import predictive_mixture
from robustep.likelihoods.student_t import student_t_noise

#: posterior draws used by MCMC predictions
MCMC_DRAWS = 200


def student_t_gaussian_quantiles(q, means, variances, dfs, scales, weights=None, tol=1e-10):
    """Quantiles of the predictive y = f + eps, f Gaussian, eps Student-t (a mixture of such).

    q : (Q,) probabilities in [0, 1]; means, variances : (J, m) latent moments of J mixture
    components at m test points; dfs, scales : (J,) Student-t nu (``inf`` = Gaussian) and
    sigma; weights : (J,) mixture weights (default equal).  Returns (m, Q).

    :meth:`robustep.likelihoods.PredictiveMixture.quantiles` of the components'
    :func:`robustep.likelihoods.student_t.student_t_noise` likelihoods; q = 0 and q = 1 give
    -inf and +inf.
    """
    means = np.atleast_2d(np.asarray(means, float))
    J = means.shape[0]
    dfs = np.broadcast_to(np.asarray(dfs, float), (J,))
    scales = np.broadcast_to(np.asarray(scales, float), (J,))
    liks = [student_t_noise(nu, s) for nu, s in zip(dfs, scales, strict=True)]
    return predictive_mixture(liks, means, variances, weights).quantiles(q, tol=tol)


def component_moments(fit, X, X_train, like=None):
    """Per-component latent (means (J, m), vars (J, m)) at X (m, d)."""
    means, vars_ = [], []
    for c in fit.components:
        k = c.kernel
        if fit.mcmc is not None:
            m, v = c.res.predict(X, max_draws=MCMC_DRAWS)
        elif fit.inducing_points is not None:  # sparse: row batches
            from robustep.estimators import _sparse

            m, v = _sparse.latent_moments(c.res, k, fit.inducing_points, X)
        elif like is not None:  # K(X, X_train) and the solves on the device
            m, v = _device.predict_latent(k, X, X_train, c.res, like)
        else:
            m, v = c.res.predict(k(X, X_train), k.diag(X))
        means.append(np.asarray(m, float))
        vars_.append(np.maximum(np.asarray(v, float), 1e-12))
    return np.array(means), np.array(vars_)


def predictive(fit, core, X, X_train, like=None):
    """The predictive of y at X (m, d), a :class:`robustep.likelihoods.PredictiveMixture`
    over the components (EP3 grid) or the MCMC draws."""
    if fit.mcmc is not None:
        mc = fit.mcmc
        M, V, idx = mc.predictive_components(X, max_draws=MCMC_DRAWS)
        liks = [student_t_noise(nu, s) for nu, s in zip(mc.df[idx], mc.scale[idx], strict=True)]
        return predictive_mixture(liks, M, V, np.full(M.shape[0], 1.0 / M.shape[0]))
    M, V = component_moments(fit, X, X_train, like)
    liks = [core.observation_likelihood(c.likelihood) for c in fit.components]
    return predictive_mixture(liks, M, V, fit.weights)


def cavity_moments(res, site_precision, site_shift):
    """Cavity (leave-one-out) moments q(f_i) / t~_i(f_i) (§7): (mean (n,), var (n,)),
    NaN where the cavity is improper."""
    q_prec = 1.0 / np.maximum(res.var, 1e-300)
    cav_prec = q_prec - site_precision
    ok = cav_prec > 0
    cv = np.where(ok, 1.0 / np.where(ok, cav_prec, 1.0), np.nan)
    cm = np.where(ok, (res.mean * q_prec - site_shift) * np.where(ok, cv, 0.0), np.nan)
    return cm, cv


def loo_components(fit, core):
    """[(result, likelihood of a new observation)], one per component, for
    :func:`robustep.diagnostics.regressor_loo`."""
    return [(c.res, core.observation_likelihood(c.likelihood)) for c in fit.components]
