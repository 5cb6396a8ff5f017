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
import copy
import errno
import json
import math
import numbers
import os
import shutil
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
        if n not in known:       # a name, not a path: book/x/intro.md is not intro
            raise ValueError(f"unknown chapter {n!r}; known chapters: {', '.join(known)}")
        if n in out:
            raise ValueError(f"chapter {n!r} is named twice; name each chapter once")
        out.append(n)
    return out


def _write_notebook(nb, path):
    """Write notebook ``nb`` to ``path`` as ``nbformat.write`` would, atomically
    (a temporary file in the same folder, fsync, rename): a stored notebook is
    never left truncated by an interruption or a full disk."""
    import nbformat

    text = nbformat.writes(nb)
    capassign._write_text_atomic(path, text if text.endswith("\n") else text + "\n")


def _chapter_parameters(name):
    """The names chapter ``name`` assigns in its ``parameters`` cell, in order
    (``None`` when it has no such cell): the only names a run may override.
    A dict, each name to its default where that is a literal (else ``...``)."""
    import jupytext

    cells = [c for c in jupytext.read(CHAPTER_DIR / f"{name}.md").cells
             if c.cell_type == "code" and "parameters" in c.metadata.get("tags", [])]
    if not cells:
        return None
    names = {}
    for cell in cells:
        try:
            body = ast.parse(cell.source).body
        except SyntaxError:
            raise ValueError(f"chapter {name}: its parameters cell is not plain Python") from None
        for node in body:
            targets = (node.targets if isinstance(node, ast.Assign) else
                       [node.target] if isinstance(node, ast.AnnAssign) else [])
            try:
                default = ast.literal_eval(node.value) if node.value is not None else ...
            except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
                default = ...
            for t in targets:
                if isinstance(t, ast.Name) and t.id not in names:
                    names[t.id] = default
    return names


def _same_kind(value, default):
    """Whether an override ``value`` can stand for a parameter whose default is
    ``default``: the same kind of data (an int for a float; ``None`` either way;
    anything for a default that is not a literal)."""
    if default is ... or default is None or value is None:
        return True
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(default, bool)
    if isinstance(default, numbers.Real):
        return isinstance(value, int if isinstance(default, int) else numbers.Real)
    kinds = (str, list, dict)
    return any(isinstance(default, k) and isinstance(value, k) for k in kinds) or (
        isinstance(default, tuple) and isinstance(value, list))


#: How deep lists and dicts may nest in a chapter parameter's value.
_PARAMETER_DEPTH = 32


