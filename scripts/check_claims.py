"""Execute chapters and print every reading their text makes, with its status.

    python scripts/check_claims.py [PAGES...] [--seed-base N] [--threads N]
                                   [--load N] [--out DIR]
    python scripts/check_claims.py --built [BUILD_DIR]

PAGES are chapter or exercise notebooks, by path or by number (``9``, ``09``,
``book/09_decoding.ipynb``, ``exercises/04``); none: every chapter. Each runs
in a fresh kernel with ``ATTENTION_COURSE_SEED_BASE``, the number of torch
threads (``ATTENTION_COURSE_THREADS`` and ``OMP_NUM_THREADS``) and the device
(``ATTENTION_COURSE_DEVICE``) set as asked; ``--load N`` keeps N busy
processes running meanwhile, as a shared machine would. Every reading is
printed with what the run got, and the exit status is 1 if any did not hold
(2 if a notebook failed to run).

``--built`` executes nothing: it lists the readings that did not hold in the
notebooks of the last book build (``_build/jupyter_execute``), which the built
pages show as notices. ``make book`` runs it after the build.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def find_pages(names: list[str]) -> list[Path]:
    chapters = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
    if not names:
        return chapters
    found = []
    for name in names:
        path = ROOT / name
        if path.is_file():
            found.append(path.resolve())
            continue
        folder, _, number = name.rpartition("/")
        folder = folder or "book"
        if number.isdigit():
            matches = sorted((ROOT / folder).glob(f"{int(number):02d}_*.ipynb"))
            if len(matches) == 1:
                found.append(matches[0])
                continue
        raise SystemExit(f"check_claims: no notebook {name!r} (give a path, or a "
                         f"chapter number such as 9 or exercises/04)")
    return found


def _spin() -> None:  # a busy process, as another user's job would be
    while True:
        pass


def execute(path: Path, log: Path, timeout: int, out: Path | None
            ) -> tuple[bool, float, str, list[str]]:
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    os.environ["ATTENTION_COURSE_CLAIMS_LOG"] = str(log)
    start = time.perf_counter()
    error = ""
    try:
        client.execute()
    except CellExecutionError as exc:
        error = str(exc).strip().splitlines()[-1] if str(exc).strip() else repr(exc)
    except Exception as exc:  # a dead kernel, a timeout: reported, the next one runs
        error = f"{type(exc).__name__}: {exc}"
    seconds = time.perf_counter() - start
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, out / path.name)
    return not error, seconds, error, ([] if error else glue_problems(path, nb))


_ROLE = re.compile(r"\{glue(?::\w+)?\}`([^`]+)`")


def glue_problems(path: Path, executed) -> list[str]:
    """The glue roles of a page (its Markdown and its Chinese catalog) whose key the run
    did not glue, and the keys it glued that no role of the English text uses."""
    glued = set()
    for cell in executed.cells:
        for output in cell.get("outputs", []):
            name = output.get("metadata", {}).get("scrapbook", {}).get("name")
            if name:
                glued.add(name)
    page = path.relative_to(ROOT).with_suffix("").as_posix()
    found, used = [], set()

    def key_of(role: str) -> tuple[str | None, str]:
        doc, _, key = role.rpartition("::")
        return (doc or None), key.split(":", 1)[0]

    markdown = "\n".join(c.source for c in executed.cells if c.cell_type == "markdown")
    for role in _ROLE.findall(markdown):
        doc, key = key_of(role)
        if doc is None:
            used.add(key)
            if key not in glued:
                found.append(f"the text uses {{glue}}`{role}`, which the run did not glue")
    catalog = ROOT / "locales" / "zh_CN" / "LC_MESSAGES" / f"{page}.po"
    if catalog.is_file():
        from babel.messages.pofile import read_po

        with open(catalog, "rb") as f:
            translated = "\n".join(str(m.string) for m in read_po(f) if m.id and m.string)
        for role in _ROLE.findall(translated):
            doc, key = key_of(role)
            if doc is None:
                found.append(f"{catalog.name}: {{glue}}`{role}` must name its page "
                             f"({path.name}::{key})")
            elif Path(doc).stem == path.stem:
                used.add(key)  # a value glued for the Chinese text only (a verdict in words)
                if key not in glued:
                    found.append(f"{catalog.name}: {{glue}}`{role}`: the run did not glue "
                                 f"{key!r}")
    unused = sorted(glued - used)
    if unused:
        found.append(f"glued but not used by either edition's text: {', '.join(unused)}")
    return found


def read_log(log: Path) -> list[dict]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line]


def print_readings(records: list[dict]) -> None:
    marks = {"holds": "ok  ", "does not hold": "FAIL", "not checked on this device": "skip"}
    for r in records:
        print(f"  [{marks.get(r['status'], '?   ')}] {r['name']}: {r['says']}")
        print(f"         got: {r['got']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pages", nargs="*")
    parser.add_argument("--seed-base", type=int, default=None)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", default=None)
    parser.add_argument("--load", type=int, default=0,
                        help="busy processes to keep running meanwhile")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per cell")
    parser.add_argument("--out", type=Path, default=None,
                        help="keep the executed notebooks here")
    parser.add_argument("--built", nargs="?", const=ROOT / "_build", type=Path, default=None,
                        help="list the readings that did not hold in a book build")
    args = parser.parse_args(argv)

    if args.built is not None:
        from attention_course.claims import notices_in_build

        notices = notices_in_build(args.built)
        if not notices:
            print("Every reading of the text held in this build.")
            return 0
        print(f"{len(notices)} reading(s) of the text did not hold in this build; their "
              f"pages say so in a notice:")
        for r in notices:
            print(f"  {r['notebook']}: {r['name']}: {r['says']}\n      got: {r['got']}")
        return 0

    if args.seed_base is not None:
        os.environ["ATTENTION_COURSE_SEED_BASE"] = str(args.seed_base)
    if args.threads is not None:
        os.environ["ATTENTION_COURSE_THREADS"] = str(args.threads)
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
    if args.device is not None:
        os.environ["ATTENTION_COURSE_DEVICE"] = args.device
    pages = find_pages(args.pages)
    settings = (f"seed base {os.environ.get('ATTENTION_COURSE_SEED_BASE', '0')}, "
                f"threads {os.environ.get('ATTENTION_COURSE_THREADS', 'default')}, "
                f"device {os.environ.get('ATTENTION_COURSE_DEVICE', 'default')}, "
                f"load {args.load}")
    print(f"check_claims: {len(pages)} notebook(s); {settings}", flush=True)
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.load)]
    for p in spinners:
        p.start()
    failed = broken = total = glue_errors = 0
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for path in pages:
                log = Path(tmp) / f"{path.stem}.jsonl"
                ok, seconds, error, glue = execute(path, log, args.timeout, args.out)
                records = read_log(log)
                bad = sum(r["status"] == "does not hold" for r in records)
                failed += bad
                total += len(records)
                name = path.relative_to(ROOT).as_posix()
                status = "ran" if ok else f"FAILED TO RUN: {error}"
                print(f"\n{name}: {status} in {seconds:.0f} s; {len(records) - bad} of "
                      f"{len(records)} readings hold", flush=True)
                print_readings(records)
                for problem in glue:
                    print(f"  [GLUE] {problem}")
                broken += not ok
                glue_errors += sum("not used" not in g for g in glue)
    finally:
        for p in spinners:
            p.terminate()
    print(f"\ncheck_claims: {total - failed} of {total} readings hold ({settings})"
          + (f"; {broken} notebook(s) failed to run" if broken else "")
          + (f"; {glue_errors} glue problem(s)" if glue_errors else ""))
    return 2 if broken else (1 if failed or glue_errors else 0)


if __name__ == "__main__":
    sys.exit(main())
