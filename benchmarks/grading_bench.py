"""Benchmark: grading throughput, a fresh Python per submission against the fork server.

Grades copies of the ten reference solutions (``--copies`` of each) through the real
grader, sandbox included, in four ways: ``fresh`` (a new Python and torch for every
submission, as the first edition did) and ``server`` (one process imports torch once and
forks a fresh child per submission), each with ``--jobs 1`` and ``--jobs 2``. Every time
includes starting the server. Prints submissions per minute and the ratio to
``fresh, jobs 1`` measured in the same run, and checks that every copy got full marks.

Run: ``python benchmarks/grading_bench.py`` (``make bench``); on a shared machine wrap it
in ``flock /tmp/attn-cpu.lock``. Writes ``benchmarks/results/grading_bench.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from attention_course.grading.grader import grade_notebook
from attention_course.grading.sandbox import ForkServer, Limits

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "exercises" / "solutions"
WAYS = (("fresh", 1), ("fresh", 2), ("server", 1), ("server", 2))


def grade_all(paths: list[Path], way: str, jobs: int) -> float:
    """Seconds to grade every notebook (starting the server included); all must pass."""
    limits = Limits(timeout=120, fresh_process=way == "fresh")
    start = time.perf_counter()
    server = ForkServer() if way == "server" else None
    if server is not None:
        server.start()
    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            records = list(pool.map(
                lambda p: grade_notebook(p, limits=limits, server=server), paths))
    finally:
        if server is not None:
            server.close()
    elapsed = time.perf_counter() - start
    wrong = [r.submission for r in records if r.score != r.max_score]
    if wrong:
        raise RuntimeError(f"reference solutions without full marks: {wrong}")
    return elapsed


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=2,
                        help="graded copies of each reference solution (default 2)")
    parser.add_argument("--exercises", nargs="*", help="exercise ids (default: all)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args(argv)
    solutions = sorted(SOLUTIONS.glob("*.ipynb"))
    if args.exercises:
        solutions = [p for p in solutions if p.stem in args.exercises]
    paths = solutions * args.copies
    print(f"grading {len(paths)} notebooks ({len(solutions)} reference solutions x "
          f"{args.copies}), each way once")
    seconds = {f"{way}, jobs {jobs}": grade_all(paths, way, jobs) for way, jobs in WAYS}
    base = seconds["fresh, jobs 1"]
    rows = {name: {"seconds": round(s, 2), "per_minute": round(60 * len(paths) / s, 1),
                   "ratio_to_fresh_jobs_1": round(base / s, 2)} for name, s in seconds.items()}
    print(f"{'way':<16} {'seconds':>8} {'per minute':>11} {'x fresh, jobs 1':>16}")
    for name, row in rows.items():
        print(f"{name:<16} {row['seconds']:>8.1f} {row['per_minute']:>11.1f} "
              f"{row['ratio_to_fresh_jobs_1']:>16.2f}")
    report = {"notebooks": len(paths), "ways": rows, "torch": torch.__version__,
              "python": platform.python_version(), "machine": platform.machine()}
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / "grading_bench.json"
    target.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {target}")
    return report


if __name__ == "__main__":
    main()
