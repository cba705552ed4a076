"""Every figure an experiment test saves must read (robustep.plotting.figure_problems):
the tests of the experiments check their report figures as a side effect."""

import pytest
from matplotlib.figure import Figure

from robustep.plotting import figure_problems


@pytest.fixture(autouse=True)
def saved_figures_read(monkeypatch):
    """Fail the test if a figure it saved has a problem a reader would trip over."""
    problems = []
    original = Figure.savefig

    def savefig(fig, fname, *args, **kwargs):
        out = original(fig, fname, *args, **kwargs)
        problems.extend(f"{getattr(fname, 'name', fname)}: {p}" for p in figure_problems(fig))
        return out

    monkeypatch.setattr(Figure, "savefig", savefig)
    yield problems
    assert not problems, problems
