"""Laplace (double-exponential) observation model p(y | f) = exp(-|y - f| / b) / (2 b).

With u = f - y ~ N(mu, v) under the cavity (mu = m - y, s = sqrt(v)) and a = eta / b,
the powered site is (2 b)^-eta exp(-a |u|), and the tilted distribution of u is a
mixture of two truncated Gaussians: N(u | mu - a v, v) on u > 0 and N(u | mu + a v, v) on
u < 0, with masses

    I+ = int_0^inf e^(-a u) N(u | mu, v) du = exp(-a mu + a^2 v / 2) Phi(z+),
    I- = int_-inf^0 e^(+a u) N(u | mu, v) du = exp(+a mu + a^2 v / 2) Phi(z-),
    z+ = (mu - a v) / s,  z- = (-mu - a v) / s.

Everything is closed form; log I+- is evaluated in log space without the cancellation of
``a^2 v / 2 + log Phi(z)`` for z << 0 (wide cavities), through the inverse Mills ratio
r = phi / Phi of :func:`robustep.likelihoods.probit.log_ndtr_ratio`.  Derivation and the
predictive distribution of a new y: docs/derivations/likelihoods.md, section "Laplace".
"""

from __future__ import annotations

import numpy as np
from scipy import special

from robustep.likelihoods.base import Likelihood, as_site_arrays, check_cavity, check_power
from robustep.likelihoods.probit import log_ndtr_ratio

_HALF_LOG_2PI = 0.5 * np.log(2.0 * np.pi)


def _log_mass(t, z, a_mu, half_a2v):
    """log int_0^inf e^(-a u) N(u | mu, v) du for z = t - a s >= or < 0, each (n,).

    t = mu / s, a_mu = a mu, half_a2v = a^2 v / 2.  z >= 0: -a mu + a^2 v / 2 + log Phi(z)
    (both terms moderate).  z < 0: -t^2/2 - log(sqrt(2 pi) r(z)) (r = phi(z)/Phi(z)), the
    same value with the large exponents cancelled analytically.
    Returns (log mass, E[x] = z + r(z), Var[x] = delta(z)) for x ~ N(0, 1) truncated to
    x > -z (the standardised truncated component).
    """
    log_cdf, r, delta = log_ndtr_ratio(z)
    neg = z < 0
    with np.errstate(divide="ignore"):
        log_r = np.log(r)
    log_m = np.where(neg, -0.5 * t * t - _HALF_LOG_2PI - log_r, -a_mu + half_a2v + log_cdf)
    # z + r: from (1 - delta) / r for z < 0 (r - |z| cancels there), directly for z >= 0
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_x = np.where(neg, (1.0 - delta) / r, z + r)
    return log_m, mean_x, delta


def _two_sided(d, v, a):
    """Masses and moments of exp(-a |u|) N(u | mu, v), mu = -d, per site (all (n,))."""
    s = np.sqrt(v)
    mu = -d
    t = mu / s
    a_s = a * s
    half_a2v = 0.5 * a_s * a_s
    log_p, g_p, dl_p = _log_mass(t, t - a_s, a * mu, half_a2v)  # u > 0 side
    log_n, g_n, dl_n = _log_mass(-t, -t - a_s, -a * mu, half_a2v)  # u < 0 side, in -u
    log_Z0 = np.logaddexp(log_p, log_n)
    pi_p = np.exp(log_p - log_Z0)
    pi_n = np.exp(log_n - log_Z0)
    return {
        "s": s,
        "t": t,
        "log_p": log_p,
        "log_n": log_n,
        "log_Z0": log_Z0,
        # E[u] = s (pi+ g+ - pi- g-), E|u| = s (pi+ g+ + pi- g-)
        "E_u": s * (pi_p * g_p - pi_n * g_n),
        "E_abs_u": s * (pi_p * g_p + pi_n * g_n),
        # Var[u]: within-component variances plus the spread between the two means;
        # every term is non-negative
        "var_u": v * (pi_p * dl_p + pi_n * dl_n) + pi_p * pi_n * (s * (g_p + g_n)) ** 2,
    }


