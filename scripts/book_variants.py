"""Other builds of the same book: the instructor's edition, the Chinese edition, the
message catalogs. Each is built from the repository's sources with a configuration
derived from ``_config.yml``, in a folder of its own under ``_build/``, sharing the
learner book's execution cache (so no notebook runs twice).
"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "_build" / ".jupyter_cache"


def page_name(page: str, catalogs: tuple[str, ...]) -> str:
    """``book/09_decoding`` from a page's path, its notebook's or its catalog's under
    ``catalogs`` (``("locales", "zh_CN", "outputs")``, for instance)."""
    path = Path(page)
    if path.is_absolute():
        path = path.relative_to(ROOT)
    parts = path.with_suffix("").parts
    if parts[:len(catalogs)] == catalogs:
        parts = parts[len(catalogs):]
    return "/".join(parts)


def read_yaml(name: str) -> dict:
    return yaml.safe_load((ROOT / name).read_text(encoding="utf-8"))


def derived_config(title: str | None = None, **sphinx_config: object) -> dict:
    """The book's configuration, sharing its execution cache, with the given Sphinx
    settings added (and another title, if given)."""
    config = copy.deepcopy(read_yaml("_config.yml"))
    config["execute"] = {**config.get("execute", {}), "cache": str(CACHE)}
    sphinx = config.setdefault("sphinx", {})
    # local extensions are found relative to the configuration file, which lives elsewhere
    sphinx["local_extensions"] = {name: str(ROOT / path)
                                  for name, path in sphinx.get("local_extensions", {}).items()}
    sphinx["config"] = {**sphinx.get("config", {}), **sphinx_config}
    if title is not None:
        config["title"] = title
    return config


def build(name: str, config: dict, toc: dict | None = None, builder: str | None = None,
          strict: bool = True, fresh: bool = False) -> tuple[int, Path]:
    """Build the book with ``config`` (and ``toc``) into ``_build/<name>``, every page again
    when ``fresh``; returns the exit status and the folder the builder wrote
    (``_build/<name>/_build/<builder>``)."""
    out = ROOT / "_build" / name
    out.mkdir(parents=True, exist_ok=True)
    (out / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True),
                                     encoding="utf-8")
    command = [str(Path(sys.executable).with_name("jupyter-book")), "build", str(ROOT),
               "--config", str(out / "_config.yml"), "--path-output", str(out)]
    if toc is not None:
        (out / "_toc.yml").write_text(yaml.safe_dump(toc, sort_keys=False), encoding="utf-8")
        command += ["--toc", str(out / "_toc.yml")]
    if builder is not None:
        command += ["--builder", "custom", "--custom-builder", builder]
    if strict:
        command += ["-W", "--keep-going"]
    if fresh:
        command += ["--all"]
    status = subprocess.run(command, cwd=ROOT).returncode
    return status, out / "_build" / (builder or "html")
