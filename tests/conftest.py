"""Shared fixtures: the built book (built once per session), the grader's fork server (one
per test module) and the GPU marker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
BUILD_DIR = ROOT / "_build" / "html"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (none available here)")
    for item in items:
        if "gpu" in item.keywords:
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
