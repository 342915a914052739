"""``attention-course grade PATH...`` and ``attention-course merge DIR... --out DIR``.

Registered on the main command by :func:`add_grade_parser` and :func:`add_merge_parser`.
``grade`` exits with 0 when every submission was graded (whatever its score); 3 when the
batch was graded but some submissions could not be (each has its row: 0 and the reason,
such as a file that is not a notebook, or a symbolic link); 1 when the grader itself
failed (its self-check included, then no gradebook is written; or on some submissions,
which then have no row, so that grading them again fills it in); 2 for a wrong command
line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from attention_course.grading import gradebook
from attention_course.grading.results import SubmissionResult, _columns
from attention_course.grading.sandbox import PACKAGE_ROOT, ForkServer, GraderError, Limits
from attention_course.grading.text import display_path, safe_text
from attention_course.i18n import LANGUAGES, N_, _, using

SOLUTIONS = Path(PACKAGE_ROOT) / "exercises" / "solutions"
ISOLATION = {
    "network_namespace": N_("no network namespace: the network is only blocked inside "
                            "Python"),
    "pid_namespace": N_("no PID namespace: a process that leaves the group may outlive "
                        "grading"),
    "file_system_hidden": N_("no private file system: a submission can read what the "
                             "grading user can read (other submissions, solutions)"),
    "no_keyrings_or_locks": N_("no seccomp filter: kernel keyrings and file locks could "
                               "carry data from one submission to another"),
    "memory_buffers_counted": N_("socket and pipe buffers are not counted in the memory "
                                 "limit (they stay bounded by the limit on open files)"),
}


class UsageError(ValueError):
    """A wrong command line or folder layout (exit status 2)."""


@dataclass(frozen=True)
class Submission:
    """A notebook found on the command line, with its student and exercise (if known)."""

    path: Path
    student: str
    exercise: str | None

    @property
    def key(self) -> tuple[str, str]:
        return self.student, self.exercise or self.path.stem


def add_grade_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``grade`` subcommand; its handler is the parser default ``run``."""
    parser = subparsers.add_parser(
        "grade",
        help="grade exercise notebooks (files or class folders), each in a sandbox",
        description="Grade exercise notebooks. A PATH is a notebook or a folder searched "
        "recursively; in a class folder CLASS/STUDENT/EXERCISE.ipynb the student is the "
        "first folder under CLASS. Each submission runs in a separate sandboxed process that "
        "only produces outputs; this process compares them with the reference. Before the "
        "batch the reference solutions are graded in the same sandbox as a self-check.",
    )
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    parser.add_argument("--json", action="store_true", help="print a JSON list on stdout")
    parser.add_argument(
        "--out", type=Path, metavar="DIR",
        help="keep the gradebook here: gradebook.csv, totals.csv and STUDENT/EXERCISE.json "
             "and .feedback.txt; grading into it again replaces only the rows graded again",
    )
    parser.add_argument("--student-from", default="folder", metavar="HOW",
                        help="where the student's name comes from: 'folder' (default: the "
                             "first folder under the folder given), 'file' (the file name "
                             "without the exercise id) or 're:PATTERN' (a regular expression "
                             "with a group (?P<student>...) searched in the path below the "
                             "folder given)")
    parser.add_argument("--shard", metavar="K/N",
                        help="grade only the K-th of N deterministic slices (K = 1..N), for "
                             "array jobs; join the output folders with 'attention-course merge'")
    parser.add_argument("--timeout", type=float, default=60.0, metavar="S",
                        help="seconds per submission for running it (default 60)")
    parser.add_argument("--jobs", type=int, default=1, metavar="N",
                        help="submissions graded in parallel (default 1)")
    parser.add_argument("--question-timeout", type=float, metavar="S",
                        help="cap on each question's own time limit (default: the spec's)")
    parser.add_argument("--memory", type=int, default=2048, metavar="MB",
                        help="memory one submission may use beyond what Python and torch "
                             "take, all its processes together (default 2048)")
    parser.add_argument("--scratch", type=int, default=64, metavar="MB",
                        help="size of a submission's private scratch folder (default 64)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="'cuda' lets submissions use the GPU (default: cpu, GPU hidden)")
    parser.add_argument("--exercise", metavar="ID",
                        help="grade every notebook as this exercise (default: from metadata)")
    parser.add_argument("--solutions", type=Path, default=SOLUTIONS, metavar="DIR",
                        help="reference solutions for the self-check (default: the "
                             "repository's exercises/solutions)")
    parser.add_argument("--fresh-process", action="store_true",
                        help="start a new Python for every submission instead of forking it "
                             "from a server that imported torch once (slower)")
    parser.add_argument("--bundle", type=Path, metavar="DIR",
                        help="with --out: also zip each student's feedback (its HTML page, "
                             "Markdown twin and feedback files) into DIR/STUDENT.zip")
    _lang_option(parser)
    parser.set_defaults(run=run_grade)
    return parser


def _lang_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lang", choices=LANGUAGES, metavar="LANG",
                        help="the language of the feedback and messages: "
                             f"{', '.join(LANGUAGES)} (default: $ATTENTION_COURSE_LANG, "
                             "else en)")


