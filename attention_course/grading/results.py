"""Results of a question and of a submission, and how a question's outcome is judged.

The same :func:`evaluate` turns the learner's outputs into points and a message, whether
they come from ``check(...)`` in the learner's kernel or from the grader's child process.
"""

from __future__ import annotations

import re
import textwrap
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from attention_course.grading import choices as choice_words
from attention_course.grading._driver import RAISED
from attention_course.grading.compare import NotPlainData, _at, compare, validate_plain
from attention_course.grading.spec import Case, Mistake, Question
from attention_course.i18n import _

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
    """``text`` as lines of at most ``width`` columns, each starting with ``indent``
    (continuation lines of a paragraph get two more spaces). Chinese characters take two
    columns and a line may break between any two of them."""
    lines = []
    for paragraph in text.splitlines() or [""]:
        if _WIDE.search(paragraph):
            lines += _wrap_wide(paragraph, width, indent, indent + "  ")
        else:
            lines += textwrap.wrap(paragraph, width, initial_indent=indent,
                                   subsequent_indent=indent + "  ",
                                   break_on_hyphens=False) or [indent.rstrip()]
    return lines


_WIDE = re.compile(r"[\u2e80-\u9fff\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef]")
# a token is one wide character, a run of other characters, or a run of spaces
_TOKEN = re.compile(r"[\u2e80-\u9fff\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef]|[^\s\u2e80-\u9fff"
                    r"\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef]+|\s+")
_NO_LINE_START = set("，。、：；？！）》」』”’")  # punctuation a line must not begin with


_NO_LINE_END = set("（《「『“‘")  # punctuation a line must not end with


def _glue_openings(tokens: list[str]) -> list[str]:
    """The tokens, each opening bracket or quote joined to the token after it."""
    glued: list[str] = []
    for token in tokens:
        if glued and glued[-1] and glued[-1][-1] in _NO_LINE_END and not token.isspace():
            glued[-1] += token
        else:
            glued.append(token)
    return glued


