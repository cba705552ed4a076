"""Multinomial probit likelihood and the inner EP of nested EP (Riihimäki, Jylänki & Vehtari 2013).

Model (Riihimäki et al. 2013, §2–3): c latent values f_i = (f_i^1, ..., f_i^c) per data
point, labels y_i ∈ {0, ..., c-1} and

    p(y_i | f_i) = ∫ N(u_i | 0, 1) ∏_{j ≠ y_i} Φ(u_i + f_i^{y_i} - f_i^j) du_i
                 = P(f^{y_i} + ε^{y_i} > f^j + ε^j for all j ≠ y_i),  ε ~ N(0, I_c).

With the auxiliary u_i the tilted distribution of one site is a Gaussian times c-1 probit
factors, each of one linear projection.  In the variables

    x_j = u_i + f_i^{y_i} - f_i^j   (j ≠ y_i),      x_{y_i} = u_i,

i.e. ``x = G_y f + u 1`` with ``G_y = 1 e_y^T - I`` (c x c), the factors act on single
coordinates: ∏_{j ≠ y} Φ(x_j).  The *inner EP* (the paper's §4) approximates each factor by
an unnormalised Gaussian site exp(-α_j x_j^2 / 2 + β_j x_j) (α_j >= 0 for the log-concave
probit).  We store the inner sites as arrays ``alpha``, ``beta`` of shape (n, c) whose entry
at the label column is 0 (the label has no factor).

Marginalising u out of N(u | 0, 1) ∏_j exp(-α_j x_j^2/2 + β_j x_j) gives the *outer* site on
f_i (docs/derivations/multiclass.md §3, eq. M6):

    t̃_i(f_i) = exp(-½ f^T Π̃_i f + ν̃_i^T f + κ_i),
    Π̃_i = diag(π_i) - π_i π_i^T / (1^T π_i),   π_i = α_i + e_{y_i},
    ν̃_i = -β_i + π_i (1^T β_i) / (1^T π_i),
    κ_i = (1^T β_i)^2 / (2 · 1^T π_i) - ½ log(1^T π_i).

Π̃_i has rank c-1 (its null vector is 1: adding a constant to every f^j does not change
the likelihood), which is what gives the O(c n^3) posterior of :mod:`robustep.ep.multiclass`.

Everything here is vectorised over sites: loops run over the c classes only.
"""

from __future__ import annotations

import numpy as np
from scipy import special

from robustep.likelihoods.probit import log_ndtr_ratio

__all__ = [
    "MultinomialProbit",
    "inner_ep",
    "inner_ep_log_Z",
    "site_natural_parameters",
    "tilted_moments_from_sites",
]

_LOG_2PI = np.log(2.0 * np.pi)


def _check_labels(y, c):
    y = np.asarray(y)
    if y.ndim != 1:
        raise ValueError(f"y must be one-dimensional, got shape {y.shape}")
    if not np.issubdtype(y.dtype, np.integer):
        if not np.all(np.isfinite(y)) or not np.all(np.asarray(y, dtype=float) % 1 == 0):
            raise ValueError("y must hold integer class indices 0 .. c-1; encode your labels first")
        y = y.astype(int)
    if y.size and (y.min() < 0 or y.max() >= c):
        raise ValueError(
            f"y must hold class indices in 0 .. {c - 1} (c = {c}); got values in "
            f"[{y.min()}, {y.max()}] — encode labels with np.unique(labels, return_inverse=True)"
        )
    return y


def _x_prior(y, cavity_mean, cavity_cov):
    """Mean (n, c) and covariance (n, c, c) of x = G_y f + u 1 under N(f | m, S) N(u | 0, 1).

    Also returns ``SG = S G_y^T`` (n, c, c), the covariance of f with x.
    """
    n, c = cavity_mean.shape
    rows = np.arange(n)
    m_y = cavity_mean[rows, y]  # (n,)
    m_x = m_y[:, None] - cavity_mean  # G_y m: f_y - f_j  (0 at the label)
    # S G^T: column j is S e_y - S e_j
    S_y = cavity_cov[rows, :, y]  # (n, c) = S e_y
    SG = S_y[:, :, None] - cavity_cov  # (n, c, c); SG[:, :, j] = S e_y - S e_j
    # G S G^T [j, k] = (e_y - e_j)^T S (e_y - e_k) = S_yy - S_yk - S_jy + S_jk
    GSG = SG[rows, y, :][:, None, :] - SG  # row j: e_y^T SG - e_j^T SG
    S_x = GSG + 1.0  # + 1 1^T (the auxiliary u)
    return m_x, S_x, SG


