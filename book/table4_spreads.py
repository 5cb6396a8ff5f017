"""Table 4's spreads: our errors on every construction seed matched to a row of the paper's Table 4.

The paper's Table 4 (App. H.2) reports, for five agent-construction seeds of
each tabular data set, the error at alpha = (0.5, 0.5) over 10 runs of random
assignment, logistic greedy and tree greedy.  Its seeds' agents cannot be
rebuilt, so each row is compared with the range of our values over the
construction seeds whose agents match it (``capassign.table4_matched_seeds``,
the rule of data/README.md).  This script computes those values for every
matched seed, under both codings of the policies' contexts (the coding by
column type and the z-scored codes used before it; same seeds, same agents),
and stores the per-run errors in a checksummed file that the book reads::

    CAPASSIGN_DATA=/path/to/data python book/table4_spreads.py       # writes the file
    CAPASSIGN_DATA=/path/to/data python book/table4_spreads.py --check

The work is stored task by task in ``<file>.<task>.<coding>.partial`` files,
so an interrupted run resumes; the same inputs give the same bytes.
``read()`` returns the verified payload and ``errors_frame()`` the table that
``capassign.table4_spreads`` takes.
"""
import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

import capassign as ca

#: The results file (committed).
PATH = Path(__file__).resolve().parent / "results" / "table4_spreads.json"
#: Version tag of the file.
SCHEMA = "capassign.table4-spreads/1"


def _canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _digest(obj):
    return hashlib.sha256(_canonical(obj).encode()).hexdigest()


def _task_digest(task):
    """sha256 of a task's contexts and rewards (dtype, shape, bytes)."""
    h = hashlib.sha256()
    for label, arr in (("X", task.X), ("R", task.R)):
        arr = np.ascontiguousarray(arr)
        h.update(f"{label}:{arr.dtype.str}:{list(arr.shape)};".encode())
        h.update(arr.tobytes())
    return h.hexdigest()


def _write_atomic(path, text):
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename."""
    tmp = path.with_name(f".tmp-{path.name}")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def settings(runs=ca.TABLE4_RUNS, eta=ca.DEFAULT_ETA, seed=0):
    """What the stored numbers depend on besides the data: the protocol, the agents'
    readings and the seed search they were matched on."""
    return {"capacities": [0.5, 0.5], "runs": runs, "eta": eta, "seed": seed,
            "policies": list(ca.TABLE4_POLICIES), "match_tol": ca.MATCH_TOL,
            "codings": list(ca.CONTEXT_CODINGS),
            "agents": {"subset": ca.TABULAR_SUBSET, "scaling": ca.TABULAR_SCALING,
                       "encoding": dict(ca.TABULAR_ENCODING)},
            "agent_search_sha256": hashlib.sha256(ca.TABULAR_AGENTS_PATH.read_bytes()).hexdigest(),
            "model_settings": {k: getattr(ca.PAPER_SETTINGS, k) for k in
                               ca.PAPER_SETTINGS.__dataclass_fields__}}


def _matched(name):
    m = ca.table4_matched_seeds(name)
    return {str(r): [int(s) for s in m.seed[m.row == r]] for r in range(5)}


def _compute_part(name, coding, head, part, say):
    """Cells of one (task, coding): taken from its partial file when that was made with
    the same settings, else computed seed by seed (each seed saved as it is done)."""
    cells = {}
    if part.exists():
        old = json.loads(part.read_text(encoding="utf-8"))
        if old.get("head") == json.loads(_canonical(head)):
            cells = old["cells"]
            say(f"{name} {coding}: resuming, {len(cells)} seeds stored")
    st = head["settings"]
    for s in sorted({s for seeds in head["matched"].values() for s in seeds}):
        if str(s) in cells:
            continue
        df = ca.table4_seed_errors(name, [s], coding=coding, runs=st["runs"], eta=st["eta"],
                                   seed=st["seed"])
        task = ca.load_task(name, s, coding=coding)
        cells[str(s)] = {"digest": _task_digest(task),
                         "accuracies": [float(a) for a in task.accuracies],
                         "errors": {r.policy: [float(e) for e in r.errors]
                                    for r in df.itertuples()}}
        _write_atomic(part, json.dumps({"head": head, "cells": cells}, sort_keys=True))
        say(f"{name} {coding} seed {s}: " + ", ".join(
            f"{p} {np.mean(v):.4f}" for p, v in cells[str(s)]["errors"].items()))
    return cells


def write(path=PATH, *, tasks=ca.TABULAR_TASKS, runs=ca.TABLE4_RUNS, eta=ca.DEFAULT_ETA,
          seed=0, out=print):
    """Compute every matched seed's errors under both codings and write the file.

    Returns the path written, or None when only some tasks were asked for (their
    partial files are then complete; a last call with every task writes the file).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    say = out or (lambda *a: None)
    st = settings(runs, eta, seed)
    payload = {"schema": SCHEMA, "settings": st, "tasks": {}}
    for name in tasks:
        rec = {"matched": _matched(name), "codings": {}}
        for coding in ca.CONTEXT_CODINGS:
            head = {"settings": st, "task": name, "coding": coding, "matched": rec["matched"]}
            part = path.with_name(f"{path.name}.{name}.{coding}.partial")
            rec["codings"][coding] = _compute_part(name, coding, head, part, say)
        payload["tasks"][name] = rec
    if tuple(tasks) != ca.TABULAR_TASKS:
        return None
    _write_atomic(path, json.dumps(dict(payload, sha256=_digest(payload)), sort_keys=True,
                                   indent=1) + "\n")
    for name in tasks:
        for coding in ca.CONTEXT_CODINGS:
            path.with_name(f"{path.name}.{name}.{coding}.partial").unlink(missing_ok=True)
    return path


