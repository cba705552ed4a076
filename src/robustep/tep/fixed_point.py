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
process, ``Z Lambda^-1 Z^T`` for the linear model).  Cost of a Newton step: one
``2n x 2n`` solve, O(n^3); for the linear model ``dF/ds`` is per-site 2 x 2 blocks plus
rank ``k^2 + 2k + 1``, and the Woodbury identity makes it O(n k^4).  The trust-region
method forms the dense Jacobian.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy.optimize import least_squares

from robustep.tep.ep import linear_tep, rank_one_sites
from robustep.tep.process import _site_map_jacobian, _site_update, _site_update_partials

__all__ = [
    "Continuation",
    "LinearRankOnePosterior",
    "continue_from_gaussian_ep",
    "follow_fixed_point",
    "follow_in_df",
    "site_map_jacobian",
    "solve_fixed_point",
]


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
        self._a = np.linalg.solve(chol, Z.T)  # (k, n): C^-1 Z^T, so sigma_g = a^T a
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

    @property
    def root_factor(self):
        """A (k, n) with ``sigma_g = A^T A`` (rank k): the Newton system's low-rank part."""
        return self._a


def site_map_jacobian(post, tau, nu, y, df, eps, k):
    """Jacobian (2n, 2n) of the parallel site map F(tau, nu) at the current sites.

    post : posterior with ``d``, ``mu``, ``logdet_b`` and ``sigma_g`` (n, n); k : the
    dimension that sets t (n for the process, the number of weights for the linear model).
    Rows and columns are ordered (tau, nu).  Rows of sites with an improper cavity are 0.
    """
    d, mu = post.d, post.mu
    a_t, a_n, _ = _site_update_partials(d, mu, post.logdet_b, tau, nu, y, df, eps, k)
    return _site_map_jacobian(post.sigma_g, mu, d, a_t, a_n)


