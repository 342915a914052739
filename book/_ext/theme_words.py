"""The words of Sphinx and of the theme in a translated edition, where their own
catalogs have none.

Sphinx's zh_CN catalog leaves "Link to this heading" (the title of every heading's
permalink) and its kin untranslated, the PyData theme's leaves "Color mode" and "System
Settings"; the book theme writes some words into its templates in English ("Toggle
primary sidebar", the ``aria-label`` of its navigation), and Jupyter Book passes the
search box's "Search this book..." as a theme option. In a translated edition

- :data:`WORDS` joins the gettext catalog that the templates and Sphinx translate with
  (as a fallback, after Sphinx's and the themes' own catalogs);
- the search box's text and the book's author are given in the edition's language;
- :data:`TEMPLATE_WORDS`, written into the templates (or worded in another usage by the
  theme's catalog), are replaced in the pages written.

The toggles of folded code are another extension's (``page_fixes``).
"""

from __future__ import annotations

import gettext
import io
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.config import Config

# what gettext has no translation for, by language
WORDS = {
    "zh_CN": {
        "Link to this heading": "链接到此标题",
        "Link to this term": "链接到此术语",
        "Link to this image": "链接到此图片",
        "Link to this definition": "链接到此定义",
        "Link to this equation": "链接到此公式",
        "Link to this table": "链接到此表格",
        "Link to this code": "链接到此代码",
        "Link to this toctree": "链接到此目录树",
        "Color mode": "颜色模式",
        "System Settings": "跟随系统设置",
        "Search this book...": "搜索本书……",
        "The attention-course authors": "attention-course 课程作者",
    },
}

# attributes the theme's templates write in English, as they appear in a page
TEMPLATE_WORDS = {
    "zh_CN": {
        'title="Toggle primary sidebar"': 'title="切换左侧边栏"',
        'title="Toggle secondary sidebar"': 'title="切换右侧边栏"',
        'aria-label="Toggle primary sidebar"': 'aria-label="切换左侧边栏"',
        'aria-label="Toggle secondary sidebar"': 'aria-label="切换右侧边栏"',
        'aria-label="Main"': 'aria-label="主导航"',
        'aria-label="Page"': 'aria-label="页面导航"',
        # the book theme's own catalog words "Print to PDF" as Taiwan does
        "列印成 PDF": "打印为 PDF",
    },
}


def _config(app: Sphinx, config: Config) -> None:
    words = WORDS.get(config.language or "", {})
    if not words:
        return
    options = dict(config.html_theme_options or {})
    text = options.get("search_bar_text")
    if text in words:
        options["search_bar_text"] = words[text]
        config.html_theme_options = options
    if config.author in words:
        config.author = words[config.author]


def catalog(language: str) -> gettext.GNUTranslations | None:
    """:data:`WORDS` of ``language`` as a gettext catalog (``None``: none)."""
    from attention_course.i18n import compile_mo

    words = WORDS.get(language)
    return gettext.GNUTranslations(io.BytesIO(compile_mo(words))) if words else None


def _builder(app: Sphinx) -> None:
    extra = catalog(app.config.language or "")
    if extra is not None:
        app.translator.add_fallback(extra)


def _pages(app: Sphinx, exception: Exception | None) -> None:
    words = TEMPLATE_WORDS.get(app.config.language or "", {})
    if exception is not None or not words or app.builder.format != "html":
        return
    for page in Path(app.outdir).rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        new = text
        for english, translated in words.items():
            new = new.replace(english, translated)
        if new != text:
            page.write_text(new, encoding="utf-8")


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("config-inited", _config)
    app.connect("builder-inited", _builder)
    app.connect("build-finished", _pages)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
