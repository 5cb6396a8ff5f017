"""The fast engine checked where the paper's results live: the tabular tasks.

Every tabular result of the book comes from ``engine="fast"`` of
:func:`capassign.simulate`.  Here both engines run the same paired streams of
Bank, Credit, Coupon and Cardio, and the per-run numbers are stored in a
checksummed file (``book/results/engine_validation.json``) that the
fast_engine chapter reads: the reference engine is too slow to re-run there.
:func:`validate_engines` writes the file (``python -m capbook
validate-engines``), :func:`read_engine_validation` verifies it and
:func:`engine_validation` summarises it.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from capassign import (DEFAULT_ETA, ENGINES, ONLINE_POLICIES, PAPER_SETTINGS, TABULAR_TASKS,
                       _canonical_json, _holm, _json_digest, _paired_t_pvalue, _read_json_file,
                       _task_digest, _validate_bool, _validate_choice, _validate_eta,
                       _validate_int, _validate_names, _validate_real, _write_json_atomic,
                       _write_text_atomic, difference_ci, load_task, simulate,
                       two_agent_capacities)

from .pipeline import BOOK_DIR

#: File written by :func:`validate_engines` and read by :func:`engine_validation`.
ENGINE_VALIDATION_PATH = BOOK_DIR / "results" / "engine_validation.json"
#: Version tag of that file.
ENGINE_VALIDATION_SCHEMA = "capassign.engine-validation/1"


def _validation_draw(seed, r, T, prefix):
    """Rows (sorted) and simulate-seed of paired run ``r``: both from
    ``SeedSequence([seed, r])``, the same for every engine, policy and alpha_1."""
    rows_ss, sim_ss = np.random.SeedSequence([seed, r]).spawn(2)
    rows = np.sort(np.random.default_rng(rows_ss).choice(T, size=min(prefix, T), replace=False))
    return rows, int(sim_ss.generate_state(1, np.uint32)[0])


def _paired_power(sd, n, diff, level=0.05):
    """Power of the two-sided paired t-test at ``level`` to detect a mean
    difference ``diff`` with n pairs of standard deviation ``sd`` (noncentral t)."""
    from scipy import stats

    if n < 2:
        return 0.0
    if sd == 0.0:
        return 1.0
    nc = diff / (sd / math.sqrt(n))
    c = stats.t.ppf(1 - level / 2, n - 1)
    return float(stats.nct.sf(c, n - 1, nc) + stats.nct.cdf(-c, n - 1, nc))


def _runs_for_power(sd, diff, power, level, lo, hi):
    """Smallest n in [lo, hi] whose paired-t power at ``diff`` reaches ``power``
    (``hi`` when none does)."""
    n = lo
    while n < hi and _paired_power(sd, n, diff, level) < power:
        n += 1
    return n


def _validation_run(task, policy, a1, r, prefix, seed, eta):
    """Paired run r of one cell on both engines: errors and agent-1 shares."""
    rows, sim_seed = _validation_draw(seed, r, task.R.shape[0], prefix)
    X, R = task.X[rows], task.R[rows]
    out = {}
    for engine in ENGINES:
        t0 = time.process_time()
        res = simulate(X, R, two_agent_capacities(a1), policy, eta=eta, runs=1, seed=sim_seed,
                       engine=engine)
        out[engine] = (float(res.errors[0]), float(res.assigned[0, 0]),
                       time.process_time() - t0)
    return out


def _validation_settings(policies, alphas, prefix, pilot, max_runs, diff, power, level, eta,
                         seed):
    """The checked settings of :func:`validate_engines`, as stored in its file."""
    policies = _validate_names(policies, ONLINE_POLICIES, "policies", min_count=0)
    alphas = [float(_validate_real(a, "alphas", 0.0, 1.0, lo_open=True, hi_open=True))
              for a in alphas]
    prefix = _validate_int(prefix, "prefix", lo=10)
    pilot = _validate_int(pilot, "pilot", lo=2)
    max_runs = _validate_int(max_runs, "max_runs", lo=pilot)
    diff = _validate_real(diff, "diff", lo=0.0, lo_open=True)
    power = _validate_real(power, "power", 0.0, 1.0, lo_open=True, hi_open=True)
    level = _validate_real(level, "level", 0.0, 1.0, lo_open=True, hi_open=True)
    return {"policies": policies, "alphas": alphas, "prefix": prefix, "pilot": pilot,
            "max_runs": max_runs, "diff": diff, "power": power, "level": level,
            "eta": _validate_eta(eta), "seed": _validate_int(seed, "seed", lo=0),
            "model_settings": asdict(PAPER_SETTINGS)}


def _validation_stored(path, part, name, head, collect, say):
    """The cells of one task that :func:`validate_engines` stored so far: its
    partial file ``part`` when made with the same settings and data, else
    (unless ``collect``) that task's cells of the complete file ``path``."""
    done = []
    if part.exists():
        old, _ = _read_json_file(part)
        if old is not None and old.get("head") == json.loads(_canonical_json(head)):
            done = old["cells"]
            say(f"{name}: resuming, {len(done)} cells stored")
        else:
            say(f"{name}: ignoring {part.name} (other settings or data)")
    elif path.exists() and not collect:
        old, _ = _read_json_file(path)
        same = (old is not None
                and old.get("settings") == json.loads(_canonical_json(head["settings"]))
                and old.get("tasks", {}).get(name) == json.loads(_canonical_json(head["task"])))
        if same:
            done = [{k: v for k, v in c.items() if k != "task"}
                    for c in old["cells"] if c["task"] == name]
            say(f"{name}: {len(done)} cells taken from {path.name}")
    return done


