"""Tests of the hindsight optimum and of the oracle at scale, in section 3 of
capassign (the paper, App. F, App. H.4); the mini-batch allocation of section 4 is
tested in tests/test_s04_batch_allocation.py with the enumeration helpers defined here.

Every optimum is compared with an independent computation: enumeration of
all assignments on tiny streams, the two-agent sort against the
transportation programme, and ``scipy.optimize.linear_sum_assignment`` on
replicated agent columns.  Count bounds are recomputed with exact fractions.
"""

import itertools
import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy.optimize import linear_sum_assignment

import capassign as ca

FAST = settings(max_examples=40, deadline=None, derandomize=True)

unit = st.floats(0.0, 1.0, allow_nan=False, allow_infinity=False)


# ----------------------------------------------------------------------------- helpers

@st.composite
def weights(draw, A, free=False, zero=True):
    """Integer capacity weights k_a (capacities k_a / K) and a free-agent mask."""
    k = draw(st.lists(st.integers(0 if zero else 1, 9), min_size=A, max_size=A))
    free_mask = [False] * A
    if free:
        free_mask = draw(st.lists(st.booleans(), min_size=A, max_size=A))
        assume(not all(free_mask))
    assume(sum(x for x, f in zip(k, free_mask) if not f) > 0)
    return k, free_mask


def capacities_from(k, free_mask):
    K = sum(x for x, f in zip(k, free_mask) if not f)
    return [None if f else x / K for x, f in zip(k, free_mask)]


def exact_bounds(k, free_mask, T):
    """Count bounds from exact fractions k_a T / K (the documented rounding rule)."""
    K = sum(x for x, f in zip(k, free_mask) if not f)
    lo, hi = [], []
    for x, f in zip(k, free_mask):
        if f:
            lo.append(0)
            hi.append(T)
            continue
        q = Fraction(x * T, K)
        lo.append(math.floor(q))
        hi.append(math.ceil(q))
    if any(free_mask):
        lo = [0] * len(k)
    return np.array(lo), np.array(hi)


def brute_force(V, lo, hi):
    """Best summed value over all assignments with lo <= counts <= hi."""
    n, A = V.shape
    best = -np.inf
    for agents in itertools.product(range(A), repeat=n):
        c = np.bincount(agents, minlength=A)
        if np.all(c >= lo) and np.all(c <= hi):
            best = max(best, float(V[np.arange(n), list(agents)].sum()))
    return best


@st.composite
def reward_matrix(draw, T_min, T_max, A):
    T = draw(st.integers(T_min, T_max))
    cell = st.sampled_from([0.0, 1.0])        # the paper's rewards, 0 or 1
    return np.array(draw(st.lists(st.lists(cell, min_size=A, max_size=A),
                                  min_size=T, max_size=T)))


def total(V, agent):
    return float(V[np.arange(V.shape[0]), agent].sum())


# ----------------------------------------------------------------------------- hindsight optimum

@FAST
@given(st.integers(2, 3), st.data())
def test_hindsight_matches_enumeration(A, data):
    R = data.draw(reward_matrix(1, 7 if A == 2 else 6, A))
    k, free_mask = data.draw(weights(A, free=data.draw(st.booleans())))
    T = R.shape[0]
    caps = capacities_from(k, free_mask)
    h = ca.hindsight_optimum(R, caps)
    lo, hi = exact_bounds(k, free_mask, T)
    np.testing.assert_array_equal(h.lower, lo)
    np.testing.assert_array_equal(h.upper, hi)
    assert math.isclose(h.reward * T, brute_force(R, lo, hi), abs_tol=1e-9)
    assert h.assignment.shape == (T,) and h.assignment.dtype.kind == "i"
    np.testing.assert_array_equal(h.counts, np.bincount(h.assignment, minlength=A))
    assert np.all(h.counts >= lo) and np.all(h.counts <= hi)
    assert math.isclose(h.reward, total(R, h.assignment) / T, abs_tol=1e-12)
    if A == 2:
        # auto sorts for two agents; the transportation programme must agree
        lp = ca.hindsight_optimum(R, caps, method="lp")
        assert math.isclose(lp.reward * T, brute_force(R, lo, hi), abs_tol=1e-9)
        assert np.all(lp.counts >= lo) and np.all(lp.counts <= hi)


