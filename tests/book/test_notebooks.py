"""Checks of the notebook pipeline: sources -> papermill -> executed notebooks -> book.

nbval itself re-executes every executed notebook (``--nbval`` in pytest's
configuration); the tests here make sure that what nbval checks is what the
sources say, that nothing broken or noisy was committed, and that the book
builds strictly.
"""


import json
import os
import warnings

import nbformat
import pytest

import capbook
from capbook import pipeline

ROOT = capbook.ROOT
CHAPTERS = capbook.chapter_names()
EXECUTED = sorted(p.stem for p in capbook.EXECUTED_DIR.glob("*.ipynb"))


@pytest.mark.parametrize("name", CHAPTERS)
def test_executed_notebook_matches_source(name):
    problems = capbook.chapter_drift(name)
    assert not problems, (
        f"book/executed/{name}.ipynb is stale; re-run `python -m capbook reproduce {name}` "
        f"(or `python -m capbook sync-text {name}` for prose-only edits):\n" + "\n".join(problems))


@pytest.mark.parametrize("name", EXECUTED)
def test_executed_notebook_has_a_source(name):
    assert name in CHAPTERS, f"book/executed/{name}.ipynb has no source book/chapters/{name}.md"


@pytest.mark.parametrize("name", EXECUTED)
def test_executed_outputs_are_clean(name):
    nb = nbformat.read(capbook.EXECUTED_DIR / f"{name}.ipynb", as_version=4)
    assert "papermill" not in nb.metadata, "run-dependent papermill metadata was committed"
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        assert cell.execution_count is not None, f"cell {i} was never executed"
        for out in cell.get("outputs", []):
            assert out.output_type != "error", f"cell {i} stored an error: {out.get('ename')}"
            if out.output_type == "stream":
                assert out.name != "stderr", f"cell {i} wrote to stderr: {out.text[:200]!r}"
            text = out.get("text", "") or out.get("data", {}).get("text/plain", "")
            assert " at 0x" not in text, f"cell {i} prints a memory address: {text[:200]!r}"


