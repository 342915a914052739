"""What a chapter says about its own runs: numbers glued from the run, readings
checked in it.

A chapter's text states two kinds of things about an experiment. **Numbers**
("exact match 90.2%") come from the run: :meth:`Claims.glue` hands them to the
book (MyST-NB's ``glue``), and the text writes ``{glue:text}`name:.1%```.
**Readings** ("multi-head attention is ahead of multi-query attention") are
checked in the run, next to the sentence they guard, with
:meth:`Claims.check`, and with a margin against the spread over seeds (the
helpers below: :func:`separated`, :func:`paired`, :func:`growth_exponent`).

A reading that holds shows nothing. One that does not shows a plain notice
where it is checked, in Jupyter and on the rendered page (which reading, what
this run got, what the text says), and the run goes on: a learner's machine,
seeds or torch build may differ from the ones the text was checked on. The
book's tests fail on any such notice, so CI holds the book to its text, and
``make book`` lists them.

Seeds: :func:`attention_course.device.seed_everything` and
:func:`course_seeds` shift every seed by ``ATTENTION_COURSE_SEED_BASE``, so
the readings can be checked on other seeds than the ones they were written
on (``scripts/check_claims.py --seed-base 100``).

``ATTENTION_COURSE_CLAIMS_LOG`` names a file to which every reading is
appended as a line of JSON (held or not), for ``scripts/check_claims.py``.
"""

from __future__ import annotations

import html
import json
import math
import os
import platform
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from attention_course.device import seed_base, thread_count

LOG_ENV = "ATTENTION_COURSE_CLAIMS_LOG"
# the class of a notice on the rendered page, which the book's tests look for
NOTICE_CLASS = "claim-notice"
METADATA_KEY = "attention_course"

__all__ = [
    "Claims",
    "course_seeds",
    "growth_exponent",
    "mean_se",
    "notices_in_build",
    "paired",
    "separated",
]


def course_seeds(count: int, start: int = 0) -> tuple[int, ...]:
    """The seeds of an experiment's ``count`` runs: ``start``, ``start + 1``,
    ... shifted by ``ATTENTION_COURSE_SEED_BASE`` (default 0)."""
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    return tuple(seed_base() + start + i for i in range(count))


def _floats(values: Iterable[float] | torch.Tensor, name: str) -> torch.Tensor:
    x = torch.as_tensor(values, dtype=torch.float64).flatten()
    if x.numel() == 0:
        raise ValueError(f"{name} is empty")
    return x


def mean_se(values: Iterable[float] | torch.Tensor) -> tuple[float, float]:
    """Mean and standard error of the mean (0 for a single value)."""
    x = _floats(values, "values")
    if x.numel() == 1:
        return x.item(), 0.0
    return x.mean().item(), (x.std() / math.sqrt(x.numel())).item()


class Comparison(dict):
    """The result of :func:`separated` or :func:`paired`: ``holds`` (bool),
    ``gap`` (mean difference), ``se`` (its standard error), ``needed``
    (``z * se``, what the gap had to exceed); ``str()`` reads as a sentence
    fragment for a notice."""

    def __bool__(self) -> bool:
        return bool(self["holds"])

    def __str__(self) -> str:
        return (f"difference {self['gap']:.4g}, needed more than "
                f"{self['needed']:.3g} ({self['z']:g} standard errors of "
                f"{self['se']:.3g})")


def separated(a: Iterable[float] | torch.Tensor,
              b: Iterable[float] | torch.Tensor, *, z: float = 2.0,
              floor: float = 0.0) -> Comparison:
    """Is ``mean(a)`` above ``mean(b)`` by more than ``z`` standard errors of
    the difference (independent runs: ``sqrt(se_a^2 + se_b^2)``) and by more
    than ``floor``? For runs that share nothing (different models, seeds
    drawn apart)."""
    mean_a, se_a = mean_se(a)
    mean_b, se_b = mean_se(b)
    se = math.hypot(se_a, se_b)
    gap = mean_a - mean_b
    needed = max(z * se, floor)
    return Comparison(holds=gap > needed, gap=gap, se=se, z=z,
                      needed=needed)