@FAST
@given(st.data())
def test_hindsight_sort_equals_lp_for_two_agents(data):
    R = data.draw(reward_matrix(1, 120, 2))
    free = data.draw(st.sampled_from([None, 0, 1]))
    if free is None:
        k, free_mask = data.draw(weights(2))
    else:
        k, free_mask = [1, 1], [free == 0, free == 1]
    caps = capacities_from(k, free_mask)
    s = ca.hindsight_optimum(R, caps, method="sort")
    lp = ca.hindsight_optimum(R, caps, method="lp")
    auto = ca.hindsight_optimum(R, caps)
    assert math.isclose(s.reward, lp.reward, abs_tol=1e-9)
    np.testing.assert_array_equal(auto.assignment, s.assignment)
    for h in (s, lp):
        assert np.all(h.counts >= h.lower) and np.all(h.counts <= h.upper)


@pytest.mark.parametrize("A", [2, 3])
def test_hindsight_interior_point_path(A, monkeypatch):
    # 0/1 rewards (the one reward rule).  Lowering the dual-simplex limit
    # sends the programme to the interior-point method with crossover
    rng = np.random.default_rng(7 + A)
    T = 1500
    R = (rng.random((T, A)) < 0.6).astype(float)
    caps = [0.3, 0.7] if A == 2 else [0.2, 0.3, 0.5]
    ds = ca.hindsight_optimum(R, caps, method="lp")
    monkeypatch.setattr(ca, "_DS_MAX_VARIABLES", 4)
    ipm = ca.hindsight_optimum(R, caps, method="lp")
    assert math.isclose(ipm.reward, ds.reward, rel_tol=0, abs_tol=1e-9)
    assert np.all(ipm.counts >= ipm.lower) and np.all(ipm.counts <= ipm.upper)
    if A == 2:
        s = ca.hindsight_optimum(R, caps, method="sort")
        assert math.isclose(ipm.reward, s.reward, rel_tol=0, abs_tol=1e-9)
        np.testing.assert_array_equal(ipm.lower, [450, 1050])
    else:
        # integral alpha_a T: compare with the assignment problem on agent slots
        slots = np.repeat(np.arange(A), ipm.lower)
        np.testing.assert_array_equal(ipm.counts, ipm.lower)
        rows, cols = linear_sum_assignment(R[:, slots], maximize=True)
        assert math.isclose(ipm.reward * T, R[rows, slots[cols]].sum(), abs_tol=1e-9)


