"""Tests of the mini-batch engine (Sec. 4.2, App. H.5) and of the exact early exit.

The Python allocation functions ``batch_counts`` / ``batch_assign`` are tested in
tests/test_s04_batch_allocation.py; here the compiled versions used by the fast engine are
held to them (counts identical, assignments optimal against enumeration),
``simulate(..., batch_size=B)`` is checked for the batch rule itself (counts per
batch, queue carry-over, long-run fractions), for agreement of the two engines,
and the early exit of the run kernels for giving identical results.
"""

import itertools
import math

import numpy as np
import pytest

import capassign as ca

ONLINE = ("random", "marginal", "logistic-greedy", "logistic-ts", "tree-greedy", "tree-ts")


@pytest.fixture(scope="module")
def stream():
    X, R, _ = ca.synthetic_stream(300, 3, seed=21)
    return X, R


# --- compiled batch allocation ----------------------------------------------------


def _random_capacities(rng, A, free):
    alpha = rng.dirichlet(np.ones(A))
    alpha[rng.random(A) < 0.25] = 0.0
    constrained = np.ones(A, dtype=bool)
    if free and A > 2:
        constrained[rng.integers(A)] = False
    alpha = np.where(constrained, alpha, 0.0)
    if alpha[constrained].sum() == 0:
        alpha[np.flatnonzero(constrained)[0]] = 1.0
    alpha[constrained] /= alpha[constrained].sum()
    return alpha, constrained


def _counts_by_numpy(B, alpha, Q, constrained):
    """The counts of batch_counts written with numpy (projection by sorting, then
    largest remainders), independently of the compiled kernel."""
    A = alpha.shape[0]
    Q = np.where(constrained, Q, 0.0)
    active = np.flatnonzero(constrained & (alpha > 0))
    target = B * alpha[active] - Q[active]
    free = np.flatnonzero(~constrained)
    total = 0.0
    for a in range(A):  # summed in index order
        if constrained[a]:
            total += float(alpha[a])
    rest = 1.0 - total
    if free.size and rest > 1e-9:
        # the free agents' remainder: one more share, with an empty queue
        active = np.append(active, A)
        target = np.append(target, B * rest)
        Q = np.append(Q, 0.0)
    # Euclidean projection of the targets onto {N >= 0, sum N = B}
    u = np.sort(target)[::-1]
    shift = (B - np.cumsum(u)) / np.arange(1, u.size + 1)
    k = int(np.flatnonzero(u + shift > 0)[-1])
    n_star = np.maximum(target + shift[k], 0.0)
    near = np.rint(n_star)
    n_star = np.where(np.abs(n_star - near) <= 1e-9 * B, near, n_star)
    base = np.floor(n_star)
    left = B - int(base.sum())
    frac = n_star - base
    if active.size and active[-1] == A:
        # the constrained agents get the left-over tasks before the remainder
        # does (the remainder has no queue to carry a deficit to later batches)
        rank = np.lexsort((active, Q[active], -frac, active == A))
        base[rank[:left]] += 1
        N = np.zeros(A + 1, dtype=np.int64)
        N[active] = base.astype(np.int64)
        out = N[:A]
        out[free] = N[A] // free.size
        out[free[:N[A] % free.size]] += 1
        return out
    # largest fractional part first; ties: smaller queue, then lower index
    rank = np.lexsort((active, Q[active], -frac))
    base[rank[:left]] += 1
    N = np.zeros(A, dtype=np.int64)
    N[active] = base.astype(np.int64)
    return N


def test_compiled_counts_equal_numpy_counts():
    rng = np.random.default_rng(0)
    for case in range(3000):
        A = int(rng.integers(2, 7))
        alpha, constrained = _random_capacities(rng, A, free=case % 3 == 0)
        B = int(rng.integers(1, 300))
        Q = rng.random(A) * rng.choice([0.5, 3.0, 40.0])
        if case % 5 == 0:  # exact ties of fractional parts and queues
            alpha = np.where(constrained, 1.0 / constrained.sum(), 0.0)
            Q = np.zeros(A)
        N = ca.batch_counts(B, alpha, Q, constrained)
        expect = _counts_by_numpy(B, alpha, Q, constrained)
        np.testing.assert_array_equal(N, expect, err_msg=f"case {case}")
        assert N.sum() == B and np.all(N[~constrained] == 0)


