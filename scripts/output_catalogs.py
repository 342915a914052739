"""The output catalogs: the words the chapters print, per page, for the translated edition.

    python scripts/i18n.py outputs [PAGE...]  # from the chapters' cached executions (build
                                              # the book first) -> locales/zh_CN/outputs/

The chapters run once (the execution cache); the Chinese edition translates what they
printed when it is built (``book/_ext/output_text.py``, which says how a printed line is
cut into messages). This module keeps the catalogs, ``locales/zh_CN/outputs/book/<page>.po``:
:func:`update` adds the messages of the last execution of each chapter (new ones empty,
changed ones fuzzy, gone ones dropped) and :func:`problems` says what keeps them from
being complete: messages of the cached executions missing from a catalog, untranslated or
fuzzy entries, translations that lost or added a number's field.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator

from book_variants import CACHE, ROOT, page_name, read_yaml

sys.path.insert(0, str(ROOT / "book" / "_ext"))
sys.path.insert(0, str(ROOT))

import output_text  # noqa: E402  (book/_ext/output_text.py: how a line becomes messages)

LANGUAGE = "zh_CN"
OUTPUTS = ROOT / "locales" / LANGUAGE / "outputs"
# the share of a chapter's printed texts that a run must find in its catalog
COVERED = 0.8
_FIELD = re.compile(r"(?<!\{)\{(\d+)\}(?!\})")
# tags with which MyST-NB leaves a cell's outputs off the page
_REMOVED = {"remove-output", "remove-cell", "remove_output", "remove_cell", "remove-stdout"}


def executed_chapters(pages: list[str] | None = None) -> dict[str, object | None]:
    """Per chapter page (``book/01_attention_pooling``), its notebook as the execution
    cache holds it, with outputs (``None`` where the cache has no execution of its current
    source: build the book first)."""
    import nbformat
    from jupyter_cache import get_cache

    wanted = {_page(p) for p in pages} if pages else None
    cache = get_cache(str(CACHE)) if CACHE.is_dir() else None
    found: dict[str, object | None] = {}
    for path in sorted((ROOT / "book").glob("*.ipynb")):
        page = f"book/{path.stem}"
        if wanted is not None and page not in wanted:
            continue
        notebook = nbformat.read(path, as_version=4)
        try:
            found[page] = cache.merge_match_into_notebook(notebook)[1] if cache else None
        except KeyError:
            found[page] = None
    return found


def _page(page: str) -> str:
    """``book/09_decoding`` from a page's path, its notebook's or its catalog's."""
    return page_name(page, ("locales", LANGUAGE, "outputs"))


def _markdown_texts(text: str, fmt: str) -> Iterator[str]:
    """The texts of a Markdown result as the page's doctree holds them: the ``text``
    tokens of the parser MyST-NB renders it with (``gfm``, ``commonmark`` or the book's
    ``myst``)."""
    from markdown_it.renderer import RendererHTML
    from myst_parser.config.main import MdParserConfig
    from myst_parser.parsers.mdit import create_md_parser

    if fmt == "gfm":
        config = MdParserConfig(gfm_only=True)
    elif fmt == "commonmark":
        config = MdParserConfig(commonmark_only=True)
    else:
        extensions = read_yaml("_config.yml").get("parse", {}).get("myst_enable_extensions")
        config = MdParserConfig(enable_extensions=set(extensions or []))
    for token in create_md_parser(config, RendererHTML).parse(text):
        for child in token.children or []:
            if child.type == "text":
                yield child.content


def shown_texts(notebook) -> Iterator[tuple[int, str]]:
    """``(cell number, text)`` for every printed text of a chapter that its page shows
    and :class:`output_text.TranslateOutputs` translates: stdout, plain-text results, the
    texts of Markdown results."""
    import copy

    from myst_nb.core.render import get_mime_priority
    from myst_nb.core.utils import coalesce_streams

    priority = get_mime_priority("html", {})
    sphinx = read_yaml("_config.yml").get("sphinx", {}).get("config", {})
    fmt_default = sphinx.get("nb_render_markdown_format", "commonmark")
    for number, cell in enumerate(notebook.cells):
        tags = set(cell.metadata.get("tags", []))
        if cell.cell_type != "code" or _REMOVED & tags or output_text.AS_PRINTED in tags:
            continue
        fmt = cell.metadata.get("mystnb", {}).get("markdown_format", fmt_default)
        outputs = copy.deepcopy(cell.get("outputs", []))
        if sphinx.get("nb_merge_streams"):  # as MyST-NB shows them: one stream a cell
            outputs = coalesce_streams(outputs)
        for output in outputs:
            if output.output_type == "stream":
                if output.name == "stdout":
                    yield number, output.text
                continue
            if output.output_type not in ("execute_result", "display_data"):
                continue
            data = output.get("data", {})
            chosen = next((m for m in priority if m in data), None)
            if chosen == "text/plain":
                yield number, data[chosen]
            elif chosen == "text/markdown":
                for text in _markdown_texts(data[chosen], fmt):
                    yield number, text