def site_natural_parameters(y, alpha, beta):
    """Outer site of each data point from its inner sites (module docstring).

    y : (n,) int labels; alpha, beta : (n, c) inner site parameters (0 at the label).
    Returns ``precision`` Π̃ (n, c, c), ``shift`` ν̃ (n, c), ``pi`` (n, c) and
    ``log_const`` κ (n,) of t̃_i(f) = exp(-½ f^T Π̃_i f + ν̃_i^T f + κ_i).
    """
    n, c = alpha.shape
    pi = np.array(alpha, dtype=float)
    pi[np.arange(n), y] = 1.0  # the N(u | 0, 1) factor enters with weight 1
    A = pi.sum(axis=1)  # 1^T π > 0
    sb = beta.sum(axis=1)
    precision = (
        np.einsum("ij,jk->ijk", pi, np.eye(c)) - pi[:, :, None] * pi[:, None, :] / A[:, None, None]
    )
    shift = -beta + pi * (sb / A)[:, None]
    log_const = 0.5 * sb**2 / A - 0.5 * np.log(A)
    return precision, shift, pi, log_const


def _inner_posterior(m_x, S_x, alpha, beta):
    """Inner EP posterior over x: covariance (n, c, c) and mean (n, c); also S_x^{-1}."""
    n, c = m_x.shape
    S_inv = np.linalg.inv(S_x)
    S_inv = 0.5 * (S_inv + np.swapaxes(S_inv, 1, 2))
    P = S_inv + alpha[:, :, None] * np.eye(c)
    h = np.einsum("ijk,ik->ij", S_inv, m_x) + beta
    cov = np.linalg.inv(P)
    cov = 0.5 * (cov + np.swapaxes(cov, 1, 2))
    mean = np.einsum("ijk,ik->ij", cov, h)
    return cov, mean, S_inv


def _probit_site(mc, vc):
    """Moment-matched probit site for Φ(x) N(x | mc, vc): (log Z, α, β), each like ``mc``.

    α = 1/var_hat - 1/vc = (1 - δ)/(1 + vc δ) >= 0 and
    β = mean_hat/var_hat - mc/vc = (mc (1 - δ) + r s)/(1 + vc δ), s = √(1 + vc),
    with z = mc/s, r = N(z)/Φ(z), δ = 1 - r (z + r) (Rasmussen & Williams eq. 3.58),
    written so that nothing cancels.
    """
    s = np.sqrt(1.0 + vc)
    log_Z, r, delta = log_ndtr_ratio(mc / s)
    denom = 1.0 + vc * delta
    a = (1.0 - delta) / denom
    b = (mc * (1.0 - delta) + r * s) / denom
    return log_Z, a, b


