"""Root finding on the t-EP fixed-point equations with rank-one sites.

Linear t-EP (Bayes point machine) and Student-t process t-EP share one site map: site i's
new ``(tau_i, nu_i)`` is a function of the posterior marginal ``(d_i, mu_i)`` of its
projection ``f_i``, of ``L = log|Lambda| - log|Lambda0|`` (the global scale factor) and of
its own old site (:func:`robustep.tep.process._site_update`; docs/derivations/tep.md §6).
An EP fixed point is a root of ``G(s) = F(s) - s`` over the 2n site parameters
``s = (tau, nu)``.

Damped sweeps find it only when the map is a local contraction there; on the stress grid
(docs/reliability.md, "t-exponential EP: valid fixed points") they can cycle or collapse
while a proper fixed point exists.  :func:`solve_fixed_point` finds it by Newton's method with
step halving (the iterates keep every cavity proper) and the analytic Jacobian of the
site map (derivation §8.4): ``dF/ds`` from the partial derivatives of each site's update in
``(d_i, mu_i, L, tau_i, nu_i)`` and of those in the sites,

    d d_i / d tau_j = -S_ij^2,   d mu_i / d tau_j = -S_ij mu_j,   d L / d tau_j = d_j,
    d mu_i / d nu_j = S_ij,

with ``S`` the Gaussian-form posterior covariance of the projections ``f`` (Sigma_G for the
process, ``Z Lambda^-1 Z^T`` for the linear model).  Cost: one ``2n x 2n`` solve per Newton step,
so it is used up to ``robustep.config(tep_fixed_point_max_sites=...)`` sites.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import least_squares

from robustep.tep.process import _site_update, _site_update_partials

__all__ = ["LinearRankOnePosterior", "site_map_jacobian", "solve_fixed_point"]


class LinearRankOnePosterior:
    """Posterior of linear t-EP with rank-one sites, in the projections ``f = Z w``.

    ``Lambda = Lambda0 + Z^T diag(tau) Z``, ``h = Z^T nu`` (zero prior mean); attributes as
    :class:`robustep.tep.process.ProcessPosterior`: ``d`` (n,) = diag(Z Lambda^-1 Z^T),
    ``mu`` (n,) = Z Lambda^-1 h, ``logdet_b`` = log|Lambda| - log|Lambda0|, ``sigma_g``
    (n, n) = Z Lambda^-1 Z^T (formed on first use), and ``weight_mean`` (k,).

    Z : (n, k); prior_lambda : (k, k) positive definite; tau, nu : (n,).
    Raises ``numpy.linalg.LinAlgError`` when Lambda is not positive definite.
    """

    def __init__(self, Z, prior_lambda, tau, nu):
        lam = prior_lambda + Z.T @ (tau[:, None] * Z)
        chol = np.linalg.cholesky(lam)
        chol0 = np.linalg.cholesky(prior_lambda)
        self._a = np.linalg.solve(chol, Z.T)  # (k, n): L^-1 Z^T
        self.d = np.einsum("ij,ij->j", self._a, self._a)
        self.weight_mean = np.linalg.solve(chol.T, np.linalg.solve(chol, Z.T @ nu))
        self.mu = Z @ self.weight_mean
        self.logdet_b = float(2.0 * (np.log(np.diag(chol)).sum() - np.log(np.diag(chol0)).sum()))
        self._sigma_g = None

    @property
    def sigma_g(self):
        if self._sigma_g is None:
            self._sigma_g = self._a.T @ self._a
        return self._sigma_g


def site_map_jacobian(post, tau, nu, y, df, eps, k):
    """Jacobian (2n, 2n) of the parallel site map F(tau, nu) at the current sites.

    post : posterior with ``d``, ``mu``, ``logdet_b`` and ``sigma_g`` (n, n); k : the
    dimension that sets t (n for the process, the number of weights for the linear model).
    Rows and columns are ordered (tau, nu).  Rows of sites with an improper cavity are 0.
    """
    n = tau.size
    S = post.sigma_g
    d, mu = post.d, post.mu
    a_t, a_n, _ = _site_update_partials(d, mu, post.logdet_b, tau, nu, y, df, eps, k)
    S2 = S * S

    def block(a):
        jt = -a["d"][:, None] * S2 - a["mu"][:, None] * (S * mu[None, :])
        jt += np.outer(a["L"], d)
        jt[np.diag_indices(n)] += a["tau"]
        jn = a["mu"][:, None] * S
        jn[np.diag_indices(n)] += a["nu"]
        return jt, jn

    tt, tn = block(a_t)
    nt, nn = block(a_n)
    return np.block([[tt, tn], [nt, nn]])


def solve_fixed_point(posterior, y, df, eps, k, tau0, nu0, *, tol, max_newton=50, method="newton"):
    """Find a proper t-EP fixed point from the start ``(tau0, nu0)``.

    ``method="newton"``: Newton steps on ``G(s) = F(s) - s`` with the analytic Jacobian,
    each shortened by halving until the posterior and every cavity stay proper and ``|G|``
    decreases (Armijo condition on ``|G|^2``).  ``method="dogbox"``: the dogleg trust-region
    least-squares method on ``|G|^2`` (:func:`scipy.optimize.least_squares`, at most
    ``max_newton`` evaluations), whose steps may cross regions where ``|G|`` grows; a site
    with an improper cavity has residual ``1e6``.  Newton's method is cheap and finds the
    fixed point near a start; the trust-region method finds fixed points Newton's method
    stalls before (e.g. "1% flipped labels" of the stress grid).

    Parameters
    ----------
    posterior : callable (tau, nu) -> posterior (as :class:`LinearRankOnePosterior`) or None
        when the posterior is not proper.
    y : (n,) labels in {-1, +1}; df, eps : degrees of freedom and label noise; k : the
        dimension that sets t.
    tau0, nu0 : (n,) starting sites (a proper posterior with proper cavities).
    tol : a root is accepted when every site's undamped change ``max|F(s) - s|`` is below it.
    max_newton : Newton steps at most.

    Returns
    -------
    (tau, nu, post, n_steps) at a proper fixed point, or None if none was found from this
    start.
    """
    n = tau0.size

    def residual(s):
        post = posterior(s[:n], s[n:])
        if post is None:
            return None, None
        with np.errstate(all="ignore"):
            t_new, n_new, good = _site_update(
                post.d, post.mu, post.logdet_b, s[:n], s[n:], y, df, eps, k
            )
        if not np.all(good):  # an improper cavity
            return None, None
        r = np.concatenate([t_new - s[:n], n_new - s[n:]])
        return (r, post) if np.all(np.isfinite(r)) else (None, None)

    s = np.concatenate([tau0, nu0]).astype(float)
    if not np.all(np.isfinite(s)):
        return None
    with np.errstate(all="ignore"):  # trial points may overflow; they are rejected
        if method == "dogbox":
            return _dogbox(residual, posterior, s, y, df, eps, k, tol, max_newton)
        return _newton(residual, posterior, s, y, df, eps, k, tol, max_newton)


def _newton(residual, posterior, s, y, df, eps, k, tol, max_newton):
    """``solve_fixed_point(method="newton")``."""
    n = s.size // 2
    r, post = residual(s)
    if r is None:
        return None
    for step_count in range(max_newton + 1):
        if np.abs(r).max() < tol:
            return s[:n].copy(), s[n:].copy(), post, step_count
        if step_count == max_newton:
            return None
        jac = site_map_jacobian(post, s[:n], s[n:], y, df, eps, k)
        jac[np.diag_indices(2 * n)] -= 1.0
        try:
            direction = np.linalg.solve(jac, -r)
        except np.linalg.LinAlgError:
            direction = np.linalg.lstsq(jac, -r, rcond=None)[0]
        if not np.all(np.isfinite(direction)):
            return None
        norm2 = _sum_squares(r)
        length = 1.0
        while length > 1e-6:
            s_try = s + length * direction
            r_try, post_try = residual(s_try)
            if r_try is not None and _sum_squares(r_try) <= (1.0 - 1e-4 * length) * norm2:
                break
            length *= 0.5
        else:
            return None  # no step decreases |G|: a local minimum of |G| that is not a root
        s, r, post = s_try, r_try, post_try
    return None


def _sum_squares(r):
    """|r|^2, inf instead of an overflow warning."""
    with np.errstate(over="ignore"):
        return float(np.sum(r * r))


def _dogbox(residual, posterior, s, y, df, eps, k, tol, max_evaluations):
    """``solve_fixed_point(method="dogbox")``."""
    n = s.size // 2
    bad = 1e6  # residual of a site with an improper cavity: the trust region shrinks there

    def fun(x):
        r, _ = residual(x)
        return np.full(2 * n, bad) if r is None else r

    def jac(x):
        post = posterior(x[:n], x[n:])
        if post is None:
            return -np.eye(2 * n)
        with np.errstate(all="ignore"):
            j = site_map_jacobian(post, x[:n], x[n:], y, df, eps, k)
        j[np.diag_indices(2 * n)] -= 1.0
        return np.nan_to_num(j)

    if not np.all(np.isfinite(s)):
        return None
    with np.errstate(all="ignore"):
        sol = least_squares(
            fun, s, jac=jac, method="dogbox", max_nfev=max_evaluations,
            xtol=1e-15, ftol=1e-15, gtol=1e-15,
        )  # fmt: skip
    r, post = residual(sol.x)
    if r is None or np.abs(r).max() >= tol:
        return None
    return sol.x[:n].copy(), sol.x[n:].copy(), post, int(sol.nfev)
