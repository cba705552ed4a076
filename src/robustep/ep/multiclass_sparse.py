"""Nested EP for the multinomial probit with a FITC prior per class (inducing points).

Sparse version of :mod:`robustep.ep.multiclass` (Riihimäki, Jylänki & Vehtari 2013, nested
EP) on the FITC prior of Snelson & Ghahramani (2006), derived in
docs/derivations/multiclass.md §8 (eqs. M13–M22), generalising docs/derivations/sparse.md
(eqs. S3–S14) from scalar sites to the c-dimensional sites of the multinomial probit.

Class j has the FITC prior K̃_j = V_j V_j^T + diag(Λ_j) on inducing inputs Z (m, d) shared by
all classes (one set of inducing inputs; each class has its own V_j, Λ_j when the classes
have different kernels), i.e. f_j = V_j u_j + g_j with u_j ~ N(0, I_m), g_ij ~ N(0, Λ_ij).
The outer sites are unchanged: t̃_i(f_i) = exp(-½ f_i^T Π̃_i f_i + ν̃_i^T f_i), c x c.
Integrating each point's g_i (c-dimensional, covariance diag(Λ_i)) against its site leaves
a Gaussian factor on U = (u_1; ...; u_c) (c m) with c x c precision B_i (eq. M14):

    C_i = (I + Λ_i Π̃_i)^-1,   B_i = Π̃_i C_i,   γ_i = C_i^T ν̃_i,
    A = I_cm + Σ_i W_i^T B_i W_i = L_A L_A^T,   A_jk = δ_jk I + V_j^T diag(B_:jk) V_k,
    m_U = A^-1 b,   b_j = V_j^T γ_:j,
    μ_i = C_i (a_i + Λ_i ν̃_i),  a_ij = v_ij^T m_U,j,
    Σ_i = C_i Q_i C_i^T + C_i Λ_i,   Q_i,jk = v_ij^T (A^-1)_jk v_ik,
    log|I + K̃ Π̃| = Σ_i log|I + Λ_i Π̃_i| + log|A|,

with W_i = blockdiag(v_i1^T, ..., v_ic^T) (c x c m).  One posterior costs O(n c^2 m^2) (the
c(c+1)/2 blocks of A and the Q_i, in row chunks) plus O(c^3 m^3) (the Cholesky factor and
inverse of A); memory O(n c m) (the V_j) plus (chunk, c, c m) temporaries: no n x n array.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import scipy.linalg
from scipy.linalg import lapack
from sklearn.exceptions import ConvergenceWarning

from robustep._warnings import warn as warn_user
from robustep.ep.multiclass import (
    _cavities,
    _check_loop_options,
    _initial_inner_sites,
    outer_loop,
)
from robustep.kernels._rows import row_chunks
from robustep.likelihoods.multinomial_probit import (
    _check_labels,
    _inner_posterior,
    _site_corrections,
    _x_prior,
)
from robustep.linalg import triangular_inverse
from robustep.posterior.sparse import FITCPrior

#: entries of a (chunk, c, c m) temporary (4 MB): row chunks are sized by it
_CHUNK_ENTRIES = 1 << 19

__all__ = [
    "MulticlassFITCPrior",
    "SparseMulticlassEPResult",
    "multiclass_fitc_posterior",
    "sparse_nested_ep",
]


class MulticlassFITCPrior:
    """FITC priors of c independent latent GPs on shared inducing inputs (eq. M13).

    Parameters
    ----------
    priors : sequence of c :class:`~robustep.posterior.sparse.FITCPrior` with the same n
        and m (the same object repeated when the classes share a kernel: V is then held
        once).

    Attributes
    ----------
    c, n, m : sizes.  ``priors`` : tuple of the c FITC priors.  ``shared`` : True when all
    classes use the same FITCPrior object.  ``Lambda`` : (n, c) the FITC diagonals.
    """

    def __init__(self, priors):
        priors = tuple(priors)
        if len(priors) < 2:
            raise ValueError(f"pass one FITCPrior per class (at least 2), got {len(priors)}")
        for p in priors:
            if not isinstance(p, FITCPrior):
                raise TypeError(f"priors must be FITCPrior objects, got {type(p).__name__}")
        n, m = priors[0].V.shape
        if any(p.V.shape != (n, m) for p in priors):
            raise ValueError("all class priors must have the same n and m (shared inducing inputs)")
        self.priors = priors
        self.c, self.n, self.m = len(priors), int(n), int(m)
        self.shared = all(p is priors[0] for p in priors)
        self.Lambda = np.column_stack([p.Lambda for p in priors])

    @classmethod
    def from_kernel(cls, kernel, X, Z, n_classes, *, jitter=None):
        """Priors of ``kernel`` (one scikit-learn kernel shared by the classes, or a list of
        ``n_classes`` kernels) at training inputs X (n, d) and inducing inputs Z (m, d);
        ``jitter`` as for :meth:`FITCPrior.from_kernel`."""
        c = int(n_classes)
        if isinstance(kernel, (list, tuple)):
            if len(kernel) != c:
                raise ValueError(f"pass one kernel or a list of {c} kernels, got {len(kernel)}")
            return cls([FITCPrior.from_kernel(k, X, Z, jitter=jitter) for k in kernel])
        prior = FITCPrior.from_kernel(kernel, X, Z, jitter=jitter)
        return cls([prior] * c)

    def V(self, j):
        """V_j (n, m) of class j."""
        return self.priors[j].V

    def dense_covariances(self):
        """(c, n, n) the explicit FITC covariances K̃_j: for tests on small n only."""
        return np.stack([p.dense_covariance() for p in self.priors])


def _blocks(c, m):
    return [slice(j * m, (j + 1) * m) for j in range(c)]


@dataclasses.dataclass
class SparseMulticlassPosterior:
    """Posterior of the c FITC latent GPs given the outer sites (eqs. M14–M18).

    mean (n, c), cov (n, c, c): marginals of f_i; log_det = log|I + K̃ Π̃|;
    quad = ν̃^T μ; u_mean (c m,) = m_U; L_A (c m, c m) the factor of A; Q (n, c, c) the
    W_i A^-1 W_i^T of eq. M17; C (n, c, c), B (n, c, c) of eq. M14; alpha (n, c) =
    ν̃_i - Π̃_i μ_i (so that μ_j = K̃_j alpha_j).
    """

    prior: MulticlassFITCPrior
    mean: np.ndarray
    cov: np.ndarray
    log_det: float
    quad: float
    u_mean: np.ndarray
    L_A: np.ndarray
    Q: np.ndarray
    C: np.ndarray
    B: np.ndarray
    alpha: np.ndarray

    def _L_A_inverse(self):
        if getattr(self, "_L_inv", None) is None:
            self._L_inv = triangular_inverse(self.L_A)
        return self._L_inv

    def predict(self, K_cross, k_diag):
        """Latent predictive at p test points: mean (p, c), covariance (p, c, c) (eq. M20).

        K_cross : (p, m) prior covariances k(x*, Z) shared by all classes, or (c, p, m) one
        per class; k_diag : (p,) or (c, p) prior variances k(x*, x*).
        μ*_j = v*_j^T m_U,j;  Σ*_jk = v*_j^T (A^-1)_jk v*_k + δ_jk (k**_j - |v*_j|^2),
        v*_j = L_mm,j^-1 k_m,j(x*).
        """
        prior = self.prior
        c, m = prior.c, prior.m
        Kc = np.asarray(K_cross, dtype=float)
        kd = np.asarray(k_diag, dtype=float)
        if Kc.ndim == 2:
            Kc = np.broadcast_to(Kc, (c,) + Kc.shape)
        if kd.ndim == 1:
            kd = np.broadcast_to(kd, (c,) + kd.shape)
        if Kc.ndim != 3 or Kc.shape[0] != c or Kc.shape[2] != m:
            raise ValueError(f"K_cross must have shape (p, {m}) or ({c}, p, {m})")
        p = Kc.shape[1]
        if kd.shape != (c, p):
            raise ValueError(f"k_diag must have shape ({p},) or ({c}, {p})")
        Linv = self._L_A_inverse()
        blocks = _blocks(c, m)
        mean = np.empty((p, c))
        cov = np.empty((p, c, c))
        for rows in row_chunks(p, c * c * m, _CHUNK_ENTRIES):
            r = rows.stop - rows.start
            Y = np.empty((r, c, c * m))
            Vs = None
            for j in range(c):
                if j == 0 or not prior.shared:
                    Vs = scipy.linalg.solve_triangular(
                        prior.priors[j].L_mm, Kc[j, rows].T, lower=True, check_finite=False
                    ).T  # (r, m)
                mean[rows, j] = Vs @ self.u_mean[blocks[j]]
                Y[:, j, :] = Vs @ Linv[:, blocks[j]].T
                cov[rows, j, j] = kd[j, rows] - np.einsum("ij,ij->i", Vs, Vs)
            Qs = Y @ Y.transpose(0, 2, 1)
            diag = cov[rows, np.arange(c), np.arange(c)]
            cov[rows] = Qs
            cov[rows, np.arange(c), np.arange(c)] += np.maximum(diag, 0.0)
        return mean, 0.5 * (cov + np.swapaxes(cov, 1, 2))


def multiclass_fitc_posterior(prior, precision, shift):
    """Posterior for a :class:`MulticlassFITCPrior` and outer sites Π̃ (n, c, c), ν̃ (n, c).

    Eqs. M14–M18 (module docstring).  Raises ``numpy.linalg.LinAlgError`` if I + Λ_i Π̃_i
    or A is singular / not positive definite (cannot happen for probit sites, Π̃_i ⪰ 0).
    """
    c, n, m = prior.c, prior.n, prior.m
    Pi = np.asarray(precision, dtype=float)
    nu = np.asarray(shift, dtype=float)
    if Pi.shape != (n, c, c) or nu.shape != (n, c):
        raise ValueError(f"site precision and shift must have shapes ({n}, {c}, {c}), ({n}, {c})")
    lam = prior.Lambda
    I_c = np.eye(c)
    D = I_c + lam[:, :, None] * Pi  # I + Λ_i Π̃_i
    sign, logdet_D = np.linalg.slogdet(D)
    if not np.all(sign > 0):
        raise np.linalg.LinAlgError("I + Λ_i Π̃_i is not positive definite: invalid sites")
    C = np.linalg.inv(D)  # eq. M14
    B = Pi @ C
    B = 0.5 * (B + np.swapaxes(B, 1, 2))
    gamma = np.einsum("ikj,ik->ij", C, nu)  # C_i^T ν̃_i
    blocks = _blocks(c, m)
    A = np.zeros((c * m, c * m))
    b = np.zeros(c * m)
    for rows in row_chunks(n, c * m, _CHUNK_ENTRIES):  # eq. M15
        Vs = [prior.V(j)[rows] for j in range(c)]
        for j in range(c):
            b[blocks[j]] += Vs[j].T @ gamma[rows, j]
            for k in range(j, c):
                G = Vs[j].T @ (B[rows, j, k, None] * Vs[k])
                A[blocks[j], blocks[k]] += G
                if k != j:
                    A[blocks[k], blocks[j]] += G.T
    A[np.diag_indices(c * m)] += 1.0
    L_A, info = lapack.dpotrf(A, lower=1, clean=True, overwrite_a=1)
    if info != 0 or not np.all(np.isfinite(L_A)):
        raise np.linalg.LinAlgError("A = I + Σ_i W_i^T B_i W_i is not positive definite")
    u_mean = scipy.linalg.cho_solve((L_A, True), b, check_finite=False)
    Linv = triangular_inverse(L_A)
    a = np.empty((n, c))
    Q = np.empty((n, c, c))
    for rows in row_chunks(n, c * c * m, _CHUNK_ENTRIES):  # eqs. M16, M17
        Y = np.empty((rows.stop - rows.start, c, c * m))
        for j in range(c):
            Vj = prior.V(j)[rows]
            a[rows, j] = Vj @ u_mean[blocks[j]]
            Y[:, j, :] = Vj @ Linv[:, blocks[j]].T
        Q[rows] = Y @ Y.transpose(0, 2, 1)
    mean = np.einsum("ijk,ik->ij", C, a + lam * nu)
    cov = C @ Q @ np.swapaxes(C, 1, 2) + C * lam[:, None, :]
    cov = 0.5 * (cov + np.swapaxes(cov, 1, 2))
    log_det = float(np.sum(logdet_D) + 2.0 * np.sum(np.log(np.diag(L_A))))  # eq. M18
    alpha = nu - np.einsum("ijk,ik->ij", Pi, mean)
    post = SparseMulticlassPosterior(
        prior=prior,
        mean=mean,
        cov=cov,
        log_det=log_det,
        quad=float(np.sum(nu * mean)),
        u_mean=u_mean,
        L_A=L_A,
        Q=Q,
        C=C,
        B=B,
        alpha=alpha,
    )
    post._L_inv = Linv
    return post


def _log_Z(y, alpha, beta, post, precision, shift, log_const):
    """Eq. M19 (= M11 with the FITC posterior): ½ ν̃ᵀμ - ½ log|I + K̃Π̃| + Σ κ + Σ corrections."""
    cav_m, cav_S, ok = _cavities(post.mean, post.cov, precision, shift)
    m_x, S_x, _ = _x_prior(y, cav_m, cav_S)
    cov_x, mean_x, _ = _inner_posterior(m_x, S_x, alpha, beta)
    corr = _site_corrections(y, mean_x, cov_x, alpha, beta)
    value = 0.5 * post.quad - 0.5 * post.log_det + float(np.sum(log_const)) + float(np.sum(corr))
    return value if np.all(ok) else -np.inf


@dataclasses.dataclass
class SparseMulticlassEPResult:
    """Result of :func:`sparse_nested_ep` (the fields of ``multiclass.MulticlassEPResult``).

    alpha, beta (n, c) inner sites; site_precision (n, c, c), site_shift (n, c) outer
    sites; mean (n, c), cov (n, c, c) posterior marginals; log_Z; converged; n_iter;
    history {"max_change": [...]}; posterior :class:`SparseMulticlassPosterior`; y.
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
    posterior: SparseMulticlassPosterior
    y: np.ndarray

    def predict(self, K_cross, k_diag):
        """Latent predictive mean (p, c) and covariance (p, c, c); K_cross (p, m) or (c, p, m)."""
        return self.posterior.predict(K_cross, k_diag)

    def log_Z_gradient(self, kernel, X, Z, *, wrt_inducing=False):
        """d log Z_EP at the fixed point (eqs. M21, M22): see :func:`fitc_multiclass_gradient`."""
        return fitc_multiclass_gradient(self.posterior, kernel, X, Z, wrt_inducing=wrt_inducing)


