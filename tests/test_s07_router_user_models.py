"""Section 7: a Router over a reward model of the caller's own (``Router(..., model=obj)``).

The protocol (``predict``, ``update``, optional ``sample``, ``state``/``from_state``,
``add_agent``/``remove_agent``), the capacity control around it (the same as for the
built-in policies), the refusals and the save/restore round trip.
"""

import json

import numpy as np
import pytest

import capassign as ca


class Means:
    """Each agent's mean reward, 0.5 before its first: the ``marginal`` model (App. D.5)."""

    def __init__(self, n_agents):
        self.n, self.s = np.zeros(n_agents), np.zeros(n_agents)
        self.calls = []

    def predict(self, X):
        mean = np.where(self.n > 0, self.s / np.where(self.n > 0, self.n, 1.0), 0.5)
        return np.tile(mean, (len(X), 1))

    def update(self, x, agent, reward):
        self.calls.append((np.array(x), agent, reward))
        self.n[agent] += 1.0
        self.s[agent] += reward


class Saved(Means):
    """Means that can be saved, changes its agents and draws Thompson samples
    (a Beta(1 + s, 1 + n - s) posterior per agent)."""

    def sample(self, X, rng):
        return rng.beta(1.0 + self.s, 1.0 + self.n - self.s, size=(len(X), len(self.n)))

    def state(self):
        return {"n": self.n.tolist(), "s": self.s.tolist()}

    @classmethod
    def from_state(cls, state):
        m = cls(len(state["n"]))
        m.n, m.s = np.array(state["n"]), np.array(state["s"])
        return m

    def add_agent(self):
        self.n, self.s = np.append(self.n, 0.0), np.append(self.s, 0.0)

    def remove_agent(self, agent):
        self.n, self.s = np.delete(self.n, agent), np.delete(self.s, agent)


class Returns:
    """A model whose predict returns what it is told (for the checks of its output)."""

    def __init__(self, out):
        self.out = out

    def predict(self, X):
        return self.out

    def update(self, x, agent, reward):
        pass


@pytest.fixture(scope="module")
def stream():
    X, R, _ = ca.synthetic_stream(1500, 3, seed=11)
    return X, R


def _delayed(router, X, R, T, save_at=None, model=None, eligible=None):
    """Assign T tasks; rewards arrive 0-29 tasks later, newest first."""
    delays = np.random.default_rng(2).integers(0, 30, size=T)
    due, decisions = {}, []
    for t in range(T):
        if t == save_at:
            router = ca.Router.from_state(json.loads(json.dumps(router.state_dict())),
                                          model=model)
        a = router.assign(X[t], eligible=None if eligible is None else eligible(t))
        decisions.append(a)
        due.setdefault(t + int(delays[t]), []).append((t, a))
        for tid, agent in reversed(due.pop(t, [])):
            router.update(tid, agent, int(R[tid, router.agents.index(agent) % R.shape[1]]))
    return decisions, router


# --- the protocol ---------------------------------------------------------------------


def test_greedy_decides_by_predict_and_feeds_update(stream):
    X, R = stream
    model = Means(2)
    router = ca.Router(["a", "b"], [0.5, 0.5], "greedy", model=model, n_features=3)
    assert router.model is model and router.policy == "greedy"
    d = router.assign(X[0], explain=True)
    assert (d.agent, d.propensity, d.n_draws, d.estimates) == ("a", 1.0, 0, (0.5, 0.5))
    router.update(0, "a", 1)
    x, agent, reward = model.calls[-1]
    np.testing.assert_array_equal(x, X[0])
    assert (agent, reward) == (0, 1.0) and type(agent) is int and type(reward) is float
    router.update(X[1], "b", 0.25)                  # an observation given as a context
    assert model.calls[-1][1:] == (1, 0.25) and router.rewards_seen.tolist() == [1, 1]
    np.testing.assert_array_equal(router.model.predict(X[:2]), [[1.0, 0.25]] * 2)


def test_default_policy_with_a_model_is_greedy_and_built_in_names_are_refused():
    assert ca.Router(2, [0.5, 0.5], model=Means(2)).policy == "greedy"
    assert ca.Router(2, [0.5, 0.5], n_features=2).policy == "tree-greedy"   # without a model
    with pytest.raises(ValueError, match="policy: with a model of your own .* 'greedy', 'ts'"):
        ca.Router(2, [0.5, 0.5], "tree-greedy", model=Means(2))
    with pytest.raises(ValueError, match="policy"):
        ca.Router(2, [0.5, 0.5], "greedy")                        # a mode needs a model


