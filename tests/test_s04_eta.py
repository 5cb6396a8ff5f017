"""The queue step as a choice: a number (the paper's constant eta) or a
shrinking DecayingEta (eta_t = eta0 (1 + t/t0)^-power), everywhere eta enters."""

import json
import math

import numpy as np
import pytest

import capassign as ca

SCHEDULE = ca.DecayingEta(eta0=0.5, t0=10)


@pytest.fixture(scope="module")
def stream():
    X, R, mu = ca.synthetic_stream(600, 3, n_agents=3, seed=5)
    return X, R, mu


# --- the schedule object ---------------------------------------------------------


def test_defaults_are_the_frozen_schedule_and_the_object_is_a_value():
    step = ca.DecayingEta()
    assert (step.eta0, step.t0, step.power) == (0.25, 100.0, 0.5)
    assert step == ca.DecayingEta(0.25, 100, 0.5) and hash(step) == hash(ca.DecayingEta(0.25, 100))
    with pytest.raises(AttributeError):
        step.eta0 = 1.0
    assert ca.DecayingEta(eta0=2, t0=5).fields() == {"schedule": "decaying", "eta0": 2.0,
                                                       "t0": 5.0, "power": 0.5}


def test_the_library_default_is_the_frozen_schedule_and_the_paper_constant_is_kept(stream):
    # the defaults follow the evidence of the beyond_step chapter
    assert ca.DEFAULT_ETA == ca.DecayingEta() and ca.PAPER_ETA == 0.5
    X, R, _ = stream
    caps = (0.2, 0.3, 0.5)
    by_default = ca.simulate(X, R, caps, "logistic-greedy", runs=2, return_traces=True)
    scheduled = ca.simulate(X, R, caps, "logistic-greedy", runs=2, eta=ca.DecayingEta(),
                            return_traces=True)
    paper = ca.simulate(X, R, caps, "logistic-greedy", runs=2, eta=0.5, return_traces=True)
    assert by_default.eta == ca.DecayingEta()
    assert np.array_equal(by_default.assignments, scheduled.assignments)
    assert not np.array_equal(by_default.assignments, paper.assignments)
    assert ca.Router(3, caps, "marginal").eta == ca.DecayingEta()
    assert ca.simulate_known_mu(stream[2], R, caps, runs=1).eta == ca.DecayingEta()
    parser = ca._build_parser()
    for argv in (["simulate", "--task", "synthetic", "--policy", "random", "--capacities",
                  "0.5,0.5"], ["sweep", "--tasks", "synthetic", "--policies", "random",
                               "--alphas", "0.5", "--out", "x"]):
        assert parser.parse_args(argv).eta == ca.DecayingEta()
    # timing keeps measuring the paper's rule
    assert parser.parse_args(["bench"]).eta == ca.PAPER_ETA


@pytest.mark.parametrize("kwargs, name", [
    (dict(eta0=0), "eta0"), (dict(eta0=-1), "eta0"), (dict(eta0=math.nan), "eta0"),
    (dict(eta0=math.inf), "eta0"), (dict(t0=0), "t0"), (dict(t0=-3), "t0"),
    (dict(t0=math.nan), "t0"), (dict(power=0), "power"), (dict(power=1.5), "power"),
    (dict(power=-0.5), "power"), (dict(power=math.nan), "power")])
def test_bad_schedules_raise_one_line_errors_naming_the_argument(kwargs, name):
    with pytest.raises(ValueError) as info:
        ca.DecayingEta(**kwargs)
    msg = str(info.value)
    assert msg.startswith(name + " must be") and "\n" not in msg


@pytest.mark.parametrize("power", [0.5, 0.7, 1.0])
def test_the_step_is_eta0_over_a_power_of_elapsed_tasks(power):
    step = ca.DecayingEta(0.8, 25.0, power)
    ts = [0, 1, 7, 25, 1000, 123456]
    got = [step.at(t) for t in ts]
    assert got[0] == 0.8
    np.testing.assert_allclose(got, [0.8 * (1 + t / 25.0) ** -power for t in ts], rtol=1e-14)
    # the compiled step (engines) and the Python one (reference engine, router) agree bit for bit
    ca._numba_kernels()
    assert [ca._eta_step_nb(0.8, 25.0, power, np.int64(t)) for t in ts] == got
    # a number is the paper's constant step, returned as it is
    assert ca._eta_step_nb(0.5, 1.0, 0.0, np.int64(99)) == 0.5


def test_eta_must_be_a_number_or_a_schedule(stream):
    X, R, _ = stream
    with pytest.raises(TypeError, match="eta must be a finite number >= 0 or a DecayingEta"):
        ca.simulate(X, R, (0.2, 0.3, 0.5), "random", eta="decaying", runs=1)
    with pytest.raises(ValueError, match="eta must be a finite number >= 0"):
        ca.simulate_known_mu(R * 1.0, R, (0.2, 0.3, 0.5), eta=-1, runs=1)


