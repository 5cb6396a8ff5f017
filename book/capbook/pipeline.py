"""The notebook pipeline of a checkout: chapter sources -> papermill -> executed notebooks.

Every chapter is a jupytext MyST source in ``book/chapters``; :func:`reproduce`
executes it with papermill at the defaults of its ``parameters`` cell and
stores the notebook, outputs included, in ``book/executed`` (which the book
renders without re-executing anything).  :func:`chapter_drift` finds a stored
notebook whose cells no longer match its source, :func:`sync_text` copies
prose-only edits without re-running, and :func:`glued_values` reads the
values a chapter stored for its prose, so that one page can quote another's.

The paths are those of the checkout this package sits in (``book/capbook``);
installed from a wheel there are no chapters, and the tools say so.
"""

from __future__ import annotations

import ast
import errno
import json
import os
import sys
import tempfile
from pathlib import Path

import capassign

#: The book's folder of the checkout (chapter sources, executed notebooks,
#: results, and this package).
BOOK_DIR = Path(__file__).resolve().parents[1]
#: The repository root of the checkout (``_config.yml``, ``_toc.yml``, ``tests``).
ROOT = BOOK_DIR.parent
#: The chapters' MyST sources (``book/chapters/*.md``).
CHAPTER_DIR = BOOK_DIR / "chapters"
#: The chapters executed with their outputs (``book/executed/*.ipynb``).
EXECUTED_DIR = BOOK_DIR / "executed"


def chapter_names():
    """Names (file stems) of every chapter source under ``book/chapters``.

    Returns
    -------
    list of str
        Sorted names, e.g. ``"intro"`` for ``book/chapters/intro.md``.

    Examples
    --------
    >>> "intro" in chapter_names()
    True
    """
    names = sorted(p.stem for p in CHAPTER_DIR.glob("*.md"))
    if not names:
        raise FileNotFoundError(errno.ENOENT, "no chapter sources (the book's tools need a "
                                "checkout of the repository)", str(CHAPTER_DIR))
    return names


def _resolve_chapters(names):
    known = chapter_names()
    if not names:
        return _reading_order(known)
    out = []
    for n in names:
        stem = Path(n).stem
        if stem not in known:
            raise ValueError(f"unknown chapter {n!r}; known chapters: {', '.join(known)}")
        out.append(stem)
    return out


def _chapter_reads(name):
    """Chapters whose stored results chapter ``name`` reads (front matter
    ``capassign: reads: [...]``, e.g. the front page reads ``exp_tabular``)."""
    import jupytext

    meta = jupytext.read(CHAPTER_DIR / f"{name}.md").metadata.get("capassign", {})
    return list(meta.get("reads", []))


def _reading_order(names):
    """``names`` sorted, except that a chapter comes after every chapter it reads."""
    out, done = [], set()

    def visit(name, path):
        if name in done:
            return
        if name in path:
            raise ValueError(f"chapters read each other in a cycle: {' -> '.join(path + [name])}")
        for other in _chapter_reads(name):
            if other in names:
                visit(other, path + [name])
        done.add(name)
        out.append(name)

    for name in sorted(names):
        visit(name, [])
    return out


def _clean_executed(nb):
    """Drop run-dependent metadata (timings, papermill bookkeeping, random cell ids).

    The executed notebooks are committed, so everything that changes from run
    to run without changing a result is removed: durations, timestamps and the
    papermill environment record.  Outputs are left untouched.
    """
    nb.metadata.pop("papermill", None)
    for i, cell in enumerate(nb.cells):
        cell.metadata.pop("papermill", None)
        cell.metadata.pop("execution", None)
        if "id" in cell:
            cell.id = f"cell-{i}"  # random ids would churn every commit
    return nb


