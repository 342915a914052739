"""Instant feedback inside the learner's notebook: ``check("01_attention_pooling", fn)``.

``check`` runs the learner's code in the learner's own kernel (no sandbox: it is their
machine) on the same cases the grader uses, and compares with the reference exactly as
the grader does. It prints, and never raises, so a notebook with unfinished answers still
runs from top to bottom.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Any

from attention_course.grading._driver import call_all, call_case, describe_error, to_plain
from attention_course.grading.registry import get_exercise
from attention_course.grading.results import (
    QuestionResult,
    builds_on_failed,
    evaluate,
    explain_error,
    result,
    wrap_indented,
)
from attention_course.grading.spec import Case, Exercise, Question
from attention_course.i18n import _


@dataclass(frozen=True)
class Prepared:
    """A question with its cases drawn once, the reference's answers to them, and what
    each known mistake answers."""

    question: Question
    cases: list[Case]
    expected: list[Any]
    wrong: dict[str, list[Any]]

    def call_spec(self) -> dict[str, Any]:
        q = self.question
        return {
            "id": q.id,
            "symbol": q.symbol,
            "call": q.call,
            "method": q.method,
            "grad": q.grad,
            "cases": [case.to_plain() for case in self.cases],
        }


def _call(question: Question, target: Any, case: Case) -> Any:
    return to_plain(call_case(target, question.call, question.method, case.to_plain(),
                              grad=question.grad))


def _answers(question: Question, target: Any, cases: list[Case]) -> list[Any]:
    """``target``'s outputs on every case, with torch's generator seeded the same way
    (the reference and the known mistakes must not raise)."""
    import torch

    with torch.random.fork_rng():
        torch.manual_seed(0)
        return [_call(question, target, c) for c in cases]


def _learner_answers(prepared: Prepared, target: Any) -> list[Any]:
    """The learner's outputs, exactly as the grader's child collects them."""
    import torch

    with torch.random.fork_rng():
        torch.manual_seed(0)
        return call_all(target, prepared.call_spec())


@functools.cache
def prepare(exercise_id: str) -> dict[str, Prepared]:
    """Every question of the exercise, by id, with its cases, the reference's outputs and
    the outputs of its known mistakes."""
    prepared = {}
    for question in get_exercise(exercise_id).questions:
        cases = list(question.cases())
        expected = _answers(question, question.reference, cases)
        spec = {"call": question.call, "method": question.method, "grad": question.grad,
                "cases": [c.to_plain() for c in cases]}
        # a mistake may not apply to every case (it raises there): it is matched elsewhere
        wrong = {m.name: call_all(m.wrong, spec) for m in question.mistakes}
        prepared[question.id] = Prepared(question, cases, expected, wrong)
    return prepared


def run_question(prepared: Prepared, target: Any) -> QuestionResult:
    """Call ``target`` on every case of the question and judge the outputs."""
    q = prepared.question
    if target is None:
        return explain_error(q, "missing", "")
    try:
        outputs = _learner_answers(prepared, target)
    except NotImplementedError:
        return explain_error(q, "not_implemented", "")
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # noqa: B036 - SystemExit from learner code is an answer too
        return explain_error(q, "error", describe_error(error))
    return evaluate(q, prepared.cases, prepared.expected, outputs, prepared.wrong)


def _select(exercise: Exercise, targets: tuple[Any, ...], namespace: dict[str, Any]):
    """Pairs (question, object to test) for the targets, or every question."""
    if not targets:
        return [(q, namespace.get(q.symbol)) for q in exercise.questions]
    chosen = []
    for target in targets:
        key = target if isinstance(target, str) else getattr(target, "__name__", None)
        try:
            question = exercise.question(str(key))
        except KeyError as error:
            raise LookupError(str(error).strip("'\"")) from None
        obj = namespace.get(question.symbol) if isinstance(target, str) else target
        chosen.append((question, obj))
    return chosen


def run_checks(
    exercise_id: str, *targets: Any, namespace: dict[str, Any] | None = None
) -> list[QuestionResult]:
    """Check the targets (functions, classes, question ids or symbol names) or everything.

    Symbols named by string, or every question's symbol when no target is given, are
    looked up in ``namespace`` (default: the caller's globals).
    """
    if namespace is None:
        frame = inspect.currentframe()
        caller = frame.f_back if frame is not None else None
        namespace = dict(caller.f_globals) if caller is not None else {}
    exercise = get_exercise(exercise_id)
    prepared = prepare(exercise_id)
    chosen = _select(exercise, targets, namespace)
    wanted = {q.id for q, _obj in chosen}
    # the earlier questions a chosen one builds on are checked too, to say when they fail
    objects = {q.id: namespace.get(q.symbol) for q in exercise.questions}
    objects.update({q.id: obj for q, obj in chosen})
    needed = wanted | {i for q, _obj in chosen for i in q.builds_on}
    by_id = {}
    for question in exercise.questions:
        if question.id not in needed:
            continue
        try:
            by_id[question.id] = run_question(prepared[question.id], objects[question.id])
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # noqa: B036 - feedback must never crash the notebook
            by_id[question.id] = result(question, "error", _("checking failed: {error}").format(
                error=describe_error(error)))
    questions = [q for q in exercise.questions if q.id in by_id]
    annotated = dict(zip(by_id, builds_on_failed(questions, list(by_id.values())), strict=True))
    return [annotated[q.id] for q, _obj in chosen]


def check(exercise_id: str, *targets: Any) -> None:
    """Print instant feedback for the learner's code; never raises.

    ``check("01_attention_pooling", gaussian_weights)`` checks one answer;
    ``check("01_attention_pooling")`` checks every question and prints the total.
    """
    frame = inspect.currentframe()
    caller = frame.f_back if frame is not None else None
    namespace = dict(caller.f_globals) if caller is not None else {}
    try:
        results = run_checks(exercise_id, *targets, namespace=namespace)
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # noqa: B036
        print(_("check could not run:"))
        print("\n".join(wrap_indented(describe_error(error))))
        return
    for r in results:
        print(r.line())
    if not targets:
        score = sum(r.points for r in results)
        total = sum(r.max_points for r in results)
        print(_("Total: {score}/{total} points").format(score=score, total=total))
