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
import os
import stat
import time
from pathlib import Path

import numpy as np

from capassign import (CONTEXT_CODINGS, PAPER_ETA, ENGINES, ONLINE_POLICIES, PAPER_SETTINGS,
                       TABULAR_TASKS,
                       _canonical_json, _finite_shares, _holm, _json_digest, _paired_t_pvalue,
                       _read_json_file, _task_digest, _validate_bool, _validate_choice,
                       _validate_eta, _validate_int, _validate_names, _validate_real,
                       _write_json_atomic, _write_text_atomic, difference_ci, load_task,
                       simulate, two_agent_capacities)

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
            "model_settings": PAPER_SETTINGS.fields()}


#: What stands at a path that is not a regular file, by its type (``os.lstat``).
_FILE_KINDS = ((stat.S_ISLNK, "symbolic link"), (stat.S_ISDIR, "folder"),
               (stat.S_ISFIFO, "FIFO (named pipe)"), (stat.S_ISCHR, "character device"),
               (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket"))


def _file_kind(path):
    """``None`` when nothing is at ``path``, ``"file"`` for a regular file, else
    what is there (a symbolic link is reported as one, not followed)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISREG(mode):
        return "file"
    return next((kind for is_kind, kind in _FILE_KINDS if is_kind(mode)), "special file")


def _check_results_path(path, tasks, name):
    """``path`` as a Path, once it and the partial files beside it are safe to replace.

    :func:`validate_engines` replaces its results file and the partial files
    ``<path>.<task>.partial`` of ``tasks`` by renaming a new file onto them,
    which would put a regular file in the place of a device, a FIFO, a folder
    or a symbolic link (not in the place of the link's target), and it reads
    the partial files (a FIFO would block).  So each must be a regular file or
    a new name in an existing folder, as a sweep's ``--out`` must be a folder;
    anything else is refused, in one line naming the argument ``name``.
    """
    if not isinstance(path, (str, os.PathLike)) or isinstance(os.fspath(path), bytes):
        raise TypeError(f"{name} must be a file path (str or Path), got {path!r}")
    text = os.fspath(path)
    if not text:
        raise ValueError(f"{name} must be a file path, got ''")
    path = Path(text)
    if not path.parent.is_dir():
        raise ValueError(f"{name} {text!r}: its folder {str(path.parent)!r} does not exist or "
                         f"is not a folder; create it first")
    for target in [path] + [path.with_name(f"{path.name}.{t}.partial") for t in tasks]:
        kind = _file_kind(target)
        if kind not in (None, "file"):
            what = "" if target == path else f": {target.name} beside it"
            raise ValueError(f"{name} {text!r}{what} is a {kind}, not a regular file; give "
                             f"a new file name or a results file to replace")
    return path


#: The fields of a stored cell (``"task"`` too in the complete file) and of
#: each engine's record in it.
_CELL_FIELDS = frozenset({"policy", "alpha1", "runs", "pilot_sd", *ENGINES})
_ENGINE_FIELDS = frozenset({"errors", "share1", "cpu_seconds"})


def _finite_at_least_0(v):
    return type(v) in (int, float) and math.isfinite(v) and v >= 0


def _cell_problem(cell, st, tasks=None):
    """Why ``cell`` is not a cell :func:`validate_engines` computed under the
    settings ``st``: ``(field, reason)``, or ``None`` when it is one.

    A cell holds exactly the fields it is written with; its policy and
    alpha_1 are among the settings'; ``pilot <= runs <= max_runs``; each
    engine has ``runs`` error rates and agent-1 shares in [0, 1] and a finite
    CPU time >= 0; ``pilot_sd`` is the sd of the first ``pilot`` paired
    differences.  With ``tasks`` (the complete file) the cell also names one
    of them under ``"task"``.
    """
    fields = _CELL_FIELDS | ({"task"} if tasks is not None else set())
    if not isinstance(cell, dict):
        return "", "is not a cell (a JSON object)"
    if set(cell) != fields:
        return "", f"has the fields {sorted(cell)}, not {sorted(fields)}"
    if tasks is not None and not (type(cell["task"]) is str and cell["task"] in tasks):
        return "task", f"{cell['task']!r} is not one of the file's tasks"
    if not (type(cell["policy"]) is str and cell["policy"] in st["policies"]):
        return "policy", f"{cell['policy']!r} is not one of the settings' policies"
    if not (type(cell["alpha1"]) is float and cell["alpha1"] in st["alphas"]):
        return "alpha1", f"{cell['alpha1']!r} is not one of the settings' alphas"
    n = cell["runs"]
    if not (type(n) is int and st["pilot"] <= n <= st["max_runs"]):
        return "runs", f"{n!r} is not an integer in [pilot, max_runs] = " \
                       f"[{st['pilot']}, {st['max_runs']}]"
    for e in ENGINES:
        rec = cell[e]
        if not isinstance(rec, dict) or set(rec) != _ENGINE_FIELDS:
            return e, f"is not an object with the fields {sorted(_ENGINE_FIELDS)}"
        for key, what in (("errors", "error rates"), ("share1", "agent-1 shares")):
            if not _finite_shares(rec[key], n):
                return f"{e}.{key}", f"does not hold {n} {what} in [0, 1] (runs = {n})"
        if not _finite_at_least_0(rec["cpu_seconds"]):
            return f"{e}.cpu_seconds", f"{rec['cpu_seconds']!r} is not a finite number >= 0"
    sd = cell["pilot_sd"]
    if not (_finite_at_least_0(sd) and math.isclose(sd, _validation_sd(cell, st["pilot"]),
                                                     rel_tol=1e-9, abs_tol=1e-12)):
        return "pilot_sd", f"{sd!r} is not the sd of the first {st['pilot']} paired differences"
    return None


def _check_cells(cells, st, where, tasks=None):
    """Raise ``ValueError`` naming ``where`` and the field unless ``cells`` is a
    list of distinct cells that pass :func:`_cell_problem`."""
    if not isinstance(cells, list):
        raise ValueError(f"{where}: cells is not a list")
    seen = set()
    for i, cell in enumerate(cells):
        problem = _cell_problem(cell, st, tasks)
        if problem is None:
            key = (cell.get("task"), cell["policy"], cell["alpha1"])
            problem = ("", "repeats an earlier cell") if key in seen else None
            seen.add(key)
        if problem is not None:
            field, why = problem
            raise ValueError(f"{where}: cells[{i}]{'.' + field if field else ''} {why}")


def _read_partial(part, head, st):
    """The cells stored in the partial file ``part``, checked, or ``None`` when it
    was made under other settings or data (another ``head``).

    A partial file is written whole (atomically), so one that cannot be read
    or holds a cell :func:`_cell_problem` refuses was edited or damaged: it is
    refused in one line naming the file and the field, not recomputed, so that
    hours of stored runs are never thrown away unseen (removing the file
    computes its cells again).
    """
    obj, why = _read_json_file(part)
    fix = "; remove it to compute that task's cells again"
    if obj is None:
        raise ValueError(f"{part} {why}{fix}")
    if not isinstance(obj, dict) or set(obj) != {"head", "cells"}:
        raise ValueError(f"{part}: not a partial file of validate_engines (an object with "
                         f"'head' and 'cells'){fix}")
    if obj["head"] != json.loads(_canonical_json(head)):
        return None
    try:
        _check_cells(obj["cells"], st, part)
    except ValueError as exc:
        raise ValueError(f"{exc}{fix}") from None
    return obj["cells"]


def _validation_stored(path, part, name, head, collect, say):
    """The cells of one task that :func:`validate_engines` stored so far: its
    partial file ``part`` when made with the same settings and data (checked
    by :func:`_read_partial`), else (unless ``collect``) that task's cells of
    the complete file ``path`` when it passes :func:`read_engine_validation`
    and was made with the same settings and data."""
    if _file_kind(part) is not None:
        done = _read_partial(part, head, head["settings"])
        if done is None:
            say(f"{name}: ignoring {part.name} (other settings or data)")
            return []
        say(f"{name}: resuming, {len(done)} cells stored")
        return done
    if collect or _file_kind(path) is None:
        return []
    try:
        old = read_engine_validation(path, check_data=False)
    except ValueError as exc:
        say(f"{name}: nothing taken from {path.name} ({exc})")
        return []
    if (old["settings"] != json.loads(_canonical_json(head["settings"]))
            or old["tasks"].get(name) != json.loads(_canonical_json(head["task"]))):
        return []
    done = [{k: v for k, v in c.items() if k != "task"} for c in old["cells"]
            if c["task"] == name]
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
                     power=0.8, level=0.05, eta=PAPER_ETA, seed=0, collect=False, out=print):
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
    A partial file made with other settings or data is ignored (and
    replaced); one made with these whose cells are not what this function
    writes (a field missing, an error rate outside [0, 1], NaN, a run count
    outside [pilot, max_runs], ...) is refused in one line naming the file
    and the field: it was edited or damaged, and removing it recomputes it.

    Parameters
    ----------
    path : str or Path, optional
        Output file: a regular file (replaced) or a new name in an existing
        folder, as are the partial files beside it; anything else (a folder,
        a device, a FIFO, a symbolic link) is refused before any work.
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
    path = _check_results_path(ENGINE_VALIDATION_PATH if path is None else path, tasks, "path")
    say = out or (lambda *a: None)
    task_info, cells, missing = {}, [], []
    for name in tasks:
        task = load_task(name)
        info = {"digest": _task_digest(task.X, task.R), "T": int(task.R.shape[0]),
                "d": int(task.X.shape[1]), "agent_seed": int(task.meta["seed"]),
                "coding": task.meta["context_coding"]}
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
    _check_payload(json.loads(_canonical_json(payload)), path)   # what the reader will accept
    _write_text_atomic(path, json.dumps(dict(payload, sha256=_json_digest(payload)),
                                        sort_keys=True, indent=1, allow_nan=False) + "\n")
    if not missing:
        for name in tasks:
            path.with_name(f"{path.name}.{name}.partial").unlink(missing_ok=True)
    return path


#: The fields of a task's entry in the complete file; ``coding`` (the context
#: coding of :func:`capassign.load_task`) is absent from files written before it
#: existed, which ran on the ``"codes"`` coding.
_TASK_FIELDS = frozenset({"digest", "T", "d", "agent_seed", "coding"})


def _check_payload(obj, path):
    """Raise ``ValueError`` naming ``path`` and the field unless ``obj`` (the
    complete file without its checksum) is what :func:`validate_engines`
    writes; see :func:`read_engine_validation`."""
    fields = {"schema", "settings", "tasks", "cells", "missing"}
    if set(obj) != fields:
        raise ValueError(f"{path}: has the fields {sorted(obj)}, not {sorted(fields)}")
    st = obj["settings"]
    args = ("policies", "alphas", "prefix", "pilot", "max_runs", "diff", "power", "level",
            "eta", "seed")
    if not isinstance(st, dict) or set(st) != {*args, "model_settings"}:
        raise ValueError(f"{path}: settings is not an object with the fields "
                         f"{sorted({*args, 'model_settings'})}")
    try:
        checked = _validation_settings(*(st[k] for k in args))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: settings: {exc}") from None
    for k in args:
        if checked[k] != st[k] or type(checked[k]) is not type(st[k]):
            raise ValueError(f"{path}: settings: {k} is {st[k]!r}, which its check reads "
                             f"as {checked[k]!r}")
    if not isinstance(st["model_settings"], dict):
        raise ValueError(f"{path}: settings: model_settings is not an object")
    tasks = obj["tasks"]
    if not isinstance(tasks, dict) or sorted(tasks) != sorted(TABULAR_TASKS):
        raise ValueError(f"{path}: tasks must hold exactly {', '.join(TABULAR_TASKS)}")
    for name, info in tasks.items():
        ok = (isinstance(info, dict) and set(info) in (_TASK_FIELDS, _TASK_FIELDS - {"coding"})
              and info.get("coding", "codes") in CONTEXT_CODINGS
              and type(info["digest"]) is str and len(info["digest"]) == 64
              and all(type(info[k]) is int for k in ("T", "d", "agent_seed"))
              and info["T"] >= 1 and info["d"] >= 1 and info["agent_seed"] >= 0)
        if not ok:
            raise ValueError(f"{path}: tasks.{name} is not a task record (sha256 digest, "
                             f"integers T >= 1, d >= 1, agent_seed >= 0)")
    _check_cells(obj["cells"], st, path, tasks)
    grid = {(t, p, a) for t in tasks for p in st["policies"] for a in st["alphas"]}
    done = {(c["task"], c["policy"], c["alpha1"]) for c in obj["cells"]}
    missing = obj["missing"]
    if not isinstance(missing, list):
        raise ValueError(f"{path}: missing is not a list")
    for i, m in enumerate(missing):
        if not (isinstance(m, list) and len(m) == 3
                and all(type(x) in (str, float) for x in m) and tuple(m) in grid - done):
            raise ValueError(f"{path}: missing[{i}] {m!r} is not a [task, policy, alpha1] of "
                             f"the grid without a cell")
        done.add(tuple(m))
    if len(done) != len(grid):
        raise ValueError(f"{path}: cells and missing do not cover the grid of "
                         f"{len(grid)} (task, policy, alpha1) once each")


def _read_checksummed(path, schema):
    """A results file of the book, verified before it is used: a regular file (or a
    link to one) holding a JSON object of this ``schema`` whose ``sha256`` is the
    digest of the rest (the payload).  Returns ``(obj, payload)``; raises
    ``ValueError`` naming the file otherwise.

    Parameters
    ----------
    path : Path
        The file.
    schema : str
        The ``schema`` tag it must carry.

    Returns
    -------
    obj, payload : dict
        The file's object, and it without ``sha256``.

    Examples
    --------
    >>> obj, payload = _read_checksummed(ENGINE_VALIDATION_PATH, ENGINE_VALIDATION_SCHEMA)
    >>> sorted(set(obj) - set(payload))
    ['sha256']
    """
    kind = _file_kind(path)
    if kind not in (None, "file") and not (kind == "symbolic link" and path.is_file()):
        raise ValueError(f"{path} is a {kind}, not a results file")
    obj, why = _read_json_file(path)
    if obj is None:
        raise ValueError(f"{path} {why}")
    if not isinstance(obj, dict) or obj.get("schema") != schema:
        raise ValueError(f"{path}: not a {schema} file")
    payload = {k: v for k, v in obj.items() if k != "sha256"}
    try:
        digest = _json_digest(payload)
    except ValueError:   # NaN or an infinity: never written by the book's commands
        digest = None
    if digest is None or obj.get("sha256") != digest:
        raise ValueError(f"{path}: checksum mismatch (the file was edited or is damaged)")
    return obj, payload


def read_engine_validation(path=None, *, check_data=True):
    """The stored engine validation, verified: schema, sha256 of the payload, the
    payload's contents and (``check_data``) the data hash of every task
    against :func:`capassign.load_task`.

    The contents are checked as :func:`validate_engines` writes them, so that
    a file whose checksum was recomputed after an edit is still refused when
    a number is impossible: the settings pass that function's argument
    checks, the tasks are the tabular tasks with their data hash, T, d and
    agent seed, every cell passes the checks of a stored cell (error rates
    and shares in [0, 1], ``pilot <= runs <= max_runs``, ...), and the cells
    and ``missing`` together cover the grid of tasks, policies and alphas
    once each.

    Returns the parsed payload (dict): ``settings``, ``tasks`` (data hash,
    T, d, agent seed, context coding), ``cells`` (per-run errors and agent-1 shares of both
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
    obj, payload = _read_checksummed(path, ENGINE_VALIDATION_SCHEMA)
    _check_payload(payload, path)
    if check_data:
        for name, info in obj["tasks"].items():
            task = _validation_task(name, info)
            if _task_digest(task.X, task.R) != info["digest"]:
                raise ValueError(f"{path}: task {name!r} differs from the data it was computed "
                                 f"on; re-run python -m capbook validate-engines")
    return obj


def _validation_task(name, info):
    """The task a stored validation ran on: its agent seed and context coding (a file
    without a coding predates the coding by column type: ``"codes"``)."""
    return load_task(name, info["agent_seed"], coding=info.get("coding", "codes"))


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
