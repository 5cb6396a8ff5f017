"""A router always restores what it saved (issue 24, items 1-7): each test
builds a state the way a user could and requires it to restore, or an
impossible state and requires it refused with a ValueError naming the field."""

import copy
import json

import numpy as np
import pytest

import capassign as ca


def _roundtrip(router):
    return ca.Router.from_state(json.loads(json.dumps(router.state_dict())))


def test_a_refused_context_is_not_kept_by_a_stream_tree_router():
    r = ca.Router(2, [0.5, 0.5], "tree-greedy", n_features=2)
    for bad in ([np.nan, 0.0], [0.0, np.inf]):
        with pytest.raises(ValueError, match="NaN or infinite"):
            r.assign(bad)
    assert r.n_assigned == 0
    for t in range(70):                       # crosses the cut at 64
        a = r.assign([t, -t])
        r.update(r.last_task_id, a, 1)
    assert r.state_dict()["model"]["stream"]["n_seen"] == 70
    assert _roundtrip(r).state_dict() == r.state_dict()


@pytest.mark.parametrize("x, settings", [
    ([1.7e9, 1.6e9], ca.PAPER_SETTINGS),       # timestamps: the downdate rounds below 0
    ([3.0, 1.0], ca.ModelSettings(gamma=1e-17)),
    ([1e9, -1e9], ca.ModelSettings(gamma=1e-16))])
def test_a_logistic_router_with_large_features_restores(x, settings):
    r = ca.Router(2, [0.5, 0.5], "logistic-ts", n_features=2, settings=settings)
    for t in range(6):
        a = r.assign(np.array(x) * (1 + t))
        r.update(r.last_task_id, a, t % 2)
    back = _roundtrip(r)
    assert back.state_dict() == r.state_dict()     # Sigma installed unchanged
    for t in range(10):
        z = np.array(x) * (t - 4.5)
        assert back.assign(z) == r.assign(z)


def test_an_absurd_sigma_is_refused():
    r = ca.Router(2, [0.5, 0.5], "logistic-greedy", n_features=2)
    st = json.loads(json.dumps(r.state_dict()))
    for S in (1e300 * np.eye(3), 1e8 * np.eye(3), np.diag([1.0, 1.0, -1e-3])):
        s = copy.deepcopy(st)
        s["model"]["Sigma"][1] = S.tolist()
        with pytest.raises(ValueError, match="Sigma"):
            ca.Router.from_state(s)


def test_a_version_1_state_with_several_pending_tasks_saves_again():
    r = ca.Router(2, [0.5, 0.5], "marginal", max_age=10)
    for _ in range(4):
        r.assign([0.0])
    r.update(1, None, 1)
    st = r.state_dict()
    st["schema"] = "capassign.router/1"
    st["pending"] = [e[:3] for e in st["pending"]]
    v1 = ca.Router.from_state(st)
    assert [e[3] for e in v1.state_dict()["pending"]] == [1, 2, 3]   # latest possible
    back = _roundtrip(v1)
    assert back.pending == [0, 2, 3]


@pytest.mark.parametrize("kw, field", [
    (dict(max_age=2 ** 70), "max_age"), (dict(max_pending=2 ** 60), "max_pending"),
    (dict(n_features=5000), "n_features")])
def test_settings_whose_state_would_be_refused_are_refused_at_construction(kw, field):
    kw = {"n_features": 2, **kw}
    with pytest.raises(ValueError, match=field):
        ca.Router(2, [0.5, 0.5], "marginal", **kw)


def test_forests_too_large_to_save_are_refused_at_construction():
    big = ca.ModelSettings(n_trees=60, max_depth=10)
    with pytest.raises(ValueError, match="MiB"):       # stream bins: cut to 32 bins later
        ca.Router(2, [0.5, 0.5], "tree-greedy", n_features=40, settings=big)
    ca.Router(2, [0.5, 0.5], "tree-greedy", n_features=4, settings=big)   # fits


