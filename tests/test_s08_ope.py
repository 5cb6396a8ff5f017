"""Decisions with propensities, the router's log, off-policy evaluation from logs,
and the read-only configuration of a Router."""

import copy
import json

import numpy as np
import pytest

import capassign as ca


@pytest.fixture(scope="module")
def stream():
    X, R, _ = ca.synthetic_stream(1200, 3, seed=11)
    return X, R


def _router(policy, **kw):
    extra = {} if policy in ("random", "marginal") else {"n_features": 3}
    return ca.Router(2, [0.6, 0.4], policy, seed=3, **extra, **kw)


# --- read-only configuration ------------------------------------------------------

@pytest.mark.parametrize("name, value", [
    ("capacities", (0.2, 0.8)), ("eta", 50.0), ("policy", "random"), ("seed", 9),
    ("settings", ca.ModelSettings(n_trees=3)), ("n_features", 5), ("log", "x.jsonl")])
def test_configuration_is_read_only(name, value):
    # Before, router.capacities = ... was accepted, ignored by assign and
    # used by assign_batch and state_dict (a restored router decided otherwise).
    router = _router("logistic-greedy")
    before = getattr(router, name)
    with pytest.raises(AttributeError, match=rf"Router\.{name} is read-only: "):
        setattr(router, name, value)
    assert getattr(router, name) == before
    assert router.state_dict()["policy"] == "logistic-greedy"


def test_a_router_pickled_before_keeps_its_configuration():
    router = _router("marginal")
    state = router.__getstate__()
    for old, new in ca._RENAMED_ATTRIBUTES:  # the attribute names of a router pickled before
        state[old] = state.pop(new)
    del state["_log"]
    back = ca.Router.__new__(ca.Router)
    back.__setstate__(state)
    assert back.capacities == (0.6, 0.4) and back.policy == "marginal" and back.log is None


# --- decisions with propensities ----------------------------------------------------

@pytest.mark.parametrize("policy", ca.ONLINE_POLICIES)
def test_explain_leaves_the_decisions_bit_for_bit(stream, policy):
    X, R = stream
    plain, explained = _router(policy), _router(policy)
    for i in range(150):
        a = plain.assign(X[i])
        d = explained.assign(X[i], explain=True, n_draws=50)
        assert isinstance(d, ca.Decision) and d.agent == a and d.task_id == i
        plain.update(i, a, float(R[i, a]))
        explained.update(i, a, float(R[i, a]))
    assert plain.state_dict() == explained.state_dict()


def _trained(policy, stream, n=200):
    X, R = stream
    router = _router(policy)
    for i in range(n):
        a = router.assign(X[i])
        router.update(i, a, float(R[i, a]))
    return router


def _empirical_choices(router, x, draws):
    """The agents a copy of ``router`` chooses for ``x`` under fresh random streams."""
    got = np.zeros(2)
    for k in range(draws):
        r = copy.deepcopy(router)
        r._rng[:] = ca._rng_states([np.random.SeedSequence([77, k])])[0]
        if hasattr(r._model, "_gauss"):
            r._model._gauss[:] = 0.0
        got[r.assign(x)] += 1
    return got / draws


@pytest.mark.parametrize("policy", ["random", "marginal", "logistic-greedy", "tree-greedy"])
def test_exact_propensities_are_the_choice_frequencies(stream, policy):
    X, _ = stream
    router = _trained(policy, stream)
    x = X[500]
    freq = _empirical_choices(router, x, 400)
    d = copy.deepcopy(router).assign(x, explain=True)
    assert d.propensity_se == 0.0 and d.n_draws == 0
    if policy == "random":
        assert d.propensity == 0.6 if d.agent == 0 else d.propensity == 0.4
        assert abs(freq[d.agent] - d.propensity) < 4 * np.sqrt(0.24 / 400)
        assert d.estimates is None
    else:
        assert d.propensity == 1.0 and freq[d.agent] == 1.0
        assert len(d.estimates) == 2 and len(d.penalties) == 2


