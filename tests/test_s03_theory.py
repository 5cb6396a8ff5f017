"""Tests of section 3 of capassign (theory / oracle; the paper, Sec. 2.3, App. A-D).

Every optimum is checked against something computed another way: enumeration of
deterministic assignments, an assignment-problem solver on expanded agent
slots, a greedy top-alpha fill for two agents, and the LP dual function,
whose value at the returned shadow prices must equal the primal value
(a certificate of optimality of both).
"""

import itertools
import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy.optimize import linear_sum_assignment

import capassign as ca

FAST = settings(max_examples=40, deadline=None, derandomize=True)

# ----------------------------------------------------------------------------- strategies

unit = st.floats(0.0, 1.0, allow_nan=False, allow_infinity=False)


@st.composite
def instances(draw, n_max=8, a_min=2, a_max=4, zero_weights=True, free=False):
    """(mu, capacities, weights) with random shapes; capacities may include None."""
    n = draw(st.integers(1, n_max))
    A = draw(st.integers(a_min, a_max))
    mu = np.array(draw(st.lists(st.lists(unit, min_size=A, max_size=A),
                                min_size=n, max_size=n)))
    raw = np.array(draw(st.lists(st.integers(0, 9), min_size=A, max_size=A)), float)
    free_mask = np.zeros(A, bool)
    if free:
        free_mask = np.array(draw(st.lists(st.booleans(), min_size=A, max_size=A)))
        assume(not free_mask.all())
    cons = ~free_mask
    assume(raw[cons].sum() > 0)
    alpha = raw / raw[cons].sum()
    caps = [None if f else float(x) for f, x in zip(free_mask, alpha)]
    lo = 0 if zero_weights else 1
    wr = np.array(draw(st.lists(st.integers(lo, 5), min_size=n, max_size=n)), float)
    assume(wr.sum() > 0)
    return mu, caps, wr / wr.sum()


def dual_function(mu, lam, alpha, w, constrained):
    """g(lambda) = E_x[max_a mu_a(x) - lambda_a] + sum_{constrained} alpha_a lambda_a.

    For any lambda (>= 0 on constrained agents when a free agent exists) this is
    an upper bound on the constrained optimum (weak duality, App. C); it equals
    the optimum exactly at optimal shadow prices.
    """
    return float(w @ np.max(mu - lam, axis=1) + np.sum(alpha[constrained] * lam[constrained]))


def alpha_array(caps):
    return np.array([0.0 if c is None else c for c in caps])


def check_solution(res, mu, caps, w):
    alpha = alpha_array(caps)
    constrained = np.array([c is not None for c in caps])
    P, lam = res.assignment, res.shadow_prices
    assert P.shape == mu.shape
    assert np.all(P >= 0)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-12)
    loads = w @ P
    np.testing.assert_allclose(loads, res.loads, atol=1e-12)
    if constrained.all():
        np.testing.assert_allclose(loads, alpha, atol=1e-7)
        assert lam.min() == 0.0          # documented normalisation
    else:
        assert np.all(loads[constrained] <= alpha[constrained] + 1e-7)
        assert np.all(lam[~constrained] == 0.0)
        assert np.all(lam >= -1e-9)
        # complementary slackness of the inequality rows
        slack = alpha - loads
        assert np.all((lam[constrained] <= 1e-9) | (slack[constrained] <= 1e-7))
    assert math.isclose(res.value, float(np.sum(w[:, None] * P * mu)), abs_tol=1e-12)
    # complementary slackness: mass only on maximisers of mu - lambda
    adj = mu - lam
    gap = adj.max(axis=1, keepdims=True) - adj
    assert np.all((P[w > 0] <= 1e-9) | (gap[w > 0] <= 1e-8))
    # strong duality: the shadow prices are optimal dual values
    assert math.isclose(dual_function(mu, lam, alpha, w, constrained), res.value,
                        abs_tol=1e-8)


# ----------------------------------------------------------------------------- LP vs independent methods

