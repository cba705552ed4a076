"""scikit-learn estimators built on the EP engines."""

from robustep.estimators._learner import StochasticLearner
from robustep.estimators.bpm import BayesPointMachine
from robustep.estimators.gp_classifier import GPClassifier
from robustep.estimators.gp_regressor import GPRegressor
from robustep.estimators.student_t_process import StudentTProcessClassifier
from robustep.estimators.student_t_regressor import StudentTGPRegressor

__all__ = [
    "BayesPointMachine",
    "GPClassifier",
    "GPRegressor",
    "StochasticLearner",
    "StudentTGPRegressor",
    "StudentTProcessClassifier",
]
