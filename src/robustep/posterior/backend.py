"""Dense posterior on any array library of the Python array API (PyTorch, CuPy, ...).

:class:`ArrayPrior` holds the prior covariance K as an array of any library that
follows the Python array API (through ``array_api_compat``: numpy, array-api-strict,
PyTorch on CPU or CUDA, CuPy) and :class:`ArraySitePosterior` does every O(n^3) and
O(n^2) operation of dense EP in that library, on K's device and in K's dtype:

* the split factorisation for negative site precisions of Jylänki et al. (2011) §4
  (the same block factorisation as :mod:`robustep.posterior.dense`; the sites are
  permuted so that the positive block P comes first and the negative block N last, so
  that every block is a contiguous slice);
* log|I + K T~| from the two Cholesky factors;
* the posterior mean from two matrix-vector products and triangular solves;
* the marginal variances from ``diag(A^-1)``, A = D + S K S (docs/derivations/linalg.md),
  with the explicit formula where the identity cancels;
* predictions and the matrix R = (K + T~^-1)^-1 of the evidence gradient.

Only vectors of length n cross between the device and the host: the engine
(:mod:`robustep.ep.engine`) sends the site parameters (n,) and receives ``mean`` and
``var`` as numpy float64 (n,), so the per-site work (cavities, tilted moments with
scipy's special functions, damping, the double loop's line search) runs unchanged in
numpy; it is O(n) per sweep against the O(n^3) factorisation.

Cholesky failures are detected per library (:func:`robustep._array_api.cholesky`);
an indefinite ``K^-1 + T~`` raises :class:`robustep.linalg.InvalidSiteConfiguration`
as the dense implementation does.
"""

from __future__ import annotations

import numpy as np

from robustep import _array_api as aa
from robustep.kernels.gradient import as_kernel_gradient, contract_kernel_gradient
from robustep.linalg import InvalidSiteConfiguration
from robustep.posterior.base import GaussianPrior, SitePosterior
from robustep.posterior.dense import _CANCELLATION_THRESHOLD

# float32: the identity Sigma_ii = (sign_i - [A^-1]_ii) / |tau_i| loses about
# n eps / (|tau_i| Sigma_ii) relative accuracy, so the explicit formula takes over earlier.
_CANCELLATION_THRESHOLD_FLOAT32 = 1e-2


class ArrayPrior(GaussianPrior):
    """GP prior N(0, K) with K an (n, n) array of any array-API library, on any device.

    Parameters
    ----------
    K : (n, n) symmetric positive semi-definite covariance: a torch tensor, CuPy array,
        array-api-strict array, ... (a numpy array works too; it is usually given to
        :class:`robustep.posterior.DensePrior` instead).  Not modified, not copied.
        Its dtype (float64 or float32) and device are used for all O(n^2) and O(n^3)
        work.
    check : validate K (square, finite, symmetric, positive semi-definite up to a
        relative jitter of 1e-8; one Cholesky on the device).

    Posteriors return ``mean`` and ``var`` as numpy float64 (n,) to the engine.
    """

    supports_sequential = True

    def __init__(self, K, *, check=True):
        xp = aa.namespace(K)
        self._xp = xp
        if K.ndim != 2 or K.shape[0] != K.shape[1]:
            raise ValueError(f"K must be a square (n, n) matrix, got shape {tuple(K.shape)}")
        if K.dtype not in (xp.float64, xp.float32):
            raise ValueError(
                f"K must be float64 or float32, got {K.dtype}; convert it, e.g. "
                "K.to(torch.float64) or xp.astype(K, xp.float64)"
            )
        self.K = K
        self.device = aa.device(K)
        if check:
            _check_covariance(xp, K)
        self._kdiag = aa.to_numpy(aa.diagonal(xp, K))

    @property
    def xp(self):
        """K's array namespace (``array_api_compat``); not pickled, found again on use."""
        if getattr(self, "_xp", None) is None:
            self._xp = aa.namespace(self.K)
        return self._xp

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_xp"] = None  # a module: found again from K after unpickling
        return state

    @property
    def n(self) -> int:
        return int(self.K.shape[0])

    @property
    def dtype(self):
        return self.K.dtype

    def posterior(self, site_precision, site_shift, *, need_var=True):
        return ArraySitePosterior(self, site_precision, site_shift, need_var=need_var)

    # ------------------------------------------------------------ conversions
    def asarray(self, a):
        """``a`` (numpy or any array) as an array of K's library, dtype and device."""
        if aa.is_numpy_array(a) or not aa.is_foreign_array(a):
            return aa.from_numpy(self.xp, np.asarray(a, dtype=float), self.K)
        return self.xp.asarray(a, dtype=self.K.dtype, device=self.device)

    def convert_result(self, result):
        """Return the engine's :class:`EPResult` with its (n,) arrays in K's library.

        Called by :func:`robustep.ep.expectation_propagation` when it was given K itself
        (not a prior object), so that ``expectation_propagation(K_torch, ...)`` returns
        tensors on K's device (in K's dtype).
        """
        for name in ("mean", "var", "site_precision", "site_shift", "cavity_mean",
                     "cavity_var"):  # fmt: skip
            value = getattr(result, name)
            if value is not None:
                setattr(result, name, self.asarray(value))
        return result


