"""The rendered book as a reader sees it: every HTML page opened in headless Chromium.

The book is built once per test session, strictly (``-W -n``, as in
``test_notebooks.py``), served from a local HTTP server on 127.0.0.1 and opened
page by page in Chromium, driven by Playwright's Python package. Playwright
never downloads a browser here: it launches the system's Chromium (Debian's
``chromium`` package, ``/usr/bin/chromium``; set ``CAPASSIGN_CHROMIUM`` to use
another binary). Without a Chromium the whole module is skipped, and says so.

For every page of the build:

* no JavaScript error: no uncaught exception, no ``console.error``, no failed
  request and no HTTP error for anything the page loads;
* the mathematics is typeset by MathJax: every math element of the page holds a
  rendered ``mjx-container``, MathJax reports no TeX error, and no raw TeX
  (``$$``, ``$...$``, ``\\(``, ``\\[``, ``\\begin{``) is left in the visible text;
* every ``<img>`` has loaded with a non-zero natural size, and a chapter shows
  as many figures as its executed notebook stores;
* every link inside the book leads to a page that exists (HTTP 200) and, when it
  names a ``#fragment``, to an element with that id.

The book carries its own MathJax 3 (``_static/mathjax/``, copied into the build
by ``book/_ext/local_mathjax.py``), so every request to a host other than the
local server is refused and reported: the pages are checked as an offline
reader sees them. One page with math is also opened from ``file://``, with
every request outside the build folder refused (``test_math_offline_from_file``).

A screenshot of ``SCREENSHOT_PAGE`` is saved to ``<build>/html/_screenshots/``
(``pytest --basetemp=DIR`` keeps it at a known place).
"""

import functools
import http.server
import os
import re
import shutil
import threading
import urllib.error
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urldefrag, urljoin, urlsplit
from urllib.request import url2pathname

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

# The page whose screenshot is saved: the main results page of the book. Change
# it here when the results chapter exists.
SCREENSHOT_PAGE = "book/executed/exp_imagenet_mmlu.html"

CHROMIUM = os.environ.get("CAPASSIGN_CHROMIUM") or shutil.which("chromium")

# Playwright adds --headless and a fresh, empty temporary --user-data-dir
# itself. Without the background-networking switches Chromium tries to reach
# outside hosts on its own, which fails offline and is not the book's doing.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 900}
TIMEOUT_MS = 30_000

# A page full of equations, opened from file:// by test_math_offline_from_file.
MATH_PAGE = "book/executed/theory_shadow_prices.html"

pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="Chromium is not installed: `apt-get install chromium` (Debian/Ubuntu), "
           "or set CAPASSIGN_CHROMIUM to a Chromium binary")


def _toc_pages():
    """HTML pages the build must contain: every file of _toc.yml plus Sphinx's own pages."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    files = []

    def walk(node):
        if isinstance(node, dict):
            for key in ("root", "file"):
                if isinstance(node.get(key), str):
                    files.append(node[key])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(toc)
    pages = list(dict.fromkeys(f"{Path(f).with_suffix('')}.html" for f in files))
    return pages + ["index.html", "genindex.html", "search.html"]


PAGES = _toc_pages()


# --------------------------------------------------------------------------- fixtures

class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass


@pytest.fixture(scope="session")
def site(book_html):
    """The build served over HTTP on 127.0.0.1 (an ephemeral port); yields its base URL."""
    handler = functools.partial(_QuietHandler, directory=str(book_html))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


class _Visit:
    """One page opened in a fresh browser context, with everything that went wrong on the way."""

    def __init__(self, browser, site):
        self.site = site
        self.problems = []
        # a fresh context per page: empty storage and cache, as on a reader's first visit
        self.context = browser.new_context(viewport=VIEWPORT, service_workers="block")
        self.context.set_default_timeout(TIMEOUT_MS)
        self.context.route("**/*", self._route)
        self.page = self.context.new_page()
        self.page.on("pageerror", lambda exc: self.problems.append(f"uncaught JavaScript error: {exc}"))
        self.page.on("console", self._console)
        self.page.on("requestfailed", lambda req: self.problems.append(
            f"request failed: {req.url} ({req.failure})"))
        self.page.on("response", lambda resp: resp.status >= 400 and self.problems.append(
            f"HTTP {resp.status} for {resp.url}"))

    def _route(self, route):
        url = route.request.url
        if url.startswith(self.site):
            if url.startswith("file:"):  # no HTTP status from file://: check the file exists
                path = Path(url2pathname(urlsplit(url).path))
                if not path.is_file():
                    self.problems.append(f"missing file: {url}")
                    return route.abort("failed")
            return route.continue_()
        self.problems.append(f"request outside the book: {url}")
        return route.abort()

    def _console(self, msg):
        if msg.type != "error":
            return
        where = (msg.location or {}).get("url", "")
        # The browser asks every host for /favicon.ico by itself; the book
        # declares no icon, so that miss is not an error of the page.
        if where == self.site + "favicon.ico":
            return
        self.problems.append(f"console error: {msg.text} (at {where})")

    def close(self):
        self.context.close()


@pytest.fixture
def visit(browser, site):
    """Opens a page of the build; ``base`` (default: the HTTP server) may be the build's file:// URL."""
    visits = []

    def open_page(path, base=site):
        v = _Visit(browser, base)
        visits.append(v)
        v.response = v.page.goto(base + path, wait_until="load")
        return v

    yield open_page
    for v in visits:
        v.close()