def _best_by_enumeration(S, N, constrained):
    """Largest total score over all assignments meeting the counts (caps for free agents)."""
    n, A = S.shape
    best = -np.inf
    for agents in itertools.product(range(A), repeat=n):
        c = np.bincount(agents, minlength=A)
        ok = np.all(c[constrained] == N[constrained]) if constrained.all() else \
            np.all(c[constrained] <= N[constrained])
        if ok:
            best = max(best, S[np.arange(n), agents].sum())
    return best


@pytest.mark.parametrize("A", [2, 3, 4])
def test_compiled_assignment_is_optimal_by_enumeration(A):
    rng = np.random.default_rng(A)
    for case in range(60):
        n = int(rng.integers(1, 8 if A < 4 else 6))
        free = A > 2 and case % 2 == 1
        alpha, constrained = _random_capacities(rng, A, free)
        Q = rng.random(A) * 2
        N = ca.batch_counts(n, alpha, Q, constrained)
        # scores on a coarse grid so that ties are common
        S = np.round(rng.random((n, A)) * 4) / 4 - 0.5 * Q
        agent = np.empty(n, dtype=np.int64)
        ca._batch_assign_nb(S, n, N, constrained, agent, np.zeros(A, dtype=np.int64))
        c = np.bincount(agent, minlength=A)
        if constrained.all():
            np.testing.assert_array_equal(c, N)
        else:
            assert np.all(c[constrained] <= N[constrained])
        got = S[np.arange(n), agent].sum()
        assert got == pytest.approx(_best_by_enumeration(S, N, constrained), abs=1e-12)


def test_compiled_assignment_larger_batches_match_the_lp():
    rng = np.random.default_rng(5)
    for A, n, free in ((3, 120, False), (5, 80, False), (4, 60, True), (6, 150, True)):
        alpha, constrained = _random_capacities(rng, A, free)
        N = ca.batch_counts(n, alpha, np.zeros(A), constrained)
        S = rng.random((n, A))
        agent = np.empty(n, dtype=np.int64)
        ca._batch_assign_nb(S, n, N, constrained, agent, np.zeros(A, dtype=np.int64))
        lp = ca.batch_assign(S, N, constrained, method="lp")
        assert S[np.arange(n), agent].sum() == pytest.approx(S[np.arange(n), lp].sum(), abs=1e-9)


def test_compiled_two_agent_assignment_equals_the_sort():
    rng = np.random.default_rng(8)
    for _ in range(200):
        n = int(rng.integers(1, 60))
        S = np.round(rng.random((n, 2)) * 3) / 3  # many ties
        N = ca.batch_counts(n, [0.35, 0.65], rng.random(2))
        agent = np.empty(n, dtype=np.int64)
        ca._batch_assign_nb(S, n, N, np.ones(2, dtype=bool), agent, np.zeros(2, dtype=np.int64))
        np.testing.assert_array_equal(agent, ca.batch_assign(S, N, method="sort"))


# --- the batch rule inside simulate ------------------------------------------------


def _replay_counts(res, T, B, alpha, constrained):
    """Check each batch's counts and the queue trace of one simulated result."""
    A = len(alpha)
    for k in range(res.runs):
        Q = np.zeros(A)
        for t0 in range(0, T, B):
            nb = min(B, T - t0)
            np.testing.assert_allclose(res.queues[k, t0:t0 + nb], np.tile(Q, (nb, 1)),
                                       atol=1e-12)
            N = np.bincount(res.assignments[k, t0:t0 + nb], minlength=A)
            due = ca.batch_counts(nb, alpha, Q, constrained)
            if constrained.all():
                np.testing.assert_array_equal(N, due)
            else:
                assert np.all(N[constrained] <= due[constrained])
            Q = ca.batch_queue_update(Q, N, alpha, nb, constrained)


