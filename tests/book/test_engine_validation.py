"""The stored comparison of the fast and reference engines on the tabular tasks.

``book/results/engine_validation.json`` is written by ``python -m capbook
validate-engines`` (about an hour on one core) and read by the fast_engine
chapter.  These tests check that the file is intact and computed on the data
as it is now, and re-run a seeded sample of its paired runs on both engines:
every stored number must come back exactly.
"""
import json
import math
import os
import re
from pathlib import Path

import numpy as np
import pytest

import capassign as ca
import capbook as cb
from capbook import engines
from _helpers import or_skip as _or_skip


@pytest.fixture(scope="module")
def stored():
    return json.loads(cb.ENGINE_VALIDATION_PATH.read_text(encoding="utf-8"))


def test_file_checksum_and_grid(stored):
    obj = cb.read_engine_validation(check_data=False)
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
        cb.read_engine_validation(path, check_data=False)


def test_data_hashes_match_the_tasks(stored):
    _or_skip(cb.read_engine_validation, check_data=True)


def test_summary_table():
    df = _or_skip(cb.engine_validation)
    n_missing = len(cb.read_engine_validation(check_data=False)["missing"])
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
        task = _or_skip(engines._validation_task, c["task"], stored["tasks"][c["task"]])
        got = engines._validation_run(task, c["policy"], c["alpha1"], r, st["prefix"], st["seed"],
                                 st["eta"])
        for e in ca.ENGINES:
            assert got[e][0] == c[e]["errors"][r], (c["task"], c["policy"], c["alpha1"], r, e)
            assert got[e][1] == c[e]["share1"][r], (c["task"], c["policy"], c["alpha1"], r, e)


def test_validation_draw_is_paired_and_seeded():
    rows, s = engines._validation_draw(0, 3, 1000, 200)
    rows2, s2 = engines._validation_draw(0, 3, 1000, 200)
    assert np.array_equal(rows, rows2) and s == s2
    assert rows.size == 200 and np.unique(rows).size == 200 and np.all(np.diff(rows) > 0)
    assert not np.array_equal(rows, engines._validation_draw(0, 4, 1000, 200)[0])


def test_paired_power():
    # n = 34 pairs of sd 0.01 detect 0.005 with about 80% power (normal approx. 0.80)
    assert engines._paired_power(0.01, 34, 0.005) == pytest.approx(0.80, abs=0.02)
    assert engines._paired_power(0.0, 10, 0.005) == 1.0
    assert engines._runs_for_power(0.01, 0.005, 0.8, 0.05, 10, 200) in range(33, 36)
    assert engines._runs_for_power(0.05, 0.005, 0.8, 0.05, 10, 60) == 60


def test_bad_arguments():
    with pytest.raises(ValueError, match="tasks"):
        cb.validate_engines(tasks=["imagenet16h"])
    with pytest.raises(ValueError, match="policies"):
        cb.validate_engines(policies=["offline-tree"])
    with pytest.raises(ValueError, match="max_runs"):
        cb.validate_engines(pilot=10, max_runs=5)


def test_chunks_resume(tmp_path):
    """Cells are kept per task as they finish; a second call reuses them."""
    path = tmp_path / "ev.json"
    kw = dict(tasks=["coupon"], policies=["random"], alphas=[0.5], prefix=50, pilot=2,
              max_runs=3)
    said = []
    assert _or_skip(cb.validate_engines, path, out=said.append, **kw) is None
    part = tmp_path / "ev.json.coupon.partial"
    first = json.loads(part.read_text())
    assert len(first["cells"]) == 1 and not path.exists()
    said.clear()
    cb.validate_engines(path, out=said.append, **kw)
    assert said == ["coupon: resuming, 1 cells stored"]
    assert json.loads(part.read_text()) == first


def test_collect_lists_the_missing_cells(tmp_path):
    path = tmp_path / "ev.json"
    kw = dict(policies=["random"], alphas=[0.5], prefix=50, pilot=2, max_runs=3)
    _or_skip(cb.validate_engines, path, tasks=["coupon"], out=None, **kw)
    cb.validate_engines(path, collect=True, out=None, **kw)
    obj = cb.read_engine_validation(path, check_data=False)
    assert [c["task"] for c in obj["cells"]] == ["coupon"]
    assert obj["missing"] == [[t, "random", 0.5] for t in ("bank", "credit", "cardio")]
    assert (tmp_path / "ev.json.coupon.partial").exists()   # kept until the file is complete


