"""Read-outs of the book's foundation chapters: the data, the agents, the theory, the router.

A chapter of the first parts (``data_agents``, ``data_contexts``, the theory
chapters, ``router_live``) keeps in view the steps a reader can follow and
re-run: load the streams, rebuild a table, draw the figure, check a number.
What only formats those steps (the tables' layout, the folded text, the
numbers glued into the prose, the checks behind a sentence of the prose)
lives here, one named function per read-out, so that a chapter's code cells
stay short.  Every function reads :mod:`capassign` through its public names
and prints or returns exactly what the chapter showed before.
"""

from __future__ import annotations

import numpy as np

from capassign import (MMLU_EXPERIMENTS, PAPER_CAMELYON17, PAPER_TABLE3, TABULAR_ENCODING,
                       TABULAR_TASKS, DataUnavailable,
                       data_registry, load_task, mmlu_substitutes, paper_accuracies,
                       paper_agent_seed, tabular_agent_search)

from .evidence import agent_evidence, encoding_evidence, paper_logistic_targets
from .present import (OKABE_ITO, book_figure, fold_text, glue, legend_outside, policy_style, say,
                      show_table)
from .readouts import SCORECARD_TOL
from .spreads import read_table4_spreads, spreads_errors

#: The six task streams of the paper's Table 3 that are re-built here, in its order.
TABLE3_TASKS = ("bank", "credit", "coupon", "cardio", "imagenet16h", "mmlu")
#: Largest distance of a matched tabular agent to Table 3's accuracy (the rule's window).
AGENT_MATCH_TOL = 0.01


# --- data_agents: the data files, the agents and Table 3 ----------------------------


def verify_data():
    """Fetch every registered data file if needed and check it against its sha256.

    Prints how many files were verified; raises :class:`capassign.DataUnavailable`,
    naming the first file that failed, when any is missing or altered.

    Returns
    -------
    list of tuple
        ``(path, status, detail)`` per file, as :meth:`capassign.DataRegistry.fetch`.

    Examples
    --------
    >>> status = verify_data()   # doctest: +ELLIPSIS
    2... data files verified against the registry
    >>> {st for _, st, _ in status}
    {'ok'}
    """
    status = data_registry().fetch()
    bad = [(p, s) for p, s, _ in status if s != "ok"]
    if bad:
        raise DataUnavailable(
            f"{len(bad)} data files are not available ({bad[0][0]}: {bad[0][1]}); set "
            f"CAPASSIGN_DATA to the data folder or run `python -m capassign data fetch` "
            f"(see data/README.md)")
    print(f"{len(status)} data files verified against the registry")
    return status


def mmlu_substitution_fold():
    """The models the MMLU substitution rule picks per experiment, folded.

    Returns
    -------
    Fold
        Per experiment (``mmlu``, ``mmlu3``, ``mmlu5``) its subjects and, per
        paper agent, the model used, whether it is a substitute, its accuracy
        and the accuracy it was matched to.

    Examples
    --------
    >>> str(mmlu_substitution_fold()).splitlines()[0]
    'mmlu: college_chemistry, us_foreign_policy'
    """
    lines = []
    for name in ["mmlu", "mmlu3", "mmlu5"]:
        subjects = MMLU_EXPERIMENTS[name]["subjects"]
        lines.append(f"{name}: {', '.join(subjects)}")
        for s in mmlu_substitutes(name):
            how = "substitute" if s["substituted"] else "original  "
            lines.append(f"  {s['paper_agent']:15s} -> {s['model']:28s} {how} "
                         f"{s['accuracy']:.3f} (target {s['target']:.3f}, {s['target_kind']})")
    return fold_text("The models the rule picks per MMLU experiment, with their accuracy", lines)


def implied_logistic_fold():
    """The logistic agent's accuracy that each row of the paper's Table 4 implies, folded.

    Returns
    -------
    Fold
        One line per tabular data set (:func:`capbook.paper_logistic_targets`).

    Examples
    --------
    >>> str(implied_logistic_fold()).splitlines()[0]
    'bank    0.834 0.818 0.534 0.570 0.842'
    """
    implied = {name: paper_logistic_targets(name) for name in TABULAR_TASKS}
    return fold_text("Logistic accuracy implied by Table 4, rows 0-4",
                     [f"{name:7s} " + " ".join(f"{v:.3f}" for v in t)
                      for name, t in implied.items()])


def show_encoding_evidence(evidence, windows=(0.01, 0.03, 0.05)):
    """Show the coding each window would choose (folded) and the evidence table (folded).

    Parameters
    ----------
    evidence : pandas.DataFrame
        :func:`capbook.encoding_evidence` at the chapter's window.
    windows : sequence of float
        Widths of the window at which the choice is repeated.

    Returns
    -------
    Table
        The evidence per data set and coding (the fold shown before it is
        displayed by this call).

    Examples
    --------
    >>> t = show_encoding_evidence(encoding_evidence(), windows=(0.02,))  # doctest: +ELLIPSIS
    window 0.02: chosen ...
    >>> t.frame.index.names
    FrozenList(['task', 'encoding'])
    """
    from IPython.display import display

    lines = []
    for tol in windows:
        e = encoding_evidence(tol=tol)
        picks = [f"{r.task} {r.encoding}" for r in e.itertuples() if r.chosen]
        lines.append(f"window {tol}: chosen " + ", ".join(picks))
    display(fold_text("The coding chosen at three widths of the window", lines))

    def label(column):
        column = column.replace("within_s", "within, seed ")
        return column.replace("mean_within", "mean within")

    return show_table(evidence.set_index(["task", "encoding"]).rename(columns=label), fold=True,
                      caption="Logistic agent over our construction seeds, per coding: "
                              "accuracy quantiles and share of seeds within 0.02 of each "
                              "implied value")


def _seed_distances(name):
    """Per construction seed 0-99: the larger distance of the two agents to Table 3."""
    search = tabular_agent_search(name)
    p1, p2 = paper_accuracies(name)
    return np.maximum((search[TABULAR_ENCODING[name]] - p1).abs(),
                      (search["xgboost"] - p2).abs())


def matched_agents():
    """The tabular agents of each data set's matched construction seed, against Table 3.

    Returns
    -------
    pandas.DataFrame
        Per data set: the coding, the matched seed, both agents' accuracies,
        the distance of the worse of the two to Table 3, how many of seeds
        0-99 come within 0.02, and the paper's two accuracies.

    Examples
    --------
    >>> m = matched_agents()
    >>> bool((m["distance"] <= AGENT_MATCH_TOL).all())
    True
    """
    import pandas as pd

    rows = []
    for name in TABULAR_TASKS:
        k = paper_agent_seed(name)
        dist = _seed_distances(name)
        task = load_task(name)
        if task.meta["seed"] != k:
            raise AssertionError(f"{name}: load_task built seed {task.meta['seed']}, not {k}")
        p1, p2 = paper_accuracies(name)
        rows.append({"dataset": name, "coding": TABULAR_ENCODING[name], "matched seed": k,
                     "logistic": task.accuracies[0], "xgboost": task.accuracies[1],
                     "distance": float(dist.min()),
                     "seeds within 0.02": int((dist <= 0.02).sum()),
                     "paper logistic": p1, "paper xgboost": p2})
    return pd.DataFrame(rows).set_index("dataset")


def show_matched_agents(matched):
    """The matched agents' table, ours beside the paper's Table 3 (folded).

    Parameters
    ----------
    matched : pandas.DataFrame
        From :func:`matched_agents`.

    Returns
    -------
    Table

    Examples
    --------
    >>> show_matched_agents(matched_agents()).frame.index.tolist()
    ['bank', 'credit', 'coupon', 'cardio']
    """
    paper_cols = ["paper logistic", "paper xgboost"]
    paper = matched[paper_cols].rename(columns=lambda c: c[6:])
    return show_table(matched.drop(columns=paper_cols), paper=paper,
                      tol=SCORECARD_TOL["accuracy"], formats={"distance": 4}, fold=True,
                      caption="Agents of the matched construction seed: accuracy, "
                              "ours (paper's Table 3)")


def context_codings(seed=None):
    """The policies' contexts of each tabular data set under the typed and the old coding.

    Parameters
    ----------
    seed : int, optional
        Construction seed (None: the matched seed).

    Returns
    -------
    pandas.DataFrame
        Per data set: features, columns by type, context columns under each
        coding and the largest absolute context value under each.

    Examples
    --------
    >>> c = context_codings()
    >>> bool((c["columns (typed)"] >= c["features"]).all())
    True
    """
    import pandas as pd

    rows = []
    for name in TABULAR_TASKS:
        t = load_task(name, seed)
        old = load_task(name, seed, coding="codes")
        types = pd.Series(t.meta["column_types"]).value_counts()
        rows.append({"features": len(t.meta["features"]),
                     **{k: int(types.get(k, 0)) for k in
                        ("numeric", "ordered", "nominal", "binary")},
                     "columns (typed)": t.X.shape[1], "columns (codes)": old.X.shape[1],
                     "largest |value| (codes)": float(np.abs(old.X).max()),
                     "largest |value| (typed)": float(np.abs(t.X).max())})
    return pd.DataFrame(rows, index=list(TABULAR_TASKS))


