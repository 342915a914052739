"""``make gpu-check``: everything that needs a CUDA GPU, in one run, with a summary.

1. the tests marked ``gpu`` (skipped on machines without CUDA);
2. the reference solutions graded with ``--device cuda`` (the learner's code called on
   GPU tensors inside the sandbox), which must all get full marks;
3. every chapter executed on the GPU (``ATTENTION_COURSE_DEVICE=cuda``), with its time.

On a machine without CUDA it says so and exits 0 having run nothing. Exit status 1 when
any step fails. Run it from the repository root: ``.venv/bin/python scripts/gpu_check.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _step(title: str, command: list[str], env: dict[str, str] | None = None) -> bool:
    print(f"\n== {title}\n$ {' '.join(command)}", flush=True)
    status = subprocess.run(command, cwd=ROOT, env={**os.environ, **(env or {})}).returncode
    print(f"-> {'ok' if status == 0 else f'FAILED (exit status {status})'}", flush=True)
    return status == 0


def execute_chapters() -> list[tuple[str, float, str]]:
    """Run every chapter notebook on the GPU; ``(name, seconds, "ok" or the error)``."""
    import nbformat
    from nbclient import NotebookClient

    results = []
    for path in sorted((ROOT / "book").glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        client = NotebookClient(nb, timeout=1800, kernel_name="python3",
                                resources={"metadata": {"path": str(path.parent)}})
        start = time.perf_counter()
        try:
            client.execute()
            outcome = "ok"
        except Exception as error:  # noqa: BLE001 - report and go on to the next chapter
            outcome = f"{type(error).__name__}: {str(error).strip().splitlines()[-1][:200]}"
        results.append((path.stem, time.perf_counter() - start, outcome))
        print(f"  {path.stem:<36} {results[-1][1]:7.1f} s  {outcome}", flush=True)
    return results


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print("gpu-check: no CUDA GPU is visible to torch "
              f"({torch.__version__}, cuda build: {torch.version.cuda or 'none'}); "
              "skipping every GPU check. Nothing was run.")
        return 0
    print(f"gpu-check on {torch.cuda.get_device_name(0)} (torch {torch.__version__}, "
          f"CUDA {torch.version.cuda})")
    ok = {"gpu tests": _step("tests marked gpu", [str(BIN / "python"), "-m", "pytest",
                                                   "tests", "-m", "gpu", "-q"])}
    with tempfile.TemporaryDirectory() as out:
        ok["grading on the GPU"] = _step(
            "reference solutions graded on the GPU",
            [str(BIN / "attention-course"), "grade", "exercises/solutions", "--device", "cuda",
             "--out", out],
        )
        if ok["grading on the GPU"]:
            totals = (Path(out) / "totals.csv").read_text().splitlines()[1:]
            full = all(row.split(",")[-2] == row.split(",")[-1] for row in totals)
            ok["grading on the GPU"] = full
            print("   full marks" if full else f"   NOT full marks: {totals}")
    print("\n== chapters executed on the GPU (ATTENTION_COURSE_DEVICE=cuda)")
    os.environ["ATTENTION_COURSE_DEVICE"] = "cuda"
    chapters = execute_chapters()
    ok["chapters on the GPU"] = all(outcome == "ok" for _, _, outcome in chapters)
    print("\n== summary")
    for name, passed in ok.items():
        print(f"  {name:<24} {'ok' if passed else 'FAILED'}")
    print(f"  chapters: {sum(t for _, t, _ in chapters):.0f} s in all")
    return 0 if all(ok.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
