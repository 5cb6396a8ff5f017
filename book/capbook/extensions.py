"""Read-outs of the extension chapters (Parts III and IV of the book).

A chapter of the extensions runs its experiment in a few visible cells; what
turns the results into the page (the tables, the figures, the numbers glued
into the prose and the checks of the chapter's claims) lives here, one group
of functions per chapter, in the order of the chapters:

``beyond_step``
    the paired gains of the two steps (:func:`step_gains`), their figure and
    tables, the middle capacities' target, its causes, the shares, the glue;
``ext_free_agent``
    the free agent's baselines (:func:`with_free_baselines`), figure, findings,
    checks and glue;
``ext_minibatch``
    online against batches: tables, figures, the paper's patterns, checks, glue;
``ext_multi_agent``
    :func:`varied_capacities`, :func:`with_hindsight`, the figure, claims, checks;
``ext_eta``
    the figure, tables and findings of the queue penalty;
``ext_exploration``
    the exploration policies against their family's policies of the paper
    (:func:`exploration_tests`), the figure of the gains over random, the
    verdicts, checks and glue;
``beyond_uncertainty``
    the spread of the runs, paired against unpaired, the figures, the glue;
``beyond_regret``
    the oracle of a synthetic task, the regret summary, figures, checks, glue;
``beyond_changes``
    the drifting stream and its router (:func:`drift_stream`,
    :func:`route_stream`), the figures, checks and glue;
``beyond_capacity``
    the adherence figure and tables, the worst deviations, checks and glue.

The simulations stay in the chapters' visible cells (``capassign.simulate``
and its sweeps); these functions summarise them.  A few build an input the
chapter names (the drifting stream, the oracle of a synthetic task, the
hindsight optimum of a grid) or run the router loop of :func:`route_stream`.
"""

from __future__ import annotations

import numpy as np

import capassign as ca

from .present import book_figure, glue, legend_outside, policy_style, say, show_table

#: The six tasks of the paper, by their registry name, with the names the book prints.
TASK_NAMES = {"imagenet16h": "ImageNet-16H", "mmlu": "MMLU", "bank": "Bank",
              "credit": "Credit", "coupon": "Coupon", "cardio": "Cardio"}
#: The greedy policies whose gains the step chapter follows at the middle capacities.
GREEDY = ("tree-greedy", "logistic-greedy")
#: The middle capacities of agent 1 (the step chapter's target is checked there).
MIDDLE = (0.4, 0.5, 0.6)


def _show(obj):
    from IPython.display import display

    display(obj)


def _join(words):
    """``a``, ``a and b``, ``a, b and c``."""
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


# --- beyond_step: a shrinking step on the paper's tasks --------------------------


def paper_tasks(agent_seed=None):
    """The paper's six tasks (:data:`TASK_NAMES`), loaded with ``capassign.load_task``.

    ImageNet-16H and MMLU have fixed agents; the four tabular tasks are built
    with ``agent_seed`` (None: the construction matched to the paper's Table 3).

    Parameters
    ----------
    agent_seed : int, optional
        Construction seed of the tabular agents.

    Returns
    -------
    dict
        Registry name -> ``capassign.Task``, in :data:`TASK_NAMES`' order.
    """
    return {name: ca.load_task(name) if name in ("imagenet16h", "mmlu")
            else ca.load_task(name, agent_seed) for name in TASK_NAMES}


def check_random_unchanged(paper_arm, sched_arm, alphas):
    """Check that random assignment (no queues) has the same runs in both arms.

    Parameters
    ----------
    paper_arm : dict
        Task -> ``capassign.error_vs_capacity`` frame at the paper's step.
    sched_arm : dict
        ``(task, policy, alpha_1)`` -> ``capassign.SimulationResult`` with the schedule.
    alphas : sequence of float
        Capacities of agent 1.

    Raises
    ------
    AssertionError
        When some run of random assignment differs between the arms.
    """
    for name, df in paper_arm.items():
        for a1 in alphas:
            row = df[(df.policy == "random") & (df.alpha1 == a1)].iloc[0]
            assert np.array_equal(row.errors, sched_arm[name, "random", a1].errors), (name, a1)
    print("random assignment has no queues: its runs are the same in both arms")


def step_gains(tasks, paper_arm, sched_arm, alphas, *, seed=0, resamples=2000):
    """The gains over random assignment at the paper's step and with the schedule.

    For each task, online policy (``capassign.CONTEXTUAL_POLICIES``) and
    interior capacity: both gains (random's error minus the policy's) with
    their paired 95% intervals (``capassign.difference_ci``), the paired
    change of the error (paper's step minus schedule), the ratio of the two
    gains with a 95% percentile bootstrap interval over the runs (resampled
    together, ``resamples`` times, from ``numpy.random.default_rng(seed)``),
    the mean share of agent 1 at the paper's step and the largest deviation
    of a run's final share from the capacity with the schedule.

    Parameters
    ----------
    tasks : dict
        Registry name -> task (:func:`paper_tasks`).
    paper_arm, sched_arm : dict
        As for :func:`check_random_unchanged`.
    alphas : sequence of float
        Capacities of agent 1; the interior ones are used.
    seed : int
        Seed of the bootstrap.
    resamples : int
        Bootstrap resamples.

    Returns
    -------
    pandas.DataFrame
        One row per (task, policy, alpha_1).
    """
    import pandas as pd

    rng = np.random.default_rng(seed)
    rows = []
    for name, task in tasks.items():
        df = paper_arm[name]
        for policy in ca.CONTEXTUAL_POLICIES:
            for a1 in [a for a in alphas if 0 < a < 1]:
                def pick(p):
                    return df[(df.policy == p) & (df.alpha1 == a1)].iloc[0]

                e_rand, e_eta = pick("random").errors, pick(policy).errors
                e_sched = sched_arm[name, policy, a1].errors
                g_eta = ca.difference_ci(e_rand, e_eta)          # random - policy
                g_sched = ca.difference_ci(e_rand, e_sched)
                change = ca.difference_ci(e_eta, e_sched)        # schedule's improvement
                k = rng.integers(0, len(e_rand), size=(resamples, len(e_rand)))
                with np.errstate(divide="ignore", invalid="ignore"):
                    boot = ((e_rand[k] - e_sched[k]).mean(axis=1)
                            / (e_rand[k] - e_eta[k]).mean(axis=1))
                    ratio = np.divide(g_sched[0], g_eta[0])
                boot = boot[np.isfinite(boot)]      # drop resamples with no gain at eta
                shares = sched_arm[name, policy, a1].assigned[:, 0]
                rows.append({"task": name, "policy": policy, "alpha1": a1,
                             "gain_eta": g_eta[0], "gain_eta_lo": g_eta[1],
                             "gain_eta_hi": g_eta[2],
                             "gain_sched": g_sched[0], "gain_sched_lo": g_sched[1],
                             "gain_sched_hi": g_sched[2],
                             "change": change[0], "change_lo": change[1],
                             "change_hi": change[2],
                             "ratio": float(ratio),
                             "ratio_lo": np.quantile(boot, 0.025),
                             "ratio_hi": np.quantile(boot, 0.975),
                             "share_eta": float(pick(policy).frac1),
                             "share_dev": float(np.abs(shares - a1).max()),
                             "T": task.T})
    return pd.DataFrame(rows)


def _cell(m, lo, hi, k=4):
    def f(v):
        return f"{round(float(v), k) + 0.0:.{k}f}"
    return f"{f(m)} [{f(lo)}, {f(hi)}]"


def _gain_view(g):
    """One row per (task, policy, alpha_1): both gains and the ratio, with intervals."""
    import pandas as pd

    return pd.DataFrame({
        "task": g.task.map(TASK_NAMES), "policy": g.policy, r"$\alpha_1$": g.alpha1,
        r"gain at $\eta$": [_cell(r.gain_eta, r.gain_eta_lo, r.gain_eta_hi)
                            for r in g.itertuples()],
        "gain, schedule": [_cell(r.gain_sched, r.gain_sched_lo, r.gain_sched_hi)
                           for r in g.itertuples()],
        "ratio": [_cell(r.ratio, r.ratio_lo, r.ratio_hi, 2) for r in g.itertuples()]})


def _middle_greedy(gains):
    return gains[gains.alpha1.isin(MIDDLE) & gains.policy.isin(GREEDY)]


def show_step_gains(gains, *, eta, runs):
    """Show the gains of :func:`step_gains` as folded tables: the greedy policies
    at the middle capacities, then every online policy per task with the
    paired change of the error."""
    _show(show_table(_gain_view(_middle_greedy(gains)), index=False, fold=True,
                     caption=rf"Gain over random assignment [95% paired interval] at $\eta$ = "
                             rf"{eta:g} and with the schedule, and their ratio [95% bootstrap "
                             rf"interval], greedy policies at the middle capacities, {runs} runs"))
    for name in TASK_NAMES:
        g = gains[gains.task == name]
        view = _gain_view(g).drop(columns="task")
        view.insert(4, "error change", [_cell(r.change, r.change_lo, r.change_hi)
                                        for r in g.itertuples()])
        _show(show_table(view, index=False, fold=True,
                         caption=f"{TASK_NAMES[name]}: gain over random [95% interval] at "
                                 f"eta = {eta:g} and with the schedule, error change "
                                 f"(eta minus schedule, paired) and ratio of the gains"))


def plot_step_gains(gains, alphas, *, eta):
    """Figure: the gain over random assignment of tree and logistic greedy against
    alpha_1 at both steps, one panel per task, with the paired intervals."""
    import matplotlib.pyplot as plt

    colours = {p: policy_style(p)["color"] for p in GREEDY}
    fig, axes = book_figure(2, 3, height=7.4)
    for ax, name in zip(axes.flat, TASK_NAMES):
        for policy in GREEDY:
            g = gains[(gains.task == name) & (gains.policy == policy)]
            for arm, ls, face, dx in (("eta", "--", "white", -0.008),
                                      ("sched", "-", None, 0.008)):
                m = g[f"gain_{arm}"].to_numpy()
                err = [m - g[f"gain_{arm}_lo"].to_numpy(), g[f"gain_{arm}_hi"].to_numpy() - m]
                label = f"{policy}, " + (f"eta = {eta:g}" if arm == "eta" else "schedule")
                ax.errorbar(g.alpha1 + dx, m, yerr=err, ls=ls, marker="o", ms=4,
                            color=colours[policy], mfc=face or colours[policy], capsize=2,
                            lw=1.2, label=label)
        ax.axhline(0, color="0.5", ls=":", lw=0.8)
        ax.set_title(TASK_NAMES[name])
        ax.set_xticks([a for a in alphas if 0 < a < 1])
    for ax in axes[:, 0]:
        ax.set_ylabel("gain over random")
    for ax in axes[-1]:
        ax.set_xlabel(r"$\alpha_1$")
    legend_outside(fig, "all", ncol=2)
    plt.show()


def print_step_ends(tasks, schedule):
    """Print the schedule and, per task, its length and the step at its last task."""
    print(f"schedule: {schedule}")
    for name, task in tasks.items():
        print(f"{TASK_NAMES[name]}: T = {task.T} tasks; step at the last task "
              f"{schedule.at(task.T - 1):.4f}")


def step_target(gains, schedule, target, *, eta):
    """The middle capacities' target: per task, the smallest and largest ratio of
    the greedy policies' gains (schedule / paper's step) and whether every ratio
    reaches ``target``; shows the table and returns the frame (one row per task)."""
    check = _middle_greedy(gains).groupby("task", sort=False).agg(
        ratio_min=("ratio", "min"), ratio_max=("ratio", "max"),
        ratio_hi_min=("ratio_hi", "min"), gain_eta_min=("gain_eta", "min"),
        gain_eta_lo_min=("gain_eta_lo", "min"), T=("T", "first"))
    check["met"] = check.ratio_min >= target
    check["step at the end"] = [schedule.at(int(T) - 1) for T in check["T"]]
    view = check.rename(index=TASK_NAMES)[["ratio_min", "ratio_max", "met", "step at the end"]]
    view.columns = ["smallest ratio", "largest ratio", f"all >= {target:g}",
                    "schedule's last step"]
    _show(show_table(view, digits=2, formats={"schedule's last step": 3},
                     caption=rf"Ratio of the gains (schedule / $\eta$ = {eta:g}), tree and "
                             rf"logistic greedy at $\alpha_1 \in$ {{0.4, 0.5, 0.6}}"))
    return check


