"""Dense posterior: GP prior N(0, K) with an explicit (n, n) K times Gaussian sites.

:class:`DenseSitePosterior` is the posterior ``q(f) = N(mu, Sigma)`` with
``Sigma = (K^-1 + T)^-1``, ``T = diag(site_precision)`` and ``mu = Sigma @ site_shift``.
Site precisions may be negative (outliers under a Student-t likelihood), so the usual
``I + W K W`` factorisation of Rasmussen & Williams (2006, Alg. 3.5) is replaced by
the split factorisation of Jylänki et al. (2011) §4: positive sites P and negative
sites N are factorised separately,

    L1 L1^T = I + W1 K_PP W1,                      W1 = diag(sqrt(tau_P))
    L2 L2^T = I - W2 (K_NN - U2 U2^T) W2,          W2 = diag(sqrt(-tau_N)),
    U2 = K_NP W1 L1^-T,

and ``log|I + K T| = 2 sum log diag L1 + 2 sum log diag L2``.  The
configuration is valid (Sigma positive definite) iff the second factorisation
exists; otherwise :class:`InvalidSiteConfiguration` is raised.

Marginal variances come from the identity (derived in
docs/derivations/linalg.md)

    Sigma_ii = (sign_i - [A^-1]_ii) / |tau_i|,   A = D + S K S,
    S = diag(sqrt|tau|), D = diag(sign(tau)),

which needs ``diag(A^-1)`` only, i.e. one Cholesky and one triangular
inverse per factorisation (about two Cholesky-times), instead of a full
triangular solve with ``K``.  Where ``|tau_i| Sigma_ii`` is tiny the identity
cancels, and those variances are computed from the explicit formula
``K_ii - k_i^T S A^-1 S k_i``, by forward solves only
(:meth:`DenseSitePosterior.quadratic_forms`).
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import blas, lapack

from robustep.kernels.gradient import as_kernel_gradient, contract_kernel_gradient
from robustep.linalg import (
    InvalidSiteConfiguration,
    blas_matmul,
    cholesky_inverse,
    identity_plus_scaled,
    triangular_inverse,
)
from robustep.posterior.base import GaussianPrior, SitePosterior

# |tau_i| * Sigma_ii below this: compute Sigma_ii explicitly (cancellation guard; the
# identity loses about n * eps / (|tau_i| Sigma_ii) relative accuracy).
_CANCELLATION_THRESHOLD = 1e-6


def _triangular_solve(L, b, trans=0, overwrite=False):
    """L^-1 b (``trans`` 0) or L^-T b (1) for a lower-triangular Fortran-ordered L (k, k)
    (a factor of ``dpotrf``) and b (k,) or (k, m), by LAPACK ``dtrtrs``, which
    ``scipy.linalg.solve_triangular`` runs after checks that cost about 15 us a call (several
    calls per sweep at n ~ 200); ``overwrite``: b is a temporary that may hold the result."""
    if b.size == 0:
        return np.array(b, dtype=float)
    x, info = lapack.dtrtrs(L, b, lower=1, trans=trans, overwrite_b=int(overwrite))
    if info != 0:
        raise np.linalg.LinAlgError(f"singular triangular factor (dtrtrs info={info})")
    return x


def _cholesky_solve(L, b, overwrite=False):
    """(L L^T)^-1 b for a lower Cholesky factor L (k, k) and b (k,) or (k, m), by LAPACK
    ``dpotrs`` directly (no wrapper checks); ``overwrite``: b is a temporary."""
    x, info = lapack.dpotrs(L, b, lower=1, overwrite_b=int(overwrite))
    if info != 0:
        raise np.linalg.LinAlgError(f"dpotrs failed (info={info})")
    return x


class DensePrior(GaussianPrior):
    """GP prior N(0, K) with an explicit covariance matrix.

    Parameters
    ----------
    K : (n, n) symmetric positive semi-definite prior covariance (not modified, not
        copied when it is already a float64 array).
    check : validate K (finite, square, symmetric, positive semi-definite up to a
        relative jitter of 1e-8).  The PSD test costs one Cholesky; callers that build
        K from a scikit-learn kernel pass ``check=False`` to skip it (a non-PSD K
        still fails, later, with a clear error from the factorisation).
    """

    supports_sequential = True

    def __init__(self, K, *, check=True):
        K = np.asarray(K, dtype=float)
        if check:
            _check_dense_covariance(K)
        self.K = K

    @property
    def n(self) -> int:
        return int(self.K.shape[0])

    def posterior(self, site_precision, site_shift, *, need_var=True):
        return DenseSitePosterior(self.K, site_precision, site_shift, need_var=need_var)


def _check_dense_covariance(K):
    if K.ndim != 2 or K.shape[0] != K.shape[1]:
        raise ValueError(f"K must be a square (n, n) matrix, got shape {K.shape}")
    if K.shape[0] == 0:
        raise ValueError("K is empty (0 x 0): pass at least one observation")
    if not np.all(np.isfinite(K)):
        raise ValueError("K contains NaN or inf; check the kernel and its hyperparameters")
    if not np.allclose(K, K.T, rtol=1e-10, atol=1e-12 * np.max(np.abs(K))):
        raise ValueError("K must be symmetric; symmetrise it, e.g. K = (K + K.T) / 2")
    # PSD up to a small relative jitter (kernel matrices are often singular)
    scale = max(float(np.mean(np.diag(K))), np.finfo(float).tiny)
    _, info = lapack.dpotrf(K + 1e-8 * scale * np.eye(K.shape[0]), lower=1)
    if info != 0:
        raise ValueError(
            "K is not positive semi-definite (Cholesky failed even with relative jitter "
            "1e-8); check the kernel and its hyperparameters, or add a WhiteKernel"
        )


class DenseSitePosterior(SitePosterior):
    """Posterior N(mu, Sigma) of a dense GP prior N(0, K) times Gaussian sites.

    Parameters
    ----------
    K : (n, n) prior covariance (not modified, not copied).
    site_precision : (n,) tau~, any sign.
    site_shift : (n,) nu~.
    need_var : compute the marginal variances (default True).

    Attributes
    ----------
    mean : (n,) posterior mean mu.
    var : (n,) marginal posterior variances diag(Sigma) (if ``need_var``).
    alpha : (n,) vector with mu = K @ alpha (alpha = (K + T^-1)^-1 mu~).
    log_det : log|I + K T|.
    n_negative : number of sites with negative precision.

    Raises
    ------
    InvalidSiteConfiguration
        if ``K^-1 + T`` is not positive definite.
    """

    supports_site_shift = True

    def __init__(self, K, site_precision, site_shift, *, need_var=True):
        K = np.asarray(K, dtype=float)
        tau = np.asarray(site_precision, dtype=float)
        nu = np.asarray(site_shift, dtype=float)
        self.K = K
        self.site_precision = tau
        self.site_shift = nu
        neg = tau < 0
        self.n_negative = int(np.count_nonzero(neg))
        self._P = np.flatnonzero(~neg)
        self._N = np.flatnonzero(neg)
        self._all_positive = self.n_negative == 0
        self._s = np.sqrt(np.abs(tau))  # S = diag(sqrt|tau|)
        self._sign = np.where(neg, -1.0, 1.0)

        P, N = self._P, self._N
        w1 = self._s[P]
        # B1 = I + W1 K_PP W1: its lower triangle, Fortran-ordered, which LAPACK
        # factorises in place (linalg.identity_plus_scaled).  Flat sites (EP's usual
        # start): B1 = I, skip the O(n^3) factorisation.
        self._identity = self._all_positive and not np.any(w1)
        if self._identity:
            L1, info = np.eye(w1.size, order="F"), 0
        else:
            if self._all_positive:
                B1 = identity_plus_scaled(K, w1)
            else:  # K_PP is a fresh copy: B1 in its memory
                B1 = identity_plus_scaled(K.take(P, 0).take(P, 1), w1, overwrite=True)
            L1, info = lapack.dpotrf(B1, lower=1, clean=True, overwrite_a=1)
        if info != 0:  # cannot happen for tau_P >= 0 unless K is not PSD or not finite
            raise np.linalg.LinAlgError(
                "I + W K W is not positive definite: the prior covariance K is not positive "
                "semi-definite or contains non-finite values"
            )
        self._L1 = L1
        log_det = 2.0 * np.log(np.diagonal(L1)).sum()
        self._L2 = None
        self._pred = None  # S L1^-T, built by predict() on first use (all sites positive)
        if not self._all_positive:
            w2 = self._s[N]
            # Each block is built in one fresh C-ordered copy of K's block (np.take) and used
            # as its Fortran-ordered transpose, so that BLAS works in place: G = L1^-1 C
            # with C = W1 K_PN W2 (n_P, n_N), then B2 = I - W2 K_NN W2 + G^T G (lower
            # triangle; G^T G by a symmetric rank-k update, half a product's flops).
            C_T = K.take(N, 0).take(P, 1)
            C_T *= w2[:, None]
            C_T *= w1[None, :]
            G = blas.dtrsm(1.0, L1, C_T.T, lower=1, overwrite_b=1)
            self._G = G
            B2 = K.take(N, 0).take(N, 1)
            B2 *= w2[:, None]
            B2 *= -w2[None, :]
            if P.size:  # (BLAS rejects the empty G of a configuration with no positive site)
                B2 = blas.dsyrk(1.0, G, beta=1.0, c=B2.T, trans=1, lower=1, overwrite_c=1)
            else:
                B2 = B2.T
            B2[np.diag_indices_from(B2)] += 1.0
            L2, info = lapack.dpotrf(B2, lower=1, clean=True, overwrite_a=1)
            if info != 0:
                raise InvalidSiteConfiguration(
                    f"{self.n_negative} negative site precisions make the posterior covariance "
                    "indefinite"
                )
            self._L2 = L2
            log_det += 2.0 * np.sum(np.log(np.diag(L2)))
        self.log_det = float(log_det)

        self._set_mean(nu)
        self.var = self._marginal_variances() if need_var else None

    def _set_mean(self, nu):
        """alpha = nu - S A^-1 S K nu and mu = K alpha: two products with K, two triangular
        solves, O(n^2) (docs/derivations/linalg.md)."""
        K = self.K
        self.alpha = nu - self._s * self.solve_A(self._s * blas_matmul(K, nu))
        self.mean = blas_matmul(K, self.alpha)
        if not np.all(np.isfinite(self.mean)):
            raise InvalidSiteConfiguration("posterior mean is not finite")

    def with_site_shift(self, site_shift):
        """The posterior with the same site precisions and new shifts nu~ (n,), in O(n^2).

        Sigma, its factors, the marginal variances and log|I + K T| depend on the site
        precisions only, so they are shared (not copied); only ``mean`` and ``alpha``
        are recomputed.  Used by the EP engine's mean sweeps
        (docs/derivations/engine_floor.md).
        """
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.site_shift = np.asarray(site_shift, dtype=float)
        new._set_mean(new.site_shift)
        return new

    # ----------------------------------------------------------------- solves
    def solve_A(self, b):
        """Solve A x = b with A = D + S K S (block factorisation), b of shape (n,) or (n, m)."""
        b = np.asarray(b, dtype=float)
        P, N = self._P, self._N
        L1 = self._L1
        if self._all_positive:
            if self._identity:
                return b.copy()
            if b.size == 0:
                return np.zeros_like(b)
            return _cholesky_solve(L1, b)
        x = np.empty_like(b)
        b1, b2 = b[P], b[N]
        z1 = _triangular_solve(L1, b1, overwrite=True)  # (cho_solve's dpotrs below too)
        # Schur complement of the P block is -L2 L2^T.
        r = b2 - blas_matmul(self._G.T, z1)
        x2 = -_cholesky_solve(self._L2, r, overwrite=True)
        x1 = _triangular_solve(L1, z1 - blas_matmul(self._G, x2), trans=1, overwrite=True)
        x[P], x[N] = x1, x2
        return x

    def _diag_A_inverse(self):
        """(diag(A^-1) (n,), (L1^-1, L2^-1)): the diagonal and the triangular inverses it
        is built from (L2^-1 None when every site is positive)."""
        P, N = self._P, self._N
        L1inv = triangular_inverse(self._L1, clean=True)  # dpotrf(clean=1)'s factors
        d = np.empty(self.K.shape[0])
        dP = np.einsum("ij,ij->j", L1inv, L1inv)  # diag(B1^-1) = column sums of L1^-2
        if self._all_positive:
            return dP, (L1inv, None)
        L2inv = triangular_inverse(self._L2, clean=True)
        # top-left block of A^-1: B1^-1 - B1^-1 C (L2 L2^T)^-1 C^T B1^-1, whose diagonal
        # is the row sums of Z^2 with Z = B1^-1 C L2^-T = L1^-T (G L2^-T): two triangular
        # products with the inverses at hand (n_N^2 n_P + n_P^2 n_N flops; dtrmm runs at
        # dgemm speed, faster than the solves dtrsm of the same flops)
        Y = blas.dtrmm(1.0, L2inv, self._G, side=1, lower=1, trans_a=1)  # G L2^-T
        Z = blas.dtrmm(1.0, L1inv, Y, side=0, lower=1, trans_a=1, overwrite_b=1)
        d[P] = dP - np.einsum("ij,ij->i", Z, Z)
        d[N] = -np.einsum("ij,ij->j", L2inv, L2inv)
        return d, (L1inv, L2inv)

    def quadratic_forms(self, X):
        """diag(X^T A^-1 X), shape (m,), for X of shape (n, m), by forward solves only.

        With the block factorisation A = M J M^T, M = [[L1, 0], [G^T, L2]] (lower
        triangular) and J = diag(I_P, -I_N), ``x^T A^-1 x = |z_P|^2 - |z_N|^2`` for
        z = M^-1 x: z_P = L1^-1 x_P and z_N = L2^-1 (x_N - G^T z_P), about n^2 m flops,
        half of a full solve with A (docs/derivations/linalg.md).
        """
        return self._quadratic_forms(np.asarray(X, dtype=float), None)

    def _quadratic_forms(self, X, inverses):
        """:meth:`quadratic_forms`; ``inverses``: None (triangular solves) or
        (L1^-1, L2^-1) at hand, then triangular products of the same flops instead
        (dtrmm runs at dgemm speed, several times faster than dtrsm with few columns)."""
        if self._identity:
            return np.einsum("ij,ij->j", X, X)

        def forward(L, Linv, B):  # L^-1 B
            if Linv is None:
                return _triangular_solve(L, B)
            return blas.dtrmm(1.0, Linv, B, lower=1)

        L1inv, L2inv = inverses or (None, None)
        if self._all_positive:
            Z = forward(self._L1, L1inv, X)
            return np.einsum("ij,ij->j", Z, Z)
        ZP = forward(self._L1, L1inv, X[self._P])
        ZN = forward(self._L2, L2inv, X[self._N] - blas_matmul(self._G.T, ZP))
        return np.einsum("ij,ij->j", ZP, ZP) - np.einsum("ij,ij->j", ZN, ZN)

    def _marginal_variances(self):
        K = self.K
        kdiag = np.diagonal(K).copy()
        if self._identity:
            return kdiag  # no site information: Sigma = K
        s2 = self._s**2
        dinv, inverses = self._diag_A_inverse()
        sign = 1.0 if self._all_positive else self._sign
        with np.errstate(divide="ignore", invalid="ignore"):
            var = np.where(s2 > 0, (sign - dinv) / s2, kdiag)
        # Where |tau_i| Sigma_ii is tiny the identity cancels (and where tau_i = 0 it does
        # not apply): use K_ii - k_i^T S A^-1 S k_i.
        explicit = ~(s2 * var >= _CANCELLATION_THRESHOLD)
        if explicit.any():
            idx = np.flatnonzero(explicit)
            var[idx] = kdiag[idx] - self._quadratic_forms(self._s[:, None] * K[:, idx], inverses)
        if not (var > 0).all():
            raise InvalidSiteConfiguration(
                "non-positive marginal posterior variance; the site configuration is invalid"
            )
        return var

    # -------------------------------------------------------------- products
    def R_matrix(self):
        """R = (K + T^-1)^-1 = S A^-1 S, shape (n, n), used by evidence gradients."""
        n = self.K.shape[0]
        s = self._s
        return s[:, None] * self.A_inverse() * s[None, :] if n else np.zeros((0, 0))

    def kernel_gradient_contraction(self, K_gradient):
        """The prior's part of d log Z_EP / d theta, shape (p,) (Seeger 2005).

        ``sum_ab M_ab dK_ab k`` with M = 1/2 (alpha alpha^T - R), R = (K + T~^-1)^-1 =
        S A^-1 S (:meth:`R_matrix`): both terms of ``1/2 alpha^T dK_k alpha -
        1/2 tr(R dK_k)`` in one contraction.  With every site precision >= 0, A^-1 =
        B1^-1 comes from ``linalg.cholesky_inverse`` (two n^3/3 passes) and a dense
        gradient is contracted as one matrix-vector product with its (n^2, p) reshape;
        otherwise by :func:`robustep.kernels.gradient.contract_kernel_gradient`.

        Parameters
        ----------
        K_gradient : (n, n, p) or (n, n) array of dK/dlog theta (scikit-learn's
            ``kernel(X, eval_gradient=True)[1]``), or a lazy
            :class:`robustep.kernels.gradient.RBFKernelGradient`.

        Returns
        -------
        (p,) float array.
        """
        G = as_kernel_gradient(K_gradient)
        if self._all_positive and isinstance(G, np.ndarray):
            n = G.shape[0]
            M = 0.5 * np.outer(self.alpha, self.alpha) - 0.5 * self.R_matrix()
            return M.reshape(-1) @ G.reshape(n * n, G.shape[2])
        M = np.multiply.outer(self.alpha, self.alpha)
        M -= self.R_matrix().T
        M *= 0.5
        return contract_kernel_gradient(G, M)

    def A_inverse(self):
        """A^-1 for A = D + S K S, shape (n, n), from the block factorisation.

        B1^-1 = L1^-T L1^-1 by ``linalg.cholesky_inverse`` (2n^3/3 flops, a third of the
        2n^3 of solving against the identity).  With negative sites the Schur complement
        of the P block is -L2 L2^T, so with H = B1^-1 C and Hl = L2^-1 H^T:
        [A^-1]_PP = B1^-1 - Hl^T Hl, [A^-1]_PN = Hl^T L2^-1, [A^-1]_NN = -L2^-T L2^-1.
        """
        P, N = self._P, self._N
        B1inv = cholesky_inverse(self._L1)
        if self._all_positive:
            return B1inv
        L2inv = triangular_inverse(self._L2, clean=True)  # dpotrf(clean=1)'s factor
        H = _triangular_solve(self._L1, self._G, trans=1)  # B1^-1 C = L1^-T G, (n_P, n_N)
        Hl = L2inv @ H.T  # L2^-1 H^T, (n_N, n_P)
        Ainv = np.empty((self.K.shape[0],) * 2)
        Ainv[np.ix_(P, P)] = B1inv - Hl.T @ Hl
        PN = Hl.T @ L2inv
        Ainv[np.ix_(P, N)] = PN
        Ainv[np.ix_(N, P)] = PN.T
        Ainv[np.ix_(N, N)] = -(L2inv.T @ L2inv)
        return Ainv

    def covariance(self):
        """Full posterior covariance Sigma = K - K S A^-1 S K, shape (n, n)."""
        SK = self._s[:, None] * self.K
        return self.K - SK.T @ self.solve_A(SK)

    def predict(self, K_cross, k_diag=None):
        """Latent predictive moments at new inputs.

        Parameters
        ----------
        K_cross : (m, n) prior covariances between new and training inputs.
        k_diag : (m,) prior variances at new inputs, or None for means only.

        Returns
        -------
        mean : (m,)
        var : (m,) or None
        """
        K_cross = np.asarray(K_cross, dtype=float)
        mean = K_cross @ self.alpha
        if k_diag is None:
            return mean, None
        k_diag = np.asarray(k_diag, dtype=float)
        # k*^T S A^-1 S k*.  All sites positive and many points (m >= n/2) or a second
        # call: |L1^-1 S k*|^2 by one matrix product with the cached (L1^-1 S)^T (the
        # O(n^3/3) inverse is made once, and gemm runs several times faster than a
        # triangular solve); otherwise forward solves (quadratic_forms).
        n, m = self.K.shape[0], K_cross.shape[0]
        if self._all_positive and self._pred is None and 2 * m >= n:
            self._pred = (triangular_inverse(self._L1) * self._s[None, :]).T  # (L1^-1 S)^T
        if self._pred is not None:
            V = K_cross @ self._pred  # (m, n), rows (L1^-1 S k*)^T
            var = k_diag - np.einsum("ij,ij->i", V, V)
        else:
            var = k_diag - self.quadratic_forms(self._s[:, None] * K_cross.T)
        return mean, np.maximum(var, 0.0)
