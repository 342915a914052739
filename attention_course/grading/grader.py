"""Grade one submitted notebook: read it, run it sandboxed, compare, award points.

A question whose call hangs or kills its process costs only that question: the grader
starts a fresh child for the questions still to answer (re-running the notebook), as long
as the submission's time budget lasts. Code at the notebook's top level that hangs or
exits ends the grading of that notebook, with that reason for every question left.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import time
from pathlib import Path
from typing import Any

from attention_course.grading.checking import Prepared, prepare
from attention_course.grading.registry import all_exercises, get_exercise
from attention_course.grading.results import (
    QuestionResult,
    SubmissionResult,
    builds_on_failed,
    evaluate,
    explain_error,
    result,
)
from attention_course.grading.sandbox import Attempt, ForkServer, GraderError, Limits, run_child
from attention_course.grading.spec import Exercise
from attention_course.grading.text import display_path
from attention_course.i18n import _

# What is read: a notebook saved with its outputs (figures) may be large, and its outputs
# are dropped before grading. What is run is bounded apart: its code.
MAX_NOTEBOOK_BYTES = 200 << 20
MAX_CODE_BYTES = 2 << 20


class SubmissionError(ValueError):
    """The submission cannot be graded at all (unreadable file, unknown exercise)."""


def _refuse_unless_plain_file(info: os.stat_result) -> None:
    if stat.S_ISLNK(info.st_mode):
        raise SubmissionError(_("the submission is a symbolic link, not a notebook: "
                                "hand in the notebook file itself"))
    if not stat.S_ISREG(info.st_mode):
        kind = (_("a folder") if stat.S_ISDIR(info.st_mode) else
                _("a named pipe") if stat.S_ISFIFO(info.st_mode) else
                _("a device") if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode)
                else _("a socket") if stat.S_ISSOCK(info.st_mode) else _("a special file"))
        raise SubmissionError(_("the submission is {kind}, not a regular file").format(
            kind=kind))
    if info.st_nlink > 1:
        raise SubmissionError(_("the submission file has {count} hard links (it may be "
                                "another file under a second name): hand in a copy of "
                                "the notebook").format(count=info.st_nlink))


def read_notebook(path: Path) -> dict[str, Any]:
    """The notebook's JSON, checked to have the shape of an nbformat 4 notebook.

    Only a regular file with no other name is read: a symbolic link, a hard link, a
    named pipe or a device is refused (a link could point at a solution or a classmate's
    notebook). The file is opened without following links and checked again once open.
    """
    try:
        _refuse_unless_plain_file(os.lstat(path))
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            info = os.fstat(f.fileno())
            _refuse_unless_plain_file(info)
            if info.st_size > MAX_NOTEBOOK_BYTES:
                raise SubmissionError(_("the notebook file is too large ({size} MB)").format(
                    size=info.st_size >> 20))
            data = f.read(MAX_NOTEBOOK_BYTES + 1)
    except OSError as error:
        raise SubmissionError(_("the notebook file could not be read: {error}").format(
            error=error.strerror or type(error).__name__)) from None
    try:
        nb = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:  # ValueError: bad
        # JSON, or an integer of thousands of digits (Python's limit on converting them)
        message = str(error).splitlines()[0][:200]
        raise SubmissionError(_("the notebook file is not valid JSON ({error})").format(
            error=message)) from None
    if type(nb) is not dict or type(nb.get("cells")) is not list:
        raise SubmissionError(_("the file is not a Jupyter notebook (no list of cells)"))
    if nb.get("nbformat") != 4:
        raise SubmissionError(_("unsupported notebook format {format} (need 4)").format(
            format=repr(nb.get("nbformat"))[:40]))
    for cell in nb["cells"]:  # saved outputs are not graded: only the code is run
        if type(cell) is dict:
            cell.pop("outputs", None)
            cell.pop("attachments", None)
    return nb


def _as_python(source: str) -> str:
    """A cell as Jupyter runs it: IPython's own input transformation turns magics and
    shell escapes into calls of ``get_ipython()`` (which the sandbox provides), and leaves
    everything else, a continuation line that starts with ``!=`` included, as it is."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:  # no IPython: the code as it is
        return source
    try:
        return TransformerManager().transform_cell(source)
    except Exception:  # noqa: BLE001 - what IPython cannot read, Python reports when run
        return source


