"""Tests of the mini-batch allocation of capassign's section 4 (the paper, Sec. 4.2,
App. H.4-H.5): the batch counts and their queue update, and the batch assignment.

Every allocation is compared with an independent computation: enumeration of all
assignments on tiny batches, the projection of the targets by bisection, and the
two-agent sort against the general paths.  The enumeration helpers are those of the
hindsight optimum's tests.
"""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import capassign as ca
from test_s03_oracle import FAST, brute_force, capacities_from, total, weights


# ----------------------------------------------------------------------------- batch counts


def projection(target, B):
    """max(target + c, 0) summing to B, by bisection on c (independent of the sort)."""
    lo, hi = -1.0 - target.max(), B + np.abs(target).max() + 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if np.maximum(target + mid, 0).sum() > B:
            hi = mid
        else:
            lo = mid
    return np.maximum(target + 0.5 * (lo + hi), 0)


@FAST
@given(st.integers(2, 5), st.integers(1, 60), st.data())
def test_batch_counts_are_a_rounding_of_the_projected_targets(A, B, data):
    k, free_mask = data.draw(weights(A, free=data.draw(st.booleans())))
    alpha = np.array([0.0 if c is None else c for c in capacities_from(k, free_mask)])
    constrained = ~np.array(free_mask)
    Q = np.array(data.draw(st.lists(st.floats(0, 3 * B), min_size=A, max_size=A)))
    N = ca.batch_counts(B, alpha, Q, constrained)
    assert N.dtype.kind == "i" and N.shape == (A,)
    assert N.sum() == B and np.all(N >= 0)
    assert np.all(N[~constrained] == 0) and np.all(N[alpha == 0] == 0)
    act = constrained & (alpha > 0)
    n_star = projection(B * alpha[act] - Q[act], B)
    assert np.all(N[act] >= np.floor(n_star - 1e-7))
    assert np.all(N[act] <= np.ceil(n_star + 1e-7))


def test_batch_counts_examples():
    # App. H.5: B = 11 at alpha = (0.5, 0.5) must split 6/5; the queue makes the
    # next batch 5/6 and so on
    alpha, Q, seen = np.array([0.5, 0.5]), np.zeros(2), []
    for _ in range(4):
        N = ca.batch_counts(11, alpha, Q)
        seen.append(N.tolist())
        Q = ca.batch_queue_update(Q, N, alpha, 11)
    assert seen == [[6, 5], [5, 6], [6, 5], [5, 6]]
    # integral B alpha and empty queues: exactly B alpha
    np.testing.assert_array_equal(ca.batch_counts(100, [0.2, 0.3, 0.5], [0, 0, 0]),
                                  [20, 30, 50])
    # a long queue is worked off: agent 0 is 30 tasks ahead
    np.testing.assert_array_equal(ca.batch_counts(100, [0.5, 0.5], [30.0, 0.0]),
                                  [35, 65])
    # beyond the batch, agent 0 gets nothing
    np.testing.assert_array_equal(ca.batch_counts(10, [0.5, 0.5], [30.0, 0.0]), [0, 10])
    # B = 1 reduces to one task for the agent with the largest target
    np.testing.assert_array_equal(ca.batch_counts(1, [0.3, 0.7], [0.0, 0.4]), [1, 0])
    # free agent: count 0, the constrained counts sum to B
    np.testing.assert_array_equal(
        ca.batch_counts(10, [0.5, 0.5, 0.0], [0.0, 0.0, 5.0], [True, True, False]), [5, 5, 0])


@settings(max_examples=25, deadline=None, derandomize=True)
@given(st.integers(2, 6), st.integers(1, 300), st.data())
def test_long_run_fractions_converge_to_alpha(A, B, data):
    k, _ = data.draw(weights(A))
    alpha = np.array(capacities_from(k, [False] * A))
    Q, C = np.zeros(A), np.zeros(A)
    n_batches = 300
    max_q = 0.0
    for _ in range(n_batches):
        N = ca.batch_counts(B, alpha, Q)
        Q = ca.batch_queue_update(Q, N, alpha, B)
        C += N
        max_q = max(max_q, Q.max())
        t = C.sum()
        # cumulative counts N_{1..t,a} = alpha_a t + E_a with E_a <= Q_a and
        # sum_a E_a = 0, so |E_a| <= (A - 1) max_b Q_b
        assert np.all(np.abs(C - alpha * t) <= (A - 1) * max_q + 1e-9)
    # the queues stay bounded (well under two tasks), so the fractions converge
    assert max_q < 2.0
    t = C.sum()
    assert t == n_batches * B
    np.testing.assert_allclose(C / t, alpha, atol=2.0 * (A - 1) / t)


