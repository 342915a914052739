"""The Chinese edition, from the same sources: Sphinx's own gettext catalogs.

    python scripts/i18n.py extract   # the book's messages -> _build/gettext/_build/gettext/*.pot
    python scripts/i18n.py update    # extract, then merge into locales/zh_CN/LC_MESSAGES/*.po
    python scripts/i18n.py check     # every message translated, none fuzzy, none missing
    python scripts/i18n.py build     # the Chinese edition -> _build/html/zh_CN/
    python scripts/i18n.py lint [PO] # translations that lost or changed markup (a glue
                                     # role in a translation names its page: page.ipynb::key)

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

from book_variants import ROOT, build, derived_config

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


def update() -> int:
    pot = extract()
    return subprocess.run(
        [str(Path(sys.executable).with_name("sphinx-intl")), "update", "--pot-dir", str(pot),
         "--locale-dir", str(LOCALES), "--language", LANGUAGE, "--line-width", "-1"],
        cwd=ROOT).returncode


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
            missing = wanted - have
            if missing:
                found.append(f"{page}: {len(missing)} messages not in the catalog, e.g. "
                             f"{sorted(missing, key=str)[0]!r:.80}")
    for page, path in sorted(catalogs.items()):
        with open(path, "rb") as f:
            catalog = read_po(f)
        untranslated = [m.id for m in catalog if m.id and not m.string]
        fuzzy = [m.id for m in catalog if m.id and m.fuzzy]
        if untranslated:
            found.append(f"{page}: {len(untranslated)} untranslated, e.g. "
                         f"{untranslated[0]!r:.80}")
        if fuzzy:
            found.append(f"{page}: {len(fuzzy)} fuzzy (the English changed), e.g. "
                         f"{fuzzy[0]!r:.80}")
    return found


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
# page's glue store finds the value.
_GLUE_PAGE = re.compile(r"^(\{glue(?::\w+)?\}`)[^`:]+\.ipynb::")
_GLUE_LOCAL = re.compile(r"\{glue(?::\w+)?\}`(?![^`]*::)")


def markup(text: str) -> list[str]:
    """The parts of a message a translation must keep as they are (roles, code,
    maths, link targets, inline HTML, footnotes), sorted. A role's visible text
    may be translated: of {term}`text <target>` only the role and the target
    count."""
    return sorted(_GLUE_PAGE.sub(r"\1", _ROLE_TEXT.sub(r"\1<\2>`", part))
                  for part in _MARKUP.findall(text))


def lint(paths: list[Path]) -> list[str]:
    """Translations whose markup differs from their English message's: a role,
    a piece of code or maths, a link target that was lost, added or changed."""
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
            if m.id and m.string and markup(m.id) != markup(m.string):
                lost = set(markup(m.id)) - set(markup(m.string))
                added = set(markup(m.string)) - set(markup(m.id))
                found.append(f"{path.name}: {str(m.id)[:60]!r}: markup differs "
                             f"(missing {sorted(lost)}, extra {sorted(added)})")
    return found


def check() -> int:
    found = problems(extract()) + lint(sorted(CATALOGS.rglob("*.po")))
    for line in found:
        print(f"i18n: {line}")
    if found:
        print("i18n: run 'python scripts/i18n.py update', translate the empty and fuzzy "
              f"entries in {CATALOGS.relative_to(ROOT)}/, and remove their fuzzy flags")
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
                        choices=("extract", "update", "check", "build", "lint"))
    parser.add_argument("catalogs", nargs="*", type=Path,
                        help="lint: the .po files (default: all)")
    args = parser.parse_args(argv)
    command = args.command
    if command == "lint":
        found = lint(args.catalogs or sorted(CATALOGS.rglob("*.po")))
        print("\n".join(found) or "i18n: the translations keep their markup")
        return 1 if found else 0
    if command == "extract":
        print(f"i18n: templates in {extract()}")
        return 0
    return {"update": update, "check": check, "build": build_chinese}[command]()


if __name__ == "__main__":
    sys.exit(main())
