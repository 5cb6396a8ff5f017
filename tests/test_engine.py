"""Tests of the online engine: reward models, queues, simulate() on both engines."""

import math

import numpy as np
import pytest

import capassign as ca

ONLINE = ("random", "marginal", "logistic-greedy", "logistic-ts", "tree-greedy", "tree-ts")


@pytest.fixture(scope="module")
def small_stream():
    X, R, _ = ca.synthetic_stream(400, 4, seed=11)
    return X, R


# --- update rules against hand-computed values ---------------------------------


def test_sherman_morrison_step_by_hand():
    # z = [1, 2], theta = 0 -> p = 1/2, w = 1/4, z^T Sigma z = 5, 1 + w*5 = 9/4.
    # Sigma' = I - (1/4) z z^T / (9/4) = I - z z^T / 9 ; theta' = Sigma' z (1 - 1/2).
    sigma_new = np.array([[8 / 9, -2 / 9], [-2 / 9, 5 / 9]])
    theta_new = np.array([2 / 9, 4 / 9])
    m = ca.LaplaceLogistic(1).update([2.0], 1)
    np.testing.assert_allclose(m.Sigma, sigma_new, rtol=0, atol=1e-15)
    np.testing.assert_allclose(m.theta, theta_new, rtol=0, atol=1e-15)
    assert m.predict([2.0]) == pytest.approx(1 / (1 + math.exp(-(2 / 9 + 8 / 9))))
    # the compiled step of the fast engine gives the same numbers
    theta, Sigma = np.zeros(2), np.eye(2)
    ca._laplace_update_nb(theta, Sigma, np.array([1.0, 2.0]), 1.0, 1e-4, 0.25, np.empty(2))
    np.testing.assert_allclose(Sigma, sigma_new, rtol=0, atol=1e-15)
    np.testing.assert_allclose(theta, theta_new, rtol=0, atol=1e-15)
    assert np.array_equal(Sigma, Sigma.T)


def test_the_factored_laplace_step_is_the_same_downdate():
    # the square-root form taken when rounding would dominate x' Sigma x gives
    # the Sherman-Morrison numbers of the hand step above where both are exact
    theta, Sigma, Sx = np.zeros(2), np.eye(2), np.empty(2)
    ca._laplace_factored_step_nb(theta, Sigma, np.array([1.0, 2.0]), 1.0, 0.5, 0.25, Sx)
    np.testing.assert_allclose(Sigma, [[8 / 9, -2 / 9], [-2 / 9, 5 / 9]], rtol=0, atol=1e-15)
    np.testing.assert_allclose(theta, [2 / 9, 4 / 9], rtol=0, atol=1e-15)
    rng = np.random.default_rng(3)
    B = rng.normal(size=(5, 5))
    S0, t0, x = B @ B.T / 5 + np.eye(5), rng.normal(size=5), rng.normal(size=5)
    S1, t1 = S0.copy(), t0.copy()
    ca._laplace_factored_step_nb(t1, S1, x, 0.0, 0.3, 0.21, np.empty(5))
    u = S0 @ x
    np.testing.assert_allclose(S1, S0 - 0.21 * np.outer(u, u) / (1 + 0.21 * x @ u), atol=1e-13)
    np.testing.assert_allclose(t1, t0 + u * (0.0 - 0.3) / (1 + 0.21 * x @ u), atol=1e-13)


def test_laplace_steps_on_huge_contexts_keep_sigma_positive_definite():
    # contexts of 1e9 against a prior variance of 1: in exact arithmetic the
    # eigenvalues stay in [0, 1]; the plain downdate cancelled to 2.46 (seed 7)
    for seed in range(20):
        rng = np.random.default_rng(seed)
        theta, Sigma, Sx = np.zeros(4), np.eye(4), np.empty(4)
        for _ in range(300):
            x = np.r_[1.0, rng.normal(0, 1e9, 3)]
            ca._laplace_update_nb(theta, Sigma, x, float(rng.random() < 0.5), 1e-4, 0.25, Sx)
        eig = np.linalg.eigvalsh(Sigma)
        assert np.array_equal(Sigma, Sigma.T) and np.all(np.isfinite(theta))
        assert -1e-12 * eig[-1] <= eig[0] and eig[-1] <= 1.0 + 1e-9, (seed, eig)


