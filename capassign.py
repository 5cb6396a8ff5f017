"""capassign: assign prediction tasks to agents with capacity constraints.

A single-module implementation of Wu, Kher and Smyth, "Learning to Assign
Prediction Tasks to Agents with Capacity Constraints" (the paper), written for
two audiences: readers of the companion book, who see every experiment re-run,
and practitioners, who route their own tasks with the same code.

The module is organised in the order data flows through it:

1. validation helpers       - clear errors on bad input, before any work
2. theory / oracle          - optimal constrained assignment and shadow prices
                              (Sec. 2.3, Thm 1, App. A-D)
3. reward models            - Laplace-logistic and bootstrap-tree models (App. E)
4. capacity control         - virtual queues (Eq. 1-2, App. F), free agents
                              (App. I.3), mini-batch allocation (App. I.4)
5. simulation engine        - Algorithm 1, a literal reference path and a fast path
6. tasks                    - data registry, loaders, agent construction
7. experiments              - sweeps over tasks, policies, capacities and runs
8. plotting                 - figures in the paper's style
9. command line             - ``python -m capassign ...``

Notation follows the paper: ``alpha`` are capacities, ``eta`` the queue
penalty, ``mu`` conditional expected rewards, ``shadow_prices`` the Lagrange
multipliers lambda of the capacity constraints, ``Q`` the virtual queues.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

__version__ = "0.1.0"

#: Capacity sums must equal one within this tolerance.
CAPACITY_TOL = 1e-9


# =============================================================================
# 1. Validation helpers
# =============================================================================


def _validate_capacities(capacities, n_agents=None, *, allow_free=True,
                         name="capacities"):
    """Check capacities and split them into ``(alpha, constrained)``.

    ``capacities`` is a sequence with one entry per agent: a number in [0, 1]
    (the agent's long-run share alpha_a, Sec. 2.3) or ``None`` for an
    unconstrained "free" agent (App. I.3).  The constrained entries must sum to
    one within :data:`CAPACITY_TOL`.

    Returns
    -------
    alpha : ndarray of float, shape (A,)
        The capacities, with 0.0 in the place of free agents.
    constrained : ndarray of bool, shape (A,)
        True where the agent has a capacity constraint.
    """
    if capacities is None or isinstance(capacities, (str, bytes, dict)):
        raise TypeError(f"{name} must be a sequence of numbers (or None for a "
                        f"free agent), got {type(capacities).__name__}")
    try:
        entries = list(capacities)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of numbers (or None for a "
                        f"free agent), got {type(capacities).__name__}") from None
    if n_agents is not None and len(entries) != n_agents:
        raise ValueError(f"{name} has {len(entries)} entries but there are "
                         f"{n_agents} agents; give one capacity per agent")
    if len(entries) < 2:
        raise ValueError(f"{name} must list at least two agents, got {len(entries)}")
    alpha = np.zeros(len(entries))
    constrained = np.ones(len(entries), dtype=bool)
    for a, c in enumerate(entries):
        if c is None:
            if not allow_free:
                raise ValueError(f"{name}[{a}] is None, but unconstrained agents "
                                 f"are not allowed here")
            constrained[a] = False
            continue
        if isinstance(c, (bool, np.bool_)) or not isinstance(c, (int, float, np.integer, np.floating)):
            raise TypeError(f"{name}[{a}] must be a number in [0, 1] or None, "
                            f"got {c!r}")
        c = float(c)
        if not math.isfinite(c) or c < 0.0 or c > 1.0:
            raise ValueError(f"{name}[{a}] = {c!r} is not a share in [0, 1]")
        alpha[a] = c
    if not constrained.any():
        raise ValueError(f"{name}: at least one agent must be capacity-constrained")
    total = float(alpha[constrained].sum())
    if abs(total - 1.0) > CAPACITY_TOL:
        raise ValueError(f"{name} of the constrained agents sum to {total!r}; "
                         f"they must sum to 1 (within {CAPACITY_TOL:g})")
    return alpha, constrained


def _validate_eta(eta, name="eta"):
    """Check the queue penalty eta >= 0 (Eq. 2)."""
    if isinstance(eta, (bool, np.bool_)) or not isinstance(eta, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a non-negative number, got {eta!r}")
    eta = float(eta)
    if not math.isfinite(eta) or eta < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {eta!r}")
    return eta


def _validate_matrix(M, name, *, ndim=2, finite=True, dtype=float):
    """Convert ``M`` to a float array of ``ndim`` dimensions and check it."""
    try:
        arr = np.asarray(M, dtype=dtype)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a numeric array") from None
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-d array, got shape {arr.shape}")
    if finite and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return arr


# =============================================================================
# 2. Theory / oracle
# =============================================================================


# =============================================================================
# 3. Reward models
# =============================================================================


# =============================================================================
# 4. Capacity control
# =============================================================================


# =============================================================================
# 5. Simulation engine
# =============================================================================


# =============================================================================
# 6. Tasks
# =============================================================================


# =============================================================================
# 7. Experiments
# =============================================================================

#: Numbers reported in the paper, quoted so every chapter can print them beside
#: ours.  Table 3 (App. H.1): features, online tasks and the two agents'
#: marginal accuracies.
PAPER_TABLE3 = {
    "bank": {"features": 15, "tasks": 12357, "acc": (0.91, 0.53)},
    "credit": {"features": 23, "tasks": 9000, "acc": (0.82, 0.67)},
    "coupon": {"features": 24, "tasks": 3624, "acc": (0.72, 0.57)},
    "cardio": {"features": 11, "tasks": 21000, "acc": (0.74, 0.58)},
    "mmlu": {"features": 1, "tasks": 217, "acc": (0.32, 0.47)},
    "imagenet16h": {"features": 1, "tasks": 2000, "acc": (0.77, 0.86)},
}

#: Table 4 (App. H.2): error rates at alpha = (0.5, 0.5), 10 runs, agent
#: construction seeds 0-4, for (non-contextual, logistic greedy, tree greedy).
PAPER_TABLE4 = {
    "bank": [(0.128, 0.122, 0.113), (0.136, 0.129, 0.117), (0.278, 0.195, 0.171),
             (0.260, 0.187, 0.180), (0.124, 0.097, 0.097)],
    "credit": [(0.195, 0.190, 0.188), (0.194, 0.190, 0.188), (0.256, 0.241, 0.222),
               (0.257, 0.242, 0.224), (0.197, 0.192, 0.188)],
    "coupon": [(0.352, 0.343, 0.342), (0.369, 0.357, 0.360), (0.357, 0.335, 0.341),
               (0.347, 0.331, 0.340), (0.349, 0.341, 0.345)],
    "cardio": [(0.334, 0.332, 0.309), (0.373, 0.354, 0.309), (0.338, 0.335, 0.306),
               (0.340, 0.338, 0.307), (0.343, 0.338, 0.311)],
}

#: The experimental protocol of Sec. 4: capacities of agent 1 on the x-axis of
#: the main figures, 100 randomised task orders, queue penalty 0.5.
PAPER_ALPHAS = (0.0, 0.2, 0.4, 0.5, 0.6, 0.8, 1.0)
PAPER_RUNS = 100
PAPER_ETA = 0.5
#: The online policies of the main figures (Fig. 3), in the paper's order.
CONTEXTUAL_POLICIES = ("logistic-greedy", "logistic-ts", "tree-greedy", "tree-ts")
OFFLINE_POLICIES = ("offline-logistic", "offline-tree")


def mean_ci(errors, level=0.95):
    """Mean of per-run errors with a Student-t confidence interval across runs.

    Returns ``(mean, low, high)``; with a single run the interval is the point.
    """
    from scipy import stats

    e = np.asarray(errors, dtype=float)
    m = float(e.mean())
    if e.size < 2:
        return m, m, m
    half = float(stats.t.ppf(0.5 + level / 2, e.size - 1) * e.std(ddof=1) / math.sqrt(e.size))
    return m, m - half, m + half


def two_agent_capacities(alpha1):
    """The capacity vector (alpha_1, 1 - alpha_1) of the two-agent figures."""
    a = float(alpha1)
    return (a, round(1.0 - a, 12))


def error_vs_capacity(X, R, policies, alphas=PAPER_ALPHAS, *, runs=PAPER_RUNS,
                      eta=PAPER_ETA, seed=0, engine="fast", label=None):
    """Error rate of each policy at each two-agent capacity (Sec. 5.1, Fig. 3).

    Runs :func:`simulate` for every (policy, alpha_1) pair with capacities
    ``(alpha_1, 1 - alpha_1)`` and returns a tidy ``pandas.DataFrame`` with one
    row per pair: ``task`` (``label``), ``policy``, ``alpha1``, ``runs``,
    ``error`` (mean over runs), ``std``, ``ci_low``, ``ci_high`` (95% across
    runs) and ``frac1`` (mean realised share of agent 1).  Offline policies
    ignore capacities, so they are run once and reported at every alpha.
    """
    import pandas as pd

    rows = []
    for policy in policies:
        offline = policy.startswith("offline")
        cached = None
        for a1 in alphas:
            if offline and cached is not None:
                res = cached
            else:
                res = simulate(X, R, two_agent_capacities(a1), policy, eta=eta,
                               runs=runs, seed=seed, engine=engine)
                cached = res
            m, lo, hi = mean_ci(res.errors)
            rows.append({"task": label, "policy": policy, "alpha1": float(a1), "runs": runs,
                         "error": m, "std": float(np.std(res.errors, ddof=1)) if runs > 1 else 0.0,
                         "ci_low": lo, "ci_high": hi,
                         "frac1": float(np.mean(res.assigned[:, 0]))})
    return pd.DataFrame(rows)


def error_table(df, value="error", digits=3):
    """Pivot a tidy result table to policies x alpha_1, rounded for printing."""
    t = df.pivot_table(index="policy", columns="alpha1", values=value, sort=False)
    return t.round(digits)


# =============================================================================
# 8. Plotting
# =============================================================================

#: Colours and line styles shared by every figure of the book.
POLICY_STYLE = {
    "random": dict(color="0.35", ls=":", marker="o", label="non-contextual (random)"),
    "marginal": dict(color="0.55", ls=":", marker="x", label="learned marginal"),
    "logistic-greedy": dict(color="tab:blue", ls="-", marker="s", label="logistic greedy"),
    "logistic-ts": dict(color="tab:cyan", ls="--", marker="^", label="logistic TS"),
    "tree-greedy": dict(color="tab:red", ls="-", marker="D", label="tree greedy"),
    "tree-ts": dict(color="tab:orange", ls="--", marker="v", label="tree TS"),
    "offline-logistic": dict(color="tab:blue", ls=(0, (1, 3)), marker="", label="offline logistic (unconstrained)"),
    "offline-tree": dict(color="tab:red", ls=(0, (1, 3)), marker="", label="offline tree (unconstrained)"),
    "hindsight": dict(color="k", ls="-.", marker="", label="hindsight optimum"),
}


def plot_error_vs_capacity(df, ax=None, *, title=None, bands=True, legend=True):
    """Error rate against agent 1's capacity, one line per policy (Fig. 3 style).

    ``df`` is a table from :func:`error_vs_capacity`.  Online policies are drawn
    with markers and a shaded 95% band across runs; offline benchmarks, which
    ignore capacities, as dotted horizontal lines.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(5.2, 3.6))
    for policy, g in df.groupby("policy", sort=False):
        g = g.sort_values("alpha1")
        style = dict(POLICY_STYLE.get(policy, dict(label=policy)))
        ax.plot(g["alpha1"], g["error"], lw=1.6, ms=4, **style)
        if bands and not policy.startswith("offline"):
            ax.fill_between(g["alpha1"], g["ci_low"], g["ci_high"],
                            color=style.get("color"), alpha=0.15, lw=0)
    ax.set_xlabel(r"capacity of agent 1, $\alpha_1$")
    ax.set_ylabel("error rate")
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    if legend:
        ax.legend(fontsize=7, frameon=False)
    return ax


