"""The chapters' read-outs: the paper's claims, one analysis of an experiment, the scorecard.

The experiment chapters read their error-vs-capacity tables the same way
(:func:`analyse_experiment`: the errors, the agents' end points beside the
paper's Table 3, the paper's three claims of Sec. 4.1 (:func:`paper_claims`),
the distance to the hindsight floor and paired tests against random
assignment); the reproduction scorecard gives every number and claim of the
paper a verdict (:func:`scorecard_verdict`).  The statistics themselves are
those of :mod:`capassign`; what is decided here is what a chapter shows.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import numpy as np

from capassign import (CONTEXTUAL_POLICIES, OFFLINE_POLICIES, PAPER_TABLE3, POLICY_STYLE,
                       _check_frame, _validate_bool, _validate_choice, _validate_int,
                       hindsight_gaps, paired_tests, paper_accuracies, plot_error_vs_capacity,
                       plot_paired_differences)

from .evidence import MATCH_TOL
from .present import book_figure, error_table, legend_outside


# --- the paper's qualitative claims (Sec. 4.1) --------------------------------------


#: Largest gap in mean error (absolute) that still counts as "greedy and
#: Thompson sampling perform similarly" when the paper's claims are checked.
SIMILAR_TOL = 0.01


def paper_claims(df):
    """Check the paper's three qualitative claims on one error-vs-capacity table.

    The claims of Sec. 4.1 are: (1) every contextual policy beats the
    non-contextual baseline at every interior capacity, (2) tree models are at
    least as good as logistic ones, (3) greedy and Thompson sampling perform
    alike.  Each is judged on the mean errors of ``df`` (a table from
    :func:`capassign.error_vs_capacity`) at the interior capacities 0 < alpha_1 < 1, and
    returned as rows ``claim``, ``holds`` (bool) and ``detail`` (the numbers
    behind the verdict).  Claim (3) holds when the largest greedy-vs-TS gap is
    at most :data:`SIMILAR_TOL`.

    Parameters
    ----------
    df : pandas.DataFrame
        A table from :func:`capassign.error_vs_capacity` (``policy``, ``alpha1``,
        ``error``) of one task.

    Returns
    -------
    pandas.DataFrame
        One row per claim that ``df`` has the policies to judge.

    Examples
    --------
    >>> import pandas as pd
    >>> err = {"random": 0.30, "logistic-greedy": 0.22, "logistic-ts": 0.225,
    ...        "tree-greedy": 0.20, "tree-ts": 0.205}
    >>> df = pd.DataFrame({"policy": list(err), "alpha1": 0.5, "error": list(err.values())})
    >>> paper_claims(df).holds.tolist()
    [True, True, True]
    """
    import pandas as pd

    inner = df[(df.alpha1 > 0) & (df.alpha1 < 1)]
    err = inner.pivot_table(index="alpha1", columns="policy", values="error")
    rows = []
    ctx = [p for p in CONTEXTUAL_POLICIES if p in err]
    if "random" in err and ctx:
        wins = (err[ctx].lt(err["random"], axis=0))
        rows.append({"claim": "contextual < random at every interior alpha",
                     "holds": bool(wins.values.all()),
                     "detail": f"{int(wins.values.sum())}/{wins.size} (policy, alpha) pairs"})
    pairs = [("tree-greedy", "logistic-greedy"), ("tree-ts", "logistic-ts")]
    pairs = [(t, l) for t, l in pairs if t in err and l in err]
    if pairs:
        diffs = [float((err[t] - err[l]).mean()) for t, l in pairs]
        rows.append({"claim": "tree <= logistic (mean error over interior alpha)",
                     "holds": all(d <= 0 for d in diffs),
                     "detail": ", ".join(f"{t} - {l}: {d:+.4f}"
                                         for (t, l), d in zip(pairs, diffs))})
    pairs = [("logistic-greedy", "logistic-ts"), ("tree-greedy", "tree-ts")]
    pairs = [(g, t) for g, t in pairs if g in err and t in err]
    if pairs:
        gaps = [float((err[g] - err[t]).abs().max()) for g, t in pairs]
        rows.append({"claim": f"greedy ~ TS (max gap <= {SIMILAR_TOL})",
                     "holds": all(g <= SIMILAR_TOL for g in gaps),
                     "detail": ", ".join(f"{g.split('-')[0]}: {v:.4f}"
                                         for (g, _), v in zip(pairs, gaps))})
    return pd.DataFrame(rows)


# --- one analysis of an error-vs-capacity experiment ------------------------------
#
# The experiment chapters (Sec. 4.1, Fig. 3) all read their results the same
# way: the mean error of every policy at every capacity, the end points beside
# the paper's Table 3, the paper's three qualitative claims, the distance to
# the hindsight floor and paired tests against random assignment.
# analyse_experiment does it once, from the functions above.

#: Line styles of the offline benchmarks in :meth:`ExperimentAnalysis.figure`:
#: markers and dash patterns of their own, so the two stay visible where they
#: coincide (on ImageNet-16H both send nearly every task to the same agent).
OFFLINE_FIGURE_STYLE = {
    "offline-logistic": dict(marker="o", mfc="none", ms=6, ls=(0, (5, 2))),
    "offline-tree": dict(marker="x", ms=5, ls=(0, (1, 2))),
}


@dataclass(frozen=True)
class ExperimentAnalysis:
    """The read-out of an error-vs-capacity experiment (Sec. 4.1, Fig. 3).

    Made by :func:`analyse_experiment`; every attribute is a dict keyed by task
    name (in the order of the input) unless said otherwise.

    Attributes
    ----------
    results : dict of pandas.DataFrame
        The tables of :func:`capassign.error_vs_capacity` it was made from.
    errors : dict of pandas.DataFrame
        Mean error rate, policies (rows) x alpha_1 (columns), numbers.
    endpoints : pandas.DataFrame
        One row per task: ``agent 1`` and ``agent 2``, the error of random
        assignment at alpha_1 = 1 and 0, i.e. each agent's marginal error.
    paper_endpoints : pandas.DataFrame
        The same cells from the paper's Table 3 (1 - accuracy; NaN where the
        paper has no value), aligned with ``endpoints``.
    claims : dict of pandas.DataFrame
        :func:`paper_claims` of every task.
    gaps : dict of pandas.DataFrame
        :func:`capassign.hindsight_gaps` of every task (only with hindsight rows).
    paired : dict of pandas.DataFrame
        :func:`capassign.paired_tests` of the contextual policies against random
        assignment, per task.

    Examples
    --------
    >>> import capassign as ca
    >>> X, R, _ = ca.synthetic_stream(T=200, d=2, seed=1)
    >>> df = ca.error_vs_capacity(X, R, ["random", "marginal"], (0.0, 0.5, 1.0), runs=3)
    >>> out = analyse_experiment({"toy": df})
    >>> isinstance(out, ExperimentAnalysis), list(out.errors)
    (True, ['toy'])
    """

    results: dict
    errors: dict
    endpoints: Any
    paper_endpoints: Any
    claims: dict
    gaps: dict
    paired: dict

    def claims_table(self):
        """The paper's claims for every task in one frame, indexed by (task, claim).

        The claim is named by its first words (e.g. ``contextual < random``);
        ``holds`` reads ``yes`` or ``no`` and ``detail`` gives the numbers
        behind the verdict (see :func:`paper_claims`).
        """
        import pandas as pd

        rows = [{"task": name, "claim": r.claim.split(" (")[0].split(" at ")[0],
                 "holds": "yes" if r.holds else "no", "detail": r.detail}
                for name, c in self.claims.items() for r in c.itertuples()]
        return pd.DataFrame(rows, columns=["task", "claim", "holds", "detail"]).set_index(
            ["task", "claim"])

    def figure(self, *, titles=None, split=True, ncols=None):
        """Error rate against alpha_1, per task, one legend below the panels.

        By default each task gets a row of two panels (small multiples): on
        the left the references, random assignment, the hindsight optimum and
        the offline benchmarks; on the right each contextual policy's mean
        paired difference to random assignment with its 95% interval
        (:func:`capassign.plot_paired_differences`), so that the gaps between
        the policies are drawn at their own scale, not squeezed between random
        assignment and the hindsight floor.  With ``split=False`` every policy
        of a task shares one panel of error rates.

        Parameters
        ----------
        titles : dict, optional
            Task name -> panel title (default: the task name).
        split : bool
            Two panels per task (default) or one.
        ncols : int, optional
            Panels per row when ``split=False`` (default: all in one row up
            to two, else two).

        Returns
        -------
        fig, axes
            The figure (:func:`book_figure` style, legend by
            :func:`legend_outside`) and a flat list of its panels.

        Examples
        --------
        >>> import capassign as ca, matplotlib.pyplot as plt
        >>> X, R, _ = ca.synthetic_stream(T=200, d=2, seed=1)
        >>> df = ca.error_vs_capacity(X, R, ["random", "tree-greedy", "offline-tree"],
        ...                           (0.0, 0.5, 1.0), runs=3, label="toy", hindsight=True)
        >>> fig, axes = analyse_experiment({"toy": df}).figure()
        >>> [len(ax.get_lines()) for ax in axes], axes[1].get_ylabel()
        ([3, 4], 'error − random')
        >>> plt.close(fig)
        """
        names = list(self.results)
        titles = titles or {}
        if _validate_bool(split, "split"):
            fig, axes = book_figure(2, len(names), height=2.5 * len(names) + 1.1)
            axes = list(np.atleast_2d(axes).flat)
            refs = ["random", "hindsight", *OFFLINE_POLICIES]
            panels = [(name, f"{titles.get(name, name)}: {what}", keep)
                      for name in names
                      for what, keep in (("references", refs), ("minus random", None))]
        else:
            ncols = ncols if ncols is not None else min(2, len(names))
            ncols = _validate_int(ncols, "ncols", 1)
            nrows = -(-len(names) // ncols)
            fig, axes = book_figure(ncols, nrows, height=3.0 * nrows + 1.1)
            axes = list(np.atleast_1d(axes).flat)
            panels = [(name, titles.get(name, name), "all") for name in names]
        labels = {POLICY_STYLE[p]["label"]: p for p in OFFLINE_FIGURE_STYLE}
        for ax, (name, title, keep) in zip(axes, panels):
            df = self.results[name]
            if keep is None:     # the contextual policies, paired against random
                tests = self.paired.get(name)
                if tests is not None:
                    plot_paired_differences(tests, ax=ax, title=title, legend=False)
                ax.set_ylabel("error − random")
                continue
            plot_error_vs_capacity(df if keep == "all" else df[df.policy.isin(keep)], ax=ax,
                                   legend=False, title=title)
            for line in ax.get_lines():
                style = OFFLINE_FIGURE_STYLE.get(labels.get(line.get_label()))
                if style:
                    line.set(**style)
        for ax in axes[len(panels):]:
            ax.set_visible(False)
        if split:   # x-axis titles once, on the bottom row
            for ax in axes[:len(panels) - 2]:
                ax.set_xlabel("")
        legend_outside(fig, "all", ncol=2)
        return fig, axes


def analyse_experiment(results):
    """Read out an error-vs-capacity experiment the way the paper's Sec. 4.1 does.

    For every task: the mean error table (:func:`error_table`), the agents'
    marginal errors beside the paper's Table 3, the paper's three claims
    (:func:`paper_claims`), the distance to the hindsight floor
    (:func:`capassign.hindsight_gaps`, when the tables have hindsight rows) and paired
    tests of every contextual policy against random assignment
    (:func:`capassign.paired_tests`).  The figure is drawn on demand by
    :meth:`ExperimentAnalysis.figure`.

    Parameters
    ----------
    results : dict
        Task name -> table of :func:`capassign.error_vs_capacity` (a name the paper's
        Table 3 knows gets the paper's end points beside ours).

    Returns
    -------
    ExperimentAnalysis
        The error tables, claims, gaps and tests of every task, keyed by task
        name; ``.figure()`` draws the error curves.

    Examples
    --------
    >>> import capassign as ca
    >>> X, R, _ = ca.synthetic_stream(T=200, d=2, seed=1)
    >>> df = ca.error_vs_capacity(X, R, ["random", "logistic-greedy"], (0.0, 0.5, 1.0),
    ...                           runs=4, label="toy", hindsight=True)
    >>> out = analyse_experiment({"toy": df})
    >>> out.errors["toy"].index.tolist()
    ['random', 'logistic-greedy', 'hindsight']
    >>> out.endpoints.columns.tolist()
    ['agent 1', 'agent 2']
    >>> out.paired["toy"].policy.unique().tolist()
    ['logistic-greedy']
    >>> out.claims_table().index.tolist()
    [('toy', 'contextual < random')]
    """
    import pandas as pd

    if not isinstance(results, dict) or not results:
        raise TypeError(f"results must be a non-empty dict of task name -> DataFrame, "
                        f"got {type(results).__name__}"
                        + (" (empty)" if isinstance(results, dict) else ""))
    for name, df in results.items():
        _check_frame(df, ("task", "policy", "alpha1", "error", "ci_low", "ci_high", "errors"),
                     name=f"results[{name!r}]")
    errors, claims, gaps, paired, ends, paper = {}, {}, {}, {}, [], []
    for name, df in results.items():
        errors[name] = error_table(df, text=False)
        claims[name] = paper_claims(df)
        if (df.policy == "hindsight").any():
            gaps[name] = hindsight_gaps(df)
        keep, is_random = df.policy.isin(["random", *CONTEXTUAL_POLICIES]), df.policy == "random"
        if is_random.any() and keep.sum() > is_random.sum():
            paired[name] = paired_tests(df[keep])
        rnd = df[is_random].set_index("alpha1")["error"]
        ends.append({"agent 1": float(rnd.get(1.0, np.nan)),
                     "agent 2": float(rnd.get(0.0, np.nan))})
        acc = paper_accuracies(name) if name in PAPER_TABLE3 else (np.nan, np.nan)
        paper.append({"agent 1": 1 - acc[0], "agent 2": 1 - acc[1]})
    index = pd.Index(list(results), name="task")
    return ExperimentAnalysis(results=dict(results), errors=errors,
                              endpoints=pd.DataFrame(ends, index=index),
                              paper_endpoints=pd.DataFrame(paper, index=index),
                              claims=claims, gaps=gaps, paired=paired)


# --- the reproduction scorecard -------------------------------------------------


#: The one table of tolerances: largest |ours - paper| of a number that agrees with the
#: paper's, by kind of number.  The chapters' shading (``show_table(tol=...)``) and the
#: scorecard's verdicts both read it, so one number gets one verdict everywhere.
#: ``accuracy``: Table 3's accuracies, printed to two decimals, within the window the
#: tabular agents were matched in (:data:`capbook.evidence.MATCH_TOL`); ``error``: Table 4's error
#: rates (three decimals, means of 10 runs); ``rough``: values the paper calls
#: approximate; ``count``: counts and settings, exactly.
SCORECARD_TOL = {"accuracy": MATCH_TOL, "error": 0.01, "rough": 0.01, "count": 0}

#: What an item of the scorecard is (its ``basis``) and the verdict kind it gets:
#: only ``result`` items count as results reproduced, differing or inconclusive;
#: ``context`` items (Table 4's ranges over matched seeds) are shown, never judged.
ITEM_BASES = {"result": None, "setting": "setting copied",
              "construction": "matched by construction",
              "substitute": "on substitute agents or data",
              "context": "context only"}

#: The verdict kinds of the scorecard, in the order the page lists them (their colours:
#: :func:`capbook.badges.verdict_meaning`).
VERDICT_KINDS = ("result reproduced", "result differs", "result inconclusive",
                 "setting copied", "matched by construction", "on substitute agents or data",
                 "context only", "not re-run", "pending")

#: The verdicts :func:`scorecard_verdict` returns.
VERDICTS = ("reproduced", "differs", "inconclusive", "not re-run", "pending")

#: Two-sided 95 % normal quantile: the interval of a verdict.
Z_INTERVAL = 1.96
#: The multiple of a standard error that a test at the 5 % level detects with
#: 80 % probability: the power a verdict states.
POWER_MULTIPLE = 2.8


def verdict_kind(item, verdict):
    """The kind of verdict the scorecard shows for an item (its ``basis``, then its check).

    Parameters
    ----------
    item : dict
        A scorecard item; ``basis`` (a key of :data:`ITEM_BASES`, default
        ``"result"``) says whether its number is a result of the experiment, a
        setting we copied from the paper, a value fixed by construction, one
        obtained on substitute agents or data, or context shown beside a verdict.
        A ``range`` item is context whatever its basis.
    verdict : str
        From :func:`scorecard_verdict`.

    Returns
    -------
    str
        One of :data:`VERDICT_KINDS`.

    Examples
    --------
    >>> verdict_kind({"basis": "setting"}, "reproduced")
    'setting copied'
    >>> verdict_kind({}, "inconclusive")
    'result inconclusive'
    >>> verdict_kind({"kind": "range"}, "reproduced")
    'context only'
    """
    basis = _validate_choice(item.get("basis", "result"), ITEM_BASES, "item['basis']")
    if verdict in ("not re-run", "pending"):
        return verdict
    if item.get("kind") == "range":
        return ITEM_BASES["context"]
    return ITEM_BASES[basis] or f"result {verdict}"


def _glued(x, values):
    """A number of an item: a literal, or the name of a stored value (None if not stored)."""
    if isinstance(x, (int, float)):
        return float(x)
    return float(values[x]) if x in values else None


def scorecard_se(item, values):
    """Standard error of an item's estimate (the rules of the scorecard's "How a verdict
    is reached"), or None when the item states none.

    ``se`` is a stored name (or number) of our standard error; a dict ``{value,
    decimals}``: a standard error the chapter stored rounded to ``decimals``
    decimals, raised by half a unit of the last one so that it stays an upper bound;
    or a dict ``{sd, runs}``: the largest across-run standard deviation of a cell and
    the run count, giving ``2 * sd / sqrt(runs)``, a bound on the standard error of a
    difference (or gap) of two means of paired runs whatever their correlation.  For a number against the
    paper (kinds of :data:`SCORECARD_TOL`) the paper's standard error is taken equal to
    ours and its rounding to ``paper_decimals`` (default 3) decimals is added:
    ``sqrt(2 s**2 + (10**-decimals)**2 / 12)``.

    Parameters
    ----------
    item : dict
        A scorecard item: ``kind``, optionally ``se`` and ``paper_decimals``.
    values : dict
        The chapter's values, from :func:`~capbook.pipeline.glued_values`.

    Returns
    -------
    float or None
        The standard error of the item's estimate (for a number: of ours minus the
        paper's), or None when the item states none or a name is not stored.

    Examples
    --------
    >>> round(scorecard_se({"kind": "claim", "se": {"sd": "s", "runs": "n"}},
    ...                    {"s": 0.005, "n": 100}), 6)
    0.001
    >>> round(scorecard_se({"kind": "error", "se": 0.002}, {}), 6)
    0.002843
    >>> round(scorecard_se({"kind": "claim", "se": {"value": "s", "decimals": 4}},
    ...                    {"s": 0.0022}), 6)
    0.00225
    """
    spec = item.get("se")
    if spec is None:
        return None
    if isinstance(spec, dict) and "value" in spec:
        s = _glued(spec["value"], values)
        s = None if s is None else s + 0.5 * 10.0 ** -int(spec["decimals"])
    elif isinstance(spec, dict):
        sd, runs = _glued(spec["sd"], values), _glued(spec["runs"], values)
        s = None if sd is None or runs is None else 2 * sd / float(np.sqrt(runs))
    else:
        s = _glued(spec, values)
    if s is None or item.get("kind") == "claim":
        return s
    rounding = 10.0 ** -int(item.get("paper_decimals", 3))
    return float(np.sqrt(2 * s ** 2 + rounding ** 2 / 12))


def _interval_verdict(low, high, inside_low, inside_high):
    """reproduced / differs / inconclusive for an interval against the paper's region."""
    if inside_low <= low and high <= inside_high:
        return "reproduced"
    if high < inside_low or low > inside_high:
        return "differs"
    return "inconclusive"


def scorecard_verdict(item, values):
    """Verdict of one item of the reproduction scorecard (the paper's Sec. 4 and App. H).

    The rules are those of the scorecard's "How a verdict is reached".  A number
    without a standard error is reproduced when ``|ours - paper| <= tol`` (``tol``
    by kind, :data:`SCORECARD_TOL`).  With one (``se``, :func:`scorecard_se`, giving
    ``s``), the 95 % interval ``d +- 1.96 s`` of ``d = ours - paper`` decides:
    reproduced inside ``[-tol, tol]``, differs outside, inconclusive across its
    edge or when the test cannot resolve the tolerance (``2.8 s > tol``).  A claim
    holds when our value satisfies its rule; with ``se``, a claim ``OP b`` is
    reproduced when the interval lies on the paper's side of ``b``, differs when it
    lies on the other, inconclusive when it contains ``b``.

    Parameters
    ----------
    item : dict
        ``kind`` (a key of :data:`SCORECARD_TOL`, or ``"claim"``); for a number
        ``paper`` (and optionally ``tol``, ``se``), for a claim ``holds``:
        ``"all of NAME"`` (ours equals NAME), ``"most of NAME"`` (more than half),
        ``"OP X"`` with OP in ``< <= > >= ==`` and X a number or glue name, or
        ``"true"`` (optionally ``se``); and one of ``ours`` (a glue name),
        ``needs`` (one not stored yet), ``not_rerun`` (why).  ``inconclusive``
        (a reason) marks a claim whose quantity the book does not measure.
        Kind ``"range"``: ``ours`` names a stored dict with ``low``, ``high``
        and ``seeds`` (our range over the matched seeds); "reproduced" when
        ``low <= paper <= high`` (context only: :func:`verdict_kind`).
    values : dict
        The chapter's values, from :func:`~capbook.pipeline.glued_values`.

    Returns
    -------
    tuple
        ``(verdict, ours)``: one of :data:`VERDICTS` ("pending" when a glue name
        is not stored yet), and our value (None if there is none).

    Examples
    --------
    >>> scorecard_verdict({"kind": "error", "paper": 0.171, "ours": "e"}, {"e": 0.1834})
    ('differs', 0.1834)
    >>> scorecard_verdict({"kind": "error", "paper": 0.171, "ours": "e", "se": 0.002},
    ...                   {"e": 0.1834})[0]
    'inconclusive'
    >>> scorecard_verdict({"kind": "claim", "holds": "all of n", "ours": "k"}, {"k": 20, "n": 20})
    ('reproduced', 20)
    >>> scorecard_verdict({"kind": "claim", "holds": "<= 0", "ours": "d", "se": 0.001},
    ...                   {"d": 0.0015})[0]
    'inconclusive'
    >>> scorecard_verdict({"kind": "range", "paper": 0.335, "ours": "r"},
    ...                   {"r": {"low": 0.334, "high": 0.354, "seeds": 20}})[0]
    'reproduced'
    """
    kind = _validate_choice(item.get("kind"), (*SCORECARD_TOL, "range", "claim"),
                            "item['kind']")
    if "not_rerun" in item:
        return "not re-run", None
    if "ours" not in item or item["ours"] not in values:
        return "pending", None
    v = values[item["ours"]]
    if "inconclusive" in item:
        return "inconclusive", v
    if kind == "range":
        inside = v["seeds"] > 0 and v["low"] <= float(item["paper"]) <= v["high"]
        return ("reproduced" if inside else "differs"), v
    s = scorecard_se(item, values)
    if "se" in item and s is None:
        return "pending", v              # the standard error is not stored yet
    if kind != "claim":
        tol = float(item.get("tol", SCORECARD_TOL[kind]))
        d = float(v) - float(item["paper"])
        if s is None:
            return ("reproduced" if abs(d) <= tol + 1e-9 else "differs"), v
        if POWER_MULTIPLE * s > tol:
            return "inconclusive", v
        h = Z_INTERVAL * s
        return _interval_verdict(d - h, d + h, -tol, tol), v
    ops = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
           "==": operator.eq, "all": operator.eq,
           "most": lambda a, b: 2 * a > b, "true": lambda a, _: bool(a)}
    rel, _, rhs = str(item.get("holds")).partition(" ")
    _validate_choice(rel, ops, "the first word of item['holds']")
    rhs = rhs[3:] if rel in ("all", "most") and rhs.startswith("of ") else rhs
    if rhs in values:
        x = values[rhs]
    else:
        try:
            x = float(rhs or 0)
        except ValueError:
            return "pending", v          # the rule names a value not stored yet
    if s is not None and rel in ("<", "<=", ">", ">="):
        h = Z_INTERVAL * s
        side = (-np.inf, x) if rel in ("<", "<=") else (x, np.inf)
        return _interval_verdict(float(v) - h, float(v) + h, *side), v
    return ("reproduced" if ops[rel](v, x) else "differs"), v
