"""Sparse (inducing-point) posterior: the FITC prior times Gaussian sites, O(n m^2).

The FITC prior (Snelson & Ghahramani 2006; EP with it: Naish-Guzman & Holden 2007) over n
latent values with m inducing inputs is

    K~ = Q_nn + diag(K_nn - Q_nn),   Q_nn = K_nm K_mm^-1 K_mn,

written as ``K~ = Lambda + V V^T`` with ``V = K_nm L_mm^-T`` (n, m), ``L_mm L_mm^T = K_mm``
and ``Lambda = diag(K_nn) - rowsum(V^2)`` (n,).  Every quantity the EP engine needs follows
from the latent-variable form f = V u + g, u ~ N(0, I_m), g_i ~ N(0, Lambda_i): integrating
each g_i against its site leaves a Gaussian factor on u with precision
``beta_i = tau~_i / (1 + Lambda_i tau~_i)`` and shift ``gamma_i = nu~_i / (1 + Lambda_i tau~_i)``
(docs/derivations/sparse.md eqs. S4–S6).  So

    A = I_m + V^T diag(beta) V = L_A L_A^T,      m_u = A^-1 V^T gamma,
    mean_i = c_i (v_i^T m_u + Lambda_i nu~_i),     c_i = 1 / (1 + Lambda_i tau~_i),
    var_i  = c_i^2 v_i^T A^-1 v_i + c_i Lambda_i,
    log|I + K~ T~| = sum_i log(1 + Lambda_i tau~_i) + log|A|.

Negative site precisions (Student-t outliers; Jylänki et al. 2011 §4) need no split
factorisation: the posterior exists iff every ``1 + Lambda_i tau~_i > 0`` and A is positive
definite (eq. S7), which one Cholesky of the m x m matrix A decides; otherwise
:class:`~robustep.linalg.InvalidSiteConfiguration` is raised.  Every variance is a sum of
non-negative terms (no cancellation).

Cost per posterior: O(n m^2) time, one (n, m) array (V, held by the prior) plus
(chunk, m) temporaries: all passes over the sites go through row chunks of V, so no n x n
array and no second n x m array is ever formed.
"""

from __future__ import annotations

import copy
import numbers

import numpy as np
import scipy.linalg
from scipy.linalg import blas, lapack

from robustep.kernels._rows import Scratch, row_chunks
from robustep.kernels.inducing import (
    cross_covariance,
    inducing_gradient_rows,
    rows_gradient,
    supports_fast_rows,
    theta_gradient_rows,
)
from robustep.linalg import (
    InvalidSiteConfiguration,
    blas_matmul,
    jittered_cholesky,
    triangular_inverse,
)
from robustep.posterior.base import GaussianPrior, SitePosterior

# the same for the passes that run several elementwise operations over each (chunk, m)
# block (the prior's K_nm, the gradient): the temporaries of a 4 MB block fit in the
# last-level cache (at n = 1e5, m = 512, 2^17 to 2^21 entries timed the same within noise)
_FAST_CHUNK_ENTRIES = 1 << 19


def _as_float_array(name, a, ndim):
    try:
        a = np.asarray(a, dtype=float)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be a numeric array") from err
    if a.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} contains NaN or inf; check the kernel and the inducing inputs")
    return a


