"""Results of a question and of a submission, and how a question's outcome is judged.

The same :func:`evaluate` turns the learner's outputs into points and a message, whether
they come from ``check(...)`` in the learner's kernel or from the grader's child process.
"""

from __future__ import annotations

import textwrap
from dataclasses import asdict, dataclass, field
from typing import Any

from attention_course.grading.compare import NotPlainData, compare, validate_plain
from attention_course.grading.spec import Case, Question

STATUSES = (
    "passed",  # every case matches the reference
    "failed",  # an output differs from the reference
    "not_implemented",  # still raises NotImplementedError
    "missing",  # the notebook does not define the symbol
    "error",  # raised an exception, or returned something that is not plain data
    "timeout",  # did not finish in time
    "crashed",  # the process running it ended or was killed
)


WIDTH = 76  # a rendered code-output box shows 77 characters at 1280 px, 89 from 1440 px
INDENT = "    "


def wrap_indented(text: str, indent: str = INDENT, width: int = WIDTH) -> list[str]:
    """``text`` as lines of at most ``width`` characters, each starting with ``indent``
    (continuation lines of a paragraph get two more spaces)."""
    lines = []
    for paragraph in text.splitlines() or [""]:
        lines += textwrap.wrap(paragraph, width, initial_indent=indent,
                               subsequent_indent=indent + "  ",
                               break_on_hyphens=False) or [indent.rstrip()]
    return lines


@dataclass(frozen=True)
class QuestionResult:
    id: str
    symbol: str
    title: str
    points: int
    max_points: int
    status: str
    message: str
    hint: str = ""
    kind: str = "implement"

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def line(self, show_hint: bool = True) -> str:
        """A short first line (mark, id, symbol, points), then the message and the hint
        wrapped onto indented lines of at most ``WIDTH`` characters."""
        mark = "PASS" if self.passed else "FAIL" if self.status == "failed" else "----"
        lines = [f"[{mark}] {self.id} `{self.symbol}`: {self.points}/{self.max_points} points"]
        if not self.passed:
            lines += wrap_indented(self.message)
            if show_hint and self.hint and self.status in ("failed", "error"):
                lines += wrap_indented(f"hint: {self.hint}")
        return "\n".join(lines)


@dataclass
class SubmissionResult:
    """One graded notebook: who, which exercise, the points and why.

    ``submission`` names the record (``student/exercise``); ``file`` is the notebook's path.
    """

    student: str
    submission: str
    file: str
    exercise: str | None
    score: int
    max_score: int
    questions: list[QuestionResult]
    error: str | None = None
    notebook_errors: list[str] = field(default_factory=list)
    isolation: dict[str, Any] = field(default_factory=dict)
    output: str = ""
    grader_error: bool = False

    def to_json(self) -> dict[str, Any]:
        """The JSON record of DESIGN.md (``output`` stays out: it is not deterministic)."""
        return {
            "student": self.student,
            "submission": self.submission,
            "file": self.file,
            "exercise": self.exercise,
            "score": self.score,
            "max_score": self.max_score,
            "error": self.error,
            "questions": [q.to_json() for q in self.questions],
            "notebook_errors": self.notebook_errors,
            "isolation": self.isolation,
        }


def result(question: Question, status: str, message: str) -> QuestionResult:
    points = question.points if status == "passed" else 0
    return QuestionResult(
        id=question.id,
        symbol=question.symbol,
        title=question.title,
        points=points,
        max_points=question.points,
        status=status,
        message=message,
        hint=question.hint,
        kind=question.kind,
    )


def explain_error(question: Question, status: str, message: str) -> QuestionResult:
    """A question whose code raised (``status`` from the child: how it failed)."""
    name = question.symbol
    if status == "not_implemented":
        return result(question, status, f"not implemented yet: `{name}` still raises "
                      "NotImplementedError")
    if status == "missing":
        return result(question, status, f"`{name}` is not defined in the notebook (did the "
                      "cell that defines it run without an error?)")
    return result(question, "error", f"`{name}` raised {message}")


def evaluate(
    question: Question, cases: list[Case], expected: list[Any], outputs: Any
) -> QuestionResult:
    """Compare the learner's outputs (one per case) with the reference's."""
    try:
        outputs = validate_plain(outputs)
    except NotPlainData as error:
        return result(question, "error", f"`{question.symbol}` returned {error}")
    if type(outputs) not in (list, tuple) or len(outputs) != len(expected):
        return result(question, "error", "the grader received a malformed answer")
    for number, (case, want, got) in enumerate(zip(cases, expected, outputs, strict=True), start=1):
        problem = compare(want, got, question.rtol, question.atol)
        if problem is None:
            continue
        where = f"case {number}" + (f" ({case.label})" if case.label else "")
        if question.diagnose is not None and "shape" not in problem:
            try:
                teaching = question.diagnose(case, want, got)
            except Exception:  # a diagnose hook must never break grading
                teaching = None
            if teaching:
                problem = f"{teaching}; {problem}"
        return result(question, "failed", f"{where}: {problem}")
    return result(question, "passed", f"all {len(expected)} cases match")