def sparse_nested_ep(
    prior,
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
    """Nested EP for the multinomial probit on a :class:`MulticlassFITCPrior`.

    The outer loop of :func:`robustep.ep.multiclass.nested_ep` (same parameters, same
    parallel schedule, damping, convergence test and never-NaN guarantee) with the
    O(n c^2 m^2) posterior of :func:`multiclass_fitc_posterior` in place of the dense one.
    With Z = X (m = n) and no jitter it is the dense nested EP (docs/derivations/multiclass.md §8).

    Returns :class:`SparseMulticlassEPResult`.
    """
    if not isinstance(prior, MulticlassFITCPrior):
        raise TypeError("prior must be a MulticlassFITCPrior (MulticlassFITCPrior.from_kernel)")
    c = prior.c
    if n_classes is not None and int(n_classes) != c:
        raise ValueError(f"n_classes={n_classes!r} but the prior has {c} classes")
    y = _check_labels(np.asarray(y), c)
    _check_loop_options(damping, max_iter, tol)
    n = prior.n
    if y.shape[0] != n:
        raise ValueError(f"y has {y.shape[0]} entries but the prior has {n} training points")

    def posterior(precision, shift, pi):
        return multiclass_fitc_posterior(prior, precision, shift)

    loop = outer_loop(
        y, _initial_inner_sites(init, y, c), posterior,
        damping=damping, max_iter=max_iter, tol=tol, inner_sweeps=inner_sweeps,
    )  # fmt: skip
    alpha, beta, prec, shift, log_const, post = loop.state
    converged, n_iter, history = loop.converged, loop.n_iter, loop.history
    log_Z = _log_Z(y, alpha, beta, post, prec, shift, log_const)
    if not np.isfinite(log_Z):
        converged = False
        log_Z = -np.inf
    if not converged and warn:
        warn_user(
            f"sparse nested EP did not converge in {n_iter} iterations (max_iter={max_iter}, "
            f"tol={tol}, damping={damping}); the last finite state is kept. Increase "
            "max_iter or damping.",
            ConvergenceWarning,
        )
    return SparseMulticlassEPResult(
        alpha=alpha,
        beta=beta,
        site_precision=prec,
        site_shift=shift,
        mean=post.mean,
        cov=post.cov,
        log_Z=float(log_Z),
        converged=bool(converged),
        n_iter=n_iter,
        history=history,
        posterior=post,
        y=y,
    )


# ------------------------------------------------------------------ evidence gradient
def _class_weights(post):
    """Per-class pieces of the gradient weights (eqs. M21, M22).

    Returns M_diag (n, c) = diag(M_jj), s (c, m) = V_j^T alpha_j and VMV (c, m, m) =
    V_j^T M'_jj V_j, with M = alpha alpha^T - R, R = B - B 𝒱 A^-1 𝒱^T B and
    M' = M - diag(M).
    """
    prior = post.prior
    c, n, m = prior.c, prior.n, prior.m
    B, alpha = post.B, post.alpha
    R_diag = np.diagonal(B - B @ post.Q @ B, axis1=1, axis2=2)  # R_ii block = B_i - B_i Q_i B_i
    M_diag = alpha * alpha - R_diag
    Linv = post._L_A_inverse()
    Ainv = Linv.T @ Linv
    blocks = _blocks(c, m)
    s = np.zeros((c, m))
    VDV = np.zeros((c, m, m))
    for rows in row_chunks(n, m, _CHUNK_ENTRIES):
        for j in range(c):
            Vj = prior.V(j)[rows]
            s[j] += Vj.T @ alpha[rows, j]
            VDV[j] += Vj.T @ (M_diag[rows, j, None] * Vj)
    # V_j^T M'_jj V_j = s_j s_j^T - (I - (A^-1)_jj) - V_j^T diag(M_jj) V_j
    VMV = np.stack(
        [np.outer(s[j], s[j]) - (np.eye(m) - Ainv[blocks[j], blocks[j]]) - VDV[j] for j in range(c)]
    )
    return M_diag, s, 0.5 * (VMV + np.swapaxes(VMV, 1, 2)), Ainv


def _MV_rows(post, rows, j, M_diag, s, Ainv):
    """Rows of M'_jj V_j = alpha_j s_j^T - Ṽ_j (A^-1)_{:, j} - diag(M_jj) V_j (eq. M22),
    Ṽ_j = the rows (i, j) of B 𝒱: block k is B_i,jk v_ik^T."""
    prior = post.prior
    blocks = _blocks(prior.c, prior.m)
    Vj = prior.V(j)[rows]
    out = np.outer(post.alpha[rows, j], s[j]) - M_diag[rows, j, None] * Vj
    for k in range(prior.c):
        out -= post.B[rows, j, k, None] * (prior.V(k)[rows] @ Ainv[blocks[k], blocks[j]])
    return out


def _weights(post, classes, M_diag, s, VMV, Ainv, L_mm):
    """(W_nm_rows, W_mm, w_diag) of eq. S14 summed over ``classes`` (which share L_mm)."""

    def W_nm_rows(rows):
        MV = sum(_MV_rows(post, rows, j, M_diag, s, Ainv) for j in classes)
        return scipy.linalg.solve_triangular(L_mm, MV.T, lower=True, trans=1, check_finite=False).T

    VMV_sum = sum(VMV[j] for j in classes)
    T1 = scipy.linalg.solve_triangular(L_mm, VMV_sum, lower=True, trans=1, check_finite=False)
    W_mm = -0.5 * scipy.linalg.solve_triangular(L_mm, T1.T, lower=True, trans=1, check_finite=False)
    w_diag = 0.5 * M_diag[:, list(classes)].sum(axis=1)
    return W_nm_rows, 0.5 * (W_mm + W_mm.T), w_diag


def fitc_multiclass_gradient(post, kernel, X, Z, *, wrt_inducing=False):
    """Gradient of log Z_EP of the sparse multi-class model at an EP fixed point (eqs. M21, M22).

    post : the converged :class:`SparseMulticlassPosterior` of a prior built by
    :meth:`MulticlassFITCPrior.from_kernel` with ``kernel`` (one shared kernel, or a list
    of c kernels), training inputs X (n, d) and inducing inputs Z (m, d).

    Returns (grad_theta, grad_Z): grad_theta (p,) w.r.t. ``kernel.theta`` (shared kernel)
    or (Σ_j p_j,) the per-class gradients concatenated in class order (list of kernels);
    grad_Z (m, d) (analytic kernels only, see :mod:`robustep.kernels.inducing`) or None.
    The explicit derivative ½ Σ_j tr(M_jj ∂K̃_j) is contracted with the kernel derivatives
    exactly as for the binary FITC model (docs/derivations/sparse.md eq. S14, S15).
    """
    from robustep.kernels.inducing import fitc_theta_gradient, inducing_input_gradient

    prior = post.prior
    M_diag, s, VMV, Ainv = _class_weights(post)
    if isinstance(kernel, (list, tuple)):
        groups = [(kernel[j], (j,), prior.priors[j].L_mm) for j in range(prior.c)]
    else:
        groups = [(kernel, tuple(range(prior.c)), prior.priors[0].L_mm)]
    g_theta, g_Z = [], None
    for kern, classes, L_mm in groups:
        w = _weights(post, classes, M_diag, s, VMV, Ainv, L_mm)
        g_theta.append(fitc_theta_gradient(kern, X, Z, w))
        if wrt_inducing:
            gz = inducing_input_gradient(kern, X, Z, w)
            g_Z = gz if g_Z is None else g_Z + gz
    return np.concatenate(g_theta), g_Z
