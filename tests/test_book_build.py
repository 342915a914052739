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
    vendor_ready = (ROOT / "book" / "_vendor" / ".complete").exists()
    if not vendor_ready:
        pytest.skip("offline web assets were not fetched (no npm); the book uses the CDN")
    page = (built_book / "book" / "01_attention_pooling.html").read_text()
    assert "_static/mathjax/tex-chtml.js" in page
    assert not re.search(r"<script[^>]+src=\"https?://", page), "a script is loaded off-site"
    assert (built_book / "_static" / "mathjax" / "tex-chtml.js").is_file()