def test_command_line_error(capsys):
    with pytest.raises(SystemExit) as exc:
        cb.main(["validate-engines", "--tasks", "mmlu"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("capbook validate-engines: error: --tasks")


def test_every_cell_meets_the_rule_with_all_its_runs(stored):
    """No stored cell stops while the rule, fed the sd of all its runs, asks for more."""
    st = stored["settings"]
    short = []
    for c in stored["cells"]:
        d = np.subtract(c["fast"]["errors"], c["reference"]["errors"])
        n = engines._runs_for_power(float(d.std(ddof=1)), st["diff"], st["power"], st["level"],
                               c["runs"], st["max_runs"])
        if n > c["runs"] or len(d) != c["runs"]:
            short.append((c["task"], c["policy"], c["alpha1"], c["runs"], n))
    assert not short, short


# --- what validate_engines writes over and reads back --------------------------------

TINY = dict(policies=["random"], alphas=[0.5], prefix=50, pilot=2, max_runs=3)


def _no_work(monkeypatch):
    """validate_engines must refuse its path before any work: loading a task fails the
    test (and so, on code that checks too late, nothing at the path is ever written)."""
    def load_task(*args, **kwargs):
        raise AssertionError("validate_engines started work before checking its path")

    monkeypatch.setattr(engines, "load_task", load_task)


def _plant(kind, path, tmp_path):
    """Put a ``kind`` at ``path``; return the path to check (a device: /dev/null itself)."""
    if kind == "FIFO (named pipe)":
        os.mkfifo(path)
    elif kind == "symbolic link":
        (tmp_path / "elsewhere.json").write_text("keep", encoding="utf-8")
        path.symlink_to(tmp_path / "elsewhere.json")
    elif kind == "dangling symbolic link":
        path.symlink_to(tmp_path / "nothing-here.json")
    elif kind == "folder":
        path.mkdir()
    else:
        return Path("/dev/null")
    return path


@pytest.mark.parametrize("kind", ["FIFO (named pipe)", "symbolic link", "dangling symbolic link",
                                  "folder", "character device"])
def test_results_path_must_be_a_file_or_a_new_name(tmp_path, monkeypatch, kind):
    """A FIFO, a link (to a file or to nothing), a folder or a device (/dev/null, only
    looked at) is refused in one line naming the argument, and left as it was."""
    _no_work(monkeypatch)
    path = _plant(kind, tmp_path / "ev.json", tmp_path)
    before = os.lstat(path)
    shown = kind.replace("dangling ", "")
    with pytest.raises(ValueError, match=rf"^path '{re.escape(str(path))}' is a "
                                         rf"{re.escape(shown)}, not a regular file; give a new"):
        cb.validate_engines(path, tasks=["coupon"], out=None, **TINY)
    after = os.lstat(path)
    assert (after.st_mode, after.st_ino, after.st_rdev) == (before.st_mode, before.st_ino,
                                                            before.st_rdev)
    if kind == "symbolic link":
        assert (tmp_path / "elsewhere.json").read_text(encoding="utf-8") == "keep"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-")) == []


@pytest.mark.parametrize("kind", ["FIFO (named pipe)", "symbolic link", "folder"])
def test_partial_file_paths_are_checked_too(tmp_path, monkeypatch, kind):
    """The partial file beside the results file is read and replaced: a FIFO there would
    block the read, a link or folder would be replaced."""
    _no_work(monkeypatch)
    part = _plant(kind, tmp_path / "ev.json.coupon.partial", tmp_path)
    with pytest.raises(ValueError, match=rf"^path '.*ev\.json': ev\.json\.coupon\.partial beside "
                                         rf"it is a {re.escape(kind)}, not a regular file"):
        cb.validate_engines(tmp_path / "ev.json", tasks=["coupon"], out=None, **TINY)
    assert os.path.lexists(part)


def test_results_path_needs_an_existing_folder(tmp_path, monkeypatch):
    _no_work(monkeypatch)
    with pytest.raises(ValueError, match=r"^path '.*ev\.json': its folder '.*new' does not exist"):
        cb.validate_engines(tmp_path / "new" / "ev.json", tasks=["coupon"], out=None, **TINY)
    assert not (tmp_path / "new").exists()
    with pytest.raises(ValueError, match=r"^path must be a file path, got ''"):
        cb.validate_engines("", tasks=["coupon"], out=None, **TINY)
    with pytest.raises(TypeError, match=r"^path must be a file path \(str or Path\), got 3"):
        cb.validate_engines(3, tasks=["coupon"], out=None, **TINY)


def test_command_line_out_must_be_a_file(tmp_path, monkeypatch, capsys):
    _no_work(monkeypatch)
    fifo = tmp_path / "ev.json"
    os.mkfifo(fifo)
    with pytest.raises(SystemExit) as exc:
        cb.main(["validate-engines", "--tasks", "coupon", "--out", str(fifo)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"capbook validate-engines: error: --out '{fifo}' is a FIFO (named "
                          f"pipe), not a regular file")
    assert fifo.is_fifo()


@pytest.fixture(scope="module")
def tiny_partial(tmp_path_factory):
    """A partial file computed for real (Coupon, random policy, 50 tasks, 3 runs)."""
    path = tmp_path_factory.mktemp("tiny") / "ev.json"
    _or_skip(cb.validate_engines, path, tasks=["coupon"], out=None, **TINY)
    return json.loads(path.with_name("ev.json.coupon.partial").read_text(encoding="utf-8"))


def _forge(obj, field, value):
    """``obj`` with the cell field ``field`` (e.g. ``"fast.errors.0"``) set to ``value``
    (``DROP`` removes it)."""
    obj = json.loads(json.dumps(obj))
    *keys, last = field.split(".")
    target = obj["cells"][0]
    for k in keys:
        target = target[int(k) if k.isdigit() else k]
    if value is DROP:
        del target[last]
    else:
        target[int(last) if last.isdigit() else last] = value
    return obj


DROP = object()
FORGED_CELLS = [   # (field, value, the field the refusal names)
    ("fast.errors.0", 7.5, "fast.errors"),
    ("reference.errors.1", -3.0, "reference.errors"),
    ("fast.errors.0", math.nan, "fast.errors"),
    ("fast.share1.2", math.inf, "fast.share1"),
    ("reference.share1.0", "0.5", "reference.share1"),
    ("fast.errors", [0.1, 0.2], "fast.errors"),
    ("fast.cpu_seconds", -1.0, "fast.cpu_seconds"),
    ("runs", 99, "runs"),
    ("runs", 1, "runs"),
    ("policy", "ucb", "policy"),
    ("alpha1", 0.25, "alpha1"),
    ("pilot_sd", 0.5, "pilot_sd"),
    ("fast", "x", "fast"),
    ("fast.errors", DROP, "fast"),
    ("reference", DROP, ""),
    ("extra", 1, ""),
]


@pytest.mark.parametrize("field, value, named", FORGED_CELLS)
def test_a_forged_or_malformed_partial_cell_is_refused(tiny_partial, tmp_path, field, value,
                                                       named):
    """A stored cell is checked as a sweep's cells are (types, ranges, shapes, the
    settings): a bad one is refused in one line naming the file and the field."""
    part = tmp_path / "ev.json.coupon.partial"
    part.write_text(json.dumps(_forge(tiny_partial, field, value)), encoding="utf-8")
    where = re.escape(f"{part}: cells[0]" + (f".{named} " if named else " "))
    with pytest.raises(ValueError, match=rf"^{where}.*; remove it to compute that task's "
                                         rf"cells again$") as exc:
        cb.validate_engines(tmp_path / "ev.json", tasks=["coupon"], out=None, **TINY)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("content, message", [
    ("{", "is not valid JSON"),
    ("[1, 2]", "not a partial file of validate_engines"),
    ('{"head": 1}', "not a partial file of validate_engines"),
])
def test_an_unreadable_partial_file_is_refused(tiny_partial, tmp_path, content, message):
    part = tmp_path / "ev.json.coupon.partial"
    part.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=rf"^{re.escape(str(part))}:? {message}"):
        cb.validate_engines(tmp_path / "ev.json", tasks=["coupon"], out=None, **TINY)


def test_partial_cells_structure_is_checked(tiny_partial, tmp_path):
    part = tmp_path / "ev.json.coupon.partial"
    bad = dict(tiny_partial, cells={"0": tiny_partial["cells"][0]})
    part.write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(ValueError, match=r": cells is not a list; remove it"):
        cb.validate_engines(tmp_path / "ev.json", tasks=["coupon"], out=None, **TINY)
    bad = dict(tiny_partial, cells=tiny_partial["cells"] * 2)
    part.write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(ValueError, match=r": cells\[1\] repeats an earlier cell; remove it"):
        cb.validate_engines(tmp_path / "ev.json", tasks=["coupon"], out=None, **TINY)


def test_a_sound_partial_is_still_reused(tiny_partial, tmp_path):
    part = tmp_path / "ev.json.coupon.partial"
    part.write_text(json.dumps(tiny_partial), encoding="utf-8")
    said = []
    cb.validate_engines(tmp_path / "ev.json", tasks=["coupon"], out=said.append, **TINY)
    assert said == ["coupon: resuming, 1 cells stored"]
    assert json.loads(part.read_text(encoding="utf-8")) == tiny_partial


def _resealed(obj):
    """``obj`` (a complete file) with its checksum recomputed after an edit."""
    payload = {k: v for k, v in obj.items() if k != "sha256"}
    return dict(payload, sha256=ca._json_digest(payload))


@pytest.mark.parametrize("edit, message", [
    (lambda o: o["cells"][0]["fast"]["errors"].__setitem__(0, 7.5),
     r"cells\[0\]\.fast\.errors does not hold"),
    (lambda o: o["cells"][5]["reference"]["errors"].__setitem__(2, -3.0),
     r"cells\[5\]\.reference\.errors does not hold"),
    (lambda o: o["cells"][1].__setitem__("runs", 1000), r"cells\[1\]\.runs 1000 is not"),
    (lambda o: o["cells"][2].pop("pilot_sd"), r"cells\[2\] has the fields"),
    (lambda o: o["cells"].append(o["cells"][0]), r"cells\[72\] repeats an earlier cell"),
    (lambda o: o["cells"].pop(), r"cells and missing do not cover the grid"),
    (lambda o: o["missing"].append(["bank", "random", 0.2]), r"missing\[0\] .* without a cell"),
    (lambda o: o["settings"].__setitem__("prefix", 5), r"settings: prefix must be an integer"),
    (lambda o: o["settings"].__setitem__("alphas", [0.2, 0.5, 1.5]), r"settings: alphas must"),
    (lambda o: o["tasks"].pop("bank"), r"tasks must hold exactly"),
    (lambda o: o["tasks"]["bank"].__setitem__("T", -1), r"tasks\.bank is not a task record"),
    (lambda o: o.__setitem__("cells", {}), r"cells is not a list"),
])
def test_read_checks_the_contents_not_only_the_checksum(stored, tmp_path, edit, message):
    """An edit with a recomputed checksum is refused when a number or a shape is
    impossible, in one line naming the file and the field."""
    obj = json.loads(json.dumps(stored))
    edit(obj)
    path = tmp_path / "forged.json"
    path.write_text(json.dumps(_resealed(obj)), encoding="utf-8")
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}: {message}"):
        cb.read_engine_validation(path, check_data=False)


def test_read_refuses_nan_in_one_line(stored, tmp_path):
    """NaN cannot be in a file validate_engines wrote (its checksum is over strict JSON)."""
    obj = json.loads(json.dumps(stored))
    obj["cells"][0]["fast"]["errors"][0] = math.nan
    path = tmp_path / "nan.json"
    path.write_text(json.dumps(obj), encoding="utf-8")
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}: checksum mismatch"):
        cb.read_engine_validation(path, check_data=False)


