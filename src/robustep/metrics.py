"""Scorers for model selection with robustep's probabilistic regressors.

scikit-learn's model selection (``cross_val_score``, ``GridSearchCV``) calls a scorer
``scorer(estimator, X, y) -> float`` (higher is better).  :func:`log_predictive_scorer`
scores the whole predictive distribution, where the default (R^2) scores only the mean::

    from sklearn.model_selection import cross_val_score
    from robustep.metrics import log_predictive_scorer

    cross_val_score(GPRegressor(), X, y, scoring=log_predictive_scorer)
"""

from __future__ import annotations

__all__ = ["log_predictive_scorer"]


def log_predictive_scorer(estimator, X, y, sample_weight=None) -> float:
    """Mean log predictive density of y at X under a fitted robustep regressor.

    estimator : a fitted :class:`robustep.GPRegressor` (or StudentTGPRegressor);
    X : (m, d); y : (m,).  Returns ``estimator.log_predictive_score(X, y)``.
    """
    return float(estimator.log_predictive_score(X, y, sample_weight=sample_weight))