@pytest.mark.parametrize("policy", ONLINE)
@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_batches_get_the_counts_of_the_queues(stream, policy, engine):
    X, R = stream
    T = 120 if engine == "reference" else 300
    alpha = np.array([0.3, 0.7])
    res = ca.simulate(X[:T], R[:T], list(alpha), policy, runs=2, seed=3, engine=engine,
                      batch_size=11, return_traces=True)
    assert res.batch_size == 11
    _replay_counts(res, T, 11, alpha, np.ones(2, dtype=bool))


@pytest.mark.parametrize("caps", [[0.2, 0.3, 0.5], [0.6, 0.4, None], [0.0, 1.0, None]])
def test_batch_rule_with_more_agents_and_a_free_agent(caps):
    X, R, _ = ca.synthetic_stream(600, 3, n_agents=3, seed=4)
    alpha, constrained = ca._validate_capacities(caps)
    for policy in ("marginal", "logistic-ts", "tree-greedy"):
        res = ca.simulate(X, R, caps, policy, runs=2, seed=1, batch_size=40,
                          return_traces=True)
        _replay_counts(res, 600, 40, alpha, constrained)
    if None in caps:
        # free agents take some of the work, the constrained ones stay within their shares
        res = ca.simulate(X, R, caps, "tree-greedy", runs=4, seed=1, batch_size=40)
        assert res.assigned[:, 2].mean() > 0.05
        assert np.all(res.assigned[:, :2] <= np.array(caps[:2], dtype=float) + 2 / 600)


@pytest.mark.parametrize("B", [1, 7, 100, 1999, 2000])
def test_long_run_fractions_meet_the_capacities(B):
    X, R, _ = ca.synthetic_stream(2000, 4, n_agents=3, seed=6)
    caps = [0.17, 0.33, 0.5]
    res = ca.simulate(X, R, caps, "logistic-greedy", runs=3, seed=0, batch_size=B)
    # every batch meets its integer counts, and the queues carry the rounding:
    # after T tasks each agent is within 2 tasks of alpha_a T
    assert np.all(np.abs(res.assigned * 2000 - np.array(caps) * 2000) <= 2.0)


def test_batch_mode_is_deterministic_and_differs_from_online(stream):
    X, R = stream
    for policy in ("tree-ts", "logistic-ts", "random"):
        a = ca.simulate(X, R, [0.5, 0.5], policy, runs=3, seed=7, batch_size=20,
                        return_traces=True)
        b = ca.simulate(X, R, [0.5, 0.5], policy, runs=3, seed=7, batch_size=20,
                        return_traces=True)
        np.testing.assert_array_equal(a.assignments, b.assignments)
        np.testing.assert_array_equal(a.errors, b.errors)
    # B = 1 with every agent constrained ignores the scores: the queues alone decide,
    # so every policy gives the same, alternating assignment
    first = None
    for policy in ONLINE:
        res = ca.simulate(X, R, [0.5, 0.5], policy, runs=2, seed=7, batch_size=1,
                          return_traces=True)
        assert np.all(res.assignments[:, ::2] == 0) and np.all(res.assignments[:, 1::2] == 1)
        first = res.errors if first is None else first
        np.testing.assert_array_equal(res.errors, first)
    online = ca.simulate(X, R, [0.5, 0.5], "tree-greedy", runs=2, seed=7)
    assert not np.array_equal(online.errors, first)


