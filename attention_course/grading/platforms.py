"""Grades into a learning platform: Canvas's and Moodle's grade-import CSV files.

``attention-course export --to canvas|moodle --roster ROSTER.csv GRADES_DIR --out FILE``
reads a gradebook folder (its per-student records, as ``totals.csv`` is made from them)
and a roster that maps each student folder to the platform's identifiers, and writes the
file the platform imports:

- **Canvas** (Grades > Import): the columns ``Student, ID, SIS User ID, SIS Login ID,
  Section``, then one column per exercise, and a ``Points Possible`` row under the
  header. Canvas matches students by ``ID`` (or the SIS ids) and creates an assignment
  for a column it does not know (name the columns as the course's assignments, with
  their Canvas id in parentheses, to fill existing ones: ``--column-names``).
- **Moodle** (Grades > Import > CSV file): one identifier column (``Email address``, ``ID
  number`` or ``Username``, chosen with ``--moodle-id``), then one column per exercise;
  on import, map the identifier to the user field of the same name and each exercise to
  its grade item.

The roster is a CSV file with a header. Its column ``student`` holds the name of the
student's folder (as in ``gradebook.csv``); the others, by name: ``name``, ``id``,
``sis_user_id``, ``sis_login_id``, ``section`` (Canvas), ``email``, ``idnumber``,
``username`` (Moodle). Students of the roster without a submission keep their row
(empty cells: not graded) and submissions without a roster entry are left out; both are
listed, never silently dropped.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attention_course.grading import gradebook
from attention_course.grading.text import csv_cell

CANVAS_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
_CANVAS_FIELDS = ("name", "id", "sis_user_id", "sis_login_id", "section")
MOODLE_IDS = {"email": "Email address", "idnumber": "ID number", "username": "Username"}


class RosterError(ValueError):
    """A roster that cannot be used (no ``student`` column, a student twice, ...)."""


@dataclass
class Export:
    """What an export wrote, and who did not fit: roster students without a submission,
    submissions of students not in the roster."""

    text: str
    exercises: list[str]
    without_submission: list[str] = field(default_factory=list)
    not_in_roster: list[str] = field(default_factory=list)


def read_roster(path: Path) -> list[dict[str, str]]:
    """The roster's rows, with lower-case column names (spaces as underscores)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        raise RosterError(f"cannot read the roster {path}: {error}") from None
    reader = csv.DictReader(io.StringIO(text))
    if reader.fieldnames is None:
        raise RosterError(f"the roster {path} is empty")
    names = [n.strip().lower().replace(" ", "_") for n in reader.fieldnames]
    if "student" not in names:
        raise RosterError(f"the roster {path} has no column 'student' (the name of the "
                          f"student's folder); its columns: {', '.join(reader.fieldnames)}")
    rows, seen = [], set()
    for raw in reader:
        row = {n: (v or "").strip() for n, v in zip(names, raw.values(), strict=False)}
        if not row["student"]:
            continue
        student = gradebook.safe_name(row["student"])
        if student in seen:
            raise RosterError(f"the roster lists the student {row['student']!r} twice")
        seen.add(student)
        rows.append({**row, "student": student})
    return rows


def _scores(records: Mapping[Any, Mapping[str, Any]]) -> tuple[dict[str, dict[str, int]],
                                                                dict[str, int]]:
    scores: dict[str, dict[str, int]] = {}
    maximum: dict[str, int] = {}
    for r in records.values():
        if r.get("exercise"):
            scores.setdefault(r["student"], {})[r["exercise"]] = r["score"]
            maximum[r["exercise"]] = max(maximum.get(r["exercise"], 0), r["max_score"])
    from attention_course.grading.registry import all_exercises

    known = all_exercises()
    for exercise in maximum:
        if exercise in known:
            maximum[exercise] = known[exercise].max_score
    return scores, maximum


def export(records: Mapping[Any, Mapping[str, Any]], roster: Sequence[Mapping[str, str]],
           platform: str, column_names: Mapping[str, str] | None = None,
           moodle_id: str = "email") -> Export:
    """The import file of ``platform`` (``canvas`` or ``moodle``) for these records."""
    scores, maximum = _scores(records)
    exercises = sorted(maximum)
    titles = [(column_names or {}).get(e, e) for e in exercises]
    listed = {row["student"] for row in roster}
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    if platform == "canvas":
        unmatched = [row["student"] for row in roster
                     if not any(row.get(f) for f in ("id", "sis_user_id", "sis_login_id"))]
        if unmatched:
            raise RosterError("Canvas matches students by id, sis_user_id or sis_login_id; "
                              f"the roster has none of them for: {', '.join(unmatched)}")
        writer.writerow([*CANVAS_COLUMNS, *titles])
        writer.writerow(["    Points Possible", "", "", "", "",
                         *(maximum[e] for e in exercises)])
        for row in roster:
            own = scores.get(row["student"], {})
            writer.writerow([csv_cell(row.get(f, "")) for f in _CANVAS_FIELDS]
                            + [own.get(e, "") for e in exercises])
    elif platform == "moodle":
        if moodle_id not in MOODLE_IDS:
            raise RosterError(f"--moodle-id must be one of {', '.join(MOODLE_IDS)}")
        missing = [row["student"] for row in roster if not row.get(moodle_id)]
        if missing:
            raise RosterError(f"the roster has no {moodle_id!r} for: {', '.join(missing)}")
        writer.writerow([MOODLE_IDS[moodle_id], *titles])
        for row in roster:
            own = scores.get(row["student"], {})
            writer.writerow([csv_cell(row[moodle_id]), *(own.get(e, "") for e in exercises)])
    else:
        raise RosterError(f"--to must be canvas or moodle, got {platform!r}")
    return Export(out.getvalue(), exercises,
                  without_submission=sorted(listed - set(scores)),
                  not_in_roster=sorted(set(scores) - listed))
