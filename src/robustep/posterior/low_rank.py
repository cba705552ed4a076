"""A diagonal-plus-low-rank prior K = D + U U^T: the worked example of a prior representation.

The prior N(0, K) with ``K = diag(d) + U U^T``, d (n,) >= 0 and U (n, r), is the latent
model ``f = U u + g``, u ~ N(0, I_r), g ~ N(0, diag(d)).  With d = 0 it is the linear
model f = U u exactly (K of rank r, no jitter): EP on it is EP in the weight space of u,
every step below stays O(n r^2), and the posterior is proper iff A is positive definite.
Gaussian sites ``t_i(f_i) = exp(nu~_i f_i - tau~_i f_i^2 / 2)`` with precisions of any
sign give, with

    c_i = 1 + tau~_i d_i,   beta_i = tau~_i / c_i,   A = I_r + U^T diag(beta) U,

(the Schur complement of the joint precision of (u, g)) a proper posterior iff every
c_i > 0 and A is positive definite; otherwise :class:`InvalidSiteConfiguration` is
raised, exactly when K^-1 + T~ is indefinite.  Then (Woodbury identity and matrix
determinant lemma, every step O(n r^2)):

    m_u = A^-1 U^T (nu~ / c),                 posterior mean of u
    mean = (U m_u + d nu~) / c,
    var_i = d_i / c_i + ||L_A^-1 U_i^T||^2 / c_i^2,    A = L_A L_A^T,
    Sigma = diag(d / c) + W A^-1 W^T,         W = diag(1 / c) U,
    log|I + K T~| = sum_i log c_i + log|A|,
    alpha = nu~ - tau~ mean                   (mean = K alpha),
    R = (K + T~^-1)^-1 = diag(beta) - B A^-1 B^T,   B = diag(beta) U.

The evidence gradient's prior part is ``1/2 tr(M dK)`` with M = alpha alpha^T - R
(Seeger 2005); in the structure's own parameters

    d log Z / d d_i = 1/2 (alpha_i^2 - R_ii),   d log Z / d U = (alpha alpha^T - R) U,

also O(n r^2) (:meth:`DiagonalPlusLowRankSitePosterior.structure_gradient`).
docs/architecture.md, "How to add a prior representation", walks through this file.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg
from scipy.linalg import lapack

from robustep.kernels.gradient import contract_kernel_gradient
from robustep.linalg import InvalidSiteConfiguration
from robustep.posterior.base import GaussianPrior, SitePosterior


class DiagonalPlusLowRankPrior(GaussianPrior):
    """Prior N(0, diag(d) + U U^T) over n latent values.

    Parameters
    ----------
    diagonal : (n,) d, every entry >= 0 (zeros: the exact low-rank prior K = U U^T of the
        linear model f = U u, u ~ N(0, I_r)).
    factor : (n, r) U, r >= 1.

    Attributes
    ----------
    d : (n,) float array; U : (n, r) float array (neither copied when already float64).
    """

    supports_sequential = True

    def __init__(self, diagonal, factor):
        d = np.asarray(diagonal, dtype=float)
        U = np.asarray(factor, dtype=float)
        if d.ndim != 1 or d.size == 0:
            raise ValueError(f"diagonal must be a non-empty (n,) array, got shape {d.shape}")
        if U.ndim != 2 or U.shape[0] != d.size or U.shape[1] == 0:
            raise ValueError(f"factor must have shape (n, r) = ({d.size}, r), got {U.shape}")
        if not (np.all(np.isfinite(d)) and np.all(np.isfinite(U))):
            raise ValueError("diagonal and factor must be finite")
        if not np.all(d >= 0):
            raise ValueError(
                "every diagonal entry must be zero or positive (K = diag(d) + U U^T); "
                f"got {int(np.count_nonzero(d < 0))} negative"
            )
        self.d = d
        self.U = U

    @property
    def n(self) -> int:
        return int(self.d.size)

    def posterior(self, site_precision, site_shift, *, need_var=True):
        return DiagonalPlusLowRankSitePosterior(self, site_precision, site_shift, need_var=need_var)

    def dense_covariance(self):
        """K = diag(d) + U U^T, shape (n, n): for tests on small n."""
        return np.diag(self.d) + self.U @ self.U.T


class DiagonalPlusLowRankSitePosterior(SitePosterior):
    """Posterior of N(0, diag(d) + U U^T) times Gaussian sites, O(n r^2).

    Parameters
    ----------
    prior : :class:`DiagonalPlusLowRankPrior`.
    site_precision : (n,) tau~, any sign.
    site_shift : (n,) nu~.
    need_var : compute the marginal variances (default True).

    Attributes
    ----------
    mean, var : (n,) posterior marginals; alpha : (n,), mean = K alpha;
    log_det : log|I + K T~|; n_negative : number of negative site precisions.

    Raises
    ------
    InvalidSiteConfiguration
        if some 1 + tau~_i d_i <= 0 or A = I + U^T diag(beta) U is not positive definite,
        i.e. exactly when K^-1 + T~ is not positive definite.
    """

    supports_site_shift = True

    def __init__(self, prior, site_precision, site_shift, *, need_var=True):
        tau = np.asarray(site_precision, dtype=float)
        nu = np.asarray(site_shift, dtype=float)
        n = prior.n
        if tau.shape != (n,) or nu.shape != (n,):
            raise ValueError(f"site_precision and site_shift must have shape ({n},)")
        self.prior = prior
        self.site_precision = tau
        self.site_shift = nu
        self.n_negative = int(np.count_nonzero(tau < 0))
        c = 1.0 + tau * prior.d
        if not np.all(c > 0):
            raise InvalidSiteConfiguration(
                f"{int(np.count_nonzero(c <= 0))} sites have 1 + tau~_i d_i <= 0: the "
                "posterior covariance is indefinite"
            )
        self._c = c
        self._beta = tau / c
        U = prior.U
        A = (U.T * self._beta) @ U
        A.flat[:: A.shape[0] + 1] += 1.0
        L_A, info = lapack.dpotrf(A, lower=1, clean=True)
        if info != 0:
            raise InvalidSiteConfiguration(
                "I + U^T diag(beta) U is not positive definite: the posterior covariance is "
                "indefinite"
            )
        self._L_A = L_A
        self.log_det = float(np.sum(np.log(c)) + 2.0 * np.sum(np.log(np.diagonal(L_A))))
        self._set_mean(nu)
        self.var = self._marginal_variances() if need_var else None

    def _solve_A(self, b):
        return scipy.linalg.cho_solve((self._L_A, True), b, check_finite=False)

    def _set_mean(self, nu):
        U, d, c = self.prior.U, self.prior.d, self._c
        m_u = self._solve_A(U.T @ (nu / c))
        self.mean = (U @ m_u + d * nu) / c
        self.alpha = nu - self.site_precision * self.mean
        if not np.all(np.isfinite(self.mean)):
            raise InvalidSiteConfiguration("posterior mean is not finite")

    def _marginal_variances(self):
        d, c = self.prior.d, self._c
        Q = scipy.linalg.solve_triangular(self._L_A, self.prior.U.T, lower=True, check_finite=False)
        return d / c + np.einsum("ij,ij->j", Q, Q) / c**2

    def with_site_shift(self, site_shift):
        """The posterior with the same precisions and new shifts nu~ (n,), O(n r): c, beta,
        L_A, log_det and var are shared; mean and alpha are recomputed."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.site_shift = np.asarray(site_shift, dtype=float)
        new._set_mean(new.site_shift)
        return new

    # ------------------------------------------------------------------ products
    def covariance(self):
        """Sigma = diag(d / c) + W A^-1 W^T, W = diag(1 / c) U, shape (n, n)."""
        W = self.prior.U / self._c[:, None]
        Q = scipy.linalg.solve_triangular(self._L_A, W.T, lower=True, check_finite=False)
        return np.diag(self.prior.d / self._c) + Q.T @ Q

    def _R_times(self, X):
        """R X for R = diag(beta) - B A^-1 B^T, X (n,) or (n, k): O(n r k)."""
        B = self.prior.U * self._beta[:, None]
        beta = self._beta if X.ndim == 1 else self._beta[:, None]
        return beta * X - B @ self._solve_A(B.T @ X)

    def R_matrix(self):
        """R = (K + T~^-1)^-1, shape (n, n) (for tests and dense gradients)."""
        return self._R_times(np.eye(self.n))

    def kernel_gradient_contraction(self, K_gradient):
        """1/2 alpha^T dK_k alpha - 1/2 tr(R dK_k) for a dense dK, shape (p,).

        K_gradient : (n, n, p) or (n, n) array (or a lazy
        :class:`robustep.kernels.gradient.RBFKernelGradient`); forms R, O(n^2 r): for
        kernels that give K in dense form.  :meth:`structure_gradient` is the O(n r^2)
        gradient in d and U.
        """
        M = np.multiply.outer(self.alpha, self.alpha)
        M -= self.R_matrix()
        M *= 0.5
        return contract_kernel_gradient(K_gradient, M)

    def structure_gradient(self):
        """(d log Z / d d (n,), d log Z / d U (n, r)): the prior's part, O(n r^2).

        ``1/2 (alpha_i^2 - R_ii)`` and ``(alpha alpha^T - R) U``; valid at a converged EP
        fixed point (where log Z_EP is stationary in the sites).
        """
        U, alpha = self.prior.U, self.alpha
        B = U * self._beta[:, None]
        Q = scipy.linalg.solve_triangular(self._L_A, B.T, lower=True, check_finite=False)
        R_diag = self._beta - np.einsum("ij,ij->j", Q, Q)
        grad_d = 0.5 * (alpha**2 - R_diag)
        grad_U = np.outer(alpha, alpha @ U) - self._R_times(U)
        return grad_d, grad_U

    def predict(self, K_cross, k_diag=None):
        """Latent predictive moments at new inputs.

        Parameters
        ----------
        K_cross : (m, n) prior covariances between the new points and the n latent values.
        k_diag : (m,) prior variances at the new points, or None for means only.

        Returns
        -------
        mean : (m,) ``K_cross alpha``; var : (m,) ``k_diag - k*^T R k*`` (or None).
        """
        K_cross = np.asarray(K_cross, dtype=float)
        mean = K_cross @ self.alpha
        if k_diag is None:
            return mean, None
        Kt = K_cross.T
        var = np.asarray(k_diag, dtype=float) - np.einsum("ij,ij->j", Kt, self._R_times(Kt))
        return mean, np.maximum(var, 0.0)


