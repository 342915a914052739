"""A class graded in one command, as an instructor runs it.

Folders in (``CLASS/STUDENT/EXERCISE.ipynb``), ``gradebook.csv``, ``totals.csv`` and feedback
per student out; grading again replaces only what was graded again; shards merge into what
one run gives; the grader checks itself on the reference solutions first and writes
nothing when that fails.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
import torch

from attention_course.cli import main
from attention_course.grading import get_exercise

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "exercises" / "solutions"
LEARNER = ROOT / "exercises"
POOLING, MASKS = "01_attention_pooling", "03_masks"
P, M = (str(get_exercise(e).max_score) for e in (POOLING, MASKS))
BOTH = str(int(P) + int(M))


def _copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(source, target)


@pytest.fixture(scope="module")
def klass(tmp_path_factory) -> Path:
    """alice: two solutions; bob: an unfinished notebook (and a checkpoint copy, ignored);
    carol: the masks solution under another file name; dave: a notebook of no exercise."""
    top = tmp_path_factory.mktemp("class")
    _copy(SOLUTIONS / f"{POOLING}.ipynb", top / "alice" / f"{POOLING}.ipynb")
    _copy(SOLUTIONS / f"{MASKS}.ipynb", top / "alice" / f"{MASKS}.ipynb")
    _copy(LEARNER / f"{POOLING}.ipynb", top / "bob" / f"{POOLING}.ipynb")
    _copy(SOLUTIONS / f"{POOLING}.ipynb",
          top / "bob" / ".ipynb_checkpoints" / f"{POOLING}-checkpoint.ipynb")
    _copy(SOLUTIONS / f"{MASKS}.ipynb", top / "carol" / "my masks.ipynb")
    notes = json.loads((LEARNER / f"{POOLING}.ipynb").read_text())
    del notes["metadata"]["attention_course"]
    (top / "dave").mkdir()
    (top / "dave" / "notes.ipynb").write_text(json.dumps(notes))
    return top


def _grade(*args: object) -> int:
    return main(["grade", *map(str, args), "--jobs", "2", "--timeout", "30"])


@pytest.fixture(scope="module")
def graded(klass, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("out")
    assert _grade(klass, "--out", out) == 3  # graded; dave's notebook names no exercise
    return out


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _snapshot(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): p.read_text(encoding="utf-8")
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_one_row_per_student_and_exercise(graded):
    rows = _rows(graded / "gradebook.csv")
    assert [(r["student"], r["exercise"], r["score"], r["max_score"]) for r in rows] == [
        ("alice", POOLING, P, P), ("alice", MASKS, M, M),
        ("bob", POOLING, "0", P), ("carol", MASKS, M, M), ("dave", "", "0", "0"),
    ]
    assert list(rows[0])[:4] == ["student", "exercise", "score", "max_score"]
    first = get_exercise(POOLING).questions[0]
    assert rows[0][f"{POOLING}/{first.id}"] == str(first.points)
    assert rows[0][f"{MASKS}/{get_exercise(MASKS).questions[0].id}"] == ""
    assert "cannot tell which exercise" in rows[-1]["error"]
    assert rows[3]["file"].endswith("carol/my masks.ipynb")


def test_totals_one_row_per_student(graded):
    rows = _rows(graded / "totals.csv")
    assert [(r["student"], r[POOLING], r[MASKS], r["total"], r["max_total"]) for r in rows] == [
        ("alice", P, M, BOTH, BOTH), ("bob", "0", "", "0", BOTH),
        ("carol", "", M, M, BOTH), ("dave", "", "", "0", BOTH),
    ]


def test_feedback_per_student(graded):
    record = json.loads((graded / "alice" / f"{MASKS}.json").read_text())
    assert record["student"] == "alice" and record["submission"] == f"alice/{MASKS}"
    assert record["exercise"] == MASKS and record["score"] == record["max_score"] == int(M)
    question = record["questions"][0]
    assert set(question) >= {"id", "kind", "points", "max_points", "status", "message", "hint"}
    feedback = (graded / "bob" / f"{POOLING}.feedback.txt").read_text()
    assert "Student:    bob" in feedback and f"Score:      0/{P}" in feedback
    assert not (graded / "bob" / f"{POOLING}-checkpoint.json").exists()


def test_regrading_one_notebook_changes_only_its_row(klass, graded, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(graded, out)
    before = _snapshot(out)
    late = tmp_path / "late" / "bob" / f"{POOLING}.ipynb"
    _copy(SOLUTIONS / f"{POOLING}.ipynb", late)
    assert _grade(late, "--out", out) == 0
    after = _snapshot(out)
    changed = {name for name in before if before[name] != after[name]}
    assert changed == {"gradebook.csv", "totals.csv", f"bob/{POOLING}.json",
                       f"bob/{POOLING}.feedback.txt", "bob/feedback.html", "bob/feedback.md"}
    old_rows, new_rows = _rows(graded / "gradebook.csv"), _rows(out / "gradebook.csv")
    assert [r for r in new_rows if r["student"] != "bob"] == [
        r for r in old_rows if r["student"] != "bob"]
    (bob,) = [r for r in new_rows if r["student"] == "bob"]
    assert bob["score"] == P and bob["file"] == str(late)


def test_two_shards_merged_equal_one_run(klass, graded, tmp_path):
    shards = [tmp_path / "shard1", tmp_path / "shard2"]
    for k, folder in enumerate(shards, start=1):
        assert _grade(klass, "--out", folder, "--shard", f"{k}/2") in (0, 3)
    sizes = [len(_rows(folder / "gradebook.csv")) for folder in shards]
    assert sorted(sizes) == [2, 3]
    merged = tmp_path / "merged"
    assert main(["merge", *map(str, shards), "--out", str(merged)]) == 0
    assert _snapshot(merged) == _snapshot(graded)


def test_two_notebooks_for_one_exercise_are_refused(tmp_path, capsys):
    _copy(SOLUTIONS / f"{MASKS}.ipynb", tmp_path / "class" / "eve" / f"{MASKS}.ipynb")
    _copy(SOLUTIONS / f"{MASKS}.ipynb", tmp_path / "class" / "eve" / "copy.ipynb")
    assert _grade(tmp_path / "class", "--out", tmp_path / "out") == 2
    assert "two notebooks for the same student and exercise" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_students_from_file_names_or_a_pattern(tmp_path, capsys):
    flat = tmp_path / "export"
    for student in ("ann", "ben"):
        _copy(SOLUTIONS / f"{MASKS}.ipynb", flat / f"{student}_{MASKS}.ipynb")
    assert _grade(flat, "--student-from", "file", "--json") == 0
    assert [r["student"] for r in json.loads(capsys.readouterr().out)] == ["ann", "ben"]
    assert _grade(flat, "--student-from", r"re:^(?P<student>[a-z])", "--json") == 0
    assert [r["student"] for r in json.loads(capsys.readouterr().out)] == ["a", "b"]
    assert _grade(flat, "--student-from", "re:(?P<student>zzz)") == 2
    assert "does not match" in capsys.readouterr().err


def test_a_failed_self_check_grades_nothing(klass, tmp_path, capsys):
    broken = tmp_path / "solutions"
    _copy(LEARNER / f"{POOLING}.ipynb", broken / f"{POOLING}.ipynb")  # a "reference" of stubs
    _copy(SOLUTIONS / f"{MASKS}.ipynb", broken / f"{MASKS}.ipynb")
    out = tmp_path / "out"
    assert _grade(klass, "--out", out, "--solutions", broken) == 1
    err = capsys.readouterr().err
    assert "failed its self-check" in err
    assert f"{POOLING}: the reference solution scored 0/{P}" in err
    assert not (out / "gradebook.csv").exists() and not list(out.rglob("*.json"))


def test_a_sandbox_that_cannot_run_torch_is_a_grader_error(klass, tmp_path, capsys):
    out = tmp_path / "out"
    assert _grade(klass / "alice", "--out", out, "--memory", "1") == 1
    err = capsys.readouterr().err
    assert "raise --memory" in err and "self-check" in err
    assert not (out / "gradebook.csv").exists()


def test_bad_command_lines(klass, capsys):
    assert _grade(klass, "--shard", "3/2") == 2
    assert _grade(klass, "--shard", "x") == 2
    assert _grade(klass, "--student-from", "nowhere") == 2
    assert main(["grade", str(klass), "--jobs", "0"]) == 2
    if not torch.cuda.is_available():
        assert _grade(klass, "--device", "cuda") == 2
    assert main(["merge", str(klass / "missing"), "--out", str(klass / "m")]) == 2
    assert capsys.readouterr().err.count("\n") >= 5
