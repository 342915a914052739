"""Make the learner's version of an exercise from its solution notebook.

``python -m attention_course.grading.make_learner exercises/solutions/NN_name.ipynb``
writes ``exercises/NN_name.ipynb``: every region from ``# BEGIN SOLUTION`` to
``# END SOLUTION`` becomes ``raise NotImplementedError(...)`` at the same indentation,
cells tagged ``solution-only`` are dropped, and outputs are cleared. ``--check`` only
compares with the file on disk (exit status 1 when they differ).
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path

BEGIN = re.compile(r"^(\s*)# BEGIN SOLUTION\s*$")
END = re.compile(r"^\s*# END SOLUTION\s*$")
STUB = 'raise NotImplementedError("replace this line with your code")'


def strip_solutions(source: str) -> str:
    """Replace every marked solution region of a cell's source with a stub."""
    out: list[str] = []
    inside = False
    for number, line in enumerate(source.split("\n"), start=1):
        begin = BEGIN.match(line)
        if begin:
            if inside:
                raise ValueError(f"line {number}: BEGIN SOLUTION inside another solution")
            inside = True
            out.append(f"{begin.group(1)}# YOUR CODE HERE")
            out.append(f"{begin.group(1)}{STUB}")
        elif END.match(line):
            if not inside:
                raise ValueError(f"line {number}: END SOLUTION without BEGIN SOLUTION")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError("BEGIN SOLUTION without END SOLUTION")
    return "\n".join(out)


def learner_notebook(solution: dict) -> dict:
    """The learner's version of a solution notebook (a new dict)."""
    nb = copy.deepcopy(solution)
    cells = []
    for cell in nb["cells"]:
        if "solution-only" in cell.get("metadata", {}).get("tags", []):
            continue
        if cell["cell_type"] == "code":
            source = cell["source"]
            source = "".join(source) if isinstance(source, list) else source
            cell["source"] = strip_solutions(source)
            cell["outputs"] = []
            cell["execution_count"] = None
        cells.append(cell)
    nb["cells"] = cells
    return nb


def dumps(nb: dict) -> str:
    """Serialise like nbformat does (one-space indent, split lines, trailing newline)."""
    nb = copy.deepcopy(nb)
    for cell in nb["cells"]:
        source = cell["source"]
        source = "".join(source) if isinstance(source, list) else source
        cell["source"] = source.splitlines(keepends=True)
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def learner_path(solution_path: Path) -> Path:
    """``exercises/solutions/NN_name.ipynb`` -> ``exercises/NN_name.ipynb``."""
    return solution_path.resolve().parent.parent / solution_path.name


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("solution", type=Path, help="exercises/solutions/NN_name.ipynb")
    parser.add_argument("-o", "--output", type=Path, help="default: exercises/NN_name.ipynb")
    parser.add_argument("--check", action="store_true", help="only compare with the file")
    args = parser.parse_args(argv)
    solution = json.loads(args.solution.read_text(encoding="utf-8"))
    text = dumps(learner_notebook(solution))
    target = args.output or learner_path(args.solution)
    if args.check:
        same = target.exists() and target.read_text(encoding="utf-8") == text
        print(f"{target}: {'up to date' if same else 'differs: regenerate it'}")
        return 0 if same else 1
    target.write_text(text, encoding="utf-8")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
