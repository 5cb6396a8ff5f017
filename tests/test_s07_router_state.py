"""Saved router states are untrusted input: sizes are checked before anything is
allocated, impossible states are refused with a ValueError naming the field."""

import copy
import json
import time
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import capassign as ca

MiB = 2 ** 20


def _state(policy, stream=False, T=90):
    X, R, _ = ca.synthetic_stream(T, 3, seed=2)
    kw = dict(n_features=3) if stream or not policy.startswith("tree") else dict(X_reference=X)
    router = ca.Router(2, [0.4, 0.6], policy, seed=5, max_pending=30, **kw)
    for t in range(T):
        a = router.assign(X[t])
        if t % 3 and t in router.pending:
            router.update(t, a, int(R[t, a]))
    return json.loads(json.dumps(router.state_dict()))


STATES = {name: _state(*args) for name, args in {
    "marginal": ("marginal",), "logistic": ("logistic-ts",), "tree": ("tree-greedy",),
    "stream": ("tree-ts", True)}.items()}


def _refused(state, field, *, seconds=5.0, peak_mib=64):
    """from_state refuses ``state`` with a ValueError naming ``field``, quickly and
    without allocating much."""
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(ValueError, match=field) as info:
            ca.Router.from_state(state)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert time.perf_counter() - t0 < seconds
    assert peak < peak_mib * MiB, f"{peak / MiB:.0f} MiB before the error"
    return str(info.value)


def test_the_states_used_below_restore():
    for state in STATES.values():
        assert ca.Router.from_state(copy.deepcopy(state)).state_dict() == state


def test_declared_sizes_are_checked_before_allocation():
    s = copy.deepcopy(STATES["logistic"])
    s["n_features"] = 20000                    # a state of 781 bytes
    _refused(s, "n_features")
    s["n_features"] = 4000                     # within the bound, but theta has 4 entries
    _refused(s, "theta")
    t = copy.deepcopy(STATES["tree"])
    t["settings"].update(n_trees=10000, max_depth=12)
    for a in range(2):                         # weights declared for 10000 trees
        n = t["model"]["nobs"][a]
        t["model"]["weights"][a]["shape"] = [10000, n]
    _refused(t, "weights")
    t["model"]["nobs"] = [0, 0]
    for key, shape in (("bins", [0, 3]), ("rewards", [0]), ("weights", [10000, 0])):
        t["model"][key] = [{"shape": shape, "uint8_base64": ""}] * 2
    assert "MiB" in _refused(t, "settings")    # consistent, but far too large
    u = copy.deepcopy(STATES["tree"])
    u["model"]["nobs"][0] = 10 ** 8
    _refused(u, "bins")
    u["model"]["nobs"][0] = 1e8
    _refused(u, "nobs")
    v = copy.deepcopy(STATES["tree"])
    v["model"]["bins"][0]["shape"] = [10 ** 8, 3]
    _refused(v, "bins")
    w = copy.deepcopy(STATES["stream"])
    w["model"]["stream"]["n_seen"] = 10 ** 8    # says the edges are final; buffers present
    _refused(w, "stream")


@pytest.mark.parametrize("name, path, value, field", [
    ("marginal", ["rewards_seen", 0], 1e30, "rewards_seen"),
    ("marginal", ["rewards_seen", 0], 10 ** 30, "rewards_seen"),
    ("logistic", ["assigned_counts", 0], 2.5, "assigned_counts"),
    ("logistic", ["assigned_counts", 0], 1000, "assigned_counts"),   # sum != n_assigned
    ("logistic", ["n_assigned"], 5, "assigned_counts"),
    ("marginal", ["model", "s", 0], 1000.0, "'s'"),                  # s > n
    ("marginal", ["model", "s", 0], -0.5, "'s'"),                  # s < 0
    ("marginal", ["model", "n", 1], 3.0, "'n'"),                      # n != rewards_seen
    ("logistic", ["Q", 0], 1e308, "Q"),
    ("logistic", ["Q", 1], float("inf"), "Q"),
    ("logistic", ["Q", 0], float("nan"), "Q"),
    ("tree", ["Q", 0], 100.0, "Q"),                                   # > n_assigned
    ("logistic", ["model", "gauss", 0], 0.5, "gauss"),
    ("tree", ["model", "nobs", 0], 3, "bins"),
    ("stream", ["model", "stream", "raw", 0, 0, 0], 99.0, "bins"),    # raw rows != bins
    ("stream", ["model", "stream", "seen", 0, 0], 99.0, "edges"),     # seen != edges
    ("marginal", ["pending", 0, 3], 10 ** 6, "pending"),
    ("marginal", ["max_pending"], 2, "max_pending"),
    ("marginal", ["n_expired"], -1, "n_expired"),
])
def test_impossible_states_are_refused(name, path, value, field):
    s = copy.deepcopy(STATES[name])
    node = s
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    _refused(s, field)


