"""Fixes to the rendered pages that the theme's own options do not reach.

- thebe is off (``launch_buttons.thebe: false``), yet sphinx-thebe, which Jupyter Book
  always loads, adds its configuration script twice to every page: a page error
  ("Identifier 'THEBE_JS_URL' has already been declared"). Its scripts are dropped.
- pydata-sphinx-theme reads ``html_context["default_mode"]``; left empty, every page logs
  "Got invalid theme mode". It is set to ``auto`` (follow the reader's system).
- sphinxcontrib-bibtex's citations carry the deprecated ARIA role ``doc-biblioentry``
  inside a ``role="list"``, which screen readers cannot read as a list: they become
  list items.
- Every page links to the same page in the other language's edition (the Chinese one
  lives in ``zh_CN/`` under the English site), unless ``language_switch`` is off (an
  edition that has no twin, like the instructor's).
- ``a11y.js`` names what the theme and the widget manager leave nameless (the search
  button, the sidebar's expand toggles, slider handles, live widget figures);
  ``layout.css`` keeps printed output and inline code inside the page on any screen and
  makes figures readable in the dark theme.
- sphinx-external-toc inserts the table of contents (a transform of priority 100) after
  Sphinx has translated the page (priority 20), so the part captions of the sidebar
  ("Part I: ...") stayed English in a translated edition although the root page's
  catalog holds them: :class:`TranslateCaptions` translates them from that catalog.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.locale import init as init_locale
from sphinx.transforms import SphinxTransform
from sphinx.util.i18n import docname_to_domain

HERE = Path(__file__).resolve().parent


def _config(app: Sphinx, config: Config) -> None:
    config.html_context = {**config.html_context, "default_mode": "auto"}
    config.html_static_path = [*config.html_static_path, str(HERE / "static")]


class TranslateCaptions(SphinxTransform):
    """The captions of the toctrees that sphinx-external-toc inserted, translated from
    the page's catalog (when the edition has a language and the page a catalog)."""

    default_priority = 101  # after sphinx_external_toc.events.InsertToctrees

    def apply(self, **kwargs: Any) -> None:
        if not self.config.language or self.config.language == "en":
            return
        dirs = [str(Path(self.env.srcdir) / d) for d in self.config.locale_dirs]
        domain = docname_to_domain(self.env.docname, self.config.gettext_compact)
        catalog, found = init_locale(dirs, self.config.language, domain)
        if not found:
            return
        for toctree in self.document.findall(addnodes.toctree):
            caption = toctree.get("caption")
            if caption:
                toctree["caption"] = catalog.gettext(caption)


def _page(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any],
          doctree: Any) -> None:
    scripts = context.get("script_files", [])
    context["script_files"] = [
        s for s in scripts
        if "sphinx-thebe" not in str(getattr(s, "filename", s) or "")
        and "THEBE_JS_URL" not in str(getattr(s, "attributes", {}).get("body", ""))
    ]
    if "body" in context:
        context["body"] = context["body"].replace('role="doc-biblioentry"', 'role="listitem"')
        if app.config.language_switch:
            context["body"] = (_twin_link(pagename, app.config.language)
                               + context["body"])


def _twin_link(pagename: str, language: str | None) -> str:
    """A link to the same page in the other edition: the English one at the site's root,
    the Chinese one in its ``zh_CN/`` folder."""
    up = "../" * pagename.count("/")
    if language == "zh_CN":
        href, lang, text = f"{up}../{pagename}.html", "en", "English"
    else:
        href, lang, text = f"{up}zh_CN/{pagename}.html", "zh-CN", "中文版"
    return (f'<p class="language-switch"><a href="{href}" hreflang="{lang}" lang="{lang}">'
            f"{text}</a></p>")


def setup(app: Sphinx) -> dict:
    app.add_config_value("language_switch", True, "html")
    app.connect("config-inited", _config)
    app.connect("html-page-context", _page)
    app.add_transform(TranslateCaptions)
    app.add_js_file("a11y.js", defer="defer")
    app.add_css_file("layout.css")
    return {"parallel_read_safe": True, "parallel_write_safe": True}
