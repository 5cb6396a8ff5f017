"""The two engines on one full stream: the persistent bootstrap against a fresh resample.

The fast engine keeps each tree's online (Poisson) bootstrap weights across
refits, where the paper (and the reference engine, ``capassign.simulate(...,
engine="reference")``) draws a fresh resample of the agent's data at every
refit.  The engine validation of chapter ``fast_engine`` compares them on
prefixes of 2,000 tasks; :func:`write_full_stream` compares them on the whole
Coupon stream, tree greedy at alpha = (0.5, 0.5), and stores the per-run errors
in a checksummed file that the scorecard reads (``python -m capbook
full-stream``, a few CPU-minutes, nearly all of them the reference engine)::

    CAPASSIGN_DATA=/path/to/data python -m capbook full-stream
    CAPASSIGN_DATA=/path/to/data python -m capbook full-stream --check

The two engines agree in distribution, not draw by draw, so
:func:`engine_gap` compares their means with the standard error of a
difference of two independent means.
"""

from __future__ import annotations

import numpy as np

import capassign as ca

from .depth import _read_results, _write_results
from .pipeline import BOOK_DIR

#: The results file (committed).
FULL_STREAM_PATH = BOOK_DIR / "results" / "coupon_full_stream.json"
#: Version tag of the file.
FULL_STREAM_SCHEMA = "capassign.coupon-full-stream/1"


def full_stream_settings(runs=60, eta=ca.PAPER_ETA, seed=0):
    """What the stored numbers depend on besides the data.

    Parameters
    ----------
    runs : int
        Task orders per engine.
    eta : float
        Queue penalty.
    seed : int
        Seed of the runs.

    Returns
    -------
    dict
        Plain JSON data; a file made with other settings is refused by
        :func:`read_full_stream`.

    Examples
    --------
    >>> st = full_stream_settings()
    >>> st["task"], st["capacities"], st["policy"], st["engines"]
    ('coupon', [0.5, 0.5], 'tree-greedy', ['fast', 'reference'])
    """
    return {"task": "coupon", "coding": ca.CONTEXT_CODINGS[0], "capacities": [0.5, 0.5],
            "policy": "tree-greedy", "engines": list(ca.ENGINES), "runs": runs, "eta": eta,
            "seed": seed, "model_settings": ca.PAPER_SETTINGS.fields()}


def write_full_stream(path=FULL_STREAM_PATH, *, runs=60, out=print):
    """Run tree greedy on the whole Coupon stream on both engines and write the file.

    Parameters
    ----------
    path : str or Path
        Output file (default :data:`FULL_STREAM_PATH`).
    runs : int
        Task orders per engine.
    out : callable or None
        Progress printer (``None``: silent).

    Returns
    -------
    Path
        The path written.

    Examples
    --------
    >>> write_full_stream("/tmp/full.json", runs=1)
    Traceback (most recent call last):
    ...
    ValueError: runs must be an integer >= 2, got 1
    """
    ca._validate_int(runs, "runs", lo=2)
    say = out or (lambda *a: None)
    st = full_stream_settings(runs)
    task = ca.load_task(st["task"], coding=st["coding"])
    errors = {}
    for engine in st["engines"]:
        res = ca.simulate(task.X, task.R, tuple(st["capacities"]), st["policy"], eta=st["eta"],
                          runs=runs, seed=st["seed"], engine=engine)
        errors[engine] = res.errors.tolist()
        say(f"{engine}: {res.error:.4f}")
    return _write_results(path, FULL_STREAM_SCHEMA, st, task, errors)


def read_full_stream(path=FULL_STREAM_PATH, *, check_data=False):
    """The stored comparison, verified (schema, checksum, settings of the library as it is
    now and, with ``check_data``, the task's data hash).

    Parameters
    ----------
    path : str or Path
        The file (default :data:`FULL_STREAM_PATH`).
    check_data : bool
        Also rebuild the Coupon task and compare its data hash.

    Returns
    -------
    dict
        ``schema``, ``settings`` (:func:`full_stream_settings`), ``digest``,
        ``errors`` (per engine, one error per run) and ``sha256``.  Raises
        ValueError on any mismatch.

    Examples
    --------
    >>> sorted(read_full_stream()["errors"])
    ['fast', 'reference']
    """
    return _read_results(path, FULL_STREAM_SCHEMA,
                         lambda st: full_stream_settings(st["runs"], st["eta"], st["seed"]),
                         "full-stream", check_data)


def engine_gap(obj):
    """Fast minus reference engine: mean error difference and its standard error.

    Parameters
    ----------
    obj : dict
        A file as :func:`read_full_stream` returns it (or any dict with ``errors``
        per engine).

    Returns
    -------
    dict
        ``gap`` (fast minus reference), ``se`` (of a difference of two independent
        means), ``runs`` (per engine).

    Examples
    --------
    >>> engine_gap({"errors": {"fast": [0.30, 0.32], "reference": [0.31, 0.31]}})["gap"]
    0.0
    """
    f = np.asarray(obj["errors"]["fast"], dtype=float)
    r = np.asarray(obj["errors"]["reference"], dtype=float)
    se = np.sqrt(f.var(ddof=1) / len(f) + r.var(ddof=1) / len(r))
    return {"gap": round(float(f.mean() - r.mean()), 12), "se": float(se), "runs": len(f)}
