"""Multi-class EP with general c x c site precisions: the label-noise multinomial probit.

The nested EP of :mod:`robustep.ep.multiclass` relies on its outer sites having the
structured precision Π̃_i = diag(π_i) - π_i π_i^T / (1^T π_i) with π_i >= 0, which gives
the O(c n^3) posterior.  The label-noise likelihood
p(y = k | f) = a + b P_mnp(k | f) (:mod:`robustep.likelihoods.noisy_multinomial_probit`)
has a two-component mixture as its tilted distribution; the moment-matched site

    Λ_i = Σ_t^{-1} - S_{-i}^{-1},   ν_i = Σ_t^{-1} μ_t - S_{-i}^{-1} m_{-i}            (N3)

still has 1 in its null space (the likelihood sees only differences of the f^j), but in
general it is not of that form (for c > 3) and may be indefinite (a point whose label the
posterior doubts widens the tilted distribution beyond the cavity).  This module:

* :func:`general_posterior` — the posterior N(μ, Σ), Σ = (K^{-1} + W)^{-1}, for any
  symmetric site blocks W_i (n, c, c), in O((c n)^3): every block is split into its
  positive and negative parts, W = W_+ - U U^T (eigen-decomposition per block), and

      B = I + W_+^{1/2} K W_+^{1/2} = L L^T,   A = (K^{-1} + W_+)^{-1} = K - K R_+ K,
      R_+ = W_+^{1/2} B^{-1} W_+^{1/2},   C = I_r - U^T A U = L_C L_C^T,
      Σ = A + A U C^{-1} U^T A,   log|I + K W| = log|B| + log|C|,                   (N4)
      R = (K + W^{-1})^{-1} = R_+ - H U C^{-1} U^T H^T,  H = I - R_+ K,
      γ = K^{-1} μ = ν - R K ν,

  (the block version of Jylänki et al. 2011 §4, as :mod:`robustep.posterior.dense` for
  scalar sites); r = number of negative eigenvalues over all blocks.  The posterior is
  positive definite iff C is: otherwise :class:`~robustep.linalg.InvalidSiteConfiguration`.
* :func:`robust_nested_ep` — parallel EP with these sites: the multinomial-probit part of
  every tilted distribution by one inner-EP sweep warm-started from the stored inner sites
  (nested EP, Riihimäki et al. 2013 §4), the mixture moments (N2), the site (N3), a damped
  step in the sites' natural parameters that is halved until the posterior and every
  cavity are positive definite (never NaN), log Z_EP (N5) and its gradient (N6).

Derivation: docs/derivations/multiclass.md §9 ("Label-noise multinomial probit").
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy import linalg
from scipy.linalg import lapack
from sklearn.exceptions import ConvergenceWarning

from robustep._warnings import warn as warn_user
from robustep.ep.multiclass import (
    _cavities,
    _check_loop_options,
    _checked_class_covariances,
    _n_classes,
)
from robustep.likelihoods.multinomial_probit import _check_labels, inner_ep
from robustep.likelihoods.noisy_multinomial_probit import NoisyMultinomialProbit
from robustep.linalg import InvalidSiteConfiguration, cholesky_inverse

__all__ = ["GeneralMulticlassPosterior", "RobustMulticlassEPResult", "general_posterior",
           "robust_nested_ep"]  # fmt: skip


def _chol(A, what):
    L, info = lapack.dpotrf(A, lower=1, clean=True)
    if info != 0:
        raise InvalidSiteConfiguration(what)
    return L


def _split_blocks(precision):
    """Symmetric W_+^{1/2} (n, c, c) and U (c n, r) with W = W_+ - U U^T, blockwise.

    Eigenvalues within 1e-12 of a block's largest |eigenvalue| count as zero (the exact
    zero along 1 of every site comes out of eigh as +-1e-16).
    """
    n, c, _ = precision.shape
    lam, V = np.linalg.eigh(precision)
    scale = np.max(np.abs(lam), axis=1, keepdims=True)
    thr = 1e-12 * scale
    lam_pos = np.where(lam > thr, lam, 0.0)
    sqrt_pos = np.einsum("ijk,ik,ilk->ijl", V, np.sqrt(lam_pos), V)
    pts, ts = np.nonzero(lam < -thr)
    r = pts.size
    U = np.zeros((c, n, r))
    if r:
        U[:, pts, np.arange(r)] = (V[pts, :, ts] * np.sqrt(-lam[pts, ts])[:, None]).T
    return 0.5 * (sqrt_pos + np.swapaxes(sqrt_pos, 1, 2)), U.reshape(c * n, r)


@dataclasses.dataclass
class GeneralMulticlassPosterior:
    """Posterior of the c latent GPs for general site blocks (eq. N4).

    mean (n, c); cov (n, c, c) marginal covariances of f_i; gamma (n, c) = K^{-1} μ;
    log_det = log|I + K W|; quad = ν^T μ; R (c n, c n) = (K + W^{-1})^{-1} (class-major);
    n_negative: number of negative eigenvalues of the site blocks.
    """

    mean: np.ndarray
    cov: np.ndarray
    gamma: np.ndarray
    log_det: float
    quad: float
    R: np.ndarray
    n_negative: int

    def predict(self, K_cross, k_diag, *, chunk=256):
        """Latent predictive at m test points: mean (m, c), covariance (m, c, c).

        K_cross : (m, n) or (c, m, n); k_diag : (m,) or (c, m).
        μ* = k*_j^T γ_j, Σ*_jk = δ_jk k**_j - k*_j^T R_jk k*_k.
        """
        n, c = self.gamma.shape
        Kc = np.asarray(K_cross, dtype=float)
        kd = np.asarray(k_diag, dtype=float)
        Kc = np.broadcast_to(Kc, (c,) + Kc.shape[-2:]) if Kc.ndim == 2 else Kc
        kd = np.broadcast_to(kd, (c, kd.shape[-1])) if kd.ndim == 1 else kd
        m = Kc.shape[1]
        mean = np.einsum("jmn,nj->mj", Kc, self.gamma)
        R3 = self.R.reshape(c, n, c * n)
        cov = np.empty((m, c, c))
        for start in range(0, m, chunk):
            sl = slice(start, min(start + chunk, m))
            T = np.matmul(Kc[:, sl], R3).reshape(c, -1, c, n)  # (k*_j^T R_jk)[j, m, k, b]
            cov[sl] = -np.einsum("jmkb,kmb->mjk", T, Kc[:, sl])
        cov[:, np.arange(c), np.arange(c)] += kd.T
        return mean, 0.5 * (cov + np.swapaxes(cov, 1, 2))

    def log_Z_gradient(self, K_gradient, *, per_class=False):
        """Σ_j [½ γ_j^T ∂K_j γ_j - ½ tr(R_jj ∂K_j)] (p,) from dK (n, n, p) or (c, n, n, p);
        ``per_class``: the c terms concatenated (c p,) (every class its own hyperparameters)."""
        n, c = self.gamma.shape
        dK = np.asarray(K_gradient, dtype=float)
        R4 = self.R.reshape(c, n, c, n)
        Ms = [0.5 * np.outer(self.gamma[:, j], self.gamma[:, j]) - 0.5 * R4[j, :, j, :]
              for j in range(c)]  # fmt: skip
        if dK.ndim == 3:
            return sum(Ms).reshape(-1) @ dK.reshape(n * n, -1)
        grads = [M.reshape(-1) @ dK[j].reshape(n * n, -1) for j, M in enumerate(Ms)]
        return np.concatenate(grads) if per_class else np.sum(grads, axis=0)


def general_posterior(Ks, precision, shift):
    """Posterior for prior covariances ``Ks`` (c, n, n) and general sites: symmetric
    ``precision`` blocks W_i (n, c, c) (may be indefinite) and ``shift`` ν (n, c).

    O((c n)^3) time (one Cholesky factorisation and one inverse of the c n x c n matrix B;
    products with the block-diagonal K cost c^2 n^3, with the block-sparse W_+^{1/2}
    O(c^3 n^2)), O((c n)^2) memory (eq. N4).  Raises InvalidSiteConfiguration when
    K^{-1} + W is not positive definite.
    """
    c, n, _ = Ks.shape
    cn = c * n
    precision = 0.5 * (precision + np.swapaxes(precision, 1, 2))
    s, U = _split_blocks(precision)  # s[a, j, k]: (W_+^{1/2})_{ja, ka}
    r = U.shape[1]
    # B[j a, l b] = Σ_k s[a, j, k] K_k[a, b] s[b, k, l]
    T = Ks[:, :, None, :] * s.transpose(1, 2, 0)[:, None, :, :]  # [k, a, l, b]
    B = np.einsum("ajk,kalb->jalb", s, T).reshape(cn, cn)
    B[np.diag_indices(cn)] += 1.0
    L = _chol(B, "I + W+^1/2 K W+^1/2 is not positive definite: check the prior covariance K")
    log_det = 2.0 * np.sum(np.log(np.diag(L)))
    Binv = cholesky_inverse(L).reshape(c, n, c, n)
    # R_+ = W_+^{1/2} B^{-1} W_+^{1/2}, two block-sparse products
    # per point a: s[a] @ Binv[:, a, :, :], then per point b: (...)[:, :, :, b] @ s[b]
    R4 = np.matmul(s, Binv.transpose(1, 0, 2, 3).reshape(n, c, cn)).reshape(n, c, c, n)
    R4 = np.matmul(R4.transpose(3, 1, 0, 2).reshape(n, cn, c), s)  # [b, (j, a), l]
    R4 = R4.reshape(n, c, n, c).transpose(1, 2, 3, 0)  # [j, a, l, b]
    KR4 = np.matmul(Ks, R4.reshape(c, n, cn)).reshape(c, n, c, n)  # (K R_+)[j a, k d]
    # diagonal blocks of A = K - K R_+ K: Σ_b (K R_+)[j a, k b] K_k[b, a]
    cov = -np.einsum("jakb,kba->ajk", KR4, Ks)
    cov[:, np.arange(c), np.arange(c)] += np.diagonal(Ks, axis1=1, axis2=2).T
    R = R4.reshape(cn, cn)
    if r:
        U4 = U.reshape(c, n, r)
        KU = np.einsum("jab,jbr->jar", Ks, U4).reshape(cn, r)
        AU = KU - KR4.reshape(cn, cn) @ KU
        C = -(U.T @ AU)
        C[np.diag_indices(r)] += 1.0
        L_C = _chol(
            C,
            f"{r} negative site-precision eigenvalues make the posterior covariance indefinite",
        )
        log_det += 2.0 * np.sum(np.log(np.diag(L_C)))
        F = linalg.solve_triangular(L_C, AU.T, lower=True, check_finite=False).reshape(r, c, n)
        cov += np.einsum("rja,rka->ajk", F, F)
        HU = U - R @ KU  # (I - R_+ K) U
        G = linalg.solve_triangular(L_C, HU.T, lower=True, check_finite=False)
        R = R - G.T @ G
    nu = shift.T.reshape(-1)  # class-major
    Kb_nu = np.einsum("jab,jb->ja", Ks, shift.T).reshape(-1)
    gamma = (nu - R @ Kb_nu).reshape(c, n)
    mean = np.einsum("jab,jb->aj", Ks, gamma)  # (n, c)
    cov = 0.5 * (cov + np.swapaxes(cov, 1, 2))
    if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(cov))):
        raise InvalidSiteConfiguration("the multi-class posterior is not finite")
    return GeneralMulticlassPosterior(
        mean=mean,
        cov=cov,
        gamma=gamma.T,
        log_det=float(log_det),
        quad=float(np.sum(shift * mean)),
        R=0.5 * (R + R.T),
        n_negative=int(r),
    )


def _site_from_moments(cav_m, cav_S, t_mean, t_cov):
    """Moment-matched site (N3): precision (n, c, c) and shift (n, c), projected onto the
    complement of 1 (where they lie exactly; the projection removes rounding)."""
    c = cav_m.shape[1]
    Pc = np.linalg.inv(cav_S)
    Pt = np.linalg.inv(t_cov)
    prec = Pt - Pc
    shift = np.einsum("ijk,ik->ij", Pt, t_mean) - np.einsum("ijk,ik->ij", Pc, cav_m)
    J = np.eye(c) - 1.0 / c
    prec = J @ prec @ J
    return 0.5 * (prec + np.swapaxes(prec, 1, 2)), shift @ J


def _log_psi(mean, cov):
    """Gaussian log-partition without the 2π term: ½ m^T S^-1 m + ½ log|S| (n,)."""
    _, logdet = np.linalg.slogdet(cov)
    return 0.5 * np.einsum("ij,ij->i", mean, np.linalg.solve(cov, mean[:, :, None])[..., 0]) + (
        0.5 * logdet
    )


@dataclasses.dataclass
class RobustMulticlassEPResult:
    """Result of :func:`robust_nested_ep` (same fields as MulticlassEPResult).

    alpha, beta (n, c) inner sites of the multinomial-probit part; site_precision (n, c, c)
    (symmetric, 1 in its null space, possibly indefinite) and site_shift (n, c): the outer
    sites; mean (n, c), cov (n, c, c): posterior marginals; log_Z: log Z_EP (N5);
    responsibility (n,): r_i = b Z_mnp / Z, the posterior probability under the tilted
    distribution that label i was not flipped; converged, n_iter,
    history {"max_change", "step"}; posterior: GeneralMulticlassPosterior; label_noise.
    """

    alpha: np.ndarray
    beta: np.ndarray
    site_precision: np.ndarray
    site_shift: np.ndarray
    mean: np.ndarray
    cov: np.ndarray
    log_Z: float
    responsibility: np.ndarray
    converged: bool
    n_iter: int
    history: dict
    posterior: GeneralMulticlassPosterior
    y: np.ndarray
    label_noise: float

    def predict(self, K_cross, k_diag):
        """Latent predictive mean (m, c) and covariance (m, c, c)."""
        return self.posterior.predict(K_cross, k_diag)

    def log_Z_gradient(self, K_gradient, *, per_class=False):
        """d log Z_EP / d θ at the fixed point (eq. N6); as MulticlassEPResult's."""
        return self.posterior.log_Z_gradient(K_gradient, per_class=per_class)

    def warm_state(self):
        """``init`` for a warm-started :func:`robust_nested_ep`."""
        return (self.alpha, self.beta, self.site_precision, self.site_shift)