def coding_sensitivity():
    """Gain over random of Table 4's policies under each coding of the contexts.

    Read from the stored runs of ``book/results/table4_spreads.json``: per data
    set and coding, the number of matched seeds, and per greedy policy its
    mean gain over random assignment and on how many seeds it beats random.

    Returns
    -------
    pandas.DataFrame
        Indexed by (task, coding).

    Examples
    --------
    >>> coding_sensitivity().index.get_level_values("coding").unique().tolist()
    ['codes', 'typed']
    """
    import pandas as pd

    wide = spreads_errors(read_table4_spreads()).pivot_table(
        index=["task", "coding", "agent_seed"], columns="policy", values="error")
    rows = []
    for (name, coding), g in wide.groupby(level=["task", "coding"], sort=False):
        row = {"seeds": len(g)}
        for p, label in (("logistic-greedy", "logistic"), ("tree-greedy", "tree")):
            gain = g["random"] - g[p]
            row[f"{label} gain"] = float(gain.mean())
            row[f"{label} wins"] = f"{int((gain > 0).sum())} of {len(g)}"
        rows.append({"task": name, "coding": coding, **row})
    return pd.DataFrame(rows).set_index(["task", "coding"])


def coding_moves(sensitivity):
    """How far each coding moves the mean gain, per data set and greedy policy.

    Returns
    -------
    pandas.DataFrame
        Per task: the absolute change of ``logistic gain`` and ``tree gain``.

    Parameters
    ----------
    sensitivity : pandas.DataFrame
        From :func:`coding_sensitivity`.

    Examples
    --------
    >>> moved = coding_moves(coding_sensitivity())
    >>> bool((moved["tree gain"] < moved["logistic gain"]).all())
    True
    """
    return sensitivity.groupby(level="task").agg(
        lambda v: abs(v.iloc[0] - v.iloc[1]) if v.dtype.kind == "f" else 0)


def reading_table(agent_ev):
    """The agents' input readings against the paper's implied accuracies, as a folded table.

    Parameters
    ----------
    agent_ev : pandas.DataFrame
        From :func:`capbook.agent_evidence`.

    Returns
    -------
    Table

    Examples
    --------
    >>> reading_table(agent_evidence()).frame.columns[-1]
    'chosen'
    """
    ev_table = agent_ev.pivot_table(index=["subset", "scaling"], columns="task",
                                    values="mean_within")
    ev_table["score"] = agent_ev.groupby(["subset", "scaling"]).score.first()
    ev_table["chosen"] = agent_ev.groupby(["subset", "scaling"]).chosen.any().map(
        {True: "yes", False: ""})
    return show_table(ev_table, digits=3, wrap=True, fold=True,
                      caption="Share of our seeds near the paper's implied logistic "
                              "accuracies, by reading of the agents' inputs")


def chosen_reading(agent_ev):
    """The reading of the agents' inputs that the evidence chooses (one row).

    Parameters
    ----------
    agent_ev : pandas.DataFrame
        From :func:`capbook.agent_evidence`.

    Returns
    -------
    pandas.Series
        The first row of the chosen reading (``subset``, ``scaling``, ``score``).

    Examples
    --------
    >>> from capassign import TABULAR_SCALING, TABULAR_SUBSET
    >>> r = chosen_reading(agent_evidence())
    >>> (r.subset, r.scaling) == (TABULAR_SUBSET, TABULAR_SCALING)
    True
    """
    return agent_ev[agent_ev.chosen].iloc[0]


def rebuild_table3(seed=None):
    """The paper's Table 3 rebuilt: features, tasks and both agents' accuracies.

    The agents are ordered as the paper's columns: on the four tabular data
    sets the paper lists XGBoost first, on ImageNet-16H and MMLU the text's
    first agent.

    Parameters
    ----------
    seed : int, optional
        Construction seed of the tabular agents (None: the matched seed).

    Returns
    -------
    pandas.DataFrame
        Indexed by task (:data:`TABLE3_TASKS`): ``features``, ``tasks``,
        ``first agent``, ``first acc``, ``second agent``, ``second acc``, each
        number beside the paper's (columns prefixed ``paper ``).

    Examples
    --------
    >>> t = rebuild_table3()
    >>> t.loc["imagenet16h", ["features", "paper features", "tasks", "paper tasks"]].tolist()
    [1, 1, 2000, 2000]
    """
    import pandas as pd

    rows = []
    for name in TABLE3_TASKS:
        task = load_task(name, seed)
        paper = PAPER_TABLE3[name]
        acc = task.accuracies
        order = [1, 0] if name in TABULAR_TASKS else [0, 1]
        # the d features of the data (a tabular task's contexts code them in more columns)
        d = len(task.meta["features"]) if "features" in task.meta else task.X.shape[1]
        rows.append({"task": name, "features": d, "paper features": paper["features"],
                     "tasks": task.T, "paper tasks": paper["tasks"],
                     "first agent": task.agent_names[order[0]], "first acc": acc[order[0]],
                     "paper first acc": paper["acc"][0],
                     "second agent": task.agent_names[order[1]], "second acc": acc[order[1]],
                     "paper second acc": paper["acc"][1]})
    return pd.DataFrame(rows).set_index("task")


def show_table3(table3):
    """Table 3 rebuilt, ours beside the paper's, with Camelyon17 (paper only).

    Parameters
    ----------
    table3 : pandas.DataFrame
        From :func:`rebuild_table3`.

    Returns
    -------
    Table

    Examples
    --------
    >>> show_table3(rebuild_table3()).frame.index[-1]
    'camelyon17'
    """
    cam = PAPER_CAMELYON17
    cols = ["features", "tasks", "first agent", "first acc", "second agent", "second acc"]
    ours = table3[cols].astype(object)
    ours.index.name = None
    ours.loc["camelyon17"] = [np.nan, np.nan, "(not available)", np.nan,
                              "(not available)", np.nan]
    paper = table3[[f"paper {c}" for c in ("features", "tasks", "first acc", "second acc")]]
    paper = paper.rename(columns=lambda c: c[6:]).astype(object)
    paper.index.name = None
    paper.loc["camelyon17"] = [cam["features"], cam["tasks"], cam["acc"][0], cam["acc"][1]]
    return show_table(ours, paper=paper, formats={"features": 0, "tasks": 0},
                      caption="Table 3 rebuilt: ours (paper)")


def check_table3(table3):
    """Check what the chapter states of Table 3 rebuilt; print ``checked``.

    Features equal the paper's on every data set; the task counts of the four
    tabular data sets and ImageNet-16H are the paper's (12357, 9000, 3624,
    21000, 2000); ImageNet-16H's human and network are right on 0.765 and
    0.860 of the images.  Raises AssertionError naming what failed.

    Parameters
    ----------
    table3 : pandas.DataFrame
        From :func:`rebuild_table3`.

    Returns
    -------
    None

    Examples
    --------
    >>> check_table3(rebuild_table3())
    checked
    """
    t = table3
    assert (t["features"] == t["paper features"]).all(), "feature counts differ"
    assert [int(t.at[n, "tasks"]) for n in TABLE3_TASKS[:5]] == \
        [12357, 9000, 3624, 21000, 2000], "task counts differ"
    assert round(t.at["imagenet16h", "first acc"], 3) == 0.765, "human 48's accuracy"
    assert round(t.at["imagenet16h", "second acc"], 3) == 0.860, "VGG-19's accuracy"
    print("checked")


def plot_table3(table3):
    """The agents' accuracies of Table 3 rebuilt: ours (filled) beside the paper's (open).

    One row per data set, the paper's first column as circles and its second
    as squares; the paper's own value of each is the open marker of the
    same shape.

    Returns
    -------
    matplotlib.figure.Figure

    Parameters
    ----------
    table3 : pandas.DataFrame
        From :func:`rebuild_table3`.

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> fig = plot_table3(rebuild_table3())
    >>> [t.get_text() for t in fig.axes[0].get_yticklabels()][:2]
    ['Bank', 'Credit']
    >>> plt.close(fig)
    """
    fig, ax = book_figure(height=3.6)
    y = np.arange(len(table3))[::-1]
    for col, marker, colour in (("first", "o", OKABE_ITO["blue"]),
                                ("second", "s", OKABE_ITO["vermillion"])):
        ax.plot(table3[f"paper {col} acc"], y, ls="", marker=marker, ms=9, mfc="none",
                mec=colour, mew=1.4, label=f"{col} agent, paper")
        ax.plot(table3[f"{col} acc"], y, ls="", marker=marker, ms=4.5, color=colour,
                label=f"{col} agent, ours")
    labels = {"imagenet16h": "ImageNet-16H", "mmlu": "MMLU"}
    ax.set_yticks(y, [labels.get(n, n.capitalize()) for n in table3.index])
    ax.set_xlabel("accuracy on the stream")
    ax.set_xlim(0.25, 1.0)
    ax.grid(axis="x", lw=0.4, alpha=0.5)
    legend_outside(fig, ncol=2)
    return fig


def agents_by_seed(seeds, names=("bank", "credit", "coupon", "cardio")):
    """The tasks of construction seeds ``seeds`` per tabular data set (dict of lists).

    Parameters
    ----------
    seeds : sequence of int
        Construction seeds.
    names : sequence of str
        Tabular data sets.

    Returns
    -------
    dict
        ``{name: [Task per seed]}``.

    Examples
    --------
    >>> by_seed = agents_by_seed([0, 1], names=["cardio"])
    >>> [t.meta["seed"] for t in by_seed["cardio"]]
    [0, 1]
    """
    return {name: [load_task(name, s) for s in seeds] for name in names}


