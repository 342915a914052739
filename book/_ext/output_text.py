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
bars), tracebacks, HTML and widget outputs, figures (their words are translated
elsewhere), and the outputs of a cell tagged ``output-as-printed`` (a model's samples or
translations: not the course's words, and not the same from one run to the next). The
texts that had no translation are listed in ``<build>/output_texts_missing.json``
(``tests/test_i18n.py`` reads it).
"""

from __future__ import annotations

import json
import re
import string
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
# A cell tagged so prints text that is not the course's words and not the same from run to
# run (a model's samples, its translations): left as printed, and in no catalog.
AS_PRINTED = "output-as-printed"

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
    two or more spaces, but not inside an array's ``[...]``) and its table bars (a ``|``
    with spaces on both sides)."""
    pieces: list[tuple[int, str]] = []
    at = 0  # characters
    for segment in re.split(r"((?<!\S)\|(?!\S))", line):
        if segment == "|" and _BAR.fullmatch(segment):
            pieces.append((at, segment))
        else:
            start = 0
            gaps = [g for g in _GAP.finditer(segment)  # not inside an array's brackets
                    if segment[:g.start()].count("[") <= segment[:g.start()].count("]")]
            for gap in [*gaps, None]:
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


def _number_columns(text: str) -> list[int]:
    """The column at which each number of ``text`` starts."""
    return [columns(text[:m.start()]) for m in NUMBER.finditer(text)]


def translate_cell(cell: str, lookup: Lookup, missing: list[str]) -> tuple[str, dict[int, int]]:
    """A cell in the edition's language (itself where it needs none or has none), and
    where its numbers moved: ``{column in the cell before: column after}``."""
    if not needs_translation(cell):
        return cell, {}
    message, values = template(cell)
    found = lookup(message)
    if found is None:
        missing.append(message)
        return cell, {}
    text, placed = "", {}
    for literal, field, _spec, _conversion in string.Formatter().parse(found):
        text += literal.replace("{", "{{").replace("}", "}}")
        if field is not None:
            placed[int(field)] = columns(text.format())
            text += values[int(field)].replace("{", "{{").replace("}", "}}")
    before = _number_columns(cell)
    return found.format(*values), {before[k]: after for k, after in placed.items()}


def _anchors(rows: list[list[tuple[int, str]]]) -> tuple[list[list[bool]], list[list[bool]]]:
    """For every cell of a block: whether it keeps its end column rather than its start
    (a right-aligned column: more cells of other lines end where it ends than start where
    it starts, or, with no such hint, any cell but a line's first; never a cell that
    starts with a number, right-aligned before its words), and whether it is *free*, in
    no column that another line shares (no cell of another line starts where it does,
    nor a cell without words ends where it does)."""
    spans = [(n, s, s + columns(t), needs_translation(t))
             for n, row in enumerate(rows) for s, t in row]
    right, free = [], []
    for number, row in enumerate(rows):
        keeps_end, alone = [], []
        for position, (start, text) in enumerate(row):
            end = start + columns(text)
            starts = sum(n != number and s == start and e != end for n, s, e, _w in spans)
            ends = sum(n != number and e == end and s != start for n, s, e, _w in spans)
            keeps_end.append(not template(text)[0].startswith("{0}") and (
                ends > starts or ends == starts == 0 and position > 0))
            alone.append(not any(n != number and (s == start or e == end and not words)
                                 for n, s, e, words in spans))
        right.append(keeps_end)
        free.append(alone)
    return right, free


_COLON = re.compile(r":(?=\s|$)|：")


def _colons(rows: list[list[tuple[int, str]]],
            translated: list[list[tuple[str, dict[int, int]]]]) -> dict[int, int]:
    """Right-aligned labels (``{name:>12}: ...``): lines whose first cells start at
    different columns but put their first colon at the same one. Translated, their
    colons line up again: ``{line: column of its first cell}``."""
    groups: dict[int, list[tuple[int, int, int]]] = {}
    kept: set[int] = set()  # the columns of lines left as they were
    for number, row in enumerate(rows):
        if not row:
            continue
        (start, cell), (new, _numbers) = row[0], translated[number][0]
        before, after = _COLON.search(cell), _COLON.search(new)
        if before and after:
            column = start + columns(cell[:before.start()])
            groups.setdefault(column, []).append((number, start,
                                                  columns(new[:after.start()])))
            if all(n == c for (n, _m), (_s, c) in zip(translated[number], row,
                                                       strict=True)):
                kept.add(column)
    placed = {}
    for column, members in groups.items():
        if len(members) > 1 and len({start for _n, start, _o in members}) > 1:
            if column not in kept:
                column = max(o for _n, _s, o in members) + min(s for _n, s, _o in members)
            placed.update({n: max(column - o, 0) for n, _s, o in members})
    return placed


def translate_text(text: str, lookup: Lookup, missing: list[str]) -> str:
    """A printed text in the edition's language, each line laid out on its columns.

    In a table (three lines or more of two cells or more) the translated cells keep their
    start, or their end in a right-aligned column, and the cells left as they were keep
    their columns, so a table stays a table. Right-aligned labels keep their colons in
    one column. Elsewhere a translated cell follows the one before it with the gap it
    had; a cell left as it was that is in no column (a number that only lined up with a
    number in another line's sentence) goes under that number where it moved, else it
    keeps its column in a table and the gap it had after the cell before it elsewhere."""
    lines = text.split("\n")
    rows = [cells(line) for line in lines]
    if not any(needs_translation(t) for row in rows for _s, t in row):
        return text
    right, free = _anchors(rows)
    table = sum(len(row) > 1 for row in rows) >= 3
    translated = [[translate_cell(cell, lookup, missing) for _s, cell in row] for row in rows]
    colons = _colons(rows, translated)
    moved: dict[int, dict[int, int]] = {}  # line -> {number's column before: after}
    # right-aligned first cells (labels, whole lines) that all got narrower move left
    # together, so that the longest keeps its indentation
    narrower: dict[int, int] = {}
    for number, row in enumerate(rows):
        if row and right[number][0]:
            start, cell = row[0]
            end = start + columns(cell)
            shrink = columns(cell) - columns(translated[number][0][0])
            narrower[end] = min(narrower.get(end, shrink), shrink)

    def lay(number: int) -> str:
        built, at, after_translation = "", 0, False
        row = rows[number]
        for position, (start, cell) in enumerate(row):
            new, numbers = translated[number][position]
            width = columns(new)
            gap = 0 if not built else 1 if cell == "|" or built.endswith("|") else 2
            first_number = NUMBER.search(cell)
            offset = columns(cell[:first_number.start()]) if first_number else 0
            floor = at + gap
            if position == 0 and number in colons:
                place = colons[number]
            elif new == cell and free[number][position] and after_translation:
                under = [m[start + offset] for n, m in sorted(  # the nearest line's
                    moved.items(), key=lambda item: abs(item[0] - number))
                    if n != number and start + offset in m]
                if under:
                    place, floor = under[0] - offset, at + min(gap, 1)
                elif table:  # in a table it keeps its column (its end, right-aligned)
                    place = start + columns(cell) - width if right[number][position] else start
                else:  # with the gap it had after the cell before it
                    before = row[position - 1][0] + columns(row[position - 1][1])
                    place = at + max(start - before, gap)
            elif new != cell and position > 0 and not table:
                before = row[position - 1][0] + columns(row[position - 1][1])
                place = at + max(start - before, gap)
            else:
                end = start + columns(cell)
                if position == 0 and right[number][0]:
                    end -= max(narrower.get(end, 0), 0)
                place = end - width if right[number][position] else start
            place = max(place, floor)
            for before_column, after_column in numbers.items():
                moved.setdefault(number, {})[start + before_column] = place + after_column
            after_translation = after_translation or new != cell
            built += " " * (place - at) + new
            at = place + width
        return built

    out = list(lines)
    for _pass in range(2):  # the second pass knows where every number went
        for number, row in enumerate(rows):
            if any(new != cell for (_s, cell), (new, _m) in zip(row, translated[number],
                                                                strict=True)):
                out[number] = lay(number)
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


def _as_printed(node: nodes.Element) -> bool:
    """Whether ``node`` is an output of a cell tagged :data:`AS_PRINTED` (MyST-NB gives a
    cell's container a ``tag_<tag>`` class per tag)."""
    parent = node.parent
    while parent is not None:
        if f"tag_{AS_PRINTED}" in parent.get("classes", []):
            return True
        parent = parent.parent
    return False


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
            if _as_printed(block):
                continue
            text = block.astext()
            new = translate_text(text, known.get, missing)
            if new != text:
                block.replace_self(nodes.literal_block(new, new, **{
                    k: v for k, v in block.attributes.items() if k not in ("ids",)}))
        for container in list(self.document.findall(nodes.container)):
            if container.get("mime_type") != "text/markdown" or _as_printed(container):
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
