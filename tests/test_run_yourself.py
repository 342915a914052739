"""From the built site alone, a chapter runs in a fresh virtual environment.

The site offers each chapter as a notebook (the page's download button points at
``_sources/``) and the package as a wheel (``downloads/``). The test makes a new venv,
installs the site's wheel into it (its dependencies, torch and friends, are lent from
this environment's site-packages, which saves gigabytes and gives the wheel's own
``attention_course`` precedence), downloads chapter 1 the way the page offers it and
executes it on a kernel of the new venv.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

CHAPTER = "book/01_attention_pooling"


def _download_link(built_book: Path, page: str, suffix: str) -> Path:
    html = (built_book / f"{page}.html").read_text(encoding="utf-8")
    links = re.findall(rf'href="([^"]+\{suffix})"', html)
    assert links, f"{page}.html offers no {suffix} download"
    target = (built_book / page).parent / links[0]
    assert target.resolve().is_file(), f"the link {links[0]} of {page}.html leads nowhere"
    return target.resolve()


def test_a_chapter_runs_from_the_site_alone(built_book: Path, tmp_path: Path) -> None:
    import nbformat
    from nbclient import NotebookClient

    wheel = _download_link(built_book, "book/run_yourself", ".whl")
    notebook = _download_link(built_book, CHAPTER, ".ipynb")
    venv = tmp_path / "reader-venv"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def run(*args: str) -> str:  # in the reader's folder, not in the repository
        return subprocess.run(args, check=True, capture_output=True, text=True, cwd=tmp_path,
                              env=env).stdout.strip()

    run(sys.executable, "-m", "venv", str(venv))
    python = str(venv / "bin" / "python")
    site = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"))
    (site / "lent.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run(python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel))
    where = run(python, "-c", "import attention_course as a; print(a.__file__)")
    assert where.startswith(str(site)), f"the venv imports {where}, not the site's wheel"

    kernels = tmp_path / "jupyter" / "kernels" / "reader"
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(json.dumps({
        "argv": [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "reader", "language": "python"}))
    nb = nbformat.read(notebook, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(
        "import attention_course\nprint('package from', attention_course.__file__)"))
    run_in = tmp_path / "downloads"
    run_in.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("PYTHONPATH", raising=False)
        patch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
        patch.setenv("MPLBACKEND", "Agg")
        NotebookClient(nb, kernel_name="reader", timeout=600,
                       resources={"metadata": {"path": str(run_in)}}).execute()
    printed = "".join(o.get("text", "") for o in nb.cells[-1].outputs)
    assert f"package from {site}" in printed
