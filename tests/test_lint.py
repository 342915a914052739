"""ruff over everything the project writes: the package (chapter modules at 80 columns,
which the book's code column shows without scrolling), tests, benchmarks, scripts and
every notebook."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
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


# What a rendered page shows as code: the chapters' visible code cells, the fenced code
# blocks of the book's Markdown (pages and notebook text cells) and the files they
# include. A page's code column fits about 80 characters at 1280 px
# (tests/test_browser.py measures the rendered pages); longer lines scroll sideways.
CODE_COLUMN = 80
HIDDEN = {"remove-input", "remove-cell"}
FENCE = re.compile(r"^(`{3,}|~{3,})\s*(\{(?P<directive>[\w-]+)\}\s*(?P<arg>\S*)|\w*)")


def _shown_code(path: Path, markdown: str) -> Iterator[tuple[str, str]]:
    """(where, line) for every line of code that ``markdown`` shows."""
    fence, directive = None, None
    for n, line in enumerate(markdown.splitlines(), 1):
        if fence is None:
            m = FENCE.match(line.lstrip())
            if m:
                fence, directive = m.group(1), m.group("directive")
                if directive == "literalinclude":
                    target = (path.parent / m.group("arg")).resolve()
                    for k, text in enumerate(target.read_text("utf-8").splitlines(), 1):
                        yield f"{target.relative_to(ROOT)}:{k} (shown by {path.name})", text
            continue
        if line.lstrip().startswith(fence):
            fence = None
        elif directive in (None, "code-block", "code") and not line.lstrip().startswith(":"):
            yield f"{path.relative_to(ROOT)}:{n}", line


def shown_code_lines() -> Iterator[tuple[str, str]]:
    book = ROOT / "book"
    for page in sorted(book.glob("*.md")):
        yield from _shown_code(page, page.read_text("utf-8"))
    for notebook in sorted(book.glob("*.ipynb")):
        cells = json.loads(notebook.read_text("utf-8"))["cells"]
        for i, cell in enumerate(cells):
            source = "".join(cell["source"])
            if cell["cell_type"] == "markdown":
                for where, line in _shown_code(notebook, source):
                    yield f"{where} (cell {i})", line
            elif cell["cell_type"] == "code":
                if HIDDEN & set(cell.get("metadata", {}).get("tags", [])):
                    continue
                for n, line in enumerate(source.splitlines(), 1):
                    yield f"{notebook.relative_to(ROOT)} cell {i} line {n}", line


def test_the_code_a_page_shows_fits_its_column() -> None:
    long = [f"{where}: {len(line)} characters" for where, line in shown_code_lines()
            if len(line) > CODE_COLUMN]
    assert not long, "\n".join(long)


def test_the_column_check_sees_fences_includes_and_cells() -> None:
    wheres = [where for where, _ in shown_code_lines()]
    assert any("grading.md" in w for w in wheres)  # a ```bash fence
    assert any("scripts/slurm/grade_array.sh" in w for w in wheres)  # a literalinclude
    assert any(" cell " in w and "line" in w for w in wheres)  # a visible code cell
    page = ROOT / "book" / "grading.md"
    fake = "```{glossary}\n" + "x" * 99 + "\n```\n```python\n:x:\n" + "y" * 99 + "\n```\n"
    assert [line for _, line in _shown_code(page, fake)] == ["y" * 99]
