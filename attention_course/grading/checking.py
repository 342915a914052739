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

from attention_course.grading._driver import call_case, describe_error, to_plain
from attention_course.grading.registry import get_exercise
from attention_course.grading.results import (
    QuestionResult,
    evaluate,
    explain_error,
    result,
    wrap_indented,
)
from attention_course.grading.spec import Case, Exercise, Question


@dataclass(frozen=True)
class Prepared:
    """A question with its cases drawn once and the reference's answers to them."""

    question: Question
    cases: list[Case]
    expected: list[Any]

    def call_spec(self) -> dict[str, Any]:
        q = self.question
        return {
            "id": q.id,
            "symbol": q.symbol,
            "call": q.call,
            "method": q.method,
            "cases": [case.to_plain() for case in self.cases],
        }


def _call(question: Question, target: Any, case: Case) -> Any:
    return to_plain(call_case(target, question.call, question.method, case.to_plain()))


@functools.cache
def prepare(exercise_id: str) -> dict[str, Prepared]:
    """Every question of the exercise, by id, with its cases and the reference's outputs."""
    import torch

    prepared = {}
    for question in get_exercise(exercise_id).questions:
        cases = list(question.cases())
        with torch.random.fork_rng():
            torch.manual_seed(0)
            expected = [_call(question, question.reference, c) for c in cases]
        prepared[question.id] = Prepared(question, cases, expected)
    return prepared


def run_question(prepared: Prepared, target: Any) -> QuestionResult:
    """Call ``target`` on every case of the question and judge the outputs."""
    q = prepared.question
    if target is None:
        return explain_error(q, "missing", "")
    try:
        outputs = [_call(q, target, c) for c in prepared.cases]
    except NotImplementedError:
        return explain_error(q, "not_implemented", "")
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # noqa: B036 - SystemExit from learner code is an answer too
        return explain_error(q, "error", describe_error(error))
    return evaluate(q, prepared.cases, prepared.expected, outputs)


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
    results = []
    for question, obj in _select(exercise, targets, namespace):
        try:
            results.append(run_question(prepared[question.id], obj))
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # noqa: B036 - feedback must never crash the notebook
            results.append(result(question, "error", f"checking failed: {describe_error(error)}"))
    return results


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
        print("check could not run:")
        print("\n".join(wrap_indented(describe_error(error))))
        return
    for r in results:
        print(r.line())
    if not targets:
        score = sum(r.points for r in results)
        total = sum(r.max_points for r in results)
        print(f"Total: {score}/{total} points")
