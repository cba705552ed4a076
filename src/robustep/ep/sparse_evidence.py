"""Gradient of the FITC-EP evidence (docs/derivations/sparse.md §5).

At a converged EP fixed point log Z_EP is stationary in the sites, so its total
derivative is the explicit one (Seeger 2005; as :func:`robustep.ep.log_Z_gradient` for the
dense prior).  With the FITC prior the kernel enters through K_mm, K_nm and diag(K_nn);
:meth:`robustep.posterior.sparse.FITCSitePosterior.gradient_weights` gives the weights of
their derivatives (eq. S14) and :mod:`robustep.kernels.inducing` contracts them with the
kernel's derivatives in row chunks, O(n m (m + p d)) time and no n x n array.
"""

from __future__ import annotations

import numpy as np

from robustep.ep.evidence import likelihood_gradient
from robustep.kernels.inducing import inducing_gradient_mm, theta_gradient_mm


def fitc_log_Z_gradient(result, kernel, X, Z, likelihood, y, *, wrt_inducing=True, M_diag=None):
    """Gradient of ``result.log_Z`` for a FITC prior built by ``FITCPrior.from_kernel``.

    Parameters
    ----------
    result : converged :class:`robustep.ep.EPResult` whose posterior is a
        :class:`~robustep.posterior.sparse.FITCSitePosterior`.
    kernel : the scikit-learn kernel the prior was built from (log hyperparameters theta).
    X : (n, d) training inputs (numpy, or the Dask array of a DaskFITCPrior, which uses its
        own chunks); Z : (m, d) inducing inputs.
    likelihood, y : the likelihood and targets of the run.
    wrt_inducing : also return d log Z / d Z (analytic kernels only, see
        :mod:`robustep.kernels.inducing`).
    M_diag : (n,) replaces diag(M) of eq. S14 (None: FITC-EP's own; the pseudo-point
        power-EP family passes its eq. P11 weights, :mod:`robustep.ep.pseudo_point`).

    Returns
    -------
    grad_kernel : (p,) w.r.t. ``kernel.theta``.
    grad_likelihood : (q,) w.r.t. the likelihood's log parameters
        (``likelihood.hyperparameter_names``): (1/eta) sum_i d log Z^_i / d log theta_lik.
    grad_inducing : (m, d) or None.
    """
    post = result.posterior
    prior = post.prior
    Z = np.asarray(Z, dtype=float)
    # global part (K_mm) here, row part by the prior over its row chunks (numpy loops, or
    # Dask tasks for posterior._dask.DaskFITCPrior)
    M_diag, s, W_mm = post.gradient_sums(M_diag)
    g_theta, g_Z = prior.gradient_rows(
        kernel, X, Z, post.alpha, post._beta, M_diag, s, post._A_inverse(), wrt_inducing
    )
    g_theta = g_theta + theta_gradient_mm(kernel, Z, W_mm)
    if wrt_inducing:
        g_Z = g_Z + inducing_gradient_mm(kernel, Z, W_mm)
    return g_theta, likelihood_gradient(result, likelihood, y), g_Z
