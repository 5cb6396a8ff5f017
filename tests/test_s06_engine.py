"""Tests of the simulation engine of section 6: the reward models and the tree prior
inside the two engines, and simulate() on both engines (the models alone are tested
in tests/test_s05_reward_models.py, the queues in tests/test_s04_queues.py)."""

import math

import numpy as np
import pytest

import capassign as ca

ONLINE = ("random", "marginal", "logistic-greedy", "logistic-ts", "tree-greedy", "tree-ts")


@pytest.fixture(scope="module")
def small_stream():
    X, R, _ = ca.synthetic_stream(400, 4, seed=11)
    return X, R


# --- the reward models inside the engines --------------------------------------


@pytest.mark.parametrize("gamma", [0.25, 4.0])
def test_engines_agree_on_logistic_greedy_with_another_prior(small_stream, gamma):
    # Sigma_1 = I / gamma (App. E.1) on both engines: logistic greedy is
    # deterministic, so they must take the same decisions (gamma = 1, the
    # default, cannot tell I / gamma from I * gamma)
    X, R = small_stream
    s = ca.ModelSettings(gamma=gamma)
    f = ca.simulate(X, R, [0.4, 0.6], "logistic-greedy", runs=3, seed=2, settings=s,
                    return_traces=True)
    r = ca.simulate(X, R, [0.4, 0.6], "logistic-greedy", runs=3, seed=2, settings=s,
                    engine="reference", return_traces=True)
    assert np.mean(f.assignments == r.assignments) >= 0.99
    default = ca.simulate(X, R, [0.4, 0.6], "logistic-greedy", runs=3, seed=2,
                          return_traces=True)
    assert np.mean(default.assignments != r.assignments) > 0.02   # the prior matters here


@pytest.mark.parametrize("engine", ca.ENGINES)
def test_tree_prior_and_cadence_in_engine(engine):
    # agent 0 always wrong, agent 1 always right, no queue penalty: greedy trees
    # tie at the prior 0.5 and pick agent 0 until its 20th reward triggers the
    # first fit (prediction 0); from then on agent 1 wins every task.
    T = 60
    X = np.random.default_rng(0).standard_normal((T, 2))
    R = np.zeros((T, 2), dtype=np.uint8)
    R[:, 1] = 1
    res = ca.simulate(X, R, [0.5, 0.5], "tree-greedy", eta=0.0, runs=2, seed=3,
                      engine=engine, return_traces=True)
    expected = np.r_[np.zeros(20), np.ones(T - 20)]
    for k in range(2):
        np.testing.assert_array_equal(res.assignments[k], expected)
    # Thompson: uniform priors until one agent has 20 rewards, then agent 1 always
    res = ca.simulate(X, R, [0.5, 0.5], "tree-ts", eta=0.0, runs=4, seed=3,
                      engine=engine, return_traces=True)
    for a_k in res.assignments:
        first_fit = min(np.flatnonzero(a_k == 0)[19] if (a_k == 0).sum() >= 20 else T,
                        np.flatnonzero(a_k == 1)[19])
        assert set(a_k[:first_fit]) == {0, 1}
        assert (a_k[first_fit + 1:] == 1).all()


# --- simulate(): behaviour of both engines ---------------------------------------


@pytest.mark.parametrize("policy", ONLINE)
def test_capacity_adherence(policy):
    X, R, _ = ca.synthetic_stream(4000, 3, seed=2)
    eta = 0.5
    for T in (1000, 4000):
        for caps in ([0.2, 0.8], [0.8, 0.2]):
            res = ca.simulate(X[:T], R[:T], caps, policy, eta=eta, runs=6, seed=1,
                              return_traces=True)
            if policy == "random":
                # binomial shares: within 5 standard deviations
                sd = math.sqrt(0.16 / T)
                assert np.abs(res.assigned - caps).max() < 5 * sd
                continue
            N = np.cumsum(res.assignments[..., None] == np.arange(2), axis=1)
            dev = np.abs(N - np.array(caps) * np.arange(1, T + 1)[None, :, None]).max()
            # the running deviation N_a(t) - alpha_a t stays O(1/eta), not O(T)
            assert dev <= 1 / eta + 2
            assert np.abs(res.assigned - caps).max() <= (1 / eta + 2) / T


