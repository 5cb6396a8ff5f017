"""Forgetting (ModelSettings.discount): off is the paper's code; on, a model
tracks an agent whose accuracy changes mid-stream."""

import json

import numpy as np
import pytest

import capassign as ca


def _flip_stream(T=6000, seed=0):
    """Agent 0 is good (0.9) on x > 0 and poor (0.3) elsewhere, and the other
    way round from task T/2 on; agent 1 is right 60% of the time throughout."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(T, 1))
    good = X[:, 0] > 0
    good[T // 2:] = ~good[T // 2:]
    mu = np.column_stack([np.where(good, 0.9, 0.3), np.full(T, 0.6)])
    return X, (rng.random(mu.shape) < mu).astype(float)


def _play(router, X, R):
    errors, agents = [], []
    for t in range(len(X)):
        a = router.assign(X[t])
        i = router.agents.index(a)
        router.update(t, a, R[t, i])
        errors.append(1 - R[t, i])
        agents.append(i)
    return np.array(errors), np.array(agents)


@pytest.mark.parametrize("policy", ["logistic-greedy", "logistic-ts", "tree-greedy", "tree-ts"])
def test_forgetting_tracks_a_step_change(policy):
    X, R = _flip_stream()
    T = len(X)
    after = {}
    for g in (1.0, 0.99):
        router = ca.Router(["a", "b"], [0.5, 0.5], policy, X_reference=X, seed=0,
                           settings=ca.ModelSettings(discount=g))
        err, agents = _play(router, X, R)
        after[g] = err[T // 2:T // 2 + 1500].mean()      # the 1500 tasks after the change
        shares = np.bincount(agents[T // 2:], minlength=2) / (T // 2)
        assert np.abs(shares - 0.5).max() <= 0.01        # capacities kept
    assert after[0.99] < after[1.0] - 0.04, after


def test_marginal_forgetting_recovers_sooner():
    # agent 0 (capacity at most 0.5) falls from 0.9 to 0.3; agent 1 is free at 0.6:
    # tasks until agent 0's share of the last 200 falls below 10%
    rng = np.random.default_rng(1)
    T = 4000
    mu = np.column_stack([np.where(np.arange(T) < T // 2, 0.9, 0.3), np.full(T, 0.6)])
    R = (rng.random(mu.shape) < mu).astype(float)
    X = np.zeros((T, 1))
    recover = {}
    for g in (1.0, 0.98):
        router = ca.Router(["a", "b"], [0.5, None], "marginal",
                           settings=ca.ModelSettings(discount=g))
        _, agents = _play(router, X, R)
        share = np.convolve(agents == 0, np.ones(200) / 200, mode="valid")[T // 2:]
        recover[g] = int(np.argmax(share < 0.1)) if (share < 0.1).any() else T
    assert recover[0.98] < recover[1.0] / 2, recover


@pytest.mark.parametrize("policy", ca.ONLINE_POLICIES)
def test_forgetting_state_round_trip(policy):
    X, R = _flip_stream(1200, seed=2)
    settings = ca.ModelSettings(discount=0.97)
    router = ca.Router(["a", "b"], [0.5, 0.5], policy, X_reference=X, seed=3, settings=settings)
    _play(router, X[:700], R[:700])
    state = json.loads(json.dumps(router.state_dict()))
    assert state["settings"]["discount"] == 0.97
    twin = ca.Router.from_state(state)
    assert [router.assign(x) for x in X[700:]] == [twin.assign(x) for x in X[700:]]


def test_discount_off_is_not_saved_and_checked():
    assert "discount" not in ca.PAPER_SETTINGS.fields()
    for bad in (0.0, 1.5, -0.1, float("nan")):
        with pytest.raises(ValueError, match="settings.discount"):
            ca.ModelSettings(discount=bad)


@pytest.mark.parametrize("policy", ["marginal", "logistic-greedy", "tree-greedy"])
def test_simulate_with_forgetting_both_engines(policy):
    X, R = _flip_stream(600, seed=4)
    s = ca.ModelSettings(discount=0.98, n_trees=5)
    fast = ca.simulate(X, R, [0.5, 0.5], policy, runs=4, settings=s)
    ref = ca.simulate(X, R, [0.5, 0.5], policy, runs=2, settings=s, engine="reference")
    off = ca.simulate(X, R, [0.5, 0.5], policy, runs=4, settings=ca.ModelSettings(n_trees=5))
    assert abs(fast.error - ref.error) < 0.05
    assert not np.array_equal(fast.errors, off.errors)


def test_spd_inverse_is_exactish():
    rng = np.random.default_rng(0)
    A = rng.normal(size=(6, 6))
    M = A @ A.T + 6 * np.eye(6)
    W = np.empty((3, 6, 6))
    ca._spd_inverse_nb(M, W)
    np.testing.assert_allclose(W[2] @ M, np.eye(6), atol=1e-12)


def _sigma_is_a_covariance(S):
    """Finite, symmetric, positive semi-definite within the restore check's tolerance."""
    eig = np.linalg.eigvalsh(S)
    return (np.isfinite(S).all() and np.array_equal(S, S.T)
            and eig[0] >= -ca._LogisticModel.SIGMA_RTOL * abs(eig).max())


