"""Log-space quadrature helpers: several moments from one set of nodes.

Every helper works on a batch of ``n`` one-dimensional integrals at once.  The
integrand is always given by its *logarithm* at the nodes, so that products of
very small likelihood values and Gaussian weights never underflow; sums are
accumulated with a log-sum-exp shift (the row maximum).  From one set of
node values we return ``log Z`` together with the mean and the variance of the
normalised integrand; the variance is a *centred* second pass over the same
nodes (``sum w (x - mean)^2``), never ``E[x^2] - E[x]^2``, which would cancel
catastrophically for peaked integrands.

Rules
-----
* :func:`gauss_hermite` -- probabilists' Gauss–Hermite rule for
  ``int g(x) N(x | 0, 1) dx``, cached by size.
* :func:`gauss_legendre` -- Gauss–Legendre rule on ``[-1, 1]``, cached by size.
* :func:`log_gauss_hermite_moments` -- ``log int exp(log_f(f)) N(f | m, v) df`` and the
  tilted mean/variance for smooth log-likelihoods (the default fallback of the
  classification likelihoods at power != 1).
* :func:`log_switch_likelihood_moments` -- probit (power < 1) and logistic tilted moments:
  adaptive Gauss–Hermite for narrow cavities, Gauss–Legendre in asinh(g) for wide ones
  (over the tilted density's level interval, :func:`log_concave_level_interval`, when the
  cavity is far from the switch).
* :func:`log_moments_from_nodes` -- the common core: given log-weights and node
  positions of shape (n, K), return (log Z, mean, var).
"""

from __future__ import annotations

import functools

import numpy as np

from robustep._config import get_config

__all__ = [
    "gauss_hermite",
    "gauss_legendre",
    "log_gauss_hermite_moments",
    "log_moments_from_nodes",
    "logsumexp_rows",
]

_LOG_SQRT_2PI = 0.5 * np.log(2.0 * np.pi)
# adaptive Gauss–Hermite: a proxy centre c cavity sds from the cavity mean with c^2 above this
# (its log-density rounding error ~1e-16 c^2 beyond ~1e-10) takes the constant -c^2 / 2 out
_FAR_PROXY_SQ = 1e6
# log_switch_likelihood_moments, wide cavities: 16-node Gauss–Legendre panels in asinh(g)
# over the cavity window ...
_PANELS = 16
# ... unless the cavity mean lies more than this many sds on the wrong side of the switch,
# or a panel is wider than this many times the cavity's +- 1 sd in asinh(g) ...
_FAR_CAVITY_SDS = 6.0
_MAX_PANEL_PER_BULK = 1.5
# ... then over the interval where the tilted log-density is within this depth of its mode
# (tail mass < e^-45 of the total) ...
_LEVEL_DEPTH = 45.0
# ... with this many panels: the interval can reach from the switch to a bump ~10 of its
# own widths away, which is narrow in asinh(g)
_FAR_PANELS = 32
# switch likelihoods: integrate log p relative to its value at the tilted mode where
# power |log p(mode)| exceeds this (its rounding error, ~1e-16 of it, stays below 1e-10)
_ANCHOR_LOG_P = 1e6


@functools.lru_cache(maxsize=64)
def _gauss_hermite_cached(n: int):
    x, w = np.polynomial.hermite_e.hermegauss(n)
    # hermegauss integrates against exp(-x^2 / 2); divide by sqrt(2 pi) for N(0, 1).
    logw = np.log(w) - _LOG_SQRT_2PI
    x.setflags(write=False)
    logw.setflags(write=False)
    return x, logw


def gauss_hermite(n: int):
    """Nodes and log-weights of the ``n``-point rule for ``E_{N(0,1)}[g(x)]``.

    Returns
    -------
    x : (n,) nodes, logw : (n,) log weights (``sum(exp(logw)) == 1``). Read-only arrays.
    """
    n = int(n)
    if n < 1:
        raise ValueError(f"the number of quadrature nodes must be positive, got {n}")
    return _gauss_hermite_cached(n)


