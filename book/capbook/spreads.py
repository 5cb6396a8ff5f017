"""Table 4's spreads: our errors on every construction seed matched to a row of the paper's Table 4.

The paper's Table 4 (App. H.2) reports, for five agent-construction seeds of
each tabular data set, the error at alpha = (0.5, 0.5) over 10 runs of random
assignment, logistic greedy and tree greedy.  Its seeds' agents cannot be
rebuilt, so each row is compared with the range of our values over the
construction seeds whose agents match it (:func:`capbook.evidence.table4_matched_seeds`,
the rule of data/README.md).  :func:`write_table4_spreads` computes those
values for every matched seed, under both codings of the policies' contexts
(by column type, and the z-scored codes used before it; same seeds, same
agents), and stores the per-run errors in a checksummed file that the book
reads (``python -m capbook table4-spreads``, about an hour on one core)::

    CAPASSIGN_DATA=/path/to/data python -m capbook table4-spreads          # writes the file
    CAPASSIGN_DATA=/path/to/data python -m capbook table4-spreads --check

The work is stored task by task in ``<file>.<task>.<coding>.partial`` files,
so an interrupted run resumes; the same inputs give the same bytes.
:func:`read_table4_spreads` returns the verified payload and
:func:`spreads_errors` the table that :func:`capbook.evidence.table4_spreads` takes.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

import capassign as ca
from capassign import _canonical_json, _json_digest, _task_digest, _write_json_atomic, \
    _write_text_atomic

from .engines import _check_results_path, _read_checksummed
from .evidence import (MATCH_TOL, TABLE4_POLICIES, TABLE4_RUNS, table4_matched_seeds,
                       table4_seed_errors)
from .pipeline import BOOK_DIR

#: The results file (committed).
SPREADS_PATH = BOOK_DIR / "results" / "table4_spreads.json"
#: Version tag of the file.
SPREADS_SCHEMA = "capassign.table4-spreads/1"


def spreads_settings(runs=TABLE4_RUNS, eta=ca.PAPER_ETA, seed=0):
    """What the stored numbers depend on besides the data: the protocol, the agents'
    readings and the seed search they were matched on.

    Parameters
    ----------
    runs : int
        Task orders per seed.
    eta : float
        Queue penalty.
    seed : int
        Seed of the runs.

    Returns
    -------
    dict
        Plain JSON data; a stored file whose settings differ from these was made
        by another library or protocol and is refused by :func:`read_table4_spreads`.

    Examples
    --------
    >>> st = spreads_settings()
    >>> st["runs"], st["capacities"], st["codings"]
    (10, [0.5, 0.5], ['typed', 'codes'])
    """
    return {"capacities": [0.5, 0.5], "runs": runs, "eta": eta, "seed": seed,
            "policies": list(TABLE4_POLICIES), "match_tol": MATCH_TOL,
            "codings": list(ca.CONTEXT_CODINGS),
            "agents": {"subset": ca.TABULAR_SUBSET, "scaling": ca.TABULAR_SCALING,
                       "encoding": dict(ca.TABULAR_ENCODING)},
            "agent_search_sha256": hashlib.sha256(ca.TABULAR_AGENTS_PATH.read_bytes()).hexdigest(),
            "model_settings": ca.PAPER_SETTINGS.fields()}


def _matched(name):
    m = table4_matched_seeds(name)
    return {str(r): [int(s) for s in m.seed[m.row == r]] for r in range(5)}


def _read_partial(part):
    """A partial file's ``{"head": ..., "cells": {seed: cell}}``, or a one-line
    ValueError naming it when it is not one (delete it to recompute)."""
    fix = f"partial file {str(part)!r} is not one table4-spreads writes"
    try:
        old = json.loads(part.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ValueError(f"{fix} (not JSON); delete it to recompute its seeds") from None
    cells = old.get("cells") if isinstance(old, dict) else None
    if not isinstance(cells, dict) or not all(
            isinstance(c, dict) and {"digest", "accuracies", "errors"} <= set(c)
            and isinstance(c["errors"], dict) for c in cells.values()):
        raise ValueError(f"{fix} (no valid 'cells'); delete it to recompute its seeds")
    return old


def _compute_part(name, coding, head, part, say):
    """Cells of one (task, coding): taken from its partial file when that was made with
    the same settings, else computed seed by seed (each seed saved as it is done)."""
    cells = {}
    if part.exists():
        old = _read_partial(part)
        if old.get("head") == json.loads(_canonical_json(head)):
            cells = old["cells"]
            say(f"{name} {coding}: resuming, {len(cells)} seeds stored")
    st = head["settings"]
    for s in sorted({s for seeds in head["matched"].values() for s in seeds}):
        if str(s) in cells:
            continue
        df = table4_seed_errors(name, [s], coding=coding, runs=st["runs"], eta=st["eta"],
                                   seed=st["seed"])
        task = ca.load_task(name, s, coding=coding)
        cells[str(s)] = {"digest": _task_digest(task.X, task.R),
                         "accuracies": [float(a) for a in task.accuracies],
                         "errors": {r.policy: [float(e) for e in r.errors]
                                    for r in df.itertuples()}}
        _write_json_atomic(part, {"head": head, "cells": cells})
        say(f"{name} {coding} seed {s}: " + ", ".join(
            f"{p} {np.mean(v):.4f}" for p, v in cells[str(s)]["errors"].items()))
    return cells


def write_table4_spreads(path=SPREADS_PATH, *, tasks=ca.TABULAR_TASKS, runs=TABLE4_RUNS,
                         eta=ca.PAPER_ETA, seed=0, out=print):
    """Compute every matched seed's errors under both codings and write the file.

    Each (task, coding) is kept in ``<path>.<task>.<coding>.partial`` seed by
    seed, so an interrupted call resumes; a partial file made with other
    settings is recomputed.

    Parameters
    ----------
    path : str or Path
        Output file (default :data:`SPREADS_PATH`).
    tasks : sequence of str
        Tabular tasks to compute (default all four).
    runs, eta, seed
        As :func:`spreads_settings`.
    out : callable or None
        Progress printer (``None``: silent).

    Returns
    -------
    Path or None
        The path written, or None when only some tasks were asked for (their
        partial files are then complete; a last call with every task writes
        the file).

    Examples
    --------
    Names are checked before any work:

    >>> write_table4_spreads("/tmp/spreads.json", tasks=["mnist"])
    Traceback (most recent call last):
    ...
    ValueError: name must be one of 'bank', 'credit', 'coupon', 'cardio', got 'mnist'
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path = _check_results_path(path, [f"{t}.{c}" for t in tasks for c in ca.CONTEXT_CODINGS],
                               "path")
    say = out or (lambda *a: None)
    st = spreads_settings(runs, eta, seed)
    payload = {"schema": SPREADS_SCHEMA, "settings": st, "tasks": {}}
    for name in tasks:
        rec = {"matched": _matched(name), "codings": {}}
        for coding in ca.CONTEXT_CODINGS:
            head = {"settings": st, "task": name, "coding": coding, "matched": rec["matched"]}
            part = path.with_name(f"{path.name}.{name}.{coding}.partial")
            rec["codings"][coding] = _compute_part(name, coding, head, part, say)
        payload["tasks"][name] = rec
    if tuple(tasks) != ca.TABULAR_TASKS:
        return None
    _write_text_atomic(path, json.dumps(dict(payload, sha256=_json_digest(payload)),
                                        sort_keys=True, indent=1) + "\n")
    for name in tasks:
        for coding in ca.CONTEXT_CODINGS:
            path.with_name(f"{path.name}.{name}.{coding}.partial").unlink(missing_ok=True)
    return path


