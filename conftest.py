"""pytest configuration shared by the unit tests and the nbval notebook checks.

Chapters that read real data declare it in their front matter::

    capassign:
      needs_data: [bank, mmlu]

Before nbval re-executes such a chapter, the files it needs are located (the
folder named by CAPASSIGN_DATA, else the download cache) and, when missing,
fetched; if they cannot be had, the chapter's cells are skipped with the
message that says how to get the data, instead of failing.

The notebooks of one test run share a memo of simulations (``CAPASSIGN_MEMO``,
a fresh empty folder per run, removed at its end): a simulation that several
chapters run with the same code, data and arguments is computed once, by the
first.  The unit tests run without it, so that each computes what it checks.
At the end the run prints how long each chapter's re-execution took.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import pytest


def _datasets(task_names):
    out = set()
    for name in task_names:
        out.update(("mmlu-questions", "mmlu-agents") if name.startswith("mmlu") else (name,))
    return out


def _missing_data_message(task_names):
    import capassign

    reg = capassign.data_registry()
    wanted = _datasets(task_names)
    files = [e["path"] for e in reg.registry["files"] if e["dataset"] in wanted]
    problems = [f"{path} {status}" for path, status, _ in reg.fetch(files) if status != "ok"]
    if not problems:
        return ""
    more = f" and {len(problems) - 3} more" if len(problems) > 3 else ""
    return ", ".join(problems[:3]) + more


def pytest_collection_modifyitems(config, items):
    import nbformat

    verdicts = {}
    for item in items:
        path = Path(str(item.fspath))
        if path.suffix != ".ipynb":
            continue
        if path not in verdicts:
            meta = nbformat.read(path, as_version=4).metadata.get("capassign", {})
            needs = meta.get("needs_data", [])
            verdicts[path] = _missing_data_message(needs) if needs else ""
        if verdicts[path]:
            item.add_marker(pytest.mark.skip(
                reason=f"data not available ({verdicts[path]}); set CAPASSIGN_DATA "
                       f"or run `python -m capassign data fetch`"))


@pytest.fixture(scope="session")
def book_html(tmp_path_factory):
    """The strict HTML build of the book (``-W -n``, zero warnings), made once per
    session for the pipeline and browser tests; returns its html folder."""
    root = Path(__file__).resolve().parent
    out = tmp_path_factory.mktemp("book")
    exe = Path(sys.executable).parent / "jupyter-book"
    cmd = [str(exe) if exe.exists() else "jupyter-book", "build", str(root), "--all", "-W", "-n",
           "--keep-going", "--path-output", str(out)]
    start = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=root,
                         env={**os.environ, "PYDEVD_DISABLE_FILE_VALIDATION": "1"})
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    print(f"\nbook built in {time.perf_counter() - start:.1f} s into {out}")
    return out / "_build" / "html"


# --- the memo of simulations, for the notebooks ----------------------------------

_MEMO_ENV = "CAPASSIGN_MEMO"        # capassign.MEMO_ENV (capassign is imported lazily)
_MEMO = {}


def pytest_configure(config):
    # set before any notebook kernel starts: nbval's kernels inherit this environment
    _MEMO["old"] = os.environ.get(_MEMO_ENV)
    _MEMO["dir"] = tempfile.mkdtemp(prefix="capassign-memo-")
    os.environ[_MEMO_ENV] = _MEMO["dir"]


def pytest_unconfigure(config):
    if "dir" in _MEMO:
        shutil.rmtree(_MEMO.pop("dir"), ignore_errors=True)
        if _MEMO.get("old") is None:
            os.environ.pop(_MEMO_ENV, None)
        else:
            os.environ[_MEMO_ENV] = _MEMO["old"]


@pytest.fixture(autouse=True)
def _unit_tests_compute(monkeypatch):
    """Unit tests see no memo (tests/test_s06_memo.py sets its own)."""
    monkeypatch.delenv(_MEMO_ENV, raising=False)


# --- where the time goes: each chapter's re-execution ----------------------------

_NOTEBOOK_SECONDS = defaultdict(float)


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::", 1)[0]
    if path.endswith(".ipynb"):
        _NOTEBOOK_SECONDS[path] += report.duration


def pytest_terminal_summary(terminalreporter):
    if not _NOTEBOOK_SECONDS:
        return
    rows = sorted(_NOTEBOOK_SECONDS.items(), key=lambda kv: -kv[1])
    terminalreporter.write_sep("=", "chapter re-execution times (nbval, all cells)")
    width = max(len(Path(p).stem) for p, _ in rows)
    for path, seconds in rows:
        terminalreporter.write_line(f"{Path(path).stem:<{width}}  {seconds:8.1f} s")
    total = sum(_NOTEBOOK_SECONDS.values())
    terminalreporter.write_line(f"{'total':<{width}}  {total:8.1f} s ({len(rows)} chapters)")