def code_cells(nb: dict[str, Any]) -> list[str]:
    """The source of every code cell, in order, as Jupyter runs it (:func:`_as_python`)."""
    cells = []
    for cell in nb["cells"]:
        if type(cell) is not dict or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        if type(source) is list and all(type(line) is str for line in source):
            source = "".join(source)
        if type(source) is not str:
            raise SubmissionError(_("a code cell's source is neither text nor a list of "
                                    "lines"))
        cells.append(_as_python(source))
    if sum(len(c) for c in cells) > MAX_CODE_BYTES:
        raise SubmissionError(_("the notebook holds more than {size} MB of code").format(
            size=MAX_CODE_BYTES >> 20))
    return cells


def exercise_of(nb: dict[str, Any], path: Path, override: str | None = None) -> Exercise:
    """The exercise: ``override``, else the notebook's metadata, else its file name."""
    if override:
        return get_exercise(override)
    meta = nb.get("metadata")
    meta = meta.get("attention_course") if type(meta) is dict else None
    name = meta.get("exercise") if type(meta) is dict else None
    if type(name) is str and name in all_exercises():
        return get_exercise(name)
    for exercise_id in sorted(all_exercises(), key=len, reverse=True):
        if exercise_id in path.name:
            return get_exercise(exercise_id)
    raise SubmissionError(_(
        "cannot tell which exercise this is: the notebook metadata has no known "
        "attention_course.exercise and the file name names none (use --exercise)"
    ))


def _signal_name(status: int) -> str:
    try:
        return signal.Signals(status - 128).name
    except ValueError:
        return f"signal {status - 128}"


def _how_it_ended(attempt: Attempt, limits: Limits) -> tuple[str, str]:
    """(status, reason) for work the child left unfinished."""
    if attempt.end == "timeout":
        return "timeout", _("did not finish within the {limit} s limit").format(
            limit=f"{limits.timeout:g}")
    if attempt.end == "violation":
        return "crashed", _("sent the grader malformed or oversized data")
    if attempt.end == "memory":
        return "crashed", _("used more than the {limit} MB memory limit").format(
            limit=limits.memory_mb)
    status = attempt.exit_status
    if status is not None and status > 128:
        name = _signal_name(status)
        why = {"SIGXCPU": _(" (CPU time limit)"), "SIGXFSZ": _(" (file size limit)"),
               "SIGKILL": _(" (killed, perhaps out of memory)")}.get(name, "")
        return "crashed", _("the process was killed by {signal}").format(signal=name) + why
    return "crashed", _("the process ended early (exit status {status}; os._exit?)").format(
        status=status)


def _reason_in_cells(attempt: Attempt, limits: Limits) -> tuple[str, str]:
    status, why = _how_it_ended(attempt, limits)
    if attempt.current_cell is None:
        return status, _("the notebook did not run to the end: {why}").format(why=why)
    return status, _("the notebook did not run to the end in code cell {cell}: {why}").format(
        cell=attempt.current_cell + 1, why=why)


def _judge(prepared: Prepared, answer: tuple) -> QuestionResult:
    """The question's outcome. Whatever a submission returned, this gives a result: an
    answer that even the comparison cannot take (a type no check foresaw) is that
    question's error, with its kind, never a failure of the whole batch."""
    q = prepared.question
    try:
        if answer[0] == "result":
            return evaluate(q, prepared.cases, prepared.expected, answer[1], prepared.wrong)
        if answer[0] == "error":
            return explain_error(q, answer[1], answer[2])
        return result(q, answer[1], answer[2])
    except Exception as error:  # noqa: BLE001 - a student's answer never stops the batch
        return result(q, "error", _("`{name}` returned an answer that could not be compared "
                                    "({kind})").format(name=q.symbol,
                                                       kind=type(error).__name__))


def submission_name(student: str, exercise: str | None, path: Path) -> str:
    """The record's name: ``student/exercise`` (the file's stem when the exercise is unknown)."""
    return f"{student}/{exercise or path.stem}"