def test_a_marginal_user_model_decides_exactly_as_the_marginal_policy(stream):
    # The same estimates (s / n in float64, 0.5 before the first reward) under the
    # router's one capacity control give bit-identical decisions and queues, with
    # delayed rewards, a free agent, the decaying step, masks and a pause.
    X, R = stream
    for caps, eta in (([0.6, 0.4, None], ca.DEFAULT_ETA), ([0.2, 0.5, 0.3], 0.5)):
        mask = (lambda t: None if t % 7 else ["b", "c"])
        built, r1 = _delayed(ca.Router(["a", "b", "c"], caps, "marginal", eta=eta, seed=3),
                             X, R, 1200, eligible=mask)
        own, r2 = _delayed(ca.Router(["a", "b", "c"], caps, model=Means(3), eta=eta, seed=3),
                           X, R, 1200, eligible=mask)
        assert own == built
        np.testing.assert_array_equal(r1.Q, r2.Q)
        for r in (r1, r2):
            r.pause("b")
        assert r1.assign_batch(X[1200:1260]) == r2.assign_batch(X[1200:1260])
        np.testing.assert_array_equal(r1.Q, r2.Q)
        assert len(set(own)) == 3


def test_thompson_draws_from_sample_reproducibly(stream):
    X, R = stream
    runs = [_delayed(ca.Router(["a", "b"], [0.3, 0.7], "ts", model=Saved(2), seed=s),
                     X, R, 600)[0] for s in (5, 5, 6)]
    assert runs[0] == runs[1] != runs[2]
    greedy = _delayed(ca.Router(["a", "b"], [0.3, 0.7], "greedy", model=Saved(2), seed=5),
                      X, R, 600)[0]
    assert greedy != runs[0]


def test_thompson_propensities_are_monte_carlo_and_do_not_change_decisions(stream, tmp_path):
    X, R = stream
    log = tmp_path / "log.jsonl"
    plain = ca.Router(["a", "b"], [0.5, 0.5], "ts", model=Saved(2), seed=1)
    told = ca.Router(["a", "b"], [0.5, 0.5], "ts", model=Saved(2), seed=1, log=log)
    ps = []
    for t in range(60):
        a = plain.assign(X[t])
        d = told.assign(X[t], explain=True, n_draws=400)
        assert d.agent == a and d.n_draws == 400
        ps.append(d.propensity)
        for r in (plain, told):
            r.update(t, a, int(R[t, r.agents.index(a)]))
    assert all(0.0 < p <= 1.0 for p in ps) and any(p < 1.0 for p in ps)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["event"] for e in lines].count("decision") == 60
    assert all(0.0 < e["propensity"] <= 1.0 for e in lines if e["event"] == "decision")
    ev = ca.evaluate_log(log, "marginal", [0.5, 0.5])
    assert 0.0 <= ev["ips"].value <= 1.0
    batch = plain.assign_batch(X[60:64], explain=True, n_draws=100)
    assert all(d.n_draws == 100 and 0.0 <= d.propensity <= 1.0 for d in batch)


def test_capacities_hold_and_the_better_agent_is_learnt():
    # agent 0 right 90% of the time, agent 1 60%: under upper bounds of 0.8 each the
    # learnt model sends agent 0 close to its limit, and no agent exceeds its own
    rng = np.random.default_rng(0)
    T = 3000
    R = np.column_stack([rng.random(T) < 0.9, rng.random(T) < 0.6]).astype(int)
    X = rng.random((T, 2))
    for mode in ("greedy", "ts"):
        router = ca.Router(2, [0.8, 0.8], mode, model=Saved(2), bounds="upper", eta=0.5)
        for t in range(T):
            a = router.assign(X[t])
            router.update(t, a, R[t, a])
        shares = router.assigned_counts / T
        assert shares[0] > 0.75 and np.all(shares <= 0.8 + 0.01), (mode, shares)
        # exact shares [0.3, 0.7]: held to within 1% although agent 0 is better
        router = ca.Router(2, [0.3, 0.7], mode, model=Saved(2), eta=0.5)
        for t in range(T):
            a = router.assign(X[t])
            router.update(t, a, R[t, a])
        np.testing.assert_allclose(router.assigned_counts / T, [0.3, 0.7], atol=0.01)


