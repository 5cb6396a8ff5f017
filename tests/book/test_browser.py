"""The rendered book as a reader sees it: every HTML page opened in headless Chromium.

The book is built once per test session, strictly (``-W -n``, as in
``test_notebooks.py``), served from a local HTTP server on 127.0.0.1 and opened
page by page in Chromium, driven by Playwright's Python package. Playwright
never downloads a browser here: it launches the system's Chromium (Debian's
``chromium`` package, ``/usr/bin/chromium``; set ``CAPASSIGN_CHROMIUM`` to use
another binary). Without a Chromium the whole module is skipped, and says so.

Every page of the build is opened at two window sizes, a laptop (1280x800) and
a phone (390x844), and at each:

* no JavaScript error: no uncaught exception, no ``console.error``, no failed
  request and no HTTP error for anything the page loads;
* the mathematics is typeset by MathJax: every math element of the page holds a
  rendered ``mjx-container``, MathJax reports no TeX error, and no raw TeX
  (``$$``, ``$...$``, ``\\(``, ``\\[``, ``\\begin{``) is left in the visible text;
* every ``<img>`` has loaded with a non-zero natural size, and a chapter shows
  as many figures as its executed notebook stores;
* every link inside the book leads to a page that exists (HTTP 200) and, when it
  names a ``#fragment``, to an element with that id;
* nothing is clipped: no element of the article (the text column) reaches past
  its edges unless it sits in a box that scrolls sideways by itself and that
  fits the column (code, cell outputs, tables), and the page itself never
  scrolls sideways (``test_nothing_wider_than_the_article``, one report for the
  whole book);
* a full-page screenshot is saved to ``<build>/html/_screenshots/<page>-<width>.png``
  (``test_screenshots_of_every_page``; ``pytest --basetemp=DIR`` keeps them at a
  known place).

Every image a notebook cell outputs is a numbered figure with a caption and an
alt text that describes it (``test_every_output_figure_is_captioned``, one
report for the whole book).

The book carries its own MathJax 3 (``_static/mathjax/``, copied into the build
by ``book/_ext/local_mathjax.py``), so every request to a host other than the
local server is refused and reported: the pages are checked as an offline
reader sees them. One page with math is also opened from ``file://``, with
every request outside the build folder refused (``test_math_offline_from_file``).

Each page is read once per window size (``readings``) and every test looks at
what was read.
"""

import functools
import http.server
import os
import re
import shutil
import threading
import urllib.error
import urllib.request
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urldefrag, urljoin, urlsplit
from urllib.request import url2pathname

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]

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
# The two windows every page is read in: a laptop and a phone (CSS pixels).
VIEWPORTS = {"1280": {"width": 1280, "height": 800}, "390": {"width": 390, "height": 844}}
VIEWPORT = VIEWPORTS["1280"]
# Pages are read with overlay scrollbars, as macOS and phones draw them: a box
# that scrolls sideways shows no scrollbar until it is scrolled, unless the
# page styles one (book/_static/capassign.css). Chromium draws them so in a
# mobile context (is_mobile), which lays the book out exactly as a desktop
# window of the same size does (same column width, same page height).
OVERLAY_SCROLLBARS = True
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
        # Playwright hides every scrollbar by default (--hide-scrollbars); the book is
        # read with the scrollbars a reader gets, see OVERLAY_SCROLLBARS.
        chromium = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
                                      ignore_default_args=["--hide-scrollbars"])
        try:
            yield chromium
        finally:
            chromium.close()


class _Visit:
    """One page opened in a fresh browser context, with everything that went wrong on the way."""

    def __init__(self, browser, site, viewport=VIEWPORT):
        self.site = site
        self.problems = []
        # a fresh context per page: empty storage and cache, as on a reader's first visit
        self.context = browser.new_context(viewport=viewport, service_workers="block",
                                           is_mobile=OVERLAY_SCROLLBARS)
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


# The article: the text column of a page (the search page has a container of its own).
ARTICLE = "article.bd-article, .bd-search-container"

# Everything in the article that reaches past its left or right edge (1 px of
# slack for rounding), with what a reader needs to find it. Not counted: what a
# reader cannot see (no box, visibility hidden, fixed to the window, clipped
# away like MathJax's assistive MathML for screen readers), and what sits in a
# box that scrolls sideways by itself (overflow-x auto/scroll) and fits the
# article: that box is the reader's way to the rest. Of nested offenders only
# the outermost is listed. `kind` sorts them into cell outputs, code and other.
LAYOUT_JS = """
(selector) => {
  const article = document.querySelector(selector);
  if (!article) return {error: 'no element ' + selector + ' on the page'};
  const TOL = 1;
  const a = article.getBoundingClientRect();
  const fits = r => r.left >= a.left - TOL && r.right <= a.right + TOL;
  const scrollsByItself = el => {
    const o = getComputedStyle(el).overflowX;
    return (o === 'auto' || o === 'scroll') && fits(el.getBoundingClientRect());
  };
  const clippedAway = el => {
    const cs = getComputedStyle(el);
    return (cs.clip && cs.clip !== 'auto') || (cs.clipPath && cs.clipPath !== 'none');
  };
  const offending = new Set();
  for (const el of article.querySelectorAll('*')) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0 || fits(r)) continue;
    const cs = getComputedStyle(el);
    if (cs.position === 'fixed' || cs.visibility === 'hidden') continue;
    let excused = false;
    for (let p = el; p && p !== article && !excused; p = p.parentElement) {
      excused = clippedAway(p) || (p !== el && scrollsByItself(p));
    }
    if (!excused) offending.add(el);
  }
  const kind = el => el.closest('.cell_output') ? 'output'
    : el.closest('.cell_input, div.highlight, pre') ? 'code' : 'other';
  const name = el => el.tagName.toLowerCase() + (typeof el.className === 'string' && el.className.trim()
    ? '.' + el.className.trim().split(/\\s+/).join('.') : '');
  const clipped = [];
  for (const el of offending) {
    let outer = true;
    for (let p = el.parentElement; p && p !== article; p = p.parentElement) {
      if (offending.has(p)) { outer = false; break; }
    }
    if (!outer) continue;
    const r = el.getBoundingClientRect();
    clipped.push({kind: kind(el), element: name(el),
                  text: (el.innerText || el.textContent || '').trim().replace(/\\s+/g, ' ').slice(0, 50),
                  width: Math.round(r.width), left: Math.round(r.left - a.left),
                  right: Math.round(r.right - a.right)});
  }
  // allowed, but counted for the report: boxes whose content the reader scrolls sideways to see
  const scrolling = [];
  for (const el of article.querySelectorAll('*')) {
    const o = getComputedStyle(el).overflowX;
    if ((o === 'auto' || o === 'scroll') && el.scrollWidth > el.clientWidth + 1 && !el.closest('mjx-container'))
      scrolling.push({kind: kind(el), element: name(el), box: el.clientWidth, content: el.scrollWidth});
  }
  return {article: Math.round(a.width), page: document.documentElement.scrollWidth,
          window: window.innerWidth, clipped: clipped, scrolling: scrolling};
}
"""

# Every image a notebook cell outputs, with the figure around it: its caption
# number ("Fig. N") and text, and the image's alt text; and every text output
# that is only matplotlib's repr of a figure (a figure shown twice, or not at all).
FIGURES_JS = """
() => ({
  images: Array.from(document.querySelectorAll('.cell_output img'), img => {
    const figure = img.closest('figure');
    const caption = figure && figure.querySelector('figcaption');
    const number = caption && caption.querySelector('.caption-number');
    const text = caption && caption.querySelector('.caption-text');
    return {src: img.getAttribute('src') || '', alt: img.getAttribute('alt'),
            figure: !!figure, number: number ? number.textContent.trim() : null,
            caption: text ? text.textContent.trim() : ''};
  }),
  reprs: Array.from(document.querySelectorAll('.cell_output pre'), pre => pre.textContent)
           .filter(t => /<(Figure|matplotlib\\.figure\\.Figure) size [0-9.]+x[0-9.]+/.test(t))
           .map(t => t.trim().slice(0, 60)),
})
"""