def _bcast(step, like):
    """Per-site step (n,) shaped to broadcast against a site array (n, ...)."""
    return step.reshape(step.shape + (1,) * (like.ndim - 1))


def _log_Z(lik, y, alpha, beta, post, cavities):
    """log Z_EP = ½ ν^T μ - ½ log|I + K W| + Σ_i [log Z_i + Ψ(cav_i) - Ψ(marg_i)] (N5);
    ``cavities`` = (means, covariances, valid mask) of the posterior's sites."""
    cav_m, cav_S, ok = cavities
    log_Zi, _, _, r = lik.tilted_from_sites(y, cav_m, cav_S, alpha, beta)
    terms = log_Zi + _log_psi(cav_m, cav_S) - _log_psi(post.mean, post.cov)
    value = 0.5 * post.quad - 0.5 * post.log_det + float(np.sum(terms))
    return (value if np.all(ok) and np.isfinite(value) else -np.inf), r


def robust_nested_ep(
    K,
    y,
    n_classes=None,
    *,
    label_noise,
    damping=0.5,
    max_iter=200,
    tol=1e-4,
    inner_sweeps=1,
    init=None,
    warn=True,
    max_halvings=12,
):
    """Parallel EP for the label-noise multinomial probit (module docstring).

    Parameters
    ----------
    K : (n, n) prior covariance shared by the c latent GPs, or (c, n, n) one per class.
    y : (n,) int class indices 0 .. c-1.
    n_classes : c (default ``max(y) + 1``; >= 2).
    label_noise : ε in [0, (c-1)/c).  (ε = 0 runs this general path on the plain
        multinomial probit; :func:`robustep.ep.multiclass.nested_ep` is the fast one.)
    damping : in [0, 1), weight kept on the old sites (natural parameters).
    max_iter, tol : outer iterations; converged when the largest undamped change of any
        site parameter (outer Λ, ν and inner α, β) is below ``tol``.
    inner_sweeps : inner-EP sweeps per outer iteration (1 = nested EP).
    init : (alpha, beta, site_precision, site_shift) to warm-start from, or None.
    warn : ConvergenceWarning when not converged, RuntimeWarning when ``init`` gives an
        invalid posterior (then the run starts from the prior, with or without ``warn``).
    max_halvings : a damped step whose posterior is not positive definite is halved for
        every site, one that leaves some cavity not positive definite for those sites (and
        every third try for all); when every site's step has been halved this many times,
        the iteration stops (the last valid state is kept, ``converged`` False).

    Returns
    -------
    RobustMulticlassEPResult; never NaN (the last valid state is kept).
    """
    y = np.asarray(y)
    c = _n_classes(y, n_classes)
    y = _check_labels(y, c)
    lik = NoisyMultinomialProbit(c, label_noise)
    _check_loop_options(damping, max_iter, tol)
    Ks = _checked_class_covariances(K, y, c)
    n = Ks.shape[1]
    rows = np.arange(n)
    shapes = ((n, c), (n, c), (n, c, c), (n, c))
    if init is None:
        state = [np.zeros(s) for s in shapes]
    else:
        state = [np.array(a, dtype=float) for a in init]
        if len(state) != 4 or any(a.shape != s for a, s in zip(state, shapes, strict=True)):
            raise ValueError(
                f"init must be (alpha, beta, site_precision, site_shift) of shapes {shapes}"
            )
        state[0][rows, y] = 0.0
        state[1][rows, y] = 0.0

    def evaluate(st):
        """(posterior, cavities) of a state, or None if either is not positive definite;
        also the mask (n,) of the sites to blame (all of them for the posterior)."""
        try:
            post = general_posterior(Ks, st[2], st[3])
        except np.linalg.LinAlgError:
            return None, np.ones(n, dtype=bool)
        cav = _cavities(post.mean, post.cov, st[2], st[3])
        return ((post, cav) if np.all(cav[2]) else None), ~cav[2]

    current = evaluate(state)[0]
    if current is None:
        if init is None:  # pragma: no cover - the prior is always valid
            raise InvalidSiteConfiguration("the prior gives no valid posterior")
        if warn:  # the estimator's warm starts (warn=False) restart silently
            warn_user("init gives an invalid posterior; starting from the prior", RuntimeWarning)
        state = [np.zeros(s) for s in shapes]
        current = evaluate(state)[0]
    history = {"max_change": [], "step": []}
    converged = False
    n_iter = 0
    for it in range(int(max_iter)):
        post, (cav_m, cav_S, _) = current
        a_new, b_new, _ = inner_ep(y, cav_m, cav_S, state[0], state[1], n_sweeps=inner_sweeps)
        with np.errstate(all="ignore"):
            _, t_mean, t_cov, _ = lik.tilted_from_sites(y, cav_m, cav_S, a_new, b_new)
            p_new, s_new = _site_from_moments(cav_m, cav_S, t_mean, t_cov)
        ok = np.all(np.isfinite(p_new), axis=(1, 2)) & np.all(np.isfinite(s_new), axis=1)
        target = [
            np.where(ok[:, None], a_new, state[0]),
            np.where(ok[:, None], b_new, state[1]),
            np.where(ok[:, None, None], p_new, state[2]),
            np.where(ok[:, None], s_new, state[3]),
        ]
        change = max(float(np.max(np.abs(t - s))) for t, s in zip(target, state, strict=True))
        # damped step, halved for every site while the posterior is not positive definite;
        # for the sites whose cavity is not, then (every third try) for all of them
        step = np.full(n, 1.0 - float(damping))
        new, tries = None, 0
        while step.max() >= (1.0 - float(damping)) * 0.5**max_halvings:
            cand = [s + _bcast(step, s) * (t - s) for t, s in zip(target, state, strict=True)]
            new, bad = evaluate(cand)
            if new is not None:
                break
            tries += 1
            step = 0.5 * step if tries % 3 == 0 else np.where(bad, 0.5 * step, step)
        if new is None:
            break
        history["max_change"].append(change)
        history["step"].append(float(step.min()))
        state, current = cand, new
        n_iter = it + 1
        if change < tol:
            converged = True
            break
    alpha, beta, prec, shift = state
    post = current[0]
    log_Z, r = _log_Z(lik, y, alpha, beta, post, current[1])
    if not np.isfinite(log_Z):
        converged = False
    if not converged and warn:
        warn_user(
            f"robust nested EP (label_noise={lik.label_noise}) did not converge in {n_iter} "
            f"iterations (max_iter={max_iter}, tol={tol}, damping={damping}); the last valid "
            "state is kept. Increase max_iter or damping.",
            ConvergenceWarning,
        )
    return RobustMulticlassEPResult(
        alpha=alpha,
        beta=beta,
        site_precision=prec,
        site_shift=shift,
        mean=post.mean,
        cov=post.cov,
        log_Z=float(log_Z),
        responsibility=r,
        converged=bool(converged),
        n_iter=n_iter,
        history=history,
        posterior=post,
        y=y,
        label_noise=lik.label_noise,
    )
