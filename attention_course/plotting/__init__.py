"""Figures shared by every chapter, one module per kind of figure.

- :mod:`~attention_course.plotting.labels`: CJK-aware labels (the course's
  seed material is Chinese; without a CJK font, labels fall back to
  positions).
- :mod:`~attention_course.plotting.heatmaps`: attention heatmaps, alignments
  and image attention maps.
- :mod:`~attention_course.plotting.curves`: loss curves, regression fits and
  results over seeds, in colour-blind-safe styles.
- :mod:`~attention_course.plotting.measurements`: measurements against a size,
  rooflines and block schedules (chapter 10).

Every figure is importable from here: ``from attention_course.plotting import
show_heatmaps``.
"""

from attention_course.plotting.curves import (
    COLOURS,
    FIT_STYLES,
    LINE_STYLES,
    MARKERS,
    plot_curves,
    plot_losses,
    plot_mean_std,
    plot_query_weights,
    plot_regression_fit,
    plot_runs,
)
from attention_course.plotting.heatmaps import (
    show_alignments,
    show_channels,
    show_heatmaps,
)
from attention_course.plotting.labels import (
    cjk_font_name,
    has_cjk,
    safe_labels,
    safe_text,
)
from attention_course.plotting.measurements import (
    SERIES_STYLES,
    plot_labelled_lines,
    plot_roofline,
    show_block_schedule,
)

__all__ = [
    "COLOURS",
    "FIT_STYLES",
    "LINE_STYLES",
    "MARKERS",
    "SERIES_STYLES",
    "cjk_font_name",
    "has_cjk",
    "plot_curves",
    "plot_labelled_lines",
    "plot_losses",
    "plot_mean_std",
    "plot_query_weights",
    "plot_regression_fit",
    "plot_roofline",
    "plot_runs",
    "safe_labels",
    "safe_text",
    "show_alignments",
    "show_block_schedule",
    "show_channels",
    "show_heatmaps",
]