def test_deterministic_policies_agree_across_engines_in_batch_mode(stream):
    X, R = stream
    for policy in ("marginal", "logistic-greedy"):
        f = ca.simulate(X, R, [0.4, 0.6], policy, runs=4, seed=2, batch_size=25,
                        return_traces=True)
        r = ca.simulate(X, R, [0.4, 0.6], policy, runs=4, seed=2, batch_size=25,
                        engine="reference", return_traces=True)
        agree = np.mean(f.assignments == r.assignments)
        assert agree >= (1.0 if policy == "marginal" else 0.99), (policy, agree)
        np.testing.assert_allclose(f.queues, r.queues, atol=1e-9)


@pytest.mark.parametrize("caps", [[0.2, 0.3, None], [0.1, None, 0.2]])
def test_engines_agree_in_batch_mode_with_a_free_agent(caps):
    # with a free agent the batch counts of the constrained agents are upper
    # bounds, and the queue penalty eta Q inside the scores (Eq. 2) decides
    # how many of their tasks each one takes.  Logistic greedy is
    # deterministic and its scores differ from task to task (so the batch's
    # best assignment is unique; marginal's scores are equal within a batch,
    # and with three agents the engines split those ties differently): both
    # engines must take the same decisions, and the queues the same path
    X, R, _ = ca.synthetic_stream(240, 3, n_agents=3, seed=5)
    kw = dict(runs=3, seed=4, eta=2.0, batch_size=12, return_traces=True)
    f = ca.simulate(X, R, caps, "logistic-greedy", **kw)
    r = ca.simulate(X, R, caps, "logistic-greedy", engine="reference", **kw)
    np.testing.assert_array_equal(f.assignments, r.assignments)
    np.testing.assert_allclose(f.queues, r.queues, atol=1e-9)
    assert np.any(f.queues > 0)          # the penalty had something to say


@pytest.mark.parametrize("policy", ("random", "logistic-ts", "tree-greedy", "tree-ts"))
def test_fast_engine_matches_reference_in_batch_mode(stream, policy):
    X, R = stream
    runs = 40
    f = ca.simulate(X, R, [0.3, 0.7], policy, runs=runs, seed=100, batch_size=25)
    r = ca.simulate(X, R, [0.3, 0.7], policy, runs=runs, seed=100, batch_size=25,
                    engine="reference")
    se = math.hypot(f.stderr, r.stderr)
    assert abs(f.error - r.error) <= 3 * se, (policy, f.error, r.error, se)
    np.testing.assert_array_equal(f.assigned, r.assigned)  # counts are forced by the queues


@pytest.mark.parametrize("bad, err, word", [
    (0, ValueError, "batch_size"), (-3, ValueError, "batch_size"),
    (2.5, TypeError, "batch_size"), (True, TypeError, "batch_size"),
    ("10", TypeError, "batch_size"), (301, ValueError, "stream length"),
])
def test_batch_size_is_validated(stream, bad, err, word):
    X, R = stream
    with pytest.raises(err, match=word):
        ca.simulate(X, R, [0.5, 0.5], "tree-greedy", runs=1, batch_size=bad)


def test_offline_policies_reject_a_batch_size(stream):
    X, R = stream
    for policy in ca.OFFLINE_POLICIES:
        with pytest.raises(ValueError, match="online policies only"):
            ca.simulate(X, R, [0.5, 0.5], policy, runs=1, batch_size=10)
        assert ca.simulate(X, R, [0.5, 0.5], policy, runs=1, batch_size=None).batch_size is None


# --- the exact early exit ------------------------------------------------------------


def _with_and_without_exit(monkeypatch, *args, **kwargs):
    out = []
    for flag in (False, True):
        monkeypatch.setattr(ca, "_EARLY_EXIT", flag)
        out.append(ca.simulate(*args, return_traces=True, **kwargs))
    return out