@FAST
@given(instances())
def test_lp_certificate_all_constrained(inst):
    mu, caps, w = inst
    check_solution(ca.optimal_assignment(mu, caps, w), mu, caps, w)


@FAST
@given(instances(free=True, a_min=3))
def test_lp_certificate_with_free_agents(inst):
    mu, caps, w = inst
    res = ca.optimal_assignment(mu, caps, w)
    check_solution(res, mu, caps, w)
    assert np.isnan(res.capacities[[c is None for c in caps]]).all()
    # a free agent can only help: compare with the same capacities and the free
    # agents removed (the constrained agents then take all the work)
    keep = [a for a, c in enumerate(caps) if c is not None]
    if len(keep) >= 2:
        sub = ca.optimal_assignment(mu[:, keep], [caps[a] for a in keep], w)
        assert res.value >= sub.value - 1e-9


@FAST
@given(st.integers(1, 5), st.integers(2, 3), st.data())
def test_lp_equals_enumeration_of_deterministic_assignments(n, A, data):
    # integer capacities k_a / n on n equally likely contexts: the transportation
    # polytope has integral vertices, so the best deterministic assignment with
    # exactly k_a contexts per agent is the LP optimum
    mu = np.array(data.draw(st.lists(st.lists(unit, min_size=A, max_size=A),
                                     min_size=n, max_size=n)))
    cuts = sorted(data.draw(st.lists(st.integers(0, n), min_size=A - 1, max_size=A - 1)))
    counts = np.diff([0, *cuts, n])
    caps = list(counts / n)
    best = -np.inf
    for agents in itertools.product(range(A), repeat=n):
        if np.array_equal(np.bincount(agents, minlength=A), counts):
            best = max(best, mu[np.arange(n), agents].mean())
    res = ca.optimal_assignment(mu, caps)
    assert math.isclose(res.value, best, abs_tol=1e-9)


@FAST
@given(st.integers(2, 14), st.integers(2, 4), st.data())
def test_lp_equals_assignment_problem_on_agent_slots(n, A, data):
    mu = np.array(data.draw(st.lists(st.lists(unit, min_size=A, max_size=A),
                                     min_size=n, max_size=n)))
    cuts = sorted(data.draw(st.lists(st.integers(0, n), min_size=A - 1, max_size=A - 1)))
    counts = np.diff([0, *cuts, n])
    slots = np.repeat(np.arange(A), counts)            # one column per unit of capacity
    rows, cols = linear_sum_assignment(mu[:, slots], maximize=True)
    best = mu[rows, slots[cols]].sum() / n
    res = ca.optimal_assignment(mu, list(counts / n))
    assert math.isclose(res.value, best, abs_tol=1e-9)


def greedy_two_agent_value(mu, alpha, w):
    """Fill agent 1 with the contexts of largest Delta until its mass is alpha."""
    delta = mu[:, 0] - mu[:, 1]
    value, left = float(w @ mu[:, 1]), alpha
    for i in np.argsort(-delta, kind="stable"):
        take = min(w[i], left)
        value += take * delta[i]
        left -= take
    return value


@FAST
@given(instances(a_min=2, a_max=2))
def test_two_agent_lp_equals_greedy_and_threshold(inst):
    mu, caps, w = inst
    alpha = caps[0]
    delta = mu[:, 0] - mu[:, 1]
    res = ca.optimal_assignment(mu, caps, w)
    assert math.isclose(res.value, greedy_two_agent_value(mu, alpha, w), abs_tol=1e-9)
    thr = ca.two_agent_threshold(delta, alpha, w)
    assert math.isclose(float(w @ thr.assignment), alpha, abs_tol=1e-9)
    assert math.isclose(float(w @ mu[:, 1]) + thr.delta_integral, res.value, abs_tol=1e-9)
    d = res.shadow_prices[0] - res.shadow_prices[1]
    lo, hi = thr.interval
    assert lo - 1e-9 <= d <= hi + 1e-9
    assert lo <= thr.tau <= hi
    if 1e-6 < thr.boundary_fraction < 1 - 1e-6:
        assert thr.unique
        assert math.isclose(d, thr.tau, abs_tol=1e-9)
    # the threshold rule: agent 1 above tau, agent 2 below
    pos = w > 0
    assert np.all(thr.assignment[pos & (delta > thr.tau)] == 1.0)
    assert np.all(thr.assignment[pos & (delta < thr.tau)] == 0.0)