def step_causes(gains, ceiling, target):
    """Each greedy cell at the middle capacities beside the cross-fitted offline gain.

    Parameters
    ----------
    gains : pandas.DataFrame
        :func:`step_gains`.
    ceiling : dict
        ``(task, alpha_1)`` -> the ``gain`` column of
        ``capassign.contrast_separation`` indexed by model (``logistic``, ``tree``).
    target : float
        The ratio asked for.

    Returns
    -------
    pandas.DataFrame
        The cells with ``ceiling``, ``room`` (ceiling / gain at the paper's step),
        the shares of the ceiling reached at both steps and the flags ``missed``,
        ``no_room`` and ``undecided``.
    """
    import pandas as pd

    rows = [{"task": name, "policy": policy, "alpha1": a1,
             "ceiling": float(gain[policy.split("-")[0]])}
            for (name, a1), gain in ceiling.items() for policy in GREEDY]
    cause = _middle_greedy(gains).merge(pd.DataFrame(rows), on=["task", "policy", "alpha1"])
    cause["room"] = cause.ceiling / cause.gain_eta   # the largest ratio the ceiling leaves
    cause["reached_eta"] = cause.gain_eta / cause.ceiling
    cause["reached_sched"] = cause.gain_sched / cause.ceiling
    cause["missed"] = cause.ratio < target
    cause["no_room"] = cause.room < target   # target x eta's gain is above the ceiling
    cause["undecided"] = cause.ratio_hi >= target          # the interval reaches the target
    return cause


def show_step_causes(cause):
    """Show the cells below the target (else every cell) and, folded, every cell,
    each beside its cross-fitted gain."""
    import pandas as pd

    def view(c):
        return pd.DataFrame({
            "task": c.task.map(TASK_NAMES), "policy": c.policy, r"$\alpha_1$": c.alpha1,
            r"gain at $\eta$": c.gain_eta, "gain, schedule": c.gain_sched,
            "ratio": [_cell(r.ratio, r.ratio_lo, r.ratio_hi, 2) for r in c.itertuples()],
            "cross-fitted gain": c.ceiling, "its ratio to the gain at η": c.room,
            "share reached, η": c.reached_eta, "share reached, schedule": c.reached_sched})

    formats = {"its ratio to the gain at η": 2, "share reached, η": 2,
               "share reached, schedule": 2}
    missed = cause[cause.missed]
    _show(show_table(view(missed if len(missed) else cause), index=False, digits=4, fold=True,
                     formats=formats,
                     caption=("The cells below the target" if len(missed) else "Every cell "
                              "(none is below the target)") + ": both gains, their ratio [95% "
                              "bootstrap interval], and the gain of the cross-fitted offline "
                              "assignment that meets the capacity exactly"))
    _show(show_table(view(cause), index=False, digits=4, fold=True, formats=formats,
                     caption="Every greedy cell at the middle capacities, with the "
                             "cross-fitted gain"))


def step_shares(gains, *, eta, runs):
    """Per task, the largest deviation of a run's final share of agent 1 from its
    capacity with the schedule (also in tasks) and of the mean share at the
    paper's step; shows the table (folded) and returns the frame."""
    dev = gains.groupby("task", sort=False).agg(
        sched_dev=("share_dev", "max"), T=("T", "first"))
    dev["eta_dev"] = (gains.share_eta - gains.alpha1).abs().groupby(gains.task,
                                                                    sort=False).max()
    dev["sched_tasks"] = dev.sched_dev * dev["T"]
    view = dev.rename(index=TASK_NAMES)[["sched_dev", "sched_tasks", "eta_dev"]]
    view.columns = ["schedule: largest |share − α₁|, any run",
                    "the same in tasks", f"η = {eta:g}: largest |mean share − α₁|"]
    _show(show_table(view, digits=4, formats={"the same in tasks": 1}, fold=True,
                     caption=f"Final share of agent 1 against its capacity, {runs} runs, "
                             f"interior capacities, every online policy"))
    return dev


def plot_share_trace(trace, task, policy, alpha1):
    """Figure: the running share of agent 1 over the stream for each step of
    ``trace`` (label -> ``SimulationResult`` with traces), mean and middle 90%
    of the runs, on a logarithmic time axis."""
    import matplotlib.pyplot as plt

    fig, ax = book_figure(1, height=3.2)
    for (k, res), colour, ls in zip(trace.items(), ["#E69F00", "#0072B2"], ["--", "-"]):
        T = res.assignments.shape[1]
        t = np.arange(1, T + 1)
        share = np.cumsum(res.assignments == 0, axis=1) / t
        ax.plot(t, share.mean(axis=0), color=colour, ls=ls, lw=1.4, label=k)
        ax.fill_between(t, *np.quantile(share, [0.05, 0.95], axis=0), color=colour,
                        alpha=0.2, lw=0)
    ax.axhline(alpha1, color="0.3", ls=":", lw=1, label=r"$\alpha_1$")
    ax.set_xscale("log")
    ax.set_xlim(10, T)
    ax.set_ylim(max(0, alpha1 - 0.25), min(1, alpha1 + 0.25))
    ax.set_xlabel("task t")
    ax.set_ylabel(r"share of agent 1, $N_{t,1}/t$")
    ax.set_title(f"{TASK_NAMES[task]}, {policy}, " + rf"$\alpha_1$ = {alpha1:g}")
    legend_outside(fig, ax, ncol=2)
    plt.show()


def step_beside_paper(gains, *, eta):
    """The gain of logistic and tree greedy over the non-contextual baseline at
    alpha_1 = 0.5 implied by the paper's Table 4 (seed-2 row) beside ours at both
    steps, on the four tabular tasks; shows the table and returns the frame."""
    import pandas as pd

    at05 = gains[(gains.alpha1 == 0.5) & gains.policy.isin(["logistic-greedy", "tree-greedy"])]
    rows = []
    for name in ["bank", "credit", "coupon", "cardio"]:
        row2 = ca.PAPER_TABLE4[name][2]
        for j, policy in ((1, "logistic-greedy"), (2, "tree-greedy")):
            r = at05[(at05.task == name) & (at05.policy == policy)].iloc[0]
            rows.append({"task": TASK_NAMES[name], "policy": policy,
                         "paper (Table 4, seed 2)": row2[0] - row2[j],
                         f"ours, η = {eta:g}": r.gain_eta, "ours, schedule": r.gain_sched})
    paper_view = pd.DataFrame(rows)
    _show(show_table(paper_view, index=False, digits=3,
                     caption=r"Gain over the non-contextual baseline at $\alpha_1 = 0.5$: the "
                             r"paper's and ours at both steps"))
    return paper_view


def glue_step(*, tasks, gains, check, cause, dev, trace, paper_view, paper_arm, sched_arm,
              runs, target, eta, trace_task, trace_policy, trace_alpha):
    """Glue the step chapter's numbers (``bs_*``) for its prose."""
    glue("bs_runs", runs)
    glue("bs_target", float(target))
    glue("bs_cells", len(gains))
    glue("bs_better", int((gains.change > 0).sum()))
    glue("bs_better_sig", int((gains.change_lo > 0).sum()))
    glue("bs_worse_sig", int((gains.change_hi < 0).sum()))
    gm = _middle_greedy(gains)
    glue("bs_ratio_mid_lo", float(gm.ratio.min()))
    glue("bs_ratio_mid_hi", float(gm.ratio.max()))
    passed = [TASK_NAMES[n] for n in check.index[check.met]]
    failed = [TASK_NAMES[n] for n in check.index[~check.met]]
    glue("bs_tasks_pass", len(passed))
    glue("bs_fail_sentence", "It is met on every task." if not failed else
         f"It is missed on {_join(failed)}; the page measures why below.")
    glue("bs_tasks_failed", _join(failed) if failed else "none")
    for name in TASK_NAMES:
        glue(f"bs_{name}_ratio_lo", float(check.at[name, "ratio_min"]))
        glue(f"bs_{name}_ratio_hi", float(check.at[name, "ratio_max"]))
        glue(f"bs_{name}_step_end", float(check.at[name, "step at the end"]))
        glue(f"bs_{name}_T", int(tasks[name].T))
    glue("bs_step_end_lo", float(check["step at the end"].min()))
    glue("bs_step_end_hi", float(check["step at the end"].max()))
    glue("bs_mid_cells", len(cause))
    glue("bs_missed", int(cause.missed.sum()))
    glue("bs_missed_no_room", int((cause.missed & cause.no_room).sum()))
    glue("bs_missed_undecided", int((cause.missed & cause.undecided).sum()))
    glue("bs_missed_neither", int((cause.missed & ~cause.no_room & ~cause.undecided).sum()))
    glue("bs_missed_gain_worse", int((cause.missed & (cause.gain_sched < cause.gain_eta)).sum()))
    glue("bs_reached_eta_lo", float(cause.reached_eta.min()))
    glue("bs_reached_eta_hi", float(cause.reached_eta.max()))
    glue("bs_reached_sched_lo", float(cause.reached_sched.min()))
    glue("bs_reached_sched_hi", float(cause.reached_sched.max()))
    missed = cause[cause.missed]
    if len(missed):
        glue("bs_missed_reached_eta_lo", float(missed.reached_eta.min()))
        glue("bs_missed_reached_eta_hi", float(missed.reached_eta.max()))
        glue("bs_missed_room_hi", float(missed.room.max()))
        glue("bs_missed_ratio_hi_lo", float(missed.ratio_hi.min()))
    met = cause[~cause.missed]
    glue("bs_met_reached_eta_hi", float(met.reached_eta.max()) if len(met) else float("nan"))
    glue("bs_all_ratio_lo", float(gains.ratio.min()))
    glue("bs_all_ratio_hi", float(gains.ratio.max()))
    for policy in ca.CONTEXTUAL_POLICIES:
        g = gains[gains.policy == policy]
        glue(f"bs_{policy}_better", int((g.change > 0).sum()))
        glue(f"bs_{policy}_cells", len(g))
    # the example cell: Bank, tree greedy, alpha_1 = 0.5
    b = paper_arm["bank"]
    glue("bs_bank_tree05_eta",
         float(b[(b.policy == "tree-greedy") & (b.alpha1 == 0.5)].error.iloc[0]))
    glue("bs_bank_tree05_sched", float(sched_arm["bank", "tree-greedy", 0.5].errors.mean()))
    glue("bs_bank_rand05", float(b[(b.policy == "random") & (b.alpha1 == 0.5)].error.iloc[0]))
    # shares
    long = dev.drop(index="mmlu")
    glue("bs_share_dev_max", float(long.sched_dev.max()))
    glue("bs_share_eta_dev_max", float(dev.eta_dev.max()))
    glue("bs_mmlu_dev_tasks", float(dev.at["mmlu", "sched_tasks"]))
    glue("bs_shares_ok", bool(long.sched_dev.max() <= 0.01
                              and dev.at["mmlu", "sched_tasks"] <= 3))
    glue("bs_trace_task", TASK_NAMES[trace_task])
    glue("bs_trace_policy", trace_policy)
    glue("bs_trace_alpha", float(trace_alpha))
    for k, key in ((f"eta = {eta:g}", "eta"), ("schedule", "sched")):
        ad = ca.capacity_adherence(trace[k], burn_in=999)
        glue(f"bs_trace_{key}_dev1000", float(ad.max_deviation.max()))
        glue(f"bs_trace_{key}_final", float(np.abs(ad.shares[:, 0] - trace_alpha).max()))
    # beside the paper
    for r in paper_view.itertuples():
        key = f"bs_paper_{r.task.lower()}_{r.policy.split('-')[0]}"
        glue(key, float(r[3]))
        glue(key + "_eta", float(r[4]))
        glue(key + "_sched", float(r[5]))


# --- ext_free_agent: a third agent without a capacity ----------------------------


def with_free_baselines(df, rnd, R3, caps3, alphas):
    """The free-agent experiment's results with its two exact baselines.

    Adds to the contextual policies' frame ``df`` (``capassign.simulate_grid``
    on three agents) and two-agent random assignment ``rnd`` the free agent
    alone (its error at every capacity) and the hindsight optimum of the
    stream with the free agent (``capassign.hindsight_optimum``, capacity
    ``None`` for agent 3).

    Parameters
    ----------
    df, rnd : pandas.DataFrame
        ``capassign.simulate_grid`` results.
    R3 : numpy.ndarray
        Rewards of the three agents, shape ``(T, 3)``; the last is the free agent.
    caps3 : sequence
        Capacities ``(alpha_1, 1 - alpha_1, None)`` per point.
    alphas : sequence of float
        Capacities of agent 1.

    Returns
    -------
    pandas.DataFrame
        The four blocks, with the policies ``always free`` and ``hindsight`` added.
    """
    import pandas as pd

    e_free = 1 - R3[:, -1].mean()
    always = pd.DataFrame({"policy": "always free", "alpha1": alphas, "error": e_free,
                           "ci_low": e_free, "ci_high": e_free})
    return with_hindsight(pd.concat([df, rnd, always], ignore_index=True), R3, caps3, alphas)


