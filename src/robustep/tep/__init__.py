"""EP for the t-exponential family (Futami, Sato & Sugiyama 2017).

* :mod:`robustep.tep.likelihood` — noisy step likelihood: Z1, Z2, gradients, Theorem 1.
* :mod:`robustep.tep.ep` — ADF / EP for the linear Bayes point machine, evidence (Theorem 2).
* :mod:`robustep.tep.process` — EP for Student-t process classification.
"""

from robustep.tep.ep import (
    LinearTEPState,
    TEPInfo,
    linear_log_marginal_likelihood,
    linear_posterior,
    linear_tep,
)
from robustep.tep.process import (
    ProcessPosterior,
    process_log_marginal_likelihood,
    process_log_marginal_likelihood_gradient,
    process_posterior,
    process_predict_latent,
    process_tep,
)

__all__ = [
    "LinearTEPState",
    "TEPInfo",
    "linear_tep",
    "linear_posterior",
    "linear_log_marginal_likelihood",
    "ProcessPosterior",
    "process_tep",
    "process_posterior",
    "process_log_marginal_likelihood",
    "process_log_marginal_likelihood_gradient",
    "process_predict_latent",
]