@pytest.mark.parametrize("A", [3, 4, 5])
def test_hindsight_many_agents_equals_assignment_problem(A):
    # integral alpha_a T: exact counts, so the optimum is an assignment problem
    # of the T tasks to T agent slots (agent a repeated alpha_a T times)
    rng = np.random.default_rng(A)
    T = 400
    R = (rng.random((T, A)) < rng.uniform(0.5, 0.9, A)).astype(float)
    counts = np.full(A, T // A)
    counts[0] += T - counts.sum()
    caps = list(counts / T)
    h = ca.hindsight_optimum(R, caps)
    np.testing.assert_array_equal(h.counts, counts)
    slots = np.repeat(np.arange(A), counts)
    rows, cols = linear_sum_assignment(R[:, slots], maximize=True)
    assert math.isclose(h.reward * T, R[rows, slots[cols]].sum(), abs_tol=1e-9)
    # at most 2^A distinct reward patterns enter the programme
    assert np.unique(R, axis=0).shape[0] <= 2 ** A


def test_hindsight_count_bounds_and_rounding():
    R = np.zeros((10, 3))
    h = ca.hindsight_optimum(R, [0.1, 0.2, 0.7])      # 0.1 * 10 is exactly 1
    np.testing.assert_array_equal(h.lower, [1, 2, 7])
    np.testing.assert_array_equal(h.upper, [1, 2, 7])
    np.testing.assert_array_equal(h.counts, [1, 2, 7])
    h = ca.hindsight_optimum(np.zeros((10, 2)), [0.25, 0.75])
    np.testing.assert_array_equal(h.lower, [2, 7])
    np.testing.assert_array_equal(h.upper, [3, 8])


def test_hindsight_two_agent_example_by_hand():
    # agent 0 is better on tasks 0 and 2, agent 1 on task 3; task 1 is a tie
    R = np.array([[1, 0], [1, 1], [1, 0], [0, 1]], float)
    h = ca.hindsight_optimum(R, [0.5, 0.5])
    assert h.reward == 1.0 and h.error == 0.0
    np.testing.assert_array_equal(h.assignment, [0, 1, 0, 1])
    # capacity 0.25 for agent 0: one of tasks 0 and 2 must go to agent 1
    h = ca.hindsight_optimum(R, [0.25, 0.75])
    assert h.reward == 0.75
    assert h.counts[0] == 1


def test_hindsight_error_is_a_floor_of_feasible_assignments():
    rng = np.random.default_rng(3)
    T, A = 500, 3
    R = (rng.random((T, A)) < [0.7, 0.8, 0.6]).astype(float)
    caps = [0.2, 0.3, 0.5]
    h = ca.hindsight_optimum(R, caps)
    for _ in range(50):
        agent = rng.permutation(np.repeat(np.arange(A), [100, 150, 250]))
        assert 1.0 - total(R, agent) / T >= h.error - 1e-12
    # it never beats the unconstrained best agent per task
    assert h.reward <= R.max(axis=1).mean() + 1e-12


@FAST
@given(st.data())
def test_free_agent_can_only_lower_the_floor(data):
    R = data.draw(reward_matrix(1, 60, 3))
    k, _ = data.draw(weights(2))
    caps2 = capacities_from(k, [False, False])
    h2 = ca.hindsight_optimum(R[:, :2], caps2)
    h3 = ca.hindsight_optimum(R, caps2 + [None])
    assert h3.reward >= h2.reward - 1e-9
    assert np.all(h3.counts[:2] <= h3.upper[:2])
    assert h3.upper[2] == R.shape[0] and np.all(h3.lower == 0)


def test_free_agent_extremes():
    rng = np.random.default_rng(11)
    T = 300
    R = (rng.random((T, 2)) < 0.7).astype(float)
    perfect = np.column_stack([R, np.ones(T)])
    h = ca.hindsight_optimum(perfect, [0.4, 0.6, None])
    assert h.error == 0.0
    useless = np.column_stack([R, np.zeros(T)])
    h = ca.hindsight_optimum(useless, [0.4, 0.6, None])
    h2 = ca.hindsight_optimum(R, [0.4, 0.6])
    assert h.reward >= h2.reward - 1e-12
    # the useless free agent only gets tasks no constrained agent solves
    on_free = h.assignment == 2
    assert np.all(R[on_free].max(axis=1) == 0) or not on_free.any()
    # free agent placed first
    h_first = ca.hindsight_optimum(useless[:, [2, 0, 1]], [None, 0.4, 0.6])
    assert math.isclose(h_first.reward, h.reward, abs_tol=1e-12)


def test_hindsight_is_deterministic():
    rng = np.random.default_rng(5)
    R = (rng.random((2000, 4)) < 0.6).astype(float)
    a = ca.hindsight_optimum(R, [0.1, 0.2, 0.3, 0.4])
    b = ca.hindsight_optimum(R.copy(), [0.1, 0.2, 0.3, 0.4])
    np.testing.assert_array_equal(a.assignment, b.assignment)
    assert a.reward == b.reward


def test_hindsight_validation():
    R = np.array([[1.0, 0.0], [0.0, 1.0]])
    with pytest.raises(ValueError, match="R"):
        ca.hindsight_optimum(np.array([1.0, 0.0]), [0.5, 0.5])
    with pytest.raises(ValueError, match="R"):
        ca.hindsight_optimum(np.array([[np.nan, 0.0]]), [0.5, 0.5])
    with pytest.raises(ValueError, match=r"R: rewards must be numbers in \[0, 1\]"):
        ca.hindsight_optimum(np.array([[1.5, 0.0]]), [0.5, 0.5])
    with pytest.raises(ValueError, match="at least one row"):
        ca.hindsight_optimum(np.zeros((0, 2)), [0.5, 0.5])
    with pytest.raises(TypeError, match="R"):
        ca.hindsight_optimum([["a", "b"]], [0.5, 0.5])
    with pytest.raises(ValueError, match="capacities"):
        ca.hindsight_optimum(R, [0.5, 0.5, 0.0])
    with pytest.raises(ValueError, match="capacities"):
        ca.hindsight_optimum(R, [0.5, 0.6])
    with pytest.raises(ValueError, match="method"):
        ca.hindsight_optimum(R, [0.5, 0.5], method="simplex")
    with pytest.raises(TypeError, match="method"):
        ca.hindsight_optimum(R, [0.5, 0.5], method=None)
    with pytest.raises(ValueError, match="two agents"):
        ca.hindsight_optimum(np.zeros((2, 3)), [0.2, 0.3, 0.5], method="sort")


# --- the oracle at scale: the dual method ------------------------------------------------

from test_s03_theory import FAST, check_solution, instances  # noqa: E402


def _lp_value(mu, caps, w):
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ca, "ORACLE_LP_MAX_CONTEXTS", 10**9)
        return ca.optimal_assignment(mu, caps, w).value


