"""A class's grades on disk, and the tables made from them.

An output folder holds, per student and exercise, ``STUDENT/EXERCISE.json`` (the record
of DESIGN.md) and ``STUDENT/EXERCISE.feedback.txt``; the JSON files are the truth, and
``gradebook.csv`` (one row per student and exercise), ``totals.csv`` (one row per
student) and each student's ``feedback.html`` and ``feedback.md`` (every exercise on one
page) are made from all of them each time the folder is written. Text a submission chose
is written with its control characters escaped, and a CSV cell a spreadsheet would run
as a formula is prefixed with ``'``. So grading a late
notebook into the same folder replaces its row only, and shards graded into separate
folders merge into one (:func:`merge`). Every file is written atomically.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from attention_course.grading.text import csv_cell, safe_text

Key = tuple[str, str]  # (student, exercise), or (student, file stem) when unknown
RECORD_FIELDS = ("student", "submission", "file", "exercise", "score", "max_score",
                 "questions")


def safe_name(text: str, fallback: str = "student") -> str:
    """A file-system-safe name: letters (any script), digits, ``._-@``; no leading dot."""
    name = re.sub(r"[^\w.@-]", "_", text, flags=re.UNICODE).lstrip(".")
    return name[:100] or fallback


def key_of(record: Mapping[str, Any]) -> Key:
    student, submission = record["student"], record["submission"]
    return student, submission.split("/", 1)[1] if "/" in submission else submission


def write_atomic(path: Path, text: str) -> None:
    """Write through a temporary file in the same folder and ``os.replace`` it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _is_record(data: Any) -> bool:
    return type(data) is dict and all(k in data for k in RECORD_FIELDS) and all(
        type(data[k]) is str for k in ("student", "submission"))


def load(folder: Path) -> dict[Key, dict[str, Any]]:
    """Every record in an output folder (files that are not records are left alone)."""
    records: dict[Key, dict[str, Any]] = {}
    if not folder.is_dir():
        return records
    for path in sorted(folder.glob("*/*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue
        if _is_record(data) and path.parent.name == data["student"]:
            records[key_of(data)] = data
    return records


def _files(folder: Path, key: Key) -> tuple[Path, Path]:
    student, name = key
    return folder / student / f"{name}.json", folder / student / f"{name}.feedback.txt"


def _scrubbed(value: Any) -> Any:
    """``value`` with every string safe to write and to show (:func:`safe_text`)."""
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, list):
        return [_scrubbed(v) for v in value]
    if isinstance(value, dict):
        return {_scrubbed(k): _scrubbed(v) for k, v in value.items()}
    return value


def save_record(folder: Path, record: dict[str, Any], feedback: str | None = None) -> None:
    """Write one record (and its feedback) into its student's folder; text a submission
    chose is written with its control characters escaped."""
    record_file, feedback_file = _files(folder, key_of(record))
    write_atomic(record_file, json.dumps(_scrubbed(record), indent=2, ensure_ascii=False)
                 + "\n")
    if feedback is not None:
        write_atomic(feedback_file, safe_text(feedback))


def save(folder: Path, records: Mapping[Key, dict[str, Any]],
         feedback: Mapping[Key, str] | None = None) -> None:
    """Write every record (and the feedback given for some of them), then both tables."""
    for key, record in records.items():
        save_record(folder, record, (feedback or {}).get(key))
    write_atomic(folder / "gradebook.csv", gradebook_csv(records.values()))
    write_atomic(folder / "totals.csv", totals_csv(records.values()))
    from attention_course.grading.feedback_pages import write_pages

    write_pages(folder, records)


def _exercises(records: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Each exercise seen, sorted, with its question ids in the order of its questions."""
    found: dict[str, list[str]] = {}
    for r in records:
        if r.get("exercise"):
            ids = found.setdefault(r["exercise"], [])
            ids += [q["id"] for q in r["questions"] if q["id"] not in ids]
    return dict(sorted(found.items()))


def _sorted(records: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return sorted(records, key=lambda r: (r["student"], key_of(r)[1]))


def gradebook_csv(records: Iterable[Mapping[str, Any]]) -> str:
    """One row per student and exercise: ``student, exercise, score, max_score``, the
    points of each question (``exercise/question`` when there are several exercises),
    then ``file`` and ``error``."""
    records = _sorted(records)
    exercises = _exercises(records)
    qualify = len(exercises) > 1
    columns = [f"{e}/{q}" if qualify else q for e, ids in exercises.items() for q in ids]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["student", "exercise", "score", "max_score", *columns, "file", "error"])
    for r in records:
        points = {(f"{r['exercise']}/{q['id']}" if qualify else q["id"]): q["points"]
                  for q in r["questions"]}
        writer.writerow([csv_cell(v) for v in (
            r["student"], r.get("exercise") or "", r["score"], r["max_score"],
            *(points.get(c, "") for c in columns), r["file"], r.get("error") or "")])
    return out.getvalue()


def _max_score(exercise: str, records: list[Mapping[str, Any]]) -> int:
    from attention_course.grading.registry import all_exercises

    known = all_exercises().get(exercise)
    if known is not None:
        return known.max_score
    return max(r["max_score"] for r in records if r.get("exercise") == exercise)


def totals_csv(records: Iterable[Mapping[str, Any]]) -> str:
    """One row per student: the score of each exercise in the gradebook (empty where none
    was handed in), ``total`` and ``max_total`` (over every exercise in the gradebook)."""
    records = _sorted(records)
    exercises = list(_exercises(records))
    max_total = sum(_max_score(e, records) for e in exercises)
    scores: dict[str, dict[str, int]] = {}
    for r in records:
        row = scores.setdefault(r["student"], {})
        if r.get("exercise"):
            row[r["exercise"]] = r["score"]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["student", *exercises, "total", "max_total"])
    for student, row in scores.items():
        writer.writerow([csv_cell(student), *(row.get(e, "") for e in exercises),
                         sum(row.values()), max_total])
    return out.getvalue()


def merge(folders: list[Path], out: Path) -> int:
    """Join output folders (shards) into ``out``; a later folder wins a clash. Returns the
    number of records in ``out``."""
    records = load(out)
    for folder in folders:
        for key, record in load(folder).items():
            records[key] = record
            source = _files(folder, key)[1]
            if source.is_file():
                write_atomic(_files(out, key)[1], source.read_text(encoding="utf-8"))
    save(out, records)
    return len(records)


__all__ = ["gradebook_csv", "key_of", "load", "merge", "safe_name", "save", "save_record",
           "totals_csv", "write_atomic"]