@functools.lru_cache(maxsize=64)
def _gauss_legendre_cached(n: int):
    x, w = np.polynomial.legendre.leggauss(n)
    logw = np.log(w)
    x.setflags(write=False)
    logw.setflags(write=False)
    return x, logw


def gauss_legendre(n: int):
    """Nodes and log-weights of the ``n``-point Gauss–Legendre rule on ``[-1, 1]`` (read-only)."""
    n = int(n)
    if n < 1:
        raise ValueError(f"the number of quadrature nodes must be positive, got {n}")
    return _gauss_legendre_cached(n)


def logsumexp_rows(a):
    """``log(sum(exp(a), axis=-1))`` computed stably; rows that are all ``-inf`` give ``-inf``."""
    a = np.asarray(a, dtype=float)
    amax = np.max(a, axis=-1, keepdims=True)
    safe = np.where(np.isfinite(amax), amax, 0.0)
    with np.errstate(divide="ignore"):
        out = np.log(np.sum(np.exp(a - safe), axis=-1)) + safe[..., 0]
    return out


def log_moments_from_nodes(log_w, x):
    """Log normaliser, mean and variance of a discrete positive measure, row by row.

    Parameters
    ----------
    log_w : (n, K) log of (quadrature weight x integrand) at each node.
    x : (n, K) node positions.

    Returns
    -------
    log_Z : (n,) ``log sum_k exp(log_w[:, k])``
    mean : (n,) ``sum_k w_k x_k / Z``
    var : (n,) ``sum_k w_k (x_k - mean)^2 / Z`` (centred second pass)
    """
    log_w = np.asarray(log_w, dtype=float)
    x = np.asarray(x, dtype=float)
    shift = np.max(log_w, axis=-1, keepdims=True)
    if not np.all(np.isfinite(shift)):
        raise FloatingPointError(
            "the integrand vanished (or overflowed) at every quadrature node; "
            "increase quadrature_points or check the cavity parameters"
        )
    w = np.exp(log_w - shift)
    s0 = np.sum(w, axis=-1)
    mean = np.sum(w * x, axis=-1) / s0
    dx = x - mean[:, None]
    var = np.sum(w * dx * dx, axis=-1) / s0
    return np.log(s0) + shift[:, 0], mean, var


def log_gauss_hermite_moments(log_f, mean, var, n_points=None):
    """Moments of ``exp(log_f(f)) N(f | mean, var)`` by Gauss–Hermite quadrature.

    The nodes are placed on the cavity: ``f_k = mean + sqrt(var) x_k``, so the rule
    is exact for polynomial ``exp(log_f)`` of degree < 2 n and accurate when
    ``exp(log_f)`` varies smoothly on the scale of ``sqrt(var)``.

    Parameters
    ----------
    log_f : callable mapping an (n, K) array of f to (n, K) values of ``log p(y|f)^power``
        (it must broadcast the site-wise data itself, e.g. via ``y[:, None]``).
    mean, var : (n,) cavity mean and variance (var > 0).
    n_points : int, default ``get_config().quadrature_points``.

    Returns
    -------
    log_Z : (n,), tilted mean : (n,), tilted variance : (n,)
    """
    if n_points is None:
        n_points = get_config().quadrature_points
    x, logw = gauss_hermite(n_points)
    mean = np.asarray(mean, dtype=float)
    sd = np.sqrt(np.asarray(var, dtype=float))
    # Work in the standardised variable u (f = m + sd u) for the moments: the
    # centred variance then does not lose digits when |m| >> sd.
    f = mean[:, None] + sd[:, None] * x[None, :]
    log_w = log_f(f) + logw[None, :]
    log_Z, mu, s2 = log_moments_from_nodes(log_w, np.broadcast_to(x, f.shape))
    return log_Z, mean + sd * mu, s2 * sd * sd


