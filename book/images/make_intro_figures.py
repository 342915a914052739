"""Draws the two figures of the introduction (book/intro.md) into this folder, in
English (``flashlight.png``) and in Chinese (``flashlight.zh_CN.png``: Sphinx's
``figure_language_filename`` picks it for the Chinese edition).

Run from the repository root: ``.venv/bin/python book/images/make_intro_figures.py``.
The PNGs are committed, so building the book does not need this script. Its words are
translated by the package's catalogs (``python scripts/i18n.py messages`` collects
them into ``attention_course/locales/zh_CN/LC_MESSAGES/figures.po``).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import FancyBboxPatch, Polygon, Rectangle  # noqa: E402

from attention_course.i18n import N_, _, using  # noqa: E402

HERE = Path(__file__).resolve().parent
LANGUAGES = {"en": "", "zh_CN": ".zh_CN"}  # language -> file name suffix
CABINETS = [N_("shoe cabinet"), N_("wardrobe"), N_("bedside table"), N_("bookshelf")]  # keys
CONTENTS = [N_("shoes"), N_("coats"), N_("a lamp"), N_("books")]  # the values
SCORES = np.array([3.0, 1.4, 0.8, 0.0])  # how well each key matches the query "my shoes"
WEIGHTS = np.exp(SCORES) / np.exp(SCORES).sum()
COLOURS = ["#d95f02", "#1b9e77", "#7570b3", "#e7298a"]


def flashlight(suffix: str) -> None:
    fig, ax = plt.subplots(figsize=(9, 6.0))
    ax.add_patch(Rectangle((0, -1.75), 10, 7.95, color="#1c2333"))
    ax.text(0.2, 5.95, _("a dark room"), color="#8a93a6", fontsize=10, va="top")
    torch_xy = np.array([5.0, 0.75])
    for i, (key, value, w) in enumerate(zip(CABINETS, CONTENTS, WEIGHTS, strict=True)):
        x0 = 0.45 + i * 2.4
        # The beam: its brightness is the attention weight of this cabinet.
        ax.add_patch(Polygon([torch_xy, (x0 + 0.1, 3.0), (x0 + 1.9, 3.0)], closed=True,
                             color="#ffe066", alpha=0.08 + 0.85 * w, lw=0))
        ax.add_patch(FancyBboxPatch((x0, 3.0), 2.0, 1.9, boxstyle="round,pad=0.02",
                                    fc="#6b4f3a", ec="#c9a27e", lw=1.5))
        ax.add_patch(Rectangle((x0 + 0.2, 3.2), 1.6, 0.8, fc="#3b2a1e", ec="#c9a27e"))
        ax.text(x0 + 1.0, 4.45, _(key), ha="center", va="center", color="white", fontsize=10,
                fontweight="bold")
        ax.text(x0 + 1.0, 3.6, _(value), ha="center", va="center", color="#ffd8a8", fontsize=10,
                style="italic")
        ax.text(x0 + 1.0, 5.25, _("weight {w}").format(w=f"{w:.2f}"), ha="center",
                color="#ffe066", fontsize=10)
    ax.add_patch(FancyBboxPatch((4.55, 0.25), 0.9, 0.5, boxstyle="round,pad=0.05", fc="#aaaaaa",
                                ec="white"))
    ax.text(5.0, 0.0, _('query: "my shoes"  (what you look for; it aims the beam)'),
            ha="center", va="top", color="white", fontsize=10)
    ax.text(9.8, -0.6, _("key = the label on the cabinet\n"
                         "value = what is inside\nbeam brightness = attention weight"),
            ha="right", va="top", color="#c7cede", fontsize=9, linespacing=1.5)
    ax.text(0.2, -0.6, _("soft attention: take from every cabinet,\n"
                         "in proportion to its light\n"
                         "hard attention: open only the brightest one"),
            ha="left", va="top", color="#c7cede", fontsize=9, linespacing=1.5)
    ax.set_xlim(0, 10)
    ax.set_ylim(-1.75, 6.2)
    ax.set_aspect("equal")
    ax.axis("off")
    fig.savefig(HERE / f"flashlight{suffix}.png", dpi=110, bbox_inches="tight", facecolor="white")
    plt.close(fig)


def _title(ax, words: str, formula: str) -> None:
    """A title of two lines: words, then a formula (apart, so that maths and Chinese
    words are never typeset in one string: matplotlib's maths has no CJK glyphs)."""
    ax.set_title(words, pad=24)
    ax.text(0.5, 1.02, formula, transform=ax.transAxes, ha="center", va="bottom",
            fontsize=12)


def three_steps(suffix: str) -> None:
    fig = plt.figure(figsize=(9, 6))
    grid = fig.add_gridspec(2, 2, height_ratios=[1.3, 1])
    axes = [fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1]), fig.add_subplot(grid[1, :])]
    y = np.arange(len(CABINETS))[::-1]
    axes[0].barh(y, SCORES, color=COLOURS)
    _title(axes[0], _("1. score each key"), "$a(\\mathbf{q}, \\mathbf{k}_i)$")
    axes[0].set_xlabel(_("score (any real number)"))
    axes[1].barh(y, WEIGHTS, color=COLOURS)
    _title(axes[1], _("2. normalise (softmax)"),
           "$\\alpha_i \\geq 0, \\quad \\alpha_1 + \\cdots + \\alpha_4 = 1$")
    axes[1].set_xlabel(_("attention weight"))
    axes[1].set_xlim(0, 1)
    for ax, numbers in ((axes[0], SCORES), (axes[1], WEIGHTS)):
        ax.set_yticks(y, [_(c) for c in CABINETS])
        for yi, n in zip(y, numbers, strict=True):
            ax.text(n + 0.02 * ax.get_xlim()[1], yi, f"{n:.2f}", va="center", fontsize=9)
        ax.set_xlim(0, ax.get_xlim()[1] * 1.15)
    left = 0.0
    ax = axes[2]
    for value, w, colour in zip(CONTENTS, WEIGHTS, COLOURS, strict=True):
        ax.barh(0, w, height=0.9, left=left, color=colour, edgecolor="white",
                label=f"{_(value)}: {w:.0%}")
        if w > 0.12:
            ax.text(left + w / 2, 0, f"{w:.0%}\n{_(value)}", ha="center", va="center",
                    color="white", fontsize=9, fontweight="bold")
        left += w
    ax.set_xlim(0, 1)
    ax.set_ylim(-1.1, 0.6)
    ax.legend(loc="lower center", ncol=4, fontsize=10, frameon=False)
    ax.set_yticks([])
    ax.set_xlabel(_("share of the output"))
    _title(ax, _("3. weighted sum of the values: mostly shoes"),
           "$\\alpha_1 \\mathbf{v}_1 + \\cdots + \\alpha_4 \\mathbf{v}_4$")
    fig.suptitle(_('The query "my shoes" against four cabinets'), fontsize=13)
    fig.tight_layout()
    fig.savefig(HERE / f"three_steps{suffix}.png", dpi=110, bbox_inches="tight", facecolor="white")
    plt.close(fig)


if __name__ == "__main__":
    for language, suffix in LANGUAGES.items():
        if language != "en":  # a font with Chinese glyphs as the fallback
            from attention_course import plotting

            plotting.cjk_font_name()
        with using(language):
            flashlight(suffix)
            three_steps(suffix)