def test_same_seed_same_numbers_and_thread_independence(small_stream):
    import numba

    X, R = small_stream
    for policy in ONLINE + ("offline-tree",):
        a = ca.simulate(X, R, [0.3, 0.7], policy, runs=6, seed=4, return_traces=True)
        b = ca.simulate(X, R, [0.3, 0.7], policy, runs=6, seed=4, return_traces=True)
        np.testing.assert_array_equal(a.errors, b.errors)
        np.testing.assert_array_equal(a.assignments, b.assignments)
        old = numba.get_num_threads()
        try:
            numba.set_num_threads(1)
            c = ca.simulate(X, R, [0.3, 0.7], policy, runs=6, seed=4, return_traces=True)
        finally:
            numba.set_num_threads(old)
        np.testing.assert_array_equal(a.assignments, c.assignments)
        other = ca.simulate(X, R, [0.3, 0.7], policy, runs=6, seed=5, return_traces=True)
        assert not np.array_equal(a.orders, other.orders)


def test_reference_is_deterministic(small_stream):
    X, R = small_stream
    for policy in ("random", "logistic-ts", "tree-ts"):
        a = ca.simulate(X[:120], R[:120], [0.5, 0.5], policy, runs=2, seed=9,
                        engine="reference", return_traces=True)
        b = ca.simulate(X[:120], R[:120], [0.5, 0.5], policy, runs=2, seed=9,
                        engine="reference", return_traces=True)
        np.testing.assert_array_equal(a.assignments, b.assignments)


@pytest.mark.parametrize("eta", [0.5, ca.DecayingEta(eta0=0.5, t0=10)])
def test_engines_share_permutations_and_deterministic_policies_agree(small_stream, eta):
    X, R = small_stream
    for policy in ("marginal", "logistic-greedy", "offline-logistic"):
        f = ca.simulate(X, R, [0.4, 0.6], policy, runs=5, seed=2, return_traces=True, eta=eta)
        r = ca.simulate(X, R, [0.4, 0.6], policy, runs=5, seed=2, engine="reference",
                        return_traces=True, eta=eta)
        np.testing.assert_array_equal(f.orders, r.orders)
        agree = np.mean(f.assignments == r.assignments)
        assert agree >= (1.0 if policy == "marginal" else 0.99)
        if policy != "offline-logistic":
            np.testing.assert_allclose(f.queues, r.queues, atol=1e-9)


def test_queue_traces_follow_assignments(small_stream):
    X, R = small_stream
    res = ca.simulate(X, R, [0.25, 0.75], "logistic-ts", runs=3, seed=0, return_traces=True)
    assert res.queues.shape == (3, 400, 2) and res.assignments.shape == (3, 400)
    for k in range(3):
        q = ca.VirtualQueues([0.25, 0.75])
        for t in range(400):
            np.testing.assert_allclose(res.queues[k, t], q.Q, atol=1e-9)
            q.update(res.assignments[k, t])
        # errors are recomputed from the traces
        rewards = R[res.orders[k], res.assignments[k]]
        assert res.errors[k] == pytest.approx(1 - rewards.mean())
    assert ca.simulate(X, R, [0.25, 0.75], "random", runs=2).queues is None


def test_result_records_inputs(small_stream):
    X, R = small_stream
    res = ca.simulate(X, R, [0.2, 0.8], "tree-ts", eta=0.3, runs=3, seed=7)
    assert (res.policy, res.capacities, res.eta, res.runs, res.seed, res.engine) == \
        ("tree-ts", (0.2, 0.8), 0.3, 3, 7, "fast")
    assert res.errors.shape == (3,) and res.assigned.shape == (3, 2)
    np.testing.assert_allclose(res.assigned.sum(axis=1), 1.0)
    assert res.error == pytest.approx(res.errors.mean())
    assert res.std == pytest.approx(res.errors.std(ddof=1))
    assert "tree-ts" in repr(res)


