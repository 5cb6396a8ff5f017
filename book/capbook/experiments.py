"""The read-outs of the paper's experiment chapters (Part II): tables, checks and glue.

A chapter of Part II runs an experiment of the paper in a few visible cells and
then reads it out: the tables a reader may open, the numbers its prose quotes
(myst-nb glue) and the checks that the prose's claims hold on this run.  The
read-outs live here, one named function each, so that a chapter's cells show
the experiment and the function names say what each read-out does.  Every
number is computed exactly as the chapters computed it before (same
operations, same order), so the stored outputs do not move.

Sections: the tabular tasks (``exp_tabular``), ImageNet-16H and MMLU
(``exp_imagenet_mmlu``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from capassign import CONTEXT_CODINGS, CONTEXTUAL_POLICIES, OFFLINE_POLICIES, PAPER_TABLE4

from .present import error_table, glue, paired_table, say, show_table
from .readouts import SIMILAR_TOL

#: The two logistic and the two tree policies, as the chapters group them.
LOGISTIC_POLICIES = ("logistic-greedy", "logistic-ts")
TREE_POLICIES = ("tree-greedy", "tree-ts")


#: Names glued by the last ``glue_*`` call of this module (to count them).
_GLUED = []


def _glue(name, value):
    """:func:`capbook.glue` that also records the name in ``_GLUED``."""
    _GLUED.append(name)
    glue(name, value)


def _inner(df):
    """The rows of a tidy table at the interior capacities 0 < alpha_1 < 1."""
    return df[(df.alpha1 > 0) & (df.alpha1 < 1)]


def _fixed(v, k):
    """``v`` to ``k`` decimals, '–' when missing, never '-0.000...'."""
    import pandas as pd

    return "–" if pd.isna(v) else f"{round(float(v), k) + 0.0:.{k}f}"


def say_checks(checks):
    """Print each named check of a chapter with its verdict; raise if one fails.

    Parameters
    ----------
    checks : dict
        Claim of the prose (words) -> bool, whether it holds on this run.

    Returns
    -------
    None

    Raises
    ------
    AssertionError
        Naming every claim that does not hold.

    Examples
    --------
    >>> say_checks({"the floor is below every policy": True})
    holds: the floor is below every policy
    """
    failed = [claim for claim, ok in checks.items() if not ok]
    for claim, ok in checks.items():
        say(f"{'holds' if ok else 'FAILS'}: {claim}")
    assert not failed, failed


# --- the tabular tasks (exp_tabular, the paper's Fig. 3a-d) ----------------------


def task_line(name, task):
    """One line describing a tabular task: seed, size, features, agents' accuracies.

    Parameters
    ----------
    name : str
        The task's name as the chapter calls it.
    task : capassign.Task
        A task of :func:`capassign.load_task`.

    Returns
    -------
    str

    Examples
    --------
    >>> import numpy as np
    >>> from types import SimpleNamespace
    >>> task = SimpleNamespace(meta={"seed": 3, "features": ["age", "job"]}, T=100,
    ...                        X=np.zeros((100, 3)), agent_names=("logistic", "xgboost"),
    ...                        accuracies=(0.8, 0.9))
    >>> print(task_line("bank", task))
    bank: construction seed 3, T = 100 tasks, d = 2 features (3 context columns),
    accuracies logistic 0.800, xgboost 0.900
    """
    return (f"{name}: construction seed {task.meta['seed']}, T = {task.T} tasks, "
            f"d = {len(task.meta['features'])} features ({task.X.shape[1]} context "
            f"columns), accuracies {task.agent_names[0]} "
            f"{task.accuracies[0]:.3f}, {task.agent_names[1]} "
            f"{task.accuracies[1]:.3f}")


@dataclass(frozen=True)
class ChapterTables:
    """The tables of an error-vs-capacity experiment, as a Part II chapter shows them.

    Parameters
    ----------
    analysis : ExperimentAnalysis
        :func:`capbook.analyse_experiment` of the chapter's results.
    titles : dict
        Task name -> how captions name it (e.g. ``"(a) Cardio"``), in the
        order the tables are shown.
    runs : int
        Runs per point, for the captions.

    Examples
    --------
    >>> import capassign as ca
    >>> from capbook import analyse_experiment
    >>> X, R, _ = ca.synthetic_stream(T=200, d=2, seed=1)
    >>> df = ca.error_vs_capacity(X, R, ["random", "logistic-greedy"], (0.0, 0.5, 1.0),
    ...                           runs=3, label="toy", hindsight=True)
    >>> tables = ChapterTables(analyse_experiment({"toy": df}), {"toy": "(a) Toy"}, runs=3)
    >>> len(tables.error_folds()), len(tables.gap_folds()), len(tables.paired_folds())
    (1, 1, 1)
    >>> tables.middle_errors().frame.columns.tolist()
    ['(a) Toy']
    """

    analysis: Any
    titles: dict
    runs: int

    def middle_errors(self):
        """Mean error of every policy at alpha_1 = 0.5, one column per task."""
        import pandas as pd

        middle = pd.DataFrame({title: self.analysis.errors[name][0.5]
                               for name, title in self.titles.items()})
        return show_table(middle, caption=rf"Mean error rate over {self.runs} runs at "
                                          r"$\alpha_1 = 0.5$")

    def error_folds(self, fold=True):
        """Each task's whole error table (policies x alpha_1), folded (or not); a list."""
        return [show_table(self.analysis.errors[name], fold=fold,
                           caption=f"{title}: mean error rate over {self.runs} runs")
                for name, title in self.titles.items()]

    def say_offline_apart(self):
        """Print how far apart the two offline benchmarks are on each task (largest
        |offline-logistic - offline-tree| over alpha_1)."""
        apart = {name: float((e.loc["offline-logistic"] - e.loc["offline-tree"]).abs().max())
                 for name, e in self.analysis.errors.items()}
        say("largest |offline-logistic - offline-tree|:",
            ", ".join(f"{name} {v:.4f}" for name, v in apart.items()))

    def endpoints(self, tol, names=("agent 1", "agent 2"), *, rename=False):
        """The agents' errors alone (random assignment at alpha_1 = 1 and 0) beside
        the paper's Table 3, shaded within ``tol``; the caption names the agents
        ``names`` (and so do the columns, lower case, with ``rename``)."""
        ends, paper = self.analysis.endpoints, self.analysis.paper_endpoints
        if rename:
            cols = {"agent 1": names[0].lower(), "agent 2": names[1].lower()}
            ends, paper = ends.rename(columns=cols), paper.rename(columns=cols)
        return show_table(ends, paper=paper, tol=tol,
                          caption=r"Error of each agent alone: random assignment at "
                                  rf"$\alpha_1 = 1$ ({names[0]}) and $0$ ({names[1]}), "
                                  "ours (paper's Table 3)")

    def gap_folds(self):
        """Every task's 'gap [share closed]' table (:func:`gap_cells`), folded; a list."""
        return [show_table(gap_cells(self.analysis.gaps[name]), fold=True,
                           caption=f"{title}: gap to the hindsight optimum [share closed]")
                for name, title in self.titles.items()]

    def gap_and_share_folds(self, name):
        """One task's gap to the floor and share of random's gap closed, as two
        folded tables (the share without random assignment's row)."""
        g, title = self.analysis.gaps[name], self.titles[name]
        gap = show_table(error_table(g, "gap", text=False), fold=True,
                         caption=f"{title}: gap to the hindsight optimum (error - floor)")
        closed = error_table(g[g.policy != "random"], "closed", text=False)
        share = show_table(closed, digits=2, fold=True,
                           caption=f"{title}: share of random assignment's gap closed")
        return [gap, share]

    def paired_folds(self):
        """Every task's paired tests against random assignment, folded; a list."""
        return [show_table(paired_table(self.analysis.paired[name]).drop(columns="task"),
                           index=False, fold=True,
                           caption=f"{title}: error difference, contextual policy "
                                   f"- random, over {self.runs} paired runs")
                for name, title in self.titles.items()]


def gap_cells(gaps):
    """Gap to the hindsight floor and share of random's gap closed, as text cells.

    Parameters
    ----------
    gaps : pandas.DataFrame
        :func:`capassign.hindsight_gaps` of one task.

    Returns
    -------
    pandas.DataFrame
        Policies x alpha_1, cells ``'gap [closed]'`` (random assignment: the gap
        only; – where nothing is defined).

    Examples
    --------
    >>> import pandas as pd
    >>> g = pd.DataFrame({"policy": ["random", "tree-greedy"], "alpha1": [0.5, 0.5],
    ...                   "gap": [0.1, 0.04], "closed": [float("nan"), 0.6]})
    >>> gap_cells(g)[0.5].tolist()
    ['0.100', '0.040 [0.60]']
    """
    gap = error_table(gaps, "gap", text=False)
    closed = error_table(gaps, "closed", text=False)
    cells = gap.astype(object)
    for p in gap.index:
        for a in gap.columns:
            share = "" if p == "random" else f" [{_fixed(closed.at[p, a], 2)}]"
            cells.at[p, a] = _fixed(gap.at[p, a], 3) + share
    return cells


def gain_frame(tests, alphas):
    """Gain over random assignment (minus the paired difference) and its 95%
    interval, one row per (task, policy, alpha_1) of ``tests`` at ``alphas``.

    Parameters
    ----------
    tests : pandas.DataFrame
        :func:`capassign.paired_tests` of contextual policies against random.
    alphas : list of float
        The capacities kept.

    Returns
    -------
    pandas.DataFrame
        Columns ``task, policy, alpha1, gain, low, high``.

    Examples
    --------
    >>> import pandas as pd
    >>> t = pd.DataFrame({"task": "bank", "policy": "tree-greedy", "alpha1": [0.2, 0.5],
    ...                   "diff": [-0.02, -0.03], "ci_low": [-0.03, -0.04],
    ...                   "ci_high": [-0.01, -0.02]})
    >>> gain_frame(t, [0.5]).to_dict("records")
    [{'task': 'bank', 'policy': 'tree-greedy', 'alpha1': 0.5, 'gain': 0.03, 'low': 0.02, 'high': 0.04}]
    """
    import pandas as pd

    t = tests[tests.alpha1.isin(alphas)]
    return pd.DataFrame({"task": t.task, "policy": t.policy, "alpha1": t.alpha1,
                         "gain": -t["diff"], "low": -t.ci_high, "high": -t.ci_low})


