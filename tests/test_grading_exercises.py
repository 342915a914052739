"""Every registered exercise: solution gets full marks, the learner's version is generated
from it and scores 0 with "not implemented", metadata and storage follow the conventions.

Parametrized over the registry, so a new exercise is covered without editing this file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from attention_course.grading import get_exercise, run_checks
from attention_course.grading.checking import prepare
from attention_course.grading.compare import compare
from attention_course.grading.grader import grade_notebook
from attention_course.grading.make_learner import dumps, learner_notebook
from attention_course.grading.registry import all_exercises
from attention_course.grading.sandbox import ForkServer, Limits

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = sorted(all_exercises())
LIMITS = Limits(timeout=60)


def _paths(exercise_id: str) -> tuple[Path, Path]:
    return (ROOT / "exercises" / "solutions" / f"{exercise_id}.ipynb",
            ROOT / "exercises" / f"{exercise_id}.ipynb")


def _namespace(path: Path) -> dict:
    """Execute the notebook's code cells in-process (check cells print their feedback)."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    ns: dict = {"__name__": "__main__"}
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            exec(compile("".join(cell["source"]), str(path), "exec"), ns)
    return ns


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_notebooks_follow_conventions(exercise_id):
    for path in _paths(exercise_id):
        assert path.exists(), f"{path} is missing"
        nb = json.loads(path.read_text(encoding="utf-8"))
        assert nb["metadata"]["attention_course"]["exercise"] == exercise_id
        assert nb["metadata"]["kernelspec"]["name"] == "python3"
        for cell in nb["cells"]:
            if cell["cell_type"] == "code":
                assert cell["outputs"] == [] and cell["execution_count"] is None, path


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_learner_version_is_generated_from_the_solution(exercise_id):
    solution, learner = _paths(exercise_id)
    expected = dumps(learner_notebook(json.loads(solution.read_text(encoding="utf-8"))))
    assert learner.read_text(encoding="utf-8") == expected, (
        f"regenerate it: python -m attention_course.grading.make_learner {solution}"
    )
    text = learner.read_text(encoding="utf-8")
    assert "BEGIN SOLUTION" not in text and "NotImplementedError" in text


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_solution_full_marks_in_check(exercise_id, capsys):
    solution, _ = _paths(exercise_id)
    results = run_checks(exercise_id, namespace=_namespace(solution))
    assert [r.status for r in results] == ["passed"] * len(results), [r.message for r in results]


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_learner_version_runs_and_checks_say_not_implemented(exercise_id, capsys):
    """Every answer is a stub, except a debugging question's starter: the broken code the
    learner is given, which must score 0 with the message of its known mistake."""
    _, learner = _paths(exercise_id)
    results = run_checks(exercise_id, namespace=_namespace(learner))
    for question, r in zip(get_exercise(exercise_id).questions, results, strict=True):
        assert r.points == 0, (question.id, r.message)
        if r.status != "not_implemented":
            assert question.kind == "debug" and r.status == "failed", (question.id, r.status)
            assert any(m.message in r.message for m in question.mistakes), r.message
    assert "not implemented yet" in capsys.readouterr().out


@pytest.fixture(scope="module")
def server():
    with ForkServer() as started:
        yield started


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_grader_solution_full_marks_learner_zero(exercise_id, server):
    solution, learner = _paths(exercise_id)
    good = grade_notebook(solution, limits=LIMITS, server=server)
    assert good.exercise == exercise_id and good.error is None
    assert good.score == good.max_score > 0, [q.message for q in good.questions]
    assert good.notebook_errors == []
    empty = grade_notebook(learner, limits=LIMITS, server=server)
    assert empty.score == 0 and empty.max_score == good.max_score
    kinds = {q.id: q.kind for q in get_exercise(exercise_id).questions}
    assert all(q.status == "not_implemented" or (kinds[q.id] == "debug" and q.status == "failed")
               for q in empty.questions), [(q.id, q.status) for q in empty.questions]