@pytest.mark.parametrize("caps", [[0.2, 0.3, 0.5], [0.1, 0.2, 0.3, 0.4]])
def test_multi_agent(caps):
    A = len(caps)
    X, R, mu = ca.synthetic_stream(3000, 4, A, seed=3)
    best_single = 1 - R.mean(axis=0).max()
    for policy in ONLINE:
        # the paper's constant step, whose queues bound the count deviation by A / eta + 2
        res = ca.simulate(X, R, caps, policy, eta=ca.PAPER_ETA, runs=4, seed=1)
        assert res.assigned.shape == (4, A)
        tol = 0.03 if policy == "random" else (A / 0.5 + 2) / 3000
        assert np.abs(res.assigned - caps).max() <= tol
        if policy in ca.CONTEXTUAL_POLICIES:
            # context helps: better than the random baseline at these capacities
            assert res.error < 1 - np.dot(R.mean(axis=0), caps) - 0.02
    off = ca.simulate(X, R, caps, "offline-tree", runs=2, seed=1)
    assert off.error < best_single
    ref = ca.simulate(X[:300], R[:300], caps, "logistic-ts", runs=2, seed=1, engine="reference")
    assert ref.assigned.shape == (2, A)


@pytest.mark.parametrize("engine", ca.ENGINES)
def test_free_agent(engine):
    # agents 0 and 1 constrained, agent 2 free and always right
    X, R, _ = ca.synthetic_stream(600 if engine == "reference" else 3000, 3, 3, seed=4)
    R = R.copy()
    R[:, 2] = 1
    T = len(R)
    for policy in ("marginal", "logistic-greedy", "tree-greedy", "tree-ts"):
        res = ca.simulate(X, R, [0.5, 0.5, None], policy, runs=2, seed=0, engine=engine,
                          return_traces=True)
        assert res.capacities == (0.5, 0.5, None)
        assert (res.queues[:, :, 2] == 0).all()
        # a free agent that never errs ends up with most of the work
        assert res.assigned[:, 2].min() > 0.75
        # the constrained agents never run ahead of their shares
        N = np.cumsum(res.assignments[..., None] == np.arange(3), axis=1)[:, :, :2]
        assert (N - 0.5 * np.arange(1, T + 1)[None, :, None]).max() <= 1 / 0.5 + 2
    rnd = ca.simulate(X, R, [0.5, 0.5, None], "random", runs=2, seed=0, engine=engine)
    assert (rnd.assigned[:, 2] == 0).all()


def test_offline_benchmark_uses_all_rewards():
    X, R, mu = ca.synthetic_stream(4000, 3, seed=8)
    for policy in ("offline-logistic", "offline-tree"):
        res = ca.simulate(X, R, [0.5, 0.5], policy, runs=3, seed=0)
        # beats both agents and the random baseline, with no capacity control
        assert res.error < 1 - R.mean(axis=0).max() - 0.05
        np.testing.assert_allclose(res.assigned.sum(axis=1), 1.0)
    lo = ca.simulate(X, R, [0.5, 0.5], "offline-logistic", runs=3, seed=0)
    assert lo.std == 0.0  # no randomness in the batch MAP fit
    # the batch MAP is the minimiser of the penalised log-likelihood
    Z = np.column_stack([np.ones(len(X)), X])
    y = R[:, 0].astype(float)
    th = ca._logistic_map(Z, y, 1.0)
    p = 1 / (1 + np.exp(-Z @ th))
    np.testing.assert_allclose(Z.T @ (p - y) + th, 0.0, atol=1e-8)


# --- statistical equivalence of the two engines ----------------------------------


@pytest.mark.parametrize("policy", ONLINE + ("offline-tree",))
def test_fast_engine_matches_reference(policy):
    X, R, _ = ca.synthetic_stream(300, 3, seed=21)
    runs = 40
    caps_list = ([0.2, 0.8], [0.5, 0.5], [0.8, 0.2]) if not policy.startswith("offline") else ([0.5, 0.5],)
    for caps in caps_list:
        f = ca.simulate(X, R, caps, policy, runs=runs, seed=100)
        r = ca.simulate(X, R, caps, policy, runs=runs, seed=100, engine="reference")
        se = math.hypot(f.stderr, r.stderr)
        assert abs(f.error - r.error) <= 3 * se, (policy, caps, f.error, r.error, se)
        np.testing.assert_allclose(f.assigned.mean(axis=0), r.assigned.mean(axis=0), atol=0.02)


# --- bad input ------------------------------------------------------------------


@pytest.fixture
def no_work(monkeypatch):
    """Make any work after validation fail loudly."""
    def boom(*a, **k):
        raise AssertionError("work started before validation finished")
    monkeypatch.setattr(ca, "_stream_orders", boom)


