"""Graded rewards in [0, 1]: the float code equals the integer code on 0/1
rewards bit for bit, and a known mu(x) is recovered from a graded stream."""

import json

import numpy as np
import pytest

import capassign as ca


@pytest.fixture(scope="module")
def stream():
    X, R, _ = ca.synthetic_stream(700, 3, seed=11)
    return X, R[:, :2]


def _fast(X, R, policy, caps=(0.3, 0.7), batch=0, runs=2, seed=3):
    """The fast engine's runs of ``policy`` on rewards ``R`` of the dtype given
    (uint8: the integer code; float64: the graded code)."""
    X, Rc, _, _, sim = ca._validate_simulation(X, R, list(caps), policy, 0.5, runs, seed,
                                               "fast", ca.PAPER_SETTINGS, batch or None)
    orders, seeds = ca._stream_orders(seed, runs, len(X))
    return ca._run_policy(X, R, orders, seeds, sim, True)


@pytest.mark.parametrize("policy", ca.POLICIES)
@pytest.mark.parametrize("batch", [0, 9])
def test_graded_code_equals_integer_code_on_binary_rewards(stream, policy, batch):
    X, R = stream
    if batch and policy.startswith("offline"):
        pytest.skip("offline policies take no batch size")
    a = _fast(X, np.ascontiguousarray(R, dtype=np.uint8), policy, batch=batch)
    b = _fast(X, np.ascontiguousarray(R, dtype=np.float64), policy, batch=batch)
    for u, v in zip(a, b):
        if u is not None:
            assert np.array_equal(u, v)


def test_binary_float_input_takes_the_integer_code(stream):
    X, R = stream
    assert ca._reward_array(R.astype(float)).dtype == np.uint8
    assert ca._reward_array(np.where(R > 0, 0.75, 0.0)).dtype == np.float64
    a = ca.simulate(X, R, [0.4, 0.6], "tree-ts", runs=2)
    b = ca.simulate(X, R.astype(np.float64), [0.4, 0.6], "tree-ts", runs=2)
    assert np.array_equal(a.errors, b.errors)


@pytest.mark.parametrize("policy", ca.ONLINE_POLICIES)
def test_router_graded_code_equals_integer_code(stream, policy):
    X, R = stream
    routers = [ca.Router(2, [0.5, 0.5], policy, X_reference=X, seed=1) for _ in range(2)]
    if policy.startswith("tree"):
        routers[1]._model._to_graded()      # float sums from the start
    decisions = [[], []]
    for k, router in enumerate(routers):
        for t in range(300):
            a = router.assign(X[t])
            router.update(t, a, float(R[t, a]))
            decisions[k].append(a)
            if t == 150:
                router = ca.Router.from_state(json.loads(json.dumps(router.state_dict())))
    assert decisions[0] == decisions[1]


def test_graded_tree_state_round_trip(stream):
    X, R = stream
    router = ca.Router(["a", "b"], [0.5, 0.5], "tree-greedy", n_features=3, seed=2)
    for t in range(200):
        a = router.assign(X[t])
        router.update(t, a, 0.25 + 0.5 * R[t, router.agents.index(a)])
    state = json.loads(json.dumps(router.state_dict()))
    assert "float64_base64" in state["model"]["rewards"][0]
    twin = ca.Router.from_state(state)
    assert [router.assign(x) for x in X[200:400]] == [twin.assign(x) for x in X[200:400]]


@pytest.mark.parametrize("policy", ["logistic-greedy", "tree-greedy", "marginal"])
def test_known_mu_recovered_from_graded_rewards(policy):
    # Graded rewards with E[r | x] = mu_a(x): a Beta draw around mu_a(x) for a
    # logistic mu_a (a step in x for the trees).  Each model's estimate must
    # approach mu_a(x) (the marginal model: its mean over x).
    rng = np.random.default_rng(0)
    T = 4000
    X = rng.uniform(-2, 2, size=(T, 1))
    mu = np.column_stack([1 / (1 + np.exp(-1.5 * X[:, 0])), np.where(X[:, 0] > 0, 0.8, 0.3)])
    R = rng.beta(4 * mu, 4 * (1 - mu))
    router = ca.Router(2, [0.5, 0.5], policy, X_reference=X, seed=0)
    for t in range(T):
        for a in range(2):
            router.update(X[t], a, R[t, a])
    grid = np.linspace(-1.8, 1.8, 19)[:, None]
    est = np.empty((len(grid), 2))
    router._model.score(grid, est, False)
    truth = np.column_stack([1 / (1 + np.exp(-1.5 * grid[:, 0])),
                             np.where(grid[:, 0] > 0, 0.8, 0.3)])
    if policy == "marginal":
        truth = np.broadcast_to(mu.mean(axis=0), truth.shape)
        assert np.abs(est - truth).max() < 0.01
    elif policy.startswith("logistic"):
        assert np.abs(est[:, 0] - truth[:, 0]).max() < 0.03
    else:
        away = np.abs(grid[:, 0]) > 0.25
        assert np.abs(est[away, 1] - truth[away, 1]).max() < 0.05


def test_graded_rewards_enter_every_entry_point(stream, tmp_path):
    X, R = stream
    G = np.clip(0.2 + 0.6 * R + 0.1 * np.sin(np.arange(R.size)).reshape(R.shape), 0, 1)
    for engine in ("fast", "reference"):
        res = ca.simulate(X[:150], G[:150], [0.5, 0.5], "logistic-greedy", runs=1,
                          engine=engine)
        assert 0 < res.error < 1
    best = ca.hindsight_optimum(G, [0.5, 0.5])
    assert best.reward == pytest.approx(G[np.arange(len(G)), best.assignment].mean())
    res = ca.simulate(X, G, [0.5, 0.5], "tree-greedy", runs=2)
    assert res.error >= best.error - 0.02   # the floor bounds the online policy (up to overshoot)
    df = ca.sweep({"g": (X, G)}, ["marginal"], [[0.5, 0.5]], tmp_path, runs=2,
                  backend="sequential")
    direct = ca.simulate(X, G, [0.5, 0.5], "marginal", runs=2)
    assert np.allclose(np.sort(df["error"].to_numpy()), np.sort(direct.errors), rtol=0,
                       atol=0)