def _validation_add_runs(task, cell, n, st):
    """Paired runs ``cell["runs"]`` .. n - 1 of a cell on both engines
    (deterministic in the run index); ``st`` are the validation's settings."""
    for r in range(cell["runs"], n):
        x = _validation_run(task, cell["policy"], cell["alpha1"], r, st["prefix"], st["seed"],
                            st["eta"])
        for e in ENGINES:
            cell[e]["errors"].append(x[e][0])
            cell[e]["share1"].append(x[e][1])
            cell[e]["cpu_seconds"] = round(cell[e]["cpu_seconds"] + x[e][2], 2)
    cell["runs"] = max(cell["runs"], n)


def _validation_sd(cell, k=None):
    """Sd (ddof 1) of a cell's paired differences fast - reference (its first k runs)."""
    d = np.subtract(cell["fast"]["errors"][:k], cell["reference"]["errors"][:k])
    return float(np.std(d, ddof=1))


def _validation_grow(task, cell, policy, a1, st):
    """One cell of :func:`validate_engines` grown by the sample-size rule.

    A new cell (``cell`` None) gets ``pilot`` paired runs and then the runs
    the rule asks for given the pilot's sd; the rule is then applied again
    with the sd of every run so far, until it asks for no more.
    """
    def rule(sd, n):
        return _runs_for_power(sd, st["diff"], st["power"], st["level"], n, st["max_runs"])

    if cell is None:
        cell = {"policy": policy, "alpha1": a1, "runs": 0}
        cell.update({e: {"errors": [], "share1": [], "cpu_seconds": 0.0} for e in ENGINES})
        _validation_add_runs(task, cell, st["pilot"], st)
        cell["pilot_sd"] = _validation_sd(cell, st["pilot"])
        _validation_add_runs(task, cell, rule(cell["pilot_sd"], st["pilot"]), st)
    while (n := rule(_validation_sd(cell), cell["runs"])) > cell["runs"]:
        _validation_add_runs(task, cell, n, st)
    return cell


