"""Labels that can be drawn here: the course's seed material is Chinese, so
token labels are often Chinese.

Matplotlib draws them only with a CJK font; :func:`cjk_font_name` finds one if
the machine has one, and :func:`safe_labels` falls back to position labels
(``#0``, ``#1``, ...) instead of drawing empty boxes when it has none;
:func:`safe_text` does the same for titles and captions.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
from matplotlib import font_manager

if TYPE_CHECKING:
    pass

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