# --- the engines -------------------------------------------------------------------


def _known_mu_by_hand(mu, order, caps, step):
    """Eq. 1-2 in Python with eta_t = step.at(t)."""
    queues = ca.VirtualQueues(caps)
    chosen = []
    for t, i in enumerate(order):
        a = queues.select(mu[i], step.at(t))
        queues.update(a)
        chosen.append(a)
    return chosen


@pytest.mark.parametrize("caps", [(0.2, 0.3, 0.5), (0.3, 0.5, None)])
def test_known_mu_rule_charges_eta_t_times_the_queue(stream, caps):
    _, R, mu = stream
    res = ca.simulate_known_mu(mu, R, caps, eta=SCHEDULE, runs=2, seed=3)
    for k in range(2):
        assert res.assignments[k].tolist() == _known_mu_by_hand(mu, res.orders[k], caps,
                                                                 SCHEDULE)
    assert res.eta == SCHEDULE
    # the schedule changes decisions: it is not the constant step in disguise
    const = ca.simulate_known_mu(mu, R, caps, eta=0.5, runs=2, seed=3)
    assert not np.array_equal(const.assignments, res.assignments)


@pytest.mark.parametrize("policy", ["marginal", "logistic-greedy"])
@pytest.mark.parametrize("mode", [dict(), dict(batch_size=7),
                                  dict(settings=ca.ModelSettings(discount=0.99))])
@pytest.mark.parametrize("caps", [(0.2, 0.3, 0.5), (0.3, 0.5, None)])
def test_engines_agree_decision_for_decision_with_a_schedule(stream, policy, mode, caps):
    X, R, _ = stream
    X, R = X[:250], R[:250]
    f = ca.simulate(X, R, caps, policy, eta=SCHEDULE, runs=2, seed=1, return_traces=True, **mode)
    r = ca.simulate(X, R, caps, policy, eta=SCHEDULE, runs=2, seed=1, return_traces=True,
                    engine="reference", **mode)
    np.testing.assert_array_equal(f.assignments, r.assignments)
    np.testing.assert_allclose(f.queues, r.queues, atol=1e-9)
    c = ca.simulate(X, R, caps, policy, eta=0.5, runs=2, seed=1, return_traces=True, **mode)
    # the step matters (in a batch whose counts are exact it only splits ties)
    if "batch_size" not in mode or None in caps:
        assert not np.array_equal(f.assignments, c.assignments)


def test_a_schedule_turns_off_the_early_exit_of_an_agent_without_capacity(stream):
    # With alpha_1 = 0 and a constant eta the fast engine stops scoring agent 1
    # once its penalty can never be beaten; with a shrinking step it may win again.
    X, R, _ = stream
    X, R = X[:400, :2], R[:400, :2]
    for eta in (0.5, SCHEDULE):
        f = ca.simulate(X, R, (0.0, 1.0), "logistic-greedy", eta=eta, runs=2, seed=0,
                        return_traces=True)
        r = ca.simulate(X, R, (0.0, 1.0), "logistic-greedy", eta=eta, runs=2, seed=0,
                        return_traces=True, engine="reference")
        np.testing.assert_array_equal(f.assignments, r.assignments)


def test_regret_and_price_tracking_use_eta_t(stream):
    _, R, mu = stream
    caps = (0.2, 0.3, 0.5)
    res = ca.simulate_known_mu(mu, R, caps, eta=SCHEDULE, runs=2, seed=1)
    lam = ca.optimal_assignment(mu, caps).shadow_prices
    # the known-mu rule faces its own prices eta_t Q_t: no modified regret
    assert np.all(ca.regret_curve(res, mu, lam).modified == 0)
    pt = ca.price_tracking(res, lam, reference=2)
    steps = np.array([SCHEDULE.at(t) for t in range(mu.shape[0])])
    np.testing.assert_allclose(pt.tracked[:, 0],
                               (steps * (res.queues[:, :, 0] - res.queues[:, :, 2])).mean(axis=0))


# --- the rule of the defaults and the synthetic checks ------------------------------