def reproduce(chapters=(), *, parameters=None, kernel_name="python3", log_output=False):
    """Re-execute chapters through papermill and write the executed notebooks.

    Each chapter source ``book/chapters/NAME.md`` (a jupytext MyST notebook) is
    converted to a notebook, executed by papermill with the defaults of its
    ``parameters`` cell (the paper's settings) unless ``parameters`` overrides
    them, cleaned of run-dependent metadata, and written to
    ``book/executed/NAME.ipynb``.  A failing cell raises and nothing is written
    for that chapter.  Without names every chapter runs, in name order except
    that a chapter runs after the chapters whose results it reads (front
    matter ``capassign: reads: [...]``).

    Parameters
    ----------
    chapters : sequence of str
        Chapter names (see :func:`chapter_names`); empty for every chapter.
    parameters : dict, optional
        Values overriding the chapters' ``parameters`` cells.
    kernel_name : str
        The Jupyter kernel to run.
    log_output : bool
        Echo the cells' output while they run.

    Returns
    -------
    list of pathlib.Path
        The executed notebooks written.

    Examples
    --------
    Running a chapter takes minutes; a name that is no chapter fails at once:

    >>> reproduce(["nope"])
    Traceback (most recent call last):
    ...
    ValueError: unknown chapter 'nope'; known chapters: ...
    """
    names = _resolve_chapters(chapters)
    EXECUTED_DIR.mkdir(parents=True, exist_ok=True)
    # The kernel runs in book/executed: make the modules of this process (capassign
    # and this package) importable there even when they are not installed.
    here = [str(Path(capassign.__file__).resolve().parent),
            str(Path(__file__).resolve().parents[1])]
    old_path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(here + ([old_path] if old_path else []))
    try:
        return [_execute_chapter(name, parameters or {}, kernel_name, log_output)
                for name in names]
    finally:
        if old_path is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old_path


def _execute_chapter(name, parameters, kernel_name, log_output):
    """Execute one chapter source with papermill; write and return its notebook."""
    import jupytext
    import nbformat
    import papermill

    src = CHAPTER_DIR / f"{name}.md"
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / f"{name}.ipynb"
        done = Path(tmp) / f"{name}.out.ipynb"
        nbformat.write(jupytext.read(src), raw)
        papermill.execute_notebook(
            str(raw), str(done), parameters=parameters, kernel_name=kernel_name,
            cwd=str(EXECUTED_DIR), progress_bar=sys.stderr.isatty(), log_output=log_output)
        out = _clean_executed(nbformat.read(done, as_version=4))
    target = EXECUTED_DIR / f"{name}.ipynb"
    nbformat.write(out, target)
    print(f"executed {src.relative_to(ROOT)} -> {target.relative_to(ROOT)}")
    return target


def _cell_key(cell):
    return (cell.cell_type, cell.source.strip())


def chapter_drift(name):
    """Compare a chapter source with its executed notebook.

    Cells papermill injected for overridden parameters are ignored.

    Parameters
    ----------
    name : str
        A chapter name (see :func:`chapter_names`).

    Returns
    -------
    list of str
        Human-readable differences; empty when the executed notebook's cells,
        code and text, are exactly those of the source.

    Examples
    --------
    >>> chapter_drift("intro")
    []
    """
    import jupytext
    import nbformat

    src = jupytext.read(CHAPTER_DIR / f"{name}.md")
    path = EXECUTED_DIR / f"{name}.ipynb"
    if not path.exists():
        return [f"{path.relative_to(ROOT)} is missing: run `python -m capbook reproduce {name}`"]
    exe = nbformat.read(path, as_version=4)
    problems = []
    if src.metadata.get("capassign") != exe.metadata.get("capassign"):
        problems.append("front-matter 'capassign' metadata differs")
    a = [_cell_key(c) for c in src.cells if c.source.strip()]
    b = [_cell_key(c) for c in exe.cells
         if c.source.strip() and "injected-parameters" not in c.metadata.get("tags", [])]
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            problems.append(f"cell {i} differs ({x[0]} in source, {y[0]} executed): "
                            f"{x[1][:60]!r} vs {y[1][:60]!r}")
    if len(a) != len(b):
        problems.append(f"source has {len(a)} cells, executed notebook has {len(b)}")
    return problems


