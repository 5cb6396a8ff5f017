"""The reproduction scorecard (book/scorecard.yml, chapter ``scorecard``).

Every verdict is recomputed here from the committed executed notebooks and
the item list, without re-executing anything, and compared with the verdict
committed next to the item (``expect:``): the test fails when a verdict
changes, e.g. because a chapter was re-run and now stores another value.

After an intended change (a chapter re-run, or a chapter that now stores a
value listed under ``needs:``), run ``python tests/book/test_scorecard.py --update``
(it switches stored ``needs:`` names to ``ours:`` and rewrites the ``expect:``
lines), give every new "differs" a ``why:``, re-execute the scorecard chapter
and review the diff.
"""

import re
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

import capassign as ca
import capbook as cb

ITEMS_PATH = cb.ROOT / "book" / "scorecard.yml"
VERDICTS = cb.VERDICTS
KINDS = (*cb.SCORECARD_TOL, "range", "claim")
TASK_LABELS = {"bank": "Bank", "credit": "Credit", "coupon": "Coupon", "cardio": "Cardio",
               "mmlu": "MMLU", "imagenet16h": "ImageNet-16H"}


def load_items(path=ITEMS_PATH):
    return yaml.safe_load(Path(path).read_text(encoding="utf-8"))


def current_verdicts(items):
    values = {ch: cb.glued_values(ch) for ch in {it["chapter"] for it in items}}
    return {it["id"]: cb.scorecard_verdict(it, values[it["chapter"]]) for it in items}


ITEMS = load_items()


def test_items_are_well_formed():
    ids = [it["id"] for it in ITEMS]
    assert len(ids) == len(set(ids)), "duplicate ids"
    chapters = set(cb.chapter_names())
    for it in ITEMS:
        assert {"id", "section", "where", "paper", "kind", "chapter", "expect"} <= set(it), it
        assert it["kind"] in KINDS, it
        assert it["chapter"] in chapters, it
        assert it["expect"] in VERDICTS, it
        assert it.get("basis", "result") in cb.ITEM_BASES, it
        assert it.get("cause", "unknown") in ("tested", "unknown"), it
        assert "inconclusive" not in it or it["kind"] == "claim", it
        sources = [k for k in ("ours", "needs", "not_rerun") if k in it]
        assert len(sources) == 1, f"{it['id']}: exactly one of ours / needs / not_rerun"
        if it["kind"] == "claim":
            assert isinstance(it["paper"], str), it
            assert "not_rerun" in it or "inconclusive" in it or re.fullmatch(
                r"(all of|most of|<|<=|>|>=|==) \S+|true", str(it.get("holds", ""))), it
        else:
            assert isinstance(it["paper"], (int, float)), it
    assert len(ITEMS) >= 80


def test_the_page_is_run_after_the_chapters_it_reads():
    """``python -m capbook reproduce`` runs a chapter after those named in its front
    matter ``reads``: the scorecard must name every chapter its items read."""
    import jupytext

    meta = jupytext.read(cb.CHAPTER_DIR / "scorecard.md").metadata["capassign"]
    # the items' chapters, and fast_engine (the power of the engine validation, stated)
    assert sorted(meta["reads"]) == sorted({it["chapter"] for it in ITEMS} | {"fast_engine"})
    assert meta["needs_data"] == []


def test_every_glue_name_marked_ours_exists():
    """``ours:`` names must be stored by their chapter; missing ones belong under ``needs:``."""
    for ch in {it["chapter"] for it in ITEMS}:
        stored = cb.glued_values(ch)
        missing = [it["id"] for it in ITEMS if it["chapter"] == ch and "ours" in it
                   and it["ours"] not in stored]
        assert not missing, f"{ch} does not store the values of {missing}"


def test_needs_that_are_now_stored_are_reported():
    """A ``needs:`` name the chapter now stores should be switched to ``ours:``."""
    stale = []
    for ch in {it["chapter"] for it in ITEMS}:
        stored = cb.glued_values(ch)
        stale += [it["id"] for it in ITEMS if it["chapter"] == ch and it.get("needs") in stored]
    assert not stale, f"switch needs: to ours: for {stale}"


def test_verdicts_match_the_committed_list():
    got = current_verdicts(ITEMS)
    changed = {it["id"]: (it["expect"], got[it["id"]][0]) for it in ITEMS
               if got[it["id"]][0] != it["expect"]}
    assert not changed, f"verdicts changed (expected, now): {changed}"