def test_laplace_weight_is_clipped():
    # theta^T z = 20 -> p (1 - p) ~ 2e-9, clipped up to w = 1e-4.
    m = ca.LaplaceLogistic(1)
    m.theta = np.array([0.0, 10.0])
    m.update([2.0], 0)
    w = 1e-4
    expected = np.eye(2) - w * np.outer([1, 2], [1, 2]) / (1 + 5 * w)
    np.testing.assert_allclose(m.Sigma, expected, rtol=1e-12)


def test_thompson_draws_match_posterior_scale():
    # sigma^-1 of the draws is N(theta^T z, kappa^2 z^T Sigma z) = N(0, 0.25 * 5)
    m = ca.LaplaceLogistic(1)
    rng = np.random.default_rng(0)
    p = np.array([m.sample([2.0], rng) for _ in range(4000)])
    logits = np.log(p / (1 - p))
    assert abs(logits.mean()) < 0.06
    assert logits.std() == pytest.approx(math.sqrt(0.25 * 5), rel=0.05)


def test_compiled_thompson_draws_match_posterior_scale():
    # the fast engine's Laplace-logistic Thompson score: sigma^-1 of it is
    # theta^T z + kappa sqrt(z^T Sigma z) g with g standard normal; the normals
    # come in Box-Muller pairs, the second kept as a spare for the next draw,
    # so the odd and the even draws must each have the posterior's spread
    theta, Sigma = np.array([0.3, -0.2]), np.array([[1.0, 0.4], [0.4, 2.0]])
    z, kappa = np.array([1.0, 2.0]), 0.5
    state = np.random.SeedSequence(7).generate_state(4, np.uint64)   # xoshiro256** state
    rng = state.copy()
    has_spare, spare, logits = False, 0.0, []
    for _ in range(20_000):
        p, has_spare, spare = ca._logistic_mu_nb(theta, Sigma, z, True, kappa, rng,
                                                 has_spare, spare)
        logits.append(math.log(p / (1 - p)))
    scale = kappa * math.sqrt(z @ Sigma @ z)
    g = (np.array(logits) - theta @ z) / scale
    # the first two draws are the two halves of the first Box-Muller pair
    np.testing.assert_allclose(g[:2], ca._normal_pair_nb(state.copy()), rtol=1e-9, atol=1e-12)
    for part in (g[0::2], g[1::2]):        # each 10,000 draws: sd of the sd about 0.007
        assert abs(part.mean()) < 0.04
        assert part.std() == pytest.approx(1.0, abs=0.03)
    assert abs(np.corrcoef(g[0::2], g[1::2])[0, 1]) < 0.04   # the pair's halves independent


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


def test_every_row_can_enter_a_reference_bootstrap_resample(monkeypatch):
    # each tree of the reference ensemble is grown on n draws with replacement
    # from all n stored rows: over 20 trees of 5 rows, a row is missed by all
    # of them with probability (4/5)^100 ~ 2e-10
    import sklearn.tree

    seen = []

    class Spy(sklearn.tree.DecisionTreeRegressor):
        def fit(self, X, y, *args, **kwargs):
            seen.append(np.asarray(X)[:, 0].copy())
            return super().fit(X, y, *args, **kwargs)

    monkeypatch.setattr(sklearn.tree, "DecisionTreeRegressor", Spy)
    trees = ca.BootstrapTrees(ca.ModelSettings(min_samples_leaf=1))
    trees.fit(np.arange(5.0)[:, None], np.array([0.0, 1.0, 0.0, 1.0, 1.0]),
              np.random.default_rng(0))
    assert len(seen) == 20 and all(len(x) == 5 for x in seen)
    assert set(np.concatenate(seen).tolist()) == {0.0, 1.0, 2.0, 3.0, 4.0}
    counts = np.bincount(np.concatenate(seen).astype(int), minlength=5)
    assert counts.min() >= 8       # 100 draws, 20 expected per row