def test_two_agent_threshold_unique_case_by_hand():
    delta = np.array([0.3, -0.1, 0.2, 0.0])
    thr = ca.two_agent_threshold(delta, 0.375)   # 1.5 of 4 contexts
    assert thr.tau == 0.2 and math.isclose(thr.boundary_fraction, 0.5)
    assert thr.unique and float(thr) == 0.2
    np.testing.assert_allclose(thr.assignment, [1, 0, 0.5, 0])
    mu = np.column_stack([delta, np.zeros(4)])
    res = ca.optimal_assignment(mu, [0.375, 0.625])
    assert math.isclose(res.shadow_prices[0] - res.shadow_prices[1], 0.2, abs_tol=1e-12)
    # alpha on a gap between support values: every threshold in the gap is optimal
    thr = ca.two_agent_threshold(delta, 0.5)
    assert thr.tau == 0.2 and thr.boundary_fraction == 1.0 and thr.interval == (0.0, 0.2)
    assert not thr.unique
    assert ca.two_agent_threshold(delta, 0.0).interval == (0.3, math.inf)
    assert ca.two_agent_threshold(delta, 1.0).interval == (-math.inf, -0.1)


# ----------------------------------------------------------------------------- shadow prices

@FAST
@given(instances(free=True))
def test_shadow_price_policy_reproduces_lp(inst):
    mu, caps, w = inst
    res = ca.optimal_assignment(mu, caps, w)
    P = ca.shadow_price_policy(mu, res.shadow_prices, caps, w)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-12)
    alpha = alpha_array(caps)
    constrained = np.array([c is not None for c in caps])
    loads = w @ P
    if constrained.all():
        np.testing.assert_allclose(loads, alpha, atol=1e-7)
    else:
        assert np.all(loads[constrained] <= alpha[constrained] + 1e-7)
    assert math.isclose(float(np.sum(w[:, None] * P * mu)), res.value, abs_tol=1e-8)


def test_shadow_price_policy_splits_boundary_context():
    # three equally likely contexts, agent 1 gets half: the middle one is split
    mu = np.array([[0.9, 0.1], [0.5, 0.5], [0.1, 0.9]])
    res = ca.optimal_assignment(mu, [0.5, 0.5])
    np.testing.assert_allclose(res.shadow_prices, [0.0, 0.0], atol=1e-12)
    P = ca.shadow_price_policy(mu, res.shadow_prices, [0.5, 0.5])
    np.testing.assert_allclose(P, [[1, 0], [0.5, 0.5], [0, 1]], atol=1e-12)
    # without capacities: plain argmax, ties to the lowest index
    np.testing.assert_array_equal(ca.shadow_price_policy(mu, [0, 0]),
                                  [[1, 0], [1, 0], [0, 1]])
    with pytest.raises(ValueError, match="capacities"):
        ca.shadow_price_policy(mu, [0.0, 0.5], [0.5, 0.5])


@FAST
@given(instances(a_min=2, a_max=3, zero_weights=False), st.data())
def test_shadow_prices_are_supergradients(inst, data):
    # the optimal value v(alpha) is concave; lambda is a supergradient:
    # v(alpha + d) <= v(alpha) + lambda . d for feasible moves d with sum(d) = 0
    mu, caps, w = inst
    alpha = np.array(caps)
    res = ca.optimal_assignment(mu, caps, w)
    a, b = data.draw(st.permutations(range(len(caps))))[:2]
    eps = data.draw(st.floats(0.0, 1.0)) * alpha[b]
    new = alpha.copy()
    new[a] += eps
    new[b] -= eps
    new = np.clip(new, 0, 1)
    new /= new.sum()
    moved = ca.optimal_assignment(mu, list(new), w)
    assert moved.value <= res.value + res.shadow_prices @ (new - alpha) + 1e-8