def log_adaptive_gauss_hermite_moments(log_f, mean, var, centre, scale, n_points=None):
    """Moments of ``exp(log_f(f)) N(f | mean, var)`` with nodes placed on ``N(centre, scale^2)``.

    Adaptive Gauss–Hermite (Liu & Pierce 1994): with a Gaussian proxy q close to the
    tilted distribution (e.g. its Laplace approximation), write
    ``Z = E_q[exp(log_f) N(f | mean, var) / q(f)]`` and apply the rule to q.  Unlike
    cavity-centred nodes this stays accurate when the likelihood is much narrower than
    the cavity (wide cavities, steep classification likelihoods).

    Parameters
    ----------
    log_f : callable, (n, K) array of f -> (n, K) ``log p(y|f)^power``.
    mean, var : (n,) cavity moments; centre, scale : (n,) proxy mean and sd (> 0).

    Returns
    -------
    log_Z, tilted mean, tilted variance : (n,) each.
    """
    if n_points is None:
        n_points = get_config().quadrature_points
    x, logw = gauss_hermite(n_points)
    mean = np.asarray(mean, dtype=float)
    var = np.asarray(var, dtype=float)
    centre = np.asarray(centre, dtype=float)
    scale = np.asarray(scale, dtype=float)
    f = centre[:, None] + scale[:, None] * x[None, :]
    # log [N(f|mean,var) / N(f|centre,scale^2)]
    #     = -(f-mean)^2/(2 var) - log sqrt(var) + x^2/2 + log scale
    c = centre - mean
    dm = c[:, None] + scale[:, None] * x[None, :]  # f - mean, no cancellation
    gauss = -0.5 * dm * dm / var[:, None]
    # proxy many cavity sds from the cavity: (f - mean)^2 / (2 var) is huge and its rounding
    # (~1e-16 of it) would perturb the relative node weights; there use
    # (c + s x)^2 = c^2 + s x (2 c + s x) and add the constant -c^2 / (2 var) to log Z after
    offset = np.zeros_like(c)
    far = c * c / var > _FAR_PROXY_SQ
    if np.any(far):
        i = far
        sx = scale[i][:, None] * x[None, :]
        gauss[i] = -0.5 * sx * (2.0 * c[i][:, None] + sx) / var[i][:, None]
        offset[i] = -0.5 * c[i] * c[i] / var[i]
    log_ratio = gauss + 0.5 * x[None, :] ** 2 + (np.log(scale) - 0.5 * np.log(var))[:, None]
    log_w = log_f(f) + log_ratio + logw[None, :]
    log_Z, mu, s2 = log_moments_from_nodes(log_w, np.broadcast_to(x, f.shape))
    return log_Z + offset, centre + scale * mu, s2 * scale * scale


def log_concave_tilted_mode(dlog_f, d2log_f, mean, var, lower, upper, n_iter=60):
    """Mode and curvature of ``psi(f) = log_f(f) - (f - mean)^2 / (2 var)`` for concave log_f.

    Safeguarded Newton on the decreasing function psi'(f) inside the bracket
    [lower, upper] (which must contain the root; bisection whenever Newton leaves it).
    Vectorised over sites; the loop is over iterations only.

    Returns
    -------
    mode : (n,), sd : (n,) = (-psi''(mode))^(-1/2), the Laplace approximation.
    """
    lo = np.minimum(lower, upper).astype(float)
    hi = np.maximum(lower, upper).astype(float)
    f = 0.5 * (lo + hi)
    for _ in range(n_iter):
        g = dlog_f(f) - (f - mean) / var
        h = d2log_f(f) - 1.0 / var  # < 0
        # psi' decreasing: g > 0 means the root lies to the right
        lo = np.where(g > 0, f, lo)
        hi = np.where(g > 0, hi, f)
        step = f - g / h
        inside = (step > lo) & (step < hi)
        f_new = np.where(inside, step, 0.5 * (lo + hi))
        if np.all(np.abs(f_new - f) <= 1e-12 * (np.abs(f) + np.sqrt(var))):
            f = f_new
            break
        f = f_new
    curv = 1.0 / var - d2log_f(f)
    return f, 1.0 / np.sqrt(curv)