# --- saving and restoring ------------------------------------------------------------


@pytest.mark.parametrize("mode", ca.USER_MODEL_MODES)
def test_a_restored_router_decides_like_an_uninterrupted_one(stream, mode):
    X, R = stream
    make = (lambda: ca.Router(["a", "b", "c"], [0.5, 0.3, None], mode, model=Saved(3), seed=9,
                              max_age=40))
    plain, r1 = _delayed(make(), X, R, 1000)
    restored, r2 = _delayed(make(), X, R, 1000, save_at=500, model=Saved)
    assert restored == plain
    assert r1.pending == r2.pending and len(r1.pending) > 0
    np.testing.assert_array_equal(r1.Q, r2.Q)
    np.testing.assert_array_equal(r1.model.s, r2.model.s)
    st = r2.state_dict()
    assert st["policy"] == mode and st["model"] == {"class": "Saved", "state": r2.model.state()}


def test_saving_is_refused_without_state_and_from_state(stream):
    X, R = stream
    router = ca.Router(2, [0.5, 0.5], model=Means(2))
    router.assign(X[0])
    with pytest.raises(TypeError, match=r"^state_dict: the router's model Means cannot be saved; "
                                        r"give it state\(\) .* and from_state\(state\)"):
        router.state_dict()
    assert router.pending == [0]                   # nothing changed


def test_restoring_needs_the_class_of_a_model_of_your_own(stream):
    X, _ = stream
    router = ca.Router(2, [0.5, 0.5], model=Saved(2))
    router.assign(X[0])
    st = json.loads(json.dumps(router.state_dict()))
    with pytest.raises(ValueError, match=r"state holds a model of your own \(class 'Saved'\); "
                                         r"give its class: Router.from_state\(state, model=...\)"):
        ca.Router.from_state(st)
    with pytest.raises(TypeError, match="model must have from_state"):
        ca.Router.from_state(st, model=Means)
    with pytest.raises(ValueError, match="state\\['model'\\] must be an object with keys"):
        ca.Router.from_state({**st, "model": {"n": [0, 0]}}, model=Saved)
    built = ca.Router(2, [0.5, 0.5], "marginal").state_dict()
    with pytest.raises(ValueError, match="model: this state was saved by a router of policy "
                                         "'marginal'"):
        ca.Router.from_state(built, model=Saved)
    assert ca.Router.from_state(st, model=Saved).pending == [0]


def test_a_state_that_is_not_json_is_refused():
    class NumpyState(Saved):
        def state(self):
            return {"n": self.n}

    router = ca.Router(2, [0.5, 0.5], model=NumpyState(2))
    with pytest.raises(ValueError, match=r"model.state\(\) must return JSON-able data"):
        router.state_dict()


# --- refusals ---------------------------------------------------------------------------


def test_a_model_without_predict_or_update_is_refused():
    class NoUpdate:
        def predict(self, X):
            return np.full((len(X), 2), 0.5)

    with pytest.raises(TypeError, match="model must have predict.* NoUpdate has no update"):
        ca.Router(2, [0.5, 0.5], model=NoUpdate())


def test_thompson_without_sample_is_refused():
    with pytest.raises(TypeError, match=r"policy 'ts' draws from the model's posterior, but "
                                        r"Means has no sample\(X, rng\) method"):
        ca.Router(2, [0.5, 0.5], "ts", model=Means(2))


@pytest.mark.parametrize("out, message", [
    (np.full(2, 0.5), r"model.predict\(X\) must return shape \(1, 2\) .* got \(2,\)"),
    (np.full((1, 3), 0.5), r"must return shape \(1, 2\) .* got \(1, 3\)"),
    (np.array([[0.5, np.nan]]), r"model.predict\(X\) returned NaN or infinite values"),
    (np.array([[np.inf, 0.5]]), r"returned NaN or infinite values"),
    (np.array([[0.5, 1.5]]), r"model.predict\(X\) returned values outside \[0, 1\]"),
    (np.array([[-0.1, 0.5]]), r"outside \[0, 1\]"),
    ([["x", "y"]], r"model.predict\(X\) must return an array of numbers"),
])
def test_bad_estimates_are_refused_and_change_nothing(out, message):
    router = ca.Router(2, [0.5, 0.5], model=Returns(out), eta=0.5)
    router._Q[:] = [0.25, 0.0]
    with pytest.raises(ValueError, match=message):
        router.assign([0.0, 1.0])
    assert router.n_assigned == 0 and router.Q.tolist() == [0.25, 0.0]
    assert router._model._eta[3] == 0.0
    with pytest.raises(ValueError, match=message.split(" ")[0]):
        router.assign_batch([[0.0, 1.0]])


