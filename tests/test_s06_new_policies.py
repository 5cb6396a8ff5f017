"""Section 6 (and the router of section 7): the exploration policies beyond the
paper's, ``logistic-ucb`` and the epsilon-greedy mode of every learning family,
in both engines and the Router."""

import math

import numpy as np
import pytest

import capassign as ca
from test_s07_router import test_router_takes_the_decisions_of_a_simulated_run as \
    router_matches_simulation

EGREEDY = ("marginal-egreedy", "logistic-egreedy", "tree-egreedy")


@pytest.fixture(scope="module")
def stream():
    X, R, _ = ca.synthetic_stream(300, 3, seed=21)
    return X, R


def test_ucb_estimate_is_the_mean_plus_c_standard_deviations():
    rng = np.random.default_rng(0)
    model = ca.LaplaceLogistic(2)
    for _ in range(30):
        model.update(rng.normal(size=2), float(rng.random() < 0.7))
    x = np.array([0.3, -1.2])
    z = np.array([1.0, *x])
    sd = math.sqrt(z @ model.Sigma @ z)
    logit = lambda p: math.log(p / (1 - p))
    assert model.upper(x, 0.0) == model.predict(x)
    assert logit(model.upper(x, 2.0)) - logit(model.predict(x)) == pytest.approx(2 * sd, rel=1e-9)
    # the compiled estimate of mode UCB is the reference's, with kappa = c
    est, has_spare, _ = ca._logistic_mu_nb(model.theta, model.Sigma, z, ca._UCB, 2.0,
                                           ca._rng_states([np.random.SeedSequence(0)])[0],
                                           False, 0.0)
    assert est == pytest.approx(model.upper(x, 2.0), rel=1e-12) and not has_spare


@pytest.mark.parametrize("eta", [0.5, ca.DecayingEta(eta0=0.5, t0=10)])
def test_logistic_ucb_is_deterministic_and_the_engines_agree(stream, eta):
    X, R = stream
    for bs in (None, 7):
        f = ca.simulate(X, R, [0.4, 0.6], "logistic-ucb", runs=4, seed=2, eta=eta,
                        batch_size=bs, return_traces=True)
        r = ca.simulate(X, R, [0.4, 0.6], "logistic-ucb", runs=4, seed=2, eta=eta,
                        batch_size=bs, engine="reference", return_traces=True)
        assert np.mean(f.assignments == r.assignments) >= 0.99
        np.testing.assert_allclose(f.queues, r.queues, atol=1e-9)
        # and it differs from the greedy rule (the bound is not the estimate)
        g = ca.simulate(X, R, [0.4, 0.6], "logistic-greedy", runs=4, seed=2, eta=eta,
                        batch_size=bs, return_traces=True)
        assert not np.array_equal(f.assignments, g.assignments)


@pytest.mark.parametrize("policy", EGREEDY)
def test_egreedy_fast_engine_matches_reference(policy):
    X, R, _ = ca.synthetic_stream(300, 3, seed=21)
    runs = 40
    for caps in ([0.2, 0.8], [0.5, 0.5], [0.8, 0.2]):
        f = ca.simulate(X, R, caps, policy, runs=runs, seed=100)
        r = ca.simulate(X, R, caps, policy, runs=runs, seed=100, engine="reference")
        se = math.hypot(f.stderr, r.stderr)
        assert abs(f.error - r.error) <= 3 * se, (policy, caps, f.error, r.error, se)
        np.testing.assert_allclose(f.assigned.mean(axis=0), r.assigned.mean(axis=0), atol=0.02)


@pytest.mark.parametrize("engine", ca.ENGINES)
def test_egreedy_with_epsilon_zero_is_greedy(stream, engine):
    # marginal and logistic draw nothing else, so epsilon = 0 decides exactly
    # as the greedy rule (the exploration's uniform is drawn and never < 0)
    X, R = stream
    zero = ca.ModelSettings(epsilon=0.0)
    for egreedy, greedy in (("marginal-egreedy", "marginal"),
                            ("logistic-egreedy", "logistic-greedy")):
        for bs in (None, 5):
            a = ca.simulate(X, R, [0.3, 0.7], egreedy, runs=3, seed=4, settings=zero,
                            engine=engine, batch_size=bs, return_traces=True)
            b = ca.simulate(X, R, [0.3, 0.7], greedy, runs=3, seed=4, engine=engine,
                            batch_size=bs, return_traces=True)
            np.testing.assert_array_equal(a.assignments, b.assignments)