@FAST
@given(inst=st.one_of(instances(n_max=14), instances(n_max=14, free=True, a_min=3)),
       first=st.integers(1, 6))
def test_dual_method_equals_the_lp(inst, first):
    # every instance through the dual method, with candidate sets so small that
    # the fix-check-grow loop runs; certificate of optimality and the LP's value
    mu, caps, w = inst
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ca, "ORACLE_LP_MAX_CONTEXTS", 0)
        mp.setattr(ca, "_DUAL_FIRST_CANDIDATES", first)
        res = ca.optimal_assignment(mu, caps, w)
    check_solution(res, mu, caps, w)
    assert math.isclose(res.value, _lp_value(mu, caps, w), abs_tol=1e-9)


@FAST
@given(inst=instances(n_max=14, a_min=3), spare=st.floats(1.05, 2.0), first=st.integers(1, 6))
def test_dual_method_with_limits_equals_the_lp(inst, spare, first):
    # limits (bounds="upper", summing above one) through the dual method, whose
    # seed is then the projected Newton of _entropic_newton, against HiGHS on
    # the whole programme; the optimality conditions of the <= rows
    mu, caps, w = inst
    caps = [min(1.0, c * spare) for c in caps]
    assume(sum(caps) > 1.0 + 1e-6)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ca, "ORACLE_LP_MAX_CONTEXTS", 0)
        mp.setattr(ca, "_DUAL_FIRST_CANDIDATES", first)
        res = ca.optimal_assignment(mu, caps, w, bounds="upper")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ca, "ORACLE_LP_MAX_CONTEXTS", 10**9)
        lp = ca.optimal_assignment(mu, caps, w, bounds="upper")
    assert math.isclose(res.value, lp.value, abs_tol=1e-9)
    alpha, P, lam = np.array(caps), res.assignment, res.shadow_prices
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-12)
    assert np.all(w @ P <= alpha + 1e-7) and np.all(lam >= 0.0)
    assert np.all((lam <= 1e-9) | (w @ P >= alpha - 1e-7))     # a price only on a full agent
    adj = mu - lam
    on_best = adj >= adj.max(axis=1, keepdims=True) - 1e-8
    assert np.all((P[w > 0] <= 1e-9) | on_best[w > 0])
    dual = float(w @ np.max(mu - lam, axis=1) + alpha @ lam)       # strong duality
    assert math.isclose(dual, res.value, abs_tol=1e-8)


@pytest.mark.parametrize("A, caps", [(2, [0.3, 0.7]), (3, [0.5, 0.2, 0.3]),
                                     (4, [0.6, None, 0.4, None]), (5, [0.2] * 5)])
def test_many_contexts_go_through_the_dual_and_are_optimal(A, caps):
    rng = np.random.default_rng(A)
    n = 3 * ca.ORACLE_LP_MAX_CONTEXTS
    mu = np.round(rng.random((n, A)), 3)              # many exact ties
    w = rng.dirichlet(np.ones(n))
    w[:10] = 0.0
    w /= w.sum()
    called = []
    orig = ca._assignment_dual
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ca, "_assignment_dual", lambda *a: called.append(1) or orig(*a))
        res = ca.optimal_assignment(mu, caps, w)
    assert called == [1]
    check_solution(res, mu, caps, w)