def test_a_failed_recut_leaves_the_router_unchanged(monkeypatch):
    X, R, _ = ca.synthetic_stream(100, 3, seed=4)
    live, twin = (ca.Router(2, [0.5, 0.5], "tree-ts", n_features=3, seed=1) for _ in range(2))
    for r in (live, twin):
        for t in range(63):
            a = r.assign(X[t])
            r.update(t, a, int(R[t, a]))
    calls = []
    replay = ca._TreeModel._replay

    def failing(self, a, every_refit=True):
        calls.append(a)
        if len(calls) == 2:                   # the second agent's rebuild
            raise MemoryError
        return replay(self, a, every_refit)

    monkeypatch.setattr(ca._TreeModel, "_replay", failing)
    with pytest.raises(MemoryError):
        live.assign(X[63])                    # the 64th context: the first cut
    monkeypatch.undo()
    assert live.state_dict() == twin.state_dict()
    for t in range(63, 100):
        a = live.assign(X[t])
        assert a == twin.assign(X[t])
        live.update(t, a, int(R[t, a]))
        twin.update(t, a, int(R[t, a]))
    assert _roundtrip(live).state_dict() == twin.state_dict()


@pytest.mark.parametrize("policy, kw", [
    ("tree-greedy", "reference"), ("tree-greedy", "stream"), ("logistic-ts", None),
    ("marginal", None)])
def test_state_dict_is_a_fresh_copy(policy, kw):
    X, R, _ = ca.synthetic_stream(80, 2, seed=3)
    r = ca.Router(2, [0.5, 0.5], policy, n_features=2,
                  X_reference=X if kw == "reference" else None)
    for t in range(70):
        a = r.assign(X[t])
        r.update(t, a, int(R[t, a]))
    r.assign(X[70])
    before = json.dumps(r.state_dict())
    st = r.state_dict()

    def scribble(node):                       # change every list of the saved dict
        if isinstance(node, dict):
            for v in node.values():
                scribble(v)
        elif isinstance(node, list):
            for v in node:
                scribble(v)
            node.append(0)

    scribble(st)
    assert json.dumps(r.state_dict()) == before
    _roundtrip(r)


def _state(policy="marginal", n=4, **kw):
    r = ca.Router(2, [0.5, 0.5], policy, n_features=2, **kw)
    for t in range(n):
        r.assign([float(t), 1.0])
    return json.loads(json.dumps(r.state_dict()))


def test_impossible_counts_are_refused():
    st = _state()                                # counts [c0, c1], 4 pending
    counts = st["assigned_counts"]
    a = int(np.argmin(counts))
    s = copy.deepcopy(st)                        # a queue beyond its agent's count
    s["Q"][a] = counts[a] + 0.5
    with pytest.raises(ValueError, match="Q"):
        ca.Router.from_state(s)
    s = copy.deepcopy(st)                        # more pending tasks than assigned
    for e in s["pending"]:
        e[1] = a
    with pytest.raises(ValueError, match="pending"):
        ca.Router.from_state(s)
    s = copy.deepcopy(st)                        # cancelled + expired + pending > n
    s["n_cancelled"], s["n_expired"] = 1, 1
    with pytest.raises(ValueError, match="pending|n_cancelled"):
        ca.Router.from_state(s)
    s = copy.deepcopy(st)
    s["n_cancelled"], s["n_expired"] = 3, 2
    s["pending"] = []
    with pytest.raises(ValueError, match="n_cancelled"):
        ca.Router.from_state(s)


def test_a_stream_state_without_its_contexts_is_refused():
    r = ca.Router(2, [0.5, 0.5], "tree-greedy", n_features=2)
    for t in range(5):
        a = r.assign([float(t), 1.0])
        r.update(t, a, 1)
    st = json.loads(json.dumps(r.state_dict()))
    st["model"]["stream"]["n_seen"] = 0
    st["model"]["stream"]["seen"] = []
    st["model"]["edges"] = [[], []]
    with pytest.raises(ValueError, match="n_seen"):
        ca.Router.from_state(st)