def test_egreedy_with_epsilon_one_ignores_the_estimates_but_keeps_the_capacities(stream):
    X, R = stream
    one = ca.ModelSettings(epsilon=1.0)
    res = {p: ca.simulate(X, R, [0.7, 0.3], p, runs=5, seed=8, settings=one,
                          return_traces=True) for p in ("marginal-egreedy", "logistic-egreedy")}
    # every estimate is a uniform draw: the two families decide alike, draw for draw
    np.testing.assert_array_equal(res["marginal-egreedy"].assignments,
                                  res["logistic-egreedy"].assignments)
    # and Eq. 2 still charges the queues: the shares are the capacities
    np.testing.assert_allclose(res["marginal-egreedy"].assigned.mean(axis=0), [0.7, 0.3],
                               atol=0.01)


def test_exploration_moves_the_tree_policy_away_from_greedy(stream):
    X, R = stream
    g = ca.simulate(X, R, [0.5, 0.5], "tree-greedy", runs=3, seed=1, return_traces=True)
    e = ca.simulate(X, R, [0.5, 0.5], "tree-egreedy", runs=3, seed=1, return_traces=True)
    assert not np.array_equal(g.assignments, e.assignments)


@pytest.mark.parametrize("policy", ca.EXPLORATION_POLICIES)
def test_router_takes_the_decisions_of_a_simulated_run(stream, policy):
    # the router's kernels draw as the fast engine's: the check of the paper's policies
    router_matches_simulation(stream, policy)


@pytest.mark.parametrize("policy", EGREEDY)
def test_egreedy_router_explains_with_a_propensity(stream, policy):
    X, R = stream
    router = ca.Router(2, [0.5, 0.5], policy, X_reference=X, seed=3,
                       settings=ca.ModelSettings(epsilon=0.2))
    for t in range(60):
        a = router.assign(X[t])
        router.update(t, a, int(R[t, a]))
    d = router.assign(X[60], explain=True, n_draws=4000)
    # the greedy agent keeps it at least with 1 - epsilon, plus its share of the exploration
    assert d.n_draws == 4000 and 0.8 - 4 * 0.01 <= d.propensity < 1.0


def test_new_policies_are_not_in_the_papers_lists():
    assert not set(ca.EXPLORATION_POLICIES) & set(ca.POLICIES)
    with pytest.raises(ValueError, match="policy must be one of 'random'"):
        ca.simulate(np.zeros((4, 1)), np.zeros((4, 2)), [0.5, 0.5], "logistic-egreedyy")


def test_the_grid_functions_run_the_exploration_policies_like_simulate(stream, tmp_path):
    # error_vs_capacity / simulate_grid and sweep used to refuse these names
    X, R = stream
    X, R = X[:, :2], R[:, :2]
    df = ca.error_vs_capacity(X, R, ["random", "logistic-ucb", "tree-egreedy"], [0.3, 0.7],
                              runs=2, seed=4)
    for policy in ("logistic-ucb", "tree-egreedy"):
        for alpha in (0.3, 0.7):
            row = df[(df.policy == policy) & np.isclose(df.alpha1, alpha)]
            sim = ca.simulate(X, R, [alpha, 1 - alpha], policy, runs=2, seed=4)
            assert row.error.item() == sim.errors.mean()
    table = ca.sweep({"s": (X, R)}, ["marginal-egreedy"], [0.5], tmp_path / "out", runs=2)
    assert set(table.policy) == {"marginal-egreedy"} and len(table) > 0
    with pytest.raises(ValueError, match="policies"):
        ca.error_vs_capacity(X, R, ["tree-ucb"], [0.5], runs=1)