@pytest.mark.parametrize("policy", ["logistic-greedy", "logistic-ts"])
def test_forgetting_with_contexts_of_1e9_keeps_sigma_and_capacities(policy):
    # timestamps and amounts: the precision's Cholesky factor lost its last
    # pivot to rounding, so Sigma turned NaN (or the step divided by zero) and
    # every task went to agent 0 (38 of 38 at capacity 0.5)
    rng = np.random.default_rng(5)
    router = ca.Router(["a", "b"], [0.5, 0.5], policy, n_features=2, seed=2,
                       settings=ca.ModelSettings(discount=0.99))
    for t in range(200):
        a = router.assign(1e9 * rng.uniform(1, 2, 2))
        router.update(t, a, float(rng.random() < 0.5))
        for S in router._model._Sigma:
            assert _sigma_is_a_covariance(S), (t, S)
    assert abs(router.assigned_counts[0] / 200 - 0.5) <= 0.02
    twin = ca.Router.from_state(json.loads(json.dumps(router.state_dict())))
    Z = 1e9 * rng.uniform(1, 2, (20, 2))
    assert [router.assign(z) for z in Z] == [twin.assign(z) for z in Z]


@pytest.mark.parametrize("batch_size", [None, 10])
def test_simulate_forgetting_with_contexts_of_1e9(batch_size):
    # a bare ZeroDivisionError before
    rng = np.random.default_rng(0)
    X = 1e9 * rng.uniform(1, 2, (300, 2))
    R = rng.integers(0, 2, (300, 2)).astype(float)
    res = ca.simulate(X, R, [0.5, 0.5], "logistic-greedy", runs=2, batch_size=batch_size,
                      settings=ca.ModelSettings(discount=0.99))
    assert np.abs(res.assigned - 0.5).max() <= 0.01


def test_the_factored_forgetting_step_is_the_same_step():
    # where the plain inverses are exact, the factored form agrees with them
    rng = np.random.default_rng(3)
    B = rng.normal(size=(4, 4))
    S = B @ B.T + 0.5 * np.eye(4)
    W = np.empty((4, 4, 4))
    want = np.linalg.inv(0.9 * np.linalg.inv(S) + 0.1 * 2.0 * np.eye(4))
    plain = S.copy()
    ca._discount_precision_nb(plain, 0.9, 2.0, W)
    factored = S.copy()
    W[3] = S
    ca._discount_factored_nb(factored, 0.9, 0.1 * 2.0, W)
    np.testing.assert_allclose(plain, want, rtol=1e-12)
    np.testing.assert_allclose(factored, want, rtol=1e-12)
    assert np.array_equal(factored, factored.T)


