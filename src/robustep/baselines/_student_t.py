"""The Student-t parameters that the scale-mixture baselines (VB, fVB, MCMC, AIS) need.

The pointwise math (log density, derivatives, predictive density) is
:class:`robustep.likelihoods.StudentT`'s; the baselines call it.
"""

from __future__ import annotations

import numpy as np


def student_t_params(likelihood) -> tuple[float, float]:
    """Return ``(df, scale)`` of a Student-t likelihood object; raise with advice otherwise."""
    try:
        df = float(likelihood.df)
        scale = float(likelihood.scale)
    except AttributeError as exc:
        raise TypeError(
            f"{type(likelihood).__name__} has no 'df'/'scale'; this baseline needs a "
            "Student-t likelihood, e.g. robustep.likelihoods.StudentT(df=4.0, scale=0.5)"
        ) from exc
    if not (df > 0 and scale > 0 and np.isfinite(df) and np.isfinite(scale)):
        raise ValueError(f"df and scale must be positive and finite, got df={df}, scale={scale}")
    return df, scale
