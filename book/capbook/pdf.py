"""The whole book as one PDF, printed offline from its HTML build by the system's Chromium.

``python -m capbook pdf`` builds the HTML book (``jupyter-book build``, from
the executed notebooks: nothing is re-run), opens every page of ``_toc.yml`` in
order in a headless Chromium driven by Playwright (the system's browser, never
one downloaded), waits for MathJax, opens every fold (hidden code, detail
tables, dropdowns), makes what scrolls sideways on screen fit the printed
column (code and text outputs wrap, wide tables and equations are set
smaller), checks that nothing is left wider than its box, prints each page and
joins the pages into one file with ``pypdf``.  Nothing is fetched from the
network: the build carries its own MathJax.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from .pipeline import ROOT

#: Where the PDF goes by default.
PDF_PATH = ROOT / "_build" / "capassign-book.pdf"

#: The printed column in CSS pixels: A4 (210 mm) less two 12-mm margins, at 96 px per inch.
PRINT_PX = 703

#: Chromium's switches for a headless, offline run (no background traffic).
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]

# The printed page: the text column only (no navigation, header, footer or
# buttons), code and text outputs wrapped at the column, boxes that scroll on
# screen left open.
PRINT_CSS = """
.bd-header, .bd-header-article, .bd-sidebar-primary, .bd-sidebar-secondary, .bd-footer,
.bd-footer-article, .prev-next-area, .header-article-items, .skip-link, #pst-back-to-top,
.toggle-button, .cell_input summary ~ button, button.copybtn { display: none !important; }
.bd-main, .bd-content, .bd-article-container, .bd-page-width, .bd-container__inner,
.bd-article {
  min-width: 0 !important; max-width: 100% !important; width: auto !important;
  flex-basis: 100% !important; margin-left: 0 !important;
  margin-right: 0 !important; padding-left: 0 !important; padding-right: 0 !important; }
.bd-article table.ca-table th, .bd-article table.ca-table td { white-space: normal !important; }
.bd-article section, .bd-article .cell, .bd-article .cell_output, .bd-article details {
  min-width: 0 !important; max-width: 100% !important; }
.bd-article pre, .bd-article .highlight pre, .bd-article .cell_output pre {
  white-space: pre-wrap !important; overflow-wrap: anywhere !important;
  overflow: visible !important; }
.bd-article .ca-table-box, .bd-article .cell_output .output.text_html,
.bd-article .pst-scrollable-table-container, .bd-article mjx-container[display="true"],
.bd-article span.math {
  overflow: visible !important; }
