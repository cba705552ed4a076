"""Benchmark data sets of the papers, and synthetic generators.

Loaders return ``(X, y)`` with ``X`` float of shape (n, d) and ``y`` either ±1
integer labels (classification; each docstring says which class is +1) or float
targets (regression).  The nine UCI-style data sets ship inside the package
(gzip-compressed, with sources, citations and licences in
``robustep/datasets/data/README.md``), so every loader works offline.  A file
is searched in ``data_home`` (if given), then among the packaged copies, then in
``$ROBUSTEP_DATA`` (``os.pathsep``-separated), then in ``~/robustep_data``; only
if it is nowhere is it downloaded (into ``data_home`` or ``~/robustep_data``,
created then), and if that fails a :class:`DataUnavailableError` says which
file to save where::

    from robustep.datasets import load_pima
    X, y = load_pima()                      # y: +1 diabetic, -1 not
"""

from robustep.datasets._files import DataUnavailableError, data_search_path, get_data_home
from robustep.datasets._loaders import (
    LOADERS,
    load_boston,
    load_breast_cancer,
    load_concrete,
    load_haberman,
    load_heart,
    load_ionosphere,
    load_pima,
    load_sonar,
    load_spambase,
    load_thyroid,
    make_friedman_outliers,
)

__all__ = [
    "DataUnavailableError",
    "LOADERS",
    "data_search_path",
    "get_data_home",
    "load_boston",
    "load_breast_cancer",
    "load_concrete",
    "load_haberman",
    "load_heart",
    "load_ionosphere",
    "load_pima",
    "load_sonar",
    "load_spambase",
    "load_thyroid",
    "make_friedman_outliers",
]