def test_frozen_schedule_is_near_the_constrained_optimum_and_holds_the_shares():
    # The "done when" of the schedule, known mu: T = 20,000, 5 seeds, slack and tight
    # streams: error within 0.005 of the constrained optimum, shares within 0.01 of
    # alpha from task 1,000 on, regret against the optimum sublinear (log-log slope
    # <= 0.7) where the paper's eta = 0.5 grows linearly.
    T = 20_000
    for seed in range(5):
        for name, mu, R, caps in ca._tuning_streams(T, seed):
            gap, dev = ca._known_mu_scores(mu, R, caps, ca.DecayingEta(), 1, seed, 999)
            assert gap <= 0.005 and dev <= 0.01, (seed, name, gap, dev)
            if seed == 0:
                lam = ca.optimal_assignment(mu, caps).shadow_prices
                slopes = [ca.loglog_slope(ca.regret_curve(
                    ca.simulate_known_mu(mu, R, caps, eta=eta, runs=2, seed=seed), mu, lam
                ).mean("lagrangian")) for eta in (ca.DecayingEta(), 0.5)]
                assert slopes[0] <= 0.7 and slopes[1] >= 0.9, (name, slopes)


def test_the_rule_picks_the_frozen_defaults():
    # The whole rule of DecayingEta's docstring (5 x 4 grid, 5 seeds, 4 orderings,
    # T = 20,000; about 20 s on one core) picks the frozen defaults.
    tuning = ca.tune_eta_schedule()
    assert tuning.schedule == ca.DecayingEta()
    table = tuning.table.set_index(["eta0", "t0"])
    assert table.loc[(0.25, 100.0), "chosen"] and table["chosen"].sum() == 1
    assert not table.loc[(0.25, 10.0), "feasible"]        # too small: shares drift
    assert table.loc[(0.25, 100.0), "gap"] <= 0.005


# --- Router, sweep, command line -----------------------------------------------------


@pytest.mark.parametrize("policy", ca.ONLINE_POLICIES)
def test_router_with_a_schedule_takes_the_decisions_of_a_simulated_run(stream, policy):
    X, R, _ = stream
    X, R = X[:300], R[:300, :2]
    res = ca.simulate(X, R, [0.3, 0.7], policy, eta=SCHEDULE, runs=2, seed=7,
                      return_traces=True)
    orders, seeds = ca._stream_orders(7, 2, len(X))
    router = ca.Router(2, [0.3, 0.7], policy, eta=SCHEDULE, X_reference=X, seed=0)
    router._rng[:] = ca._rng_states(seeds)[1]
    got = []
    for t, i in enumerate(orders[1]):
        a = router.assign(X[i])
        router.update(t, a, int(R[i, a]))
        got.append(a)
    assert got == res.assignments[1].tolist()


def _router_run(policy, X, R, save_at=None, batch_from=200):
    router = ca.Router(["a", "b", "c"], [0.3, 0.5, None], policy, eta=SCHEDULE,
                       X_reference=X[:100], seed=2)
    decisions = []
    for t in range(len(X)):
        if t == save_at:
            router = ca.Router.from_state(json.loads(json.dumps(router.state_dict())))
        if t >= batch_from and t % 10 == 0:
            decisions += router.assign_batch(X[t:t + 10], list(range(t, t + 10)))
            for j in range(t, t + 10):
                router.update(j, None, int(R[j, router.agents.index(decisions[j]) % 2]))
        elif t < batch_from:
            a = router.assign(X[t])
            decisions.append(a)
            if t % 3:                       # some rewards never come: pending at the save
                router.update(t, a, int(R[t, router.agents.index(a) % 2]))
    return decisions, router


@pytest.mark.parametrize("policy", ca.ONLINE_POLICIES)
@pytest.mark.parametrize("save_at", [150, 250])
def test_router_with_a_schedule_saved_and_restored_decides_identically(stream, policy,
                                                                        save_at):
    X, R, _ = stream
    X, R = X[:400], R[:400]
    plain, r1 = _router_run(policy, X, R)
    restored, r2 = _router_run(policy, X, R, save_at=save_at)
    assert restored == plain
    np.testing.assert_array_equal(r1.Q, r2.Q)
    state = r2.state_dict()
    assert state["schema"] == "capassign.router/6" and state["eta"] == SCHEDULE.fields()
    assert r2.eta == SCHEDULE
    # the constant step would have decided otherwise
    const = ca.Router(["a", "b", "c"], [0.3, 0.5, None], policy, X_reference=X[:100], seed=2)
    assert [const.assign(x) for x in X[:200]] != plain[:200] or policy == "random"


def test_saved_states_of_earlier_versions_and_bad_schedules(stream):
    X, _, _ = stream
    router = ca.Router(2, [0.5, 0.5], "marginal", eta=0.5)
    for t, x in enumerate(X[:5]):
        router.update(t, router.assign(x), 1)
    state = router.state_dict()
    assert state["eta"] == 0.5
    for version in (1, 2, 3):   # a number for eta, as every earlier version wrote it
        old = dict(state, schema=f"capassign.router/{version}")
        assert ca.Router.from_state(old).eta == 0.5
    bad = dict(state, eta={"schedule": "decaying", "eta0": 0.0, "t0": 1.0, "power": 0.5})
    with pytest.raises(ValueError, match="eta0 must be"):
        ca.Router.from_state(bad)
    with pytest.raises(ValueError, match=r"state\['eta'\] must be a number or an object"):
        ca.Router.from_state(dict(state, eta={"schedule": "cosine"}))


