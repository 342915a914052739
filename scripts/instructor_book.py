"""``make instructor-book``: the instructor's edition of the book, in its own folder.

The same book, built from the same sources, except that in the Exercises part each
exercise is followed by its reference solution (``exercises/solutions/NN_name.ipynb``):
each answer's code folded away behind a toggle (cells tagged ``hide-input``) and each
question's explanation in a dropdown, plus a page for instructors. The learner's
book never lists these notebooks. The chapters' executed outputs come from the learner
book's execution cache, so only the exercises run: the solutions, and the exercises as
handed out, which the learner's book shows without outputs (they would give answers
away). Output: ``_build/instructor/_build/html``.
"""

from __future__ import annotations

import sys

from book_variants import build, derived_config, read_yaml

PAGE = "book/instructor"


def instructor_toc(toc: dict) -> dict:
    """The learner's table of contents with each exercise's solution under the exercise
    and the instructor's page first in the Exercises part."""

    def swap(entries: list[dict]) -> list[dict]:
        out = []
        for entry in entries:
            entry = dict(entry)
            name = entry.get("file", "")
            if name.startswith("exercises/") and name.count("/") == 1:
                solution = name.replace("exercises/", "exercises/solutions/", 1)
                entry["sections"] = [{"file": solution}]
            elif "sections" in entry:
                entry["sections"] = swap(entry["sections"])
            if entry.get("file") == "book/exercises":
                entry["sections"] = [{"file": PAGE}, *entry.get("sections", [])]
            out.append(entry)
        return out

    return {**toc, "parts": [{**part, "chapters": swap(part["chapters"])}
                             for part in toc["parts"]]}


def main() -> int:
    title = f"{read_yaml('_config.yml')['title']} (instructor's edition)"
    config = derived_config(title=title, language_switch=False)
    config["execute"]["exclude_patterns"] = []  # the exercises with their outputs, too
    status, html = build("instructor", config, toc=instructor_toc(read_yaml("_toc.yml")))
    if status == 0:
        print(f"\nThe instructor's edition is at: {html / 'index.html'}")
    return status


if __name__ == "__main__":
    sys.exit(main())
