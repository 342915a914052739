"""The Chinese edition, from the same sources: Sphinx's own gettext catalogs.

    python scripts/i18n.py extract   # the book's messages -> _build/gettext/_build/gettext/*.pot
    python scripts/i18n.py update [PAGE...]  # extract, then merge into the catalogs
                                     # locales/zh_CN/LC_MESSAGES/*.po (of PAGEs only, if given)
    python scripts/i18n.py check     # every message translated, none fuzzy, none missing
    python scripts/i18n.py build     # the Chinese edition -> _build/html/zh_CN/
    python scripts/i18n.py lint [PO] # translations that lost or changed markup (a glue
                                     # role in a translation names its page: page.ipynb::key)

    python scripts/i18n.py messages  # the package's messages (feedback, grader, figures)
                                     # -> attention_course/locales/zh_CN/LC_MESSAGES/*.po
    python scripts/i18n.py outputs [PAGE...]  # the words the chapters printed in their
                                     # last run (the execution cache: build the book
                                     # first) -> locales/zh_CN/outputs/book/*.po
                                     # (scripts/output_catalogs.py)

``make book`` runs ``build`` after the English edition; ``make test`` runs ``check``
(tests/test_i18n.py). Translators edit the ``.po`` files only: after a change of the
English text, ``update`` marks the changed messages (new ones empty, edited ones
"fuzzy") and ``check`` names the pages that need them.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

from book_variants import ROOT, build, derived_config, page_name

LANGUAGE = "zh_CN"
LOCALES = ROOT / "locales"
CATALOGS = LOCALES / LANGUAGE / "LC_MESSAGES"
SITE = ROOT / "_build" / "html"
CHINESE_TITLE = "注意力机制：从核回归到 Transformer"


def extract() -> Path:
    """The book's messages as templates (``.pot``, one per page); their folder.

    Sphinx's gettext builder misses one kind of message: the alt text of a figure that a
    notebook's code cell draws (cell metadata ``mystnb.image.alt``), because the figure
    is only chosen among the cell's outputs after the catalogs are written. Those texts
    are added to their page's template here (the Chinese build translates them like any
    other image's alt text).
    """
    config = derived_config(gettext_compact=False, gettext_uuid=False,
                            gettext_location=False, gettext_additional_targets=[])
    # the messages are the pages' own text: no notebook needs to run for them
    config["execute"]["execute_notebooks"] = "off"
    status, pot = build("gettext", config, builder="gettext", strict=False, fresh=True)
    if status != 0:
        raise SystemExit("i18n: extracting the messages failed")
    for template in pot.rglob("*.pot"):
        notebook = ROOT / template.relative_to(pot).with_suffix(".ipynb")
        if notebook.is_file():
            _add_figure_alt_texts(template, notebook)
    return pot


def _add_figure_alt_texts(template: Path, notebook: Path) -> None:
    import json

    from babel.messages.pofile import read_po, write_po

    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    alts = [c.get("metadata", {}).get("mystnb", {}).get("image", {}).get("alt")
            for c in cells if c["cell_type"] == "code"]
    with open(template, "rb") as f:
        catalog = read_po(f)
    for alt in filter(None, alts):
        catalog.add(alt)
    with open(template, "wb") as f:
        write_po(f, catalog, width=0, omit_header=False)


def update(pages: list[str] | None = None) -> int:
    """Merge the book's messages into the catalogs: every page's, or only those of
    ``pages`` (``book/09_decoding``, ``book/09_decoding.ipynb`` or
    ``locales/.../book/09_decoding.po``), leaving the other catalogs as they are. One
    update at a time (a lock in ``_build/``), since all share one extraction folder."""
    import fcntl
    import tempfile

    (ROOT / "_build").mkdir(exist_ok=True)
    with open(ROOT / "_build" / ".i18n-update.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        pot = extract()
        with tempfile.TemporaryDirectory() as chosen:
            if pages:
                for page in pages:
                    name = _page_name(page)
                    template = pot / f"{name}.pot"
                    if not template.is_file():
                        raise SystemExit(f"i18n: no page {page!r} (no {template.name} among "
                                         f"the templates)")
                    (Path(chosen) / name).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy(template, Path(chosen) / f"{name}.pot")
                pot = Path(chosen)
            return subprocess.run(
                [str(Path(sys.executable).with_name("sphinx-intl")), "update", "--pot-dir",
                 str(pot), "--locale-dir", str(LOCALES), "--language", LANGUAGE,
                 "--line-width", "-1"], cwd=ROOT).returncode


def _page_name(page: str) -> str:
    """``book/09_decoding`` from a page's path, its notebook's or its catalog's."""
    return page_name(page, ("locales", LANGUAGE, "LC_MESSAGES"))


