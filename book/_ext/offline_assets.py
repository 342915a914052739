"""Serve MathJax 3 and the ipywidgets manager from the built site when they were fetched.

``make web-assets`` (part of ``make book`` and ``make test``) lays the files out in
``book/_vendor``. When they are there, the pages load them from ``_static`` and make no
request off the machine; when they are not, the book still builds and uses the CDN.
"""

from __future__ import annotations

from pathlib import Path

from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.util import logging

logger = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
VENDOR = HERE.parent / "_vendor"


def _use_local_assets(app: Sphinx, config: Config) -> None:
    if not (VENDOR / ".complete").exists():
        logger.info(
            "offline web assets not found in %s (run 'make web-assets'); "
            "pages will load MathJax and the widget manager from a CDN",
            VENDOR,
        )
        return
    config.html_static_path = [*config.html_static_path, str(VENDOR)]
    config.mathjax_path = "mathjax/tex-chtml.js"
    config.nb_ipywidgets_js = {
        "require.js": {},
        "widgets_offline.js": {},
        "html-manager/dist/embed-amd.js": {},
    }


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", _use_local_assets, priority=100)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