def show_agents_by_seed(by_seed, seeds):
    """The logistic agent's range over ``seeds`` (folded) and the agents per seed (folded).

    Returns
    -------
    Table
        The agents per data set and seed with the logistic agent's features
        (the fold of ranges before it is displayed by this call).

    Parameters
    ----------
    by_seed : dict
        From :func:`agents_by_seed`.
    seeds : sequence of int
        The seeds it was built for.

    Examples
    --------
    >>> t = show_agents_by_seed(agents_by_seed([0], names=["cardio"]), [0])  # doctest: +ELLIPSIS
    cardio   logistic range ...
    >>> t.frame.index.tolist()
    [('cardio', '0')]
    """
    import pandas as pd
    from IPython.display import display

    ranges = []
    for name, tasks in by_seed.items():
        lo = min(t.accuracies[0] for t in tasks)
        hi = max(t.accuracies[0] for t in tasks)
        p = PAPER_TABLE3[name]["acc"][1]
        ranges.append(f"{name:8s} logistic range {lo:.3f}-{hi:.3f}; paper {p:.2f} "
                      f"{'inside' if lo <= p <= hi else 'outside'} the range")
    display(fold_text("The logistic agent's accuracy over construction seeds "
                      + ", ".join(map(str, seeds)), ranges))
    seed_rows = pd.DataFrame([
        {"dataset": name, "seed": s, "logistic": t.accuracies[0],
         "xgboost": t.accuracies[1],
         "logistic regression features": ", ".join(t.meta["agent1_features"])}
        for name, tasks in by_seed.items() for s, t in zip(seeds, tasks)])
    return show_table(seed_rows.set_index(["dataset", "seed"]), wrap=True, fold=True,
                      caption="Agents of construction seeds " + ", ".join(map(str, seeds))
                              + ", with the logistic agent's features")


def bank_splits(seed=None):
    """Bank's stream under a random and an in-order split of the rows; prints both.

    Returns
    -------
    dict
        ``{"random": Task, "order": Task}``.

    Parameters
    ----------
    seed : int, optional
        Construction seed (None: the matched seed).

    Examples
    --------
    >>> splits = bank_splits()   # doctest: +ELLIPSIS
    bank, split=random: ...
    bank, split=order : ...
    >>> sorted(splits)
    ['order', 'random']
    """
    splits = {split: load_task("bank", seed, split=split) for split in ["random", "order"]}
    for split, t in splits.items():
        say(f"bank, split={split:6s}: "
            f"stream positive rate {t.meta['positive_rate_stream']:.3f}, "
            f"logistic {t.accuracies[0]:.3f}, xgboost {t.accuracies[1]:.3f} "
            f"(paper 0.91 / 0.53)")
    return splits


def camelyon17_fold():
    """What the paper reports for Camelyon17 (not re-run here), folded.

    Returns
    -------
    Fold

    Examples
    --------
    >>> str(camelyon17_fold()).splitlines()[0]
    'Table 3: 1 context feature, 2000 tasks, agent accuracies 0.69 / 0.69'
    """
    cam = PAPER_CAMELYON17
    return fold_text("What the paper reports for Camelyon17", [
        f"Table 3: {cam['features']} context feature, {cam['tasks']} tasks, "
        f"agent accuracies {cam['acc'][0]:.2f} / {cam['acc'][1]:.2f}",
        f"Fig. 2b ({cam['runs']} runs): "
        f"offline unconstrained error {cam['offline_error_05']:.2f} "
        f"against about {cam['online_error_05']:.2f} for the online policies "
        f"at alpha1 = 0.5; the offline policies give about "
        f"{cam['offline_share_agent1']:.0%} of the tasks to agent 1",
        "Fig. 2a: estimated Delta(x) changes sign across the context "
        "(neither agent is better everywhere); no numbers printed",
        f"App. H eta study: tree greedy at eta in {cam['etas']} (and others not listed), "
        "re-run here on ImageNet-16H instead"])


def _glue_data_agents(*, seed, status, evidence, matched, table3, by_seed, splits,
                     sensitivity, codings, agent_ev):
    """Glue every number the prose of ``data_agents`` quotes (names ``da_*``).

    The arguments are the chapter's results under the names it computes them.
    """
    for r in evidence.itertuples():
        glue(f"da_{r.task}_{r.encoding}_within", r.mean_within)
        glue(f"da_{r.task}_{r.encoding}_median", r.median)
    for name in TABULAR_TASKS:
        t = load_task(name)
        dist = _seed_distances(name)
        glue(f"da_{name}_n002", int((dist <= 0.02).sum()))
        glue(f"da_{name}_dist", float(dist.min()))
        glue(f"da_{name}_seed", int(t.meta["seed"]))
        glue(f"da_{name}_acc_log", float(t.accuracies[0]))
        glue(f"da_{name}_acc_xgb", float(t.accuracies[1]))
        acc0 = [x.accuracies[0] for x in by_seed[name]]
        glue(f"da_{name}_s04_lo", float(min(acc0)))
        glue(f"da_{name}_s04_hi", float(max(acc0)))
    glue("da_bank_pos_random", splits["random"].meta["positive_rate_stream"])
    glue("da_bank_pos_order", splits["order"].meta["positive_rate_stream"])
    glue("da_bank_xgb_order", float(splits["order"].accuracies[1]))
    # Table 3 rebuilt, for the findings and the reproduction scorecard
    glue("da_n_files", len(status))
    for name, r in table3.iterrows():
        glue(f"da_{name}_d", int(r["features"]))
        glue(f"da_{name}_T", int(r["tasks"]))
        glue(f"da_{name}_paper_T", int(r["paper tasks"]))
    for name in ["imagenet16h", "mmlu"]:
        t = load_task(name)
        p1, p2 = paper_accuracies(name)
        glue(f"da_{name}_acc1", float(t.accuracies[0]))
        glue(f"da_{name}_acc2", float(t.accuracies[1]))
        glue(f"da_{name}_paper_acc1", float(p1))
        glue(f"da_{name}_paper_acc2", float(p2))
    same_T = [n for n, r in table3.iterrows() if r["tasks"] == r["paper tasks"]]
    assert same_T == ["bank", "credit", "coupon", "cardio", "imagenet16h"], same_T
    # the matched tabular agents and the coding
    glue("da_match_tol", AGENT_MATCH_TOL)
    glue("da_max_dist", float(matched["distance"].max()))
    glue("da_max_dist_name", str(matched["distance"].idxmax()))
    glue("da_n_onehot", sum(v == "onehot" for v in TABULAR_ENCODING.values()))
    # Table 3's first accuracy column is the XGBoost agent on every tabular data set, while
    # the text numbers the logistic agent 1: the column nearer to each of our agents
    first_xgb = 0
    for name in TABULAR_TASKS:
        t = load_task(name, seed)
        p_first = PAPER_TABLE3[name]["acc"][0]
        first_xgb += int(abs(t.accuracies[1] - p_first) < abs(t.accuracies[0] - p_first))
    glue("da_t3_first_xgb", first_xgb)
    glue("da_n_tabular", len(TABULAR_TASKS))
    # the policies' contexts: what the coding moves (same seeds, same agents)
    for (name, coding), r in sensitivity.iterrows():
        for label in ("logistic", "tree"):
            glue(f"da_sens_{name}_{coding}_{label}_gain", float(r[f"{label} gain"]))
            glue(f"da_sens_{name}_{coding}_{label}_wins", int(r[f"{label} wins"].split()[0]))
    for name in TABULAR_TASKS:
        glue(f"da_sens_{name}_seeds", int(sensitivity.at[(name, "typed"), "seeds"]))
    glue("da_cardio_zmax_codes", float(codings.at["cardio", "largest |value| (codes)"]))
    glue("da_zmax_typed", float(codings["largest |value| (typed)"].max()))
    reading = chosen_reading(agent_ev)
    glue("da_reading_subset", str(reading.subset))
    glue("da_reading_scaling", str(reading.scaling))
    glue("da_reading_score", float(reading.score))
    glue("da_reading_next", float(agent_ev[~agent_ev.chosen].score.max()))
    # the MMLU agents' accuracy by subject
    mm = load_task("mmlu", seed)
    for sub, key in (("college_chemistry", "chem"), ("us_foreign_policy", "fp")):
        m = mm.meta["subject_of_task"] == sub
        for a in range(2):
            glue(f"da_mmlu_{key}_acc{a + 1}", float(mm.R[m, a].mean()))


# --- data_contexts: where each agent is good ------------------------------------------


def _two_agent_streams(curves):
    return [n for n in curves if curves[n][0].n_agents == 2]


def plot_context_curves(curves):
    """Accuracy by context bin of both agents on every two-agent stream, one panel each.

    Dots: each agent's accuracy per quantile bin; dashed: the second agent's
    lead over the first; thin lines: the true accuracies where the stream
    has them (the synthetic one).  The eighth slot holds the legend.

    Parameters
    ----------
    curves : dict
        ``{name: (task, x, centers, acc, counts)}``, the context summary ``x``
        and :func:`capassign.accuracy_by_context` per stream.

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> from capassign import accuracy_by_context, synthetic_stream
    >>> X, R, mu = synthetic_stream(400, seed=0)
    >>> class T:
    ...     n_agents, mu, name = 2, None, "toy"
    >>> x = X[:, 0]
    >>> fig = plot_context_curves({"toy": (T, x, *accuracy_by_context(x, R, bins=5))})
    >>> len(fig.axes)
    8
    >>> plt.close(fig)
    """
    fig, axes = book_figure(2, 4, height=8.6, sharex=False)
    for ax, name in zip(axes.ravel(), _two_agent_streams(curves)):
        task, x, centers, acc, counts = curves[name]
        for a in range(2):
            ax.plot(centers, acc[:, a], marker="o", ms=3, label=f"agent {a + 1}")
        ax.plot(centers, acc[:, 1] - acc[:, 0], ls="--", color="gray",
                label=r"$\hat\mu_2(x) - \hat\mu_1(x)$")
        ax.axhline(0, color="gray", lw=0.5)
        if task.mu is not None:
            order = np.argsort(x)
            for a in range(2):
                ax.plot(x[order], task.mu[order, a], color=f"C{a}", lw=0.8, alpha=0.6)
        ax.set_title(name)
        ax.set_xlabel("noise level" if name == "imagenet16h" else "PC1 of context")
    for ax in axes[:, 0]:
        ax.set_ylabel("accuracy")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    axes[-1, -1].axis("off")                   # the eighth slot holds the legend
    axes[-1, -1].legend(handles, labels, loc="center", frameon=False)
    fig.tight_layout()
    return fig