# =============================================================================
# 9. Command line
# =============================================================================

#: The repository root when running from a checkout (chapters live there).
ROOT = Path(__file__).resolve().parent
CHAPTER_DIR = ROOT / "book" / "chapters"
EXECUTED_DIR = ROOT / "book" / "executed"


def chapter_names():
    """Names (file stems) of every chapter source under ``book/chapters``."""
    return sorted(p.stem for p in CHAPTER_DIR.glob("*.md"))


def _resolve_chapters(names):
    known = chapter_names()
    if not known:
        raise FileNotFoundError(f"no chapter sources found under {CHAPTER_DIR}; "
                                f"run from a checkout of the repository")
    if not names:
        return known
    out = []
    for n in names:
        stem = Path(n).stem
        if stem not in known:
            raise ValueError(f"unknown chapter {n!r}; known chapters: {', '.join(known)}")
        out.append(stem)
    return out


def _clean_executed(nb):
    """Drop run-dependent metadata (timings, papermill bookkeeping).

    The executed notebooks are committed, so everything that changes from run
    to run without changing a result is removed: durations, timestamps and the
    papermill environment record.  Outputs are left untouched.
    """
    nb.metadata.pop("papermill", None)
    for cell in nb.cells:
        cell.metadata.pop("papermill", None)
        cell.metadata.pop("execution", None)
    return nb


