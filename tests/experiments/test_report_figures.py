"""The report of every experiment reads: its figures pass robustep.plotting.figure_problems
(checked for every saved figure by this folder's conftest) and a page with several tables
titles each. The whole sweep over the quick configurations is slow; a fast subset runs the
cheap experiments."""

import json

import pytest
from matplotlib.container import ErrorbarContainer
from matplotlib.figure import Figure

from robustep.datasets import DataUnavailableError
from robustep.experiments import registered
from robustep.experiments.report import table_title

# cheap experiments (seconds each) and the changes to their quick configurations
FAST = {
    "tgp-convergence": {},
    "tgp-fixed": {},
    "tep-uci": {"datasets": ["thyroid"], "n_splits": 2},  # two splits: error bars
}


def _report(name, overrides, tmp_path, monkeypatch):
    """Run ``name`` in its quick configuration and render its report; the figures saved."""
    exp = registered()[name]
    try:
        results = exp.run({**exp.quick, **overrides}, 0)
    except DataUnavailableError as exc:
        pytest.skip(f"no data: {exc}")
    saved = []
    checked = Figure.savefig  # the conftest's checking savefig

    def savefig(fig, *args, **kwargs):
        saved.append(fig)
        return checked(fig, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    summary = exp.report(json.loads(json.dumps(results)), tmp_path)
    for f in summary.figures:
        assert (tmp_path / f).stat().st_size > 10_000, f
    if len(summary.tables) > 1:
        untitled = [t.strip().splitlines()[0][:60] for t in summary.tables if not table_title(t)]
        assert not untitled, f"tables without a title: {untitled}"
    return summary, saved


@pytest.mark.parametrize("name", sorted(FAST))
def test_report_figures_of_cheap_experiments(name, tmp_path, monkeypatch):
    _, saved = _report(name, FAST[name], tmp_path, monkeypatch)
    assert saved
    if name == "tep-uci":  # "mean ± 1 s.e." in the legend: the error bars are drawn
        (ax,) = saved[0].axes
        bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer) and c.has_yerr]
        assert len(bars) == 2 and all(len(c.lines[2][0].get_segments()) > 0 for c in bars)
        assert any("s.e. over 2 splits" in t.get_text() for t in ax.get_legend().texts)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(registered()))
def test_report_figures_of_every_quick_run(name, tmp_path, monkeypatch):
    _report(name, {}, tmp_path, monkeypatch)
