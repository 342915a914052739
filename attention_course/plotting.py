"""Figures shared by every chapter: attention heatmaps, loss curves,
CJK-aware labels.

The course's seed material is Chinese, so token labels are often Chinese.
Matplotlib draws them only with a CJK font; :func:`cjk_font_name` finds one if
the machine has one, and :func:`safe_labels` falls back to position labels
(``#0``, ``#1``, ...) instead of drawing empty boxes when it has none.
"""

from __future__ import annotations

import functools
import logging
import re
import warnings
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib import font_manager
from matplotlib.figure import Figure

logger = logging.getLogger(__name__)

_CJK_FAMILIES = (
    "Noto Sans CJK SC",
    "Noto Sans CJK JP",
    "Noto Serif CJK SC",
    "Source Han Sans SC",
    "WenQuanYi Micro Hei",
    "WenQuanYi Zen Hei",
    "Droid Sans Fallback",
    "AR PL UMing CN",
    "SimHei",
    "Microsoft YaHei",
    "PingFang SC",
    "Heiti SC",
    "Arial Unicode MS",
)
_CJK_RE = re.compile(r"[\u2e80-\u9fff\uf900-\ufaff\uff00-\uffef]")


@functools.lru_cache(maxsize=1)
def cjk_font_name() -> str | None:
    """Name of an installed font that has Chinese glyphs, or ``None``.

    When one is found it is added to matplotlib's sans-serif fallback list, so
    that labels mixing Latin and Chinese text render without empty boxes.
    """
    installed = {f.name for f in font_manager.fontManager.ttflist}
    for family in _CJK_FAMILIES:
        if family in installed:
            _add_fallback_font(family)
            return family
    return None


def _add_fallback_font(family: str) -> None:
    """Let matplotlib fall back to ``family`` for glyphs its default
    font lacks."""
    families = list(plt.rcParams["font.family"])
    if family not in families:
        plt.rcParams["font.family"] = [*families, family]


cjk_font_name()


def has_cjk(text: str) -> bool:
    """Whether ``text`` holds a Chinese, Japanese or Korean character."""
    return bool(_CJK_RE.search(str(text)))


def safe_labels(labels: Sequence[str] | None) -> list[str] | None:
    """Labels that this machine can draw.

    Labels are returned unchanged unless some hold CJK characters and no CJK
    font is installed; then every label becomes its position (``#0``, ``#1``,
    ...), and a single log message says why.
    """
    if labels is None:
        return None
    labels = [str(label) for label in labels]
    if any(has_cjk(label) for label in labels) and cjk_font_name() is None:
        _warn_no_cjk_font()
        return [f"#{i}" for i in range(len(labels))]
    return labels


@functools.lru_cache(maxsize=1)
def _warn_no_cjk_font() -> None:
    logger.info(
        "No CJK font found: Chinese labels are shown as positions "
        "(#0, #1, ...). Install one (e.g. Debian's fonts-noto-cjk) to see "
        "the words."
    )


def safe_text(text: str, fallback: str = "") -> str:
    """``text`` if it can be drawn here, else ``fallback``
    (for titles and captions)."""
    if has_cjk(text) and cjk_font_name() is None:
        _warn_no_cjk_font()
        return fallback
    return text


def _as_numpy(weights: torch.Tensor | np.ndarray) -> np.ndarray:
    if isinstance(weights, torch.Tensor):
        return weights.detach().to("cpu", torch.float32).numpy()
    return np.asarray(weights, dtype=np.float32)