def reproduce(chapters=(), *, parameters=None, kernel_name="python3", log_output=False):
    """Re-execute chapters through papermill and write the executed notebooks.

    Each chapter source ``book/chapters/NAME.md`` (a jupytext MyST notebook) is
    converted to a notebook, executed by papermill with the defaults of its
    ``parameters`` cell (the paper's settings) unless ``parameters`` overrides
    them, cleaned of run-dependent metadata, and written to
    ``book/executed/NAME.ipynb``.  A failing cell raises and nothing is written
    for that chapter.
    """
    import jupytext
    import nbformat
    import papermill
    import tempfile

    names = _resolve_chapters(chapters)
    EXECUTED_DIR.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names:
        src = CHAPTER_DIR / f"{name}.md"
        nb = jupytext.read(src)
        with tempfile.TemporaryDirectory() as tmp:
            raw = Path(tmp) / f"{name}.ipynb"
            done = Path(tmp) / f"{name}.out.ipynb"
            nbformat.write(nb, raw)
            papermill.execute_notebook(
                str(raw), str(done), parameters=parameters or {},
                kernel_name=kernel_name, cwd=str(EXECUTED_DIR),
                progress_bar=sys.stderr.isatty(), log_output=log_output)
            out = _clean_executed(nbformat.read(done, as_version=4))
        target = EXECUTED_DIR / f"{name}.ipynb"
        nbformat.write(out, target)
        written.append(target)
        print(f"executed {src.relative_to(ROOT)} -> {target.relative_to(ROOT)}")
    return written