def plot_many_agents(curves, names=("mmlu3", "mmlu5")):
    """Accuracy by context bin of every agent of the many-agent MMLU streams, a panel each.

    Returns
    -------
    matplotlib.figure.Figure

    Parameters
    ----------
    curves : dict
        As for :func:`plot_context_curves`.
    names : sequence of str
        The streams drawn, a panel each.

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> from capassign import accuracy_by_context, synthetic_stream
    >>> X, R, mu = synthetic_stream(400, n_agents=3, seed=0)
    >>> class T:
    ...     n_agents, agent_names = 3, ["m_a", "m_b", "m_c"]
    >>> curve = (T, X[:, 0], *accuracy_by_context(X[:, 0], R, bins=5))
    >>> fig = plot_many_agents({"toy": curve}, ["toy"])
    >>> fig.axes[0].get_title()
    'toy (3 agents)'
    >>> plt.close(fig)
    """
    fig, axes = book_figure(len(names), height=4.6)
    for ax, name in zip(np.atleast_1d(axes), names):
        task, x, centers, acc, counts = curves[name]
        for a, an in enumerate(task.agent_names):
            ax.plot(centers, acc[:, a], marker="o", ms=3, label=an.split("_", 1)[-1])
        ax.set_title(f"{name} ({task.n_agents} agents)")
        ax.set_xlabel("PC1 of context")
        ax.set_ylabel("accuracy")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=1,
                  handlelength=1.5)
    fig.tight_layout()
    return fig


def context_curves_fold(curves):
    """The accuracy-by-context curves of every stream in numbers, folded.

    Per stream: the bin centres, each agent's accuracy per bin, for two agents
    the second's lead and where it is positive, and on MMLU each subject's
    mean context and the agents' accuracies on it.

    Returns
    -------
    Fold

    Parameters
    ----------
    curves : dict
        As for :func:`plot_context_curves`.

    Examples
    --------
    >>> from capassign import accuracy_by_context, synthetic_stream
    >>> X, R, mu = synthetic_stream(400, seed=0)
    >>> class T:
    ...     n_agents, T, agent_names = 2, 400, ["a1", "a2"]
    >>> fold = context_curves_fold({"toy": (T, X[:, 0], *accuracy_by_context(X[:, 0], R, bins=4))})
    >>> str(fold).splitlines()[0]
    'toy: 400 tasks, agents a1, a2'
    """
    lines = []
    for name, (task, x, centers, acc, counts) in curves.items():
        lines.append(f"{name}: {task.T} tasks, agents {', '.join(task.agent_names)}")
        lines.append("   x-bin centre  " + " ".join(f"{c:6.2f}" for c in centers))
        for a, an in enumerate(task.agent_names):
            lines.append(f"   {an[:12]:12s}  " + " ".join(f"{v:6.3f}" for v in acc[:, a]))
        if task.n_agents == 2:
            d = acc[:, 1] - acc[:, 0]
            lines.append(f"   {'mu2 - mu1':12s}  " + " ".join(f"{v:6.3f}" for v in d))
            lines.append(f"   bins where agent 2 is better: {int((d > 0).sum())} "
                         f"of {len(d)}; gap from {d.min():.3f} to {d.max():.3f}")
        if name.startswith("mmlu"):
            subject = task.meta["subject_of_task"]
            for sub in task.meta["subjects"]:
                m = subject == sub
                lines.append(f"   {sub:18s} mean PC1 {x[m].mean():6.2f}  accuracies "
                             + " ".join(f"{v:.3f}" for v in task.R[m].mean(axis=0)))
    return fold_text("Accuracy per context bin, every task stream", lines)


def second_agent_lead(curves):
    """The second agent's estimated lead per context bin on every two-agent stream.

    Returns
    -------
    dict
        ``{name: acc[:, 1] - acc[:, 0]}`` (``-Delta_hat`` per bin).

    Parameters
    ----------
    curves : dict
        As for :func:`plot_context_curves`.

    Examples
    --------
    >>> class T:
    ...     n_agents = 2
    >>> acc = np.array([[0.6, 0.5], [0.4, 0.7]])
    >>> second_agent_lead({"toy": (T, None, None, acc, None)})["toy"].round(2).tolist()
    [-0.1, 0.3]
    """
    return {n: curves[n][3][:, 1] - curves[n][3][:, 0] for n in _two_agent_streams(curves)}


def binned_accuracies(x, R, bins):
    """Each agent's accuracy in ``bins`` quantile bins of ``x``, and every task's bin.

    Returns
    -------
    acc : numpy.ndarray
        ``(n_bins, n_agents)``.
    which : numpy.ndarray of int
        The bin of every task.

    Parameters
    ----------
    x : numpy.ndarray
        One number per task.
    R : numpy.ndarray
        ``(T, n_agents)`` rewards.
    bins : int
        Quantile bins (fewer when quantiles coincide).

    Examples
    --------
    >>> acc, which = binned_accuracies(np.arange(4.0), np.array([[1, 0], [1, 0], [0, 1], [0, 1]]), 2)
    >>> acc.tolist(), which.tolist()
    ([[1.0, 0.0], [0.0, 1.0]], [0, 0, 1, 1])
    """
    edges = np.unique(np.quantile(x, np.linspace(0, 1, bins + 1)))
    nb = len(edges) - 1
    which = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, nb - 1)
    acc = np.stack([np.bincount(which, weights=R[:, a], minlength=nb)
                    / np.bincount(which, minlength=nb) for a in range(R.shape[1])], axis=1)
    return acc, which


def report_fig1_split(task, thr, pc1, fig1):
    """Print where the threshold of the paper's Fig. 1 falls on the raw context and its worth.

    Parameters
    ----------
    task : capassign.Task
        Two-agent MMLU.
    thr : capassign.TwoAgentThreshold
        :func:`capassign.two_agent_threshold` for the second agent at its capacity.
    pc1 : numpy.ndarray
        The raw first principal component of each question.
    fig1 : dict
        :data:`capassign.PAPER_FIG1_THRESHOLD`.

    Returns
    -------
    float
        The split on the raw axis (NaN when the questions of the two agents
        are not separated by one threshold).

    Examples
    --------
    >>> from capassign import PAPER_FIG1_THRESHOLD, load_task, two_agent_threshold
    >>> task = load_task("mmlu")
    >>> acc, which = binned_accuracies(task.X[:, 0], task.R, 10)
    >>> thr = two_agent_threshold(acc[which, 1] - acc[which, 0], 0.25)
    >>> split = report_fig1_split(task, thr, task.meta["pc1"], PAPER_FIG1_THRESHOLD)  # doctest: +ELLIPSIS
    tau = ...
    >>> bool(split > 0)
    True
    """
    to_llama = thr.assignment > 0
    llama, cohere = pc1[to_llama], pc1[~to_llama]
    say(f"tau = {thr.tau:.3f} (advantage of {task.agent_names[1]} at the boundary), "
        f"boundary fraction {thr.boundary_fraction:.3f}, "
        f"share {thr.assignment.mean():.3f}")
    say(f"questions given (in whole or part) to {task.agent_names[1]}: raw PC1 from "
        f"{llama.min():.3f} to {llama.max():.3f}; "
        f"to {task.agent_names[0]}: {cohere.min():.3f} to {cohere.max():.3f}")
    contiguous = llama.min() > cohere.max() or llama.max() < cohere.min()
    split = llama.min() if llama.min() > cohere.max() else np.nan
    print(f"one threshold in x: {contiguous}; split at raw PC1 = {split:.3f} "
          f"(paper: about {fig1['x']})")
    print(f"optimal accuracy {thr.delta_integral + task.R[:, 0].mean():.3f} against random "
          f"assignment {0.25 * task.accuracies[1] + 0.75 * task.accuracies[0]:.3f}")
    return split


def _glue_data_contexts(curves, *, task, thr, pc1, fig1):
    """Glue every number the prose of ``data_contexts`` quotes (names ``da_*``).

    Parameters
    ----------
    curves : dict
        As for :func:`plot_context_curves`.
    task, thr, pc1, fig1
        As for :func:`report_fig1_split`.
    """
    lead = second_agent_lead(curves)
    for name in TABULAR_TASKS:
        d = lead[name]
        glue(f"da_{name}_gap_lo", float(d.min()))
        glue(f"da_{name}_gap_hi", float(d.max()))
        glue(f"da_{name}_gap_first", float(d[0]))
        glue(f"da_{name}_gap_last", float(d[-1]))
    to_llama = thr.assignment > 0
    glue("da_fig1_split", float(pc1[to_llama].min()))
    glue("da_fig1_frac", float(thr.boundary_fraction))
    glue("da_fig1_tau", float(thr.tau))
    glue("da_fig1_opt", float(thr.delta_integral + task.R[:, 0].mean()))
    glue("da_fig1_rand", float(0.25 * task.accuracies[1] + 0.75 * task.accuracies[0]))
    glue("da_fig1_paper_x", float(fig1["x"]))
    for name in ["imagenet16h", "mmlu"]:
        d = lead[name]
        glue(f"da_{name}_bins", len(d))
        glue(f"da_{name}_agent1_bins", int((d < 0).sum()))
        glue(f"da_{name}_gap_lo", float(d.min()))
        glue(f"da_{name}_gap_hi", float(d.max()))


# --- theory_online: the queues as prices ----------------------------------------------


