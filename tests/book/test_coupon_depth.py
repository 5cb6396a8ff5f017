"""Coupon's tree depth (``book/results/coupon_depth.json``, ``python -m capbook coupon-depth``).

The file holds paired runs of logistic greedy and tree greedy at depths 3 and 5
on Coupon at the interior capacities of the paper's grid.  These tests check that
it is intact, that its depth-3 runs are those of ``exp_tabular`` (whose stored
tree-minus-logistic gap they give again), and that the gap and its paired
standard error are computed as stated.
"""
import json

import numpy as np
import pytest

import capbook as cb


@pytest.fixture(scope="module")
def stored():
    return cb.read_coupon_depth()


def test_file_is_complete(stored):
    st = stored["settings"]
    assert st == json.loads(json.dumps(cb.depth_settings()))
    assert sorted(stored["errors"]) == sorted(str(a) for a in st["alphas"])
    for cell in stored["errors"].values():
        assert set(cell) == {"logistic-greedy", "tree-greedy-depth3", "tree-greedy-depth5"}
        assert all(len(v) == st["runs"] for v in cell.values())


def test_depth3_runs_are_those_of_exp_tabular(stored):
    """The paper's depth gives exp_tabular's stored gap again: same runs, same settings."""
    gaps = cb.depth_gaps(stored)
    tab = cb.glued_values("exp_tabular")["tab_coupon_tree_minus_log"]
    assert gaps.loc[3, "gap"] == pytest.approx(tab, rel=1e-6)


def test_edited_file_is_rejected(stored, tmp_path):
    bad = json.loads(json.dumps(stored))
    bad["errors"]["0.5"]["tree-greedy-depth5"][0] += 0.001
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(ValueError, match="checksum"):
        cb.read_coupon_depth(path)


def test_gap_and_paired_standard_error():
    """Injected runs: per-run gaps averaged over capacities, then their mean and its SE."""
    log = [0.30, 0.32, 0.31]
    obj = {"settings": {"depths": [3]},
           "errors": {"0.2": {"logistic-greedy": log, "tree-greedy-depth3": [0.31, 0.32, 0.33]},
                      "0.5": {"logistic-greedy": log, "tree-greedy-depth3": [0.30, 0.33, 0.31]}}}
    g = cb.depth_gaps(obj)
    per_run = np.array([0.005, 0.005, 0.01])
    assert g.loc[3, "gap"] == pytest.approx(per_run.mean())
    assert g.loc[3, "se"] == pytest.approx(per_run.std(ddof=1) / np.sqrt(3))
    assert g.loc[3, "runs"] == 3