@pytest.mark.parametrize("gamma", [5e-324, 1e-101, 1e101])
def test_a_prior_precision_without_a_finite_inverse_is_refused(gamma):
    # gamma = 5e-324: 1 / gamma is infinite, the model NaN from its first step,
    # and simulate sent every task to agent 0 (share 1.0 at capacity 0.5)
    with pytest.raises(ValueError, match=r"settings.gamma must be a finite number in \[1e-100"):
        ca.ModelSettings(gamma=gamma)


@pytest.mark.parametrize("policy", ["logistic-greedy", "logistic-ts"])
@pytest.mark.parametrize("batch_size", [None, 5])
def test_simulate_raises_on_a_nan_estimate(policy, batch_size):
    # contexts of 1e300 at gamma = 1e-100 overflow the Laplace step to NaN:
    # the online rule sent every task to agent 0, silently
    rng = np.random.default_rng(0)
    X = 1e300 * rng.uniform(-1, 1, (100, 2))
    R = rng.integers(0, 2, (100, 2)).astype(float)
    with pytest.raises(ValueError, match="estimated reward is NaN"):
        ca.simulate(X, R, [0.5, 0.5], policy, runs=1, batch_size=batch_size,
                    settings=ca.ModelSettings(gamma=1e-100))


@pytest.mark.parametrize("policy", ca.ONLINE_POLICIES[1:])   # random estimates nothing
def test_a_router_raises_on_a_nan_estimate(policy):
    X = np.random.default_rng(1).normal(size=(60, 2))
    router = ca.Router(["a", "b", "c"], [0.4, 0.3, None], policy, X_reference=X, seed=1)
    for t in range(60):
        router.update(t, router.assign(X[t]), t % 2)
    model = router._model
    if policy == "marginal":
        model._s[1] = np.nan
    elif policy.startswith("logistic"):
        model._theta[1] = np.nan
    else:
        model._val[:] = np.nan
        model._fitted[:] = True
    with pytest.raises(ValueError, match="estimated reward is NaN"):
        router.assign(X[0])
    with pytest.raises(ValueError, match="estimated reward is NaN"):
        router.assign_batch(X[:4])


def _one_step_sigma(x):
    """Sigma of a logistic model after one Laplace step at context ``x`` (intercept first)."""
    theta, Sigma = np.zeros(len(x)), np.eye(len(x))
    ca._laplace_update_nb(theta, Sigma, np.asarray(x, float), 1.0, 1e-4, 0.25, np.empty(len(x)))
    return Sigma


def test_the_forgetting_step_takes_the_plain_inverses_where_they_are_exact():
    # the paper-scale path: two Cholesky inverses, bit for bit as before the factored form
    S = _one_step_sigma([1.0, 0.3, -1.2])
    W = np.empty((4, 3, 3))
    got = S.copy()
    ca._discount_precision_nb(got, 0.99, 1.0, W)
    V = np.empty((3, 3, 3))
    ca._spd_inverse_nb(S, V)
    P = 0.99 * V[2] + (1 - 0.99) * 1.0 * np.eye(3)
    ca._spd_inverse_nb(P, V)
    assert np.array_equal(got, V[2])


def _rotated(eigenvalues, seed=0):
    Q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(len(eigenvalues),) * 2))
    S = Q @ np.diag(eigenvalues) @ Q.T
    return (S + S.T) / 2


@pytest.mark.parametrize("S", [
    _one_step_sigma([1.0, 1.7e9, 1.6e9]),               # a variance lost to rounding
    _rotated([1.0, 1e-11, 0.5])],                        # the plain inverses err by 2e-7
    ids=["lost", "ill-conditioned"])
def test_the_forgetting_step_is_factored_where_a_pivot_is_lost(S):
    W = np.empty((4, 3, 3))
    got = S.copy()
    ca._discount_precision_nb(got, 0.99, 1.0, W)
    want = S.copy()
    W[3] = S
    ca._discount_factored_nb(want, 0.99, (1 - 0.99) * 1.0, W)
    assert np.array_equal(got, want) and _sigma_is_a_covariance(got)