def test_queue_step_by_hand():
    q = ca.VirtualQueues([0.3, 0.7])
    q.update(0)
    np.testing.assert_allclose(q.Q, [0.7, 0.0])
    q.update(0)
    np.testing.assert_allclose(q.Q, [1.4, 0.0])
    q.update(1)
    np.testing.assert_allclose(q.Q, [1.1, 0.3])
    Q = np.zeros(3)
    for a in (0, 0, 1, 2, 2):
        ca._queue_update_nb(Q, np.array([0.3, 0.7, 0.0]), np.array([True, True, False]),
                            np.eye(3, dtype=np.int64)[a], 1)
    # Q_0: 0.7, 1.4, 1.1, 0.8, 0.5 ; Q_1: 0, 0, 0.3, 0 (0.3 - 0.7 floors at 0), 0
    np.testing.assert_allclose(Q, [0.5, 0.0, 0.0])
    free = ca.VirtualQueues([0.4, 0.6, None])
    for a in (2, 2, 2, 0):
        free.update(a)
    np.testing.assert_allclose(free.Q, [0.6, 0.0, 0.0])


def test_select_agent_penalises_queues_and_breaks_ties_low():
    assert ca.select_agent([0.9, 0.6], [0.0, 0.0], 0.5) == 0
    assert ca.select_agent([0.9, 0.6], [1.0, 0.0], 0.5) == 1   # 0.4 < 0.6
    assert ca.select_agent([0.5, 0.5, 0.5], [0.0, 0.0, 0.0], 0.5) == 0
    assert ca._select_nb(np.array([0.9, 0.6]), np.array([1.0, 0.0]), 0.5) == 1


def test_tree_model_prior_and_refit_cadence():
    rng = np.random.default_rng(1)
    m = ca.BootstrapTrees()
    x = np.zeros(2)
    draws = [m.sample(x, rng) for _ in range(2000)]
    assert m.predict(x) == 0.5
    assert 0 <= min(draws) and max(draws) < 1
    assert np.mean(draws) == pytest.approx(0.5, abs=0.03)
    assert np.mean(np.array(draws) < 0.25) == pytest.approx(0.25, abs=0.03)
    fits = []
    for t in range(60):
        m.update(rng.standard_normal(2), t % 2, rng)
        fits.append(m.n_fits)
    # refit exactly after the 20th, 40th and 60th observation
    assert fits[18] == 0 and fits[19] == 1 and fits[38] == 1 and fits[39] == 2 and fits[59] == 3
    assert len(m.trees) == 20
    assert 0.0 <= m.predict(x) <= 1.0


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


def test_compiled_forest_matches_sklearn_on_its_bootstraps():
    # Features with few distinct values bin exactly, so every compiled tree must
    # equal scikit-learn's tree grown on the same bootstrap resample.
    from sklearn.tree import DecisionTreeRegressor

    rng = np.random.default_rng(5)
    T, d, B, depth = 3000, 3, 20, 3
    X = rng.integers(0, 12, size=(T, d)).astype(float)
    p = 0.2 + 0.6 * (X[:, 0] > 5) * (X[:, 1] < 4) + 0.15 * (X[:, 2] > 8)
    R = (rng.random((T, 1)) < p[:, None]).astype(np.uint8)
    Xb, n_bins, _ = ca._bin_contexts(X, 64)
    mb = int(n_bins.max())
    W = ca._bootstrap_weights_nb(B, T, np.array([3, 1, 4, 1], np.uint64))
    feat, thr, val = ca._fit_forest_nb(Xb, np.ascontiguousarray(R[:, 0]), W, n_bins, mb, depth, 10,
                                       ca._reward_sums(False))
    cnt = W.T
    assert (cnt.sum(axis=0) == T).all()  # each tree saw a resample of size T
    assert len({tuple(c) for c in cnt.T}) == B  # and the resamples differ
    for b in range(B):
        rows = np.repeat(np.arange(T), cnt[:, b])
        sk = DecisionTreeRegressor(max_depth=depth, min_samples_leaf=10).fit(X[rows], R[rows, 0])
        ours = np.array([ca._tree_predict_nb(feat, thr, val, b, Xb[i]) for i in range(T)])
        np.testing.assert_allclose(ours, sk.predict(X), atol=1e-12)