FIG_NUMBER = re.compile(r"Fig\. \d+\b")
# A file path: one word with a slash in it, or a name ending in an image suffix
# (a description may hold a slash, e.g. "falls like 1/t").
PATH_LIKE = re.compile(r"^\S*[/\\]\S*$|\.(png|jpe?g|svg|gif|webp|pdf)$", re.I)
ALT_MIN_WORDS = 3


def _figure_problems(figures):
    """What is missing from each output image of a page (an empty list when nothing is)."""
    problems = []
    for k, img in enumerate(figures["images"], start=1):
        what = []
        if not img["figure"]:
            what.append("not in a <figure>")
        elif not (img["number"] and FIG_NUMBER.match(img["number"])):
            what.append(f"no numbered caption (caption number {img['number']!r})")
        elif not img["caption"]:
            what.append("an empty caption")
        alt = (img["alt"] or "").strip()
        if not alt:
            what.append("no alt text")
        elif PATH_LIKE.search(alt):
            what.append(f"alt text is a file path ({alt[:40]!r})")
        elif len(alt.split()) < ALT_MIN_WORDS:
            what.append(f"alt text {alt!r} describes nothing")
        if what:
            problems.append(f"image {k} ({Path(img['src']).name[:16]}...): " + "; ".join(what))
    for text in figures["reprs"]:
        problems.append(f"a text output {text!r} (the figure's repr: shown twice or not at all)")
    return problems


def _shot_name(page, viewport):
    return f"{Path(page).stem}-{viewport}.png"


# --------------------------------------------------------------------------- reading checks
#
# What a reader takes in at a glance: tables that fit the text column (or show
# that they scroll), headers that read as numbers and typeset math, code lines
# that fit, figure text at reading size, pages of a sensible length, and
# experiment chapters that state their finding on the first screen. The page
# is measured by READING_JS (as first seen: folded content folded) and
# TABLES_JS (everything unfolded); the verdicts are the plain functions below,
# each tested on synthetic input (test_reading_checks_themselves and the
# test_*_check unit tests).

#: The longest code line a reader sees without scrolling (characters).
CODE_LINE_LIMIT = 88
#: Smallest figure text, in CSS pixels, in each window (the phone's: tick labels of 9 px).
FIGURE_TEXT_MIN_PX = {"1280": 10.0, "390": 9.0}
#: Device pixels of a figure per CSS pixel it is shown at, at least (SVG is vector).
FIGURE_PIXEL_RATIO_MIN = 2.0
#: The longest line of text a cell prints (characters), folded or not.
PRINTED_LINE_LIMIT = 88
#: A number printed as negative zero (-0.0000, -0.000, -0.0), which the page must not show.
NEGATIVE_ZERO = re.compile(r"(?<![\w.])[-\u2212]0\.0+(?![\d])")
#: Longest page, in screens (window heights) at 1280 px, and the pages that may be longer.
PAGE_SCREENS_MAX = 12.0
LONG_PAGES = ("scorecard", "paper_index")
#: The chapters that report an experiment: they open with an "In brief" finding.
EXPERIMENT_CHAPTER = re.compile(r"^(exp_|ext_|beyond_)|^(data_agents|data_contexts|fast_engine|router_live|router_ope)$")
#: A visible horizontal scrollbar is at least this high (CSS px).
SCROLLBAR_MIN_PX = 4
#: The PNG text key under which capbook records the smallest font of a figure (points).
FONT_KEY = "capbook:min-font-pt"
#: The PNG text key under which capbook records what the figure's legends cover.
OVERLAP_KEY = "capbook:legend-overlaps"

# The page as first seen (folded content folded): its length in screens, its
# code lines longer than the limit (code: cell inputs, code blocks of the text
# and printed source, not what a cell prints), the text of
# table headers and captions, output images with their displayed and natural
# widths, the "In brief" block, and how each titled section opens.
READING_JS = """
([selector, limit]) => {
  const article = document.querySelector(selector);
  if (!article) return null;
  const visible = el => !el.closest('details:not([open])')
    && (el.checkVisibility ? el.checkVisibility() : el.getClientRects().length > 0);
  const y = el => el.getBoundingClientRect().top + window.scrollY;
  const clean = el => (el.textContent || '').replace(/[\\u00b6#]\\s*$/, '').trim()
    .replace(/\\s+/g, ' ');
  const code = {blocks: 0, visibleBlocks: 0, long: [], scrolling: []};
  // code: cell inputs, code blocks of the text and printed source (.ca-source), not
  // the text a cell prints (its outputs are highlighted blocks too)
  for (const pre of article.querySelectorAll('.cell_input pre, div.highlight pre, .ca-source pre')) {
    if (pre.closest('.cell_output') !== null && pre.closest('.ca-source') === null) continue;
    const shown = visible(pre);
    code.blocks += 1; code.visibleBlocks += shown ? 1 : 0;
    const input = pre.closest('.cell_input') !== null;
    if (shown && pre.scrollWidth > pre.clientWidth + 1)
      code.scrolling.push({width: pre.scrollWidth, box: pre.clientWidth,
                           text: pre.textContent.trim().slice(0, 60)});
    pre.textContent.split('\\n').forEach((line, i) => {
      if (line.length > limit) code.long.push({length: line.length, visible: shown, input: input,
                                              block: code.blocks, line: i + 1,
                                              text: line.slice(0, 100)});
    });
  }
  const headers = Array.from(article.querySelectorAll('th, caption, .ca-table-caption'),
                             el => clean(el)).filter(t => t);
  const images = Array.from(article.querySelectorAll('.cell_output img'), img => ({
    src: img.getAttribute('src') || '', shown: img.getBoundingClientRect().width,
    shownHeight: img.getBoundingClientRect().height,
    natural: img.naturalWidth, naturalHeight: img.naturalHeight,
    top: y(img), visible: visible(img)}));
  // what the cells print: text blocks (folded ones too; not the library's source that
  // capbook.show_source prints, which is code, measured with the code above) and every
  // output's text
  const printed = {
    lines: Array.from(article.querySelectorAll('.cell_output pre'))
             .filter(pre => pre.closest('.ca-source') === null)
             .map(pre => pre.textContent).flatMap(t => t.split('\\n')),
    text: Array.from(article.querySelectorAll('.cell_output'), o => o.textContent).join('\\n')};
  let brief = null;
  for (const el of article.querySelectorAll('.admonition-title, h1, h2, h3, p.rubric')) {
    if (!/^In brief\\b/i.test(clean(el))) continue;
    const box = el.closest('.admonition') || el.closest('section') || el.parentElement;
    const first = Array.from(box.querySelectorAll('p, li')).find(
      p => p !== el && !p.classList.contains('admonition-title') && clean(p));
    brief = {top: y(box), firstBottom: first ? first.getBoundingClientRect().bottom + window.scrollY
                                             : null,
             glued: box.querySelectorAll('.pasted-text, .pasted-inline, .pasted-math').length,
             text: clean(first || box).slice(0, 120), all: clean(box)};
    break;
  }
  const sections = Array.from(article.querySelectorAll('section > h2'), h => {
    let next = h.nextElementSibling;
    return {title: clean(h), opensWith: next ? (next.classList.contains('cell') ? 'cell'
                                                : next.tagName.toLowerCase()) : null};
  });
  return {screens: document.documentElement.scrollHeight / window.innerHeight,
          code: code, headers: headers, images: images, brief: brief, sections: sections,
          printed: printed};
}
"""

# Every table of the article (folded ones unfolded): its width against the text
# column, and the box that scrolls it sideways, with the height of that box's
# horizontal scrollbar as drawn (0 when the scrollbar is an overlay that shows
# only while scrolling).
TABLES_JS = """
(selector) => {
  const article = document.querySelector(selector);
  if (!article) return null;
  const as = getComputedStyle(article);
  const a = article.getBoundingClientRect();
  const left = a.left + parseFloat(as.paddingLeft), right = a.right - parseFloat(as.paddingRight);
  const tables = [];
  for (const t of article.querySelectorAll('table')) {
    const r = t.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    let box = null;
    for (let p = t.parentElement; p && p !== article; p = p.parentElement) {
      const o = getComputedStyle(p).overflowX;
      if (o === 'auto' || o === 'scroll') { box = p; break; }
    }
    const entry = {width: Math.round(r.width), box: null,
                   text: (t.querySelector('th, td') || t).textContent.trim().slice(0, 40)};
    const cap = t.closest('.ca-table-box') && t.closest('.ca-table-box').querySelector(
      '.ca-table-caption');
    if (cap) entry.text = cap.textContent.trim().slice(0, 60);
    if (box) {
      const bs = getComputedStyle(box), br = box.getBoundingClientRect();
      entry.box = {fits: br.left >= left - 1 && br.right <= right + 1,
                   scrolls: box.scrollWidth > box.clientWidth + 1,
                   bar: box.offsetHeight - box.clientHeight - parseFloat(bs.borderTopWidth)
                        - parseFloat(bs.borderBottomWidth)};
    }
    tables.push(entry);
  }
  return {column: Math.round(right - left), tables: tables};
}
"""