def problems(pot: Path | None = None) -> list[str]:
    """What keeps the catalogs from being complete: per page, the messages that are
    untranslated, fuzzy or missing (when ``pot`` is given: present in the sources but not
    yet in the catalog)."""
    from babel.messages.pofile import read_po

    found = []
    catalogs = {p.relative_to(CATALOGS).with_suffix("").as_posix(): p
                for p in CATALOGS.rglob("*.po")}
    if pot is not None:
        for template in sorted(pot.rglob("*.pot")):
            page = template.relative_to(pot).with_suffix("").as_posix()
            with open(template, "rb") as f:
                wanted = {m.id for m in read_po(f) if m.id}
            if page not in catalogs:
                found.append(f"{page}: no catalog ({len(wanted)} messages)")
                continue
            with open(catalogs[page], "rb") as f:
                have = {m.id for m in read_po(f) if m.id}
            _report(found, page, "messages not in the catalog", sorted(wanted - have, key=str))
    for page, path in sorted(catalogs.items()):
        with open(path, "rb") as f:
            catalog = read_po(f)
        _report(found, page, "untranslated", [m.id for m in catalog if m.id and not m.string])
        _report(found, page, "fuzzy (the English changed)",
                [m.id for m in catalog if m.id and m.fuzzy])
    return found


def _report(found: list[str], where: str, what: str, messages: list) -> None:
    """Add "where: N what, e.g. 'the first one'" to ``found`` when there are any."""
    if messages:
        found.append(f"{where}: {len(messages)} {what}, e.g. {messages[0]!r:.80}")


_MARKUP = re.compile(
    r"\{[\w:-]+\}`[^`]*`"          # a role: {cite:p}`key`, {doc}`page`, {term}`word`
    r"|``[^`]+``|`[^`]+`"          # inline code
    r"|\$\$.+?\$\$|\$[^$]+\$"      # maths
    r"|\]\([^)]*\)"                # a link's target
    r"|<[^>]+>"                    # inline HTML
    r"|\[\^[^\]]+\]"               # a footnote reference
)


_ROLE_TEXT = re.compile(r"^(\{[\w:-]+\}`)[^`<]*<([^`>]*)>`$")
# A glue role in a translation names its page (``{glue:text}`page.ipynb::key```):
# translated text is parsed apart from the notebook, so only a reference to the
# page's glue store finds the value. MyST-NB reads a {glue:text} role's last colon
# as the start of its format, so one that names its page needs a format (``:s``
# at least), or the page is read as the key.
_GLUE_PAGE = re.compile(r"^(\{glue(?::\w+)?\}`)[^`:]+\.ipynb::")
_GLUE_LOCAL = re.compile(r"\{glue(?::\w+)?\}`(?![^`]*::)")
_GLUE_TEXT_NO_FORMAT = re.compile(r"\{glue:text\}`[^`:]+\.ipynb::[^`:]+`")
_PLAIN_FORMAT = re.compile(r"^(\{glue:text\}`[^`:]+):s`$")
# A value in words (a verdict such as "RoPE > sinusoidal") is glued twice, as ``key``
# for the English text and ``key_zh`` in Chinese for the translation, which uses it
# in the place of ``key``.
_GLUE_ZH = re.compile(r"^(\{glue(?::\w+)?\}`[^`:]+)_zh(?=[:`])")


# A chapter's title, "4. Attention in ...": its translation is parsed as Markdown, where
# "4. ..." is a numbered list, so Sphinx drops it and keeps the English title; the
# translation escapes the full stop ("4\\. ...").
_NUMBERED = re.compile(r"^\d+\. ")
_NUMBERED_ESCAPED = re.compile(r"^\d+\\\. ")


# Words inside maths, ``\text{bytes per token}``, are translated (MathJax sets Chinese
# there); the maths around them is kept: a formula is compared without its \text{...}
# parts and its spaces, so a translation may also split one into two ("\text{bias of
# key } j" -> "\text{键 } j \text{ 的偏置}").
_TEXT_IN_MATHS = re.compile(r"\\text\s*\{[^{}]*\}|\s+")
# What a Chinese learner types or reads is shown as code beside the English (a choice,
# `"训练误差下降"` after `"training down"`; the Chinese feedback, `保留用例 N` after
# `held-back case N`): a translation may add code that holds Chinese.
_CHINESE_LITERAL = re.compile(r"^`[^`]*[\u4e00-\u9fff][^`]*`$")