def three_agents(x):
    """The three agents of ``theory_shadow_prices``: expected rewards at contexts ``x``.

    Parameters
    ----------
    x : numpy.ndarray
        Contexts, shape ``(n, 2)``.

    Returns
    -------
    numpy.ndarray
        ``mu``, shape ``(n, 3)``: two logistic agents, each better along one
        axis, and a third that is good near the centre.

    Examples
    --------
    >>> three_agents(np.zeros((1, 2))).round(4).tolist()
    [[0.75, 0.75, 0.7935]]
    """
    def sigmoid(z):
        return 1.0 / (1.0 + np.exp(-z))

    x1, x2 = x[:, 0], x[:, 1]
    return np.column_stack([0.55 + 0.40 * sigmoid(2.0 * x1),
                            0.55 + 0.40 * sigmoid(2.0 * x2),
                            0.80 - 0.05 * ((x1 + 0.3) ** 2 + (x2 - 0.2) ** 2)])


def three_agent_grid(n_side):
    """The context grid of ``theory_shadow_prices`` and its normal-density weights.

    Parameters
    ----------
    n_side : int
        Grid points per axis on [-3.5, 3.5].

    Returns
    -------
    x_grid : numpy.ndarray
        ``(n_side**2, 2)`` contexts.
    w : numpy.ndarray
        Weights proportional to the standard normal density, summing to 1.

    Examples
    --------
    >>> x, w = three_agent_grid(3)
    >>> x.shape, round(float(w.sum()), 12)
    ((9, 2), 1.0)
    """
    g1 = np.linspace(-3.5, 3.5, n_side)
    x_grid = np.column_stack([c.ravel() for c in np.meshgrid(g1, g1)])
    w = np.exp(-0.5 * (x_grid**2).sum(axis=1))
    return x_grid, w / w.sum()


def step_label(step):
    """A step size as the tables print it: its value, or ``schedule`` for a step schedule.

    Examples
    --------
    >>> step_label(0.5), step_label(0.02)
    ('0.5', '0.02')

    Parameters
    ----------
    step : float or capassign.DecayingEta
        A constant step or a step schedule.

    Returns
    -------
    str
    """
    from capassign import DecayingEta

    return "schedule" if isinstance(step, DecayingEta) else f"{step:g}"


def price_table(known, lam, *, T, runs, burn_in):
    """The known-mu queue rule per step: scaled queues against the prices, loss, shares.

    Parameters
    ----------
    known : dict
        ``{step: (result, tracking, loss per task, max share deviation)}``.
    lam : numpy.ndarray
        The shadow prices.
    T, runs, burn_in : int
        The stream's length, its runs and the tasks before shares are measured.

    Returns
    -------
    Table

    Examples
    --------
    >>> from capassign import capacity_adherence, price_tracking, simulate_known_mu
    >>> x, w = three_agent_grid(5)
    >>> mu = three_agents(x)
    >>> R = (mu > 0.7).astype(float)
    >>> r = simulate_known_mu(mu, R, [0.2, 0.3, 0.5], eta=0.5, runs=2, seed=0)
    >>> pt = price_tracking(r, np.array([0.1, 0.05, 0.0]))
    >>> known = {0.5: (r, pt, 0.01, capacity_adherence(r).max_deviation.max())}
    >>> t = price_table(known, np.array([0.1, 0.05, 0.0]), T=25, runs=2, burn_in=0)
    >>> t.frame.iloc[0, 0]
    '0.5'
    """
    import pandas as pd

    rows = []
    for eta, (r, pt, loss, dev) in known.items():
        rows.append({r"$\eta$": step_label(eta),
                     **{rf"$\eta_t(Q_{a + 1} - Q_3)$":
                        f"{pt.tail_mean[a]:.3f} ± {pt.tail_sd[a]:.3f}" for a in (0, 1)},
                     "loss per task": loss,
                     rf"max share deviation, $t > {burn_in}$": dev})
    caption = (rf"Known-$\mu$ queue rule, $T = {T}$, {runs} runs: late mean ± sd of "
               rf"the scaled queues against $\lambda^\star_1 - \lambda^\star_3 = "
               rf"{lam[0] - lam[2]:.3f}$, $\lambda^\star_2 - \lambda^\star_3 = "
               rf"{lam[1] - lam[2]:.3f}$")
    return show_table(pd.DataFrame(rows), digits=4, index=False, caption=caption)


def price_misses(known, steps, lam):
    """Per step, the largest miss of the late mean scaled queue against the prices.

    Parameters
    ----------
    known : dict
        As for :func:`price_table`.
    steps : sequence
        The steps (keys of ``known``) to read.
    lam : numpy.ndarray
        The shadow prices.

    Returns
    -------
    list of float

    Examples
    --------
    >>> class PT:
    ...     tail_mean = np.array([0.12, 0.05, 0.0])
    >>> [round(m, 4) for m in price_misses({0.5: (None, PT, 0.0, 0.0)}, [0.5],
    ...                                    np.array([0.1, 0.05, 0.0]))]
    [0.02]
    """
    return [float(np.abs(known[e][1].tail_mean[:2] - (lam[:2] - lam[2])).max())
            for e in steps]


def _trailing_mean(y, k=200):
    c = np.cumsum(y)
    window = np.minimum(np.arange(1, y.size + 1), k)
    return (c - np.concatenate([np.zeros(k), c[:-k]])) / window


def _log_task_grid(T):
    return np.unique(np.rint(np.geomspace(1, T, 300)).astype(int))


def _step_title(step):
    return r"shrinking $\eta_t$" if step_label(step) == "schedule" else f"$\\eta = {step:g}$"


def plot_online_prices(known, steps, T):
    """The price iterate of the known-mu rule against the shadow prices, a panel per step.

    Lines: the scaled queue difference to agent 3's, averaged over the runs
    and the last 200 tasks; bands: 10% to 90% of the runs; dashed: the
    shadow price differences.

    Returns
    -------
    matplotlib.figure.Figure

    Parameters
    ----------
    known : dict
        As for :func:`price_table`.
    steps : sequence
        The steps drawn, a panel each (at least two).
    T : int
        Tasks of the stream.

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> from capassign import price_tracking, simulate_known_mu
    >>> mu = three_agents(three_agent_grid(16)[0])
    >>> R = (mu > 0.7).astype(float)
    >>> lam = np.array([0.1, 0.05, 0.0])
    >>> known = {}
    >>> for eta in (0.5, 0.1):
    ...     r = simulate_known_mu(mu, R, [0.2, 0.3, 0.5], eta=eta, runs=2, seed=0)
    ...     known[eta] = (r, price_tracking(r, lam), 0.0, 0.0)
    >>> fig = plot_online_prices(known, [0.5, 0.1], T=256)
    >>> [ax.get_title().strip("$") for ax in fig.axes]  # doctest: +ELLIPSIS
    ['...eta = 0.5', '...eta = 0.1']
    >>> plt.close(fig)
    """
    fig, axes = book_figure(len(steps), sharey=True, height=2.9)
    t = _log_task_grid(T)
    for ax, eta in zip(axes, steps):
        pt = known[eta][1]
        for a, color in [(0, "C0"), (1, "C4")]:
            ax.fill_between(t, pt.low[t - 1, a], pt.high[t - 1, a], color=color,
                            alpha=0.2, lw=0)
            ax.plot(t, _trailing_mean(pt.tracked[:, a])[t - 1], color=color,
                    label=f"agent {a + 1}")
            ax.axhline(pt.shadow_prices[a], color=color, ls="--", lw=1.5,
                       label=rf"$\lambda^\star_{a + 1} - \lambda^\star_3$")
        ax.set_xscale("log")
        ax.set_title(_step_title(eta))
        ax.grid(alpha=0.3, which="both")
    axes[1].set_xlabel("tasks assigned, $t$")
    axes[0].set_ylabel(r"price $\eta_t (Q_{t,a} - Q_{t,3})$")
    legend_outside(fig, axes[0], ncol=4)
    return fig


def plot_online_shares(known, steps, alpha, T):
    """Running shares of the agents under the known-mu rule against their capacities.

    Returns
    -------
    matplotlib.figure.Figure

    Parameters
    ----------
    known : dict
        As for :func:`price_table`.
    steps : sequence
        The steps drawn, a panel each (at least two).
    alpha : sequence of float
        The capacities.
    T : int
        Tasks of the stream.

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> from capassign import simulate_known_mu
    >>> mu = three_agents(three_agent_grid(6)[0])
    >>> R = (mu > 0.7).astype(float)
    >>> known = {eta: (simulate_known_mu(mu, R, [0.2, 0.3, 0.5], eta=eta, runs=2, seed=0),)
    ...          for eta in (0.5, 0.1)}
    >>> fig = plot_online_shares(known, [0.5, 0.1], [0.2, 0.3, 0.5], T=36)
    >>> len(fig.axes[0].get_lines())
    6
    >>> plt.close(fig)
    """
    fig, axes = book_figure(len(steps), sharey=True, height=2.9)
    t = _log_task_grid(T)
    colors = ["C0", "C4", "C2"]
    for ax, eta in zip(axes, steps):
        r = known[eta][0]
        for a in range(len(alpha)):
            share = np.cumsum(r.assignments == a, axis=1).mean(axis=0) / np.arange(1, T + 1)
            ax.plot(t, share[t - 1], color=colors[a], label=f"agent {a + 1}")
            ax.axhline(alpha[a], color=colors[a], ls=":", lw=1.5)
        ax.set_xscale("log")
        ax.set_title(_step_title(eta))
        ax.grid(alpha=0.3, which="both")
    axes[1].set_xlabel("tasks assigned, $t$")
    axes[0].set_ylabel(r"running share $N_{t,a}/t$")
    legend_outside(fig, axes[0], ncol=3)
    return fig