def gain_cells(g):
    """Gains as 'gain ± h' text cells (h: half-width of the Student-t interval,
    which is symmetric).

    Parameters
    ----------
    g : pandas.DataFrame
        :func:`gain_frame`'s table.

    Returns
    -------
    pandas.DataFrame
        Rows (task, policy), one column per alpha_1.

    Examples
    --------
    >>> import pandas as pd
    >>> g = pd.DataFrame({"task": ["bank"], "policy": ["tree-greedy"], "alpha1": [0.5],
    ...                   "gain": [0.03], "low": [0.02], "high": [0.04]})
    >>> gain_cells(g).iloc[0].tolist()
    ['0.0300 ± 0.0100']
    """
    f = lambda v: f"{round(float(v), 4) + 0.0:.4f}"
    cell = g.assign(cell=[f"{f(r.gain)} ± {f((r.high - r.low) / 2)}" for r in g.itertuples()])
    out = cell.pivot_table(index=["task", "policy"], columns="alpha1", values="cell",
                           aggfunc="first", sort=False)
    out.columns = [rf"$\alpha_1$ = {a:g}" for a in out.columns]
    return out


def coding_table(gains, gains_before):
    """Gains over random of the tasks in ``gains_before`` with the contexts coded
    before (integer codes) and now (by type), as a folded table.

    Parameters
    ----------
    gains, gains_before : pandas.DataFrame
        :func:`gain_frame` of the contexts coded by type and as codes.

    Returns
    -------
    Fold
        The table of :func:`gain_cells`, rows ``task, coding`` and policy.

    Examples
    --------
    >>> import pandas as pd
    >>> g = pd.DataFrame({"task": ["cardio"], "policy": ["tree-greedy"], "alpha1": [0.5],
    ...                   "gain": [0.03], "low": [0.02], "high": [0.04]})
    >>> print(coding_table(g, g.assign(gain=0.0, low=-0.01, high=0.01)))  # doctest: +ELLIPSIS
    Cardio and Coupon: gain over random ± 95% interval half-width, contexts coded before and now
    ...
    """
    import pandas as pd

    both = pd.concat([gains_before.assign(coding="codes (before)"),
                      gains[gains.task.isin(set(gains_before.task))].assign(coding="typed (now)")])
    return show_table(gain_cells(both.assign(task=both.task + ", " + both.coding)), fold=True,
                      caption="Cardio and Coupon: gain over random ± 95% interval half-width, "
                              "contexts coded before and now")


def update_influence(tasks, outlying, seed, **kwargs):
    """Mean change of the logistic models' estimated contrast per update, on
    updates whose task has an outlying earlier context and on the others.

    Parameters
    ----------
    tasks : dict
        Coding label -> task (the same stream coded two ways).
    outlying : numpy.ndarray of bool
        Per task of the stream: whether the earlier context had a value beyond 5.
    seed : int
        Seed of :func:`capassign.laplace_update_influence`.
    **kwargs
        Further arguments of :func:`capassign.laplace_update_influence`.

    Returns
    -------
    pandas.DataFrame
        One row per coding: ``outlying updates``, ``other updates``, ``ratio``.

    Examples
    --------
    >>> t = _toy_tabular()
    >>> t["influence"].columns.tolist()
    ['outlying updates', 'other updates', 'ratio']
    """
    import pandas as pd
    from capassign import laplace_update_influence

    influence = {}
    for coding, t in tasks.items():
        df = laplace_update_influence(t.X, t.R, seed=seed, **kwargs)
        out = outlying[df.task.to_numpy()]
        influence[coding] = {"outlying updates": float(df.movement[out].mean()),
                             "other updates": float(df.movement[~out].mean())}
    influence = pd.DataFrame(influence).T
    influence["ratio"] = influence["outlying updates"] / influence["other updates"]
    return influence


def separation_table(separation, gains, gains_before):
    """Coupon at alpha_1 = 0.5: the cross-fitted offline gain and AUC of each
    reward model beside the greedy online policy's gain, per coding.

    Parameters
    ----------
    separation : dict
        Coding -> :func:`capassign.contrast_separation` of Coupon coded so.
    gains, gains_before : pandas.DataFrame
        :func:`gain_frame` of the contexts coded by type and as codes.

    Returns
    -------
    pandas.DataFrame
        Indexed by (coding, model): ``offline gain``, ``AUC``,
        ``online gain (greedy)``.

    Examples
    --------
    >>> t = _toy_tabular()
    >>> t["separation"].columns.tolist()
    ['offline gain', 'AUC', 'online gain (greedy)']
    """
    import pandas as pd

    rows = []
    for coding in CONTEXT_CODINGS:
        sep = separation[coding].set_index("model")
        for model in sep.index:
            rows.append({"coding": coding, "model": model,
                         "offline gain": float(sep.at[model, "gain"]),
                         "AUC": float(sep.at[model, "auc"])})
    out = pd.DataFrame(rows).set_index(["coding", "model"])
    online = pd.concat([gains_before[gains_before.task == "coupon"].assign(coding="codes"),
                        gains[gains.task == "coupon"].assign(coding="typed")])
    online = online[(online.alpha1 == 0.5) & online.policy.str.endswith("greedy")]
    online = online.assign(model=online.policy.str.replace("-greedy", "", regex=False))
    out["online gain (greedy)"] = online.set_index(["coding", "model"]).gain
    return out


def tabular_checks(results, analysis, gains, gains_before, influence, separation):
    """The claims exp_tabular's prose makes, each checked on this run.

    Parameters
    ----------
    results : dict
        Task -> :func:`capassign.error_vs_capacity` table.
    analysis : ExperimentAnalysis
        :func:`capbook.analyse_experiment` of ``results``.
    gains, gains_before : pandas.DataFrame
        :func:`gain_frame` at the middle capacities, contexts coded by type and as codes.
    influence, separation : pandas.DataFrame
        :func:`update_influence` on Cardio and :func:`separation_table` of Coupon.

    Returns
    -------
    dict
        Claim (words) -> bool, for :func:`say_checks`.

    Examples
    --------
    >>> t = _toy_tabular()
    >>> checks = tabular_checks(t["results"], t["analysis"], t["gains"], t["gains_before"],
    ...                         t["influence"], t["separation"])
    >>> len(checks), all(isinstance(v, bool) for v in checks.values())
    (9, True)
    """
    import pandas as pd

    allp = _inner(pd.concat(analysis.paired.values(), ignore_index=True))
    win = (allp["diff"] < 0) & (allp["p_holm"] < 0.05)
    tree_vs_log, gts_log, gts_tree, offline = True, True, True, True
    for name, df in results.items():
        err = _inner(df).pivot_table(index="alpha1", columns="policy", values="error")
        d = float((err["tree-greedy"] - err["logistic-greedy"]).mean())
        tree_vs_log &= (d > 0) == (name == "coupon")
        gts_log &= float((err["logistic-greedy"] - err["logistic-ts"]).abs().max()) <= SIMILAR_TOL
        gts_tree &= ((float((err["tree-greedy"] - err["tree-ts"]).abs().max()) > SIMILAR_TOL)
                     == (name == "cardio"))
        offline &= bool(err[list(OFFLINE_POLICIES)].max(axis=1)
                        .lt(err[list(CONTEXTUAL_POLICIES)].min(axis=1)).all())
    typed = separation.xs("typed")
    return {
        "every contextual policy beats random at every interior capacity": bool(win.all()),
        "every gain at the middle capacities has its interval above zero":
            bool((gains.low > 0).all()),
        "with the earlier coding, Cardio and Coupon each have a gain not above zero":
            all(gains_before[gains_before.task == n].low.le(0).any()
                for n in gains_before.task.unique()),
        "trees beat logistic models except on Coupon": tree_vs_log,
        "logistic greedy and Thompson agree within the tolerance": gts_log,
        "tree greedy and Thompson agree within the tolerance except on Cardio": gts_tree,
        "the offline benchmarks lie below every online policy": offline,
        "on Coupon the offline contrast gains more than the online policy":
            bool((typed["offline gain"] > typed["online gain (greedy)"]).all()),
        "an outlying update moved the contrast over twice as far, before only":
            bool(influence.at["codes (before)", "ratio"] > 2 > influence.at["typed (now)", "ratio"]),
    }


def _glue_tabular_tests(analysis, gains, runs):
    """Glue of the paired tests and gains (tab_wins, tab_cmp, tab_weak_*, tab_gain_*)."""
    import pandas as pd

    sig = _inner(pd.concat(analysis.paired.values(), ignore_index=True))
    win = (sig["diff"] < 0) & (sig["p_holm"] < 0.05)
    _glue("tab_wins", int(win.sum()))
    _glue("tab_cmp", len(sig))
    _glue("tab_runs", runs)
    _glue("tab_sim_tol", SIMILAR_TOL)
    for name in analysis.paired:
        part = sig[sig.task == name]
        _glue(f"tab_{name}_wins", int(win[sig.task == name].sum()))
        _glue(f"tab_{name}_cmp", len(part))
        _glue(f"tab_{name}_won_lo", int(part.won.min()))
        g = gains[gains.task == name]
        _glue(f"tab_{name}_gain_pos", int((g.low > 0).sum()))
        _glue(f"tab_{name}_gain_n", len(g))
        _glue(f"tab_{name}_log_gain_lo", float(g[g.policy.isin(LOGISTIC_POLICIES)].gain.min()))
        _glue(f"tab_{name}_log_gain_hi", float(g[g.policy.isin(LOGISTIC_POLICIES)].gain.max()))
    # the smallest win rate of any comparison
    weak = sig.sort_values(["won", "diff"], ascending=[True, False]).iloc[0]
    _glue("tab_weak_task", str(weak.task))
    _glue("tab_weak_policy", str(weak.policy))
    _glue("tab_weak_alpha", float(weak.alpha1))
    _glue("tab_weak_won", int(weak.won))
    _glue("tab_weak_diff", float(weak["diff"]))
    _glue("tab_weak_p", float(weak.p_holm))
    # the runs in which the weakest comparison lost (new: the brief quotes won and lost)
    _glue("tab_weak_lost", int(weak.lost))
    _glue("tab_gain_n", len(gains))
    _glue("tab_gain_pos", int((gains.low > 0).sum()))
    _glue("tab_gain_min", float(gains.gain.min()))