def read(path=PATH, *, check_data=False):
    """The stored spreads, verified: schema, checksum, the matched seeds and the agents'
    readings of the library as it is now, and (``check_data``) every task's data hash
    (rebuilds every matched task: minutes).  Raises ValueError on any mismatch."""
    path = Path(path)
    obj = json.loads(path.read_text(encoding="utf-8"))
    if obj.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not a {SCHEMA} file")
    payload = {k: v for k, v in obj.items() if k != "sha256"}
    if obj.get("sha256") != _digest(payload):
        raise ValueError(f"{path}: checksum mismatch (the file was edited or is damaged)")
    now = settings(obj["settings"]["runs"], obj["settings"]["eta"], obj["settings"]["seed"])
    if obj["settings"] != json.loads(_canonical(now)):
        raise ValueError(f"{path}: computed with other settings, agents or seed search; "
                         f"re-run python book/table4_spreads.py")
    for name, rec in obj["tasks"].items():
        if rec["matched"] != _matched(name):
            raise ValueError(f"{path}: the matched seeds of {name} have changed")
        if check_data:
            for coding, cells in rec["codings"].items():
                for s, cell in cells.items():
                    task = ca.load_task(name, int(s), coding=coding)
                    if _task_digest(task) != cell["digest"]:
                        raise ValueError(f"{path}: {name} seed {s} ({coding}) differs from the "
                                         f"data it was computed on")
    return obj


def errors_frame(obj):
    """The stored errors as ``capassign.table4_seed_errors`` returns them (all tasks and
    codings): task, coding, agent_seed, policy, error (mean of the runs), errors."""
    rows = []
    for name, rec in obj["tasks"].items():
        for coding, cells in rec["codings"].items():
            for s, cell in sorted(cells.items(), key=lambda kv: int(kv[0])):
                for p in obj["settings"]["policies"]:
                    e = np.asarray(cell["errors"][p], dtype=float)
                    rows.append(dict(task=name, coding=coding, agent_seed=int(s), policy=p,
                                     error=float(e.mean()), errors=e))
    return pd.DataFrame(rows)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=str(PATH), help="results file (default %(default)s)")
    parser.add_argument("--tasks", default=",".join(ca.TABULAR_TASKS),
                        help="comma-separated tabular tasks (default: all; a last call with "
                             "all of them writes the file)")
    parser.add_argument("--check", action="store_true",
                        help="verify the stored file, data hashes included, and exit")
    args = parser.parse_args(argv)
    if args.check:
        obj = read(args.out, check_data=True)
        print(f"{args.out}: ok, {len(errors_frame(obj))} (task, coding, seed, policy) cells")
        return 0
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    done = write(args.out, tasks=tasks)
    print(f"wrote {done}" if done else "partial files complete for " + ", ".join(tasks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
