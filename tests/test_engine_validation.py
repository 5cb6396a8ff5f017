"""The stored comparison of the fast and reference engines on the tabular tasks.

``book/results/engine_validation.json`` is written by ``python -m capassign
validate-engines`` (about an hour on one core) and read by the fast_engine
chapter.  These tests check that the file is intact and computed on the data
as it is now, and re-run a seeded sample of its paired runs on both engines:
every stored number must come back exactly.
"""
import json

import numpy as np
import pytest

import capassign as ca


def _or_skip(fn, *args, **kw):
    try:
        return fn(*args, **kw)
    except ca.DataUnavailable as exc:
        pytest.skip(f"real data unavailable: {exc}")


@pytest.fixture(scope="module")
def stored():
    return json.loads(ca.ENGINE_VALIDATION_PATH.read_text(encoding="utf-8"))


def test_file_checksum_and_grid(stored):
    obj = ca.read_engine_validation(check_data=False)
    st = obj["settings"]
    assert set(obj["tasks"]) == set(ca.TABULAR_TASKS)
    assert st["policies"] == list(ca.ONLINE_POLICIES)
    cells = [(c["task"], c["policy"], c["alpha1"]) for c in obj["cells"]]
    missing = [tuple(m) for m in obj["missing"]]     # cells not computed yet, if any
    assert len(set(cells + missing)) == len(cells) + len(missing)
    assert set(cells + missing) == {(t, p, a) for t in ca.TABULAR_TASKS
                                    for p in ca.ONLINE_POLICIES for a in st["alphas"]}
    for c in obj["cells"]:
        assert st["pilot"] <= c["runs"] <= st["max_runs"]
        for e in ca.ENGINES:
            assert len(c[e]["errors"]) == len(c[e]["share1"]) == c["runs"]


def test_edited_file_is_rejected(stored, tmp_path):
    bad = json.loads(json.dumps(stored))
    bad["cells"][0]["fast"]["errors"][0] += 0.001
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(ValueError, match="checksum"):
        ca.read_engine_validation(path, check_data=False)


def test_data_hashes_match_the_tasks(stored):
    _or_skip(ca.read_engine_validation, check_data=True)


def test_summary_table():
    df = _or_skip(ca.engine_validation)
    n_missing = len(ca.read_engine_validation(check_data=False)["missing"])
    assert len(df) == len(ca.TABULAR_TASKS) * len(ca.ONLINE_POLICIES) * 3 - n_missing
    assert ((df.ci_low <= df["diff"]) & (df["diff"] <= df.ci_high)).all()
    assert ((df.p >= 0) & (df.p <= df.holm) & (df.holm <= 1)).all()
    # the deterministic policies take the same decisions on both engines
    det = df[df.policy.isin(["marginal", "logistic-greedy"])]
    assert (det["diff"].abs() < 1e-12).all()


def _sample(cells, rng, policies, k):
    pool = [c for c in cells if c["policy"] in policies]
    picks = []
    for i in rng.choice(len(pool), size=k, replace=False):
        c = pool[i]
        picks.append((c, int(rng.integers(c["runs"]))))
    return picks


def test_stored_runs_come_back_exactly(stored):
    """A seeded sample of the stored runs (four logistic or random, one tree;
    the tree run on Bank or Cardio, whose fewer features keep this quick)."""
    rng = np.random.default_rng(20261123)
    st = stored["settings"]
    cells = stored["cells"]
    picks = _sample(cells, rng, ("random", "logistic-greedy", "logistic-ts", "marginal"), 4)
    trees = [c for c in cells if c["policy"].startswith("tree")]
    small = [c for c in trees if c["task"] in ("bank", "cardio")]   # fewer features: quicker
    trees = small or trees
    c = trees[int(rng.integers(len(trees)))]
    picks.append((c, int(rng.integers(c["runs"]))))
    for c, r in picks:
        task = _or_skip(ca._validation_task, c["task"], stored["tasks"][c["task"]])
        got = ca._validation_run(task, c["policy"], c["alpha1"], r, st["prefix"], st["seed"],
                                 st["eta"])
        for e in ca.ENGINES:
            assert got[e][0] == c[e]["errors"][r], (c["task"], c["policy"], c["alpha1"], r, e)
            assert got[e][1] == c[e]["share1"][r], (c["task"], c["policy"], c["alpha1"], r, e)