def test_sweep_keys_carry_the_schedule_and_numeric_keys_are_unchanged(tmp_path):
    X, R, _ = ca.synthetic_stream(120, 2, seed=0)
    plan = {}
    for eta in (0.5, SCHEDULE):
        plan[eta], _ = ca._sweep_arguments({"s": (X, R)}, ["marginal"], [0.5], 2, eta, 0, 0,
                                           ca.PAPER_SETTINGS, {"backend": "sequential"})
    # a number hashes as it always did: {"eta": 0.5, ...}
    key = next(iter(plan[0.5].keys.values()))
    assert key["settings"] == ca._json_digest({"eta": 0.5, "seed": 0, "task_seed": 0,
                                               "engine": "fast",
                                               "settings": ca.PAPER_SETTINGS.fields()})
    assert next(iter(plan[SCHEDULE].keys.values()))["settings"] != key["settings"]
    assert plan[SCHEDULE].manifest["eta"] == SCHEDULE.fields()
    df = ca.sweep({"s": (X, R)}, ["marginal"], [0.5], tmp_path, runs=2, eta=SCHEDULE,
                  backend="sequential")
    res = ca.simulate(X, R, (0.5, 0.5), "marginal", eta=SCHEDULE, runs=2)
    np.testing.assert_array_equal(df.error.to_numpy(), res.errors)
    again = ca.sweep({"s": (X, R)}, ["marginal"], [0.5], tmp_path, runs=2, eta=SCHEDULE,
                     backend="sequential")
    assert again.attrs["reused"] == 1 and again.attrs["computed"] == 0
    with pytest.raises(ValueError, match="eta"):
        ca.sweep({"s": (X, R)}, ["marginal"], [0.5], tmp_path, runs=2, backend="sequential")


def test_error_vs_capacity_takes_a_schedule(stream):
    X, R, _ = stream
    df = ca.error_vs_capacity(X[:200], R[:200, :2], ["marginal"], (0.3,), runs=2, eta=SCHEDULE)
    res = ca.simulate(X[:200], R[:200, :2], (0.3, 0.7), "marginal", eta=SCHEDULE, runs=2)
    assert df.error.iloc[0] == res.error


@pytest.mark.parametrize("text, expected", [
    ("0.5", 0.5), ("0", 0.0), ("decaying", ca.DecayingEta()),
    ("decaying:0.5,10", ca.DecayingEta(0.5, 10))])
def test_cli_eta_takes_a_number_or_a_schedule(text, expected):
    assert ca._parse_eta(text) == expected
    args = ca._build_parser().parse_args(["bench", "--router", "--eta", text])
    assert args.eta == expected


@pytest.mark.parametrize("text", ["-1", "nan", "decaying:0.5", "decaying:0,10", "cosine"])
def test_cli_refuses_a_bad_eta(text, capsys):
    with pytest.raises(SystemExit):
        ca._build_parser().parse_args(["bench", "--eta", text])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--eta" in err and "decaying[:eta0,t0]" in err


def test_cli_simulate_with_a_schedule_prints_it_as_json(capsys):
    ca.main(["simulate", "--task", "synthetic", "--policy", "marginal", "--capacities",
             "0.3,0.7", "--eta", "decaying:0.5,10", "--runs", "2", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["eta"] == SCHEDULE.fields()
    task = ca.load_task("synthetic")
    res = ca.simulate(task.X, task.R, (0.3, 0.7), "marginal", eta=SCHEDULE, runs=2)
    assert out["errors"] == res.errors.tolist()


def test_router_with_a_schedule_keeps_its_step_across_team_changes(stream):
    X, R, _ = stream

    def run(save_at):
        router = ca.Router(["a", "b"], [0.4, 0.6], "logistic-greedy", eta=SCHEDULE,
                           n_features=X.shape[1], seed=1)
        out = []
        for t in range(300):
            if t == 100:
                router.add_agent("c", 0.2)
            if t == 200:
                router.remove_agent("a")
            if t == save_at:
                router = ca.Router.from_state(json.loads(json.dumps(router.state_dict())))
            a = router.assign(X[t])
            router.update(t, a, int(R[t, "abc".index(a)]))
            out.append(a)
        return out, router

    plain, r1 = run(None)
    for save_at in (150, 250):
        assert run(save_at)[0] == plain
    assert r1._model._eta[3] == r1.n_assigned == 300