def test_read_refuses_a_fifo_without_blocking(tmp_path):
    fifo = tmp_path / "ev.json"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match=r"is a FIFO \(named pipe\), not a results file"):
        cb.read_engine_validation(fifo, check_data=False)


def test_forged_complete_file_gives_no_cells(tiny_partial, tmp_path):
    """Resuming from a complete file takes its cells only when it passes
    read_engine_validation: a forged rate under a recomputed checksum is not taken."""
    path = tmp_path / "ev.json"
    part = tmp_path / "ev.json.coupon.partial"
    part.write_text(json.dumps(tiny_partial), encoding="utf-8")
    _or_skip(cb.validate_engines, path, collect=True, out=None, **TINY)  # coupon + 3 missing
    part.unlink()
    obj = json.loads(path.read_text(encoding="utf-8"))
    obj["cells"][0]["fast"]["errors"][0] = 7.5
    path.write_text(json.dumps(_resealed(obj)), encoding="utf-8")
    said = []
    cb.validate_engines(path, tasks=["coupon"], out=said.append, **TINY)
    assert said[0].startswith("coupon: nothing taken from ev.json (")
    assert "cells[0].fast.errors" in said[0]
    def numbers(obj):   # the stored numbers without the CPU times
        return [[c[e][k] for e in ca.ENGINES for k in ("errors", "share1")] + [c["runs"]]
                for c in obj["cells"]]

    recomputed = json.loads(part.read_text(encoding="utf-8"))
    assert numbers(recomputed) == numbers(tiny_partial)    # computed again, deterministically