def test_every_difference_has_a_reason():
    """Every verdict that is not an agreement says why (ranges are context, not verdicts)."""
    for it in ITEMS:
        if it["kind"] == "range":
            continue
        if it["expect"] == "differs":
            assert it.get("why", "").strip(), f"{it['id']} differs without a reason"
        if it["expect"] == "inconclusive":
            assert (it.get("why") or it.get("inconclusive", "")).strip(), \
                f"{it['id']} is inconclusive without a reason"


def test_headline_counts_only_results():
    """Settings, matched values, substitutes, context, Camelyon17 and pending items never
    enter the count of results; no range item is a verdict; Table 4's seed-2 row is judged
    cell by cell against the matched agents with a standard error, its other rows only by
    their patterns."""
    kinds = {it["id"]: cb.verdict_kind(it, it["expect"]) for it in ITEMS}
    for it in ITEMS:
        if it.get("basis", "result") != "result":
            assert not kinds[it["id"]].startswith("result"), it["id"]
        if it["kind"] == "range":
            assert kinds[it["id"]] == "context only", it["id"]
    cells = [it for it in ITEMS if re.fullmatch(r"T4-\w+-s\d-(random|lg|tg)", it["id"])]
    ranges = [it for it in ITEMS if re.fullmatch(r"T4-\w+-s\d-(random|lg|tg)(-range)?", it["id"])
              and it["kind"] == "range"]
    assert len(cells) == 60 and len(ranges) == 60
    seed2 = [it for it in cells if "-s2-" in it["id"]]
    assert len(seed2) == 12 and all(it["kind"] == "error"
                                    and it["se"] == {"value": "sd_se_hi", "decimals": 4}
                                    and re.fullmatch(r"sd_\w+_m_(random|lg|tg)", it["ours"])
                                    for it in seed2)
    assert all(it["kind"] == "range" for it in cells if "-s2-" not in it["id"])
    assert all(it.get("basis") == "construction" for it in cells if it["id"].endswith("-random"))
    assert all(by["id"].startswith(("F3e-", "T3-mmlu-acc", "F5", "F6-", "F8-", "F1-"))
               or by["id"] in ("S4-sd-mmlu", "H4-endpoints")
               for by in ITEMS if by.get("basis") == "substitute")


#: Items a skeptical reading found true by construction, a reading of labels, or unable
#: to fail with these agents: never counted as results (the scorecard's rules).
NOT_RESULTS = ("F4b-small", "F7b-small", "F4b-large", "F7b-large", "T3-order", "S4-not-both",
               "S4-offline-bound", "F8-eta0")


def test_no_result_is_true_by_construction():
    by_id = {it["id"]: it for it in ITEMS}
    for iid in NOT_RESULTS:
        assert by_id[iid].get("basis", "result") in ("setting", "construction"), iid
    assert "S4-exploration" not in by_id and "H5-mechanism" not in by_id
    # the rule catches an injected example: a forced outcome left as a result
    injected = dict(by_id["F4b-small"], basis="result")
    assert cb.verdict_kind(injected, "reproduced") == "result reproduced"
    assert injected.get("basis") not in ("setting", "construction")


def test_items_that_change_with_the_coding_show_both_codings():
    """Cardio's and Coupon's 'contextual beats random' is shown under both codings."""
    by_id = {it["id"]: it for it in ITEMS}
    for iid in ("F3a-ctx", "F3c-ctx"):
        assert by_id[f"{iid}-codes"]["ours"].startswith(by_id[iid]["ours"].split("_wins")[0])
        assert "before" in by_id[f"{iid}-codes"]["ours"]


def test_the_number_rule_states_its_power():
    """A paper number against ours with a standard error: reproduced only when the 95 %
    interval lies within the tolerance, differs only when it lies beyond, inconclusive in
    between or when 2.8 s exceeds the tolerance; each outcome on an injected example."""
    it = {"kind": "error", "paper": 0.200, "ours": "x", "se": "s"}
    s = cb.scorecard_se(it, {"s": 0.001})
    assert s == pytest.approx(np.sqrt(2e-6 + 1e-6 / 12))
    assert cb.scorecard_verdict(it, {"x": 0.203, "s": 0.001})[0] == "reproduced"
    assert cb.scorecard_verdict(it, {"x": 0.2085, "s": 0.001})[0] == "inconclusive"
    assert cb.scorecard_verdict(it, {"x": 0.215, "s": 0.001})[0] == "differs"
    assert cb.scorecard_verdict(it, {"x": 0.185, "s": 0.001})[0] == "differs"
    # too noisy to resolve the tolerance: inconclusive even at a zero difference
    assert cb.scorecard_verdict(it, {"x": 0.200, "s": 0.003})[0] == "inconclusive"
    # without a standard error the old point rule would call 0.2085 reproduced
    assert cb.scorecard_verdict({k: v for k, v in it.items() if k != "se"},
                                {"x": 0.2085})[0] == "reproduced"
    assert cb.scorecard_verdict(it, {"x": 0.203})[0] == "pending"   # s not stored
    # a standard error stored rounded stays an upper bound: half a unit is added, which
    # turns an interval that just clears the tolerance into an inconclusive one
    rounded = dict(it, se={"value": "s", "decimals": 4})
    assert cb.scorecard_se(rounded, {"s": 0.0022}) > cb.scorecard_se(it, {"s": 0.0022})
    assert cb.scorecard_verdict(it, {"x": 0.2162, "s": 0.0022})[0] == "differs"
    assert cb.scorecard_verdict(rounded, {"x": 0.2162, "s": 0.0022})[0] == "inconclusive"


