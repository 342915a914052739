"""The Chinese edition: complete catalogs, translations that keep their markup, and a
built edition whose pages link to their English twins and back."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import i18n  # noqa: E402


def test_every_message_of_the_book_is_translated() -> None:
    found = i18n.problems(i18n.extract())
    assert not found, (
        "the Chinese catalogs are behind the English text:\n  " + "\n  ".join(found)
        + "\nrun 'python scripts/i18n.py update', translate the empty and fuzzy entries "
        "in locales/zh_CN/LC_MESSAGES/ (the page is the file's name), remove their "
        "fuzzy flags, and run 'python scripts/i18n.py check'"
    )


def test_translations_keep_their_markup() -> None:
    found = i18n.lint(sorted(i18n.CATALOGS.rglob("*.po")))
    assert not found, "\n".join(found)


# where this course chose another term than d2l-zh (the Chinese edition of Dive into Deep
# Learning), the glossary gives d2l-zh's too, so that its readers recognise the idea
_D2L_TERMS = {"Context vector 上下文向量": "上下文变量", "Teacher forcing 教师强制": "强制教学",
              "Greedy decoding 贪心解码": "贪心搜索", "Layer normalization 层归一化": "层规范化",
              "Position-wise feed-forward network 逐位置前馈网络": "基于位置的前馈网络"}


def test_the_glossary_gives_d2l_zh_s_term_where_the_course_chose_another() -> None:
    from babel.messages.pofile import read_po

    entries = re.findall(r"^(\S.*)\n((?:  .*\n?)+)",
                         (ROOT / "book" / "glossary.md").read_text(encoding="utf-8"), re.M)
    text = {term: " ".join(body.split()) for term, body in entries}
    with open(i18n.CATALOGS / "book" / "glossary.po", "rb") as f:
        chinese = {m.id: m.string for m in read_po(f) if m.id}
    for term, theirs in _D2L_TERMS.items():
        assert f"d2l-zh: {theirs}." in text.get(term, ""), term
        assert f"d2l-zh 称之为：{theirs}。" in chinese.get(text[term], ""), term


def test_lint_catches_a_lost_role_and_changed_maths() -> None:
    english = "See {cite:p}`vaswani2017` and $\\sqrt{d}$, in `q @ k`."
    assert i18n.markup(english) == i18n.markup(
        "见 {cite:p}`vaswani2017` 与 $\\sqrt{d}$，即 `q @ k`。")
    assert i18n.markup(english) != i18n.markup("见 vaswani2017 与 $\\sqrt{d}$，即 `q @ k`。")
    assert i18n.markup(english) != i18n.markup(
        "见 {cite:p}`vaswani2017` 与 $\\sqrt{D}$，即 `q @ k`。")
    # a role's visible text may be translated, its target may not
    assert i18n.markup("{term}`heads <Head 注意力头>`") == i18n.markup(
        "{term}`注意力头 <Head 注意力头>`")
    assert i18n.markup("{term}`heads <Head 注意力头>`") != i18n.markup(
        "{term}`注意力头 <Query 查询>`")
    # a verdict in words is glued as key_zh for the translation, in the place of key
    verdict = "this run gives {glue:text}`verdict` here"
    page = "{glue:text}`08_positions.ipynb::"
    assert i18n.markup(verdict) == i18n.markup(f"本次为 {page}verdict_zh:s`")
    assert i18n.markup(verdict) != i18n.markup(f"本次为 {page}other_zh:s`")


def _lint(tmp_path: Path, name: str, translations: dict[str, str]) -> list[str]:
    """What ``i18n.lint`` finds in a catalog ``name.po`` of these translations."""
    from babel.messages.catalog import Catalog
    from babel.messages.pofile import write_po

    catalog = Catalog(locale="zh_CN")
    for english, chinese in translations.items():
        catalog.add(english, chinese)
    path = tmp_path / f"{name}.po"
    with open(path, "wb") as f:
        write_po(f, catalog)
    return i18n.lint([path])


def test_a_glue_role_in_a_translation_must_name_its_page(tmp_path: Path) -> None:
    found = _lint(tmp_path, "03_masks", {
        "Accuracy {glue:text}`acc:.1%`.": "准确率 {glue:text}`acc:.1%`。",
        "Loss {glue:text}`loss:.2f`.": "损失 {glue:text}`03_masks.ipynb::loss:.2f`。"})
    assert len(found) == 1 and "must name its page" in found[0] and "Accuracy" in found[0]


def test_a_glue_role_that_names_its_page_carries_a_format(tmp_path: Path) -> None:
    """MyST-NB splits a {glue:text} role at its last colon: ``page.ipynb::key`` alone
    would look up the key ``page.ipynb:`` (a warning, so the -W build fails)."""
    found = _lint(tmp_path, "03_masks", {
        "Yes: {glue:text}`higher`.": "是：{glue:text}`03_masks.ipynb::higher`。",
        "So {glue:text}`word`.": "所以 {glue:text}`03_masks.ipynb::word:s`。"})
    assert len(found) == 1 and "needs a format" in found[0] and "Yes" in found[0]


@pytest.mark.slow
def test_the_chinese_edition_is_built_and_pages_link_to_their_twins(
        built_book: Path) -> None:
    chinese = built_book / "zh_CN"
    pages = sorted(p.relative_to(built_book) for p in built_book.rglob("*.html")
                   if "zh_CN" not in p.parts and p.parent.name != "_static"
                   and "_sources" not in p.parts and "genindex" not in p.name
                   and p.name not in ("search.html",))
    chapters = [p for p in pages if p.parts[0] in ("book", "exercises")]
    assert len(chapters) >= 10
    for page in chapters:
        twin = chinese / page
        assert twin.is_file(), f"{page} has no Chinese twin"
        english_html = (built_book / page).read_text(encoding="utf-8")
        chinese_html = twin.read_text(encoding="utf-8")
        link = re.search(r'<p class="language-switch"><a href="([^"]+)"', english_html)
        assert link and (built_book / page.parent / link.group(1)).resolve() == twin.resolve()
        back = re.search(r'<p class="language-switch"><a href="([^"]+)"', chinese_html)
        assert back and (twin.parent / back.group(1)).resolve() == (built_book / page).resolve()
        assert 'lang="zh-CN"' in chinese_html or 'lang="zh_CN"' in chinese_html
    # the introduction's drawn figures have Chinese twins (Sphinx's figure_language_filename)
    intro_en = (built_book / "book" / "intro.html").read_text(encoding="utf-8")
    intro_zh = (chinese / "book" / "intro.html").read_text(encoding="utf-8")
    for figure in ("flashlight", "three_steps"):
        assert f"{figure}.png" in intro_en and f"{figure}.zh_CN.png" not in intro_en
        assert f"{figure}.zh_CN.png" in intro_zh
    intro = (chinese / "book" / "intro.html").read_text(encoding="utf-8")
    assert re.search(r"[\u4e00-\u9fff]{20}", intro), "the Chinese intro holds no Chinese prose"


def test_titles_and_navigation_of_the_chinese_edition_are_chinese(built_book: Path) -> None:
    """Every Chinese page's tab title, heading, sidebar entries, part captions and
    previous/next links are in Chinese: a chapter title is the catalog's translation
    (a numbered one, "4. ...", reaches the page only escaped, "4\\. ...", see lint)."""
    cjk = re.compile(r"[\u4e00-\u9fff]")
    chinese = built_book / "zh_CN"
    english_words = re.compile(r"\b(?!Transformer\b)[A-Z][a-z]+(?: [a-z]+){2,}")
    checked = 0
    for page in sorted(chinese.rglob("*.html")):
        if ("_static" in page.parts or "_sources" in page.parts
                or page.name in ("search.html", "genindex.html")):
            continue
        html = page.read_text(encoding="utf-8")
        title = re.search(r"<title>([^<]*)</title>", html)
        heading = re.search(r"<h1>([^<]*)", html)
        if title is None:  # a redirect page
            continue
        for text in [title.group(1).split("&#8212;")[0], heading and heading.group(1)]:
            if text is not None:  # Chinese, or a name kept in English ("6. Transformer")
                assert cjk.search(text) or not re.sub(r"[\d.\s]|Transformer", "", text), (
                    page, text)
        captions = re.findall(r'caption-text">([^<]*)', html)
        entries = re.findall(r'class="reference internal" href="[^"#]*">([^<]+)</a>', html)
        around = re.findall(r'prev-next-title">([^<]*)', html)
        for text in [*captions, *entries, *around]:
            assert not english_words.search(text), (page, text)
        checked += bool(captions)
    assert checked >= 20, f"only {checked} Chinese pages carry the sidebar's part captions"


def test_a_numbered_title_must_escape_its_full_stop(tmp_path: Path) -> None:
    found = _lint(tmp_path, "04_seq2seq_attention", {
        "4. Attention in encoder-decoder models": "4. 编码器-解码器模型中的注意力",
        "5. Multi-head attention": "5\\. 多头注意力"})
    assert len(found) == 1 and "escape its full stop" in found[0] and "4. Att" in found[0]


def test_words_in_maths_may_be_translated_and_the_maths_may_not(tmp_path: Path) -> None:
    r"""``\text{...}`` in a formula is translated (MathJax sets Chinese there); the maths
    around it is kept, inline or displayed, and a translation may add a Chinese string
    literal as code (a choice a learner may type) but no other code."""
    english = r"Each token costs $\text{bytes per token} = 2 \cdot L \cdot d_\text{head}$."
    assert i18n.markup(english) == i18n.markup(
        r"每个词元占 $\text{每个词元的字节数} = 2 \cdot L \cdot d_\text{head}$。")
    assert i18n.markup(english) != i18n.markup(
        r"每个词元占 $\text{每个词元的字节数} = 4 \cdot L \cdot d_\text{head}$。")
    display = "\n\\underbrace{x}_{\\text{bias of key } j:\\ b_j} + y\n"
    found = _lint(tmp_path, "01_attention_pooling", {
        display: "\n\\underbrace{x}_{\\text{键 } j \\text{ 的偏置}:\\ b_j} + y\n",
        display.replace("y", "z"): "\n\\underbrace{x}_{\\text{键 } j \\text{ 的偏置}:\\ b_j} + y\n",
        'Return `"up"` or `"down"`.': '返回 `"up"`（`"上升"`）或 `"down"`（`"下降"`）。',
        "Return `up`.": "返回 `up` 或 `down`。"})
    assert len(found) == 2, found
    assert "the formula's maths differs" in found[0] and "+ z" in found[0]
    assert "markup differs" in found[1] and "Return `up`" in found[1]


_MATHS_NAMES = {"model", "ff", "base", "head", "scaled", "explicit", "tiled", "approx",
                "rows", "target", "source", "BLEU", "NaN", "Epanechnikov"}


def test_words_in_the_chinese_formulas_are_chinese() -> None:
    r"""A formula's words (``\text{...}``) are Chinese in the Chinese edition, unless they
    name a symbol, as a subscript does ($d_\text{model}$), or are a name (BLEU, NaN)."""
    from babel.messages.pofile import read_po

    left = []
    for path in sorted(i18n.CATALOGS.rglob("*.po")):
        with open(path, "rb") as f:
            for m in read_po(f):
                for words in re.findall(r"\\text\s*\{([^{}]*)\}", str(m.string or "")):
                    if (re.search(r"[A-Za-z]{2,}", words)
                            and not re.search(r"[\u4e00-\u9fff]", words)
                            and words.strip() not in _MATHS_NAMES):
                        left.append(f"{path.name}: \\text{{{words}}}")
    assert not left, "\n".join(left)


def test_every_printed_text_has_a_translation() -> None:
    """The output catalogs are complete for the chapters' cached executions (a chapter
    without one, as before the first build, is checked once the book is built) and keep
    every number field."""
    import output_catalogs

    found = output_catalogs.problems()
    assert not found, (
        "the Chinese output catalogs are behind what the chapters print:\n  "
        + "\n  ".join(found[:40]) + "\nbuild the book, run 'python scripts/i18n.py "
        "outputs', translate the empty and fuzzy entries in locales/zh_CN/outputs/ "
        "(keep every {0}) and remove their fuzzy flags")


# what the Chinese edition may leave in English outside the text: key names, the link to
# the English edition, names kept in English, and the toggles of folded code, whose words
# page_fixes keeps (TOGGLES)
_KEPT = re.compile(r"\b(?:Ctrl|English|Transformer|attention-course|BLEU|RoPE|ALiBi|CBAM"
                   r"|pdf|ipynb|md)\b")
_NOT_THIS_EXTENSION = {"Toggle hidden content"}


def _english(text: str) -> bool:
    """Whether ``text`` holds an English word that is not one kept on purpose (nor maths:
    ``\\(\\sqrt{d}\\)``, a quiz button named by its TeX)."""
    words = re.sub(r"\\\(.*?\\\)|\\[A-Za-z]+(?:\{[^{}]*\})?", " ", _KEPT.sub("", text))
    return bool(re.search(r"[A-Za-z]{3,}", words)) and not re.search(
        r"[\u4e00-\u9fff]", text)


@pytest.mark.slow
def test_the_chinese_pages_frame_and_links_say_nothing_in_english(built_book: Path) -> None:
    """Around the text of every Chinese page (header, sidebars, footer, search box,
    buttons) and in the titles and labels of its links and controls (a heading's or a
    term's permalink, the theme's buttons), the words are Chinese: Sphinx's and the
    themes' catalogs where they have them, book/_ext/theme_words.py where they have not.
    A citation's tooltip (the reference itself) stays as it is."""
    import html as html_module

    found = []
    pages = [p for p in sorted((built_book / "zh_CN").rglob("*.html"))
             if "_static" not in p.parts and "_sources" not in p.parts]
    assert len(pages) >= 25
    for page in pages:
        html = page.read_text(encoding="utf-8")
        if "<title>" not in html:  # a redirect
            continue
        for tag in re.findall(r"<[a-z][^>]*>", html):
            if "references.html#" in tag or tag.startswith("<a") and "#id" in tag:
                continue  # a citation: its tooltip is the reference
            for attribute in ("title", "aria-label", "placeholder", "data-bs-title"):
                value = re.search(rf'\s{attribute}="([^"]*)"', tag)
                if value:
                    text = html_module.unescape(value.group(1))
                    if _english(text) and text not in _NOT_THIS_EXTENSION:
                        found.append(f"{page.name}: {attribute}={text!r}")
        frame = re.sub(r"(?s)<article.*?</article>|<script.*?</script>|<style.*?</style>"
                       r"|<!--.*?-->", " ", html)
        for text in re.findall(r">([^<>]+)<", frame):
            text = html_module.unescape(text).strip()
            if text and _english(text):
                found.append(f"{page.name}: text {text!r}")
    assert not found, "\n".join(sorted(set(found))[:40])