def test_huge_rewards_are_rescaled_and_overflow_is_refused():
    rng = np.random.default_rng(0)
    mu = rng.random((40, 3))
    base = ca.optimal_assignment(mu, [0.2, 0.3, 0.5])
    big = ca.optimal_assignment(mu * 1e20, [0.2, 0.3, 0.5])     # HiGHS took 1e20 as infinite
    np.testing.assert_allclose(big.assignment, base.assignment, atol=1e-9)
    assert math.isclose(big.value / 1e20, base.value, rel_tol=1e-12)
    lam = big.shadow_prices / 1e20          # optimal prices of mu (they may differ from
    w = np.full(40, 1 / 40)                 # base's: on 40 points they are not unique)
    dual = float(w @ np.max(mu - lam, axis=1) + 0.2 * lam[0] + 0.3 * lam[1] + 0.5 * lam[2])
    assert math.isclose(dual, base.value, abs_tol=1e-9)
    shifted = ca.optimal_assignment(mu + 1e25, [0.2, 0.3, 0.5])   # differences lost: all tie
    np.testing.assert_allclose(shifted.loads, [0.2, 0.3, 0.5], atol=1e-9)
    with pytest.raises(ValueError, match="mu"):
        ca.optimal_assignment([[1e308, -1e308], [0.0, 1.0]], [0.5, 0.5])


# --- the oracle on ties and on tiny weights ----------------------------------------------

def _programme_sizes(monkeypatch):
    """Record the number of rows of every programme handed to HiGHS."""
    sizes = []
    orig = ca._assignment_lp
    monkeypatch.setattr(ca, "_assignment_lp",
                        lambda mu, *a, **k: sizes.append(mu.shape[0]) or orig(mu, *a, **k))
    return sizes


@pytest.mark.parametrize("caps", [[0.1, 0.2, 0.3, 0.15, 0.25], [0.1, None, 0.3, None, 0.2]])
def test_equal_rows_enter_the_programme_once(monkeypatch, caps):
    # 0/1 rewards of five agents have at most 32 distinct rows: however many
    # contexts, HiGHS sees 32 rows (before, the dual method handed it thousands)
    rng = np.random.default_rng(1)
    n = 20_000
    mu = rng.integers(0, 2, size=(n, 5)).astype(float)
    w = rng.dirichlet(np.ones(n))
    sizes = _programme_sizes(monkeypatch)
    res = ca.optimal_assignment(mu, caps, w)
    assert sizes == [32]
    check_solution(res, mu, caps, w)
    # the same optimum as the programme on the distinct rows with summed weights
    rows, inverse = np.unique(mu, axis=0, return_inverse=True)
    small = ca.optimal_assignment(rows, caps, np.bincount(inverse.ravel(), weights=w))
    assert math.isclose(res.value, small.value, abs_tol=1e-12)
    np.testing.assert_allclose(res.shadow_prices, small.shadow_prices, atol=1e-12)


@pytest.mark.parametrize("caps", [[0.2] * 5, [0.1, None, 0.3, None, 0.2]])
def test_ties_of_reward_differences_keep_the_dual_method_small(monkeypatch, caps):
    # rewards on a 10-level grid: more distinct rows than the whole programme
    # takes, and exact ties of their differences at the optimal prices for
    # thousands of them; contexts equal near the prices are merged, so HiGHS
    # only ever sees small programmes (before: the candidate set doubled to
    # 2,048 contexts)
    rng = np.random.default_rng(2)
    mu = rng.integers(0, 10, size=(12_000, 5)) / 9
    assert np.unique(mu, axis=0).shape[0] > ca.ORACLE_LP_MAX_CONTEXTS
    sizes = _programme_sizes(monkeypatch)
    res = ca.optimal_assignment(mu, caps)
    assert max(sizes) <= ca._DUAL_FIRST_CANDIDATES + 5, sizes
    check_solution(res, mu, caps, np.full(12_000, 1 / 12_000))