# --------------------------------------------------------------------------- what makes
# an exercise good (exercises/README.md, section 0)
CODE = re.compile(
    r"torch\.|\bnn\.|\bF\.|\.\w+\(|\[[^\]]*:[^\]]*\]|\w\]\s*=|=\s*\w+\(|\bdef\b|\blambda\b"
    r"|\breturn\b|\bimport\b|==| @ |\bdim\s*=")


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_exercise_makes_learners_think(exercise_id):
    exercise = get_exercise(exercise_id)
    kinds = {q.kind for q in exercise.questions}
    assert len(kinds) >= 2, f"{exercise_id}: only {kinds}"
    assert exercise.share_beyond("implement") >= 0.4, (
        f"{exercise_id}: {exercise.share_beyond('implement'):.0%} of the points go beyond "
        f"implement (at least 40%)")


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_hints_and_mistake_messages_hold_no_code(exercise_id):
    for q in get_exercise(exercise_id).questions:
        texts = [("hint", q.hint)] + [(f"mistake {m.name}", m.message) for m in q.mistakes]
        for what, text in texts:
            found = CODE.search(text)
            assert not found, f"{exercise_id} {q.id} {what} reads like code at {found[0]!r}"
        messages = [m.message for m in q.mistakes]
        assert len(set(messages)) == len(messages), f"{q.id}: two mistakes, one message"


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_known_mistakes_are_wrong_and_cases_are_held_back(exercise_id):
    """Every listed mistake answers differently from the reference on some case, and
    every question with inputs holds at least one case back."""
    prepared = prepare(exercise_id)
    for q in get_exercise(exercise_id).questions:
        p = prepared[q.id]
        for mistake in q.mistakes:
            wrong = p.wrong[mistake.name]
            if q.parts is None:
                differs = any(compare(e, w, q.rtol, q.atol) for e, w in
                              zip(p.expected, wrong, strict=True))
            else:
                differs = any(compare(e[k], w[k], q.rtol, q.atol) for e, w in
                              zip(p.expected, wrong, strict=True) for k in q.parts
                              if type(w) is dict and k in w)
            assert differs, f"{exercise_id} {q.id}: mistake {mistake.name} is not wrong"
        takes_inputs = any(c.args or c.kwargs or c.params or c.init_args for c in p.cases)
        if takes_inputs:
            assert any(c.hidden for c in p.cases), f"{exercise_id} {q.id}: no held-back case"


def _chapter_headings(exercise_id: str) -> set[str]:
    (chapter,) = sorted((ROOT / "book").glob(f"{exercise_id[:2]}_*.ipynb"))
    nb = json.loads(chapter.read_text(encoding="utf-8"))
    headings = set()
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            for line in "".join(cell["source"]).splitlines():
                if line.startswith("#"):
                    headings.add(line.lstrip("#").strip())
    return headings


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_hint_sections_are_in_the_chapter(exercise_id):
    headings = _chapter_headings(exercise_id)
    for q in get_exercise(exercise_id).questions:
        if q.section:
            assert q.section in headings, (
                f"{exercise_id} {q.id}: the chapter has no section {q.section!r}; its "
                f"sections are {sorted(headings)}")


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_every_question_is_explained_in_the_solution(exercise_id):
    solution, _ = _paths(exercise_id)
    nb = json.loads(solution.read_text(encoding="utf-8"))
    explanations = " ".join(
        "".join(c["source"]).lower() for c in nb["cells"]
        if c["cell_type"] == "markdown" and "solution-only" in c["metadata"].get("tags", [])
        and "{dropdown}" in "".join(c["source"]))
    for number, _question in enumerate(get_exercise(exercise_id).questions, start=1):
        assert f"question {number}" in explanations, (
            f"{exercise_id}: no explanation of question {number} (a solution-only markdown "
            f"cell with a dropdown naming 'question {number}')")
    assert (ROOT / "tests" / f"test_exercise_{exercise_id[:2]}.py").is_file(), (
        f"{exercise_id}: its typical mistakes need tests/test_exercise_{exercise_id[:2]}.py")
