"""Open the built book in headless Chromium with every off-machine request blocked.

Checks, on every page: typeset maths (MathJax output present, no raw TeX delimiters left
in the text), every image loaded and described (alt text that is neither empty nor a
file name), saved widgets rendered, no failed local request, no page error and no
console error at all, no critical or serious accessibility violation found by axe-core
(from npm at set-up, run offline), no code block or output that scrolls sideways at
1280 px, and no page wider than a 390 px phone screen.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest

try:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
except ImportError:  # the tests skip themselves without playwright
    PlaywrightTimeout = TimeoutError

pytestmark = [pytest.mark.slow, pytest.mark.browser]

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
AXE = ROOT / ".web" / "node_modules" / "axe-core" / "axe.min.js"
SERIOUS = ("critical", "serious")
LOCAL_HOSTS = {"127.0.0.1", "localhost"}
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _browser_or_skip():
    reason = None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright, reason = None, "playwright is not installed"
    if reason is None and not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        reason = f"headless Chromium not found at {CHROMIUM} (make setup installs it as root)"
    if reason is not None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"browser test cannot run under CI: {reason}")
        pytest.skip(reason)
    return sync_playwright


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture(scope="module")
def site(built_book: Path) -> Iterator[str]:
    handler = functools.partial(QuietHandler, directory=str(built_book))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def book_pages(built_book: Path) -> list[str]:
    """Every content page of the built site, relative to its root."""
    pages = []
    for html in sorted(built_book.rglob("*.html")):
        rel = html.relative_to(built_book).as_posix()
        parts = html.relative_to(built_book).parts
        if {"_static", "_sources", "_downloads", "_images"} & set(parts):
            continue  # in either edition: the Chinese one lives in zh_CN/
        if parts[-1] in {"genindex.html", "search.html"} or rel in {
                "index.html", "zh_CN/index.html"}:
            continue
        pages.append(rel)
    return pages


@pytest.fixture(scope="module")
def browser(site: str):
    sync_playwright = _browser_or_skip()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            browser.close()


def _open(browser, url: str, width: int):
    """A page at ``url`` in a window ``width`` px wide, off-machine requests blocked."""
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    seen = {"blocked": [], "failed": [], "errors": []}

    def route(route) -> None:
        host = urlparse(route.request.url).hostname
        if route.request.url.startswith(("data:", "blob:")) or host in LOCAL_HOSTS:
            route.continue_()
        else:
            seen["blocked"].append(route.request.url)
            route.abort()

    page.route("**/*", route)
    page.on("console", lambda m: seen["errors"].append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: seen["errors"].append(f"uncaught: {e}"))
    page.on("response", lambda r: seen["failed"].append(f"{r.status} {r.url}")
            if r.status >= 400 else None)
    page.on("requestfailed", lambda r: seen["failed"].append(f"failed {r.url}"))
    page.goto(url, wait_until="load")
    try:  # a loaded machine may keep a page busy for long; what matters is checked after
        page.wait_for_load_state("networkidle", timeout=15_000)
    except PlaywrightTimeout:
        pass
    return context, page, seen


def visit(browser, url: str, axe: str | None) -> dict:
    """Load ``url``; return what the page showed at 1280 px and how wide it is at 390 px."""
    context, page, seen = _open(browser, url, 1280)
    has_math = page.locator(".math").count() > 0
    if has_math:
        page.wait_for_function(
            "() => document.querySelectorAll('mjx-container').length > 0", timeout=20_000
        )
    has_widgets = page.locator('script[type="application/vnd.jupyter.widget-state+json"]').count()
    if has_widgets:
        page.wait_for_selector(".jupyter-widgets", timeout=20_000)
    page.wait_for_timeout(500)
    result = page.evaluate(
        """() => {
            const main = document.querySelector('main') || document.body;
            const images = Array.from(document.images).map(img => ({
                src: img.currentSrc || img.src, ok: img.complete && img.naturalWidth > 0,
                alt: img.getAttribute('alt')}));
            const wide = Array.from(document.querySelectorAll('main pre'))
                .filter(p => p.offsetParent !== null && p.scrollWidth > p.clientWidth + 1)
                .map(p => p.textContent.split('\\n').reduce(
                    (a, l) => l.length > a.length ? l : a, '').trim().slice(0, 90));
            return {
                text: main.innerText,
                mathjax: document.querySelectorAll('mjx-container').length,
                images, wide,
                widgets: document.querySelectorAll('.jupyter-widgets').length,
                sliders: document.querySelectorAll('.widget-slider').length,
            };
        }"""
    )
    violations = []
    if axe is not None:
        page.add_script_tag(content=axe)
        violations = page.evaluate(
            """async () => {
                const r = await axe.run(document, {preload: false, resultTypes: ['violations']});
                return r.violations.map(v => ({id: v.id, impact: v.impact,
                    nodes: v.nodes.slice(0, 3).map(n => n.target.join(' '))}));
            }"""
        )
    # the same page on a phone: the layout follows the window (CSS media queries), so
    # narrowing it measures what a page loaded at 390 px shows, without loading it again
    page.set_viewport_size({"width": 390, "height": 900})
    page.wait_for_timeout(300)
    phone = page.evaluate("() => document.documentElement.scrollWidth")
    context.close()
    failed = [f for f in seen["failed"] if not any(b in f for b in seen["blocked"])]
    return {**result, **seen, "failed": failed, "has_math": has_math,
            "has_widgets": bool(has_widgets), "violations": violations, "phone_width": phone}


def _described(alt: str | None) -> bool:
    """Alt text that says something: not missing, not empty, not a file name."""
    return bool(alt and alt.strip()) and not re.search(r"\.(png|jpe?g|svg|gif)$|_images/", alt)


def page_problems(rel: str, seen: dict) -> list[str]:
    problems = []
    if seen["blocked"]:
        problems.append(f"{rel}: requests off the machine: {seen['blocked'][:3]}")
    if seen["failed"]:
        problems.append(f"{rel}: failed requests: {seen['failed'][:3]}")
    if seen["errors"]:
        problems.append(f"{rel}: page or console errors: {seen['errors'][:3]}")
    broken = [img["src"][:80] for img in seen["images"] if not img["ok"]]
    if broken:
        problems.append(f"{rel}: images not loaded: {broken[:3]}")
    mute = [img["src"][-60:] + f" (alt {img['alt']!r})" for img in seen["images"]
            if not _described(img["alt"])]
    if mute:
        problems.append(f"{rel}: {len(mute)} images without a description: {mute[:2]}")
    if seen["has_math"] and seen["mathjax"] == 0:
        problems.append(f"{rel}: maths present but not typeset by MathJax")
    raw = re.findall(r"\\\(|\\\[|\$\$", seen["text"])
    if raw:
        problems.append(f"{rel}: raw TeX delimiters left in the text: {raw[:3]}")
    if seen["has_widgets"] and seen["widgets"] == 0:
        problems.append(f"{rel}: saved widgets were not rendered")
    serious = [v for v in seen["violations"] if v["impact"] in SERIOUS]
    for v in serious:
        problems.append(f"{rel}: accessibility ({v['impact']}) {v['id']} at {v['nodes']}")
    if seen["wide"]:
        problems.append(f"{rel}: {len(seen['wide'])} code blocks scroll sideways at 1280 px, "
                        f"e.g. {seen['wide'][:2]}")
    if seen["phone_width"] > 390:
        problems.append(f"{rel}: the page is {seen['phone_width']} px wide on a 390 px phone")
    return problems


@pytest.fixture(scope="module")
def axe() -> str | None:
    if not AXE.is_file():
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"axe-core is missing ({AXE}): make setup fetches it with npm")
        return None
    return AXE.read_text(encoding="utf-8")


def test_every_page_renders_offline_and_accessibly(built_book: Path, site: str, browser,
                                                   axe) -> None:
    pages = book_pages(built_book)
    assert "book/intro.html" in pages and "book/01_attention_pooling.html" in pages
    problems: list[str] = []
    for rel in pages:
        problems += page_problems(rel, visit(browser, f"{site}/{rel}", axe))
    assert not problems, "\n".join(problems)


def test_chapter_one_shows_maths_figures_and_a_widget(built_book: Path, site: str, browser) -> None:
    seen = visit(browser, f"{site}/book/01_attention_pooling.html", None)
    assert seen["mathjax"] >= 5, f"expected typeset maths, found {seen['mathjax']} MathJax nodes"
    assert len(seen["images"]) >= 3, "chapter 1 should show its figures"
    assert seen["sliders"] >= 1, "chapter 1's bandwidth slider should render"


def test_checks_catch_what_they_look_for() -> None:
    """The page checks report each kind of problem (a check that never fires is useless)."""
    clean = {"blocked": [], "failed": [], "errors": [], "images": [], "text": "",
             "has_math": False, "mathjax": 0, "has_widgets": False, "widgets": 0,
             "violations": [], "wide": [], "phone_width": 390}
    assert page_problems("p", clean) == []
    for change, words in [
        ({"errors": ["uncaught: boom"]}, "page or console errors"),
        ({"images": [{"src": "a.png", "ok": True, "alt": "../_images/abc.png"}]}, "without a"),
        ({"violations": [{"impact": "serious", "id": "image-alt", "nodes": ["img"]}]},
         "accessibility (serious) image-alt"),
        ({"wide": ["x" * 90]}, "scroll sideways"),
        ({"phone_width": 600}, "600 px wide"),
        ({"text": "raw $$x$$"}, "raw TeX"),
    ]:
        assert any(words in p for p in page_problems("p", {**clean, **change})), words
    moderate = {"violations": [{"impact": "moderate", "id": "region", "nodes": ["div"]}]}
    assert page_problems("p", {**clean, **moderate}) == []
