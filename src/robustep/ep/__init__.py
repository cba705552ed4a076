"""Expectation propagation engine for latent Gaussian (GP) models."""

from robustep.ep.accelerated import accelerated_expectation_propagation
from robustep.ep.chain import auto_expectation_propagation, run_chain
from robustep.ep.engine import expectation_propagation
from robustep.ep.evidence import ep_objective, log_Z_gradient
from robustep.ep.multiclass import MulticlassEPResult, nested_ep
from robustep.ep.multiclass_label_noise import RobustMulticlassEPResult, robust_nested_ep
from robustep.ep.multiclass_sparse import (
    MulticlassFITCPrior,
    SparseMulticlassEPResult,
    sparse_nested_ep,
)
from robustep.ep.newton import newton_expectation_propagation
from robustep.ep.pseudo_point import PseudoPointEPResult, pseudo_point_power_ep
from robustep.ep.stability import FixedPointStability, fixed_point_stability
from robustep.ep.state import EPResult
from robustep.ep.stochastic import StochasticEPResult, fit_stochastic_ep
from robustep.ep.stochastic_multiclass import (
    StochasticMulticlassEPResult,
    fit_stochastic_multiclass_ep,
)
from robustep.ep.strategy import AdaptiveDamping, DoubleLoop, InferenceStrategy
from robustep.ep.updates import moment_matching_update

__all__ = [
    "AdaptiveDamping",
    "DoubleLoop",
    "EPResult",
    "FixedPointStability",
    "fixed_point_stability",
    "InferenceStrategy",
    "accelerated_expectation_propagation",
    "auto_expectation_propagation",
    "run_chain",
    "ep_objective",
    "expectation_propagation",
    "log_Z_gradient",
    "moment_matching_update",
    "newton_expectation_propagation",
    "MulticlassEPResult",
    "nested_ep",
    "RobustMulticlassEPResult",
    "robust_nested_ep",
    "MulticlassFITCPrior",
    "SparseMulticlassEPResult",
    "sparse_nested_ep",
    "PseudoPointEPResult",
    "pseudo_point_power_ep",
    "StochasticEPResult",
    "fit_stochastic_ep",
    "StochasticMulticlassEPResult",
    "fit_stochastic_multiclass_ep",
]