def test_validation_draw_is_paired_and_seeded():
    rows, s = ca._validation_draw(0, 3, 1000, 200)
    rows2, s2 = ca._validation_draw(0, 3, 1000, 200)
    assert np.array_equal(rows, rows2) and s == s2
    assert rows.size == 200 and np.unique(rows).size == 200 and np.all(np.diff(rows) > 0)
    assert not np.array_equal(rows, ca._validation_draw(0, 4, 1000, 200)[0])


def test_paired_power():
    # n = 34 pairs of sd 0.01 detect 0.005 with about 80% power (normal approx. 0.80)
    assert ca._paired_power(0.01, 34, 0.005) == pytest.approx(0.80, abs=0.02)
    assert ca._paired_power(0.0, 10, 0.005) == 1.0
    assert ca._runs_for_power(0.01, 0.005, 0.8, 0.05, 10, 200) in range(33, 36)
    assert ca._runs_for_power(0.05, 0.005, 0.8, 0.05, 10, 60) == 60


def test_bad_arguments():
    with pytest.raises(ValueError, match="tasks"):
        ca.validate_engines(tasks=["imagenet16h"])
    with pytest.raises(ValueError, match="policies"):
        ca.validate_engines(policies=["offline-tree"])
    with pytest.raises(ValueError, match="max_runs"):
        ca.validate_engines(pilot=10, max_runs=5)


def test_chunks_resume(tmp_path):
    """Cells are kept per task as they finish; a second call reuses them."""
    path = tmp_path / "ev.json"
    kw = dict(tasks=["coupon"], policies=["random"], alphas=[0.5], prefix=50, pilot=2,
              max_runs=3)
    said = []
    assert _or_skip(ca.validate_engines, path, out=said.append, **kw) is None
    part = tmp_path / "ev.json.coupon.partial"
    first = json.loads(part.read_text())
    assert len(first["cells"]) == 1 and not path.exists()
    said.clear()
    ca.validate_engines(path, out=said.append, **kw)
    assert said == ["coupon: resuming, 1 cells stored"]
    assert json.loads(part.read_text()) == first


def test_collect_lists_the_missing_cells(tmp_path):
    path = tmp_path / "ev.json"
    kw = dict(policies=["random"], alphas=[0.5], prefix=50, pilot=2, max_runs=3)
    _or_skip(ca.validate_engines, path, tasks=["coupon"], out=None, **kw)
    ca.validate_engines(path, collect=True, out=None, **kw)
    obj = ca.read_engine_validation(path, check_data=False)
    assert [c["task"] for c in obj["cells"]] == ["coupon"]
    assert obj["missing"] == [[t, "random", 0.5] for t in ("bank", "credit", "cardio")]
    assert (tmp_path / "ev.json.coupon.partial").exists()   # kept until the file is complete


def test_command_line_error(capsys):
    with pytest.raises(SystemExit) as exc:
        ca.main(["validate-engines", "--tasks", "mmlu"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("capassign validate-engines: error: --tasks")


def test_every_cell_meets_the_rule_with_all_its_runs(stored):
    """No stored cell stops while the rule, fed the sd of all its runs, asks for more."""
    st = stored["settings"]
    short = []
    for c in stored["cells"]:
        d = np.subtract(c["fast"]["errors"], c["reference"]["errors"])
        n = ca._runs_for_power(float(d.std(ddof=1)), st["diff"], st["power"], st["level"],
                               c["runs"], st["max_runs"])
        if n > c["runs"] or len(d) != c["runs"]:
            short.append((c["task"], c["policy"], c["alpha1"], c["runs"], n))
    assert not short, short