def test_bad_samples_are_refused_and_leave_the_random_state():
    class BadSample(Means):
        def sample(self, X, rng):
            return np.full((len(X), 2), rng.random() + 1.0)

    router = ca.Router(2, [0.5, 0.5], "ts", model=BadSample(2))
    rng = router._rng.copy()
    with pytest.raises(ValueError, match=r"model.sample\(X, rng\) returned values outside"):
        router.assign([0.0])
    np.testing.assert_array_equal(router._rng, rng)


def test_a_failing_update_leaves_the_task_pending():
    class Fails(Means):
        def update(self, x, agent, reward):
            raise RuntimeError("the model's store is down")

    router = ca.Router(2, [0.5, 0.5], model=Fails(2))
    a = router.assign([1.0])
    with pytest.raises(RuntimeError, match="store is down"):
        router.update(0, a, 1)
    assert router.pending == [0] and router.rewards_seen.tolist() == [0, 0]


def test_contexts_and_row_budget_checks_stay():
    router = ca.Router(2, [0.5, 0.5], model=Means(2), n_features=3)
    with pytest.raises(ValueError, match="NaN"):
        router.assign([0.0, np.nan, 1.0])
    with pytest.raises(ValueError):
        router.assign([0.0, 1.0])                    # n_features given: checked
    with pytest.raises(ValueError, match="tree_row_budget applies to the tree policies only"):
        ca.Router(2, [0.5, 0.5], model=Means(2), tree_row_budget=100)


# --- agents joining and leaving ---------------------------------------------------------


def test_agents_join_and_leave_through_the_models_hooks(stream):
    X, R = stream
    router = ca.Router(["a", "b"], [0.5, 0.5], model=Saved(2), eta=0.5, seed=2)
    for t in range(200):
        a = router.assign(X[t])
        router.update(t, a, int(R[t, router.agents.index(a)]))
    q = router.Q.mean()
    router.add_agent("c", 0.2)
    assert router.model.n.shape == (3,) and router.model.n[2] == 0
    assert router.Q[2] == q and router.capacities == (0.4, 0.4, 0.2)
    for t in range(200, 700):
        a = router.assign(X[t])
        router.update(t, a, int(R[t, router.agents.index(a) % 2]))
    assert router.assigned_counts[2] > 0
    n_b = router.model.n[1]
    router.remove_agent("a")
    assert router.agents == ["b", "c"] and router.model.n[0] == n_b
    assert {router.assign(X[t]) for t in range(700, 750)} == {"b", "c"}
    restored = ca.Router.from_state(json.loads(json.dumps(router.state_dict())), model=Saved)
    assert restored.agents == ["b", "c"] and restored.changes == router.changes


def test_agents_cannot_change_without_hooks(stream):
    X, _ = stream
    router = ca.Router(["a", "b", "c"], [0.4, 0.4, 0.2], model=Means(3))
    router.assign(X[0])
    with pytest.raises(TypeError, match=r"^add_agent: the router's model Means cannot change "
                                        r"its agents; give it add_agent\(\)"):
        router.add_agent("d", 0.1)
    with pytest.raises(TypeError, match=r"^remove_agent: .* give it remove_agent\(agent\)"):
        router.remove_agent("a", pending="cancel")
    assert router.agents == ["a", "b", "c"] and router.pending == [0]
    assert router.capacities == (0.4, 0.4, 0.2) and router.changes == []


# --- the README's example ---------------------------------------------------------------


def test_the_readme_runs_a_scikit_learn_model():
    """The README's example of a model of your own (SGDClassifier with partial_fit) is
    one of the README blocks that tests/test_s01_examples.py executes."""
    from test_s01_examples import readme_python_blocks

    blocks = [p.values[0] for p in readme_python_blocks()]
    example = [b for b in blocks if "SGDClassifier" in b and "model=" in b]
    assert len(example) == 1
    namespace = {"__name__": "__readme__"}
    exec(compile(example[0], "README.md", "exec"), namespace)  # noqa: S102 - our own README
    router = namespace["router"]
    assert router.policy == "greedy" and router.n_assigned > 0