def validate_engines(path=None, *, tasks=TABULAR_TASKS, policies=ONLINE_POLICIES,
                     alphas=(0.2, 0.5, 0.8), prefix=2000, pilot=10, max_runs=60, diff=0.005,
                     power=0.8, level=0.05, eta=DEFAULT_ETA, seed=0, collect=False, out=print):
    """Paired comparison of ``engine="fast"`` with ``engine="reference"`` (Sec. 4 tasks).

    For every task (the paper-matched agents of :func:`capassign.load_task`), online
    policy and alpha_1, paired run r draws ``prefix`` rows of the task's
    stream without replacement and a simulate-seed, both from
    ``SeedSequence([seed, r])`` (:func:`_validation_draw`), and runs
    ``simulate(X[rows], R[rows], [alpha_1, 1 - alpha_1], policy, runs=1,
    seed=...)`` on each engine: same rows, same task order, only the engines'
    own random numbers differ.  Sample size per cell: ``pilot`` paired runs
    estimate the sd s of the paired differences; the cell then gets the
    smallest n >= pilot whose two-sided paired t-test at ``level`` has power
    >= ``power`` against a difference ``diff`` given s (noncentral t), capped
    at ``max_runs``.  Then the same rule is applied again with s from all
    the runs so far, adding runs until it asks for no more (a pilot can
    underestimate s); stored cells are extended the same way.

    Results go to ``path`` (default :data:`ENGINE_VALIDATION_PATH`), read by
    :func:`engine_validation`.  The work is chunked: each finished cell is
    kept in ``<path>.<task>.partial`` (atomic writes), so an interrupted call
    resumes where it stopped, and tasks may be computed by separate calls
    (e.g. in parallel) before a last call with every task writes the file.

    Parameters
    ----------
    path : str or Path, optional
        Output file.
    tasks, policies, alphas : sequences
        Tabular task names, online policies (:data:`capassign.ONLINE_POLICIES`),
        capacities of agent 1.
    prefix : int
        Tasks per run (rows drawn from the stream).
    pilot, max_runs : int
        Paired runs before the sample-size rule, and its cap.
    diff, power, level : float
        Difference to detect, the power wanted and the test's level.
    eta : float
        Queue penalty.
    seed : int
        Seed of the row subsets and the runs.
    collect : bool
        Compute nothing: write the file from the cells stored so far (with
        every task), listing the cells still to compute under ``"missing"``.
        A later call without ``collect`` completes them and rewrites it.
    out : callable
        Progress printer (``None`` for silence).

    Returns
    -------
    Path or None
        The file written, or ``None`` when only some tasks were asked for
        (their partial files are then complete).

    Examples
    --------
    The argument checks come before any work:

    >>> validate_engines(pilot=10, max_runs=5)
    Traceback (most recent call last):
        ...
    ValueError: max_runs must be an integer >= 10, got 5
    """
    tasks = [_validate_choice(t, TABULAR_TASKS, "tasks") for t in tasks]
    settings = _validation_settings(policies, alphas, prefix, pilot, max_runs, diff, power,
                                    level, eta, seed)
    policies, alphas = settings["policies"], settings["alphas"]
    collect = _validate_bool(collect, "collect")
    path = Path(path) if path is not None else ENGINE_VALIDATION_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    say = out or (lambda *a: None)
    task_info, cells, missing = {}, [], []
    for name in tasks:
        task = load_task(name)
        info = {"digest": _task_digest(task.X, task.R), "T": int(task.R.shape[0]),
                "d": int(task.X.shape[1]), "agent_seed": int(task.meta["seed"])}
        task_info[name] = info
        part = path.with_name(f"{path.name}.{name}.partial")
        head = {"settings": settings, "task": info}
        stored = {(c["policy"], c["alpha1"]): c
                  for c in _validation_stored(path, part, name, head, collect, say)}
        for policy in policies:
            for a1 in alphas:
                cell = stored.get((policy, a1))
                if cell is None and collect:
                    missing.append([name, policy, a1])
                    continue
                before = None if cell is None else cell["runs"]
                if not collect:
                    cell = _validation_grow(task, cell, policy, a1, settings)
                cells.append(dict(cell, task=name))
                if before == cell["runs"]:
                    continue
                stored[(policy, a1)] = cell
                _write_json_atomic(part, {"head": head, "cells": list(stored.values())})
                diff = np.mean(cell['fast']['errors']) - np.mean(cell['reference']['errors'])
                say(f"{name} {policy} alpha1={a1}: {cell['runs']} runs"
                    + (f" (was {before})" if before else "") + f", mean diff {diff:+.4f}, "
                    f"reference {cell['reference']['cpu_seconds']:.0f} s")
    if tuple(tasks) != TABULAR_TASKS:
        if collect:
            raise ValueError("collect=True needs every tabular task (tasks=TABULAR_TASKS)")
        return None
    payload = {"schema": ENGINE_VALIDATION_SCHEMA, "settings": settings, "tasks": task_info,
               "cells": cells, "missing": missing}
    _write_text_atomic(path, json.dumps(dict(payload, sha256=_json_digest(payload)),
                                        sort_keys=True, indent=1) + "\n")
    if not missing:
        for name in tasks:
            path.with_name(f"{path.name}.{name}.partial").unlink(missing_ok=True)
    return path


