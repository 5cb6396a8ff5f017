"""Free agents (App. H.4) with constrained shares summing to at most one.

With a free agent (capacity ``None``) the constrained shares are long-run
upper bounds and may sum to less than one, the free agents taking the rest:
accepted the same way by every entry point; the queues keep each constrained
agent within its share; the random baseline and the mini-batch counts give
the remainder to the free agents.  Shares summing to one behave as before
(the chapters' stored outputs and the engine tests pin those numbers).
"""

from __future__ import annotations

import numpy as np
import pytest

import capassign as ca

CAPS = [0.2, 0.3, None]
ETA = 0.5


@pytest.fixture(scope="module")
def stream():
    X, R, _ = ca.synthetic_stream(1500, 3, n_agents=3, seed=0)
    return X, R


def test_every_entry_point_accepts_a_remainder(stream, tmp_path):
    X, R = stream
    ca.simulate(X, R, CAPS, "random", runs=1)
    ca.Router(3, CAPS, "logistic-greedy", n_features=3)
    ca.optimal_assignment(R[:50], CAPS)
    ca.hindsight_optimum(R[:50], CAPS)
    df = ca.sweep({"s": (X[:200], R[:200])}, ["random"], [CAPS], tmp_path / "sw",
                  runs=1, backend="sequential")
    assert list(df["capacities"].unique()) == [ca._capacity_label(tuple(CAPS))]
    assert ca.main(["simulate", "--task", "synthetic", "--policy", "random",
                    "--capacities", "0.4,free", "--runs", "1"]) == 0


@pytest.mark.parametrize("caps, words", [
    ([0.6, 0.6, None], "at most 1"),
    ([0.2, 0.3], "with a free agent"),
])
def test_rules_stated_in_the_error(caps, words):
    with pytest.raises(ValueError, match=words):
        ca.Router(len(caps), caps, "random")
    with pytest.raises(ValueError, match=words):
        ca.simulate(np.zeros((10, 1)), np.zeros((10, len(caps))), caps, "random", runs=1)
    with pytest.raises(ValueError, match=words):
        ca.optimal_assignment(np.full((1, len(caps)), 0.5), caps)


def test_selection_shares():
    alpha, c = ca._validate_capacities(CAPS)
    np.testing.assert_allclose(ca._selection_shares(alpha, c), [0.2, 0.3, 0.5])
    alpha, c = ca._validate_capacities([0.2, None, 0.3, None])
    np.testing.assert_allclose(ca._selection_shares(alpha, c), [0.2, 0.25, 0.3, 0.25])
    for caps in ([0.4, 0.6, None], [0.1, 0.2, 0.7], [1.0, None]):  # sum one: alpha itself
        alpha, c = ca._validate_capacities(caps)
        assert ca._selection_shares(alpha, c).tobytes() == alpha.tobytes()
    assert ca.random_assignment_value([[0.9, 0.5, 0.7]], CAPS) == pytest.approx(0.68)


@pytest.mark.parametrize("policy", ["marginal", "logistic-greedy", "tree-greedy"])
def test_queues_keep_constrained_agents_within_their_shares(stream, policy):
    X, R = stream
    T = R.shape[0]
    res = ca.simulate(X, R, CAPS, policy, runs=2, seed=3, eta=ETA, return_traces=True)
    N = np.cumsum(res.assignments[..., None] == np.arange(3), axis=1)[:, :, :2]
    excess = N - np.array([0.2, 0.3]) * np.arange(1, T + 1)[None, :, None]
    # a constrained agent is chosen only while eta Q <= 1 (its mu <= 1, the free one's >= 0)
    assert excess.max() <= 1 / ETA + 1
    assert (res.assigned[:, 2] >= 0.5 - (2 / ETA + 2) / T).all()


def test_random_baseline_gives_the_rest_to_the_free_agents(stream):
    X, R = stream
    T = R.shape[0]
    online = ca.simulate(X, R, CAPS, "random", runs=8, seed=0)
    np.testing.assert_allclose(online.assigned.mean(axis=0), [0.2, 0.3, 0.5], atol=0.02)
    for engine in ("fast", "reference"):  # the counts of a batch are deterministic
        batch = ca.simulate(X, R, CAPS, "random", runs=2, seed=0, batch_size=7, engine=engine)
        counts = batch.assigned * T
        assert np.abs(counts - np.array([0.2, 0.3, 0.5]) * T).max() <= 2, engine


def test_batch_counts_with_a_remainder():
    assert ca.batch_counts(10, [0.2, 0.3, 0.0], [0, 0, 0], [True, True, False]).tolist() == [2, 3, 5]
    # left-over tasks go to the constrained agents; the free agents split the rest
    assert ca.batch_counts(7, [0.2, 0.3, 0, 0], [0] * 4,
                           [True, True, False, False]).tolist() == [2, 2, 2, 1]
    assert ca.batch_counts(7, [0.0, 0.0, 0.0], [0] * 3, [True, True, False]).tolist() == [0, 0, 7]
    # compiled and Python counts agree exactly, with and without a remainder
    rng = np.random.default_rng(0)
    for _ in range(400):
        A = int(rng.integers(2, 6))
        free = rng.random(A) < 0.4
        free[int(rng.integers(A))] = False
        alpha = rng.random(A) * ~free * (rng.random(A) < 0.8)
        if alpha.sum() == 0:
            alpha[np.flatnonzero(~free)[0]] = 1.0
        alpha = alpha / alpha.sum() * (rng.choice([1.0, rng.random()]) if free.any() else 1.0)
        Q = rng.random(A) * 3 * ~free * (rng.random() < 0.7)
        B = int(rng.integers(1, 40))
        N = ca.batch_counts(B, alpha, Q, ~free)
        N_nb = np.empty(A, dtype=np.int64)
        ca._batch_counts_nb(B, alpha, Q, ~free, N_nb)
        assert N.tolist() == N_nb.tolist() and N.sum() == B and (N >= 0).all()
        if not Q.any():  # from empty queues a constrained count is B alpha_a rounded
            assert (np.abs(N[~free] - B * alpha[~free]) < 1).all()


def test_oracle_and_router_respect_the_shares(stream):
    X, R = stream
    opt = ca.optimal_assignment([[0.9, 0.5, 0.7], [0.2, 0.8, 0.6]], CAPS)
    np.testing.assert_allclose(opt.loads, [0.2, 0.3, 0.5], atol=1e-9)
    assert opt.value >= opt.random_value
    h = ca.hindsight_optimum(R, CAPS)
    counts = np.bincount(h.assignment, minlength=3)
    assert counts[0] <= np.ceil(0.2 * len(R)) and counts[1] <= np.ceil(0.3 * len(R))
    router = ca.Router(3, CAPS, "random", seed=1)
    got = np.bincount([router.assign(x) for x in X], minlength=3) / len(X)
    np.testing.assert_allclose(got, [0.2, 0.3, 0.5], atol=0.03)
    router = ca.Router(3, CAPS, "logistic-greedy", n_features=3, seed=1)
    for j in range(0, 700, 7):
        for t, a in zip(range(j, j + 7), router.assign_batch(X[j:j + 7])):
            router.update(t, a, R[t, a])
    share = router.assigned_counts / 700
    assert share[0] <= 0.2 + 2 / 700 and share[1] <= 0.3 + 2 / 700
