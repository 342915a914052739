"""Execute the book's chapters in parallel into Jupyter Book's execution cache.

    python scripts/execute_book.py [--jobs N] [PAGES...]

The book is built with ``execute_notebooks: cache``: Jupyter Book (MyST-NB) looks each
chapter up in ``_build/.jupyter_cache`` by the hash of its code and only executes the
chapters it does not find, one after the other. This script fills the cache first, with
``--jobs`` chapters at a time (default: one per core the process may use), longest first,
each kernel given its share of the cores (``ATTENTION_COURSE_THREADS`` and
``OMP_NUM_THREADS``; set ``ATTENTION_COURSE_THREADS`` yourself to choose). The build that
follows then executes nothing, both editions read the same cache, and a chapter that fails
stops here with its traceback. It prints each chapter's time and the total, and writes
them to ``_build/execution_times.json`` (``make test`` prints them in its summary).

Chapters whose code has not changed since they were cached are not run again.

Not yet part of ``make book`` or ``make test``: in one run on 2 cores, one of two kernels
started together went idle while its client still waited for a reply (and an earlier run
showed a kernel failing to send one, ``ZMQError: Socket operation on non-socket``), so the
chapter would have waited for the cell timeout. Until that is understood the builds execute
the chapters themselves, one after the other.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "_build" / ".jupyter_cache"
TIMES = ROOT / "_build" / "execution_times.json"  # the last run's times, for the tests' summary

# Seconds per chapter on 2 cores, only to start the longest first when the cache has no
# earlier run of a chapter (a fresh clone); the cache's own record wins when it has one.
FIRST_GUESS = {"04": 140, "06": 120, "11": 110, "07": 95, "09": 90, "08": 75, "10": 55}


def chapters(names: list[str]) -> list[Path]:
    """The executed notebooks of the book (``book/NN_*.ipynb``), or those named."""
    found = sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb"))
    if not names:
        return found
    chosen = [path for path in found
              if any(path.name.startswith(f"{int(n):02d}_") if n.isdigit()
                     else path.name == Path(n).name for n in names)]
    if not chosen:
        raise SystemExit(f"execute_book: no chapter among {names!r}")
    return chosen


def execution_settings() -> tuple[int, bool]:
    """The cell timeout and allow_errors of ``_config.yml``'s ``execute`` section."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    execute = config.get("execute", {})
    return int(execute.get("timeout", 600)), bool(execute.get("allow_errors", False))


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _run(path: str, timeout: int, allow_errors: bool, threads: str):
    """In a worker process: execute one notebook in its own folder, as MyST-NB does."""
    from jupyter_cache.executors.utils import single_nb_execution

    os.environ.setdefault("ATTENTION_COURSE_THREADS", threads)
    os.environ.setdefault("OMP_NUM_THREADS", os.environ["ATTENTION_COURSE_THREADS"])
    os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")
    notebook = nbformat.read(path, as_version=4)
    result = single_nb_execution(notebook, cwd=str(Path(path).parent), timeout=timeout,
                                 allow_errors=allow_errors, meta_override=True)
    return result.nb, result.time, result.exc_string


def _previous_seconds(cache, path: Path) -> float:
    """How long the chapter took when it was last cached (any version of it)."""
    times = [record.data.get("execution_seconds", 0.0)
             for record in cache.list_cache_records() if Path(record.uri) == path]
    return max(times, default=float(FIRST_GUESS.get(path.name[:2], 30)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pages", nargs="*", help="chapter numbers or notebook names")
    parser.add_argument("--jobs", type=int, default=0,
                        help="chapters at a time (default: one per usable core)")
    args = parser.parse_args(argv)

    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    cache = get_cache(str(CACHE))
    todo = []
    for path in chapters(args.pages):
        try:
            cache.match_cache_notebook(nbformat.read(path, as_version=4))
        except KeyError:
            todo.append(path)
    if not todo:
        print("execute_book: every chapter is in the execution cache")
        return 0
    todo.sort(key=lambda path: -_previous_seconds(cache, path))
    cores = usable_cores()
    jobs = max(1, min(args.jobs or cores, len(todo)))
    threads = str(max(1, cores // jobs))
    timeout, allow_errors = execution_settings()
    print(f"execute_book: {len(todo)} chapter(s), {jobs} at a time, "
          f"{os.environ.get('ATTENTION_COURSE_THREADS', threads)} torch thread(s) each",
          flush=True)

    start = time.perf_counter()
    failed: list[str] = []
    times: dict[str, float] = {}
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        running = {pool.submit(_run, str(path), timeout, allow_errors, threads): path
                   for path in todo}
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                path = running.pop(future)
                notebook, seconds, error = future.result()
                times[path.name] = seconds
                if error:
                    failed.append(path.name)
                    print(f"  FAILED {path.name} after {seconds:.0f} s\n{error}", flush=True)
                    continue
                cache.add_nb_to_project(str(path))
                cache.cache_notebook_bundle(
                    CacheBundleIn(notebook, str(path),
                                  data={"execution_seconds": seconds}),
                    check_validity=False, overwrite=True)
                print(f"  {path.name:<40} {seconds:6.0f} s", flush=True)
    total = time.perf_counter() - start
    TIMES.parent.mkdir(parents=True, exist_ok=True)
    TIMES.write_text(json.dumps({"jobs": jobs, "wall_seconds": round(total, 1),
                                 "chapters": {name: round(seconds, 1)
                                              for name, seconds in times.items()}},
                                indent=1), encoding="utf-8")
    print(f"execute_book: {len(times)} chapter(s) in {total:.0f} s wall "
          f"({sum(times.values()):.0f} s of kernel time)", flush=True)
    if failed:
        print(f"execute_book: failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