# A number printed with six decimals (pandas' default for float labels).
SIX_DECIMALS = re.compile(r"(?<![\d.])\d+\.\d{6}(?!\d)")
# Mathematics written as plain text where it should be typeset (not a part of a
# hyphenated name: a policy such as known-mu, an item id such as S4-eta).
PLAIN_MATH = re.compile(r"(?<!-)\b(?:alpha|lambda|mu|eta|tau|theta|sigma|Delta)"
                        r"(?:_?\d|_\w+)?\b(?!-)|\bReg\^")


def _table_problems(tables):
    """Tables wider than the text column that do not scroll in a box of their own
    with a visible scrollbar (``tables``: TABLES_JS's result)."""
    problems = []
    column = tables["column"]
    for t in tables["tables"]:
        if t["width"] <= column + 1:
            continue
        box = t["box"]
        if box is None or not box["fits"]:
            why = "no box that scrolls it inside the column"
        elif not box["scrolls"]:
            why = "its box does not scroll"
        elif box["bar"] < SCROLLBAR_MIN_PX:
            why = f"its scrollbar is not visible ({box['bar']:g} px high)"
        else:
            continue
        problems.append(f"table {t['text']!r}: {t['width']} px wide in a {column} px column, {why}")
    return problems


def _header_problems(headers):
    """Header cells and captions that print a number with six decimals or plain-text math."""
    problems = []
    for text in headers:
        if SIX_DECIMALS.search(text):
            problems.append(f"six-decimal number in a header: {text[:60]!r}")
        if PLAIN_MATH.search(text):
            problems.append(f"plain-text math in a header: {text[:60]!r}")
    return problems


def _code_problems(code, *, visible_only=True, scrolling=False):
    """Code lines longer than CODE_LINE_LIMIT (``code``: READING_JS's ``code``); with
    ``visible_only`` only those a reader sees without unfolding anything; with
    ``scrolling`` also every visible code block that scrolls sideways (its lines do not
    fit the column at the width it was read in)."""
    problems = [f"code line of {c['length']} characters"
                + ("" if c["visible"] else " (folded)") + f": {c['text'][:60]!r}"
                for c in code["long"] if c["visible"] or not visible_only]
    if scrolling:
        problems += [f"code block {c['width']} px wide in a {c['box']} px box: "
                     f"{c['text'][:40]!r}" for c in code["scrolling"]]
    return problems


def _figure_text_px(font_pt, dpi, shown, natural):
    """Size on screen (CSS px) of text drawn at ``font_pt`` points in an image of ``dpi``
    dots per inch, ``natural`` pixels wide, shown ``shown`` CSS pixels wide."""
    return font_pt * dpi / 72.0 * shown / natural


def _png_font_record(path):
    """(smallest font in points, dpi) recorded in a figure's PNG by capbook, or (None, dpi)."""
    from PIL import Image

    with Image.open(path) as img:
        pt = getattr(img, "text", {}).get(FONT_KEY)
        dpi = img.info.get("dpi", (72.0, 72.0))[0]
    return (float(pt) if pt is not None else None), float(dpi)


def _png_overlap_record(path):
    """What capbook recorded that the figure's legends cover ("none": nothing), or None."""
    from PIL import Image

    with Image.open(path) as img:
        return getattr(img, "text", {}).get(OVERLAP_KEY)


def _legend_problems(images):
    """Output figures whose legend covers an axis, its label or its tick labels, from the
    bounding boxes capbook measured when it drew them (and figures with no such record)."""
    problems = []
    for img in images:
        name = Path(img["src"]).name[:16]
        if img.get("svg"):
            continue
        record = img.get("overlaps")
        if record is None:
            problems.append(f"image {name}...: no record of its legends' boxes "
                            f"(draw figures with capbook.book_figure)")
        elif record != "none":
            problems.append(f"image {name}...: {record}")
    return problems


def _pixel_ratio_problems(images):
    """Output figures with fewer than FIGURE_PIXEL_RATIO_MIN device pixels per CSS pixel
    shown (blurred on a HiDPI screen; SVG figures are vector and pass), or shown out of
    their own proportions."""
    problems = []
    for img in images:
        if img.get("svg") or img["shown"] <= 0 or img["natural"] <= 0:
            continue
        ratio = img["natural"] / img["shown"]
        if ratio < FIGURE_PIXEL_RATIO_MIN - 0.01:
            problems.append(f"image {Path(img['src']).name[:16]}...: {img['natural']} pixels "
                            f"shown {img['shown']:.0f} px wide ({ratio:.2f}x)")
        if img.get("shownHeight") and img.get("naturalHeight"):
            aspect = (img["shownHeight"] / img["shown"]) / (img["naturalHeight"] / img["natural"])
            if abs(aspect - 1) > 0.02:
                problems.append(f"image {Path(img['src']).name[:16]}...: drawn out of shape "
                                f"(height/width {aspect:.2f} times its own)")
    return problems


def _printed_problems(printed):
    """Printed output a reader stumbles on (``printed``: READING_JS's ``printed``): a line
    longer than PRINTED_LINE_LIMIT characters, or a number printed as negative zero."""
    problems = [f"printed line of {len(line)} characters: {line[:60]!r}"
                for line in printed["lines"] if len(line.rstrip()) > PRINTED_LINE_LIMIT]
    for m in NEGATIVE_ZERO.finditer(printed["text"]):
        text = printed["text"]
        problems.append(f"negative zero printed: "
                        f"{' '.join(text[max(0, m.start() - 40):m.end() + 10].split())!r}")
    return problems


def _figure_text_problems(images, viewport="1280"):
    """Output images whose smallest text is under FIGURE_TEXT_MIN_PX on screen. Each image:
    ``src``, ``shown`` and ``natural`` widths (px), ``font_pt`` (None: not recorded), ``dpi``."""
    problems = []
    for img in images:
        name = Path(img["src"]).name[:16]
        if img["natural"] <= 0 or img["shown"] <= 0:
            continue
        if img["font_pt"] is None:
            problems.append(f"image {name}...: no record of its smallest font "
                            f"(draw figures with capbook.book_figure)")
            continue
        px = _figure_text_px(img["font_pt"], img["dpi"], img["shown"], img["natural"])
        if px < FIGURE_TEXT_MIN_PX[viewport] - 0.05:
            problems.append(f"image {name}...: smallest text {px:.1f} px ({img['font_pt']:g} pt "
                            f"at {img['dpi']:g} dpi, shown at {img['shown'] / img['natural']:.0%})")
    return problems


def _length_problem(page, screens):
    """A page longer than PAGE_SCREENS_MAX screens at 1280 px (None when it is not)."""
    if Path(page).stem in LONG_PAGES or screens <= PAGE_SCREENS_MAX:
        return None
    return f"{screens:.1f} screens long (at most {PAGE_SCREENS_MAX:g})"


def _brief_problems(page, reading, screen_height):
    """An experiment chapter whose first screen does not state its finding: an "In
    brief" block with a glued number, its first statement above ``screen_height``;
    and no titled section that opens with a code cell instead of a sentence."""
    if not EXPERIMENT_CHAPTER.search(Path(page).stem):
        return []
    problems = []
    brief = reading["brief"]
    if brief is None:
        problems.append("no 'In brief' block")
    else:
        if brief["firstBottom"] is None or brief["firstBottom"] > screen_height:
            problems.append(f"the 'In brief' finding is not on the first screen (it ends at "
                            f"{brief['firstBottom'] or brief['top']:.0f} px of {screen_height})")
        if brief["glued"] == 0:
            problems.append("the 'In brief' block quotes no computed (glued) number")
    for s in reading["sections"]:
        if s["opensWith"] == "cell":
            problems.append(f"section {s['title']!r} opens with a code cell, not a sentence")
    return problems