def page_messages(notebook) -> dict[str, str]:
    """The messages of a chapter's printed texts, ``{message: "cell N"}``."""
    found: dict[str, str] = {}
    for number, text in shown_texts(notebook):
        for message in output_text.messages(text):
            found.setdefault(message, f"cell {number}")
    return found


def update(pages: list[str] | None = None) -> int:
    """Bring the output catalogs of the chapters (of ``pages`` only, if given) up to date
    with their cached executions."""
    from babel.messages.catalog import Catalog
    from babel.messages.pofile import read_po, write_po

    status = 0
    for page, notebook in executed_chapters(pages).items():
        if notebook is None:
            print(f"i18n: {page} has no execution of its current source in the cache: "
                  f"build the book first (its output catalog is left as it is)")
            status = 1
            continue
        messages = page_messages(notebook)
        path = OUTPUTS / f"{page}.po"
        template = Catalog(locale=LANGUAGE, project="attention-course", fuzzy=False)
        for message, where in messages.items():
            template.add(message, auto_comments=[where])
        if path.exists():
            with open(path, "rb") as f:
                catalog = read_po(f, locale=LANGUAGE)
            catalog.update(template, update_header_comment=False)
            catalog.obsolete.clear()
        else:
            catalog = template
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            write_po(f, catalog, width=0, sort_output=False, omit_header=False)
        empty = sum(1 for m in catalog if m.id and (not m.string or m.fuzzy))
        print(f"i18n: {path.relative_to(ROOT)}: {len(messages)} printed texts, "
              f"{empty} to translate")
    return status


def fields(text: str) -> list[str]:
    """The number fields of a message or translation, sorted (``{0}``, ``{1}``, ...)."""
    return sorted(_FIELD.findall(text))


def problems() -> list[str]:
    """What keeps the output catalogs from being complete and right: a chapter whose
    cached execution printed more than a few texts its catalog lacks (chapters without
    an execution are not checked), untranslated or fuzzy entries, and translations whose
    number fields differ from their message's.

    A catalog is made from one run; another machine's or another seed base's run prints
    some texts in other words (a model's translations and samples, a number glued to a
    letter such as ``x1.32``, an array's spacing): up to ``1 - COVERED`` of a chapter's
    printed texts may be new to its catalog, and stay English on the Chinese page (the
    build lists them). Measured: a run at seed base 100 printed 0-11% new texts per
    chapter against catalogs made at seed base 0."""
    from babel.messages.pofile import read_po

    found = []
    for page, notebook in executed_chapters().items():
        path = OUTPUTS / f"{page}.po"
        have: dict[str, object] = {}
        if path.exists():
            with open(path, "rb") as f:
                have = {str(m.id): m for m in read_po(f) if m.id}
        if notebook is not None:
            messages = page_messages(notebook)
            lacking = [m for m in messages if m not in have]
            if len(lacking) > (1 - COVERED) * len(messages):
                found.append(f"outputs/{page}: {len(lacking)} of {len(messages)} printed "
                             f"texts not in the catalog (run 'scripts/i18n.py outputs'), "
                             f"e.g. {lacking[0]!r:.80}")
        for message, m in have.items():
            if not m.string:
                found.append(f"outputs/{page}: untranslated: {message!r:.80}")
            elif m.fuzzy:
                found.append(f"outputs/{page}: fuzzy (the output changed): {message!r:.80}")
            elif fields(message) != fields(str(m.string)):
                found.append(f"outputs/{page}: the translation of {message!r:.60} must keep "
                             f"its number fields {fields(message)}")
    return found


def counts() -> dict[str, tuple[int, int]]:
    """Per chapter: its printed lines that hold words, and how many of them the Chinese
    edition translates (from the cached executions and the catalogs)."""
    found = {}
    for page, notebook in executed_chapters().items():
        if notebook is None:
            continue
        known = output_text.read_catalog(OUTPUTS / f"{page}.po")
        lines = translated = 0
        for _number, text in shown_texts(notebook):
            for line in text.splitlines():
                worded = [c for _s, c in output_text.cells(line)
                          if output_text.needs_translation(c)]
                if worded:
                    lines += 1
                    translated += all(output_text.template(c)[0] in known for c in worded)
        found[page] = (lines, translated)
    return found