def test_free_agent_queues_stay_zero():
    Q = ca.batch_queue_update([1.0, 0.0, 0.0], [3, 2, 5], [0.5, 0.5, 0.0], 10,
                              [True, True, False])
    np.testing.assert_allclose(Q, [0.0, 0.0, 0.0])
    Q = ca.batch_queue_update([1.0, 0.0, 0.0], [7, 2, 1], [0.5, 0.5, 0.0], 10,
                              [True, True, False])
    np.testing.assert_allclose(Q, [3.0, 0.0, 0.0])


def test_batch_queue_update_formula():
    Q = ca.batch_queue_update([0.5, 2.0, 0.0], [6, 1, 3], [0.3, 0.3, 0.4], 10)
    np.testing.assert_allclose(Q, [3.5, 0.0, 0.0])


def test_batch_counts_and_queue_validation():
    with pytest.raises(TypeError, match="B"):
        ca.batch_counts(2.0, [0.5, 0.5], [0, 0])
    with pytest.raises(TypeError, match="B"):
        ca.batch_counts(True, [0.5, 0.5], [0, 0])
    with pytest.raises(ValueError, match="B"):
        ca.batch_counts(0, [0.5, 0.5], [0, 0])
    with pytest.raises(ValueError, match="alpha"):
        ca.batch_counts(5, [0.5, 0.6], [0, 0])
    with pytest.raises(ValueError, match="alpha"):
        ca.batch_counts(5, [[0.5, 0.5]], [0, 0])
    with pytest.raises(ValueError, match="Q"):
        ca.batch_counts(5, [0.5, 0.5], [0, 0, 0])
    with pytest.raises(ValueError, match="Q"):
        ca.batch_counts(5, [0.5, 0.5], [-1.0, 0])
    with pytest.raises(ValueError, match="Q"):
        ca.batch_counts(5, [0.5, 0.5], [np.inf, 0])
    with pytest.raises(TypeError, match="constrained"):
        ca.batch_counts(5, [0.5, 0.5], [0, 0], [1, 1])
    with pytest.raises(ValueError, match="constrained"):
        ca.batch_counts(5, [0.5, 0.5], [0, 0], [True])
    with pytest.raises(ValueError, match="alpha"):
        ca.batch_counts(5, [1.0, 0.0], [0, 0], [False, False])
    with pytest.raises(ValueError, match="N"):
        ca.batch_queue_update([0, 0], [3, 3], [0.5, 0.5], 5)
    with pytest.raises(ValueError, match="N"):
        ca.batch_queue_update([0, 0], [2.5, 2.5], [0.5, 0.5], 5)
    with pytest.raises(ValueError, match="N"):
        ca.batch_queue_update([0, 0], [-1, 6], [0.5, 0.5], 5)
    with pytest.raises(ValueError, match="Q"):
        ca.batch_queue_update([0, -1], [2, 3], [0.5, 0.5], 5)


# ----------------------------------------------------------------------------- batch assignment


@FAST
@given(st.integers(2, 3), st.data())
def test_batch_assign_matches_enumeration(A, data):
    B = data.draw(st.integers(1, 7 if A == 2 else 6))
    S = np.array(data.draw(st.lists(st.lists(st.floats(-2, 2), min_size=A, max_size=A),
                                    min_size=B, max_size=B)))
    cuts = sorted(data.draw(st.lists(st.integers(0, B), min_size=A - 1, max_size=A - 1)))
    counts = np.diff([0, *cuts, B])
    best = brute_force(S, counts, counts)
    for method in (["auto", "sort", "lsa", "lp"] if A == 2 else ["auto", "lsa", "lp"]):
        agent = ca.batch_assign(S, counts, method=method)
        assert agent.shape == (B,) and agent.dtype.kind == "i"
        np.testing.assert_array_equal(np.bincount(agent, minlength=A), counts)
        assert math.isclose(total(S, agent), best, abs_tol=1e-9), method


@FAST
@given(st.integers(2, 3), st.data())
def test_batch_assign_with_free_agent_matches_enumeration(A, data):
    B = data.draw(st.integers(1, 6))
    S = np.array(data.draw(st.lists(st.lists(st.floats(-2, 2), min_size=A, max_size=A),
                                    min_size=B, max_size=B)))
    free = data.draw(st.integers(0, A - 1))
    constrained = np.ones(A, bool)
    constrained[free] = False
    counts = np.array(data.draw(st.lists(st.integers(0, B), min_size=A, max_size=A)))
    hi = np.where(constrained, counts, B)
    best = brute_force(S, np.zeros(A, int), hi)
    for method in (["auto", "sort", "lsa", "lp"] if A == 2 else ["auto", "lsa", "lp"]):
        agent = ca.batch_assign(S, counts, constrained, method=method)
        got = np.bincount(agent, minlength=A)
        assert np.all(got[constrained] <= counts[constrained])
        assert math.isclose(total(S, agent), best, abs_tol=1e-9), method


