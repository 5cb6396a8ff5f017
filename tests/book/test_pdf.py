"""The whole book as one PDF (``python -m capbook pdf``): built from the HTML book by
the system's Chromium, every page of the table of contents in order, folds open,
nothing cut off."""

import asyncio
import os
import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest

from capbook import pdf, pipeline

pypdf = pytest.importorskip("pypdf", reason="pypdf is not installed (the test extra has it)")
pytestmark = pytest.mark.skipif(
    not (os.environ.get("CAPASSIGN_CHROMIUM") or shutil.which("chromium")),
    reason="Chromium is not installed: `apt-get install chromium`, or set CAPASSIGN_CHROMIUM")

# A box that clips what it holds and that the print preparation does not know, and a
# code line far wider than the page (which print wraps): only the first is cut off.
INJECT_JS = """
async () => {
  const scaled = await (%s)();
  const section = document.querySelector('.bd-article section');
  const box = document.createElement('div');
  box.style.cssText = 'overflow-x: auto; width: 300px';
  box.innerHTML = '<span style="display: inline-block; width: 3000px">a clipped box</span>';
  const pre = document.createElement('pre');
  pre.textContent = 'x = ' + '1 + '.repeat(200) + '1';
  section.append(box, pre);
  return scaled;
}
""" % pdf.PREPARE_JS.strip()


def test_the_book_as_one_pdf(book_html, tmp_path):
    out = tmp_path / "book.pdf"
    done = pdf.book_pdf(out, html_dir=book_html)
    pages = pdf.toc_pages()
    # every chapter source, and the bibliography page
    assert done["clipped"] == {} and done["chapters"] == len(pages), done
    assert len(pages) == len(pipeline.chapter_names()) + 1, pages
    reader = pypdf.PdfReader(str(out))
    assert len(reader.pages) == done["pages"]
    # every chapter has at least a page; the book is long (302 pages when written)
    assert 200 <= done["pages"] <= 600, done
    text = " ".join(" ".join(page.extract_text().split()) for page in reader.pages)
    # folds are open: the text of a folded dropdown and of a folded table is printed
    assert "Greedy and Thompson sampling agree" in text     # exp_tabular, a dropdown
    assert "What the colours mean" in text and "Routing live tasks" in text


def test_the_clip_check_itself(book_html, tmp_path):
    printed = pdf.print_pages(book_html, ["book/executed/intro"], tmp_path, prepare=INJECT_JS)
    (found,) = printed["clipped"].values()
    assert any("a clipped box" in what for what in found), found
    assert not any(what.startswith("pre") for what in found), found
    assert printed["files"][0].stat().st_size > 10_000


def test_pages_print_where_an_asyncio_loop_runs(book_html, tmp_path):
    """Playwright's synchronous API refuses a thread with a running asyncio loop
    (a notebook kernel; this test run once papermill has executed chapters):
    the pages are printed from a thread of their own."""
    async def inside_a_loop():
        return pdf.print_pages(book_html, ["book/executed/intro"], tmp_path)

    # a thread of the test's own, whatever loop this one may run: asyncio.run
    # there gives the call a running loop in its thread
    with ThreadPoolExecutor(max_workers=1) as thread:
        printed = thread.submit(asyncio.run, inside_a_loop()).result()
    assert len(printed["files"]) == 1 and printed["clipped"] == {}
