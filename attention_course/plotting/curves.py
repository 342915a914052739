"""Curves over training and over runs: loss curves (:func:`plot_losses`,
:func:`plot_curves`), chapter 1's regression fits and query weights
(:func:`plot_regression_fit`, :func:`plot_query_weights`, :func:`plot_runs`)
and results over seeds, mean and spread (:func:`plot_mean_std`).

:data:`COLOURS` are Okabe and Ito's colour-blind-safe colours; each series also
has a line style (:data:`LINE_STYLES`) and a marker (:data:`MARKERS`), so that
no curve is told apart by colour alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from attention_course.i18n import _
from attention_course.plotting.heatmaps import _as_numpy
from attention_course.plotting.labels import safe_text

if TYPE_CHECKING:
    from attention_course.data.regression import RegressionData


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
