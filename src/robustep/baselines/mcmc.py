"""Gibbs sampling for GP regression with a Student-t likelihood (the gold standard).

Jylänki et al. (2011), Sec. 3.1: the scale mixture (eq. 3)

    y_i | f_i, V_i ~ N(f_i, V_i),   V_i ~ Inv-chi^2(nu, sigma^2),

with the reparameterisation V_i = alpha^2 U_i, U_i ~ Inv-chi^2(nu, tau^2),
p(log alpha^2) ∝ 1, p(log tau^2) ∝ 1 (so sigma^2 = alpha^2 tau^2), which avoids
the sticking of sigma^2 near small values (Gelman et al. 2004, Sec. 17.2).
One sweep:

1. f | V, theta, y: exact Gaussian draw by "Matheron's rule",
   f = f0 + K (K + V)^-1 (y - f0 - e),  f0 ~ N(0, K), e ~ N(0, V);
2. U_i | f, alpha, tau, nu ~ Inv-chi^2(nu + 1, (nu tau^2 + r_i^2 / alpha^2) / (nu + 1));
3. alpha^2 | U, f ~ Inv-chi^2(n, sum(r_i^2 / U_i) / n);
4. tau^2 | U, nu ~ Gamma(shape n nu / 2, rate nu sum(1 / U_i) / 2);
5. nu | U, tau^2: univariate slice sampling of log log nu (flat prior, nu > 1);
6. log theta (kernel) | V, y: univariate slice sampling of each coordinate of
   log N(y | 0, K_theta + V) (f integrated out), flat prior within kernel bounds;
   with ``hyper_every = k`` only in every k-th sweep (a deterministic-scan Gibbs
   sampler: every step leaves the posterior invariant).  This step is the cost of a
   sweep: ~4.5 Cholesky factorisations of K + V per coordinate.  Alternatively
   (``hyper_sampler="metropolis"``) joint random-walk Metropolis on all p
   log-parameters after half the burn-in, with a proposal covariance learnt from the
   slice draws before it: p factorisations per update.

With ``sample_hyperparameters=False`` only f and V are sampled
(V_i | f ~ Inv-chi^2(nu + 1, (nu sigma^2 + r_i^2)/(nu + 1))), for comparisons at
fixed hyperparameters (Sec. 6.1).  Convergence diagnostics: split R-hat and the
effective sample size with Geyer's initial monotone sequence (Geyer 1992).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy import linalg
from scipy.linalg import lapack
from scipy.spatial.distance import cdist
from scipy.special import gammaln
from sklearn.utils import check_random_state

from robustep.likelihoods import StudentT
from robustep.linalg import jittered_cholesky, plus_diagonal

__all__ = [
    "MCMCResult",
    "gibbs_student_t_gp",
    "random_walk_metropolis",
    "slice_sample_1d",
    "split_rhat",
    "effective_sample_size",
]


# ----------------------------------------------------------------- diagnostics
def split_rhat(chains) -> float:
    """Split potential scale reduction factor (Gelman et al. 2004) of (m, n) draws."""
    x = np.atleast_2d(np.asarray(chains, float))
    n = x.shape[1] // 2
    if n < 2:
        return float("nan")
    x = np.concatenate([x[:, :n], x[:, -n:]], axis=0)
    means = x.mean(axis=1)
    W = x.var(axis=1, ddof=1).mean()
    B = n * means.var(ddof=1)
    if W <= 0:
        return 1.0 if B <= 0 else float("inf")
    var_plus = (n - 1) / n * W + B / n
    return float(np.sqrt(var_plus / W))


def effective_sample_size(chains) -> float:
    """Effective sample size of (m, n) draws (Geyer's initial monotone sequence, FFT ACF)."""
    x = np.atleast_2d(np.asarray(chains, float))
    m, n = x.shape
    if n < 4:
        return float(m * n)
    xc = x - x.mean(axis=1, keepdims=True)
    size = 2 ** int(np.ceil(np.log2(2 * n)))
    fx = np.fft.rfft(xc, size, axis=1)
    acov = np.fft.irfft(fx * np.conj(fx), size, axis=1)[:, :n] / n
    chain_var = acov[:, 0] * n / (n - 1.0)
    W = chain_var.mean()
    if W <= 0:
        return float(m * n)
    var_plus = W * (n - 1.0) / n + (x.mean(axis=1).var(ddof=1) if m > 1 else 0.0)
    rho = 1.0 - (W - acov.mean(axis=0)) / var_plus
    rho[0] = 1.0
    # Geyer: sums of consecutive pairs, positive and monotone.
    n_pairs = (n - 1) // 2
    pairs = rho[: 2 * n_pairs].reshape(n_pairs, 2).sum(axis=1)
    stop = np.argmax(pairs <= 0) if np.any(pairs <= 0) else n_pairs
    pairs = np.minimum.accumulate(pairs[:stop]) if stop > 0 else pairs[:1]
    tau = -1.0 + 2.0 * pairs.sum()
    tau = max(tau, 1.0 / np.log10(max(m * n, 10)))
    return float(m * n / tau)


# --------------------------------------------------------------- slice sampling
def slice_sample_1d(
    logp, x0, rng, *, width=1.0, max_steps=20, lower=-np.inf, upper=np.inf, lp0=None
):
    """One univariate slice-sampling update with stepping out and shrinkage (Neal 2003).

    logp : callable R -> R (log density up to a constant), x0 : current value.
    lp0 : logp(x0) if the caller knows it already (saves one evaluation; the draws are
    the same, the random stream is not touched by it).
    Returns (x1, logp(x1)).
    """
    lp0 = logp(x0) if lp0 is None else float(lp0)
    log_u = lp0 + np.log(rng.uniform())
    left = x0 - width * rng.uniform()
    right = left + width
    j = min(int(rng.uniform() * max_steps), max_steps - 1)
    k = max_steps - 1 - j
    while j > 0 and left > lower and logp(left) > log_u:
        left -= width
        j -= 1
    while k > 0 and right < upper and logp(right) > log_u:
        right += width
        k -= 1
    left, right = max(left, lower), min(right, upper)
    for _ in range(200):
        x1 = rng.uniform(left, right)
        lp1 = logp(x1)
        if lp1 > log_u:
            return x1, lp1
        if x1 < x0:
            left = x1
        else:
            right = x1
    return x0, lp0


def random_walk_metropolis(logp, x0, rng, *, chol, n_steps, lower, upper, lp0=None):
    """``n_steps`` random-walk Metropolis updates of x (p,) on a box (Haario et al. 2001,
    with the proposal covariance held fixed: a valid Markov chain).

    Proposals x' = x + chol @ z, z ~ N(0, I_p); the target is ``logp`` on
    [lower, upper] (p,) and zero outside, so a proposal outside the box is rejected
    without evaluating ``logp``.  lp0 : logp(x0) if known.
    Returns (x (p,), logp(x), number of accepted proposals).
    """
    x = np.array(x0, dtype=float)
    lp = logp(x) if lp0 is None else float(lp0)
    accepted = 0
    for _ in range(int(n_steps)):  # a Markov chain: each step needs the previous one
        prop = x + chol @ rng.standard_normal(x.size)
        log_u = np.log(rng.uniform())
        if np.any(prop < lower) or np.any(prop > upper):
            continue
        lp_prop = logp(prop)
        if lp_prop - lp > log_u:
            x, lp = prop, lp_prop
            accepted += 1
    return x, lp, accepted


def _scaled_inv_chi2(rng, dof, s2):
    """Draws from Inv-chi^2(dof, s2) (broadcast): dof s2 / chi^2_dof."""
    return dof * s2 / rng.chisquare(dof, size=np.shape(s2) if np.ndim(s2) else None)


def _chol(A):
    return jittered_cholesky(A, warn=False)[0]


class _KernelMatrix:
    """K(theta) on the training inputs, for the slice sampler's many kernel evaluations.

    For ``ConstantKernel * RBF`` (isotropic or ARD, both free) the matrix is
    c exp(-1/2 sum_d D_d / l_d^2) with the per-dimension squared distances D_d: a full
    evaluation is one ``cdist`` of the scaled inputs, a change of one length-scale (the
    slice sampler's coordinate moves) one pass over the stored D_d, instead of
    scikit-learn's clone/get_params machinery, which costs ~10x the Cholesky
    factorisation at n = 100.
    The fast path is used only if it reproduces ``kernel(X)`` at the initial theta to
    1e-12; any other kernel falls back to ``kernel.clone_with_theta(theta)(X)``.
    """

    def __init__(self, kernel, X):
        from sklearn.gaussian_process.kernels import RBF, ConstantKernel, Product

        self.kernel, self.X = kernel, X
        self.D = None
        k1, k2 = getattr(kernel, "k1", None), getattr(kernel, "k2", None)
        if (
            isinstance(kernel, Product)
            and isinstance(k1, ConstantKernel)
            and isinstance(k2, RBF)
            and not any(h.fixed for h in kernel.hyperparameters)
        ):
            n, d = X.shape
            n_ls = k2.theta.size  # 1 (isotropic) or d (ARD)
            if n_ls in (1, d):
                diff2 = (X[:, None, :] - X[None, :, :]) ** 2  # (n, n, d)
                D = diff2.sum(axis=2, keepdims=True) if n_ls == 1 else diff2
                self.D = np.ascontiguousarray(D.reshape(n * n, n_ls).T)  # (n_ls, n^2)
                self.n = n
                if not np.allclose(self(kernel.theta), kernel(X), rtol=1e-12, atol=1e-12):
                    self.D = None  # pragma: no cover - defensive

    def __call__(self, theta):
        """K(theta): (n, n)."""
        theta = np.asarray(theta, float)
        if self.D is None:
            return self.kernel.clone_with_theta(theta)(self.X)
        return self.into(theta, np.empty((self.n, self.n)))

    def into(self, theta, out):
        """K(theta) written into ``out`` ((n, n), C order) and returned: the same matrix,
        bit for bit, as :meth:`__call__`, without (n, n) temporaries."""
        theta = np.asarray(theta, float)
        if self.D is None:
            out[...] = self(theta)
            return out
        flat = out.reshape(-1)
        self.state(theta, out=flat)
        flat += theta[0]
        np.exp(flat, out=flat)
        return out

    def state(self, theta, out=None):
        """What :meth:`coordinate` needs: the exponent -sum_d D_d / (2 l_d^2) (n^2,) on the
        fast path (kept in log space, so no entry underflows to 0 and stays stuck).
        ``out``: an (n^2,) array to write it into."""
        if self.D is None:
            return None
        w = 0.5 * np.exp(-2.0 * np.asarray(theta[1:], float))
        E = np.empty(self.n * self.n) if out is None else out
        # sum_d w_d (x_id - x_jd)^2 as the squared distance of the rows of X sqrt(w):
        # SciPy's cdist forms each difference before squaring (no cancellation, exact
        # zeros on the diagonal, no BLAS: the same bits in every process) in one pass
        # instead of d passes over the stored planes D_d
        Z = self.X * np.sqrt(w)
        cdist(Z, Z, "sqeuclidean", out=E.reshape(self.n, self.n))
        np.negative(E, out=E)
        return E

    def coordinate(self, E, theta, j, t):
        """K at theta with theta[j] replaced by t, from E = state(theta): O(n^2) on the
        fast path."""
        th = np.array(theta, float)
        th[j] = t
        if self.D is None:
            return self(th)
        return np.exp(th[0] + self.update(E, theta, j, t)).reshape(self.n, self.n)

    def update(self, E, theta, j, t):
        """state(theta with theta[j] = t) from E = state(theta)."""
        if self.D is None or j == 0:
            return E
        return E - 0.5 * (np.exp(-2.0 * t) - np.exp(-2.0 * theta[j])) * self.D[j - 1]

    def coordinate_into(self, E, theta, j, t, out):
        """:meth:`coordinate` written into ``out`` ((n, n), C order) and returned.

        The same floating-point operations as :meth:`coordinate` (so the same matrix,
        bit for bit) without the three (n, n) temporaries: E - c D_j is formed as
        (-c) D_j + E (negation is exact), then exp(theta_0 + .) in place.
        """
        if self.D is None:
            out[...] = self.coordinate(E, theta, j, t)
            return out
        flat = out.reshape(-1)
        t0 = t if j == 0 else theta[0]
        if j == 0:
            np.add(E, t0, out=flat)
        else:
            c = 0.5 * (np.exp(-2.0 * t) - np.exp(-2.0 * theta[j]))
            np.multiply(self.D[j - 1], -c, out=flat)
            flat += E
            flat += t0
        np.exp(flat, out=flat)
        return out


def _log_marginal(K, V, y):
    """log N(y | 0, K + diag(V)); -inf if not positive definite or not finite."""
    return _log_marginal_inplace(np.array(K, dtype=float, order="C"), V, y)


def _log_marginal_inplace(A, V, y):
    """:func:`_log_marginal` with A = K (symmetric, (n, n), C order) overwritten.

    V is added to A's diagonal and A is factorised in place: LAPACK gets A.T, the same
    symmetric matrix in Fortran order, so no copy is made.
    """
    A.reshape(-1)[:: A.shape[0] + 1] += V
    if not np.all(np.isfinite(A)):
        return -np.inf
    Lc, info = lapack.dpotrf(A.T, lower=1, clean=0, overwrite_a=1)
    if info != 0:
        return -np.inf
    a, _ = lapack.dtrtrs(Lc, y, lower=1)
    return float(-0.5 * a @ a - np.sum(np.log(np.diag(Lc))) - 0.5 * y.size * np.log(2 * np.pi))


def _proposal_factor(history, widths, p):
    """Cholesky factor (p, p) of the random-walk proposal covariance (2.38^2 / p) Sigma_hat.

    Sigma_hat is the covariance of the burn-in draws ``history`` (list of (p,) arrays),
    with 1e-6 added to its diagonal; with fewer than p + 2 draws, diag((widths / 3)^2).
    """
    H = np.asarray(history, dtype=float).reshape(-1, p)
    if H.shape[0] >= p + 2:
        C = np.atleast_2d(np.cov(H, rowvar=False))
    else:
        C = np.diag((np.asarray(widths, dtype=float) / 3.0) ** 2)
    C = C + 1e-6 * np.eye(p)
    return np.linalg.cholesky((2.38**2 / p) * C)


def _metropolis_update(kmat, theta, V, y, rng, chol, n_steps, bounds, buf):
    """Random-walk Metropolis on the kernel log-parameters given V: ``n_steps``
    proposals against log N(y | 0, K(theta) + diag(V)) on the kernel's bounds, each
    K(theta) formed in the (n, n) work matrix ``buf``.
    Returns (theta (p,), number accepted)."""

    def logp(t):
        return _log_marginal_inplace(kmat.into(t, buf), V, y)

    new, _, accepted = random_walk_metropolis(
        logp, theta, rng, chol=chol, n_steps=n_steps, lower=bounds[:, 0], upper=bounds[:, 1]
    )
    return new, accepted


# ----------------------------------------------------------------------- result
@dataclasses.dataclass
class MCMCResult:
    """Posterior draws of the scale-mixture Gibbs sampler.

    kernel_theta : (S, p) log kernel hyperparameters per kept draw.
    df, scale : (S,) Student-t nu and sigma per kept draw.
    V : (S, n) residual variances per kept draw.
    f : (S, n) latent values per kept draw.
    chain : (S,) chain index of each kept draw.
    rhat, ess : diagnostics of the scalar parameters (log scale, log df, kernel log params).
    hyper_acceptance : acceptance rate of the Metropolis hyperparameter proposals after
        the burn-in (``hyper_sampler="metropolis"``), else None.
    """

    kernel: object
    X: np.ndarray
    y: np.ndarray
    kernel_theta: np.ndarray
    df: np.ndarray
    scale: np.ndarray
    V: np.ndarray
    f: np.ndarray
    chain: np.ndarray
    rhat: dict
    ess: dict
    n_iter: int
    hyper_acceptance: float | None = None

    def predictive_components(self, X_test, max_draws: int | None = None):
        """Per-draw Gaussian predictive of f*: (means (S, m), vars (S, m)).

        For each draw (theta, V): q(f*|V, theta) = N(k*^T (K+V)^-1 y, k** - k*^T (K+V)^-1 k*)
        (Jylänki et al. 2011, Sec. 5.1: f integrated analytically per draw of V).
        """
        S = self.V.shape[0]
        idx = np.arange(S)
        if max_draws is not None and S > max_draws:
            idx = np.linspace(0, S - 1, max_draws).round().astype(int)
        means, vars_ = [], []
        cache = {}
        for s in idx:  # loop over posterior draws (each an O(n^3) solve), not data points
            key = tuple(self.kernel_theta[s])
            if key not in cache:
                k = self.kernel.clone_with_theta(self.kernel_theta[s])
                cache = {key: (k(self.X), k(X_test, self.X), k.diag(X_test))}
            K, Ks, kss = cache[key]
            Lc = _chol(plus_diagonal(K, self.V[s]))
            a = linalg.cho_solve((Lc, True), self.y, check_finite=False)
            v = linalg.solve_triangular(Lc, Ks.T, lower=True, check_finite=False)
            means.append(Ks @ a)
            vars_.append(np.maximum(kss - np.sum(v**2, axis=0), 1e-12))
        return np.array(means), np.array(vars_), idx

    def predict(self, X_test, max_draws: int | None = 200):
        """Mixture predictive mean and variance of f* at X_test, each (m,)."""
        M, Vv, _ = self.predictive_components(X_test, max_draws)
        mean = M.mean(axis=0)
        var = (Vv + M**2).mean(axis=0) - mean**2
        return mean, np.maximum(var, 1e-12)

    def log_predictive_density(self, X_test, y_test, max_draws: int | None = 200):
        """log mean_s int p(y*|f*, nu_s, sigma_s) N(f*|m_s, v_s) df*, shape (m,)."""
        M, Vv, idx = self.predictive_components(X_test, max_draws)
        y_test = np.asarray(y_test, float)
        lp = np.array(
            [
                StudentT(self.df[s], self.scale[s]).tilted_moments(y_test, M[j], Vv[j])[0]
                for j, s in enumerate(idx)
            ]
        )
        mx = lp.max(axis=0)
        return mx + np.log(np.mean(np.exp(lp - mx), axis=0))


# ---------------------------------------------------------------------- sampler
def gibbs_student_t_gp(
    kernel,
    X,
    y,
    *,
    df: float = 4.0,
    scale: float = 0.5,
    n_samples: int = 1000,
    burn_in: int | None = None,
    thin: int = 1,
    n_chains: int = 1,
    sample_hyperparameters: bool = True,
    sample_df: bool = True,
    df_bounds=(1.05, 1000.0),
    hyper_every: int = 1,
    slice_width=1.0,
    hyper_sampler: str = "slice",
    hyper_steps: int | None = None,
    random_state=None,
) -> MCMCResult:
    """Run the scale-mixture Gibbs sampler (see the module docstring).

    kernel : sklearn kernel (its ``theta``/``bounds`` in log space); X : (n, d); y : (n,).
    df, scale : initial (or fixed) nu and sigma.
    n_samples : kept draws per chain after ``burn_in`` (default n_samples // 2) and ``thin``.
    sample_hyperparameters : sample kernel hyperparameters, sigma (and nu if ``sample_df``).
    hyper_every : slice-sample the kernel hyperparameters every this many sweeps.
    slice_width : stepping-out width of the kernel log-parameter slice sampler (float),
        or "adapt": width 1 until half the burn-in, then per coordinate 3 x the standard
        deviation of its draws in the second quarter of the burn-in (clipped to
        [0.05, bound range]); fixed afterwards, so the kept draws come from a fixed,
        valid transition kernel.  In one run each on Friedman #1 sets 0-2 and Boston
        fold 0 of tgp-benchmark, "adapt" did not raise the smallest ESS (Boston: R-hat
        1.18 with "adapt", 1.01 with 1.0), so the default stays 1.0.
    hyper_sampler : "slice" (the coordinate-wise slice sampler above, ~4.5 Cholesky
        factorisations per hyperparameter and update) or "metropolis": slice sampling in
        the first half of the burn-in, then joint random-walk Metropolis on the p kernel
        log-parameters (:func:`random_walk_metropolis`, one factorisation per proposal)
        with proposal covariance (2.38^2 / p) Sigma_hat (Roberts, Gelman & Gilks 1997),
        Sigma_hat the covariance of the slice draws of the second quarter of the burn-in;
        its scale is adapted towards acceptance 0.234 (0.44 for p = 1) by Robbins-Monro
        steps in the second half of the burn-in and fixed afterwards, so the kept draws
        come from a fixed, valid transition kernel.  Acceptance after the burn-in is in
        ``MCMCResult.hyper_acceptance``.
    hyper_steps : Metropolis proposals per hyperparameter update (default p).
    random_state : int, RandomState or None.
    """
    if hyper_sampler not in ("slice", "metropolis"):
        raise ValueError(f'hyper_sampler must be "slice" or "metropolis", got {hyper_sampler!r}')
    if hyper_steps is not None and not (int(hyper_steps) == hyper_steps and hyper_steps >= 1):
        raise ValueError(f"hyper_steps must be a positive integer or None, got {hyper_steps!r}")
    adapt = isinstance(slice_width, str)
    if adapt and slice_width != "adapt":
        raise ValueError(f'slice_width must be a positive float or "adapt", got {slice_width!r}')
    if not adapt and not float(slice_width) > 0:
        raise ValueError(f"slice_width must be positive, got {slice_width!r}")
    X = np.asarray(X, float)
    y = np.asarray(y, float)
    if y.ndim != 1 or X.shape[0] != y.size or not np.all(np.isfinite(y)):
        raise ValueError("X must be (n, d) and y a finite (n,) array")
    if n_samples < 1 or thin < 1 or n_chains < 1:
        raise ValueError("n_samples, thin and n_chains must be >= 1")
    if not (df > 0 and scale > 0):
        raise ValueError("df and scale must be positive")
    burn_in = n_samples // 2 if burn_in is None else int(burn_in)
    rng = check_random_state(random_state)
    n = y.size
    bounds = np.asarray(kernel.bounds, float)
    lo_u, hi_u = np.log(np.log(df_bounds[0])), np.log(np.log(df_bounds[1]))
    out = {k: [] for k in ("theta", "df", "scale", "V", "f", "chain")}
    kmat = _KernelMatrix(kernel, X)
    buf = np.empty((n, n))  # work matrix of the hyperparameter updates
    total = burn_in + n_samples * thin
    metropolis = hyper_sampler == "metropolis"
    p = kernel.theta.size
    steps = p if hyper_steps is None else int(hyper_steps)
    target_acc = 0.44 if p == 1 else 0.234  # Roberts, Gelman & Gilks (1997)
    kept_acc = [0, 0]  # accepted / proposed Metropolis steps after the burn-in
    for c in range(n_chains):
        theta = kernel.theta.copy()
        nu = float(df)
        alpha2, tau2 = 1.0, float(scale) ** 2
        U = np.full(n, tau2)
        K = kmat(theta)
        L_K = _chol(K)
        widths = np.full(theta.size, 1.0 if adapt else float(slice_width))
        history, adapted = [], not adapt  # burn-in draws for the adapted widths
        prop_chol = None  # random-walk proposal factor, set at half the burn-in
        log_step, n_adapt = 0.0, 0  # Robbins-Monro scale of the proposal (burn-in only)
        for it in range(total):
            V = alpha2 * U
            # 1. f | V  (Matheron's rule: exact draw from N(K(K+V)^-1 y, K - K(K+V)^-1 K))
            f0 = L_K @ rng.standard_normal(n)
            e = np.sqrt(V) * rng.standard_normal(n)
            Lc = _chol(plus_diagonal(K, V))
            f = f0 + K @ linalg.cho_solve((Lc, True), y - f0 - e, check_finite=False)
            r2 = (y - f) ** 2
            if sample_hyperparameters:
                # 2.-4. scale mixture with V = alpha^2 U
                U = _scaled_inv_chi2(rng, nu + 1.0, (nu * tau2 + r2 / alpha2) / (nu + 1.0))
                alpha2 = _scaled_inv_chi2(rng, n, np.sum(r2 / U) / n)
                tau2 = rng.gamma(0.5 * n * nu, 1.0 / (0.5 * nu * np.sum(1.0 / U)))
                if sample_df:
                    logU = np.log(U)
                    sumU = np.sum(1.0 / U)
                    sumlogU = np.sum(logU)

                    def lp_u(u, t2=tau2, sl=sumlogU, si=sumU):
                        v = np.exp(np.exp(u))
                        if not np.isfinite(v):
                            return -np.inf
                        return float(
                            n * (0.5 * v * np.log(0.5 * v * t2) - gammaln(0.5 * v))
                            - (0.5 * v + 1.0) * sl
                            - 0.5 * v * t2 * si
                        )

                    u, _ = slice_sample_1d(
                        lp_u, np.log(np.log(nu)), rng, width=0.5, lower=lo_u, upper=hi_u
                    )
                    nu = float(np.exp(np.exp(u)))
                V = alpha2 * U
                if it % hyper_every == 0:
                    if not adapted and it >= burn_in // 2:
                        if len(history) >= 10:
                            sd = np.std(np.asarray(history), axis=0)
                            widths = np.clip(3.0 * sd, 0.05, bounds[:, 1] - bounds[:, 0])
                        adapted = True
                    if metropolis and prop_chol is None and it >= burn_in // 2:
                        prop_chol = _proposal_factor(history, widths, p)
                    if prop_chol is not None:
                        theta, acc = _metropolis_update(
                            kmat, theta, V, y, rng, np.exp(log_step) * prop_chol, steps, bounds,
                            buf,
                        )  # fmt: skip
                        if it < burn_in:  # adapt the scale, then freeze it
                            n_adapt += 1
                            log_step += (acc / steps - target_acc) / np.sqrt(n_adapt)
                        else:
                            kept_acc[0] += acc
                            kept_acc[1] += steps
                    else:
                        E = kmat.state(theta)
                        lp = None  # log N(y | 0, K(theta) + V) at the current theta, once known
                        for j in range(theta.size):  # loop over hyperparameters, not data
                            th = theta.copy()

                            def lp_t(t, j=j, V=V, th=th, E=E):
                                A = kmat.coordinate_into(E, th, j, t, buf)
                                return _log_marginal_inplace(A, V, y)

                            # the previous coordinate's accepted value is logp at this theta
                            new, lp = slice_sample_1d(
                                lp_t,
                                theta[j],
                                rng,
                                width=widths[j],
                                max_steps=8,
                                lower=bounds[j, 0],
                                upper=bounds[j, 1],
                                lp0=lp,
                            )
                            E = kmat.update(E, theta, j, new)
                            theta[j] = new
                    K = kmat(theta)  # afresh, so rounding does not accumulate
                    L_K = _chol(K)
                    wants_history = not adapted or (metropolis and prop_chol is None)
                    if wants_history and it >= burn_in // 4:
                        history.append(theta.copy())
            else:
                U = _scaled_inv_chi2(rng, nu + 1.0, (nu * scale**2 + r2) / (nu + 1.0))
                alpha2, tau2 = 1.0, scale**2
            if it >= burn_in and (it - burn_in) % thin == 0:
                out["theta"].append(theta.copy())
                out["df"].append(nu)
                out["scale"].append(np.sqrt(alpha2 * tau2))
                out["V"].append(alpha2 * U)
                out["f"].append(f)
                out["chain"].append(c)
    res = {k: np.asarray(v) for k, v in out.items()}
    rhat, ess = {}, {}
    if sample_hyperparameters:
        params = {"log_scale": np.log(res["scale"]), "log_df": np.log(res["df"])}
        for j in range(res["theta"].shape[1]):
            params[f"kernel_theta_{j}"] = res["theta"][:, j]
        for name, v in params.items():
            ch = v.reshape(n_chains, -1)
            rhat[name] = split_rhat(ch)
            ess[name] = effective_sample_size(ch)
    fm = res["f"].mean(axis=1).reshape(n_chains, -1)
    rhat["mean_f"] = split_rhat(fm)
    ess["mean_f"] = effective_sample_size(fm)
    return MCMCResult(
        kernel=kernel,
        X=X,
        y=y,
        kernel_theta=res["theta"],
        df=res["df"],
        scale=res["scale"],
        V=res["V"],
        f=res["f"],
        chain=res["chain"],
        rhat=rhat,
        ess=ess,
        n_iter=total,
        hyper_acceptance=kept_acc[0] / kept_acc[1] if kept_acc[1] else None,
    )
