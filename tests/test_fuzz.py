"""Property tests: malformed input to the public entry points gives a clear error.

Hypothesis throws random, often malformed, arguments at ``simulate``,
``Router`` and ``optimal_assignment``.  Each call must either succeed with
finite numbers or raise ``ValueError``/``TypeError`` whose message names the
offending argument - never another exception, a hang or a silent NaN.
"""

import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import capassign as ca

FUZZ = settings(derandomize=True, max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# numbers that are fine, out of range or not numbers at all
weird_number = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.integers(-3, 3), st.sampled_from([0.0, 0.25, 0.5, 1.0, -0.1, 1.5]),
    st.just(None), st.just("0.5"), st.booleans())
capacities = st.one_of(
    st.sampled_from([[0.5, 0.5], [0.3, 0.7], [1.0, None], [0.2, 0.3, 0.5], [0.5, 0.5, None]]),
    st.lists(weird_number, min_size=0, max_size=4),
    st.sampled_from([None, "0.5,0.5", 0.5, {"a": 1}]))
policies = st.sampled_from(ca.POLICIES + ("oracle", "", None, 3))
etas = st.one_of(st.sampled_from([0.0, 0.5, 2.0]), weird_number)


def matrix(rows, cols, elements):
    return st.builds(lambda vals: np.array(vals, dtype=float).reshape(rows, cols),
                     st.lists(elements, min_size=rows * cols, max_size=rows * cols))


def contexts(max_rows=6, max_cols=3):
    good = st.floats(-3, 3, allow_nan=False)
    bad = st.sampled_from([np.nan, np.inf, -np.inf, 1e308])
    return st.integers(0, max_rows).flatmap(lambda r: st.integers(0, max_cols).flatmap(
        lambda c: matrix(r, c, st.one_of(good, good, good, bad))))


def rewards(max_rows=6):
    vals = st.sampled_from([0.0, 1.0, 0.0, 1.0, 0.5, 2.0, -1.0, np.nan])
    return st.integers(0, max_rows).flatmap(lambda r: st.integers(1, 3).flatmap(
        lambda c: matrix(r, c, vals)))


ARG_NAMES = ("X", "R", "capacities", "policy", "eta", "runs", "seed", "engine", "settings",
             "mu", "weights", "agents", "x", "X_reference", "n_features", "reward", "agent",
             "task", "state", "n_agents")


def check_clear(exc):
    assert isinstance(exc, (ValueError, TypeError)), repr(exc)
    msg = str(exc)
    assert any(name in msg for name in ARG_NAMES), f"error does not name an argument: {msg}"


@FUZZ
@given(X=contexts(), R=rewards(), caps=capacities, policy=policies, eta=etas,
       runs=st.sampled_from([1, 2, 0, -1, 1.5, True]),
       seed=st.sampled_from([0, 3, -1, "a"]))
def test_simulate_fuzz(X, R, caps, policy, eta, runs, seed):
    try:
        res = ca.simulate(X, R, caps, policy, eta=eta, runs=runs, seed=seed)
    except Exception as exc:  # noqa: BLE001 - the property is about which exceptions
        check_clear(exc)
        return
    assert np.all(np.isfinite(res.errors)) and np.all((res.errors >= 0) & (res.errors <= 1))
    assert np.all(np.isfinite(res.assigned))
    np.testing.assert_allclose(res.assigned.sum(axis=1), 1.0)


@FUZZ
@given(mu=st.integers(0, 5).flatmap(lambda r: st.integers(0, 4).flatmap(
           lambda c: matrix(r, c, st.one_of(st.floats(0, 1), weird_number.filter(
               lambda v: isinstance(v, float)))))),
       caps=capacities,
       weights=st.one_of(st.none(), st.lists(weird_number.filter(
           lambda v: v is None or isinstance(v, float)), max_size=5)))
def test_optimal_assignment_fuzz(mu, caps, weights):
    try:
        opt = ca.optimal_assignment(mu, caps, weights)
    except Exception as exc:  # noqa: BLE001
        check_clear(exc)
        return
    assert np.all(np.isfinite(opt.assignment)) and np.all(np.isfinite(opt.shadow_prices))
    assert np.isfinite(opt.value)
    np.testing.assert_allclose(opt.assignment.sum(axis=1), 1.0, atol=1e-7)


operations = st.lists(st.tuples(
    st.sampled_from(["assign", "assign", "update", "batch", "observe", "save"]),
    st.integers(-1, 6),                       # task id / agent
    st.one_of(st.floats(-2, 2), weird_number),  # reward or a context entry
    st.integers(0, 4)), max_size=25)


@FUZZ
@given(agents=st.one_of(st.integers(-1, 4), st.sampled_from([["a", "b"], ["a", "a"], ["a", 1],
                                                            "ab", None, 2.0])),
       caps=capacities, policy=st.sampled_from(ca.ROUTER_POLICIES + ("offline-tree", None)),
       eta=etas, ref=st.one_of(st.none(), contexts(8, 3)),
       n_features=st.sampled_from([None, 2, 0, -1, "2"]), ops=operations)
def test_router_fuzz(agents, caps, policy, eta, ref, n_features, ops):
    try:
        router = ca.Router(agents, caps, policy, eta=eta, X_reference=ref,
                           n_features=n_features)
    except Exception as exc:  # noqa: BLE001
        check_clear(exc)
        return
    d = router.n_features or 2
    rng = np.random.default_rng(len(ops))
    for op, k, v, width in ops:
        x = rng.standard_normal(d if width else d + 1)
        if isinstance(v, float) and not np.isfinite(v):
            x[0] = v
        try:
            if op == "assign":
                router.assign(x)
            elif op == "batch":
                router.assign_batch(np.tile(x, (max(width, 1), 1)))
            elif op == "update":
                task = router.pending[k % len(router.pending)] if router.pending and k >= 0 else k
                router.update(task, None, v)
            elif op == "observe":
                router.update(x, k, v)
            else:
                router = ca.Router.from_state(json.loads(json.dumps(router.state_dict())))
        except Exception as exc:  # noqa: BLE001
            check_clear(exc)
        assert np.all(np.isfinite(router.Q)) and np.all(router.Q >= 0)
    if router.policy.startswith("logistic"):
        assert np.all(np.isfinite(router._theta)) and np.all(np.isfinite(router._Sigma))
    if router.policy == "marginal":
        assert np.all(np.isfinite(router._s))


@FUZZ
@given(key=st.sampled_from(["schema", "Q", "rng", "pending", "policy", "capacities", "eta",
                            "agents", "settings", "model", "n_assigned", "n_features"]),
       value=st.one_of(weird_number, st.lists(weird_number, max_size=3), st.text(max_size=5),
                       st.dictionaries(st.text(max_size=3), weird_number, max_size=2)))
def test_malformed_state_fuzz(key, value):
    X, R, _ = ca.synthetic_stream(60, 2, seed=0)
    router = ca.Router(2, [0.5, 0.5], "tree-ts", X_reference=X, seed=1)
    for t in range(45):
        a = router.assign(X[t])
        if t % 3:
            router.update(t, a, int(R[t, a]))
    state = json.loads(json.dumps(router.state_dict()))
    state[key] = value
    try:
        ca.Router.from_state(state)
    except Exception as exc:  # noqa: BLE001
        check_clear(exc)
