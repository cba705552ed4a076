"""Discrete pairwise MRFs: model, (relaxed / damped / fractional) belief propagation, exact
junction-tree reference and UAI input/output.

>>> from robustep.mrf import ising, grid_edges, belief_propagation, exact_marginals
>>> import numpy as np
>>> E = grid_edges(3, 3)
>>> mrf = ising(np.zeros(9), E, -0.5 * np.ones(len(E)))
>>> res = belief_propagation(mrf, method="relaxed", relaxation=0.1)
>>> ref = exact_marginals(mrf)
"""

from robustep.mrf.bp import (
    METHODS,
    SCHEDULES,
    BPResult,
    belief_propagation,
    edge_matchings,
    fit_relaxation,
    relaxed_objective,
)
from robustep.mrf.exact import ExactResult, enumerate_exact, exact_marginals, junction_tree
from robustep.mrf.io import read_uai, uai_log_scale, write_uai
from robustep.mrf.model import (
    PAD,
    PairwiseMRF,
    complete_edges,
    grid_edges,
    ising,
    random_regular_edges,
)

__all__ = [
    "METHODS",
    "PAD",
    "SCHEDULES",
    "BPResult",
    "ExactResult",
    "PairwiseMRF",
    "belief_propagation",
    "complete_edges",
    "edge_matchings",
    "enumerate_exact",
    "exact_marginals",
    "fit_relaxation",
    "grid_edges",
    "ising",
    "junction_tree",
    "random_regular_edges",
    "read_uai",
    "relaxed_objective",
    "uai_log_scale",
    "write_uai",
]