class FITCPrior(GaussianPrior):
    """FITC prior N(0, Q_nn + diag(K_nn - Q_nn)) over n latent values, m inducing inputs.

    Parameters
    ----------
    K_mm : (m, m) prior covariance of the inducing values (symmetric positive definite
        up to ``jitter``); not modified.
    K_nm : (n, m) cross-covariances between training and inducing inputs; not modified,
        not kept (only V = K_nm L_mm^-T is stored).
    K_nn_diag : (n,) prior variances k(x_i, x_i) at the training inputs.
    jitter : absolute value added to the diagonal of K_mm before its Cholesky factor is
        taken (the model then uses K_mm + jitter I, also in gradients and predictions).
        None (default): 0, and if K_mm is numerically singular, the smallest of the
        jitters ``robustep.config`` tries (relative to mean diag K_mm); the value used is
        the attribute ``jitter``.

    Attributes
    ----------
    n, m : sizes.
    jitter : the absolute jitter used.
    L_mm : (m, m) lower Cholesky factor of K_mm + jitter I.
    V : (n, m) K_nm L_mm^-T, so that Q_nn = V V^T.
    Lambda : (n,) diag(K_nn - Q_nn) (rounding errors below 0 clipped to 0).

    Notes
    -----
    ``supports_sequential`` is False: the sequential schedule needs the (n, n) posterior
    covariance; use ``schedule="parallel"`` (every damping, power, robust and double-loop
    option of :func:`robustep.ep.expectation_propagation` works).  Predictions use
    ``posterior.predict(K_star_m, k_star_diag)``, the FITC predictive (eq. S10).
    """

    supports_sequential = False

    def __init__(self, K_mm, K_nm, K_nn_diag, *, jitter=None):
        K_mm = _as_float_array("K_mm", K_mm, 2)
        K_nm = _as_float_array("K_nm", K_nm, 2)
        K_nn_diag = _as_float_array("K_nn_diag", K_nn_diag, 1)
        m = K_mm.shape[0]
        if K_mm.shape != (m, m) or m == 0:
            raise ValueError(f"K_mm must be a non-empty square (m, m) matrix, got {K_mm.shape}")
        n = K_nn_diag.shape[0]
        if n == 0:
            raise ValueError("K_nn_diag is empty: pass at least one observation")
        if K_nm.shape != (n, m):
            raise ValueError(
                f"K_nm must have shape (n, m) = ({n}, {m}) to match K_nn_diag and K_mm, got "
                f"{K_nm.shape}"
            )
        if not np.allclose(K_mm, K_mm.T, rtol=1e-10, atol=1e-12 * np.max(np.abs(K_mm))):
            raise ValueError("K_mm must be symmetric; symmetrise it, e.g. (K_mm + K_mm.T) / 2")
        L_mm, jitter = _factor_kmm(K_mm, jitter)
        L_inv = triangular_inverse(L_mm)
        V = np.empty((n, m))
        for rows in row_chunks(n, m):
            V[rows] = whiten_rows(K_nm[rows], L_inv)
        self._set_factors(L_mm, V, K_nn_diag, jitter, L_inv)

    @classmethod
    def from_kernel(cls, kernel, X, Z, *, jitter=None):
        """FITC prior of a scikit-learn kernel at training inputs X (n, d), inducing Z (m, d).

        K_mm = kernel(Z), K_nm = kernel(X, Z), K_nn_diag = kernel.diag(X); K_nm is computed
        and whitened in row chunks, so only V (n, m) is ever held.  A WhiteKernel term
        therefore enters K_mm's and K_nn's diagonals but not K_nm (it acts as jitter on the
        inducing values and as extra independent noise in Lambda).
        """
        X = _as_float_array("X", X, 2)
        Z = _as_float_array("Z (inducing inputs)", Z, 2)
        if X.shape[1] != Z.shape[1]:
            raise ValueError(
                f"inducing inputs have {Z.shape[1]} features but X has {X.shape[1]}; pass "
                "inducing points of shape (m, n_features)"
            )
        K_mm = np.asarray(kernel(Z), dtype=float)
        if not np.all(np.isfinite(K_mm)):
            raise ValueError("kernel(Z) contains NaN or inf; check the kernel hyperparameters")
        L_mm, jitter = _factor_kmm(K_mm, jitter)
        L_inv = triangular_inverse(L_mm)
        V = whitened_cross_covariance(kernel, X, Z, L_inv)
        self = cls.__new__(cls)
        self._set_factors(L_mm, V, np.asarray(kernel.diag(X), dtype=float), jitter, L_inv)
        return self

    def _set_factors(self, L_mm, V, K_nn_diag, jitter, L_inv=None):
        self.L_mm = L_mm
        self._L_inv = L_inv
        self.V = V
        self.jitter = float(jitter)
        self.K_nn_diag = K_nn_diag
        lam = np.empty(V.shape[0])
        for rows in row_chunks(*V.shape):
            lam[rows] = K_nn_diag[rows] - np.einsum("ij,ij->i", V[rows], V[rows])
        scale = max(float(np.max(np.abs(K_nn_diag))), np.finfo(float).tiny)
        if np.any(lam < -1e-6 * scale):
            raise ValueError(
                "diag(K_nn) is smaller than diag(Q_nn) = diag(K_nm K_mm^-1 K_mn): K_nn_diag is "
                "inconsistent with K_nm and K_mm (compute all three from the same kernel)"
            )
        self.Lambda = np.maximum(lam, 0.0)

    @property
    def n(self) -> int:
        return int(self.V.shape[0])

    @property
    def m(self) -> int:
        return int(self.V.shape[1])

    def L_mm_inverse(self):
        """L_mm^-1 (m, m) lower triangular (``linalg.triangular_inverse``), cached."""
        if getattr(self, "_L_inv", None) is None:
            self._L_inv = triangular_inverse(self.L_mm)
        return self._L_inv

    def posterior(self, site_precision, site_shift, *, need_var=True):
        return FITCSitePosterior(self, site_precision, site_shift, need_var=need_var)

    # ------------------------------------------------ block operations on V (row chunks)
    # FITCSitePosterior touches V only through these; posterior/_dask.py overrides them
    # with Dask tasks over V's row chunks.
    def gram(self, beta, gamma):
        """(V^T diag(beta) V (m, m), V^T gamma (m,)) in one pass over the rows."""
        V = self.V
        n, m = V.shape
        G, b = np.zeros((m, m)), np.zeros(m)
        for rows in row_chunks(n, m):
            Gr, br = gram_block(V[rows], beta[rows], gamma[rows])
            G += Gr
            b += br
        return G, b

    def project(self, g):
        """V^T g, shape (m,)."""
        V = self.V
        b = np.zeros(V.shape[1])
        for rows in row_chunks(*V.shape):
            b += V[rows].T @ g[rows]
        return b

    def apply(self, u):
        """V u, shape (n,)."""
        V = self.V
        out = np.empty(V.shape[0])
        for rows in row_chunks(*V.shape):
            out[rows] = V[rows] @ u
        return out

    def quad(self, L_inv):
        """||L_inv v_i||^2 for every row v_i of V, shape (n,); L_inv (m, m) lower triangular."""
        V = self.V
        q = np.empty(V.shape[0])
        for rows in row_chunks(*V.shape):
            q[rows] = quad_block(V[rows], L_inv)
        return q

    def weighted_gram(self, alpha, d):
        """(V^T alpha (m,), V^T diag(d) V (m, m)) in one pass."""
        VDV, s = self.gram(d, alpha)
        return s, VDV

    def gradient_rows(self, kernel, X, Z, alpha, beta, M_diag, s, Ainv, wrt_Z):
        """Row part of the evidence gradient (eq. S14, S15), summed over row chunks.

        Returns (d/d theta (p,), d/d Z (m, d) or None) of <W_nm, dK_nm> + <w, d diag K_nn>;
        see :func:`gradient_block`.
        """
        return gradient_rows_sum(
            X, self.V, alpha, beta, M_diag, s, Ainv, self.L_mm_inverse(), kernel, Z, wrt_Z
        )

    def pseudo_point(self):
        """The prior N(0, Q_nn) of ``h = E[f | u]`` (Bui, Yan & Turner 2017; sparse.md §8).

        A shallow copy sharing ``L_mm`` and ``V`` (neither copied nor modified) with
        ``Lambda = 0`` and the attribute ``conditional_var`` (n,) = this prior's Lambda,
        the variances d_i of f_i | u; the prior of power EP with power α < 1 on the
        pseudo-point posterior (:mod:`robustep.ep.pseudo_point`).
        """
        new = copy.copy(self)
        new.conditional_var = np.array(self.Lambda, dtype=float)
        new.Lambda = np.zeros_like(new.conditional_var)
        return new

    def dense_covariance(self):
        """The (n, n) FITC covariance Q_nn + diag(Lambda): for tests on small n only."""
        return self.V @ self.V.T + np.diag(self.Lambda)


