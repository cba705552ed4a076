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
cancels, and those few variances are computed from the explicit formula
``K_ii - k_i^T S A^-1 S k_i``.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
from scipy.linalg import lapack

from robustep.linalg import InvalidSiteConfiguration, triangular_inverse
from robustep.posterior.base import GaussianPrior, SitePosterior

# |tau_i| * Sigma_ii below this: compute Sigma_ii explicitly (cancellation guard; the
# identity loses about n * eps / (|tau_i| Sigma_ii) relative accuracy).
_CANCELLATION_THRESHOLD = 1e-6


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
        if self._all_positive:
            B1 = w1[:, None] * K * w1[None, :]
        else:
            B1 = w1[:, None] * K[np.ix_(P, P)] * w1[None, :]
        B1[np.diag_indices_from(B1)] += 1.0
        if not np.any(w1):  # flat sites (EP's usual start): B1 = I, skip an O(n^3) factorisation
            L1, info = B1, 0
        else:
            L1, info = lapack.dpotrf(B1, lower=1, clean=True, overwrite_a=1)
        if info != 0:  # cannot happen for tau_P >= 0 unless K is not PSD or not finite
            raise np.linalg.LinAlgError(
                "I + W K W is not positive definite: the prior covariance K is not positive "
                "semi-definite or contains non-finite values"
            )
        self._L1 = L1
        log_det = 2.0 * np.sum(np.log(np.diag(L1)))
        self._L2 = None
        if not self._all_positive:
            w2 = self._s[N]
            C = w1[:, None] * K[np.ix_(P, N)] * w2[None, :]  # W1 K_PN W2
            self._C = C
            G = scipy.linalg.solve_triangular(L1, C, lower=True, check_finite=False)  # L1^-1 C
            self._G = G
            B2 = -(w2[:, None] * K[np.ix_(N, N)] * w2[None, :]) + G.T @ G
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

        Knu = K @ nu
        self.alpha = nu - self._s * self.solve_A(self._s * Knu)
        self.mean = K @ self.alpha
        if not np.all(np.isfinite(self.mean)):
            raise InvalidSiteConfiguration("posterior mean is not finite")
        self.var = self._marginal_variances() if need_var else None

    # ----------------------------------------------------------------- solves
    def solve_A(self, b):
        """Solve A x = b with A = D + S K S (block factorisation), b of shape (n,) or (n, m)."""
        b = np.asarray(b, dtype=float)
        P, N = self._P, self._N
        L1 = self._L1
        if self._all_positive:
            return scipy.linalg.cho_solve((L1, True), b, check_finite=False)
        x = np.empty_like(b)
        b1, b2 = b[P], b[N]
        z1 = scipy.linalg.solve_triangular(L1, b1, lower=True, check_finite=False)
        # Schur complement of the P block is -L2 L2^T.
        r = b2 - self._G.T @ z1
        x2 = -scipy.linalg.cho_solve((self._L2, True), r, check_finite=False)
        x1 = scipy.linalg.solve_triangular(
            L1, z1 - self._G @ x2, lower=True, trans=1, check_finite=False
        )
        x[P], x[N] = x1, x2
        return x

    def _diag_A_inverse(self):
        P, N = self._P, self._N
        L1inv = triangular_inverse(self._L1)
        d = np.empty(self.K.shape[0])
        dP = np.einsum("ij,ij->j", L1inv, L1inv)  # diag(B1^-1) = column sums of L1^-2
        if self._all_positive:
            return dP
        L2inv = triangular_inverse(self._L2)
        # top-left block of A^-1: B1^-1 - B1^-1 C (L2 L2^T)^-1 C^T B1^-1
        H = L1inv.T @ (L1inv @ self._C)  # B1^-1 C
        HL = scipy.linalg.solve_triangular(self._L2, H.T, lower=True, check_finite=False)
        d[P] = dP - np.einsum("ij,ij->j", HL, HL)
        d[N] = -np.einsum("ij,ij->j", L2inv, L2inv)
        return d

    def _marginal_variances(self):
        K = self.K
        kdiag = np.diag(K).copy()
        s2 = self._s**2
        var = kdiag.copy()
        active = s2 > 0
        if not np.any(active):
            return var  # no site information: Sigma = K
        dinv = self._diag_A_inverse()
        var[active] = (self._sign[active] - dinv[active]) / s2[active]
        # Where |tau_i| Sigma_ii is tiny the identity cancels: use K_ii - k_i^T S A^-1 S k_i.
        explicit = active & ~(s2 * var >= _CANCELLATION_THRESHOLD)
        explicit |= ~active
        idx = np.flatnonzero(explicit)
        if idx.size:
            SK = self._s[:, None] * K[:, idx]
            var[idx] = kdiag[idx] - np.einsum("ij,ij->j", SK, self.solve_A(SK))
        if not np.all(var > 0):
            raise InvalidSiteConfiguration(
                "non-positive marginal posterior variance; the site configuration is invalid"
            )
        return var

    # -------------------------------------------------------------- products
    def R_matrix(self):
        """R = (K + T^-1)^-1 = S A^-1 S, shape (n, n), used by evidence gradients."""
        n = self.K.shape[0]
        s = self._s
        return s[:, None] * self.solve_A(np.diag(s)) if n else np.zeros((0, 0))

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
        SKt = self._s[:, None] * K_cross.T
        var = np.asarray(k_diag, dtype=float) - np.einsum("ij,ij->j", SKt, self.solve_A(SKt))
        return mean, np.maximum(var, 0.0)
