"""The chapters' code tells the story: most of it visible, no cell too long to follow.

Over all chapter sources (``book/chapters/*.md``), at least ``VISIBLE_SHARE_MIN`` of
the code lines sit in cells a reader sees without unfolding anything: cells tagged
neither ``hide-input``, ``hide-cell``, ``remove-input`` nor ``remove-cell``; and no
code cell, hidden or not, is longer than ``CELL_LINES_MAX`` lines. The plumbing
of a page (tables, glue, asserts, formatting) belongs in named functions of
``capbook``, so that what is left in a chapter is the experiment itself.

A code line is a line of a cell's source, blank lines included.
"""

from pathlib import Path

import jupytext

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = ROOT / "book" / "chapters"

#: Least share of the book's code lines in visible cells.
VISIBLE_SHARE_MIN = 0.75
#: Most lines of any one code cell.
CELL_LINES_MAX = 25
#: Tags that keep a cell's code from the reader's first view.
HIDING_TAGS = frozenset({"hide-input", "hide-cell", "remove-input", "remove-cell"})


def code_visibility(text):
    """Code lines of a MyST chapter source: ``(lines, visible lines, longest cell)``."""
    nb = jupytext.reads(text, fmt="md:myst")
    lines = visible = longest = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        n = len(cell.source.splitlines())
        lines += n
        visible += 0 if HIDING_TAGS & set(cell.metadata.get("tags", [])) else n
        longest = max(longest, n)
    return lines, visible, longest


def visibility_report(counts):
    """What fails over ``{chapter: (lines, visible, longest)}``: the book's visible share
    below VISIBLE_SHARE_MIN and every cell over CELL_LINES_MAX lines, with a table of
    every chapter's numbers (empty list: nothing fails)."""
    lines = sum(c[0] for c in counts.values())
    visible = sum(c[1] for c in counts.values())
    share = visible / lines if lines else 1.0
    problems = []
    if share < VISIBLE_SHARE_MIN:
        problems.append(f"{visible} of {lines} code lines visible ({share:.1%}, at least "
                        f"{VISIBLE_SHARE_MIN:.0%} wanted)")
    long = {name: c[2] for name, c in counts.items() if c[2] > CELL_LINES_MAX}
    if long:
        problems.append(f"{len(long)} chapters with a code cell over {CELL_LINES_MAX} lines: "
                        + ", ".join(f"{n} ({k})" for n, k in long.items()))
    if problems:
        problems.append("chapter                  lines visible  share  longest cell")
        problems += [f"{name:24s} {c[0]:5d} {c[1]:7d} {c[1] / max(c[0], 1):6.0%} {c[2]:13d}"
                     for name, c in sorted(counts.items(), key=lambda kv: kv[1][1] / max(
                         kv[1][0], 1))]
    return problems


SYNTHETIC = '''---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---

# A chapter

```{code-cell} ipython3
:tags: [parameters]
runs = 10
```

Some prose with a fenced block that is not a cell:

```python
not = "counted"
```

```{code-cell} ipython3
:tags: [hide-input]
a = 1

b = 2
```

```{code-cell} ipython3
:tags: [remove-cell]
glue("x", 1)
```

```{code-cell} ipython3
---
tags: [remove-output]
---
print(runs)
print(runs + 1)
```
'''


def test_code_visibility_counts_a_synthetic_chapter():
    """Cells are counted by their tags (remove-output hides no code; fenced blocks of the
    text are not cells); blank lines count."""
    assert code_visibility(SYNTHETIC) == (7, 3, 3)
    long = SYNTHETIC.replace("a = 1\n", "a = 1\n" * 30)
    assert code_visibility(long) == (36, 3, 32)


def test_the_report_fails_and_names_each_chapter():
    fine = {"a": (100, 80, 25), "b": (20, 15, 10)}
    assert visibility_report(fine) == []
    report = visibility_report({"a": (100, 40, 30), "b": (20, 20, 10)})
    assert report[0] == "60 of 120 code lines visible (50.0%, at least 75% wanted)", report
    assert report[1] == "1 chapters with a code cell over 25 lines: a (30)", report
    assert [r.split()[0] for r in report[3:]] == ["a", "b"], report


def test_the_book_code_is_visible_and_short():
    counts = {p.stem: code_visibility(p.read_text(encoding="utf-8"))
              for p in sorted(CHAPTERS.glob("*.md"))}
    assert len(counts) > 20 and sum(c[0] for c in counts.values()) > 0, counts
    report = visibility_report(counts)
    assert not report, "\n".join(report)
