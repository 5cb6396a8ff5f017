"""The stored spreads of the paper's Table 4 (``book/results/table4_spreads.json``).

The file is written by ``python -m capbook table4-spreads`` (about an hour on one
core) and holds, for every construction seed matched to a row of Table 4
(``capbook.table4_matched_seeds``), the per-run errors of the table's three
policies under both codings of the contexts.  These tests check that the file
is intact, describes the matched seeds of the library as it is now, and that a
seeded sample of its cells comes back exactly.
"""
import json

import numpy as np
import pytest

import capassign as ca
import capbook as cb



@pytest.fixture(scope="module")
def stored():
    return cb.read_table4_spreads()


def test_file_is_complete_for_every_matched_seed(stored):
    st = stored["settings"]
    assert st["runs"] == cb.TABLE4_RUNS == 10 and st["capacities"] == [0.5, 0.5]
    assert st["policies"] == list(cb.TABLE4_POLICIES)
    assert set(stored["tasks"]) == set(ca.TABULAR_TASKS)
    for name, rec in stored["tasks"].items():
        m = cb.table4_matched_seeds(name)
        seeds = {str(s) for s in m.seed}
        for coding in ca.CONTEXT_CODINGS:
            cells = rec["codings"][coding]
            assert set(cells) == seeds
            for cell in cells.values():
                assert set(cell["errors"]) == set(cb.TABLE4_POLICIES)
                assert all(len(v) == st["runs"] for v in cell["errors"].values())
        # same agents under both codings: same accuracies and the same random assignment
        for s in seeds:
            a, b = rec["codings"]["typed"][s], rec["codings"]["codes"][s]
            assert a["accuracies"] == b["accuracies"]
            assert a["errors"]["random"] == b["errors"]["random"]
    df = cb.spreads_errors(stored)
    assert len(df) == 2 * 3 * sum(len(set(cb.table4_matched_seeds(n).seed))
                                  for n in ca.TABULAR_TASKS)


def test_edited_file_is_rejected(stored, tmp_path):
    bad = json.loads(json.dumps(stored))
    cells = bad["tasks"]["coupon"]["codings"]["typed"]
    first = sorted(cells)[0]
    cells[first]["errors"]["tree-greedy"][0] += 0.001
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(ValueError, match="checksum"):
        cb.read_table4_spreads(path)


def test_stored_cells_come_back_exactly(stored):
    """One seeded (Coupon seed, coding) pair: its task's data hash and its three policies'
    runs are recomputed (Coupon's short stream keeps this quick)."""
    rng = np.random.default_rng(20261126)
    rec = stored["tasks"]["coupon"]
    s = sorted(rec["codings"]["typed"], key=int)[int(rng.integers(len(rec["codings"]["typed"])))]
    coding = ca.CONTEXT_CODINGS[int(rng.integers(2))]
    cell = rec["codings"][coding][s]
    try:
        task = ca.load_task("coupon", int(s), coding=coding)
    except ca.DataUnavailable as exc:
        pytest.skip(f"real data unavailable: {exc}")
    assert ca._task_digest(task.X, task.R) == cell["digest"]
    df = cb.table4_seed_errors("coupon", [int(s)], coding=coding)
    for r in df.itertuples():
        assert [float(e) for e in r.errors] == cell["errors"][r.policy], (s, coding, r.policy)


def test_spreads_of_the_stored_errors(stored):
    sp = cb.table4_spreads(cb.spreads_errors(stored))
    assert len(sp) == len(ca.TABULAR_TASKS) * len(ca.CONTEXT_CODINGS) * 5 * 3
    has = sp[sp.seeds > 0]
    assert ((has.low <= has["median"]) & (has["median"] <= has.high)).all()
    assert (has.inside == ((has.low <= has.paper) & (has.paper <= has.high))).all()
    assert ((has.percentile >= 0) & (has.percentile <= 100)).all()
