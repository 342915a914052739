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
