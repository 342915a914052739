"""The chapters' printed outputs in the edition's language, without running them again.

The notebooks run once, for both editions (the execution cache). What they print in
words (``held-out MSE of the true curve itself: 0.235``, a table's header row, a row's
label) is English; in a translated edition :class:`TranslateOutputs` gives it the
edition's words from the page's *output catalog*, ``locales/<language>/outputs/<page>.po``,
which ``scripts/i18n.py outputs`` keeps up to date with the cached executions.

A catalog's messages are *cells*: a line of printed text is cut into cells at runs of two
or more spaces and at a table's bars (`` | ``), and a cell's numbers become fields, so
that ``held-out MSE with h = {0}: {1}`` is one message whatever the run printed; the
translation puts the same numbers back (``{1}`` before ``{0}`` if it likes). A line is
laid out again on the columns it had: a cell that a translation made narrower or wider
keeps its start, or its end where the column is right-aligned, so tables stay tables
(a Chinese character takes two columns). Cells without words (numbers, arrays, shapes,
code such as ``Var(q.k)``) are left alone; a cell whose translation is the English
itself is kept deliberately (a name, a token, PyTorch's own message).

What is translated: text printed to stdout, a result shown as plain text, and the words
of a Markdown result (a table's cells). Left as they are: stderr (warnings, progress
bars), tracebacks, HTML and widget outputs, and figures (their words are translated
elsewhere). The texts that had no translation are listed in
``<build>/output_texts_missing.json`` (``tests/test_i18n.py`` reads it).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.transforms import SphinxTransform
from sphinx.util import logging

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]
LOCALES = ROOT / "locales"
MISSING = "output_texts_missing.json"

# A number: a sign only where no word or number comes before it ("3-6" is two numbers),
# thousands separated by commas, a decimal part, an exponent.
NUMBER = re.compile(r"(?<![\w.])[-+]?(?<![\w.])(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?"
                    r"(?:[eE][-+]?\d+)?")
# A word a reader reads: two letters or more, not part of code (``q.k``, ``W_q``,
# ``sqrt(d)``, ``tau=``), a token (``<eos>``) or a Python value.
_WORD = re.compile(r"(?<![\w.<`'])[A-Za-z][a-z]+(?![\w(>=`])")
_VALUES = {"True", "False", "None", "nan", "inf", "tensor"}
_BAR = re.compile(r"(?<!\S)\|(?!\S)")
_GAP = re.compile(r"\s{2,}|\t")


def columns(text: str) -> int:
    """The width of ``text`` in a monospaced font (a Chinese character takes two)."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def template(text: str) -> tuple[str, list[str]]:
    """A cell as a message, its numbers as fields: ``("h = {0}: {1}", ["0.3", "1.2"])``."""
    values: list[str] = []
    parts = []
    last = 0
    for match in NUMBER.finditer(text):
        parts.append(text[last:match.start()].replace("{", "{{").replace("}", "}}"))
        parts.append(f"{{{len(values)}}}")
        values.append(match.group())
        last = match.end()
    parts.append(text[last:].replace("{", "{{").replace("}", "}}"))
    return "".join(parts), values


def needs_translation(text: str) -> bool:
    """Whether a cell holds words for a reader (else it is numbers, code or data)."""
    return any(w not in _VALUES for w in _WORD.findall(NUMBER.sub(" ", text)))


def cells(line: str) -> list[tuple[int, str]]:
    """The pieces of a printed line, ``(start column, text)``: its cells (cut at runs of
    two or more spaces) and its table bars (a ``|`` with spaces on both sides)."""
    pieces: list[tuple[int, str]] = []
    at = 0  # characters
    for segment in re.split(r"((?<!\S)\|(?!\S))", line):
        if segment == "|" and _BAR.fullmatch(segment):
            pieces.append((at, segment))
        else:
            start = 0
            for gap in list(_GAP.finditer(segment)) + [None]:
                end = gap.start() if gap else len(segment)
                text = segment[start:end]
                stripped = text.strip()
                if stripped:
                    offset = at + start + (len(text) - len(text.lstrip()))
                    pieces.append((offset, stripped))
                start = gap.end() if gap else len(segment)
        at += len(segment)
    # character offsets to display columns
    return [(columns(line[:offset]), text) for offset, text in pieces]


def messages(text: str) -> Iterator[str]:
    """The messages of a printed text: each cell that holds words, as a template."""
    for line in text.splitlines():
        for _start, cell in cells(line):
            if needs_translation(cell):
                yield template(cell)[0]


Lookup = Callable[[str], "str | None"]


def translate_cell(cell: str, lookup: Lookup, missing: list[str]) -> str:
    """A cell in the edition's language (itself where it needs none or has none)."""
    if not needs_translation(cell):
        return cell
    message, values = template(cell)
    found = lookup(message)
    if found is None:
        missing.append(message)
        return cell
    return found.format(*values)


