"""Every example of the documentation runs as written.

* each ``python`` code block of README.md is executed exactly as it stands,
  in a fresh namespace, from a scratch working directory;
* the docstring examples of ``capassign`` run as doctests.

Both are kept fast (seconds, once the compiled kernels are cached).
"""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import pytest

import capassign as ca

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


def test_docstring_examples():
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = [t for t in finder.find(ca, "capassign", globs=vars(ca).copy()) if t.examples]
    assert tests, "capassign has no docstring examples"
    for t in tests:
        runner.run(t)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} docstring examples failed"
