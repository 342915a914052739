"""``attention-course grade SUBMISSION.ipynb... [--json] [--out DIR] [--timeout S] [--jobs N]``.

Registered on the main command by :func:`add_grade_parser`. Exit status 0 when every
submission was graded (whatever its score), 1 when the grader itself failed.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from attention_course.grading.results import SubmissionResult
from attention_course.grading.sandbox import GraderError, Limits


def add_grade_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``grade`` subcommand; its handler is the parser default ``run``."""
    parser = subparsers.add_parser(
        "grade",
        help="grade submitted exercise notebooks, each in a sandboxed process",
        description="Grade exercise notebooks. Each submission runs in a separate sandboxed "
        "process that only produces outputs; this process compares them with the reference.",
    )
    parser.add_argument("submissions", nargs="+", type=Path, metavar="SUBMISSION.ipynb")
    parser.add_argument("--json", action="store_true", help="print a JSON list on stdout")
    parser.add_argument(
        "--out", type=Path, metavar="DIR",
        help="write gradebook.csv and, per submission, NAME.json and NAME.feedback.txt",
    )
    parser.add_argument(
        "--timeout", type=float, default=60.0, metavar="S",
        help="seconds per submission for running it (default 60)",
    )
    parser.add_argument("--jobs", type=int, default=1, metavar="N",
                        help="submissions graded in parallel (default 1)")
    parser.add_argument("--question-timeout", type=float, metavar="S",
                        help="cap on each question's own time limit (default: the spec's)")
    parser.add_argument("--memory", type=int, default=3072, metavar="MB",
                        help="memory (address space) limit per submission (default 3072)")
    parser.add_argument("--exercise", metavar="ID",
                        help="grade every submission as this exercise (default: from metadata)")
    parser.set_defaults(run=run_grade)
    return parser


def submission_names(paths: list[Path]) -> list[str]:
    """A distinct, file-system-safe name per submission (its file name's stem)."""
    names, seen = [], set()
    for path in paths:
        base = re.sub(r"[^A-Za-z0-9._-]", "_", path.stem).lstrip(".") or "submission"
        name, n = base, 2
        while name.lower() in seen or name.lower() == "gradebook":
            name, n = f"{base}-{n}", n + 1
        seen.add(name.lower())
        names.append(name)
    return names


def feedback_text(result: SubmissionResult) -> str:
    """The human-readable feedback for one submission."""
    lines = [f"Submission: {result.submission} ({result.file})"]
    if result.exercise:
        lines.append(f"Exercise:   {result.exercise}")
    lines.append(f"Score:      {result.score}/{result.max_score}")
    if result.error:
        lines.append(f"Not graded: {result.error}")
    lines.append("")
    lines += [q.line() for q in result.questions]
    if result.notebook_errors:
        lines += ["", "Errors while running the notebook:"]
        lines += [f"  {e}" for e in result.notebook_errors]
    if result.output.strip():
        lines += ["", "The notebook's output (for reference; it has no effect on the score):"]
        lines += ["  | " + line for line in result.output.rstrip().splitlines()[:200]]
    return "\n".join(lines) + "\n"


def gradebook_csv(results: list[SubmissionResult]) -> str:
    """One row per submission: name, exercise, score, max_score, error, points per question."""
    exercises = {r.exercise for r in results if r.exercise}
    columns: list[str] = []
    for r in results:
        for q in r.questions:
            column = q.id if len(exercises) <= 1 else f"{r.exercise}/{q.id}"
            if column not in columns:
                columns.append(column)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["submission", "file", "exercise", "score", "max_score", "error", *columns])
    for r in results:
        points = {
            (q.id if len(exercises) <= 1 else f"{r.exercise}/{q.id}"): q.points
            for q in r.questions
        }
        writer.writerow([r.submission, r.file, r.exercise or "", r.score, r.max_score,
                         r.error or "", *(points.get(c, "") for c in columns)])
    return out.getvalue()


def write_atomic(path: Path, text: str) -> None:
    """Write through a temporary file in the same folder and ``os.replace`` it into place."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_submission(out: Path, result: SubmissionResult) -> None:
    write_atomic(out / f"{result.submission}.json", json.dumps(result.to_json(), indent=2) + "\n")
    write_atomic(out / f"{result.submission}.feedback.txt", feedback_text(result))


def table(results: list[SubmissionResult]) -> str:
    """A readable summary for the terminal."""
    width = max([len(r.submission) for r in results] + [10])
    lines = [f"{'submission':<{width}}  {'score':>7}  questions / problem"]
    for r in results:
        detail = r.error or "  ".join(f"{q.id} {q.points}/{q.max_points}" for q in r.questions)
        lines.append(f"{r.submission:<{width}}  {r.score:>3}/{r.max_score:<3}  {detail}")
    return "\n".join(lines)


def _grade_one(path: Path, name: str, args: argparse.Namespace, limits: Limits):
    from attention_course.grading.grader import grade_notebook

    try:
        return grade_notebook(path, exercise=args.exercise, limits=limits, name=name)
    except Exception as error:  # a grader failure: record it, finish the batch, exit 1
        kind = "" if isinstance(error, GraderError) else f"{type(error).__name__}: "
        return SubmissionResult(name, str(path), None, 0, 0, [],
                                error=f"grader error: {kind}{error}", grader_error=True)


def run_grade(args: argparse.Namespace) -> int:
    """Grade every submission; print a table or JSON; write the gradebook with ``--out``."""
    from tqdm.auto import tqdm

    from attention_course.grading.checking import prepare
    from attention_course.grading.registry import all_exercises

    if args.jobs < 1 or args.timeout <= 0:
        print("grade: --jobs must be >= 1 and --timeout > 0", file=sys.stderr)
        return 2
    try:  # draw every case and compute every reference answer before any child runs
        for exercise_id in sorted({*all_exercises(), *([args.exercise] if args.exercise else [])}):
            prepare(exercise_id)
    except Exception as error:
        print(f"grade: the grader could not load its exercises: {error}", file=sys.stderr)
        return 1
    limits = Limits(timeout=args.timeout, memory_mb=args.memory,
                    question_timeout=args.question_timeout)
    paths = list(args.submissions)
    names = submission_names(paths)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    results: list[SubmissionResult | None] = [None] * len(paths)
    bar = tqdm(total=len(paths), desc="grading", unit="nb", file=sys.stderr,
               disable=len(paths) < 2)
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {
            pool.submit(_grade_one, path, name, args, limits): i
            for i, (path, name) in enumerate(zip(paths, names, strict=True))
        }
        for future in as_completed(futures):
            i = futures[future]
            results[i] = future.result()
            if args.out:
                write_submission(args.out, results[i])
            bar.update(1)
    bar.close()
    done = [r for r in results if r is not None]
    if args.out:  # rewrite everything now that no submission process is left running
        for r in done:
            write_submission(args.out, r)
        write_atomic(args.out / "gradebook.csv", gradebook_csv(done))
    if args.json:
        print(json.dumps([r.to_json() for r in done], indent=2))
    else:
        print(table(done))
    failed = [r for r in done if r.grader_error]
    for r in failed:
        print(f"grade: {r.submission}: {r.error}", file=sys.stderr)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """``python -m attention_course.grading.cli ...``: the same as ``attention-course grade``."""
    parser = argparse.ArgumentParser(prog="attention-course")
    add_grade_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["grade", *(sys.argv[1:] if argv is None else argv)])
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