#: Statistical wording a chapter's "In brief" leaves to the detail further down: p-values,
#: Holm's adjustment, paired or confidence intervals, named tests.
BRIEF_JARGON = re.compile(
    r"(?<![\w-])p\s*(?:[<>=≤≥]|\(|-values?\b|\s+values?\b)|\bp-?values?\b|\bHolm\b"
    r"|\bpaired\s+(?:\d+\s*%\s+)?intervals?\b|\bCIs?\b|\bconfidence\s+intervals?\b"
    r"|\bWilcoxon\b|\bt-tests?\b", re.I)
#: How far down the page an experiment chapter's first figure may start, in screens
#: (window heights, the page as first seen with folds closed).
FIRST_FIGURE_SCREENS = 2.0


def _brief_wording_problems(page, reading):
    """An experiment chapter's "In brief" that speaks in p-values, Holm, paired
    intervals or CIs instead of plain words (each phrase found, with its context)."""
    brief = reading["brief"]
    if not EXPERIMENT_CHAPTER.search(Path(page).stem) or brief is None:
        return []
    text = brief.get("all") or brief["text"]
    return [f"the 'In brief' says {m[0]!r}: ...{text[max(0, m.start() - 40):m.end() + 30]}..."
            for m in BRIEF_JARGON.finditer(text)]


def _first_figure_problem(page, reading, screen_height, screens=FIRST_FIGURE_SCREENS):
    """An experiment chapter whose first output figure (visible with folds closed) starts
    below ``screens`` screens of ``screen_height`` px, or that shows none (None: fine)."""
    if not EXPERIMENT_CHAPTER.search(Path(page).stem):
        return None
    shown = [img for img in reading["images"] if img.get("visible", True)]
    if not shown:
        return "no output figure on the page as first seen"
    top = min(img["top"] for img in shown)
    if top > screens * screen_height:
        return (f"the first figure starts at {top:.0f} px, screen {top / screen_height:.1f} "
                f"(within {screens:g} screens: above {screens * screen_height:.0f} px)")
    return None


def _read_page(browser, site, book_html, page, viewport):
    """Everything the tests check on one page in one window, read in one visit.

    Returns a dict: ``problems`` (list of str: errors of the page, math, images,
    links), ``layout`` (LAYOUT_JS's result), ``figures`` (FIGURES_JS's result),
    ``screenshot`` (path of the full-page screenshot), ``forward`` (the page
    index.html forwards to, else None; such a page is checked for nothing else),
    ``page`` (READING_JS's result, each output image with the font record of its
    PNG) and ``tables`` (TABLES_JS's result).
    """
    v = _Visit(browser, site, VIEWPORTS[viewport])
    try:
        reading = {"problems": v.problems, "layout": None, "figures": None, "screenshot": None,
                   "forward": None, "page": None, "tables": None}
        problems = v.problems  # filled by the event handlers while the checks below run
        response = v.page.goto(site + page, wait_until="load")
        if response is None or response.status != 200:
            problems.append(f"the page did not load: {response}")
            return reading
        html = (book_html / page).read_text(encoding="utf-8")
        refresh = re.search(r'http-equiv="Refresh" content="0; url=([^"]+)"', html)
        if refresh:  # index.html only forwards the reader to the front page
            target = urldefrag(urljoin(site + page, refresh[1])).url
            v.page.wait_for_url(target)
            v.page.wait_for_load_state("load")
            reading["forward"] = target
            if _fetch(target)[0] != 200:
                problems.append(f"forwards to a missing page {target}")
            v.page.wait_for_timeout(200)
            return reading

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
        if not internal:
            problems.append("no link into the book (the navigation did not render)")
        for href in internal:
            url, fragment = urldefrag(href)
            status, ids = _fetch(url)
            if status != 200:
                problems.append(f"broken link: {href} (HTTP {status})")
            elif fragment and unquote(fragment) not in ids:
                problems.append(f"broken link: {href} (no element with id {unquote(fragment)!r})")

        # the page as a reader first sees it: fonts settled, folded code folded
        v.page.evaluate("async () => { await document.fonts.ready; }")
        reading["figures"] = v.page.evaluate(FIGURES_JS)
        reading["page"] = v.page.evaluate(READING_JS, [ARTICLE, CODE_LINE_LIMIT])
        for img in (reading["page"] or {}).get("images", []):
            path = book_html / urlsplit(urljoin(page, img["src"])).path
            img["font_pt"], img["dpi"] = _png_font_record(path) if path.is_file() else (None, 0)
            img["overlaps"] = _png_overlap_record(path) if path.is_file() else None
            img["svg"] = path.suffix.lower() == ".svg"
        # folded content (hidden code cells, detail tables) unfolded: it must fit the column too
        folded = v.page.evaluate("""() => Array.from(document.querySelectorAll('details'))
                                    .map((d, i) => d.open ? -1 : (d.open = true, i))
                                    .filter(i => i >= 0)""")
        reading["layout"] = v.page.evaluate(LAYOUT_JS, ARTICLE)
        reading["tables"] = v.page.evaluate(TABLES_JS, ARTICLE)
        if reading["layout"].get("error"):
            problems.append(reading["layout"]["error"])
        v.page.evaluate("""(folded) => { const all = document.querySelectorAll('details');
                                         folded.forEach(i => { all[i].open = false; }); }""", folded)

        # last: Chromium draws no scrollbars once it has taken a screenshot
        shots = book_html / "_screenshots"
        shots.mkdir(exist_ok=True)
        reading["screenshot"] = shots / _shot_name(page, viewport)
        v.page.screenshot(path=str(reading["screenshot"]), full_page=True)

        v.page.wait_for_timeout(200)  # let late console messages arrive
        return reading
    finally:
        v.close()


@pytest.fixture(scope="session")
def readings(browser, site, book_html):
    """``read(page, viewport)``: :func:`_read_page`'s result, each page read once per window."""
    cache = {}

    def read(page, viewport):
        if (page, viewport) not in cache:
            cache[page, viewport] = _read_page(browser, site, book_html, page, viewport)
        return cache[page, viewport]

    return read


# --------------------------------------------------------------------------- tests

def test_every_built_page_is_checked(book_html):
    built = sorted(p.relative_to(book_html).as_posix() for p in book_html.rglob("*.html")
                   if not p.relative_to(book_html).parts[0].startswith("_"))
    assert sorted(PAGES) == built, "pages in the build and pages this test opens differ"
    names = [_shot_name(p, "") for p in PAGES]
    assert len(set(names)) == len(names), f"two pages would share a screenshot name: {names}"


@pytest.mark.parametrize("viewport", list(VIEWPORTS))
@pytest.mark.parametrize("page", PAGES)
def test_page_as_a_reader_sees_it(page, viewport, readings):
    reading = readings(page, viewport)
    assert not reading["problems"], f"{page} at {viewport} px:\n" + "\n".join(reading["problems"])


def test_nothing_wider_than_the_article(readings):
    """On every page, in both windows, nothing reaches past the text column except
    inside a box that scrolls by itself; all offenders of the book in one report."""
    report, checked = [], 0
    for page in PAGES:
        for viewport in VIEWPORTS:
            layout = readings(page, viewport)["layout"]
            if layout is None or layout.get("error"):
                continue
            checked += 1
            where = f"{page} at {viewport} px (article {layout['article']} px)"
            if layout["page"] > layout["window"] + 1:
                report.append(f"{where}: the page scrolls sideways ({layout['page']} px "
                              f"in a {layout['window']} px window)")
            for c in layout["clipped"]:
                report.append(f"{where}: {c['kind']} <{c['element'][:60]}> {c['width']} px wide, "
                              f"{c['right']} px past the right edge"
                              + (f", {-c['left']} px past the left edge" if c["left"] < 0 else "")
                              + f": {c['text']!r}")
    assert checked >= len(VIEWPORTS) * (len(PAGES) - 1), f"only {checked} page layouts were read"
    # not a failure: how much a reader scrolls sideways inside boxes (printed with -s)
    for viewport in VIEWPORTS:
        counts = {}
        for page in PAGES:
            layout = readings(page, viewport)["layout"]
            for box in (layout or {}).get("scrolling", []):
                counts.setdefault(page, Counter())[box["kind"]] += 1
        total = sum(counts.values(), Counter())
        print(f"\nat {viewport} px, boxes that scroll sideways: {dict(total)} on {len(counts)} pages; "
              + ", ".join(f"{Path(p).stem} {dict(c)}" for p, c in counts.items()))
    assert not report, (f"{len(report)} elements are wider than the text column and do not "
                        f"scroll in a box of their own:\n" + "\n".join(report))