def test_shadow_price_sign_convention():
    # agent 0 is better everywhere but may take only 30%: its price is positive
    mu = np.column_stack([np.linspace(0.6, 0.9, 50), np.full(50, 0.5)])
    res = ca.optimal_assignment(mu, [0.3, 0.7])
    assert res.shadow_prices[0] > 0 and res.shadow_prices[1] == 0
    np.testing.assert_array_equal(res.policy()[res.assignment[:, 0] > 0.999], 0)
    # raising agent 0's capacity pays lambda_0 - lambda_1 per unit (up to discreteness)
    up = ca.optimal_assignment(mu, [0.32, 0.68])
    slope = (up.value - res.value) / 0.02
    assert abs(slope - (res.shadow_prices[0] - res.shadow_prices[1])) < 0.02


def test_zero_weight_contexts_follow_the_price_rule():
    mu = np.array([[0.9, 0.1], [0.2, 0.8], [0.7, 0.6]])
    res = ca.optimal_assignment(mu, [0.5, 0.5], weights=[0.5, 0.5, 0.0])
    np.testing.assert_allclose(res.assignment[:2], [[1, 0], [0, 1]], atol=1e-12)
    assert res.assignment[2].tolist() in ([1.0, 0.0], [0.0, 1.0])
    assert res.assignment[2, res.policy()[2]] == 1.0


# ----------------------------------------------------------------------------- contextual vs random

@FAST
@given(instances(free=False))
def test_optimal_beats_random(inst):
    mu, caps, w = inst
    res = ca.optimal_assignment(mu, caps, w)
    assert res.value >= res.random_value - 1e-9
    assert math.isclose(res.random_value, ca.random_assignment_value(mu, caps, w), abs_tol=1e-12)
    assert math.isclose(res.random_value, float(w @ mu @ np.array(caps)), abs_tol=1e-12)


@FAST
@given(st.integers(1, 8), st.integers(2, 4), st.data())
def test_no_gain_when_gaps_do_not_depend_on_x(n, A, data):
    # mu_a(x) = c(x) + b_a: every agent ranks the same at every x, with constant gaps
    c = np.array(data.draw(st.lists(st.floats(0, 0.5), min_size=n, max_size=n)))
    b = np.array(data.draw(st.lists(st.floats(0, 0.5), min_size=A, max_size=A)))
    raw = np.array(data.draw(st.lists(st.integers(1, 9), min_size=A, max_size=A)), float)
    res = ca.optimal_assignment(c[:, None] + b[None, :], list(raw / raw.sum()))
    assert abs(res.gain) < 1e-9


@FAST
@given(st.integers(2, 8), st.integers(2, 3), st.data())
def test_strict_gain_when_best_agent_varies(n, A, data):
    # rewards on a 0.1 grid and capacities >= 0.1: if the best agent changes
    # with x the gain is strictly positive (App. C)
    mu = np.array(data.draw(st.lists(st.lists(st.integers(0, 10), min_size=A, max_size=A),
                                     min_size=n, max_size=n))) / 10
    best = [set(np.flatnonzero(row == row.max())) for row in mu]
    assume(not set.intersection(*best))                 # no agent is best everywhere
    raw = np.array(data.draw(st.lists(st.integers(1, 9), min_size=A, max_size=A)), float)
    res = ca.optimal_assignment(mu, list(raw / raw.sum()))
    assert res.gain > 1e-6


