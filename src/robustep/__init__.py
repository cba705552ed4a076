"""robustep: robust Expectation Propagation and belief propagation.

Estimators (scikit-learn API): :class:`GPClassifier`, :class:`GPRegressor`,
:class:`StudentTGPRegressor`,
:class:`BayesPointMachine`, :class:`StudentTProcessClassifier`; :class:`StochasticLearner`,
the minibatch learner of their sparse models.  Engines:
:func:`robustep.ep.expectation_propagation`, :mod:`robustep.tep`,
:func:`robustep.mrf.belief_propagation`.  See the README for a quick start and
docs/architecture.md for the design.
"""

from robustep._config import config, get_config
from robustep.estimators import (
    BayesPointMachine,
    GPClassifier,
    GPRegressor,
    StochasticLearner,
    StudentTGPRegressor,
    StudentTProcessClassifier,
)

__version__ = "0.1.0"

__all__ = [
    "BayesPointMachine",
    "GPClassifier",
    "GPRegressor",
    "StochasticLearner",
    "StudentTGPRegressor",
    "StudentTProcessClassifier",
    "__version__",
    "config",
    "get_config",
]
