"""The book's own Sphinx extensions (book/_ext): repository buttons and citation style.

* ``repository_buttons``: the repository, issue and Binder buttons come from one
  setting, ``repository.url`` in ``_config.yml`` (empty: no button), or from
  ``CAPASSIGN_REPOSITORY_URL`` at build time; the default build links to no
  repository at all;
* ``bibliography_style``: citations are author-year in round brackets in the
  text and the bibliography's entries are labelled with the same author-year
  text (no numbers).
"""

import re
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "book" / "_ext"))

import bibliography_style  # noqa: E402
import repository_buttons  # noqa: E402


def test_repository_url_is_one_setting_empty_by_default():
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    assert config["repository"]["url"] == ""
    assert not config["html"]["use_repository_button"] and not config["html"]["use_issues_button"]
    assert repository_buttons.repository_url("", environ={}) == ""
    env = {repository_buttons.ENV: "https://github.com/someone/capassign/"}
    assert repository_buttons.repository_url("", environ=env) == \
        "https://github.com/someone/capassign"
    assert repository_buttons.repository_url("https://gitlab.com/a/b", environ={}) == \
        "https://gitlab.com/a/b"


@pytest.mark.parametrize("url", ["github.com/a/b", "http://github.com/a/b",
                                 "https://github.com/a", "https://github.com/a/b c"])
def test_a_malformed_repository_url_stops_the_build(url):
    from sphinx.errors import ExtensionError

    with pytest.raises(ExtensionError, match="repository url must look like"):
        repository_buttons.repository_url(url, environ={})


class _Config:
    def __init__(self, url):
        self.html_theme_options = {"repository_url": url, "use_repository_button": False,
                                   "launch_buttons": {"binderhub_url": "https://mybinder.org",
                                                      "notebook_interface": "classic"}}


def test_buttons_follow_the_setting(monkeypatch):
    monkeypatch.delenv(repository_buttons.ENV, raising=False)
    off = _Config("")
    repository_buttons.set_buttons(None, off)
    opts = off.html_theme_options
    assert not opts["use_repository_button"] and not opts["use_issues_button"]
    assert "binderhub_url" not in opts["launch_buttons"]
    on = _Config("https://github.com/someone/capassign")
    repository_buttons.set_buttons(None, on)
    opts = on.html_theme_options
    assert opts["use_repository_button"] and opts["use_issues_button"]
    assert opts["launch_buttons"]["binderhub_url"] == "https://mybinder.org"


def test_the_default_build_links_to_no_repository(book_html):
    pages = sorted(book_html.rglob("*.html"))
    assert pages
    bad = [f"{p.relative_to(book_html)}: {m}" for p in pages
           for m in re.findall(r'href="(https://(?:mybinder\.org|github\.com)[^"]*)"',
                               p.read_text(encoding="utf-8"))]
    assert not bad, "links to a repository or Binder:\n" + "\n".join(bad[:10])


class _Entry:
    def __init__(self, authors, year, key="k"):
        from pybtex.database import Person

        self.persons = {"author": [Person(a) for a in authors]}
        self.fields = {"year": year}
        self.key = key


def test_author_year_labels():
    label = bibliography_style.author_year_label
    assert label(_Entry(["Neely, Michael J."], "2010")) == "Neely 2010"
    assert label(_Entry(["Chapelle, Olivier", "Li, Lihong"], "2011")) == "Chapelle and Li 2011"
    assert label(_Entry(["Wu, Shang", "Kher, Saatvik", "Smyth, Padhraic"], "2026")) == \
        "Wu et al. 2026"
    twins = [_Entry(["Doe, Jane"], "2020"), _Entry(["Doe, Jane"], "2020"),
             _Entry(["Roe, Ann"], "2020")]
    assert list(bibliography_style.AuthorYearLabelStyle().format_labels(twins)) == \
        ["Doe 2020a", "Doe 2020b", "Roe 2020"]


def test_citations_are_author_year_in_text_and_bibliography(book_html):
    bib = (book_html / "book" / "bibliography.html").read_text(encoding="utf-8")
    labels = re.findall(r'<span class="label"><span class="fn-bracket">\[</span>(.*?)'
                        r'<span class="fn-bracket">\]</span></span>', bib)
    assert len(labels) >= 10, labels
    assert all(re.fullmatch(r".+ (\d{4}[a-z]?|n\.d\.)", lab) for lab in labels), labels
    assert labels == sorted(labels, key=str.lower), "entries are not sorted by author"
    intro = (book_html / "book" / "executed" / "intro.html").read_text(encoding="utf-8")
    text = re.sub(r"<[^>]+>", "", intro)
    assert "Wu et al. (2026)" in text, "the front page does not cite Wu et al. (2026)"