def plot_free_agent(table):
    """Figure: error against alpha_1 with the free agent, logistic policies left and
    tree policies right, each with random assignment, the hindsight optimum and
    the free agent alone."""
    import matplotlib.pyplot as plt

    e_free = float(table[table.policy == "always free"].error.iloc[0])
    fig, axes = book_figure(2, sharey=True, height=3.3)
    refs = ["random", "hindsight"]
    for ax, model in zip(axes, ("logistic", "tree")):
        keep = table.policy.isin([*refs, f"{model}-greedy", f"{model}-ts"])
        ca.plot_error_vs_capacity(table[keep], ax=ax, legend=False,
                                  title=f"{model} policies")
        ax.axhline(e_free, color="C4", ls="--", lw=1.4, label="always the free agent")
    axes[1].set_ylabel("")
    legend_outside(fig, "all", ncol=3)
    plt.show()


def describe_free_agent(task, R3):
    """Print the task and every agent's error, the free agent's last."""

    say(f"Bank (construction seed {task.meta['seed']}, the agents matched to Table 3): "
        f"T = {task.T} tasks, d = {task.X.shape[1]} context features")
    for name, col in zip([*task.agent_names, "free"], R3.T):
        print(f"  {name:>8}: error {1 - col.mean():.4f}")


def free_agent_errors(table, runs):
    """Show the mean error of every policy and baseline (rows: alpha_1)."""
    by_alpha = table.pivot_table(index="alpha1", columns="policy", values="error", sort=False)
    return show_table(by_alpha, digits=3,
                      caption=f"Mean error rate over {runs} runs (rows: capacity of agent 1)")


def free_agent_findings(table, df, task):
    """Everything the free-agent chapter reads off its results, as a dict.

    Keys: ``err`` (policy x alpha_1 errors), ``ctx`` (the contextual
    policies), ``beats_free`` and ``beats_rnd`` (boolean frames), ``missed``
    (the (policy, alpha_1) pairs not below random), ``solo`` (the lone
    constrained agent's error at alpha_1 = 0 and 1), ``spread`` (of the
    policies there), ``share_free`` (policy x alpha_1 share of the free agent),
    ``over1``/``over2`` (largest excess of each constrained agent's share),
    ``best`` (the best policy's error per alpha_1), ``margin`` (random minus
    the worst policy at the interior capacities) and ``hind`` (the hindsight
    optimum's errors).
    """
    err = table.pivot_table(index="alpha1", columns="policy", values="error")
    ctx = list(ca.CONTEXTUAL_POLICIES)
    beats_free = err[ctx].lt(err["always free"], axis=0)
    beats_rnd = err[ctx].lt(err["random"], axis=0)
    missed = [(ctx[p], float(beats_rnd.index[a])) for a, p in zip(*np.nonzero(~beats_rnd.values))]
    solo = {0.0: 1 - task.R[:, 1].mean(), 1.0: 1 - task.R[:, 0].mean()}
    spread = {a: float(err.loc[a, ctx].max() - err.loc[a, ctx].min()) for a in (0.0, 1.0)}
    share_free = df.assign(v=df.shares.map(lambda s: s[2])).pivot_table(
        index="policy", columns="alpha1", values="v", sort=False)
    over1 = max(s[0] - a for s, a in zip(df.shares, df.alpha1))
    over2 = max(s[1] - (1 - a) for s, a in zip(df.shares, df.alpha1))
    inner = [a for a in err.index if 0 < a < 1]
    margin = err.loc[inner, "random"] - err.loc[inner, ctx].max(axis=1)
    hind = table[table.policy == "hindsight"]
    return dict(err=err, ctx=ctx, beats_free=beats_free, beats_rnd=beats_rnd, missed=missed,
                solo=solo, spread=spread, share_free=share_free, over1=over1, over2=over2,
                best=err[ctx].min(axis=1), margin=margin, hind=hind)


def show_free_shares(fa):
    """Print the largest excess of each constrained agent's share over its capacity
    and show the free agent's mean share (rows: alpha_1)."""
    print(f"largest excess of agent 1's share over alpha_1: {fa['over1']:+.4f}")
    print(f"largest excess of agent 2's share over 1 - alpha_1: {fa['over2']:+.4f}")
    return show_table(fa["share_free"].T, digits=3,
                      caption="Mean share of the tasks given to the free agent "
                              "(rows: capacity of agent 1)")


def print_free_agent_claims(fa):
    """Print the paper's claims checked on the results: the contextual policies
    against the free agent alone and against random assignment, and the end
    points against the lone constrained agent."""

    err, ctx, beats_free, beats_rnd = fa["err"], fa["ctx"], fa["beats_free"], fa["beats_rnd"]
    print(f"contextual < always the free agent: "
          f"{int(beats_free.values.sum())}/{beats_free.size} (policy, alpha_1) pairs")
    print(f"contextual < two-agent random:     "
          f"{int(beats_rnd.values.sum())}/{beats_rnd.size} pairs")
    for a, p in zip(*np.nonzero(~beats_rnd.values)):
        print(f"  not below random: {ctx[p]} at alpha_1 = {beats_rnd.index[a]:.1f} "
              f"({err.iloc[a][ctx[p]]:.4f} against {err.iloc[a]['random']:.4f})")
    for a in (0.0, 1.0):
        say(f"alpha_1 = {a:.0f}: the one constrained agent alone errs {fa['solo'][a]:.4f}; "
            + ", ".join(f"{p} {err.loc[a, p]:.4f}" for p in ctx))
    print("spread of the four policies at the end points:",
          ", ".join(f"alpha_1={a:.0f}: {s:.4f}" for a, s in fa["spread"].items()))


def print_free_agent_best(fa):
    """Print the best policy's error over the capacities, random's range, the free
    agent's largest share and the margin of the worst policy over random."""

    best, err = fa["best"], fa["err"]
    say(f"best contextual error over alpha_1: min {best.min():.4f} at alpha_1 = "
        f"{best.idxmin():.1f}, max {best.max():.4f} at alpha_1 = {best.idxmax():.1f}")
    print(f"random two-agent baseline: from {err['random'].min():.4f} "
          f"to {err['random'].max():.4f}")
    print(f"largest share of the free agent: {fa['share_free'].values.max():.3f}")
    say("random minus the worst contextual policy at interior alpha_1: "
        + ", ".join(f"{a:.1f}: {m:+.4f}" for a, m in fa["margin"].items()))


def check_free_agent(fa):
    """Check the free-agent chapter's findings (an AssertionError if one fails)
    and say which were checked."""
    missed, err, ctx, solo, share_free = (fa["missed"], fa["err"], fa["ctx"], fa["solo"],
                                          fa["share_free"])
    # the exceptions the prose explains: Thompson sampling with the first agent shut out
    assert missed and all(p.endswith("-ts") and a == 0.0 for p, a in missed), missed
    assert ("tree-ts", 0.0) in missed
    assert bool((fa["margin"] > 0).all())
    assert bool(fa["beats_free"].values.all())
    best0_policy = err.loc[0.0, ctx].idxmin()
    assert err.loc[0.0, best0_policy] < solo[0.0]          # below XGBoost alone
    assert share_free.loc["tree-ts", 0.0] > share_free.loc["tree-greedy", 0.0]
    assert bool((share_free[1.0] > share_free[0.0]).all())  # more work as alpha_1 grows
    print("checked: every contextual policy is below the free agent alone, and below "
          "random\n  at every interior capacity; the exceptions are Thompson sampling "
          "with agent one\n  shut out; there the best policy is below XGBoost alone; the "
          "free agent's share\n  grows with agent one's capacity")


def glue_free_agent(fa, *, task, free, runs, free_error):
    """Glue the free-agent chapter's numbers (``fa_*``) for its prose."""
    err, ctx, beats_free, beats_rnd = fa["err"], fa["ctx"], fa["beats_free"], fa["beats_rnd"]
    share_free, margin, best, solo, spread = (fa["share_free"], fa["margin"], fa["best"],
                                              fa["solo"], fa["spread"])
    paper_acc = ca.paper_accuracies("bank")        # the paper's Table 3, our agent order
    glue("fa_paper_err_log", 1 - paper_acc[0])
    glue("fa_paper_err_xgb", 1 - paper_acc[1])
    glue("fa_T", int(task.T))
    glue("fa_err_free", float(1 - free.mean()))
    glue("fa_runs", int(runs))
    glue("fa_free_error", float(free_error))
    glue("fa_beats_free", int(beats_free.values.sum()))
    glue("fa_beats_rnd", int(beats_rnd.values.sum()))
    glue("fa_pairs", int(beats_free.size))
    glue("fa_misses", "; ".join(f"{p} at alpha_1 = {a:.1f}" for p, a in fa["missed"])
         if fa["missed"] else "none")
    glue("fa_share_min", float(share_free.values.min()))
    glue("fa_share_max", float(share_free.values.max()))
    glue("fa_ts0_free", float(share_free.loc["tree-ts", 0.0]))
    glue("fa_greedy0_free", float(share_free.loc["tree-greedy", 0.0]))
    glue("fa_margin_min", float(margin.min()))
    glue("fa_margin_min_at", float(margin.idxmin()))
    glue("fa_margin_max", float(margin.max()))
    glue("fa_margin_max_at", float(margin.idxmax()))
    glue("fa_free_pct", 100 * float(free_error))
    glue("fa_free_right_pct", 100 * (1 - float(free_error)))
    glue("fa_err_log", float(solo[1.0]))
    glue("fa_err_xgb", float(solo[0.0]))
    glue("fa_best0", float(err.loc[0.0, ctx].min()))
    glue("fa_best0_policy", str(err.loc[0.0, ctx].idxmin()))
    glue("fa_best1", float(err.loc[1.0, ctx].min()))
    glue("fa_best_min", float(best.min()))
    glue("fa_best_argmin", float(best.idxmin()))
    glue("fa_rnd_max", float(err["random"].max()))
    glue("fa_spread0", spread[0.0])
    glue("fa_spread1", spread[1.0])
    glue("fa_floor_min", float(fa["hind"].error.min()))
    glue("fa_floor_max", float(fa["hind"].error.max()))
    glue("fa_excess", float(max(fa["over1"], fa["over2"])))


# --- ext_minibatch: mini-batch assignment ----------------------------------------


def describe_bank(task):
    """Print Bank's construction seed, length, agents and their errors."""

    say(f"Bank (construction seed {task.meta['seed']}, the agents matched to Table 3): "
        f"T = {task.T} tasks, agents {task.agent_names}, "
        f"errors {1 - task.R[:, 0].mean():.4f} and {1 - task.R[:, 1].mean():.4f}")


def minibatch_tables(cmp_df, rnd, policies, alphas, *, runs, batch):
    """Show the mean errors online, in batches and of the references, and (folded)
    the paired difference online minus batch with its 95% interval; return the
    paired frame (policy, alpha1, ``online - batch``, ``95% CI low``, ``95% CI high``)."""
    import pandas as pd

    show = cmp_df.assign(policy=cmp_df.policy + " " + cmp_df["mode"])
    errors = pd.concat([show, rnd], ignore_index=True).pivot_table(
        index="policy", columns="alpha1", values="error", sort=False)
    _show(show_table(errors, digits=3, caption=f"Mean error rate over {runs} runs"))
    rows = []
    for policy in policies:
        for a in alphas:
            g = cmp_df[(cmp_df.policy == policy) & (cmp_df.alpha1 == a)].set_index("mode")
            diff = g.loc["online", "errors"] - g.loc[f"B={batch}", "errors"]
            m, lo, hi = ca.mean_ci(diff)
            rows.append({"policy": policy, "alpha1": a, "online - batch": m,
                         "95% CI low": lo, "95% CI high": hi})
    paired = pd.DataFrame(rows)
    _show(show_table(paired, digits=4, index=False, formats={"alpha1": 1}, fold=True,
                     caption="Paired difference of the error, online minus batch, "
                             "with its 95% interval"))
    return paired


def plot_minibatch(cmp_df, rnd, policies, *, batch):
    """Figure: online against batch assignment, error against alpha_1 with 95% bands,
    one panel per policy, with random assignment and the hindsight optimum."""
    import matplotlib.pyplot as plt

    fig, axes = book_figure(2, sharey=True, height=3.4)
    modes = {"online": dict(ls="-", marker="o", color="C3"),
             f"B={batch}": dict(ls="--", marker="s", color="C2")}
    for ax, policy in zip(axes, policies):
        for mode, style in modes.items():
            g = cmp_df[(cmp_df.policy == policy) & (cmp_df["mode"] == mode)]
            g = g.sort_values("alpha1")
            ax.plot(g.alpha1, g.error, label=mode, **style)
            ax.fill_between(g.alpha1, g.ci_low, g.ci_high, color=style["color"], alpha=0.15,
                            lw=0)
        ca.plot_error_vs_capacity(rnd, ax=ax, title=f"Bank, {policy}", legend=False)
    axes[1].set_ylabel("")
    legend_outside(fig, ncol=4)
    plt.show()


