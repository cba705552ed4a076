"""Every gallery script in examples/ runs in its quick mode and saves its figure."""

import pathlib
import runpy
import sys
import warnings

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples"
SCRIPTS = sorted(p for p in EXAMPLES.glob("*.py") if not p.name.startswith("_"))


def test_the_gallery_has_examples():
    assert len(SCRIPTS) >= 3


def _labelled(fig):
    """Axes of ``fig`` that lack a label a reader needs: every plot axes has an x label,
    and one with visible y tick labels has a y label (colour bars carry their own)."""
    missing = []
    for ax in fig.axes:
        if hasattr(ax, "_colorbar"):
            continue
        if not ax.get_xlabel():
            missing.append((ax.get_title()[:40], "x"))
        shows_y = any(t.get_visible() and t.get_text() for t in ax.get_yticklabels())
        if shows_y and not ax.get_ylabel():
            missing.append((ax.get_title()[:40], "y"))
    return missing


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_example_runs_quick(script, tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    saved = []
    original = Figure.savefig

    def savefig(fig, *args, **kwargs):
        fig.canvas.draw()  # tick labels exist only after a draw
        saved.append(fig)
        return original(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    monkeypatch.setattr(sys, "argv", [str(script), "--quick", "--out", str(tmp_path)])
    monkeypatch.syspath_prepend(str(EXAMPLES))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an example must not show the user warnings
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        runpy.run_path(str(script), run_name="__main__")
    pngs = list(tmp_path.glob("*.png"))
    assert len(pngs) == 1 and pngs[0].stat().st_size > 10_000
    assert saved and not [m for fig in saved for m in _labelled(fig)], [
        m for fig in saved for m in _labelled(fig)
    ]
