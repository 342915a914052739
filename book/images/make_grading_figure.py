"""Draws the figure of the page "Grading a class" (book/grading.md): a made-up class of
twelve students, graded for real, then drawn by ``attention-course report``.

Each student hands in exercises 1 to 3 built from the reference solutions, with some
answers left as the learner's unfinished stubs (so that the scores spread), and now and
then nothing at all. The class is graded by ``attention-course grade`` in a temporary
folder, and ``attention-course report`` draws ``class_scores.png`` and, with
``--lang zh_CN``, ``class_scores.zh_CN.png`` (which the Chinese edition shows).

Run from the repository root: ``.venv/bin/python book/images/make_grading_figure.py``.
The PNGs are committed, so building the book does not need this script.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
EXERCISES = ("01_attention_pooling", "02_scoring", "03_masks")
GRADER = Path(sys.executable).with_name("attention-course")


def _defines(cell: dict, symbol: str) -> bool:
    source = "".join(cell["source"])
    return f"def {symbol}(" in source or f"class {symbol}(" in source


def _student_notebook(exercise: str, rng: random.Random, done: float) -> dict:
    """The solution of ``exercise`` with each answer kept with probability ``done``, else
    the learner's stub for it."""
    from attention_course.grading.registry import get_exercise

    solution = json.loads((ROOT / "exercises" / "solutions" / f"{exercise}.ipynb").read_text())
    learner = json.loads((ROOT / "exercises" / f"{exercise}.ipynb").read_text())
    for question in get_exercise(exercise).questions:
        if rng.random() < done:
            continue
        stub = next((c for c in learner["cells"] if c["cell_type"] == "code"
                     and _defines(c, question.symbol)), None)
        for i, cell in enumerate(solution["cells"]):
            if stub is not None and cell["cell_type"] == "code" and _defines(
                    cell, question.symbol):
                solution["cells"][i] = stub
    return solution


def main() -> int:
    rng = random.Random(2026)  # the made-up class, not a claim: any seed would do
    with tempfile.TemporaryDirectory() as tmp:
        klass, grades = Path(tmp) / "class", Path(tmp) / "grades"
        for i in range(12):
            done = rng.uniform(0.3, 1.0)
            for exercise in EXERCISES:
                if rng.random() < 0.1:
                    continue  # not handed in
                path = klass / f"student{i + 1:02d}" / f"{exercise}.ipynb"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(_student_notebook(exercise, rng, done)))
        status = subprocess.run([str(GRADER), "grade", str(klass), "--out", str(grades),
                                 "--jobs", "2"])
        if status.returncode not in (0, 3):
            return status.returncode
        for lang, suffix in (("en", ""), ("zh_CN", ".zh_CN")):
            subprocess.run([str(GRADER), "report", str(grades), "--lang", lang, "--out",
                            str(HERE / f"class_scores{suffix}.png")], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
