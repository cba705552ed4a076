"""The former module names of the pseudo-point and label-noise EP warn and re-export."""

import importlib
import subprocess
import sys

import pytest

RENAMED = [
    ("robustep.ep.sparse_power", "robustep.ep.pseudo_point"),
    ("robustep.ep.multiclass_general", "robustep.ep.multiclass_label_noise"),
]


@pytest.mark.parametrize(("old", "new"), RENAMED)
def test_old_module_name_warns_and_gives_the_same_objects(old, new, monkeypatch):
    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(DeprecationWarning, match=new):
        alias = importlib.import_module(old)
    module = importlib.import_module(new)
    assert alias.__all__ == module.__all__
    names = [k for k in vars(module) if not k.startswith("__")]
    for name in names:
        assert getattr(alias, name) is getattr(module, name), name


def test_library_does_not_import_the_old_names():
    code = (
        "import sys, robustep, robustep.ep, robustep.estimators, robustep.likelihoods\n"
        f"assert not [m for m in {[old for old, _ in RENAMED]!r} if m in sys.modules]\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