# --------------------------------------------------------------------------- page checks

# Waits for MathJax when the page has math, then reports what is left untypeset
# and every formula MathJax could not read: an <merror> node (a TeX syntax
# error), or the red <mtext> that MathJax's "noundefined" extension puts in
# place of an unknown macro.
MATH_JS = """
async () => {
  const math = Array.from(document.querySelectorAll('.math'));
  if (math.length === 0) return {math: 0};
  const t0 = Date.now();
  while (!(window.MathJax && window.MathJax.startup && window.MathJax.startup.promise)) {
    if (Date.now() - t0 > 20000) return {math: math.length, error: 'MathJax never started'};
    await new Promise(r => setTimeout(r, 50));
  }
  await window.MathJax.startup.promise;
  const texErrors = [];
  for (const item of window.MathJax.startup.document.math) {
    let why = null;
    item.root.walkTree(node => {
      if (why) return;
      if (node.isKind('merror')) {
        why = node.attributes.get('data-mjx-error') || 'TeX error';
      } else if (node.isKind('mtext') && node.attributes.get('mathcolor') === 'red') {
        why = 'undefined macro ' + node.childNodes.map(c => c.getText ? c.getText() : '').join('');
      }
    });
    if (why) texErrors.push(why + ' in: ' + String(item.math).trim().slice(0, 80));
  }
  return {
    math: math.length,
    containers: document.querySelectorAll('mjx-container').length,
    untypeset: math.filter(el => !el.querySelector('mjx-container'))
                   .map(el => el.textContent.trim().slice(0, 80)),
    texErrors: texErrors.concat(Array.from(document.querySelectorAll('mjx-merror'),
                                           el => el.getAttribute('data-mjx-error') || 'merror')),
  };
}
"""

# Visible text outside code, scripts and typeset math.
TEXT_JS = """
() => {
  const skip = 'script, style, noscript, template, pre, code, textarea, mjx-container, .highlight';
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const parts = [];
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (!n.parentElement.closest(skip)) parts.push(n.nodeValue);
  }
  return parts.join(' ');
}
"""

# TeX a reader must never see: $$, \\( \\) \\[ \\], \\begin{, or an inline $...$.
RAW_TEX = re.compile(r"\$\$|\\[()\[\]]|\\begin\{|\$[^$\s][^$]*\$")

# Every image forced to load (lazy ones too), then its natural size.
IMAGES_JS = """
async () => {
  const imgs = Array.from(document.images);
  imgs.forEach(img => { img.loading = 'eager'; });
  await Promise.all(imgs.map(img => img.decode().catch(() => null)));
  return imgs.map(img => ({
    src: img.currentSrc || img.src, width: img.naturalWidth, height: img.naturalHeight,
    output: !!img.closest('.cell_output'),
  }));
}
"""


