"""Laplace approximation for GP models with any twice-differentiable likelihood.

Works for non-log-concave likelihoods (Student-t): W = -d2 log p may have
negative entries, so the standard B = I + W^1/2 K W^1/2 of Rasmussen & Williams
(2006, Alg. 3.1/3.2) is not available.  We work in whitened coordinates
f = L u (K = L L^T) instead, where

    psi(u) = -u^T u / 2 + sum_i log p(y_i | (L u)_i)               (log posterior + const)
    grad   = -u + L^T d1,   -Hessian = B := I + L^T W L.

B is symmetric and positive definite exactly when K^-1 + W is, i.e. at any
strict local maximum of the posterior even when some W_ii < 0
(Jylänki et al. 2011, Sec. 3.2 and Sec. 5: Sigma_LA is positive definite at a
maximum).  Away from the mode B may be indefinite; the Newton direction then
uses W clipped at zero (a positive-definite modified Newton / Fisher-like
step) and every step is followed by a backtracking line search on psi, so the
iteration is monotone and cannot diverge.

Approximate marginal likelihood (Jylänki et al. 2011, eq. 5; R&W eq. 3.32):

    log q(y|theta) = -u^T u / 2 + sum_i log p(y_i | f^_i) - log|B| / 2,

with |B| = |I + K W|.  Gradients (R&W Sec. 5.5.1, Alg. 5.1, generalised to
indefinite W, see docs/derivations/laplace.md) use

    Sigma = (K^-1 + W)^-1 = L B^-1 L^T,   R = W (I + K W)^-1 = W - W Sigma W.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy import linalg
from sklearn.exceptions import ConvergenceWarning

from robustep._warnings import warn
from robustep.kernels.gradient import (
    as_kernel_gradient,
    contract_kernel_gradient,
    kernel_gradient_matvec,
)
from robustep.linalg import jittered_cholesky

__all__ = ["LaplaceResult", "laplace_approximation", "laplace_log_marginal_likelihood_gradient"]


def _jittered_cholesky(K: np.ndarray) -> np.ndarray:
    """Lower Cholesky factor of K, adding relative diagonal jitter on failure."""
    return jittered_cholesky(K, warn=False)[0]


class LaplaceModeMixin:
    """What every Laplace result answers alike: its mean is the mode, its sites are W."""

    @property
    def mean(self) -> np.ndarray:
        """Posterior mean of the Gaussian approximation (= the mode), shape (n,)."""
        return self.mode

    @property
    def site_precision(self) -> np.ndarray:
        """The Laplace 'site' precisions W (negative for outliers), shape (n,)."""
        return self.W


@dataclasses.dataclass
class LaplaceResult(LaplaceModeMixin):
    """Result of :func:`laplace_approximation` (all arrays for n training points).

    mode : (n,) posterior mode f^ (the approximation's mean; ``mean`` is an alias).
    var : (n,) marginal variances diag(Sigma), Sigma = (K^-1 + W)^-1.
    W : (n,) -d2 log p(y|f^); may be negative (outliers, Student-t).
    grad_log_lik : (n,) d log p(y|f^)/df, equal to K^-1 f^ at the mode.
    alpha : (n,) K^-1 f^ (computed as L^-T u), used for predictive means.
    log_marginal_likelihood : Laplace approximation of log p(y|theta).
    converged, n_iter : Newton iterations and whether the tolerance was met.
    L : (n, n) lower Cholesky factor of K (jittered if needed).
    C : (n, n) lower Cholesky factor of B = I + L^T W L.
    """

    mode: np.ndarray
    var: np.ndarray
    W: np.ndarray
    grad_log_lik: np.ndarray
    alpha: np.ndarray
    log_marginal_likelihood: float
    converged: bool
    n_iter: int
    L: np.ndarray
    C: np.ndarray
    d3: np.ndarray

    def posterior_covariance(self) -> np.ndarray:
        """Sigma = (K^-1 + W)^-1 = L B^-1 L^T, shape (n, n)."""
        V = linalg.solve_triangular(self.C, self.L.T, lower=True, check_finite=False)
        return V.T @ V

    def predict(self, K_cross, k_diag):
        """Latent predictive mean and variance at m test points.

        K_cross : (m, n) k(x*, X);  k_diag : (m,) k(x*, x*).
        mean* = K_cross alpha;  var* = k** - s^T s + |C^-1 s|^2 with s = L^-1 k*
        (var* = k** - k*^T (K + W^-1)^-1 k*, written without W^-1).
        """
        K_cross = np.atleast_2d(np.asarray(K_cross, float))
        k_diag = np.asarray(k_diag, float).reshape(-1)
        mean = K_cross @ self.alpha
        s = linalg.solve_triangular(self.L, K_cross.T, lower=True, check_finite=False)
        t = linalg.solve_triangular(self.C, s, lower=True, check_finite=False)
        var = k_diag - np.sum(s**2, axis=0) + np.sum(t**2, axis=0)
        return mean, np.maximum(var, 1e-12 * np.maximum(k_diag, 1e-300))


def _psi(u, f, y, likelihood):
    return -0.5 * float(u @ u) + float(np.sum(likelihood.log_prob(y, f)))


def laplace_approximation(
    K, y, likelihood, *, max_iter: int = 100, tol: float = 1e-8, init=None
) -> LaplaceResult:
    """Gaussian approximation at the posterior mode of p(f|y) ∝ N(f|0,K) prod p(y_i|f_i).

    Parameters
    ----------
    K : (n, n) prior covariance.
    y : (n,) targets (validated by ``likelihood.validate_targets``).
    likelihood : a :class:`robustep.likelihoods.base.Likelihood` providing
        ``log_prob`` and ``log_prob_derivatives``.
    max_iter : Newton iterations at most.
    tol : convergence when the Newton decrement g^T B^-1 g / 2 and the
        increase of psi are both below ``tol`` (in nats).
    init : optional (n,) starting latent values (warm start), e.g. a previous mode.

    Returns
    -------
    LaplaceResult
    """
    K, y = check_prior_and_targets(K, y, likelihood)
    n = y.shape[0]
    if max_iter < 1:
        raise ValueError(f"max_iter must be >= 1, got {max_iter}")
    L = _jittered_cholesky(K)
    if init is None:
        u = np.zeros(n)
    else:
        f0 = np.asarray(init, dtype=float).reshape(-1)
        if f0.shape != (n,):
            raise ValueError(f"init must have shape ({n},), got {f0.shape}")
        u = linalg.solve_triangular(L, f0, lower=True, check_finite=False)
        if not np.all(np.isfinite(u)):
            u = np.zeros(n)
    f = L @ u
    psi = _psi(u, f, y, likelihood)
    converged = False
    n_iter = 0
    eye = np.eye(n)
    for n_iter in range(1, max_iter + 1):  # noqa: B007
        _, d1, d2, _ = likelihood.log_prob_derivatives(y, f)
        W = -np.asarray(d2, float)
        g = -u + L.T @ d1
        B = eye + (L.T * W) @ L
        try:
            C = linalg.cholesky(B, lower=True, check_finite=False)
        except linalg.LinAlgError:
            # Indefinite curvature: modified Newton with W clipped at zero (always PD).
            C = linalg.cholesky(eye + (L.T * np.maximum(W, 0.0)) @ L, lower=True)
        step = linalg.cho_solve((C, True), g, check_finite=False)
        decrement = 0.5 * float(g @ step)
        # Backtracking line search on psi (monotone ascent).
        t = 1.0
        for _ in range(40):
            u_new = u + t * step
            f_new = L @ u_new
            psi_new = _psi(u_new, f_new, y, likelihood)
            if np.isfinite(psi_new) and psi_new >= psi + 1e-4 * t * float(g @ step):
                break
            t *= 0.5
        else:
            u_new, f_new, psi_new = u, f, psi
        gain = psi_new - psi
        u, f, psi = u_new, f_new, psi_new
        if decrement < tol and gain < max(tol, 1e-12 * abs(psi)):
            converged = True
            break
        if gain <= 0.0 and t < 1e-10:
            break
    logp, d1, d2, d3 = likelihood.log_prob_derivatives(y, f)
    W = -np.asarray(d2, float)
    B = eye + (L.T * W) @ L
    try:
        C = linalg.cholesky(B, lower=True, check_finite=False)
        log_det_B = 2.0 * float(np.sum(np.log(np.diag(C))))
        log_ml = -0.5 * float(u @ u) + float(np.sum(logp)) - 0.5 * log_det_B
    except linalg.LinAlgError:
        # Not a strict local maximum (should not happen after convergence): report
        # the failure rather than a meaningless number.
        C = linalg.cholesky(eye + (L.T * np.maximum(W, 0.0)) @ L, lower=True)
        log_ml = -np.inf
        converged = False
    if not converged:
        warn(
            f"Laplace mode search did not converge in {n_iter} iterations; "
            "increase max_iter or check the hyperparameters",
            ConvergenceWarning,
        )
    alpha = linalg.solve_triangular(L.T, u, lower=False, check_finite=False)
    V = linalg.solve_triangular(C, L.T, lower=True, check_finite=False)
    var = np.sum(V**2, axis=0)
    return LaplaceResult(
        mode=f,
        var=var,
        W=W,
        grad_log_lik=np.asarray(d1, float),
        alpha=alpha,
        log_marginal_likelihood=log_ml,
        converged=converged,
        n_iter=n_iter,
        L=L,
        C=C,
        d3=np.asarray(d3, float),
    )


def _derivative_parameter_gradients(likelihood, y, f, h: float = 1e-5):
    """(d d1/d log theta, d d2/d log theta), each (n, q), by central differences.

    A likelihood may provide the exact values through an optional method
    ``log_prob_derivatives_parameter_gradient(y, f) -> (dd1, dd2)``; otherwise
    the mixed derivatives are obtained from ``with_log_params`` by central
    differences (error O(h^2), about 1e-10 relative for smooth likelihoods).
    """
    hook = getattr(likelihood, "log_prob_derivatives_parameter_gradient", None)
    if hook is not None:
        dd1, dd2 = hook(y, f)
        return np.asarray(dd1, float), np.asarray(dd2, float)
    theta = np.asarray(likelihood.get_log_params(), float)
    q = theta.size
    n = f.size
    dd1 = np.zeros((n, q))
    dd2 = np.zeros((n, q))
    for j in range(q):  # loop over parameters (q <= 2), not data points
        e = np.zeros(q)
        e[j] = h
        _, a1, a2, _ = likelihood.with_log_params(theta + e).log_prob_derivatives(y, f)
        _, b1, b2, _ = likelihood.with_log_params(theta - e).log_prob_derivatives(y, f)
        dd1[:, j] = (np.asarray(a1) - np.asarray(b1)) / (2 * h)
        dd2[:, j] = (np.asarray(a2) - np.asarray(b2)) / (2 * h)
    return dd1, dd2


def laplace_log_marginal_likelihood_gradient(result: LaplaceResult, K_gradient, likelihood, y):
    """Gradient of the Laplace log marginal likelihood, including the implicit mode term.

    Parameters
    ----------
    result : LaplaceResult at the converged mode.
    K_gradient : (n, n, p) dK/d log theta_kernel (sklearn's ``eval_gradient`` layout), or
        a lazy :class:`robustep.kernels.gradient.RBFKernelGradient`.
    likelihood, y : as passed to :func:`laplace_approximation`.

    Returns
    -------
    grad_kernel : (p,) d log q(y)/d log theta_kernel
        = a^T K_j a / 2 - tr(R K_j) / 2 + s2^T (I + K W)^-1 K_j d1
    grad_likelihood : (q,) d log q(y)/d log theta_lik
        = sum_i dlogp_i + sum_i Sigma_ii dd2_i / 2 + s2^T (I + K W)^-1 K dd1
    with s2 = Sigma_ii d3_i / 2 (R&W eq. 5.23 with W = -d2) and
    R = W - W Sigma W = W (I + K W)^-1.
    """
    y = likelihood.validate_targets(y)
    K_gradient = as_kernel_gradient(K_gradient)
    n = result.mode.size
    if K_gradient.shape[:2] != (n, n):
        raise ValueError(f"K_gradient must have shape ({n}, {n}, p), got {K_gradient.shape}")
    L, C, W = result.L, result.C, result.W
    K = L @ L.T
    V = linalg.solve_triangular(C, L.T, lower=True, check_finite=False)
    Sigma = V.T @ V
    R = np.diag(W) - (W[:, None] * Sigma) * W[None, :]
    s2 = 0.5 * np.diag(Sigma) * result.d3
    a = result.alpha
    d1 = result.grad_log_lik

    def implicit(b):  # (I + K W)^-1 b = b - K R b, b shape (n, k)
        return b - K @ (R @ b)

    # Kernel hyperparameters (explicit + implicit through the mode).
    # a^T K_j a / 2 - tr(R K_j) / 2 = sum_ij M_ij K_j(i, j) with M = (a a^T - R) / 2
    M = np.multiply.outer(a, a)
    M -= R
    M *= 0.5
    explicit_k = contract_kernel_gradient(K_gradient, M)
    b = kernel_gradient_matvec(K_gradient, d1)  # K_j d1, (n, p)
    grad_kernel = explicit_k + s2 @ implicit(b)

    # Likelihood hyperparameters.
    q = len(getattr(likelihood, "hyperparameter_names", ()))
    if q == 0:
        return grad_kernel, np.zeros(0)
    dlogp = np.asarray(likelihood.log_prob_parameter_gradient(y, result.mode), float)
    dd1, dd2 = _derivative_parameter_gradients(likelihood, y, result.mode)
    explicit_l = dlogp.sum(axis=0) + 0.5 * np.diag(Sigma) @ dd2
    grad_lik = explicit_l + s2 @ implicit(K @ dd1)
    return grad_kernel, grad_lik


def check_prior_and_targets(K, y, likelihood):
    """Validated (K (n, n) float, y (n,)) for a Laplace fit; clear errors otherwise."""
    K = np.asarray(K, dtype=float)
    y = likelihood.validate_targets(y)
    n = y.shape[0]
    if K.shape != (n, n):
        raise ValueError(f"K must have shape ({n}, {n}) to match y, got {K.shape}")
    if not np.all(np.isfinite(K)):
        raise ValueError("K contains NaN or inf; check the kernel hyperparameters")
    return K, y