def _factor_kmm(K_mm, jitter):
    if jitter is None:
        L, added = jittered_cholesky(K_mm, warn=False)
        return L, added
    if not (isinstance(jitter, numbers.Real) and np.isfinite(jitter) and jitter >= 0):
        raise ValueError(f"jitter must be a non-negative float or None, got {jitter!r}")
    A = K_mm + float(jitter) * np.eye(K_mm.shape[0]) if jitter else K_mm
    L, info = lapack.dpotrf(A, lower=1, clean=True)
    if info != 0:
        raise np.linalg.LinAlgError(
            "K_mm + jitter I is not positive definite: the inducing inputs are (nearly) "
            "duplicated or the kernel is degenerate; pass a larger jitter, remove duplicate "
            "inducing points, or use jitter=None"
        )
    return L, float(jitter)


class FITCSitePosterior(SitePosterior):
    """Posterior of the FITC prior times Gaussian sites (docs/derivations/sparse.md).

    Parameters
    ----------
    prior : :class:`FITCPrior`.
    site_precision : (n,) tau~, any sign.
    site_shift : (n,) nu~.
    need_var : compute the marginal variances (default True).

    Attributes
    ----------
    mean, var : (n,) posterior marginals (eqs. S8, S9).
    alpha : (n,) nu~ - tau~ * mean, so that mean = K~ alpha.
    log_det : log|I + K~ T~| (eq. S11).
    n_negative : number of negative site precisions.
    L_A : (m, m) Cholesky factor of A = I + V^T diag(beta) V (eq. S6).
    u_mean : (m,) posterior mean of the whitened inducing values u (K_mm^1/2 u = f_m).

    Raises
    ------
    InvalidSiteConfiguration
        if some 1 + Lambda_i tau~_i <= 0 or A is not positive definite (eq. S7): the
        posterior is improper.
    """

    supports_site_shift = True

    def __init__(self, prior, site_precision, site_shift, *, need_var=True):
        tau = np.asarray(site_precision, dtype=float)
        nu = np.asarray(site_shift, dtype=float)
        n, m = prior.V.shape
        if tau.shape != (n,) or nu.shape != (n,):
            raise ValueError(f"site_precision and site_shift must have shape ({n},)")
        self.prior = prior
        self.site_precision = tau
        self.site_shift = nu
        self.n_negative = int(np.count_nonzero(tau < 0))
        lam = prior.Lambda
        den = 1.0 + lam * tau  # eq. S5
        if not np.all(den > 0):
            bad = int(np.count_nonzero(~(den > 0)))
            raise InvalidSiteConfiguration(
                f"{bad} negative site precisions are below -1/Lambda_i (the FITC diagonal): "
                "the posterior is improper"
            )
        c = 1.0 / den
        self._c = c
        self._beta = tau * c
        G, b = prior.gram(self._beta, nu * c)
        A = G + np.eye(m)  # eq. S6
        L_A, info = lapack.dpotrf(A, lower=1, clean=True, overwrite_a=1)
        if info != 0 or not np.all(np.isfinite(L_A)):
            raise InvalidSiteConfiguration(
                f"{self.n_negative} negative site precisions make the posterior covariance "
                "indefinite"
            )
        self.L_A = L_A
        self.log_det = float(np.sum(np.log(den)) + 2.0 * np.sum(np.log(np.diag(L_A))))  # S11
        self._set_mean(nu, b)
        self._quad = None
        self._Ainv = None
        self._L_inv = None
        self.var = self._marginal_variances() if need_var else None

    def _set_mean(self, nu, b=None):
        """u_mean, mean (eq. S8) and alpha for site shifts nu (n,), O(n m).

        ``b`` = V^T (c * nu) when already known (from the pass that formed A)."""
        prior, c = self.prior, self._c
        if b is None:
            b = prior.project(nu * c)
        self.u_mean = scipy.linalg.cho_solve((self.L_A, True), b, check_finite=False)
        mean = c * (prior.apply(self.u_mean) + prior.Lambda * nu)  # eq. S8
        if not np.all(np.isfinite(mean)):
            raise InvalidSiteConfiguration("posterior mean is not finite")
        self.mean = mean
        self.alpha = nu - self.site_precision * mean

    def with_site_shift(self, site_shift):
        """The posterior with the same site precisions and new shifts nu~ (n,), in O(n m).

        A, its factor, the variances and log|I + K~ T~| depend on the precisions only and
        are shared; only ``u_mean``, ``mean`` and ``alpha`` are recomputed (the EP engine's
        mean sweeps).
        """
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.site_shift = np.asarray(site_shift, dtype=float)
        new._set_mean(new.site_shift)
        return new

    def _L_A_inverse(self):
        """L_A^-1 (m, m) lower triangular, cached."""
        if self._L_inv is None:
            self._L_inv = triangular_inverse(self.L_A)
        return self._L_inv

    def _A_inverse(self):
        """A^-1 (m, m), cached."""
        if self._Ainv is None:
            Linv = self._L_A_inverse()
            self._Ainv = Linv.T @ Linv
        return self._Ainv

    def quad_diag(self):
        """q_i = v_i^T A^-1 v_i, shape (n,) (cached)."""
        if self._quad is None:
            self._quad = self.prior.quad(self._L_A_inverse())
        return self._quad

    def _marginal_variances(self):
        c = self._c
        var = c * c * self.quad_diag() + c * self.prior.Lambda  # eq. S9
        if not np.all(var > 0):
            raise InvalidSiteConfiguration(
                "non-positive marginal posterior variance; the site configuration is invalid"
            )
        return var

    def kernel_gradient_contraction(self, K_gradient):
        """Not offered: the FITC prior's K is implied by the kernel's K_mm, K_nm and
        diag(K_nn), whose derivatives its gradient needs instead of an (n, n) dK."""
        raise NotImplementedError(
            "FITCSitePosterior takes its evidence gradient from the kernel's derivatives in "
            "K_mm, K_nm and diag(K_nn): use robustep.ep.sparse_evidence.fitc_log_Z_gradient"
        )

    def covariance(self):
        raise NotImplementedError(
            "the FITC posterior does not form the (n, n) covariance (O(n^2) memory); use "
            "schedule='parallel', or `var` for the marginal variances"
        )

    # ----------------------------------------------------------------- predictions
    def predict(self, K_cross, k_diag=None):
        """FITC predictive moments of the latent f at p new inputs (eq. S10).

        Parameters
        ----------
        K_cross : (p, m) prior covariances k(x*, z_j) between the new inputs and the
            inducing inputs.
        k_diag : (p,) prior variances k(x*, x*), or None for means only.

        Returns
        -------
        mean : (p,)
        var : (p,) or None;  var = k** - Q** + v*^T A^-1 v*,  v* = L_mm^-1 k_*m.
        """
        K_cross = np.asarray(K_cross, dtype=float)
        m = self.prior.m
        if K_cross.ndim != 2 or K_cross.shape[1] != m:
            raise ValueError(f"K_cross must have shape (p, {m}) (new inputs x inducing inputs)")
        p = K_cross.shape[0]
        mean = np.empty(p)
        var = None if k_diag is None else np.asarray(k_diag, dtype=float).copy()
        for rows in row_chunks(p, m):
            Vs = scipy.linalg.solve_triangular(
                self.prior.L_mm, K_cross[rows].T, lower=True, check_finite=False
            )  # (m, c)
            mean[rows] = Vs.T @ self.u_mean
            if var is not None:
                W = scipy.linalg.solve_triangular(self.L_A, Vs, lower=True, check_finite=False)
                var[rows] += np.einsum("ij,ij->j", W, W) - np.einsum("ij,ij->j", Vs, Vs)
        if var is None:
            return mean, None
        return mean, np.maximum(var, 0.0)

    # -------------------------------------------------------------- evidence gradient
    def gradient_sums(self, M_diag=None):
        """What the gradient weights need beyond the rows (eq. S13, S14).

        Returns (M_diag (n,), s = V^T alpha (m,), W_mm (m, m)) with
        diag(M) = alpha^2 - R_ii, R_ii = beta_i - beta_i^2 v_i^T A^-1 v_i; a given
        ``M_diag`` (n,) replaces diag(M) (the pseudo-point power-EP family, where the
        FITC diagonal enters through the tilted normalisers: docs/derivations/sparse.md
        eq. P11).
        """
        prior = self.prior
        m = prior.m
        alpha = self.alpha
        if M_diag is None:
            beta = self._beta
            R_diag = beta - beta * beta * self.quad_diag()  # eq. S13
            M_diag = alpha * alpha - R_diag
        s, VDV = prior.weighted_gram(alpha, M_diag)
        Ainv = self._A_inverse()
        # V^T M' V = s s^T - V^T B V A^-1 - V^T diag(M) V, and V^T B V A^-1 = I - A^-1
        VMV = np.outer(s, s) - (np.eye(m) - Ainv) - VDV
        VMV = 0.5 * (VMV + VMV.T)
        # W_mm = -1/2 L_mm^-T (V^T M' V) L_mm^-1
        L_mm = prior.L_mm
        T1 = scipy.linalg.solve_triangular(L_mm, VMV, lower=True, trans=1, check_finite=False)
        W_mm = -0.5 * scipy.linalg.solve_triangular(
            L_mm, T1.T, lower=True, trans=1, check_finite=False
        )
        return M_diag, s, 0.5 * (W_mm + W_mm.T)

    def gradient_weights(self):
        """Weights of the explicit evidence gradient (docs/derivations/sparse.md eq. S14).

        At an EP fixed point, for any parameter theta of K_mm, K_nm, diag(K_nn):

            d log Z / d theta = <W_nm, dK_nm> + <W_mm, dK_mm> + <w_diag, d diag(K_nn)>,

        with <.,.> the sum of elementwise products.  Returns ``(W_nm_rows, W_mm, w_diag)``:
        ``W_nm_rows(rows)`` gives the (len(rows), m) block of W_nm for a row slice (the
        whole W_nm is never held), ``W_mm`` (m, m) symmetric, ``w_diag`` (n,).
        """
        M_diag, s, W_mm = self.gradient_sums()
        V, L_inv, Ainv = self.prior.V, self.prior.L_mm_inverse(), self._A_inverse()
        alpha, beta = self.alpha, self._beta

        def W_nm_rows(rows):
            return W_nm_block(V[rows], alpha[rows], beta[rows], M_diag[rows], s, Ainv, L_inv)

        return W_nm_rows, W_mm, 0.5 * M_diag