def read_engine_validation(path=None, *, check_data=True):
    """The stored engine validation, verified: schema, sha256 of the payload and
    (``check_data``) the data hash of every task against :func:`capassign.load_task`.

    Returns the parsed payload (dict): ``settings``, ``tasks`` (data hash,
    T, d, agent seed), ``cells`` (per-run errors and agent-1 shares of both
    engines) and ``missing`` (cells not computed yet, empty when complete);
    raises ``ValueError`` on any mismatch.

    Parameters
    ----------
    path : str or Path, optional
        The file (default :data:`ENGINE_VALIDATION_PATH`).
    check_data : bool
        Also compare the data hashes with the tasks (needs the data).

    Returns
    -------
    dict

    Examples
    --------
    >>> obj = read_engine_validation(check_data=False)
    >>> len(obj["cells"]), obj["missing"]
    (72, [])
    """
    path = Path(path) if path is not None else ENGINE_VALIDATION_PATH
    obj, why = _read_json_file(path)
    if obj is None:
        raise ValueError(f"{path} {why}")
    if not isinstance(obj, dict) or obj.get("schema") != ENGINE_VALIDATION_SCHEMA:
        raise ValueError(f"{path}: not a {ENGINE_VALIDATION_SCHEMA} file")
    payload = {k: v for k, v in obj.items() if k != "sha256"}
    if obj.get("sha256") != _json_digest(payload):
        raise ValueError(f"{path}: checksum mismatch (the file was edited or is damaged)")
    if check_data:
        for name, info in obj["tasks"].items():
            task = load_task(name)
            if _task_digest(task.X, task.R) != info["digest"]:
                raise ValueError(f"{path}: task {name!r} differs from the data it was computed "
                                 f"on; re-run python -m capbook validate-engines")
    return obj


def engine_validation(path=None, *, check_data=True):
    """Per task x policy x alpha_1 summary of :func:`validate_engines`' file.

    Columns: ``runs``, ``fast`` and ``reference`` (mean error), ``diff``
    (paired mean fast - reference) with its 95% Student-t interval
    ``ci_low``/``ci_high``, ``p`` (two-sided paired t-test), ``holm`` (Holm's
    adjustment over all cells), ``power`` (paired t-test at the file's level
    against its ``diff``, given the observed sd), ``sd`` of the paired
    differences, and agent 1's mean share on each engine (``share_fast``,
    ``share_reference``).

    Parameters
    ----------
    path, check_data
        As in :func:`read_engine_validation`.

    Returns
    -------
    pandas.DataFrame
        One row per cell, with ``task``, ``policy``, ``alpha1`` and the columns
        above.

    Examples
    --------
    >>> tab = engine_validation(check_data=False)
    >>> len(tab), int((tab.holm < 0.05).sum())
    (72, 0)
    """
    import pandas as pd

    obj = read_engine_validation(path, check_data=check_data)
    st = obj["settings"]
    rows = []
    for c in obj["cells"]:
        f, r = np.asarray(c["fast"]["errors"]), np.asarray(c["reference"]["errors"])
        d = f - r
        sd = float(d.std(ddof=1))
        m, lo, hi = difference_ci(f, r, paired=True)
        rows.append({"task": c["task"], "policy": c["policy"], "alpha1": c["alpha1"],
                     "runs": c["runs"], "fast": f.mean(), "reference": r.mean(), "diff": m,
                     "ci_low": lo, "ci_high": hi, "p": _paired_t_pvalue(d),
                     "power": _paired_power(sd, d.size, st["diff"], st["level"]), "sd": sd,
                     "share_fast": float(np.mean(c["fast"]["share1"])),
                     "share_reference": float(np.mean(c["reference"]["share1"]))})
    df = pd.DataFrame(rows)
    df.insert(df.columns.get_loc("p") + 1, "holm", _holm(df["p"].to_numpy()))
    return df