def inner_ep(y, cavity_mean, cavity_cov, alpha=None, beta=None, *, n_sweeps=1, tol=0.0):
    """Sweeps of the inner EP for the tilted distribution of every site (Riihimäki et al. §4).

    The inner EP approximates ∏_{j≠y} Φ(x_j) N(x | m_x, S_x) (module docstring) with
    sequential site updates over the c-1 factors (loop over classes, vectorised over
    sites), each a rank-one update of the inner posterior.

    Parameters
    ----------
    y : (n,) int labels in 0 .. c-1.
    cavity_mean : (n, c), cavity_cov : (n, c, c) the outer cavity N(f_i | m_-i, S_-i).
    alpha, beta : (n, c) inner sites to start from (0 at the label); None = zeros.
    n_sweeps : sweeps over the c-1 factors (nested EP uses 1 per outer iteration).
    tol : stop early when the largest site change of a sweep is below ``tol``.

    Returns
    -------
    alpha, beta : (n, c) new inner sites (new arrays; the inputs are not modified).
    max_change : float, the largest change of the last sweep.

    A site whose inner cavity is not valid (non-positive variance, non-finite value) keeps
    its previous parameters.
    """
    cavity_mean = np.asarray(cavity_mean, dtype=float)
    cavity_cov = np.asarray(cavity_cov, dtype=float)
    n, c = cavity_mean.shape
    y = _check_labels(y, c)
    alpha = np.zeros((n, c)) if alpha is None else np.array(alpha, dtype=float)
    beta = np.zeros((n, c)) if beta is None else np.array(beta, dtype=float)
    rows = np.arange(n)
    m_x, S_x, _ = _x_prior(y, cavity_mean, cavity_cov)
    cov, mean, _ = _inner_posterior(m_x, S_x, alpha, beta)
    max_change = 0.0
    for _ in range(int(n_sweeps)):
        max_change = 0.0
        for j in range(c):
            active = y != j
            v = cov[:, j, j]
            m = mean[:, j]
            a_old, b_old = alpha[:, j], beta[:, j]
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                prec_c = 1.0 / v - a_old
                vc = 1.0 / prec_c
                mc = vc * (m / v - b_old)
                _, a_new, b_new = _probit_site(
                    np.where(prec_c > 0, mc, 0.0), np.where(prec_c > 0, vc, 1.0)
                )
            ok = active & (prec_c > 0) & np.isfinite(a_new) & np.isfinite(b_new)
            da = np.where(ok, a_new - a_old, 0.0)
            db = np.where(ok, b_new - b_old, 0.0)
            if not np.any(da != 0) and not np.any(db != 0):
                continue
            max_change = max(max_change, float(np.max(np.abs(da))), float(np.max(np.abs(db))))
            # rank-one update of the inner posterior (Sherman–Morrison)
            col = cov[:, :, j].copy()  # (n, c)
            denom = 1.0 + da * v
            cov = cov - (da / denom)[:, None, None] * col[:, :, None] * col[:, None, :]
            col_new = col / denom[:, None]  # new cov[:, :, j]
            mean = mean + col_new * (db - da * m)[:, None]
            alpha[:, j] = a_old + da
            beta[:, j] = b_old + db
        if max_change < tol:
            break
    alpha[rows, y] = 0.0
    beta[rows, y] = 0.0
    return alpha, beta, max_change


def inner_ep_log_Z(y, cavity_mean, cavity_cov, alpha, beta):
    """Inner EP's log normaliser log Ẑ_i (n,) of the tilted distribution at the given sites.

    log Ẑ = log ∫ N(x | m_x, S_x) ∏_j g_j(x_j) dx + Σ_{j≠y} [log Φ(z_j) - log ∫ q_-j g_j]
    with g_j = exp(-α_j x_j²/2 + β_j x_j): the EP energy of the inner problem
    (docs/derivations/multiclass.md §2, eq. M5).  Also returns the sum over j of the bracket (n,),
    the part that enters the outer log Z_EP.
    """
    cavity_mean = np.asarray(cavity_mean, dtype=float)
    cavity_cov = np.asarray(cavity_cov, dtype=float)
    n, c = cavity_mean.shape
    y = _check_labels(y, c)
    alpha = np.asarray(alpha, dtype=float)
    beta = np.asarray(beta, dtype=float)
    m_x, S_x, _ = _x_prior(y, cavity_mean, cavity_cov)
    cov, mean, S_inv = _inner_posterior(m_x, S_x, alpha, beta)
    # Gaussian part: ½ m̂ᵀ P m̂ - ½ m_xᵀ S_x⁻¹ m_x - ½ log|I + S_x diag(α)|
    P = S_inv + alpha[:, :, None] * np.eye(c)
    quad = 0.5 * np.einsum("ij,ijk,ik->i", mean, P, mean) - 0.5 * np.einsum(
        "ij,ijk,ik->i", m_x, S_inv, m_x
    )
    _, logdet = np.linalg.slogdet(np.eye(c) + S_x * alpha[:, None, :])
    gauss = quad - 0.5 * logdet
    corr = _site_corrections(y, mean, cov, alpha, beta)
    return gauss + corr, corr


def _site_corrections(y, mean, cov, alpha, beta):
    """Σ_{j≠y} [log Φ(z_j) + Ψ(cavity_j) - Ψ(marginal_j)] (n,), Ψ(N(m, v)) = m²/(2v) + ½ log v."""
    n, c = mean.shape
    total = np.zeros(n)
    for j in range(c):
        active = y != j
        v = cov[:, j, j]
        m = mean[:, j]
        with np.errstate(divide="ignore", invalid="ignore"):
            vc = 1.0 / (1.0 / v - alpha[:, j])
            mc = vc * (m / v - beta[:, j])
            s = np.sqrt(1.0 + vc)
            log_Z = special.log_ndtr(mc / s)
            term = log_Z + 0.5 * mc**2 / vc + 0.5 * np.log(vc) - 0.5 * m**2 / v - 0.5 * np.log(v)
        total += np.where(active, term, 0.0)
    return total