def show_heatmaps(
    weights: torch.Tensor | np.ndarray,
    *,
    xlabels: Sequence[str] | None = None,
    ylabels: Sequence[str] | None = None,
    xlabel: str = "Keys",
    ylabel: str = "Queries",
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
    scale and one colour bar.
    """
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
            fig.colorbar(image, ax=axes, shrink=0.8, label="weight")
    return fig


def plot_losses(
    histories: dict[str, Sequence[float]] | Sequence[float],
    *,
    xlabel: str = "step",
    ylabel: str = "loss",
    log: bool = False,
    smooth: int = 1,
    title: str | None = None,
) -> Figure:
    """Plot one or several loss histories (a list, or ``{name: list}``)
    and return the figure.

    ``smooth`` > 1 draws a running mean over that many steps beside the raw
    curve.
    """
    if not isinstance(histories, dict):
        histories = {"loss": histories}
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    for name, values in histories.items():
        y = np.asarray(list(values), dtype=float)
        if smooth > 1 and len(y) >= smooth:
            line = ax.plot(y, alpha=0.3)[0]
            kernel = np.ones(smooth) / smooth
            ax.plot(np.arange(smooth - 1, len(y)),
                    np.convolve(y, kernel, mode="valid"),
                    color=line.get_color(), label=name)
        else:
            ax.plot(y, label=name)
    if log:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    if len(histories) > 1 or next(iter(histories)) != "loss":
        ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


# Okabe and Ito's palette: told apart with any colour vision.
RUN_COLORS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9",
              "#D55E00", "#000000")
RUN_STYLES = (("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"))


def plot_runs(
    curves: dict[str, Sequence[Sequence[float]]],
    *,
    xlabel: str = "epoch",
    ylabel: str = "test accuracy",
    title: str | None = None,
    chance: float | None = None,
    ax: plt.Axes | None = None,
) -> Figure:
    """Curves of several runs (seeds) per variant: each run thin, the mean
    thick.

    ``curves`` maps a variant's name to its runs, each a sequence of values
    (one per epoch, counted from 1). Every variant has its own colour (a
    palette for colour-blind readers), line style and marker, and its mean is
    labelled at its right end as well as in the legend. ``chance`` draws a
    dotted grey line. Draws into ``ax`` when given; returns the figure.
    """
    if not curves:
        raise ValueError("curves is empty: give at least one variant")
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.0, 3.4), layout="constrained")
    else:
        fig = ax.figure
    ends = []
    for k, (name, runs) in enumerate(curves.items()):
        lengths = {len(r) for r in runs}
        if len(lengths) != 1 or 0 in lengths:
            raise ValueError(
                f"{name!r}: every run needs the same number of values, "
                f"got runs of lengths {[len(r) for r in runs]}"
            )
        values = np.asarray([list(r) for r in runs], dtype=float)
        color = RUN_COLORS[k % len(RUN_COLORS)]
        style, marker = RUN_STYLES[k % len(RUN_STYLES)]
        x = np.arange(1, values.shape[1] + 1)
        for run in values:
            ax.plot(x, run, color=color, linestyle=style, alpha=0.35, lw=0.8)
        mean = values.mean(axis=0)
        ax.plot(x, mean, color=color, linestyle=style, marker=marker,
                markersize=4, lw=2,
                label=f"{name} (mean of {len(values)})")
        ends.append((mean[-1], x[-1], name, color))
    # Name each mean at its right end, nudging names apart so none overlap.
    low, high = ax.get_ylim()
    gap, placed = 0.06 * (high - low), []
    for y, *_ in sorted(ends):
        placed.append(max(y, placed[-1] + gap) if placed else y)
    shift = max(0.0, placed[-1] - (high - gap / 2))      # keep inside the axes
    for (y, x_end, name, color), text_y in zip(sorted(ends), placed,
                                               strict=True):
        ax.annotate(name, (x_end, y),
                    xytext=(x_end + 0.03 * x_end, text_y - shift),
                    va="center", color=color, fontsize=8)
    ax.set_ylim(low, high)
    if chance is not None:
        right = max(x_end for _, x_end, _, _ in ends)
        ax.axhline(chance, color="grey", linestyle=":", lw=1)
        ax.annotate("chance", (right, chance), xytext=(0, 2),
                    textcoords="offset points", ha="right", va="bottom",
                    color="grey", fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.margins(x=0.14)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
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
    from matplotlib.patches import Rectangle

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
