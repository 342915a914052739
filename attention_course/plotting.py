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
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib import font_manager
from matplotlib.axes import Axes
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from attention_course.i18n import _

if TYPE_CHECKING:
    from attention_course.data.regression import RegressionData

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


def plot_losses(
    histories: dict[str, Sequence[float]] | Sequence[float],
    *,
    xlabel: str | None = None,
    ylabel: str | None = None,
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
    ax.set_xlabel(_("step") if xlabel is None else xlabel)
    ax.set_ylabel(_("loss") if ylabel is None else ylabel)
    if title:
        ax.set_title(title)
    if len(histories) > 1 or next(iter(histories)) != "loss":
        ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


# Colour-blind-safe colours (Okabe and Ito), each prediction also with its
# own line style, so that no curve is told apart by colour alone.
FIT_STYLES = (
    ("#D55E00", "-"),
    ("#0072B2", "--"),
    ("#CC79A7", "-."),
    ("#009E73", ":"),
)


def plot_regression_fit(
    ax: Axes,
    data: RegressionData,
    predictions: torch.Tensor | Mapping[str, torch.Tensor] | None = None,
    *,
    title: str | None = None,
    held_out: bool = False,
    legend: bool = True,
) -> Axes:
    """Draw chapter 1's regression data on ``ax`` and return it.

    The noiseless curve (dotted, black), the training pairs (dots), the
    held-out pairs if ``held_out`` (crosses) and the prediction curves at
    ``data.x_test``: one ``(n_test,)`` tensor (labelled "prediction") or
    ``{label: tensor}``, each in its own colour and line style.
    """
    if isinstance(predictions, torch.Tensor):
        predictions = {"prediction": predictions}
    predictions = dict(predictions or {})
    if len(predictions) > len(FIT_STYLES):
        raise ValueError(
            f"at most {len(FIT_STYLES)} prediction curves, got "
            f"{len(predictions)}"
        )
    ax.plot(data.x_test, data.truth_test, color="black", ls=":", lw=1.2,
            label=_("true curve"))
    ax.scatter(data.x_train, data.y_train, s=14, color="#56B4E9",
               edgecolors="#0072B2", linewidths=0.5,
               label=_("training pairs $(x_i, y_i)$"))
    if held_out:
        ax.scatter(data.x_test, data.y_test, s=16, marker="x", color="0.4",
                   linewidths=1, label=_("held-out pairs"))
    for (label, pred), (colour, style) in zip(
        predictions.items(), FIT_STYLES, strict=False
    ):
        y = _as_numpy(pred)
        if y.shape != tuple(data.x_test.shape):
            raise ValueError(
                f"predictions {label!r} must have shape "
                f"{tuple(data.x_test.shape)} (one per test input), got "
                f"{y.shape}"
            )
        ax.plot(data.x_test, y, color=colour, ls=style, lw=2, label=label)
    ax.set_xlabel("$x$")
    ax.set_ylabel("$y$")
    if title:
        ax.set_title(title)
    if legend:
        ax.legend(fontsize=7, loc="upper right")
    return ax


def plot_query_weights(
    ax: Axes,
    keys: torch.Tensor,
    weights: torch.Tensor,
    query: float,
) -> Axes:
    """One query's attention weights ``(Nk,)`` as bars over its scalar keys
    ``(Nk,)``, with the query marked by a dotted line. Returns ``ax``."""
    k, w = _as_numpy(keys), _as_numpy(weights)
    if k.ndim != 1 or w.shape != k.shape:
        raise ValueError(
            f"keys and weights must both have shape (Nk,); got keys "
            f"{k.shape} and weights {w.shape}"
        )
    ax.bar(k, w, width=0.05, color="#E69F00", edgecolor="#8C5A00",
           linewidth=0.5)
    ax.axvline(query, color="black", lw=1, ls=":")
    ax.set_xlabel(_("key $x_i$"))
    ax.set_ylabel(_("weight {alpha}").format(
        alpha=f"$\\alpha({query:g}, x_i)$"))
    return ax


def plot_runs(
    runs: Mapping[str, Sequence[float]],
    *,
    xlabel: str,
    reference: float | None = None,
    reference_label: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """Every run of every method as a dot (one row per method, top to
    bottom in the order given), with the mean and one standard deviation
    either side as a black bar. ``reference`` draws a dotted vertical line
    (a noise floor, say). Returns the figure."""
    if not runs:
        raise ValueError("runs must hold at least one method")
    if ax is None:
        _fig, ax = plt.subplots(figsize=(6.5, 0.45 * len(runs) + 1.2))
    jitter = np.random.default_rng(0)
    for row, (name, values) in enumerate(runs.items()):
        v = np.asarray(list(values), dtype=float)
        if v.size == 0:
            raise ValueError(f"method {name!r} has no runs")
        y = row + jitter.uniform(-0.15, 0.15, v.size)
        ax.scatter(v, y, s=16, color="#0072B2", alpha=0.6,
                   edgecolors="none")
        spread = v.std(ddof=1) if v.size > 1 else 0.0
        ax.errorbar(v.mean(), row, xerr=spread, fmt="D", color="black",
                    ms=5, capsize=4, lw=1.5)
    ax.set_yticks(range(len(runs)), list(runs))
    if not ax.yaxis_inverted():  # an axis shared with an earlier call
        ax.invert_yaxis()
    if reference is not None:
        ax.axvline(reference, color="0.4", ls=":", label=reference_label)
        if reference_label:
            ax.legend(fontsize=8, loc="lower right")
    ax.set_xlabel(xlabel)
    ax.grid(axis="x", alpha=0.3)
    fig = ax.figure
    fig.tight_layout()
    return fig


# Okabe and Ito's colours, told apart by colour-blind readers too (blue,
# orange, bluish green, reddish purple, sky blue, vermillion), with a line
# style and a marker per series, so that series differ by more than colour.
COLOURS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00")
LINE_STYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P")


def plot_curves(
    runs: Mapping[str, Sequence[tuple[Sequence[float], Sequence[float]]]],
    *,
    xlabel: str | None = None,
    ylabel: str | None = None,
    log: bool = False,
    title: str | None = None,
) -> Figure:
    """Curves of several runs (seeds) of several conditions, and the figure.

    ``runs`` maps a condition's name to its runs, each ``(x, y)`` (steps and
    values). The runs of one condition share a colour, a line style and a
    marker; each condition is named at the end of its curves (the mean of
    its runs' last values) as well as in the legend.
    """
    if not runs or any(len(curves) == 0 for curves in runs.values()):
        raise ValueError("runs must map each condition to at least one "
                         "(x, y) run")
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for i, (name, curves) in enumerate(runs.items()):
        style = dict(color=COLOURS[i % len(COLOURS)],
                     linestyle=LINE_STYLES[i % len(LINE_STYLES)],
                     marker=MARKERS[i % len(MARKERS)],
                     markersize=3.5, linewidth=1.2, alpha=0.85)
        ends = []
        for k, (x, y) in enumerate(curves):
            x, y = np.asarray(x, float), np.asarray(y, float)
            if x.shape != y.shape or x.ndim != 1:
                raise ValueError(
                    f"run {k} of {name!r}: x and y must be 1-D and of one "
                    f"length, got shapes {x.shape} and {y.shape}"
                )
            ax.plot(x, y, label=name if k == 0 else None, **style)
            ends.append((x[-1], y[-1]))
        end_x = max(e[0] for e in ends)
        end_y = float(np.mean([e[1] for e in ends]))
        ax.annotate(name, (end_x, end_y), xytext=(6, 0),
                    textcoords="offset points", va="center", fontsize=8,
                    color=style["color"])
    ax.set(xlabel=_("step") if xlabel is None else xlabel,
           ylabel=_("validation loss") if ylabel is None else ylabel,
           title=title or "",
           yscale="log" if log else "linear")
    ax.margins(x=0.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    return fig


def plot_mean_std(
    curves: Mapping[str, torch.Tensor | np.ndarray | Sequence],
    *,
    x: Sequence[float] | Mapping[str, Sequence[float]] | None = None,
    xlabel: str = "",
    ylabel: str = "",
    title: str | None = None,
    mark: float | None = None,
    mark_label: str = "",
    ylim: tuple[float, float] | None = None,
    markevery: int | None = None,
    smooth: int = 1,
    log: bool = False,
    legend: bool = True,
    ax: plt.Axes | None = None,
) -> Figure:
    """Curves over several runs (seeds), ``{name: values (runs, points)}``:
    the mean as a line, mean +- one (sample) standard deviation as a band,
    and every run faintly.

    Each name gets its own colour (:data:`COLOURS`), marker and line style,
    so that curves stay apart without colour, and a legend entry
    that says how many runs it has. ``x`` gives the points' positions, one
    sequence for every name or ``{name: positions}`` (default 1, 2, ...);
    ``smooth`` > 1 first takes a running mean of each run over that many
    points (for noisy per-step losses); ``log`` draws the values on a log
    axis; ``mark`` draws a dotted vertical line there, labelled
    ``mark_label`` at its foot. Draws into ``ax`` when given; returns the
    figure.
    """
    if ax is None:
        fig, ax = plt.subplots(figsize=(7.5, 4.0), layout="constrained")
    else:
        fig = ax.figure
    for index, (name, values) in enumerate(curves.items()):
        y = _as_numpy(values)
        if y.ndim == 1:
            y = y[None]
        if y.ndim != 2:
            raise ValueError(f"curves[{name!r}] must be (runs, points); got "
                             f"shape {y.shape}")
        xs = np.arange(1, y.shape[1] + 1) if x is None else np.asarray(
            x[name] if isinstance(x, Mapping) else x, dtype=float)
        if len(xs) != y.shape[1]:
            raise ValueError(f"x has {len(xs)} points but curves[{name!r}] "
                             f"has {y.shape[1]}")
        if smooth > 1 and y.shape[1] >= smooth:
            kernel = np.ones(smooth) / smooth
            y = np.stack([np.convolve(run, kernel, mode="valid")
                          for run in y])
            xs = xs[smooth - 1:]
        colour = COLOURS[index % len(COLOURS)]
        style = LINE_STYLES[index % len(LINE_STYLES)]
        marker = MARKERS[index % len(MARKERS)]
        mean = y.mean(0)
        std = y.std(0, ddof=1) if len(y) > 1 else np.zeros_like(mean)
        low = mean - std
        if log:  # a band reaching 0 or below cannot be drawn on a log axis
            low = np.maximum(low, mean / 10)
        ax.fill_between(xs, low, mean + std, color=colour, alpha=0.2,
                        linewidth=0)
        for run in y:
            ax.plot(xs, run, color=colour, alpha=0.25, linewidth=0.8)
        ax.plot(xs, mean, color=colour, linestyle=style, marker=marker,
                markevery=markevery, markersize=5,
                label=f"{name} ({len(y)} runs)" if len(y) > 1 else name)
    if mark is not None:
        ax.axvline(mark, color="0.4", linestyle=":", linewidth=1.2)
        if mark_label:
            ax.annotate(mark_label, (mark, 0),
                        xycoords=("data", "axes fraction"), xytext=(4, 4),
                        textcoords="offset points", ha="left", va="bottom",
                        fontsize=9, color="0.3")
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(safe_text(title))
    if log:
        ax.set_yscale("log")
    ax.grid(alpha=0.3)
    if legend:
        ax.legend(fontsize=9)
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


# ------------------------------------------------------------------------------
# Measurements against a size, rooflines and block schedules (chapter 10)
# ------------------------------------------------------------------------------

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