def test_dominant_agent_with_varying_gap_still_gains():
    # agent 1 is best at every x, yet sorting by Delta beats random (Prop. 3)
    x = np.linspace(0, 1, 101)
    mu = np.column_stack([0.6 + 0.3 * x, np.full_like(x, 0.55)])
    res = ca.optimal_assignment(mu, [0.5, 0.5])
    assert res.gain > 0.03
    # and its reward increases to mu_1 as alpha -> 1
    vals = [ca.optimal_assignment(mu, [a, 1 - a]).value for a in (0.5, 0.9, 0.99, 1.0)]
    assert np.all(np.diff(vals) > 0)
    assert math.isclose(vals[-1], mu[:, 0].mean(), abs_tol=1e-12)


# ----------------------------------------------------------------------------- disagreement gain

@FAST
@given(instances(a_min=2, a_max=2), st.floats(0, 1))
def test_disagreement_formula_equals_lp_gain_in_range(inst, s):
    mu, _, w = inst
    delta = mu[:, 0] - mu[:, 1]
    reg = ca.disagreement_regions(delta, w)
    lo, hi = reg.alpha_range
    alpha = min(1.0, max(0.0, lo + s * (hi - lo)))
    res = ca.optimal_assignment(mu, [alpha, 1 - alpha], w)
    g = ca.disagreement_gain(delta, alpha, w)
    assert math.isclose(g, res.gain, abs_tol=1e-8)
    closed = 0.0
    if reg.p1 > 0:
        closed += (1 - alpha) * reg.p1 * reg.mean_gap_1
    if reg.p2 > 0:
        closed += alpha * reg.p2 * reg.mean_gap_2
    assert math.isclose(g, closed, abs_tol=1e-12)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(instances(a_min=2, a_max=2), st.floats(0, 1))
def test_disagreement_formula_outside_range(inst, alpha):
    mu, _, w = inst
    delta = mu[:, 0] - mu[:, 1]
    lo, hi = ca.disagreement_regions(delta, w).alpha_range
    assume(alpha < lo - 1e-6 or alpha > hi + 1e-6)
    with pytest.raises(ValueError, match="alpha"):
        ca.disagreement_gain(delta, alpha, w)
    bound = ca.disagreement_gain(delta, alpha, w, allow_outside=True)
    res = ca.optimal_assignment(mu, [alpha, 1 - alpha], w)
    # the formula's policy (D1 to agent 1, D2 to agent 2) is infeasible here; the
    # optimum misses at least the excess mass times the smallest gap it gives up
    if alpha < lo:
        missed = (lo - alpha) * delta[(delta > 0) & (w > 0)].min()
    else:
        missed = (alpha - hi) * (-delta[(delta < 0) & (w > 0)]).min()
    assert missed > 0
    assert bound - res.gain >= missed - 1e-9


def test_disagreement_gain_by_hand():
    delta = np.array([0.4, 0.2, 0.0, -0.3])    # p1 = 0.5, p2 = 0.25
    reg = ca.disagreement_regions(delta)
    assert (reg.p1, reg.p2) == (0.5, 0.25)
    assert math.isclose(reg.mean_gap_1, 0.3) and math.isclose(reg.mean_gap_2, 0.3)
    # alpha = 0.6: 0.4 * 0.5 * 0.3 + 0.6 * 0.25 * 0.3
    assert math.isclose(ca.disagreement_gain(delta, 0.6), 0.105)
    assert math.isnan(ca.disagreement_regions(np.array([0.1, 0.2])).mean_gap_2)


# ----------------------------------------------------------------------------- input validation

MU = np.array([[0.9, 0.1], [0.2, 0.8]])


@pytest.mark.parametrize("caps, exc, word", [
    ([0.5, -0.5], ValueError, "capacities"),
    ([0.5, float("nan")], ValueError, "capacities"),
    ([0.5, 0.4], ValueError, "capacities"),
    ([0.5, 0.5 + 1e-8], ValueError, "capacities"),
    ([1.0], ValueError, "capacities"),
    ([0.2, 0.3, 0.5], ValueError, "capacities"),
    ([None, None], ValueError, "capacities"),
    ("ab", TypeError, "capacities"),
    ([0.5, "0.5"], TypeError, "capacities"),
    ([True, False], TypeError, "capacities"),
])
def test_bad_capacities(caps, exc, word):
    with pytest.raises(exc, match=word):
        ca.optimal_assignment(MU, caps)