@pytest.mark.parametrize("kwargs, word", [
    (dict(capacities=[-0.2, 1.2]), "capacities"),
    (dict(capacities=[float("nan"), 1.0]), "capacities"),
    (dict(capacities=[0.5, 0.5, 0.0]), "capacities"),
    (dict(capacities=[1.0]), "capacities"),
    (dict(capacities=[0.5, 0.4]), "capacities"),
    (dict(capacities=[0.7, 0.7, None]), "capacities"),
    (dict(R="outside"), "R"),
    (dict(R="nan"), "R"),
    (dict(X="nan"), "X"),
    (dict(X="inf"), "X"),
    (dict(X="short"), "X"),
    (dict(X="no-features"), "X"),
    (dict(policy="ucb"), "policy"),
    (dict(engine="gpu"), "engine"),
    (dict(eta=-0.1), "eta"),
    (dict(runs=0), "runs"),
    (dict(seed=-1), "seed"),
])
def test_bad_input_raises_before_work(no_work, kwargs, word):
    X, R, _ = ca.synthetic_stream(50, 2, seed=0)
    X = X.copy()
    R = R.astype(float)
    args = dict(X=X, R=R, capacities=[0.5, 0.5], policy="tree-ts", engine="fast",
                eta=0.5, runs=3, seed=0)
    special = {"outside": lambda: np.where(R > 0, 2.0, 0.0), "nan": None,
               "inf": None, "short": lambda: X[:-1]}
    args.update(kwargs)
    if kwargs.get("R") == "outside":
        args["R"] = special["outside"]()
    elif kwargs.get("R") == "nan":
        args["R"] = R.copy(); args["R"][3, 1] = np.nan
    if kwargs.get("X") == "nan":
        args["X"] = X.copy(); args["X"][0, 0] = np.nan
    elif kwargs.get("X") == "inf":
        args["X"] = X.copy(); args["X"][1, 1] = np.inf
    elif kwargs.get("X") == "short":
        args["X"] = special["short"]()
    elif kwargs.get("X") == "no-features":
        args["X"] = X[:, :0]
    with pytest.raises(ValueError, match=word):
        ca.simulate(args.pop("X"), args.pop("R"), args.pop("capacities"), args.pop("policy"),
                    **args)


def test_bad_types_raise_type_error():
    X, R, _ = ca.synthetic_stream(50, 2, seed=0)
    with pytest.raises(TypeError, match="capacities"):
        ca.simulate(X, R, "0.5,0.5", "random")
    with pytest.raises(TypeError, match="settings"):
        ca.simulate(X, R, [0.5, 0.5], "random", settings={"kappa": 1})
    with pytest.raises(ValueError, match="kappa"):
        ca.ModelSettings(kappa=0.0)


def test_synthetic_stream_is_seeded():
    X1, R1, mu1 = ca.synthetic_stream(100, 3, 3, seed=1)
    X2, R2, mu2 = ca.synthetic_stream(100, 3, 3, seed=1)
    assert np.array_equal(X1, X2) and np.array_equal(R1, R2)
    assert R1.dtype == np.uint8 and set(np.unique(R1)) <= {0, 1}
    assert ((mu1 > 0) & (mu1 < 1)).all()
    with pytest.raises(ValueError, match="n_agents"):
        ca.synthetic_stream(100, 3, 1)


def test_stream_orders_of_a_block_are_those_of_all_runs():
    # run k's permutation and policy seed come from child k of SeedSequence(seed),
    # whatever the number of runs: a block (start > 0) is built without the
    # children before it, and equals the same runs taken out of spawn(runs)
    orders, seeds = ca._stream_orders(5, 9, 30, start=6)
    children = np.random.SeedSequence(5).spawn(9)[6:]
    assert orders.shape == (3, 30) and len(seeds) == 3
    for k, child in enumerate(children):
        perm_ss, policy_ss = child.spawn(2)
        np.testing.assert_array_equal(orders[k], np.random.default_rng(perm_ss).permutation(30))
        np.testing.assert_array_equal(seeds[k].generate_state(4), policy_ss.generate_state(4))
    whole, _ = ca._stream_orders(5, 9, 30)
    np.testing.assert_array_equal(whole[6:], orders)
