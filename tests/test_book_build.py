"""The book builds with -W (every warning an error, every notebook cell must run)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def _toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]

    def walk(entries: list[dict]) -> None:
        for entry in entries:
            if "file" in entry:
                files.append(entry["file"])
            walk(entry.get("sections", []))
            walk(entry.get("chapters", []))

    for part in toc.get("parts", []):
        walk(part.get("chapters", []))
    walk(toc.get("chapters", []))
    return files


def test_every_toc_entry_is_rendered(built_book: Path) -> None:
    assert (built_book / "index.html").is_file()
    for name in _toc_files():
        assert (built_book / f"{name}.html").is_file(), f"{name} missing from the built book"


def test_every_chapter_notebook_is_in_the_toc() -> None:
    listed = set(_toc_files())
    for notebook in sorted((ROOT / "book").glob("*.ipynb")):
        assert f"book/{notebook.stem}" in listed, f"{notebook.name} is not in _toc.yml"


def test_offline_assets_are_used(built_book: Path) -> None:
    """With the assets fetched, no page loads a script from off the machine."""
    if not (ROOT / "book" / "_vendor" / ".complete").exists():
        pytest.skip("offline web assets were not fetched (no npm); the book uses the CDN")
    assert (built_book / "_static" / "mathjax" / "tex-chtml.js").is_file()
    pages_with_maths = 0
    for html in built_book.rglob("*.html"):
        page = html.read_text(encoding="utf-8")
        remote = re.findall(r"<script[^>]+src=\"(https?://[^\"]+)", page)
        assert not remote, f"{html.relative_to(built_book)} loads scripts off-site: {remote}"
        pages_with_maths += "_static/mathjax/tex-chtml.js" in page
    assert pages_with_maths > 0, "no page loads the local MathJax"
