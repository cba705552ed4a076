"""Every gallery script in examples/ runs in its quick mode, saves its figure, and the
figure reads: axis labels, no legend over data, no clipped data, a colour bar for colour
shading (robustep.plotting.figure_problems)."""

import pathlib
import runpy
import sys
import warnings

import pytest

from robustep.plotting import figure_problems

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
SCRIPTS = sorted(p for p in EXAMPLES.glob("*.py") if not p.name.startswith("_"))


def test_the_gallery_has_examples():
    assert len(SCRIPTS) >= 3


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_example_runs_quick(script, tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    problems = []
    original = Figure.savefig

    def savefig(fig, *args, **kwargs):
        out = original(fig, *args, **kwargs)
        problems.extend(figure_problems(fig))
        return out

    monkeypatch.setattr(Figure, "savefig", savefig)
    monkeypatch.setattr(sys, "argv", [str(script), "--quick", "--out", str(tmp_path)])
    monkeypatch.syspath_prepend(str(EXAMPLES))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an example must not show the user warnings
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        runpy.run_path(str(script), run_name="__main__")
    pngs = list(tmp_path.glob("*.png"))
    assert len(pngs) == 1 and pngs[0].stat().st_size > 10_000
    assert not problems, problems