def _cell_key(cell):
    return (cell.cell_type, cell.source.strip())


def chapter_drift(name):
    """Compare a chapter source with its executed notebook.

    Returns a list of human-readable differences (empty when the executed
    notebook's cells, code and text, are exactly those of the source).  Cells
    papermill injected for overridden parameters are ignored.
    """
    import jupytext
    import nbformat

    src = jupytext.read(CHAPTER_DIR / f"{name}.md")
    path = EXECUTED_DIR / f"{name}.ipynb"
    if not path.exists():
        return [f"{path.relative_to(ROOT)} is missing: run `python -m capassign reproduce {name}`"]
    exe = nbformat.read(path, as_version=4)
    a = [_cell_key(c) for c in src.cells if c.source.strip()]
    b = [_cell_key(c) for c in exe.cells
         if c.source.strip() and "injected-parameters" not in c.metadata.get("tags", [])]
    problems = []
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            problems.append(f"cell {i} differs ({x[0]} in source, {y[0]} executed): "
                            f"{x[1][:60]!r} vs {y[1][:60]!r}")
    if len(a) != len(b):
        problems.append(f"source has {len(a)} cells, executed notebook has {len(b)}")
    return problems


def sync_text(chapters=()):
    """Copy edited prose from chapter sources into executed notebooks.

    Only markdown cells are copied, and only when every code cell is unchanged,
    so a text edit does not force a long re-execution while a code edit always
    does.  Returns the names of the notebooks that were updated.
    """
    import jupytext
    import nbformat

    updated = []
    for name in _resolve_chapters(chapters):
        src = [c for c in jupytext.read(CHAPTER_DIR / f"{name}.md").cells if c.source.strip()]
        path = EXECUTED_DIR / f"{name}.ipynb"
        exe = nbformat.read(path, as_version=4)
        cells = [c for c in exe.cells if c.source.strip()]
        same_code = ([c.source.strip() for c in src if c.cell_type == "code"]
                     == [c.source.strip() for c in cells if c.cell_type == "code"])
        same_layout = [c.cell_type for c in src] == [c.cell_type for c in cells]
        if not (same_code and same_layout):
            raise ValueError(f"chapter {name}: code or cell layout changed; "
                             f"re-execute it with `python -m capassign reproduce {name}`")
        changed = False
        for s, e in zip(src, cells):
            if s.cell_type == "markdown" and s.source != e.source:
                e.source = s.source
                changed = True
        if changed:
            nbformat.write(exe, path)
            updated.append(name)
            print(f"synced text of {name}")
    return updated


