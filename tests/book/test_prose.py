"""Numbers in a chapter's findings are bound to its computation.

The "What we find" section of every chapter states results, and so does the
"In brief" block an experiment chapter opens with; re-running the
chapter with other parameters (``python -m capbook reproduce NAME -p ...``)
must change them with it. So every number there is inserted by myst-nb's
``{glue:text}`` (or lives in math, inline code or a reference such as "Fig. 3"
or "App. H.5"); a bare number typed into the prose fails this test.

Chapters listed in ``PENDING`` are not checked yet; reference pages without
findings (``NO_FINDINGS``) are not checked.
"""

import re

import pytest

import capbook as cb

PENDING = set()

# Pages that report no findings: the front page and the paper-to-code map.
NO_FINDINGS = {"intro", "paper_index"}

# Pieces of MyST that may hold digits without stating a computed number.
_MARKUP = [
    re.compile(r"```.*?```", re.S),                   # fenced blocks
    re.compile(r"\$\$.*?\$\$", re.S),                 # display math
    re.compile(r"\$[^$\n]+\$"),                       # inline math
    re.compile(r"\{[a-z:-]+\}`[^`]*`"),               # roles: glue, cite, ref, numref, eq ...
    re.compile(r"`[^`\n]*`"),                         # inline code
    re.compile(r"\]\([^)]*\)"),                       # link targets
    re.compile(r"\(([a-z0-9_-]+)\)="),                # labels
]
# References to the paper's or the book's numbered things, e.g. "Fig. 3a-d",
# "Table 4", "Eq. 1-2", "App. H.5", "Sec. 4.2", "Algorithm 1".
_REFERENCE = re.compile(
    r"\b(?:Figs?\.|Figures?|Tables?|Eqs?\.|Sec\.|Sections?|App\.|Appendix|Algorithm|"
    r"Theorem|Thm\.?|Lemma|Prop\.|Proposition|Corollary|Part|Chapter)\s*"
    r"[A-Z]?\d+(?:\.\d+)*[a-z]?(?:\s*(?:[-–,]|and|or)\s*[A-Z]?\d+(?:\.\d+)*[a-z]?)*")
# Names that contain digits (ImageNet-16H, Camelyon17, MiniLM-L6, alpha_1 written as a1).
_NAME = re.compile(r"\b[\w-]*[A-Za-z_][\w-]*\d[\w-]*\b|\b\d+[A-Za-z][\w-]*\b")


def findings(text):
    """The text of the "What we find" section(s) of a chapter source.

    Code cells are dropped first: a ``# comment`` inside them is not a heading.
    """
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    parts = re.split(r"^(#{1,6} .*)$", text, flags=re.M)
    out, keep = [], False
    for part in parts:
        if re.match(r"^#{1,6} ", part):
            keep = "what we find" in part.lower()
        elif keep:
            out.append(part)
    return "\n".join(out)


def briefs(text):
    """The text of a chapter's "In brief" block(s) (``:::{admonition} In brief`` ... ``:::``)."""
    return "\n".join(re.findall(r"^:::\{admonition\} In brief\n(.*?)^:::$", text,
                                flags=re.S | re.M))


def bare_numbers(text):
    """Numbers typed into prose: what is left after markup, references and names."""
    for pattern in _MARKUP:
        text = pattern.sub(" ", text)
    text = _REFERENCE.sub(" ", text)
    text = _NAME.sub(" ", text)
    return re.findall(r"(?<![\w.])\d[\d,.]*\d|(?<![\w.])\d(?![\w])", text)


def test_the_check_finds_typed_numbers_and_spares_markup():
    text = ("## What we find\n\nThe error is 0.107 at {glue:text}`x:.3f`; Fig. 3a-d and "
            "App. H.5 agree, as in Eq. 1-2 and $\\alpha_1 = 0.5$ on ImageNet-16H. "
            "It took 44 of {glue:text}`n` runs.\n\n## Next\n\n0.5 is not a finding.")
    assert bare_numbers(findings(text)) == ["0.107", "44"]
    code = "## What we find\n\nIt is {glue:text}`x`.\n\n```{code-cell}\n# What we find 0.5\n```\n"
    assert bare_numbers(findings(code)) == []


@pytest.mark.parametrize("name", cb.chapter_names())
def test_findings_hold_no_typed_numbers(name):
    if name in PENDING:
        pytest.skip(f"{name}: prose not converted to glue yet")
    if name in NO_FINDINGS:
        pytest.skip(f"{name}: a reference page, no findings")
    text = (cb.CHAPTER_DIR / f"{name}.md").read_text(encoding="utf-8")
    section = findings(text)
    assert section.strip(), f"{name}: no 'What we find' section"
    typed = bare_numbers(section)
    assert not typed, f"{name}: numbers typed into 'What we find' (glue them): {typed}"


def test_the_brief_check_reads_the_block():
    text = ("# T\n\n:::{admonition} In brief\n:class: ca-brief\n- It is 0.31, "
            "{glue:text}`x:.2f` on ImageNet-16H.\n:::\n\nAfter 0.5.\n")
    assert bare_numbers(briefs(text)) == ["0.31"]


@pytest.mark.parametrize("name", cb.chapter_names())
def test_briefs_hold_no_typed_numbers(name):
    text = (cb.CHAPTER_DIR / f"{name}.md").read_text(encoding="utf-8")
    typed = bare_numbers(briefs(text))
    assert not typed, f"{name}: numbers typed into 'In brief' (glue them): {typed}"


# The chapters that report an experiment (as in tests/book/test_browser.py).
EXPERIMENT = re.compile(r"^(exp_|ext_|beyond_)|^(data_agents|data_contexts|fast_engine|router_live|router_ope)$")


@pytest.mark.parametrize("name", [n for n in cb.chapter_names() if EXPERIMENT.search(n)])
def test_experiment_chapters_open_with_a_brief(name):
    """The first block after the title is the "In brief" finding, with glued numbers."""
    text = (cb.CHAPTER_DIR / f"{name}.md").read_text(encoding="utf-8")
    body = re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.S)
    after_title = re.split(r"^# .*$", body, maxsplit=1, flags=re.M)[-1].lstrip()
    assert after_title.startswith(":::{admonition} In brief"), \
        f"{name}: the title is not followed by an 'In brief' block"
    assert "{glue:text}`" in briefs(text), f"{name}: 'In brief' quotes no glued number"
