"""Sphinx extension: one citation style, author-year, in the text and in the bibliography.

sphinxcontrib-bibtex cites author-year in the text (``bibtex_reference_style``)
but labels the bibliography with the numbers of its default formatting style,
so a reader meets "Wu et al. [2026]" in a chapter and "[12]" at the back.
This extension registers two plugins, selected in ``_config.yml``:

* ``author_year_round`` (a referencing style): author-year in round brackets,
  "Wu et al. (2026)" for ``{cite:t}`` and "(Wu et al., 2026)" for ``{cite:p}``;
* ``author_year`` (a pybtex formatting style): the entries of pybtex's
  ``unsrt`` style sorted by author, year and title, each labelled with the
  same author-year text the chapters cite ("Wu et al. 2026"; two authors
  joined by "and", three or more as the first one "et al."; a letter added
  to labels that would repeat). The book's style sheet shows the label
  without brackets, as the lead of its entry.
"""

from collections import Counter
from dataclasses import dataclass, field

from pybtex.plugin import register_plugin
from pybtex.style.formatting.unsrt import Style as UnsrtStyle
from pybtex.style.labels import BaseLabelStyle
from pybtex.style.sorting.author_year_title import SortingStyle as AuthorYearTitleSorting

import sphinxcontrib.bibtex.plugin
from sphinxcontrib.bibtex.style.referencing import BracketStyle
from sphinxcontrib.bibtex.style.referencing.author_year import AuthorYearReferenceStyle


def _round():
    return BracketStyle(left="(", right=")")


@dataclass
class RoundAuthorYearReferenceStyle(AuthorYearReferenceStyle):
    """Author-year citations in round brackets."""

    bracket_textual: BracketStyle = field(default_factory=_round)
    bracket_parenthetical: BracketStyle = field(default_factory=_round)
    bracket_author: BracketStyle = field(default_factory=_round)
    bracket_label: BracketStyle = field(default_factory=_round)
    bracket_year: BracketStyle = field(default_factory=_round)


def _surnames(entry):
    persons = entry.persons.get("author") or entry.persons.get("editor") or []
    return [" ".join(p.last_names).replace("{", "").replace("}", "") for p in persons]


def author_year_label(entry):
    """'Neely 2010', 'Chapelle and Li 2011', 'Wu et al. 2026' (as cited in the text)."""
    names = _surnames(entry)
    if not names:
        who = entry.fields.get("key", entry.key)
    elif len(names) == 1:
        who = names[0]
    elif len(names) == 2:
        who = f"{names[0]} and {names[1]}"
    else:
        who = f"{names[0]} et al."
    return f"{who} {entry.fields.get('year', 'n.d.')}"


class AuthorYearLabelStyle(BaseLabelStyle):
    """Labels of :func:`author_year_label`, with a, b, ... where two would be equal."""

    def format_labels(self, sorted_entries):
        entries = list(sorted_entries)
        labels = [author_year_label(e) for e in entries]
        repeats, seen = Counter(labels), Counter()
        for label in labels:
            if repeats[label] > 1:
                seen[label] += 1
                yield label + "abcdefghijklmnopqrstuvwxyz"[seen[label] - 1]
            else:
                yield label


class AuthorYearStyle(UnsrtStyle):
    """pybtex's unsrt entries, sorted by author-year-title and labelled author-year."""

    default_sorting_style = "author_year_title"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.label_style = AuthorYearLabelStyle()
        self.sort_style = AuthorYearTitleSorting()
        self.format_labels = self.label_style.format_labels


register_plugin("pybtex.style.formatting", "author_year", AuthorYearStyle)
sphinxcontrib.bibtex.plugin.register_plugin(
    "sphinxcontrib.bibtex.style.referencing", "author_year_round", RoundAuthorYearReferenceStyle)


def setup(app):
    return {"parallel_read_safe": True, "parallel_write_safe": True}