def _build_parser():
    parser = argparse.ArgumentParser(
        prog="capassign",
        description="Assign prediction tasks to agents with capacity constraints "
                    "(Wu, Kher & Smyth) - simulation, reproduction and benchmarks.")
    parser.add_argument("--version", action="version", version=f"capassign {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("reproduce", help="re-execute book chapters through papermill",
                       description="Re-execute chapters (all by default) through papermill "
                                   "at the paper's settings and write book/executed/*.ipynb.")
    p.add_argument("chapters", nargs="*", metavar="CHAPTER",
                   help="chapter names (stems of book/chapters/*.md); default: all")
    p.add_argument("--list", action="store_true", help="list the chapters and exit")
    p.add_argument("-p", "--parameter", nargs=2, action="append", default=[],
                   metavar=("NAME", "VALUE"),
                   help="override a parameter (VALUE is read as JSON, else as a string)")
    p.set_defaults(func=_cmd_reproduce)

    p = sub.add_parser("sync-text", help="copy edited prose into executed notebooks",
                       description="Copy markdown edits from chapter sources into the executed "
                                   "notebooks when no code cell changed.")
    p.add_argument("chapters", nargs="*", metavar="CHAPTER")
    p.set_defaults(func=lambda a: sync_text(a.chapters))
    return parser


def _cmd_reproduce(args):
    if args.list:
        print("\n".join(chapter_names()))
        return
    params = {}
    for k, v in args.parameter:
        try:
            params[k] = json.loads(v)
        except json.JSONDecodeError:
            params[k] = v
    reproduce(args.chapters, parameters=params)


def main(argv=None):
    """Entry point of ``python -m capassign`` and the ``capassign`` script."""
    parser = _build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        args.func(args)
    except (ValueError, TypeError, FileNotFoundError) as exc:
        parser.exit(2, f"capassign {args.command}: error: {exc}\n")
    return 0


if __name__ == "__main__":
    # Run through the imported module, so that compiled-function caches and
    # worker processes see one ``capassign`` module, not a ``__main__`` copy.
    import capassign as _self

    sys.exit(_self.main())
