"""Feedback a student can read: one self-contained HTML page per student (and its Markdown
twin), with each exercise, each question's points, message and hint.

Written into the gradebook folder as ``STUDENT/feedback.html`` and ``STUDENT/feedback.md``
whenever it is written, from the same records as ``gradebook.csv``, in the grader's
language; ``bundle`` zips a student's pages and feedback files for upload to a learning
platform (``BUNDLES/STUDENT.zip``). Everything a student controlled (messages that quote
their exceptions, file names) is escaped: the HTML page runs no script and loads nothing.
"""

from __future__ import annotations

import html
import re
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from attention_course.grading.text import safe_text
from attention_course.i18n import _, language

_STYLE = """
body{font:16px/1.5 system-ui,sans-serif;max-width:46rem;margin:2rem auto;padding:0 1rem;
color:#1b1b1b;background:#fff}h1{font-size:1.6rem}h2{font-size:1.25rem;margin-top:2rem}
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:.35rem .5rem;
border-bottom:1px solid #ddd;vertical-align:top}td.points{white-space:nowrap}
.passed{color:#1a6b2e}.failed{color:#9b1c1c}.note{color:#555;font-size:.9rem}
p.message,p.hint{margin:.2rem 0}code{font-size:.92em}
@media (prefers-color-scheme:dark){body{background:#111;color:#eee}th,td{border-color:#444}
.passed{color:#7ad58f}.failed{color:#ff9b9b}.note{color:#aaa}}
"""


def _title(exercise: str | None) -> str:
    from attention_course.grading.registry import all_exercises

    known = all_exercises().get(exercise or "")
    return f"{exercise}: {_(known.title)}" if known is not None else (exercise or "?")


def _inline(text: str) -> str:
    """Escaped HTML, with `code` spans kept as code."""
    parts = re.split(r"(`[^`]+`)", safe_text(text))
    return "".join(f"<code>{html.escape(p[1:-1])}</code>" if p.startswith("`") and
                   p.endswith("`") and len(p) > 1 else html.escape(p) for p in parts)


def _md(text: str) -> str:
    """Text for Markdown: what Markdown or HTML would read as markup is escaped, `code`
    spans kept."""
    parts = re.split(r"(`[^`]+`)", safe_text(text, newlines=False))
    return "".join(p if p.startswith("`") and p.endswith("`") and len(p) > 1 else
                   re.sub(r"([\\*_\[\]<>#|!~])", r"\\\1", p).replace("&", "&amp;")
                   for p in parts)


def _records(records: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return sorted(records, key=lambda r: (r.get("exercise") or "", r["submission"]))


def student_html(student: str, records: Iterable[Mapping[str, Any]]) -> str:
    """One student's feedback over every exercise graded, as a self-contained page."""
    records = _records(records)
    total = sum(r["score"] for r in records)
    maximum = sum(r["max_score"] for r in records)
    lang = "zh-CN" if language() == "zh_CN" else "en"
    heading = _("Feedback for {student}").format(student=student)
    summary = _("Total: {score}/{max_score} points").format(score=total, max_score=maximum)
    body = [f"<h1>{_inline(heading)}</h1>", f"<p>{_inline(summary)}</p>"]
    for r in records:
        body.append(f"<h2>{_inline(_title(r.get('exercise')))}: "
                    f"{r['score']}/{r['max_score']}</h2>")
        if r.get("error"):
            why = _("Not graded: {why}").format(why=r["error"])
            body.append(f"<p class=\"failed\">{_inline(why)}</p>")
        if r["questions"]:
            columns = (_("question"), _("points"), _("feedback"))
            cells = "".join(f"<th scope=\"col\">{html.escape(c)}</th>" for c in columns)
            body.append(f"<table><thead><tr>{cells}</tr></thead><tbody>")
            for q in r["questions"]:
                status = "passed" if q["status"] == "passed" else "failed"
                hint = ""
                if q.get("hint") and q["status"] in ("failed", "error"):
                    text = _("hint: {hint}").format(hint=q["hint"])
                    hint = f"<p class=\"hint note\">{_inline(text)}</p>"
                body.append(
                    f"<tr><td><code>{html.escape(q['id'])}</code> ({html.escape(_(q['kind']))})"
                    f"</td><td class=\"points {status}\">{q['points']}/{q['max_points']}</td>"
                    f"<td><p class=\"message\">{_inline(q['message'])}</p>{hint}</td></tr>")
            body.append("</tbody></table>")
        if r.get("notebook_errors"):
            items = "".join(f"<li>{_inline(e)}</li>" for e in r["notebook_errors"])
            title = _inline(_("Errors while running the notebook:"))
            body.append(f"<p class=\"note\">{title}</p><ul>{items}</ul>")
    return (f"<!DOCTYPE html>\n<html lang=\"{lang}\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
            "style-src 'unsafe-inline'\">"
            f"<title>{html.escape(safe_text(heading, newlines=False))}</title>"
            f"<style>{_STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


def student_markdown(student: str, records: Iterable[Mapping[str, Any]]) -> str:
    """The same feedback as Markdown."""
    records = _records(records)
    total = sum(r["score"] for r in records)
    maximum = sum(r["max_score"] for r in records)
    lines = [f"# {_md(_('Feedback for {student}').format(student=student))}", "",
             _md(_("Total: {score}/{max_score} points").format(score=total,
                                                              max_score=maximum)), ""]
    for r in records:
        lines += [f"## {_md(_title(r.get('exercise')))}: {r['score']}/{r['max_score']}", ""]
        if r.get("error"):
            lines += [_md(_("Not graded: {why}").format(why=r["error"])), ""]
        for q in r["questions"]:
            lines.append(f"- `{q['id']}` ({_md(_(q['kind']))}), {q['points']}/"
                         f"{q['max_points']}: {_md(q['message'])}")
            if q.get("hint") and q["status"] in ("failed", "error"):
                lines.append(f"  {_md(_('hint: {hint}').format(hint=q['hint']))}")
        if r.get("notebook_errors"):
            lines += ["", _md(_("Errors while running the notebook:"))]
            lines += [f"- {_md(e)}" for e in r["notebook_errors"]]
        lines.append("")
    return "\n".join(lines)


def write_pages(folder: Path, records: Mapping[Any, Mapping[str, Any]],
                students: Iterable[str] | None = None) -> list[str]:
    """Write ``STUDENT/feedback.html`` and ``.md`` for ``students`` (default: all);
    returns the students written."""
    from attention_course.grading.gradebook import write_atomic

    by_student: dict[str, list[Mapping[str, Any]]] = {}
    for r in records.values():
        by_student.setdefault(r["student"], []).append(r)
    chosen = sorted(by_student if students is None else set(students) & set(by_student))
    for student in chosen:
        write_atomic(folder / student / "feedback.html",
                     student_html(student, by_student[student]))
        write_atomic(folder / student / "feedback.md",
                     student_markdown(student, by_student[student]))
    return chosen


def bundle(folder: Path, out: Path) -> list[Path]:
    """Zip each student's feedback pages and feedback files into ``out/STUDENT.zip``."""
    out.mkdir(parents=True, exist_ok=True)
    made = []
    for student in sorted(p for p in folder.iterdir() if p.is_dir() and
                          (p / "feedback.html").is_file()):
        target = out / f"{student.name}.zip"
        with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
            for path in sorted(student.iterdir()):
                if path.name in ("feedback.html", "feedback.md") or path.name.endswith(
                        ".feedback.txt"):
                    archive.write(path, f"{student.name}/{path.name}")
        made.append(target)
    return made
