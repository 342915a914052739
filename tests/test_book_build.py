"""The book builds with -W (every warning an error, every notebook cell must run)."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
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
    for page_path in built_book.rglob("*.html"):
        page = page_path.read_text(encoding="utf-8")
        remote = re.findall(r"<script[^>]+src=\"(https?://[^\"]+)", page)
        assert not remote, f"{page_path.relative_to(built_book)} loads scripts off-site: {remote}"
        pages_with_maths += "_static/mathjax/tex-chtml.js" in page
    assert pages_with_maths > 0, "no page loads the local MathJax"


def _solution_lines() -> dict[str, set[str]]:
    """Per exercise, the distinctive lines of its reference solution's answers (from the
    regions between the solution markers) that neither the package's own code nor a
    chapter nor a learner's notebook (which the learner sees anyway) contains."""
    package = "\n".join(p.read_text(encoding="utf-8")
                        for p in (ROOT / "attention_course").rglob("*.py")
                        if "grading" not in p.parts)
    shown = [*(ROOT / "exercises").glob("*.ipynb"), *(ROOT / "book").glob("*.ipynb")]
    package += "\n".join("".join(c["source"]) for p in shown
                         for c in json.loads(p.read_text(encoding="utf-8"))["cells"])
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / "exercises" / "solutions").glob("*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        lines: set[str] = set()
        for cell in nb["cells"]:
            inside = False
            for line in "".join(cell["source"]).splitlines():
                if "# BEGIN SOLUTION" in line or "# END SOLUTION" in line:
                    inside = "BEGIN" in line
                    continue
                text = line.strip()
                if inside and len(text) >= 20 and not text.startswith("#") and (
                        text not in package):
                    lines.add(text)
        found[path.stem] = lines
    return found


def _page_text(path: Path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", path.read_text(encoding="utf-8")))


def test_the_learners_book_holds_no_solution(built_book: Path) -> None:
    solutions = _solution_lines()
    assert sum(map(len, solutions.values())) > 20, "found too few solution lines to check"
    pages = [p for p in built_book.rglob("*.html") if "_static" not in p.parts]
    assert not (built_book / "exercises" / "solutions").exists()
    for page in pages:
        text = _page_text(page)
        for exercise, lines in solutions.items():
            leaked = [line for line in lines if line in text]
            assert not leaked, f"{page.relative_to(built_book)} shows the solution of " \
                               f"{exercise}: {leaked[:3]}"


def _exercise_names() -> list[str]:
    names = sorted(p.stem for p in (ROOT / "exercises").glob("[0-9]*.ipynb"))
    assert len(names) == 11, names
    return names


def _shows_outputs(page: Path) -> bool:
    return "cell_output" in page.read_text(encoding="utf-8")


def test_the_learners_exercise_pages_give_no_answer_away(built_book: Path) -> None:
    """Executed, an exercise prints what its predict and debug questions ask the learner to
    work out (the NaNs of a broken attention, a table of results, the names of the bugs),
    so both editions of the learner's book show the exercises as handed out: code cells
    without outputs. The chapters keep theirs."""
    for edition in (built_book, built_book / "zh_CN"):
        for name in _exercise_names():
            page = edition / "exercises" / f"{name}.html"
            source = page.read_text(encoding="utf-8")
            assert "cell_input" in source, f"{page}: no code cell shown"
            assert not _shows_outputs(page), f"{page.relative_to(built_book)} shows outputs"
        assert _shows_outputs(edition / "book" / "01_attention_pooling.html")


def test_every_reference_links_to_its_paper(built_book: Path) -> None:
    """Each entry of ``references.bib`` carries a DOI, an arXiv id or a URL, and the
    references page links to it."""
    bib = (ROOT / "references.bib").read_text(encoding="utf-8")
    entries = re.findall(r"@\w+\{(\w+),(.*?)\n\}", bib, re.S)
    assert len(entries) > 40
    prefix = {"doi": "https://doi.org/", "eprint": "https://arxiv.org/abs/", "url": ""}
    targets = {}
    for key, body in entries:
        found = re.search(r"^\s*(doi|eprint|url)\s*=\s*\{([^}]+)\}", body, re.M)
        assert found, f"{key}: no DOI, arXiv id or URL"
        targets[key] = prefix[found.group(1)] + found.group(2)
    page = (built_book / "book" / "references.html").read_text(encoding="utf-8")
    links = {html.unescape(link) for link in re.findall(r'href="([^"]+)"', page)}
    missing = {key: target for key, target in targets.items() if target not in links}
    assert not missing, f"the references page does not link to {missing}"


def test_the_instructors_edition_shows_solutions_and_explanations(built_book: Path) -> None:
    """``make instructor-book`` builds (after the learner's book, sharing its cache) a book
    whose exercise pages fold each answer away and explain each question in a dropdown."""
    status = subprocess.run([sys.executable, str(ROOT / "scripts" / "instructor_book.py")],
                            cwd=ROOT, capture_output=True, text=True)
    assert status.returncode == 0, (status.stdout + status.stderr)[-4000:]
    html_dir = ROOT / "_build" / "instructor" / "_build" / "html"
    assert (html_dir / "book" / "instructor.html").is_file()
    from attention_course.claims import notices_in_build

    notices = notices_in_build(html_dir.parent)  # the solutions' readings of their answers
    assert not notices, [f"{r['notebook']}: {r['name']}: {r['got']}" for r in notices]
    for exercise, lines in _solution_lines().items():
        page = html_dir / "exercises" / "solutions" / f"{exercise}.html"
        source = page.read_text(encoding="utf-8")
        text = _page_text(page)
        assert "tag_hide-input" in source, f"{exercise}: answers are not folded away"
        assert source.count("<details") >= 1 and "Explanation" in text, exercise
        assert any(line in text for line in lines), f"{exercise}: no solution code shown"
        assert _shows_outputs(page), f"{exercise}: the solution is shown without outputs"
        assert _shows_outputs(html_dir / "exercises" / f"{exercise}.html"), (
            f"{exercise}: the instructor's edition shows the exercise without outputs")


def test_every_reading_of_the_text_holds(built_book: Path) -> None:
    """What a chapter's text says about its runs is checked in the run
    (``attention_course.claims``); a reading that does not hold leaves a notice on its page
    and the run goes on. CI holds the book to its text: no page may carry such a notice."""
    from attention_course.claims import NOTICE_CLASS, notices_in_build

    notices = notices_in_build(ROOT / "_build")
    assert not notices, "readings of the text that did not hold in this build:\n" + "\n".join(
        f"  {r['notebook']}: {r['name']}: the text says {r['says']!r}; got {r['got']}"
        for r in notices)
    pages = [p for p in built_book.rglob("*.html") if "_static" not in p.parts]
    shown = [p.relative_to(built_book).as_posix() for p in pages
             if NOTICE_CLASS in p.read_text(encoding="utf-8")]
    assert not shown, f"pages showing a notice of a reading that did not hold: {shown}"


def test_every_notebook_ran_once_in_the_build(built_book: Path, capsys) -> None:
    """The -W build is the notebooks' run: each one in the table of contents has a
    successful execution of its current content in the cache (a failing cell would have
    failed the build with its traceback). Their times are printed for the budget."""
    from jupyter_cache import get_cache

    cache = get_cache(str(ROOT / "_build" / ".jupyter_cache"))
    notebooks = [ROOT / f"{name}.ipynb" for name in _toc_files()
                 if (ROOT / f"{name}.ipynb").exists()]
    assert len(notebooks) >= 14
    rows = []
    for path in notebooks:
        try:
            record = cache.match_cache_file(str(path))
        except KeyError:
            pytest.fail(f"{path.relative_to(ROOT)} has no successful execution in the cache")
        rows.append((path.relative_to(ROOT).as_posix(), record.data["execution_seconds"]))
    with capsys.disabled():
        print("\nnotebook execution times (s):")
        for name, seconds in rows:
            print(f"  {name:<48} {seconds:7.1f}")
        chapters = sum(s for n, s in rows if n.startswith("book/"))
        print(f"  {'chapters together':<48} {chapters:7.1f}")
