"""Predictive distribution of a new observation y for a Gaussian latent, and mixtures of such.

For one likelihood the predictive of y is p(y) = int p(y | f) N(f | m, v) df; each
likelihood implements its CDF and density (``predictive_cdf``,
``predictive_cdf_and_density``).  An EP3 grid or a set of MCMC draws gives a mixture

    p(y) = sum_j w_j int p_j(y | f) N(f | m_j, v_j) df,

whose CDF, density and quantiles :class:`PredictiveMixture` evaluates at n test points at
once (the weights may differ per point, as leave-one-out mixture weights do).  The
Student-t noise is integrated through its Gamma scale mixture
(:func:`student_t_mixture_nodes`); docs/derivations/tgp-predictive.md.
"""

from __future__ import annotations

import functools

import numpy as np

from robustep._config import get_config
from robustep.quadrature import gamma_scale_mixture_nodes


@functools.lru_cache(maxsize=256)
def _cached_nodes(df, n_nodes):
    lam, w = gamma_scale_mixture_nodes(df, n_nodes)
    lam.setflags(write=False)
    w.setflags(write=False)
    return lam, w


def student_t_mixture_nodes(df):
    """Nodes lambda_k (K,) and weights w_k (K,) of the Student-t's Gamma scale mixture.

    E_lambda[g(lambda)] ≈ sum_k w_k g(lambda_k) for lambda ~ Gamma(nu/2, rate nu/2)
    (Jylänki et al. 2011 eq. 3), K = ``get_config().student_t_predictive_nodes``
    (:func:`robustep.quadrature.gamma_scale_mixture_nodes`; read-only, cached per nu).
    """
    return _cached_nodes(float(df), int(get_config().student_t_predictive_nodes))


def predictive_mixture(likelihoods, means, variances, weights=None) -> PredictiveMixture:
    """The predictive mixture sum_j w_j int p_j(y | f) N(f | means[j], variances[j]) df.

    Parameters
    ----------
    likelihoods : sequence of J likelihoods
        Component j's observation model (each implements the predictive methods of
        :class:`robustep.likelihoods.Likelihood`).
    means, variances : (J, n) arrays
        Latent moments of each component at n test points (variances clipped at 0).
    weights : None, (J,) or (J, n)
        Mixture weights: equal by default; a (J,) vector is normalised to sum 1; a (J, n)
        array (per-point weights, columns summing to 1) is used as given.
    """
    return PredictiveMixture(likelihoods, means, variances, weights)


class PredictiveMixture:
    """CDF, density and quantiles of a mixture of Gaussian-latent predictives (see
    :func:`predictive_mixture`); every method is vectorised over the n test points."""

    def __init__(self, likelihoods, means, variances, weights=None):
        self.likelihoods = list(likelihoods)
        self.means = np.atleast_2d(np.asarray(means, dtype=float))
        self.variances = np.maximum(np.atleast_2d(np.asarray(variances, dtype=float)), 0.0)
        J = self.means.shape[0]
        if len(self.likelihoods) != J or self.variances.shape != self.means.shape:
            raise ValueError(
                f"{len(self.likelihoods)} likelihoods, means {self.means.shape} and variances "
                f"{self.variances.shape} do not describe the same J components"
            )
        if weights is None:
            self.weights = np.full(J, 1.0 / J)
        else:
            w = np.asarray(weights, dtype=float)
            self.weights = w / np.sum(w) if w.ndim == 1 else w

    def _components(self):
        return zip(self.likelihoods, self.means, self.variances, self.weights, strict=True)

    def cdf(self, y, upper=False) -> np.ndarray:
        """P(Y <= y) at (n,) points (``upper``: P(Y > y), accurate in the upper tail)."""
        y = np.asarray(y, dtype=float)
        F = np.zeros_like(y)
        for lik, m, v, wj in self._components():
            F += wj * lik.predictive_cdf(y, m, v, upper=upper)
        return F

    def cdf_and_density(self, y):
        """(CDF (n,), density (n,)) at (n,) points y."""
        y = np.asarray(y, dtype=float)
        F = np.zeros_like(y)
        p = np.zeros_like(y)
        for lik, m, v, wj in self._components():
            Fj, pj = lik.predictive_cdf_and_density(y, m, v)
            F += wj * Fj
            p += wj * pj
        return F, p

    def log_density(self, y) -> np.ndarray:
        """log sum_j w_j p_j(y) at (n,) points y (a log-sum-exp over the components)."""
        y = np.asarray(y, dtype=float)
        lp = np.array([lik.predictive_log_density(y, m, v) for lik, m, v, _ in self._components()])
        if lp.shape[0] == 1:
            return lp[0]
        w = self.weights if self.weights.ndim == 2 else self.weights[:, None]
        a = lp + np.log(np.maximum(w, 1e-300))
        mx = np.max(a, axis=0)
        return mx + np.log(np.sum(np.exp(a - mx), axis=0))

    def quantiles(self, q, tol=1e-10) -> np.ndarray:
        """Quantiles at probabilities q (Q,) in [0, 1], shape (n, Q).

        The bracket starts at every component's mean +- sqrt(variance + noise scale^2) and
        doubles until it holds the quantile; then safeguarded Newton steps on
        :meth:`cdf_and_density` (a bisection step whenever Newton leaves the bracket) until
        a step is below ``tol`` (1 + bracket width).  q = 0 and q = 1 give -inf and +inf.
        """
        q = np.asarray(q, dtype=float).reshape(-1)
        scales = np.array([lik.noise_scale() for lik in self.likelihoods], dtype=float)
        spread = np.sqrt(self.variances + scales[:, None] ** 2)
        lo0 = np.min(self.means - spread, axis=0)
        hi0 = np.max(self.means + spread, axis=0)
        width = hi0 - lo0
        out = np.empty((self.means.shape[1], q.size))
        for k, qk in enumerate(q):
            if qk <= 0.0 or qk >= 1.0:
                out[:, k] = -np.inf if qk <= 0.0 else np.inf
                continue
            lo, hi = lo0.copy(), hi0.copy()
            for _ in range(200):  # widen the brackets (doubling) until they hold the quantile
                bad_lo, bad_hi = self.cdf(lo) > qk, self.cdf(hi) < qk
                if not (bad_lo.any() or bad_hi.any()):
                    break
                step = hi - lo
                lo = np.where(bad_lo, lo - step, lo)
                hi = np.where(bad_hi, hi + step, hi)
            x = 0.5 * (lo + hi)
            for _ in range(100):
                F, p = self.cdf_and_density(x)
                g = F - qk
                lo = np.where(g < 0, x, lo)
                hi = np.where(g >= 0, x, hi)
                xn = x - g / np.maximum(p, 1e-300)
                outside = ~((xn > lo) & (xn < hi)) | ~np.isfinite(xn)
                xn = np.where(outside, 0.5 * (lo + hi), xn)
                done = np.abs(xn - x) <= tol * (1.0 + width)
                x = xn
                if np.all(done):
                    break
            out[:, k] = x
        return out
