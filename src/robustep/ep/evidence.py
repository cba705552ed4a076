"""The EP approximation of the log marginal likelihood and its gradients.

Derivation in docs/derivations/ep_evidence.md.  With site parameters
lambda~ = (nu~, tau~), reference marginals lambda_s = (nu_s, tau_s) and cavities
lambda_- = lambda_s - eta lambda~ (Jylänki et al. 2011 eq. 14),

    L(lambda~; lambda_s) = -1/2 log|I + K T~| + 1/2 nu~^T mu
        + (1/eta) sum_i [ log Z^_i + 1/2 log(tau_si / tau_-i)
                          + nu_-i^2 / (2 tau_-i) - nu_si^2 / (2 tau_si) ],

where Z^_i = int p(y_i|f)^eta N(f | cavity_i) df.  With lambda_s equal to the
marginals of q this is log Z_EP (their eq. 16; note the sign of the
nu~^T mu term, which the paper prints as negative: the Gaussian-likelihood
test in tests/ep/test_ep_engine.py confirms the positive sign).  For fixed
lambda_s, L is convex in lambda~ (a sum of log-partition functions of
affine functions of lambda~): the double loop minimises it in the inner loop
and updates lambda_s to q's marginals in the outer loop.
"""

from __future__ import annotations

import numpy as np


def local_terms(log_Z_tilted, cav_precision, cav_shift, ref_precision, ref_shift, power):
    """Per-site terms (1/eta)[log Z^ + A_g(cavity) - A_g(reference)] - constants, shape (n,).

    A_g(nu, tau) = 1/2 log(2 pi / tau) + nu^2 / (2 tau) is the log-partition
    function of an unnormalised Gaussian in natural parameters.
    """
    return (
        log_Z_tilted
        + 0.5 * np.log(ref_precision / cav_precision)
        + 0.5 * cav_shift**2 / cav_precision
        - 0.5 * ref_shift**2 / ref_precision
    ) / power


def prior_term(posterior) -> float:
    """log int N(f | 0, K) prod_i exp(nu~_i f_i - tau~_i f_i^2 / 2) df."""
    return posterior.prior_term()


def ep_objective(
    posterior, log_Z_tilted, cav_precision, cav_shift, ref_precision, ref_shift, power
):
    """L(lambda~; lambda_s) above (a float); equals log Z_EP when lambda_s = q's marginals."""
    return prior_term(posterior) + float(
        np.sum(local_terms(log_Z_tilted, cav_precision, cav_shift, ref_precision, ref_shift, power))
    )


def log_Z_gradient(result, K_gradient, likelihood, y):
    """Gradient of ``result.log_Z`` w.r.t. kernel and likelihood log-hyperparameters.

    Valid at a converged EP fixed point, where log Z_EP is stationary in the site
    parameters, so only explicit dependencies count (Seeger 2005; Opper & Winther 2005):

        d log Z / d theta_k = 1/2 alpha^T dK_k alpha - 1/2 tr(R dK_k),
        R = (K + T~^-1)^-1,  mu = K alpha,
        d log Z / d theta_lik = (1/eta) sum_i d log Z^_i / d theta_lik.

    Parameters
    ----------
    result : EPResult (converged).
    K_gradient : derivatives of K w.r.t. the p log kernel hyperparameters in the layout
        of the posterior's :meth:`~robustep.posterior.SitePosterior.kernel_gradient_contraction`
        (dense: (n, n, p) as returned by ``kernel(X, eval_gradient=True)[1]``, or a lazy
        :class:`robustep.kernels.gradient.RBFKernelGradient`).
    likelihood : the likelihood used in the run.
    y : (n,) targets.

    Returns
    -------
    grad_kernel : (p,)
    grad_likelihood : (q,) in the order of ``likelihood.hyperparameter_names``.
    """
    grad_kernel = result.posterior.kernel_gradient_contraction(K_gradient)
    return grad_kernel, likelihood_gradient(result, likelihood, y)


def likelihood_gradient(result, likelihood, y):
    """d log Z_EP / d theta_lik = (1/eta) sum_i d log Z^_i / d theta_lik, shape (q,).

    At a converged fixed point only the explicit dependence counts (any prior: dense or
    sparse); sites with an invalid cavity are left out.  Order of
    ``likelihood.hyperparameter_names``; (0,) when the likelihood has none.
    """
    if not likelihood.hyperparameter_names:
        return np.zeros(0)
    valid = np.isfinite(result.cavity_var)
    g = likelihood.tilted_log_Z_gradient(
        np.asarray(y, dtype=float)[valid],
        result.cavity_mean[valid],
        result.cavity_var[valid],
        result.power,
    )
    return np.sum(g, axis=0) / result.power