def log_concave_level_interval(psi_drop, dpsi, mode, var, depth, n_iter=80):
    """Points g_lo < mode < g_hi where a log-concave density falls by ``depth`` from its mode.

    ``psi`` is concave with ``psi'' <= -1 / var`` (a log-concave likelihood times the cavity
    N(g | m, var)), maximal at ``mode``.  Each side solves
    ``h(g) = psi(g) - psi(mode) + depth = 0`` by Newton's method started outside the root at
    ``mode +- sqrt(2 depth var)`` (where ``psi(g) <= psi(mode) - (g - mode)^2 / (2 var)``
    guarantees ``h <= 0``).  h is concave, so every tangent lies above it and the iterates
    approach the root monotonically from outside: an unconverged iterate still bounds a
    wider interval.  The tilted mass outside [g_lo, g_hi] is below
    ``exp(-depth) / (1 - exp(-depth))`` of the mass inside (concavity bounds each tail by
    the exponential through the level point with the secant slope ``depth / |g - mode|``).

    Parameters
    ----------
    psi_drop : callable (g, mode) -> psi(g) - psi(mode), arrays of shape (k,).
    dpsi : callable, g (k,) -> psi'(g) (k,).
    mode, var : (k,) the mode of psi and the cavity variance.
    depth : scalar > 0, the log-density drop that defines the interval.

    Returns
    -------
    g_lo, g_hi : (k,) each.
    """
    reach = np.sqrt(2.0 * depth * var)
    out = []
    for sign in (-1.0, 1.0):
        g = mode + sign * reach
        for _ in range(n_iter):
            h = psi_drop(g, mode) + depth
            step = h / dpsi(g)  # dpsi has the sign of -sign away from the mode
            g = g - step
            if np.all(np.abs(step) <= 1e-6 * np.abs(g - mode)):
                break
        out.append(g)
    return out[0], out[1]


def log_sinh_legendre_moments(log_f, mean, var, lower, upper, n_panels=8, n_nodes=16):
    """Moments of ``exp(log_f(f)) N(f | mean, var)`` on [lower, upper] in the variable t = asinh(f).

    ``f = sinh(t)`` puts nodes densely near f = 0 (where a classification likelihood
    switches, on a unit scale) and geometrically sparser far away, so one fixed rule
    resolves both the switch and a cavity that is much wider than it.  Equal panels in t
    with an ``n_nodes``-point Gauss–Legendre rule each; log-space accumulation.

    Parameters
    ----------
    log_f : callable, (n, K) array of f -> (n, K) log-likelihood^power.
    mean, var : (n,) cavity moments; lower, upper : (n,) integration limits in f.

    Returns
    -------
    log_Z, tilted mean, tilted variance : (n,) each.
    """
    x, logw = gauss_legendre(n_nodes)
    t_lo = np.arcsinh(np.asarray(lower, dtype=float))
    t_hi = np.arcsinh(np.asarray(upper, dtype=float))
    h = (t_hi - t_lo) / n_panels
    # panel p spans [t_lo + p h, t_lo + (p+1) h]; nodes flattened to (n, n_panels * n_nodes)
    offs = (np.arange(n_panels)[:, None] + 0.5 * (x[None, :] + 1.0)).ravel()
    t = t_lo[:, None] + h[:, None] * offs[None, :]
    f = np.sinh(t)
    mean = np.asarray(mean, dtype=float)
    var = np.asarray(var, dtype=float)
    dm = f - mean[:, None]
    log_w = (
        log_f(f)
        - 0.5 * dm * dm / var[:, None]
        - 0.5 * np.log(2.0 * np.pi * var)[:, None]
        + np.log(np.cosh(t))
        + np.tile(logw, n_panels)[None, :]
        + np.log(0.5 * h)[:, None]
    )
    return log_moments_from_nodes(log_w, f)


