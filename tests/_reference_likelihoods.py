"""Small, independent likelihood implementations used to test the baselines.

They implement the :class:`robustep.likelihoods.base.Likelihood` protocol with
closed forms (Gaussian) or brute-force quadrature (Student-t tilted moments),
so the baselines can be checked without depending on the production
likelihood classes (which are tested against these in turn).
"""

from __future__ import annotations

import numpy as np

import _reference_student_t as st
from robustep.likelihoods.base import Likelihood


class StudentTReference(Likelihood):
    """Student-t p(y|f) with ``df`` (nu) and ``scale`` (sigma); learnable (log nu, log sigma)."""

    hyperparameter_names = ("df", "scale")

    def __init__(self, df=4.0, scale=0.5):
        self.df = float(df)
        self.scale = float(scale)

    def log_prob(self, y, f):
        return st.log_prob(y, f, self.df, self.scale)

    def log_prob_derivatives(self, y, f):
        return st.log_prob_derivatives(y, f, self.df, self.scale)

    def log_prob_parameter_gradient(self, y, f):
        return st.log_prob_log_param_gradient(y, f, self.df, self.scale)

    def tilted_moments(self, y, cavity_mean, cavity_var, power=1.0):
        y, m, v = np.broadcast_arrays(*(np.asarray(a, float) for a in (y, cavity_mean, cavity_var)))
        sd = np.sqrt(v)
        lo = np.minimum(m - 12 * sd, y - 60 * self.scale)
        hi = np.maximum(m + 12 * sd, y + 60 * self.scale)
        t = np.linspace(0.0, 1.0, 4001)
        x = lo[:, None] + (hi - lo)[:, None] * t
        dx = (hi - lo)[:, None] / (t.size - 1)
        lg = power * self.log_prob(y[:, None], x) - 0.5 * (
            np.log(2 * np.pi * v[:, None]) + (x - m[:, None]) ** 2 / v[:, None]
        )
        mx = lg.max(axis=1, keepdims=True)
        w = np.exp(lg - mx) * dx
        z = w.sum(axis=1)
        mean = (w * x).sum(axis=1) / z
        var = (w * (x - mean[:, None]) ** 2).sum(axis=1) / z
        return np.log(z) + mx[:, 0], mean, var

    def tilted_log_Z_gradient(self, y, cavity_mean, cavity_var, power=1.0):
        """power * E_tilted[d log p / d log(nu, sigma)], shape (n, 2), by the same grid."""
        y, m, v = np.broadcast_arrays(*(np.asarray(a, float) for a in (y, cavity_mean, cavity_var)))
        sd = np.sqrt(v)
        lo = np.minimum(m - 12 * sd, y - 60 * self.scale)
        hi = np.maximum(m + 12 * sd, y + 60 * self.scale)
        x = lo[:, None] + (hi - lo)[:, None] * np.linspace(0.0, 1.0, 4001)
        lg = power * self.log_prob(y[:, None], x) - 0.5 * (x - m[:, None]) ** 2 / v[:, None]
        w = np.exp(lg - lg.max(axis=1, keepdims=True))
        w /= w.sum(axis=1, keepdims=True)
        g = st.log_prob_log_param_gradient(y[:, None], x, self.df, self.scale)
        return power * np.einsum("ij,ijk->ik", w, g)


class GaussianReference(Likelihood):
    """Gaussian p(y|f) = N(y | f, noise_variance); learnable (log noise_variance,)."""

    hyperparameter_names = ("noise_variance",)

    def __init__(self, noise_variance=0.1):
        self.noise_variance = float(noise_variance)

    def log_prob(self, y, f):
        s2 = self.noise_variance
        return -0.5 * (np.log(2 * np.pi * s2) + (np.asarray(y) - np.asarray(f)) ** 2 / s2)

    def log_prob_derivatives(self, y, f):
        s2 = self.noise_variance
        r = np.asarray(y, float) - np.asarray(f, float)
        z = np.zeros_like(r)
        return self.log_prob(y, f), r / s2, z - 1.0 / s2, z

    def log_prob_parameter_gradient(self, y, f):
        s2 = self.noise_variance
        r2 = (np.asarray(y, float) - np.asarray(f, float)) ** 2
        return (-0.5 + 0.5 * r2 / s2)[:, None]

    def tilted_moments(self, y, cavity_mean, cavity_var, power=1.0):
        s2 = self.noise_variance / power
        y, m, v = np.broadcast_arrays(*(np.asarray(a, float) for a in (y, cavity_mean, cavity_var)))
        log_Z = (
            -0.5 * (np.log(2 * np.pi * (v + s2)) + (y - m) ** 2 / (v + s2))
            + power * (-0.5 * np.log(2 * np.pi * self.noise_variance))
            + 0.5 * np.log(2 * np.pi * s2)
        )
        var = 1.0 / (1.0 / v + 1.0 / s2)
        mean = var * (m / v + y / s2)
        return log_Z, mean, var

    def tilted_log_Z_gradient(self, y, cavity_mean, cavity_var, power=1.0):
        # log Z above, differentiated in log noise_variance with T = v + s2 / power
        s2 = self.noise_variance / power
        y, m, v = np.broadcast_arrays(*(np.asarray(a, float) for a in (y, cavity_mean, cavity_var)))
        T = v + s2
        return (0.5 * (1.0 - power) - 0.5 * s2 * (1.0 / T - (y - m) ** 2 / T**2))[:, None]


