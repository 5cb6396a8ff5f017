"""Limits as teams have them: upper-bound capacities (simulate, Router, oracle),
live capacity changes, pauses, per-task eligibility, expiry by time and the
exception of unknown tasks."""

import copy
import json

import numpy as np
import pytest

import capassign as ca

UPPER = [0.7, 0.5, 0.3]


def _dominated_stream(T, seed=0):
    """Three agents, agent 0 best on every task (unconstrained it would take
    nearly all of them), agent 1 second: the bounds of UPPER must bind."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(T, 3))
    R = (rng.random((T, 3)) < np.array([0.9, 0.7, 0.5])).astype(np.int8)
    return X, R


@pytest.fixture(scope="module")
def stream():
    return _dominated_stream(10_000)


# --- upper bounds in simulate -----------------------------------------------------


@pytest.mark.parametrize("policy", ["random", "marginal", "logistic-greedy", "tree-greedy"])
@pytest.mark.parametrize("batch_size", [None, 50])
def test_upper_bounds_hold_in_simulate(stream, policy, batch_size):
    X, R = stream
    res = ca.simulate(X, R, UPPER, policy, runs=2, seed=1, batch_size=batch_size,
                      bounds="upper")
    assert np.all(res.assigned <= np.array(UPPER) + 0.01), res.assigned
    if policy != "random":   # the best agent (unbounded: ~all tasks) is held near its bound
        assert np.all(res.assigned[:, 0] > UPPER[0] - 0.1), res.assigned


def test_upper_bounds_hold_on_the_reference_engine(stream):
    X, R = stream
    res = ca.simulate(X[:4000], R[:4000], UPPER, "logistic-greedy", runs=1, seed=1,
                      bounds="upper", engine="reference")
    assert np.all(res.assigned <= np.array(UPPER) + 0.01), res.assigned


def test_random_policy_draws_the_bounds_scaled_to_one(stream):
    X, R = stream
    res = ca.simulate(X, R, UPPER, "random", runs=4, seed=2, bounds="upper")
    np.testing.assert_allclose(res.assigned.mean(axis=0), np.array(UPPER) / 1.5, atol=0.01)


@pytest.mark.parametrize("policy", ["random", "logistic-greedy", "tree-ts"])
@pytest.mark.parametrize("batch_size", [None, 40])
def test_upper_bounds_summing_to_one_are_the_exact_shares(stream, policy, batch_size):
    X, R = stream[0][:1500], stream[1][:1500]
    kw = dict(runs=2, seed=3, batch_size=batch_size, return_traces=True)
    exact = ca.simulate(X, R, [0.5, 0.3, 0.2], policy, **kw)
    upper = ca.simulate(X, R, [0.5, 0.3, 0.2], policy, bounds="upper", **kw)
    assert np.array_equal(exact.assignments, upper.assignments)
    assert np.array_equal(exact.queues, upper.queues)


def test_batch_caps_sum_to_at_least_the_batch():
    assert ca.batch_counts(10, UPPER, [0.0, 0.0, 0.0], bounds="upper").tolist() == [7, 5, 3]
    # queues far above the bounds: the exact rule's counts (summing to B)
    N = ca.batch_counts(10, UPPER, [9.0, 9.0, 9.0], bounds="upper")
    assert N.sum() == 10 and np.all(N >= 0)
    agents = ca.batch_assign([[0.9, 0.1, 0.0]] * 6, [7, 5, 3], bounds="upper")
    assert agents.tolist() == [0] * 6            # caps, not counts: agent 0 takes all six


# --- upper bounds in the Router ------------------------------------------------------


@pytest.mark.parametrize("policy", ["marginal", "logistic-greedy", "tree-ts"])
def test_upper_bounds_hold_in_the_router(stream, policy):
    X, R = stream
    router = ca.Router(["a", "b", "c"], UPPER, policy, X_reference=X[:500], seed=4,
                       bounds="upper")
    for i in range(len(X)):
        a = router.assign(X[i])
        router.update(router.last_task_id, a, int(R[i, router.agents.index(a)]))
    share = router.assigned_counts / len(X)
    assert np.all(share <= np.array(UPPER) + 0.01), share
    assert share[0] > UPPER[0] - 0.1
    state = router.state_dict()
    assert state["bounds"] == "upper" and state["capacities"] == UPPER
    assert ca.Router.from_state(json.loads(json.dumps(state))).bounds == "upper"


def test_upper_bounds_hold_in_the_routers_batches(stream):
    X, R = stream
    router = ca.Router(3, UPPER, "logistic-greedy", n_features=3, seed=4, bounds="upper")
    for start in range(0, len(X), 100):
        agents = router.assign_batch(X[start:start + 100])
        for t, a in zip(range(start, start + 100), agents):
            router.update(t, a, int(R[t, a]))
    share = router.assigned_counts / len(X)
    assert np.all(share <= np.array(UPPER) + 0.01) and share[0] > UPPER[0] - 0.1, share


# --- the oracle -------------------------------------------------------------------


@pytest.mark.parametrize("m", [400, 200_000])
def test_oracle_prices_are_nonnegative_and_zero_where_slack(m):
    rng = np.random.default_rng(m)
    mu = rng.random((m, 3)) * np.array([1.0, 0.8, 0.6])     # agent 0 best on average
    caps = [0.3, 0.6, 0.5]
    res = ca.optimal_assignment(mu, caps, bounds="upper")
    assert np.all(res.loads <= np.array(caps) + 1e-9), res.loads
    assert np.all(res.shadow_prices >= 0.0), res.shadow_prices
    slack = res.loads < np.array(caps) - 1e-6
    assert slack.any() and not slack.all()                  # some bind, some do not
    assert np.all(res.shadow_prices[slack] == 0.0), (res.loads, res.shadow_prices)
    assert np.all(res.shadow_prices[~slack] > 0.0), (res.loads, res.shadow_prices)
    # a relaxation of any exact shares below the bounds: at least as good
    exact = ca.optimal_assignment(mu, [0.3, 0.4, 0.3])
    assert res.value >= exact.value - 1e-9
    # complementary slackness: every context on a maximiser of mu - lambda
    adj = mu - res.shadow_prices
    on_best = adj >= adj.max(axis=1, keepdims=True) - 1e-9
    assert np.all((res.assignment <= 1e-12) | on_best)


@pytest.mark.parametrize("method", ["sort", "lp"])
def test_hindsight_optimum_under_upper_bounds(method):
    R = (np.random.default_rng(5).random((400, 2)) < [0.9, 0.6]).astype(np.int8)
    best = ca.hindsight_optimum(R, [0.8, 0.7], method=method, bounds="upper")
    assert best.counts[0] <= 320 and best.counts[1] <= 280
    exact = ca.hindsight_optimum(R, [0.8, 0.2], method=method)
    assert best.reward >= exact.reward          # a relaxation of shares within the bounds
    assert best.lower.tolist() == [0, 0] and best.upper.tolist() == [320, 280]


def test_oracle_upper_bounds_summing_to_one_are_the_exact_programme():
    mu = np.random.default_rng(1).random((300, 3))
    a = ca.optimal_assignment(mu, [0.2, 0.3, 0.5])
    b = ca.optimal_assignment(mu, [0.2, 0.3, 0.5], bounds="upper")
    assert np.array_equal(a.assignment, b.assignment)
    assert np.array_equal(a.shadow_prices, b.shadow_prices)


# --- set_capacities ------------------------------------------------------------------


def test_set_capacities_takes_effect_everywhere_and_keeps_the_queues(stream):
    X, R = stream
    router = ca.Router(["a", "b"], [0.5, 0.5], "logistic-greedy", n_features=3, seed=1)
    for i in range(300):
        a = router.assign(X[i])
        router.update(router.last_task_id, a, int(R[i, router.agents.index(a)]))
    Q = router.Q
    router.set_capacities([0.1, 0.9])
    np.testing.assert_array_equal(router.Q, Q)               # the queues are kept
    assert router.capacities == (0.1, 0.9)
    state = router.state_dict()
    assert state["capacities"] == [0.1, 0.9]
    restored = ca.Router.from_state(json.loads(json.dumps(state)))
    before = router.assigned_counts.copy()
    for i in range(300, 2300):                                 # assign
        x = X[i]
        a, b = router.assign(x), restored.assign(x)
        assert a == b                                          # the saved state decides alike
        r = int(R[i, router.agents.index(a)])
        router.update(router.last_task_id, a, r)
        restored.update(restored.last_task_id, b, r)
    assert abs((router.assigned_counts - before)[0] / 2000 - 0.1) < 0.01
    before = router.assigned_counts.copy()
    for start in range(2300, 4300, 100):                       # assign_batch
        router.assign_batch(X[start:start + 100])
    assert abs((router.assigned_counts - before)[0] / 2000 - 0.1) < 0.01
    with pytest.raises(ValueError, match=r"^capacities sum to 0\.5; they must sum to 1"):
        router.set_capacities([0.2, 0.3])
    with pytest.raises(AttributeError, match="set_capacities"):
        router.capacities = (0.5, 0.5)


def test_set_capacities_of_an_upper_bounds_router():
    router = ca.Router(3, UPPER, "random", bounds="upper")
    router.set_capacities([0.9, 0.9, 0.1])
    assert router.state_dict()["capacities"] == [0.9, 0.9, 0.1]
    with pytest.raises(ValueError,
                       match=r"^capacities sum to 0\.6000000000000001; as upper bounds"):
        router.set_capacities([0.2, 0.2, 0.2])


# --- pause and resume ----------------------------------------------------------------


@pytest.mark.parametrize("policy", ["marginal", "logistic-greedy", "tree-greedy"])
def test_pause_and_resume_keep_the_model(stream, policy):
    X, R = stream
    router = ca.Router(["a", "b", "c"], [0.4, 0.3, 0.3], policy, X_reference=X[:500], seed=2)
    for i in range(600):
        a = router.assign(X[i])
        router.update(router.last_task_id, a, int(R[i, router.agents.index(a)]))
    before = copy.deepcopy(router)
    router.pause("b")
    assert router.paused == ["b"] and router.state_dict()["paused"] == ["b"]
    Qb, nb = router.Q[1], router.assigned_counts[1]
    for i in range(600, 1600):
        a = router.assign(X[i])
        assert a != "b"
        router.update(router.last_task_id, a, int(R[i, router.agents.index(a)]))
    assert router.assigned_counts[1] == nb and router.Q[1] == Qb     # no task, queue still
    # the others take b's share while it is paused (exact shares: scaled by 1 / 0.7)
    share = (router.assigned_counts - before.assigned_counts) / 1000
    np.testing.assert_allclose(share, [0.4 / 0.7, 0.0, 0.3 / 0.7], atol=0.02)
    restored = ca.Router.from_state(json.loads(json.dumps(router.state_dict())))
    assert restored.paused == ["b"]
    assert [restored.assign(X[i]) for i in range(50)] == [router.assign(X[i]) for i in range(50)]
    router.resume("b")
    assert router.paused == []
    x = X[1700]
    est = router.assign(x, explain=True).estimates
    est0 = before.assign(x, explain=True).estimates
    if policy == "tree-greedy":            # b's forest untouched: its estimate is the same
        assert est[1] == est0[1]
    else:
        assert est[1] == pytest.approx(est0[1], abs=0.0)
    with pytest.raises(ValueError, match="is not paused"):
        router.resume("b")


def test_pause_rules():
    router = ca.Router(["a", "b"], [0.5, 0.5], "random")
    router.pause("a")
    with pytest.raises(ValueError, match="already paused"):
        router.pause("a")
    with pytest.raises(ValueError, match=r"^agent: every agent would be paused"):
        router.pause("b")
    assert router.assign_batch(np.zeros((20, 1))) == ["b"] * 20
    team = ca.Router(["a", "b", "c"], [0.4, 0.3, 0.3], "random")
    team.pause("a")
    team.pause("b")
    team.assign([0.0])
    with pytest.raises(ValueError, match=r"^name: every agent would be paused"):
        team.remove_agent("c")
    assert team.agents == ["a", "b", "c"] and team.pending == [0]    # nothing changed
    zero = ca.Router(["a", "b", "c"], [0.0, 1.0, 0.0], "random")
    with pytest.raises(ValueError, match=r"^agent: the agents not paused would all have"):
        zero.pause("b")


def test_pausing_an_upper_bounds_router_keeps_bounds_that_still_cover(stream):
    X, R = stream
    router = ca.Router(["a", "b", "c"], UPPER, "marginal", seed=1, bounds="upper")
    router.pause("c")                        # 0.7 + 0.5 >= 1: the bounds stay
    for i in range(4000):
        a = router.assign(X[i])
        router.update(router.last_task_id, a, int(R[i, router.agents.index(a)]))
    share = router.assigned_counts / 4000
    assert share[2] == 0 and share[0] <= 0.71 and share[1] <= 0.51


# --- eligibility ---------------------------------------------------------------------


@pytest.mark.parametrize("policy", ca.ONLINE_POLICIES)
def test_eligibility_is_never_violated(stream, policy):
    X, R = stream
    rng = np.random.default_rng(7)
    router = ca.Router(["a", "b", "c", "d"], [0.4, 0.3, 0.2, None], policy,
                       X_reference=X[:300], seed=3)
    for i in range(400):
        mask = rng.random(4) < 0.5
        if not mask.any():
            mask[rng.integers(4)] = True
        as_names = i % 2 == 0
        eligible = [n for n, m in zip(router.agents, mask) if m] if as_names else mask
        if i == 200:
            router.pause("b")
        if i == 300:
            router.resume("b")
        allowed = mask & ~np.isin(router.agents, router.paused)
        if not allowed.any():
            with pytest.raises(ValueError, match="^eligible leaves no agent"):
                router.assign(X[i], eligible=eligible)
            continue
        Q = router.Q
        d = router.assign(X[i], eligible=eligible, explain=(i % 25 == 0), n_draws=50)
        a = d.agent if isinstance(d, ca.Decision) else d
        k = router.agents.index(a)
        assert allowed[k], (i, mask, a)
        if isinstance(d, ca.Decision):
            assert d.propensity > 0
        # Eq. 1 for every agent, eligible or not (paused ones held at 0)
        alpha = np.array([0.4, 0.3, 0.2, 0.0])    # a paused agent is held at 0; the free
        if "b" in router.paused:                     # agent d takes the rest (no scaling)
            alpha[1] = 0.0
        N = np.eye(4)[k]
        want = np.where([True, True, True, False], np.maximum(Q + N - alpha, 0.0), 0.0)
        np.testing.assert_allclose(router.Q, want, atol=1e-12)
        router.update(router.last_task_id, a, int(R[i, k % 3]))


def test_eligibility_errors_and_the_unrestricted_mask():
    router = ca.Router(["a", "b"], [0.5, 0.5], "random", seed=1)
    with pytest.raises(ValueError, match=r"^eligible leaves no agent for this task"):
        router.assign([0.0], eligible=[])
    with pytest.raises(ValueError, match=r"^eligible leaves no agent"):
        router.assign([0.0], eligible=[False, False])
    with pytest.raises(ValueError, match=r"^eligible must hold one True/False per agent"):
        router.assign([0.0], eligible=[True])
    with pytest.raises(ValueError, match="unknown eligible agent 'z'"):
        router.assign([0.0], eligible=["z"])
    with pytest.raises(TypeError, match="^eligible must be a list of agents"):
        router.assign([0.0], eligible="a")
    assert router.n_assigned == 0                    # nothing assigned by a refusal
    other = ca.Router(["a", "b"], [0.5, 0.5], "random", seed=1)
    got = [router.assign([0.0], eligible=["a", "b"]) for _ in range(50)]
    assert got == [other.assign([0.0]) for _ in range(50)]      # all eligible: the same rule


# --- expiry by time ------------------------------------------------------------------


class FakeClock:
    def __init__(self, t=0.0):
        self.t = t

    def __call__(self):
        return self.t


def test_expiry_by_time_with_an_injected_clock():
    clock = FakeClock()
    router = ca.Router(2, [0.5, 0.5], "marginal", max_age_seconds=10, clock=clock)
    for t in (0.0, 5.0, 8.0):
        clock.t = t
        router.assign([0.0])
    clock.t = 12.0
    assert router.pending == [1, 2] and router.n_expired == 1
    with pytest.raises(ca.UnknownTaskError, match="^task 0 is not pending"):
        router.update(0, None, 1)
    router.update(1, None, 1)                        # 7 s old: accepted
    state = json.loads(json.dumps(router.state_dict()))
    assert state["max_age_seconds"] == 10.0 and state["task_ages"] == [[2, 4.0]]
    later = FakeClock(100.0)                         # another process, another clock
    restored = ca.Router.from_state(state, clock=later)
    later.t = 105.0                                  # 4 + 5 = 9 s: still pending
    assert restored.pending == [2]
    later.t = 107.0                                  # 4 + 7 = 11 s: expired
    with pytest.raises(ca.UnknownTaskError):
        restored.cancel(2)
    assert restored.n_expired == 2


def test_expiry_by_time_argument_checks():
    with pytest.raises(ValueError, match=r"^max_age_seconds must be a finite number"):
        ca.Router(2, [0.5, 0.5], "random", max_age_seconds=0)
    with pytest.raises(TypeError, match="^clock must be a function"):
        ca.Router(2, [0.5, 0.5], "random", max_age_seconds=1, clock=3.0)


# --- the exception of unknown tasks --------------------------------------------------


def test_unknown_task_error_type_and_where_it_is_raised():
    assert issubclass(ca.UnknownTaskError, LookupError)
    assert issubclass(ca.UnknownTaskError, ValueError)
    assert "UnknownTaskError" in ca.__all__
    router = ca.Router(["a", "b", "c"], [0.4, 0.3, 0.3], "random", max_age=1)
    with pytest.raises(ca.UnknownTaskError):         # never assigned
        router.update(5, None, 1)
    router.assign([0.0])
    router.cancel(0)
    with pytest.raises(ca.UnknownTaskError):         # cancelled
        router.update(0, None, 1)
    with pytest.raises(ca.UnknownTaskError):
        router.cancel(0)
    for _ in range(3):
        router.assign([0.0])
    with pytest.raises(ca.UnknownTaskError):         # expired (max_age)
        router.update(1, None, 1)
    a = router.assign([0.0])
    router.remove_agent(a)
    router.update(router.last_task_id, a, 1)          # a departed agent's reward: accepted
    with pytest.raises(ca.UnknownTaskError):          # ... once
        router.update(router.last_task_id, a, 1)
    router.assign([0.0])
    with pytest.raises(ValueError) as info:           # a programming error stays a ValueError
        router.update(router.last_task_id, None, 2.0)
    assert not isinstance(info.value, ca.UnknownTaskError)


# --- saved states and validation -------------------------------------------------------


def test_version_5_states_are_still_read(stream):
    X, R = stream
    router = ca.Router(["a", "b"], [0.3, 0.7], "logistic-greedy", n_features=3, seed=2)
    for i in range(200):
        a = router.assign(X[i])
        if i % 2:
            router.update(router.last_task_id, a, int(R[i, router.agents.index(a)]))
    v6 = router.state_dict()
    v5 = {k: v for k, v in v6.items()
          if k not in ("bounds", "paused", "max_age_seconds", "task_ages")}
    v5["schema"] = "capassign.router/5"
    old = ca.Router.from_state(copy.deepcopy(v5))
    assert old.bounds == "exact" and old.paused == [] and old.max_age_seconds is None
    assert old.state_dict() == v6
    assert [old.assign(X[i]) for i in range(200, 260)] == \
        [router.assign(X[i]) for i in range(200, 260)]


UPPER_ENTRY_POINTS = {
    "simulate": lambda v, b: ca.simulate(np.zeros((4, 1)), np.zeros((4, 3)), v, "random",
                                         runs=1, bounds=b),
    "Router": lambda v, b: ca.Router(3, v, "random", bounds=b),
    "VirtualQueues": lambda v, b: ca.VirtualQueues(v, bounds=b),
    "optimal_assignment": lambda v, b: ca.optimal_assignment(np.zeros((2, 3)), v, bounds=b),
    "hindsight_optimum": lambda v, b: ca.hindsight_optimum(np.zeros((2, 3)), v, bounds=b),
}


@pytest.mark.parametrize("entry", UPPER_ENTRY_POINTS)
def test_upper_bound_mistakes_same_error_everywhere(entry):
    call = UPPER_ENTRY_POINTS[entry]
    with pytest.raises(ValueError) as info:
        call([0.3, 0.3, 0.3], "upper")
    assert str(info.value) == ("capacities sum to 0.8999999999999999; as upper bounds "
                               "(bounds='upper') they must sum to at least 1 (within 1e-09) "
                               "so that every task has an agent, or include a free agent "
                               "(None)")
    with pytest.raises(ValueError) as info:
        call([0.3, 0.3, 0.4], "lower")
    assert str(info.value) == "bounds must be one of 'exact', 'upper', got 'lower'"
    call([0.3, 0.3, None], "upper")                  # a free agent takes the rest
    call([0.9, 0.9, 0.9], "upper")
