"""Heatmaps of attention weights: :func:`show_heatmaps` (a grid of weight
matrices, every chapter), :func:`show_alignments` (chapter 4's source-target
alignments, as in Bahdanau et al. 2015) and :func:`show_channels` (chapter 7's
images with their attention maps).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from attention_course.i18n import _
from attention_course.plotting.labels import safe_labels, safe_text

if TYPE_CHECKING:
    pass


def _as_numpy(weights: torch.Tensor | np.ndarray) -> np.ndarray:
    if isinstance(weights, torch.Tensor):
        return weights.detach().to("cpu", torch.float32).numpy()
    return np.asarray(weights, dtype=np.float32)


def show_heatmaps(
    weights: torch.Tensor | np.ndarray,
    *,
    xlabels: Sequence[str] | None = None,
    ylabels: Sequence[str] | None = None,
    xlabel: str | None = None,
    ylabel: str | None = None,
    titles: Sequence[str] | None = None,
    suptitle: str | None = None,
    cmap: str = "Reds",
    vmin: float | None = 0.0,
    vmax: float | None = None,
    annotate: bool = False,
    colorbar: bool = True,
    panel_size: float = 2.8,
) -> Figure:
    """Draw attention weights as heatmaps and return the figure.

    ``weights`` is ``(Nq, Nk)`` for one map, ``(n, Nq, Nk)`` for a row of maps
    (for example one per head) or ``(rows, cols, Nq, Nk)`` for a grid (for
    example layers x heads). Queries run down the rows, keys along the columns.
    ``xlabels`` and ``ylabels`` name the keys and queries (tokens, say);
    ``annotate`` writes each weight in its cell. All panels share one colour
    scale and one colour bar. The axes are labelled "Keys" and "Queries" (in
    the language of :mod:`attention_course.i18n`) unless ``xlabel`` and
    ``ylabel`` say otherwise.
    """
    xlabel = _("Keys") if xlabel is None else xlabel
    ylabel = _("Queries") if ylabel is None else ylabel
    w = _as_numpy(weights)
    if w.ndim == 2:
        w = w[None, None]
    elif w.ndim == 3:
        w = w[None]
    elif w.ndim != 4:
        raise ValueError(
            f"weights must have 2, 3 or 4 dimensions ((Nq, Nk), (n, Nq, Nk) or "
            f"(rows, cols, Nq, Nk)); got shape {tuple(w.shape)}"
        )
    rows, cols, nq, nk = w.shape
    if xlabels is not None and len(xlabels) != nk:
        raise ValueError(
            f"xlabels has {len(xlabels)} entries but weights have "
            f"Nk={nk} keys"
        )
    if ylabels is not None and len(ylabels) != nq:
        raise ValueError(
            f"ylabels has {len(ylabels)} entries but weights have "
            f"Nq={nq} queries"
        )
    if titles is not None and len(titles) != rows * cols:
        raise ValueError(
            f"titles has {len(titles)} entries for {rows * cols} panels"
        )
    xl, yl = safe_labels(xlabels), safe_labels(ylabels)
    vmax = float(w.max()) if vmax is None else vmax
    aspect = min(max(nq / max(nk, 1), 0.5), 1.5)
    width = panel_size * cols + (0.8 if colorbar else 0.0)
    fig, axes = plt.subplots(
        rows,
        cols,
        figsize=(width, panel_size * rows * aspect + 0.6),
        squeeze=False,
        layout="constrained",
        sharex=True,
        sharey=True,
    )
    image = None
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Glyph .* missing from")
        for r in range(rows):
            for c in range(cols):
                ax = axes[r, c]
                image = ax.imshow(w[r, c], cmap=cmap, vmin=vmin, vmax=vmax,
                                  aspect="auto")
                if xl is not None:
                    ax.set_xticks(range(nk), xl,
                                  rotation=90 if max(map(len, xl)) > 3 else 0)
                if yl is not None:
                    ax.set_yticks(range(nq), yl)
                if r == rows - 1:
                    ax.set_xlabel(xlabel)
                if c == 0:
                    ax.set_ylabel(ylabel)
                if titles is not None:
                    ax.set_title(safe_text(titles[r * cols + c],
                                           f"panel {r * cols + c}"))
                if annotate:
                    for i in range(nq):
                        for j in range(nk):
                            value = w[r, c, i, j]
                            dark = value > 0.6 * (vmax if vmax else 1.0)
                            ax.text(j, i, f"{value:.2f}", ha="center",
                                    va="center", fontsize=7,
                                    color="white" if dark else "black")
        if suptitle:
            fig.suptitle(safe_text(suptitle))
        if colorbar and image is not None:
            fig.colorbar(image, ax=axes, shrink=0.8, label=_("weight"))
    return fig


def show_alignments(
    maps: Sequence[torch.Tensor | np.ndarray],
    xlabels: Sequence[Sequence[str]],
    ylabels: Sequence[Sequence[str]],
    titles: Sequence[str],
    *,
    xlabel: str | None = None,
    ylabel: str | None = None,
    panel_size: float = 3.5,
    cmap: str = "viridis",
) -> Figure:
    """Attention maps of different shapes side by side, each with its own
    labels (for example two models' translations of one sentence), on one
    colour scale from 0 to 1.

    ``maps[i]`` is ``(Nq_i, Nk_i)``: queries (``ylabels[i]``) down the rows,
    keys (``xlabels[i]``) along the columns.
    """
    if not len(maps) == len(xlabels) == len(ylabels) == len(titles) > 0:
        raise ValueError(
            f"need as many maps, xlabels, ylabels and titles (at least one), "
            f"got {len(maps)}, {len(xlabels)}, {len(ylabels)}, {len(titles)}"
        )
    arrays = [_as_numpy(m) for m in maps]
    for i, w in enumerate(arrays):
        if w.ndim != 2 or w.shape != (len(ylabels[i]), len(xlabels[i])):
            raise ValueError(
                f"map {i} has shape {w.shape} but {len(ylabels[i])} ylabels "
                f"and {len(xlabels[i])} xlabels"
            )
    rows = max(w.shape[0] for w in arrays)
    aspect = min(max(rows / max(w.shape[1] for w in arrays), 0.5), 1.5)
    fig, axes = plt.subplots(
        1, len(arrays), squeeze=False, layout="constrained",
        figsize=(panel_size * len(arrays) + 0.8,
                 panel_size * aspect + 0.8),
    )
    image = None
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Glyph .* missing from")
        for i, (ax, w) in enumerate(zip(axes[0], arrays, strict=True)):
            image = ax.imshow(w, cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto")
            xl, yl = safe_labels(xlabels[i]), safe_labels(ylabels[i])
            ax.set_xticks(range(w.shape[1]), xl,
                          rotation=90 if max(map(len, xl)) > 3 else 0)
            ax.set_yticks(range(w.shape[0]), yl)
            ax.set_xlabel(_("source") if xlabel is None else xlabel)
            ax.set_title(safe_text(titles[i], f"panel {i}"))
        axes[0, 0].set_ylabel(_("output") if ylabel is None else ylabel)
        fig.colorbar(image, ax=axes, shrink=0.8, label=_("weight"))
    return fig


def show_channels(
    images: torch.Tensor,
    *,
    boxes: torch.Tensor | None = None,
    maps: torch.Tensor | None = None,
    channel_names: Sequence[str] | None = None,
    row_names: Sequence[str] | None = None,
    map_name: str = "map",
    suptitle: str | None = None,
    map_cmap: str = "viridis",
    box_color: str = "#E69F00",
    panel_size: float = 1.25,
) -> Figure:
    """Draw images channel by channel: one row per image, one column per
    channel, and a last column for ``maps`` when given.

    ``images (N, C, H, W)``, drawn in grey from 0 (black) to 1 (white);
    ``boxes (N, 4)``, ``(top, left, bottom, right)`` with bottom and right
    exclusive, outlined (orange, edged in black) on every panel of their row;
    ``maps (N, H, W)``, drawn with ``map_cmap`` (perceptually uniform) on one
    shared scale with a colour bar.
    """
    from matplotlib import patheffects

    x = _as_numpy(images)
    if x.ndim != 4:
        raise ValueError(
            f"images must be (N, C, H, W), got shape {tuple(x.shape)}"
        )
    n, c, h, w = x.shape
    m = None if maps is None else _as_numpy(maps)
    if m is not None and m.shape != (n, h, w):
        raise ValueError(
            f"maps must be (N, H, W) = {(n, h, w)}, got {tuple(m.shape)}"
        )
    if boxes is not None and tuple(boxes.shape) != (n, 4):
        raise ValueError(
            f"boxes must be (N, 4) = {(n, 4)}, got {tuple(boxes.shape)}"
        )
    if channel_names is not None and len(channel_names) != c:
        raise ValueError(
            f"channel_names has {len(channel_names)} names for {c} channels"
        )
    if row_names is not None and len(row_names) != n:
        raise ValueError(f"row_names has {len(row_names)} names for {n} rows")
    cols = c + (m is not None)
    fig, axes = plt.subplots(
        n, cols, figsize=(panel_size * cols + 0.9, panel_size * n + 0.5),
        squeeze=False, layout="constrained",
    )
    names = list(channel_names or [f"ch {i}" for i in range(c)])
    # A dark edge keeps the box visible on white pixels and yellow maps.
    outline = [patheffects.Stroke(linewidth=2.6, foreground="black"),
               patheffects.Normal()]
    image = None
    for i in range(n):
        panels = [(x[i, j], "gray", 0.0, 1.0) for j in range(c)]
        if m is not None:
            panels.append((m[i], map_cmap, 0.0, float(m.max())))
        for j, (panel, cmap, vmin, vmax) in enumerate(panels):
            ax = axes[i, j]
            shown = ax.imshow(panel, cmap=cmap, vmin=vmin, vmax=vmax)
            if j == c:
                image = shown
            if boxes is not None:
                top, left, bottom, right = (int(v) for v in boxes[i])
                ax.add_patch(Rectangle(
                    (left - 0.5, top - 0.5), right - left, bottom - top,
                    fill=False, edgecolor=box_color, lw=1.3,
                    path_effects=outline,
                ))
            ax.set_xticks([])
            ax.set_yticks([])
            if i == 0:
                ax.set_title(names[j] if j < c else map_name, fontsize=9)
        if row_names is not None:
            axes[i, 0].set_ylabel(row_names[i], fontsize=8)
    if image is not None:
        fig.colorbar(image, ax=axes[:, -1], shrink=0.8, label=map_name)
    if suptitle:
        fig.suptitle(safe_text(suptitle), fontsize=10)
    return fig
