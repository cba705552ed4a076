"""One run of an evidence search: scipy's L-BFGS-B or the user's callable optimiser.

The estimators' ``optimizer`` parameter follows scikit-learn's Gaussian-process
estimators: ``"fmin_l_bfgs_b"`` runs :func:`scipy.optimize.minimize` (method L-BFGS-B,
analytic gradient), and a callable is called as

    optimizer(obj_func, initial_theta, bounds) -> (theta_opt, func_min)

with ``obj_func(theta, eval_gradient=True)`` returning the negative approximate log
evidence and its gradient (the value alone when ``eval_gradient`` is False), and
``bounds`` a (k, 2) float array (``-inf``/``inf`` where a coordinate, such as an inducing
input, is unbounded).  A callable lets a user cap or change the search, e.g. a fixed
iteration budget on a large sparse problem (docs/performance.md#sparse-ep-at-scale).
"""

from __future__ import annotations

import numpy as np
from scipy import optimize


def bounds_array(bounds) -> np.ndarray:
    """(k, 2) float array of ``bounds`` given as (low, high) pairs, None meaning open."""
    rows = [
        (-np.inf if lo is None else float(lo), np.inf if hi is None else float(hi))
        for lo, hi in bounds
    ]
    return np.asarray(rows, dtype=float).reshape(-1, 2)


def minimise(optimizer, objective, x0, bounds, *, options=None, callable_bounds=None):
    """Minimise ``objective`` from ``x0``; returns (x (k,), value, the optimiser's message).

    optimizer : "fmin_l_bfgs_b" or a callable (see the module docstring).
    objective : objective(x (k,)) -> (value, gradient (k,)).
    bounds : k (low, high) pairs for L-BFGS-B, None for an open side.
    options : L-BFGS-B options (e.g. {"maxiter": 200}); not used with a callable.
    callable_bounds : the bounds a callable gets, if not ``bounds`` (as pairs or (k, 2)).
    """
    x0 = np.array(x0, dtype=float)
    if not callable(optimizer):
        sol = optimize.minimize(
            objective, x0, jac=True, method="L-BFGS-B", bounds=bounds, options=options
        )
        return np.asarray(sol.x, dtype=float), float(sol.fun), str(sol.message)

    def obj_func(theta, eval_gradient=True):
        value, grad = objective(np.asarray(theta, dtype=float))
        return (value, grad) if eval_gradient else value

    box = bounds_array(bounds if callable_bounds is None else callable_bounds)
    out = optimizer(obj_func, x0.copy(), box)
    try:
        theta, value = out
        theta = np.asarray(theta, dtype=float).reshape(x0.shape)
        value = float(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            "a callable optimizer must return (theta_opt, func_min) with theta_opt of "
            f"shape {x0.shape} and func_min a number; got {type(out).__name__}"
        ) from exc
    if not np.all(np.isfinite(theta)):
        raise ValueError("the callable optimizer returned a theta_opt with NaN or inf entries")
    return theta, value, "the callable optimizer returned"
