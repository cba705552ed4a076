"""Nested EP for multi-class GP classification with the multinomial probit likelihood.

Riihimäki, Jylänki & Vehtari (2013), "Nested expectation propagation for Gaussian process
classification with a multinomial probit likelihood", JMLR 14.  One latent GP per class,
f^j ~ GP(0, k_j) independent a priori; prior covariance of f = (f^1; ...; f^c) (class-major,
length c n) is blockdiag(K_1, ..., K_c).

Outer EP: one c-dimensional Gaussian site per data point, t̃_i(f_i) with precision
Π̃_i = diag(π_i) - π_i π_i^T / (1^T π_i) (rank c-1) and shift ν̃_i, both functions of the
point's inner EP sites (:mod:`robustep.likelihoods.multinomial_probit`).  Each outer
iteration (parallel schedule): form the posterior, the cavity of every site, one inner-EP
sweep per site warm-started from its previous inner sites (the nested EP of §4), then a
damped update of the inner sites (``damping`` = weight kept on the old value).

Posterior in O(c n^3) (the paper's §5; the same algebra as Rasmussen & Williams Alg. 3.3):
with D = diag(π) (c n), P = 1_c ⊗ I_n and B_j = I + D_j^{1/2} K_j D_j^{1/2} = L_j L_j^T,

    E_j = D_j^{1/2} B_j^{-1} D_j^{1/2},   C = Σ_j E_j = L_C L_C^T   (n x n),
    Σ = (K^{-1} + Π̃)^{-1} = A + A D P C^{-1} P^T D A,  A = blockdiag((K_j^{-1} + D_j)^{-1}),
    μ_j = K_j γ_j,  γ_j = ν̃_j - E_j (K_j ν̃_j - C^{-1} Σ_k E_k K_k ν̃_k),
    R = (K + Π̃^{-1})^{-1} = E - E P C^{-1} P^T E,
    log|I + K Π̃| = Σ_j log|B_j| + log|C| - Σ_i log(1^T π_i).

One sweep costs c Cholesky factorisations of n x n, c products E_j K_j and c triangular
solves with L_C: O(c n^3); memory O(c n^2).  Derivation: docs/derivations/multiclass.md.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy import linalg
from scipy.linalg import lapack
from sklearn.exceptions import ConvergenceWarning

from robustep._warnings import warn as warn_user
from robustep.likelihoods.multinomial_probit import (
    _check_labels,
    _inner_posterior,
    _site_corrections,
    _x_prior,
    inner_ep,
    site_natural_parameters,
)
from robustep.linalg import blas_matmul, cholesky_inverse, identity_plus_scaled

__all__ = ["MulticlassEPResult", "nested_ep", "multiclass_posterior"]


def _chol(A, overwrite=False):
    L, info = lapack.dpotrf(A, lower=1, clean=True, overwrite_a=int(overwrite))
    if info != 0:
        raise np.linalg.LinAlgError("matrix not positive definite in the multi-class posterior")
    return L


@dataclasses.dataclass
class MulticlassPosterior:
    """Gaussian posterior of the c latent GPs given the outer sites (the O(c n^3) algebra).

    mean (n, c); cov (n, c, c) the marginal covariance of f_i; gamma (n, c) = K^{-1} μ per
    class; log_det = log|I + K Π̃|; quad = ν̃^T Σ ν̃; E (c, n, n); L_C (n, n).
    """

    mean: np.ndarray
    cov: np.ndarray
    gamma: np.ndarray
    log_det: float
    quad: float
    E: np.ndarray
    L_C: np.ndarray

    def predict(self, K_cross, k_diag):
        """Latent predictive at m test points: mean (m, c), covariance (m, c, c).

        K_cross : (m, n) or (c, m, n) prior cross-covariances; k_diag : (m,) or (c, m).
        μ*_j = k*_j^T γ_j; Σ*_jk = δ_jk (k**_j - k*_j^T E_j k*_j) + k*_j^T E_j C^{-1} E_k k*_k.
        """
        c, n, _ = self.E.shape
        Kc = np.asarray(K_cross, dtype=float)
        kd = np.asarray(k_diag, dtype=float)
        Kc = np.broadcast_to(Kc, (c,) + Kc.shape[-2:]) if Kc.ndim == 2 else Kc
        kd = np.broadcast_to(kd, (c, kd.shape[-1])) if kd.ndim == 1 else kd
        m = Kc.shape[1]
        mean = np.einsum("jmn,nj->mj", Kc, self.gamma)
        cov = np.zeros((m, c, c))
        W = np.empty((c, n, m))
        for j in range(c):
            V = self.E[j] @ Kc[j].T  # (n, m)
            cov[:, j, j] = kd[j] - np.einsum("mn,nm->m", Kc[j], V)
            W[j] = linalg.solve_triangular(self.L_C, V, lower=True, check_finite=False)
        cov += np.einsum("jnm,knm->mjk", W, W)
        return mean, 0.5 * (cov + np.swapaxes(cov, 1, 2))


def multiclass_posterior(Ks, pi, shift, *, chunk=512):
    """Posterior for prior covariances ``Ks`` (c, n, n) and outer sites (π (n, c), ν̃ (n, c)).

    See the module docstring for the formulas; raises ``numpy.linalg.LinAlgError`` if a
    factorisation fails.
    """
    c, n, _ = Ks.shape
    d = np.sqrt(pi)  # (n, c)
    E = np.empty((c, n, n))
    log_det = 0.0
    for j in range(c):
        # lower triangle, Fortran order: factorised in place (linalg.identity_plus_scaled)
        L = _chol(identity_plus_scaled(Ks[j], d[:, j]), overwrite=True)
        log_det += 2.0 * np.sum(np.log(np.diag(L)))
        Binv = cholesky_inverse(L)
        E[j] = d[:, j, None] * Binv * d[None, :, j]
    C = E.sum(axis=0)
    L_C = _chol(C)
    log_det += 2.0 * np.sum(np.log(np.diag(L_C))) - np.sum(np.log(pi.sum(axis=1)))
    # products by SciPy's BLAS, the library of the factorisations (linalg.blas_matmul)
    Knu = np.column_stack([blas_matmul(Ks[j], shift[:, j]) for j in range(c)])  # K_j ν̃_j
    s = sum(blas_matmul(E[j], Knu[:, j]) for j in range(c))  # Σ_k E_k K_k ν̃_k
    Cs = linalg.cho_solve((L_C, True), s, check_finite=False)
    gamma = np.empty((n, c))
    for j in range(c):
        gamma[:, j] = shift[:, j] - blas_matmul(E[j], Knu[:, j] - Cs)
    mean = np.column_stack([blas_matmul(Ks[j], gamma[:, j]) for j in range(c)])
    # marginal covariances: diag(A_j) + the C^{-1} coupling, in column chunks
    cov = np.zeros((n, c, c))
    for start in range(0, n, chunk):
        sl = slice(start, min(start + chunk, n))
        F = np.empty((c, n, sl.stop - start))
        for j in range(c):
            H = _E_times_K(E[j], Ks[j], pi[:, j], sl)  # (E_j K_j)[:, sl]
            cov[sl, j, j] = np.diag(Ks[j])[sl] - np.einsum("ab,ab->b", Ks[j][:, sl], H)
            F[j] = linalg.solve_triangular(L_C, H, lower=True, check_finite=False)
        Ft = F.transpose(2, 0, 1)  # (b, c, n)
        cov[sl] += Ft @ Ft.transpose(0, 2, 1)
    cov = 0.5 * (cov + np.swapaxes(cov, 1, 2))
    quad = float(np.sum(shift * mean))
    return MulticlassPosterior(mean, cov, gamma, float(log_det), quad, E, L_C)


#: columns b with π_b at or below this take E_j K_j by a product instead of I - E_j D_j^{-1}
_MIN_PI_IDENTITY = 1e-8


def _E_times_K(E, K, pi, columns):
    """Columns ``columns`` of E_j K_j (n, b) for E_j = D^{1/2} B^{-1} D^{1/2}, D = diag(π).

    From B^{-1} D^{1/2} K D^{1/2} = I - B^{-1}: E_j K_j = I - E_j D^{-1}, which costs
    O(n b) instead of the O(n² b) product.  Its error in column b grows as 1/√π_b, so
    columns with π_b <= ``_MIN_PI_IDENTITY`` (zero at a cold start) take the product; on
    the digits posteriors the two agree to 1e-8 relative in the marginal variances.
    """
    n = E.shape[0]
    idx = np.arange(n)[columns]
    p = pi[idx]
    H = -E[:, idx] / np.where(p > _MIN_PI_IDENTITY, p, 1.0)[None, :]
    H[idx, np.arange(idx.size)] += 1.0
    small = np.flatnonzero(p <= _MIN_PI_IDENTITY)
    if small.size:
        H[:, small] = blas_matmul(E, K[:, idx[small]])
    return H


def _cavities(post_mean, post_cov, precision, shift):
    """Cavity N(m_-i, S_-i) of every site: (n, c), (n, c, c); also a validity mask (n,)."""
    c = post_mean.shape[1]
    P = np.linalg.inv(post_cov)
    P = 0.5 * (P + np.swapaxes(P, 1, 2))
    h = np.einsum("ijk,ik->ij", P, post_mean)
    Pc = P - precision
    hc = h - shift
    with np.errstate(invalid="ignore"):
        eig_min = np.linalg.eigvalsh(Pc)[:, 0]
    ok = np.isfinite(eig_min) & (eig_min > 0)
    Pc = np.where(ok[:, None, None], Pc, np.eye(c))
    S = np.linalg.inv(Pc)
    S = 0.5 * (S + np.swapaxes(S, 1, 2))
    m = np.einsum("ijk,ik->ij", S, hc)
    return m, S, ok


@dataclasses.dataclass
class MulticlassEPResult:
    """Result of :func:`nested_ep`.

    alpha, beta : (n, c) inner sites (0 at the label); site_precision (n, c, c) and
    site_shift (n, c): the outer sites Π̃_i, ν̃_i; mean (n, c), cov (n, c, c): posterior
    marginals; log_Z: log Z_EP; converged, n_iter, history {"max_change": [...]};
    posterior: :class:`MulticlassPosterior` (predictions, gradient).
    """

    alpha: np.ndarray
    beta: np.ndarray
    site_precision: np.ndarray
    site_shift: np.ndarray
    mean: np.ndarray
    cov: np.ndarray
    log_Z: float
    converged: bool
    n_iter: int
    history: dict
    posterior: MulticlassPosterior
    y: np.ndarray

    def predict(self, K_cross, k_diag):
        """Latent predictive mean (m, c) and covariance (m, c, c); see MulticlassPosterior."""
        return self.posterior.predict(K_cross, k_diag)

    def log_Z_gradient(self, K_gradient, *, per_class=False):
        """d log Z_EP / d θ (p,) at the fixed point, from dK (n, n, p) shared by all classes
        or (c, n, n, p) per class; with ``per_class`` (dK (c, n, n, p), every class its own
        p hyperparameters) the c gradients concatenated, (c p,).

        d log Z / d θ = Σ_j ½ γ_j^T (∂K_j) γ_j - ½ tr(R_jj ∂K_j), R_jj = E_j - E_j C^{-1} E_j
        (explicit derivative at an EP fixed point; docs/derivations/multiclass.md §5, eq. M12).
        """
        post = self.posterior
        c, n, _ = post.E.shape
        dK = np.asarray(K_gradient, dtype=float)
        gamma = post.gamma
        if dK.ndim == 3:  # shared: M = Σ_j (½ γ_j γ_j^T - ½ R_jj)
            G = np.zeros((n, n))
            for j in range(c):
                F = linalg.solve_triangular(post.L_C, post.E[j], lower=True, check_finite=False)
                G += 0.5 * np.outer(gamma[:, j], gamma[:, j]) - 0.5 * (post.E[j] - F.T @ F)
            return G.reshape(-1) @ dK.reshape(n * n, -1)
        grads = []
        for j in range(c):
            F = linalg.solve_triangular(post.L_C, post.E[j], lower=True, check_finite=False)
            M = 0.5 * np.outer(gamma[:, j], gamma[:, j]) - 0.5 * (post.E[j] - F.T @ F)
            grads.append(M.reshape(-1) @ dK[j].reshape(n * n, -1))
        return np.concatenate(grads) if per_class else np.sum(grads, axis=0)


def _log_Z(y, Ks, alpha, beta, post, precision, shift, log_const):
    """log Z_EP = ½ ν̃ᵀΣν̃ - ½ log|I + KΠ̃| + Σ_i κ_i + Σ_ij [log Ẑ_ij + Ψ(cav_ij) - Ψ(marg_ij)]."""
    cav_m, cav_S, ok = _cavities(post.mean, post.cov, precision, shift)
    m_x, S_x, _ = _x_prior(y, cav_m, cav_S)
    cov_x, mean_x, _ = _inner_posterior(m_x, S_x, alpha, beta)
    corr = _site_corrections(y, mean_x, cov_x, alpha, beta)
    value = 0.5 * post.quad - 0.5 * post.log_det + float(np.sum(log_const)) + float(np.sum(corr))
    return value if np.all(ok) else -np.inf


def _as_class_covariances(K, c):
    K = np.asarray(K, dtype=float)
    if K.ndim == 2:
        if K.shape[0] != K.shape[1]:
            raise ValueError(f"K must be a square (n, n) matrix or (c, n, n); got shape {K.shape}")
        return np.broadcast_to(K, (c,) + K.shape)
    if K.ndim != 3 or K.shape[0] != c or K.shape[1] != K.shape[2]:
        raise ValueError(
            f"K must be (n, n) (one kernel for every class) or (c, n, n) = ({c}, n, n); "
            f"got shape {K.shape}"
        )
    return K


# ------------------------------------------------------------- the outer loop, shared
def _n_classes(y, n_classes):
    """c from ``n_classes`` (default ``max(y) + 1``); ValueError below 2."""
    if n_classes is None:
        n_classes = int(np.max(y)) + 1 if y.size else 2
    c = int(n_classes)
    if c < 2:
        raise ValueError(f"n_classes must be >= 2, got {n_classes!r}")
    return c


def _checked_class_covariances(K, y, c):
    """(c, n, n) prior covariances from K (one per class or shared), checked against the
    labels y (n,) and for non-finite entries; ValueError saying what to fix."""
    Ks = _as_class_covariances(K, c)
    n = Ks.shape[1]
    if y.shape[0] != n:
        raise ValueError(
            f"y has {y.shape[0]} entries but K is {n} x {n}; pass one label per row of K"
        )
    if not np.all(np.isfinite(Ks)):
        raise ValueError("K contains NaN or inf; check the kernel hyperparameters and inputs")
    return Ks


def _check_loop_options(damping, max_iter, tol):
    """ValueError for a damping outside [0, 1), a max_iter < 1 or a tol <= 0."""
    if not 0.0 <= float(damping) < 1.0:
        raise ValueError(f"damping must be in [0, 1), got {damping!r}")
    if int(max_iter) < 1:
        raise ValueError(f"max_iter must be a positive integer, got {max_iter!r}")
    if not float(tol) > 0:
        raise ValueError(f"tol must be positive, got {tol!r}")


def _initial_inner_sites(init, y, c):
    """Inner sites (alpha, beta) (n, c) each: zeros, or copies of ``init`` with the
    true-class column zeroed (it carries no inner site)."""
    n = y.shape[0]
    if init is None:
        return np.zeros((n, c)), np.zeros((n, c))
    alpha = np.array(init[0], dtype=float)
    beta = np.array(init[1], dtype=float)
    if alpha.shape != (n, c) or beta.shape != (n, c):
        raise ValueError(f"init must be (alpha, beta) of shape ({n}, {c}) each")
    rows = np.arange(n)
    alpha[rows, y] = 0.0
    beta[rows, y] = 0.0
    return alpha, beta


@dataclasses.dataclass
class OuterLoop:
    """What :func:`outer_loop` returns: ``state`` = (alpha, beta, site_precision,
    site_shift, log_const, posterior) of the last valid iteration."""

    state: tuple
    converged: bool
    n_iter: int
    history: dict


def outer_loop(y, sites, posterior, *, damping, max_iter, tol, inner_sweeps):
    """The outer iterations of nested EP (Riihimäki et al. §4), for any posterior.

    ``posterior(site_precision (n, c, c), site_shift (n, c), pi (n, c))`` returns an
    object with ``mean`` (n, c) and marginal ``cov`` (n, c, c) and raises
    ``numpy.linalg.LinAlgError`` when it cannot be formed (the dense posterior above, or
    the FITC one of :mod:`robustep.ep.multiclass_sparse`).  Each iteration: the cavities,
    one inner-EP pass per site warm-started from its inner sites, a damped step of the
    inner sites; converged when the largest undamped change is below ``tol``.  A step
    that gives a non-finite or invalid state ends the loop with the last valid state.
    """
    alpha, beta = sites

    def state(a, b):
        prec, shift, pi, log_const = site_natural_parameters(y, a, b)
        return prec, shift, log_const, posterior(prec, shift, pi)

    prec, shift, log_const, post = state(alpha, beta)
    history = {"max_change": []}
    converged = False
    n_iter = 0
    for it in range(int(max_iter)):
        cav_m, cav_S, ok = _cavities(post.mean, post.cov, prec, shift)
        a_new, b_new, _ = inner_ep(y, cav_m, cav_S, alpha, beta, n_sweeps=inner_sweeps)
        a_new = np.where(ok[:, None], a_new, alpha)
        b_new = np.where(ok[:, None], b_new, beta)
        # the undamped step decides convergence (damping must not fake it)
        with np.errstate(invalid="ignore"):
            change = float(max(np.max(np.abs(a_new - alpha)), np.max(np.abs(b_new - beta))))
        a_new = damping * alpha + (1.0 - damping) * a_new
        b_new = damping * beta + (1.0 - damping) * b_new
        if not (np.all(np.isfinite(a_new)) and np.all(np.isfinite(b_new))):
            break
        try:
            new = state(a_new, b_new)
        except np.linalg.LinAlgError:
            break
        if not (np.all(np.isfinite(new[3].mean)) and np.all(np.isfinite(new[3].cov))):
            break
        history["max_change"].append(change)
        alpha, beta = a_new, b_new
        prec, shift, log_const, post = new
        n_iter = it + 1
        if change < tol:
            converged = True
            break
    return OuterLoop((alpha, beta, prec, shift, log_const, post), converged, n_iter, history)


def nested_ep(
    K,
    y,
    n_classes=None,
    *,
    damping=0.5,
    max_iter=200,
    tol=1e-4,
    inner_sweeps=1,
    init=None,
    warn=True,
):
    """Nested EP for GP classification with the multinomial probit likelihood.

    Parameters
    ----------
    K : (n, n) prior covariance shared by the c latent GPs, or (c, n, n) one per class.
    y : (n,) int class indices 0 .. c-1.
    n_classes : c (default ``max(y) + 1``; must be >= 2).
    damping : in [0, 1), weight kept on the old inner sites (0 = no damping).
    max_iter : outer iterations (each one inner sweep per site, Riihimäki et al. §4).
    tol : converged when the largest undamped change of any inner site parameter (α, β)
        in an iteration is below ``tol``.
    inner_sweeps : inner-EP sweeps per outer iteration (1 = nested EP as in the paper).
    init : (alpha, beta) (n, c) to warm-start from, or None.
    warn : emit a ConvergenceWarning when ``max_iter`` is reached.

    Returns
    -------
    MulticlassEPResult.  Never NaN: if an iteration produces a non-finite or invalid state,
    the last valid state is kept and ``converged`` is False.
    """
    y = np.asarray(y)
    c = _n_classes(y, n_classes)
    y = _check_labels(y, c)
    _check_loop_options(damping, max_iter, tol)
    Ks = _checked_class_covariances(K, y, c)

    def posterior(precision, shift, pi):
        return multiclass_posterior(Ks, pi, shift)

    loop = outer_loop(
        y, _initial_inner_sites(init, y, c), posterior,
        damping=damping, max_iter=max_iter, tol=tol, inner_sweeps=inner_sweeps,
    )  # fmt: skip
    alpha, beta, prec, shift, log_const, post = loop.state
    converged, n_iter = loop.converged, loop.n_iter
    log_Z = _log_Z(y, Ks, alpha, beta, post, prec, shift, log_const)
    if not np.isfinite(log_Z):  # an invalid cavity: no evidence (never NaN)
        converged = False
        log_Z = -np.inf
    if not converged and warn:
        warn_user(
            f"nested EP did not converge in {n_iter} iterations (max_iter={max_iter}, "
            f"tol={tol}, damping={damping}); the last finite state is kept. Increase "
            "max_iter or damping.",
            ConvergenceWarning,
        )
    return MulticlassEPResult(
        alpha=alpha,
        beta=beta,
        site_precision=prec,
        site_shift=shift,
        mean=post.mean,
        cov=post.cov,
        log_Z=float(log_Z),
        converged=bool(converged),
        n_iter=n_iter,
        history=loop.history,
        posterior=post,
        y=y,
    )
