"""Every registered exercise: solution gets full marks, the learner's version is generated
from it and scores 0 with "not implemented", metadata and storage follow the conventions.

Parametrized over the registry, so a new exercise is covered without editing this file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attention_course.grading import run_checks
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
    _, learner = _paths(exercise_id)
    results = run_checks(exercise_id, namespace=_namespace(learner))
    assert {r.status for r in results} == {"not_implemented"}
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
    assert all(q.status == "not_implemented" for q in empty.questions)
    assert all("not implemented" in q.message for q in empty.questions)