def _glue_tabular_coding(before, gains_before, influence, separation, cardio_old, outlying):
    """Glue of the coding study (tab_*_before_*, tab_cardio_*, tab_coupon_sep_*)."""
    for name in before:
        g = gains_before[gains_before.task == name]
        _glue(f"tab_{name}_before_gain_pos", int((g.low > 0).sum()))
        _glue(f"tab_{name}_before_gain_n", len(g))
        _glue(f"tab_{name}_before_log_gain_lo",
             float(g[g.policy.isin(LOGISTIC_POLICIES)].gain.min()))
        _glue(f"tab_{name}_before_log_gain_hi",
             float(g[g.policy.isin(LOGISTIC_POLICIES)].gain.max()))
        _glue(f"tab_{name}_before_log05", float(before[name].query(
            "policy == 'logistic-greedy' and alpha1 == 0.5").error.iloc[0]))
    _glue("tab_cardio_zmax", float(np.abs(cardio_old.X).max()))
    _glue("tab_cardio_outlying", int(outlying.sum()))
    _glue("tab_cardio_T", int(cardio_old.T))
    _glue("tab_cardio_ratio_before", float(influence.at["codes (before)", "ratio"]))
    _glue("tab_cardio_ratio_now", float(influence.at["typed (now)", "ratio"]))
    for coding in CONTEXT_CODINGS:
        for model in ("logistic", "tree"):
            _glue(f"tab_coupon_sep_{coding}_{model}",
                 float(separation.at[(coding, model), "offline gain"]))
            _glue(f"tab_coupon_online_{coding}_{model}",
                 float(separation.at[(coding, model), "online gain (greedy)"]))
    paper_row2 = PAPER_TABLE4["coupon"][2]
    _glue("tab_coupon_paper_log_gain", float(paper_row2[0] - paper_row2[1]))
    _glue("tab_coupon_paper_tree_gain", float(paper_row2[0] - paper_row2[2]))


def _glue_tabular_task(name, df, analysis):
    """Glue of one task's curves; returns its largest |logistic greedy - Thompson|."""
    err = _inner(df).pivot_table(index="alpha1", columns="policy", values="error")
    _glue(f"tab_{name}_tree_minus_log", float((err["tree-greedy"] - err["logistic-greedy"]).mean()))
    gts_log = float((err["logistic-greedy"] - err["logistic-ts"]).abs().max())
    _glue(f"tab_{name}_gts_log", gts_log)
    d_tree = (err["tree-greedy"] - err["tree-ts"]).abs()
    _glue(f"tab_{name}_gts_tree", float(d_tree.max()))
    _glue(f"tab_{name}_gts_tree_alpha", float(d_tree.idxmax()))
    mid = err.loc[[0.4, 0.5, 0.6]] if {0.4, 0.5, 0.6} <= set(err.index) else err
    _glue(f"tab_{name}_tree_gain", float((mid["random"] - mid["tree-greedy"]).mean()))
    _glue(f"tab_{name}_log_gain", float((mid["random"] - mid["logistic-greedy"]).mean()))
    g = analysis.gaps[name]
    g = _inner(g[g.policy.isin(CONTEXTUAL_POLICIES)])
    _glue(f"tab_{name}_closed_min", float(g.closed.min()))
    _glue(f"tab_{name}_closed_max", float(g.closed.max()))
    h = df[(df.policy == "hindsight") & (df.alpha1 == 0.5)]["error"]
    _glue(f"tab_{name}_floor05", float(h.iloc[0]))
    rnd = df[df.policy == "random"].set_index("alpha1")["error"]
    _glue(f"tab_{name}_rand05", float(rnd[0.5]))
    _glue(f"tab_{name}_err_log", float(rnd[1.0]))
    _glue(f"tab_{name}_err_xgb", float(rnd[0.0]))
    _glue(f"tab_{name}_paper_log", float(analysis.paper_endpoints.at[name, "agent 1"]))
    _glue(f"tab_{name}_paper_xgb", float(analysis.paper_endpoints.at[name, "agent 2"]))
    _glue(f"tab_{name}_paper_rand05", float(PAPER_TABLE4[name][2][0]))   # Table 4, seed 2
    # for the reproduction scorecard
    e = analysis.errors[name]
    ctx = list(CONTEXTUAL_POLICIES)
    below = e[[a for a in e.columns if 0 < a < 1]]
    below = below.loc[ctx].lt(below.loc["random"], axis=1)
    _glue(f"tab_{name}_ctx_wins", int(below.values.sum()))
    _glue(f"tab_{name}_ctx_pairs", int(below.size))
    _glue(f"tab_{name}_sd_max", float(df[df.policy.isin(["random", *ctx])]["std"].max()))
    return gts_log


def _glue_tabular_claims(results, analysis):
    """Glue of the claims of Sec. 4.1 the scorecard scores (tab_runs_drift,
    tab_offline_below/points, tab_above_best_agent)."""
    ctx = list(CONTEXTUAL_POLICIES)
    # (1) "average error rates effectively unchanged as runs increase": the largest change
    #     of a cell's mean error between its first 10 runs and all of them
    drift = [abs(float(np.mean(r.errors[:10])) - float(r.error))
             for df in results.values() for r in df.itertuples() if r.policy != "hindsight"]
    _glue("tab_runs_drift", max(drift))
    # (2) the offline benchmark as an optimistic bound: (task, interior alpha_1) points
    #     where the better offline policy errs less than every online policy
    off_best, off_n = 0, 0
    for e in analysis.errors.values():
        for a in [a for a in e.columns if 0 < a < 1]:
            off_n += 1
            off_best += int(e.loc[list(OFFLINE_POLICIES), a].min() < e.loc[ctx, a].min())
    _glue("tab_offline_below", off_best)
    _glue("tab_offline_points", off_n)
    # (3) online policies "do not necessarily outperform both individual agents": (task,
    #     policy, interior alpha_1) cells whose error is above the better agent's alone
    above_best = 0
    for e in analysis.errors.values():
        best_agent = min(float(e.loc["random", 0.0]), float(e.loc["random", 1.0]))
        mid = e.loc[ctx, [a for a in e.columns if 0 < a < 1]]
        above_best += int((mid > best_agent).values.sum())
    _glue("tab_above_best_agent", above_best)


def tabular_curves(results, alphas):
    """Fig. 3's curves for the front page: mean error of random assignment, the
    two greedy policies and the hindsight optimum at each alpha_1, plain numbers."""
    curves = {"alphas": [float(a) for a in alphas], "tasks": {}}
    for name, df in results.items():
        curves["tasks"][name] = {
            p: [float(round(float(df[(df.policy == p) & (df.alpha1 == a)]["error"].iloc[0]), 4))
                for a in alphas]
            for p in ("random", "logistic-greedy", "tree-greedy", "hindsight")}
    return curves


def glue_tabular(results, analysis, gains, *, before, gains_before, influence, separation,
                 cardio_old, outlying, runs, eta, alphas):
    """Glue every number exp_tabular's prose and the scorecard quote (``tab_*``).

    Parameters
    ----------
    results : dict
        Task -> :func:`capassign.error_vs_capacity` table (with hindsight rows).
    analysis : ExperimentAnalysis
        :func:`capbook.analyse_experiment` of ``results``.
    gains : pandas.DataFrame
        :func:`gain_frame` of every task at the middle capacities.
    before, gains_before : dict, pandas.DataFrame
        The runs with the earlier coding of the contexts and their gains.
    influence, separation : pandas.DataFrame
        :func:`update_influence` on Cardio and :func:`separation_table` of Coupon.
    cardio_old : capassign.Task
        Cardio with the earlier coding; ``outlying`` flags its outlying contexts.
    runs, eta, alphas
        The chapter's parameters.

    Returns
    -------
    int
        How many values were glued.

    Examples
    --------
    Outside a notebook nothing is stored:

    >>> glue_tabular(**_toy_tabular())
    96
    """
    _GLUED.clear()
    _glue_tabular_tests(analysis, gains, runs)
    _glue_tabular_coding(before, gains_before, influence, separation, cardio_old, outlying)
    gts_log = [_glue_tabular_task(name, df, analysis) for name, df in results.items()]
    _glue("tab_gts_log_max", max(gts_log))
    _glue_tabular_claims(results, analysis)
    _glue("tab_eta", eta)
    _glue("tab_curves", tabular_curves(results, alphas))
    return len(set(_GLUED))


def _toy_tabular():
    """Small synthetic stand-ins for every input of :func:`glue_tabular` (the
    docstring examples): two tasks named as the paper's, three runs."""
    import pandas as pd
    from types import SimpleNamespace

    from capassign import contrast_separation, error_vs_capacity, paired_tests, synthetic_stream
    from .readouts import analyse_experiment

    X, R, _ = synthetic_stream(T=120, d=2, seed=1)
    alphas, mid = [0.0, 0.4, 0.5, 0.6, 1.0], [0.4, 0.5, 0.6]
    policies = ["random", *CONTEXTUAL_POLICIES, *OFFLINE_POLICIES]
    results = {n: error_vs_capacity(X, R, policies, alphas, runs=3, label=n, hindsight=True)
               for n in ("cardio", "coupon")}
    analysis = analyse_experiment(results)
    gains = gain_frame(pd.concat(analysis.paired.values(), ignore_index=True), mid)
    before = {n: df[df.policy.isin(["random", *CONTEXTUAL_POLICIES]) & df.alpha1.isin(mid)]
              for n, df in results.items()}
    gains_before = gain_frame(paired_tests(pd.concat(before.values(), ignore_index=True)), mid)
    task = SimpleNamespace(X=X, R=R, T=len(X))
    outlying = np.abs(X).max(axis=1) > 1.5
    influence = update_influence({"codes (before)": task, "typed (now)": task}, outlying,
                                 seed=0, reference=50)
    sep = {c: contrast_separation(X, R, 0.5, seed=0) for c in CONTEXT_CODINGS}
    return dict(results=results, analysis=analysis, gains=gains, before=before,
                gains_before=gains_before, influence=influence,
                separation=separation_table(sep, gains, gains_before), cardio_old=task,
                outlying=outlying, runs=3, eta=0.5, alphas=alphas)


# --- ImageNet-16H and MMLU (exp_imagenet_mmlu, the paper's Fig. 3e-f) ------------


#: Agreement of the agents' errors alone with Table 3, which prints two decimals.
ENDPOINT_TOL = 0.01


def _interior(err):
    """The columns 0 < alpha_1 < 1 of an errors table (policies x alpha_1)."""
    return err[[a for a in err.columns if 0 < a < 1]]


def _tree_minus_logistic(err):
    """Tree minus logistic policy (greedy, Thompson), mean over interior capacities."""
    return [float((err.loc[t] - err.loc[l])[[a for a in err.columns if 0 < a < 1]].mean())
            for t, l in (("tree-greedy", "logistic-greedy"), ("tree-ts", "logistic-ts"))]