class _Ids(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids = set()

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if value and (name == "id" or (tag == "a" and name == "name")):
                self.ids.add(value)


@functools.lru_cache(maxsize=None)
def _fetch(url):
    """(HTTP status, ids of the elements of the document) of a page of the local server."""
    try:
        with urllib.request.urlopen(url, timeout=30) as resp:
            status, body = resp.status, resp.read()
            is_html = resp.headers.get_content_type() == "text/html"
    except urllib.error.HTTPError as err:
        return err.code, frozenset()
    ids = set()
    if is_html:
        parser = _Ids()
        parser.feed(body.decode("utf-8", errors="replace"))
        ids = parser.ids
    return status, frozenset(ids)


def _figure_outputs(page):
    """Number of figures a chapter's executed notebook stores, or None for other pages."""
    if not page.startswith("book/executed/"):
        return None
    import nbformat
    nb = nbformat.read(ROOT / Path(page).with_suffix(".ipynb"), as_version=4)
    return sum(1 for cell in nb.cells if cell.cell_type == "code"
               for out in cell.get("outputs", [])
               if any(k.startswith("image/") for k in out.get("data", {})))


# --------------------------------------------------------------------------- tests

def test_every_built_page_is_checked(book_html):
    built = sorted(p.relative_to(book_html).as_posix() for p in book_html.rglob("*.html")
                   if not p.relative_to(book_html).parts[0].startswith("_"))
    assert sorted(PAGES) == built, "pages in the build and pages this test opens differ"


@pytest.mark.parametrize("page", PAGES)
def test_page_as_a_reader_sees_it(page, visit, site, book_html):
    v = visit(page)
    assert v.response is not None and v.response.status == 200, f"{page}: {v.response}"
    html = (book_html / page).read_text(encoding="utf-8")
    refresh = re.search(r'http-equiv="Refresh" content="0; url=([^"]+)"', html)
    if refresh:  # index.html only forwards the reader to the front page
        target = urldefrag(urljoin(site + page, refresh[1])).url
        v.page.wait_for_url(target)
        v.page.wait_for_load_state("load")
        assert _fetch(target)[0] == 200, f"{page} forwards to a missing page {target}"
        assert not v.problems, f"{page} -> {target}:\n" + "\n".join(v.problems)
        return

    problems = v.problems  # filled by the event handlers while the checks below run

    math = v.page.evaluate(MATH_JS)
    if math.get("error"):
        problems.append(math["error"])
    elif math["math"]:
        if math["untypeset"]:
            problems.append(f"{len(math['untypeset'])} of {math['math']} math elements not typeset, "
                            f"e.g. {math['untypeset'][:3]}")
        if math["texErrors"]:
            problems.append(f"MathJax could not read {len(math['texErrors'])} formulas, "
                            f"e.g. {math['texErrors'][:3]}")
    text = " ".join(v.page.evaluate(TEXT_JS).split())
    raw = RAW_TEX.search(text)
    if raw:
        problems.append(f"raw TeX {raw[0][:20]!r} in the visible text: "
                        f"...{text[max(0, raw.start() - 60):raw.end() + 60]!r}...")

    images = v.page.evaluate(IMAGES_JS)
    for img in images:
        if not (img["width"] > 0 and img["height"] > 0):
            problems.append(f"image not loaded: {img['src']} ({img['width']}x{img['height']})")
    figures = _figure_outputs(page)
    if figures is not None:
        shown = sum(img["output"] for img in images)
        if shown != figures:
            problems.append(f"the notebook stores {figures} figures, the page shows {shown}")

    hrefs = v.page.evaluate("() => Array.from(document.querySelectorAll('a[href]'), a => a.href)")
    internal = sorted({h for h in hrefs if h.startswith(site)})
    assert internal, f"{page} has no link into the book (the navigation did not render)"
    for href in internal:
        url, fragment = urldefrag(href)
        status, ids = _fetch(url)
        if status != 200:
            problems.append(f"broken link: {href} (HTTP {status})")
        elif fragment and unquote(fragment) not in ids:
            problems.append(f"broken link: {href} (no element with id {unquote(fragment)!r})")

    v.page.wait_for_timeout(200)  # let late console messages arrive
    assert not problems, f"{page}:\n" + "\n".join(problems)


def test_math_pages_really_have_math(visit):
    """Guards the math check itself: the first chapter (theory) is full of typeset equations."""
    v = visit(next(p for p in PAGES if p.startswith("book/executed/")))
    math = v.page.evaluate(MATH_JS)
    assert math["math"] >= 5 and math["containers"] >= math["math"], math
    # a display equation typeset by MathJax has a non-empty box
    box = v.page.locator("div.math mjx-container").first.bounding_box()
    assert box is not None and box["width"] > 20 and box["height"] > 5, box


# Sphinx's search appends its results one by one and retitles the page "Search
# Results" when it has finished; read the list only then, or a later hit is missed.
SEARCH_JS = """
async () => {
  for (let i = 0; i < 400; i++) {
    const title = document.querySelector('#search-results h2');
    if (title && title.innerText.startsWith('Search Results'))
      return Array.from(document.querySelectorAll('ul.search li a'), a => a.href);
    await new Promise(r => setTimeout(r, 50));
  }
  return [];
}
"""


def test_search_finds_a_chapter_by_its_title(visit, site, book_html):
    """The search page (Sphinx's JavaScript index) finds the first chapter from its title."""
    chapter = next(p for p in PAGES if p.startswith("book/executed/"))
    h1 = re.search(r"<h1>(.*?)<a class=\"headerlink\"", (book_html / chapter).read_text(encoding="utf-8"),
                   re.S)
    assert h1, f"no title found in {chapter}"
    words = re.findall(r"[A-Za-z]{4,}", re.sub(r"<[^>]+>", " ", h1[1]))[:3]
    v = visit("search.html?q=" + "+".join(words))
    found = [urldefrag(h).url for h in v.page.evaluate(SEARCH_JS)]
    assert site + chapter in found, f"searching {words} found {found}"
    for url in found:
        assert _fetch(url)[0] == 200, url
    assert not v.problems, "\n".join(v.problems)


def test_screenshot_of_the_main_results_page(visit, book_html):
    from PIL import Image

    v = visit(SCREENSHOT_PAGE)
    math = v.page.evaluate(MATH_JS)
    assert not math.get("error") and not math.get("untypeset"), math
    v.page.evaluate(IMAGES_JS)
    shots = book_html / "_screenshots"
    shots.mkdir(exist_ok=True)
    path = shots / (SCREENSHOT_PAGE.replace("/", "__").removesuffix(".html") + ".png")
    v.page.screenshot(path=str(path), full_page=True)
    print(f"\nscreenshot: {path}")
    with Image.open(path) as img:
        assert img.width == VIEWPORT["width"] and img.height >= VIEWPORT["height"], img.size
        # a rendered page, not a blank one: many distinct colours (text, figures, theme)
        colours = img.convert("RGB").getcolors(maxcolors=1 << 20)
        assert colours is None or len(colours) > 50, f"{path} looks blank ({len(colours)} colours)"
    assert not v.problems, "\n".join(v.problems)


# MathJax's web fonts (families MJXZERO, MJXTEX, MJXTEX-I, ...) once the page's fonts settled.
FONTS_JS = """
async () => {
  await document.fonts.ready;
  return Array.from(document.fonts)
    .filter(f => f.family.replace(/["']/g, '').startsWith('MJX'))
    .map(f => ({family: f.family, status: f.status}));
}
"""


def test_math_offline_from_file(visit, book_html):
    """A page opened from file:// with every request outside the build folder refused
    typesets all its math with the MathJax the build carries: no raw TeX, no error."""
    base = book_html.resolve().as_uri() + "/"
    v = visit(MATH_PAGE, base=base)
    scripts = v.page.evaluate("() => Array.from(document.scripts, s => s.src).filter(s => /mathjax/i.test(s))")
    assert scripts == [base + "_static/mathjax/tex-chtml.js"], scripts

    math = v.page.evaluate(MATH_JS)
    assert not math.get("error"), math
    assert math["math"] >= 5 and math["containers"] >= math["math"], math
    assert not math["untypeset"] and not math["texErrors"], math
    box = v.page.locator("div.math mjx-container").first.bounding_box()
    assert box is not None and box["width"] > 20 and box["height"] > 5, box

    text = " ".join(v.page.evaluate(TEXT_JS).split())
    raw = RAW_TEX.search(text)
    assert raw is None, (
        f"raw TeX in the visible text: ...{text[max(0, raw.start() - 60):raw.end() + 60]!r}...")

    # the glyphs come from MathJax's own fonts, loaded from the build folder
    fonts = v.page.evaluate(FONTS_JS)
    used = [f for f in fonts if f["status"] != "unloaded"]
    assert used and all(f["status"] == "loaded" for f in used), fonts

    v.page.wait_for_timeout(200)  # let late console messages arrive
    assert not v.problems, "\n".join(v.problems)
