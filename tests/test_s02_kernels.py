"""First use of the compiled kernels of section 2: the numba cache is read when it
holds a kernel, the first-use notice is printed once and only when asked, an
unreadable cache index is compiled afresh, and each model compiles only its own
kernels."""

from pathlib import Path

import capassign as ca

ROOT = Path(__file__).resolve().parents[1]


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
           "tree-greedy": {"_tree_observe_nb", "_tree_refit_nb", "_tree_bound_nb",
                           "_tree_mu_nb"} | choose}
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