class Laplace(Likelihood):
    """Laplace (double-exponential) likelihood with learnable ``scale`` b > 0.

    ``p(y | f) = exp(-|y - f| / b) / (2 b)``: heavier tails than the Gaussian (linear, not
    quadratic, in the residual), log-concave, so the EP tilted distributions are unimodal.
    Tilted moments, their gradient in log b and the predictive of a new observation are
    closed form for every power eta (module docstring).

    The log density is not twice differentiable at f = y and its second derivative is 0
    everywhere else: a Laplace approximation (``log_prob_derivatives``) sees no curvature
    from these sites (W = 0) and a Newton mode search gets no help from them; EP is the
    method for this likelihood.
    """

    hyperparameter_names = ("scale",)

    def __init__(self, scale=1.0):
        from robustep._validation import real_scalar

        self.scale = real_scalar(scale, "scale", lower=0.0)

    # -------------------------------------------------------------- tilted
    def tilted_moments(self, y, cavity_mean, cavity_var, power=1.0):
        """(log_Z, mean, var) of p(y | f)^power N(f | m, v), each (n,), in closed form."""
        eta = check_power(power)
        y, m, v = as_site_arrays(y, cavity_mean, cavity_var)
        check_cavity(m, v, y)
        b = float(self.scale)
        o = _two_sided(y - m, v, eta / b)
        log_Z = -eta * np.log(2.0 * b) + o["log_Z0"]
        return log_Z, y + o["E_u"], o["var_u"]

    def tilted_log_Z_gradient(self, y, cavity_mean, cavity_var, power=1.0):
        """d log_Z / d log(scale) = -eta + (eta / b) E[|y - f|], shape (n, 1)."""
        eta = check_power(power)
        y, m, v = as_site_arrays(y, cavity_mean, cavity_var)
        check_cavity(m, v, y)
        a = eta / float(self.scale)
        o = _two_sided(y - m, v, a)
        return (-eta + a * o["E_abs_u"])[:, None]

    # ----------------------------------------------------------- pointwise
    def log_prob(self, y, f):
        """-log(2 b) - |y - f| / b, shape (n,)."""
        y, f = as_site_arrays(y, f)
        b = float(self.scale)
        return -np.log(2.0 * b) - np.abs(y - f) / b

    def log_prob_derivatives(self, y, f):
        """(log p, sign(y - f) / b, 0, 0), each (n,).

        At the kink f = y the first derivative is the subgradient 0 and the second is a
        point mass that a pointwise value cannot hold: 0 is returned there as well (see
        the class docstring for what a Laplace approximation gets).
        """
        y, f = as_site_arrays(y, f)
        b = float(self.scale)
        r = y - f
        logp = -np.log(2.0 * b) - np.abs(r) / b
        return logp, np.sign(r) / b, np.zeros_like(r), np.zeros_like(r)

    def log_prob_parameter_gradient(self, y, f):
        """d log p / d log(scale) = -1 + |y - f| / b, shape (n, 1)."""
        y, f = as_site_arrays(y, f)
        b = float(self.scale)
        return (-1.0 + np.abs(y - f) / b)[:, None]

    # ----------------------------------------------------------- predictive
    # y_new = f + eps, f ~ N(m, v), eps ~ Laplace(0, b); u = f - y_new, a = 1 / b.
    def predictive_log_density(self, y, mean, var):
        """log int p(y | f) N(f | mean, var) df = log((I+ + I-) / (2 b)), shape (n,); var > 0."""
        y, m, v = as_site_arrays(y, mean, var)
        b = float(self.scale)
        return -np.log(2.0 * b) + _two_sided(y - m, v, 1.0 / b)["log_Z0"]

    def predictive_cdf(self, y, mean, var, upper=False):
        """P(Y <= y) = Phi(-t) - I-/2 + I+/2 (``upper``: Phi(t) - I+/2 + I-/2), shape (n,).

        t = (mean - y) / sqrt(var); I+- are the two-sided masses with a = 1/b.  Each
        difference is at least half its first term (I- <= Phi(-t), I+ <= Phi(t)), so it is
        formed in log space with full relative accuracy in both tails.  ``var`` > 0.
        """
        y, m, v = as_site_arrays(y, mean, var)
        o = _two_sided(y - m, v, 1.0 / float(self.scale))
        t = o["t"]
        if upper:
            t, keep, add = -t, o["log_p"], o["log_n"]
        else:
            keep, add = o["log_n"], o["log_p"]
        log_tail = special.log_ndtr(-t)
        # the ratio is <= 1 exactly; rounding of two huge logs (s -> 0) may exceed it
        log_first = log_tail + np.log1p(-0.5 * np.exp(np.minimum(keep - log_tail, 0.0)))
        return np.exp(np.logaddexp(log_first, add - np.log(2.0)))

    def predictive_cdf_and_density(self, y, mean, var):
        """(CDF (n,), density (n,)) in closed form."""
        return self.predictive_cdf(y, mean, var), np.exp(self.predictive_log_density(y, mean, var))

    def noise_scale(self):
        """The Laplace scale b (the noise standard deviation is sqrt(2) b)."""
        return float(self.scale)