def _columns(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _wrap_wide(paragraph: str, width: int, first: str, rest: str) -> list[str]:
    """Greedy wrapping by display columns for text with wide (CJK) characters."""
    lines, line, used, space = [], first, _columns(first), ""
    for token in _glue_openings(_TOKEN.findall(paragraph.strip())):
        if token.isspace():
            space = " "
            continue
        size = _columns(space + token)
        if used + size > width and line.strip() and token[0] not in _NO_LINE_START:
            lines.append(line)
            line, used, space = rest, _columns(rest), ""
            size = _columns(token)
        line += space + token
        used += size
        space = ""
    lines.append(line if line.strip() else first.rstrip())
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
        mark = ("PASS" if self.passed else "PART" if self.points else
                "FAIL" if self.status == "failed" else "----")
        lines = [_("[{mark}] {id} ({kind}) `{symbol}`: {points}/{max_points} points").format(
            mark=mark, id=self.id, kind=_(self.kind), symbol=self.symbol,
            points=self.points, max_points=self.max_points)]
        if not self.passed:
            lines += wrap_indented(self.message)
            if show_hint and self.hint and self.status in ("failed", "error"):
                lines += wrap_indented(_("hint: {hint}").format(hint=self.hint))
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


def result(question: Question, status: str, message: str,
           points: int | None = None) -> QuestionResult:
    """A question's outcome; full points when passed unless ``points`` says otherwise."""
    if points is None:
        points = question.points if status == "passed" else 0
    hint = _(question.hint) if question.hint else ""
    if question.section:
        hint += _(" (Reread the chapter's section \"{section}\".)").format(
            section=plain_maths(_(question.section)))
    return QuestionResult(
        id=question.id,
        symbol=question.symbol,
        title=_(question.title) if question.title else "",
        points=points,
        max_points=question.points,
        status=status,
        message=message,
        hint=hint,
        kind=question.kind,
    )


_SYMBOLS = {r"\infty": "∞", r"\times": "×", r"\cdot": "·", r"\ldots": "…", r"\le": "≤",
            r"\ge": "≥", r"\to": "→"}


def plain_maths(text: str) -> str:
    r"""``text`` with its inline maths written as plain text, for a terminal:
    ``$-\infty$`` -> ``-∞``, ``$\sqrt{d}$`` -> ``√d``, ``$N \times N$`` -> ``N × N``."""
    def plain(match: re.Match) -> str:
        maths = re.sub(r"\\sqrt\{([^{}]*)\}", r"√\1", match.group(1))
        for command, symbol in _SYMBOLS.items():
            maths = re.sub(re.escape(command) + r"(?![A-Za-z])", symbol, maths)
        return maths.replace("\\", "").replace("{", "").replace("}", "")

    return re.sub(r"\$([^$]+)\$", plain, text)


def explain_error(question: Question, status: str, message: str) -> QuestionResult:
    """A question whose code raised (``status`` from the child: how it failed)."""
    name = question.symbol
    if status == "not_implemented":
        return result(question, status, _("not implemented yet: `{name}` still raises "
                                          "NotImplementedError").format(name=name))
    if status == "missing":
        return result(question, status, _("`{name}` is not defined in the notebook (did the "
                                          "cell that defines it run without an error?)"
                                          ).format(name=name))
    return result(question, "error", raised(name, message))


def raised(name: str, error: str) -> str:
    """"`name` raised ValueError: ..." in the current language."""
    return _("`{name}` raised {error}").format(name=name, error=error)


def _where(case: Case, number: int) -> str:
    if case.hidden:
        return _("held-back case {number} (the check does not show its inputs)").format(
            number=number)
    if case.label:
        return _("case {number} ({label})").format(number=number, label=_(case.label))
    return _("case {number}").format(number=number)


def _stripped(value: Any) -> Any:
    """A choice answered with stray spaces around it (``"the same "``) is that choice."""
    if isinstance(value, str):
        return value.strip()
    if type(value) in (list, tuple):
        return type(value)(_stripped(v) for v in value)
    if type(value) is dict and _raised(value) is None:
        return {k: _stripped(v) for k, v in value.items()}
    return value


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    return []


REVEALING = ("implement", "debug")  # kinds whose messages may show an expected value


def _problem(question: Question, want: Any, got: Any, tolerance: tuple[float, float],
             path: str | None = None) -> str | None:
    """What is wrong with ``got`` (``None`` when it matches), choices and gradients included.

    Messages show an expected value only where the value is not the point of the question
    (an entry of a tensor a learner implements); a derived number, a prediction or a
    measurement is never given away.
    """
    reveal = question.kind in REVEALING
    path = _("output") if path is None else path
    if question.choices:
        stray = [s for s in _strings(got) if s not in question.choices]
        if isinstance(want, str) and not isinstance(got, str):
            stray = [got]  # a bool, a number, None where a choice is asked for
        if stray and choice_words.translated():
            return _("{answer} is not one of the choices: {choices} (write a choice's words, "
                     "its letter or its number)").format(
                answer=repr(stray[0]), choices=choice_words.listed(question.choices))
        if stray:
            return _("{answer} is not one of the choices: {choices}").format(
                answer=repr(stray[0]), choices=choice_words.listed(question.choices))
        if (choice_words.translated() and type(want) is str and type(got) is str
                and got != want):  # a choice, quoted in the learner's language
            return _at(path) + _("{answer} is not the right answer").format(
                answer=choice_words.shown(got))
    if question.grad and type(want) is dict and type(got) is dict and set(got) == set(want):
        problem = compare(want["output"], got["output"], *tolerance, path, reveal)
        if problem is not None:
            return problem
        rtol, atol = tolerance
        for i, (w, g) in enumerate(zip(want["gradients"], got["gradients"], strict=True)):
            # a gradient's rounding grows with its size: tolerate it relative to that
            scale = float(w.detach().abs().max()) if w.numel() else 0.0
            problem = compare(w, g, rtol, max(atol, rtol * scale),
                              _("gradient of input {number}").format(number=i + 1), reveal)
            if problem is not None:
                return _("the output is right, but not its gradient: {problem}").format(
                    problem=problem)
        return None
    return compare(want, got, *tolerance, path, reveal)


def _forward(question: Question, value: Any) -> Any:
    """What an answer computes (without its gradients, for a question that has them)."""
    if question.grad and type(value) is dict and "output" in value:
        return value["output"]
    return value


def _recognised(question: Question, mistake: Mistake, wrong: Mapping[str, list[Any]] | None,
                index: int, want: Any, got: Any, tolerance: tuple[float, float],
                key: str | None = None) -> bool:
    """Whether ``got`` is what ``mistake`` answers on this case (where the mistake goes
    wrong): the whole answer, or, for a question with gradients, what it computes (a
    mistake reached along another path, with another gradient, is still the mistake)."""
    outputs = (wrong or {}).get(mistake.name)
    if outputs is None:
        return False
    theirs = outputs[index]
    if _raised(theirs) is not None:
        return False  # the mistake does not apply to this case
    if key is not None:
        if type(theirs) is not dict or key not in theirs:
            return False
        theirs = theirs[key]
    if compare(want, theirs, *tolerance) is None:
        return False  # this mistake makes no difference on this case
    if compare(theirs, got, *tolerance) is None:
        return True
    theirs, mine, right = (_forward(question, v) for v in (theirs, got, want))
    return question.grad and compare(right, theirs, *tolerance) is not None and (
        compare(theirs, mine, *tolerance) is None)


def _shapes_differ(want: Any, got: Any) -> bool:
    """Whether ``got`` is not even shaped like ``want`` (a tensor of another shape, a
    container of another length or keys): no ``diagnose`` hook applies then."""
    import torch

    if isinstance(want, torch.Tensor):
        return not isinstance(got, torch.Tensor) or got.shape != want.shape
    if isinstance(want, (list, tuple)):
        return (not isinstance(got, (list, tuple)) or len(got) != len(want)
                or any(_shapes_differ(w, g) for w, g in zip(want, got, strict=True)))
    if isinstance(want, dict):
        return (not isinstance(got, dict) or set(got) != set(want)
                or any(_shapes_differ(want[k], got[k]) for k in want))
    return False


def _raised(value: Any) -> str | None:
    """The error of a case whose call raised (see ``_driver.call_all``), else ``None``."""
    if type(value) is dict and set(value) == {RAISED} and type(value[RAISED]) is str:
        return value[RAISED]
    return None


def _judge_cases(question: Question, cases: list[Case], expected: list[Any], got: list[Any],
                 wrong: Mapping[str, list[Any]] | None, tolerance: tuple[float, float],
                 key: str | None = None, path: str | None = None) -> tuple[str, str] | None:
    """``None`` when every case matches, else where and what went wrong.

    The earliest failing case is described: by the known mistake that explains every
    failing case, or the one its output matches, else by what it raised or what differs
    (with the ``diagnose`` hook's words), followed by a known mistake a later case shows.
    """
    failing: list[tuple[int, str]] = []
    matches: dict[int, list[Mistake]] = {}
    for index, (want, mine) in enumerate(zip(expected, got, strict=True)):
        if key is not None:
            want = want[key]
            mine = mine[key] if type(mine) is dict and key in mine else mine
        error = _raised(mine)
        if error is not None:
            failing.append((index, raised(question.symbol, error)))
            continue
        problem = _problem(question, want, mine, tolerance, path)
        if problem is None:
            continue
        failing.append((index, problem))
        matches[index] = [m for m in question.mistakes
                          if _recognised(question, m, wrong, index, want, mine, tolerance, key)]
    if not failing:
        return None
    first, problem = failing[0]
    everywhere = [m for m in question.mistakes
                  if all(m in matches.get(i, []) for i, _text in failing)]
    chosen = everywhere or matches.get(first, [])
    if chosen:
        return _where(cases[first], first + 1), _(chosen[0].message)
    want = expected[first] if key is None else expected[first][key]
    mine = got[first]
    if key is not None and type(mine) is dict and key in mine:
        mine = mine[key]
    if question.diagnose is not None and _raised(mine) is None and not _shapes_differ(want, mine):
        try:
            teaching = question.diagnose(cases[first], want, mine)
        except Exception:  # a diagnose hook must never break grading
            teaching = None
        if teaching:
            problem = _("{teaching}; {problem}").format(teaching=teaching, problem=problem)
    later = [(i, matches[i][0]) for i, _problem_text in failing if matches.get(i)]
    if later:
        index, mistake = later[0]
        problem += _("; on {where}, what you return is a known mistake: {mistake}").format(
            where=_where(cases[index], index + 1), mistake=_(mistake.message))
    return _where(cases[first], first + 1), problem


def evaluate(
    question: Question,
    cases: list[Case],
    expected: list[Any],
    outputs: Any,
    wrong: Mapping[str, list[Any]] | None = None,
) -> QuestionResult:
    """Compare the learner's outputs (one per case) with the reference's.

    ``wrong`` holds, per known mistake, what it outputs on each case: a failing output that
    matches one is explained by that mistake's message.
    """
    try:
        outputs = validate_plain(outputs)
    except NotPlainData as error:
        return result(question, "error", _("`{name}` returned {problem}").format(
            name=question.symbol, problem=error))
    if type(outputs) not in (list, tuple) or len(outputs) != len(expected):
        return result(question, "error", _("the grader received a malformed answer"))
    if question.choices:  # stray spaces dropped; a choice named in the learner's language,
        # by letter or number, is the English choice
        outputs = [choice_words.as_choices(question.choices, _stripped(o)) for o in outputs]
    if question.parts is not None:
        return _evaluate_parts(question, cases, expected, list(outputs), wrong)
    found = _judge_cases(question, cases, expected, list(outputs), wrong,
                         (question.rtol, question.atol))
    if found is None:
        return result(question, "passed", _("all {count} cases match").format(
            count=len(expected)))
    status = "error" if all(_raised(o) for o in outputs) else "failed"
    return result(question, status, _("{where}: {problem}").format(
        where=found[0], problem=found[1]))


def _evaluate_parts(question: Question, cases: list[Case], expected: list[Any],
                    outputs: list[Any], wrong: Mapping[str, list[Any]] | None) -> QuestionResult:
    """Partial credit: each key of the returned dict earns its points on its own."""
    parts = dict(question.parts or {})
    for index, got in enumerate(outputs):
        error = _raised(got)
        if error is not None:
            return result(question, "error", _("{where}: {problem}").format(
                where=_where(cases[index], index + 1),
                problem=raised(question.symbol, error)), points=0)
        if type(got) is not dict or set(got) != set(parts):
            keys = ", ".join(repr(k) for k in parts)
            found = sorted(got) if type(got) is dict else type(got).__name__
            return result(question, "failed", _("return a dict with the keys {keys} (got "
                                                "{found})").format(keys=keys, found=found),
                          points=0)
    problems: dict[tuple[str, str], list[str]] = {}
    points = 0
    for key, worth in parts.items():
        tolerance = question.part_tolerance.get(key, (question.rtol, question.atol))
        found = _judge_cases(question, cases, expected, outputs, wrong, tolerance, key,
                             path=repr(key))
        if found is None:
            points += worth
        else:  # parts that fail the same way on the same case are reported once
            where, text = found
            problems.setdefault((where, text.replace(_at(repr(key)), "")), []).append(repr(key))
    if not problems:
        return result(question, "passed", _("every part matches on all {count} cases").format(
            count=len(expected)))
    text = _("; ").join(_("{parts} in {where}: {problem}").format(
        parts=_and(keys), where=where, problem=message)
        for (where, message), keys in problems.items())
    return result(question, "failed", text, points=points)


def _and(names: list[str]) -> str:
    if len(names) == 1:
        return names[0]
    return _("{names} and {last}").format(names=_(", ").join(names[:-1]), last=names[-1])


def builds_on_failed(questions: Sequence[Question],
                     results: Sequence[QuestionResult]) -> list[QuestionResult]:
    """Each failed result whose question builds on an earlier one that also failed gets a
    message that says so first: fixing the earlier answer may fix this one too."""
    by_id = {r.id: r for r in results}
    symbols = {q.id: q.symbol for q in questions}
    wrong = ("failed", "error", "timeout", "crashed")  # not merely unfinished or missing
    out = []
    for question, res in zip(questions, results, strict=True):
        broken = [i for i in question.builds_on if i in by_id and by_id[i].status in wrong]
        if res.status not in wrong or not broken:
            out.append(res)
            continue
        names = ", ".join(f"{i} (`{symbols[i]}`)" for i in broken)
        note = _("this question calls your answer to {names}, which did not pass: fix that "
                 "first, it may be what fails here. ").format(names=names)
        out.append(replace(res, message=note + res.message))
    return out