@pytest.mark.parametrize("name", CHAPTERS)
def test_chapter_has_parameters_cell_and_is_in_toc(name):
    nb = nbformat.read(capbook.EXECUTED_DIR / f"{name}.ipynb", as_version=4) \
        if (capbook.EXECUTED_DIR / f"{name}.ipynb").exists() else None
    import jupytext
    src = jupytext.read(capbook.CHAPTER_DIR / f"{name}.md")
    assert src.metadata.get("kernelspec", {}).get("name") == "python3"
    tagged = [c for c in src.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, "each chapter needs exactly one cell tagged 'parameters'"
    toc = (ROOT / "_toc.yml").read_text()
    assert (f"file: book/executed/{name}\n" in toc or f"root: book/executed/{name}\n" in toc), \
        f"chapter {name} is not in _toc.yml"
    assert nb is not None


TINY = """---
jupytext:
  text_representation:
    extension: .md
    format_name: myst
kernelspec:
  display_name: Python 3
  language: python
  name: python3
---
# Tiny

```{code-cell} ipython3
:tags: [parameters]
n = 3
```

Some prose.

```{code-cell} ipython3
print(sum(range(n)))
```
"""


def _chapter_tree(tmp_path, monkeypatch, text=TINY):
    """A temporary book with one chapter ``tiny``; the pipeline's paths point at it."""
    chapters, executed = tmp_path / "chapters", tmp_path / "executed"
    chapters.mkdir()
    (chapters / "tiny.md").write_text(text)
    monkeypatch.setattr(pipeline, "CHAPTER_DIR", chapters)
    monkeypatch.setattr(pipeline, "EXECUTED_DIR", executed)
    monkeypatch.setattr(pipeline, "ROOT", tmp_path)
    return chapters, executed


def test_reproduce_drift_and_sync_on_a_tiny_chapter(tmp_path, monkeypatch):
    chapters, executed = _chapter_tree(tmp_path, monkeypatch)

    assert pipeline.chapter_drift("tiny")  # not executed yet
    pipeline.reproduce(["tiny"], kernel_name="python3")
    nb = nbformat.read(executed / "tiny.ipynb", as_version=4)
    assert "papermill" not in nb.metadata
    assert nb.cells[-1].outputs[0].text == "3\n"
    assert pipeline.chapter_drift("tiny") == []

    # a papermill override is injected as its own cell and still counts as in sync
    pipeline.reproduce(["tiny"], parameters={"n": 5}, kernel_name="python3")
    nb = nbformat.read(executed / "tiny.ipynb", as_version=4)
    assert nb.cells[-1].outputs[0].text == "10\n"
    assert pipeline.chapter_drift("tiny") == []
    pipeline.reproduce(["tiny"], kernel_name="python3")

    # prose edits are synced without re-execution; code edits are detected and refused
    (chapters / "tiny.md").write_text(TINY.replace("Some prose.", "Better prose."))
    assert pipeline.chapter_drift("tiny")
    assert pipeline.sync_text(["tiny"]) == ["tiny"]
    assert pipeline.chapter_drift("tiny") == []
    (chapters / "tiny.md").write_text(TINY.replace("range(n)", "range(n + 1)"))
    assert any("differs" in p for p in pipeline.chapter_drift("tiny"))
    with pytest.raises(ValueError, match="re-execute"):
        pipeline.sync_text(["tiny"])
    with pytest.raises(ValueError, match="unknown chapter"):
        pipeline.reproduce(["nope"])


def test_reproduce_refuses_names_outside_the_parameters_cell(tmp_path, monkeypatch, capsys):
    """A misspelt name would leave the chapter at its defaults, and a name is written into
    the notebook as code: only the names of the chapter's parameters cell are taken."""
    _, executed = _chapter_tree(tmp_path, monkeypatch)
    with pytest.raises(ValueError, match=r"^parameters 'm' is not a parameter of chapter tiny; "
                                         r"its parameters: n$"):
        pipeline.reproduce(["tiny"], parameters={"m": 5}, kernel_name="python3")
    planted = "n = 1\nopen('planted', 'w').close()\nm"
    with pytest.raises(ValueError, match=r"is not a parameter of chapter tiny"):
        pipeline.reproduce(["tiny"], parameters={planted: 5}, kernel_name="python3")
    assert not (executed / "tiny.ipynb").exists() and not (executed / "planted").exists()
    # the command line says the same in one line, naming -p
    with pytest.raises(SystemExit) as exc:
        capbook.main(["reproduce", "tiny", "-p", "nn", "5"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err == ("capbook reproduce: error: -p 'nn' is not a parameter of chapter tiny; "
                   "its parameters: n\n")


# n = None: a parameter whose default is None takes data of any kind
REPR = TINY.replace("print(sum(range(n)))", "print(repr(n))").replace("n = 3", "n = None")


def test_reproduce_passes_values_as_data(tmp_path, monkeypatch):
    """Values reach the chapter as the same data (quotes, backslashes, newlines, nested
    lists and dicts; a tuple as a list), never as other code or a string in their place;
    what is not JSON data is refused before any run."""
    _, executed = _chapter_tree(tmp_path, monkeypatch, REPR)
    value = ["a\"b'c\\\nd \u00e9", (1, 2.5), {"k": None, "t": True}]
    pipeline.reproduce(["tiny"], parameters={"n": value}, kernel_name="python3")
    nb = nbformat.read(executed / "tiny.ipynb", as_version=4)
    expected = ["a\"b'c\\\nd \u00e9", [1, 2.5], {"k": None, "t": True}]
    assert nb.cells[-1].outputs[0].text == repr(expected) + "\n"
    (executed / "tiny.ipynb").unlink()
    for bad, error, message in [(float("nan"), ValueError, " must be finite"),
                                ([1, float("inf")], ValueError, r"\[1\] must be finite"),
                                (object(), TypeError, " must be JSON data"),
                                ({1: 2}, TypeError, " has the key 1; keys must be str")]:
        with pytest.raises(error, match=rf"^parameters n{message}"):
            pipeline.reproduce(["tiny"], parameters={"n": bad}, kernel_name="python3")
    assert not (executed / "tiny.ipynb").exists()


def test_a_value_papermill_would_write_as_code_is_refused(tmp_path, monkeypatch):
    """The check compares each value with the literal papermill writes for it: were
    papermill's translation to turn a value into code, the run is refused."""
    from papermill.translators import PythonTranslator

    _chapter_tree(tmp_path, monkeypatch)
    monkeypatch.setattr(PythonTranslator, "translate",
                        classmethod(lambda cls, val: "__import__('os').getpid()"))
    with pytest.raises(ValueError, match=r"^parameters n: the value 3 does not pass to "
                                         r"papermill as data$"):
        pipeline.reproduce(["tiny"], parameters={"n": 3}, kernel_name="python3")


TINY_FIGURE = TINY.split("# Tiny", 1)[0] + """# Tiny figure

```{code-cell} ipython3
import matplotlib.pyplot as plt
plt.plot([0, 1], [1, 0])
plt.show()
```
"""


def test_reproduce_stores_figures_whatever_the_shells_backend(tmp_path, monkeypatch):
    # a shell with MPLBACKEND=Agg used to reach the kernel: the figure was drawn
    # off-screen and the stored notebook silently held no image
    _, executed = _chapter_tree(tmp_path, monkeypatch, text=TINY_FIGURE)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    pipeline.reproduce(["tiny"], kernel_name="python3")
    nb = nbformat.read(executed / "tiny.ipynb", as_version=4)
    kinds = [k for cell in nb.cells if cell.cell_type == "code"
             for out in cell.outputs for k in out.get("data", {})]
    assert "image/png" in kinds
    assert os.environ["MPLBACKEND"] == "Agg"   # the caller's environment is restored


def test_failing_cell_fails_reproduce(tmp_path, monkeypatch):
    _, executed = _chapter_tree(
        tmp_path, monkeypatch, TINY.replace("print(sum(range(n)))", "raise RuntimeError('boom')"))
    import papermill
    with pytest.raises(papermill.PapermillExecutionError):
        pipeline.reproduce(["tiny"], kernel_name="python3")
    assert not (executed / "tiny.ipynb").exists()


def test_strict_book_build(book_html):
    """The book builds from the stored notebooks with zero warnings (-W -n);
    the build itself is the session fixture ``book_html`` of conftest.py."""
    assert (book_html / "index.html").exists()
    for name in EXECUTED:
        assert (book_html / "book" / "executed" / f"{name}.html").exists(), name


def test_sync_text_accepts_new_prose_cells_and_keeps_outputs(tmp_path, monkeypatch):
    chapters, executed = _chapter_tree(tmp_path, monkeypatch)
    pipeline.reproduce(["tiny"], kernel_name="python3")
    (chapters / "tiny.md").write_text(TINY + "\n## A new closing section\n\nMore words.\n")
    assert pipeline.sync_text(["tiny"]) == ["tiny"]
    assert pipeline.chapter_drift("tiny") == []
    nb = nbformat.read(executed / "tiny.ipynb", as_version=4)
    assert [c.id for c in nb.cells] == [f"cell-{i}" for i in range(len(nb.cells))]
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code[-1].outputs[0].text == "3\n"
    assert pipeline.sync_text(["tiny"]) == []  # nothing left to copy


def test_a_chapter_runs_after_the_chapters_it_reads(tmp_path, monkeypatch):
    reader = TINY.replace("kernelspec:", "capassign:\n  reads: [b_source]\nkernelspec:", 1)
    chapters, _ = _chapter_tree(tmp_path, monkeypatch, text=reader)
    (chapters / "tiny.md").rename(chapters / "a_reader.md")
    (chapters / "b_source.md").write_text(TINY)
    (chapters / "c_other.md").write_text(TINY)
    assert pipeline._resolve_chapters([]) == ["b_source", "a_reader", "c_other"]
    (chapters / "b_source.md").write_text(TINY.replace(
        "kernelspec:", "capassign:\n  reads: [a_reader]\nkernelspec:", 1))
    with pytest.raises(ValueError, match="cycle"):
        pipeline._resolve_chapters([])


def test_a_notebook_is_written_as_nbformat_writes_it(tmp_path):
    # the atomic write keeps the bytes of nbformat.write (its final newline too)
    import jupytext

    nb = jupytext.reads(TINY, fmt="md:myst")
    nbformat.write(nb, tmp_path / "plain.ipynb")
    pipeline._write_notebook(nb, tmp_path / "atomic.ipynb")
    assert (tmp_path / "atomic.ipynb").read_bytes() == (tmp_path / "plain.ipynb").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["atomic.ipynb", "plain.ipynb"]


def test_sync_text_adds_a_markdown_cell_without_repeating_an_id(tmp_path, monkeypatch):
    chapters, executed = _chapter_tree(tmp_path, monkeypatch)
    pipeline.reproduce(["tiny"], kernel_name="python3")
    (chapters / "tiny.md").write_text(TINY.replace("# Tiny\n", "# Tiny\n\nA word.\n\n+++\n\nMore.\n"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")     # nbformat warns (and renumbers) on a repeated id
        assert pipeline.sync_text(["tiny"]) == ["tiny"]
    # read as JSON: nbformat's reader would quietly renumber a repeated id
    ids = [c["id"] for c in json.loads((executed / "tiny.ipynb").read_text())["cells"]]
    assert len(ids) == len(set(ids)) == 5, ids
    assert pipeline.chapter_drift("tiny") == []