def tuning_rule():
    """The settings of the step rule: the defaults of :func:`capassign.tune_eta_schedule`.

    Returns
    -------
    dict
        Every keyword of :func:`capassign.tune_eta_schedule` with its default.

    Examples
    --------
    >>> sorted(tuning_rule())[:3]
    ['T', 'eta0s', 'from_task']
    """
    import inspect

    from capassign import tune_eta_schedule

    signature = inspect.signature(tune_eta_schedule)
    return {k: p.default for k, p in signature.parameters.items()}


def steps_on_tuning_streams(steps, rule):
    """The known-mu rule at each of ``steps`` on the step rule's own synthetic streams.

    Per step: the mean error above the constrained optimum and the worst
    share deviation from the rule's first task on, on the slack and the
    tight streams (the rule's seeds, runs and capacities).

    Returns
    -------
    pandas.DataFrame
        One row per step: ``$\\eta$``, two error columns, two deviation columns.

    Parameters
    ----------
    steps : sequence
        Constant steps or step schedules.
    rule : dict
        The rule's settings (:func:`tuning_rule`).

    Examples
    --------
    >>> rule = dict(tuning_rule(), seeds=[0], runs=2, T=300, from_task=50)
    >>> steps_on_tuning_streams([0.5], rule).columns[1]
    'error above optimum, slack'
    """
    import pandas as pd

    from capassign import capacity_adherence, optimal_assignment, simulate_known_mu, \
        synthetic_stream

    rows = []
    for step in steps:
        gaps, devs = {"slack": [], "tight": []}, {"slack": [], "tight": []}
        for s in rule["seeds"]:
            _, R_s, mu_s = synthetic_stream(rule["T"], seed=s)
            slack = np.bincount(np.argmax(mu_s, axis=1), minlength=2) / rule["T"]
            for name, caps in [("slack", tuple(slack)), ("tight", (0.2, 0.8))]:
                r = simulate_known_mu(mu_s, R_s, caps, eta=step, runs=rule["runs"], seed=s)
                got = mu_s[r.orders, r.assignments].mean()
                gaps[name].append(optimal_assignment(mu_s, caps).value - got)
                ad = capacity_adherence(r, burn_in=rule["from_task"] - 1)
                devs[name].append(ad.max_deviation.max())
        rows.append({r"$\eta$": step_label(step),
                     **{f"error above optimum, {k}": np.mean(v) for k, v in gaps.items()},
                     **{f"worst share deviation, {k}": max(v) for k, v in devs.items()}})
    return pd.DataFrame(rows)


def _glue_theory_online(*, known, etas, schedule, lam, T, runs, burn_in, slopes, steps, rule,
                       tuning):
    """Glue every number the prose of ``theory_online`` quotes (names ``on_*``)."""
    first, last = known[etas[0]], known[etas[-1]]
    off = price_misses(known, etas, lam)
    glue("on_T", int(T))
    glue("on_runs", int(runs))
    glue("on_eta_first", float(etas[0]))
    glue("on_eta_last", float(etas[-1]))
    glue("on_lam_1", lam[0] - lam[2])
    glue("on_lam_2", lam[1] - lam[2])
    glue("on_track_first_1", first[1].tail_mean[0])
    glue("on_track_last_1", last[1].tail_mean[0])
    glue("on_track_last_2", last[1].tail_mean[1])
    glue("on_off_first", off[0])
    glue("on_off_last", off[-1])
    glue("on_loss_first", first[2])
    glue("on_loss_last", last[2])
    glue("on_sd_first", first[1].tail_sd[0])
    glue("on_sd_last", last[1].tail_sd[0])
    glue("on_dev_first", first[3])
    glue("on_dev_last", last[3])
    glue("on_burn_in", int(burn_in))
    # the regrets
    fixed = slopes["log-log slope"][:len(etas)]
    glue("on_slope_min", float(fixed.min()))
    glue("on_slope_max", float(fixed.max()))
    glue("on_slope_schedule", float(slopes["log-log slope"].iloc[-1]))
    # the step rule and its streams
    const, small, sched = (steps.iloc[i] for i in range(3))
    gap_cols, dev_cols = list(steps.columns[1:3]), list(steps.columns[3:5])
    glue("on_tune_T", int(rule["T"]))
    glue("on_tune_seeds", f"{min(rule['seeds'])} to {max(rule['seeds'])}")
    glue("on_tune_runs", int(rule["runs"]))
    glue("on_tune_maxdev", float(rule["max_deviation"]))
    glue("on_tune_from", int(rule["from_task"]))
    glue("on_tune_n", len(tuning.table))
    glue("on_eta0", float(schedule.eta0))
    glue("on_t0", float(schedule.t0))
    glue("on_const_gap_slack", const[gap_cols[0]])
    glue("on_const_gap_tight", const[gap_cols[1]])
    glue("on_sched_gap_max", sched[gap_cols].max())
    glue("on_sched_dev_max", sched[dev_cols].max())
    glue("on_small_dev_max", small[dev_cols].max())
    glue("on_small_gap_max", small[gap_cols].max())
    glue("on_loss_schedule", known[schedule][2])
    glue("on_dev_schedule", known[schedule][3])
    glue("on_off_schedule", price_misses(known, [schedule], lam)[0])


# --- router_live: a router in a world of late and lost rewards ------------------------


class LiveWorld:
    """The outside world of a live stream: arrival order, late rewards, lost rewards.

    A seeded generator fixes the order in which the rows of ``task`` arrive,
    how many tasks later each reward comes back (0 to ``max_delay``) and which
    rewards never come back (a share ``lost_share``).  :meth:`serve` plays
    the world for a :class:`capassign.Router`: it hands it the tasks one by
    one (or a mini-batch at once) and, after each, feeds it the rewards that
    come back at that moment.

    Parameters
    ----------
    task : capassign.Task
        The stream: contexts ``X`` and both agents' rewards ``R``.
    seed : int
        Seed of the order, the delays and the losses.
    max_delay : int
        Longest delay of a reward, in tasks.
    lost_share : float
        Chance that a reward never comes back.

    Attributes
    ----------
    order : numpy.ndarray
        ``order[t]``: the row arriving t-th.
    delay, lost : numpy.ndarray
        Per stream position: tasks assigned before the reward returns, and
        whether it never returns.
    arrivals : dict
        ``{s: positions}``: the tasks whose rewards come back right after the
        task at position ``s``.

    Examples
    --------
    >>> from capassign import Router, synthetic_stream
    >>> X, R, mu = synthetic_stream(200, seed=0)
    >>> class T:
    ...     pass
    >>> task = T(); task.X, task.R = X, R
    >>> world = LiveWorld(task, seed=0, max_delay=20, lost_share=0.05)
    >>> router = Router(["a", "b"], [0.5, 0.5], "random", seed=0, max_age=50)
    >>> idx = world.run(router)
    >>> len(idx), router.n_assigned
    (200, 200)
    """

    def __init__(self, task, *, seed, max_delay, lost_share):
        from collections import defaultdict

        self.task = task
        T = task.X.shape[0]
        rng = np.random.default_rng(seed)
        self.order = rng.permutation(T)
        self.delay = rng.integers(0, max_delay + 1, size=T)
        self.lost = rng.random(T) < lost_share
        self.arrivals = defaultdict(list)
        for t in np.flatnonzero(~self.lost):
            self.arrivals[int(t + self.delay[t])].append(int(t))
        self.last_arrival = max(self.arrivals)

    @property
    def late_share(self):
        """Share of the returning rewards that come back after the reward of a later task."""
        back = [t for s in sorted(self.arrivals) for t in self.arrivals[s]]
        return float(np.mean(np.maximum.accumulate(back)[:-1] > np.array(back[1:])))

    def reward(self, router, t, agent):
        """The reward of the task at stream position ``t``, given to ``agent``."""
        return self.task.R[self.order[t], router.agents.index(agent)]

    def _deliver(self, router, s, sent):
        for tid in self.arrivals.get(s, []):
            router.update(tid, sent[tid], self.reward(router, tid, sent[tid]))

    def serve(self, router, start, stop, sent, batch=None):
        """Assign the tasks at positions ``start`` to ``stop - 1`` and deliver the rewards due.

        ``sent`` maps task id to agent and is filled in; ``batch = (position,
        size)`` hands that many tasks out at once with ``assign_batch``.  The
        router's automatic task ids must be the stream positions.  Returns the
        agents chosen, in order.
        """
        X = self.task.X
        chosen, t = [], start
        while t < stop:
            if batch is not None and t == batch[0]:
                new = list(range(t, t + batch[1]))
                agents = router.assign_batch(X[self.order[new]])
            else:
                new, agents = [t], [router.assign(X[self.order[t]])]
            assert router.last_task_id == new[-1]     # automatic ids = stream positions
            assert router.pending[-len(new):] == new  # ... and the newest pending tasks
            sent.update(zip(new, agents))
            chosen += agents
            for s in new:                             # rewards returning now
                self._deliver(router, s, sent)
            t = new[-1] + 1
        return chosen

    def finish(self, router, sent):
        """Deliver the rewards that come back after the last task."""
        for s in range(self.task.X.shape[0], self.last_arrival + 1):
            self._deliver(router, s, sent)

    def run(self, router, batch=None):
        """Serve the whole stream to a fresh ``router``; the agent index of every task."""
        sent = {}
        chosen = self.serve(router, 0, self.task.X.shape[0], sent, batch=batch)
        self.finish(router, sent)
        return np.array([router.agents.index(a) for a in chosen])

    def errors(self, idx):
        """Per stream position, 1 when the agent ``idx[t]`` was wrong on the task."""
        return 1 - self.task.R[self.order[:len(idx)], idx]


