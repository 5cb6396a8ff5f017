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
       caps=capacities, policy=st.sampled_from(ca.ONLINE_POLICIES + ("offline-tree", None)),
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
        model = router._model
        assert np.all(np.isfinite(model._theta)) and np.all(np.isfinite(model._Sigma))
    if router.policy == "marginal":
        assert np.all(np.isfinite(router._model._s))


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


# --- stored sweep cells --------------------------------------------------------------
#
# A finished sweep's cells are damaged at random (bytes replaced, truncated, a
# field set to any JSON value, another cell copied over, a directory put in
# place).  Started again, the sweep must return exactly the undamaged table,
# or refuse with an error that names the damaged path; every warning must
# name the cell it is about.  The deadline bounds the time of one example.

import os  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import warnings  # noqa: E402
from datetime import timedelta  # noqa: E402
from pathlib import Path  # noqa: E402

SWEEP_FUZZ = settings(derandomize=True, max_examples=25, deadline=timedelta(seconds=60),
                      suppress_health_check=[HealthCheck.too_slow,
                                             HealthCheck.data_too_large])
_SWEEP_BASE = {}


def _fuzz_sweep(out):
    X, R, _ = ca.synthetic_stream(80, 2, seed=4)
    return ca.sweep({"t": (X, R)}, ["random", "marginal"], [0.5], out, runs=4, block=2,
                    backend="sequential")


def _sweep_base():
    if not _SWEEP_BASE:
        base = Path(tempfile.mkdtemp(prefix="capassign-fuzz-"))
        _SWEEP_BASE["df"] = _fuzz_sweep(base / "sweep")
        _SWEEP_BASE["dir"] = base / "sweep"
    return _SWEEP_BASE["dir"], _SWEEP_BASE["df"]


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-5, 5), weird_number.filter(
        lambda v: not isinstance(v, str)), st.text(max_size=4)),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=4), inner, max_size=3)),
    max_leaves=8)
cell_damage = st.one_of(
    st.tuples(st.just("bytes"), st.binary(max_size=40)),
    st.tuples(st.just("truncate"), st.integers(0, 400)),
    st.tuples(st.just("field"), st.sampled_from(["schema", "key", "errors", "assigned",
                                                 "checksum", "extra"]), json_values),
    st.tuples(st.just("item"), st.sampled_from(["errors", "assigned"]), st.integers(0, 3),
              json_values),
    st.tuples(st.just("copy"), st.integers(0, 3)),
    st.tuples(st.just("directory"),),
    st.tuples(st.just("delete"),))


def _damage(path, cells, how):
    kind = how[0]
    if kind == "bytes":
        path.write_bytes(how[1])
    elif kind == "truncate":
        path.write_bytes(path.read_bytes()[:how[1]])
    elif kind == "copy":
        path.write_bytes(cells[how[1] % len(cells)].read_bytes())
    elif kind == "directory":
        path.unlink()
        path.mkdir()
    elif kind == "delete":
        path.unlink()
    else:   # edit a record that an earlier damage may already have broken
        try:
            rec = json.loads(path.read_bytes())
        except ValueError:
            return
        if not isinstance(rec, dict):
            return
        if kind == "field":
            rec[how[1]] = how[2]
        elif isinstance(rec.get(how[1]), list) and rec[how[1]]:
            rows = rec[how[1]]
            rows[how[2] % len(rows)] = how[3]
        path.write_text(json.dumps(rec))


@SWEEP_FUZZ
@given(damage=st.lists(st.tuples(st.integers(0, 3), cell_damage), min_size=1, max_size=3))
def test_damaged_sweep_cells_fuzz(damage):
    base, expected = _sweep_base()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "sweep"
        shutil.copytree(base, out)
        cells = sorted(p for p in (out / "cells").glob("*.json"))
        assert len(cells) == 4
        damaged = set()
        for index, how in damage:
            path = cells[index]
            if path.is_dir() or not path.exists():
                continue
            _damage(path, cells, how)
            damaged.add(path)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                df = _fuzz_sweep(out)
            except ValueError as exc:
                assert any(str(p) in str(exc) for p in damaged), str(exc)
                assert any(p.is_dir() for p in damaged), str(exc)   # the only refusal
                return
        assert df.equals(expected)
        named = [w for w in caught if issubclass(w.category, RuntimeWarning)]
        assert all(any(str(p) in str(w.message) for p in damaged) for w in named)
        for p in cells:          # every cell is whole again
            assert p.is_file() and os.path.getsize(p) > 0


# --- numerical edges of the capacity rule and the reference engine -------------------

import pytest  # noqa: E402


@pytest.mark.parametrize("mu, Q, eta, name", [
    ([np.nan, 0.9], [0, 0], 0.5, "mu"), ([0.1, np.inf], [0, 0], 0.5, "mu"),
    ([0.1, 0.9], [np.nan, 0], 0.5, "Q"), ([0.1, 0.9], [-1.0, 0], 0.5, "Q"),
    ([0.1, 0.9], [0, 0], -1.0, "eta"), ([0.1, 0.9], [0, 0], np.nan, "eta"),
    ([0.1, 0.9], [0, 0, 0], 0.5, "Q"), ([], [], 0.5, "mu"), ([[0.1]], [[0]], 0.5, "mu")])
def test_select_agent_refuses_bad_input(mu, Q, eta, name):
    with pytest.raises(ValueError, match=name) as exc:
        ca.select_agent(mu, Q, eta)
    if name == "eta":    # the module's one wording for eta
        with pytest.raises(ValueError) as same:
            ca._validate_eta(eta)
        assert str(exc.value) == str(same.value)


def test_select_agent_rule():
    assert ca.select_agent([0.9, 0.8], [1.0, 0.0], 0.5) == 1
    assert ca.select_agent([0.9, 0.8], [1.0, 0.0], 0) == 0
    assert ca.select_agent([0.5, 0.5], [0.0, 0.0], 2) == 0   # ties: lowest index


def test_reference_engine_with_huge_contexts_keeps_capacities():
    X, R, _ = ca.synthetic_stream(300, 3, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # no RuntimeWarning (overflow, inf - inf)
        ref = ca.simulate(X * 1e200, R, [0.3, 0.7], "logistic-greedy", runs=1, seed=2,
                          engine="reference")
        model = ca.LaplaceLogistic(3)
        model.update(X[0] * 1e200, 1)
    fast = ca.simulate(X * 1e200, R, [0.3, 0.7], "logistic-greedy", runs=1, seed=2)
    assert abs(ref.assigned[0, 0] - 0.3) < 0.01
    np.testing.assert_array_equal(ref.assigned, fast.assigned)
    np.testing.assert_array_equal(ref.errors, fast.errors)
    assert np.all(np.isfinite(model.theta)) and np.all(np.isfinite(model.Sigma))
