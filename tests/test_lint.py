"""ruff over everything the project writes: the package (chapter modules at 80 columns,
which the book's code column shows without scrolling), tests, benchmarks, scripts and
every notebook."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TARGETS = ["attention_course", "tests", "benchmarks", "scripts", "book", "exercises",
           "conftest.py"]


def test_ruff_is_clean() -> None:
    ruff = Path(sys.executable).with_name("ruff")
    if not ruff.exists():
        ruff = shutil.which("ruff")
        if ruff is None:
            pytest.skip("ruff is not installed (make setup installs it)")
    result = subprocess.run([str(ruff), "check", "--no-cache", *TARGETS], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