def _kept(part: str) -> str:
    if part.startswith("$"):
        return _TEXT_IN_MATHS.sub("", part)
    return _PLAIN_FORMAT.sub(r"\1`", _GLUE_ZH.sub(r"\1", _GLUE_PAGE.sub(
        r"\1", _ROLE_TEXT.sub(r"\1<\2>`", part))))


def markup(text: str) -> list[str]:
    """The parts of a message a translation must keep as they are (roles, code,
    maths, link targets, inline HTML, footnotes), sorted. A role's visible text
    may be translated: of {term}`text <target>` only the role and the target
    count; so may the words of maths, ``\\text{...}``."""
    return sorted(_kept(part) for part in _MARKUP.findall(text))


def _markup_differs(english: str, translation: str) -> tuple[list[str], list[str]] | None:
    """What a translation lost and added of its message's markup (``None``: nothing), code
    added that holds Chinese not counted."""
    wanted, have = markup(english), markup(translation)
    added = [p for p in have if p not in wanted and not _CHINESE_LITERAL.match(p)]
    if sorted(p for p in have if p in wanted or not _CHINESE_LITERAL.match(p)) == wanted:
        return None
    return sorted(set(wanted) - set(have)), sorted(set(added))


def lint(paths: list[Path]) -> list[str]:
    """Translations whose markup differs from their English message's: a role,
    a piece of code or maths, a link target that was lost, added or changed (the words
    of a formula's ``\\text{...}`` may be translated; a display formula, a message that
    starts with a line break, is checked as maths too)."""
    from babel.messages.pofile import read_po

    found = []
    for path in paths:
        with open(path, "rb") as f:
            catalog = read_po(f)
        for m in catalog:
            if m.id and m.string and _GLUE_LOCAL.search(m.string):
                found.append(f"{path.name}: {str(m.id)[:60]!r}: a glue role in a "
                             f"translation must name its page, as in "
                             f"{{glue:text}}`{path.stem}.ipynb::key`")
            if m.id and m.string and _GLUE_TEXT_NO_FORMAT.search(m.string):
                found.append(f"{path.name}: {str(m.id)[:60]!r}: a glue:text role "
                             f"that names its page needs a format (MyST-NB reads "
                             f"the last colon as its start): "
                             f"{{glue:text}}`{path.stem}.ipynb::key:s`")
            if (m.id and m.string and _NUMBERED.match(str(m.id))
                    and not _NUMBERED_ESCAPED.match(str(m.string))):
                found.append(f"{path.name}: {str(m.id)[:60]!r}: a numbered title's "
                             f"translation must escape its full stop, as in "
                             f"'4\\. ...' (else Markdown reads '4. ...' as a list and "
                             f"the page keeps the English title)")
            if (m.id and m.string and str(m.id).startswith("\n")  # a display formula
                    and _TEXT_IN_MATHS.sub("", str(m.id))
                    != _TEXT_IN_MATHS.sub("", str(m.string))):
                found.append(f"{path.name}: {str(m.id)[:60]!r}: the formula's maths "
                             f"differs (only the words of \\text{{...}} may be translated)")
            differs = m.id and m.string and _markup_differs(str(m.id), str(m.string))
            if differs:
                lost, added = differs
                found.append(f"{path.name}: {str(m.id)[:60]!r}: markup differs "
                             f"(missing {lost}, extra {added})")
    return found


def check() -> int:
    import output_catalogs

    found = (problems(extract()) + lint(sorted(CATALOGS.rglob("*.po")))
             + message_problems() + output_catalogs.problems())
    for line in found:
        print(f"i18n: {line}")
    if found:
        print("i18n: run 'python scripts/i18n.py update' (the book) or 'messages' (the "
              "package), translate the empty and fuzzy entries in "
              f"{CATALOGS.relative_to(ROOT)}/ or {PACKAGE_CATALOGS.relative_to(ROOT)}/, and "
              "remove their fuzzy flags")
    return 1 if found else 0


