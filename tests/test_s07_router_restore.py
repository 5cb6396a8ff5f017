"""A router always restores what it saved: each test
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


@pytest.mark.parametrize("seed", [1, 7, 13, 14])
def test_a_logistic_router_fed_huge_contexts_for_long_restores(seed):
    # 300 contexts N(0, 1e9^2): the plain rank-1 downdate went indefinite
    # (an eigenvalue of -39.7 at seed 1) and the state was refused
    rng = np.random.default_rng(seed)
    r = ca.Router(2, [0.5, 0.5], "logistic-greedy", n_features=3, seed=seed,
                  settings=ca.ModelSettings(gamma=1))
    for _ in range(300):
        a = r.assign(rng.normal(0, 1e9, 3))
        r.update(r.last_task_id, a, int(rng.random() < 0.5))
    back = _roundtrip(r)
    assert back.state_dict() == r.state_dict()
    z = rng.normal(0, 1e9, 3)
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


# --- threads ----------------------------------------------------------------------


@pytest.mark.parametrize("policy, kw, n", [
    ("logistic-ts", {}, 6000), ("tree-greedy", {}, 800),
    ("marginal", dict(max_pending=40), 6000)])
def test_one_router_from_four_threads(policy, kw, n):
    """Forced switching between four threads: every call counted once, the
    state restores (a stream-bin tree router crosses its cuts meanwhile)."""
    import sys
    import threading
    old = sys.getswitchinterval()
    X, R, _ = ca.synthetic_stream(n, 3, seed=7)
    r = ca.Router(2, [0.5, 0.5], policy, n_features=3, seed=3, **kw)
    done = {"updates": 0, "cancels": 0, "states": 0}
    errors = []
    count = threading.Lock()

    def work(k):
        try:
            for t in range(k, n, 4):
                tid = f"{k}-{t}"
                a = r.assign(X[t], task_id=tid)
                if t % 5 == 0 and tid in r.pending:
                    try:
                        r.cancel(tid)
                        with count:
                            done["cancels"] += 1
                    except ValueError:             # expired meanwhile
                        pass
                elif t % 5 != 1:
                    try:
                        r.update(tid, a, int(R[t, a]))
                        with count:
                            done["updates"] += 1
                    except ValueError:             # expired meanwhile
                        pass
                if t % 197 == 0:
                    ca.Router.from_state(json.loads(json.dumps(r.state_dict())))
                    with count:
                        done["states"] += 1
        except Exception as exc:                   # pragma: no cover - reported below
            errors.append(exc)

    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors
    assert r.n_assigned == n and int(r.assigned_counts.sum()) == n
    assert int(r.rewards_seen.sum()) == done["updates"]
    assert r.n_cancelled == done["cancels"]
    assert len(r.pending) + r.n_cancelled + r.n_expired + done["updates"] == n
    assert done["states"] > 0
    back = ca.Router.from_state(json.loads(json.dumps(r.state_dict())))
    assert back.state_dict() == r.state_dict()


# --- property: save and restore after every step ------------------------------------


def _team_step(r, rng, x, ids):
    """One change of a named router's team or tasks: an agent joins (names are
    reused) or leaves, a task takes an id that may be in use, or a departed
    agent's task is answered or cancelled.  Returns 1 when it was refused."""
    u = rng.random()
    departed = [t for t, _, _ in r.state_dict()["departed"]]
    if u < 0.3 and len(r.agents) < 5:
        names = [n for n in "abcdef" if n not in r.agents]
        cap = None if rng.random() < 0.25 else float(rng.uniform(0.05, 0.3))
        r.add_agent(names[0], cap)              # the first free name: often one that left
    elif u < 0.6 and len(r.agents) > 2:
        try:
            r.remove_agent(r.agents[int(rng.integers(len(r.agents)))],
                           pending=["accept", "cancel"][int(rng.integers(2))])
        except ValueError as exc:              # the others would all be free
            assert "capacity" in str(exc)
            return 1
    elif u < 0.8:                              # an id from a small pool: often in use
        tid = ids[int(rng.integers(len(ids)))]
        if tid in r.pending or tid in departed:
            with pytest.raises(ValueError, match="already pending"):
                r.assign(x, task_id=tid)
            return 1
        r.assign(x, task_id=tid)
    elif departed:
        tid = departed[int(rng.integers(len(departed)))]
        if rng.random() < 0.5:
            r.cancel(tid)
        else:
            r.update(tid, None, float(rng.random()))
    return 0


