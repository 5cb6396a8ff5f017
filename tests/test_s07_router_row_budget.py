"""A tree router's row budget (``Router(..., tree_row_budget=K)``): each agent
keeps its K most recent rows at most - the oldest ceil(K / 8) dropped when a
reward arrives for an agent holding K - its forest is rebuilt from the rows
kept, the budget is saved and restored, and without a budget nothing changes.
"""

import json

import numpy as np
import pytest

import capassign as ca

D = 4
X, R, _ = ca.synthetic_stream(1600, D, seed=3)


def _feed(router, n, lag=5, start=0, pending=None):
    """Assign tasks start..start+n-1, each reward arriving ``lag`` tasks later;
    return the decisions and the tasks still waiting."""
    pending = [] if pending is None else list(pending)
    decisions = []
    for i in range(start, start + n):
        a = router.assign(X[i])
        decisions.append(a)
        pending.append((i, a))
        if len(pending) > lag:
            j, b = pending.pop(0)
            router.update(j, b, R[j, router.agents.index(b)])
    return decisions, pending


@pytest.mark.parametrize("reference", [True, False], ids=["reference bins", "stream bins"])
def test_each_agent_keeps_its_most_recent_rows(reference):
    K = 64
    router = ca.Router(2, [0.6, 0.4], "tree-greedy", seed=1, n_features=D,
                       X_reference=X[:500] if reference else None, tree_row_budget=K)
    fed = {0: [], 1: []}                  # the contexts each agent was given, in order
    pending = []
    for i in range(900):
        a = router.assign(X[i])
        pending.append((i, a))
        if len(pending) > 5:
            j, b = pending.pop(0)
            router.update(j, b, R[j, b])
            fed[b].append(j)
    st = router.state_dict()
    drop = -(-K // 8)
    for a in (0, 1):
        seen = len(fed[a])
        assert seen > 4 * K                                        # drops happened
        n = st["model"]["nobs"][a]
        assert K - drop + 1 <= n <= K
        assert n == K - drop + 1 + (seen - K - 1) % drop           # the stated rule
        kept = fed[a][-n:]                                        # the most recent, in order
        bins = ca._unpack_array(st["model"]["bins"][a], "bins", (n, D))
        assert np.array_equal(bins, ca._bin_with_edges(X[kept], st["model"]["edges"]))
        rewards = ca._unpack_array(st["model"]["rewards"][a], "rewards", (n,))
        assert np.array_equal(rewards, R[kept, a])
    if not reference:                       # the raw contexts kept for the next cut, too
        assert [len(r) for r in st["model"]["stream"]["raw"]] == st["model"]["nobs"]


def test_the_state_stays_bounded():
    sizes = []
    for n in (800, 1600):
        router = ca.Router(2, [0.5, 0.5], "tree-greedy", X_reference=X[:500], seed=0,
                           tree_row_budget=64)
        _feed(router, n, lag=0)
        sizes.append(len(json.dumps(router.state_dict())))
        assert max(router.state_dict()["model"]["nobs"]) <= 64
    assert abs(sizes[1] - sizes[0]) < 0.1 * sizes[0]       # twice the rewards, same size
    unbounded = ca.Router(2, [0.5, 0.5], "tree-greedy", X_reference=X[:500], seed=0)
    _feed(unbounded, 1600, lag=0)
    assert len(json.dumps(unbounded.state_dict())) > 3 * sizes[1]


@pytest.mark.parametrize("policy", ["tree-greedy", "tree-ts"])
@pytest.mark.parametrize("reference", [True, False], ids=["reference bins", "stream bins"])
def test_saved_and_restored_exactly(policy, reference):
    router = ca.Router(["a", "b"], [0.6, 0.4], policy, seed=2, n_features=D,
                       X_reference=X[:500] if reference else None, tree_row_budget=48)
    _, pending = _feed(router, 700)
    st = json.loads(json.dumps(router.state_dict()))
    assert st["tree_row_budget"] == 48
    restored = ca.Router.from_state(st)
    assert restored.tree_row_budget == 48
    live, again = (_feed(r, 600, start=700, pending=pending)[0] for r in (router, restored))
    assert live == again
    assert router.state_dict() == restored.state_dict()
    # a state whose rows do not follow the rule is refused
    bad = json.loads(json.dumps(st))
    bad["tree_row_budget"] = 200
    with pytest.raises(ValueError, match="as kept under state\\['tree_row_budget'\\]"):
        ca.Router.from_state(bad)
    del bad["tree_row_budget"]
    with pytest.raises(ValueError, match="must equal state\\['rewards_seen'\\]$"):
        ca.Router.from_state(bad)


def test_forest_is_the_one_of_the_rows_kept():
    """After a drop the agent's trees are those a router given only the rows kept
    (same bins, rewards, weights) has: the replay of a restore, from scratch."""
    router = ca.Router(2, [0.5, 0.5], "tree-greedy", X_reference=X[:500], seed=4,
                       tree_row_budget=40)
    _feed(router, 300, lag=0)
    m = router._model
    fresh = ca.Router.from_state(json.loads(json.dumps(router.state_dict())))._model
    for name in ("_feat", "_thr", "_val", "_fitted", "_node_c", "_node_s", "_HC"):
        assert np.array_equal(getattr(m, name), getattr(fresh, name)), name


def test_without_a_budget_nothing_changes():
    """Default None: no key in the saved state, and the decisions of a router
    whose budget is never reached (the same code path as before the option)."""
    plain = ca.Router(2, [0.5, 0.5], "tree-ts", X_reference=X[:500], seed=5)
    large = ca.Router(2, [0.5, 0.5], "tree-ts", X_reference=X[:500], seed=5,
                      tree_row_budget=10 ** 6)
    assert plain.tree_row_budget is None
    decided = [_feed(r, 600)[0] for r in (plain, large)]
    assert decided[0] == decided[1]
    st = plain.state_dict()
    assert "tree_row_budget" not in st
    assert {k: v for k, v in large.state_dict().items() if k != "tree_row_budget"} == st


def test_bad_budgets_are_refused():
    with pytest.raises(ValueError, match="tree_row_budget applies to the tree policies"):
        ca.Router(2, [0.5, 0.5], "logistic-greedy", n_features=D, tree_row_budget=100)
    with pytest.raises(ValueError, match="tree_row_budget"):
        ca.Router(2, [0.5, 0.5], "tree-greedy", n_features=D, tree_row_budget=39)  # < 2 x 20
    with pytest.raises(TypeError, match="tree_row_budget"):
        ca.Router(2, [0.5, 0.5], "tree-greedy", n_features=D, tree_row_budget=64.0)
    router = ca.Router(2, [0.5, 0.5], "tree-greedy", n_features=D, tree_row_budget=64)
    with pytest.raises(AttributeError):
        router.tree_row_budget = 128
