"""robustep.likelihoods: site likelihoods p(y_i | f_i) with tilted moments for (power) EP,
and the predictive distribution of a new observation for a Gaussian latent."""

from robustep.likelihoods._predictive import PredictiveMixture, predictive_mixture
from robustep.likelihoods.base import Likelihood
from robustep.likelihoods.gaussian import Gaussian
from robustep.likelihoods.laplace import Laplace
from robustep.likelihoods.logistic import Logistic
from robustep.likelihoods.multinomial_probit import MultinomialProbit
from robustep.likelihoods.noisy_step import NoisyStep
from robustep.likelihoods.probit import Probit
from robustep.likelihoods.student_t import StudentT

__all__ = [
    "Likelihood",
    "Gaussian",
    "Laplace",
    "Logistic",
    "MultinomialProbit",
    "NoisyStep",
    "PredictiveMixture",
    "Probit",
    "StudentT",
    "predictive_mixture",
]
