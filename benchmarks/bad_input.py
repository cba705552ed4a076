"""Bad input at every public entry point, and the exception each one gets.

Every row is one call with one bad argument: the public entry point, the bad input, the
exception class expected and a regular expression that its message must contain (what is
wrong, and what to do).  ``tests/estimators/test_bad_input.py`` runs every row;

    python benchmarks/bad_input.py            # prints the Markdown table
    python benchmarks/bad_input.py --check    # exit status 1 if any row gets another answer

prints the table of docs/reliability.md ("Bad input") with the messages as they are now.
The command line (``robustep ...``) is covered separately by tests/experiments/test_cli.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
from sklearn.exceptions import NotFittedError
from sklearn.utils._param_validation import InvalidParameterError


@dataclasses.dataclass(frozen=True)
class Case:
    """One bad call: ``call()`` must raise ``exc`` with a message matching ``match``."""

    entry: str
    bad: str
    call: Callable[[], object]
    exc: type[BaseException]
    match: str

    @property
    def id(self) -> str:
        return f"{self.entry} | {self.bad}"


def _rng():
    return np.random.default_rng(0)


def _X(n=12, d=2):
    return _rng().normal(size=(n, d))


def _y_cls(n=12):
    return np.arange(n) % 2


def _y_reg(n=12):
    return _rng().normal(size=n)


def _with(a, index, value):
    a = np.array(a, dtype=float)
    a[index] = value
    return a


# ----------------------------------------------------------------------------- estimators
def _estimators():
    """(name, factory of a fast instance, is_classifier, one out-of-range parameter)."""
    from robustep.estimators import (
        BayesPointMachine,
        GPClassifier,
        StudentTGPRegressor,
        StudentTProcessClassifier,
    )

    return [
        ("GPClassifier", lambda **kw: GPClassifier(optimizer=None, **kw), True, "label_noise"),
        ("BayesPointMachine", lambda **kw: BayesPointMachine(**kw), True, "label_noise"),
        (
            "StudentTProcessClassifier",
            lambda **kw: StudentTProcessClassifier(optimizer=None, **kw),
            True,
            "df",
        ),
        (
            "StudentTGPRegressor",
            lambda **kw: StudentTGPRegressor(optimizer=None, **kw),
            False,
            "scale",
        ),
    ]


_BAD_PARAMS = {"label_noise": 0.7, "df": -1.0, "scale": 0.0}


def _fit(make, X, y, **params):
    def call():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return make(**params).fit(X, y)

    return call


def _fitted(make, classifier):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if classifier:
            return make(max_iter=5).fit(_X(), _y_cls())
        return make().fit(_X(), _y_reg())


def _predict(make, classifier, X):
    def call():
        est = _fitted(make, classifier)
        return est.predict(X)

    return call


def _estimator_cases() -> list[Case]:
    cases = []
    for name, make, classifier, param in _estimators():
        y = _y_cls() if classifier else _y_reg()
        rows = [
            ("X contains NaN", _with(_X(), (3, 1), np.nan), y, ValueError, r"Input X contains NaN"),
            (
                "X contains inf",
                _with(_X(), (0, 0), np.inf),
                y,
                ValueError,
                r"contains infinity.*Remove or replace the infinite values",
            ),
            (
                "X is 1-D",
                _X()[:, 0],
                y,
                ValueError,
                r"got a 1-D array. Reshape your data: X.reshape\(-1, 1\)",
            ),
            (
                "X is 3-D",
                _X().reshape(12, 2, 1),
                y,
                ValueError,
                r"dim 3.*Pass X as a 2-D array",
            ),
            (
                "X has 0 samples",
                np.zeros((0, 2)),
                y[:0],
                ValueError,
                r"0 sample\(s\).*Pass at least one sample",
            ),
            (
                "X has 0 features",
                np.zeros((12, 0)),
                y,
                ValueError,
                r"0 feature\(s\).*Pass at least one feature",
            ),
            (
                "X holds strings",
                np.array([["a", "b"]] * 12),
                y,
                ValueError,
                r"(not compatible with arrays of bytes/strings|could not convert string)"
                r".*([Cc]onvert|encode)",
            ),
            (
                "len(y) != len(X)",
                _X(),
                y[:-1],
                ValueError,
                r"inconsistent numbers of samples.*len\(y\) == len\(X\)",
            ),
            ("y is None", _X(), None, ValueError, r"requires y to be passed"),
            (
                "y is 2-D",
                _X(),
                np.column_stack([y, y]),
                ValueError,
                r"y should be a 1d array.*Pass y as a 1-D array",
            ),
            (
                "y contains NaN",
                _X(),
                _with(y, 2, np.nan),
                ValueError,
                r"Input y contains NaN",
            ),
        ]
        if classifier:
            rows += [
                (
                    "y has one class",
                    _X(),
                    np.zeros(12, dtype=int),
                    ValueError,
                    r"only one class.*pass training data with examples of both classes",
                ),
                (
                    "y has three classes",
                    _X(),
                    np.arange(12) % 3,
                    ValueError,
                    r"binary.*pass exactly two labels",
                ),
                (
                    "y is continuous",
                    _X(),
                    _y_reg(),
                    ValueError,
                    r"Unknown label type.*Pass class labels",
                ),
            ]
        else:
            rows += [
                (
                    "y holds strings",
                    _X(),
                    np.array(["a", "b"] * 6),
                    ValueError,
                    r"could not convert string to float.*regression targets must be real",
                ),
            ]
        if name == "GPClassifier":  # fits several classes; a binary-only setting cannot
            rows = [r for r in rows if r[0] != "y has three classes"]
        for bad, X_bad, y_bad, exc, match in rows:
            cases.append(Case(f"{name}.fit", bad, _fit(make, X_bad, y_bad), exc, match))
        if name == "GPClassifier":
            cases.append(
                Case(
                    f"{name}.fit",
                    "y has three classes, method='rep', multi_class='multinomial'",
                    _fit(make, _X(), np.arange(12) % 3, method="rep", multi_class="multinomial"),
                    ValueError,
                    r"3 classes.*binary-only.*multi_class='one_vs_rest'",
                )
            )
        value = _BAD_PARAMS[param]
        cases.append(
            Case(
                f"{name}.fit",
                f"{param}={value}",
                _fit(make, _X(), y, **{param: value}),
                InvalidParameterError,
                rf"The '{param}' parameter of {name} must be",
            )
        )
        second = "n_restarts_optimizer" if not classifier else "max_iter"
        value = -1 if not classifier else 0
        cases.append(
            Case(
                f"{name}.fit",
                f"{second}={value}",
                _fit(make, _X(), y, **{second: value}),
                InvalidParameterError,
                rf"The '{second}' parameter of {name} must be",
            )
        )
        cases += [
            Case(
                f"{name}.predict",
                "not fitted",
                lambda make=make: make().predict(_X()),
                NotFittedError,
                r"not fitted yet.*Call 'fit'",
            ),
            Case(
                f"{name}.predict",
                "X has 3 features, fit had 2",
                _predict(make, classifier, _X(d=3)),
                ValueError,
                r"X has 3 features.*expecting 2.*same columns",
            ),
            Case(
                f"{name}.predict",
                "X contains NaN",
                _predict(make, classifier, _with(_X(), (1, 1), np.nan)),
                ValueError,
                r"Input X contains NaN",
            ),
        ]
    return cases


# ----------------------------------------------------------------------------- EP engine
def _ep(K=None, y=None, likelihood=None, **kw):
    from robustep.ep import expectation_propagation
    from robustep.likelihoods import Probit

    K = np.eye(4) + 0.5 if K is None else K
    y = np.array([1.0, -1.0, 1.0, -1.0]) if y is None else y
    likelihood = Probit() if likelihood is None else likelihood
    return lambda: expectation_propagation(K, y, likelihood, **kw)


def _engine_cases() -> list[Case]:
    e = "expectation_propagation"
    K_asym = np.eye(4) + 0.5
    K_asym[0, 1] += 0.3
    K_indef = np.eye(4) - 0.9
    rows = [
        ("likelihood is a string", _ep(likelihood="probit"), TypeError, r"likelihood must be"),
        ("K contains NaN", _ep(K=_with(np.eye(4), (0, 1), np.nan)), ValueError, r"K contains NaN"),
        ("K is not square", _ep(K=np.ones((4, 3))), ValueError, r"K must be a square"),
        ("K is not symmetric", _ep(K=K_asym), ValueError, r"K must be symmetric.*\(K \+ K\.T\)"),
        ("K is indefinite", _ep(K=K_indef), ValueError, r"not positive semi-definite"),
        ("K is empty (0 x 0)", _ep(K=np.zeros((0, 0)), y=np.zeros(0)), ValueError, r"empty"),
        (
            "len(y) != len(K)",
            _ep(y=np.array([1.0, -1.0, 1.0])),
            ValueError,
            r"y has 3 entries but K is 4 x 4.*one target per row",
        ),
        (
            "labels not ±1",
            _ep(y=np.array([0.0, 1.0, 0.0, 1.0])),
            ValueError,
            r"labels in \{-1, \+1\}.*map your two classes",
        ),
        (
            "y contains NaN",
            _ep(y=np.array([1.0, np.nan, 1.0, -1.0])),
            ValueError,
            r"found \[nan\].*map your two classes",
        ),
        ("schedule='random'", _ep(schedule="random"), ValueError, r"schedule must be one of"),
        ("damping=1", _ep(damping=1.0), ValueError, r"damping must be in \[0, 1\)"),
        ("power=0", _ep(power=0.0), ValueError, r"power must be in \(0, 1\]"),
        ("max_iter=0", _ep(max_iter=0), ValueError, r"max_iter must be a positive integer"),
        ("tol=-1", _ep(tol=-1.0), ValueError, r"tol must be positive"),
        (
            "init of wrong shape",
            _ep(init=(np.zeros(3), np.zeros(3))),
            ValueError,
            r"init must be \(site_precision, site_shift\) of shape",
        ),
    ]
    return [Case(e, bad, call, exc, match) for bad, call, exc, match in rows]


# ----------------------------------------------------------------------------- likelihoods
def _likelihood_cases() -> list[Case]:
    from robustep.likelihoods import Gaussian, NoisyStep, StudentT

    rows = [
        ("Gaussian", "noise_variance=0", lambda: Gaussian(0.0), ValueError, r"in \(0, inf\)"),
        ("Gaussian", "noise_variance=nan", lambda: Gaussian(np.nan), ValueError, r"finite"),
        ("Gaussian", "noise_variance='1'", lambda: Gaussian("1"), TypeError, r"must be a number"),
        ("StudentT", "df=0", lambda: StudentT(df=0.0), ValueError, r"df .*in \(0, inf\)"),
        ("StudentT", "df=inf", lambda: StudentT(df=np.inf), ValueError, r"finite.*Gaussian"),
        ("StudentT", "scale=-1", lambda: StudentT(scale=-1.0), ValueError, r"scale must be"),
        ("StudentT", "df=None", lambda: StudentT(df=None), TypeError, r"must be a number"),
        ("NoisyStep", "epsilon=0.5", lambda: NoisyStep(0.5), ValueError, r"\[0, 0\.5\)"),
        ("NoisyStep", "epsilon=-0.1", lambda: NoisyStep(-0.1), ValueError, r"\[0, 0\.5\)"),
        ("NoisyStep", "epsilon=nan", lambda: NoisyStep(np.nan), ValueError, r"\[0, 0\.5\)"),
    ]
    return [Case(f"likelihoods.{c}", bad, call, exc, m) for c, bad, call, exc, m in rows]


# ----------------------------------------------------------------------------- MRFs
def _mrf_cases() -> list[Case]:
    from robustep.mrf import (
        PairwiseMRF,
        belief_propagation,
        complete_edges,
        grid_edges,
        ising,
        random_regular_edges,
    )

    E = np.array([[0, 1], [1, 2]])
    lp = np.zeros((2, 2, 2))
    good = PairwiseMRF(np.zeros((3, 2)), E, lp)
    rows = [
        ("PairwiseMRF", "log_unary is 1-D", lambda: PairwiseMRF(np.zeros(3), E, lp), r"2-D array"),
        (
            "PairwiseMRF",
            "edge index out of range",
            lambda: PairwiseMRF(np.zeros((3, 2)), np.array([[0, 1], [1, 3]]), lp),
            r"outside 0\.\.2",
        ),
        (
            "PairwiseMRF",
            "self-loop",
            lambda: PairwiseMRF(np.zeros((3, 2)), np.array([[0, 1], [1, 1]]), lp),
            r"self-loop.*fold it into log_unary",
        ),
        (
            "PairwiseMRF",
            "duplicate edge",
            lambda: PairwiseMRF(np.zeros((3, 2)), np.array([[0, 1], [1, 0]]), lp),
            r"more than once.*merge",
        ),
        (
            "PairwiseMRF",
            "log_pairwise of wrong shape",
            lambda: PairwiseMRF(np.zeros((3, 2)), E, np.zeros((2, 3, 3))),
            r"log_pairwise must have shape",
        ),
        (
            "PairwiseMRF",
            "log_unary contains NaN",
            lambda: PairwiseMRF(_with(np.zeros((3, 2)), (0, 0), np.nan), E, lp),
            r"non-finite.*large negative finite",
        ),
        (
            "PairwiseMRF",
            "cardinality 0",
            lambda: PairwiseMRF(np.zeros((3, 2)), E, lp, np.array([2, 0, 2])),
            r"cardinalities must lie in",
        ),
        (
            "PairwiseMRF",
            "edges of shape (2, 3)",
            lambda: PairwiseMRF(np.zeros((3, 2)), np.zeros((2, 3), int), lp),
            r"edges must be an \(m, 2\) array",
        ),
        ("ising", "fields is 2-D", lambda: ising(np.zeros((3, 1)), E, 1.0), r"fields must be"),
        (
            "ising",
            "3 couplings for 2 edges",
            lambda: ising(np.zeros(3), E, np.ones(3)),
            r"couplings.*2 edges",
        ),
        ("ising", "couplings contain inf", lambda: ising(np.zeros(3), E, np.inf), r"non-finite"),
        ("grid_edges", "rows=0", lambda: grid_edges(0, 3), r"rows >= 1"),
        ("complete_edges", "n=-1", lambda: complete_edges(-1), r"n must be"),
        ("random_regular_edges", "n*degree odd", lambda: random_regular_edges(5, 3), r"even"),
        (
            "random_regular_edges",
            "degree=-1",
            lambda: random_regular_edges(4, -1),
            r"degree",
        ),
        (
            "belief_propagation",
            "method='foo'",
            lambda: belief_propagation(good, method="foo"),
            r"method must be one of",
        ),
        (
            "belief_propagation",
            "damping=1.5",
            lambda: belief_propagation(good, method="damped", damping=1.5),
            r"damping",
        ),
        (
            "belief_propagation",
            "max_iter=0",
            lambda: belief_propagation(good, max_iter=0),
            r"max_iter must be a positive integer",
        ),
    ]
    cases = [Case(f"mrf.{f}", bad, call, ValueError, m) for f, bad, call, m in rows]
    cases.append(
        Case("mrf.grid_edges", "rows=2.5", lambda: grid_edges(2.5, 3), TypeError, r"integers")
    )
    cases.append(
        Case(
            "mrf.belief_propagation",
            "model is a dict",
            lambda: belief_propagation({"log_unary": np.zeros((3, 2))}),
            TypeError,
            r"PairwiseMRF",
        )
    )
    return cases


def _in_tmp(name: str, content: bytes, reader: Callable[[Path], object]):
    """A call that writes ``content`` to a fresh folder as ``name`` and reads it back."""

    def call():
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / name
            path.write_bytes(content)
            return reader(path)

    return call


def _uai_cases() -> list[Case]:
    from robustep.mrf import read_uai

    rows = [
        ("not a MARKOV file", b"BAYES\n1\n2\n", ValueError, r"not a UAI MARKOV file"),
        ("truncated", b"MARKOV\n2\n2 2\n1\n", ValueError, r"ends early.*truncated"),
        (
            "a count is not an integer",
            b"MARKOV\n2\ntwo 2\n",
            ValueError,
            r"expected an integer.*'two'",
        ),
        (
            "a potential is not a number",
            b"MARKOV\n1\n2\n1\n1 0\n2\n0.5 x\n",
            ValueError,
            r"expected a number.*'x'",
        ),
        (
            "negative potential",
            b"MARKOV\n1\n2\n1\n1 0\n2\n0.5 -1\n",
            ValueError,
            r"negative or non-finite potentials",
        ),
        (
            "variable index out of range",
            b"MARKOV\n1\n2\n1\n1 4\n2\n0.5 0.5\n",
            ValueError,
            r"variable 4.*0\.\.0",
        ),
        ("binary garbage", b"\xff\xfe\x00\x81" * 8, ValueError, r"not a text file"),
    ]
    cases = [
        Case("mrf.read_uai", bad, _in_tmp("model.uai", content, read_uai), exc, m)
        for bad, content, exc, m in rows
    ]
    cases.append(
        Case(
            "mrf.read_uai",
            "file does not exist",
            lambda: read_uai("/nonexistent/model.uai"),
            FileNotFoundError,
            r"No such file",
        )
    )
    return cases


# ----------------------------------------------------------------------------- data sets
def _dataset_cases() -> list[Case]:
    from robustep.datasets import load_sonar

    def load(loader, name):
        return lambda path: loader(data_home=path.parent, download=False)

    row = ",".join(["0.5"] * 60) + ",R\n"
    rows = [
        (load_sonar, "sonar.csv", "empty file", b"", r"is empty.*replace"),
        (load_sonar, "sonar.csv", "blank lines only", b"\n\n  \n", r"is empty.*replace"),
        (
            load_sonar,
            "sonar.csv",
            "ragged rows",
            (row * 3 + "0.5,0.5,R\n").encode(),
            r"malformed: row 4 has 3 fields.*replace",
        ),
        (
            load_sonar,
            "sonar.csv",
            "non-numeric feature",
            (row * 2 + ",".join(["abc"] * 60) + ",R\n").encode(),
            r"non-numeric feature",
        ),
        (load_sonar, "sonar.csv", "binary garbage", b"\xff\xfe\x00\x81" * 64, r"not a text file"),
        (
            load_sonar,
            "sonar.csv.gz",
            "corrupt gzip",
            b"\x1f\x8b\x08\x00garbage" * 4,
            r"not a readable gzip",
        ),
        (
            load_sonar,
            "sonar.csv",
            "wrong number of columns",
            b"0.1,0.2,R\n0.3,0.4,M\n",
            r"has 3 columns, expected 61.*right file",
        ),
    ]
    return [
        Case(
            f"datasets.{loader.__name__}",
            f"{bad} (data_home)",
            _in_tmp(fname, content, load(loader, fname)),
            ValueError,
            m,
        )
        for loader, fname, bad, content, m in rows
    ]


def all_cases() -> list[Case]:
    """Every row of the table, in table order."""
    return (
        _estimator_cases()
        + _engine_cases()
        + _likelihood_cases()
        + _mrf_cases()
        + _uai_cases()
        + _dataset_cases()
    )


def outcome(case: Case) -> tuple[str, str, bool]:
    """(exception class name or 'no exception', message, whether it is the expected answer)."""
    import re

    try:
        case.call()
    except Exception as exc:  # noqa: BLE001 - every answer is recorded
        msg = " ".join(str(exc).split())
        ok = isinstance(exc, case.exc) and re.search(case.match, msg) is not None
        return type(exc).__name__, msg, ok
    return "no exception", "", False


def _cell(text: str, limit: int = 400) -> str:
    import re

    # the temporary folders differ from run to run; print one placeholder for them
    text = re.sub(re.escape(tempfile.gettempdir()) + r"/tmp\w+", "<tmp>", text)
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return text.replace("|", "\\|")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if any row fails")
    args = parser.parse_args(argv)
    failed = 0
    print("| entry point | bad input | exception | message |")
    print("|---|---|---|---|")
    for case in all_cases():
        name, msg, ok = outcome(case)
        failed += not ok
        mark = "" if ok else " **(unexpected)**"
        print(f"| `{case.entry}` | {_cell(case.bad)} | {name}{mark} | {_cell(msg)} |")
    print(f"\n{len(all_cases())} bad inputs; {failed} got an unexpected answer.")
    return 1 if (args.check and failed) else 0


if __name__ == "__main__":
    from _harness import run_suite  # benchmarks/_harness.py

    sys.exit(run_suite("bad_input", main, quick=()))