# --------------------------------------------------------------------------- the package
PACKAGE = ROOT / "attention_course"
PACKAGE_CATALOGS = PACKAGE / "locales" / LANGUAGE / "LC_MESSAGES"
CORE = "attention_course"  # the package's own messages; each exercise has its catalog
FIGURES = "figures"  # the words of the figures the book draws with a script
IMAGES = ROOT / "book" / "images"


def package_messages() -> dict[str, dict[str, list[tuple[str, int]]]]:
    """Every message of the package, by catalog: ``{catalog: {msgid: [(file, line)]}}``.

    The messages are the literals in ``_()`` and ``N_()`` calls anywhere in the package
    (and in the scripts that draw the book's figures, ``book/images/make_*.py``) and, for
    each exercise, the words of its spec (titles, hints, sections, known
    mistakes, the labels of the cases the learner sees, the choices of a prediction),
    which the grader translates where it shows them (a choice's translation is also an
    answer it accepts). A message is kept in the first catalog that has it (the package's
    own, then the exercises in order).
    """
    from babel.messages.extract import extract_from_dir

    sys.path.insert(0, str(ROOT))
    from attention_course.grading.registry import all_exercises
    from attention_course.grading.spec import KINDS

    found: dict[str, dict[str, list[tuple[str, int]]]] = {CORE: {}}

    def add(catalog: str, message: str, where: tuple[str, int]) -> None:
        if message and not any(message in found[c] for c in found if c != catalog):
            found.setdefault(catalog, {}).setdefault(message, []).append(where)

    exercises = sorted(all_exercises().values(), key=lambda e: e.id)
    modules = {}
    for exercise in exercises:
        module = sys.modules[_spec_module(exercise)]
        modules[Path(module.__file__).stem] = exercise
    for kind in KINDS:
        add(CORE, kind, ("attention_course/grading/spec.py", 0))
    extracted = sorted(extract_from_dir(str(PACKAGE), method_map=[("**.py", "python")],
                                        keywords={"_": None, "N_": None}),
                       key=lambda m: (Path(m[0]).stem in modules, m[0], m[1]))
    for filename, line, message, _comments, _context in extracted:
        stem = Path(filename).stem
        catalog = stem if stem in modules else CORE
        found.setdefault(catalog, {})
        add(catalog, message, (f"attention_course/{filename}", line))
    # the words of the book's drawn figures (book/images/make_*.py)
    found.setdefault(FIGURES, {})
    for filename, line, message, _comments, _context in extract_from_dir(
            str(IMAGES), method_map=[("make_*.py", "python")],
            keywords={"_": None, "N_": None}):
        add(FIGURES, message, (f"book/images/{filename}", line))
    for stem, exercise in modules.items():
        where = (f"attention_course/grading/exercises/{stem}.py", 0)
        found.setdefault(stem, {})
        add(stem, exercise.title, where)
        for q in exercise.questions:
            for text in (q.title, q.hint, q.section, *(m.message for m in q.mistakes),
                         *(c.label for c in q.cases() if not c.hidden), *q.choices):
                add(stem, text, where)
    return found


def _spec_module(exercise) -> str:
    """The module that defines ``exercise`` (``EXERCISE = Exercise(...)``)."""
    for name, module in list(sys.modules.items()):
        if name.startswith("attention_course.grading.exercises.ex") and (
                getattr(module, "EXERCISE", None) is exercise):
            return name
    raise LookupError(f"no spec module defines {exercise.id}")


def _book_translations() -> dict[str, str]:
    """The book's translated messages (a section title a hint names is translated the
    same way as the heading it names)."""
    from babel.messages.pofile import read_po

    known = {}
    for path in sorted(CATALOGS.rglob("*.po")):
        with open(path, "rb") as f:
            for m in read_po(f):
                if m.id and m.string and not m.fuzzy:  # a title as text: no escape
                    known.setdefault(str(m.id), re.sub(r"^(\d+)\\\. ", r"\1. ",
                                                       str(m.string)))
    return known


