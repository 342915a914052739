"""Build submissions for the grader tests in code (never committed as files), and the
harness the exercise tests share: judging an answer with the solution's other names,
the solution notebook edited line by line, and the tests every listed mistake gets."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXERCISE = "01_attention_pooling"


def solution_path(exercise_id: str) -> Path:
    """The reference solution notebook of an exercise."""
    return ROOT / "exercises" / "solutions" / f"{exercise_id}.ipynb"


def learner_path(exercise_id: str) -> Path:
    """The learner's notebook of an exercise."""
    return ROOT / "exercises" / f"{exercise_id}.ipynb"


SOLUTION = solution_path(EXERCISE)
LEARNER = learner_path(EXERCISE)


def solution_cells() -> list[str]:
    """The code cells of chapter 1's reference solution."""
    return notebook_cells(SOLUTION)


def learner_cells() -> list[str]:
    """The code cells of chapter 1's learner notebook."""
    return notebook_cells(LEARNER)


def write_notebook(path: Path, cells: list[str], exercise: str | None = EXERCISE) -> Path:
    """A minimal nbformat-4 notebook with these code cells."""
    metadata: dict = {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                     "language": "python"}}
    if exercise:
        metadata["attention_course"] = {"exercise": exercise}
    nb = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": metadata,
        "cells": [
            {"cell_type": "code", "id": f"c{i}", "metadata": {}, "execution_count": None,
             "outputs": [], "source": source}
            for i, source in enumerate(cells)
        ],
    }
    path.write_text(json.dumps(nb, indent=1), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- mistakes
def notebook_cells(path: Path) -> list[str]:
    """The code cells of a notebook, as sources."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def learner_starter(exercise_id: str, defines: str) -> str:
    """The learner notebook's starter code: its one code cell holding ``defines`` (such as
    ``"def chunked_attention"``), with the ``raise NotImplementedError`` line deleted, as
    a learner first runs it."""
    cells = notebook_cells(learner_path(exercise_id))
    (cell,) = [c for c in cells if defines in c]
    lines = cell.splitlines(keepends=True)
    kept = [line for line in lines if "raise NotImplementedError" not in line]
    assert len(kept) == len(lines) - 1, f"{defines}: one raise line expected"
    return "".join(kept)


def run_cells(cells: Sequence[str], filename: str = "notebook",
              skip: tuple[str, ...] = ()) -> dict:
    """The names the cells define when run in this process; cells that start with one of
    ``skip`` are not run."""
    namespace: dict = {"__name__": "__main__"}
    for source in cells:
        if not source.startswith(skip):
            exec(compile(source, filename, "exec"), namespace)
    return namespace


@functools.cache
def _solution_names(exercise_id: str) -> dict:
    path = solution_path(exercise_id)
    return run_cells(notebook_cells(path), str(path))


def solution_namespace(exercise_id: str) -> dict:
    """The names the reference solution notebook defines (its cells run once per test
    session, in this process; its check cells print their feedback)."""
    return dict(_solution_names(exercise_id))


def judge(exercise_id: str, question_id: str, answer, **also):
    """The feedback ``check`` gives for ``answer`` to one question, the other names (and
    ``also``) taken from the reference solution."""
    from attention_course.grading import get_exercise, run_checks

    question = get_exercise(exercise_id).question(question_id)
    namespace = {**solution_namespace(exercise_id), **also, question.symbol: answer}
    (result,) = run_checks(exercise_id, question.id, namespace=namespace)
    return result


def lost(exercise_id: str, question_id: str, answer, **also):
    """:func:`judge`'s feedback for an answer that must lose points."""
    result = judge(exercise_id, question_id, answer, **also)
    assert result.points < result.max_points, f"{question_id}: the mistake got full marks"
    return result


def assert_named(result, *words: str, points: int | None = None,
                 ignore_case: bool = False) -> None:
    """The answer lost points (down to exactly ``points`` when given) and its feedback
    holds every one of ``words`` (in any case with ``ignore_case``)."""
    assert result.points < result.max_points, result.message
    if points is not None:
        assert not result.passed and result.points == points, (result.points, result.message)
    message = result.message.lower() if ignore_case else result.message
    for word in words:
        assert (word.lower() if ignore_case else word) in message, (word, result.message)


