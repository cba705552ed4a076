"""One figure style for the gallery and the experiment reports, and the checks a figure
must pass.

:func:`style` (a context manager) and :func:`styled` (a decorator) set the sizes, fonts
and layout of every figure drawn inside them; :func:`legend` puts an axes' legend in a
corner that covers no data, or outside the axes when every corner does;
:func:`figure_legend` puts one legend for several panels outside them;
:func:`figure_problems` lists what a reader would trip over in a drawn figure: a plot
axes without an axis label, a legend over data points, data outside the axes limits
(clipped), overlapping tick labels, colour shading of a value without a colour bar.

Colour maps: :data:`PROBABILITY_CMAP` (diverging, for a class probability with its
midpoint 0.5), :data:`VALUE_CMAP` (sequential, for any other value), and
:func:`class_colors` (one colour of the qualitative cycle per class).

>>> import matplotlib
>>> matplotlib.use("Agg")
>>> import matplotlib.pyplot as plt
>>> from robustep.plotting import figure_problems, legend, style
>>> with style():
...     fig, ax = plt.subplots()
...     _ = ax.plot([0, 1, 2], [0, 1, 4], "o-", label="data")
...     _ = ax.set(xlabel="x", ylabel="y")
...     _ = legend(ax)
...     figure_problems(fig)
[]
>>> plt.close(fig)
"""

from __future__ import annotations

import contextlib
import functools
import itertools

import numpy as np

from robustep._optional import require

__all__ = [
    "PROBABILITY_CMAP",
    "RC_PARAMS",
    "VALUE_CMAP",
    "class_colors",
    "figure_legend",
    "figure_problems",
    "legend",
    "style",
    "styled",
]

#: diverging colour map of a class probability (white at 0.5)
PROBABILITY_CMAP = "RdBu_r"
#: sequential colour map of any other value shown as colour (evidence, density, error)
VALUE_CMAP = "viridis"

#: the matplotlib settings of :func:`style`: fonts no smaller than 8 pt at 110 dpi, and
#: the constrained layout, which makes room for colour bars and for legends outside the
#: axes
RC_PARAMS = {
    "figure.dpi": 110,
    "savefig.dpi": 110,
    "figure.constrained_layout.use": True,
    "font.size": 9,
    "axes.titlesize": 9,
    "axes.labelsize": 9,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 8,
    "legend.title_fontsize": 8,
    "legend.framealpha": 0.85,
    "image.cmap": VALUE_CMAP,
    "lines.markersize": 5,
}

# corners and edges of the axes tried, in this order, before a legend goes outside
_INSIDE = (
    "upper right",
    "upper left",
    "lower left",
    "lower right",
    "center right",
    "center left",
    "upper center",
    "lower center",
)


def _pyplot():
    return require("matplotlib.pyplot", "robustep.plotting")


@contextlib.contextmanager
def style():
    """Draw the figures made and saved inside the block in the library's style
    (:data:`RC_PARAMS`)."""
    plt = _pyplot()
    with plt.rc_context(RC_PARAMS):
        yield


