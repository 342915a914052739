"""Put the course's package on the site, as a wheel, so that a reader can run any chapter.

At the start of a build the package is built into a wheel (``pip wheel``, no network:
setuptools comes from the environment); when the build is done the wheel is copied to
``downloads/`` in the output folder. ``{{ wheel }}`` in a page's source (the page "Run it
yourself") becomes its file name before the page is parsed, so it works in links, raw
HTML and code blocks alike.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

ROOT = Path(__file__).resolve().parents[2]


def _version() -> str:
    for line in (ROOT / "pyproject.toml").read_text(encoding="utf-8").splitlines():
        if line.startswith("version"):
            return line.split("=", 1)[1].strip().strip('"')
    raise ExtensionError("no version in pyproject.toml")


def wheel_name() -> str:
    return f"attention_course-{_version()}-py3-none-any.whl"


def _name_the_wheel(app: Sphinx, docname: str, source: list[str]) -> None:
    source[0] = source[0].replace("{{ wheel }}", wheel_name())


def _copy_wheel(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    with tempfile.TemporaryDirectory() as folder:
        result = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps",
             "--no-build-isolation", "--quiet", "--wheel-dir", folder],
            capture_output=True, text=True)
        built = Path(folder) / wheel_name()
        if result.returncode != 0 or not built.is_file():
            raise ExtensionError(f"could not build the package's wheel:\n{result.stderr[-2000:]}")
        target = Path(app.outdir) / "downloads"
        target.mkdir(exist_ok=True)
        shutil.copy(built, target / built.name)


def setup(app: Sphinx) -> dict:
    app.connect("source-read", _name_the_wheel)
    app.connect("build-finished", _copy_wheel)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
