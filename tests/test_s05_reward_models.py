"""Tests of the reward models of section 5 (the paper, App. H.1-H.3): the Laplace
logistic update and its Thompson draws, the bootstrap trees (prior, refit cadence,
the compiled forest against scikit-learn, the online forest against a refit from
scratch) and the generator their compiled kernels draw from."""

import math

import numpy as np
import pytest

import capassign as ca


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
    refit = ca._new_refit_nb(B, depth, stats, HC)
    checked = 0
    for k in range(n_rows):
        ca._online_observe_nb(Xb[k], y[k], k, n_bins, rng, forest, refit.wv, refit.live)
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


def test_poisson_draw_by_guide_table_is_the_inversion_count():
    # The guide table only shortcuts the count #{k : F_k <= u}: on every cell
    # it calls whole, that count is constant (checked at both ends), and the
    # compiled draw equals the count of all 40 comparisons on a long stream
    # of uniforms and at (and just below) every term of the CDF.
    cdf = ca._POISSON1_CDF
    left, whole = ca._POISSON1_LEFT, ca._POISSON1_WHOLE
    cells = left.shape[0]
    count = lambda u: int((np.asarray(u)[..., None] >= cdf).sum(axis=-1))
    for i in range(cells):
        lo, hi_below = i / cells, np.nextafter((i + 1) / cells, 0.0)
        assert count(lo) == left[i]
        if whole[i]:
            assert count(hi_below) == left[i], i
    assert 1 <= (~whole).sum() <= 10
    state = np.array([1, 2, 3, 4], dtype=np.uint64)
    twin = state.copy()
    for _ in range(20000):
        u = ca._uniform_nb(twin)
        assert ca._poisson1_nb(state) == count(u)
    for F in cdf[cdf < 1.0]:                   # at, and just below, every term
        for u in (F, np.nextafter(F, 0.0)):
            assert ca._poisson1_inverse_nb(u) == count(u)