def log_switch_likelihood_moments(
    log_p, dlog_p, d2log_p, y, mean, var, power, left_range, log_p_difference=None
):
    """Tilted moments for a log-concave "switch" likelihood p(y f) (probit, logistic), any power.

    Works in g = y f (y in {-1, +1}) where p(g) rises from 0 to 1 around g = 0 on a unit
    scale.  Two rules, chosen per site (no Python loop over sites):

    * cavity variance <= 1: the tilted density is close to Gaussian and adaptive
      Gauss–Hermite on its Laplace approximation is accurate to ~1e-12;
    * wider cavities: Gauss–Legendre in t = asinh(g) (16 panels x 16 nodes) over
      [max(m' - 10 sd, min(-left_range, g* - 15 s*)), max(m' + 10 sd, g* + 15 s*)] (g*, s*:
      Laplace mode and sd), which resolves the unit-scale switch at 0 and the cavity scale
      at once (p(g)^power <= e^-45 left of -left_range);
    * wider cavities far from the switch -- m' < -6 sd (the window above may cut the tilted
      mass, whose spread the Laplace sd underestimates), or a panel of that rule wider than
      1.5 times the cavity's [m' - sd, m' + sd] in t (a bump that asinh compresses into too
      few nodes): the same rule with 32 panels over the interval where the tilted
      log-density lies within 45 of its mode (:func:`log_concave_level_interval`).

    See docs/derivations/likelihoods.md, "Wide cavities far from the switch".

    Parameters
    ----------
    log_p, dlog_p, d2log_p : callables of g (any shape): log p(g) and its derivatives.
    y, mean, var : (n,) labels, cavity mean and variance.  power : scalar in (0, 1].
    left_range : scalar, p(g)^power < e^-45 for g < -left_range.
    log_p_difference : callable (g0, d) -> log p(g0 + d) - log p(g0) (shapes broadcast), optional.
        Where ``power |log p(mode)|`` exceeds 1e6 (e.g. the probit at g < -1400, where
        log p(g) ~ -g^2/2 carries an absolute rounding error ~ 1e-16 |log p|, enough to
        perturb the relative node weights of a narrow tilted density), the integrand is
        ``power (log p(g) - log p(mode))`` from this callable and ``power log p(mode)`` is
        added to log Z afterwards.

    Returns
    -------
    log_Z, tilted mean, tilted variance : (n,) each (mean in f, i.e. multiplied back by y).
    """
    eta = power
    mg = y * mean  # cavity mean in g
    mode, sd_mode = log_concave_tilted_mode(
        lambda g: eta * dlog_p(g),
        lambda g: eta * d2log_p(g),
        mg,
        var,
        mg,
        mg + eta * var * dlog_p(mg),
    )
    log_Z = np.empty_like(mg)
    mu = np.empty_like(mg)
    s2 = np.empty_like(mg)
    narrow = var <= 1.0

    log_p_mode = log_p(mode)
    if log_p_difference is None:
        anchored = np.zeros(mg.shape, dtype=bool)
    else:
        anchored = eta * np.abs(log_p_mode) > _ANCHOR_LOG_P

    def integrand(i, offsets=None):
        """eta log p on the nodes g (rows: sites i), relative to eta log p(mode) where anchored.

        ``offsets``: the exact node offsets g - mode (k, K) where the rule defines its nodes
        that way; recomputing them from the rounded g would cost ~1e-16 |mode| each.
        """
        use = anchored[i]
        a = mode[i][use][:, None]

        def lf(g):
            out = eta * log_p(g)
            if np.any(use):
                d = g[use] - a if offsets is None else offsets[use]
                out[use] = eta * log_p_difference(a, d)
            return out

        return lf

    if np.any(narrow):
        i = narrow
        x_gh, _ = gauss_hermite(get_config().quadrature_points)
        log_Z[i], mu[i], s2[i] = log_adaptive_gauss_hermite_moments(
            integrand(i, sd_mode[i][:, None] * x_gh[None, :]), mg[i], var[i], mode[i], sd_mode[i]
        )
    sd = np.sqrt(var)
    # the asinh rule over the cavity window: [m' - 10 sd, m' + 10 sd] widened to the mode
    lo = np.maximum(mg - 10.0 * sd, np.minimum(-left_range, mode - 15.0 * sd_mode))
    # the likelihood can pull the mass many cavity sds away from m': cover the mode too
    hi = np.maximum(mg + 10.0 * sd, mode + 15.0 * sd_mode)
    # ... is kept where it is accurate: the cavity is not far on the wrong side of the switch
    # (then Z >= Phi(-6) / 2 and the window holds the mass) and a panel in t = asinh(g) is
    # not much wider than the cavity's central +- 1 sd (the tilted bulk when the likelihood
    # is ~1 over it).  Elsewhere: the level interval of the tilted density, finer panels.
    panel = (np.arcsinh(hi) - np.arcsinh(lo)) / _PANELS
    bulk = np.arcsinh(mg + sd) - np.arcsinh(mg - sd)
    far = ~narrow & ((mg < -_FAR_CAVITY_SDS * sd) | (panel > _MAX_PANEL_PER_BULK * bulk))
    wide = ~narrow & ~far
    if np.any(wide):
        i = wide
        log_Z[i], mu[i], s2[i] = log_sinh_legendre_moments(
            integrand(i), mg[i], var[i], lo[i], hi[i], _PANELS, 16
        )
    if np.any(far):
        i = far

        def drop(g, g0, mg=mg[i], v=var[i]):
            # psi(g) - psi(g0), the Gaussian part as a difference of squares
            return eta * (log_p(g) - log_p(g0)) - 0.5 * (g - g0) * (g + g0 - 2.0 * mg) / v

        lo_far, hi_far = log_concave_level_interval(
            drop,
            lambda g, mg=mg[i], v=var[i]: eta * dlog_p(g) - (g - mg) / v,
            mode[i],
            var[i],
            _LEVEL_DEPTH,
        )
        log_Z[i], mu[i], s2[i] = log_sinh_legendre_moments(
            integrand(i), mg[i], var[i], lo_far, hi_far, _FAR_PANELS, 16
        )
    log_Z[anchored] += eta * log_p_mode[anchored]
    return log_Z, y * mu, s2


def gamma_scale_mixture_nodes(df, n_nodes=96):
    """Nodes lambda_k (n,) and weights w_k (n,) with E[g(lambda)] ≈ sum_k w_k g(lambda_k).

    lambda ~ Gamma(nu/2, rate nu/2), the precision scale of the Student-t written as a
    Gaussian scale mixture (Jylänki et al. 2011 eq. 3).  Gauss–Legendre in t in (0, 1)
    with the Gamma probability u = t^3 and lambda = F^-1(u): u = t^3 crowds the nodes near
    u = 0, where Phi(z sqrt(lambda)) ~ u^(1/nu) is not smooth (heavy tails), so the
    integrand stays bounded and needs no tail truncation; with 96 nodes the relative error
    of tail probabilities is below 1e-5.  ``df = inf`` gives the single node lambda = 1
    (the Gaussian limit).
    """
    from scipy import special

    if not np.isfinite(df):
        return np.ones(1), np.ones(1)
    x, logw = gauss_legendre(n_nodes)
    t = 0.5 * (x + 1.0)
    lam = special.gammaincinv(0.5 * df, t**3) * (2.0 / df)
    return np.maximum(lam, 1e-300), 1.5 * t**2 * np.exp(logw)
