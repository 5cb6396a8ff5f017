"""Tests of the streaming Router: decisions, delayed rewards, state round trips."""

import json

import numpy as np
import pytest

import capassign as ca


@pytest.fixture(scope="module")
def stream():
    X, R, _ = ca.synthetic_stream(2000, 4, seed=5)
    return X, R


@pytest.mark.parametrize("policy", ca.ONLINE_POLICIES)
def test_router_takes_the_decisions_of_a_simulated_run(stream, policy):
    # Immediate rewards in run k's task order, with run k's random state and
    # the whole stream as reference contexts: exactly simulate's run k.
    X, R = stream[0][:600], stream[1][:600]
    caps = [0.3, 0.7]
    res = ca.simulate(X, R, caps, policy, runs=2, seed=7, return_traces=True)
    orders, seeds = ca._stream_orders(7, 2, len(X))
    router = ca.Router(2, caps, policy, X_reference=X, seed=0)
    router._rng[:] = ca._rng_states(seeds)[1]
    got = []
    for t, i in enumerate(orders[1]):
        np.testing.assert_array_equal(router.Q, res.queues[1, t])  # Q in force at decision t
        a = router.assign(X[i])
        router.update(t, a, int(R[i, a]))
        got.append(a)
    assert np.array_equal(got, res.assignments[1])
    assert router.pending == []
    assert router.assigned_counts.sum() == len(X)


def _delayed_run(policy, X, R, save_at=None, T=2000, reference=True, **kw):
    router = ca.Router(["model", "crowd", "expert"], [0.6, 0.4, None], policy,
                       X_reference=X[:300] if reference else None, n_features=X.shape[1],
                       seed=4, **kw)
    delays = np.random.default_rng(1).integers(0, 40, size=T)
    due, decisions = {}, []
    for t in range(T):
        if t == save_at:
            router = ca.Router.from_state(json.loads(json.dumps(router.state_dict())))
        a = router.assign(X[t])
        decisions.append(a)
        due.setdefault(t + int(delays[t]), []).append((t, a))
        # rewards of earlier tasks arrive now, newest first (out of order)
        for tid, agent in reversed(due.pop(t, [])):
            router.update(tid, agent, int(R[tid, router.agents.index(agent) % 2]))
    return decisions, router


@pytest.mark.parametrize("policy", ca.ONLINE_POLICIES)
def test_restored_router_decides_like_an_uninterrupted_one(stream, policy):
    X, R = stream
    plain, r1 = _delayed_run(policy, X, R)
    restored, r2 = _delayed_run(policy, X, R, save_at=1000)
    assert restored == plain
    assert r1.pending == r2.pending and len(r1.pending) > 0
    np.testing.assert_array_equal(r1.Q, r2.Q)
    np.testing.assert_array_equal(r1.rewards_seen, r2.rewards_seen)
    # every agent, the free one included, was used; capacities are met
    shares = r1.assigned_counts / r1.n_assigned
    assert np.all(r1.assigned_counts[:2] > 0)
    if policy != "random":                 # random never picks a free agent
        assert r1.assigned_counts[2] > 0
    assert shares[0] <= 0.6 + 0.01 and shares[1] <= 0.4 + 0.01
    if policy.startswith("tree"):
        np.testing.assert_array_equal(r1._model._feat, r2._model._feat)
        np.testing.assert_array_equal(r1._model._val, r2._model._val)


def test_state_is_plain_versioned_json(stream):
    X, R = stream
    router = ca.Router(2, [0.5, 0.5], "tree-ts", X_reference=X, seed=3)
    for t in range(120):
        router.assign(X[t])
    for t in range(0, 120, 2):
        router.update(t, None, int(R[t, 0]))
    state = router.state_dict()
    text = json.dumps(state)
    assert state["schema"] == "capassign.router/6"
    back = json.loads(text)
    assert back == state
    again = ca.Router.from_state(back)
    assert again.state_dict() == state
    assert again.pending == list(range(1, 120, 2))