def _online_forest_check(X, R, bins, n_rows, seed, B=20, depth=3, min_leaf=10, every=20):
    """Feed one agent's rows to the online forest; after every refit compare
    each tree with the from-scratch fit on the same Poisson weights."""
    T, d = X.shape
    Xb, n_bins, _ = ca._bin_contexts(X, bins)
    mb = int(n_bins.max())
    n_nodes, n_int = 2 ** (depth + 1) - 1, 2 ** depth - 1
    y = np.ascontiguousarray(R[:, 0])
    rng = np.random.default_rng(seed).integers(1, 2**63, size=4).astype(np.uint64)
    W = np.zeros((B, T), np.uint8)
    HC = np.zeros((n_int, n_bins.sum(), 2 * B), np.int32)
    nc, ns = np.zeros((n_nodes, B), np.int64), np.zeros((n_nodes, B), np.int64)
    feat, thr = np.full((B, n_nodes), -1, np.int32), np.zeros((B, n_nodes), np.int32)
    val = np.zeros((B, n_nodes))
    head, nxt = np.full((d, mb), -1, np.int32), np.zeros((d, T), np.int32)
    forest = ca._Forest(W, HC, nc, ns, feat, thr, val, head, nxt)
    stats = np.zeros(3 * depth, np.int64)
    refit = ca._new_refit_nb(B, depth, stats)
    checked = 0
    for k in range(n_rows):
        ca._online_observe_nb(Xb[k], y[k], k, depth, n_bins, rng, forest)
        if (k + 1) % every:
            continue
        n = k + 1
        ca._online_refit_nb(Xb, y, n, n_bins, depth, min_leaf, forest, refit)
        sfeat, sthr, sval = ca._fit_forest_nb(Xb, y, np.ascontiguousarray(W[:, :n], np.int32),
                                              n_bins, mb, depth, min_leaf,
                                              ca._reward_sums(False))
        np.testing.assert_array_equal(feat, sfeat, err_msg=f"features after {n} rows")
        np.testing.assert_array_equal(thr, sthr, err_msg=f"thresholds after {n} rows")
        np.testing.assert_array_equal(val, sval, err_msg=f"leaf values after {n} rows")
        checked += 1
    return W[:, :n_rows], stats, checked


@pytest.mark.parametrize("bins, n_rows", [(64, 1500), (8, 600)])
def test_online_forest_equals_refit_from_scratch(bins, n_rows):
    # Every tree of the incremental online forest must be, at every refit,
    # identical (features, thresholds, leaf values) to the tree grown from
    # scratch on the same weighted rows.
    X, R, _ = ca.synthetic_stream(n_rows, 5, seed=13)
    W, stats, checked = _online_forest_check(X, R, bins, n_rows, seed=bins)
    assert checked == n_rows // 20
    # the run went through every path: rebuilt subtrees at levels 1 and 2,
    # moved splits at every level, and subtrees updated by threshold shifts
    assert stats[1] > 0 and stats[2] > 0
    assert (stats[3:6] > 0).all() and stats[6] > 0
    # Poisson(1) weights: mean 1, variance 1, P(0) = 1/e
    assert W.mean() == pytest.approx(1.0, abs=0.02)
    assert W.var() == pytest.approx(1.0, abs=0.04)
    assert (W == 0).mean() == pytest.approx(math.exp(-1), abs=0.01)


def test_xoshiro_matches_reference_sequence():
    M = (1 << 64) - 1

    def rotl(x, k):
        return ((x << k) | (x >> (64 - k))) & M

    def nxt(s):
        r = rotl((s[1] * 5) & M, 7) * 9 & M
        t = (s[1] << 17) & M
        s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t
        s[3] = rotl(s[3], 45)
        return r

    state = np.array([0x9E3779B97F4A7C15, 7, 2**63 + 5, 12345], dtype=np.uint64)
    py = [int(v) for v in state]
    assert [int(ca._next_u64_nb(state)) for _ in range(50)] == [nxt(py) for _ in range(50)]


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