def gram_block(Vr, beta_r, gamma_r):
    """(V_r^T diag(beta_r) V_r (m, m), V_r^T gamma_r (m,)) for the rows Vr (k, m).

    BLAS ``dsyrk`` on the rows scaled by sqrt|beta| computes one triangle: k m^2 flops
    against the 2 k m^2 of a general product (the largest cost of a sparse sweep).
    With negative beta (Student-t sites; diag(M) of the evidence gradient, eq. S14)
    the rows are split by sign and the negative ones subtracted by a second ``dsyrk``, so
    the two calls together still cost k m^2.  Vr is not modified.
    """
    k, m = Vr.shape
    if k == 0:
        return np.zeros((m, m)), np.zeros(m)
    neg = beta_r < 0
    n_neg = int(np.count_nonzero(neg))
    if n_neg == 0:
        G = _syrk(np.sqrt(beta_r)[:, None] * Vr)
    else:
        G = _syrk(_scaled_rows(Vr, beta_r, ~neg)) if n_neg < k else np.zeros((m, m))
        G -= _syrk(_scaled_rows(Vr, -beta_r, neg))
    G = np.triu(G)
    G += np.triu(G, 1).T
    return G, blas_matmul(Vr.T, gamma_r)


def _scaled_rows(Vr, w, rows):
    """sqrt(w_i) v_i^T for the rows selected by the mask ``rows``, a new C-ordered array."""
    S = Vr[rows]
    S *= np.sqrt(w[rows])[:, None]
    return S