def test_future_and_malformed_states_are_rejected(stream):
    X, _ = stream
    state = ca.Router(2, [0.5, 0.5], "logistic-greedy", n_features=4).state_dict()
    with pytest.raises(ValueError, match="newer"):
        ca.Router.from_state(dict(state,
                                  schema=f"capassign.router/{ca.ROUTER_SCHEMA_VERSION + 1}"))
    with pytest.raises(ValueError, match="schema"):
        ca.Router.from_state(dict(state, schema="something/1"))
    with pytest.raises(ValueError, match="'Q'"):
        ca.Router.from_state(dict(state, Q=[0.0, -1.0]))
    with pytest.raises(ValueError, match="missing the key 'rng'"):
        ca.Router.from_state({k: v for k, v in state.items() if k != "rng"})
    with pytest.raises(ValueError, match="rng"):
        ca.Router.from_state(dict(state, rng=[0, 0, 0, 0]))
    bad = json.loads(json.dumps(state))
    bad["model"]["theta"] = [[0.0] * 5]
    with pytest.raises(ValueError, match="theta"):
        ca.Router.from_state(bad)
    tree = ca.Router(2, [0.5, 0.5], "tree-greedy", X_reference=X).state_dict()
    tree["model"]["weights"][0]["uint8_base64"] = "***"
    with pytest.raises(ValueError, match="weights"):
        ca.Router.from_state(tree)
    with pytest.raises(TypeError, match="state"):
        ca.Router.from_state("{}")


def test_pending_unknown_and_duplicate_updates(stream):
    X, R = stream
    router = ca.Router(["a", "b"], [0.5, 0.5], "logistic-ts", n_features=4, seed=1)
    a0 = router.assign(X[0])
    a1 = router.assign(X[1], task_id="job-7")
    assert router.pending == [0, "job-7"]
    with pytest.raises(ValueError, match="already pending"):
        router.assign(X[2], task_id="job-7")
    with pytest.raises(ValueError, match="not pending"):
        router.update(99, a0, 1)
    other = "b" if a1 == "a" else "a"
    with pytest.raises(ValueError, match="does not match"):
        router.update("job-7", other, 1)
    router.update("job-7", a1, 1)
    with pytest.raises(ValueError, match="not pending"):
        router.update("job-7", a1, 1)
    for bad in (1.5, -0.25, np.nan):
        with pytest.raises(ValueError, match=r"reward: rewards must be numbers in \[0, 1\]"):
            router.update(0, a0, bad)
    assert router.pending == [0]          # a rejected update changes nothing
    router.update(0, None, True)
    assert router.pending == []
    assert router.rewards_seen.sum() == 2


def test_assign_batch_meets_the_batch_counts(stream):
    X, R = stream
    router = ca.Router(3, [0.5, 0.3, 0.2], "tree-greedy", X_reference=X, seed=2)
    Q = router.Q
    counts = ca.batch_counts(11, [0.5, 0.3, 0.2], Q)
    agents = router.assign_batch(X[:11])
    assert np.array_equal(np.bincount(agents, minlength=3), counts)
    np.testing.assert_allclose(router.Q, ca.batch_queue_update(Q, counts, [0.5, 0.3, 0.2], 11))
    assert router.pending == list(range(11))
    for t, a in enumerate(agents):
        router.update(t, a, int(R[t, a % 2]))
    # over many batches the realised shares follow the capacities
    for start in range(11, 1111, 25):
        router.assign_batch(X[start:start + 25])
    shares = router.assigned_counts / router.n_assigned
    np.testing.assert_allclose(shares, [0.5, 0.3, 0.2], atol=2 / router.n_assigned)


def test_free_agent_and_observations_outside_the_stream(stream):
    X, R = stream
    router = ca.Router(2, [1.0, None], "logistic-greedy", n_features=4)
    # teach the free agent (index 1) that it is always right, from history
    for t in range(200):
        router.update(X[t], 1, 1)
        router.update(X[t], 0, 0)
    assert router.n_assigned == 0 and np.all(router.Q == 0)
    picks = [router.assign(X[t]) for t in range(200, 260)]
    assert picks.count(1) == 60            # the free agent takes every task
    assert router.Q[1] == 0.0


def test_router_rejects_bad_input(stream):
    X, _ = stream
    with pytest.raises(ValueError, match="X_reference"):
        ca.Router(2, [0.5, 0.5], "tree-greedy")
    with pytest.raises(ValueError, match="policy"):
        ca.Router(2, [0.5, 0.5], "oracle", n_features=4)
    with pytest.raises(ValueError, match="capacities"):
        ca.Router(2, [0.5, 0.6], "random")
    with pytest.raises(ValueError, match="eta"):
        ca.Router(2, [0.5, 0.5], "random", eta=-1.0)
    with pytest.raises(ValueError, match="agents must not repeat a name"):
        ca.Router(["a", "a"], [0.5, 0.5], "random")
    router = ca.Router(2, [0.5, 0.5], "logistic-ts", n_features=4)
    with pytest.raises(ValueError, match="features"):
        router.assign(X[0, :3])
    with pytest.raises(ValueError, match="NaN"):
        router.assign([0.0, np.nan, 1.0, 2.0])
    with pytest.raises(ValueError, match="NaN"):
        router.assign_batch(np.full((3, 4), np.inf))
    with pytest.raises(ValueError, match="agent"):
        router.update(X[0], 5, 1)
    assert router.n_assigned == 0 and router.pending == []


