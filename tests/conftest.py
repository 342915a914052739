"""Shared fixtures: the built book (built once per session), the grader's fork server (one
per test module) and the GPU marker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
BUILD_DIR = ROOT / "_build" / "html"


SESSION_START = time.time()


def pytest_terminal_summary(terminalreporter) -> None:
    """The chapters' execution times, when this session executed any (the book build)."""
    times = ROOT / "_build" / "execution_times.json"
    if not times.is_file() or times.stat().st_mtime < SESSION_START:
        return
    run = json.loads(times.read_text(encoding="utf-8"))
    terminalreporter.section("chapters executed for the book")
    for name, seconds in sorted(run["chapters"].items()):
        terminalreporter.write_line(f"{name:<42} {seconds:7.1f} s")
    terminalreporter.write_line(f"{len(run['chapters'])} chapter(s), {run['jobs']} at a time: "
                                f"{run['wall_seconds']:.0f} s wall")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that needs the built book is slow (``-m "not slow"`` leaves it out); a GPU
    test is skipped where there is no CUDA."""
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (none available here)")
    for item in items:
        if "built_book" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(skip_gpu)


@pytest.fixture(scope="module")
def server():
    """One forking server of the sandboxed grader for a test module's grading runs."""
    from attention_course.grading.sandbox import ForkServer

    with ForkServer() as started:
        yield started


def _build(command: list[str], failed: str) -> None:
    """Run one build command in the repository; fail the session's tests with its last 80
    lines of output if it fails."""
    result = subprocess.run(
        command,
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore::DeprecationWarning"},
    )
    if result.returncode != 0:
        tail = "\n".join((result.stdout + "\n" + result.stderr).splitlines()[-80:])
        pytest.fail(f"{failed} (exit {result.returncode}):\n{tail}")


@pytest.fixture(scope="session")
def built_book() -> Path:
    """Build the book with ``-W --keep-going`` (warnings are errors), then its Chinese
    edition into ``zh_CN/`` (``-W`` too), and return the HTML folder.

    The build uses Jupyter Book's execution cache in ``_build/.jupyter_cache``, so a book
    already built by ``make book`` only re-executes the notebooks that changed.

    No wall-clock limit is put on the build: what guards against a hang is the per-cell
    ``execute.timeout`` in ``_config.yml``. A whole-build limit only failed machines that
    were busy (two ``yes`` loads on 2 cores took the build past an hour).
    """
    jupyter_book = Path(sys.executable).with_name("jupyter-book")
    _build([str(jupyter_book), "build", str(ROOT), "-W", "--keep-going"],
           "jupyter-book build -W failed")
    # the Chinese edition, as `make book` builds it: -W, from the same execution cache
    _build([sys.executable, str(ROOT / "scripts" / "i18n.py"), "build"],
           "the Chinese edition's build (-W) failed")
    return BUILD_DIR
