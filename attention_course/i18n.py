"""The package's own words in the reader's language: gettext catalogs.

English is the default. ``ATTENTION_COURSE_LANG=zh_CN`` (or
:func:`set_language`, or the grader's ``--lang zh_CN``) switches the
learner's feedback, the grader's messages and the figures' words to Chinese.

The catalogs are gettext's ``.po`` files in
``attention_course/locales/<language>/LC_MESSAGES/``: ``attention_course.po``
for the package's own messages and one per exercise (``ex03_masks.po``: its
titles, hints, known mistakes and feedback). Translators edit them;
``python scripts/i18n.py messages`` brings them up to date with the code. A
language's catalogs are read and compiled to gettext's binary form in memory
when first needed, so an installed package needs no build step.

In the code, ``_("...")`` translates a message where it is shown; a message
with values is a format string whose fields are named
(``_("got {value}").format(value=x)``), so that a translation may put them in
another order. ``N_("...")`` only marks a word for the catalogs (it is
translated later, where it is shown).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import gettext
import io
import os
import struct
from collections.abc import Iterator
from pathlib import Path

DOMAIN = "attention_course"
ENV = "ATTENTION_COURSE_LANG"
LOCALES = Path(__file__).parent / "locales"
LANGUAGES = ("en", "zh_CN")

# set_language's choice; None: the environment decides
_chosen: str | None = None


def normalise(name: str) -> str:
    """``"zh"``, ``"zh-CN"``, ``"zh_CN.UTF-8"`` -> ``"zh_CN"``; ``""``, ``"C"``
    -> ``"en"``.

    Raises ``ValueError`` naming the languages there are for any other name.
    """
    base = name.strip().split(".")[0].split("@")[0].replace("-", "_")
    if base.lower() in ("", "c", "posix", "en", "en_us", "en_gb"):
        return "en"
    if base.lower() in ("zh", "zh_cn", "zh_hans", "zh_hans_cn"):
        return "zh_CN"
    raise ValueError(f"language must be one of {', '.join(LANGUAGES)}, "
                     f"got {name!r}")


def set_language(name: str | None) -> None:
    """Use ``name`` from now on (``None``: what ``ATTENTION_COURSE_LANG``
    says)."""
    global _chosen
    _chosen = None if name is None else normalise(name)


@contextlib.contextmanager
def using(name: str | None) -> Iterator[None]:
    """Show messages in ``name`` inside the ``with`` block (``None``: no
    change)."""
    global _chosen
    before = _chosen
    if name is not None:
        set_language(name)
    try:
        yield
    finally:
        _chosen = before


def language() -> str:
    """The language messages are shown in: ``"en"`` or ``"zh_CN"``."""
    if _chosen is not None:
        return _chosen
    try:
        return normalise(os.environ.get(ENV, ""))
    except ValueError as error:
        raise ValueError(f"{ENV}: {error}") from None


def _(message: str) -> str:
    """``message`` in the current language (itself where none is known)."""
    return translations(language()).gettext(message)


def N_(message: str) -> str:
    """Mark ``message`` for the catalogs without translating it yet."""
    return message


def catalogs(lang: str) -> list[Path]:
    """The ``.po`` files of ``lang``, the package's own first."""
    folder = LOCALES / lang / "LC_MESSAGES"
    return sorted(folder.glob("*.po"), key=lambda p: (p.stem != DOMAIN, p.name))


@functools.cache
def translations(lang: str) -> gettext.NullTranslations:
    """The translations of ``lang`` (English: none), all its catalogs in one."""
    if lang == "en":
        return gettext.NullTranslations()
    usable: dict[str, str] = {}
    for path in catalogs(lang):
        entries = read_po(path.read_text(encoding="utf-8"))
        for msgid, (msgstr, fuzzy) in entries.items():
            if msgid and msgstr and not fuzzy:
                usable.setdefault(msgid, msgstr)
    return gettext.GNUTranslations(io.BytesIO(compile_mo(usable)))


def read_po(text: str) -> dict[str, tuple[str, bool]]:
    """The entries of a ``.po`` file: ``msgid -> (msgstr, fuzzy)`` (the header
    included, under ``""``; obsolete ``#~`` entries left out)."""
    entries: dict[str, tuple[str, bool]] = {}
    fields: dict[str, str] = {}
    fuzzy = False
    current: str | None = None

    def finish() -> None:
        nonlocal fuzzy, current
        if "msgid" in fields:
            entries[fields["msgid"]] = (fields.get("msgstr", ""), fuzzy)
        fields.clear()
        fuzzy, current = False, None

    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#~"):
            if not line and "msgid" in fields:
                finish()
            continue
        if line.startswith("#"):
            if "msgstr" in fields:
                finish()
            flags = line[2:].replace(",", " ").split()
            if line.startswith("#,") and "fuzzy" in flags:
                fuzzy = True
            continue
        if line.startswith('"'):
            if current is None:
                raise ValueError(f"line {number}: a string outside a field")
            fields[current] += ast.literal_eval(line)
            continue
        keyword, _space, value = line.partition(" ")
        if keyword not in ("msgctxt", "msgid", "msgstr"):
            raise ValueError(f"line {number}: unexpected {keyword!r}")
        if keyword in ("msgctxt", "msgid") and "msgstr" in fields:
            finish()
        current = keyword
        fields[keyword] = ast.literal_eval(value)
    finish()
    return entries


def compile_mo(messages: dict[str, str]) -> bytes:
    """gettext's binary catalog (``.mo``) of ``messages`` (UTF-8)."""
    messages = {"": "Content-Type: text/plain; charset=UTF-8\n", **messages}
    keys = sorted(messages)
    ids = [k.encode() for k in keys]
    strs = [messages[k].encode() for k in keys]
    count = len(keys)
    # the header, then two tables of (length, offset), then the strings
    start = 7 * 4 + 16 * count
    table_ids, table_strs, data = [], [], b""
    for blob in ids:
        table_ids += [len(blob), start + len(data)]
        data += blob + b"\0"
    for blob in strs:
        table_strs += [len(blob), start + len(data)]
        data += blob + b"\0"
    header = struct.pack("<7I", 0x950412DE, 0, count, 28, 28 + 8 * count, 0, 0)
    return (header + struct.pack(f"<{2 * count}I", *table_ids)
            + struct.pack(f"<{2 * count}I", *table_strs) + data)
