"""Build a prior from a scikit-learn kernel and inputs: :func:`make_prior` and its registry.

``make_prior(kernel, X, representation, **options)`` looks ``representation`` up in a
registry of builders ``builder(kernel, X, **options) -> GaussianPrior`` and returns what
it builds; :func:`register_prior` adds a representation.  Registered here:

=========================== ================================================================
``"dense"``                 :class:`DensePrior` of ``K = kernel(X)`` (n, n).  Options:
                            ``check`` (False: K from a kernel is PSD by construction, so
                            only its finiteness is tested, O(n^2), as the estimators do);
                            ``K``: K itself when the caller has it already (e.g. from
                            ``kernel(X, eval_gradient=True)``), so it is not built twice.
                            ``zero_subnormal`` (False): where K holds subnormal entries
                            (a short length-scale), zero its entries below the resolution
                            of its diagonal (:func:`robustep.linalg.zero_below_resolution`;
                            in a copy of a caller's K, which is never modified), as the
                            dense classifier does.
``"array"``                 :class:`ArrayPrior` of K built in an array-API library.  Option
                            ``like`` (required): an array whose namespace, dtype and device
                            K takes (:func:`robustep.kernels.array.kernel_matrix`); ``K``
                            as for ``"dense"``.
``"fitc"``                  :class:`FITCPrior` ``FITCPrior.from_kernel(kernel, X, Z)``.
                            Options: ``inducing_inputs`` Z (m, d) (required); ``jitter``
                            (absolute, on K_mm) or ``relative_jitter`` (times the mean
                            prior variance at Z, the estimators' fixed jitter), not both;
                            ``pseudo_point`` (True: the Λ = 0 prior of power EP with
                            inducing_power α < 1, :meth:`FITCPrior.pseudo_point`).
``"dask"``                  :class:`robustep.posterior._dask.DaskFITCPrior` for a
                            ``dask.array`` X; options as ``"fitc"`` but ``pseudo_point``.
``"diagonal_plus_low_rank"`` :class:`DiagonalPlusLowRankPrior` K = diag(d) + U U^T.
                            Without options: K = kernel(X) read off a kernel whose
                            covariance is diagonal plus low rank (WhiteKernel plus
                            DotProduct or ConstantKernel terms, optionally scaled by a
                            ConstantKernel; :func:`~robustep.posterior.low_rank.kernel_structure`;
                            a ValueError for any other kernel).  Options: ``diagonal`` d
                            (n,) and ``factor`` U (n, r) (kernel and X None), or
                            ``inducing_inputs`` Z with the kernel: U = V and d = Λ +
                            ``nugget`` of the FITC prior at Z.
=========================== ================================================================
"""

from __future__ import annotations

import numpy as np

from robustep.linalg import zero_below_resolution
from robustep.posterior.backend import ArrayPrior
from robustep.posterior.base import GaussianPrior
from robustep.posterior.dense import DensePrior
from robustep.posterior.low_rank import DiagonalPlusLowRankPrior, kernel_structure
from robustep.posterior.sparse import FITCPrior

_BUILDERS = {}


def register_prior(name, builder, *, replace=False):
    """Register ``builder(kernel, X, **options) -> GaussianPrior`` as ``representation=name``.

    Parameters
    ----------
    name : str, the representation's name in :func:`make_prior`.
    builder : callable returning a :class:`robustep.posterior.GaussianPrior`.
    replace : allow replacing an existing registration (default False: a ValueError).
    """
    if not (isinstance(name, str) and name):
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    if not callable(builder):
        raise TypeError(f"builder must be callable, got {type(builder).__name__}")
    if name in _BUILDERS and not replace:
        raise ValueError(f"representation {name!r} is already registered; pass replace=True")
    _BUILDERS[name] = builder


def prior_representations():
    """The registered representation names, sorted."""
    return tuple(sorted(_BUILDERS))


def make_prior(kernel, X, representation="dense", **options) -> GaussianPrior:
    """The prior of ``kernel`` at inputs X (n, d) in the given representation.

    Parameters
    ----------
    kernel : scikit-learn kernel (its current hyperparameters).
    X : (n, d) inputs (numpy; a ``dask.array`` for ``"dask"``).
    representation : a name of :func:`prior_representations` (module docstring).
    **options : the representation's options.

    Returns
    -------
    GaussianPrior
    """
    try:
        builder = _BUILDERS[representation]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown prior representation {representation!r}; registered: "
            f"{', '.join(prior_representations())} (add one with register_prior)"
        ) from None
    prior = builder(kernel, X, **options)
    if not isinstance(prior, GaussianPrior):
        raise TypeError(
            f"the builder of {representation!r} returned {type(prior).__name__}, not a "
            "robustep.posterior.GaussianPrior"
        )
    return prior


# ------------------------------------------------------------------------ the builders
def _dense(kernel, X, *, check=False, K=None, zero_subnormal=False):
    built = K is None
    if built:
        K = kernel(np.asarray(X, dtype=float))
    K = np.asarray(K, dtype=float)
    if zero_subnormal:  # in place in a K built here, in a copy of the caller's
        K = zero_below_resolution(K, copy=not built)
    if not check and not np.isfinite(K).all():
        raise ValueError("K contains NaN or inf; check the kernel and its hyperparameters")
    return DensePrior(K, check=check)


def _array(kernel, X, *, like, K=None):
    from robustep.kernels.array import kernel_matrix

    return ArrayPrior(kernel_matrix(kernel, X, like=like) if K is None else K, check=False)


def _fitc_jitter(kernel, Z, jitter, relative_jitter):
    if relative_jitter is None:
        return jitter
    if jitter is not None:
        raise ValueError("pass jitter (absolute) or relative_jitter, not both")
    scale = float(np.mean(kernel.diag(np.asarray(Z, dtype=float))))
    return relative_jitter * (scale if np.isfinite(scale) and scale > 0 else 1.0)


def _fitc(kernel, X, *, inducing_inputs, jitter=None, relative_jitter=None, pseudo_point=False):
    jitter = _fitc_jitter(kernel, inducing_inputs, jitter, relative_jitter)
    prior = FITCPrior.from_kernel(kernel, X, inducing_inputs, jitter=jitter)
    return prior.pseudo_point() if pseudo_point else prior


def _dask(kernel, X, *, inducing_inputs, jitter=None, relative_jitter=None):
    from robustep.posterior._dask import DaskFITCPrior

    jitter = _fitc_jitter(kernel, inducing_inputs, jitter, relative_jitter)
    return DaskFITCPrior(kernel, X, inducing_inputs, jitter=jitter)


def _diagonal_plus_low_rank(
    kernel, X, *, diagonal=None, factor=None, inducing_inputs=None, jitter=None, nugget=0.0
):
    if inducing_inputs is None:
        if diagonal is None and factor is None and kernel is not None:
            return DiagonalPlusLowRankPrior(*kernel_structure(kernel, X))
        if diagonal is None or factor is None:
            raise ValueError(
                "pass a kernel whose covariance is diagonal plus low rank, diagonal and "
                "factor, or inducing_inputs with a kernel"
            )
        return DiagonalPlusLowRankPrior(diagonal, factor)
    fitc = FITCPrior.from_kernel(kernel, X, inducing_inputs, jitter=jitter)
    return DiagonalPlusLowRankPrior(fitc.Lambda + nugget, fitc.V)


register_prior("dense", _dense)
register_prior("array", _array)
register_prior("fitc", _fitc)
register_prior("dask", _dask)
register_prior("diagonal_plus_low_rank", _diagonal_plus_low_rank)
