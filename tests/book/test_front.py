"""The front page's figure of what holds reads the right numbers (capbook.front).

Our gains are read back from the paired tests the experiment chapters printed;
these tests check the reader on a synthetic notebook (and that it refuses one
without the table), that the gains it reads from the stored chapters are the
differences of the mean error curves the tabular chapter glued, and that the
paper's gains are its Table 4's seed-2 row.
"""

import json

import numpy as np
import pytest

import capassign as ca
import capbook as cb

TABLE = """(b) Bank: error difference, contextual policy - random, over 100 paired runs
             policy $\\alpha_1$     diff              95% CI    p (t) p (Wilcoxon) p (Holm)      won/lost
0   logistic-greedy        0.5  -0.0696  [-0.0703, -0.0690]  <0.0001      <0.0001  <0.0001  100/0 of 100
1       tree-greedy        0.5  +0.0012  [-0.0001, +0.0025]   0.0700       0.0800   0.0900  40/50 of 100"""


def _notebook(tmp_path, *texts):
    cells = [{"cell_type": "code", "metadata": {}, "source": "", "execution_count": 1,
              "outputs": [{"output_type": "execute_result", "execution_count": 1, "metadata": {},
                           "data": {"text/plain": t}} for t in texts]}]
    path = tmp_path / "x.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4,
                                "nbformat_minor": 5}), encoding="utf-8")
    return path


def test_paired_tables_are_read_back(tmp_path):
    path = _notebook(tmp_path, "unrelated output", TABLE)
    t = cb.stored_paired_tests("x", {"bank": "Bank"}, path=path)
    assert t.to_dict("records") == [
        dict(task="bank", policy="logistic-greedy", alpha1=0.5, diff=-0.0696, low=-0.0703,
             high=-0.069),
        dict(task="bank", policy="tree-greedy", alpha1=0.5, diff=0.0012, low=-0.0001,
             high=0.0025)]


def test_a_missing_or_repeated_table_is_refused(tmp_path):
    with pytest.raises(ValueError, match="printed 0 paired-test tables of 'Credit'"):
        cb.stored_paired_tests("x", {"credit": "Credit"}, path=_notebook(tmp_path, TABLE))
    with pytest.raises(ValueError, match="printed 2 paired-test tables of 'Bank'"):
        cb.stored_paired_tests("x", {"bank": "Bank"}, path=_notebook(tmp_path, TABLE, TABLE))


def test_the_gains_are_the_glued_curves_and_the_papers_table():
    holds = cb.what_holds()
    g = holds.gains.set_index(["label", "policy"])
    curves = cb.glued_values("exp_tabular")["tab_curves"]
    k = curves["alphas"].index(cb.FRONT_ALPHA)
    for name in ca.TABULAR_TASKS:
        label, errors = cb.FRONT_TASKS[name][0], curves["tasks"][name]
        for j, policy in enumerate(cb.FRONT_POLICIES, start=1):
            row = g.loc[(label, policy)]
            # both rounded to four decimals: the paired mean difference is the
            # difference of the means
            assert abs(row.ours - (errors["random"][k] - errors[policy][k])) <= 2e-4, (name, policy)
            assert row.low <= row.ours <= row.high
            paper = ca.PAPER_TABLE4[name][cb.PAPER_SEED]
            assert row.paper == pytest.approx(paper[0] - paper[j], abs=1e-12)
    assert g.loc[["MMLU", "ImageNet-16H"], "paper"].isna().all()


def test_the_verdicts_are_drawn_in_the_scorecards_colours():
    import matplotlib.pyplot as plt

    holds = cb.what_holds()
    colours = cb.verdict_colours()
    fig, axes = holds.figure()
    try:
        drawn = [t.get_bbox_patch() for ax in axes[1:] for t in ax.texts]
        assert len(drawn) == 2 * len(cb.FRONT_TASKS)
        faces = {tuple(np.round(p.get_facecolor()[:3], 3)) for p in drawn}
        allowed = {tuple(np.round([int(c[i:i + 2], 16) / 255 for i in (1, 3, 5)], 3))
                   for c, _, _ in colours.values()}
        assert faces <= allowed, faces
        assert cb.legend_overlaps(fig) == []
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match="no colours for the badge class 'sc-result'"):
        cb.verdict_colours("/* no badges */")
