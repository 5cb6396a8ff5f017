"""Coupon's tree depth: does the depth of the bootstrap trees decide whether trees trail?

On Coupon our tree greedy policy trails logistic greedy by a little (Fig. 3c,
chapter ``exp_tabular``), as the paper's own Table 4 has it in four of its
five seeds, while the paper's text says trees are at least as good.  The
trees' depth (3, App. E.2) is one setting that could decide the sign.
:func:`write_coupon_depth` runs logistic greedy and tree greedy at each depth
of :data:`DEPTHS` on the same task orders (paired runs) at the interior
capacities of the paper's grid, exactly the protocol of ``exp_tabular``, and
stores the per-run errors in a checksummed file that the scorecard reads
(``python -m capbook coupon-depth``, about two CPU-minutes)::

    CAPASSIGN_DATA=/path/to/data python -m capbook coupon-depth          # writes the file
    CAPASSIGN_DATA=/path/to/data python -m capbook coupon-depth --check

At depth 3 the runs are those of ``exp_tabular`` (same seed, runs and
settings), so its stored gap is recomputed bit for bit; :func:`depth_gaps`
gives each depth's gap with its paired standard error.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import capassign as ca
from capassign import _canonical_json, _json_digest, _task_digest, _write_text_atomic

from .engines import _read_checksummed
from .pipeline import BOOK_DIR

#: The results file (committed).
DEPTH_PATH = BOOK_DIR / "results" / "coupon_depth.json"
#: Version tag of the file.
DEPTH_SCHEMA = "capassign.coupon-depth/1"
#: Tree depths compared: the paper's (3, App. E.2) and a deeper one.
DEPTHS = (3, 5)


def depth_settings(runs=ca.PAPER_RUNS, eta=ca.PAPER_ETA, seed=0, depths=DEPTHS):
    """What the stored numbers depend on besides the data.

    Parameters
    ----------
    runs : int
        Task orders per capacity (the paper's 100, as ``exp_tabular``).
    eta : float
        Queue penalty.
    seed : int
        Seed of the runs (``exp_tabular``'s 0).
    depths : sequence of int
        Tree depths.

    Returns
    -------
    dict
        Plain JSON data; a file made with other settings is refused by
        :func:`read_coupon_depth`.

    Examples
    --------
    >>> st = depth_settings()
    >>> st["alphas"], st["depths"], st["runs"]
    ([0.2, 0.4, 0.5, 0.6, 0.8], [3, 5], 100)
    """
    return {"task": "coupon", "coding": ca.CONTEXT_CODINGS[0],
            "alphas": [a for a in ca.PAPER_ALPHAS if 0 < a < 1], "runs": runs, "eta": eta,
            "seed": seed, "depths": [int(d) for d in depths],
            "model_settings": ca.PAPER_SETTINGS.fields()}


def write_coupon_depth(path=DEPTH_PATH, *, runs=ca.PAPER_RUNS, out=print):
    """Compute logistic greedy and tree greedy at every depth on paired runs; write the file.

    Parameters
    ----------
    path : str or Path
        Output file (default :data:`DEPTH_PATH`).
    runs : int
        Task orders per capacity.
    out : callable or None
        Progress printer (``None``: silent).

    Returns
    -------
    Path
        The path written.

    Examples
    --------
    >>> write_coupon_depth("/tmp/depth.json", runs=0)
    Traceback (most recent call last):
    ...
    ValueError: runs must be an integer >= 1, got 0
    """
    ca._validate_int(runs, "runs", lo=1)
    say = out or (lambda *a: None)
    st = depth_settings(runs)
    task = ca.load_task(st["task"], coding=st["coding"])
    errors = {}
    for a in st["alphas"]:
        kw = dict(eta=st["eta"], runs=runs, seed=st["seed"])
        cell = {"logistic-greedy": ca.simulate(task.X, task.R, (a, 1 - a), "logistic-greedy",
                                               **kw).errors.tolist()}
        for d in st["depths"]:
            settings = ca.ModelSettings(**dict(ca.PAPER_SETTINGS.fields(), max_depth=d))
            cell[f"tree-greedy-depth{d}"] = ca.simulate(
                task.X, task.R, (a, 1 - a), "tree-greedy", settings=settings, **kw).errors.tolist()
        errors[str(a)] = cell
        say(f"alpha_1 = {a}: " + ", ".join(f"{k} {np.mean(v):.4f}" for k, v in cell.items()))
    return _write_results(path, DEPTH_SCHEMA, st, task, errors)


def _write_results(path, schema, settings, task, errors):
    """Write a Coupon results file: schema, settings, the task's data hash, the per-run
    errors and the checksum of it all; return its path."""
    path = Path(path)
    payload = {"schema": schema, "settings": settings, "digest": _task_digest(task.X, task.R),
               "errors": errors}
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_text_atomic(path, json.dumps(dict(payload, sha256=_json_digest(payload)),
                                        sort_keys=True, indent=1) + "\n")
    return path


def _read_results(path, schema, settings_now, command, check_data):
    """A Coupon results file, verified: checksum and schema, settings equal to
    ``settings_now(stored settings)`` and, with ``check_data``, the task's data hash."""
    path = Path(path)
    obj, _ = _read_checksummed(path, schema)
    st = obj["settings"]
    if st != json.loads(_canonical_json(settings_now(st))):
        raise ValueError(f"{path}: computed with other settings; re-run "
                         f"python -m capbook {command}")
    if check_data:
        task = ca.load_task(st["task"], coding=st["coding"])
        if _task_digest(task.X, task.R) != obj["digest"]:
            raise ValueError(f"{path}: Coupon differs from the data it was computed on")
    return obj


def read_coupon_depth(path=DEPTH_PATH, *, check_data=False):
    """The stored depth comparison, verified (schema, checksum, settings of the library as
    it is now and, with ``check_data``, the task's data hash).

    Parameters
    ----------
    path : str or Path
        The file (default :data:`DEPTH_PATH`).
    check_data : bool
        Also rebuild the Coupon task and compare its data hash.

    Returns
    -------
    dict
        ``schema``, ``settings`` (:func:`depth_settings`), ``digest``, ``errors``
        (per capacity, per policy, one error per run) and ``sha256``.  Raises
        ValueError on any mismatch.

    Examples
    --------
    >>> obj = read_coupon_depth()
    >>> obj["settings"]["depths"], len(obj["errors"])
    ([3, 5], 5)
    """
    return _read_results(path, DEPTH_SCHEMA,
                         lambda st: depth_settings(st["runs"], st["eta"], st["seed"],
                                                   st["depths"]),
                         "coupon-depth", check_data)


def depth_gaps(obj):
    """Tree greedy minus logistic greedy, mean over the interior capacities, per depth.

    Each run's gap is averaged over the capacities (the runs are paired: the same
    task order for every policy at a capacity), so the standard error is that of the
    mean of the per-run gaps.

    Parameters
    ----------
    obj : dict
        A file as :func:`read_coupon_depth` returns it.

    Returns
    -------
    pandas.DataFrame
        Indexed by ``depth``: ``gap`` (tree minus logistic), ``se`` (paired standard
        error), ``runs``.

    Examples
    --------
    >>> g = depth_gaps(read_coupon_depth())
    >>> list(g.index), list(g.columns)
    ([3, 5], ['gap', 'se', 'runs'])
    """
    import pandas as pd

    cells = obj["errors"].values()
    log = np.mean([np.asarray(c["logistic-greedy"]) for c in cells], axis=0)
    rows = []
    for d in obj["settings"]["depths"]:
        tree = np.mean([np.asarray(c[f"tree-greedy-depth{d}"]) for c in cells], axis=0)
        g = tree - log
        rows.append({"depth": d, "gap": float(g.mean()),
                     "se": float(g.std(ddof=1) / np.sqrt(len(g))), "runs": len(g)})
    return pd.DataFrame(rows).set_index("depth")