def sync_text(chapters=()):
    """Copy edited prose from chapter sources into executed notebooks.

    Markdown cells may be edited, added or removed (and the ``capassign``
    front-matter metadata changed); the executed code cells, with their
    outputs, are kept.  This is allowed only when the sequence of code cells
    is unchanged, so a text edit never forces a long re-execution while a code
    edit always does.

    Parameters
    ----------
    chapters : sequence of str
        Chapter names (see :func:`chapter_names`); empty for every chapter.

    Returns
    -------
    list of str
        The names of the notebooks that were updated.

    Examples
    --------
    >>> sync_text(["nope"])
    Traceback (most recent call last):
    ...
    ValueError: unknown chapter 'nope'; known chapters: ...
    """
    import jupytext
    import nbformat

    updated = []
    for name in _resolve_chapters(chapters):
        src_nb = jupytext.read(CHAPTER_DIR / f"{name}.md")
        src = [c for c in src_nb.cells if c.source.strip()]
        path = EXECUTED_DIR / f"{name}.ipynb"
        exe = nbformat.read(path, as_version=4)
        injected = [c for c in exe.cells if "injected-parameters" in c.metadata.get("tags", [])]
        code = [c for c in exe.cells if c.cell_type == "code" and c.source.strip()
                and "injected-parameters" not in c.metadata.get("tags", [])]
        if ([c.source.strip() for c in src if c.cell_type == "code"]
                != [c.source.strip() for c in code]):
            raise ValueError(f"chapter {name}: code cells changed; "
                             f"re-execute it with `python -m capbook reproduce {name}`")
        cells, executed = [], iter(code)
        for c in src:
            if c.cell_type != "code":
                cells.append(c)
                continue
            cells.append(next(executed))
            if "parameters" in c.metadata.get("tags", []):
                cells.extend(injected)
        meta = dict(exe.metadata)
        meta.pop("capassign", None)
        if "capassign" in src_nb.metadata:
            meta["capassign"] = src_nb.metadata["capassign"]
        new = _clean_executed(nbformat.v4.new_notebook(cells=cells, metadata=meta))
        if nbformat.writes(new) != nbformat.writes(exe):
            nbformat.write(new, path)
            updated.append(name)
            print(f"synced text of {name}")
    return updated


def glued_values(chapter, path=None):
    """The values a chapter stored with :func:`capbook.glue`, read from its executed notebook.

    This is how one page (the reproduction scorecard, the front page) uses
    another's results without re-computing them or typing them: the values
    are those the executed chapter holds, so they cannot drift from it.

    Parameters
    ----------
    chapter : str
        A chapter name (see :func:`chapter_names`).
    path : str or Path, optional
        The notebook to read; default ``book/executed/<chapter>.ipynb``.

    Returns
    -------
    dict
        Glue name -> value (numbers, strings, lists and dicts of them).

    Examples
    --------
    >>> glued_values("ext_eta")["eta_runs"]
    100
    """
    nb_path = Path(path) if path is not None else EXECUTED_DIR / f"{chapter}.ipynb"
    if not nb_path.is_file():
        raise ValueError(f"no executed notebook for chapter {chapter!r} at {nb_path}")
    nb = json.loads(nb_path.read_text(encoding="utf-8"))
    values = {}
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []):
            scrap = out.get("metadata", {}).get("scrapbook", {})
            if "name" not in scrap:
                continue
            name, prefix = scrap["name"], scrap.get("mime_prefix", "")
            text = out.get("data", {}).get(prefix + "text/plain")
            text = "".join(text) if isinstance(text, list) else text
            try:
                values[name] = ast.literal_eval(text)
            except (ValueError, SyntaxError, TypeError):
                values[name] = text
    return values