def imagenet_mmlu_checks(analysis):
    """The claims exp_imagenet_mmlu's prose makes, each checked on this run.

    Parameters
    ----------
    analysis : ExperimentAnalysis
        :func:`capbook.analyse_experiment` of the ``imagenet16h`` and ``mmlu`` runs.

    Returns
    -------
    dict
        Claim (words) -> bool, for :func:`say_checks`.

    Examples
    --------
    >>> t = _toy_tabular()["analysis"]
    >>> from dataclasses import replace
    >>> toy = replace(t, **{k: {"imagenet16h": getattr(t, k)["cardio"],
    ...                         "mmlu": getattr(t, k)["coupon"]}
    ...                     for k in ("results", "errors", "gaps", "paired")},
    ...               endpoints=t.endpoints.set_axis(["imagenet16h", "mmlu"]),
    ...               paper_endpoints=t.paper_endpoints.set_axis(["imagenet16h", "mmlu"]))
    >>> checks = imagenet_mmlu_checks(toy)
    >>> len(checks), all(isinstance(v, bool) for v in checks.values())
    (8, True)
    """
    ctx, off = list(CONTEXTUAL_POLICIES), list(OFFLINE_POLICIES)
    wins = tested = offline = floor = True
    for name in analysis.results:
        mid = _interior(analysis.errors[name])
        ti = _inner(analysis.paired[name])
        tested &= bool((ti["diff"] < 0).all() and (ti.p_holm < 0.05).all())
        wins &= bool(mid.loc[ctx].lt(mid.loc["random"], axis=1).values.all())
        offline &= bool(mid.loc[off].values.max() < mid.loc[ctx].values.min())
        floor &= bool(mid.loc["hindsight"].min() < mid.loc[off].values.min())
    d = (analysis.endpoints - analysis.paper_endpoints).abs() <= ENDPOINT_TOL + 1e-9
    g = _inner(analysis.gaps["mmlu"])
    err = analysis.errors["imagenet16h"]
    return {
        "every contextual policy beats random at every interior capacity, in the tests too":
            tested,
        "every contextual policy's mean error is below random's at every interior capacity":
            wins,
        "the offline benchmarks lie below every online policy": offline,
        "the hindsight optimum lies below the offline benchmarks": floor,
        "trees beat logistic models on the images, not on the questions":
            max(_tree_minus_logistic(err)) < 0 < min(_tree_minus_logistic(analysis.errors["mmlu"])),
        "the agents alone match the paper's accuracies except MMLU's first agent":
            bool(d.loc["imagenet16h"].all() and d.loc["mmlu", "agent 2"]
                 and not d.loc["mmlu", "agent 1"]),
        "an offline benchmark closes more than all of random's gap on MMLU":
            bool(g[g.policy.isin(off) & (g.alpha1 == g.alpha1.max())].closed.max() > 1),
        "tree greedy on the images beats the better agent alone":
            bool(float(_interior(err).loc["tree-greedy"].min())
                 < float(analysis.endpoints.loc["imagenet16h"].min())),
    }


def _glue_imagenet_mmlu_task(name, df, analysis):
    """Glue of one task of exp_imagenet_mmlu (``im_<task>_*``)."""
    ctx = list(CONTEXTUAL_POLICIES)
    err = analysis.errors[name]
    mid = err[[a for a in err.columns if 0 < a < 1]]
    wins = mid.loc[ctx].lt(mid.loc["random"], axis=1)
    _glue(f"im_{name}_wins", int(wins.values.sum()))
    _glue(f"im_{name}_pairs", int(wins.size))
    _glue(f"im_{name}_ctx_wins", int(wins.values.sum()))      # names of the scorecard
    _glue(f"im_{name}_ctx_pairs", int(wins.size))
    _glue(f"im_{name}_sd_max", float(df[df.policy.isin(["random", *ctx])]["std"].max()))
    _glue(f"im_{name}_tree_minus_log",
          float((mid.loc["tree-greedy"] - mid.loc["logistic-greedy"]).mean()))
    _glue(f"im_{name}_gts_log",
          float((mid.loc["logistic-greedy"] - mid.loc["logistic-ts"]).abs().max()))
    _glue(f"im_{name}_gts_tree",
          float((mid.loc["tree-greedy"] - mid.loc["tree-ts"]).abs().max()))
    tl = [float((mid.loc[t] - mid.loc[l]).mean())
          for t, l in (("tree-greedy", "logistic-greedy"), ("tree-ts", "logistic-ts"))]
    _glue(f"im_{name}_tree_log_lo", min(tl))
    _glue(f"im_{name}_tree_log_hi", max(tl))
    gts = max(float((mid.loc[g] - mid.loc[t]).abs().max())
              for g, t in (("logistic-greedy", "logistic-ts"), ("tree-greedy", "tree-ts")))
    _glue(f"im_{name}_gts", gts)
    ends, paper = analysis.endpoints.loc[name], analysis.paper_endpoints.loc[name]
    for k, col in (("1", "agent 1"), ("2", "agent 2")):
        _glue(f"im_{name}_err{k}", float(ends[col]))
        _glue(f"im_{name}_paper{k}", float(paper[col]))
        _glue(f"im_{name}_match{k}", bool(abs(ends[col] - paper[col]) <= ENDPOINT_TOL + 1e-9))
    _glue(f"im_{name}_offline_lo", float(mid.loc[list(OFFLINE_POLICIES)].values.min()))
    _glue(f"im_{name}_offline_hi", float(mid.loc[list(OFFLINE_POLICIES)].values.max()))
    _glue(f"im_{name}_floor_lo", float(mid.loc["hindsight"].min()))
    _glue(f"im_{name}_floor_hi", float(mid.loc["hindsight"].max()))
    g = _inner(analysis.gaps[name])
    on, off = g[g.policy.isin(ctx)], g[g.policy.isin(OFFLINE_POLICIES)]
    _glue(f"im_{name}_closed_lo", float(on.closed.min()))
    _glue(f"im_{name}_closed_hi", float(on.closed.max()))
    _glue(f"im_{name}_offclosed_lo", float(off.closed.min()))
    _glue(f"im_{name}_offclosed_hi", float(off.closed.max()))
    t = analysis.paired[name]
    ti = _inner(t)
    _glue(f"im_{name}_holm_max", float(ti.p_holm.max()))
    _glue(f"im_{name}_all_better", bool((ti["diff"] < 0).all()))
    _glue(f"im_{name}_won_lo", int(ti.won.min()))
    _glue(f"im_{name}_won_hi", int(ti.won.max()))
    weak = ti.sort_values("won").iloc[0]
    _glue(f"im_{name}_weak_policy", str(weak.policy))
    _glue(f"im_{name}_weak_alpha", float(weak.alpha1))
    _glue(f"im_{name}_weak_diff", float(weak["diff"]))
    _glue(f"im_{name}_weak_lo", float(weak.ci_low))
    _glue(f"im_{name}_weak_hi", float(weak.ci_high))
    ends_t = t[~t.alpha1.between(0, 1, inclusive="neither")]
    _glue(f"im_{name}_end_move", float(ends_t["diff"].abs().max()))
    _glue(f"im_{name}_below_floor",
          float(-analysis.gaps[name].query("policy in @ctx").gap.min()))