def test_the_claim_rule_states_its_power():
    """A claim 'OP b' with a standard error: reproduced when the interval is on the paper's
    side of b, differs on the other side, inconclusive when it contains b."""
    le = {"kind": "claim", "paper": "similar", "holds": "<= 0.01", "ours": "g",
          "se": {"sd": "sd", "runs": "n"}}
    vals = {"sd": 0.005, "n": 100}                   # s = 0.001, interval +- 0.00196
    assert cb.scorecard_verdict(le, {**vals, "g": 0.007})[0] == "reproduced"
    assert cb.scorecard_verdict(le, {**vals, "g": 0.0095})[0] == "inconclusive"
    assert cb.scorecard_verdict(le, {**vals, "g": 0.013})[0] == "differs"
    gt = {"kind": "claim", "paper": "trail", "holds": "> 0", "ours": "d", "se": 0.001}
    assert cb.scorecard_verdict(gt, {"d": 0.003})[0] == "reproduced"
    assert cb.scorecard_verdict(gt, {"d": 0.0015})[0] == "inconclusive"
    assert cb.scorecard_verdict(gt, {"d": -0.003})[0] == "differs"
    assert cb.scorecard_se({"kind": "claim", "se": {"sd": "sd", "runs": "n"}}, vals) == \
        pytest.approx(0.001)


def test_a_quantity_not_measured_is_inconclusive():
    item = {"kind": "claim", "paper": "sublinear", "ours": "r", "inconclusive": "other regret"}
    assert cb.scorecard_verdict(item, {"r": 0.9}) == ("inconclusive", 0.9)
    assert cb.verdict_kind(item, "inconclusive") == "result inconclusive"
    by_id = {it["id"]: it for it in ITEMS}
    for iid in ("G-regret", "F4a-size", "F8-eta0-err"):
        assert by_id[iid]["expect"] == "inconclusive", iid


def test_verdict_kinds_and_ranges():
    assert cb.verdict_kind({"basis": "setting"}, "differs") == "setting copied"
    assert cb.verdict_kind({"basis": "substitute"}, "reproduced") == \
        "on substitute agents or data"
    assert cb.verdict_kind({}, "reproduced") == "result reproduced"
    assert cb.verdict_kind({}, "inconclusive") == "result inconclusive"
    assert cb.verdict_kind({"basis": "construction"}, "not re-run") == "not re-run"
    # a range is context whatever its basis and its check (injected: a result range)
    assert cb.verdict_kind({"kind": "range"}, "reproduced") == "context only"
    assert cb.verdict_kind({"kind": "range", "basis": "result"}, "differs") == "context only"
    # one colour per meaning: every kind has one of the five, results differing split by
    # their cause, every kind that is not a result shares one (injected: a new kind)
    meanings = {k: cb.verdict_meaning(k) for k in cb.VERDICT_KINDS}
    assert set(meanings.values()) | {"differs, cause demonstrated"} == set(cb.VERDICT_MEANINGS)
    assert cb.verdict_meaning("result differs", "tested") == "differs, cause demonstrated"
    assert {m for k, m in meanings.items() if not k.startswith("result")} == {"not a result"}
    assert len({cls for cls, _ in cb.VERDICT_MEANINGS.values()}) == len(cb.VERDICT_MEANINGS)
    with pytest.raises(ValueError, match="kind"):
        cb.verdict_meaning("result differs badly")
    with pytest.raises(ValueError, match="basis"):
        cb.verdict_kind({"basis": "copied"}, "reproduced")
    rng = {"kind": "range", "paper": 0.335, "ours": "r"}
    inside = {"r": {"low": 0.334, "high": 0.354, "seeds": 20}}
    assert cb.scorecard_verdict(rng, inside)[0] == "reproduced"
    assert cb.scorecard_verdict(rng, {"r": {"low": 0.336, "high": 0.354, "seeds": 20}})[0] \
        == "differs"
    assert cb.scorecard_verdict(rng, {"r": {"low": 0.335, "high": 0.335, "seeds": 0}})[0] \
        == "differs"


