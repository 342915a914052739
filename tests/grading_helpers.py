"""Build submissions for the grader tests in code (never committed as files)."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXERCISE = "01_attention_pooling"
SOLUTION = ROOT / "exercises" / "solutions" / f"{EXERCISE}.ipynb"
LEARNER = ROOT / "exercises" / f"{EXERCISE}.ipynb"


def solution_cells() -> list[str]:
    """The code cells of chapter 1's reference solution."""
    nb = json.loads(SOLUTION.read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def learner_cells() -> list[str]:
    nb = json.loads(LEARNER.read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


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


def solution_namespace(exercise_id: str) -> dict:
    """The names the reference solution notebook defines (its cells run in this process;
    its check cells print their feedback)."""
    namespace: dict = {"__name__": "__main__"}
    path = ROOT / "exercises" / "solutions" / f"{exercise_id}.ipynb"
    for source in notebook_cells(path):
        exec(compile(source, str(path), "exec"), namespace)
    return namespace


def judge(exercise_id: str, question_id: str, answer, **also):
    """The feedback ``check`` gives for ``answer`` to one question, the other names (and
    ``also``) taken from the reference solution."""
    from attention_course.grading import get_exercise, run_checks

    question = get_exercise(exercise_id).question(question_id)
    namespace = {**solution_namespace(exercise_id), **also, question.symbol: answer}
    (result,) = run_checks(exercise_id, question.id, namespace=namespace)
    return result


def replace_in_solution(exercise_id: str, old: str, new: str) -> list[str]:
    """The solution notebook's code cells with ``old`` replaced by ``new`` (exactly once),
    for grading a one-line mistake through the real grader."""
    cells = notebook_cells(ROOT / "exercises" / "solutions" / f"{exercise_id}.ipynb")
    joined = "\n\x00\n".join(cells)
    assert joined.count(old) == 1, f"{old!r} occurs {joined.count(old)} times"
    return joined.replace(old, new).split("\n\x00\n")