def _gradebook_parser(subparsers: argparse._SubParsersAction, name: str, run,
                      **texts: str) -> argparse.ArgumentParser:
    """A subcommand that reads a gradebook folder (its argument ``GRADES_DIR``) and is
    handled by ``run``; ``texts`` are its ``help`` and ``description``."""
    parser = subparsers.add_parser(name, **texts)
    parser.add_argument("grades", type=Path, metavar="GRADES_DIR")
    parser.set_defaults(run=run)
    return parser


def add_platform_parsers(subparsers: argparse._SubParsersAction) -> None:
    """Add ``export`` (grades into Canvas or Moodle), ``feedback`` (the students' pages)
    and ``report`` (the class's scores at a glance)."""
    export = _gradebook_parser(
        subparsers, "export", run_export,
        help="write a learning platform's grade-import file (Canvas, Moodle)",
        description="Write the grade-import CSV of Canvas or Moodle from a gradebook folder "
        "and a roster (a CSV whose column 'student' names each student's folder, with the "
        "platform's ids: id, sis_user_id, sis_login_id, section, name for Canvas; email, "
        "idnumber or username for Moodle). Roster students without a submission and "
        "submissions without a roster entry are listed.")
    export.add_argument("--to", choices=("canvas", "moodle"), required=True)
    export.add_argument("--roster", type=Path, required=True, metavar="ROSTER.csv")
    export.add_argument("--out", type=Path, required=True, metavar="FILE")
    export.add_argument("--moodle-id", choices=("email", "idnumber", "username"),
                        default="email", help="Moodle: the column that identifies a user")
    export.add_argument("--column-names", type=Path, metavar="CSV",
                        help="a CSV of 'exercise,column' rows naming each exercise's column "
                             "(e.g. a Canvas assignment 'Attention pooling (1234)')")
    pages = _gradebook_parser(
        subparsers, "feedback", run_feedback,
        help="write each student's feedback page (HTML and Markdown) again",
        description="Write STUDENT/feedback.html and feedback.md in a gradebook folder from "
        "its records (grade and merge write them too), optionally zipped per student.")
    pages.add_argument("--bundle", type=Path, metavar="DIR",
                       help="zip each student's feedback into DIR/STUDENT.zip")
    _lang_option(pages)
    report = _gradebook_parser(
        subparsers, "report", run_report,
        help="the class's scores per exercise: a table and a figure",
        description="Print the count, mean, median and range of the scores of every "
        "exercise in a gradebook folder, and draw their distribution.")
    report.add_argument("--out", type=Path, default=None, metavar="FILE.png",
                        help="the figure (default: GRADES_DIR/scores.png)")
    _lang_option(report)