def plot_router_live(world, runs, capacities, best, capped):
    """Running share of the capped agent and running error of routers on one live stream.

    Parameters
    ----------
    world : LiveWorld
    runs : dict
        ``{policy: agent index per stream position}``; the first is drawn solid.
    capacities : sequence of float
    best : float
        Error of the hindsight optimum under the capacities.
    capped : str
        The name of the second, capped agent.

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> from capassign import Router, synthetic_stream
    >>> X, R, mu = synthetic_stream(200, seed=0)
    >>> class T:
    ...     pass
    >>> task = T(); task.X, task.R = X, R
    >>> world = LiveWorld(task, seed=0, max_delay=20, lost_share=0.05)
    >>> runs = {p: world.run(Router(["a", "b"], [0.6, 0.4], p, seed=0, n_features=X.shape[1]))
    ...         for p in ("logistic-greedy", "random")}
    >>> fig = plot_router_live(world, runs, [0.6, 0.4], best=0.2, capped="b")
    >>> fig.axes[1].get_title()
    '(b) running error'
    >>> plt.close(fig)
    """
    T = len(next(iter(runs.values())))
    steps = np.arange(1, T + 1)
    fig, (ax1, ax2) = book_figure(2, height=3.3)
    for (lab, chosen), style in zip(runs.items(), ["-", "--"]):
        colour = policy_style(lab)["color"]          # the book's colour of the policy
        ax1.plot(steps, np.cumsum(chosen == 1) / steps, style, color=colour, label=lab)
        ax2.plot(steps, np.cumsum(world.errors(chosen)) / steps, style, color=colour,
                 label=lab)
    rand_err = world.errors(runs["random"]).mean()
    ax1.axhline(capacities[1], color="k", lw=0.8, ls=":", label="capacity")
    ax1.set(xlabel="tasks assigned (log scale)", ylabel=f"share sent to {capped}",
            ylim=(0, 1), title="(a) share of the capped agent")
    ax2.axhline(best, color="k", lw=0.8, ls=":", label="hindsight optimum")
    ax2.set(xlabel="tasks assigned (log scale)", ylabel="error so far",
            ylim=(0, min(1.0, 1.5 * rand_err)), title="(b) running error")
    for ax in (ax1, ax2):
        ax.set_xscale("log")
    legend_outside(fig, "all", ncol=4)
    return fig


# --- theory_noncontextual: learning marginal accuracies buys nothing ------------------


def noncontextual_table(rows):
    """Expected error of random and learned non-contextual routing per stream length.

    Parameters
    ----------
    rows : list of dict
        Per length ``T``: ``limit``, and per policy (``random``,
        ``marginal``) its mean expected error, its standard error (``_se``)
        and agent 1's mean share (``_share``).

    Returns
    -------
    Table

    Examples
    --------
    >>> rows = [{"T": 100, "limit": 0.5, "random": 0.5, "marginal": 0.51,
    ...          "random_share": 0.31, "marginal_share": 0.3}]
    >>> noncontextual_table(rows).frame.index.tolist()
    ['100']
    """
    import pandas as pd

    table = pd.DataFrame(
        [{"$T$": r["T"], "limit": r["limit"], "random": r["random"],
          "marginal": r["marginal"],
          r"$T\,|\mathrm{diff}|$": r["T"] * abs(r["marginal"] - r["random"]),
          "share 1, random": r["random_share"], "share 1, marginal": r["marginal_share"]}
         for r in rows]).set_index("$T$")
    return show_table(table, digits=4, formats={r"$T\,|\mathrm{diff}|$": 2},
                      caption="Expected error of random and learned non-contextual routing "
                              "(mean over runs) and agent 1's share")


def plot_noncontextual(rows):
    """Expected error of both policies against the stream length, with the limit.

    Bars of two standard errors; the markers are nudged apart in ``T``.

    Returns
    -------
    matplotlib.figure.Figure

    Parameters
    ----------
    rows : list of dict
        As for :func:`noncontextual_table`, with the standard errors.

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> rows = [{"T": T, "limit": 0.5, "random": 0.5, "marginal": 0.5, "random_se": 0.01,
    ...          "marginal_se": 0.01} for T in (100, 400)]
    >>> fig = plot_noncontextual(rows)
    >>> fig.axes[0].get_xscale()
    'log'
    >>> plt.close(fig)
    """
    fig, ax = book_figure()
    Ts = np.array([r["T"] for r in rows])
    styles = (("random", "o", "-", 0.96), ("marginal", "s", "-.", 1.04))
    for policy, marker, ls, nudge in styles:
        m = np.array([r[policy] for r in rows])
        se = np.array([r[policy + "_se"] for r in rows])
        ax.errorbar(Ts * nudge, m, yerr=2 * se, marker=marker, ls=ls, capsize=3,
                    label=policy, color=policy_style(policy)["color"])
    ax.plot(Ts, [r["limit"] for r in rows], "k--", label=r"$1-\sum_a \alpha_a \mu_a$")
    ax.set_xscale("log")
    ax.set_xlabel("stream length T")
    ax.set_ylabel("expected error rate")
    legend_outside(fig)
    return fig


def _glue_noncontextual(rows, *, mu_all, capacities, eta, runs, d, T_grid):
    """Glue every number the prose of ``theory_noncontextual`` quotes (names ``tn_*``)."""
    def z(r):
        return abs(r["marginal"] - r["random"]) / np.hypot(r["random_se"], r["marginal_se"])

    agree = sum(abs(r["marginal"] - r["random"])
                <= 4 * np.hypot(r["random_se"], r["marginal_se"]) + 2 / r["T"]
                for r in rows)
    glue("tn_agree", int(agree))
    glue("tn_lengths", len(rows))
    glue("tn_max_diff", max(abs(r["marginal"] - r["random"]) for r in rows))
    marg = mu_all.mean(axis=0)
    glue("tn_mu_1", marg[0])
    glue("tn_mu_2", marg[1])
    glue("tn_alpha_1", capacities[0])
    glue("tn_alpha_2", capacities[1])
    glue("tn_eta", eta)
    glue("tn_runs", runs)
    glue("tn_d", d)
    glue("tn_T_min", min(T_grid))
    glue("tn_T_max", max(T_grid))
    glue("tn_max_z", max(z(r) for r in rows))
    glue("tn_max_share_dev_tasks",
         max(r["T"] * abs(r["marginal_share"] - capacities[0]) for r in rows))
    glue("tn_err_random_Tmax", rows[-1]["random"])
    glue("tn_err_marginal_Tmax", rows[-1]["marginal"])
    glue("tn_limit_Tmax", rows[-1]["limit"])


# --- router_ope: scoring other policies from a log -------------------------------------


#: How the coverage figure of ``router_ope`` draws each off-policy estimator.
OPE_ESTIMATOR_STYLE = {
    "ips": dict(color=OKABE_ITO["blue"], marker="o", label="IPS"),
    "snips": dict(color=OKABE_ITO["orange"], marker="s", label="self-normalised IPS"),
    "dr": dict(color=OKABE_ITO["bluish green"], marker="D", label="doubly robust"),
    "replay": dict(color=OKABE_ITO["reddish purple"], marker="v", label="replay"),
}


def plot_coverage(table, level):
    """Coverage of each estimator's intervals against the nominal level: a panel per stream.

    Parameters
    ----------
    table : pandas.DataFrame
        Rows ``stream``, ``target``, ``estimator``, ``coverage`` (one per
        estimator, stream and target, as from :func:`capassign.off_policy_check`).
    level : float
        The intervals' nominal coverage, drawn as a dotted line.

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> import pandas as pd
    >>> table = pd.DataFrame({"stream": ["s", "s", "u", "u"], "target": ["random"] * 4,
    ...                       "estimator": ["ips", "dr"] * 2, "coverage": [0.95, 1.0, 0.9, 0.97]})
    >>> fig = plot_coverage(table, level=0.95)
    >>> [ax.get_title() for ax in fig.axes]
    ['s', 'u']
    >>> plt.close(fig)
    """
    streams = list(dict.fromkeys(table["stream"]))
    fig, axes = book_figure(len(streams), sharey=True, height=3.6)
    offsets = np.linspace(-0.24, 0.24, len(OPE_ESTIMATOR_STYLE))
    for ax, stream in zip(np.atleast_1d(axes), streams):
        cov = table[table["stream"] == stream].pivot_table(
            index="target", columns="estimator", values="coverage", sort=False)
        y = np.arange(len(cov))[::-1]
        for off, (est, style) in zip(offsets, OPE_ESTIMATOR_STYLE.items()):
            if est in cov:
                ax.plot(cov[est], y + off, ls="", ms=5, **style)
        ax.axvline(level, color="k", ls=":", lw=1)
        ax.set_yticks(y, [t.replace("logistic-greedy", "logistic") for t in cov.index])
        ax.set_title(stream)
        ax.set_xlabel("coverage")
        ax.grid(axis="x", lw=0.4, alpha=0.5)
    legend_outside(fig, ncol=2)
    return fig


# --- theory_shadow_prices: which agent takes each context ------------------------------


