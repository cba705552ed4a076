"""Student-t observation model p(y | f) = t_df(y - f; 0, scale).

The tilted distribution ``t(y - f)^eta N(f | m, v)`` may be bimodal (a mode near the
cavity mean and one near the observation) and extremely peaked.  We integrate it
accurately through the Gamma scale-mixture representation of the (powered) t kernel,
which turns the problem into a *smooth one-dimensional integral over the log mixing
precision* whose integrand has no feature narrower than ``min(1, 1/sqrt(a))``; see
docs/derivations/student_t_tilted.md for the full derivation and error analysis.
Summary (a = eta (df + 1)/2, c = df scale^2, d = y - m):

    (1 + r^2/c)^(-a) = int Ga(lam | a, 1) exp(-lam r^2 / c) dlam
    Z = C^eta / Gamma(a) int exp(phi(u)) du,          u = log lam
    phi(u) = a u - lam + 1/2 log(1 - rho) - D rho,    rho = lam / (lam + beta)
    beta = c / (2 v),  D = d^2 / (2 v)

and, given lam, f is Gaussian with mean m + rho d and variance v (1 - rho), so

    E[f] = m + d E[rho],   Var[f] = v E[1 - rho] + d^2 Var[rho]

with expectations under the normalised weight exp(phi(u)).  The u-range is covered
by equal Gauss–Legendre panels; panels whose rigorous upper bound of phi lies more
than ``_PRUNE`` below the best value found are dropped (this removes the dead zone
between the two modes), and the far-left tail lam < lam0 is integrated analytically
(there rho << 1 and the integrand is a Gamma(a, R) kernel; Jylänki et al. 2011 §4.1
address the same bimodality with limits built from both modes, in f-space).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy import special

from robustep._config import get_config
from robustep.likelihoods._predictive import student_t_mixture_nodes
from robustep.likelihoods.base import Likelihood, as_site_arrays, check_cavity, check_power
from robustep.likelihoods.gaussian import Gaussian
from robustep.quadrature import gauss_hermite, gauss_legendre

_PRUNE = 30.0  # drop panels whose bound is below best - _PRUNE (e^-30 ~ 1e-13)
_WIDTH = 0.33  # panel width per node, in feature widths
_BLOCK = 1024  # sites per block: keeps the (sites x nodes) work arrays in cache
#: Above this mixing shape a = eta (df + 1) / 2 the t kernel is nearly Gaussian and the
#: tilted integrals use an f-space Gauss–Hermite rule centred at the Gaussian limit
#: (``_integrate_near_gaussian``); the scale-mixture panels lose accuracy beyond a ~ 2500.
_LARGE_SHAPE = 1000.0
_NEAR_GAUSSIAN_NODES = 96


def _scheme(a, n_nodes):
    """Panel width in u and the left offset L (in log-units below log(a/R)) for shape a."""
    # Features of exp(phi) have width min(1, 1/sqrt(a)) in u; Gauss–Legendre with n nodes
    # on a panel of _WIDTH * n feature widths is accurate to ~1e-9 (tests).
    feature = min(1.0, 1.0 / math.sqrt(a))
    h = _WIDTH * n_nodes * feature
    # Below lam0 = (a/R) e^-L the integrand is replaced by the Gamma(a, R) kernel.  The tail
    # holds at most e^(-a (L-1)) / sqrt(2 pi a) of Z and the kernel is wrong there by at most
    # 4 a^2 e^(-2L) (relative), so the product is <= 1e-12 when
    # 2L + a(L-1) >= 27.6 + 2 log(2a) (docs/derivations/student_t_tilted.md).
    left = max(1.0, (27.6 + 2.0 * math.log(2.0 * a) + a) / (2.0 + a))
    return h, left


def _incomplete_gamma_series(s, x, terms=60):
    """sum_j x^j / ((s+1)...(s+j)), so that gamma(s, x) = x^s e^-x / s * series (x small)."""
    total, term = 1.0, 1.0
    for j in range(1, terms):
        term *= x / (s + j)
        total += term
        if term < 1e-17 * total:
            break
    return total


@functools.lru_cache(maxsize=128)
def _tail_constants(a, x0):
    """Scalars for the analytic tail int_0^{x0} t^(a-1+k) e^-t dt (k = 0, 1, 2).

    Returns (log g0, g1/g0, g2/g0) with g_k the lower incomplete gamma(a + k, x0), from
    the power series (x0 <= a e^(-1 - 45/a) < 8 < a + 1 whenever it matters), without the
    cancellation of the recurrence for tiny x0.
    """
    s0 = _incomplete_gamma_series(a, x0)
    s1 = _incomplete_gamma_series(a + 1.0, x0)
    s2 = _incomplete_gamma_series(a + 2.0, x0)
    log_g0 = a * math.log(x0) - x0 + math.log(s0) - math.log(a)
    r1 = x0 * a / (a + 1.0) * s1 / s0
    r2 = x0 * x0 * a / (a + 2.0) * s2 / s0
    return log_g0, r1, r2


@functools.lru_cache(maxsize=128)
def _tail_log_moment(a, x0):
    """int_0^x0 log(t) t^(a-1) e^-t dt / int_0^x0 t^(a-1) e^-t dt  (scalar).

    This is d/da log gamma(a, x0); with gamma(a, x) = x^a e^-x S(a, x) / a and
    S = sum_k x^k / ((a+1)...(a+k)) it equals log x0 - 1/a + S'/S, where
    S' = -sum_k [x^k / ((a+1)...(a+k))] (1/(a+1) + ... + 1/(a+k)): positive series only.
    """
    total, dtotal, term, harmonic = 1.0, 0.0, 1.0, 0.0
    for j in range(1, 100_000):
        term *= x0 / (a + j)
        harmonic += 1.0 / (a + j)
        total += term
        dtotal -= term * harmonic
        if term < 1e-17 * total and j > x0 - a:
            break
    return math.log(x0) - 1.0 / a + dtotal / total


def _work_arrays(work, rows, cols):
    """Five (rows, cols) float views into buffers kept in ``work`` (grown when needed)."""
    size = rows * cols
    if work is None:
        work = {}
    buf = work.get("buf")
    if buf is None or buf.shape[1] < size:
        buf = np.empty((5, max(size, int(1.25 * work.get("size", 0)))))
        work["buf"] = buf
        work["size"] = buf.shape[1]
    return [buf[k, :size].reshape(rows, cols) for k in range(5)]


class StudentT(Likelihood):
    """Student-t likelihood with learnable ``df`` (nu > 0) and ``scale`` (s > 0).

    ``p(y | f) = Gamma((nu+1)/2) / (Gamma(nu/2) sqrt(nu pi) s) (1 + (y-f)^2/(nu s^2))^(-(nu+1)/2)``.
    Tilted moments use the scale-mixture quadrature described in the module docstring
    (``get_config().student_t_quadrature_points`` Gauss–Legendre nodes per panel).
    """

    hyperparameter_names = ("df", "scale")

    def __init__(self, df=4.0, scale=1.0):
        from robustep._validation import real_scalar

        if isinstance(df, (int, float)) and df == np.inf:
            raise ValueError(
                "df (degrees of freedom) must be finite and > 0, got inf; for df = inf use the "
                "Gaussian likelihood (robustep.likelihoods.Gaussian(noise_variance=scale**2))"
            )
        self.df = real_scalar(df, "df (degrees of freedom)", lower=0.0)
        self.scale = real_scalar(scale, "scale", lower=0.0)

    # ---------------------------------------------------------------- helpers
    def _log_norm(self):
        """log C of the t density: lnG((nu+1)/2) - lnG(nu/2) - 1/2 log(nu pi) - log s.

        For nu/2 = x > 1e3 the difference of log-gammas (each ~x log x) loses digits (3 in
        log C at nu = 1e15); there the asymptotic series
        lnG(x + 1/2) - lnG(x) = 1/2 log x - 1/(8x) + 1/(192 x^3) + O(x^-5) is used.
        """
        nu, s = self.df, self.scale
        x = 0.5 * nu
        if x > 1e3:
            series = -1.0 / (8.0 * x) + 1.0 / (192.0 * x**3)
            return series - 0.5 * math.log(2.0 * math.pi) - math.log(s)
        return (
            special.gammaln(0.5 * (nu + 1.0))
            - special.gammaln(0.5 * nu)
            - 0.5 * math.log(nu * math.pi)
            - math.log(s)
        )

    def _integrate_near_gaussian(self, y, m, v, eta):
        """(log_Z, mean, var, E[eta d log t / d log(df, scale)]) for a large mixing shape.

        Laplace-centred Gauss–Hermite in f: the log tilted density
        g(f) = eta log t(y - f) - (f - m)^2 / (2 v) is maximised by safeguarded Newton
        steps from the cavity mean and from the Gaussian-limit mean
        mu_g = v_g (m/v + eta y/scale^2), 1/v_g = 1/v + eta/scale^2 (Jylänki et al. 2011
        §4.1's mu_inf); the rule is centred at the higher mode with its curvature as scale.
        For large df the t kernel is nearly Gaussian, so g is close to a quadratic there
        and the rule is accurate (tests compare it with the scale-mixture rule where both
        apply and with the Gaussian limit).
        """
        with np.errstate(all="ignore"):  # non-finite results are reported by _checked
            return self._near_gaussian_rule(y, m, v, eta)

    def _near_gaussian_rule(self, y, m, v, eta):
        s2 = np.square(np.float64(self.scale))
        v_g = 1.0 / (1.0 / v + eta / s2)
        mu_g = v_g * (m / v + eta * y / s2)

        def g_and_derivatives(f):
            logp, d1, d2, _ = self.log_prob_derivatives(y, f)
            return eta * logp - 0.5 * (f - m) ** 2 / v, eta * d1 - (f - m) / v, eta * d2 - 1.0 / v

        best_f, best_g = None, None
        for f in (m.copy(), mu_g.copy()):
            for _ in range(60):
                _, g1, g2 = g_and_derivatives(f)
                h = np.minimum(g2, -1.0 / v)  # concave model: every step goes uphill
                step = -g1 / h
                f = f + step
                if np.all(np.abs(step) <= 1e-12 * (np.abs(f) + np.sqrt(v_g))):
                    break
            g, _, _ = g_and_derivatives(f)
            if best_f is None:
                best_f, best_g = f, g
            else:
                better = g > best_g
                best_f, best_g = np.where(better, f, best_f), np.where(better, g, best_g)
        _, _, curv = g_and_derivatives(best_f)
        sd = np.where(curv < 0, 1.0 / np.sqrt(np.abs(curv)), np.sqrt(v_g))
        x, log_w = gauss_hermite(_NEAR_GAUSSIAN_NODES)
        f = best_f[:, None] + sd[:, None] * x[None, :]
        yy = np.broadcast_to(y[:, None], f.shape).ravel()
        log_t = self.log_prob(yy, f.ravel()).reshape(f.shape)
        # log of integrand / N(f | centre, sd^2), integrand = t^eta N(f | m, v)
        la = (
            log_w[None, :]
            + eta * log_t
            - 0.5 * (f - m[:, None]) ** 2 / v[:, None]
            + np.log(sd / np.sqrt(v))[:, None]
            + 0.5 * x[None, :] ** 2
        )
        log_Z = special.logsumexp(la, axis=1)
        w = np.exp(la - log_Z[:, None])
        mean = np.einsum("ij,ij->i", w, f)
        var = np.einsum("ij,ij->i", w, (f - mean[:, None]) ** 2)
        grad = self.log_prob_parameter_gradient(yy, f.ravel()).reshape(*f.shape, 2)
        e_grad = eta * np.einsum("ij,ijk->ik", w, grad)
        return log_Z, mean, var, e_grad

    def _integrate(self, y, m, v, eta, want_gradient=False, work=None):
        """Scale-mixture quadrature (module docstring). Returns a dict of site arrays."""
        nu, s = self.df, self.scale
        c = nu * s * s
        a = 0.5 * eta * (nu + 1.0)
        n_nodes = int(get_config().student_t_quadrature_points)
        h_max, left = _scheme(a, n_nodes)
        x_gl, logw_gl = gauss_legendre(n_nodes)

        d = y - m
        D = 0.5 * d * d / v
        log_beta = math.log(0.5 * c) - np.log(v)
        beta = np.exp(log_beta)
        log_R = np.log1p((d * d + v) / c)  # R = 1 + (D + 1/2)/beta
        u_lo = math.log(a) - log_R - left
        u_hi = math.log(a + 10.0 * math.sqrt(a) + 40.0)
        width = (u_hi - u_lo) / h_max
        # at least one panel per site, also for non-finite inputs (those sites are redone
        # by the near-Gaussian rule in tilted_moments)
        n_pan = np.ceil(np.where(np.isfinite(width), np.clip(width, 1.0, 1e6), 1.0)).astype(np.intp)
        h = (u_hi - u_lo) / n_pan

        # ---- flattened (site, panel) pairs, site-major
        n = y.shape[0]
        offsets = np.zeros(n + 1, dtype=np.intp)
        np.cumsum(n_pan, out=offsets[1:])
        site = np.repeat(np.arange(n), n_pan)
        k = np.arange(offsets[-1]) - offsets[:-1][site]
        u1 = u_lo[site] + k * h[site]
        hs = h[site]
        lb_s, beta_s, D_s = log_beta[site], beta[site], D[site]

        # phi = gamma + kappa with gamma(u) = a u - e^u (concave, max at log a) and
        # kappa(u) = 1/2 log(1 - rho) - D rho (decreasing): a rigorous panel bound is
        # sup gamma + kappa(u1).
        lam1 = np.exp(u1)
        S1 = lam1 + beta_s
        kappa1 = 0.5 * (lb_s - np.log(S1)) - D_s * (lam1 / S1)
        phi1 = a * u1 - lam1 + kappa1
        uc = np.clip(math.log(a), u1, u1 + hs)
        bound = a * uc - np.exp(uc) + kappa1
        best = np.maximum.reduceat(phi1, offsets[:-1])
        keep = bound >= best[site] - _PRUNE
        keep[offsets[:-1]] = True  # every site keeps a panel, even if its values are NaN
        site, u1, hs, bound = site[keep], u1[keep], hs[keep], bound[keep]
        lb_s, beta_s, D_s = lb_s[keep], beta_s[keep], D_s[keep]

        # ---- reference shift per site: the largest panel bound, or the analytic tail
        x0 = a * math.exp(-left)  # R lam0, the same for every site
        log_g0, g1, g2 = _tail_constants(a, x0)
        log_tail = log_g0 - a * log_R  # log int_0^lam0 lam^(a-1) e^(-R lam) dlam
        first = np.zeros(n + 1, dtype=np.intp)  # survivors are still site-major and every
        np.cumsum(np.bincount(site, minlength=n), out=first[1:])  # site keeps >= 1 panel
        ref = np.maximum(np.maximum.reduceat(bound, first[:-1]), log_tail)

        # ---- Gauss–Legendre nodes on surviving panels: (n_surv, n_nodes), in-place algebra
        half = 0.5 * hs
        # work arrays reused across blocks (fresh large temporaries cost page faults)
        u, lam, S, phi, logS = _work_arrays(work, site.size, n_nodes)
        np.multiply(half[:, None], x_gl + 1.0, out=u)
        u += u1[:, None]
        np.exp(u, out=lam)
        np.add(lam, beta_s[:, None], out=S)
        np.multiply(u, a, out=phi)
        phi -= lam
        np.log(S, out=logS)
        logS *= 0.5
        phi -= logS
        iS = np.reciprocal(S, out=S)  # 1 / (lam + beta)
        rho = np.multiply(lam, iS, out=lam)  # lam / (lam + beta)
        phi -= np.multiply(rho, D_s[:, None], out=logS)
        # phi <= bound <= ref, so the weights cannot overflow (underflow is harmless)
        phi += (0.5 * lb_s - ref[site] + np.log(half))[:, None]
        phi += logw_gl[None, :]
        w = np.exp(phi, out=phi)

        def site_sum(panel_values):
            return np.bincount(site, weights=panel_values, minlength=n)

        tail = np.exp(log_tail - ref)
        Rb = beta + D + 0.5  # R * beta
        t_rho = tail * g1 / Rb  # tail of int rho: rho ~ lam / beta there
        t_rho2 = tail * g2 / (Rb * Rb)
        Z = site_sum(w.sum(axis=1)) + tail
        E_rho = (site_sum(np.einsum("ij,ij->i", w, rho)) + t_rho) / Z
        # E[1 - rho] = beta E[1/(lam + beta)], without cancellation when rho ~ 1
        E_om = (site_sum(beta_s * np.einsum("ij,ij->i", w, iS)) + tail - t_rho) / Z
        if want_gradient:
            rom = rho * iS * beta_s[:, None]  # rho (1 - rho)
            E_rom = (site_sum(np.einsum("ij,ij->i", w, rom)) + t_rho - t_rho2) / Z
            tail_u = tail * (_tail_log_moment(a, x0) - log_R)
            E_u = (site_sum(np.einsum("ij,ij->i", w, u)) + tail_u) / Z
        rho -= E_rho[site][:, None]  # centred second pass for Var[rho]
        np.square(rho, out=rho)
        V_rho = site_sum(np.einsum("ij,ij->i", w, rho))
        V_rho = (V_rho + t_rho2 - 2.0 * E_rho * t_rho + E_rho**2 * tail) / Z

        out = {
            "log_Z": eta * self._log_norm() - special.gammaln(a) + np.log(Z) + ref,
            "mean": m + d * E_rho,
            "var": v * E_om + d * d * V_rho,
        }
        if want_gradient:
            out.update(E_rho=E_rho, E_rom=E_rom, E_u=E_u, D=D, a=a)
        return out

    # ------------------------------------------------------------ tilted
    def tilted_moments(self, y, cavity_mean, cavity_var, power=1.0):
        """(log_Z, mean, var) of t(y - f)^power N(f | m, v), each (n,).

        Accurate to ~1e-9 relative over cavity variances 1e-6..1e6, |m - y| <= 1e3,
        df in [0.5, 100] (tests/likelihoods/test_likelihoods.py); no Python loop over sites.
        """
        eta = check_power(power)
        y, m, v = as_site_arrays(y, cavity_mean, cavity_var)
        check_cavity(m, v, y)
        if y.size == 0:
            return np.zeros(0), np.zeros(0), np.zeros(0)
        if 0.5 * eta * (self.df + 1.0) > _LARGE_SHAPE:
            log_Z, mean, var, _ = self._integrate_near_gaussian(y, m, v, eta)
            return self._checked(log_Z, mean, var, y, m, v)
        log_Z, mean, var = np.empty_like(y), np.empty_like(y), np.empty_like(y)
        work = {}
        with np.errstate(all="ignore"):
            for start in range(0, y.size, _BLOCK):  # blocks of sites, not single sites
                sl = slice(start, start + _BLOCK)
                out = self._integrate(y[sl], m[sl], v[sl], eta, work=work)
                log_Z[sl], mean[sl], var[sl] = out["log_Z"], out["mean"], out["var"]
        bad = ~(np.isfinite(log_Z) & np.isfinite(mean) & np.isfinite(var) & (var > 0))
        if np.any(bad):  # extreme inputs the panel scheme cannot represent
            log_Z[bad], mean[bad], var[bad], _ = self._integrate_near_gaussian(
                y[bad], m[bad], v[bad], eta
            )
        return self._checked(log_Z, mean, var, y, m, v)

    def _checked(self, log_Z, mean, var, y, m, v):
        """Raise a clear error instead of returning non-finite tilted moments."""
        bad = ~(np.isfinite(log_Z) & np.isfinite(mean) & np.isfinite(var) & (var > 0))
        if np.any(bad):
            i = int(np.flatnonzero(bad)[0])
            raise FloatingPointError(
                f"Student-t tilted moments are not finite at {int(bad.sum())} sites (df="
                f"{self.df:g}, scale={self.scale:g}; e.g. y - m = {y[i] - m[i]:.3g}, cavity "
                f"variance {v[i]:.3g}); the inputs are outside the range the quadrature covers"
            )
        return log_Z, mean, var

    def tilted_log_Z_gradient(self, y, cavity_mean, cavity_var, power=1.0):
        """d log_Z / d(log df, log scale), shape (n, 2).

        With rho the mixing-conditional shrinkage (module docstring):
        d/dlog s = -eta + E[rho + 2 D rho (1 - rho)];
        d/dlog nu = eta nu dlogC/dnu + E[rho/2 + D rho (1 - rho)]
                    + (eta nu / 2)(E[log lam] - psi(a)).
        """
        eta = check_power(power)
        y, m, v = as_site_arrays(y, cavity_mean, cavity_var)
        check_cavity(m, v, y)
        if y.size == 0:
            return np.zeros((0, 2))
        if 0.5 * eta * (self.df + 1.0) > _LARGE_SHAPE:
            return self._integrate_near_gaussian(y, m, v, eta)[3]
        with np.errstate(all="ignore"):
            o = self._integrate(y, m, v, eta, want_gradient=True)
        nu = self.df
        beta_part = o["E_rho"] + 2.0 * o["D"] * o["E_rom"]
        g_scale = -eta + beta_part
        dlogC_dnu = 0.5 * (special.digamma(0.5 * (nu + 1.0)) - special.digamma(0.5 * nu)) - 0.5 / nu
        g_df = (
            eta * nu * dlogC_dnu
            + 0.5 * beta_part
            + 0.5 * eta * nu * (o["E_u"] - special.digamma(o["a"]))
        )
        grad = np.stack([g_df, g_scale], axis=1)
        bad = ~np.all(np.isfinite(grad), axis=1)
        if np.any(bad):  # extreme inputs: the near-Gaussian rule (see tilted_moments)
            grad[bad] = self._integrate_near_gaussian(y[bad], m[bad], v[bad], eta)[3]
        return grad

    # ----------------------------------------------------------- pointwise
    def log_prob(self, y, f):
        """log t_df(y - f; 0, scale), shape (n,)."""
        y, f = as_site_arrays(y, f)
        nu, s = self.df, self.scale
        r = y - f
        with np.errstate(over="ignore"):  # (r / s)^2 = inf is the right limit: -inf
            return self._log_norm() - 0.5 * (nu + 1.0) * np.log1p((r / s) ** 2 / nu)

    def log_prob_derivatives(self, y, f):
        """(log p, d/df, d2/df2, d3/df3), each (n,); d2 > 0 for |y - f| > sqrt(nu) s."""
        y, f = as_site_arrays(y, f)
        nu, s = self.df, self.scale
        c = nu * s * s
        r = y - f
        with np.errstate(over="ignore"):  # r^2 = inf is the right limit: log p = -inf
            q = c + r * r
            z = (r / s) ** 2 / nu  # r^2 / c, finite where r^2 or c alone overflows
            logp = self._log_norm() - 0.5 * (nu + 1.0) * np.log1p(z)
        # log p = const - (nu+1)/2 log(c + r^2); r = y - f so d/df = -d/dr
        # r^2 - c = q - 2c and r^2 - 3c = q - 4c: written with q and c/q = 1/(1 + r^2/c)
        # so that a residual whose square overflows (q = inf) and a scale whose square
        # does (c = inf, an optimiser's trial sigma) give the limits 0 instead of
        # inf / inf; no q**3
        c_over_q = 1.0 / (1.0 + z)
        d1 = (nu + 1.0) * r / q
        d2 = (nu + 1.0) * (1.0 - 2.0 * c_over_q) / q
        d3 = 2.0 * (nu + 1.0) * (r / q) * (1.0 - 4.0 * c_over_q) / q
        return logp, d1, d2, d3

    def log_prob_parameter_gradient(self, y, f):
        """d log p / d(log df, log scale), shape (n, 2)."""
        y, f = as_site_arrays(y, f)
        nu, s = self.df, self.scale
        c = nu * s * s
        r2 = (y - f) ** 2
        frac = r2 / (c + r2)
        g_scale = -1.0 + (nu + 1.0) * frac
        dlogC_dnu = 0.5 * (special.digamma(0.5 * (nu + 1.0)) - special.digamma(0.5 * nu)) - 0.5 / nu
        g_df = nu * (dlogC_dnu - 0.5 * np.log1p(r2 / c)) + 0.5 * (nu + 1.0) * frac
        return np.stack([g_df, g_scale], axis=1)

    # ----------------------------------------------------------- predictive
    def _predictive_z(self, y, mean, var):
        """Standardised residuals z (n, K), sds (n, K) and weights (K,) of the scale mixture.

        y = f + eps with f ~ N(mean, var) and eps | lambda ~ N(0, scale^2 / lambda),
        lambda ~ Gamma(nu/2, rate nu/2) (Jylänki et al. 2011 eq. 3): given lambda_k, y is
        N(mean, var + scale^2 / lambda_k).
        """
        y, m, v = as_site_arrays(y, mean, var)
        lam, w = student_t_mixture_nodes(self.df)
        s = np.float64(self.scale)
        sd = np.sqrt(v[:, None] + (s * s) / lam[None, :])
        z = (y[:, None] - m[:, None]) / sd
        return z, sd, w

    def predictive_cdf(self, y, mean, var, upper=False):
        """P(Y <= y) (``upper``: P(Y > y)) = E_lambda[Phi(+-(y - mean) / sd_lambda)], (n,).

        Quadrature over the Gamma scale-mixture variable lambda
        (``get_config().student_t_predictive_nodes`` nodes; tail probabilities to ~1e-5
        relative); docs/derivations/tgp-predictive.md.
        """
        z, _, w = self._predictive_z(y, mean, var)
        return special.ndtr(-z if upper else z) @ w

    def predictive_cdf_and_density(self, y, mean, var):
        """(CDF (n,), density (n,)) by the same scale-mixture quadrature as the CDF."""
        z, sd, w = self._predictive_z(y, mean, var)
        F = special.ndtr(z) @ w
        p = (np.exp(-0.5 * z * z) / (np.sqrt(2.0 * np.pi) * sd)) @ w
        return F, p

    def noise_scale(self):
        """The Student-t scale sigma."""
        return float(self.scale)


def student_t_noise(df, scale) -> Likelihood:
    """``StudentT(df, scale)``, or ``Gaussian(noise_variance=scale**2)`` for ``df = inf``."""
    if not np.isfinite(df):
        return Gaussian(noise_variance=float(scale) ** 2)
    return StudentT(df=float(df), scale=float(scale))