def run_export(args: argparse.Namespace) -> int:
    from attention_course.grading.platforms import RosterError, export, read_roster

    records = gradebook.load(args.grades)
    if not records:
        print(f"export: no graded records in {args.grades}", file=sys.stderr)
        return 2
    try:
        names = None
        if args.column_names is not None:
            rows = read_column_names(args.column_names)
            names = dict(rows)
        result = export(records, read_roster(args.roster), args.to, names, args.moodle_id)
    except RosterError as error:
        print(f"export: {error}", file=sys.stderr)
        return 2
    gradebook.write_atomic(args.out, result.text)
    print(f"export: {args.to} grade import for {len(result.exercises)} exercise(s) written "
          f"to {args.out}")
    if result.without_submission:
        print(f"export: in the roster, without a submission (left empty): "
              f"{', '.join(result.without_submission)}")
    if result.not_in_roster:
        print(f"export: graded, but not in the roster (left out): "
              f"{', '.join(result.not_in_roster)}")
    return 0


def read_column_names(path: Path) -> list[tuple[str, str]]:
    """The ``exercise,column`` rows of a small CSV (a header row is skipped)."""
    import csv

    with open(path, newline="", encoding="utf-8-sig") as f:
        rows = [r for r in csv.reader(f) if len(r) >= 2]
    return [(a.strip(), b.strip()) for a, b, *_rest in rows if a.strip() != "exercise"]


def run_feedback(args: argparse.Namespace) -> int:
    from attention_course.grading.feedback_pages import bundle, write_pages

    with using(args.lang):
        records = gradebook.load(args.grades)
        written = write_pages(args.grades, records)
    print(f"feedback: pages for {len(written)} student(s) in {args.grades}")
    if args.bundle is not None:
        made = bundle(args.grades, args.bundle)
        print(f"feedback: {len(made)} bundle(s) in {args.bundle}")
    return 0


def run_report(args: argparse.Namespace) -> int:
    from attention_course.grading.report import score_figure, summary

    with using(args.lang):
        records = gradebook.load(args.grades)
        if not records:
            print(f"report: no graded records in {args.grades}", file=sys.stderr)
            return 2
        print(summary(records))
        path = score_figure(records, args.out or args.grades / "scores.png")
    print(f"report: figure written to {path}")
    return 0