# --- task ids, cancel and expiry --------------------------------------------------


def test_automatic_ids_never_collide_with_chosen_ids(stream):
    X, _ = stream
    router = ca.Router(2, [0.5, 0.5], "marginal")
    router.assign(X[0], task_id=1)          # a caller takes the number 1
    router.assign(X[1])                     # sequence number 1 is taken: next free
    assert router.last_task_id == 2
    router.assign(X[2])                     # sequence number 2 is taken too
    assert router.last_task_id == 3
    router.assign(X[3], task_id="x")
    router.assign_batch(X[4:8], task_ids=None)
    assert router.pending == [1, 2, 3, "x", 4, 5, 6, 7]
    assert router.last_task_id == 7
    router.update(1, None, 1)
    router.assign(X[8])                     # 8 is free again: the sequence number
    assert router.last_task_id == 8 and len(set(router.pending)) == len(router.pending)


def test_cancel_frees_a_task_and_leaves_the_queues(stream):
    X, _ = stream
    router = ca.Router(["a", "b"], [0.3, 0.7], "logistic-greedy", n_features=4)
    agents = [router.assign(X[t]) for t in range(5)]
    Q, counts = router.Q, router.assigned_counts
    assert router.cancel(2) == agents[2]
    assert router.pending == [0, 1, 3, 4] and router.n_cancelled == 1
    np.testing.assert_array_equal(router.Q, Q)               # the assignment stays counted
    np.testing.assert_array_equal(router.assigned_counts, counts)
    with pytest.raises(ValueError, match="not pending"):
        router.update(2, agents[2], 1)
    with pytest.raises(ValueError, match="not pending"):
        router.cancel(2)
    with pytest.raises(TypeError, match="task_id"):
        router.cancel(2.0)
    assert router.rewards_seen.sum() == 0


@pytest.mark.parametrize("limit", [{"max_pending": 50}, {"max_age": 30},
                                   {"max_pending": 40, "max_age": 100}])
def test_unanswered_tasks_expire_and_the_state_stays_small(stream, limit):
    X, R = stream
    free = ca.Router(2, [0.4, 0.6], "random", seed=3)
    capped = ca.Router(2, [0.4, 0.6], "random", seed=3, **limit)
    for t in range(2000):
        a = capped.assign(X[t])
        assert free.assign(X[t]) == a
        if t % 10 == 0:                      # one reward in ten comes back at once
            capped.update(t, a, int(R[t, a]))
            free.update(t, a, int(R[t, a]))
        ages = [t - tid for tid in capped.pending]
        assert len(ages) <= limit.get("max_pending", 2000)
        assert max(ages, default=0) <= limit.get("max_age", 2000)
    # expiry forgets tasks, it does not touch the queues
    np.testing.assert_array_equal(capped.Q, free.Q)
    assert capped.n_expired == len(free.pending) - len(capped.pending)
    text = json.dumps(capped.state_dict())
    assert len(text) < len(json.dumps(free.state_dict())) / 10
    back = ca.Router.from_state(json.loads(text))
    assert back.pending == capped.pending and back.n_expired == capped.n_expired
    for t in range(100):                     # the restored router expires the same way
        assert back.assign(X[t]) == capped.assign(X[t])
        assert back.pending == capped.pending
    with pytest.raises(ValueError, match="max_pending"):
        ca.Router(2, [0.4, 0.6], "random", max_pending=0)
    with pytest.raises(TypeError, match="max_age"):
        ca.Router(2, [0.4, 0.6], "random", max_age=1.5)


# --- tree policies with bin edges from the stream ----------------------------------


@pytest.mark.parametrize("policy", ["tree-greedy", "tree-ts"])
def test_stream_bins_are_deterministic_and_restored_exactly(stream, policy):
    X, R = stream
    # saves before the first cut, between cuts and right at a cut
    plain, r1 = _delayed_run(policy, X, R, T=700, reference=False)
    for save_at in (40, 128, 300):
        restored, r2 = _delayed_run(policy, X, R, save_at=save_at, T=700, reference=False)
        assert restored == plain
        np.testing.assert_array_equal(r1._model._feat, r2._model._feat)
        np.testing.assert_array_equal(r1._model._val, r2._model._val)
        assert r1.state_dict() == r2.state_dict()
    edges = ca._bin_contexts(X[:512], ca.PAPER_SETTINGS.max_bins)[2]
    assert all(np.array_equal(a, b) for a, b in zip(r1._model._edges_list, edges))