# ------------------------------------------------------------ from a kernel's structure
#: the kernels whose covariance on the training inputs is diagonal plus low rank
SUPPORTED_KERNELS = (
    "sums of WhiteKernel, DotProduct and ConstantKernel terms, each optionally times a "
    "ConstantKernel (e.g. WhiteKernel() + DotProduct(), or "
    "ConstantKernel() * DotProduct() + WhiteKernel()), with at least one WhiteKernel"
)


def kernel_structure(kernel, X, eval_gradient=False):
    """d (n,) and U (n, r) with ``kernel(X) = diag(d) + U U^T``, read off the kernel's terms.

    A WhiteKernel(s) gives d = s 1; a DotProduct(sigma_0) gives U = [sigma_0 1, X] (its
    covariance sigma_0^2 + X X^T); a ConstantKernel c gives U = sqrt(c) 1; a product with a
    ConstantKernel c scales d by c and U by sqrt(c); a sum adds the d's and stacks the U's.

    Parameters
    ----------
    kernel : a scikit-learn kernel of :data:`SUPPORTED_KERNELS`.
    X : (n, k) inputs.
    eval_gradient : also return the derivatives w.r.t. the kernel's log hyperparameters
        ``kernel.theta`` (p,) (the non-fixed ones, in scikit-learn's order).

    Returns
    -------
    d : (n,); U : (n, r); with ``eval_gradient`` also dd : (n, p) and dU : (n, r, p).

    Raises
    ------
    ValueError
        for another kernel, or when some d_i is not positive (no WhiteKernel term).
    """
    X = np.asarray(X, dtype=float)
    d, U, dd, dU = _structure(kernel, X)
    if U.shape[1] == 0 or not np.all(d > 0):
        raise ValueError(
            "the diagonal-plus-low-rank prior needs a positive diagonal and a low-rank part: "
            f"a WhiteKernel term and a DotProduct or ConstantKernel term; got {kernel!r}. "
            f"Supported: {SUPPORTED_KERNELS}"
        )
    return (d, U, dd, dU) if eval_gradient else (d, U)