def _syrk(S):
    """Upper triangle of S^T S for S (k, m), by BLAS (S.T is a Fortran-ordered view of a
    C-ordered S, passed without a copy)."""
    return blas.dsyrk(1.0, S.T, trans=0, lower=0)


def quad_block(Vr, L_inv):
    """||L_inv v_i||^2 for the rows v_i of Vr (k, m): one triangular product (BLAS trmm,
    half the flops of a general product)."""
    W = blas.dtrmm(1.0, L_inv, Vr.T, lower=1)  # (m, k) = L_inv V_r^T
    return np.einsum("ij,ij->j", W, W)


def _work(scratch, name, shape):
    return np.empty(shape) if scratch is None else scratch.get(name, shape)


def W_nm_block(Vr, alpha_r, beta_r, M_diag_r, s, Ainv, L_inv, scratch=None):
    """Rows of W_nm = M' V L_mm^-1 (eq. S14), shape (k, m), C-ordered.

    Vr (k, m) rows of V and the site vectors alpha_r, beta_r, M_diag_r (k,) of the same
    rows; s = V^T alpha (m,), Ainv = A^-1 (m, m) symmetric and L_inv = L_mm^-1 (m, m)
    lower triangular are global.  By eq. S13 the rows of M' V are
    alpha s^T - B V A^-1 - diag(M) V (A^-1 symmetric): one BLAS ``dgemm`` (2 k m^2
    flops), a rank-one ``dger`` and one ``dtrmm`` with the explicit inverse (k m^2 flops;
    three times faster than the triangular solve ``dtrsm`` on the same operands), all on
    Fortran views of C-ordered arrays.  With a :class:`Scratch` the result is one of its
    buffers (valid until the next call with the same scratch).
    """
    MV = np.multiply(Vr, -M_diag_r[:, None], out=_work(scratch, "MV", Vr.shape))
    BV = np.multiply(Vr, beta_r[:, None], out=_work(scratch, "BV", Vr.shape))
    # on Fortran views (m, k): (M'V)^T = -A^-1 (B V)^T - (diag(M) V)^T + s alpha^T, then
    # W^T = L_mm^-T (M'V)^T, each BLAS call in place
    MVt = blas.dgemm(-1.0, Ainv.T, BV.T, beta=1.0, c=MV.T, overwrite_c=1)
    MVt = blas.dger(1.0, s, alpha_r, a=MVt, overwrite_a=1)
    return blas.dtrmm(1.0, L_inv, MVt, lower=1, trans_a=1, overwrite_b=1).T