@pytest.mark.parametrize("policy", ["logistic-ts", "tree-ts"])
def test_thompson_propensities_match_the_choice_frequencies(stream, policy):
    X, _ = stream
    router = _trained(policy, stream)
    draws = 400
    checked = 0
    for i in range(500, 520):                 # contexts where the choice is uncertain
        d = copy.deepcopy(router).assign(X[i], explain=True, n_draws=2000)
        if not 0.1 < d.propensity < 0.9:
            continue
        freq = _empirical_choices(router, X[i], draws)[d.agent]
        assert d.n_draws == 2000
        assert d.propensity_se == pytest.approx(np.sqrt(d.propensity * (1 - d.propensity) / 2000))
        sd = np.sqrt(d.propensity_se ** 2 + d.propensity * (1 - d.propensity) / draws)
        assert abs(freq - d.propensity) < 4 * sd, (i, freq, d)
        checked += 1
        if checked == 2:
            break
    assert checked == 2


def test_penalties_are_eta_t_times_the_queues(stream):
    X, R = stream
    step = ca.DecayingEta(eta0=1.0, t0=10)
    router = ca.Router(2, [0.6, 0.4], "logistic-greedy", eta=step, n_features=3)
    for i in range(30):
        Q, t = router.Q, router.n_assigned
        d = router.assign(X[i], explain=True)
        assert d.penalties == pytest.approx(tuple(step.at(t) * Q), rel=1e-12)
        router.update(i, d.agent, float(R[i, d.agent]))
    assert max(router.Q) > 0


def test_explain_bad_arguments():
    router = _router("logistic-ts")
    with pytest.raises(TypeError, match="explain"):
        router.assign(np.zeros(3), explain="yes")
    with pytest.raises(ValueError, match="n_draws"):
        router.assign(np.zeros(3), explain=True, n_draws=0)


# --- the log ----------------------------------------------------------------------

def test_log_lines_and_restore(stream, tmp_path):
    X, R = stream
    path = tmp_path / "decisions.jsonl"
    router = ca.Router(["model", "human"], [0.6, 0.4], "logistic-ts", n_features=3, log=path)
    for i in range(20):
        a = router.assign(X[i], n_draws=100)
        if i % 2 == 0:
            router.update(i, a, float(R[i, router.agents.index(a)]))
    state = json.loads(json.dumps(router.state_dict()))
    assert state["log"] == str(path)
    assert state["schema"].endswith(f"/{ca.ROUTER_SCHEMA_VERSION}")
    back = ca.Router.from_state(state)
    assert back.log == str(path)
    back.assign(X[20], n_draws=100)
    lines = [json.loads(t) for t in path.read_text().splitlines()]
    events = [ln["event"] for ln in lines]
    assert events.count("router") == 2 and events.count("decision") == 21
    assert events.count("reward") == 10
    dec = next(ln for ln in lines if ln["event"] == "decision")
    assert set(dec) == {"event", "task_id", "agent", "propensity", "propensity_se", "x"}
    assert 0 < dec["propensity"] <= 1 and dec["x"] == X[0].tolist()
    with pytest.raises(ValueError, match="log: assign_batch"):
        back.assign_batch(X[30:32])


def test_states_of_version_4_load_without_a_log(stream):
    state = _trained("logistic-greedy", stream, 20).state_dict()
    state = dict(state, schema="capassign.router/4")
    del state["log"]
    assert ca.Router.from_state(state).log is None


# --- off-policy evaluation ------------------------------------------------------------

def _random_log(X, R, seed, caps=(0.5, 0.5)):
    logger = ca.Router(2, list(caps), "random", seed=seed)
    lines = [{"event": "router", "agents": [0, 1]}]
    for i in range(len(X)):
        d = logger.assign(X[i], explain=True)
        lines += [{"event": "decision", "task_id": i, "agent": d.agent,
                   "propensity": d.propensity, "x": X[i].tolist()},
                  {"event": "reward", "task_id": i, "agent": d.agent,
                   "reward": float(R[i, d.agent])}]
    return lines