def test_sigma_must_be_symmetric_positive_definite():
    s = copy.deepcopy(STATES["logistic"])
    s["model"]["Sigma"][1][0][1] += 1e-3
    _refused(s, "Sigma")
    s = copy.deepcopy(STATES["logistic"])
    S = -np.array(s["model"]["Sigma"][0])       # negative definite, symmetric
    s["model"]["Sigma"][0] = S.tolist()
    _refused(s, "Sigma")


# --- fuzz: mutate one leaf of a saved state -----------------------------------------


def _leaves(obj, path=()):
    if isinstance(obj, dict):
        for k in sorted(obj):
            yield from _leaves(obj[k], path + (k,))
    elif isinstance(obj, list) and obj:
        for i in sorted({0, len(obj) - 1}):
            yield from _leaves(obj[i], path + (i,))
    else:
        yield path


LEAVES = [(name, path) for name, state in STATES.items() for path in _leaves(state)]
weird = st.one_of(st.sampled_from([0, 1, -1, 2 ** 64, 10 ** 30, 1e308, -1e308, 0.5, 1e-300,
                                   float("nan"), float("inf"), True, None, "", "x", [], {},
                                   [0], [[]], {"shape": [1], "uint8_base64": "AA=="}]),
                  st.integers(-3, 300), st.floats(-5, 5, allow_nan=False))


@settings(derandomize=True, max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(leaf=st.sampled_from(LEAVES), value=weird)
def test_mutated_states_restore_or_name_the_field(leaf, value):
    name, path = leaf
    s = copy.deepcopy(STATES[name])
    node = s
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        router = ca.Router.from_state(s)
    except ValueError as exc:
        named = [k for k in path if isinstance(k, str)]
        named += {"settings": ["MiB"], "agents": ["capacities"], "capacities": ["capacities"],
                  "eta": ["eta"], "seed": ["seed"]}.get(path[0], [])
        msg = str(exc)
        assert "state" in msg or any(k in msg for k in named), msg
        assert any(k in msg for k in named + ["state['model']", "n_features", "n_assigned",
                                              "assigned_counts", "rewards_seen", "nobs"]), msg
        router = None
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert time.perf_counter() - t0 < 10
    assert peak < 200 * MiB
    if router is not None:                     # a state that restores is a working router
        assert np.all(np.isfinite(router.Q)) and np.all(router.Q >= 0)
        a = router.assign(np.zeros(router.n_features or 3))
        router.update(router.last_task_id, a, 1)
        json.dumps(router.state_dict())


@pytest.mark.parametrize("name", ["marginal", "logistic", "tree"])
def test_version_1_states_are_still_read(name):
    # schema 1: no ids' sequence numbers, no expiry settings or counters
    v2 = copy.deepcopy(STATES[name])
    v1 = {k: v for k, v in v2.items() if k not in ("max_pending", "max_age", "n_cancelled",
                                                   "n_expired", "last_task_id")}
    v1["schema"] = "capassign.router/1"
    v1["pending"] = [e[:3] for e in v2["pending"]]
    router = ca.Router.from_state(v1)
    assert router.pending == [e[0] for e in v2["pending"]] and router.max_pending is None
    np.testing.assert_array_equal(router.Q, v2["Q"])
    x = np.linspace(-1, 1, 3)
    assert router.assign(x) == ca.Router.from_state(copy.deepcopy(v2)).assign(x)