def gradient_block(X, V, alpha, beta, M_diag, s, Ainv, L_inv, kernel, Z, wrt_Z, scratch=None):
    """Row part of the FITC evidence gradient for one block of rows (eqs. S14, S15).

    X (k, d), V (k, m) and the site vectors (k,) of the block; s = V^T alpha (m,),
    Ainv = A^-1 and L_inv = L_mm^-1 (m, m) are global.  Returns (<W_nm, dK_nm/d theta> +
    <w, d diag K_nn/d theta> (p,), <W_nm, dK_nm/dZ> (m, d) or None), W_nm the block's
    rows (:func:`W_nm_block`), w = diag(M)/2.  Kernels of ``supports_fast_rows``
    (:mod:`robustep.kernels.inducing`) get both from one kernel evaluation
    (``rows_gradient``).  ``scratch``: a :class:`robustep.kernels._rows.Scratch` shared by
    the blocks of one pass.
    """
    W = W_nm_block(V, alpha, beta, M_diag, s, Ainv, L_inv, scratch)
    if supports_fast_rows(kernel):
        return rows_gradient(
            kernel, X, Z, W, 0.5 * M_diag, wrt_theta=True, wrt_Z=wrt_Z, scratch=scratch
        )
    g_theta = theta_gradient_rows(kernel, X, Z, W, 0.5 * M_diag)
    g_Z = inducing_gradient_rows(kernel, X, Z, W) if wrt_Z else None
    return g_theta, g_Z


