"""robustep.plotting: the figure style, legend placement and the figure checks."""

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from robustep.plotting import (  # noqa: E402
    RC_PARAMS,
    class_colors,
    figure_legend,
    figure_problems,
    legend,
    style,
    styled,
)


@pytest.fixture
def figure():
    with style():
        fig, ax = plt.subplots(figsize=(4, 3))
        ax.set(xlabel="x", ylabel="y")
        yield fig, ax
    plt.close(fig)


def test_style_sets_and_restores_the_settings():
    before = plt.rcParams["font.size"]
    with style():
        assert plt.rcParams["font.size"] == RC_PARAMS["font.size"]
        assert plt.rcParams["figure.constrained_layout.use"]
    assert plt.rcParams["font.size"] == before

    @styled
    def size():
        return plt.rcParams["legend.fontsize"]

    assert size() == RC_PARAMS["legend.fontsize"]


def test_a_clean_figure_passes(figure):
    fig, ax = figure
    ax.plot(np.arange(5), np.arange(5) ** 2, "o-", label="squares")
    legend(ax)
    assert figure_problems(fig) == []


def test_missing_axis_labels_are_found(figure):
    fig, ax = figure
    ax.set(xlabel="", ylabel="")
    ax.plot([0, 1], [0, 1])
    assert sorted(figure_problems(fig)) == ["'axes 0': no x label", "'axes 0': no y label"]
    ax.tick_params(labelleft=False)  # a shared y axis labelled by its neighbour
    assert figure_problems(fig) == ["'axes 0': no x label"]


def test_a_legend_over_data_is_found_and_legend_avoids_it(figure):
    fig, ax = figure
    x = np.linspace(0, 1, 30)
    xx, yy = np.meshgrid(x, np.linspace(0, 1, 9))
    ax.plot(xx.ravel(), yy.ravel(), "k.", label="a")
    ax.scatter(x, np.zeros_like(x), label="b")
    ax.set_ylim(-0.05, 1.05)
    ax.legend(loc="upper right")
    assert any("covers" in p for p in figure_problems(fig))
    legend(ax)  # every corner and edge covers points: the legend goes outside
    fig.canvas.draw()
    assert ax.get_legend().get_window_extent().x0 > ax.bbox.x1
    assert figure_problems(fig) == []


def test_legend_keeps_a_free_corner(figure):
    fig, ax = figure
    ax.plot([0, 1], [0, 1], "o", label="diagonal")
    ax.set(xlim=(-0.1, 1.1), ylim=(-0.1, 1.1))
    leg = legend(ax)
    assert leg._loc in (2, 4)  # upper left or lower right: off the diagonal
    assert figure_problems(fig) == []


def test_clipped_data_are_found(figure):
    fig, ax = figure
    ax.plot(np.arange(10), np.arange(10), "-")
    ax.set_ylim(0, 5)
    assert figure_problems(fig) == ["'axes 0': 16 data points outside the axes"]
    ax.axhline(20)  # a reference line is not data
    ax.set_ylim(0, 9)
    assert figure_problems(fig) == []


def test_value_shading_needs_a_colour_bar(figure):
    fig, ax = figure
    xx, yy = np.meshgrid(np.linspace(0, 1, 5), np.linspace(0, 1, 5))
    cs = ax.contourf(xx, yy, xx + yy)
    assert figure_problems(fig) == ["'axes 0': colour shading without a colour bar"]
    fig.colorbar(cs, ax=ax, label="x + y")
    assert figure_problems(fig) == []


def test_labelled_contour_lines_need_no_colour_bar(figure):
    fig, ax = figure
    xx, yy = np.meshgrid(np.linspace(0, 1, 5), np.linspace(0, 1, 5))
    lines = ax.contour(xx, yy, xx + yy, levels=[0.5, 1.0])
    assert figure_problems(fig) == ["'axes 0': colour shading without a colour bar"]
    ax.clabel(lines)
    assert figure_problems(fig) == []


def test_overlapping_tick_labels_are_found(figure):
    fig, ax = figure
    ax.plot([0, 1], [0, 1])
    ax.set_xticks(np.linspace(0, 1, 40))
    assert figure_problems(fig) == ["'axes 0': overlapping x tick labels"]


def test_figure_legend_sits_outside_the_panels():
    with style():
        fig, axes = plt.subplots(1, 2, figsize=(6, 3))
        for ax in axes:
            ax.plot([0, 1], [0, 1], "o-", label="line")
            ax.set(xlabel="x", ylabel="y")
        figure_legend(fig, *axes[0].get_legend_handles_labels())
        assert figure_problems(fig) == []
    plt.close(fig)


def test_class_colors():
    assert class_colors(3) == ["C0", "C1", "C2"]
    with pytest.raises(ValueError):
        class_colors(11)


def test_bar_values_are_data(figure):
    fig, ax = figure
    ax.bar([0, 1, 2], [1.0, 2.0, 3.0], label="bars")
    ax.set_ylim(0, 2.5)  # the third bar's value is cut off
    assert figure_problems(fig) == ["'axes 0': 1 data points outside the axes"]
    ax.set_ylim(0, 3.2)
    ax.legend(loc="upper right")  # over the top of the third bar
    assert [p for p in figure_problems(fig) if "covers 1 data points" in p]
