"""Optional dependencies: matplotlib (experiments extra) is not needed by the estimators."""

from __future__ import annotations

import subprocess
import sys

import pytest

from robustep import __version__
from robustep._optional import has_module, require
from robustep.cli import main


def test_require_names_the_extra():
    with pytest.raises(ImportError, match=r"pip install 'robustep\[experiments\]'"):
        require("matplotlib.no_such_module", "plot_loo")
    with pytest.raises(ImportError, match="pip install no_such_package"):
        require("no_such_package", "something")
    assert require("numpy", "x").__name__ == "numpy"
    assert has_module("numpy") and not has_module("no_such_package")


def test_reproduce_without_matplotlib_says_how_to_install(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr("robustep._optional.has_module", lambda name: name != "matplotlib")
    assert main(["reproduce", "rep-toy", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "matplotlib" in err and "robustep[experiments]" in err
    assert not any(tmp_path.iterdir())


def test_version_flag(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"robustep {__version__}"


def test_estimators_import_without_matplotlib():
    """Importing robustep and fitting an estimator never imports matplotlib."""
    code = (
        "import sys, numpy as np\n"
        "import robustep\n"
        "from robustep import GPClassifier, StudentTGPRegressor\n"
        "X = np.linspace(0, 1, 12)[:, None]; y = (X[:, 0] > 0.5).astype(int)\n"
        "GPClassifier(optimizer=None).fit(X, y).predict_proba(X)\n"
        "StudentTGPRegressor(optimizer=None).fit(X, X[:, 0]).predict(X)\n"
        "assert 'matplotlib' not in sys.modules, 'matplotlib was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
