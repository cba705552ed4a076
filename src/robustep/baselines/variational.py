"""Variational baselines for GP regression with a Student-t likelihood.

Two methods from Jylänki et al. (2011), Secs. 3.3–3.4:

* **VB (variational bounds)**, Gibbs & MacKay (2000) / Nickisch & Rasmussen (2008):
  each Student-t term is bounded by an unnormalised Gaussian in f,

      p(y_i | f_i) >= exp(-(f_i - y_i)^2 / (2 gamma_i) - h(gamma_i) / 2),

  a tangent of the convex function x -> log p(x = (y - f)^2) at
  x0 = (nu + 1) gamma - nu sigma^2 (so gamma >= nu sigma^2 / (nu + 1)),
  h(gamma) = -2 log p(x0) - x0 / gamma.  Then

      log Z_VB(gamma) = log N(y | 0, K + Gamma) + sum_i [log(2 pi gamma_i) - h(gamma_i)] / 2,

  a lower bound on log p(y | theta) that is maximised over gamma by the EM
  fixed point x0_i = E_q[(y_i - f_i)^2] = (y_i - mu_i)^2 + Sigma_ii.

* **fVB (factorised VB)** on the scale mixture (eq. 3),
  y_i | f_i, V_i ~ N(f_i, V_i), V_i ~ Inv-chi^2(nu, sigma^2), with
  q(f, V) = q(f) prod_i q(V_i) (eq. 6): q(V_i) = Inv-Gamma(a_i, b_i),
  a_i = (nu + 1)/2, b_i = (nu sigma^2 + E_q[(y_i - f_i)^2]) / 2, and q(f) the GP
  posterior with noise variances Gamma_i = 1 / E[1/V_i] = b_i / a_i.  The
  hyperparameters are estimated by EM (E-step: q(V), q(f); M-step: maximise
  the lower bound over theta, nu, sigma with q(V) fixed), following Kuss (2006).

  For fixed hyperparameters the VB and fVB fixed points give the same q(f)
  (Gamma_i = (nu sigma^2 + E r_i^2)/(nu + 1) in both); they differ in the
  bound used for the hyperparameters and in how it is optimised.

The derivations are in docs/derivations/variational.md.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
from scipy import linalg, optimize
from scipy.special import digamma, gammaln
from sklearn.exceptions import ConvergenceWarning

from robustep._warnings import warn
from robustep.baselines import _student_t as st
from robustep.kernels.gradient import KernelWithGradient, contract_kernel_gradient
from robustep.likelihoods import StudentT
from robustep.linalg import jittered_cholesky, lower_gram, plus_diagonal, triangular_inverse

__all__ = [
    "VBResult",
    "variational_bounds",
    "vb_log_marginal_likelihood_gradient",
    "FVBResult",
    "factorized_vb",
    "fvb_bound_gradient",
    "fvb_em",
]


def _cholesky(A):
    return jittered_cholesky(A, warn=False)[0]


@dataclasses.dataclass
class _HeteroscedasticGP:
    """GP regression with fixed per-point noise variances Gamma (n,): the shared q(f)."""

    K: np.ndarray
    y: np.ndarray
    noise: np.ndarray

    def __post_init__(self):
        self.Lc = _cholesky(plus_diagonal(self.K, self.noise))  # K + Gamma
        self.alpha = linalg.cho_solve((self.Lc, True), self.y, check_finite=False)
        Linv = triangular_inverse(self.Lc)  # n^3/3 flops (a solve against I takes n^3)
        self.Kyinv_diag = np.sum(Linv**2, axis=0)
        self._Linv = Linv
        # Sigma = (K^-1 + Gamma^-1)^-1 = Gamma - Gamma (K + Gamma)^-1 Gamma
        self.mean = self.y - self.noise * self.alpha
        self.var = np.maximum(self.noise - self.noise**2 * self.Kyinv_diag, 1e-300)

    def log_marginal(self):
        """log N(y | 0, K + Gamma)."""
        return float(
            -0.5 * self.y @ self.alpha
            - np.sum(np.log(np.diag(self.Lc)))
            - 0.5 * len(self.y) * np.log(2 * np.pi)
        )

    def kernel_gradient(self, K_gradient):
        """d log N(y|0, K + Gamma) / d log theta_kernel = (a^T K_j a - tr(Ky^-1 K_j)) / 2, (p,).

        K_gradient : (n, n, p) or (n, n) array, or a lazy
        :class:`robustep.kernels.gradient.RBFKernelGradient`; one contraction with
        M = (a a^T - Ky^-1) / 2.
        """
        M = np.multiply.outer(self.alpha, self.alpha)
        M -= lower_gram(self._Linv)  # Ky^-1
        M *= 0.5
        return contract_kernel_gradient(K_gradient, M)

    def posterior_covariance(self):
        G = self.noise
        Kyinv = lower_gram(self._Linv)
        return np.diag(G) - (G[:, None] * Kyinv) * G[None, :]

    def predict(self, K_cross, k_diag):
        K_cross = np.atleast_2d(np.asarray(K_cross, float))
        s = linalg.solve_triangular(self.Lc, K_cross.T, lower=True, check_finite=False)
        var = np.asarray(k_diag, float) - np.sum(s**2, axis=0)
        return K_cross @ self.alpha, np.maximum(var, 1e-12 * np.maximum(k_diag, 1e-300))


def _check(K, y):
    K = np.asarray(K, float)
    y = np.asarray(y, float)
    if y.ndim != 1 or not np.all(np.isfinite(y)):
        raise ValueError("y must be a finite one-dimensional array")
    if K.shape != (y.size, y.size) or not np.all(np.isfinite(K)):
        raise ValueError(f"K must be a finite ({y.size}, {y.size}) matrix, got shape {K.shape}")
    return K, y


# --------------------------------------------------------------------------- VB
@dataclasses.dataclass
class VBResult:
    """Variational-bound approximation (Jylänki et al. 2011, Sec. 3.4).

    gamma : (n,) bound widths (noise variances of the equivalent Gaussian model).
    mean, var : (n,) posterior moments of q(f) = N(mean, Sigma).
    log_marginal_likelihood : the maximised lower bound log Z_VB.
    converged, n_iter : fixed-point iterations.
    """

    gamma: np.ndarray
    mean: np.ndarray
    var: np.ndarray
    log_marginal_likelihood: float
    converged: bool
    n_iter: int
    _gp: _HeteroscedasticGP = dataclasses.field(repr=False)

    def predict(self, K_cross, k_diag):
        """Latent predictive (mean, var) at m test points; K_cross (m, n), k_diag (m,)."""
        return self._gp.predict(K_cross, k_diag)

    def posterior_covariance(self):
        """Sigma, shape (n, n)."""
        return self._gp.posterior_covariance()


def _vb_bound(gp, y, gamma, df, scale):
    x0 = np.maximum((df + 1.0) * gamma - df * scale**2, 0.0)
    minus_half_h = StudentT(df, scale).log_prob(y, y + np.sqrt(x0)) + 0.5 * x0 / gamma
    return gp.log_marginal() + float(np.sum(0.5 * np.log(2 * np.pi * gamma) + minus_half_h))


def variational_bounds(
    K, y, likelihood, *, max_iter: int = 1000, tol: float = 1e-7, init=None
) -> VBResult:
    """Maximise the VB lower bound over gamma for fixed hyperparameters.

    K : (n, n); y : (n,); likelihood : Student-t (``df``, ``scale`` attributes).
    init : optional (n,) starting gamma (warm start).  Convergence when the bound
    increases by less than ``tol`` in an EM step.
    """
    K, y = _check(K, y)
    df, scale = st.student_t_params(likelihood)
    floor = df * scale**2 / (df + 1.0)
    gamma = (
        np.full(y.size, scale**2) if init is None else np.maximum(np.asarray(init, float), floor)
    )
    gp = _HeteroscedasticGP(K, y, gamma)
    bound = _vb_bound(gp, y, gamma, df, scale)
    converged = False
    n_iter = 0
    for n_iter in range(1, max_iter + 1):  # noqa: B007
        x0 = (y - gp.mean) ** 2 + gp.var  # E_q[(y_i - f_i)^2]
        gamma = (df * scale**2 + x0) / (df + 1.0)
        gp = _HeteroscedasticGP(K, y, gamma)
        new = _vb_bound(gp, y, gamma, df, scale)
        change = new - bound
        bound = new
        if abs(change) < tol:
            converged = True
            break
    if not converged:
        warn(
            f"VB fixed point did not converge in {max_iter} iterations",
            ConvergenceWarning,
        )
    return VBResult(gamma, gp.mean, gp.var, bound, converged, n_iter, gp)


def vb_log_marginal_likelihood_gradient(result: VBResult, K_gradient, likelihood, y):
    """Gradient of log Z_VB at the optimal gamma (envelope theorem: gamma held fixed).

    Returns (grad_kernel (p,), grad_likelihood (2,) in (log df, log scale)).
    The likelihood part is sum_i d log p(x0_i) / d log(nu, sigma) at fixed x0_i,
    because d log p / d x0 = -1 / (2 gamma) cancels the x0 / (2 gamma) term.
    """
    y = np.asarray(y, float)
    df, scale = st.student_t_params(likelihood)
    gk = result._gp.kernel_gradient(K_gradient)
    x0 = np.maximum((df + 1.0) * result.gamma - df * scale**2, 0.0)
    gl = StudentT(df, scale).log_prob_parameter_gradient(y, y + np.sqrt(x0)).sum(axis=0)
    return gk, gl


# -------------------------------------------------------------------------- fVB
@dataclasses.dataclass
class FVBResult:
    """Factorised VB approximation q(f) prod q(V_i) (Jylänki et al. 2011, eq. 6).

    a, b : (n,) shape and scale of q(V_i) = Inv-Gamma(a_i, b_i).
    mean, var : (n,) moments of q(f).
    elbo : the variational lower bound on log p(y | theta, nu, sigma).
    """

    a: np.ndarray
    b: np.ndarray
    mean: np.ndarray
    var: np.ndarray
    elbo: float
    converged: bool
    n_iter: int
    _gp: _HeteroscedasticGP = dataclasses.field(repr=False)

    @property
    def log_marginal_likelihood(self) -> float:
        """Alias of ``elbo`` (a lower bound)."""
        return self.elbo

    @property
    def noise(self) -> np.ndarray:
        """Effective noise variances 1 / E[1/V_i] = b_i / a_i, shape (n,)."""
        return self.b / self.a

    def predict(self, K_cross, k_diag):
        """Latent predictive (mean, var) at m test points; K_cross (m, n), k_diag (m,)."""
        return self._gp.predict(K_cross, k_diag)


def _fvb_elbo(gp, a, b, df, scale):
    """Collapsed ELBO: log N(y|0,K+G) + sum[log G/2 - E log V/2 + E log p(V) - E log q(V)]."""
    ElogV = np.log(b) - digamma(a)
    Einv = a / b
    G = b / a
    alpha0, beta0 = 0.5 * df, 0.5 * df * scale**2
    Elogp = alpha0 * np.log(beta0) - gammaln(alpha0) - (alpha0 + 1) * ElogV - beta0 * Einv
    entropy = a + np.log(b) + gammaln(a) - (1 + a) * digamma(a)
    return gp.log_marginal() + float(np.sum(0.5 * np.log(G) - 0.5 * ElogV + Elogp + entropy))


def factorized_vb(
    K, y, likelihood, *, max_iter: int = 1000, tol: float = 1e-7, init=None
) -> FVBResult:
    """E-step of fVB for fixed hyperparameters: alternate q(V) and q(f) to convergence.

    init : optional (n,) starting b (warm start).
    """
    K, y = _check(K, y)
    df, scale = st.student_t_params(likelihood)
    a = np.full(y.size, 0.5 * (df + 1.0))
    b = a * scale**2 if init is None else np.asarray(init, float).copy()
    gp = _HeteroscedasticGP(K, y, b / a)
    elbo = _fvb_elbo(gp, a, b, df, scale)
    converged = False
    n_iter = 0
    for n_iter in range(1, max_iter + 1):  # noqa: B007
        b = 0.5 * (df * scale**2 + (y - gp.mean) ** 2 + gp.var)
        gp = _HeteroscedasticGP(K, y, b / a)
        new = _fvb_elbo(gp, a, b, df, scale)
        change = new - elbo
        elbo = new
        if abs(change) < tol:
            converged = True
            break
    if not converged:
        warn(
            f"fVB E-step did not converge in {max_iter} iterations",
            ConvergenceWarning,
        )
    return FVBResult(a, b, gp.mean, gp.var, elbo, converged, n_iter, gp)


def fvb_bound_gradient(result: FVBResult, K_gradient, likelihood):
    """Gradient of the fVB bound with q(V) held fixed (the M-step objective).

    Returns (grad_kernel (p,), grad_likelihood (2,) in (log df, log scale)):
    d/d log sigma = sum(nu - nu sigma^2 E[1/V]),
    d/d log nu = nu sum(log(nu sigma^2/2)/2 + 1/2 - psi(nu/2)/2 - E log V/2 - sigma^2 E[1/V]/2).
    """
    df, scale = st.student_t_params(likelihood)
    gk = result._gp.kernel_gradient(K_gradient)
    a, b = result.a, result.b
    ElogV = np.log(b) - digamma(a)
    Einv = a / b
    g_sigma = np.sum(df - df * scale**2 * Einv)
    g_nu = df * np.sum(
        0.5 * np.log(0.5 * df * scale**2)
        + 0.5
        - 0.5 * digamma(0.5 * df)
        - 0.5 * ElogV
        - 0.5 * scale**2 * Einv
    )
    return gk, np.array([g_nu, g_sigma])


def fvb_m_step_objective(K, y, likelihood, a, b):
    """The M-step objective (collapsed fVB bound) for fixed q(V) = IG(a, b); a float."""
    df, scale = st.student_t_params(likelihood)
    gp = _HeteroscedasticGP(np.asarray(K, float), np.asarray(y, float), b / a)
    return _fvb_elbo(gp, a, b, df, scale)


def fvb_em(
    kernel,
    X,
    y,
    likelihood,
    *,
    optimize_df: bool = False,
    max_em_iter: int = 50,
    tol: float = 1e-4,
    m_step_iter: int = 10,
    bounds_df=(1.05, 1000.0),
):
    """Type-II estimation of kernel hyperparameters, sigma (and nu) by variational EM.

    Jylänki et al. (2011) Sec. 3.3 / 6.2 (after Kuss 2006): the E-step fits q(f), q(V)
    for fixed hyperparameters; the M-step runs ``m_step_iter`` L-BFGS-B iterations on
    the bound with q(V) fixed.  Flat hyperpriors on log theta, log sigma and log log nu
    add constants only.  Stops when the bound increases by less than ``tol``.

    Returns (kernel, likelihood, FVBResult, n_em_iter, converged).
    """
    y = np.asarray(y, float)
    kern = kernel
    lik = likelihood
    kernel_and_gradient = KernelWithGradient(kernel, X)  # K, dK/dlog theta at any theta
    res = factorized_vb(kern(X), y, lik)
    old = res.elbo
    converged = False
    it = 0
    lb_df = (np.log(bounds_df[0]), np.log(bounds_df[1]))
    for it in range(1, max_em_iter + 1):  # noqa: B007
        a, b = res.a, res.b
        nk = kern.theta.size
        th0 = np.concatenate([kern.theta, np.log([lik.df, lik.scale])])
        kb = [tuple(r) for r in kern.bounds]

        def negobj(th, a=a, b=b, nk=nk, lik=lik):
            l2 = _with_df_scale(lik, np.exp(th[nk]), np.exp(th[nk + 1]))
            Kx, Kg = kernel_and_gradient(th[:nk])
            try:
                gp = _HeteroscedasticGP(Kx, y, b / a)
            except linalg.LinAlgError:
                return 1e25, np.zeros_like(th)
            df, scale = st.student_t_params(l2)
            val = _fvb_elbo(gp, a, b, df, scale)
            r = FVBResult(a, b, gp.mean, gp.var, val, True, 0, gp)
            gk, gl = fvb_bound_gradient(r, Kg, l2)
            g = np.concatenate([gk, gl])
            if not optimize_df:
                g[nk] = 0.0
            return -val, -g

        bnds = kb + [lb_df if optimize_df else (th0[nk], th0[nk]), (np.log(1e-4), np.log(1e2))]
        out = optimize.minimize(
            negobj,
            th0,
            jac=True,
            method="L-BFGS-B",
            bounds=bnds,
            options={"maxiter": m_step_iter},
        )
        kern = kern.clone_with_theta(out.x[:nk])
        lik = _with_df_scale(lik, np.exp(out.x[nk]), np.exp(out.x[nk + 1]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            res = factorized_vb(kern(X), y, lik, init=res.b * (0.5 * (lik.df + 1.0)) / res.a)
        if abs(res.elbo - old) < tol:
            converged = True
            break
        old = res.elbo
    return kern, lik, res, it, converged


def _with_df_scale(lik, df, scale):
    names = tuple(getattr(lik, "hyperparameter_names", ()))
    if names[:2] == ("df", "scale") and hasattr(lik, "with_log_params"):
        th = np.array(lik.get_log_params(), float)
        th[0], th[1] = np.log(df), np.log(scale)
        return lik.with_log_params(th)
    import copy

    new = copy.copy(lik)
    new.df, new.scale = float(df), float(scale)
    return new
