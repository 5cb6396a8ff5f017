"""The reproduction scorecard (book/scorecard.yml, chapter ``scorecard``).

Every verdict is recomputed here from the committed executed notebooks and
the item list, without re-executing anything, and compared with the verdict
committed next to the item (``expect:``): the test fails when a verdict
changes, e.g. because a chapter was re-run and now stores another value.

After an intended change (a chapter re-run, or a chapter that now stores a
value listed under ``needs:``), run ``python tests/test_scorecard.py --update``
(it switches stored ``needs:`` names to ``ours:`` and rewrites the ``expect:``
lines), give every new "differs" a ``why:``, re-execute the scorecard chapter
and review the diff.
"""

import re
import sys
from pathlib import Path

import pytest
import yaml

import capassign as ca
import capbook as cb

ITEMS_PATH = cb.ROOT / "book" / "scorecard.yml"
VERDICTS = ("reproduced", "differs", "not re-run", "pending")
KINDS = (*cb.SCORECARD_TOL, "claim")
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
        sources = [k for k in ("ours", "needs", "not_rerun") if k in it]
        assert len(sources) == 1, f"{it['id']}: exactly one of ours / needs / not_rerun"
        if it["kind"] == "claim":
            assert isinstance(it["paper"], str), it
            assert "not_rerun" in it or re.fullmatch(
                r"(all of|most of|<|<=|>|>=|==) \S+|true", str(it.get("holds", ""))), it
        else:
            assert isinstance(it["paper"], (int, float)), it
    assert len(ITEMS) >= 80


def test_the_page_is_run_after_the_chapters_it_reads():
    """``python -m capbook reproduce`` runs a chapter after those named in its front
    matter ``reads``: the scorecard must name every chapter its items read."""
    import jupytext

    meta = jupytext.read(cb.CHAPTER_DIR / "scorecard.md").metadata["capassign"]
    assert sorted(meta["reads"]) == sorted({it["chapter"] for it in ITEMS})
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
    for it in ITEMS:
        if it["expect"] == "differs":
            assert it.get("why", "").strip(), f"{it['id']} differs without a reason"


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
    assert by_id["S4-eta"]["paper"] == ca.DEFAULT_ETA


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
        sys.exit("usage: python tests/test_scorecard.py --update")
