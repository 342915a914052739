"""Make the learner's version of an exercise from its solution notebook.

``python -m attention_course.grading.make_learner exercises/solutions/NN_name.ipynb``
writes ``exercises/NN_name.ipynb``: every region from ``# BEGIN SOLUTION`` to
``# END SOLUTION`` becomes ``raise NotImplementedError(...)`` at the same indentation,
unless a ``# BEGIN STARTER`` ... ``# END STARTER`` region follows it: then the learner
gets the starter code instead (its lines written commented out in the solution, ``# ``
after the indentation; a debugging question's broken code, for example). Cells tagged
``solution-only`` (the explanations) are dropped, the tag ``hide-input`` (which folds an
answer away in the instructor's edition) is removed from the cells that held a solution,
and outputs are cleared. ``--check``
only compares with the file on disk (exit status 1 when they differ).
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
BEGIN_STARTER = re.compile(r"^(\s*)# BEGIN STARTER\s*$")
END_STARTER = re.compile(r"^\s*# END STARTER\s*$")
STUB = 'raise NotImplementedError("replace this line with your code")'


def _starter_line(line: str, indent: str, number: int) -> str:
    """A starter line as the learner sees it: ``indent + "# " + code`` -> ``indent + code``."""
    if line.strip() == "#":
        return ""
    if not line.startswith(indent + "# "):
        raise ValueError(f"line {number}: a starter line must be commented out as "
                         f"{indent!r} + '# ', got {line!r}")
    return indent + line[len(indent) + 2 :]


def strip_solutions(source: str) -> str:
    """Replace every marked solution region of a cell's source with a stub, or with the
    starter region that follows it."""
    lines = source.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        begin = BEGIN.match(lines[i])
        if BEGIN_STARTER.match(lines[i]) or END_STARTER.match(lines[i]):
            raise ValueError(f"line {i + 1}: a STARTER region must follow a SOLUTION region")
        if END.match(lines[i]):
            raise ValueError(f"line {i + 1}: END SOLUTION without BEGIN SOLUTION")
        if not begin:
            out.append(lines[i])
            i += 1
            continue
        indent, j = begin.group(1), i + 1
        while j < len(lines) and not END.match(lines[j]):
            if BEGIN.match(lines[j]):
                raise ValueError(f"line {j + 1}: BEGIN SOLUTION inside another solution")
            j += 1
        if j == len(lines):
            raise ValueError("BEGIN SOLUTION without END SOLUTION")
        i = j + 1
        starter = BEGIN_STARTER.match(lines[i]) if i < len(lines) else None
        if starter is None:
            out += [f"{indent}# YOUR CODE HERE", f"{indent}{STUB}"]
            continue
        k = i + 1
        while k < len(lines) and not END_STARTER.match(lines[k]):
            out.append(_starter_line(lines[k], starter.group(1), k + 1))
            k += 1
        if k == len(lines):
            raise ValueError("BEGIN STARTER without END STARTER")
        i = k + 1
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
            tags = cell.get("metadata", {}).get("tags", [])
            if cell["source"] != source and "hide-input" in tags:
                # folded in the instructor's edition; the learner's own cell stays open
                cell["metadata"]["tags"] = [t for t in tags if t != "hide-input"]
                if not cell["metadata"]["tags"]:
                    del cell["metadata"]["tags"]
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