def mistake_message(exercise_id: str, question_id: str, name: str) -> str:
    """The message of the listed mistake ``name`` of one question."""
    from attention_course.grading import get_exercise

    (found,) = [m.message for m in get_exercise(exercise_id).question(question_id).mistakes
                if m.name == name]
    return found


def listed_mistake_test(exercise_id: str) -> Callable[..., None]:
    """A test, one case per listed mistake of the exercise: given as the learner's answer
    (the other names from the solution), it fails its question with its own message (no
    earlier mistake hides it)."""
    from attention_course.grading import get_exercise

    listed = [(q.id, m) for q in get_exercise(exercise_id).questions for m in q.mistakes]

    @pytest.mark.parametrize(("question_id", "mistake"), listed,
                             ids=[f"{q}-{m.name}" for q, m in listed])
    def test_every_listed_mistake_loses_points_with_its_message(question_id, mistake):
        result = judge(exercise_id, question_id, mistake.wrong)
        assert result.status == "failed", result.message
        assert_named(result, mistake.message)

    return test_every_listed_mistake_loses_points_with_its_message


class EditedSolution:
    """The solution notebook of one exercise with lines changed, as a learner would write
    them: ``drop`` leaves out the cells that hold one of its strings, ``skip`` runs no
    cell that starts with one of its strings (the check cells would only print).

    Its :meth:`feedback` is ``run_checks``'s (the grader's own judgement) on one question
    of the changed notebook; :meth:`tests` gives the tests that every mistake the spec
    lists, made as such an edit, loses points with its own message.
    """

    def __init__(self, exercise_id: str, drop: tuple[str, ...] = (),
                 skip: tuple[str, ...] = ("check(",)) -> None:
        self.exercise_id, self.drop, self.skip = exercise_id, drop, skip
        self.path = solution_path(exercise_id)

    def cells(self, *changes: tuple[str, str]) -> list[str]:
        """The solution's code cells, each ``(old, new)`` applied exactly once."""
        cells = [c for c in notebook_cells(self.path) if not any(d in c for d in self.drop)]
        joined = "\n\x00\n".join(cells)
        for old, new in changes:
            assert joined.count(old) == 1, f"{old!r} occurs {joined.count(old)} times"
            joined = joined.replace(old, new)
        return joined.split("\n\x00\n")

    def namespace(self, cells: Sequence[str]) -> dict:
        """The names the cells define."""
        return run_cells(cells, str(self.path), self.skip)

    def feedback(self, question: str, *changes: tuple[str, str]):
        """The result ``check`` gives for one question of the changed solution."""
        from attention_course.grading import run_checks

        (result,) = run_checks(self.exercise_id, question,
                               namespace=self.namespace(self.cells(*changes)))
        return result

    def message_of(self, question: str, mistake: str) -> str:
        return mistake_message(self.exercise_id, question, mistake)

    def tests(self, listed: Sequence[tuple[str, str, list]]) -> tuple[Callable[..., None], ...]:
        """Three tests over ``listed``, rows ``(question id, mistake name, changes)``: the
        unchanged (trimmed) solution passes, every listed mistake has a row, and each row's
        changes lose points with that mistake's message."""
        from attention_course.grading import get_exercise, run_checks

        def test_the_solution_passes_as_the_tests_run_it():
            results = run_checks(self.exercise_id, namespace=self.namespace(self.cells()))
            assert all(r.passed for r in results), [r.message for r in results]

        def test_every_listed_mistake_is_tested():
            tested = {(q, m) for q, m, _ in listed}
            exercise = get_exercise(self.exercise_id)
            assert {(q.id, m.name) for q in exercise.questions for m in q.mistakes} == tested

        @pytest.mark.parametrize(("question", "mistake", "changes"), listed,
                                 ids=[f"{q}-{m}" for q, m, _ in listed])
        def test_listed_mistake_is_named(question, mistake, changes):
            result = self.feedback(question, *changes)
            assert result.points < result.max_points
            assert self.message_of(question, mistake) in result.message, result.message

        return (test_the_solution_passes_as_the_tests_run_it,
                test_every_listed_mistake_is_tested, test_listed_mistake_is_named)