def test_one_tolerance_table_for_shading_and_verdicts():
    """MMLU agent 1 (error 0.694 against the paper's 0.680) gets one verdict everywhere:
    the chapters shade with the scorecard's tolerances, never a number of their own."""
    assert cb.SCORECARD_TOL["accuracy"] == cb.MATCH_TOL
    for ch in cb.chapter_names():
        text = (cb.CHAPTER_DIR / f"{ch}.md").read_text(encoding="utf-8")
        assert not re.search(r"\btol=0\.\d", text), ch
    item = next(it for it in ITEMS if it["id"] == "T3-mmlu-acc1")
    ours = cb.glued_values(item["chapter"])[item["ours"]]
    shaded = abs(ours - item["paper"]) > cb.SCORECARD_TOL["accuracy"]
    assert (cb.scorecard_verdict(item, {item["ours"]: ours})[0] == "differs") == shaded


def test_the_page_is_current():
    """The executed scorecard page shows the verdicts computed now."""
    stored = cb.glued_values("scorecard")
    got = [v for v, _ in current_verdicts(ITEMS).values()]
    assert stored["sc_items"] == len(ITEMS)
    for v in VERDICTS:
        key = "sc_" + v.replace(" ", "").replace("-", "")
        assert stored[key] == got.count(v), (v, stored[key], got.count(v))


def test_paper_values_agree_with_the_module_constants():
    by_id = {it["id"]: it for it in ITEMS}
    for name, t3 in ca.PAPER_TABLE3.items():
        assert by_id[f"T3-{name}-d"]["paper"] == t3["features"]
        assert by_id[f"T3-{name}-T"]["paper"] == t3["tasks"]
        for k in (1, 2):
            assert by_id[f"T3-{name}-acc{k}"]["paper"] == t3["acc"][k - 1]
        assert TASK_LABELS[name] in by_id[f"T3-{name}-d"]["where"]
    cam = ca.PAPER_CAMELYON17
    assert [by_id[f"T3-camelyon17-{k}"]["paper"] for k in ("d", "T", "acc1", "acc2")] == \
        [cam["features"], cam["tasks"], *cam["acc"]]
    assert by_id["F2b-offline"]["paper"] == cam["offline_error_05"]
    assert by_id["F2b-online"]["paper"] == cam["online_error_05"]
    assert by_id["F2b-share"]["paper"] == cam["offline_share_agent1"]
    assert by_id["F1-threshold"]["paper"] == ca.PAPER_FIG1_THRESHOLD["x"]
    n = 0
    for name, rows in ca.PAPER_TABLE4.items():
        for s, row in enumerate(rows):
            for p, v in zip(("random", "lg", "tg"), row):
                it = by_id[f"T4-{name}-s{s}-{p}"]
                assert it["paper"] == v and f"seed {s}, {TASK_LABELS[name]}" in it["where"]
                n += 1
    assert n == 60
    assert by_id["S4-runs"]["paper"] == ca.PAPER_RUNS
    assert by_id["S4-eta"]["paper"] == ca.PAPER_ETA


def test_the_check_can_fail():
    """A changed value flips a verdict, for numbers and for claims."""
    num = {"kind": "error", "paper": 0.171, "ours": "x"}
    assert cb.scorecard_verdict(num, {"x": 0.171 + 0.0099})[0] == "reproduced"
    assert cb.scorecard_verdict(num, {"x": 0.171 + 0.0101})[0] == "differs"
    assert cb.scorecard_verdict(num, {"x": 0.171 - 0.02})[0] == "differs"
    count = {"kind": "count", "paper": 12357, "ours": "T"}
    assert cb.scorecard_verdict(count, {"T": 12357})[0] == "reproduced"
    assert cb.scorecard_verdict(count, {"T": 12358})[0] == "differs"
    claim = {"kind": "claim", "paper": "all", "holds": "all of n", "ours": "k"}
    assert cb.scorecard_verdict(claim, {"k": 20, "n": 20})[0] == "reproduced"
    assert cb.scorecard_verdict(claim, {"k": 19, "n": 20})[0] == "differs"
    assert cb.scorecard_verdict(claim, {"k": 19})[0] == "pending"
    most = {"kind": "claim", "paper": "most", "holds": "most of n", "ours": "k"}
    assert cb.scorecard_verdict(most, {"k": 11, "n": 20})[0] == "reproduced"
    assert cb.scorecard_verdict(most, {"k": 10, "n": 20})[0] == "differs"
    le = {"kind": "claim", "paper": "similar", "holds": "<= 0.01", "ours": "g"}
    assert cb.scorecard_verdict(le, {"g": 0.004})[0] == "reproduced"
    assert cb.scorecard_verdict(le, {"g": 0.015})[0] == "differs"
    lt = {"kind": "claim", "paper": "U", "holds": "< b1", "ours": "bmin"}
    assert cb.scorecard_verdict(lt, {"bmin": 0.12, "b1": 0.28})[0] == "reproduced"
    assert cb.scorecard_verdict(lt, {"bmin": 0.28, "b1": 0.28})[0] == "differs"
    assert cb.scorecard_verdict({"kind": "error", "paper": 0.1, "needs": "x"}, {"x": 0.1})[0] \
        == "pending"
    assert cb.scorecard_verdict({"kind": "error", "paper": 0.1, "not_rerun": "no data"},
                                {})[0] == "not re-run"