def test_every_output_figure_is_captioned(readings):
    """Every image a cell outputs is a numbered figure ("Fig. N") with a caption and an
    alt text that says what it shows (not empty, not a file path); all pages in one report."""
    report, images = [], 0
    for page in PAGES:
        figures = readings(page, "1280")["figures"]
        if figures is None:
            continue
        images += len(figures["images"])
        report += [f"{page}: {p}" for p in _figure_problems(figures)]
    assert images > 0, "no output image found on any page: the check reads nothing"
    assert not report, (f"{len(report)} figure problems (give each figure cell mystnb figure "
                        f"caption/name and image alt metadata):\n" + "\n".join(report))


def test_figure_check_itself():
    """Guards the figure check: it accepts a captioned figure and names what a bare one lacks."""
    good = {"src": "../_images/a.png", "alt": "Error rate against capacity, one line per policy",
            "figure": True, "number": "Fig. 3", "caption": "Error rate against capacity."}
    assert _figure_problems({"images": [good], "reprs": []}) == []
    bare = dict(good, alt="../../_images/a.png", figure=False, number=None, caption="")
    (problem,) = _figure_problems({"images": [bare], "reprs": []})
    assert "not in a <figure>" in problem and "file path" in problem
    unnumbered = dict(good, number=None, alt="")
    (problem,) = _figure_problems({"images": [unnumbered], "reprs": ["<Figure size 640x480 with 1 Axes>"]})[:1]
    assert "no numbered caption" in problem and "no alt text" in problem
    assert len(_figure_problems({"images": [], "reprs": ["<Figure size 640x480 with 1 Axes>"]})) == 1
    assert "describes nothing" in _figure_problems({"images": [dict(good, alt="a plot")], "reprs": []})[0]


def test_screenshots_of_every_page(readings, book_html):
    """A full-page screenshot of every page in both windows, under <build>/html/_screenshots/."""
    from PIL import Image

    report, saved = [], []
    for page in PAGES:
        for viewport, size in VIEWPORTS.items():
            reading = readings(page, viewport)
            if reading["forward"]:
                continue
            path = book_html / "_screenshots" / _shot_name(page, viewport)
            if reading["screenshot"] != path or not path.is_file() or path.stat().st_size == 0:
                report.append(f"{page} at {viewport} px: no screenshot at {path}")
                continue
            with Image.open(path) as img:
                if img.width != size["width"] or img.height < size["height"]:
                    report.append(f"{path.name}: {img.size}, expected {size['width']} px wide, "
                                  f"at least {size['height']} px high")
                    continue
                # a rendered page, not a blank one: many distinct colours (text, figures, theme)
                colours = img.convert("RGB").reduce(4).getcolors(maxcolors=1 << 16)
                if colours is not None and len(colours) <= 50:
                    report.append(f"{path.name} looks blank ({len(colours)} colours)")
                    continue
            saved.append(path)
    print(f"\n{len(saved)} screenshots in {book_html / '_screenshots'}")
    assert saved and not report, "\n".join(report)


def test_math_pages_really_have_math(visit):
    """Guards the math check itself: the first chapter (theory) is full of typeset equations."""
    v = visit(next(p for p in PAGES if p.startswith("book/executed/theory_")))
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
    chapter = next(p for p in PAGES if p.startswith("book/executed/theory_"))
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


# A wide element straight in the article, the same inside a box that scrolls by
# itself, and a wide results table of show_table in a cell output, all added to
# a built page: the layout check must report the first only, and the book's
# style sheet must have given the table its look.
INJECT_JS = """
(tableHtml) => {
  const article = document.querySelector('article.bd-article');
  const add = html => { const d = document.createElement('div'); d.innerHTML = html; article.appendChild(d); };
  add('<p id="ca-wide" style="width:2000px">a paragraph wider than any window</p>');
  add('<div style="overflow-x:auto;max-width:100%"><p style="width:2000px">inside its own scroll box</p></div>');
  add('<div id="ca-injected" class="cell_output docutils container"><div class="output text_html">' + tableHtml + '</div></div>');
  const table = article.querySelector('#ca-injected table.ca-table');  // the page has tables of its own
  const head = getComputedStyle(table.querySelector('thead th:last-child'));
  const cell = getComputedStyle(table.querySelector('tbody td'));
  return {headRule: parseFloat(head.borderBottomWidth), cellAlign: cell.textAlign,
          cellPadding: parseFloat(cell.paddingLeft),
          sheets: Array.from(document.styleSheets, s => s.href || '').filter(h => /capassign\\.css/.test(h))};
}
"""


@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_layout_check_itself(viewport, browser, site):
    """Guards the layout check and the style sheet: a wide paragraph is reported,
    wide content that scrolls in its own box is not, show_table's tables look tidy."""
    import numpy as np
    import pandas as pd

    import capbook as cb

    ours = pd.DataFrame(np.linspace(0.1, 0.9, 3 * 16).reshape(3, 16),
                        index=["bank", "credit", "cardio"], columns=[f"alpha={a}" for a in range(16)])
    table = cb.show_table(ours, paper=ours.round(1), tol=0.01)._repr_html_()
    v = _Visit(browser, site, VIEWPORTS[viewport])
    try:
        v.page.goto(site + "book/executed/intro.html", wait_until="load")
        looks = v.page.evaluate(INJECT_JS, table)
        layout = v.page.evaluate(LAYOUT_JS, ARTICLE)
    finally:
        v.close()
    assert looks["sheets"], "the book's style sheet capassign.css is not loaded"
    assert looks["headRule"] > 0 and looks["cellAlign"] == "right" and 4 <= looks["cellPadding"] <= 16, looks
    texts = [c["text"] for c in layout["clipped"]]
    assert texts == ["a paragraph wider than any window"], layout


# --------------------------------------------------------------------------- reading tests

def _book_report(readings, viewports, check):
    """``check(page, viewport, reading)`` -> problems, over every page read; all in one list."""
    report = []
    for page in PAGES:
        for viewport in viewports:
            reading = readings(page, viewport)
            if reading["page"] is None:
                continue
            report += [f"{page} at {viewport} px: {p}" for p in check(page, viewport, reading)]
    return report


def test_tables_fit_the_column_or_show_their_scrollbar(readings):
    """Every table fits the text column, or scrolls in a box whose scrollbar is drawn
    (with overlay scrollbars, as macOS and phones show them); both windows."""
    counted = sum(len(readings(p, "1280")["tables"]["tables"]) for p in PAGES
                  if readings(p, "1280")["tables"])
    assert counted > 0, "no table found on any page: the check reads nothing"
    report = _book_report(readings, VIEWPORTS, lambda p, v, r: _table_problems(r["tables"]))
    assert not report, f"{len(report)} tables look cut off:\n" + "\n".join(report)


def test_table_headers_read_as_numbers_and_math(readings):
    """No header cell or caption prints 0.000000-style numbers or plain-text math."""
    report = _book_report(readings, ["1280"], lambda p, v, r: _header_problems(r["page"]["headers"]))
    assert not report, f"{len(report)} header problems:\n" + "\n".join(report)


def test_visible_code_lines_fit_the_column(readings):
    """No code line a reader sees without unfolding anything is longer than
    CODE_LINE_LIMIT characters, and at 1280 px no visible code block scrolls sideways
    (folded lines are printed, not failed, with -s)."""
    report = _book_report(readings, ["1280"], lambda p, v, r: _code_problems(
        r["page"]["code"], scrolling=True))
    folded = _book_report(readings, ["1280"], lambda p, v, r: [
        c for c in _code_problems(r["page"]["code"], visible_only=False) if "(folded)" in c])
    print(f"\n{len(folded)} folded code lines longer than {CODE_LINE_LIMIT} characters")
    assert not report, f"{len(report)} visible code lines are too long:\n" + "\n".join(report)