def _parameter_data(value, where, depth=0):
    """``value`` as JSON data (``None``, bool, int, finite float, str, and lists
    and str-keyed dicts of them; a tuple becomes a list), else ``TypeError`` /
    ``ValueError`` naming ``where``."""
    if depth > _PARAMETER_DEPTH:
        raise ValueError(f"{where} nests lists or dicts deeper than {_PARAMETER_DEPTH} levels")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return str(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        if not math.isfinite(value):
            raise ValueError(f"{where} must be finite, got {value!r}")
        return float(value)
    if isinstance(value, (list, tuple)):
        return [_parameter_data(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value)]
    if isinstance(value, dict):
        for k in value:
            if not isinstance(k, str):
                raise TypeError(f"{where} has the key {k!r}; keys must be str")
        return {k: _parameter_data(v, f"{where}[{k!r}]", depth + 1) for k, v in value.items()}
    raise TypeError(f"{where} must be JSON data (None, bool, int, float, str, list, dict), "
                    f"got {value!r}")


def _check_parameters(chapters, parameters, name="parameters"):
    """``parameters`` checked for a run of ``chapters`` (names as :func:`reproduce`
    takes them): a dict whose every name is assigned in the ``parameters``
    cell of every chapter run, with values that are data.

    Papermill writes each value into the executed notebook as Python code
    (a cell of assignments); only names of the chapter's cell are accepted,
    so a misspelt name is refused instead of leaving the chapter at its
    defaults, and nothing but an identifier of that cell ever stands left of
    ``=``.  Each value must be JSON data and must come back equal from the
    literal papermill writes for it, so that it arrives as data, never as
    code.  Refusals are one line naming ``name``.
    """
    if parameters is None:
        return {}
    if not isinstance(parameters, dict):
        raise TypeError(f"{name} must be a dict of parameter names and values, "
                        f"got {parameters!r}")
    if not parameters:
        return {}
    from papermill.translators import PythonTranslator

    out = {}
    for key, value in parameters.items():
        if not isinstance(key, str):
            raise TypeError(f"{name}: parameter names must be str, got {key!r}")
        data = _parameter_data(value, f"{name} {key}")
        try:
            same = ast.literal_eval(PythonTranslator.translate(data)) == data
        except (ValueError, SyntaxError, RecursionError, MemoryError):
            same = False
        if not same:
            raise ValueError(f"{name} {key}: the value {value!r} does not pass to papermill "
                             f"as data")
        out[key] = data
    for chapter in _resolve_chapters(chapters):
        known = _chapter_parameters(chapter)
        for key in out:
            if known is None:
                raise ValueError(f"{name} {key}: chapter {chapter} has no parameters cell; "
                                 f"it takes no parameters")
            if key not in known:
                raise ValueError(f"{name} {key!r} is not a parameter of chapter {chapter}; "
                                 f"its parameters: {', '.join(known)}")
            if not _same_kind(out[key], known[key]):
                raise ValueError(f"{name} {key}: chapter {chapter} sets it to "
                                 f"{known[key]!r} ({type(known[key]).__name__}); got "
                                 f"{out[key]!r} ({type(out[key]).__name__})")
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


#: The matplotlib backend of the chapters' kernels: figures become outputs of
#: the cells that draw them (Jupyter's default, set explicitly by :func:`reproduce`).
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"


def _restore_env(name, value):
    """Put the environment variable ``name`` back to ``value`` (``None``: unset)."""
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def reproduce(chapters=(), *, parameters=None, kernel_name="python3", log_output=False):
    """Re-execute chapters through papermill and write the executed notebooks.

    Each chapter source ``book/chapters/NAME.md`` (a jupytext MyST notebook) is
    converted to a notebook, executed by papermill with the defaults of its
    ``parameters`` cell (the paper's settings) unless ``parameters`` overrides
    them, cleaned of run-dependent metadata, and written to
    ``book/executed/NAME.ipynb``.  A failing cell raises and nothing is written
    for that chapter.  Without names every chapter runs, in name order except
    that a chapter runs after the chapters whose results it reads (front
    matter ``capassign: reads: [...]``).  The kernels draw with matplotlib's
    inline backend whatever ``MPLBACKEND`` the caller's shell sets, so that
    every figure is stored with the cell that draws it.

    Parameters
    ----------
    chapters : sequence of str
        Chapter names (see :func:`chapter_names`); empty for every chapter.
    parameters : dict, optional
        Values overriding the chapters' ``parameters`` cells: each name must
        be assigned in the ``parameters`` cell of every chapter run, each
        value JSON data (``None``, bool, int, finite float, str, lists and
        str-keyed dicts of them; a tuple is passed as a list).  Papermill
        passes them to the chapter as literals in a cell of its own.
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
    parameters = _check_parameters(names, parameters)
    EXECUTED_DIR.mkdir(parents=True, exist_ok=True)
    # The kernel runs in book/executed: make the modules of this process (capassign
    # and this package) importable there even when they are not installed.
    here = [str(Path(capassign.__file__).resolve().parent),
            str(Path(__file__).resolve().parents[1])]
    old_path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(here + ([old_path] if old_path else []))
    # The chapters of this call share a memo of simulations (capassign.MEMO_ENV): one
    # that several chapters run (same code, data and arguments) is computed once.
    # A fresh folder unless the caller named one.
    memo = (None if os.environ.get(capassign.MEMO_ENV)
            else tempfile.mkdtemp(prefix="capassign-memo-"))
    if memo:
        os.environ[capassign.MEMO_ENV] = memo
    # A non-inline MPLBACKEND in the caller's shell (Agg, say) would reach the
    # kernel and leave every figure out of the stored notebook, silently.
    old_backend = os.environ.get("MPLBACKEND")
    os.environ["MPLBACKEND"] = INLINE_BACKEND
    try:
        return [_execute_chapter(name, parameters, kernel_name, log_output)
                for name in names]
    finally:
        _restore_env("PYTHONPATH", old_path)
        _restore_env("MPLBACKEND", old_backend)
        if memo:
            os.environ.pop(capassign.MEMO_ENV, None)
            shutil.rmtree(memo, ignore_errors=True)


#: Seconds the executor waits for a cell's last outputs after the cell has finished
#: (nbclient's default, 4, is too short on a loaded machine: a cell that glues many
#: values then fails with "Timeout waiting for IOPub output").
_IOPUB_TIMEOUT = 300


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
            cwd=str(EXECUTED_DIR), progress_bar=sys.stderr.isatty(), log_output=log_output,
            iopub_timeout=_IOPUB_TIMEOUT)
        out = _clean_executed(nbformat.read(done, as_version=4))
    target = EXECUTED_DIR / f"{name}.ipynb"
    _write_notebook(out, target)
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
            # copies: renumbering the new notebook's ids must not touch ``exe``,
            # which the comparison below writes out as it was read
            cells.append(copy.deepcopy(next(executed)))
            if "parameters" in c.metadata.get("tags", []):
                cells.extend(copy.deepcopy(injected))
        meta = dict(exe.metadata)
        meta.pop("capassign", None)
        if "capassign" in src_nb.metadata:
            meta["capassign"] = src_nb.metadata["capassign"]
        new = _clean_executed(nbformat.v4.new_notebook(cells=cells, metadata=meta))
        if nbformat.writes(new) != nbformat.writes(exe):
            _write_notebook(new, path)
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