@pytest.mark.parametrize("policy", ONLINE)
def test_early_exit_changes_nothing(monkeypatch, policy):
    X, R, _ = ca.synthetic_stream(800, 3, n_agents=3, seed=12)
    cases = [(R[:, :2], [0.0, 1.0], 0.5, None), (R[:, :2], [1.0, 0.0], 2.0, None),
             (R, [0.0, 0.0, 1.0], 0.5, None), (R, [0.0, 1.0, None], 0.5, None),
             (R, [0.0, 0.5, 0.5], 0.5, None), (R[:, :2], [0.0, 1.0], 0.0, None),
             (R[:, :2], [0.0, 1.0], 0.5, 50), (R, [1.0, 0.0, 0.0], 0.5, 30),
             (R, [0.0, 1.0, None], 0.5, 30)]
    for RR, caps, eta, B in cases:
        off, on = _with_and_without_exit(monkeypatch, X, RR, caps, policy, eta=eta, runs=3,
                                         seed=5, batch_size=B)
        np.testing.assert_array_equal(off.errors, on.errors, err_msg=str((caps, eta, B)))
        np.testing.assert_array_equal(off.assigned, on.assigned)
        np.testing.assert_array_equal(off.assignments, on.assignments)
        np.testing.assert_array_equal(off.queues, on.queues)


def test_early_exit_fires_and_when_it_may():
    # alpha = (1, 0): agent 1, untrained (estimate 0.5), is picked once, its score
    # is then 0.5 - 0.5 = 0 for good and it loses every tie to agent 0, so the run
    # is forced; the forest of agent 0 then stops refitting (refit counters in stats).
    X, R, _ = ca.synthetic_stream(3000, 3, seed=2)
    Xb, n_bins, _ = ca._bin_contexts(X, 32)
    orders, seeds = ca._stream_orders(0, 2, 3000)
    s = ca.PAPER_SETTINGS
    refits = {}
    for early in (False, True):
        stats = np.zeros((2, 3 * s.max_depth), dtype=np.int64)
        rule = ca._Rule(np.array([1.0, 0.0]), np.ones(2, dtype=bool), 0.5, 1.0, 0.0, 0, early)
        trees = ca._TreeRun(Xb, False, n_bins, int(n_bins.max()), s.n_trees, s.max_depth,
                            s.min_samples_leaf, s.refit_every, 1.0, ca._reward_sums(False))
        rewards, counts = ca._runs(
            R, orders, rule, ca._RunModels(trees=trees), None, ca._rng_states(seeds),
            np.zeros((2, 0), dtype=np.int32), np.zeros((2, 0, 2)), stats)
        refits[early] = (stats.sum(), rewards.tolist(), counts.tolist())
    assert refits[True][1:] == refits[False][1:]
    assert refits[True][0] < 0.05 * refits[False][0]
    ones = np.ones(2, dtype=bool)
    # code 1: never chosen again; code 2: loses only ties, i.e. to a lower index
    assert ca._sole_agent_nb(np.array([0.0, 1.0]), ones, np.array([1, 0], np.int8)) == 1
    assert ca._sole_agent_nb(np.array([0.0, 1.0]), ones, np.array([2, 0], np.int8)) == -1
    assert ca._sole_agent_nb(np.array([1.0, 0.0]), ones, np.array([0, 2], np.int8)) == 0
    assert ca._sole_agent_nb(np.array([0.5, 0.5]), ones, np.array([0, 0], np.int8)) == -1
    # in batch mode an agent without capacity never gets a count
    dead = ca._initial_dead_nb(np.array([0.0, 1.0]), ones, 10, False)
    assert ca._sole_agent_nb(np.array([0.0, 1.0]), ones, dead) == 1
    online = ca._initial_dead_nb(np.array([0.0, 1.0]), ones, 0, False)
    assert ca._sole_agent_nb(np.array([0.0, 1.0]), ones, online) == -1


# --- simulate_grid -------------------------------------------------------------------


