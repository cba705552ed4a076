"""robustep.likelihoods: site likelihoods p(y_i | f_i) with tilted moments for (power) EP."""

from robustep.likelihoods.base import Likelihood
from robustep.likelihoods.gaussian import Gaussian
from robustep.likelihoods.logistic import Logistic
from robustep.likelihoods.multinomial_probit import MultinomialProbit
from robustep.likelihoods.noisy_step import NoisyStep
from robustep.likelihoods.probit import Probit
from robustep.likelihoods.student_t import StudentT

__all__ = [
    "Likelihood",
    "Gaussian",
    "Logistic",
    "MultinomialProbit",
    "NoisyStep",
    "Probit",
    "StudentT",
]
