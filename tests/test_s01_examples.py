"""Every example of the documentation runs as written.

* each ``python`` code block of README.md is executed exactly as it stands,
  in a fresh namespace, from a scratch working directory;
* the docstring examples of ``capassign`` and of the book module ``capbook``
  run as doctests.

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


# --- first use of the compiled kernels -----------------------------------------


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


def test_kernels_cached_reads_numba_cache(tmp_path, monkeypatch):
    import importlib
    import os
    import subprocess
    import sys

    (tmp_path / "tinykernel.py").write_text(
        "from numba import njit\n\n@njit(cache=True)\ndef f(x):\n    return x + 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    env = dict(os.environ)  # the same numba cache location as this process
    try:
        mod = importlib.import_module("tinykernel")
        assert not ca._kernels_cached([mod.f])   # nothing compiled, nothing cached
        subprocess.run([sys.executable, "-c", "import tinykernel; tinykernel.f(1)"],
                       cwd=tmp_path, env=env, check=True, timeout=120)
        assert not mod.f.signatures              # not compiled in this process ...
        assert ca._kernels_cached([mod.f])       # ... but cached on disk by the other
    finally:
        sys.modules.pop("tinykernel", None)


def test_first_use_notice_once_on_stderr_only_when_asked(monkeypatch, capsys):
    monkeypatch.setattr(ca, "_FIRST_USE_SEEN", set())
    monkeypatch.setattr(ca, "_kernels_cached", lambda kernels, match=None: False)
    monkeypatch.delenv(ca.PROGRESS_ENV, raising=False)
    # stderr is not a terminal here (as in a notebook): silent
    assert ca._first_use("tree simulation", ("_run_nb",), "about a minute") is None
    monkeypatch.setattr(ca, "_FIRST_USE_SEEN", set())
    monkeypatch.setenv(ca.PROGRESS_ENV, "1")
    started = ca._first_use("tree simulation", ("_run_nb",), "about a minute")
    assert ca._first_use("tree simulation", ("_run_nb",), "about a minute") is None  # once
    ca._first_use_done(started)
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 2
    assert "compiling the tree simulation kernels" in lines[0] and "first use only" in lines[0]
    assert "about a minute" in lines[0] and lines[1].startswith("capassign: compiled in")
    monkeypatch.setattr(ca, "_FIRST_USE_SEEN", set())
    monkeypatch.setenv(ca.PROGRESS_ENV, "0")
    assert ca._first_use("tree simulation", ("_run_nb",), "about a minute") is None
    assert capsys.readouterr().err == ""


def test_unreadable_numba_cache_index_is_recompiled(tmp_path):
    """An index from another version of the module, naming a named tuple this
    version lacks, must not stop a kernel: it is dropped and the kernel compiled."""
    import os
    import subprocess
    import sys

    src = (ROOT / "capassign.py").read_text(encoding="utf-8")
    call = ("import numpy as np, capassign as ca\n"
            "R = np.ones((3, 2), dtype=np.uint8); order = np.arange(3)\n"
            "out = ca.{t}(np.zeros(0, np.int32), np.zeros((0, 2)), np.zeros(2, np.int64))\n"
            "print(ca._forced_tail_nb(R, order, 0, 1, np.zeros(2), out), out.counts.tolist())\n")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    (tmp_path / "capassign.py").write_text(src, encoding="utf-8")
    first = subprocess.run([sys.executable, "-c", call.format(t="_RunOut")], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    index = list((tmp_path / "__pycache__").glob("capassign._forced_tail_nb-*.nbi"))
    assert len(index) == 1                       # the kernel was cached next to the module
    (tmp_path / "capassign.py").write_text(src.replace("_RunOut", "_RunOutV2"),
                                           encoding="utf-8")
    again = subprocess.run([sys.executable, "-c", call.format(t="_RunOutV2")], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout == first.stdout == "3 [0, 3]\n"


def test_each_model_compiles_its_own_kernels_only():
    """The run kernel is typed for one reward model at a time: numba's dead
    branch pruning removes the branches of the models left out (their None
    arguments) before it types the body, so the first simulation of a policy
    compiles no other model's kernels (nor, for random, the batch solver).
    (With the model as a literal integer every branch survives this step:
    all the models were compiled.)"""
    import numba
    import numpy as np
    from numba.core import analysis, compiler, ir

    ca._numba_kernels()
    X, R, _ = ca.synthetic_stream(40, 3, seed=0)
    R = np.ascontiguousarray(R, dtype=np.uint8)
    choose = {"_choose_agents_nb"}
    own = {"random": {"_random_agent_nb", "_random_batch_nb"},
           "marginal": {"_marginal_mu_nb"} | choose,
           "logistic-ts": {"_logistic_learn_nb", "_logistic_bound_nb",
                           "_logistic_mu_nb"} | choose,
           "tree-greedy": {"_tree_learn_nb", "_tree_bound_nb", "_tree_mu_nb"} | choose}
    every = set().union(*own.values())

    def used(kernel, args):
        func_ir = compiler.run_frontend(kernel.py_func)
        analysis.dead_branch_prune(func_ir, tuple(numba.typeof(a) for a in args))
        return {st.value.name for block in func_ir.blocks.values() for st in block.body
                if isinstance(st, ir.Assign) and isinstance(st.value, ir.Global)}

    rule = ca._Rule(np.array([0.5, 0.5]), np.ones(2, dtype=bool), 0.5, 1.0, 0.0, 0, True)
    for policy, kernels in own.items():
        models = ca._run_models(X, policy, ca.PAPER_SETTINGS)
        out = ca._RunOut(np.zeros(0, np.int32), np.zeros((0, 2)), np.zeros(2, np.int64))
        for batched in (None, True):     # online runs type no batch solver
            if policy == "random":       # (numba prunes the branches of a None only)
                kernels = own[policy] if batched else {"_random_agent_nb"}
            args = (R, np.arange(40), rule, *models, batched, ca._rng_states(
                [np.random.SeedSequence(0)])[0], out, np.zeros(9, np.int64))
            assert used(ca._run_nb, args) & every == kernels, (policy, batched)
    S, ints = np.zeros((1, 2)), np.zeros(2, np.int64)
    for batched in (None, True):
        args = (S, 1, rule, 0, batched, np.zeros(2), ints, ints, ints)
        assert ("_batch_choose_nb" in used(ca._choose_agents_nb, args)) == bool(batched)
    # a run without forgetting passes discount None: no forgetting is typed
    for discount in (1.0, 0.9):
        settings = ca.ModelSettings(discount=discount)
        trees = ca._run_models(X, "tree-greedy", settings)[3]
        logistic = ca._run_models(X, "logistic-greedy", settings)[2]
        assert trees.discount == logistic.discount == (None if discount == 1.0 else 0.9)
        F = ca._tree_work(trees, 2, 40, np.zeros(9, np.int64))[0]
        cfg = ca._TreeConfig(*(getattr(trees, f) for f in ca._TreeConfig._fields))
        rng = ca._rng_states([np.random.SeedSequence(0)])[0]
        thin = "_thin_forest_nb" in used(ca._forget_nb, (F, 0, cfg, rng, trees.discount))
        Sigma, W = np.eye(3), np.zeros((3, 3, 3))
        inverse = "_spd_inverse_nb" in used(ca._discount_precision_nb,
                                            (Sigma, logistic.discount, 1.0, W))
        assert thin == inverse == (discount < 1.0)