@pytest.mark.parametrize("mu, exc", [
    ([[0.1, np.nan], [0.2, 0.3]], ValueError),
    ([[0.1, np.inf], [0.2, 0.3]], ValueError),
    ([0.1, 0.2], ValueError),
    (np.zeros((0, 2)), ValueError),
    ([["a", "b"]], TypeError),
])
def test_bad_mu(mu, exc):
    with pytest.raises(exc, match="mu"):
        ca.optimal_assignment(mu, [0.5, 0.5])


@pytest.mark.parametrize("weights, exc", [
    ([0.5, 0.6], ValueError),
    ([1.5, -0.5], ValueError),
    ([0.5, np.nan], ValueError),
    ([1.0], ValueError),
    ([[0.5, 0.5]], ValueError),
    (["a", "b"], TypeError),
])
def test_bad_weights(weights, exc):
    with pytest.raises(exc, match="weights"):
        ca.optimal_assignment(MU, [0.5, 0.5], weights)
    with pytest.raises(exc, match="weights"):
        ca.two_agent_threshold(MU[:, 0], 0.5, weights)
    with pytest.raises(exc, match="weights"):
        ca.disagreement_gain(MU[:, 0] - MU[:, 1], 0.5, weights)


@pytest.mark.parametrize("alpha, exc", [
    (-0.1, ValueError), (1.1, ValueError), (float("nan"), ValueError),
    ("0.5", TypeError), (None, TypeError), (True, TypeError),
])
def test_bad_alpha(alpha, exc):
    with pytest.raises(exc, match="alpha"):
        ca.two_agent_threshold([0.1, -0.1], alpha)
    with pytest.raises(exc, match="alpha"):
        ca.disagreement_gain([0.1, -0.1], alpha)


def test_bad_delta_and_prices():
    with pytest.raises(ValueError, match="delta"):
        ca.two_agent_threshold([[0.1, 0.2]], 0.5)
    with pytest.raises(ValueError, match="delta"):
        ca.disagreement_gain([0.1, np.nan], 0.5)
    with pytest.raises(ValueError, match="delta"):
        ca.two_agent_threshold([], 0.5)
    with pytest.raises(ValueError, match="shadow_prices"):
        ca.shadow_price_policy(MU, [0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="tol"):
        ca.shadow_price_policy(MU, [0.0, 0.0], tol=-1)
    res = ca.optimal_assignment(MU, [0.5, 0.5])
    with pytest.raises(ValueError, match="mu"):
        res.policy(np.zeros((3, 3)))


def test_weights_are_not_normalised_silently():
    w = np.array([1.0, 3.0])
    with pytest.raises(ValueError, match="sum to"):
        ca.optimal_assignment(MU, [0.5, 0.5], w)
    res = ca.optimal_assignment(MU, [0.5, 0.5], w / w.sum())
    assert math.isclose(res.weights.sum(), 1.0)


def test_threshold_with_tiny_tail_weights():
    # Gaussian weights on a wide grid have masses ~1e-11 in the tails; alpha = 0
    # and alpha = 1 must still give agent 1 nothing and everything
    x = np.linspace(-6, 6, 401)
    w = np.exp(-0.5 * x**2)
    w /= w.sum()
    delta = np.tanh(x)
    none = ca.two_agent_threshold(delta, 0.0, w)
    assert none.boundary_fraction == 0.0 and np.all(none.assignment == 0.0)
    everything = ca.two_agent_threshold(delta, 1.0, w)
    assert np.all(everything.assignment == 1.0)
    assert math.isclose(everything.delta_integral, float(w @ delta), abs_tol=1e-15)
