"""Laplace approximation for log-concave likelihoods (probit): one Cholesky per Newton step.

For a likelihood with W = -d2 log p(y|f) >= 0 everywhere (probit, logistic) the
Newton iteration and the evidence gradient can be written with the well-conditioned
matrix B = I + W^1/2 K W^1/2 (Rasmussen & Williams 2006, Algorithms 3.1 and 5.1),
so a Newton step costs one Cholesky of B and O(n^2) products, against the
whitened-coordinate form of :mod:`robustep.baselines.laplace` (which also handles
W < 0, e.g. Student-t, at the price of a Cholesky of K and an n x n x n product per
step).  :func:`laplace_logconcave` falls back to that general routine as soon as some
W_i < 0.

Mode search (R&W Alg. 3.1, with a backtracking line search added): with a = K^-1 f,

    b = W f + d1,   a_new = b - W^1/2 B^-1 W^1/2 K b,   f_new = K a_new,

maximising psi(f) = -a^T f / 2 + sum_i log p(y_i | f_i).  The Newton decrement
(d1 - a)^T (f_new - f) / 2 is the convergence measure (as in the general routine).
A warm start is given as a previous ``alpha`` (a), so that f = K a is a point of the
new kernel's space without any solve.

Evidence (R&W eq. 3.32): log q(y) = -a^T f / 2 + sum log p(y|f) - sum log diag(L_B).

Gradient w.r.t. log kernel hyperparameters (R&W Alg. 5.1; the implicit term through
the mode as in docs/derivations/laplace.md):

    R = W^1/2 B^-1 W^1/2 = (K + W^-1)^-1,   s2 = Sigma_ii d3_i / 2,
    d/d theta_j = a^T K_j a / 2 - tr(R K_j) / 2 + s2^T (K_j d1 - K R K_j d1).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy import linalg
from scipy.linalg import lapack
from sklearn.exceptions import ConvergenceWarning

from robustep._warnings import warn
from robustep.baselines.laplace import LaplaceModeMixin, check_prior_and_targets
from robustep.linalg import blas_matmul, cholesky_inverse, identity_plus_scaled

__all__ = ["LogConcaveLaplaceResult", "laplace_logconcave", "laplace_logconcave_gradient"]

# Where W_i Sigma_ii is below this, Sigma_ii = (1 - (B^-1)_ii) / W_i cancels: use the
# explicit form K_ii - k_i^T R k_i instead.
_CANCELLATION = 1e-3


@dataclasses.dataclass
class LogConcaveLaplaceResult(LaplaceModeMixin):
    """Laplace approximation at the mode (all arrays for n training points).

    mode : (n,) f^;  var : (n,) diag(Sigma), Sigma = (K^-1 + W)^-1;  W : (n,) >= 0;
    grad_log_lik : (n,) d log p / df at f^;  d3 : (n,) third derivatives of log p;
    alpha : (n,) a = K^-1 f^ (predictive means K_* a);  R : (n, n) (K + W^-1)^-1;
    log_marginal_likelihood; converged; n_iter (Newton steps).
    """

    mode: np.ndarray
    var: np.ndarray
    W: np.ndarray
    grad_log_lik: np.ndarray
    d3: np.ndarray
    alpha: np.ndarray
    R: np.ndarray
    K: np.ndarray
    log_marginal_likelihood: float
    converged: bool
    n_iter: int

    def predict(self, K_cross, k_diag):
        """Latent predictive mean K_* a (m,) and variance k_** - k_*^T R k_* (m,)."""
        K_cross = np.atleast_2d(np.asarray(K_cross, float))
        mean = K_cross @ self.alpha
        if k_diag is None:
            return mean, None
        k_diag = np.asarray(k_diag, float).reshape(-1)
        var = k_diag - np.einsum("ij,ij->i", K_cross @ self.R, K_cross)
        return mean, np.maximum(var, 1e-12 * np.maximum(k_diag, 1e-300))


class _NegativeCurvature(Exception):
    """Some W_i < 0: the log-concave algorithm does not apply."""


def _factor(K, W):
    """sqrt(W) (n,) and the lower Cholesky factor of B = I + sW K sW (n, n)."""
    if np.any(W < 0):
        raise _NegativeCurvature
    sW = np.sqrt(W)
    B = identity_plus_scaled(K, sW)  # lower triangle, Fortran order: factorised in place
    L, info = lapack.dpotrf(B, lower=1, clean=1, overwrite_a=1)
    if info != 0:
        raise linalg.LinAlgError("I + W^1/2 K W^1/2 is not positive definite")
    return sW, L


def laplace_logconcave(K, y, likelihood, *, max_iter=100, tol=1e-8, init_alpha=None):
    """Laplace approximation for a GP prior N(0, K) and a log-concave likelihood.

    Parameters
    ----------
    K : (n, n) prior covariance (not modified).
    y : (n,) targets (validated by ``likelihood.validate_targets``).
    likelihood : :class:`robustep.likelihoods.base.Likelihood` with
        ``log_prob_derivatives`` returning (log p, d1, d2, d3).
    max_iter : Newton steps at most.
    tol : convergence when the Newton decrement and the gain in psi are below ``tol`` nats.
    init_alpha : optional (n,) a = K^-1 f of a previous fit (warm start, f = K a).

    Returns
    -------
    LogConcaveLaplaceResult, or the general :class:`robustep.baselines.laplace.LaplaceResult`
    when some W_i < 0 is met (the likelihood is not log-concave there).
    """
    K, y = check_prior_and_targets(K, y, likelihood)
    n = y.shape[0]
    a = np.zeros(n) if init_alpha is None else np.asarray(init_alpha, float).reshape(-1)
    if a.shape != (n,) or not np.all(np.isfinite(a)):
        a = np.zeros(n)
    f = blas_matmul(K, a)
    try:
        return _newton(K, y, likelihood, a, f, max_iter, tol)
    except _NegativeCurvature:
        from robustep.baselines.laplace import laplace_approximation

        return laplace_approximation(K, y, likelihood, max_iter=max_iter, tol=tol)


def _newton(K, y, likelihood, a, f, max_iter, tol):
    logp, d1, d2, d3 = likelihood.log_prob_derivatives(y, f)
    psi = -0.5 * float(a @ f) + float(np.sum(logp))
    if not np.isfinite(psi) and np.any(a):  # a bad warm start: start from the prior
        a = np.zeros_like(a)
        f = np.zeros_like(a)
        logp, d1, d2, d3 = likelihood.log_prob_derivatives(y, f)
        psi = float(np.sum(logp))
    converged, n_iter, gain = False, 0, 0.0
    while True:
        W = -np.asarray(d2, float)
        sW, L = _factor(K, W)
        b = W * f + d1
        a_new = b - sW * linalg.cho_solve((L, True), sW * blas_matmul(K, b), check_finite=False)
        da = a_new - a
        df = blas_matmul(K, da)
        decrement = 0.5 * float((d1 - a) @ df)
        if decrement < tol and gain < max(tol, 1e-12 * abs(psi)):
            converged = True
            break
        if n_iter >= max_iter:
            break
        n_iter += 1
        t = 1.0
        for _ in range(40):  # backtracking on psi: monotone ascent
            a_t, f_t = a + t * da, f + t * df
            logp_t, d1_t, d2_t, d3_t = likelihood.log_prob_derivatives(y, f_t)
            psi_t = -0.5 * float(a_t @ f_t) + float(np.sum(logp_t))
            if np.isfinite(psi_t) and psi_t >= psi + 1e-4 * t * max(decrement, 0.0):
                break
            t *= 0.5
        else:
            break  # no ascent possible: keep the current point (not converged)
        gain = psi_t - psi
        a, f, psi = a_t, f_t, psi_t
        logp, d1, d2, d3 = logp_t, d1_t, d2_t, d3_t
    log_ml = psi - float(np.sum(np.log(np.diag(L))))
    if not converged:
        warn(
            f"Laplace mode search did not converge in {n_iter} iterations; "
            "increase max_iter or check the hyperparameters",
            ConvergenceWarning,
        )
    Binv = cholesky_inverse(L)  # B^-1 from the Cholesky factor (two n^3/3 passes)
    R = sW[:, None] * Binv * sW[None, :]
    kdiag = np.diag(K).copy()
    with np.errstate(divide="ignore", invalid="ignore"):
        var = (1.0 - np.diag(Binv)) / W
    explicit = ~(W * var >= _CANCELLATION)
    idx = np.flatnonzero(explicit)
    if idx.size:
        Kc = K[:, idx]
        var[idx] = kdiag[idx] - np.einsum("ij,ij->j", Kc, R @ Kc)
    var = np.maximum(var, 1e-300)
    return LogConcaveLaplaceResult(
        mode=f, var=var, W=W, grad_log_lik=np.asarray(d1, float), d3=np.asarray(d3, float),
        alpha=a, R=R, K=K,
        log_marginal_likelihood=float(log_ml), converged=converged, n_iter=n_iter,
    )  # fmt: skip


def laplace_logconcave_gradient(result, K_gradient):
    """d log q(y) / d log theta_kernel (p,) at a :class:`LogConcaveLaplaceResult`.

    K_gradient : (n, n, p) dK/d log theta (scikit-learn's ``eval_gradient`` layout).
    Formula in the module docstring (R&W Alg. 5.1 with the implicit mode term).
    """
    K_gradient = np.asarray(K_gradient, float)
    if K_gradient.ndim == 2:
        K_gradient = K_gradient[:, :, None]
    n = result.mode.size
    if K_gradient.shape[:2] != (n, n):
        raise ValueError(f"K_gradient must have shape ({n}, {n}, p), got {K_gradient.shape}")
    a, d1, R, K = result.alpha, result.grad_log_lik, result.R, result.K
    p = K_gradient.shape[2]
    flat = K_gradient.reshape(n * n, p)
    explicit = 0.5 * (np.outer(a, a).reshape(-1) @ flat) - 0.5 * (R.reshape(-1) @ flat)
    b = np.einsum("ijp,j->ip", K_gradient, d1)  # K_j d1, (n, p)
    s2 = 0.5 * result.var * result.d3
    return explicit + s2 @ (b - K @ (R @ b))