def tilted_moments_from_sites(y, cavity_mean, cavity_cov, alpha, beta):
    """Inner EP's approximation of the tilted mean (n, c) and covariance (n, c, c) of f_i.

    f and x = G_y f + u 1 are jointly Gaussian under the cavity, so with the inner EP's
    N(x | m̂, Ŝ): E f = m + S G^T S_x⁻¹ (m̂ - m_x),
    Cov f = S - S G^T S_x⁻¹ G S + S G^T S_x⁻¹ Ŝ S_x⁻¹ G S.
    """
    cavity_mean = np.asarray(cavity_mean, dtype=float)
    cavity_cov = np.asarray(cavity_cov, dtype=float)
    n, c = cavity_mean.shape
    y = _check_labels(y, c)
    m_x, S_x, SG = _x_prior(y, cavity_mean, cavity_cov)
    cov_x, mean_x, S_inv = _inner_posterior(
        m_x, S_x, np.asarray(alpha, float), np.asarray(beta, float)
    )
    Kg = np.einsum("ijk,ikl->ijl", SG, S_inv)  # S G^T S_x^-1  (n, c, c)
    mean = cavity_mean + np.einsum("ijk,ik->ij", Kg, mean_x - m_x)
    cov = (
        cavity_cov
        - np.einsum("ijk,ilk->ijl", Kg, SG)
        + np.einsum("ijk,ikl,iml->ijm", Kg, cov_x, Kg)
    )
    return mean, 0.5 * (cov + np.swapaxes(cov, 1, 2))