def test_figure_text_is_readable(readings):
    """Every output figure's smallest text is at least FIGURE_TEXT_MIN_PX on screen (10 px at
    1280, 9 px at 390), computed from the font size its PNG records, its dpi and its
    displayed scale."""
    shown = sum(len(readings(p, "1280")["page"]["images"]) for p in PAGES
                if readings(p, "1280")["page"])
    assert shown > 0, "no output image found on any page: the check reads nothing"
    report = _book_report(readings, VIEWPORTS,
                          lambda p, v, r: _figure_text_problems(r["page"]["images"], v))
    assert not report, f"{len(report)} figures with small text:\n" + "\n".join(report)


def test_figures_are_sharp_and_legends_clear(readings):
    """Every output figure has at least FIGURE_PIXEL_RATIO_MIN device pixels per CSS pixel
    shown (or is SVG), in both windows, and no legend covers an axis, its label or its tick
    labels (the bounding boxes capbook measured when it drew the figure)."""
    report = _book_report(readings, VIEWPORTS,
                          lambda p, v, r: _pixel_ratio_problems(r["page"]["images"]))
    report += _book_report(readings, ["1280"],
                           lambda p, v, r: _legend_problems(r["page"]["images"]))
    assert not report, f"{len(report)} figure problems:\n" + "\n".join(report)


def test_printed_output_reads_cleanly(readings):
    """No cell prints a line longer than PRINTED_LINE_LIMIT characters (folded or not) and
    no cell output shows a negative zero such as -0.0000. Library source a cell shows
    (capbook.show_source) is code: test_visible_code_lines_fit_the_column measures it."""
    report = _book_report(readings, ["1280"],
                          lambda p, v, r: _printed_problems(r["page"]["printed"]))
    assert not report, f"{len(report)} printed-output problems:\n" + "\n".join(report)


def test_pages_are_not_too_long(readings):
    """No page is longer than PAGE_SCREENS_MAX screens at 1280 px except LONG_PAGES
    (lengths in both windows printed with -s)."""
    print("\npage length in screens (1280 px / 390 px):")
    for page in PAGES:
        lengths = [readings(page, v)["page"] for v in VIEWPORTS]
        if all(lengths):
            print(f"  {Path(page).stem:24s} " + " / ".join(f"{r['screens']:.1f}" for r in lengths))
    report = _book_report(readings, ["1280"], lambda p, v, r: [
        x for x in [_length_problem(p, r["page"]["screens"])] if x])
    assert not report, "\n".join(report)


def test_experiment_chapters_state_their_finding_first(readings):
    """Each experiment chapter's first screen at 1280x800 holds its "In brief" finding,
    with a glued number, and no titled section opens with a code cell."""
    chapters = [p for p in PAGES if EXPERIMENT_CHAPTER.search(Path(p).stem)]
    assert len(chapters) >= 10, chapters
    height = VIEWPORTS["1280"]["height"]
    report = _book_report(readings, ["1280"],
                          lambda p, v, r: _brief_problems(p, r["page"], height))
    assert not report, "\n".join(report)


def test_experiment_briefs_speak_plain_words(readings):
    """No experiment chapter's "In brief" speaks in p-values, Holm, paired intervals or
    CIs (BRIEF_JARGON): how sure a finding is reads as "in every one of the 80
    comparisons"; the tests go to the detail. Every failing page in one report."""
    chapters = [p for p in PAGES if EXPERIMENT_CHAPTER.search(Path(p).stem)]
    assert len(chapters) >= 10, chapters
    report = _book_report(readings, ["1280"],
                          lambda p, v, r: _brief_wording_problems(p, r["page"]))
    assert not report, f"{len(report)} statistical phrases in briefs:\n" + "\n".join(report)


def test_experiment_figures_start_within_two_screens(readings):
    """Each experiment chapter's first figure starts within FIRST_FIGURE_SCREENS screens,
    screens of the window's own height, at 1280x800 and at 390x844 (the page as first
    seen, folds closed); where it starts in both windows is printed (-s). Every failing
    page in one report."""
    chapters = [p for p in PAGES if EXPERIMENT_CHAPTER.search(Path(p).stem)]
    assert len(chapters) >= 10, chapters
    print("\nfirst figure of each experiment chapter, in screens (1280 px / 390 px):")
    for page in chapters:
        tops = []
        for viewport, size in VIEWPORTS.items():
            r = readings(page, viewport)["page"] or {"images": []}
            shown = [img["top"] for img in r["images"] if img.get("visible", True)]
            tops.append(f"{min(shown) / size['height']:.2f}" if shown else "none")
        print(f"  {Path(page).stem:24s} " + " / ".join(tops))
    report = _book_report(readings, VIEWPORTS, lambda p, v, r: [
        x for x in [_first_figure_problem(p, r["page"], VIEWPORTS[v]["height"])] if x])
    assert not report, (f"{len(report)} experiment chapter pages show their first figure late:\n"
                        + "\n".join(report))


def test_brief_wording_check_itself():
    """The wording check finds each kind of phrase and spares plain words."""
    plain = {"brief": {"all": "In every one of the 80 comparisons the contextual policies "
                              "beat random; the gain is 0.07 (95 % interval 0.069 to 0.070), "
                              "a capacity of 0.5, a deep tree, happy paths."}}
    assert _brief_wording_problems("book/executed/exp_x.html", plain) == []
    jargon = ("Holm-adjusted p < 0.001; p-values below 0.05; p = 0.03; the paired interval "
              "excludes zero; 95% CI [0.01, 0.02]; a confidence interval; Wilcoxon; a t-test")
    found = _brief_wording_problems("book/executed/exp_x.html", {"brief": {"all": jargon}})
    said = [f.split("'")[3] for f in found]
    assert said == ["Holm", "p <", "p-values", "p =", "paired interval", "CI",
                    "confidence interval", "Wilcoxon", "t-test"], found
    assert _brief_wording_problems("book/executed/intro.html", {"brief": {"all": jargon}}) == []


def test_first_figure_check_itself():
    """A figure below two screens, none at all and one inside a closed fold are reported;
    one on the second screen is not; pages that are not experiment chapters are not checked."""
    def reading(*images):
        return {"images": [dict(top=top, visible=shown) for top, shown in images]}

    page = "book/executed/exp_x.html"
    assert _first_figure_problem(page, reading((1500, True), (3000, True)), 800) is None
    late = _first_figure_problem(page, reading((2400, True)), 800)
    assert late == ("the first figure starts at 2400 px, screen 3.0 (within 2 screens: above "
                    "1600 px)"), late
    phone = VIEWPORTS["390"]["height"]      # two screens of a phone: 1688 px
    assert _first_figure_problem(page, reading((1680, True)), phone) is None
    late = _first_figure_problem(page, reading((1692, True)), phone)
    assert late is not None and "starts at 1692 px, screen 2.0" in late, late
    assert "no output figure" in _first_figure_problem(page, reading(), 800)
    assert "starts at 2000 px" in _first_figure_problem(
        page, reading((0, False), (2000, True)), 800)
    assert _first_figure_problem("book/executed/intro.html", reading(), 800) is None


# An "In brief" block in statistical words and a 2000-px spacer, put at the top of the
# article: the brief and the first figure below it are both read as a reader sees them.
FIRST_SCREEN_INJECT_JS = """
() => {
  const article = document.querySelector('article.bd-article');
  const d = document.createElement('div');
  d.innerHTML = '<div class="admonition"><p class="admonition-title">In brief</p>' +
    '<p>Contextual policies beat random (Holm-adjusted p < 0.001, paired interval ' +
    'above zero).</p></div><div style="height:2000px"></div>';
  article.prepend(d);
}
"""