@FAST
@given(st.integers(1, 200), st.data())
def test_two_agent_sort_equals_general_paths(B, data):
    seed = data.draw(st.integers(0, 2 ** 16))
    rng = np.random.default_rng(seed)
    S = rng.random((B, 2)) - 0.3 * rng.random(2)     # e.g. mu_hat - eta Q
    if data.draw(st.booleans()):
        S = np.round(S, 1)                           # many ties
    n0 = data.draw(st.integers(0, B))
    counts = np.array([n0, B - n0])
    values = {}
    for method in ("sort", "lsa", "lp"):
        agent = ca.batch_assign(S, counts, method=method)
        np.testing.assert_array_equal(np.bincount(agent, minlength=2), counts)
        values[method] = total(S, agent)
    assert math.isclose(values["sort"], values["lsa"], abs_tol=1e-9)
    assert math.isclose(values["sort"], values["lp"], abs_tol=1e-9)
    np.testing.assert_array_equal(ca.batch_assign(S, counts),
                                  ca.batch_assign(S, counts, method="sort"))


@pytest.mark.parametrize("A", [3, 5])
def test_lsa_lp_and_auto_agree(A):
    rng = np.random.default_rng(20 + A)
    B = 120
    S = rng.random((B, A))
    counts = ca.batch_counts(B, np.full(A, 1.0 / A), rng.random(A))
    lsa = ca.batch_assign(S, counts, method="lsa")
    lp = ca.batch_assign(S, counts, method="lp")
    np.testing.assert_array_equal(np.bincount(lsa, minlength=A), counts)
    np.testing.assert_array_equal(np.bincount(lp, minlength=A), counts)
    assert math.isclose(total(S, lsa), total(S, lp), abs_tol=1e-9)
    # distinct random scores: the optimum is unique, so every solver finds it
    np.testing.assert_array_equal(ca.batch_assign(S, counts), lsa)


def test_queue_shift_does_not_change_exact_count_assignment():
    # App. H.5: with fixed counts, subtracting eta Q_a from agent a's column
    # leaves the optimal assignment's value unchanged up to a constant
    rng = np.random.default_rng(2)
    mu = rng.random((50, 3))
    counts = np.array([10, 15, 25])
    shift = np.array([0.4, 0.0, 0.9])
    a = ca.batch_assign(mu, counts, method="lp")
    b = ca.batch_assign(mu - shift, counts, method="lp")
    assert math.isclose(total(mu, a), total(mu, b), abs_tol=1e-9)


def test_batch_assign_validation():
    S = np.zeros((4, 2))
    with pytest.raises(ValueError, match="sum to the batch size"):
        ca.batch_assign(S, [2, 1])
    with pytest.raises(ValueError, match="counts"):
        ca.batch_assign(S, [5, -1])
    with pytest.raises(ValueError, match="counts"):
        ca.batch_assign(S, [2.5, 1.5])
    with pytest.raises(ValueError, match="counts"):
        ca.batch_assign(S, [1, 1, 2])
    with pytest.raises(TypeError, match="counts"):
        ca.batch_assign(S, [True, False])
    with pytest.raises(ValueError, match="scores"):
        ca.batch_assign(np.zeros(4), [2, 2])
    with pytest.raises(ValueError, match="scores"):
        ca.batch_assign(np.array([[np.nan, 0.0]]), [1, 0])
    with pytest.raises(ValueError, match="scores"):
        ca.batch_assign(np.zeros((0, 2)), [0, 0])
    with pytest.raises(ValueError, match="scores"):
        ca.batch_assign(np.zeros((3, 1)), [3])
    with pytest.raises(ValueError, match="method"):
        ca.batch_assign(S, [2, 2], method="hungarian")
    with pytest.raises(ValueError, match="two agents"):
        ca.batch_assign(np.zeros((3, 3)), [1, 1, 1], method="sort")
    with pytest.raises(TypeError, match="constrained"):
        ca.batch_assign(S, [2, 2], [1, 0])
    with pytest.raises(ValueError, match="constrained"):
        ca.batch_assign(S, [2, 2], [False, False])
    with pytest.raises(ValueError, match="constrained"):
        ca.batch_assign(S, [2, 2], [True, False, True])