class MultinomialProbit:
    """Multinomial probit likelihood p(y | f) = ∫ N(u) ∏_{j≠y} Φ(u + f^y - f^j) du, c classes.

    Not a :class:`~robustep.likelihoods.base.Likelihood`: its sites are c-dimensional
    (that protocol is for scalar sites).  It gives the tilted moments of a site by the inner
    EP of nested EP (Riihimäki, Jylänki & Vehtari 2013, §4), the pointwise likelihood and
    the predictive class probabilities; :func:`robustep.ep.multiclass.nested_ep` runs the
    outer EP.

    Parameters
    ----------
    n_classes : int >= 2
    quadrature_points : Gauss–Hermite nodes for the integral over u (``log_prob`` and the
        predictive); default ``robustep.get_config().quadrature_points``.
    """

    def __init__(self, n_classes, *, quadrature_points=None):
        if int(n_classes) != n_classes or n_classes < 2:
            raise ValueError(f"n_classes must be an integer >= 2, got {n_classes!r}")
        self.n_classes = int(n_classes)
        self.quadrature_points = quadrature_points

    def _nodes(self):
        from robustep._config import get_config

        q = self.quadrature_points or get_config().quadrature_points
        x, w = np.polynomial.hermite_e.hermegauss(int(q))  # weight exp(-x²/2)
        return x, w / np.sqrt(2.0 * np.pi)

    def tilted_moments(self, y, cavity_mean, cavity_cov, *, n_sweeps=100, tol=1e-10):
        """Inner EP (run to convergence) approximation of the tilted distribution of each site.

        y : (n,) int labels; cavity_mean (n, c); cavity_cov (n, c, c).
        Returns ``(log_Z (n,), mean (n, c), cov (n, c, c))``.  Exact for c = 2 (one factor).
        """
        alpha, beta, _ = inner_ep(y, cavity_mean, cavity_cov, n_sweeps=n_sweeps, tol=tol)
        log_Z, _ = inner_ep_log_Z(y, cavity_mean, cavity_cov, alpha, beta)
        mean, cov = tilted_moments_from_sites(y, cavity_mean, cavity_cov, alpha, beta)
        return log_Z, mean, cov

    def class_probabilities(self, f):
        """p(y = k | f) for every k: (m, c) from latent values f (m, c), by Gauss–Hermite in u.

        Rows sum to 1 up to the quadrature error (they are renormalised).
        """
        f = np.asarray(f, dtype=float)
        u, w = self._nodes()
        d = f[:, :, None] - f[:, None, :]  # f_k - f_j  (m, c, c)
        log_phi = special.log_ndtr(u[None, None, None, :] + d[..., None])  # (m, k, j, q)
        c = f.shape[1]
        log_phi = log_phi * (1.0 - np.eye(c))[None, :, :, None]  # drop j = k
        s = log_phi.sum(axis=2)  # (m, k, q)
        p = np.exp(special.logsumexp(s + np.log(w)[None, None, :], axis=2))
        return p / p.sum(axis=1, keepdims=True)

    def log_prob(self, y, f):
        """log p(y_i | f_i) (n,) for int labels y (n,) and latents f (n, c)."""
        f = np.asarray(f, dtype=float)
        y = _check_labels(y, f.shape[1])
        u, w = self._nodes()
        d = f[np.arange(len(y)), y][:, None] - f  # f_y - f_j (n, c)
        lp = special.log_ndtr(u[None, None, :] + d[:, :, None])  # (n, c, q)
        mask = np.ones_like(d)
        mask[np.arange(len(y)), y] = 0.0
        s = (lp * mask[:, :, None]).sum(axis=1)
        return special.logsumexp(s + np.log(w)[None, :], axis=1)

    def predictive_probabilities(self, mean, cov, *, method="ep", n_samples=512, chunk=64):
        """p(y* = k) = ∫ N(f | mean, cov) p(k | f) df for every test point: (m, c), rows sum to 1.

        mean (m, c), cov (m, c, c) the latent predictive of each point.

        method="ep" (default): for each class k, the inner EP (run to convergence, 1e-10) of
        the Gaussian integral ∫ N(x | m_x, S_x) ∏_{j≠k} Φ(x_j) dx with the predictive as the
        "cavity" — the estimate of the paper (Riihimäki et al. 2013, §4, predictions);
        deterministic, accurate in relative terms also for small probabilities; the c
        estimates are normalised.  method="qmc": ``n_samples`` scrambled-Sobol points
        (fixed seed) for f, mapped through the Cholesky factor of each covariance, and
        Gauss–Hermite over u (:meth:`class_probabilities`).  Both are checked against plain
        Monte Carlo in tests/estimators/test_multiclass.py.
        """
        mean = np.asarray(mean, dtype=float)
        cov = np.asarray(cov, dtype=float)
        m, c = mean.shape
        if method == "ep":
            log_p = np.empty((m, c))
            for k in range(c):
                yk = np.full(m, k)
                a, b, _ = inner_ep(yk, mean, cov, n_sweeps=200, tol=1e-10)
                log_p[:, k] = inner_ep_log_Z(yk, mean, cov, a, b)[0]
            log_p = np.where(np.isfinite(log_p), log_p, -np.inf)
            return np.exp(log_p - special.logsumexp(log_p, axis=1, keepdims=True))
        if method != "qmc":
            raise ValueError(f"method must be 'ep' or 'qmc', got {method!r}")
        from scipy.stats import qmc

        n_samples = int(n_samples)
        pts = qmc.Sobol(d=c, scramble=True, seed=0).random(n_samples)
        z = special.ndtri(np.clip(pts, 1e-12, 1.0 - 1e-12))  # (s, c)
        jitter = 1e-10 * np.maximum(np.trace(cov, axis1=1, axis2=2) / c, 1e-300)
        Lc = np.linalg.cholesky(cov + jitter[:, None, None] * np.eye(c))
        out = np.empty((m, c))
        q = len(self._nodes()[0])
        # test points per block: class_probabilities holds (b s, c, c, q) floats
        chunk = max(1, min(int(chunk), int(4e6 // (n_samples * c * c * q))))
        f_chunk = max(1, int(4e6 // (c * c * q)))  # rows of f per call
        for start in range(0, m, chunk):
            sl = slice(start, min(start + chunk, m))
            f = (mean[sl, None, :] + np.einsum("ijk,sk->isj", Lc[sl], z)).reshape(-1, c)
            p = np.concatenate(
                [self.class_probabilities(f[r : r + f_chunk]) for r in range(0, len(f), f_chunk)]
            )
            out[sl] = p.reshape(-1, n_samples, c).mean(axis=1)
        return out / out.sum(axis=1, keepdims=True)