def whiten_rows(K_cm, L_inv, *, overwrite=False):
    """K_cm L_mm^-T (k, m) for a block of cross-covariances K_cm (k, m), C-ordered.

    Eq. S2 row by row: the Fortran view of the result is L_mm^-1 K_cm^T, one BLAS
    ``dtrmm`` with the explicit inverse L_inv = L_mm^-1 (k m^2 flops; ``dtrsm`` on the
    same operands is about three times slower in OpenBLAS).  K_cm is overwritten only
    if ``overwrite`` and it is a C-ordered float64 array.
    """
    K_cm = np.ascontiguousarray(K_cm, dtype=float)
    return blas.dtrmm(1.0, L_inv, K_cm.T, lower=1, overwrite_b=overwrite).T


def whitened_cross_covariance(kernel, X, Z, L_inv):
    """V = K(X, Z) L_mm^-T, shape (n, m) (eq. S2), in row blocks: one kernel evaluation
    (:func:`robustep.kernels.inducing.cross_covariance`) and one ``dtrmm`` per block, no
    (n, m) temporary beyond V itself.  Shared by :meth:`FITCPrior.from_kernel` and the Dask
    chunk tasks."""
    n, m = X.shape[0], Z.shape[0]
    V = np.empty((n, m))
    scratch = Scratch()
    for rows in row_chunks(n, m, _FAST_CHUNK_ENTRIES):
        V[rows] = whiten_rows(cross_covariance(kernel, X[rows], Z, scratch), L_inv, overwrite=True)
    return V


def gradient_rows_sum(X, V, alpha, beta, M_diag, s, Ainv, L_inv, kernel, Z, wrt_Z):
    """Row part of the evidence gradient (eqs. S14, S15) over the rows of X (n, d) and
    V (n, m), summed over row blocks of :func:`gradient_block` that share one
    :class:`Scratch`: (d/d theta (p,), d/d Z (m, d) or None).  Shared by
    :meth:`FITCPrior.gradient_rows` and the Dask chunk tasks (one scratch per task:
    tasks may run in parallel threads)."""
    g_theta, g_Z = 0.0, (np.zeros(Z.shape) if wrt_Z else None)
    scratch = Scratch()
    for rows in row_chunks(*V.shape, _FAST_CHUNK_ENTRIES):
        gt, gz = gradient_block(
            X[rows], V[rows], alpha[rows], beta[rows], M_diag[rows], s, Ainv, L_inv,
            kernel, Z, wrt_Z, scratch,
        )  # fmt: skip
        g_theta = g_theta + gt
        if wrt_Z:
            g_Z += gz
    return g_theta, g_Z