def test_simulate_grid_rows_are_simulate_results(stream):
    X, R = stream
    caps = [(0.2, 0.8), (0.7, 0.3)]
    df = ca.simulate_grid(X, R, ["random", "logistic-greedy"], caps, x=[2.0, 7.0], runs=3,
                          seed=4, batch_size=30, label="s")
    assert list(df.policy) == ["random", "random", "logistic-greedy", "logistic-greedy"]
    assert list(df.alpha1) == [2.0, 7.0, 2.0, 7.0] and set(df.batch_size) == {30}
    for _, row in df.iterrows():
        res = ca.simulate(X, R, row.capacities, row.policy, runs=3, seed=4, batch_size=30)
        np.testing.assert_array_equal(row.errors, res.errors)
        assert row.error == pytest.approx(res.error) and row.ci_low <= row.error <= row.ci_high
        np.testing.assert_allclose(row.shares, res.assigned.mean(axis=0))
    default_x = ca.simulate_grid(X, R, ["random"], caps, runs=2)
    assert list(default_x.alpha1) == [0.2, 0.7]
    with pytest.raises(ValueError, match="x has 1 values"):
        ca.simulate_grid(X, R, ["random"], caps, x=[0.1], runs=2)
    with pytest.raises(TypeError, match="policies"):
        ca.simulate_grid(X, R, "random", caps, runs=2)


def test_offline_benchmark_is_simulated_once_and_error_vs_capacity_is_the_two_agent_grid(stream):
    X, R = stream
    alphas = (0.0, 0.3, 1.0)
    caps = [ca.two_agent_capacities(a) for a in alphas]
    policies = ["random", "offline-logistic"]
    df = ca.simulate_grid(X, R, policies, caps, x=alphas, runs=2, seed=3, label="s")
    for _, row in df.iterrows():        # the offline result reused at every capacity is its own
        res = ca.simulate(X, R, row.capacities, row.policy, runs=2, seed=3)
        assert row.capacities == res.capacities
        np.testing.assert_array_equal(row.errors, res.errors)
        np.testing.assert_array_equal(row.shares, res.assigned.mean(axis=0))
    evc = ca.error_vs_capacity(X, R, policies, alphas, runs=2, seed=3, label="s")
    assert list(evc.columns) == list(df.columns[:len(evc.columns)])
    for c in evc.columns:
        for u, v in zip(evc[c], df[c]):
            np.testing.assert_array_equal(u, v)
    with pytest.raises(ValueError, match="sum to"):
        ca.simulate_grid(X, R, ["offline-logistic"], [(0.5, 0.5), (0.5, 0.7)], runs=1)


@pytest.mark.parametrize("caps", [[0.2, 0.3, 0.5], [0.3, None, 0.4], [0.6, None]])
def test_engines_and_router_split_batch_ties_alike(caps):
    """One within-batch solver: the marginal policy starts every agent at 0.5,
    so its first batches are all ties, and the fast engine, the reference
    engine and Router.assign_batch (and batch_assign's default) split them
    the same way: the deterministic policy takes the same decisions."""
    A, B, T = len(caps), 7, 120
    X, R, _ = ca.synthetic_stream(T, 2, n_agents=A, seed=3)
    fast = ca.simulate(X, R, caps, "marginal", runs=1, seed=1, batch_size=B,
                       return_traces=True)
    ref = ca.simulate(X, R, caps, "marginal", runs=1, seed=1, batch_size=B,
                      engine="reference", return_traces=True)
    np.testing.assert_array_equal(fast.assignments, ref.assignments)
    router = ca.Router(A, caps, "marginal", seed=1)
    got = []
    for t0 in range(0, T, B):
        rows = fast.orders[0, t0:t0 + B]
        agents = router.assign_batch(X[rows])
        for tid, i, a in zip(range(t0, t0 + len(rows)), rows, agents):
            router.update(tid, a, int(R[i, a]))
        got += agents
    assert got == fast.assignments[0].tolist()
    S = np.full((B, A), 0.5)
    N = ca.batch_counts(B, [c or 0.0 for c in caps], np.zeros(A),
                        [c is not None for c in caps])
    np.testing.assert_array_equal(ca.batch_assign(S, N, [c is not None for c in caps]),
                                  fast.assignments[0, :B])
