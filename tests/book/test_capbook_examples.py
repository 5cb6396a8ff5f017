"""The book's examples: the docstring examples of the book module ``capbook`` run as
doctests, and no stored chapter shows anything on stderr."""

import doctest
from pathlib import Path

import capbook as cb

ROOT = Path(__file__).resolve().parents[2]


def test_book_module_docstring_examples():
    """The examples of capbook, module by module (a package's re-exported names are
    not searched by doctest)."""
    import importlib
    import pkgutil

    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = []
    for info in pkgutil.iter_modules(cb.__path__):
        if info.name == "__main__":
            continue
        module = importlib.import_module(f"capbook.{info.name}")
        tests += [t for t in finder.find(module, module.__name__, globs=vars(module).copy())
                  if t.examples]
    assert len(tests) >= 15, [t.name for t in tests]
    for t in tests:
        runner.run(t)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} docstring examples failed"


def test_stored_notebooks_have_no_stderr():
    """Notices such as the first-use message never reach a chapter's outputs."""
    import json

    found = []
    for path in sorted((ROOT / "book" / "executed").glob("*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        for i, cell in enumerate(nb["cells"]):
            for out in cell.get("outputs", []):
                if out.get("output_type") == "stream" and out.get("name") == "stderr":
                    found.append(f"{path.name} cell {i}")
    assert not found, f"stderr in stored outputs: {found}"