def test_a_changed_stored_value_flips_a_committed_verdict():
    """On the real items: perturbing one chapter's stored value changes the verdict list."""
    item = next(it for it in ITEMS if it["expect"] == "reproduced" and it["kind"] == "accuracy")
    values = dict(cb.glued_values(item["chapter"]))
    assert cb.scorecard_verdict(item, values)[0] == "reproduced"
    values[item["ours"]] = float(values[item["ours"]]) + 0.05
    assert cb.scorecard_verdict(item, values)[0] == "differs"
    claim = next(it for it in ITEMS if it["expect"] == "reproduced"
                 and str(it.get("holds", "")).startswith("all of"))
    values = dict(cb.glued_values(claim["chapter"]))
    values[claim["ours"]] -= 1
    assert cb.scorecard_verdict(claim, values)[0] == "differs"


def test_bad_kind_is_a_clear_error():
    with pytest.raises(ValueError, match="kind.. must be one of"):
        cb.scorecard_verdict({"kind": "percent", "paper": 1, "ours": "x"}, {"x": 1})
    with pytest.raises(ValueError, match="holds.. must be one of"):
        cb.scorecard_verdict({"kind": "claim", "holds": "=< 0", "ours": "x"}, {"x": 1})


def test_update_switches_stored_needs_and_rewrites_expect(tmp_path, monkeypatch):
    text = """# two items
- id: A
  section: S
  where: w
  paper: 0.2
  kind: error
  chapter: exp_seeds
  needs: sd_new
  expect: pending
- id: B
  section: S
  where: w
  paper: all
  kind: claim
  holds: all of n
  chapter: exp_seeds
  ours: k
  expect: reproduced
"""
    path = tmp_path / "items.yml"
    path.write_text(text)
    monkeypatch.setattr(cb, "glued_values", lambda ch: {"sd_new": 0.25, "k": 3, "n": 4})
    update(path)
    items = load_items(path)
    assert items[0]["ours"] == "sd_new" and "needs" not in items[0]
    assert [it["expect"] for it in items] == ["differs", "differs"]
    assert path.read_text().startswith("# two items\n")


def update(path=ITEMS_PATH):
    """Rewrite the item list from the executed notebooks: a ``needs:`` name its chapter now
    stores becomes ``ours:``, and every ``expect:`` line gets the verdict computed now."""
    items = load_items(path)
    lines = Path(path).read_text(encoding="utf-8").splitlines(keepends=True)
    stored = {ch: cb.glued_values(ch) for ch in {it["chapter"] for it in items}}
    chapter = None
    for i, line in enumerate(lines):
        m = re.match(r"  chapter: (\S+)", line)
        chapter = m.group(1) if m else chapter
        m = re.match(r"  needs: (\S+)", line)
        if m and m.group(1) in stored[chapter]:
            lines[i] = f"  ours: {m.group(1)}\n"
    Path(path).write_text("".join(lines), encoding="utf-8")
    items = load_items(path)
    got = current_verdicts(items)
    current, n = None, 0
    for i, line in enumerate(lines):
        m = re.match(r"- id: (\S+)", line)
        if m:
            current = m.group(1)
        elif line.startswith("  expect:"):
            lines[i] = f"  expect: {got[current][0]}\n"
            n += 1
    assert n == len(items)
    Path(path).write_text("".join(lines), encoding="utf-8")
    counts = {v: sum(g[0] == v for g in got.values()) for v in VERDICTS}
    print(f"{path}: {n} verdicts written {counts}")


if __name__ == "__main__":
    if sys.argv[1:] == ["--update"]:
        update()
    else:
        sys.exit("usage: python tests/book/test_scorecard.py --update")
