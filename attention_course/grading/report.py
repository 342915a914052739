"""A class at a glance: the distribution of scores per exercise, as a figure and a table.

``attention-course report GRADES_DIR [--out scores.png]`` draws, for every exercise in a
gradebook folder, each student's score (a dot) over a box of the quartiles, and prints
the count, mean, median and range per exercise.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attention_course.grading.results import _columns
from attention_course.i18n import _


def scores_by_exercise(records: Mapping[Any, Mapping[str, Any]]
                       ) -> dict[str, tuple[list[int], int]]:
    """``{exercise: (scores, max_score)}`` over the records that name an exercise."""
    found: dict[str, tuple[list[int], int]] = {}
    for r in records.values():
        if r.get("exercise"):
            scores, top = found.get(r["exercise"], ([], 0))
            found[r["exercise"]] = ([*scores, r["score"]], max(top, r["max_score"]))
    return dict(sorted(found.items()))


def summary(records: Mapping[Any, Mapping[str, Any]]) -> str:
    """A table: per exercise, how many were graded, and the mean, median and range."""
    rows = [(_("exercise"), _("graded"), _("mean"), _("median"), _("range"))]
    for exercise, (scores, top) in scores_by_exercise(records).items():
        rows.append((exercise, str(len(scores)), f"{statistics.mean(scores):.1f}/{top}",
                     f"{statistics.median(scores):g}/{top}", f"{min(scores)}-{max(scores)}"))
    widths = [max(_columns(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c + " " * (w - _columns(c)) for c, w in
                               zip(r, widths, strict=True)).rstrip() for r in rows)


def score_figure(records: Mapping[Any, Mapping[str, Any]], path: Path) -> Path:
    """Draw the scores of every exercise (percent of its points) into ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from attention_course.plotting import safe_text

    found = scores_by_exercise(records)
    if not found:
        raise ValueError("the gradebook holds no graded exercise")
    fig, ax = plt.subplots(figsize=(max(5.0, 1.1 * len(found) + 2), 3.8),
                           layout="constrained")
    rng = np.random.default_rng(0)  # the dots' sideways jitter only
    shares = [100 * np.array(scores) / max(top, 1) for scores, top in found.values()]
    ax.boxplot(shares, widths=0.5, showfliers=False,
               medianprops={"color": "#1f5fa8", "linewidth": 2})
    for i, share in enumerate(shares, start=1):
        ax.scatter(i + rng.uniform(-0.15, 0.15, len(share)), share, s=14, alpha=0.7,
                   color="#c0392b", zorder=3)
        ax.annotate(f"n = {len(share)}", (i, 103), ha="center", fontsize=8)
    ax.set_xticks(range(1, len(found) + 1), [e.split("_", 1)[0] for e in found])
    ax.set(ylim=(-5, 110), xlabel=safe_text(_("exercise")),
           ylabel=safe_text(_("score (% of the points)")),
           title=safe_text(_("Scores per exercise")))
    ax.grid(axis="y", alpha=0.3)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