def batch_size_table(sweep, online, policies, *, sweep_runs):
    """Print each policy's online error and its lowest, first and last batch error,
    show the errors per batch size and return them (batch size x policy)."""
    tab = sweep.pivot_table(index="B", columns="policy", values="error")[policies]
    print("online:", ", ".join(f"{p} {online[p]:.4f}" for p in policies))
    for p in policies:
        print(f"{p}: lowest error {tab[p].min():.4f} at B = {tab[p].idxmin()}; "
              f"B = 1: {tab[p].iloc[0]:.4f}; whole stream: {tab[p].iloc[-1]:.4f}")
    _show(show_table(tab, digits=4, caption=r"Mean error rate at $\alpha = (0.5, 0.5)$, "
                                            f"{sweep_runs} runs per batch size $B$"))
    return tab


def plot_batch_sizes(sweep, online, policies):
    """Figure: error against the batch size (log scale) at equal capacities, with
    95% bands and each policy's online error as a dotted line."""
    import matplotlib.pyplot as plt

    fig, ax = book_figure()
    for p in policies:
        style = {k: v for k, v in ca.POLICY_STYLE[p].items() if k in ("color", "marker")}
        g = sweep[sweep.policy == p].sort_values("B")
        ax.plot(g.B, g.error, label=f"{p}, batches", **style)
        ax.fill_between(g.B, g.ci_low, g.ci_high, color=style["color"], alpha=0.15, lw=0)
        ax.axhline(online[p], color=style["color"], ls=":", lw=1.2, label=f"{p}, online")
    ax.set_xscale("log")
    ax.set_xlabel("batch size B (log scale)")
    ax.set_ylabel("error rate")
    ax.set_title(r"Bank, $\alpha_1 = \alpha_2 = 0.5$")
    legend_outside(fig, ncol=2)
    plt.show()


def _online_minus_batch(cmp_df, policy, batch):
    g = cmp_df[cmp_df.policy == policy].pivot_table(index="alpha1", columns="mode",
                                                    values="error")
    inner = [a for a in g.index if 0 < a < 1]
    return g.loc[inner, "online"] - g.loc[inner, f"B={batch}"]


def print_minibatch_patterns(cmp_df, tab, *, batch):
    """Print the paper's two patterns on the results: batches below online at the
    interior capacities, and an interior batch size below both ends."""

    for policy in tab.columns:
        gap = _online_minus_batch(cmp_df, policy, batch)
        wins = int((gap > 0).sum())
        say(f"{policy}: B={batch} lower than online at {wins}/{len(gap)} interior "
            f"capacities; online - batch from {gap.min():+.4f} to {gap.max():+.4f}")
    for p in tab.columns:
        e = tab[p]
        interior = e.iloc[1:-1].min()
        print(f"{p}: U-shape (an interior size below both ends): "
              f"{bool(interior < e.iloc[0] and interior < e.iloc[-1])}")


def check_minibatch(paired, tab, online, rnd):
    """Check the mini-batch chapter's findings (an AssertionError if one fails) and
    say which were checked."""
    ci_low = paired.loc[(paired.alpha1 > 0) & (paired.alpha1 < 1), "95% CI low"]
    assert bool((ci_low > 0).all())     # every interval of the interior capacities above zero
    for policy in tab.columns:
        e = tab[policy]
        assert e.iloc[1:-1].min() < min(e.iloc[0], e.iloc[-1])    # the U-shape
        assert e.min() < online[policy]
    rand05 = float(rnd[(rnd.policy == "random") & (rnd.alpha1 == 0.5)].error.iloc[0])
    assert abs(tab["tree-greedy"].iloc[0] - rand05) < 0.01      # B = 1 is random assignment
    assert abs(tab["tree-greedy"].iloc[-1] - rand05) < 0.01     # ... and so is one whole batch
    print("checked: batches beat online assignment beyond the noise at every interior "
          "capacity;\n  the error is U-shaped in the batch size, its lowest point below "
          "online; a batch\n  of one task and one batch of the whole stream both give "
          "random assignment's error")


def glue_minibatch(cmp_df, rnd, tab, online, task, *, batch, runs, sweep_runs):
    """Glue the mini-batch chapter's numbers (``mb_*``) for its prose."""
    glue("mb_err_log", float(1 - task.R[:, 0].mean()))
    glue("mb_err_xgb", float(1 - task.R[:, 1].mean()))
    for policy, key in (("tree-greedy", "tree"), ("logistic-greedy", "log")):
        gap = _online_minus_batch(cmp_df, policy, batch)
        glue(f"mb_{key}_wins", int((gap > 0).sum()))
        glue(f"mb_{key}_gap_min", float(gap.min()))
        glue(f"mb_{key}_gap_min_at", float(gap.idxmin()))
        glue(f"mb_{key}_gap_max", float(gap.max()))
        glue(f"mb_{key}_gap_max_at", float(gap.idxmax()))
        e = tab[policy]
        glue(f"mb_{key}_bmin", float(e.min()))
        glue(f"mb_{key}_bmin_at", int(e.idxmin()))
        glue(f"mb_{key}_b1", float(e.iloc[0]))
        glue(f"mb_{key}_ball", float(e.iloc[-1]))
        glue(f"mb_{key}_online05", float(online[policy]))
    rand05 = float(rnd[(rnd.policy == "random") & (rnd.alpha1 == 0.5)].error.iloc[0])
    glue("mb_rand05", rand05)
    # one task per batch assigns at random: tree greedy's distance to random there
    glue("mb_b1_random_gap", abs(float(tab["tree-greedy"].iloc[0]) - rand05))
    h = rnd[(rnd.policy == "hindsight") & (rnd.alpha1 > 0) & (rnd.alpha1 < 1)].error
    glue("mb_floor_min", float(h.min()))
    glue("mb_floor_max", float(h.max()))
    glue("mb_floor_min_at", float(rnd.loc[h.idxmin(), "alpha1"]))
    glue("mb_batch", int(batch))
    glue("mb_n_inner", len(_online_minus_batch(cmp_df, "tree-greedy", batch)))
    glue("mb_runs", int(runs))
    glue("mb_sweep_runs", int(sweep_runs))


# --- ext_multi_agent: more than two agents ---------------------------------------


def varied_capacities(A, a, varied):
    """Capacity ``a`` for agent ``varied`` of ``A``, the rest split equally.

    Examples
    --------
    >>> varied_capacities(3, 0.4, 2)
    (0.3, 0.3, 0.4)
    """
    rest = round((1 - a) / (A - 1), 12)
    return tuple(a if k == varied else rest for k in range(A))


def with_hindsight(df, R, caps, alphas):
    """``df`` with the hindsight optimum of ``R`` at each capacity added as the
    policy ``hindsight`` (``capassign.hindsight_optimum``; its interval is the point)."""
    import pandas as pd

    hind = pd.DataFrame([{"policy": "hindsight", "alpha1": a,
                          "error": ca.hindsight_optimum(R, c).error}
                         for a, c in zip(alphas, caps)])
    hind["ci_low"] = hind["ci_high"] = hind["error"]
    return pd.concat([df, hind], ignore_index=True)


def plot_multi_agent(results):
    """Figure: per task (rows), random assignment and the hindsight optimum (left)
    and each contextual policy's paired difference to random (right)."""
    import matplotlib.pyplot as plt

    fig, axes = book_figure(2, 2, height=6.2)
    for k, (row, (name, df)) in enumerate(zip(axes, results.items())):
        refs = df[df.policy.isin(["random", "hindsight"])]
        ca.plot_error_vs_capacity(refs, ax=row[0], title=f"{name}: references",
                                  legend=False)
        tests = ca.paired_tests(df[df.policy != "hindsight"])      # each policy - random
        ca.plot_paired_differences(tests, ax=row[1], title=f"{name}: minus random",
                                   legend=False)
        row[1].set_ylabel("error − random")
        for ax in row:
            ax.set_xlabel("capacity of the varied agent" if k == len(axes) - 1 else "")
    legend_outside(fig, "all", ncol=2)
    plt.show()


def describe_agents(tasks, varied):
    """Print each task's length and its agents with their errors, marking the varied one."""
    for name, task in tasks.items():
        print(f"{name}: T = {task.T} questions, A = {task.R.shape[1]} agents")
        for k, (n, col) in enumerate(zip(task.agent_names, task.R.T)):
            mark = "  <- varied" if k == varied else ""
            print(f"  agent {k + 1}: {n:<30} error {1 - col.mean():.3f}{mark}")


def multi_agent_errors(results, runs):
    """Show each task's mean error per policy (columns: the varied agent's capacity)."""
    for name, df in results.items():
        err = df.pivot_table(index="policy", columns="alpha1", values="error", sort=False)
        _show(show_table(err, digits=3,
                         caption=f"{name}: mean error rate over {runs} runs "
                                 "(columns: capacity of the varied agent)"))


def multi_agent_claims(results):
    """Show and return the main text's claims (``capbook.paper_claims``) per task."""
    from .readouts import paper_claims

    claims = {name: paper_claims(df[df.policy != "hindsight"]) for name, df in results.items()}
    for name, c in claims.items():
        _show(show_table(c, index=False, caption=f"{name}: the claims of Sec. 4.1"))
    return claims