details > summary { list-style: none; }
"""

# Waits for MathJax, opens every fold, and sets each box that is still wider
# than the column smaller (CSS zoom) so that it fits.  Returns how many it scaled.
PREPARE_JS = """
async () => {
  const t0 = Date.now();
  if (document.querySelector('.math')) {
    while (!(window.MathJax && MathJax.startup && MathJax.startup.promise)) {
      if (Date.now() - t0 > 20000) throw new Error('MathJax never started');
      await new Promise(r => setTimeout(r, 50));
    }
    await MathJax.startup.promise;
  }
  await document.fonts.ready;
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  document.querySelectorAll('.dropdown, .toggle-hidden').forEach(
    el => el.classList.remove('toggle-hidden'));
  await new Promise(r => setTimeout(r, 100));
  const article = document.querySelector('.bd-article');
  const column = article.clientWidth;
  let scaled = 0;
  const boxes = article.querySelectorAll(
    'table, .ca-table-box > *, .output.text_html > *, mjx-container[display="true"] > mjx-math, img');
  for (const el of boxes) {
    const width = el.scrollWidth, room = el.parentElement.clientWidth || column;
    if (width > room + 1) { el.style.zoom = (room / width).toFixed(3); scaled += 1; }
  }
  return scaled;
}
"""

# What is still cut off once the page is prepared: an element of the article
# that reaches past the article's right edge, or a box that clips content
# (overflow other than visible) narrower than what it holds.
CLIPPED_JS = """
() => {
  const article = document.querySelector('.bd-article');
  // the printed column: the article, and never past the page
  const right = Math.min(article.getBoundingClientRect().right,
                         document.documentElement.clientWidth);
  const out = [];
  for (const el of article.querySelectorAll('*')) {
    if (el.closest('mjx-assistive-mml')) continue;
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.height === 0) continue;
    const style = getComputedStyle(el);
    const clips = style.overflowX !== 'visible' && style.display !== 'inline' &&
                  el.scrollWidth > el.clientWidth + 1;
    if (r.right > right + 1 || clips) {
      out.push(el.tagName.toLowerCase() + (el.className && el.className.baseVal === undefined
               ? '.' + String(el.className).trim().split(/\\s+/).join('.') : '') + ': ' +
               (el.textContent || '').trim().slice(0, 60));
    }
  }
  return out;
}
"""


def toc_pages(root=ROOT):
    """The book's pages in reading order (paths of ``_toc.yml``, without suffix).

    Parameters
    ----------
    root : path-like
        The repository (holds ``_toc.yml``).

    Returns
    -------
    list of str

    Examples
    --------
    >>> pages = toc_pages()
    >>> pages[0], pages[-1]
    ('book/executed/intro', 'book/bibliography')
    """
    toc = yaml.safe_load((Path(root) / "_toc.yml").read_text(encoding="utf-8"))
    pages = [toc["root"]]
    for part in toc.get("parts", []):
        pages += [ch["file"] for ch in part.get("chapters", [])]
    return pages


def build_html(out_dir):
    """Build the HTML book into ``out_dir`` (strict, from the stored notebooks); its html folder."""
    exe = Path(sys.executable).parent / "jupyter-book"
    cmd = [str(exe) if exe.exists() else "jupyter-book", "build", str(ROOT), "--all",
           "--path-output", str(out_dir)]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if res.returncode != 0:
        raise RuntimeError("the HTML build failed:\n" + res.stdout[-2000:] + res.stderr[-2000:])
    return Path(out_dir) / "_build" / "html"


def _chromium():
    path = os.environ.get("CAPASSIGN_CHROMIUM") or shutil.which("chromium")
    if not path:
        raise ValueError("no Chromium found: install the system's chromium package or set "
                         "CAPASSIGN_CHROMIUM to a Chromium binary")
    return path


def print_pages(html_dir, pages, out_dir, *, prepare=PREPARE_JS):
    """Print each page of the HTML build to its own PDF, folds open, nothing clipped.

    Parameters
    ----------
    html_dir : path-like
        The build's html folder.
    pages : list of str
        Pages in reading order (:func:`toc_pages`).
    out_dir : path-like
        Where the per-page PDFs go.
    prepare : str
        The script run on each page before it is checked and printed.

    Returns
    -------
    dict
        ``files`` (the per-page PDFs, in order), ``scaled`` (boxes set smaller to fit)
        and ``clipped`` (``{page: [what is cut off]}``, empty when nothing is).

    Notes
    -----
    The browser is driven from a thread of its own: Playwright's synchronous
    API refuses to run in a thread where an asyncio loop is running (a
    notebook's kernel, or a test run after papermill has executed chapters).
    """
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as worker:
        return worker.submit(_print_pages, html_dir, pages, out_dir, prepare).result()


def _print_pages(html_dir, pages, out_dir, prepare):
    """:func:`print_pages`, in the calling thread."""
    from playwright.sync_api import sync_playwright

    html_dir, out_dir = Path(html_dir), Path(out_dir)
    files, clipped, scaled = [], {}, 0
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=_chromium(), args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": PRINT_PX, "height": 1000})
            base = html_dir.resolve().as_uri() + "/"
            context.route("**/*", lambda route: route.continue_()
                          if route.request.url.startswith(base) else route.abort())
            page = context.new_page()
            page.emulate_media(media="print")
            for i, name in enumerate(pages):
                page.goto(base + name + ".html", wait_until="load")
                page.add_style_tag(content=PRINT_CSS)
                scaled += page.evaluate(prepare)
                left = page.evaluate(CLIPPED_JS)
                if left:
                    clipped[name] = left
                path = out_dir / f"{i:03d}.pdf"
                page.pdf(path=str(path), format="A4", print_background=True,
                         margin={"top": "15mm", "bottom": "15mm", "left": "12mm",
                                 "right": "12mm"})
                files.append(path)
        finally:
            browser.close()
    return {"files": files, "scaled": scaled, "clipped": clipped}


def book_pdf(out=PDF_PATH, html_dir=None):
    """The whole book as one PDF (builds the HTML first unless ``html_dir`` is given).

    Parameters
    ----------
    out : path-like
        The PDF to write.
    html_dir : path-like, optional
        An existing HTML build (its html folder); default: build one in a
        temporary folder.

    Returns
    -------
    dict
        ``path``, ``pages`` (pages of the PDF), ``chapters`` (pages of the book
        printed), ``scaled`` and ``clipped`` (as in :func:`print_pages`).

    Raises
    ------
    RuntimeError
        When anything would be cut off in print (nothing is written then).
    """
    from pypdf import PdfWriter

    out = Path(out)
    with tempfile.TemporaryDirectory() as tmp:
        html = Path(html_dir) if html_dir else build_html(Path(tmp) / "build")
        pages = toc_pages()
        printed = print_pages(html, pages, Path(tmp))
        if printed["clipped"]:
            lines = [f"{page}: {what}" for page, items in printed["clipped"].items()
                     for what in items[:3]]
            raise RuntimeError("cut off in print:\n" + "\n".join(lines))
        writer = PdfWriter()
        for path in printed["files"]:
            writer.append(str(path))
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "wb") as fh:
            writer.write(fh)
        n = len(writer.pages)
    return {"path": out, "pages": n, "chapters": len(pages), "scaled": printed["scaled"],
            "clipped": printed["clipped"]}
