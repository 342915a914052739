"""Measurements against a size, rooflines and block schedules (chapter 10):
:func:`plot_labelled_lines` (lines labelled at their ends),
:func:`plot_roofline` (arithmetic intensity against the machine's ceilings)
and :func:`show_block_schedule` (which blocks of scores blockwise attention
visits).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from attention_course.i18n import _
from attention_course.plotting.curves import COLOURS, LINE_STYLES, MARKERS
from attention_course.plotting.heatmaps import _as_numpy

if TYPE_CHECKING:
    pass


#: One style per line of :func:`plot_labelled_lines`: the colours, line
#: styles and markers of the other plots, so that lines differ without colour
#: too.
SERIES_STYLES = tuple(
    {"color": COLOURS[i], "marker": MARKERS[i],
     "linestyle": LINE_STYLES[i % len(LINE_STYLES)]}
    for i in range(len(COLOURS))
)


def plot_labelled_lines(
    ax: plt.Axes,
    x: Sequence[float],
    series: dict[str, Sequence[float | None]],
    *,
    xlabel: str,
    ylabel: str,
    title: str | None = None,
    logx: bool = True,
    logy: bool = True,
) -> plt.Axes:
    """Draw one line per entry of ``series`` against ``x``, each labelled at
    its last point (no legend to look up), and return ``ax``.

    ``series[name]`` holds one ``y`` per ``x``; ``None`` or NaN leaves a point
    out (a size that was not measured). Lines get the colours, markers and
    styles of :data:`SERIES_STYLES` in order.
    """
    if len(series) > len(SERIES_STYLES):
        raise ValueError(f"at most {len(SERIES_STYLES)} series, got "
                         f"{len(series)}")
    xs = np.asarray(x, dtype=float)
    ends = []  # (x, y, name, colour) of each line's last point
    styles = SERIES_STYLES[:len(series)]
    for (name, values), style in zip(series.items(), styles, strict=True):
        ys = np.array([np.nan if v is None else v for v in values],
                      dtype=float)
        if ys.shape != xs.shape:
            raise ValueError(f"series {name!r} has {ys.size} values for "
                             f"{xs.size} x values")
        shown = np.isfinite(ys)
        if not shown.any():
            continue
        ax.plot(xs[shown], ys[shown], label=name, markersize=5, **style)
        last = np.flatnonzero(shown)[-1]
        ends.append((xs[last], ys[last], name, style["color"]))
    if logx:
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [f"{v:g}" for v in xs])
        ax.minorticks_off()
    ax.set(yscale="log" if logy else "linear", xlabel=xlabel, ylabel=ylabel,
           title=title or "")
    ax.grid(alpha=0.3, which="both")
    ax.margins(x=0.25)
    _label_line_ends(ax, ends)
    return ax


def _label_line_ends(ax: plt.Axes, ends: list[tuple]) -> None:
    """Write each line's name beside its last point, nudging labels that end
    at the same ``x`` apart vertically so that none covers another."""
    ax.autoscale_view()
    points_per_pixel = 72 / ax.figure.dpi
    gap = 11  # points between the centres of two labels
    placed: list[tuple[float, float]] = []  # (x, label height in points)
    order = sorted(ends, key=lambda end: ax.transData.transform(end[:2])[1])
    for x, y, name, colour in order:
        height = ax.transData.transform((x, y))[1] * points_per_pixel
        offset = 0.0
        for other_x, other in placed:
            if other_x == x and height + offset < other + gap:
                offset = other + gap - height
        placed.append((x, height + offset))
        ax.annotate(name, (x, y), xytext=(6, offset),
                    textcoords="offset points", va="center", color=colour,
                    fontsize=9)


def plot_roofline(
    ax: plt.Axes,
    peak_flops: float,
    bandwidth: float,
    points: dict[str, tuple[float, float]],
    *,
    title: str | None = None,
) -> plt.Axes:
    """A roofline: the best rate a kernel can reach as a function of its
    arithmetic intensity, and where some kernels are.

    ``peak_flops`` (FLOP/s) and ``bandwidth`` (bytes/s) are the machine's;
    the roof is ``min(peak_flops, bandwidth * intensity)``, bent at the ridge
    point ``peak_flops / bandwidth``. ``points[name] = (intensity in FLOP per
    byte, rate in FLOP/s)``; each is marked and labelled. Both axes are
    logarithmic; rates are shown in GFLOP/s.
    """
    if peak_flops <= 0 or bandwidth <= 0:
        raise ValueError(f"peak_flops and bandwidth must be positive, got "
                         f"{peak_flops} and {bandwidth}")
    ridge = peak_flops / bandwidth
    intensities = [i for i, _rate in points.values()] + [ridge]
    low = min(intensities) / 4
    high = max(intensities) * 4
    grid = np.geomspace(low, high, 200)
    ax.plot(grid, np.minimum(peak_flops, bandwidth * grid) / 1e9,
            color="0.3", linewidth=2)
    ax.axvline(ridge, color="0.5", linestyle=":", linewidth=1)
    ax.annotate(f"ridge {ridge:.0f} FLOP/B", (ridge, peak_flops / 1e9),
                xytext=(4, -14), textcoords="offset points", fontsize=8,
                color="0.3")
    if len(points) > len(SERIES_STYLES):
        raise ValueError(f"at most {len(SERIES_STYLES)} points, got "
                         f"{len(points)}")
    marks = zip(points.items(), SERIES_STYLES[:len(points)], strict=True)
    for (name, (intensity, rate)), style in marks:
        ax.plot(intensity, rate / 1e9, linestyle="none", markersize=7,
                marker=style["marker"], color=style["color"])
        ax.annotate(name, (intensity, rate / 1e9), xytext=(6, 4),
                    textcoords="offset points", fontsize=8,
                    color=style["color"])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(_("arithmetic intensity (FLOP per byte moved)"))
    ax.set_ylabel("GFLOP/s")
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3, which="both")
    return ax


def show_block_schedule(
    schedule: Sequence[tuple[slice, slice]],
    num_queries: int,
    num_keys: int,
    allowed: torch.Tensor | np.ndarray | None = None,
    *,
    ax: plt.Axes | None = None,
    title: str | None = None,
    legend: bool = True,
) -> Figure:
    """Draw which scores a blockwise computation visits: one rectangle per
    ``(keys, rows)`` block of ``schedule``, on the ``(num_queries,
    num_keys)`` grid of scores.

    Three shades: scores never computed (a skipped block), computed but
    masked (``allowed`` False there: work spent for nothing), computed and
    used. Without ``allowed`` every computed score is used. Returns the
    figure (drawn into ``ax`` when given); ``legend=False`` leaves out the
    key to the shades (for all panels but one of a row).
    """
    computed = np.zeros((num_queries, num_keys), dtype=bool)
    for keys, rows in schedule:
        computed[rows, keys] = True
    used = computed.copy()
    if allowed is not None:
        mask = _as_numpy(allowed).astype(bool)
        if mask.shape != computed.shape:
            raise ValueError(f"allowed has shape {mask.shape}, the scores "
                             f"({num_queries}, {num_keys})")
        used &= mask
    shade = computed.astype(int) + used.astype(int)
    colours = ("#f2f2f2", "#9ecae1", "#08519c")
    if ax is None:
        _fig, ax = plt.subplots(figsize=(3.6, 3.6 * min(num_queries / num_keys,
                                                     1.5) + 0.9),
                             layout="constrained")
    ax.imshow(shade, cmap=ListedColormap(colours), vmin=0, vmax=2,
              interpolation="nearest", aspect="auto")
    for keys, rows in schedule:
        ax.add_patch(Rectangle((keys.start - 0.5, rows.start - 0.5),
                               keys.stop - keys.start, rows.stop - rows.start,
                               fill=False, edgecolor="black", linewidth=1))
    ax.set_xlabel(_("keys"))
    ax.set_ylabel(_("queries"))
    if title:
        ax.set_title(title)
    if not legend:
        return ax.figure
    names = ("not computed", "computed, masked", "computed, used")
    ax.legend(handles=[Patch(facecolor=c, edgecolor="0.4", label=n)
                       for c, n in zip(colours, names, strict=True)],
              loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3,
              fontsize=7, frameon=False, handlelength=1.2)
    return ax.figure