def paired(a: Iterable[float] | torch.Tensor,
           b: Iterable[float] | torch.Tensor, *, z: float = 2.0,
           floor: float = 0.0, every: bool = False) -> Comparison:
    """Is ``a`` above ``b`` run by run (the same seed or input in each
    pair): the mean of ``a - b`` more than ``z`` standard errors of that mean
    and more than ``floor``, and, with ``every=True``, every pair above?"""
    x, y = _floats(a, "a"), _floats(b, "b")
    if x.shape != y.shape:
        raise ValueError(f"paired runs need as many of each: a has "
                         f"{x.numel()}, b {y.numel()}")
    gap, se = mean_se(x - y)
    needed = max(z * se, floor)
    holds = gap > needed and (not every or bool((x > y).all()))
    return Comparison(holds=holds, gap=gap, se=se, z=z, needed=needed)


def growth_exponent(sizes: Sequence[float] | torch.Tensor,
                    values: Sequence[float] | torch.Tensor) -> float:
    """The slope of ``log(values)`` against ``log(sizes)`` by least squares:
    about 1 for a cost linear in the size, 2 for a quadratic one. Pass
    medians of repeated timings: one slow repeat then moves it little."""
    n = _floats(sizes, "sizes").log()
    v = _floats(values, "values")
    if n.numel() != v.numel() or n.numel() < 2:
        raise ValueError(f"need at least two sizes and a value for each, "
                         f"got {n.numel()} sizes and {v.numel()} values")
    if (v <= 0).any():
        raise ValueError("values must be positive to fit a growth exponent")
    t = v.log()
    n = n - n.mean()
    return ((n * (t - t.mean())).sum() / (n * n).sum()).item()


def _display(bundle: dict[str, str], metadata: dict) -> None:
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # plain Python: the text is all there is
        print(bundle["text/plain"])
        return
    if get_ipython() is None:
        print(bundle["text/plain"])
        return
    display(bundle, raw=True, metadata=metadata)


def _glue(name: str, value: Any) -> None:
    try:
        from myst_nb import glue
    except ImportError:  # outside the book there is no text to fill in
        return
    try:
        from IPython import get_ipython
    except ImportError:
        return
    if get_ipython() is not None:
        glue(name, value, display=False)