def glue_imagenet_mmlu(analysis, *, mmlu_T, runs):
    """Glue every number exp_imagenet_mmlu's prose and the scorecard quote (``im_*``).

    Parameters
    ----------
    analysis : ExperimentAnalysis
        :func:`capbook.analyse_experiment` of the ``imagenet16h`` and ``mmlu`` runs.
    mmlu_T : int
        Tasks in the MMLU stream.
    runs : int
        Runs per point.

    Returns
    -------
    int
        How many values were glued.

    Examples
    --------
    Outside a notebook nothing is stored (the toy of :func:`imagenet_mmlu_checks`):

    >>> t = _toy_tabular()["analysis"]
    >>> from dataclasses import replace
    >>> toy = replace(t, **{k: {"imagenet16h": getattr(t, k)["cardio"],
    ...                         "mmlu": getattr(t, k)["coupon"]}
    ...                     for k in ("results", "errors", "gaps", "paired")},
    ...               endpoints=t.endpoints.set_axis(["imagenet16h", "mmlu"]),
    ...               paper_endpoints=t.paper_endpoints.set_axis(["imagenet16h", "mmlu"]))
    >>> glue_imagenet_mmlu(toy, mmlu_T=120, runs=3)
    81
    """
    from capassign import PAPER_SETTINGS

    _GLUED.clear()
    _glue("im_runs", runs)
    _glue("im_endpoint_tol", ENDPOINT_TOL)
    for name, df in analysis.results.items():
        _glue_imagenet_mmlu_task(name, df, analysis)
    # ImageNet-16H: the best contextual policy against both agents alone
    err = analysis.errors["imagenet16h"]
    mid = err[[a for a in err.columns if 0 < a < 1]]
    best_alpha = float(mid.loc["tree-greedy"].idxmin())
    _glue("im_best_alpha", best_alpha)
    _glue("im_best_tree", float(mid.loc["tree-greedy", best_alpha]))
    _glue("im_best_random", float(err.loc["random", best_alpha]))
    _glue("im_alone", float(analysis.endpoints.loc["imagenet16h"].min()))
    _glue("im_mmlu_T", mmlu_T)
    _glue("im_mmlu_half", mmlu_T // 2)
    _glue("im_min_leaf", PAPER_SETTINGS.min_samples_leaf)
    return len(set(_GLUED))


# --- construction seeds (exp_seeds, the paper's Table 4) ---------------------------


def seed_row(name, seed, task, res, policies):
    """One (data set, construction seed) row of exp_seeds' table: the agents'
    accuracies and each policy's error, ours rounded to three decimals beside
    the paper's Table 4 cell.

    Parameters
    ----------
    name : str
        Tabular task (a key of :data:`capassign.PAPER_TABLE4`).
    seed : int
        Construction seed (a row of the paper's Table 4).
    task : capassign.Task
        The task built with that seed.
    res : list of SimulationResult
        One result per policy, in the order of ``policies``.
    policies : list of str
        Table 4's policies.

    Returns
    -------
    dict

    Examples
    --------
    >>> from types import SimpleNamespace as NS
    >>> row = seed_row("bank", 2, NS(accuracies=(0.81234, 0.9)), [NS(error=0.14321)],
    ...                ["random"])
    >>> row["random (ours)"], row["acc logistic"]
    (0.143, 0.812)
    """
    paper = PAPER_TABLE4[name][seed]
    ours = [r.error for r in res]
    return {"dataset": name, "seed": seed,
            "acc logistic": round(task.accuracies[0], 3),
            "acc xgboost": round(task.accuracies[1], 3),
            **{f"{p} (ours)": round(e, 3) for p, e in zip(policies, ours)},
            **{f"{p} (paper)": v for p, v in zip(policies, paper)}}


def seed_tables(table, policies, runs, tol):
    """One folded table per data set of exp_seeds: a row per construction seed,
    the agents' accuracies and each policy's error, ours (paper).

    Parameters
    ----------
    table : pandas.DataFrame
        Rows of :func:`seed_row`.
    policies : list of str
        Table 4's policies.
    runs : int
        Runs per cell, for the captions.
    tol : float
        Largest |ours - paper| shaded as agreeing.

    Returns
    -------
    list
        One folded table per data set, in the order of ``table``.

    Examples
    --------
    >>> import pandas as pd
    >>> from types import SimpleNamespace as NS
    >>> t = pd.DataFrame([seed_row("bank", 2, NS(accuracies=(0.8, 0.9)), [NS(error=0.14)],
    ...                            ["random"])])
    >>> len(seed_tables(t, ["random"], 10, 0.01))
    1
    """
    out = []
    for name in table.dataset.unique():
        t = table[table.dataset == name].set_index("seed")
        ours = t[["acc logistic", "acc xgboost", *[f"{p} (ours)" for p in policies]]]
        ours = ours.rename(columns=lambda c: c.replace(" (ours)", ""))
        paper = t[[f"{p} (paper)" for p in policies]]
        paper = paper.rename(columns=lambda c: c.replace(" (paper)", ""))
        out.append(show_table(ours, paper=paper, tol=tol, fold=True,
                              caption=f"{name.capitalize()}: error at "
                                      r"$\alpha = (0.5, 0.5)$, "
                                      f"{runs} runs, per construction seed, ours (paper)"))
    return out


def seeds_gain_figure(table):
    """Gain over random assignment at equal capacities, the paper's (x) against
    ours (y), one point per (data set, construction seed) and contextual policy.

    Parameters
    ----------
    table : pandas.DataFrame
        Rows of :func:`seed_row` for random, logistic greedy and tree greedy.

    Returns
    -------
    fig, ax

    Examples
    --------
    >>> import pandas as pd, matplotlib.pyplot as plt
    >>> from types import SimpleNamespace as NS
    >>> pol = ["random", "logistic-greedy", "tree-greedy"]
    >>> t = pd.DataFrame([seed_row("bank", s, NS(accuracies=(0.8, 0.9)),
    ...                            [NS(error=e) for e in (0.15, 0.13, 0.12)], pol)
    ...                   for s in range(5)])
    >>> fig, ax = seeds_gain_figure(t)
    >>> len(ax.collections), ax.get_xlabel()
    (2, 'gain over random, paper')
    >>> plt.close(fig)
    """
    from capassign import POLICY_STYLE

    from .present import book_figure, legend_outside

    fig, ax = book_figure(width=4.8, height=4.6)
    for p, marker in (("logistic-greedy", "s"), ("tree-greedy", "D")):
        gp = table["random (paper)"] - table[f"{p} (paper)"]
        go = table["random (ours)"] - table[f"{p} (ours)"]
        ax.scatter(gp, go, marker=marker, s=22, label=POLICY_STYLE[p]["label"],
                   color=POLICY_STYLE[p]["color"])
    top = float((table["random (ours)"] - table["tree-greedy (ours)"]).max()) * 1.05
    ax.plot([0, top], [0, top], color="0.6", lw=0.8, ls="--")
    ax.set_xlabel("gain over random, paper")
    ax.set_ylabel("gain over random, ours")
    legend_outside(fig, ncol=2)
    return fig, ax


def implied_random_table(names):
    """The paper's random-assignment error at equal capacities two ways: the mean
    of Table 3's agents' errors and Table 4's seed-2 cell.

    Parameters
    ----------
    names : list of str
        Tabular tasks.

    Returns
    -------
    Table

    Examples
    --------
    >>> implied_random_table(["bank"]).frame.index.tolist()
    ["Table 3 (mean of the agents' errors)", 'Table 4, seed 2, random']
    """
    import pandas as pd
    from capassign import paper_accuracies

    implied = pd.DataFrame({name: {"Table 3 (mean of the agents' errors)":
                                   1 - float(np.mean(paper_accuracies(name))),
                                   "Table 4, seed 2, random": PAPER_TABLE4[name][2][0]}
                            for name in names})
    return show_table(implied, caption=r"The paper's random-assignment error at "
                                       r"$\alpha = (0.5, 0.5)$, two ways")


def matched_rows(name, task, res, policies, tol):
    """exp_seeds' rows of one task with agents matched to Table 3, against the
    paper's seed-2 row of Table 4: one row per policy.

    Parameters
    ----------
    name : str
        Tabular task.
    task : capassign.Task
        Its agents matched to Table 3 (``load_task(name)``).
    res : list of SimulationResult
        One result per policy, in the order of ``policies``.
    policies : list of str
        Table 4's policies.
    tol : float
        Largest |ours - paper| that agrees.

    Returns
    -------
    list of dict

    Examples
    --------
    >>> from types import SimpleNamespace as NS
    >>> from capassign import PAPER_TABLE4
    >>> task = NS(meta={"seed": 7}, accuracies=(0.8, 0.9))
    >>> paper = PAPER_TABLE4["bank"][2][0]          # the paper's seed-2 random cell
    >>> r = matched_rows("bank", task, [NS(error=paper + 0.004, stderr=0.001)], ["random"],
    ...                  0.01)
    >>> r[0]["ours - paper"], r[0]["within 0.01"]
    (0.004, True)
    """
    out = []
    for p, r, v in zip(policies, res, PAPER_TABLE4[name][2]):
        out.append({"dataset": name, "our seed": task.meta["seed"],
                    "acc logistic": round(task.accuracies[0], 3),
                    "acc xgboost": round(task.accuracies[1], 3), "policy": p,
                    "ours": round(r.error, 3), "paper seed 2": v,
                    "ours - paper": round(r.error - v, 3),
                    "se (ours)": round(r.stderr, 4),
                    "within 0.01": abs(r.error - v) <= tol})
    return out


def matched_table(matched, runs, tol):
    """The matched agents' errors against the paper's seed-2 row, ours (paper).

    Parameters
    ----------
    matched : pandas.DataFrame
        Rows of :func:`matched_rows`.
    runs : int
        Runs per cell, for the caption.
    tol : float
        Largest |ours - paper| shaded as agreeing.

    Returns
    -------
    Table

    Examples
    --------
    >>> import pandas as pd
    >>> from types import SimpleNamespace as NS
    >>> task = NS(meta={"seed": 7}, accuracies=(0.8, 0.9))
    >>> m = pd.DataFrame(matched_rows("bank", task, [NS(error=0.15, stderr=0.001)],
    ...                               ["random"], 0.01))
    >>> matched_table(m, 10, 0.01).frame.columns.tolist()
    ['our seed', 'acc logistic', 'acc xgboost', 'error', 'se (ours)']
    """
    m = matched.set_index(["dataset", "policy"])
    ours = m[["our seed", "acc logistic", "acc xgboost", "ours", "se (ours)"]].rename(
        columns={"ours": "error"})
    paper = m[["paper seed 2"]].rename(columns={"paper seed 2": "error"})
    return show_table(ours, paper=paper, tol=tol, formats={"se (ours)": 4},
                      caption=f"Agents matched to Table 3 against the paper's seed 2: error at "
                              rf"$\alpha = (0.5, 0.5)$, {runs} runs, ours (paper)")


#: The contextual policies of the paper's Table 4.
TABLE4_CONTEXTUAL = ("logistic-greedy", "tree-greedy")


def spread_table(spreads, coding, caption, policies, fold=False):
    """Each cell of Table 4 against our range over the seeds matched to its row:
    'paper in|out [low, high] (p<percentile>, n<seeds>)', rows (data set, row),
    one column per policy.

    Parameters
    ----------
    spreads : pandas.DataFrame
        :func:`capbook.table4_spreads`.
    coding : str
        Coding of the contexts (a value of :data:`capassign.CONTEXT_CODINGS`).
    caption : str
        The table's caption.
    policies : list of str
        The columns, in order.
    fold : bool
        Fold the table.

    Returns
    -------
    Table or Fold

    Examples
    --------
    >>> import pandas as pd
    >>> sp = pd.DataFrame({"coding": "typed", "task": "bank", "row": 2, "policy": "random",
    ...                    "paper": [0.15], "low": [0.14], "high": [0.16], "inside": [True],
    ...                    "percentile": [40.0], "seeds": [3]})
    >>> spread_table(sp, "typed", "toy", ["random"]).frame.iloc[0, 0]
    '0.150 in [0.140, 0.160] (p40, n3)'
    """
    sp = spreads[spreads.coding == coding]
    f = lambda v: f"{v:.3f}"
    text = [f"{f(r.paper)} {'in' if r.inside else 'out'} [{f(r.low)}, {f(r.high)}] "
            f"(p{r.percentile:.0f}, n{r.seeds})" for r in sp.itertuples()]
    cells = sp.assign(cell=text).pivot_table(index=["task", "row"], columns="policy",
                                             values="cell", aggfunc="first", sort=False)
    return show_table(cells[policies], wrap=True, fold=fold, caption=caption)


def spread_counts(spreads):
    """How many of the paper's cells lie inside our matched-seed range, per coding.

    Parameters
    ----------
    spreads : pandas.DataFrame
        :func:`capbook.table4_spreads`.

    Returns
    -------
    Table

    Examples
    --------
    >>> import pandas as pd
    >>> sp = pd.DataFrame({"coding": ["typed", "codes"], "task": "bank", "row": 2,
    ...                    "policy": "tree-greedy", "inside": [True, False]})
    >>> spread_counts(sp).frame["seed-2 contextual cells inside"].tolist()
    ['1 of 1', '0 of 1']
    """
    import pandas as pd

    ctx_pol = list(TABLE4_CONTEXTUAL)
    count_rows = []
    for coding in CONTEXT_CODINGS:
        sp = spreads[spreads.coding == coding]
        s2 = sp[(sp.row == 2) & sp.policy.isin(ctx_pol)]
        ctx_cells = sp[sp.policy.isin(ctx_pol)]
        rnd = sp[sp.policy == "random"]
        count_rows.append({"coding": coding,
                           "seed-2 contextual cells inside":
                               f"{int(s2.inside.sum())} of {len(s2)}",
                           "contextual cells inside": f"{int(ctx_cells.inside.sum())} of "
                                                      f"{len(ctx_cells)}",
                           "random cells inside": f"{int(rnd.inside.sum())} of {len(rnd)}"})
    return show_table(pd.DataFrame(count_rows).set_index("coding"), wrap=True,
                      caption="Paper's cells inside our matched-seed range")


def seeds_summary(table, policies):
    """Across the (data set, seed) cells: how often each contextual policy beats
    random assignment and its mean gain, ours and the paper's.

    Parameters
    ----------
    table : pandas.DataFrame
        Rows of :func:`seed_row`.
    policies : list of str
        random, logistic greedy, tree greedy (in that order).

    Returns
    -------
    Table

    Examples
    --------
    >>> import pandas as pd
    >>> from types import SimpleNamespace as NS
    >>> pol = ["random", "logistic-greedy", "tree-greedy"]
    >>> t = pd.DataFrame([seed_row("bank", 2, NS(accuracies=(0.8, 0.9)),
    ...                            [NS(error=e) for e in (0.15, 0.13, 0.12)], pol)])
    >>> seeds_summary(t, pol).frame.loc["ours", "tree < random"]
    '1/1'
    """
    import pandas as pd

    summary = []
    for who in ("ours", "paper"):
        r, lg, tg = (table[f"{p} ({who})"] for p in policies)
        summary.append({"source": who,
                        "logistic < random": f"{int((lg < r).sum())}/{len(r)}",
                        "tree < random": f"{int((tg < r).sum())}/{len(r)}",
                        "tree <= logistic": f"{int((tg <= lg).sum())}/{len(r)}",
                        "mean gain logistic": round(float((r - lg).mean()), 4),
                        "mean gain tree": round(float((r - tg).mean()), 4)})
    return show_table(pd.DataFrame(summary).set_index("source"), digits=4,
                      caption="Across the (data set, seed) cells of the first tables")


def seeds_checks(table, matched, spreads):
    """The claims exp_seeds' prose makes, each checked on this run.

    Parameters
    ----------
    table : pandas.DataFrame
        Rows of :func:`seed_row` (every data set and construction seed).
    matched : pandas.DataFrame
        Rows of :func:`matched_rows` (agents matched to Table 3).
    spreads : pandas.DataFrame
        :func:`capbook.table4_spreads`.

    Returns
    -------
    dict
        Claim (words) -> bool, for :func:`say_checks`.

    Examples
    --------
    >>> import pandas as pd
    >>> from types import SimpleNamespace as NS
    >>> pol = ["random", "logistic-greedy", "tree-greedy"]
    >>> task = NS(meta={"seed": 7}, accuracies=(0.8, 0.9))
    >>> res = [NS(error=e, stderr=0.001) for e in (0.15, 0.13, 0.12)]
    >>> t = pd.DataFrame([seed_row("bank", 2, task, res, pol)])
    >>> m = pd.DataFrame(matched_rows("bank", task, res, pol, 0.01))
    >>> sp = pd.DataFrame({"coding": "typed", "task": "credit", "row": 2,
    ...                    "policy": ["tree-greedy"], "inside": [False]})
    >>> checks = seeds_checks(t, m, sp)
    >>> len(checks), all(isinstance(v, bool) for v in checks.values())
    (5, True)
    """
    rnd_ok = matched[matched.policy == "random"]["within 0.01"]
    cc = matched[matched.dataset.isin(["credit", "cardio"])]
    bc = matched[matched.dataset.isin(["bank", "coupon"]) & (matched.policy != "random")]
    s2 = spreads[(spreads.coding == "typed") & (spreads.row == 2)
                 & spreads.policy.isin(TABLE4_CONTEXTUAL)]
    worst = table.loc[table["random (ours)"].idxmax()]
    return {
        "every random-assignment cell agrees with the paper's matched row": bool(rnd_ok.all()),
        "every cell of Credit and Cardio agrees with it": bool(cc["within 0.01"].all()),
        "no contextual cell of Bank and Coupon agrees, ours always above":
            bool(not bc["within 0.01"].any() and (bc["ours - paper"] > 0).all()),
        "those differences exceed five of our largest standard errors":
            bool(len(bc) > 0 and float(bc["ours - paper"].min())
                 > 5 * float(matched["se (ours)"].max())),
        "the poorest baseline is on Bank; of the matched row only Credit's lie outside":
            bool(worst.dataset == "bank"
                 and {r.task for r in s2.itertuples() if not r.inside} == {"credit"}),
    }


def glue_seeds(table, matched, exact, exact_matched, spreads, *, runs, tol, agent_seeds,
               policies):
    """Glue every number exp_seeds' prose and the scorecard quote (``seed2_*``, ``sd_*``).

    Parameters
    ----------
    table : pandas.DataFrame
        Rows of :func:`seed_row`.
    matched : pandas.DataFrame
        Rows of :func:`matched_rows`.
    exact, exact_matched : dict
        Unrounded errors: (task, seed) -> {policy: error}; (task, policy) -> error.
    spreads : pandas.DataFrame
        :func:`capbook.table4_spreads`.
    runs, tol, agent_seeds, policies
        The chapter's parameters.

    Returns
    -------
    int
        How many values were glued.

    Examples
    --------
    Outside a notebook nothing is stored:

    >>> import pandas as pd
    >>> from types import SimpleNamespace as NS
    >>> pol = ["random", "logistic-greedy", "tree-greedy"]
    >>> task = NS(meta={"seed": 7}, accuracies=(0.8, 0.9))
    >>> res = [NS(error=e, stderr=0.001) for e in (0.15, 0.13, 0.12)]
    >>> names = ["bank", "credit", "coupon", "cardio"]
    >>> runs_of = lambda s: [NS(error=e) for e in (0.15, 0.13, 0.12 - s / 1000)]
    >>> t = pd.DataFrame([seed_row(n, s, NS(accuracies=(0.7 + s / 50, 0.9)), runs_of(s), pol)
    ...                   for n in names for s in range(5)])
    >>> m = pd.DataFrame([r for n in names for r in matched_rows(n, task, res, pol, 0.01)])
    >>> sp = pd.DataFrame({"coding": [c for c in ("typed", "codes") for _ in range(3)],
    ...                    "task": "credit", "row": 2, "policy": pol * 2, "inside": True,
    ...                    "paper": 0.1, "low": 0.1, "median": 0.1, "high": 0.1,
    ...                    "seeds": 1, "percentile": 50.0})
    >>> glue_seeds(t, m, {("bank", 0): dict(zip(pol, (0.15, 0.13, 0.12)))},
    ...            {("bank", "random"): 0.15}, sp, runs=10, tol=0.01, agent_seeds=[0],
    ...            policies=pol)
    61
    """
    from scipy import stats

    _GLUED.clear()
    ctx_pol = list(TABLE4_CONTEXTUAL)
    _glue("seed2_agree", int(matched["within 0.01"].sum()))
    _glue("seed2_cells", len(matched))
    _glue("seed2_maxdiff", float(matched["ours - paper"].abs().max()))
    _glue("sd_runs", runs)
    _glue("sd_tol", tol)
    _glue("sd_n_seeds", len(agent_seeds))
    cc = matched[matched.dataset.isin(["credit", "cardio"])]
    bc = matched[matched.dataset.isin(["bank", "coupon"]) & (matched.policy != "random")]
    _glue("sd_cc_maxdiff", float(cc["ours - paper"].abs().max()))
    _glue("sd_bc_lo", float(bc["ours - paper"].min()))
    _glue("sd_bc_hi", float(bc["ours - paper"].max()))
    _glue("sd_se_lo", float(matched["se (ours)"].min()))
    _glue("sd_se_hi", float(matched["se (ours)"].max()))
    cou = table[table.dataset == "coupon"]
    gain = cou["random (ours)"] - cou["tree-greedy (ours)"]
    _glue("sd_coupon_gain_lo", float(gain.min()))
    _glue("sd_coupon_gain_hi", float(gain.max()))
    cm = matched[matched.dataset == "coupon"].set_index("policy")["ours"]
    _glue("sd_coupon_gain_m", float(cm["random"] - cm["tree-greedy"]))
    pc = PAPER_TABLE4["coupon"][2]
    _glue("sd_coupon_gain_paper2", float(pc[0] - pc[2]))
    # the pattern across seeds
    for who in ("ours", "paper"):
        r, lg, tg = (table[f"{p} ({who})"] for p in policies)
        _glue(f"sd_{who}_lg_wins", int((lg < r).sum()))
        _glue(f"sd_{who}_tg_wins", int((tg < r).sum()))
        _glue(f"sd_{who}_t_le_l", int((tg <= lg).sum()))
        _glue(f"sd_{who}_gain_lg", float((r - lg).mean()))
        _glue(f"sd_{who}_gain_tg", float((r - tg).mean()))
    _glue("sd_cells", len(table))
    for name in table.dataset.unique():
        t = table[table.dataset == name]
        _glue(f"sd_{name}_acc_lo", float(t["acc logistic"].min()))
        _glue(f"sd_{name}_acc_hi", float(t["acc logistic"].max()))
    worst = table.loc[table["random (ours)"].idxmax()]
    _glue("sd_worst_name", str(worst.dataset))
    _glue("sd_worst_seed", int(worst.seed))
    _glue("sd_worst_acc", float(worst["acc logistic"]))
    _glue("sd_worst_random", float(worst["random (ours)"]))
    # the paper's own largest swing of the random cell between two seeds of one data set
    swing = {name: max(v[0] for v in rows_) - min(v[0] for v in rows_)
             for name, rows_ in PAPER_TABLE4.items()}
    _glue("sd_paper_swing_name", max(swing, key=swing.get))
    _glue("sd_paper_swing", float(max(swing.values())))
    ours_swing = table.groupby("dataset")["random (ours)"].agg(lambda v: v.max() - v.min())
    _glue("sd_ours_swing_name", str(ours_swing.idxmax()))
    _glue("sd_ours_swing", float(ours_swing.max()))
    # for the reproduction scorecard: every cell of Table 4, ours
    short = {"random": "random", "logistic-greedy": "lg", "tree-greedy": "tg"}
    for (name, s), errs in exact.items():
        for p, e in errs.items():
            _glue(f"sd_{name}_s{s}_{short[p]}", float(e))
    for (name, p), e in exact_matched.items():
        _glue(f"sd_{name}_m_{short[p]}", float(e))
    # Table 4 against our matched-seed ranges (for the text and the scorecard)
    for coding in CONTEXT_CODINGS:
        sp = spreads[spreads.coding == coding]
        s2 = sp[(sp.row == 2) & sp.policy.isin(ctx_pol)]
        _glue(f"sd_sp_{coding}_s2_in", int(s2.inside.sum()))
        _glue(f"sd_sp_{coding}_ctx_in", int(sp[sp.policy.isin(ctx_pol)].inside.sum()))
        _glue(f"sd_sp_{coding}_rand_in", int(sp[sp.policy == "random"].inside.sum()))
    _glue("sd_sp_s2_n", len(s2))
    _glue("sd_sp_ctx_n", int(sp.policy.isin(ctx_pol).sum()))
    _glue("sd_sp_rand_n", int((sp.policy == "random").sum()))
    s2 = spreads[(spreads.coding == "typed") & (spreads.row == 2)
                 & spreads.policy.isin(ctx_pol)]
    _glue("sd_sp_s2_out", ", ".join(f"{r.task} {short[r.policy]}" for r in s2.itertuples()
                                    if not r.inside))
    _glue("sd_sp_credit_r2_seeds", int(s2[s2.task == "credit"].seeds.iloc[0]))
    for r in spreads[spreads.coding == "typed"].itertuples():
        _glue(f"sd_range_{r.task}_r{r.row}_{short[r.policy]}",
              {"low": float(r.low), "median": float(r.median), "high": float(r.high),
               "seeds": int(r.seeds), "percentile": float(r.percentile),
               "inside": bool(r.inside)})
    acc_gap = (table["acc xgboost"] - table["acc logistic"]).abs()
    tree_gain = table["random (ours)"] - table["tree-greedy (ours)"]
    _glue("sd_gap_gain_corr", float(stats.spearmanr(acc_gap, tree_gain).statistic))
    return len(set(_GLUED))


# --- the two engines (fast_engine) --------------------------------------------------


#: Share of a normal sample beyond two standard deviations: the cells with |z| > 2
#: expected by chance when the engines agree.
BEYOND_TWO_SE = 0.0455


def engine_zmax_table(table, tasks):
    """The largest |z| of each policy over the capacities, one column per stream.

    Parameters
    ----------
    table : pandas.DataFrame
        One row per (task, policy, alpha1) with the engines' standardised difference ``z``.
    tasks : list of str
        The streams, in column order.

    Returns
    -------
    Table

    Examples
    --------
    >>> import pandas as pd
    >>> t = pd.DataFrame({"task": "mmlu", "policy": "random", "alpha1": [0.2, 0.5],
    ...                   "z": [-1.5, 0.5]})
    >>> engine_zmax_table(t, ["mmlu"]).frame.loc["random", "mmlu"]
    '1.50'
    """
    zmax_by = table.assign(absz=table.z.abs()).pivot_table(index="policy", columns="task",
                                                           values="absz", aggfunc="max",
                                                           sort=False)
    return show_table(zmax_by[tasks], digits=2,
                      caption=r"Largest $|z|$ over the capacities, per policy and stream")


def engine_folds(table, titles):
    """Every cell of the engine comparison on each stream, one folded table each.

    Parameters
    ----------
    table : pandas.DataFrame
        One row per (task, policy, alpha1): both engines' mean errors, ``diff``,
        ``se``, ``z`` and agent 1's shares.
    titles : dict
        Stream -> how the caption names it, in display order.

    Returns
    -------
    list

    Examples
    --------
    >>> import pandas as pd
    >>> t = pd.DataFrame({"task": "mmlu", "policy": "random", "alpha1": [0.5],
    ...                   "fast": [0.3], "reference": [0.31], "diff": [-0.01],
    ...                   "se": [0.01], "z": [-1.0]})
    >>> len(engine_folds(t, {"mmlu": "MMLU"}))
    1
    """
    fmt = {"z": lambda v: f"{v:+.2f}"}
    out = []
    for name, title in titles.items():
        t = table[table.task == name].drop(columns="task").set_index(["policy", "alpha1"])
        out.append(show_table(t, digits=4, formats=fmt, fold=True,
                              caption=f"{title}: fast against reference engine, every cell"))
    return out


def check_engine_cells(table):
    """Print and check the engine comparison on ImageNet-16H and MMLU: the largest
    |z| (at most three), the cells beyond two against chance, the deterministic
    policies' largest difference; glue them (``fe_cells``, ``fe_zmax``, ...).

    Parameters
    ----------
    table : pandas.DataFrame
        One row per (task, policy, alpha1) with ``diff`` and ``z``.

    Returns
    -------
    None

    Raises
    ------
    AssertionError
        When a difference is beyond three standard errors.

    Examples
    --------
    >>> import pandas as pd
    >>> t = pd.DataFrame({"task": "mmlu", "policy": ["random", "marginal"],
    ...                   "alpha1": [0.5, 0.5], "diff": [0.01, 0.0], "z": [1.2, 0.0]})
    >>> check_engine_cells(t)
    2 comparisons, largest |z| = 1.20 (mmlu, random, alpha1 = 0.5)
    cells with |z| > 2: 0; expected by chance if the engines agree: 0.1
    deterministic policies: max |diff| = 0.0000
    """
    zmax = table["z"].abs().max()
    worst = table.loc[table["z"].abs().idxmax()]
    n_z2 = int((table["z"].abs() > 2).sum())
    print(f"{len(table)} comparisons, largest |z| = {zmax:.2f} "
          f"({worst.task}, {worst.policy}, alpha1 = {worst.alpha1})")
    print(f"cells with |z| > 2: {n_z2}; "
          f"expected by chance if the engines agree: {BEYOND_TWO_SE * len(table):.1f}")
    assert zmax <= 3, "fast and reference engines disagree beyond three standard errors"
    det = table[table.policy.isin(["marginal", "logistic-greedy", "offline-logistic"])]
    det_max = det["diff"].abs().max()
    print(f"deterministic policies: max |diff| = {det_max:.4f}")
    glue("fe_cells", len(table))
    glue("fe_zmax", zmax)
    glue("fe_n_z2", n_z2)
    glue("fe_expected_z2", BEYOND_TWO_SE * len(table))
    glue("fe_det_max", det_max)


def say_engine_settings(validation, tab):
    """Print the stored tabular comparison's size and sizing rule, and any cells
    not computed yet; glue them (``fe_prefix``, ``fe_pilot``, ... ``fe_cpu_min``).

    Parameters
    ----------
    validation : dict
        :func:`capbook.read_engine_validation`.
    tab : pandas.DataFrame
        :func:`capbook.engine_validation`, one row per cell.

    Returns
    -------
    None

    Examples
    --------
    >>> from capbook import engine_validation, read_engine_validation
    >>> stored = read_engine_validation(check_data=False)
    >>> say_engine_settings(stored, engine_validation(check_data=False))  # doctest: +ELLIPSIS
    72 cells, ... paired runs of ... tasks; ... pilot runs, at most ... per cell; detect ...
    """
    st = validation["settings"]
    glue("fe_prefix", st["prefix"])
    glue("fe_pilot", st["pilot"])
    glue("fe_max_runs", st["max_runs"])
    glue("fe_diff", st["diff"])
    glue("fe_power", st["power"])
    glue("fe_level", st["level"])
    glue("fe_tab_cells", len(tab))
    glue("fe_tab_missing", len(validation["missing"]))
    glue("fe_tab_grid", len(tab) + len(validation["missing"]))
    glue("fe_tab_runs", int(tab.runs.sum()))
    cpu = sum(c[e]["cpu_seconds"] for c in validation["cells"]
              for e in ("fast", "reference"))
    glue("fe_cpu_min", cpu / 60)
    if validation["missing"]:
        print(f"NOT YET COMPUTED: {len(validation['missing'])} of "
              f"{len(tab) + len(validation['missing'])} cells: "
              + "; ".join(f"{t} {p} {a}" for t, p, a in validation["missing"]))
    say(f"{len(tab)} cells, {int(tab.runs.sum())} paired runs of {st['prefix']} tasks; "
        f"{st['pilot']} pilot runs, at most {st['max_runs']} per cell; "
        f"detect {st['diff']} with power {st['power']} at level {st['level']}")


def engine_summary_table(tab):
    """Per tabular task: cells, runs, paired tests below 0.05 before and after
    Holm's correction, the largest mean difference and the smallest power.

    Parameters
    ----------
    tab : pandas.DataFrame
        :func:`capbook.engine_validation`.

    Returns
    -------
    Table

    Examples
    --------
    >>> from capbook import engine_validation
    >>> engine_summary_table(engine_validation(check_data=False)).frame.columns.tolist()[:3]
    ['cells', 'runs', 'p < 0.05']
    """
    below = lambda p: int((p < 0.05).sum())
    summary = tab.groupby("task", sort=False).agg(**{
        "cells": ("runs", "size"), "runs": ("runs", "sum"), "p < 0.05": ("p", below),
        "Holm < 0.05": ("holm", below), "largest |diff|": ("diff", lambda d: d.abs().max()),
        "smallest power": ("power", "min")})
    return show_table(summary, digits=4, formats={"smallest power": 2},
                      caption="Tabular tasks: the paired comparisons in brief")


def engine_cell_folds(tab, names):
    """Every cell of the stored tabular comparison, one folded table per task.

    Parameters
    ----------
    tab : pandas.DataFrame
        :func:`capbook.engine_validation`.
    names : list of str
        The tabular tasks, in display order.

    Returns
    -------
    list
        One folded table per task that has cells (a task without prints so).

    Examples
    --------
    >>> from capbook import engine_validation
    >>> len(engine_cell_folds(engine_validation(check_data=False), ["bank", "credit"]))
    2
    """
    out = []
    for name in names:
        t = tab[tab.task == name].set_index(["policy", "alpha1"])
        if t.empty:
            print(f"{name}: no cell computed yet")
            continue
        t["95% CI"] = [f"[{lo:+.4f}, {hi:+.4f}]" for lo, hi in zip(t.ci_low, t.ci_high)]
        cols = ["runs", "fast", "reference", "diff", "95% CI", "p", "holm", "power"]
        fmt = {"diff": lambda v: f"{v:+.4f}", "p": 3, "holm": 3, "power": 2}
        out.append(show_table(t[cols], digits=4, formats=fmt, fold=True,
                              caption=f"{name.capitalize()}: fast against reference "
                                      "engine, every cell"))
    return out


def engine_figure(tab, names, diff):
    """The paired error difference fast minus reference engine per tabular task,
    policy and capacity with 95% intervals, in a band of +-``diff``.

    Parameters
    ----------
    tab : pandas.DataFrame
        :func:`capbook.engine_validation`.
    names : list of str
        The four tabular tasks (a 2 x 2 grid).
    diff : float
        The difference the runs were sized to detect (the grey band).

    Returns
    -------
    fig, axes

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> from capbook import engine_validation
    >>> tab = engine_validation(check_data=False)
    >>> fig, axes = engine_figure(tab, ["bank", "credit", "coupon", "cardio"], 0.01)
    >>> axes.shape, axes[0, 0].get_title()
    ((2, 2), 'Bank')
    >>> plt.close(fig)
    """
    from capassign import plot_paired_differences

    from .present import book_figure, legend_outside

    fig, axes = book_figure(2, 2, height=6.2, sharey=True)
    for ax, name in zip(axes.flat, names):
        ax.axhspan(-diff, diff, color="0.9", zorder=0)
        if (tab.task == name).any():
            plot_paired_differences(tab[tab.task == name], ax=ax, title=name.capitalize())
        else:
            ax.set_title(f"{name.capitalize()}: not computed yet")
        ax.set_ylabel("fast − reference error")
        ax.label_outer()
    fullest = max(axes.flat, key=lambda a: len(a.get_legend_handles_labels()[0]))
    legend_outside(fig, fullest, ncol=3)
    return fig, axes


#: The policies with random numbers of their own (coin flips, Thompson draws,
#: bootstraps): the engines can agree only statistically on them.
RANDOMISED_POLICIES = ("random", "logistic-ts", "tree-greedy", "tree-ts")


def check_engine_tabular(validation, tab):
    """Print and check the stored tabular comparison: cells below 0.05 against
    chance, none after Holm's correction, identical runs of the deterministic
    policies, the power reached; glue them (``fe_tab_*``).

    Parameters
    ----------
    validation : dict
        :func:`capbook.read_engine_validation`.
    tab : pandas.DataFrame
        :func:`capbook.engine_validation`.

    Returns
    -------
    None

    Raises
    ------
    AssertionError
        When a deterministic policy's runs differ, a Holm-adjusted test rejects,
        or a cell below the power target stopped before the cap.

    Examples
    --------
    >>> from capbook import engine_validation, read_engine_validation
    >>> stored = read_engine_validation(check_data=False)
    >>> check_engine_tabular(stored, engine_validation(check_data=False))  # doctest: +ELLIPSIS
    cells with p < 0.05: ... of 72; ...
    """
    st = validation["settings"]
    randomised = list(RANDOMISED_POLICIES)
    stoch = tab[tab.policy.isin(randomised)]
    n_sig = int((tab.p < 0.05).sum())
    n_holm = int((tab.holm < 0.05).sum())
    expected = 0.05 * len(stoch)
    det_cells = [c for c in validation["cells"] if c["policy"] not in randomised]
    identical = all(c["fast"] == dict(c["reference"], cpu_seconds=c["fast"]["cpu_seconds"])
                    for c in det_cells)
    assert identical, "a deterministic policy gives different runs on the two engines"
    say(f"cells with p < 0.05: {n_sig} of {len(tab)}; "
        f"expected by chance: {expected:.1f} "
        f"(5% of the {len(stoch)} cells of the randomised policies)")
    print(f"cells with Holm-adjusted p < 0.05: {n_holm}; smallest Holm-adjusted p: "
          f"{tab.holm.min():.3f}")
    assert n_holm == 0, "the engines differ beyond chance: find the cause first"
    say(f"deterministic policies (marginal, logistic-greedy): "
        f"all {len(det_cells)} cells give identical runs (errors and shares) "
        f"on both engines")
    print(f"power at {st['diff']}: minimum {tab.power.min():.2f}, "
          f"cells below {st['power']}: {int((tab.power < st['power']).sum())}")
    print(f"largest |mean difference|: {tab['diff'].abs().max():.4f}; largest share "
          f"difference: {(tab.share_fast - tab.share_reference).abs().max():.4f}")
    glue("fe_tab_sig", n_sig)
    glue("fe_tab_stoch", len(stoch))
    glue("fe_tab_expected", expected)
    glue("fe_tab_holm", n_holm)
    glue("fe_tab_holm_min", tab.holm.min())
    glue("fe_tab_identical", len(det_cells))
    glue("fe_tab_power_min", tab.power.min())
    glue("fe_tab_power_low", int((tab.power < st["power"]).sum()))
    low = tab[tab.power < st["power"]]
    assert (low.runs == st["max_runs"]).all(), "a cell below the power target stopped early"
    glue("fe_tab_diff_max", tab["diff"].abs().max())
    glue("fe_tab_share_max", (tab.share_fast - tab.share_reference).abs().max())


# --- every pair of language models on MMLU (exp_mmlu_pairs) -------------------------


def pairs_summary(pairs, policies):
    """How often and by how much each policy beats random assignment over the pairs.

    Parameters
    ----------
    pairs : pandas.DataFrame
        One row per pair of models: the mean error of ``random`` and of each policy.
    policies : list of str
        The contextual policies (columns of ``pairs``).

    Returns
    -------
    pandas.DataFrame
        One row per policy: pairs, pairs where it beats random, their share, and the
        median, mean, best and worst gain.

    Examples
    --------
    >>> import pandas as pd
    >>> pairs = pd.DataFrame({"random": [0.3, 0.4], "tree-greedy": [0.28, 0.41]})
    >>> s = pairs_summary(pairs, ["tree-greedy"])
    >>> int(s.at["tree-greedy", "beats random"]), float(s.at["tree-greedy", "best gain"])
    (1, 0.02)
    """
    import pandas as pd

    summary = []
    for p in policies:
        gain = pairs["random"] - pairs[p]
        summary.append({"policy": p, "pairs": len(gain),
                        "beats random": int((gain > 0).sum()),
                        "share": round(float((gain > 0).mean()), 3),
                        "median gain": round(float(gain.median()), 4),
                        "mean gain": round(float(gain.mean()), 4),
                        "best gain": round(float(gain.max()), 4),
                        "worst gain": round(float(gain.min()), 4)})
    return pd.DataFrame(summary).set_index("policy")


def mmlu_pairs_figure(pairs):
    """Tree greedy's error reduction over random assignment for every pair of
    models: its histogram (left) and against the models' accuracy gap (right).

    Parameters
    ----------
    pairs : pandas.DataFrame
        One row per pair: ``acc 1``, ``acc 2``, ``random``, ``tree-greedy``.

    Returns
    -------
    fig, axes

    Examples
    --------
    >>> import pandas as pd, matplotlib.pyplot as plt
    >>> pairs = pd.DataFrame({"acc 1": [0.6, 0.7], "acc 2": [0.5, 0.7],
    ...                       "random": [0.45, 0.3], "tree-greedy": [0.43, 0.31]})
    >>> fig, axes = mmlu_pairs_figure(pairs)
    >>> axes[1].get_ylabel()
    'error reduction'
    >>> plt.close(fig)
    """
    from .present import book_figure

    fig, axes = book_figure(2)
    gain = pairs["random"] - pairs["tree-greedy"]
    axes[0].hist(gain, bins=30, color="C1", alpha=0.8)
    axes[0].axvline(0, color="k", lw=0.8)
    axes[0].set_xlabel("error reduction of\ntree greedy over random")
    axes[0].set_ylabel("model pairs")
    axes[1].scatter((pairs["acc 1"] - pairs["acc 2"]).abs(), gain, s=8, color="C1")
    axes[1].axhline(0, color="k", lw=0.8)
    axes[1].set_xlabel("|accuracy difference|\nof the two models")
    axes[1].set_ylabel("error reduction")
    fig.tight_layout()
    return fig, axes


def short_model_names(t):
    """The model columns of a pairs table without their provider
    (``openai_davinci`` -> ``davinci``).

    Parameters
    ----------
    t : pandas.DataFrame
        With columns ``model 1`` and ``model 2``.

    Returns
    -------
    pandas.DataFrame

    Examples
    --------
    >>> import pandas as pd
    >>> short_model_names(pd.DataFrame({"model 1": ["openai_davinci"],
    ...                                 "model 2": ["ai21_j1-large"]})).iloc[0].tolist()
    ['davinci', 'j1-large']
    """
    return t.assign(**{c: t[c].str.split("_", n=1).str[-1] for c in ("model 1", "model 2")})


def mmlu_pairs_checks(pairs, summary, paper_pair):
    """The claims exp_mmlu_pairs' prose makes, each checked on this run.

    Parameters
    ----------
    pairs : pandas.DataFrame
        One row per pair, with ``gain tree`` (random minus tree greedy).
    summary : pandas.DataFrame
        :func:`pairs_summary`.
    paper_pair : pandas.DataFrame
        The row of ``pairs`` of the paper's pair, as substituted.

    Returns
    -------
    dict
        Claim (words) -> bool, for :func:`say_checks`.

    Examples
    --------
    >>> import pandas as pd
    >>> pairs = pd.DataFrame({"acc 1": [0.6, 0.7, 0.9], "acc 2": [0.5, 0.7, 0.5],
    ...                       "random": [0.45, 0.3, 0.3], "tree-greedy": [0.43, 0.31, 0.2]})
    >>> pairs["gain tree"] = pairs["random"] - pairs["tree-greedy"]
    >>> checks = mmlu_pairs_checks(pairs, pairs_summary(pairs, ["tree-greedy"]),
    ...                            pairs.iloc[[0]])
    >>> list(checks.values())
    [True, True, False]
    """
    from scipy import stats

    rho = float(stats.spearmanr((pairs["acc 1"] - pairs["acc 2"]).abs(),
                                pairs["gain tree"]).statistic)
    paper_gain = float(paper_pair["gain tree"].iloc[0])
    return {
        "with each policy, some pair loses": bool((summary["worst gain"] < 0).all()),
        "the gain grows with the models' accuracy gap": rho > 0,
        "the paper's pair gains more than the median pair":
            paper_gain > float(pairs["gain tree"].median()),
    }


def glue_mmlu_pairs(pairs, models, summary, paper_pair):
    """Glue every number exp_mmlu_pairs' prose quotes (``mp_*``).

    Parameters
    ----------
    pairs : pandas.DataFrame
        One row per pair, with ``gain tree``.
    models : list of str
        The models paired.
    summary : pandas.DataFrame
        :func:`pairs_summary` of logistic greedy and tree greedy.
    paper_pair : pandas.DataFrame
        The row of ``pairs`` of the paper's pair, as substituted.

    Returns
    -------
    int
        How many values were glued.

    Examples
    --------
    Outside a notebook nothing is stored:

    >>> import pandas as pd
    >>> pairs = pd.DataFrame({"acc 1": [0.6, 0.7, 0.9], "acc 2": [0.5, 0.7, 0.5],
    ...                       "random": [0.45, 0.3, 0.3], "logistic-greedy": [0.44, 0.3, 0.25],
    ...                       "tree-greedy": [0.43, 0.31, 0.2]})
    >>> pairs["gain tree"] = pairs["random"] - pairs["tree-greedy"]
    >>> summary = pairs_summary(pairs, ["logistic-greedy", "tree-greedy"])
    >>> glue_mmlu_pairs(pairs, ["a", "b", "c"], summary, pairs.iloc[[0]])
    18
    """
    from scipy import stats

    _GLUED.clear()
    _glue("mp_pairs", len(pairs))
    _glue("mp_models", len(models))
    for p, key in (("logistic-greedy", "lg"), ("tree-greedy", "tg")):
        _glue(f"mp_{key}_wins", int(summary.at[p, "beats random"]))
        _glue(f"mp_{key}_share", float(summary.at[p, "share"]))
        _glue(f"mp_{key}_median", float(summary.at[p, "median gain"]))
        _glue(f"mp_{key}_best", float(summary.at[p, "best gain"]))
        _glue(f"mp_{key}_worst", float(-summary.at[p, "worst gain"]))
    _glue("mp_median_max", float(summary["median gain"].max()))
    _glue("mp_best_max", float(summary["best gain"].max()))
    _glue("mp_worst_loss", float(-summary["worst gain"].min()))
    _glue("mp_gap_gain_corr", float(stats.spearmanr((pairs["acc 1"] - pairs["acc 2"]).abs(),
                                                    pairs["gain tree"]).statistic))
    paper_gain = float(paper_pair["gain tree"].iloc[0])
    _glue("mp_paper_gain", paper_gain)
    _glue("mp_paper_rank", int((pairs["gain tree"] > paper_gain).sum()) + 1)
    return len(set(_GLUED))