def update_messages(only: list[str] | None = None) -> int:
    """Bring the package's catalogs (``only`` these, by name) up to date with its code:
    new messages empty (or, for a section's title, the book's translation), changed ones
    fuzzy, gone ones dropped."""
    from babel.messages.catalog import Catalog
    from babel.messages.pofile import read_po, write_po

    PACKAGE_CATALOGS.mkdir(parents=True, exist_ok=True)
    book = _book_translations()
    wanted = package_messages()
    for name, messages in wanted.items():
        if only and name not in only:
            continue
        path = PACKAGE_CATALOGS / f"{name}.po"
        template = Catalog(locale=LANGUAGE, project="attention-course", fuzzy=False)
        for message, where in messages.items():
            template.add(message, locations=where)
        if path.exists():
            with open(path, "rb") as f:
                catalog = read_po(f, locale=LANGUAGE)
            catalog.update(template, update_header_comment=False)
            catalog.obsolete.clear()
        else:
            catalog = template
        for m in catalog:
            if m.id and not m.string and str(m.id) in book:
                m.string = book[str(m.id)]
        with open(path, "wb") as f:
            write_po(f, catalog, width=88, sort_output=False, omit_header=False)
    for stale in PACKAGE_CATALOGS.glob("*.po"):
        if stale.stem not in wanted and not only:
            stale.unlink()
    print(f"i18n: {sum(map(len, wanted.values()))} messages in "
          f"{len(wanted)} catalogs under {PACKAGE_CATALOGS.relative_to(ROOT)}")
    return 0


_FIELD = re.compile(r"\{[^{}]*\}|`[^`]+`")


def message_problems() -> list[str]:
    """What keeps the package's catalogs from being complete and right: messages of the
    code missing from them or left over, untranslated, fuzzy, or whose translation lost
    or changed a ``{field}`` or a piece of ``code``."""
    from babel.messages.pofile import read_po

    found = []
    wanted = package_messages()
    for name, messages in wanted.items():
        path = PACKAGE_CATALOGS / f"{name}.po"
        if not path.exists():
            found.append(f"{name}.po: no catalog ({len(messages)} messages)")
            continue
        with open(path, "rb") as f:
            catalog = read_po(f, locale=LANGUAGE)
        have = {str(m.id): m for m in catalog if m.id}
        _report(found, f"{name}.po", "messages not in the catalog",
                [m for m in messages if m not in have])
        _report(found, f"{name}.po", "messages no longer in the code",
                [m for m in have if m not in messages])
        for message, m in have.items():
            if not m.string:
                found.append(f"{name}.po: untranslated: {message!r:.80}")
            elif m.fuzzy:
                found.append(f"{name}.po: fuzzy (the English changed): {message!r:.80}")
            elif sorted(_FIELD.findall(message)) != sorted(_FIELD.findall(str(m.string))):
                found.append(f"{name}.po: the translation of {message!r:.60} must keep its "
                             f"fields and code: {sorted(_FIELD.findall(message))}")
    return found


def check_messages() -> int:
    found = message_problems()
    for line in found:
        print(f"i18n: {line}")
    if found:
        print("i18n: run 'python scripts/i18n.py messages', translate the empty and fuzzy "
              f"entries in {PACKAGE_CATALOGS.relative_to(ROOT)}/ (keep every {{field}} and "
              "`code`), and remove their fuzzy flags")
    return 1 if found else 0


def build_chinese() -> int:
    config = derived_config(title=CHINESE_TITLE, language=LANGUAGE,
                            locale_dirs=[str(LOCALES)], gettext_compact=False)
    status, html = build(LANGUAGE, config)
    if status == 0:
        target = SITE / LANGUAGE
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(html, target)
        print(f"\nThe Chinese edition is at: {target / 'index.html'}")
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command",
                        choices=("extract", "update", "check", "build", "lint", "messages",
                                 "outputs"))
    parser.add_argument("catalogs", nargs="*", type=Path,
                        help="lint: the .po files (default: all); update: the pages whose "
                             "catalogs to update (default: all); messages: the package's "
                             "catalogs to update, by name (default: all); outputs: the chapters "
                             "whose output catalogs to update (default: all)")
    args = parser.parse_args(argv)
    command = args.command
    if command == "lint":
        found = lint(args.catalogs or sorted(CATALOGS.rglob("*.po")))
        print("\n".join(found) or "i18n: the translations keep their markup")
        return 1 if found else 0
    if command == "extract":
        print(f"i18n: templates in {extract()}")
        return 0
    if command == "messages":
        return update_messages([Path(c).stem for c in args.catalogs])
    if command == "update":
        return update([str(c) for c in args.catalogs])
    if command == "outputs":
        import output_catalogs

        return output_catalogs.update([str(c) for c in args.catalogs])
    return {"check": check, "build": build_chinese}[command]()


if __name__ == "__main__":
    sys.exit(main())