def _anchors(rows: list[list[tuple[int, str]]]) -> list[list[bool]]:
    """For every cell of a block, whether it keeps its end column (a right-aligned
    column: another line has a cell that ends where it ends and starts elsewhere, or,
    with no such hint, any cell but a line's first) rather than its start."""
    spans = [(s, s + columns(t)) for row in rows for s, t in row]
    anchors = []
    for row in rows:
        flags = []
        for position, (start, text) in enumerate(row):
            end = start + columns(text)
            same_start = any(s == start and e != end for s, e in spans)
            same_end = any(e == end and s != start for s, e in spans)
            flags.append(same_end and not same_start or (
                not same_start and not same_end and position > 0))
        anchors.append(flags)
    return anchors


def translate_text(text: str, lookup: Lookup, missing: list[str]) -> str:
    """A printed text in the edition's language, each line laid out on its columns."""
    lines = text.split("\n")
    rows = [cells(line) for line in lines]
    if not any(needs_translation(t) for row in rows for _s, t in row):
        return text
    anchors = _anchors(rows)
    out = []
    for line, row, right in zip(lines, rows, anchors, strict=True):
        if not any(needs_translation(t) for _s, t in row):
            out.append(line)
            continue
        built, at = "", 0
        for (start, cell), keep_end in zip(row, right, strict=True):
            new = translate_cell(cell, lookup, missing)
            width = columns(new)
            place = start + columns(cell) - width if keep_end else start
            place = max(place, at + (2 if built and cell != "|" and not built.endswith("|")
                                     else 1 if built else 0))
            built += " " * (place - at) + new
            at = place + width
        out.append(built)
    return "\n".join(out)


# --------------------------------------------------------------------------- catalogs
def catalog_path(language: str, docname: str) -> Path:
    return LOCALES / language / "outputs" / f"{docname}.po"


def read_catalog(path: Path) -> dict[str, str]:
    """The usable translations of an output catalog (none fuzzy or empty)."""
    from attention_course.i18n import read_po

    if not path.is_file():
        return {}
    entries = read_po(path.read_text(encoding="utf-8"))
    return {k: v for k, (v, fuzzy) in entries.items() if k and v and not fuzzy}


class TranslateOutputs(SphinxTransform):
    """The words of a notebook's printed outputs in the edition's language."""

    default_priority = 30  # MyST-NB wrote the outputs while parsing

    def apply(self, **kwargs: Any) -> None:
        language = self.config.language
        if not language or language == "en" or self.env.docname.split("/")[0] != "book":
            return
        path = catalog_path(language, self.env.docname)
        self.env.note_dependency(str(path))
        known = read_catalog(path)
        missing: list[str] = []
        for block in list(self.document.findall(nodes.literal_block)):
            classes = block.get("classes", [])
            if "output" not in classes or not ({"stream", "text_plain"} & set(classes)):
                continue
            text = block.astext()
            new = translate_text(text, known.get, missing)
            if new != text:
                block.replace_self(nodes.literal_block(new, new, **{
                    k: v for k, v in block.attributes.items() if k not in ("ids",)}))
        for container in list(self.document.findall(nodes.container)):
            if container.get("mime_type") != "text/markdown":
                continue
            for text_node in list(container.findall(nodes.Text)):
                if isinstance(text_node.parent, (nodes.literal, nodes.math,
                                                 nodes.literal_block, nodes.math_block)):
                    continue
                text = str(text_node)
                new = translate_text(text, known.get, missing)
                if new != text:
                    text_node.parent.replace(text_node, nodes.Text(new))
        store = self.env.__dict__.setdefault("ac_missing_output_texts", {})
        store[self.env.docname] = sorted(set(missing))


def _purge(app: Sphinx, env: Any, docname: str) -> None:
    env.__dict__.get("ac_missing_output_texts", {}).pop(docname, None)


def _merge(app: Sphinx, env: Any, docnames: set[str], other: Any) -> None:
    store = env.__dict__.setdefault("ac_missing_output_texts", {})
    for docname, texts in other.__dict__.get("ac_missing_output_texts", {}).items():
        if docname in docnames:
            store[docname] = texts


def _report(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or not app.config.language or app.config.language == "en":
        return
    store = app.env.__dict__.get("ac_missing_output_texts", {})
    missing = {d: t for d, t in sorted(store.items()) if t and d in app.env.all_docs}
    path = Path(app.outdir).parent / MISSING
    path.write_text(json.dumps(missing, ensure_ascii=False, indent=1), encoding="utf-8")
    if missing:
        logger.info(f"printed texts without a translation: "
                    f"{sum(map(len, missing.values()))} on {len(missing)} pages (listed in "
                    f"{path}; run 'scripts/i18n.py outputs')")


def setup(app: Sphinx) -> dict:
    app.add_transform(TranslateOutputs)
    app.connect("env-purge-doc", _purge)
    app.connect("env-merge-info", _merge)
    app.connect("build-finished", _report)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
