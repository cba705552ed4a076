"""Label-noise (robust) multinomial probit likelihood: the tilted mixture of one site.

Model (docs/derivations/multiclass.md §9): with probability ε the observed
label is replaced by one of the other c - 1 classes, uniformly,

    p(y = k | f) = ε/(c-1) + (1 - ε c/(c-1)) P_mnp(y = k | f) = a + b P_mnp(k | f),     (N1)

a = ε/(c-1), b = 1 - ε c/(c-1), ε ∈ [0, (c-1)/c) (b > 0; ε = (c-1)/c makes the labels
independent of f).  P_mnp is the multinomial probit of
:mod:`robustep.likelihoods.multinomial_probit` (Riihimäki, Jylänki & Vehtari 2013, §2).

Given the cavity N(f | m, S) of one site, the tilted distribution is a two-component
mixture: weight a the cavity itself, weight b the multinomial-probit tilted distribution,
whose normaliser Z_mnp and moments (μ_mnp, Σ_mnp) the inner EP of nested EP gives (§4 of
the paper).  With r = b Z_mnp / Z (the probability that the label was not flipped):

    Z = a + b Z_mnp,
    E f = m + r (μ_mnp - m),
    Cov f = (1 - r) S + r Σ_mnp + r (1 - r) (μ_mnp - m)(μ_mnp - m)^T.                   (N2)

Everything is vectorised over sites (arrays with a leading dimension n).
"""

from __future__ import annotations

import numpy as np

from robustep.likelihoods.multinomial_probit import (
    MultinomialProbit,
    _check_labels,
    inner_ep,
    inner_ep_log_Z,
    tilted_moments_from_sites,
)

__all__ = ["NoisyMultinomialProbit", "check_label_noise", "mixture_moments", "noise_weights"]


def check_label_noise(label_noise, n_classes):
    """ε as a float, or a ValueError that says the allowed range [0, (c-1)/c)."""
    c = int(n_classes)
    try:
        eps = float(label_noise)
    except (TypeError, ValueError):
        raise ValueError(f"label_noise must be a number, got {label_noise!r}") from None
    upper = (c - 1) / c
    if not (np.isfinite(eps) and 0.0 <= eps < upper):
        raise ValueError(
            f"label_noise must be in [0, (c-1)/c) = [0, {upper:.4g}) for c = {c} classes "
            f"(the probability that a label was replaced by another class); got {label_noise!r}"
        )
    return eps


def noise_weights(label_noise, n_classes):
    """(a, b) of (N1): a = ε/(c-1), b = 1 - ε c/(c-1)."""
    c = int(n_classes)
    eps = check_label_noise(label_noise, c)
    return eps / (c - 1), 1.0 - eps * c / (c - 1)


def mixture_moments(log_Z_mnp, mean_mnp, cov_mnp, cavity_mean, cavity_cov, a, b):
    """Normaliser and moments (N2) of a N(f | m, S) + b P_mnp(y | f) N(f | m, S).

    log_Z_mnp (n,), mean_mnp (n, c), cov_mnp (n, c, c): the multinomial-probit tilted
    normaliser and moments; cavity_mean (n, c), cavity_cov (n, c, c).
    Returns ``(log_Z (n,), mean (n, c), cov (n, c, c), r (n,))`` with r = b Z_mnp / Z.
    """
    log_Z_mnp = np.asarray(log_Z_mnp, dtype=float)
    with np.errstate(divide="ignore"):
        log_a, log_b = np.log(a), np.log(b)
    log_Z = np.logaddexp(log_a, log_b + log_Z_mnp)
    r = np.exp(log_b + log_Z_mnp - log_Z)
    d = mean_mnp - cavity_mean
    mean = cavity_mean + r[:, None] * d
    cov = (
        (1.0 - r)[:, None, None] * cavity_cov
        + r[:, None, None] * cov_mnp
        + (r * (1.0 - r))[:, None, None] * d[:, :, None] * d[:, None, :]
    )
    return log_Z, mean, 0.5 * (cov + np.swapaxes(cov, 1, 2)), r


class NoisyMultinomialProbit:
    """Label-noise multinomial probit p(y = k | f) = a + b P_mnp(k | f) (module docstring).

    Not a :class:`~robustep.likelihoods.base.Likelihood` (c-dimensional sites), like
    :class:`~robustep.likelihoods.multinomial_probit.MultinomialProbit`, which it wraps;
    :func:`robustep.ep.multiclass_label_noise.robust_nested_ep` runs EP with it.

    Parameters
    ----------
    n_classes : int >= 2
    label_noise : ε in [0, (c-1)/c)
    quadrature_points : Gauss–Hermite nodes over u (``log_prob``, predictive with "qmc").
    """

    def __init__(self, n_classes, label_noise, *, quadrature_points=None):
        self.mnp = MultinomialProbit(n_classes, quadrature_points=quadrature_points)
        self.n_classes = self.mnp.n_classes
        self.label_noise = check_label_noise(label_noise, self.n_classes)
        self.a, self.b = noise_weights(self.label_noise, self.n_classes)

    def tilted_from_sites(self, y, cavity_mean, cavity_cov, alpha, beta):
        """Tilted normaliser and moments (N2) with the multinomial-probit part from the inner
        EP at inner sites ``alpha``, ``beta`` (n, c).

        Returns ``(log_Z, mean, cov, r)`` as :func:`mixture_moments`.
        """
        log_Z_mnp, _ = inner_ep_log_Z(y, cavity_mean, cavity_cov, alpha, beta)
        mean_mnp, cov_mnp = tilted_moments_from_sites(y, cavity_mean, cavity_cov, alpha, beta)
        return mixture_moments(
            log_Z_mnp, mean_mnp, cov_mnp, cavity_mean, cavity_cov, self.a, self.b
        )

    def tilted_moments(self, y, cavity_mean, cavity_cov, *, n_sweeps=100, tol=1e-10):
        """Inner EP (run to convergence) approximation of every site's tilted distribution.

        y : (n,) int labels; cavity_mean (n, c); cavity_cov (n, c, c).
        Returns ``(log_Z (n,), mean (n, c), cov (n, c, c))``.
        """
        cavity_mean = np.asarray(cavity_mean, dtype=float)
        cavity_cov = np.asarray(cavity_cov, dtype=float)
        y = _check_labels(y, cavity_mean.shape[1])
        alpha, beta, _ = inner_ep(y, cavity_mean, cavity_cov, n_sweeps=n_sweeps, tol=tol)
        log_Z, mean, cov, _ = self.tilted_from_sites(y, cavity_mean, cavity_cov, alpha, beta)
        return log_Z, mean, cov

    def class_probabilities(self, f):
        """p(y = k | f) (m, c) for latents f (m, c); rows sum to 1."""
        return self.a + self.b * self.mnp.class_probabilities(f)

    def log_prob(self, y, f):
        """log p(y_i | f_i) (n,) for int labels y (n,) and latents f (n, c)."""
        lp = self.mnp.log_prob(y, f)
        with np.errstate(divide="ignore"):
            return np.logaddexp(np.log(self.a), np.log(self.b) + lp)

    def predictive_probabilities(self, mean, cov, **kwargs):
        """p(y* = k) = a + b ∫ N(f | mean, cov) P_mnp(k | f) df (m, c); rows sum to 1.

        The integral is :meth:`MultinomialProbit.predictive_probabilities` (``kwargs``:
        its ``method`` etc.), linear in the likelihood, so the noise enters exactly.
        """
        return self.a + self.b * self.mnp.predictive_probabilities(mean, cov, **kwargs)
