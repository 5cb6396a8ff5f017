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

SUBCOMMANDS = (["reproduce"], ["sync-text"], ["data"], ["data", "list"], ["data", "verify"],
               ["data", "fetch"], ["bench"], ["simulate"], ["sweep"])


@pytest.mark.parametrize("words", SUBCOMMANDS, ids=" ".join)
def test_every_subcommand_has_help(words, capsys):
    with pytest.raises(SystemExit) as exc:
        ca.main(words + ["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith(f"usage: capassign {' '.join(words)}")
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