@pytest.mark.parametrize("caps", [[0.3, 0.6, 0.5], [0.2, 0.5, 0.3, 0.4]])
def test_upper_bounds_keep_the_dual_method_small(monkeypatch, caps):
    # limits summing above one (<= rows, prices >= 0): the smoothed dual's seed
    # holds the slack agents' prices at 0 (projected Newton), so the first small
    # programme is the answer.  Before, its Newton step on all prices (singular
    # along (1, ..., 1)) failed, the seed stayed at 0 and the candidate set grew
    # to the whole programme: 160 s for 200,000 contexts instead of 0.4 s.
    rng = np.random.default_rng(len(caps))
    n = 3 * ca.ORACLE_LP_MAX_CONTEXTS
    mu = rng.random((n, len(caps))) * np.linspace(1.0, 0.6, len(caps))
    sizes = _programme_sizes(monkeypatch)
    res = ca.optimal_assignment(mu, caps, bounds="upper")
    assert max(sizes) <= ca._DUAL_FIRST_CANDIDATES + len(caps), sizes
    monkeypatch.setattr(ca, "ORACLE_LP_MAX_CONTEXTS", 10**9)
    full = ca.optimal_assignment(mu, caps, bounds="upper")          # HiGHS on all of it
    assert math.isclose(res.value, full.value, abs_tol=1e-9)
    # the prices are optimal for the dual (on n points they need not be unique)
    lam = res.shadow_prices
    w = np.full(n, 1 / n)
    assert np.all(lam >= 0.0) and lam[0] > 0.0 and np.all(lam[1:] == 0.0)
    assert math.isclose(float(w @ np.max(mu - lam, axis=1) + np.dot(caps, lam)),
                        full.value, abs_tol=1e-9)
    # the seed itself is within 1e-3 of them
    seed = ca._entropic_prices(mu, w, np.array(caps), np.ones(len(caps), bool), 1.0)
    np.testing.assert_allclose(seed, lam, atol=1e-3)


def test_tied_contexts_share_their_group_in_context_order():
    # two groups of four equal rows, interleaved; agent 0 takes all of the
    # first group (mass 0.5) and 0.1 of the second: the second group's first
    # context (index 1) gives it 0.8 of its weight 0.125, the later ones none
    mu = np.array([[0.9, 0.1], [0.2, 0.8]] * 4)
    res = ca.optimal_assignment(mu, [0.6, 0.4])
    expected = np.array([[1.0, 0.0], [0.8, 0.2]] + [[1.0, 0.0], [0.0, 1.0]] * 3)
    np.testing.assert_allclose(res.assignment, expected, atol=1e-12)


@FAST
@given(inst=st.one_of(instances(n_max=10), instances(n_max=10, free=True, a_min=3)),
       copies=st.lists(st.integers(0, 9), min_size=1, max_size=30))
def test_repeated_rows_are_split_in_context_order(inst, copies):
    # rows repeated in a shuffled order: the optimum is that of the distinct
    # rows (certificate), and within each group of equal rows the agents are
    # met in increasing order along the contexts, with at most A - 1 split rows
    mu0, caps, w0 = inst
    pick = np.array([c % mu0.shape[0] for c in copies])
    mu = mu0[pick]
    w = w0[pick] + 1.0 / len(pick)
    w /= w.sum()
    res = ca.optimal_assignment(mu, caps, w)
    check_solution(res, mu, caps, w)
    P = res.assignment
    for row in np.unique(mu, axis=0):
        members = np.flatnonzero((mu == row).all(axis=1))
        lowest = np.argmax(P[members] > 1e-12, axis=1)
        highest = mu.shape[1] - 1 - np.argmax(P[members][:, ::-1] > 1e-12, axis=1)
        assert np.all(lowest[1:] >= highest[:-1])
        assert np.sum(highest > lowest) <= mu.shape[1] - 1


@pytest.mark.parametrize("tiny", [5e-16, 1e-300, 5e-324])
def test_tiny_weights_give_a_finite_optimum(tiny):
    # HiGHS cannot resolve a mass below its tolerance and may return none at
    # all for such a context: its row must not become 0/0 = NaN (with a
    # RuntimeWarning); it follows the rule of Thm 1 like a weight-zero one
    mu = np.array([[0.9, 0.1], [0.2, 0.8], [0.5, 0.5]])
    w = [1 - 2 * tiny, tiny, tiny]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = ca.optimal_assignment(mu, [0.5, 0.5], weights=w)
    assert np.isfinite(res.assignment).all() and np.isfinite(res.value)
    check_solution(res, mu, [0.5, 0.5], res.weights)
    np.testing.assert_allclose(res.loads, [0.5, 0.5], atol=1e-12)