@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_first_screen_checks_on_an_injected_page(viewport, browser, site):
    """On the front page as built, read as if it were an experiment chapter, its figure
    starts on the first screen; with a brief in statistical words and a spacer injected
    above it, both checks report it."""
    height = VIEWPORTS[viewport]["height"]
    v = _Visit(browser, site, VIEWPORTS[viewport])
    try:
        v.page.goto(site + "book/executed/intro.html", wait_until="load")
        v.page.evaluate("async () => { await document.fonts.ready; }")
        before = v.page.evaluate(READING_JS, [ARTICLE, CODE_LINE_LIMIT])
        v.page.evaluate(FIRST_SCREEN_INJECT_JS)
        after = v.page.evaluate(READING_JS, [ARTICLE, CODE_LINE_LIMIT])
    finally:
        v.close()
    page = "book/executed/exp_x.html"
    assert before["images"], "the front page shows no figure"
    assert _first_figure_problem(page, before, height) is None, before["images"]
    late = _first_figure_problem(page, after, height)
    assert late is not None and "the first figure starts at" in late, after["images"]
    wording = _brief_wording_problems(page, after)
    assert [w.split("'")[3] for w in wording] == ["Holm", "p <", "paired interval"], wording


# Injected into a built page: the same wide table in a bare scrolling box (its
# scrollbar an overlay: must be reported) and in a cell output styled by the
# book (must pass), a narrow table, headers with 0.000000 and plain-text math,
# a visible code block with a long line and a folded one, and an "In brief"
# block below the first screen with a section that opens with a code cell.
READING_INJECT_JS = """
() => {
  const article = document.querySelector('article.bd-article');
  const add = html => { const d = document.createElement('div'); d.innerHTML = html;
                        article.appendChild(d); };
  const wide = '<table><thead><tr><th>policy</th>' +
    Array.from({length: 12}, (_, i) => '<th>0.' + i + '00000</th>').join('') +
    '</tr></thead><tbody><tr><th>random</th>' +
    Array.from({length: 12}, () => '<td>0.123456789</td>').join('') + '</tr></tbody></table>';
  add('<div id="bare" style="overflow-x:auto;max-width:100%">' + wide + '</div>');
  add('<div class="cell_output docutils container"><div class="output text_html">' +
      '<div class="ca-table-box" style="overflow-x:auto;max-width:100%">' +
      wide.replace(/0\\.(\\d)00000/g, '0.$1') + '</div></div></div>');
  add('<table><thead><tr><th>alpha_1</th><th>error</th></tr></thead>' +
      '<tbody><tr><td>0.2</td><td>0.31</td></tr></tbody></table>');
  const long = 'x = ' + '1 + '.repeat(30) + '1';
  add('<div class="cell_input docutils container"><div class="highlight"><pre>short = 1\\n' +
      long + '</pre></div></div>');
  add('<details><summary>code</summary><div class="cell_input"><div class="highlight"><pre>' +
      long.replace('x', 'y') + '</pre></div></div></details>');
  add('<div class="cell_output docutils container"><pre>diff [-0.0002, -0.0000]\\n' +
      'ok line\\n' + 'y'.repeat(89) + '</pre></div>');
  add('<div style="height:2000px"></div><section><h2>Results</h2>' +
      '<div class="cell docutils container"><pre>printed</pre></div></section>' +
      '<div class="admonition"><p class="admonition-title">In brief</p>' +
      '<p>The finding, with no glued number.</p></div>');
}
"""


@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_reading_checks_themselves(viewport, browser, site):
    """Guards the reading checks on injected examples: each problem above is reported,
    and the book's own wide table (styled scrollbar) and the folded code line are not."""
    v = _Visit(browser, site, VIEWPORTS[viewport])
    try:
        v.page.goto(site + "book/executed/intro.html", wait_until="load")
        before = v.page.evaluate(READING_JS, [ARTICLE, CODE_LINE_LIMIT])
        own = v.page.evaluate(TABLES_JS, ARTICLE)["tables"]     # the front page's own tables
        v.page.evaluate(READING_INJECT_JS)
        reading = v.page.evaluate(READING_JS, [ARTICLE, CODE_LINE_LIMIT])
        tables = v.page.evaluate(TABLES_JS, ARTICLE)
    finally:
        v.close()
    assert _table_problems(dict(tables, tables=own)) == [], own
    bad = _table_problems(tables)
    assert len(bad) == 1 and "scrollbar is not visible (0 px high)" in bad[0], bad
    injected = tables["tables"][len(own):]
    assert len(injected) == 3, tables
    styled = [t for t in injected if t["box"] and t["box"]["bar"] >= SCROLLBAR_MIN_PX]
    assert len(styled) == 1 and styled[0]["width"] > tables["column"], tables
    assert _header_problems(before["headers"]) == [], before["headers"]   # the page's own
    headers = _header_problems(reading["headers"])
    # the bare table's 0.000000 ... 0.900000 (its 0.1000000 and 0.1100000 have seven)
    assert sum("six-decimal" in h for h in headers) == 10, headers
    assert sum("plain-text math" in h for h in headers) == 1, headers
    code = _code_problems(reading["code"])
    assert len(code) == 1 and "code line of 125 characters: 'x = 1 + " in code[0], code
    assert len(_code_problems(reading["code"], visible_only=False)) == 2
    scrolls = _code_problems(reading["code"], scrolling=True)[1:]
    assert len(scrolls) == 1 and "'short = 1" in scrolls[0], scrolls
    # the front page is no experiment chapter; as one, it fails twice plus once per section
    assert _brief_problems("book/executed/intro.html", reading, 800) == []
    problems = _brief_problems("book/executed/exp_x.html", reading, 800)
    assert any("not on the first screen" in p for p in problems), problems
    assert any("quotes no computed (glued) number" in p for p in problems), problems
    assert any("section 'Results' opens with a code cell" in p for p in problems), problems
    assert reading["screens"] > before["screens"] + 2
    assert _printed_problems(before["printed"]) == [], before["printed"]   # the page's own
    printed = _printed_problems(reading["printed"])
    assert len(printed) == 2, printed
    assert "printed line of 89 characters" in printed[0], printed
    assert printed[1].startswith("negative zero printed:"), printed
    assert "diff [-0.0002, -0.0000] ok line" in printed[1], printed
    assert _brief_problems("book/executed/exp_x.html", dict(before, sections=[]), 800) == [
        "no 'In brief' block"]


def _saved_figure(path, fig, *, book=True):
    """Save ``fig`` to ``path`` (through capbook, or as a plain 1x PNG) and close it; returns
    the image entry the reading checks take, shown at the width the notebook gives it."""
    import matplotlib.pyplot as plt
    from PIL import Image

    import capbook as cb

    if book:
        path.write_bytes(cb.figure_png(fig))
    else:
        fig.savefig(path, dpi=100)
    plt.close(fig)
    pt, dpi = _png_font_record(path)
    with Image.open(path) as img:
        natural = img.width
    css = natural / (cb.PIXEL_RATIO if book else 1)
    return {"src": str(path), "natural": natural, "font_pt": pt, "dpi": dpi,
            "overlaps": _png_overlap_record(path), "svg": False,
            "shown": {"1280": min(css, 672), "390": min(css, 342)}}


def _in(image, viewport):
    return dict(image, shown=image["shown"][viewport])


