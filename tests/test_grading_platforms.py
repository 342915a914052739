"""Grades into Canvas and Moodle, feedback a student can read, the class at a glance."""

from __future__ import annotations

import csv
import io
import json
import zipfile
from pathlib import Path

import pytest

from attention_course.cli import main
from attention_course.grading import gradebook
from attention_course.grading.platforms import RosterError, export, read_roster


def _question(qid: str, points: int, worth: int, message: str = "all 3 cases match") -> dict:
    return {"id": qid, "symbol": "f", "title": "", "points": points, "max_points": worth,
            "status": "passed" if points == worth else "failed", "message": message,
            "hint": "Reread section 1.2." if points < worth else "", "kind": "implement"}


def _record(student: str, exercise: str, score: int, message: str = "wrong") -> dict:
    top = {"01_attention_pooling": 10, "03_masks": 15}[exercise]
    return {"student": student, "submission": f"{student}/{exercise}",
            "file": f"class/{student}/{exercise}.ipynb", "exercise": exercise,
            "score": score, "max_score": top, "error": None,
            "questions": [_question("q1", score, top, message if score < top else "ok")],
            "notebook_errors": [], "isolation": {}}


@pytest.fixture()
def grades(tmp_path) -> Path:
    folder = tmp_path / "grades"
    records = [_record("alice", "01_attention_pooling", 10), _record("alice", "03_masks", 12),
               _record("张三", "01_attention_pooling", 7,
                       "`f` raised ValueError: <script>alert(1)</script> \x1b[2J *bold*"),
               _record("stranger", "03_masks", 15)]
    gradebook.save(folder, {gradebook.key_of(r): r for r in records})
    return folder


ROSTER = ('student,name,id,sis_user_id,sis_login_id,section,email\n'
          'alice,"Liddell, Alice",101,A-1,alice@uni.edu,"Section ""A""",alice@uni.edu\n'
          '张三,张三,102,Z-3,zhang@uni.edu,甲班,zhang@uni.edu\n'
          'bob,"O\'Neil, Bob",103,B-2,bob@uni.edu,B,bob@uni.edu\n')


def _rows(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def test_canvas_import_layout(grades, tmp_path):
    (tmp_path / "roster.csv").write_text(ROSTER, encoding="utf-8")
    out = tmp_path / "canvas.csv"
    assert main(["export", "--to", "canvas", "--roster", str(tmp_path / "roster.csv"),
                 str(grades), "--out", str(out)]) == 0
    rows = _rows(out.read_text(encoding="utf-8"))
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section",
                       "01_attention_pooling", "03_masks"]
    assert rows[1] == ["    Points Possible", "", "", "", "", "10", "15"]
    assert rows[2] == ["Liddell, Alice", "101", "A-1", "alice@uni.edu", 'Section "A"', "10",
                       "12"]
    assert rows[3] == ["张三", "102", "Z-3", "zhang@uni.edu", "甲班", "7", ""]
    assert rows[4] == ["O'Neil, Bob", "103", "B-2", "bob@uni.edu", "B", "", ""]
    assert b"\r\n" in out.read_bytes()  # RFC 4180 lines


def test_moodle_import_layout_and_who_does_not_fit(grades, tmp_path, capsys):
    (tmp_path / "roster.csv").write_text(ROSTER, encoding="utf-8")
    out = tmp_path / "moodle.csv"
    assert main(["export", "--to", "moodle", "--roster", str(tmp_path / "roster.csv"),
                 str(grades), "--out", str(out)]) == 0
    rows = _rows(out.read_text(encoding="utf-8"))
    assert rows[0] == ["Email address", "01_attention_pooling", "03_masks"]
    assert rows[1:] == [["alice@uni.edu", "10", "12"], ["zhang@uni.edu", "7", ""],
                        ["bob@uni.edu", "", ""]]
    said = capsys.readouterr().out
    assert "without a submission (left empty): bob" in said
    assert "not in the roster (left out): stranger" in said


def test_rosters_that_cannot_be_used(grades, tmp_path):
    records = gradebook.load(grades)
    path = tmp_path / "r.csv"
    path.write_text("name,id\nAlice,1\n")
    with pytest.raises(RosterError, match="no column 'student'"):
        read_roster(path)
    path.write_text("student,id\nalice,1\nalice,2\n")
    with pytest.raises(RosterError, match="twice"):
        read_roster(path)
    path.write_text("student,name\nalice,Alice\n")
    with pytest.raises(RosterError, match="Canvas matches students by id"):
        export(records, read_roster(path), "canvas")
    with pytest.raises(RosterError, match="no 'email' for: alice"):
        export(records, read_roster(path), "moodle")
    path.write_text("student,id\n=cmd(),7\n")
    assert main(["export", "--to", "canvas", "--roster", str(path), str(grades), "--out",
                 str(tmp_path / "c.csv")]) == 0


def test_feedback_pages_escape_what_the_student_controlled(grades, tmp_path):
    page = (grades / "张三" / "feedback.html").read_text(encoding="utf-8")
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "\x1b" not in page and "\\x1b[2J" in page
    assert "<code>f</code>" in page and "7/10" in page
    assert "Content-Security-Policy" in page and "http" not in page.split("<body>")[1]
    markdown = (grades / "张三" / "feedback.md").read_text(encoding="utf-8")
    assert "\\*bold\\*" in markdown and "\\<script\\>" in markdown
    assert "hint: Reread section 1.2." in markdown
    alice = (grades / "alice" / "feedback.html").read_text(encoding="utf-8")
    assert "22/25" in alice and alice.count("<h2>") == 2


def test_feedback_in_chinese_and_bundles(grades, tmp_path):
    bundles = tmp_path / "bundles"
    assert main(["feedback", str(grades), "--lang", "zh_CN", "--bundle", str(bundles)]) == 0
    page = (grades / "alice" / "feedback.html").read_text(encoding="utf-8")
    assert 'lang="zh-CN"' in page
    with zipfile.ZipFile(bundles / "alice.zip") as archive:
        names = sorted(archive.namelist())
    assert names == ["alice/feedback.html", "alice/feedback.md"]


def test_report_table_and_figure(grades, tmp_path, capsys):
    figure = tmp_path / "scores.png"
    assert main(["report", str(grades), "--out", str(figure)]) == 0
    table = capsys.readouterr().out
    assert "01_attention_pooling  2" in table and "8.5/10" in table
    assert figure.stat().st_size > 5000
    assert json.loads((grades / "alice" / "03_masks.json").read_text())["score"] == 12
