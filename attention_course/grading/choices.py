"""The answers of a multiple-choice question, in the learner's language.

A prediction's answer is one of its ``choices``, or a dict of them; the spec, the
reference and the known mistakes write the choices in English. In English a learner
writes a choice's words exactly, as before. When the feedback is in another language
(``ATTENTION_COURSE_LANG=zh_CN``, ``set_language``, the grader's ``--lang``), a learner
may also write

- the choice's words in that language (its translation in the package's catalogs, where
  ``scripts/i18n.py messages`` puts every choice of every question);
- its letter, ``"A"`` for the first choice in the order the question lists them (and
  ``"a"``, ``"(A)"``, ``"A."``);
- or its number, ``1`` or ``"1"`` for the first.

Spaces, letter case and full-width punctuation do not matter there. The trusted parent
(the grader, or ``check`` in the learner's kernel) turns such an answer into the English
choice with :func:`as_choices` before it compares it with the reference, so the points
and the known mistakes are the same in every language; only the words differ. The
feedback names a choice by its words in the learner's language (:func:`shown`,
:func:`listed`).
"""

from __future__ import annotations

import re
import string
import unicodedata
from typing import Any

from attention_course.i18n import _, language

LETTERS = string.ascii_uppercase
# a letter or a number, perhaps in brackets or followed by a full stop
_LABEL = re.compile(r"[(\[（【]?([a-z]|\d{1,3})[)\]）】.、．]?")


def _key(text: str) -> str:
    """``text`` as it is compared: NFKC (full-width forms to half-width), no spaces,
    case folded."""
    return re.sub(r"\s+", "", unicodedata.normalize("NFKC", text)).casefold()


def translated() -> bool:
    """Whether the learner's language is not English (the answers it accepts are more)."""
    return language() != "en"


def letter(choices: tuple[str, ...], choice: str) -> str:
    """The letter of ``choice`` among ``choices`` (``"A"`` for the first)."""
    return LETTERS[choices.index(choice)]


def resolve(choices: tuple[str, ...], value: Any) -> Any:
    """The English choice that ``value`` names, in the learner's language (see the
    module); ``value`` itself when it names none, or when the language is English."""
    if not choices or not translated():
        return value
    if type(value) is int:  # not a bool: True is no choice
        return choices[value - 1] if 1 <= value <= len(choices) else value
    if type(value) is not str:
        return value
    key = _key(value)
    label = _LABEL.fullmatch(key)
    if label is not None:
        found = label.group(1)
        index = (int(found) - 1) if found.isdigit() else LETTERS.index(found.upper())
        return choices[index] if 0 <= index < len(choices) else value
    for choice in choices:
        if key in (_key(choice), _key(_(choice))):
            return choice
    return value


def as_choices(choices: tuple[str, ...], answer: Any) -> Any:
    """A learner's answer (one choice, or a dict of them) with every choice it names
    written as the English choice (:func:`resolve`)."""
    if type(answer) is dict:
        return {key: resolve(choices, value) for key, value in answer.items()}
    return resolve(choices, answer)


def shown(choice: str) -> str:
    """A choice as feedback quotes it: its words in the learner's language."""
    return repr(_(choice))


def listed(choices: tuple[str, ...]) -> str:
    """The choices, for a message that lists them: in English their words; in another
    language each one's letter and words in that language."""
    if not translated():
        return _(", ").join(repr(c) for c in choices)
    return _(", ").join(_("{letter} {choice}").format(letter=letter(choices, c),
                                                       choice=shown(c)) for c in choices)