def _ungradable(path: Path, student: str, exercise: str | None,
                message: str) -> SubmissionResult:
    """0 for every question (when the exercise is known from --exercise or the file name)."""
    try:
        ex = exercise_of({}, path, exercise)
    except (SubmissionError, KeyError):
        return SubmissionResult(student, submission_name(student, None, path),
                                display_path(path), None, 0, 0, [], error=message)
    questions = [result(q, "error", _("not graded: {why}").format(why=message))
                 for q in ex.questions]
    return SubmissionResult(student, submission_name(student, ex.id, path), display_path(path),
                            ex.id, 0, ex.max_score, questions, error=message)


def grade_notebook(
    path: str | Path,
    exercise: str | None = None,
    limits: Limits | None = None,
    student: str | None = None,
    server: ForkServer | None = None,
) -> SubmissionResult:
    """Grade one submission; a broken or hostile notebook gets 0 with a reason.

    ``student`` defaults to the name of the notebook's folder; ``server`` is the batch's
    fork server (without one, a fresh process is started). Raises :class:`GraderError`
    only when the grader itself fails.
    """
    limits = limits or Limits()
    path = Path(path)
    student = student or path.absolute().parent.name or "student"
    try:
        nb = read_notebook(path)
        cells = code_cells(nb)
        ex = exercise_of(nb, path, exercise)
    except (SubmissionError, KeyError) as error:
        return _ungradable(path, student, exercise, str(error).strip("'\""))
    prepared = prepare(ex.id)
    answers: dict[str, tuple] = {}
    pending = [q.id for q in ex.questions]
    notebook_errors: list[str] = []
    isolation: dict[str, Any] = {}
    output = ""
    used = 0.0
    for _attempt in range(len(pending) + 1):
        remaining = limits.timeout - used
        if not pending or remaining <= 0.5:
            break
        started = time.monotonic()
        attempt = run_child(
            cells,
            [prepared[qid].call_spec() for qid in pending],
            {qid: limits.time_limit(prepared[qid].question.time_limit) for qid in pending},
            limits,
            remaining,
            ex.forbidden_imports,
            server,
        )
        used += min(attempt.elapsed, time.monotonic() - started)
        if not isolation:
            isolation = attempt.isolation
            output = attempt.output
            notebook_errors = [_("code cell {cell}: {error}").format(cell=i + 1, error=e)
                               for i, e in attempt.cell_errors]
        answers.update(attempt.answers)
        if attempt.end == "done":
            for qid in pending:
                answers.setdefault(qid, ("error", "missing", ""))
            break
        if not attempt.cells_done:
            status, why = _reason_in_cells(attempt, limits)
            for qid in pending:
                answers.setdefault(qid, ("fail", status, why))
            break
        current = attempt.current_question
        if current is not None and current not in answers:
            status, why = _how_it_ended(attempt, limits)
            if status == "timeout":
                limit = limits.time_limit(prepared[current].question.time_limit)
                why = (
                    _("did not finish within its {limit} s limit").format(limit=f"{limit:g}")
                    if limit <= remaining
                    else _("did not finish before the submission's {limit} s ran out").format(
                        limit=f"{limits.timeout:g}")
                )
            answers[current] = ("fail", status, f"`{prepared[current].question.symbol}` {why}")
        pending = [qid for qid in pending if qid not in answers]
    for qid in pending:
        answers.setdefault(
            qid, ("fail", "timeout", _("not graded: the submission's time budget was used up"))
        )
    questions = builds_on_failed(ex.questions,
                                 [_judge(prepared[q.id], answers[q.id]) for q in ex.questions])
    return SubmissionResult(
        student=student,
        submission=submission_name(student, ex.id, path),
        file=display_path(path),
        exercise=ex.id,
        score=sum(q.points for q in questions),
        max_score=ex.max_score,
        questions=questions,
        notebook_errors=notebook_errors,
        isolation=isolation,
        output=output,
    )


__all__ = ["ForkServer", "GraderError", "Limits", "SubmissionError", "grade_notebook",
           "read_notebook"]