def read_table4_spreads(path=SPREADS_PATH, *, check_data=False):
    """The stored spreads, verified: schema, checksum, the matched seeds and the agents'
    readings of the library as it is now, and (``check_data``) every task's data hash
    (rebuilds every matched task: minutes).

    Parameters
    ----------
    path : str or Path
        The file (default :data:`SPREADS_PATH`).
    check_data : bool
        Also rebuild every matched task and compare its data hash.

    Returns
    -------
    dict
        ``schema``, ``settings`` (:func:`spreads_settings`), ``tasks`` (per task:
        ``matched`` seeds by Table 4 row, ``codings`` with each seed's cells)
        and ``sha256``.  Raises ValueError on any mismatch.

    Examples
    --------
    >>> obj = read_table4_spreads()
    >>> obj["settings"]["runs"], sorted(obj["tasks"]) == sorted(ca.TABULAR_TASKS)
    (10, True)
    """
    path = Path(path)
    obj, _ = _read_checksummed(path, SPREADS_SCHEMA)
    now = spreads_settings(obj["settings"]["runs"], obj["settings"]["eta"],
                           obj["settings"]["seed"])
    if obj["settings"] != json.loads(_canonical_json(now)):
        raise ValueError(f"{path}: computed with other settings, agents or seed search; "
                         f"re-run python -m capbook table4-spreads")
    for name, rec in obj["tasks"].items():
        if rec["matched"] != _matched(name):
            raise ValueError(f"{path}: the matched seeds of {name} have changed")
        if check_data:
            for coding, cells in rec["codings"].items():
                for s, cell in cells.items():
                    task = ca.load_task(name, int(s), coding=coding)
                    if _task_digest(task.X, task.R) != cell["digest"]:
                        raise ValueError(f"{path}: {name} seed {s} ({coding}) differs from the "
                                         f"data it was computed on")
    return obj


def spreads_errors(obj):
    """The stored errors as :func:`capbook.evidence.table4_seed_errors` returns them (all tasks and
    codings).

    Parameters
    ----------
    obj : dict
        A file as :func:`read_table4_spreads` returns it.

    Returns
    -------
    pandas.DataFrame
        One row per task, coding, matched seed and policy: ``task``, ``coding``,
        ``agent_seed``, ``policy``, ``error`` (mean of the runs), ``errors``
        (one per run).

    Examples
    --------
    >>> df = spreads_errors(read_table4_spreads())
    >>> df[df.coding == "typed"].groupby("task").agent_seed.nunique().to_dict()
    {'bank': 34, 'cardio': 40, 'coupon': 32, 'credit': 30}
    """
    import pandas as pd

    rows = []
    for name, rec in obj["tasks"].items():
        for coding, cells in rec["codings"].items():
            for s, cell in sorted(cells.items(), key=lambda kv: int(kv[0])):
                for p in obj["settings"]["policies"]:
                    e = np.asarray(cell["errors"][p], dtype=float)
                    rows.append(dict(task=name, coding=coding, agent_seed=int(s), policy=p,
                                     error=float(e.mean()), errors=e))
    return pd.DataFrame(rows)