def solve_fixed_point(
    posterior, y, df, eps, k, tau0, nu0, *, tol, max_newton=50, method="newton", relative=False
):
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
    relative : measure each component of ``F(s) - s`` relative to ``max(1, |s|)`` (the
        site's own size) before comparing with ``tol``.  Site precisions of the
        Gaussian-process model reach 10^5 on some stress cells, where rounding keeps the
        absolute change of a fixed point above 1e-5.

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
            return _dogbox(residual, posterior, s, y, df, eps, k, tol, max_newton, relative)
        return _newton(residual, posterior, s, y, df, eps, k, tol, max_newton, relative)


def _is_root(r, s, tol, relative):
    """Whether the residual ``r`` (2n,) at sites ``s`` (2n,) is below ``tol`` (in units of
    ``max(1, |s|)`` when ``relative``)."""
    if relative:
        r = r / np.maximum(1.0, np.abs(s))
    return bool(np.abs(r).max() < tol)


def _newton(residual, posterior, s, y, df, eps, k, tol, max_newton, relative=False):
    """``solve_fixed_point(method="newton")``."""
    n = s.size // 2
    r, post = residual(s)
    if r is None:
        return None
    for step_count in range(max_newton + 1):
        if _is_root(r, s, tol, relative):
            return s[:n].copy(), s[n:].copy(), post, step_count
        if step_count == max_newton:
            return None
        direction = _newton_direction(post, s[:n], s[n:], y, df, eps, k, r)
        if direction is None or not np.all(np.isfinite(direction)):
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


def _newton_direction(post, tau, nu, y, df, eps, k, r):
    """Solve ``(dF/ds - I) x = -r`` for the Newton step x (2n,), or None.

    Dense (O(n^3)) unless the posterior has a rank-k ``root_factor`` A (the linear model,
    ``sigma_g = A^T A``).  Then ``dF/ds = D + U V^T`` with D made of per-site 2 x 2 blocks
    and rank ``k^2 + 2k + 1`` (``S∘S = B^T B`` with ``B_(pq),i = A_pi A_qi``,
    ``S diag(mu) = A^T (A diag mu)``), and the Woodbury identity solves it in
    O(n (k^2 + 2k + 1)^2).
    """
    factor = getattr(post, "root_factor", None)
    if factor is None:
        jac = site_map_jacobian(post, tau, nu, y, df, eps, k)
        jac[np.diag_indices(2 * tau.size)] -= 1.0
        try:
            return np.linalg.solve(jac, -r)
        except np.linalg.LinAlgError:
            return None
    n = tau.size
    d, mu = post.d, post.mu
    a_t, a_n, _ = _site_update_partials(d, mu, post.logdet_b, tau, nu, y, df, eps, k)
    A = factor
    B = (A[:, None, :] * A[None, :, :]).reshape(-1, n)  # (k^2, n)
    At = A.T
    zeros_b, zeros_a = np.zeros_like(B.T), np.zeros_like(At)

    def rows(a):  # (n, r): the row factors of one block row of dF/ds
        return np.column_stack(
            [-a["d"][:, None] * B.T, -a["mu"][:, None] * At, a["L"], a["mu"][:, None] * At]
        )

    U = np.vstack([rows(a_t), rows(a_n)])
    V = np.vstack(
        [
            np.column_stack([B.T, mu[:, None] * At, d, zeros_a]),
            np.column_stack([zeros_b, zeros_a, np.zeros(n), At]),
        ]
    )
    # E = D - I: per-site 2 x 2 blocks [[e11, e12], [e21, e22]], inverted in closed form
    e11, e12 = a_t["tau"] - 1.0, a_t["nu"]
    e21, e22 = a_n["tau"], a_n["nu"] - 1.0
    det = e11 * e22 - e12 * e21
    if not np.all(np.isfinite(det)) or np.any(det == 0.0):
        return None

    def e_inv(x):  # x (2n,) or (2n, m)
        x1, x2 = x[:n], x[n:]
        if x.ndim == 2:
            c11, c12, c21, c22 = (c[:, None] for c in (e22, -e12, -e21, e11))
            dd = det[:, None]
        else:
            c11, c12, c21, c22, dd = e22, -e12, -e21, e11, det
        return np.concatenate([(c11 * x1 + c12 * x2) / dd, (c21 * x1 + c22 * x2) / dd])

    Einv_U = e_inv(U)
    Einv_b = e_inv(-r)
    cap = np.eye(U.shape[1]) + V.T @ Einv_U
    try:
        return Einv_b - Einv_U @ np.linalg.solve(cap, V.T @ Einv_b)
    except np.linalg.LinAlgError:
        return None


def _sum_squares(r):
    """|r|^2, inf instead of an overflow warning."""
    with np.errstate(over="ignore"):
        return float(np.sum(r * r))


def _dogbox(residual, posterior, s, y, df, eps, k, tol, max_evaluations, relative=False):
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
    if r is None or not _is_root(r, sol.x, tol, relative):
        return None
    return sol.x[:n].copy(), sol.x[n:].copy(), post, int(sol.nfev)


def follow_fixed_point(
    posterior,
    y,
    k,
    tau,
    nu,
    parameters,
    start,
    stop,
    step,
    *,
    tol,
    max_solves=400,
    relative=False,
):
    """Follow a fixed point along a path of models (continuation by Newton's method).

    The model at path coordinate x is ``parameters(x) -> (df, eps)``.  From the fixed point
    ``(tau, nu)`` of the model at ``start``, each Newton solve
    (:func:`solve_fixed_point`) moves to ``x + step`` toward ``stop``, starting from the
    previous fixed point; a step that fails is halved (down to ``1e-5``), one that
    succeeds is lengthened by half.  Where the branch of fixed points turns back (a fold:
    ``I - dF/ds`` becomes singular) the path ends before ``stop``.  ``relative``: as
    :func:`solve_fixed_point`'s.

    Returns
    -------
    (tau, nu, post, x) at the last model reached (``x == stop`` when the path got there;
    ``post`` is None when no step succeeded).
    """
    x, post = start, None
    direction = 1.0 if stop > start else -1.0
    solves = 0
    while (stop - x) * direction > 0 and step > 1e-5 and solves < max_solves:
        target = x + direction * step
        if (stop - target) * direction < 0:
            target = stop
        df, eps = parameters(target)
        found = solve_fixed_point(posterior, y, df, eps, k, tau, nu, tol=tol, relative=relative)
        solves += 1
        if found is None:
            step /= 2.0
            continue
        tau, nu, post = found[:3]
        x = target
        step *= 1.5
    return tau, nu, post, x


def follow_in_df(posterior, y, k, tau, nu, df, eps, *, tol, max_solves, relative=False):
    """Follow the fixed point ``(tau, nu)`` of the model at ``max(1e5, 10 df)`` degrees of
    freedom and label noise ``eps`` in ``log df`` down to ``df`` (steps 0.5,
    :func:`follow_fixed_point`).  Returns ``(tau, nu, post, df_end)``: ``df_end`` is
    ``df`` where the path reached it, else the fold df* where it turned back."""
    top, bottom = np.log(max(1e5, 10.0 * df)), np.log(df)
    tau, nu, post, x = follow_fixed_point(
        posterior, y, k, tau, nu, lambda ld: (df if ld == bottom else float(np.exp(ld)), eps),
        top, bottom, 0.5, tol=tol, max_solves=max_solves, relative=relative,
    )  # fmt: skip
    return tau, nu, post, df if x == bottom else float(np.exp(x))


@dataclasses.dataclass
class Continuation:
    """The outcome of :func:`continue_from_gaussian_ep` (its last path).

    gaussian : a path reached Gaussian EP's proper fixed point at the target label noise.
    df_end : where the path in df ended (the target df, or a fold df* above it; None when
        no path reached the target label noise).
    reached : the path reached the target (eps, df); tau, nu, post : the sites (n,) and
        posterior at the end of the last path (None when it never left its start).
    """

    gaussian: bool = False
    df_end: float | None = None
    reached: bool = False
    tau: np.ndarray | None = None
    nu: np.ndarray | None = None
    post: object = None


def continue_from_gaussian_ep(
    Z, y, df, eps, posterior, *, damping, tol, df_tol=None, sweeps=(1, 2, 3, 5, 100),
    starts=(0.45, 0.3), max_solves=150, df_max_solves=150, relative=False,
):  # fmt: skip
    """The linear t-EP fixed point at (eps, df) by continuation from Gaussian EP with more
    label noise (docs/reliability.md, "t-exponential EP: valid fixed points").

    For each start label noise eps0 of ``starts`` above ``eps``: Gaussian EP's fixed point
    at eps0 (Newton's method from the sites after each count of ``sweeps`` damped sweeps,
    which converge there more often), followed by :func:`follow_fixed_point` to label
    noise ``eps`` (steps 0.05), then :func:`follow_in_df` (tolerance ``df_tol``, default
    ``tol``).  The first path that reaches
    (eps, df) wins.

    Parameters
    ----------
    Z : (n, k) design; y : (n,) labels ±1; df, eps : the target model.
    posterior : callable (tau, nu) -> posterior or None (as :func:`solve_fixed_point`).
    damping : the damping of the start sweeps; relative : as :func:`solve_fixed_point`.

    Returns
    -------
    Continuation
    """
    k = Z.shape[1]
    df_tol = tol if df_tol is None else df_tol
    out = Continuation()
    for eps0 in starts:
        if eps0 <= eps:
            continue
        start, state, done = None, None, 0
        for count in sweeps:
            with np.errstate(all="ignore"):
                state, _ = linear_tep(
                    Z, y, df=np.inf, eps=eps0, max_iter=count - done, damping=damping,
                    state=state,
                )  # fmt: skip
            done = count
            start = solve_fixed_point(
                posterior, y, np.inf, eps0, k, *rank_one_sites(state, Z), tol=tol,
                relative=relative,
            )  # fmt: skip
            if start is not None:
                break
        if start is None:
            continue
        tau, nu, post, x = follow_fixed_point(
            posterior, y, k, start[0], start[1], lambda e: (np.inf, e), eps0, eps, 0.05,
            tol=tol, max_solves=max_solves, relative=relative,
        )  # fmt: skip
        if x != eps:
            continue
        if np.isinf(df):
            return Continuation(True, df, True, tau, nu, post)
        tau, nu, post, df_end = follow_in_df(
            posterior, y, k, tau, nu, df, eps, tol=df_tol, max_solves=df_max_solves,
            relative=relative,
        )  # fmt: skip
        out = Continuation(True, df_end, df_end == df, tau, nu, post)
        if out.reached:
            return out
    return out