# ------------------------------------------------------- dense log-space integration
def reference_log_prob(lik, y, f):
    """log p(y | f) written independently of robustep (scipy.special), for the dense
    reference below; ``lik`` supplies only the parameters.  Shapes broadcast."""
    from scipy import special

    name = type(lik).__name__
    y = np.asarray(y, float)
    f = np.asarray(f, float)
    with np.errstate(divide="ignore"):
        if name == "Gaussian":
            s2 = lik.noise_variance
            return -0.5 * (np.log(2 * np.pi * s2) + (y - f) ** 2 / s2)
        if name == "StudentT":
            nu, s = lik.df, lik.scale
            r = (y - f) / s
            return (
                special.gammaln(0.5 * (nu + 1)) - special.gammaln(0.5 * nu)
                - 0.5 * np.log(nu * np.pi) - np.log(s) - 0.5 * (nu + 1) * np.log1p(r * r / nu)
            )  # fmt: skip
        if name == "Probit":
            return special.log_ndtr(y * f)
        if name == "Logistic":
            return -np.logaddexp(0.0, -y * f)
        if name == "NoisyStep":
            eps = lik.epsilon
            theta = np.where(y * f > 0, 1.0, np.where(y * f < 0, 0.0, 0.5))
            return np.log(eps + (1 - 2 * eps) * theta)
    raise TypeError(f"no reference log p(y|f) for {name}")


