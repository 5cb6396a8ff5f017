"""The book's ways out and in: the paper linked, DOIs in the bibliography, a reading
guide that names every chapter of the table of contents."""

import re
from pathlib import Path
from urllib.parse import unquote

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = ROOT / "book" / "chapters"
ARXIV = "https://arxiv.org/abs/2605.27999"
DOI = re.compile(r"^10\.\d{4,9}/\S+$")


def _bib_entries():
    """{key: {field: value}} of book/references.bib (one field per line, as written)."""
    text = (ROOT / "book" / "references.bib").read_text(encoding="utf-8")
    entries = {}
    for m in re.finditer(r"@\w+\{([^,]+),(.*?)\n\}", text, re.S):
        entries[m[1]] = dict(re.findall(r"^\s*(\w+)\s*=\s*\{(.*)\},?\s*$", m[2], re.M))
    return entries


def _guide_problems(intro_text, toc):
    """Chapters of ``toc`` (the parsed _toc.yml) that the intro's reading guide does not
    link, by their labels ``(name)=`` or, for a page without one, by ``{doc}``."""
    guide = intro_text.split("## How to read this book", 1)[-1].split("\n## ", 1)[0]
    missing = []
    for part in toc["parts"]:
        for chapter in part["chapters"]:
            name = Path(chapter["file"]).name
            source = CHAPTERS / f"{name}.md"
            if source.exists():
                label = re.search(r"^\((.+)\)=$", source.read_text(encoding="utf-8"), re.M)[1]
                if f"{{ref}}`{label}`" not in guide:
                    missing.append(name)
            elif f"{{doc}}`../{name}`" not in guide:
                missing.append(name)
    return missing


def test_reading_guide_names_every_chapter():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    intro = (CHAPTERS / "intro.md").read_text(encoding="utf-8")
    assert _guide_problems(intro, toc) == []
    # the check itself: a guide without its Part IV chapter on changing agents is caught
    dropped = intro.replace("{ref}`beyond_changes`", "the chapter on changes")
    assert _guide_problems(dropped, toc) == ["beyond_changes"]


def test_the_paper_is_linked():
    bib = _bib_entries()["wu2026assign"]
    assert bib["url"] == ARXIV and bib["doi"] == "10.48550/arXiv.2605.27999"
    assert f"]({ARXIV})" in (CHAPTERS / "intro.md").read_text(encoding="utf-8")
    assert f"]({ARXIV})" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_bibliography_dois():
    """Every journal article and arXiv preprint has a well-formed DOI; the venues that
    assign none (conference proceedings, JMLR, TMLR, books) are listed in the file."""
    entries = _bib_entries()
    dois = {key: e["doi"] for key, e in entries.items() if "doi" in e}
    assert all(DOI.match(d) for d in dois.values()), dois
    articles = {key for key, e in entries.items()
                if "journal" in e and "Machine Learning Research" not in e["journal"]
                and "Neural Information" not in e["journal"]}
    assert articles <= set(dois), sorted(articles - set(dois))
    assert len(dois) == 7


def test_dois_are_links_in_the_built_bibliography(book_html):
    page = (book_html / "book" / "bibliography.html").read_text(encoding="utf-8")
    links = {unquote(d) for d in re.findall(r'href="https://doi\.org/([^"]+)"', page)}
    cited = set()
    for source in CHAPTERS.glob("*.md"):
        for keys in re.findall(r"\{cite:[tp]\}`([^`]+)`", source.read_text(encoding="utf-8")):
            cited.update(k.strip() for k in keys.split(","))
    # the bibliography lists the works the chapters cite, each with its DOI as a link
    assert links == {e["doi"] for k, e in _bib_entries().items() if "doi" in e and k in cited}
    assert f'href="{ARXIV}"' in page
