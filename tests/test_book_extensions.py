"""The book's own Sphinx extensions, each built on a tiny page of its own."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

EXT = Path(__file__).resolve().parents[1] / "book" / "_ext"

QUIZ = """\
# Page

```{quiz} What is $1 + 1$?
:answer: 2

- Three.

  No: count again.
- Two.

  Right: $1 + 1 = 2$.
```
"""


def _build(tmp_path: Path, page: str, language: str = "en") -> tuple[int, str, str]:
    (tmp_path / "conf.py").write_text(textwrap.dedent(f"""\
        import sys
        sys.path.insert(0, {str(EXT)!r})
        extensions = ["myst_parser", "quiz"]
        myst_enable_extensions = ["dollarmath"]
        language = {language!r}
        """))
    (tmp_path / "index.md").write_text(page, encoding="utf-8")
    result = subprocess.run([sys.executable, "-m", "sphinx", "-W", "-q", "-b", "html",
                             str(tmp_path), str(tmp_path / "out")],
                            capture_output=True, text=True)
    html = (tmp_path / "out" / "index.html")
    return result.returncode, result.stderr, html.read_text() if html.exists() else ""


def test_a_quiz_renders_as_buttons_with_hidden_feedback(tmp_path):
    status, err, html = _build(tmp_path, QUIZ)
    assert status == 0, err
    assert html.count('class="quiz-button"') == 2
    assert 'data-correct="false"' in html and 'data-correct="true"' in html
    assert html.index('data-correct="true"') > html.index("Three.")
    assert html.count('class="quiz-choice-feedback" hidden') == 2
    assert "count again" in html and 'aria-live="polite"' in html
    assert 'data-right="Right."' in html and "quiz.js" in html


def test_a_choice_that_is_only_maths_still_names_its_button(tmp_path):
    page = QUIZ.replace("- Two.", "- $1 + 1$").replace("- Three.", "- Three, or $1 + 2$.")
    status, err, html = _build(tmp_path, page)
    assert status == 0, err
    assert html.count('aria-label="1 + 1"') == 1  # the maths choice; text names itself
    assert html.count('aria-pressed="false" aria-label=') == 1


def test_a_quiz_speaks_the_books_language(tmp_path):
    status, err, html = _build(tmp_path, QUIZ, language="zh_CN")
    assert status == 0, err
    assert 'data-right="答对了。"' in html


@pytest.mark.parametrize("broken, words", [
    (QUIZ.replace(":answer: 2", ":answer: 3"), "must number choices"),
    (QUIZ.replace("\n  No: count again.\n", "\n"), "then the feedback"),
    (QUIZ.replace("- Three.", "Some text.\n\n- Three."), "exactly one bullet list"),
])
def test_a_broken_quiz_fails_the_build(tmp_path, broken, words):
    status, err, _ = _build(tmp_path, broken)
    assert status != 0 and words in err