def add_merge_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``merge`` subcommand (join shard folders into one gradebook)."""
    parser = subparsers.add_parser(
        "merge", help="join gradebook folders (shards of 'grade --shard') into one",
        description="Join the output folders of 'attention-course grade --shard K/N' into one "
        "gradebook folder; a record in a later folder replaces the same student and exercise "
        "from an earlier one.")
    parser.add_argument("folders", nargs="+", type=Path, metavar="DIR")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR")
    parser.set_defaults(run=run_merge)
    return parser


# --------------------------------------------------------------------------- finding work
def _notebooks(path: Path) -> list[tuple[Path, Path | None]]:
    """``(notebook, folder it was found under)``; a file (or a missing path) stands alone.

    Every entry named ``*.ipynb`` is listed, whatever it is (a link, a pipe: grading then
    refuses it with a reason, so that it still has its row), and so is a symbolic link to
    a folder (never followed: it could lead anywhere on the machine).
    """
    if path.is_symlink() or not path.is_dir():
        return [(path, None)]
    found = []
    for top, dirs, files in os.walk(path, followlinks=False):
        here = Path(top)
        hidden = [d for d in dirs if d.startswith(".") or d == "__pycache__"]
        for d in hidden:  # .ipynb_checkpoints and other hidden folders
            dirs.remove(d)
        for d in list(dirs):
            if (here / d).is_symlink():
                dirs.remove(d)
                found.append((here / d, path))
        found += [(here / f, path) for f in files
                  if f.endswith(".ipynb") and not f.startswith(".")]
    return sorted(found, key=lambda item: os.fsencode(item[0]))


def _student(nb: Path, base: Path | None, how: str, exercise: str | None) -> str:
    if how == "folder":
        if base is not None and (len(nb.relative_to(base).parts) > 1
                                 or not nb.name.endswith(".ipynb")):  # a linked folder
            name = nb.relative_to(base).parts[0]
        else:
            name = (base or nb.absolute().parent).absolute().name
    elif how == "file":
        name = nb.stem.replace(exercise, "") if exercise else nb.stem
        name = name.strip("_- .") or nb.stem
    else:
        below = nb.relative_to(base).as_posix() if base is not None else nb.name
        below = os.fsencode(below).decode("utf-8", errors="backslashreplace")
        match = re.search(how[3:], below)
        if match is None or not match.groupdict().get("student"):
            raise UsageError(f"--student-from {how!r} does not match {safe_text(below)!r} "
                             f"(it needs a group (?P<student>...))")
        name = match.group("student")
    return gradebook.safe_name(os.fsencode(name).decode("utf-8", errors="backslashreplace"))


def _exercise_id(nb: Path, override: str | None) -> str | None:
    """The notebook's exercise, from its metadata or its name; ``None`` when neither says
    (whatever the file holds: it is graded, or refused, with a reason later)."""
    from attention_course.grading.grader import exercise_of, read_notebook

    try:
        return exercise_of(read_notebook(nb), nb, override).id
    except Exception:  # noqa: BLE001 - any file: its row will say what is wrong with it
        try:
            return exercise_of({}, nb, override).id
        except Exception:  # noqa: BLE001
            return None


def find_submissions(paths: list[Path], how: str, override: str | None) -> list[Submission]:
    """Every notebook to grade, sorted by student and exercise; two notebooks for the same
    student and exercise are a :class:`UsageError` (nothing is graded twice or lost)."""
    if how not in ("folder", "file") and not how.startswith("re:"):
        raise UsageError(f"--student-from must be 'folder', 'file' or 're:PATTERN', got {how!r}")
    if how.startswith("re:"):
        try:
            re.compile(how[3:])
        except re.error as error:
            raise UsageError(f"--student-from: bad regular expression: {error}") from None
    found: dict[tuple[str, str], Submission] = {}
    clashes: list[str] = []
    for path in paths:
        for nb, base in _notebooks(path):
            exercise = _exercise_id(nb, override)
            sub = Submission(nb, _student(nb, base, how, exercise), exercise)
            if sub.key in found and found[sub.key].path.absolute() != nb.absolute():
                clashes.append(f"  {sub.key[0]}/{sub.key[1]}: "
                               f"{display_path(found[sub.key].path)} and {display_path(nb)}")
            found.setdefault(sub.key, sub)
    if clashes:
        raise UsageError("two notebooks for the same student and exercise:\n"
                         + "\n".join(clashes) + "\nkeep one of each, or name the students "
                         "differently (--student-from file, or 're:PATTERN')")
    return [found[k] for k in sorted(found)]


def shard(items: list[Submission], spec: str | None) -> list[Submission]:
    """The K-th of N slices (every N-th submission from the K-th, in sorted order)."""
    if spec is None:
        return items
    match = re.fullmatch(r"(\d+)/(\d+)", spec)
    if match is None or not 1 <= int(match.group(1)) <= int(match.group(2)):
        raise UsageError(f"--shard must be K/N with 1 <= K <= N, got {spec!r}")
    k, n = int(match.group(1)), int(match.group(2))
    return items[k - 1 :: n]


# --------------------------------------------------------------------------- reporting
def feedback_text(result: SubmissionResult) -> str:
    """The human-readable feedback for one submission."""
    def field(name: str, value: str) -> str:
        return f"{pad(name, 11)} {value}"

    lines = [field(_("Student:"), result.student), field(_("Notebook:"), result.file)]
    if result.exercise:
        lines.append(field(_("Exercise:"), result.exercise))
    lines.append(field(_("Score:"), f"{result.score}/{result.max_score}"))
    if result.error:
        lines.append(field(_("Not graded:"), result.error))
    lines.append("")
    lines += [q.line() for q in result.questions]
    if result.notebook_errors:
        lines += ["", _("Errors while running the notebook:")]
        lines += [f"  {e}" for e in result.notebook_errors]
    if result.output.strip():
        lines += ["", _("The notebook's output (for reference; it has no effect on the "
                        "score):")]
        lines += ["  | " + line for line in result.output.rstrip().splitlines()[:200]]
    return safe_text("\n".join(lines) + "\n")


def pad(text: str, width: int, right: bool = False) -> str:
    """``text`` padded with spaces to ``width`` display columns (a Chinese character
    takes two)."""
    fill = " " * max(0, width - _columns(text))
    return fill + text if right else text + fill


def table(results: list[SubmissionResult]) -> str:
    """A readable summary for the terminal."""
    width = max([_columns(r.submission) for r in results] + [10])
    submission, score, detail = _("submission"), _("score"), _("questions / problem")
    lines = [f"{pad(submission, width)}  {pad(score, 7, right=True)}  {detail}"]
    for r in results:
        detail = r.error or "  ".join(f"{q.id} {q.points}/{q.max_points}" for q in r.questions)
        lines.append(f"{pad(r.submission, width)}  {r.score:>3}/{r.max_score:<3}  {detail}")
    return safe_text("\n".join(lines))


# --------------------------------------------------------------------------- grading
def _grade_one(sub: Submission, args: argparse.Namespace, limits: Limits,
               server: ForkServer | None) -> SubmissionResult:
    from attention_course.grading.grader import grade_notebook, submission_name

    try:
        return grade_notebook(sub.path, exercise=args.exercise, limits=limits,
                              student=sub.student, server=server)
    except Exception as error:  # a grader failure: report it, finish the batch, exit 1
        kind = "" if isinstance(error, GraderError) else f"{type(error).__name__}: "
        return SubmissionResult(sub.student, submission_name(sub.student, sub.exercise,
                                                             sub.path),
                                str(sub.path), sub.exercise, 0, 0, [],
                                error=_("grader error: {error}").format(
                                    error=f"{kind}{error}"), grader_error=True)


def self_check(exercises: set[str], limits: Limits, server: ForkServer | None,
               solutions: Path) -> tuple[list[str], dict]:
    """Grade the reference solutions of ``exercises`` in the sandbox; return the problems
    (empty when all get full marks) and the isolation in force.

    Without a folder of solutions only the sandbox itself is checked (a notebook that
    imports torch and the package), and the problems say so only if that fails.
    """
    from attention_course.grading.grader import grade_notebook
    from attention_course.grading.sandbox import run_child

    problems, isolation = [], {}
    for exercise in sorted(exercises):
        path = solutions / f"{exercise}.ipynb"
        if not path.is_file():
            print(_("grade: note: no reference solution {path} to check {exercise} with"
                    ).format(path=path, exercise=exercise), file=sys.stderr)
            continue
        try:
            record = grade_notebook(path, limits=limits, student="reference", server=server)
        except GraderError as error:
            return [f"{exercise}: {error}"], isolation
        isolation = isolation or record.isolation
        if record.score < record.max_score or record.notebook_errors:
            wrong = [f"    {q.id}: {q.status}: {q.message}" for q in record.questions
                     if not q.passed] + [f"    {e}" for e in record.notebook_errors]
            problems.append(_("{exercise}: the reference solution scored {score}/{max_score} "
                              "in the sandbox:").format(exercise=exercise, score=record.score,
                                                        max_score=record.max_score)
                            + "\n" + "\n".join(wrong))
    if not isolation:
        try:
            isolation = run_child(["import attention_course"], [], {}, limits, limits.timeout,
                                  server=server).isolation
        except GraderError as error:
            problems.append(str(error))
    return problems, isolation


def _warn_about(isolation: dict) -> None:
    weaker = [why for key, why in ISOLATION.items() if not isolation.get(key)]
    if weaker:
        print(_("grade: warning: weaker isolation on this machine (see the book's page "
                "'Grading a class'):"), file=sys.stderr)
        for why in weaker:
            print(f"  - {_(why)}", file=sys.stderr)


def run_grade(args: argparse.Namespace) -> int:
    """Find, self-check, grade, write the gradebook, report."""
    with using(args.lang):
        try:
            return _grade(args)
        except UsageError as error:
            print(f"grade: {error}", file=sys.stderr)
            return 2


def _grade(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from attention_course.grading.checking import prepare

    if args.jobs < 1 or args.timeout <= 0 or args.memory < 1 or args.scratch < 1:
        raise UsageError("--jobs, --memory and --scratch must be >= 1 and --timeout > 0")
    if args.bundle is not None and not args.out:
        raise UsageError("--bundle needs --out (the bundles are made from the gradebook)")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UsageError("--device cuda: torch sees no CUDA GPU on this machine "
                             f"(torch {torch.__version__})")
    subs = shard(find_submissions(args.paths, args.student_from, args.exercise), args.shard)
    exercises = {s.exercise for s in subs if s.exercise}
    try:  # draw every case and compute every reference answer before any child runs
        for exercise_id in sorted(exercises):
            prepare(exercise_id)
    except Exception as error:
        print(_("grade: the grader could not load its exercises: {error}").format(
            error=error), file=sys.stderr)
        return 1
    limits = Limits(timeout=args.timeout, memory_mb=args.memory, scratch_mb=args.scratch,
                    question_timeout=args.question_timeout, device=args.device,
                    fresh_process=args.fresh_process)
    existing = gradebook.load(args.out) if args.out else {}
    server = None if args.fresh_process else ForkServer(limits.startup_timeout)
    try:
        if server is not None:
            server.start()
        if subs:
            print(_("grade: self-check: grading the reference solutions of {count} "
                    "exercise(s) in the sandbox ...").format(count=len(exercises)),
                  file=sys.stderr)
        problems, isolation = self_check(exercises, limits, server, args.solutions)
        if problems:
            print(_("grade: the grader failed its self-check, so nothing was graded:"),
                  file=sys.stderr)
            for problem in problems:
                print(f"  {problem}", file=sys.stderr)
            return 1
        _warn_about(isolation)
        results = _grade_all(subs, args, limits, server, tqdm)
    except GraderError as error:
        print(f"grade: {error}", file=sys.stderr)
        return 1
    finally:
        if server is not None:
            server.close()
    graded = [r for r in results if not r.grader_error]
    if args.out:  # written again now that no submission process is left running
        existing.update({gradebook.key_of(r.to_json()): r.to_json() for r in graded})
        gradebook.save(args.out, existing,
                       {gradebook.key_of(r.to_json()): feedback_text(r) for r in graded})
        if args.bundle is not None:
            from attention_course.grading.feedback_pages import bundle

            bundle(args.out, args.bundle)
    if args.json:
        print(json.dumps([r.to_json() for r in results], indent=2, ensure_ascii=False))
    else:
        print(table(results))
    failed = [r for r in results if r.grader_error]
    for r in failed:
        print(safe_text(f"grade: {r.submission}: {r.error}"), file=sys.stderr)
    refused = [r for r in results if r.error and not r.grader_error]
    if refused:
        print(_("grade: {count} submission(s) could not be graded; each has its row with 0 "
                "and the reason").format(count=len(refused)), file=sys.stderr)
    return 1 if failed else 3 if refused else 0


def _grade_all(subs: list[Submission], args: argparse.Namespace, limits: Limits,
               server: ForkServer | None, tqdm) -> list[SubmissionResult]:
    results: list[SubmissionResult | None] = [None] * len(subs)
    bar = tqdm(total=len(subs), desc=_("grading"), unit="nb", file=sys.stderr,
               disable=len(subs) < 2)
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(_grade_one, sub, args, limits, server): i
                   for i, sub in enumerate(subs)}
        for future in as_completed(futures):
            i = futures[future]
            result = results[i] = future.result()
            if args.out and not result.grader_error:  # kept as we go: nothing is lost
                try:
                    gradebook.save_record(args.out, result.to_json(), feedback_text(result))
                except (OSError, ValueError) as error:  # written again at the end
                    print(f"grade: {result.submission}: {error}", file=sys.stderr)
            bar.update(1)
    bar.close()
    return [r for r in results if r is not None]


def run_merge(args: argparse.Namespace) -> int:
    missing = [str(f) for f in args.folders if not f.is_dir()]
    if missing:
        print(f"merge: no such folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    count = gradebook.merge(args.folders, args.out)
    print(f"merged {len(args.folders)} folder(s) into {args.out}: {count} records")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m attention_course.grading.cli ...``: the same as ``attention-course grade``."""
    parser = argparse.ArgumentParser(prog="attention-course")
    add_grade_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["grade", *(sys.argv[1:] if argv is None else argv)])
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