def graded_record(exercise_id: str, folder: Path, cells: list[str], server=None):
    """The sandboxed grader's record of a notebook with these cells (written as
    ``folder/<exercise_id>.ipynb``), with the limits the tests grade under."""
    from attention_course.grading.grader import grade_notebook
    from attention_course.grading.sandbox import Limits

    path = write_notebook(folder / f"{exercise_id}.ipynb", cells, exercise=exercise_id)
    return grade_notebook(path, limits=Limits(timeout=60), server=server)


def grade_cells(exercise_id: str, folder: Path, cells: list[str], server) -> dict:
    """:func:`graded_record`'s questions, by id."""
    return {q.id: q for q in graded_record(exercise_id, folder, cells, server).questions}


def assert_each_question(record, expected: dict[str, tuple[int, str]]) -> None:
    """The record ran without errors, and each question ``expected`` names kept exactly
    its points and says its words: ``{question id: (points, words)}``."""
    assert record.error is None and record.notebook_errors == [], record.error
    graded = {q.id: (q.points, q.message) for q in record.questions}
    for qid, (points, words) in expected.items():
        assert graded[qid][0] == points and words in graded[qid][1], (qid, graded[qid])


def replace_in_solution(exercise_id: str, *changes: tuple[str, str]) -> list[str]:
    """The solution notebook's code cells with each ``(old, new)`` of ``changes`` made
    (every ``old`` occurs exactly once), for grading mistakes through the real grader."""
    return EditedSolution(exercise_id, skip=()).cells(*changes)


def choice(key: str, old: str, new: str) -> tuple[str, str]:
    """The change of a prediction's answer from ``old`` to ``new`` in its part ``key``
    (the solution writes the answer as a dict of strings)."""
    return f'"{key}": "{old}"', f'"{key}": "{new}"'


def named_mistakes_test(exercise_id: str, listed: Sequence[tuple],
                        not_listed: Sequence[tuple]) -> Callable[..., None]:
    """A test, one case per row ``(question id, answer, words)``: the answer (the other
    names from the solution) loses points, and its feedback holds the words. ``listed``
    are mistakes the spec lists (their own message), ``not_listed`` the others (a
    diagnosis that says what is off)."""
    rows = [("listed", *m) for m in listed] + [("other", *m) for m in not_listed]

    @pytest.mark.parametrize("kind, question_id, answer, words", rows,
                             ids=[f"{k}-{q}-{i}" for i, (k, q, _, _) in enumerate(rows)])
    def test_each_mistake_loses_points_with_a_message_that_names_it(kind, question_id, answer,
                                                                     words):
        """Listed mistakes get their own message; the others a diagnosis that says what is
        off."""
        result = lost(exercise_id, question_id, answer)
        assert words in result.message, result.message

    return test_each_mistake_loses_points_with_a_message_that_names_it


def wrong_predictions(exercise_id: str, question_id: str) -> Iterator[tuple[str, dict]]:
    """``(part, answer)`` for every part of a prediction (its answer a dict of choices) and
    every other choice in that part: the right answer with that one part wrong."""
    from attention_course.grading import get_exercise

    question = get_exercise(exercise_id).question(question_id)
    right = question.reference()
    for part in right:
        for option in question.choices:
            if option != right[part]:
                yield part, {**right, part: option}


def each_wrong_choice_test(exercise_id: str, question_ids: Sequence[str]) -> Callable[..., None]:
    """A test, one case per prediction: each of its :func:`wrong_predictions` loses that
    part's points only, with a message of its own that does not give the answer."""
    from attention_course.grading import get_exercise

    @pytest.mark.parametrize("question_id", question_ids)
    def test_every_wrong_choice_has_its_own_message(question_id):
        question = get_exercise(exercise_id).question(question_id)
        seen = set()
        for part, answer in wrong_predictions(exercise_id, question_id):
            result = lost(exercise_id, question_id, lambda answer=answer: answer)
            assert result.points == question.points - question.parts[part]
            message = result.message.split(": ", 1)[1]
            assert "expected" not in message and message not in seen, message
            seen.add(message)

    return test_every_wrong_choice_has_its_own_message