def plot_price_regions(x_grid, w, mu, alpha, lam):
    """Which agent takes each context of a square 2-d grid, without and with capacities.

    Left: the argmax of ``mu``; right: the argmax of ``mu - lam``, with the
    contexts whose mass :func:`capassign.shadow_price_policy` splits between
    agents marked by crosses; black contours show the weights ``w``.

    Parameters
    ----------
    x_grid : numpy.ndarray
        ``(n_side**2, 2)`` contexts of a meshgrid (first coordinate varying fastest).
    w : numpy.ndarray
        The contexts' probabilities.
    mu : numpy.ndarray
        ``(n, 3)`` expected rewards of three agents.
    alpha : sequence of float
        The capacities.
    lam : numpy.ndarray
        The shadow prices.

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> from capassign import optimal_assignment
    >>> x, w = three_agent_grid(11)
    >>> mu = three_agents(x)
    >>> res = optimal_assignment(mu, [0.2, 0.3, 0.5], weights=w)
    >>> fig = plot_price_regions(x, w, mu, [0.2, 0.3, 0.5], res.shadow_prices)
    >>> fig.axes[1].get_title().splitlines()[0]
    'constrained:'
    >>> plt.close(fig)
    """
    from matplotlib.colors import ListedColormap

    from capassign import shadow_price_policy

    n_side = int(round(np.sqrt(len(w))))
    X1, X2 = (x_grid[:, k].reshape(n_side, n_side) for k in (0, 1))
    P = shadow_price_policy(mu, lam, alpha, weights=w)
    split = np.flatnonzero(P.max(axis=1) < 1 - 1e-9)
    cmap = ListedColormap(["C0", "C4", "C2"])
    fig, axes = book_figure(2, sharey=True, height=3.9)
    panels = [(np.argmax(mu, axis=1), "unconstrained:\n" r"$\arg\max_a \mu_a(x)$"),
              (np.argmax(mu - lam, axis=1),
               "constrained:\n" r"$\arg\max_a \mu_a(x) - \lambda_a$")]
    for ax, (lab, title) in zip(axes, panels):
        ax.pcolormesh(X1, X2, lab.reshape(X1.shape), cmap=cmap, vmin=-0.5, vmax=2.5,
                      shading="nearest", alpha=0.55)
        ax.contour(X1, X2, w.reshape(X1.shape), levels=4, colors="k", linewidths=0.5)
        ax.set_title(title)
        ax.set_xlabel("$x_1$")
        ax.grid(False)
    axes[0].set_ylabel("$x_2$")
    for a, name in enumerate(["agent 1", "agent 2", "agent 3"]):
        axes[1].plot([], [], "s", color=cmap(a), label=name)
    axes[1].plot(x_grid[split, 0], x_grid[split, 1], "kx", ms=7, label="split contexts")
    legend_outside(fig, axes[1])
    return fig


# --- the one-dimensional theory chapters: their figures --------------------------------


def plot_two_agent_thresholds(x, mu, cuts, grid_alpha, values, p_nonneg, marginals):
    """Two agents on a line: their accuracy curves with the optimal cuts, and v(alpha).

    Parameters
    ----------
    x : numpy.ndarray
        The context grid.
    mu : numpy.ndarray
        ``(len(x), 2)`` expected rewards.
    cuts : list of tuple
        ``(alpha, tau, x_cut)`` of the capacities whose threshold is drawn.
    grid_alpha, values : numpy.ndarray
        Capacities of agent 1 and the optimal value at each.
    p_nonneg : float
        Probability that agent 1 is at least as good (drawn as a vertical line).
    marginals : tuple of float
        The agents' marginal accuracies ``(mu1, mu2)``.

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> x = np.linspace(-3, 3, 61)
    >>> mu = np.column_stack([0.5 + 0.1 * x, 0.5 - 0.1 * x])
    >>> alphas = np.linspace(0, 1, 11)
    >>> fig = plot_two_agent_thresholds(x, mu, [(0.25, 0.1, 0.5)], alphas, 0.5 + 0.1 * alphas,
    ...                                 0.5, marginals=(0.5, 0.5))
    >>> fig.axes[1].get_title()
    'value of the optimal policy'
    >>> plt.close(fig)
    """
    mu1, mu2 = marginals
    fig, (ax0, ax1) = book_figure(2, height=3.6)
    ax0.plot(x, mu[:, 0], label=r"$\mu_1(x)$")
    ax0.plot(x, mu[:, 1], ls="-.", label=r"$\mu_2(x)$")
    ax0.plot(x, mu[:, 0] - mu[:, 1], "k--", lw=1, label=r"$\Delta(x)$")
    for a, tau, x_cut in cuts:
        ax0.axhline(tau, color="grey", lw=0.6)
        ax0.axvline(x_cut, color="grey", lw=0.6)
        right = x_cut > 0                  # each label on the outer side of its cut
        ax0.annotate(rf"$\alpha={a}$", (x_cut + (0.08 if right else -0.08), 1.02),
                     ha="left" if right else "right", va="bottom")
    ax0.set_xlim(-3, 3)
    ax0.set_ylim(-0.42, 1.3)
    ax0.set_xlabel("context $x$")
    ax0.set_title(r"agent 1 takes $x$ right of the cut")
    ax1.plot(grid_alpha, values, label=r"optimal $\mu^{\phi^\star}(\alpha)$")
    ax1.plot(grid_alpha, grid_alpha * mu1 + (1 - grid_alpha) * mu2, ls="-.",
             label="random")
    ax1.axhline(max(mu1, mu2), color="grey", ls=":", label="best single agent")
    ax1.axvline(p_nonneg, color="k", lw=0.6)
    ax1.set_xlabel(r"capacity $\alpha$ of agent 1")
    ax1.set_title("value of the optimal policy")
    legend_outside(fig, "all", ncol=3)
    return fig


def plot_disagreement_gain(grid_alpha, gain, formula, alpha_range):
    """The optimal gain over random against the capacity, with the closed form of App. D.

    The closed form is drawn dashed inside its range ``alpha_range`` and
    dotted outside it, where it is only an upper bound.

    Returns
    -------
    matplotlib.figure.Figure

    Parameters
    ----------
    grid_alpha : numpy.ndarray
        Capacities of agent 1.
    gain, formula : numpy.ndarray
        The optimal gain and the closed form at each.
    alpha_range : tuple of float
        Where the closed form holds.

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> a = np.linspace(0, 1, 11)
    >>> fig = plot_disagreement_gain(a, a * (1 - a), a * (1 - a) + 0.01, (0.2, 0.8))
    >>> len(fig.axes[0].get_lines())
    6
    >>> plt.close(fig)
    """
    lo, hi = alpha_range
    in_range = (grid_alpha >= lo) & (grid_alpha <= hi)
    fig, ax = book_figure()
    ax.plot(grid_alpha, gain, "k", lw=2, label=r"optimal gain $G(\alpha)$")
    ax.plot(grid_alpha[in_range], formula[in_range], color="C4", lw=3, ls="--",
            label="closed form, inside its range")
    left, right = grid_alpha < lo, grid_alpha > hi
    ax.plot(grid_alpha[left], formula[left], color="C4", ls=":",
            label="closed form outside (upper bound)")
    ax.plot(grid_alpha[right], formula[right], color="C4", ls=":")
    for edge in (lo, hi):
        ax.axvline(edge, color="grey", lw=0.7)
    ax.set_xlabel(r"capacity $\alpha$ of agent 1")
    ax.set_ylabel(r"$\mu^{\phi^\star} - \mu^{\mathrm{rand}}$")
    legend_outside(fig, ncol=2)
    return fig


def plot_pointwise_best(xq, mu_q, names):
    """The agents' accuracy curves on a line, each agent's region shaded, and their maximum.

    Returns
    -------
    matplotlib.figure.Figure

    Parameters
    ----------
    xq : numpy.ndarray
        The context grid.
    mu_q : numpy.ndarray
        ``(len(xq), 3)`` expected rewards.
    names : sequence of str
        The agents' names.

    Examples
    --------
    >>> import matplotlib.pyplot as plt
    >>> xq = np.linspace(-3, 3, 61)
    >>> mu_q = np.column_stack([0.7 + 0.05 * xq, 0.7 - 0.05 * xq, 0.72 - 0.01 * xq**2])
    >>> fig = plot_pointwise_best(xq, mu_q, ["a", "b", "c"])
    >>> fig.axes[0].get_legend() is None
    True
    >>> plt.close(fig)
    """
    best = np.argmax(mu_q, axis=1)
    fig, ax = book_figure()
    colors = ["C0", "C4", "C2"]
    for a, ls in zip(range(3), ["-", "-.", ":"]):
        ax.plot(xq, mu_q[:, a], color=colors[a], ls=ls, lw=2, label=names[a])
        ax.fill_between(xq, 0.45, 1.0, where=best == a, color=colors[a], alpha=0.08)
    ax.plot(xq, mu_q.max(axis=1), "k--", lw=1, label=r"$\max_a \mu_a(x)$")
    ax.set_xlim(-3.5, 3.5)
    ax.set_ylim(0.45, 1.0)
    ax.set_xlabel("context $x$")
    ax.set_ylabel(r"$\mu_a(x)$")
    legend_outside(fig)
    return fig


_GLUERS = {"data_agents": _glue_data_agents, "data_contexts": _glue_data_contexts,
           "theory_online": _glue_theory_online,
           "theory_noncontextual": _glue_noncontextual}


def glue_chapter(chapter, *args, **results):
    """Glue every number the prose of a foundation chapter quotes, from its results.

    Parameters
    ----------
    chapter : str
        ``data_agents`` (names ``da_*``), ``data_contexts`` (``da_*``),
        ``theory_online`` (``on_*``) or ``theory_noncontextual`` (``tn_*``).
    *args, **results
        The chapter's results under the names it computes them.

    Returns
    -------
    None

    Examples
    --------
    Outside a notebook nothing is stored:

    >>> rows = [{"T": 100, "limit": 0.5, "random": 0.5, "marginal": 0.51,
    ...          "random_se": 0.01, "marginal_se": 0.01, "random_share": 0.3,
    ...          "marginal_share": 0.3}]
    >>> glue_chapter("theory_noncontextual", rows, mu_all=np.full((100, 2), 0.5),
    ...              capacities=[0.3, 0.7], eta=0.5, runs=2, d=4, T_grid=[100])
    >>> glue_chapter("intro")
    Traceback (most recent call last):
    ...
    ValueError: chapter must be one of ['data_agents', 'data_contexts', 'theory_online', 'theory_noncontextual'], got 'intro'
    """
    if chapter not in _GLUERS:
        raise ValueError(f"chapter must be one of {list(_GLUERS)}, got {chapter!r}")
    _GLUERS[chapter](*args, **results)