def test_a_routers_log_file_is_what_evaluate_log_reads(stream, tmp_path):
    X, R = stream
    path = tmp_path / "log.jsonl"
    logger = ca.Router(["a", "b"], [0.5, 0.5], "random", log=path)
    for i in range(300):
        agent = logger.assign(X[i])
        logger.update(i, agent, float(R[i, logger.agents.index(agent)]))
    from_file = ca.evaluate_log(path, "marginal", [0.5, 0.5])
    assert from_file["ips"].n == 300 and from_file["replay"].n > 100
    assert list(from_file.estimates) == list(ca.OPE_ESTIMATORS)


def test_evaluate_log_intervals_cover_the_truth():
    # The fast version of the check the book runs at more replications.
    X, R, _ = ca.synthetic_stream(400, 3, seed=4)
    chk = ca.off_policy_check(X, R, [0.5, 0.5], [("marginal", 0.5), ("logistic-greedy", 0.5)],
                              replications=20, truth_runs=20, seed=1)
    assert len(chk.rows) == 8
    for row in chk.rows:
        assert row["coverage"] >= 0.85, row
        assert abs(row["bias"]) < row["width"] / 2, row


def test_ips_truth_is_the_targets_reward_along_the_log(stream):
    # A target that always agrees with a uniform logger's choice cannot exist,
    # but the random target's IPS is exactly 2 * mean(1{a_i = pi_i} r_i).
    X, R = stream
    lines = _random_log(X[:300], R[:300], seed=2)
    ev = ca.evaluate_log(lines, "random", [0.5, 0.5], estimators=["ips"])
    a = np.array([ln["agent"] for ln in lines if ln["event"] == "decision"])
    r = np.array([ln["reward"] for ln in lines if ln["event"] == "reward"])
    assert ev["ips"].value == pytest.approx(np.mean(2 * (ev.actions == a) * r))


@pytest.mark.parametrize("change, message", [
    (lambda ls: ls[1].pop("propensity"), "log line 2: a decision without a 'propensity'"),
    (lambda ls: ls[1].update(propensity=0.0), "log line 2: propensity of the logged agent"),
    (lambda ls: ls[1].update(agent=7), "log line 2: unknown agent 7"),
    (lambda ls: ls[2].update(task_id=99), "log line 3: a reward for task 99"),
    (lambda ls: ls[1].pop("x"), "log line 2: a decision without a context"),
    (lambda ls: ls[2].update(reward=2.0), "log line 3: reward"),
    (lambda ls: ls[0].update(event="other"), "log line 1 must be an object"),
])
def test_bad_logs_are_refused_naming_the_line(stream, change, message):
    X, R = stream
    lines = _random_log(X[:50], R[:50], seed=1)
    change(lines)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ca.evaluate_log(lines, "marginal", [0.5, 0.5])


def test_bad_arguments_of_evaluate_log(stream):
    X, R = stream
    lines = _random_log(X[:50], R[:50], seed=1)
    with pytest.raises(ValueError, match="policy"):
        ca.evaluate_log(lines, "ucb", [0.5, 0.5])
    with pytest.raises(ValueError, match=r"estimators\[0\]"):
        ca.evaluate_log(lines, "marginal", [0.5, 0.5], estimators=["magic"])
    with pytest.raises(ValueError, match="folds"):
        ca.evaluate_log(lines, "marginal", [0.5, 0.5], folds=1)
    with pytest.raises(ValueError, match="capacities"):
        ca.evaluate_log(lines, "marginal", [0.5, 0.5, 0.0])
    with pytest.raises(TypeError, match="log must be a path"):
        ca.evaluate_log(3, "marginal", [0.5, 0.5])
    with pytest.raises(ValueError, match="no decision with its reward"):
        ca.evaluate_log(lines[:2], "marginal", [0.5, 0.5])
