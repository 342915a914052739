"""Text a student controls, made safe to show an instructor: in a terminal, in a feedback
file, in a spreadsheet.

A submission chooses its file name, its exception messages and the names of its
exception classes. Shown raw, an escape sequence in any of them clears the instructor's
screen, sets a window title or draws a forged "Score: 10/10" under the real one; a lone
surrogate cannot even be written to a UTF-8 file; a cell that starts with ``=``, ``+``,
``-`` or ``@`` is a formula to a spreadsheet. :func:`safe_text` writes every control
character, lone surrogate and bidirectional override as a visible escape, and
:func:`csv_cell` also neutralises formulas the way OWASP recommends (a leading ``'``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

# C0 controls but tab and newline, DEL, C1 controls, lone surrogates, bidirectional
# embeddings, overrides and isolates, and the line and paragraph separators
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029"
                     "\u202a-\u202e\u2066-\u2069]")
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe_text(text: str, newlines: bool = True) -> str:
    """``text`` with every character that could act on a terminal or a file written as a
    visible escape (``\\x1b``, ``\\ud800``); newlines kept when ``newlines``, else
    written as ``\\n`` (for a field that must stay on its line), tabs kept."""
    text = _UNSAFE.sub(_escape, text)
    return text if newlines else text.replace("\r", "\\r").replace("\n", "\\n")


def display_path(path: str | os.PathLike) -> str:
    """A path as an instructor may read it: bytes that are not UTF-8 (a name from a
    Windows zip) as ``\\xe9``, then :func:`safe_text`."""
    raw = os.fsencode(Path(path))
    return safe_text(raw.decode("utf-8", errors="backslashreplace"), newlines=False)


def csv_cell(value: object) -> object:
    """A value for a CSV file: numbers as they are; text made safe, and text that a
    spreadsheet would evaluate (starting with ``= + - @``, a tab or a carriage return)
    prefixed with ``'``, so that it is shown, not run."""
    if not isinstance(value, str):
        return value
    if value.startswith(_FORMULA):
        value = "'" + value
    return safe_text(value, newlines=False)