def _structure(kernel, X):
    """(d, U, dd, dU) of ``kernel`` at X, gradients w.r.t. ``kernel.theta``."""
    from sklearn.gaussian_process.kernels import (
        ConstantKernel,
        DotProduct,
        Product,
        Sum,
        WhiteKernel,
    )

    n = X.shape[0]
    ones = np.ones((n, 1))
    if isinstance(kernel, WhiteKernel):
        s = float(kernel.noise_level)
        dd = np.full((n, 1), s)[:, : 0 if kernel.hyperparameter_noise_level.fixed else 1]
        return np.full(n, s), np.zeros((n, 0)), dd, np.zeros((n, 0, dd.shape[1]))
    if isinstance(kernel, DotProduct):
        s = float(kernel.sigma_0)
        U = np.hstack([s * ones, X])
        dU = np.zeros(U.shape + (1,))
        dU[:, 0, 0] = s  # d(sigma_0) / d log sigma_0
        p = 0 if kernel.hyperparameter_sigma_0.fixed else 1
        return np.zeros(n), U, np.zeros((n, p)), dU[:, :, :p]
    if isinstance(kernel, ConstantKernel):
        s = np.sqrt(float(kernel.constant_value))
        p = 0 if kernel.hyperparameter_constant_value.fixed else 1
        return np.zeros(n), s * ones, np.zeros((n, p)), np.full((n, 1, p), 0.5 * s)
    if isinstance(kernel, Sum):
        d1, U1, dd1, dU1 = _structure(kernel.k1, X)
        d2, U2, dd2, dU2 = _structure(kernel.k2, X)
        r1, r2, p1, p2 = U1.shape[1], U2.shape[1], dd1.shape[1], dd2.shape[1]
        dU = np.zeros((n, r1 + r2, p1 + p2))
        dU[:, :r1, :p1] = dU1
        dU[:, r1:, p1:] = dU2
        return d1 + d2, np.hstack([U1, U2]), np.hstack([dd1, dd2]), dU
    if isinstance(kernel, Product):
        scale_first = isinstance(kernel.k1, ConstantKernel)
        if scale_first or isinstance(kernel.k2, ConstantKernel):
            c = kernel.k1 if scale_first else kernel.k2
            d, U, dd, dU = _structure(kernel.k2 if scale_first else kernel.k1, X)
            value = float(c.constant_value)
            s = np.sqrt(value)
            # d (c d) / d log c = c d;  d (sqrt(c) U) / d log c = sqrt(c) U / 2
            dd_c = (value * d)[:, None][:, : 0 if c.hyperparameter_constant_value.fixed else 1]
            dU_c = (0.5 * s * U)[:, :, None][:, :, : dd_c.shape[1]]
            dd, dU = value * dd, s * dU
            parts_dd = [dd_c, dd] if scale_first else [dd, dd_c]
            parts_dU = [dU_c, dU] if scale_first else [dU, dU_c]
            return value * d, s * U, np.hstack(parts_dd), np.concatenate(parts_dU, axis=2)
    raise ValueError(
        f"the diagonal-plus-low-rank prior cannot represent {kernel!r}. "
        f"Supported: {SUPPORTED_KERNELS}"
    )


def structure_evidence_gradient(posterior, dd, dU):
    """d log Z / d theta (p,) by the chain rule through d and U, O(n r^2 + n r p).

    ``sum_i (d log Z / d d_i) dd_ik + sum_ij (d log Z / d U_ij) dU_ijk`` with the prior's
    part of :meth:`DiagonalPlusLowRankSitePosterior.structure_gradient` (exact at an EP
    fixed point, as the dense ``kernel_gradient_contraction``).

    Parameters
    ----------
    posterior : :class:`DiagonalPlusLowRankSitePosterior`.
    dd : (n, p); dU : (n, r, p) from :func:`kernel_structure`.
    """
    grad_d, grad_U = posterior.structure_gradient()
    return grad_d @ dd + np.einsum("ij,ijk->k", grad_U, dU)