def _check_covariance(xp, K):
    n = K.shape[0]
    if n == 0:
        raise ValueError("K is empty (0 x 0): pass at least one observation")
    if not bool(xp.all(xp.isfinite(K))):
        raise ValueError("K contains NaN or inf; check the kernel and its hyperparameters")
    kmax = float(xp.max(xp.abs(K)))
    eps = float(xp.finfo(K.dtype).eps)
    tol = max(1e-10, 100 * eps)
    if float(xp.max(xp.abs(K - K.mT))) > tol * kmax + 1e-12 * kmax:
        raise ValueError("K must be symmetric; symmetrise it, e.g. K = (K + K.T) / 2")
    scale = max(float(xp.mean(aa.diagonal(xp, K))), float(np.finfo(float).tiny))
    jitter = max(1e-8, 10 * eps) * scale
    if aa.cholesky(xp, aa.add_diagonal(xp, K + 0.0, jitter)) is None:
        raise ValueError(
            "K is not positive semi-definite (Cholesky failed even with relative jitter "
            f"{jitter / scale:.0e}); check the kernel and its hyperparameters, or add a "
            "WhiteKernel"
        )


class ArraySitePosterior(SitePosterior):
    """Posterior N(mu, Sigma) of N(0, K) times Gaussian sites, K on an array library.

    The same mathematics as :class:`robustep.posterior.dense.DenseSitePosterior`
    (Jylänki et al. 2011 §4; docs/derivations/linalg.md), computed in ``prior.xp`` on
    ``prior.device``.

    Parameters
    ----------
    prior : :class:`ArrayPrior`.
    site_precision, site_shift : (n,) tau~ (any sign) and nu~, numpy or host arrays.
    need_var : compute the marginal variances (default True).

    Attributes
    ----------
    mean, var : (n,) numpy float64: posterior means and marginal variances.
    alpha : (n,) numpy float64, mu = K alpha.
    log_det : log|I + K T~| (float).
    n_negative : number of negative site precisions.

    Raises
    ------
    InvalidSiteConfiguration
        if ``K^-1 + T~`` is not positive definite.
    """

    supports_site_shift = True

    def __init__(self, prior, site_precision, site_shift, *, need_var=True):
        xp, K = prior.xp, prior.K
        self._prior = prior
        tau = np.asarray(site_precision, dtype=float)
        nu = np.asarray(site_shift, dtype=float)
        n = prior.n
        if tau.shape != (n,) or nu.shape != (n,):
            raise ValueError(f"site parameters must have shape ({n},)")
        self.site_precision, self.site_shift = tau, nu
        neg = tau < 0
        self.n_negative = int(np.count_nonzero(neg))
        self._all_positive = self.n_negative == 0
        if self._all_positive:
            self._perm = None
            self._Kp = K
        else:
            # positive (and zero) sites first, negative last: every block a slice
            self._perm = np.concatenate([np.flatnonzero(~neg), np.flatnonzero(neg)])
            self._rank = np.empty_like(self._perm)  # position of site i in permuted order
            self._rank[self._perm] = np.arange(n)
            idx = xp.asarray(self._perm, device=prior.device)
            self._Kp = xp.take(xp.take(K, idx, axis=0), idx, axis=1)
        self._nP = n - self.n_negative
        s_np = np.sqrt(np.abs(tau))
        self._s_np = s_np
        self._s = prior.asarray(self._permute(s_np))  # S = diag(sqrt|tau|), permuted order
        self._factorise()
        self._set_mean(nu)
        self.var = self._marginal_variances() if need_var else None

    def _set_mean(self, nu):
        """Rasmussen & Williams (2006) Alg. 3.5 generalised to any sign:
        alpha = nu - S A^-1 S K nu, mu = K alpha (O(n^2) on the device)."""
        Kp, s = self._Kp, self._s
        nu_p = self._prior.asarray(self._permute(nu))
        alpha_p = nu_p - s * self._solve_A(s * (Kp @ nu_p))
        mean_p = Kp @ alpha_p
        self._alpha_p = alpha_p
        self.alpha = self._unpermute(aa.to_numpy(alpha_p))
        self.mean = self._unpermute(aa.to_numpy(mean_p))
        if not np.all(np.isfinite(self.mean)):
            raise InvalidSiteConfiguration("posterior mean is not finite")

    def with_site_shift(self, site_shift):
        """The posterior with the same site precisions and new shifts nu~ (n,), in O(n^2).

        The factors, marginal variances and log-determinant depend on the precisions
        only and are shared; only ``mean`` and ``alpha`` are recomputed (the EP engine's
        mean sweeps, as :meth:`robustep.posterior.dense.DenseSitePosterior.with_site_shift`).
        """
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.site_shift = np.asarray(site_shift, dtype=float)
        new._set_mean(new.site_shift)
        return new

    @property
    def xp(self):
        """The prior's array namespace."""
        return self._prior.xp

    # ------------------------------------------------------------- ordering
    def _permute(self, v):
        return v if self._perm is None else v[self._perm]

    def _unpermute(self, v):
        if self._perm is None:
            return v
        out = np.empty_like(v)
        out[self._perm] = v
        return out

    # --------------------------------------------------------- factorisation
    def _factorise(self):
        """Jylänki et al. (2011) §4: L1 L1^T = I + W1 K_PP W1, L2 L2^T = I - W2 (K_NN -
        U2 U2^T) W2 (module docstring of robustep.posterior.dense)."""
        xp, Kp, s, nP = self.xp, self._Kp, self._s, self._nP
        s1 = s[:nP]
        self._flat = not bool(np.any(self._s_np > 0))
        if self._flat:  # flat sites (EP's usual start): A = I, no factorisation
            self._L1 = None
            self.log_det = 0.0
            return
        K11 = Kp if self._all_positive else Kp[:nP, :nP]
        B1 = aa.add_diagonal(xp, s1[:, None] * K11 * s1[None, :], 1.0)
        L1 = aa.cholesky(xp, B1)
        del B1
        if L1 is None:  # cannot happen for tau_P >= 0 unless K is not PSD or not finite
            raise np.linalg.LinAlgError(
                "I + W K W is not positive definite: the prior covariance K is not positive "
                "semi-definite or contains non-finite values"
            )
        self._L1 = L1
        log_det = 2.0 * float(xp.sum(xp.log(aa.diagonal(xp, L1))))
        self._L2 = None
        if not self._all_positive:
            s2 = s[nP:]
            C = s1[:, None] * Kp[:nP, nP:] * s2[None, :]  # W1 K_PN W2
            G = aa.solve_triangular(xp, L1, C)  # L1^-1 C
            B2 = G.mT @ G - s2[:, None] * Kp[nP:, nP:] * s2[None, :]
            L2 = aa.cholesky(xp, aa.add_diagonal(xp, B2, 1.0))
            if L2 is None:
                raise InvalidSiteConfiguration(
                    f"{self.n_negative} negative site precisions make the posterior "
                    "covariance indefinite"
                )
            self._C, self._G, self._L2 = C, G, L2
            log_det += 2.0 * float(xp.sum(xp.log(aa.diagonal(xp, L2))))
        self.log_det = float(log_det)

    def _solve_A(self, b):
        """Solve A x = b, A = D + S K S (permuted order), b (n,) or (n, m) on the device."""
        xp = self.xp
        if self._flat:
            return b
        L1 = self._L1
        if self._all_positive:
            return aa.cho_solve(xp, L1, b)
        nP = self._nP
        b1, b2 = b[:nP, ...], b[nP:, ...]
        z1 = aa.solve_triangular(xp, L1, b1)
        # the Schur complement of the P block is -L2 L2^T
        x2 = -aa.cho_solve(xp, self._L2, b2 - self._G.mT @ z1)
        x1 = aa.solve_triangular(xp, L1, z1 - self._G @ x2, trans=True)
        return xp.concat([x1, x2], axis=0)

    def _diag_A_inverse(self):
        """diag(A^-1) (n,) in permuted order, on the device."""
        xp = self.xp
        L1inv = aa.triangular_inverse(xp, self._L1)
        dP = aa.column_sq_norms(xp, L1inv)  # diag(B1^-1) = column sums of L1^-2
        if self._all_positive:
            return dP
        # top-left block of A^-1: B1^-1 - B1^-1 C (L2 L2^T)^-1 C^T B1^-1
        H = L1inv.mT @ (L1inv @ self._C)  # B1^-1 C
        del L1inv
        HL = aa.solve_triangular(xp, self._L2, H.mT)
        L2inv = aa.triangular_inverse(xp, self._L2)
        return xp.concat([dP - aa.column_sq_norms(xp, HL), -aa.column_sq_norms(xp, L2inv)])

    def _marginal_variances(self):
        xp = self.xp
        kdiag = self._prior._kdiag
        s2 = self._s_np**2
        var = kdiag.copy()
        active = s2 > 0
        if not np.any(active):
            return var  # no site information: Sigma = K
        dinv = self._unpermute(aa.to_numpy(self._diag_A_inverse()))
        sign = np.where(self.site_precision < 0, -1.0, 1.0)
        var[active] = (sign[active] - dinv[active]) / s2[active]
        threshold = (
            _CANCELLATION_THRESHOLD_FLOAT32
            if self._prior.dtype == xp.float32
            else _CANCELLATION_THRESHOLD
        )
        # where |tau_i| Sigma_ii is tiny the identity cancels: K_ii - k_i^T S A^-1 S k_i
        explicit = active & ~(s2 * var >= threshold)
        explicit |= ~active
        idx = np.flatnonzero(explicit)
        if idx.size:
            cols = idx if self._perm is None else self._rank[idx]
            cols_xp = xp.asarray(cols, device=self._prior.device)
            SK = self._s[:, None] * xp.take(self._Kp, cols_xp, axis=1)
            quad = aa.to_numpy(xp.sum(SK * self._solve_A(SK), axis=0))
            var[idx] = kdiag[idx] - quad
        if not np.all(var > 0):
            raise InvalidSiteConfiguration(
                "non-positive marginal posterior variance; the site configuration is invalid"
            )
        return var

    # -------------------------------------------------------------- products
    def R_matrix(self):
        """R = (K + T^-1)^-1 = S A^-1 S, (n, n) numpy float64 (for ep.log_Z_gradient)."""
        return aa.to_numpy(self.R_matrix_xp())

    def R_matrix_xp(self):
        """R = S A^-1 S, (n, n) on the device, in the original site order."""
        xp, s = self.xp, self._s
        n = self.n
        if self._flat:
            return xp.zeros((n, n), dtype=self._Kp.dtype, device=self._prior.device)
        if self._all_positive:
            # R = S B^-1 S = (L^-1 S)^T (L^-1 S): one triangular inverse and one product
            W = aa.triangular_inverse(xp, self._L1) * s[None, :]
            return W.mT @ W
        R = s[:, None] * self._solve_A(s[:, None] * aa.eye(xp, n, self._Kp))
        r = xp.asarray(self._rank, device=self._prior.device)
        return xp.take(xp.take(R, r, axis=0), r, axis=1)

    def kernel_gradient_contraction(self, K_gradient):
        """The prior's part of d log Z_EP / d theta, shape (p,) numpy (Seeger 2005).

        ``1/2 alpha^T dK_k alpha - 1/2 tr(R dK_k)``, R = (K + T~^-1)^-1
        (:meth:`R_matrix_xp`), computed in K's namespace on K's device.

        Parameters
        ----------
        K_gradient : a sequence of p (n, n) arrays of K's library, dK/dlog theta_k
            (``kernels.array.kernel_matrix(..., eval_gradient=True)[1]``), or an (n, n, p)
            host array (contracted in numpy as the dense posterior does).

        Returns
        -------
        (p,) numpy float64.
        """
        if not isinstance(K_gradient, (list, tuple)):
            G = as_kernel_gradient(K_gradient)
            M = np.multiply.outer(self.alpha, self.alpha)
            M -= self.R_matrix().T
            M *= 0.5
            return contract_kernel_gradient(G, M)
        xp = self.xp
        alpha = self.alpha_xp()
        R = self.R_matrix_xp()
        out = np.empty(len(K_gradient))
        for j, dK in enumerate(K_gradient):
            # R and dK symmetric: tr(R dK) = sum(R o dK)
            out[j] = 0.5 * float(alpha @ (dK @ alpha)) - 0.5 * float(xp.sum(R * dK))
        return out

    def alpha_xp(self):
        """alpha (n,) on the device, in the original site order (mu = K alpha)."""
        return self._prior.asarray(self.alpha)

    def covariance(self):
        """Full posterior covariance Sigma = K - K S A^-1 S K, (n, n) numpy float64.

        Formed on the device and copied to the host for the sequential schedule (whose
        rank-one updates run in numpy; O(n^2) transfer per pass).
        """
        SK = self._s[:, None] * self._Kp
        out = aa.to_numpy(self._Kp - SK.mT @ self._solve_A(SK))
        return out if self._perm is None else out[np.ix_(self._rank, self._rank)]

    def predict(self, K_cross, k_diag=None):
        """Latent predictive moments at new inputs.

        Parameters
        ----------
        K_cross : (m, n) prior covariances between new and training inputs (numpy, or an
            array of K's library on K's device).
        k_diag : (m,) prior variances at new inputs, or None for means only.

        Returns
        -------
        mean, var : (m,) each (var None without ``k_diag``), numpy float64 when
        ``K_cross`` is a numpy array, else arrays of K's library.
        """
        xp = self.xp
        host = aa.is_numpy_array(K_cross) or not aa.is_foreign_array(K_cross)
        Kc = self._prior.asarray(K_cross)
        if self._perm is not None:
            Kc = xp.take(Kc, xp.asarray(self._perm, device=self._prior.device), axis=1)
        mean = Kc @ self._alpha_p
        var = None
        if k_diag is not None:
            SKt = self._s[:, None] * Kc.mT
            var = self._prior.asarray(k_diag) - xp.sum(SKt * self._solve_A(SKt), axis=0)
            var = xp.clip(var, 0.0, None) if hasattr(xp, "clip") else xp.where(var > 0, var, 0.0)
        if host:
            return aa.to_numpy(mean), None if var is None else aa.to_numpy(var)
        return mean, var
