"""Every example of the documentation runs as written.

* each ``python`` code block of README.md is executed exactly as it stands,
  in a fresh namespace, from a scratch working directory;
* the docstring examples of ``capassign`` run as doctests (those of the book
  module ``capbook`` in tests/book/test_capbook_examples.py).

Both are kept fast (seconds, once the compiled kernels are cached).
"""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import pytest

import capassign as ca
import capbook as cb

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

_FENCE = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)


def readme_python_blocks():
    text = README.read_text(encoding="utf-8")
    blocks = []
    for m in _FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        blocks.append(pytest.param(m.group(1), id=f"README.md:{line}"))
    return blocks


def test_readme_has_python_examples():
    assert len(readme_python_blocks()) >= 1


@pytest.mark.parametrize("code", readme_python_blocks())
def test_readme_block_runs_as_written(code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__readme__"}
    exec(compile(code, str(README), "exec"), namespace)  # noqa: S102 - our own README


# the docstring examples that read the paper's data files, and the files they read
NEEDS_DATA = {"data_path", "tabular_agent_accuracies", "mmlu_questions", "mmlu_models",
              "mmlu_substitutes", "mmlu_task"}
DATA_FILES = ("mmlu/agents/correctness.csv", "mmlu/questions/abstract_algebra_val.csv",
              "credit/UCI_Credit_Card.csv")


def _data_available():
    try:
        for relpath in DATA_FILES:
            ca.data_registry().path(relpath, download=False)
    except ca.DataUnavailable:
        return False
    return True


def _run_docstring_examples(with_data):
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = [t for t in finder.find(ca, "capassign", globs=vars(ca).copy())
             if t.examples and (t.name.split(".")[1] in NEEDS_DATA) == with_data]
    assert tests, "capassign has no docstring examples"
    for t in tests:
        runner.run(t)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} docstring examples failed"


def test_docstring_examples():
    _run_docstring_examples(with_data=False)


def test_docstring_examples_on_the_data():
    if not _data_available():
        pytest.skip("the paper's data files are not available")
    _run_docstring_examples(with_data=True)


def _public_callables(module=ca):
    import inspect

    return [n for n in module.__all__
            if inspect.isfunction(getattr(module, n)) or inspect.isclass(getattr(module, n))]


def _has(section, obj):
    return re.search(rf"^\s*{section}\n\s*-+\n", obj.__doc__ or "", re.M) is not None


def _missing_sections(obj):
    import inspect

    need = ["Examples"]
    if inspect.isfunction(obj):
        need += ["Parameters"] * bool(inspect.signature(obj).parameters) + ["Returns"]
    return [section for section in need if not _has(section, obj)]


@pytest.mark.parametrize("module", [ca, cb], ids=["capassign", "capbook"])
def test_every_public_name_is_documented(module):
    """numpydoc ``Parameters`` (when it takes any), ``Returns`` and ``Examples`` on every
    public function, ``Examples`` on every public class."""
    missing = {n: _missing_sections(getattr(module, n)) for n in _public_callables(module)}
    undocumented = {n: m for n, m in missing.items() if m}
    assert not undocumented, f"missing numpydoc sections: {undocumented}"