def _plain(value: Any) -> Any:
    """A tensor or NumPy number as a Python number, so that the text's
    format (``{glue:text}`name:.1%```) applies to it."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"can only glue a single number, got a tensor "
                             f"of shape {tuple(value.shape)}")
        value = value.item()
    if hasattr(value, "item") and not isinstance(value, (int, float, str)):
        value = value.item()
    if isinstance(value, bool):
        return value
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"cannot glue a non-finite number ({value})")
    return value


def _format_got(got: str | Mapping[str, Any]) -> str:
    if isinstance(got, str):
        return got
    parts = []
    for label, value in got.items():
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = value.item()
        elif hasattr(value, "item") and not isinstance(value,
                                                       (int, float, str)):
            value = value.item()  # a NumPy number
        # nan and inf format too
        text = f"{value:.4g}" if isinstance(value, float) else str(value)
        parts.append(f"{label} {text}")
    return ", ".join(parts)


class Reading:
    """What :meth:`Claims.check` found: true when the reading held; its
    ``record`` holds the reading, its status and what the run got. A notebook
    displays it as nothing (the notice, if any, is already shown)."""

    def __init__(self, record: dict[str, Any]) -> None:
        self.record = record

    def __bool__(self) -> bool:
        return self.record["status"] == "holds"

    def __repr__(self) -> str:
        return f"Reading({self.record['name']!r}: {self.record['status']})"

    def _ipython_display_(self) -> None:
        pass


class Claims:
    """The numbers and readings of one page.

    ``page`` names the page (``"09_decoding"``), ``device`` the device its
    experiments ran on (readings that only hold on some devices say so with
    ``only_on``).
    """

    def __init__(self, page: str, device: torch.device | str = "cpu") -> None:
        self.page = page
        self.device = torch.device(device)
        self.records: list[dict[str, Any]] = []
        self.values: dict[str, Any] = {}

    def glue(self, name: str, value: Any) -> None:
        """Put ``value`` (a number, or a short string) into the page's text
        as ``{glue:text}`name``` (kept as a plain Python value in
        ``self.values``)."""
        if name in self.values:
            raise ValueError(f"{self.page}: {name!r} is glued twice")
        value = _plain(value)
        self.values[name] = value
        _glue(name, value)

    def glue_many(self, values: Mapping[str, Any], prefix: str = "") -> None:
        """:meth:`glue` each of ``values`` under ``prefix + key``."""
        for key, value in values.items():
            self.glue(prefix + key, value)

    def check(self, name: str, holds: bool | torch.Tensor, says: str,
              got: str | Mapping[str, Any], *,
              only_on: Sequence[str] | None = None,
              elsewhere: str = "") -> Reading:
        """Check one reading of the text.

        ``says`` is the reading in the text's words, ``got`` what this run
        measured (a sentence, or ``{label: value}``). ``only_on`` lists the
        device types (``"cpu"``, ``"cuda"``, ``"mps"``) the reading is stated
        for; on another one it is not checked and ``elsewhere`` (what
        differs on that device) is shown instead. Returns a
        :class:`Reading`, true when it held (and shown as nothing, so that a
        check may end a cell).
        """
        if name in {r["name"] for r in self.records}:
            raise ValueError(f"{self.page}: the reading {name!r} is checked "
                             f"twice")
        record: dict[str, Any] = {
            "page": self.page, "name": name, "says": says,
            "got": _format_got(got), "device": self.device.type,
            "seed_base": seed_base(), "threads": thread_count(),
            "torch": torch.__version__,
        }
        if only_on is not None and self.device.type not in only_on:
            if not elsewhere:
                raise ValueError(f"{self.page}: {name!r} is stated only for "
                                 f"{', '.join(only_on)}: say what differs "
                                 f"elsewhere")
            record["status"] = "not checked on this device"
            self._show_device_note(record, elsewhere)
        else:
            record["status"] = "holds" if bool(holds) else "does not hold"
            if not bool(holds):
                self._show_notice(record)
        self.records.append(record)
        self._log(record)
        return Reading(record)

    def summary(self) -> str:
        """One line: how many readings were checked and how many held."""
        held = sum(r["status"] == "holds" for r in self.records)
        failed = [r["name"] for r in self.records
                  if r["status"] == "does not hold"]
        line = f"{self.page}: {held} of {len(self.records)} readings hold"
        if failed:
            line += f"; not in this run: {', '.join(failed)}"
        return line

    def _settings(self, record: dict[str, Any]) -> str:
        return (f"{record['device']} ({platform.machine() or 'unknown CPU'}), "
                f"torch {record['torch']}, {record['threads']} threads, "
                f"seed base {record['seed_base']}")

    def _show_notice(self, record: dict[str, Any]) -> None:
        says, got = record["says"], record["got"]
        settings = self._settings(record)
        text = (f"A reading that did not hold in this run ({record['name']}).\n"
                f"The text says: {says}\nThis run got: {got}\n"
                f"Run on: {settings}. Small models trained for a few minutes "
                f"vary with the CPU, the torch build and the seeds; the text "
                f"was checked on others.")
        page = (
            f'<div class="admonition warning {NOTICE_CLASS}" role="note">'
            f'<p class="admonition-title">A reading that did not hold in '
            f"this run</p><p>The text says: <em>{html.escape(says)}</em></p>"
            f"<p>This run got: {html.escape(got)}.</p>"
            f"<p>Run on {html.escape(settings)}. Small models trained for a "
            f"few minutes vary with the CPU, the torch build and the seeds; "
            f"the text was checked on others. "
            f"<small>({html.escape(record['name'])})</small></p></div>")
        _display({"text/plain": text, "text/html": page},
                 {METADATA_KEY: {"claim": record}})

    def _show_device_note(self, record: dict[str, Any],
                          elsewhere: str) -> None:
        text = (f"On this device ({record['device']}) one reading of the "
                f"text is not checked: {record['says']}\n{elsewhere}")
        device = html.escape(record["device"])
        says = html.escape(record["says"])
        page = (f'<div class="admonition note claim-device-note" '
                f'role="note"><p>On this device ({device}) the text\'s '
                f"reading <em>{says}</em> is not checked. "
                f"{html.escape(elsewhere)}</p></div>")
        _display({"text/plain": text, "text/html": page},
                 {METADATA_KEY: {"claim": record}})

    def _log(self, record: dict[str, Any]) -> None:
        path = os.environ.get(LOG_ENV, "").strip()
        if path:
            with open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record, ensure_ascii=False) + "\n")


def notices_in_build(build: str | Path) -> list[dict[str, Any]]:
    """The readings that did not hold in a book build's executed notebooks
    (``<build>/jupyter_execute``), each with the ``notebook`` it is in."""
    build = Path(build)
    found = []
    for path in sorted((build / "jupyter_execute").rglob("*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        for cell in nb.get("cells", []):
            for output in cell.get("outputs", []):
                meta = output.get("metadata", {}).get(METADATA_KEY, {})
                claim = meta.get("claim")
                if claim and claim.get("status") == "does not hold":
                    found.append({**claim, "notebook":
                                  path.relative_to(build).as_posix()})
    return found