@pytest.mark.parametrize("cut", [64, 128])
def test_stream_bins_refit_exactly_on_the_current_bins(stream, cut):
    # Fed the same observations, a router that cut its edges from the stream
    # holds, after the cut, the very forest of a router given those contexts
    # as X_reference from the start: rows re-binned, refits exact.
    X, R = stream
    n = cut + 50                             # before the next cut
    live = ca.Router(2, [0.5, 0.5], "tree-ts", n_features=4, seed=9)
    ref = ca.Router(2, [0.5, 0.5], "tree-ts", X_reference=X[:cut], seed=9)
    for t in range(n):
        for router in (live, ref):
            router.update(X[t], t % 2, int(R[t, t % 2]))
    assert live._model._nobs.tolist() == ref._model._nobs.tolist()
    assert live._model._fitted.all()
    for name in ("_Xa", "_W", "_feat", "_thr", "_val", "_node_c", "_node_s"):
        np.testing.assert_array_equal(getattr(live._model, name), getattr(ref._model, name),
                                      err_msg=name)
    # the histograms of every node the trees can reach (the re-cut starts from
    # empty histograms, so nodes no longer in any tree hold nothing)
    n_int = live._model._HC.shape[1]
    for a in range(2):
        for b in range(live.settings.n_trees):
            for u in range(n_int):
                if u == 0 or ref._model._feat[a, b, (u - 1) // 2] >= 0:
                    for col in (b, live.settings.n_trees + b):      # counts, sums
                        np.testing.assert_array_equal(live._model._HC[a, u, :, col],
                                                      ref._model._HC[a, u, :, col])
    later = range(n, 2 * cut - 1)            # contexts seen stay below the next cut
    assert [live.assign(X[t]) for t in later] == [ref.assign(X[t]) for t in later]


def test_stream_bins_freeze_after_the_last_cut():
    X, R, _ = ca.synthetic_stream(ca.ROUTER_STREAM_CUTS[-1] + 10, 2, seed=2)
    router = ca.Router(2, [0.5, 0.5], "tree-greedy", n_features=2, seed=1, max_pending=10)
    B = 1000
    for s in range(0, len(X), B):
        agents = router.assign_batch(X[s:s + B])
        for i, a in zip(range(s, s + B), agents):
            if i not in router.pending:      # the batch's first tasks expired
                continue
            if i % 4 == 0:
                router.cancel(i)
            else:
                router.update(i, a, int(R[i, a]))
    assert router.n_expired > 0 and router.n_cancelled > 0
    assert router._model._seen is None and router._model._raw is None
    edges = ca._bin_contexts(X[:ca.ROUTER_STREAM_CUTS[-1]], 32)[2]
    assert all(np.array_equal(a, b) for a, b in zip(router._model._edges_list, edges))
    state = json.loads(json.dumps(router.state_dict()))
    assert state["model"]["stream"] == {"n_seen": len(X), "seen": None, "raw": None}
    back = ca.Router.from_state(state)
    assert back.state_dict() == state
    assert back.assign(X[0]) == router.assign(X[0])


# --- one rule for rewards -------------------------------------------------------------


@pytest.mark.parametrize("bad", [1.5, -1.0, 2.0, np.nan])
def test_one_reward_rule_everywhere(stream, bad):
    X, R = stream
    Rb = R[:50].astype(float)
    Rb[3, 1] = bad
    msg = r"rewards must be numbers in \[0, 1\]"
    with pytest.raises(ValueError, match=f"R: {msg}"):
        ca.simulate(X[:50], Rb, [0.5, 0.5], "random", runs=1)
    with pytest.raises(ValueError, match=f"R: {msg}"):
        ca.hindsight_optimum(Rb, [0.5, 0.5])
    for policy in ca.ONLINE_POLICIES:
        router = ca.Router(2, [0.5, 0.5], policy, n_features=4)
        a = router.assign(X[0])
        with pytest.raises(ValueError, match=f"reward: {msg}"):
            router.update(0, a, bad)
        with pytest.raises(ValueError, match=f"reward: {msg}"):
            router.update(X[1], 0, bad)
        with pytest.raises(TypeError, match=f"reward: {msg}"):
            router.update(0, a, "1")
        router.update(0, a, np.float32(1.0))
        router.update(X[1], 1, False)
        assert router.rewards_seen.sum() == 2
