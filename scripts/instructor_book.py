"""``make instructor-book``: the instructor's edition of the book, in its own folder.

The same book, built from the same sources, except that in the Exercises part each
exercise is followed by its reference solution (``exercises/solutions/NN_name.ipynb``):
each answer's code folded away behind a toggle (cells tagged ``hide-input``) and each
question's explanation in a dropdown, plus a page for instructors. The learner's
book never lists these notebooks. The chapters' executed outputs come from the learner
book's execution cache, so only the solutions run. Output: ``_build/instructor/_build/html``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "_build" / "instructor"
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


def instructor_config(config: dict) -> dict:
    """The learner book's configuration, titled as the instructor's edition and sharing
    the learner book's execution cache."""
    execute = {**config.get("execute", {}), "cache": str(ROOT / "_build" / ".jupyter_cache")}
    sphinx = dict(config.get("sphinx", {}))
    # local extensions are found relative to the configuration file, which lives elsewhere
    sphinx["local_extensions"] = {name: str(ROOT / path)
                                  for name, path in sphinx.get("local_extensions", {}).items()}
    return {**config, "title": f"{config['title']} (instructor's edition)", "execute": execute,
            "sphinx": sphinx}


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    toc = instructor_toc(yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8")))
    config = instructor_config(yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8")))
    (OUT / "_toc.yml").write_text(yaml.safe_dump(toc, sort_keys=False), encoding="utf-8")
    (OUT / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    command = [str(Path(sys.executable).with_name("jupyter-book")), "build", str(ROOT),
               "--config", str(OUT / "_config.yml"), "--toc", str(OUT / "_toc.yml"),
               "--path-output", str(OUT), "-W", "--keep-going"]
    status = subprocess.run(command, cwd=ROOT).returncode
    if status == 0:
        print(f"\nThe instructor's edition is at: {OUT / '_build' / 'html' / 'index.html'}")
    return status


if __name__ == "__main__":
    sys.exit(main())