def test_figure_text_check_itself(tmp_path):
    """Guards the figure-text check on real PNGs: capbook records the smallest font; two
    panels drawn by book_figure pass in both windows, two drawn 9.6 inches wide with
    8-pt ticks (the book's old default) fail, and an image without a record fails."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import capbook as cb

    images = []
    for name, width in (("column", None), ("wide", 9.6)):
        if width is None:
            fig, axes = cb.book_figure(2)
        else:  # the book's old default for two panels: 9.6 inches, 8-pt ticks
            fig, axes = plt.subplots(1, 2, figsize=(width, 3.4))
        for ax in axes:
            ax.plot([0, 1], [0, 1], label="a line")
            if width is not None:
                ax.tick_params(labelsize=8)
        axes[0].legend()
        fig.tight_layout()
        images.append(_saved_figure(tmp_path / f"{name}.png", fig))
    assert images[0]["font_pt"] == 10.5 and images[1]["font_pt"] == 8.0, images
    for viewport in VIEWPORTS:
        assert _figure_text_problems([_in(images[0], viewport)], viewport) == []
        (problem,) = _figure_text_problems([_in(images[1], viewport)], viewport)
        assert "(8 pt" in problem, problem
    (problem,) = _figure_text_problems([dict(_in(images[0], "1280"), font_pt=None)])
    assert "no record of its smallest font" in problem
    assert abs(_figure_text_px(8, 100, 688, 953) - 8.02) < 0.01


def test_figure_checks_themselves(tmp_path):
    """Guards the pixel-ratio and legend checks on real PNGs: a capbook figure with its
    legend below the panel passes; the same drawn at 1x fails the pixel ratio (and has no
    record of its legend boxes); a legend moved onto the x-axis label is reported."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import capbook as cb

    def drawn():
        fig, ax = cb.book_figure()
        for p in ("random", "tree-greedy"):
            ax.plot([0, 1], [0.3, 0.2], **cb.policy_style(p))
        ax.set_xlabel(r"capacity of agent 1, $\alpha_1$")
        ax.set_ylabel("error rate")
        cb.legend_outside(fig)
        return fig

    good = _saved_figure(tmp_path / "good.png", drawn())
    plain = _saved_figure(tmp_path / "plain.png", drawn(), book=False)
    fig = drawn()
    fig.legends[0].set_bbox_to_anchor((0.5, 0.03), transform=fig.transFigure)
    covered = _saved_figure(tmp_path / "covered.png", fig)
    for viewport in VIEWPORTS:
        assert _pixel_ratio_problems([_in(good, viewport)]) == [], good
        (problem,) = _pixel_ratio_problems([_in(plain, viewport)])
        assert "(1.00x)" in problem or viewport == "390", problem
    assert _pixel_ratio_problems([dict(_in(plain, "1280"), svg=True)]) == []
    # a figure squeezed sideways (a fixed inline height in a narrow column) is reported
    tall = dict(_in(good, "390"), naturalHeight=800, shownHeight=400 * 342 / (good["natural"] / 2))
    assert _pixel_ratio_problems([dict(tall, natural=good["natural"])]) == []
    (problem,) = _pixel_ratio_problems([dict(tall, shownHeight=400)])
    assert "drawn out of shape" in problem, problem
    assert good["overlaps"] == "none" and _legend_problems([_in(good, "1280")]) == []
    (problem,) = _legend_problems([_in(plain, "1280")])
    assert "no record of its legends' boxes" in problem, problem
    (problem,) = _legend_problems([_in(covered, "1280")])
    assert "figure legend 1 covers panel 1's x-axis label" in problem, problem


def test_printed_output_check_itself():
    """Guards the printed-output check: a long line and each form of negative zero are
    reported; small negatives, zeros, ranges and hyphenated names are not."""
    ok = {"lines": ["x" * 88, "diff -0.0001  [-0.0002, +0.0000]  0.0000", "S4-0.0 tree-ts"],
          "text": "diff -0.0001 [-0.0002, +0.0000] 0.0000 -0.00012 1-0.000 alpha=-0.5"}
    assert _printed_problems(ok) == []
    bad = {"lines": ["x" * 89], "text": "[-0.0002, -0.0000] -0.000 \u22120.00 (-0.0)"}
    problems = _printed_problems(bad)
    assert len(problems) == 5, problems
    assert problems[0].startswith("printed line of 89 characters"), problems


def test_page_length_check_itself():
    assert _length_problem("book/executed/exp_tabular.html", 14.3) == \
        "14.3 screens long (at most 12)"
    assert _length_problem("book/executed/exp_tabular.html", 11.9) is None
    assert _length_problem("book/executed/scorecard.html", 20.0) is None


# --------------------------------------------------------------------------- equations, scorecard

# Display equations wider than their box once MathJax and the book's fitting script
# (book/_static/capassign-math.js) are done: each with the start of its TeX.
WIDE_MATH_JS = """
async () => {
  if (!document.querySelector('.math')) return {displays: 0, wide: []};
  const t0 = Date.now();
  while (!(window.MathJax && MathJax.startup && MathJax.startup.promise)) {
    if (Date.now() - t0 > 20000) return {error: 'MathJax never started'};
    await new Promise(r => setTimeout(r, 50));
  }
  await MathJax.startup.promise;
  await document.fonts.ready;
  if (window.capassignFitMath) window.capassignFitMath();
  const boxes = Array.from(document.querySelectorAll('.bd-article mjx-container[display="true"]'));
  return {displays: boxes.length, wide: boxes.filter(b => b.scrollWidth > b.clientWidth + 1)
    .map(b => ({box: b.clientWidth, needs: b.scrollWidth,
                tex: (MathJax.startup.document.getMathItemsWithin(b)[0] || {math: '?'})
                     .math.trim().slice(0, 60)}))};
}
"""

# An equation no column holds, typeset into the page like the book's own.
WIDE_MATH_INJECT_JS = """
async () => {
  const div = document.createElement('div');
  div.className = 'math notranslate nohighlight';
  div.textContent = '\\\\[' + Array.from({length: 60}, (_, i) => 'x_{' + i + '}').join(' + ') + '\\\\]';
  document.querySelector('.bd-article section').appendChild(div);
  await MathJax.typesetPromise([div]);
}
"""

MATH_PAGES = [p for p in PAGES if p.startswith("book/executed/")]


def _wide_math(v, page):
    v.page.goto(v.site + page, wait_until="load")
    found = v.page.evaluate(WIDE_MATH_JS)
    assert not found.get("error"), found
    return found


def test_display_equations_fit_their_box(browser, site):
    """No display equation is wider than its box (it would be cut or scroll), at 1280
    and at 390 px: long ones are written on several lines or set smaller."""
    report, displays = [], 0
    for viewport in VIEWPORTS:
        v = _Visit(browser, site, VIEWPORTS[viewport])
        try:
            for page in MATH_PAGES:
                found = _wide_math(v, page)
                displays += found["displays"]
                report += [f"{page} at {viewport} px: {w['needs']} px in a {w['box']}-px box: "
                           f"{w['tex']!r}" for w in found["wide"]]
        finally:
            v.close()
    assert displays > 40, "too few display equations found: the check reads nothing"
    assert not report, f"{len(report)} display equations wider than their box:\n" + \
        "\n".join(report)


@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_equation_check_itself(viewport, browser, site):
    """An injected equation far wider than any column is reported, the page's own are not."""
    v = _Visit(browser, site, VIEWPORTS[viewport])
    try:
        before = _wide_math(v, MATH_PAGE)
        v.page.evaluate(WIDE_MATH_INJECT_JS)
        after = v.page.evaluate(WIDE_MATH_JS)
    finally:
        v.close()
    assert before["wide"] == [] and before["displays"] > 0, before
    assert len(after["wide"]) == 1 and after["wide"][0]["tex"].startswith("x_{0} + x_{1}"), after


def _scorecard_text_problems(text, ids):
    """What a reader should not meet in the scorecard's text (outside code): an item's
    internal id, or maths written in ASCII (alpha_1, eta, <=)."""
    problems = [f"internal id {i!r}" for i in ids
                if re.search(rf"(?<![\w-]){re.escape(i)}(?![\w-])", text)]
    ascii_maths = re.compile(r"\b(?:alpha|eta|Delta|theta|lambda|mu|tau)(?:_\w+)?\b|<=|>=")
    problems += [f"ASCII maths {m[0]!r} in ...{text[max(0, m.start() - 40):m.end() + 40]!r}..."
                 for m in ascii_maths.finditer(text)]
    return problems


def test_scorecard_speaks_words(visit):
    """The scorecard's text, folded tables included and code excluded, names every item
    in words and typesets its maths; the check itself catches an injected id and alpha_1."""
    items = yaml.safe_load((ROOT / "book" / "scorecard.yml").read_text(encoding="utf-8"))
    ids = [it["id"] for it in items]
    v = visit("book/executed/scorecard.html")
    text = " ".join(v.page.evaluate(TEXT_JS).split())
    assert "What the colours mean" in text and len(text) > 20_000, "the page's text was not read"
    assert _scorecard_text_problems(text, ids) == []
    injected = text + " the item S4-sd-bank at alpha_1 = 0.5, eta <= 5"
    found = _scorecard_text_problems(injected, ids)
    assert len(found) == 4 and "internal id 'S4-sd-bank'" in found[0], found