def reference_log_prob_difference(lik, y, f0, d):
    """log p(y | f0 + d) - log p(y | f0) without cancellation (scalar f0, array d).

    When log p(y | f0) is huge (e.g. -1e13 for a Gaussian 1e5 noise sds away) the plain
    difference of two log-densities keeps only ~1e-3 absolute accuracy; these forms
    factor the difference of squares instead.
    """
    from scipy import special

    name = type(lik).__name__
    d = np.asarray(d, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        if name == "Gaussian":
            r0 = y - f0  # r = r0 - d;  r^2 - r0^2 = -d (2 r0 - d)
            return d * (2.0 * r0 - d) / (2.0 * lik.noise_variance)
        if name == "StudentT":
            nu, s = lik.df, lik.scale
            r0 = y - f0
            c = nu * s * s + r0 * r0
            return -0.5 * (nu + 1) * np.log1p(-d * (2.0 * r0 - d) / c)
        z0 = y * f0
        dz = y * d
        z = z0 + dz
        if name == "Probit":
            # log Phi(z) = -z^2/2 + log(erfcx(-z/sqrt2)/2) for z < 0; log_ndtr otherwise
            def tail(zz):
                return np.log(special.erfcx(-zz / np.sqrt(2.0)) / 2.0)

            both_neg = (z < 0) & (z0 < 0)
            quad = -0.5 * dz * (2.0 * z0 + dz)
            direct = special.log_ndtr(z) - special.log_ndtr(z0)
            return np.where(both_neg, quad + tail(z) - tail(z0), direct)
        if name == "Logistic":
            # -log(1 + e^{-z}) = min(z, 0) - log1p(e^{-|z|})
            lin = np.minimum(z, 0.0) - min(z0, 0.0)
            lin = np.where((z < 0) & (z0 < 0), dz, lin)
            return lin - np.log1p(np.exp(-np.abs(z))) + np.log1p(np.exp(-abs(z0)))
        if name == "NoisyStep":
            return reference_log_prob(lik, y, f0 + d) - reference_log_prob(lik, y, f0)
    raise TypeError(f"no reference log p(y|f) for {name}")


def _feature(lik, y):
    """(location in f, width in f) of the likelihood's feature: y for regression, 0 for
    classification."""
    name = type(lik).__name__
    if name == "Gaussian":
        return float(y), float(np.sqrt(lik.noise_variance))
    if name == "StudentT":
        return float(y), float(lik.scale)
    return 0.0, 1.0


def dense_tilted_moments(lik, y, m, v, power, n_ladder=40000):
    """(log Z, mean, var) of p(y|f)^power N(f | m, v) by dense log-space trapezoid rules.

    Scalar inputs.  In standardised units x = (f - m)/sqrt(v) the integrand is
    exp(-x^2/2 + power log p(y | m + sqrt(v) x)) / sqrt(2 pi).  The tilted mode x* is found
    by a bounded Brent search over a window holding the cavity (x = 0) and the
    likelihood's feature x_c = (c - m)/sqrt(v); the grid is the union of geometric
    ladders (offsets 1e-12 ... 1e7, ``n_ladder`` per side) around x*, 0 and x_c, so
    features of any width from 1e-12 to 1e7 cavity sds are resolved.  Everything is
    computed in u = x - x* (the Gaussian part as -x* u - u^2/2, the likelihood part as
    ``reference_log_prob_difference``, the constants added back analytically) so that a
    mode 1e6 sds away from the cavity, or a log-likelihood of -1e13, loses no precision.
    Documented accuracy (tests/likelihoods/test_properties_likelihoods.py checks it against closed
    forms): relative error of Z and of the variance, and error of the mean in tilted sds,
    about 1e-6, up to ~3e-6 next to a step (trapezoid error of the 0.1% relative ladder
    spacing; 1.2e-5 in a variance with half this many points).
    """
    from scipy import optimize

    sd = float(np.sqrt(v))
    c, w = _feature(lik, y)
    xc = (c - m) / sd
    lo, hi = min(0.0, xc) - 60.0, max(0.0, xc) + 60.0

    def logf_x(x):
        return -0.5 * x * x + power * reference_log_prob(lik, y, m + sd * x)

    # candidate modes: the cavity, the feature, and a bounded search between them
    # (the feature on both sides too: m + sd xc may round to the wrong side of a step)
    cands = [0.0, xc, xc - 1e-9 * max(1.0, abs(xc)), xc + 1e-9 * max(1.0, abs(xc))]
    with np.errstate(all="ignore"):
        res = optimize.minimize_scalar(
            lambda x: min(-float(logf_x(x)), 1e300), bounds=(lo, hi), method="bounded",
            options={"xatol": 1e-12 * max(1.0, abs(hi - lo))},
        )  # fmt: skip
        cands.append(float(res.x))
        vals = [float(logf_x(x)) for x in cands]
    x_star = cands[int(np.nanargmax(vals))]
    f_star = m + sd * x_star
    ladder = np.geomspace(1e-12, 1e7, n_ladder)
    offsets = np.concatenate([-ladder[::-1], [0.0], ladder])
    u = np.concatenate(
        [cc - x_star + offsets for cc in cands] + [np.linspace(lo, hi, 48001) - x_star]
    )
    u = np.unique(u[(u >= lo - x_star) & (u <= hi - x_star)])
    with np.errstate(all="ignore"):
        g = (
            -x_star * u
            - 0.5 * u * u
            + power * reference_log_prob_difference(lik, y, f_star, sd * u)
        )
        log_p_star = power * float(reference_log_prob(lik, y, f_star))
    g = np.where(np.isfinite(g), g, -np.inf)
    gmax = np.max(g)
    p = np.exp(g - gmax)
    du = np.diff(u)
    # trapezoid weights
    wts = np.zeros_like(u)
    wts[:-1] += 0.5 * du
    wts[1:] += 0.5 * du
    z = np.sum(wts * p)
    mean_u = np.sum(wts * p * u) / z
    var_u = np.sum(wts * p * (u - mean_u) ** 2) / z
    log_Z = np.log(z) + gmax + log_p_star - 0.5 * x_star * x_star - 0.5 * np.log(2 * np.pi)
    return float(log_Z), float(f_star + sd * mean_u), float(v * var_u)