def test_theme_words_give_sphinx_and_the_theme_their_missing_chinese() -> None:
    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    import theme_words

    chinese = theme_words.catalog("zh_CN")
    assert chinese.gettext("Link to this heading") == "链接到此标题"
    assert chinese.gettext("Something else") == "Something else"
    assert theme_words.catalog("en") is None


def _printed(page: Path) -> list[str]:
    """The printed outputs of a built chapter page (stdout and plain-text results)."""
    import html as html_module

    html = page.read_text(encoding="utf-8")
    blocks = re.findall(r'(?s)<div class="cell_output docutils container">(.*?)</div>\s*'
                        r"</div>\s*</div>", html)
    texts = []
    for block in blocks:
        for pre in re.findall(r"(?s)<pre[^>]*>(.*?)</pre>", block):
            texts.append(html_module.unescape(re.sub(r"<[^>]+>", "", pre)))
    return texts


@pytest.mark.slow
@pytest.mark.xfail(reason="issue 26, open: some printed texts whose catalog entry exists are "
                   "not translated on the Chinese page (chapter 2, cell 15's 'params' "
                   "column), found in the clean-clone run of stop 39", strict=False)
def test_the_chinese_chapters_print_in_chinese_with_the_same_numbers(built_book: Path) -> None:
    """What the chapters print in words comes from the output catalogs in the Chinese
    edition: at most the run-dependent few of a chapter's printed texts had no
    translation (``output_catalogs.COVERED``; the build lists them), no other printed cell
    with words is left English unless its translation keeps it on purpose, and the
    numbers are the English edition's, untouched (a translation may change their
    order)."""
    import json

    import output_catalogs

    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    import output_text

    listed = ROOT / "_build" / "zh_CN" / "_build" / output_text.MISSING
    missing = json.loads(listed.read_text(encoding="utf-8"))
    shown_by_page = {}
    for page, notebook in output_catalogs.executed_chapters().items():
        # what the page shows (not a figure's or a widget's text/plain twin, which the
        # build also meets and lists)
        shown = shown_by_page[page] = (output_catalogs.page_messages(notebook)
                                       if notebook else {})
        untranslated = [m for m in missing.get(page, []) if m in shown]
        assert len(untranslated) <= (1 - output_catalogs.COVERED) * len(shown), (
            page, untranslated)
    chapters = sorted((built_book / "book").glob("[0-9][0-9]_*.html"))
    assert len(chapters) == len(list((ROOT / "book").glob("[0-9][0-9]_*.ipynb")))
    translated = 0
    for english_page in chapters:
        chinese_page = built_book / "zh_CN" / "book" / english_page.name
        english, chinese = _printed(english_page), _printed(chinese_page)
        assert len(english) == len(chinese), english_page.name
        kept = output_text.read_catalog(output_text.catalog_path(
            "zh_CN", f"book/{english_page.stem}"))
        for before, after in zip(english, chinese, strict=True):
            assert (sorted(m.group() for m in output_text.NUMBER.finditer(before))
                    == sorted(m.group() for m in output_text.NUMBER.finditer(after))), (
                english_page.name, before[:200], after[:200])
            for line in after.splitlines():
                for _start, cell in output_text.cells(line):
                    if output_text.needs_translation(cell) and not re.search(
                            r"[\u4e00-\u9fff]", cell):
                        message = output_text.template(cell)[0]
                        page = f"book/{english_page.stem}"
                        if (message in missing.get(page, [])
                                or message not in shown_by_page.get(page, {})):
                            continue  # this run's own words (counted above), or not a
                            # printed text (the page's code listings match the pattern)
                        assert kept.get(message) == message, (english_page.name, cell)
            translated += before != after
    assert translated >= 60, translated


@pytest.mark.slow
def test_the_sample_of_check_s_output_is_check_s_own_in_each_language(
        built_book: Path) -> None:
    english = (built_book / "book" / "exercises.html").read_text(encoding="utf-8")
    chinese = (built_book / "zh_CN" / "book" / "exercises.html").read_text(encoding="utf-8")
    assert "[FAIL] q1_weights (implement) <span" in english or (
        "[FAIL] q1_weights (implement)" in english)
    assert "your scores are divided by 2h" in english
    # the sample itself is all Chinese (the feedback table beside it quotes the English)
    sample = re.search(r'<div class="check-sample.*?</pre>', chinese, re.S)
    assert sample, "no sample of check's output on the Chinese exercises page"
    assert "q1_weights (实现)" in sample.group() and "用例 1（3 个查询" in sample.group()
    assert "your scores are divided by 2h" not in sample.group()