def _walk_and_restore(policy, kw, steps, seed, K=3, team=False):
    rng = np.random.default_rng(seed)
    d = 3
    r = ca.Router(["a", "b", "c"], [0.5, 0.3, 0.2], policy, n_features=d, seed=seed, **kw)
    refused = 0
    ids = [f"j{i}" for i in range(6)] + [0, 1, 2]
    for step in range(steps):
        u = rng.random()
        x = rng.normal(size=d) * (1e9 if rng.random() < 0.1 else 1.0)
        if team and u >= 0.82:                 # instead of some plain assignments
            refused += _team_step(r, rng, x, ids)
        elif u < 0.08:                         # refused inputs
            bad = [np.r_[x[:-1], rng.choice([np.nan, np.inf, -np.inf])], x[:-1],
                   np.r_[x, 0.0], x.reshape(1, -1)][int(rng.integers(4))]
            with pytest.raises((ValueError, TypeError)):
                r.assign(bad)
            refused += 1
        elif u < 0.18:                         # a mini-batch
            r.assign_batch(rng.normal(size=(int(rng.integers(1, 9)), d)))
        elif u < 0.26 and r.pending:           # cancel
            r.cancel(r.pending[int(rng.integers(len(r.pending)))])
        elif u < 0.55 and r.pending:           # a reward, in any order
            tid = r.pending[int(rng.integers(len(r.pending)))]
            r.update(tid, None, float(rng.random()) if team and u > 0.45 else int(rng.integers(2)))
        elif u < 0.6:                          # an outside observation
            r.update(x, r.agents[1], int(rng.integers(2)))
        else:
            r.assign(x)
        saved = json.loads(json.dumps(r.state_dict()))
        back = ca.Router.from_state(saved)
        assert back.state_dict() == saved, step
        twin = copy.deepcopy(r)
        for k in range(K):                     # the next K decisions agree
            z = rng.normal(size=d) * (1e9 if k == 2 else 1.0)
            assert back.assign(z) == twin.assign(z), (step, k)
            back.update(back.last_task_id, None, k % 2)
            twin.update(twin.last_task_id, None, k % 2)
    return r, refused


@pytest.mark.parametrize("policy, kw, steps", [
    ("tree-ts", {}, 350),                              # stream bins: cuts at 64 ... 256
    ("tree-greedy", dict(max_age=25), 100),
    ("logistic-ts", dict(max_pending=12), 250),
    ("logistic-greedy", {}, 150),
    ("marginal", dict(max_pending=5, max_age=9), 150),
    ("random", {}, 100)])
def test_every_saved_state_restores_a_router_that_decides_alike(policy, kw, steps):
    r, refused = _walk_and_restore(policy, kw, steps, seed=11)
    assert refused > 0 and r.n_assigned > 0
    if policy == "tree-ts":
        assert r.state_dict()["model"]["stream"]["n_seen"] > 256


#: Forgetting, in NumPy-typed settings (small forests: the test runs in CI).
_FORGETTING = ca.ModelSettings(discount=np.float64(0.98), n_trees=np.int64(5),
                               max_depth=np.uint8(3), refit_every=np.int32(10))


@pytest.mark.parametrize("policy, kw, steps", [
    ("tree-ts", dict(max_age=30), 300),
    ("tree-greedy", dict(max_pending=10), 300),
    ("logistic-ts", dict(max_pending=12), 300),
    ("logistic-greedy", dict(max_age=20), 300),
    ("marginal", dict(max_pending=5, max_age=9), 300),
    ("random", {}, 300)])
def test_every_saved_state_restores_across_team_changes(policy, kw, steps):
    # agents joining and leaving (names and task ids reused), departed agents'
    # tasks answered, cancelled and expired, forgetting with contexts of 1e9
    r, refused = _walk_and_restore(policy, dict(kw, settings=_FORGETTING), steps, seed=5,
                                   team=True)
    changes = r.changes
    assert refused > 0 and r.n_assigned > 0
    assert {"add", "remove"} <= {c["op"] for c in changes}
    assert any(c["op"] == "add" and c["agent"] in "abc" for c in changes)   # a name reused


def test_numpy_typed_settings_are_python_numbers():
    # a Router with n_trees=np.int64(20) saved no JSON (TypeError), and
    # max_depth=np.uint8(2) overflowed in the forest size check
    s = ca.ModelSettings(gamma=np.float32(0.5), kappa=np.float64(0.25), n_trees=np.int64(20),
                         max_depth=np.uint8(2), max_bins=np.int16(16), discount=np.float64(0.99))
    assert s == ca.ModelSettings(gamma=0.5, kappa=0.25, max_depth=2, max_bins=16, discount=0.99)
    for policy in ca.ONLINE_POLICIES:
        r = ca.Router(["a", "b"], [0.5, 0.5], policy, n_features=2, settings=s)
        r.assign([0.0, 1.0])
        r.update(r.last_task_id, None, 1)
        assert _roundtrip(r).state_dict() == json.loads(json.dumps(r.state_dict()))
    assert all(type(v) in (int, float) for v in s.fields().values())