def _multi_agent_numbers(df, alphas):
    ctx = list(ca.CONTEXTUAL_POLICIES)
    err = df.pivot_table(index="alpha1", columns="policy", values="error")
    inner = [a for a in alphas if 0 < a < 1]
    margin = err.loc[inner, ["random"]].to_numpy() - err.loc[inner, ctx].to_numpy()
    gaps = [float((err[g] - err[t]).loc[inner].abs().max())
            for g, t in [("logistic-greedy", "logistic-ts"), ("tree-greedy", "tree-ts")]]
    mid = 0.5 if 0.5 in inner else inner[len(inner) // 2]
    return ctx, err, margin, gaps, mid


def check_multi_agent(results, claims, alphas):
    """Check the multi-agent chapter's findings (an AssertionError if one fails) and
    print each task's margins, greedy-TS gaps and the errors at the middle capacity."""

    for name, df in results.items():
        ctx, err, margin, gaps, mid = _multi_agent_numbers(df, alphas)
        c = claims[name].set_index("claim")["holds"]
        assert bool((margin > 0).all())         # contextual < random at interior capacities
        assert not c.iloc[1] and not c.iloc[2]  # the main text's other two claims fail here
        say(f"{name}: margins over random {margin.min():.4f} to {margin.max():.4f} "
            f"(mean {margin.mean():.4f}); greedy-TS gaps {gaps[0]:.4f} (logistic), "
            f"{gaps[1]:.4f} (trees); at alpha = {mid}: hindsight "
            f"{err.loc[mid, 'hindsight']:.3f}, policies {err.loc[mid, ctx].min():.3f} to "
            f"{err.loc[mid, ctx].max():.3f}")


def glue_multi_agent(results, tasks, alphas, *, runs):
    """Glue the multi-agent chapter's numbers (``ma*``) for its prose."""
    from .readouts import SIMILAR_TOL

    for name, df in results.items():
        key = name[-1]
        ctx, err, margin, gaps, mid = _multi_agent_numbers(df, alphas)
        glue(f"ma{key}_pairs", int(margin.size))
        glue(f"ma{key}_wins", int((margin > 0).sum()))
        glue(f"ma_{name}_ctx_wins", int((margin > 0).sum()))
        glue(f"ma_{name}_ctx_pairs", int(margin.size))
        glue(f"ma{key}_margin_mean", float(margin.mean()))
        glue(f"ma{key}_margin_max", float(margin.max()))
        glue(f"ma{key}_T", int(tasks[name].T))
        glue(f"ma{key}_tree_gap", gaps[1])
        glue(f"ma{key}_log_gap", gaps[0])
        glue(f"ma{key}_hind_mid", float(err.loc[mid, "hindsight"]))
        glue(f"ma{key}_pol_mid_min", float(err.loc[mid, ctx].min()))
        glue(f"ma{key}_pol_mid_max", float(err.loc[mid, ctx].max()))
    glue("ma_mid", float(mid))
    glue("ma_tol", float(SIMILAR_TOL))
    glue("ma_runs", int(runs))


# --- ext_eta: the queue penalty eta ----------------------------------------------


def plot_eta(by_eta, base, etas, policy):
    """Figure: error (left, with 95% bands and the baselines of ``base``) and realised
    share of agent 1 (right, the diagonal is the target) against alpha_1, one line
    per eta."""
    import matplotlib.pyplot as plt

    fig, axes = book_figure(2, height=3.4)
    colors = plt.cm.viridis(np.linspace(0, 0.9, len(etas)))
    markers = ["o", "s", "^", "D", "v", "P", "X"]
    for k, (e, c) in enumerate(zip(etas, colors)):
        g = by_eta[by_eta.eta == e].sort_values("alpha1")
        m = markers[k % len(markers)]
        axes[0].plot(g.alpha1, g.error, marker=m, color=c, label=rf"$\eta = {e:g}$")
        axes[0].fill_between(g.alpha1, g.ci_low, g.ci_high, color=c, alpha=0.15, lw=0)
        axes[1].plot(g.alpha1, g.frac1, marker=m, color=c, label=rf"$\eta = {e:g}$")
    ca.plot_error_vs_capacity(base, ax=axes[0], title=f"ImageNet-16H, {policy}",
                              legend=False)
    axes[1].plot([0, 1], [0, 1], color="k", lw=0.8, ls=":")
    axes[1].set_xlabel(r"capacity of agent 1, $\alpha_1$")
    axes[1].set_ylabel("")                     # the panel's title says it
    axes[1].set_title("realised share of agent 1")
    legend_outside(fig, axes[0], ncol=2)
    plt.show()


def eta_tables(by_eta, base, policy, *, runs):
    """Show the mean error per eta, the baselines' errors and the realised share of
    agent 1 per eta (columns: alpha_1); return the error and share pivots."""
    err = by_eta.pivot_table(index="eta", columns="alpha1", values="error")
    share = by_eta.pivot_table(index="eta", columns="alpha1", values="frac1")
    _show(show_table(err, digits=4, caption=f"{policy}: mean error rate over {runs} runs "
                                            r"(rows: $\eta$)"))
    baselines = base.pivot_table(index="policy", columns="alpha1", values="error", sort=False)
    _show(show_table(baselines, digits=4, caption="Baselines: mean error rate"))
    _show(show_table(share, digits=3, caption=f"{policy}: realised share of agent 1 "
                                              r"(rows: $\eta$)"))
    return err, share


def eta_findings(err, share, base, alphas, *, mono_tol=0.002):
    """The paper's three statements on the eta tables, printed and returned as a dict.

    Keys: ``inner`` (interior capacities), ``mono`` (per interior capacity: is
    the error non-decreasing in eta within ``mono_tol``), ``gap5`` (random
    minus the largest eta's error), ``e0``/``s0`` (error and share at eta = 0),
    ``off`` (the offline tree's error), ``dev`` (per eta, the largest
    ``|share - alpha_1|``) and ``mono_tol``.
    """

    inner = [a for a in alphas if 0 < a < 1]
    rnd = base[base.policy == "random"].set_index("alpha1")["error"]
    off = base[base.policy == "offline-tree"]["error"].iloc[0]
    mono = [bool(np.all(np.diff(err.loc[:, a].to_numpy()) >= -mono_tol)) for a in inner]
    print(f"error non-decreasing in eta (tolerance {mono_tol}) "
          f"at {sum(mono)}/{len(inner)} interior capacities")
    eta_max = max(err.index)
    gap5 = (rnd.loc[inner] - err.loc[eta_max, inner])
    say(f"random minus eta={eta_max:g} error at interior alpha_1: "
        + ", ".join(f"{a:.1f}: {g:+.4f}" for a, g in gap5.items()))
    e0, s0 = err.loc[0.0, inner], share.loc[0.0, inner]
    say(f"eta = 0: error {e0.min():.4f} to {e0.max():.4f} at interior alpha_1; "
        f"offline tree (unconstrained) {off:.4f}; share of agent 1 "
        f"{s0.min():.3f} to {s0.max():.3f} whatever alpha_1")
    dev = (share.loc[:, inner] - np.array(inner)).abs().max(axis=1)
    say("largest |share - alpha_1| at interior capacities, by eta: "
        + ", ".join(f"{e:g}: {v:.3f}" for e, v in dev.items()))
    return dict(inner=inner, mono=mono, gap5=gap5, e0=e0, s0=s0, off=off, dev=dev,
                mono_tol=mono_tol)


def _eta_middle(et):
    inner = et["inner"]
    return 0.5 if 0.5 in inner else inner[len(inner) // 2]


def check_eta(et, err):
    """Check the eta chapter's findings (an AssertionError if one fails) and print
    the error at the middle capacity for each positive eta."""

    assert all(et["mono"]), et["mono"]                    # error rises with eta everywhere
    pos = [e for e in err.index if e > 0]
    assert float(et["dev"].loc[pos].max()) <= 0.005       # every eta > 0 keeps the shares
    assert float(et["gap5"].abs().max()) < 0.005          # the largest eta: random
    mid = _eta_middle(et)
    say(f"at alpha_1 = {mid}: " + ", ".join(f"{err.loc[e, mid]:.3f} at eta = {e:g}"
                                            for e in pos))


def glue_eta(et, err, share, task, *, runs):
    """Glue the eta chapter's numbers (``eta_*``, ``et_*``) for its prose."""
    inner, gap5, dev = et["inner"], et["gap5"], et["dev"]
    pos = [e for e in err.index if e > 0]
    mid = _eta_middle(et)
    glue("et_mono_tol", et["mono_tol"])
    glue("eta_runs", int(runs))
    glue("eta_mono", int(sum(et["mono"])))
    glue("eta_inner", len(inner))
    glue("eta_gap5_max", float(gap5.abs().max()))
    glue("eta_0_share_range", float(et["s0"].max() - et["s0"].min()))
    glue("et_mid", float(mid))
    glue("et_err_mid", ", ".join(f"{err.loc[e, mid]:.3f} at eta = {e:g}" for e in pos))
    glue("et_eta_max", float(max(err.index)))
    glue("et_err0", float(err.loc[0.0, inner].mean()))
    glue("et_share0", float(share.loc[0.0, inner].mean()))
    glue("et_offline", float(et["off"]))
    glue("et_dev_pos", float(dev.loc[pos].max()))
    glue("et_eta_min_pos", float(min(pos)))
    glue("et_gap5_min", float(-gap5.max()))
    glue("et_gap5_max", float(-gap5.min()))
    glue("et_err_a1", float(1 - task.R[:, 0].mean()))     # agent 1 alone (alpha_1 = 1)
    glue("et_err_a2", float(1 - task.R[:, 1].mean()))     # agent 2 alone (alpha_1 = 0)


# --- ext_exploration: UCB and epsilon-greedy beside the paper's policies -----------


#: The tabular tasks in the order of the paper's Fig. 3 panels (a) to (d).
TABULAR_TASKS = ("cardio", "bank", "coupon", "credit")
#: Each exploration policy and the policies of the paper's of its family it is
#: compared with (the marginal family has no Thompson policy in the paper).
EXPLORATION_BASELINES = {
    "marginal-egreedy": ("marginal",),
    "logistic-ucb": ("logistic-greedy", "logistic-ts"),
    "logistic-egreedy": ("logistic-greedy", "logistic-ts"),
    "tree-egreedy": ("tree-greedy", "tree-ts"),
}
#: The greedy and epsilon-greedy policy of each family whose greedy policy learns
#: from the context (the marginal family gains nothing over random to lose).
EGREEDY_PAIRS = {"logistic": ("logistic-greedy", "logistic-egreedy"),
                 "tree": ("tree-greedy", "tree-egreedy")}
#: The level of the Holm-adjusted tests that call a difference found.
EXPLORATION_LEVEL = 0.05


def exploration_tests(results):
    """Every exploration policy against each policy of its family, paired run by
    run at the interior capacities, Holm-adjusted over all comparisons of a task.

    The differences are those of :func:`capassign.paired_tests` (error of the
    exploration policy minus the baseline's, run k of both on the same task
    order); ``p_holm`` adjusts ``p_t`` by Holm's method over every
    (comparison, alpha_1) of the same task, as :func:`capassign.paired_tests`
    does over the policies of one baseline.

    Parameters
    ----------
    results : dict
        Task name -> :func:`capassign.error_vs_capacity` table holding the
        policies of :data:`EXPLORATION_BASELINES`.

    Returns
    -------
    pandas.DataFrame
        The columns of :func:`capassign.paired_tests` and ``baseline``; one
        row per (task, exploration policy, baseline, interior alpha_1).

    Examples
    --------
    >>> X, R, _ = ca.synthetic_stream(T=200, d=2, seed=1)
    >>> df = ca.error_vs_capacity(X, R, ["marginal", "marginal-egreedy"], (0.0, 0.5),
    ...                           runs=4, label="toy")
    >>> t = exploration_tests({"toy": df})
    >>> t[["policy", "baseline", "alpha1", "runs"]].values.tolist()
    [['marginal-egreedy', 'marginal', 0.5, 4]]
    """
    import pandas as pd

    frames = []
    for name, df in results.items():
        inner = df[(df.alpha1 > 0) & (df.alpha1 < 1)]
        for policy, bases in EXPLORATION_BASELINES.items():
            for base in bases:
                pair = inner[inner.policy.isin([policy, base])]
                if set(pair.policy) == {policy, base}:
                    frames.append(ca.paired_tests(pair, baseline=base).assign(baseline=base))
    tests = pd.concat(frames, ignore_index=True)
    for _, idx in tests.groupby(tests["task"].astype(str), sort=False).groups.items():
        tests.loc[idx, "p_holm"] = ca._holm(tests.loc[idx, "p_t"].to_numpy())
    cols = list(tests.columns)
    cols.insert(cols.index("policy") + 1, cols.pop(cols.index("baseline")))
    return tests[cols]


def exploration_verdicts(tests, level=EXPLORATION_LEVEL):
    """Count, per (task, exploration policy, baseline), the interior capacities where
    the exploration policy erred less (``less``: mean difference below zero,
    Holm-adjusted p below ``level``), more (``more``) or no difference was found
    (``neither``), with the mean difference over those capacities.

    Parameters
    ----------
    tests : pandas.DataFrame
        :func:`exploration_tests`' table.
    level : float
        The level of the adjusted tests.

    Returns
    -------
    pandas.DataFrame
        Indexed by (task, policy, baseline): ``mean diff``, ``less``, ``more``,
        ``neither``.

    Examples
    --------
    >>> import pandas as pd
    >>> t = pd.DataFrame({"task": "toy", "policy": "tree-egreedy", "baseline": "tree-greedy",
    ...                   "alpha1": [0.4, 0.5], "diff": [0.002, -0.001],
    ...                   "p_holm": [0.01, 0.4]})
    >>> exploration_verdicts(t).iloc[0].tolist()
    [0.0005, 0.0, 1.0, 1.0]
    """
    found = tests.p_holm < level
    t = tests.assign(better=found & (tests["diff"] < 0), worse=found & (tests["diff"] > 0))
    t = t.assign(none=~(t.better | t.worse))
    out = t.groupby(["task", "policy", "baseline"], sort=False).agg(
        mean_diff=("diff", "mean"), better=("better", "sum"), worse=("worse", "sum"),
        none=("none", "sum"))
    return out.rename(columns={"mean_diff": "mean diff", "better": "less", "worse": "more",
                               "none": "neither"})


def exploration_gains(results, alphas):
    """Gain over random assignment of every policy of ``results`` at ``alphas``, with
    its 95% paired interval (:func:`capbook.gain_frame` of
    :func:`capassign.paired_tests` against random)."""
    import pandas as pd

    from .experiments import gain_frame

    tests = ca.paired_tests(pd.concat(results.values(), ignore_index=True))
    return gain_frame(tests, list(alphas))


#: The rows of :func:`plot_exploration`, family by family: the paper's policies,
#: then the exploration policies of the family.
EXPLORATION_ROWS = (("marginal", "marginal-egreedy"),
                    ("logistic-greedy", "logistic-ts", "logistic-ucb", "logistic-egreedy"),
                    ("tree-greedy", "tree-ts", "tree-egreedy"))


def _family_rows(policies):
    """Row positions of the ``policies`` in a dot plot, family by family
    (:data:`EXPLORATION_ROWS`), a wider gap between families."""
    rows, y = {}, 0.0
    for family in EXPLORATION_ROWS:
        kept = [p for p in family if p in policies]
        for p in kept:
            rows[p] = y
            y += 1.0
        y += 0.6 if kept else 0.0
    return rows


def plot_exploration(gains, alpha1=0.5):
    """Figure: each policy's gain over random assignment at ``alpha1`` with its 95%
    paired interval, one panel per task, one row per policy grouped by family
    (the paper's policies filled, the exploration policies open).

    Parameters
    ----------
    gains : pandas.DataFrame
        :func:`exploration_gains`' table.
    alpha1 : float
        The capacity shown.

    Returns
    -------
    fig, axes

    Examples
    --------
    >>> import pandas as pd, matplotlib.pyplot as plt
    >>> g = pd.DataFrame({"task": "bank", "alpha1": 0.5, "policy": ["tree-greedy", "tree-egreedy"],
    ...                   "gain": [0.09, 0.08], "low": [0.08, 0.07], "high": [0.1, 0.09]})
    >>> fig, axes = plot_exploration(g)
    >>> [t.get_text() for t in axes[0].get_yticklabels()], axes[0].get_title()
    (['tree greedy', 'tree ε-greedy'], 'Bank')
    >>> plt.close(fig)
    """
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    g = gains[np.isclose(gains.alpha1, alpha1)]
    names = list(dict.fromkeys(g.task))
    rows = _family_rows(set(g.policy))
    ncols = 2 if len(names) > 1 else 1
    nrows = -(-len(names) // ncols)
    fig, axes = book_figure(ncols, nrows, height=2.9 * nrows + 0.5, sharey=True, squeeze=False)
    axes = list(axes.flat)
    tick = FuncFormatter(lambda v, _: "0" if abs(v) < 1e-12 else f"{v:g}")
    for ax, name in zip(axes, names):
        t = g[g.task == name].set_index("policy")
        for p, y in rows.items():
            st, r = policy_style(p), t.loc[p]
            ax.errorbar(r.gain, y, xerr=[[r.gain - r.low], [r.high - r.gain]], ls="none",
                        marker=st.get("marker") or "o", color=st.get("color"), capsize=2,
                        ms=5, mfc="white" if p in EXPLORATION_BASELINES else st.get("color"))
        ax.axvline(0.0, color="0.3", lw=0.8)
        ax.xaxis.set_major_locator(MaxNLocator(3))
        ax.xaxis.set_major_formatter(tick)
        ax.set_title(TASK_NAMES.get(name, name))
    for ax in axes[len(names):]:
        ax.set_visible(False)
    axes[0].set_yticks(list(rows.values()), [policy_style(p)["label"] for p in rows])
    axes[0].invert_yaxis()
    fig.supxlabel(rf"gain over random assignment at $\alpha_1 = {alpha1:g}$", fontsize=11)
    fig.tight_layout()
    plt.show()
    return fig, axes


def exploration_folds(tests, titles, *, runs):
    """Every task's paired tests of the exploration policies against their family's
    policies (:func:`capbook.paired_table`, a ``baseline`` column beside the
    policy), folded; a list of tables."""
    from .present import paired_table

    out = []
    for name, title in titles.items():
        t = tests[tests.task == name]
        table = paired_table(t).drop(columns="task")
        table.insert(1, "baseline", t["baseline"].to_numpy())
        out.append(show_table(table, index=False, fold=True,
                              caption=f"{title}: error difference, exploration policy - "
                                      f"policy of the paper, over {runs} paired runs"))
    return out


def exploration_summary(verdicts):
    """Over every task, per (exploration policy, baseline): the interior capacities
    where it erred less, more or neither was found, and the range of its mean
    difference over the tasks; printed as a table and returned."""
    v = verdicts.reset_index()
    out = v.groupby(["policy", "baseline"], sort=False).agg(
        less=("less", "sum"), more=("more", "sum"), neither=("neither", "sum"),
        low=("mean diff", "min"), high=("mean diff", "max"))
    out = out.rename(columns={"low": "mean diff from", "high": "mean diff to"})
    _show(show_table(out, digits=4, caption="All four tasks: interior capacities (task, "
                                            r"$\alpha_1$) where the exploration policy erred "
                                            "less or more than the paper's policy"))
    return out


def exploration_cost(gains, epsilon):
    """What epsilon-greedy's exploring costs, measured against the explored tasks alone.

    An exploring decision ignores the context, so if it cost nothing beyond
    the task it decides, epsilon-greedy would lose epsilon times its greedy
    policy's gain over random assignment.  The ratio printed (and returned)
    is the loss measured, greedy's gain minus epsilon-greedy's, over that
    amount, per (family, task, alpha_1): about 1 when the explored tasks
    account for the loss, above 1 when exploring costs the later tasks too.

    Parameters
    ----------
    gains : pandas.DataFrame
        :func:`exploration_gains`' table (greedy and epsilon-greedy policies).
    epsilon : float
        The exploration probability the policies ran with.

    Returns
    -------
    pandas.DataFrame
        Rows (task, alpha_1), one column per family with both policies.

    Examples
    --------
    >>> import pandas as pd
    >>> g = pd.DataFrame({"task": "toy", "alpha1": 0.5, "policy": ["tree-greedy", "tree-egreedy"],
    ...                   "gain": [0.05, 0.04], "low": 0.0, "high": 0.1})
    >>> round(float(exploration_cost(g, 0.1).loc[("toy", 0.5), "tree"]), 6)
    2.0
    """
    import pandas as pd

    gain = gains.pivot_table(index=["task", "alpha1"], columns="policy", values="gain",
                             sort=False)
    return pd.DataFrame({family: (gain[g] - gain[e]) / (epsilon * gain[g])
                         for family, (g, e) in EGREEDY_PAIRS.items()
                         if {g, e} <= set(gain.columns)})


def show_exploration_cost(cost):
    """Show :func:`exploration_cost`'s ratios, rows (task, family), columns alpha_1."""
    table = cost.rename_axis(columns="family").stack().unstack("alpha1")
    return show_table(table, digits=2, caption="Loss of ε-greedy over ε × its greedy "
                                               "policy's gain, per task and family")


def exploration_checks(summary, verdicts, tests, cost):
    """The claims of the exploration chapter's prose, each checked on this run
    (claim -> bool, for :func:`capbook.say_checks`)."""
    pairs = [(e, g) for g, e in EGREEDY_PAIRS.values()]
    eg = summary.loc[pairs]
    everything = summary.loc[[e for _, e in EGREEDY_PAIRS.values()]]
    cells = summary[["less", "more", "neither"]].sum(axis=1)
    ucb = summary.loc["logistic-ucb"]
    coupon = verdicts.loc["coupon"]
    bc = cost.loc[["bank", "credit"]]
    bank = tests[(tests.task == "bank")
                 & tests[["policy", "baseline"]].apply(tuple, axis=1).isin(pairs)]
    return {
        "epsilon-greedy never erred less than its family's greedy or Thompson policy":
            int(everything.less.sum()) == 0,
        "epsilon-greedy erred more than its family's greedy policy at most capacities":
            bool((eg.more > cells.loc[pairs] / 2).all()),
        "marginal epsilon-greedy: no difference found anywhere":
            int(summary.loc[("marginal-egreedy", "marginal"), "neither"])
            == int(cells.loc[("marginal-egreedy", "marginal")]),
        "epsilon-greedy erred more somewhere on Bank, Credit and Cardio":
            all(int(verdicts.loc[name].loc[everything.index.get_level_values(0).unique()]
                    .more.sum()) > 0 for name in ("bank", "credit", "cardio")),
        "Coupon: no difference found for any comparison":
            int(coupon[["less", "more"]].to_numpy().sum()) == 0,
        "logistic UCB: differences found in both directions, against greedy":
            int(ucb.loc["logistic-greedy", "less"]) > 0
            and int(ucb.loc["logistic-greedy", "more"]) > 0,
        "Bank: epsilon-greedy erred more than greedy in most runs at every capacity":
            len(bank) > 0 and bool((bank.lost > bank.runs / 2).all()),
        "Bank and Credit: the largest cost ratio is at equal capacities":
            float(bc.xs(0.5, level="alpha1").to_numpy().max()) == float(bc.to_numpy().max()),
        "Cardio at equal capacities costs more than Bank and Credit anywhere":
            float(cost.loc[("cardio", 0.5)].min()) > float(bc.to_numpy().max()),
    }


def glue_exploration(summary, verdicts, tests, gains, cost, *, runs, settings):
    """Glue the exploration chapter's numbers (``xp_*``) for its prose."""
    key = lambda p: p.replace("-", "_")
    glue("xp_runs", int(runs))
    glue("xp_epsilon", float(settings.epsilon))
    glue("xp_ucb_c", float(settings.ucb_c))
    cells = summary[["less", "more", "neither"]].sum(axis=1)
    glue("xp_cells", int(cells.iloc[0]))
    for (policy, base), r in summary.iterrows():
        k = f"xp_{key(policy)}_{key(base)}"
        glue(f"{k}_better", int(r.less))
        glue(f"{k}_worse", int(r.more))
        glue(f"{k}_none", int(r.neither))
        glue(f"{k}_lo", float(r["mean diff from"]))
        glue(f"{k}_hi", float(r["mean diff to"]))
    egreedy = [e for _, e in EGREEDY_PAIRS.values()]
    eg = summary.loc[egreedy]
    glue("xp_eg_worse", int(eg.more.sum()))
    glue("xp_eg_better", int(eg.less.sum()))
    glue("xp_eg_n", int(cells.loc[eg.index].sum()))
    glue("xp_task_eg_n", int(cells.loc[eg.index].sum()) // verdicts.index.get_level_values(
        "task").nunique())
    for name in verdicts.index.get_level_values("task").unique():
        v = verdicts.loc[name]
        glue(f"xp_{name}_eg_worse", int(v.loc[egreedy].more.sum()))
    t = tests[tests.policy.isin(egreedy)]
    worst = t.loc[t["diff"].idxmax()]
    glue("xp_eg_max", float(worst["diff"]))
    glue("xp_eg_max_task", TASK_NAMES.get(worst.task, worst.task))
    glue("xp_eg_max_policy", policy_style(worst.policy)["label"])
    glue("xp_eg_max_base", policy_style(worst.baseline)["label"])
    glue("xp_eg_max_alpha", float(worst.alpha1))
    bank = t[(t.task == "bank") & t.baseline.isin([g for g, _ in EGREEDY_PAIRS.values()])]
    glue("xp_bank_eg_lost_min", int(bank.lost.min()))
    mid = gains[np.isclose(gains.alpha1, 0.5)]
    for r in mid.itertuples():
        glue(f"xp_{r.task}_{key(r.policy)}_gain05", float(r.gain))
    bc = cost.loc[["bank", "credit"]].to_numpy().ravel()
    glue("xp_cost_bc_lo", float(bc.min()))
    glue("xp_cost_bc_hi", float(bc.max()))
    glue("xp_cost_bc_median", float(np.median(bc)))
    for family in cost.columns:
        glue(f"xp_cost_cardio05_{family}", float(cost.loc[("cardio", 0.5), family]))


# --- beyond_uncertainty: intervals, paired tests and how many runs ---------------


def plot_paired_all(tests, names):
    """Figure: every paired difference (policy minus random) with its 95% interval,
    one panel per task of ``names``."""
    import matplotlib.pyplot as plt

    fig, axes = book_figure(2)
    for ax, name in zip(axes, names):
        ca.plot_paired_differences(tests[tests.task == name], ax=ax, title=name,
                                   legend=False)
        ax.set_ylabel("error − random" if ax is axes[0] else "")
    legend_outside(fig)
    plt.show()


def run_spread(df, tasks):
    """Per point: the error, its sd across runs, the half-width of its 95% interval and
    the binomial standard error of a fresh stream; prints the largest sd per task."""
    import pandas as pd

    rows = []
    for r in df.itertuples():
        T = tasks[r.task].T
        rows.append({"task": r.task, "policy": r.policy, "alpha1": r.alpha1,
                     "error": r.error, "sd across runs": r.std,
                     "95% CI half-width": (r.ci_high - r.ci_low) / 2,
                     "binomial se over T": np.sqrt(r.error * (1 - r.error) / T)})
    sd = df.groupby("task")["std"].max()
    say("largest sd across runs: " + ", ".join(f"{k} {v:.4f}" for k, v in sd.items())
        + "   (the paper: about 0.02 on MMLU, of order 0.001 elsewhere)")
    return pd.DataFrame(rows)


def spread_tables(spread, tasks, *, runs):
    """Show the spread per task in brief, then every point per task (folded)."""
    brief = spread.groupby("task", sort=False).agg(**{
        "largest sd": ("sd across runs", "max"),
        "half-width, min": ("95% CI half-width", "min"),
        "half-width, max": ("95% CI half-width", "max"),
        "binomial se, max": ("binomial se over T", "max")})
    _show(show_table(brief, digits=4, caption=f"Spread of the error rate across {runs} runs "
                                              "and of a fresh stream, in brief"))
    for name in tasks:
        _show(show_table(spread[spread.task == name].drop(columns="task"), digits=4,
                         index=False, formats={"alpha1": 1}, fold=True,
                         caption=f"{name}: mean error, its spread across {runs} runs "
                                 "and the binomial standard error of a fresh stream"))


def compare_tables(compare, tasks):
    """Show the paired and unpaired comparisons per task in brief, then every one (folded)."""
    brief = compare.groupby("task", sort=False).agg(**{
        "largest |corr|": ("corr", lambda c: c.abs().max()),
        "half-width paired, max": ("half-width paired", "max"),
        "half-width Welch, max": ("half-width Welch", "max"),
        "runs paired, max": ("runs paired", "max"),
        "runs Welch, max": ("runs Welch", "max")})
    _show(show_table(brief, digits=4, formats={"largest |corr|": 2},
                     caption="Each policy minus random assignment, paired and unpaired, "
                             "in brief"))
    signed = {c: (lambda v, d=d: f"{v + 0.0:+.{d}f}") for c, d in (("diff", 4), ("corr", 2))}
    for name in tasks:
        _show(show_table(compare[compare.task == name].drop(columns="task"), digits=4,
                         index=False, formats={"alpha1": 1, **signed}, fold=True,
                         caption=f"{name}: each policy minus random assignment, paired "
                                 "and unpaired (Welch), and the runs each needs"))


def pairing_summary(compare):
    """Print how far the paired and Welch half-widths differ and the runs needed."""

    agree = (compare["half-width paired"] / compare["half-width Welch"] - 1).abs().max()
    need = compare.groupby("task")["runs paired"].agg(["min", "max"])
    say(f"paired and Welch half-widths differ by at most {agree:.0%}; "
        "runs needed (paired) "
        + ", ".join(f"{k} {v['min']}-{v['max']}" for k, v in need.iterrows()))


def plot_closing(closing, grid):
    """Figure: the paired (shaded) and Welch (dashed) 95% intervals of the first n
    runs against n, one panel per case of ``closing``."""
    import matplotlib.pyplot as plt

    fig, axes = book_figure(2, height=3.3)
    for ((name, pol, a1), (ci, ciu)), ax in zip(closing.items(), axes):
        ax.fill_between(grid, ci[:, 1], ci[:, 2], alpha=0.3, color="C1",
                        label="paired 95% CI")
        ax.plot(grid, ciu[:, 1], color="0.3", ls="--", lw=1, label="Welch 95% CI")
        ax.plot(grid, ciu[:, 2], color="0.3", ls="--", lw=1)
        ax.plot(grid, ci[:, 0], color="C1", lw=1.4, label="mean difference")
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("runs $n$")
        ax.set_ylabel(f"{pol} - random")
        ax.set_title(rf"{name}, $\alpha_1 = {a1}$")
        ax.grid(alpha=0.3, which="both")
    legend_outside(fig, ncol=3)
    plt.show()


def glue_uncertainty(*, tasks, spread, df, compare, tests, n_all, runs):
    """Check that every comparison is resolved and glue the uncertainty chapter's
    numbers (``ub_*``) for its prose."""
    assert bool((tests.ci_high < 0).all())                 # every comparison resolved
    sd = df.groupby("task")["std"].max()
    hw = spread.groupby("task")["95% CI half-width"].agg(["min", "max"])
    ratio = spread["binomial se over T"] / spread["95% CI half-width"]
    for name in tasks:
        glue(f"ub_hw_min_{name}", float(hw.loc[name, "min"]))
        glue(f"ub_hw_max_{name}", float(hw.loc[name, "max"]))
        glue(f"ub_sd_max_{name}", float(sd[name]))
        glue(f"ub_T_{name}", int(tasks[name].T))
    glue("ub_ratio_min", float(ratio.min()))
    glue("ub_ratio_max", float(ratio.max()))
    glue("ub_ratio_max_mmlu", float(ratio[spread.task == "mmlu"].max()))
    agree = (compare["half-width paired"] / compare["half-width Welch"] - 1).abs().max()
    need = compare.groupby("task")["runs paired"].agg(["min", "max"])
    slow = compare[compare["runs paired"] > 2 * need["min"].max()]
    glue("ub_agree_pct", 100 * float(agree))
    glue("ub_corr_max", float(compare["corr"].abs().max()))
    for name in tasks:
        lo, hi = int(need.loc[name, "min"]), int(need.loc[name, "max"])
        glue(f"ub_need_min_{name}", lo)
        glue(f"ub_need_max_{name}", hi)
        glue(f"ub_need_{name}", f"{lo}" if lo == hi else f"{lo} to {hi}")
    slow_text = "; ".join(f"{r['policy']} on {r['task']} at alpha_1 = {r['alpha1']:.1f}: "
                          f"{r['runs paired']} runs" for _, r in slow.iterrows())
    glue("ub_need_slow", slow_text or "none")
    glue("ub_n_tests", len(tests))
    glue("ub_runs", int(runs))
    glue("ub_n_all_imagenet16h", int(n_all["imagenet16h"]))
    glue("ub_n_all_mmlu", int(n_all["mmlu"]))


# --- beyond_regret: regret against the optimal constrained policy ----------------

#: Column names of the regret chapter's summary: the Lagrangian regret per task and
#: the paper's modified regret (App. G) at the end of the stream.
REGRET_COLUMNS = (r"$\mathrm{Reg}^\lambda_T / T$", r"$\widetilde{\mathrm{Reg}}_T$")


def synthetic_oracle(task, capacities, grid):
    """The optimal constrained assignment (``capassign.optimal_assignment``) of a
    ``capassign.synthetic_task`` on its context distribution: x uniform on
    [-1, 1], discretised at the midpoints of ``grid`` equal cells."""
    x = (np.arange(grid) + 0.5) / grid * 2 - 1
    z = task.meta["intercepts"] + np.outer(x, task.meta["slopes"])
    mu_grid = 1 / (1 + np.exp(-z))
    return ca.optimal_assignment(mu_grid, capacities)


def print_oracle(oracle):
    """Print the oracle's shadow prices, their difference and its value."""
    lam = oracle.shadow_prices
    print(f"shadow prices lambda = {np.round(lam, 4)}, "
          f"lambda_1 - lambda_2 = {lam[0] - lam[1]:.4f}")
    print(f"optimal constrained accuracy v* = {oracle.value:.4f}, "
          f"random assignment {oracle.random_value:.4f}")


def plot_regret_curves(curves):
    """Figure: mean cumulative Lagrangian regret of the policies that do not learn
    mu (left) and of the contextual ones (middle), each with the known-mu rule, and
    the modified regret of App. G (right), on log-log axes."""
    import matplotlib.pyplot as plt

    fig, axes = book_figure(3, height=3.2)
    blind = [curves[p] for p in ("known-mu", "random", "marginal")]
    learn = [curves[p] for p in ("known-mu", *ca.CONTEXTUAL_POLICIES)]
    ca.plot_regret(blind, ax=axes[0], kind="lagrangian", legend=False,
                   title=r"$\mathrm{Reg}^\lambda_t$, no context")
    ca.plot_regret(learn, ax=axes[1], kind="lagrangian", legend=False,
                   title=r"$\mathrm{Reg}^\lambda_t$, contextual")
    ca.plot_regret([c for p, c in curves.items() if p != "known-mu"], ax=axes[2],
                   kind="modified", legend=False,
                   title=r"$\widetilde{\mathrm{Reg}}_t$ (App. G)")
    for ax in axes[1:]:
        ax.set_ylabel("")
    axes[0].set_ylabel("cumulative regret")
    for ax in axes[::2]:            # one x-axis title, under the middle panel
        ax.set_xlabel("")
    legend_outside(fig, "all", ncol=4)
    plt.show()


def regret_summary(curves, sims, *, T, runs, capacities, eta):
    """Per policy: error, Lagrangian regret per task, its log-log slope, the excess
    over the known-mu rule and its slope, the modified regret and its slope; shows
    the table and returns it (indexed by policy; slopes as text, ``n/a`` where a
    curve is not positive, ``-`` for the known-mu rule)."""
    import pandas as pd

    def slope(y):
        t = np.unique(np.rint(np.geomspace(T // 100, T, 50)).astype(int))
        return f"{ca.loglog_slope(y):.2f}" if np.all(y[t - 1] > 0) else "n/a"

    REG, MOD = REGRET_COLUMNS
    known = curves["known-mu"].lagrangian
    rows = []
    for p, c in curves.items():
        lag, mod = c.mean("lagrangian"), c.mean("modified")
        excess = (c.lagrangian - known).mean(axis=0)
        learns = p != "known-mu"
        rows.append({"policy": p, "error": sims[p].error, REG: lag[-1] / T,
                     "slope": slope(lag), "excess": excess[-1],
                     "slope (excess)": slope(excess) if learns else "-",
                     MOD: mod[-1], "slope (modified)": slope(mod) if learns else "-"})
    summary = pd.DataFrame(rows).set_index("policy")
    caption = (f"$T = {T}$, {runs} runs, $\\alpha = {capacities}$, $\\eta = {eta}$; "
               r"excess: $\mathrm{Reg}^\lambda_T$ minus the known-$\mu$ rule's; slopes of "
               rf"$\log$ regret against $\log t$, fitted over $t \in [{T // 100}, {T}]$")
    _show(show_table(summary, digits=4, formats={"excess": 1, MOD: 1}, caption=caption))
    return summary


def _regret_slopes(summary):
    learners = list(ca.CONTEXTUAL_POLICIES)
    lag_slopes = [float(v) for v in summary["slope"] if v != "n/a"]
    ex_slopes = [float(summary.loc[p, "slope (excess)"]) for p in learners
                 if summary.loc[p, "slope (excess)"] not in ("n/a", "-")]
    return learners, lag_slopes, ex_slopes


def check_regret_slopes(summary):
    """Print the range of the regret slopes and the contextual policies' excess;
    check that every regret is essentially linear and learning's cost sublinear."""
    learners, lag_slopes, ex_slopes = _regret_slopes(summary)
    say(f"slopes of Reg^lambda: {min(lag_slopes):.2f} to {max(lag_slopes):.2f}; "
        f"excess of the contextual policies at T: "
        f"{summary.loc[learners, 'excess'].min():.1f} to "
        f"{summary.loc[learners, 'excess'].max():.1f}, slopes {ex_slopes}")
    assert min(lag_slopes) > 0.8                      # essentially linear for every policy
    assert all(v < 0.9 for v in ex_slopes)            # learning's cost grows sublinearly


def known_mu_table(rows, lam):
    """Show the known-mu rule's regret, adherence and price tracking per eta."""
    import pandas as pd

    fmt = {"eta": lambda v: f"{v:g}", "max tasks off (worst run)": 1, r"max $Q_1$": 1}
    return show_table(pd.DataFrame(rows), digits=4, index=False, formats=fmt,
                      caption=r"Known-$\mu$ queue rule, $\lambda_1 - \lambda_2 = "
                              f"{lam[0] - lam[1]:.4f}$")


def plot_price_groups(trackings):
    """Figure: eta (Q_1 - Q_2) over the stream against the shadow-price difference,
    one panel per group of policies, each with the known-mu rule."""
    import matplotlib.pyplot as plt

    by_policy = {pt.policy: pt for pt in trackings}
    groups = [("greedy policies", ["logistic-greedy", "tree-greedy"]),
              ("Thompson sampling", ["logistic-ts", "tree-ts"]),
              ("learned marginal", ["marginal"])]
    fig, axes = book_figure(3, sharey=True, height=3.2)
    for ax, (title, group) in zip(axes, groups):
        shown = [by_policy["known-mu"], *(by_policy[p] for p in group)]
        ca.plot_price_tracking(shown, ax=ax, title=title, legend=False)
    for ax in axes[::2]:            # one x-axis title, under the middle panel
        ax.set_xlabel("")
    for ax in axes[1:]:
        ax.set_ylabel("")
    legend_outside(fig, "all", ncol=3)
    plt.show()


def plot_known_tracking(trackings_known, etas_known, lam, T):
    """Figure: the known-mu rule's eta (Q_1 - Q_2) at several penalties against the
    shadow-price difference."""
    import matplotlib.pyplot as plt

    fig, ax = book_figure()
    t = np.unique(np.rint(np.geomspace(1, T, 200)).astype(int))
    for (pt, e), ls in zip(zip(trackings_known, etas_known), ["-", "--", "-.", ":"] * 3):
        ax.plot(t, pt.tracked[t - 1, 0], ls=ls, label=rf"known $\mu$, $\eta = {e}$")
    ax.axhline(lam[0] - lam[1], color="k", ls="--", lw=2,
               label=r"$\lambda_1 - \lambda_2$")
    ax.set_xscale("log")
    ax.set_xlabel("tasks assigned, $t$")
    ax.set_ylabel(r"$\eta\,(Q_{t,1} - Q_{t,2})$")
    ax.grid(alpha=0.3, which="both")
    legend_outside(fig, ncol=4)
    plt.show()


def check_price_tracking(trackings, trackings_known, lam):
    """Check that the queues settle a little below the shadow-price difference, and
    closest at the smallest penalty; say so."""
    tail = {pt.policy: pt.tail_mean[0] for pt in trackings}
    gap = lam[0] - lam[1]
    assert all(tail[p] < gap for p in ["known-mu", *ca.CONTEXTUAL_POLICIES])   # a bit below
    below = [gap - pt.tail_mean[0] for pt in trackings_known]
    assert below[-1] < below[0]       # the smallest penalty sits closest to the price
    print("checked: the known-mu rule and every contextual policy settle a little below "
          "the\n  shadow-price difference, and the smallest penalty sits closest to it")


def glue_regret(*, summary, oracle, trackings, T, eta, capacities):
    """Glue the regret chapter's numbers (``rg_*``) for its prose."""
    REG = REGRET_COLUMNS[0]
    learners, lag_slopes, ex_slopes = _regret_slopes(summary)
    glue("rg_slope_min", min(lag_slopes))
    glue("rg_slope_max", max(lag_slopes))
    glue("rg_known_loss", float(summary.loc["known-mu", REG]))
    glue("rg_excess_max", float(summary.loc[learners, "excess"].max()))
    glue("rg_excess_slope_max", max(ex_slopes))
    glue("rg_T", int(T))
    glue("rg_random_loss", float(summary.loc["random", REG]))
    glue("rg_marginal_loss", float(summary.loc["marginal", REG]))
    glue("rg_vgap", float(oracle.value - oracle.random_value))
    glue("rg_eta", float(eta))
    glue("rg_up", round(1 - capacities[0], 12))
    glue("rg_down", float(capacities[0]))
    glue("rg_jump", float(eta * (1 - capacities[0])))
    lam = oracle.shadow_prices
    tail = {pt.policy: pt.tail_mean[0] for pt in trackings}
    glue("rg_gap", float(lam[0] - lam[1]))
    glue("rg_tail_known", float(tail["known-mu"]))
    glue("rg_tail_marginal", float(tail["marginal"]))


# --- beyond_changes: graded rewards, drifting expertise, changing teams ----------


def drift_stream(task, n_items, seed, s):
    """A stream of ImageNet-16H's items (20 random passes, seeded by ``[seed, s]``)
    in which VGG-19 (agent 2) keeps each correct answer on the two cleanest noise
    levels with probability 0.5 from the middle of the stream on.

    Returns
    -------
    X, R : numpy.ndarray
        Contexts and rewards of the stream.
    clean : numpy.ndarray of bool
        The tasks of the two cleanest levels.
    """
    rng = np.random.default_rng([seed, s])
    idx = np.concatenate([rng.permutation(n_items) for _ in range(20)])
    R = task.R[idx].copy()
    clean = task.meta["noise_level"][idx] <= 95
    late = np.arange(len(idx)) >= len(idx) // 2
    R[late & clean, 1] *= rng.random((late & clean).sum()) < 0.5
    return task.X[idx], R, clean


def route_stream(task, X, R, *, discount, seed):
    """Route the stream ``X``, ``R`` with a tree-greedy ``capassign.Router`` of the
    human and VGG-19 at capacities 0.5 each, the paper's eta and the forgetting
    factor ``discount``; return the agent index of every task."""
    r = ca.Router(["human", "VGG-19"], [0.5, 0.5], "tree-greedy", X_reference=task.X,
                  eta=ca.PAPER_ETA, seed=seed, settings=ca.ModelSettings(discount=discount))
    agents = []
    for t, x in enumerate(X):
        a = r.agents.index(r.assign(x))
        r.update(t, None, R[t, a])
        agents.append(a)
    return np.array(agents)


def _rolling(v, w=200):
    return np.convolve(v, np.ones(w) / w, mode="valid")


def _at_end(v, w=200):                  # each window plotted at its last task
    return np.arange(w - 1, w - 1 + len(v)), v


def _finish_over_tasks(fig, axes, labels, t_change, *, ncol):
    """Label two panels drawn against the task index, mark the task where the stream
    changes, put the first panel's legend outside and show the figure."""
    import matplotlib.pyplot as plt

    for ax, label in zip(axes, labels):
        ax.axvline(t_change, color="grey", ls=":", lw=1)
        ax.set_xlabel("task")
        ax.set_ylabel(label)
    legend_outside(fig, axes[0], ncol=ncol)
    plt.show()


def plot_drift(drift, discount, seeds):
    """Figure: running error and the share of the cleanest images sent to VGG-19
    over the drifting stream, without and with forgetting."""
    T2 = len(drift[1.0, 0][1]) // 2
    fig, (ax1, ax2) = book_figure(2, height=3.2)
    for g, style in ((1.0, "-"), (discount, "--")):
        err = np.mean([_rolling(drift[g, s][0]) for s in range(seeds)], axis=0)
        clean_vgg = np.mean([_rolling(drift[g, s][1] * drift[g, s][2])
                             / _rolling(drift[g, s][2]) for s in range(seeds)], axis=0)
        ax1.plot(*_at_end(err), style, label=f"discount {g}")
        ax2.plot(*_at_end(clean_vgg), style, label=f"discount {g}")
    _finish_over_tasks(fig, (ax1, ax2), ("running error", "VGG-19 share, clean images"), T2,
                       ncol=2)


def drift_summary(drift, discount, seeds):
    """Show and return, per discount, the mean error before the drift, over the
    1,000 tasks after it, and VGG-19's share after it."""
    import pandas as pd

    T2 = len(drift[1.0, 0][1]) // 2

    def mean_over_seeds(g, k, part):
        return np.mean([drift[g, s][k][part].mean() for s in range(seeds)])

    summary = pd.DataFrame([
        {"discount": g, "error before": mean_over_seeds(g, 0, slice(None, T2)),
         "error, 1,000 after": mean_over_seeds(g, 0, slice(T2, T2 + 1000)),
         "VGG-19 share after": mean_over_seeds(g, 1, slice(T2, None))}
        for g in (1.0, discount)])
    _show(show_table(summary, index=False, caption=f"Tree router, mean of {seeds} streams"))
    return summary


def plot_join(joins):
    """Figure: each agent's share of the last 100 tasks and the virtual queues when a
    third agent joins half-way."""
    half = len(joins[0][0]) // 2
    fig, (ax1, ax2) = book_figure(2, height=3.2)
    for a, name in enumerate("ABC"):
        share = np.mean([_rolling(ag == a, 100) for ag, _ in joins], axis=0)
        ax1.plot(*_at_end(share, 100), label=f"agent {name}")
        ax2.plot(np.mean([q[:, a] for _, q in joins], axis=0), label=f"agent {name}")
    for cap, (t0, t1) in ((0.5, (0, half)), (0.4, (half, 2 * half)),
                          (0.2, (half, 2 * half))):
        ax1.plot([t0, t1], [cap, cap], color="grey", lw=0.8)
    _finish_over_tasks(fig, (ax1, ax2), ("share (last 100 tasks)", "queue Q"), half, ncol=3)


def _changes_numbers(drift, joins, discount, seeds, tail=400):
    half = len(joins[0][0]) // 2
    T2 = len(drift[1.0, 0][1]) // 2
    assert tail <= half
    join_share = np.mean([(ag[-tail:] == 2).mean() for ag, _ in joins])
    share_gap = max(abs(drift[g, s][1][T2:].mean() - 0.5) for g in (1.0, discount)
                    for s in range(seeds))
    return join_share, share_gap


def check_changes(drift, joins, summary, *, discount, seeds):
    """Check the chapter's findings: the joining agent reaches its share, the
    capacities hold under drift and forgetting lowers the error after the drift."""
    join_share, share_gap = _changes_numbers(drift, joins, discount, seeds)
    assert abs(join_share - 0.2) < 0.02 and share_gap < 0.01
    assert summary["error, 1,000 after"].iloc[1] < summary["error, 1,000 after"].iloc[0]
    print("checked: the joining agent takes its share, both drift routers keep the "
          "capacities,\n  and forgetting errs less after the drift")


def glue_changes(graded, drift, joins, summary, *, discount, seeds):
    """Glue the chapter's numbers (``bg_*``) for its prose."""
    tail = 400                    # tasks after the join, at the end of the streams
    join_share, share_gap = _changes_numbers(drift, joins, discount, seeds, tail)
    window = 1000                 # the tasks after the change of the drift table
    glue("bg_graded_gain", float(graded["change"].mean()))
    glue("bg_drift_err_keep", float(summary["error, 1,000 after"].iloc[0]))
    glue("bg_drift_err_forget", float(summary["error, 1,000 after"].iloc[1]))
    glue("bg_drift_share_gap", float(share_gap))
    glue("bg_join_share", float(join_share))
    glue("bg_join_tail", int(tail))
    glue("bg_discount", float(discount))
    glue("bg_window", int(window))
    glue("bg_join_cap", 0.2)
    glue("bg_graded_worst", float(graded["change"].max()))


# --- beyond_capacity: how well are the capacities kept? --------------------------

#: The tasks of the capacity chapter.
CAPACITY_TASKS = ("imagenet16h", "mmlu")


def plot_adherence(adherence, alpha1=0.2):
    """Figure: the running deviation from the capacities at ``alpha1``, per task
    (rows), queue-based policies (left) and policies without queues (right), on
    log-log axes with guides falling like 1/t and 1/sqrt(t)."""
    import matplotlib.pyplot as plt

    groups = [("queue-based", ["marginal", *ca.CONTEXTUAL_POLICIES]),
              ("no queues", ["random", *ca.OFFLINE_POLICIES])]
    fig, axes = book_figure(2, 2, height=6.0, sharey=True)
    for row, name in zip(axes, CAPACITY_TASKS):
        for ax, (what, group) in zip(row, groups):
            items = [adherence[name, alpha1, p] for p in group]
            ca.plot_capacity_adherence(items, ax=ax, title=f"{name}, {what}", legend=False)
            T = items[0].deviation_curve.shape[0]
            t = np.array([10, T])
            ax.plot(t, 3 / t, color="0.45", ls="-", lw=0.8, alpha=0.5)
            ax.plot(t, 0.5 / np.sqrt(t), color="0.45", ls="-", lw=0.8, alpha=0.5)
            ax.text(T, 3 / T, r" $1/t$", va="center", color="0.45")
            ax.text(T, 0.5 / np.sqrt(T), r" $1/\sqrt{t}$", va="center", color="0.45")
        row[1].set_ylabel("")
    for ax in axes[0]:              # the x-axis titles once, under the bottom row
        ax.set_xlabel("")
    legend_outside(fig, "all", ncol=2)
    plt.show()


def adherence_tables(adherence, alphas, policies, *, eta, runs, burn_in):
    """Show the most tasks any policy is off the capacities (worst run and
    capacity), then (folded) every task, capacity and policy."""
    import pandas as pd
    from .present import adherence_table

    worst = pd.DataFrame({name: {p: max(adherence[name, a1, p].max_count_deviation.max()
                                        for a1 in alphas) for p in policies}
                          for name in CAPACITY_TASKS})
    worst.index.name = "policy"
    _show(show_table(worst, digits=1,
                     caption="Most tasks off the capacities at any point "
                             f"(worst of {runs} runs and {len(alphas)} capacities)"))
    tab = adherence_table(adherence.values())
    for name in CAPACITY_TASKS:
        _show(show_table(tab[tab.task == name].drop(columns="task"), index=False,
                         fold=True, caption=f"{name}: $\\eta = {eta}$, {runs} runs, "
                                            f"burn-in {burn_in} decisions"))


def worst_deviations(adherence, alphas):
    """Per task, the most tasks off at any point of any run for the queue-based
    policies and for random assignment; printed, and returned as two dicts."""
    online = ["marginal", *ca.CONTEXTUAL_POLICIES]
    worst_online = {name: max(adherence[name, a1, p].max_count_deviation.max()
                              for a1 in alphas for p in online)
                    for name in CAPACITY_TASKS}
    worst_random = {name: max(adherence[name, a1, "random"].max_count_deviation.max()
                              for a1 in alphas) for name in CAPACITY_TASKS}
    for name in worst_online:
        say(f"{name}: queue-based policies are never more than {worst_online[name]:.1f} "
            f"tasks off their share; random assignment up to {worst_random[name]:.1f}")
    return worst_online, worst_random


def print_end_deviation(adherence, policies, alpha1=0.2):
    """Print each policy's running deviation at the end of the stream at ``alpha1``."""
    for name in CAPACITY_TASKS:
        end = {p: adherence[name, alpha1, p].deviation_curve[-1] for p in policies}
        say(f"{name}, alpha_1 = {alpha1}, deviation at t = T: "
            + ", ".join(f"{p} {v:.4f}" for p, v in end.items()))


def check_capacity(worst_online, worst_random):
    """Check that the queue-based policies are at most a few tasks off and random
    assignment more than twice as far; say so."""
    for name in CAPACITY_TASKS:
        assert worst_online[name] < 10                   # "a few tasks" at most
        assert worst_random[name] > 2 * worst_online[name]
    print("checked: the queue-based policies are never ten tasks off their share, "
          "and random\n  assignment's worst run is more than twice as far off")


def glue_capacity(worst_online, worst_random, alphas, *, runs):
    """Glue the capacity chapter's numbers (``bc_*``) for its prose."""
    T_of = {name: ca.load_task(name).T for name in CAPACITY_TASKS}
    glue("bc_worst_online_imagenet", float(worst_online["imagenet16h"]))
    glue("bc_worst_online_mmlu", float(worst_online["mmlu"]))
    glue("bc_worst_random_imagenet", float(worst_random["imagenet16h"]))
    glue("bc_worst_random_mmlu", float(worst_random["mmlu"]))
    glue("bc_T_imagenet", int(T_of["imagenet16h"]))
    glue("bc_T_mmlu", int(T_of["mmlu"]))
    glue("bc_runs", int(runs))
    glue("bc_n_alphas", len(alphas))
