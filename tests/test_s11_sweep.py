"""Tests of resumable sweeps (kill -9 and resume, Dask backend) and the command line."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import capassign as ca

ROOT = Path(ca.__file__).resolve().parent


@pytest.fixture(scope="module")
def small():
    X, R, _ = ca.synthetic_stream(250, 3, seed=8)
    return X, R


@pytest.mark.parametrize("policy", ["random", "logistic-ts", "tree-ts", "offline-tree"])
def test_a_block_of_runs_equals_those_runs_of_simulate(small, policy):
    X, R = small
    full = ca.simulate(X, R, [0.4, 0.6], policy, runs=7, seed=5)
    errors, shares = ca._simulate_block(X, R, [0.4, 0.6], policy, 3, 6, seed=5)
    np.testing.assert_array_equal(errors, full.errors[3:6])
    np.testing.assert_array_equal(shares, full.assigned[3:6])


def test_reference_engine_block(small):
    X, R = small
    full = ca.simulate(X[:80], R[:80], [0.5, 0.5], "logistic-ts", runs=3, seed=2,
                       engine="reference")
    errors, _ = ca._simulate_block(X[:80], R[:80], [0.5, 0.5], "logistic-ts", 1, 3, seed=2,
                                   engine="reference")
    np.testing.assert_array_equal(errors, full.errors[1:3])


def test_sweep_table_and_resume_in_process(small, tmp_path):
    X, R = small
    args = ({"syn": (X, R)}, ["random", "tree-greedy"], [0.2, [0.5, 0.5]])
    df = ca.sweep(*args, tmp_path / "a", runs=5, block=2, seed=3, n_jobs=1)
    assert df.attrs == {"computed": 12, "reused": 0}
    assert len(df) == 2 * 2 * 5 and list(df.run[:5]) == [0, 1, 2, 3, 4]
    ref = ca.simulate(X, R, [0.2, 0.8], "tree-greedy", runs=5, seed=3)
    got = df[(df.policy == "tree-greedy") & (df.capacities == "0.2/0.8")]
    np.testing.assert_array_equal(got.error.to_numpy(), ref.errors)
    np.testing.assert_array_equal(got.share_1.to_numpy(), ref.assigned[:, 0])
    again = ca.sweep(*args, tmp_path / "a", runs=5, block=2, seed=3, n_jobs=1)
    assert again.attrs == {"computed": 0, "reused": 12}
    assert again.equals(df)
    with pytest.raises(ValueError, match="other settings"):
        ca.sweep(*args, tmp_path / "a", runs=5, block=2, seed=4, n_jobs=1)


def _cells(d):
    return {p.name: p.stat().st_mtime_ns for p in (d / "cells").glob("*.json")
            if not p.name.startswith(".tmp-")}


SWEEP_ARGS = ["sweep", "--tasks", "synthetic", "--policies", "logistic-ts,logistic-greedy",
              "--alphas", "0.3,0.7", "--runs", "6", "--block", "1", "--engine", "reference",
              "--jobs", "1", "--backend", "sequential"]


def test_killed_sweep_resumes_without_recomputing(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "capassign"] + SWEEP_ARGS
    killed = tmp_path / "killed"
    proc = subprocess.Popen(cmd + ["--out", str(killed)], env=env, cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while len(_cells(killed)) < 4 if (killed / "cells").exists() else True:
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.time() < deadline, "the sweep stored no cell in time"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = _cells(killed)
    assert 4 <= len(before) < 24, "the kill must come mid-way"
    assert not (killed / "results.csv").exists()
    done = subprocess.run(cmd + ["--out", str(killed)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, check=True)
    assert f"({24 - len(before)} computed, {len(before)} already stored)" in done.stdout
    after = _cells(killed)
    assert len(after) == 24
    assert all(after[name] == mtime for name, mtime in before.items())
    whole = tmp_path / "whole"
    subprocess.run(cmd + ["--out", str(whole)], env=env, cwd=tmp_path, capture_output=True,
                   check=True)
    assert (killed / "results.csv").read_bytes() == (whole / "results.csv").read_bytes()


def test_dask_local_cluster_gives_the_local_numbers(small, tmp_path):
    distributed = pytest.importorskip("distributed")
    X, R = small
    args = ({"syn": (X, R)}, ["logistic-ts", "tree-ts"], [0.3, 0.6])
    local = ca.sweep(*args, tmp_path / "local", runs=4, block=2, seed=1, n_jobs=1)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        assert len(client.scheduler_info()["workers"]) == 2
        remote = ca.sweep(*args, tmp_path / "dask", runs=4, block=2, seed=1, client=client)
    assert remote.attrs["computed"] == 8
    assert remote.equals(local)


def test_sweep_rejects_bad_input(small, tmp_path):
    X, R = small
    with pytest.raises(ValueError, match="tasks"):
        ca.sweep(["nope"], ["random"], [0.5], tmp_path)
    with pytest.raises(ValueError, match="policies"):
        ca.sweep({"s": (X, R)}, ["oracle"], [0.5], tmp_path)
    with pytest.raises(ValueError, match="capacities"):
        ca.sweep({"s": (X, R)}, ["random"], [[0.5, 0.6]], tmp_path)
    with pytest.raises(ValueError, match="alpha_1"):
        ca.sweep({"s": (X, R)}, ["random"], [1.5], tmp_path)
    with pytest.raises(ValueError, match="scheduler"):
        ca.sweep({"s": (X, R)}, ["random"], [0.5], tmp_path, backend="dask")
    with pytest.raises(ValueError, match="block"):
        ca.sweep({"s": (X, R)}, ["random"], [0.5], tmp_path, block=0)
    assert not (tmp_path / "cells").exists()   # nothing written before the checks pass


# --- command line -------------------------------------------------------------------

# the library's command line and the book's (python -m capbook)
SUBCOMMANDS = [("capassign", w) for w in (["data"], ["data", "list"], ["data", "verify"],
                                         ["data", "fetch"], ["bench"], ["simulate"], ["sweep"])]
SUBCOMMANDS += [("capbook", w) for w in (["reproduce"], ["sync-text"], ["validate-engines"])]


@pytest.mark.parametrize("prog, words", SUBCOMMANDS, ids=lambda v: " ".join(v))
def test_every_subcommand_has_help(prog, words, capsys):
    import capbook

    with pytest.raises(SystemExit) as exc:
        (ca if prog == "capassign" else capbook).main(words + ["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith(f"usage: {prog} {' '.join(words)}")
    assert len(text.splitlines()) > 3


def test_simulate_json_matches_the_library(capsys):
    ca.main(["simulate", "--task", "synthetic", "--policy", "logistic-greedy",
             "--capacities", "0.3,0.7", "--runs", "3", "--seed", "2", "--json"])
    out = json.loads(capsys.readouterr().out)
    task = ca.load_task("synthetic")
    res = ca.simulate(task.X, task.R, [0.3, 0.7], "logistic-greedy", runs=3, seed=2)
    assert out["errors"] == res.errors.tolist()
    assert out["error"] == res.error and out["capacities"] == [0.3, 0.7]
    assert out["shares"] == res.assigned.mean(axis=0).tolist()


def test_cli_errors_name_the_argument(capsys):
    with pytest.raises(SystemExit) as exc:
        ca.main(["simulate", "--task", "synthetic", "--policy", "tree-greedy",
                 "--capacities", "0.3,x"])
    assert exc.value.code == 2
    assert "--capacities" in capsys.readouterr().err


# --- what a resumed sweep may trust ---------------------------------------------------

def _tiny(seed):
    X, R, _ = ca.synthetic_stream(100, 3, seed=seed)
    return X, R


def _tiny_sweep(out, tasks=None, **kw):
    tasks = {"t": _tiny(0)} if tasks is None else tasks
    kw = dict(dict(runs=3, block=1, backend="sequential"), **kw)
    return ca.sweep(tasks, ["random"], [0.5], out, **kw)


def test_resume_with_other_data_of_the_same_shape_is_refused(tmp_path):
    first = _tiny_sweep(tmp_path)
    with pytest.raises(ValueError, match=r"task 't' has other data") as exc:
        _tiny_sweep(tmp_path, {"t": _tiny(1)})
    assert str(tmp_path) in str(exc.value)
    with pytest.raises(ValueError, match=r"setting 'eta'"):
        _tiny_sweep(tmp_path, eta=0.7)
    other = _tiny_sweep(tmp_path / "other", {"t": _tiny(1)})
    assert not np.array_equal(other.error, first.error)   # the check matters
    assert _tiny_sweep(tmp_path).equals(first)              # the same data still resumes


def _cell_paths(out):
    return sorted(p for p in (out / "cells").glob("*.json") if not p.name.startswith("."))


def _edit_number(p):
    rec = json.loads(p.read_text())
    rec["errors"][0] = rec["errors"][0] + 0.01
    p.write_text(json.dumps(rec))


def _drop_row(p):
    rec = json.loads(p.read_text())
    rec["errors"] = []
    p.write_text(json.dumps(rec))


def _set_errors(value):
    def mutate(p):
        rec = json.loads(p.read_text())
        rec["errors"] = value
        p.write_text(json.dumps(rec))
    return mutate


def _copy_other(p):
    other = next(q for q in _cell_paths(p.parent.parent) if q != p)
    p.write_bytes(other.read_bytes())


MUTATIONS = {
    "edited number": _edit_number,
    "emptied errors": _drop_row,
    "non-numeric errors": _set_errors(["oops"]),
    "non-finite errors": _set_errors([float("nan")]),
    "other cell copied": _copy_other,
    "empty object": lambda p: p.write_text("{}"),
    "a list": lambda p: p.write_text("[1, 2]"),
    "invalid UTF-8": lambda p: p.write_bytes(b"\xff\xfe{"),
    "truncated": lambda p: p.write_bytes(p.read_bytes()[:40]),
}


@pytest.mark.parametrize("mutation", MUTATIONS, ids=list(MUTATIONS))
def test_invalid_stored_cells_are_recomputed_and_named(tmp_path, mutation):
    whole = _tiny_sweep(tmp_path / "whole")
    out = tmp_path / "out"
    _tiny_sweep(out)
    victim = _cell_paths(out)[1]
    MUTATIONS[mutation](victim)
    with pytest.warns(RuntimeWarning, match=victim.name):
        df = _tiny_sweep(out)
    assert df.attrs == {"computed": 1, "reused": 2, "invalid": 1}
    assert df.equals(whole)
    assert (out / "results.csv").read_bytes() == (tmp_path / "whole" / "results.csv").read_bytes()
    assert _tiny_sweep(out).attrs == {"computed": 0, "reused": 3}   # the cell was replaced


def test_a_directory_in_place_of_a_cell_is_refused_by_name(tmp_path):
    _tiny_sweep(tmp_path)
    victim = _cell_paths(tmp_path)[0]
    victim.unlink()
    victim.mkdir()
    with pytest.raises(ValueError, match=victim.name):
        _tiny_sweep(tmp_path)


def test_a_second_sweep_on_a_folder_in_use_is_refused_and_deletes_nothing(tmp_path):
    # another process holds the folder's lock, as a running sweep does
    (tmp_path / "cells").mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import pathlib, sys, capassign as ca; "
         "ca._lock_sweep_dir(pathlib.Path(sys.argv[1])); print('locked', flush=True); "
         "sys.stdin.read()", str(tmp_path)],
        env=dict(os.environ, PYTHONPATH=str(ROOT)), stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        in_flight = tmp_path / "cells" / ".tmp-abc123.json"   # the first sweep's write
        in_flight.write_text("{")
        with pytest.raises(ValueError, match="in use by another sweep"):
            _tiny_sweep(tmp_path)
        assert in_flight.exists() and not (tmp_path / "sweep.json").exists()
    finally:
        holder.kill()    # like kill -9: the kernel drops the lock
        holder.wait()
    df = _tiny_sweep(tmp_path)   # a leftover .lock file is not a stale lock
    assert df.attrs["computed"] == 3 and not in_flight.exists()


@pytest.mark.parametrize("name", [".tmp-x", ".hidden", "a/b\\c", "x" * 300, "ünï cödé ✓"])
def test_any_printable_task_name_is_stored_and_resumed(tmp_path, name):
    first = _tiny_sweep(tmp_path, {name: _tiny(0)})
    assert set(first.task) == {name}
    assert [p.parent for p in _cell_paths(tmp_path)] == [tmp_path / "cells"] * 3
    assert all(len(p.name) < 200 for p in _cell_paths(tmp_path))
    again = _tiny_sweep(tmp_path, {name: _tiny(0)})
    assert again.attrs == {"computed": 0, "reused": 3} and again.equals(first)


@pytest.mark.parametrize("name", ["", "a\nb", "nul\x00", 3])
def test_bad_task_names_are_refused_before_any_work(tmp_path, name):
    with pytest.raises((ValueError, TypeError), match="task name"):
        _tiny_sweep(tmp_path, {name: _tiny(0)})
    assert not tmp_path.joinpath("cells").exists()


# --- what a sweep refuses before any work ----------------------------------------

def _no_plan(monkeypatch):
    def work(*args, **kwargs):
        raise AssertionError("the sweep started its work")
    monkeypatch.setattr(ca, "_sweep_plan", work)


def test_a_sweep_too_large_for_memory_is_refused_before_any_work(tmp_path, monkeypatch):
    # 10^9 cells of one run: the plan alone would take terabytes (and minutes
    # to build before the MemoryError); refused from the arguments alone
    _no_plan(monkeypatch)
    with pytest.raises(ValueError, match=r"^runs=1000000000, block=1 needs about [\d.]+ TiB "
                                         r"for the plan and table of 1,000,000,000 cells"):
        _tiny_sweep(tmp_path / "s", runs=10**9, block=1)
    assert not (tmp_path / "s").exists()


def test_a_cell_too_large_for_memory_is_refused_before_any_work(tmp_path, monkeypatch):
    # the table of 10^5 rows fits in 128 MiB (about 98 MiB), a cell of 10^5
    # runs of 100 tasks in a worker does not (about 174 MiB)
    monkeypatch.setenv("CAPASSIGN_MEMORY_LIMIT", "128M")
    cell = ca._sweep_cell
    monkeypatch.setattr(ca, "_sweep_cell", lambda *a: 1 / 0)   # no cell may start
    with pytest.raises(ValueError, match=r"^block=100000 needs about 174\.0 MiB for a cell of "
                                         r"100,000 runs of task 't' \(random\) in each worker, "
                                         r"over the limit of 128\.0 MiB"):
        _tiny_sweep(tmp_path / "s", runs=100_000, block=100_000)
    assert not (tmp_path / "s").exists()
    monkeypatch.setattr(ca, "_sweep_cell", cell)
    assert _tiny_sweep(tmp_path / "s").attrs["computed"] == 3    # small ones still run


def test_repeated_policies_and_capacities_are_refused(tmp_path):
    # accepted, they would give every row twice (the same cells, listed twice)
    X, R = _tiny(0)
    with pytest.raises(ValueError, match="policies must not repeat a name"):
        ca.sweep({"t": (X, R)}, ["random", "random"], [0.5], tmp_path / "a", runs=2,
                 backend="sequential")
    with pytest.raises(ValueError, match=r"capacities must not repeat a vector.*\(0\.5, 0\.5\)"):
        ca.sweep({"t": (X, R)}, ["random"], [0.5, [0.5, 0.5]], tmp_path / "a", runs=2,
                 backend="sequential")
    assert not (tmp_path / "a").exists()


def test_an_empty_out_dir_is_refused(tmp_path, monkeypatch):
    # Path("") is the current folder: the sweep would write its cells there
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="out_dir must name a results folder"):
        _tiny_sweep("")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("address", ["tcp://host:abc", "tcp://host:99999", "http://host:8786",
                                     "tcp://", "garbage address", "tcp://:8786", "host:",
                                     "tcp://a:1:2"])
def test_a_malformed_scheduler_address_is_refused_at_once(tmp_path, address):
    # refused at once, not after the client's connection timeout with a traceback
    start = time.perf_counter()
    with pytest.raises(ValueError, match="scheduler must be a Dask scheduler address"):
        _tiny_sweep(tmp_path / "s", backend="dask", scheduler=address)
    assert time.perf_counter() - start < 5 and not (tmp_path / "s").exists()


@pytest.mark.parametrize("address", ["tcp://10.0.0.1:8786", "10.0.0.1:8786", "localhost",
                                     "tls://scheduler-1.example.org:8786", "tcp://[::1]:8786",
                                     "ws://h:1", "ucx://h:65535", "inproc://10.0.0.1/123/1"])
def test_well_formed_scheduler_addresses_pass_the_check(address):
    assert ca._validate_scheduler(address) == address


# --- links planted in a results folder are not followed ---------------------------------

def test_a_planted_lock_link_is_refused(tmp_path):
    out, target = tmp_path / "s", tmp_path / "elsewhere" / "victim"
    out.mkdir()
    target.parent.mkdir()
    (out / ".lock").symlink_to(target)      # dangling: opening it would create the victim
    with pytest.raises(ValueError, match=r"\.lock .* is a symbolic link"):
        _tiny_sweep(out)
    assert not target.exists() and not (out / "sweep.json").exists()


def test_a_planted_cells_link_is_refused(tmp_path):
    out, target = tmp_path / "s", tmp_path / "elsewhere"
    out.mkdir()
    target.mkdir()
    (out / "cells").symlink_to(target, target_is_directory=True)
    with pytest.raises(ValueError, match=r"cells .* is a symbolic link"):
        _tiny_sweep(out)
    assert list(target.iterdir()) == []


def test_a_planted_temporary_table_link_is_not_followed(tmp_path):
    # a table written to a fixed name .results.csv.tmp would go through any
    # link planted there, and be renamed: the link's target overwritten
    out, victim = tmp_path / "s", tmp_path / "victim.txt"
    out.mkdir()
    victim.write_text("precious\n")
    (out / ".results.csv.tmp").symlink_to(victim)
    df = _tiny_sweep(out)
    assert victim.read_text() == "precious\n"
    assert (out / "results.csv").read_text() == df.to_csv(index=False)
    assert not (out / "results.csv").is_symlink()


def test_cells_of_another_eta_are_recomputed(tmp_path):
    # a cell's key holds a hash of every setting that changes its numbers:
    # cells computed at eta = 0.5, copied into a sweep at eta = 0.25, must be
    # refused and recomputed (the stale-cell class of bug, for a setting)
    X, R = _tiny(0)
    kw = dict(runs=3, block=1, backend="sequential")
    ca.sweep({"t": (X, R)}, ["marginal"], [0.3], tmp_path / "a", eta=0.5, **kw)
    (tmp_path / "b").mkdir()
    for p in _cell_paths(tmp_path / "a"):
        (tmp_path / "b" / "cells").mkdir(exist_ok=True)
        (tmp_path / "b" / "cells" / p.name).write_bytes(p.read_bytes())
    with pytest.warns(RuntimeWarning, match="computed again"):
        df = ca.sweep({"t": (X, R)}, ["marginal"], [0.3], tmp_path / "b", eta=0.25, **kw)
    assert df.attrs["computed"] == 3 and df.attrs["reused"] == 0
    fresh = ca.sweep({"t": (X, R)}, ["marginal"], [0.3], tmp_path / "c", eta=0.25, **kw)
    assert df.equals(fresh)
    stale = ca.sweep({"t": (X, R)}, ["marginal"], [0.3], tmp_path / "a", eta=0.5, **kw)
    assert not np.array_equal(stale.error, fresh.error)    # eta changes these numbers


def test_progress_bar_only_on_a_terminal_or_when_asked(tmp_path, capsys):
    # progress=None: a bar only when stderr is a terminal (under pytest it is not)
    _tiny_sweep(tmp_path / "a")
    assert "sweep cells" not in capsys.readouterr().err
    _tiny_sweep(tmp_path / "b", progress=True)
    assert "sweep cells" in capsys.readouterr().err
    _tiny_sweep(tmp_path / "c", progress=False)
    assert capsys.readouterr().err == ""


def test_sweep_with_numpy_typed_settings(small, tmp_path):
    # failed with a traceback: the settings went into the sweep's JSON records
    X, R = small
    s = ca.ModelSettings(n_trees=np.int64(5), max_depth=np.uint8(2))
    df = ca.sweep({"syn": (X, R)}, ["tree-greedy"], [[0.5, 0.5]], tmp_path / "s", runs=2,
                  seed=1, n_jobs=1, settings=s)
    ref = ca.simulate(X, R, [0.5, 0.5], "tree-greedy", runs=2, seed=1,
                      settings=ca.ModelSettings(n_trees=5, max_depth=2))
    np.testing.assert_array_equal(df.error.to_numpy(), ref.errors)