def styled(func):
    """Decorator: run ``func`` inside :func:`style`."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        with style():
            return func(*args, **kwargs)

    return wrapper


def class_colors(n_classes: int) -> list[str]:
    """One colour per class: ``"C0"``, ``"C1"``, ... of the qualitative cycle (at most 10)."""
    if not 1 <= n_classes <= 10:
        raise ValueError(f"class_colors supports 1 to 10 classes, got {n_classes}")
    return [f"C{k}" for k in range(n_classes)]


def _data_points(ax) -> np.ndarray:
    """Display coordinates, shape (k, 2), of the data drawn in ``ax``: the vertices of
    its lines in data coordinates (curves and markers), the centres of its scatter
    points and the ends of its bars (the value a bar shows). Reference lines (axhline,
    axvline: not in data coordinates), shading, contours, images and error-bar whiskers
    are not data points."""
    from matplotlib.collections import PathCollection
    from matplotlib.container import BarContainer

    parts = []
    for line in ax.get_lines():
        if not line.get_visible() or line.get_transform() != ax.transData:
            continue
        xy = np.asarray(line.get_xydata(), dtype=float).reshape(-1, 2)
        if line.get_linestyle() not in ("None", "none", "", " ") and len(xy) > 1:
            # a curve covers the straight segments between its vertices too
            t = np.linspace(0.0, 1.0, 5)[:-1, None, None]
            xy = np.concatenate([(xy[:-1] + t * (xy[1:] - xy[:-1])).reshape(-1, 2), xy[-1:]])
        parts.append(ax.transData.transform(xy))
    for coll in ax.collections:
        if isinstance(coll, PathCollection) and coll.get_visible():
            offsets = np.asarray(coll.get_offsets(), dtype=float).reshape(-1, 2)
            parts.append(coll.get_offset_transform().transform(offsets))
    for container in ax.containers:
        if isinstance(container, BarContainer):
            ends = [
                (bar.get_x() + bar.get_width() / 2, bar.get_y() + bar.get_height())
                if container.orientation != "horizontal"
                else (bar.get_x() + bar.get_width(), bar.get_y() + bar.get_height() / 2)
                for bar in container.patches
                if bar.get_visible()
            ]
            if ends:
                parts.append(ax.transData.transform(np.asarray(ends, dtype=float)))
    if not parts:
        return np.empty((0, 2))
    xy = np.concatenate(parts)
    return xy[np.all(np.isfinite(xy), axis=1)]


def _inside(points: np.ndarray, bbox, pad: float = 0.0) -> np.ndarray:
    return (
        (points[:, 0] >= bbox.x0 - pad)
        & (points[:, 0] <= bbox.x1 + pad)
        & (points[:, 1] >= bbox.y0 - pad)
        & (points[:, 1] <= bbox.y1 + pad)
    )


def _renderer(fig):
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def legend(ax, *args, outside: str = "right", **kwargs):
    """Draw the legend of ``ax`` where it covers none of its data.

    Tries the corners and edges of the axes in turn and keeps the first whose legend box
    contains no data point (:func:`figure_problems`' definition); when every one does,
    the legend goes outside the axes, to the right (``outside="right"``) or below it
    (``outside="below"``), and the constrained layout of :func:`style` makes room.
    ``args`` and ``kwargs`` go to ``Axes.legend`` (``loc`` and ``bbox_to_anchor`` are
    chosen here). Returns the Legend.
    """
    if outside not in ("right", "below"):
        raise ValueError(f"outside must be 'right' or 'below', got {outside!r}")
    fig = ax.figure
    renderer = _renderer(fig)
    points = _data_points(ax)
    for loc in _INSIDE:
        leg = ax.legend(*args, loc=loc, **kwargs)
        box = leg.get_window_extent(renderer)
        if not _inside(points, box, pad=2.0).any():
            return leg
    if outside == "right":
        return ax.legend(*args, loc="upper left", bbox_to_anchor=(1.02, 1.0), **kwargs)
    ncol = kwargs.pop("ncol", 3)
    return ax.legend(*args, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=ncol, **kwargs)


def figure_legend(fig, handles, labels, *, where: str = "lower center", **kwargs):
    """One legend for all the panels of ``fig``, outside them (``where``: ``"lower
    center"``, ``"right upper"``, ... as in matplotlib's ``loc="outside ..."``; needs the
    constrained layout of :func:`style`). Returns the Legend."""
    kwargs.setdefault("ncol", len(labels) if where.startswith(("lower", "upper")) else 1)
    return fig.legend(handles, labels, loc=f"outside {where}", **kwargs)


def _is_colorbar(ax) -> bool:
    return hasattr(ax, "_colorbar") or ax.get_label() == "<colorbar>"


def _value_shading(ax) -> bool:
    """Whether ``ax`` shades a continuous value with a colour map (filled contours, an
    image, a mesh): a reader needs a colour bar to read it."""
    from matplotlib.collections import QuadMesh
    from matplotlib.contour import ContourSet
    from matplotlib.image import AxesImage

    shades = [a for a in ax.collections if isinstance(a, QuadMesh)]
    # contour lines coloured by a colour map tell their level only through a colour bar
    # or their labels (clabel)
    shades += [
        a
        for a in ax.collections
        if isinstance(a, ContourSet) and (a.filled or not getattr(a, "labelTexts", None))
    ]
    shades += [a for a in ax.get_images() if isinstance(a, AxesImage)]
    return any(_continuous(s.get_cmap()) for s in shades)


def _continuous(cmap) -> bool:
    """A colour map of a value, not of a few classes (a qualitative map, or the single
    colour of ``contour(..., colors="k")``): more than ten distinct colours."""
    colours = cmap(np.linspace(0.0, 1.0, min(cmap.N, 256)))
    return len(np.unique(np.round(colours, 3), axis=0)) > 10


def _tick_labels_overlap(ax, renderer) -> list[str]:
    found = []
    for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
        boxes = [
            t.get_window_extent(renderer)
            for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]
            for t in (tick.label1, tick.label2)
            if t.get_visible() and t.get_text() and tick.get_visible()
        ]
        for a, b in itertools.combinations(boxes, 2):
            if a.overlaps(b) and a.intersection(a, b) is not None:
                inter = a.intersection(a, b)
                if inter.width > 1 and inter.height > 1:
                    found.append(f"overlapping {name} tick labels")
                    break
    return found


def figure_problems(fig) -> list[str]:
    """What a reader of the drawn figure ``fig`` would trip over, one line each.

    - a plot axes without an x label (or y label) while it shows x (or y) tick labels;
      colour bars and axes without tick labels are exempt;
    - a legend (of an axes or of the figure) whose box contains a data point of any
      axes: a curve's vertices and the points between them, markers, scatter points;
    - a data point outside its axes (clipped by the axis limits);
    - overlapping tick labels on one axis;
    - colour shading of a value (filled contours, an image or a mesh with a continuous
      colour map) in a figure without a colour bar.

    Returns an empty list for a figure that passes.
    """
    renderer = _renderer(fig)
    problems = []
    plots = [ax for ax in fig.axes if ax.get_visible() and ax.axison and not _is_colorbar(ax)]
    legends = [(ax.get_legend(), [ax]) for ax in plots if ax.get_legend() is not None]
    legends += [(leg, plots) for leg in fig.legends]
    has_colorbar = any(_is_colorbar(ax) for ax in fig.axes)
    for ax in plots:
        name = repr(ax.get_title() or ax.get_label() or f"axes {fig.axes.index(ax)}")[:50]
        for axis, label in ((ax.xaxis, ax.get_xlabel()), (ax.yaxis, ax.get_ylabel())):
            shows = any(
                t.get_visible() and t.get_text()
                for t in [*axis.get_ticklabels(), *axis.get_ticklabels(which="minor")]
            )
            if shows and not label:
                problems.append(f"{name}: no {axis.axis_name} label")
        points = _data_points(ax)
        clipped = ~_inside(points, ax.bbox, pad=1.0)
        if clipped.any():
            problems.append(f"{name}: {int(clipped.sum())} data points outside the axes")
        problems += [f"{name}: {p}" for p in _tick_labels_overlap(ax, renderer)]
        if _value_shading(ax) and not has_colorbar:
            problems.append(f"{name}: colour shading without a colour bar")
    for leg, axes in legends:
        box = leg.get_window_extent(renderer)
        covered = sum(int(_inside(_data_points(ax), box).sum()) for ax in axes)
        if covered:
            title = leg.get_title().get_text() or leg.texts[0].get_text() if leg.texts else ""
            problems.append(f"legend {title[:30]!r} covers {covered} data points")
    return problems
