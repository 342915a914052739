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


# Line styles and markers that tell curves apart without their colours
_STYLES = ("-", "--", ":", "-.")
_MARKERS = ("o", "s", "^", "D", "v", "P")


def plot_over_seeds(
    runs: dict[str, Sequence[Sequence[float]]],
    x: Sequence[float] | dict[str, Sequence[float]] | None = None,
    *,
    ax: plt.Axes | None = None,
    smooth: int = 1,
    markers: bool = False,
    xlabel: str = "step",
    ylabel: str = "loss",
    title: str | None = None,
    log: bool = False,
    legend: bool = True,
) -> Figure:
    """Draw each named group of runs (for example one per random seed) as its
    mean with a band of one standard deviation, and return the figure.

    ``runs[name]`` is ``(n_runs, n_points)``: every run of a group has the same
    length. ``x`` gives the points' positions (one sequence for all groups or
    one per group; default ``0 .. n_points - 1``). ``smooth`` > 1 first takes a
    running mean of each run over that many points (for noisy per-step
    losses). Each group gets its own colour, line style and (with ``markers``)
    marker, and the legend says how many runs it holds. Pass ``ax`` to draw
    into an existing panel.
    """
    if ax is None:
        fig, ax = plt.subplots(figsize=(5.5, 3.2), layout="constrained")
    fig = ax.figure
    for k, (name, group) in enumerate(runs.items()):
        values = np.asarray(group, dtype=float)
        if values.ndim != 2 or values.shape[0] < 1 or values.shape[1] < 1:
            raise ValueError(
                f"runs[{name!r}] must be (n_runs, n_points) with at least one "
                f"of each, got shape {values.shape}"
            )
        xs = np.arange(values.shape[1], dtype=float)
        if x is not None:
            xs = np.asarray(x[name] if isinstance(x, dict) else x, dtype=float)
        if xs.shape != values.shape[1:]:
            raise ValueError(
                f"x has {xs.shape[0]} points but runs[{name!r}] has "
                f"{values.shape[1]}"
            )
        if smooth > 1 and values.shape[1] >= smooth:
            kernel = np.ones(smooth) / smooth
            values = np.stack([np.convolve(v, kernel, mode="valid")
                               for v in values])
            xs = xs[smooth - 1:]
        mean, std = values.mean(0), values.std(0)
        line = ax.plot(
            xs, mean, linestyle=_STYLES[k % len(_STYLES)],
            marker=_MARKERS[k % len(_MARKERS)] if markers else None,
            label=f"{name} ({values.shape[0]} runs)"
            if values.shape[0] > 1 else name,
        )[0]
        if values.shape[0] > 1:
            low = mean - std
            if log:  # a band reaching 0 or below cannot be drawn on a log axis
                low = np.maximum(low, mean / 10)
            ax.fill_between(xs, low, mean + std, color=line.get_color(),
                            alpha=0.2, linewidth=0)
    if log:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    if legend:
        ax.legend()
    ax.grid(alpha=0.3)
    return fig


def show_alignments(
    maps: Sequence[torch.Tensor | np.ndarray],
    xlabels: Sequence[Sequence[str]],
    ylabels: Sequence[Sequence[str]],
    titles: Sequence[str],
    *,
    xlabel: str = "source",
    ylabel: str = "output",
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
            ax.set_xlabel(xlabel)
            ax.set_title(safe_text(titles[i], f"panel {i}"))
        axes[0, 0].set_ylabel(ylabel)
        fig.colorbar(image, ax=axes, shrink=0.8, label="weight")
    return fig
