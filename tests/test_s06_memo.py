"""The memo of simulations (``CAPASSIGN_MEMO``): an identical call is read back,
anything else - another argument, datum or source - is computed afresh.

The test run sets the variable for the notebooks only (conftest.py); each test
here sets its own folder.
"""

import dataclasses

import numpy as np
import pytest

import capassign as ca


@pytest.fixture()
def memo(tmp_path, monkeypatch):
    folder = tmp_path / "memo"
    monkeypatch.setenv(ca.MEMO_ENV, str(folder))
    return folder


@pytest.fixture()
def counted(monkeypatch):
    """Count the simulations actually computed (calls of the engine dispatch)."""
    calls = []
    real = ca._run_policy

    def run_policy(*args, **kwargs):
        calls.append(args[4].policy)
        return real(*args, **kwargs)

    monkeypatch.setattr(ca, "_run_policy", run_policy)
    return calls


@pytest.fixture(scope="module")
def stream():
    X, R, _ = ca.synthetic_stream(300, 3, seed=5)
    return X, R


def _same(a, b):
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), f.name
        else:
            assert type(x) is type(y) and x == y, f.name


def test_identical_call_is_read_back(memo, counted, stream):
    X, R = stream
    first = ca.simulate(X, R, [0.4, 0.6], "tree-greedy", runs=2, seed=3, return_traces=True)
    assert counted == ["tree-greedy"] and len(list(memo.glob("*.npz"))) == 1
    again = ca.simulate(X, R, [0.4, 0.6], "tree-greedy", runs=2, seed=3, return_traces=True)
    assert counted == ["tree-greedy"]                 # not computed again
    _same(first, again)
    # the same call with the defaults spelled out is the same call
    ca.simulate(X, R, [0.4, 0.6], "tree-greedy", eta=ca.DEFAULT_ETA, runs=2, seed=3,
                settings=ca.PAPER_SETTINGS, batch_size=None, engine="fast",
                return_traces=True)
    assert counted == ["tree-greedy"]


@pytest.mark.parametrize("change", [
    dict(seed=4), dict(runs=3), dict(eta=0.25), dict(eta=ca.PAPER_ETA),
    dict(eta=ca.DecayingEta(eta0=0.5)), dict(capacities=[0.5, 0.5]),
    dict(policy="tree-ts"), dict(batch_size=10),
    dict(settings=ca.ModelSettings(discount=0.99)), dict(engine="reference"),
    dict(X="changed"), dict(R="changed")])
def test_changed_argument_misses(memo, counted, stream, change):
    X, R = stream
    base = dict(X=X, R=R, capacities=[0.4, 0.6], policy="marginal", runs=2, seed=3,
                return_traces=True)
    ca.simulate(**base)
    call = {**base, **change}
    if change.get("X") == "changed":
        call["X"] = X.copy()
        call["X"][17, 1] += 1e-12
    if change.get("R") == "changed":
        call["R"] = R.copy()
        call["R"][5, 0] = 1 - call["R"][5, 0]
    got = ca.simulate(**call)
    assert len(counted) == 2                          # computed, not read back
    _same(got, ca.simulate.__wrapped__(**call))       # and equal to a call without memo
    assert len(list(memo.glob("*.npz"))) == 2


def test_changed_source_misses(memo, counted, stream, monkeypatch):
    X, R = stream
    ca.simulate(X, R, [0.4, 0.6], "random", runs=2)
    monkeypatch.setattr(ca, "_SOURCE_SHA256", "0" * 64)   # another version of the module
    ca.simulate(X, R, [0.4, 0.6], "random", runs=2)
    assert counted == ["random", "random"]
    monkeypatch.setattr(ca, "_EARLY_EXIT", False)
    ca.simulate(X, R, [0.4, 0.6], "random", runs=2)
    assert len(counted) == 3


def test_off_by_default_and_unhashable_arguments_compute(tmp_path, counted, stream,
                                                         monkeypatch):
    X, R = stream
    monkeypatch.delenv(ca.MEMO_ENV, raising=False)
    for _ in range(2):
        ca.simulate(X, R, [0.4, 0.6], "random", runs=2)
    assert len(counted) == 2
    monkeypatch.setenv(ca.MEMO_ENV, str(tmp_path))
    caps = np.array([0.4, 0.6], dtype=object)          # an argument the memo cannot hash
    for _ in range(2):
        ca.simulate(X, R, [0.4, 0.6], "random", runs=2, settings=ca.PAPER_SETTINGS)
        ca.simulate(X, R, caps, "random", runs=2)
    assert len(counted) == 5 and len(list(tmp_path.glob("*.npz"))) == 1


def test_damaged_entry_is_computed_again(memo, counted, stream):
    X, R = stream
    first = ca.simulate(X, R, [0.4, 0.6], "random", runs=2)
    (path,) = memo.glob("*.npz")
    path.write_bytes(b"not an npz file")
    again = ca.simulate(X, R, [0.4, 0.6], "random", runs=2)
    assert len(counted) == 2
    _same(first, again)
    assert not list(memo.glob("*.tmp"))               # written atomically, nothing left over


def test_keys_tell_kinds_apart():
    f = ca.simulate.__wrapped__

    def key(caps, X=np.zeros((2, 1))):
        return ca._memo_key(f, (X, np.zeros((2, 2), np.uint8), caps, "random"), {})

    keys = {key(caps) for caps in ([1, 0], [1.0, 0.0], [True, False], [1.0, None])}
    assert len(keys) == 4
    assert key((1.0, 0.0)) == key([1.0, 0.0])         # a sequence is a sequence
    assert key([1.0, 0.0], np.zeros((2, 1), np.float32)) != key([1.0, 0.0])
    assert key([1.0, 0.0], np.zeros((1, 2))) != key([1.0, 0.0])
    assert key([1.0, 0.0], -np.zeros((2, 1))) != key([1.0, 0.0])      # -0.0: other bytes


def test_traced_result_answers_a_call_without_traces(memo, counted, stream):
    X, R = stream
    traced = ca.simulate(X, R, [0.4, 0.6], "tree-ts", runs=2, seed=3, return_traces=True)
    plain = ca.simulate(X, R, [0.4, 0.6], "tree-ts", runs=2, seed=3)
    assert counted == ["tree-ts"]
    assert plain.orders is None and traced.orders is not None
    # not the other way round: a call with traces needs them
    ca.simulate(X, R, [0.4, 0.6], "marginal", runs=2, seed=3)
    ca.simulate(X, R, [0.4, 0.6], "marginal", runs=2, seed=3, return_traces=True)
    assert counted == ["tree-ts", "marginal", "marginal"]
    _same(plain, ca.simulate.__wrapped__(X, R, [0.4, 0.6], "tree-ts", runs=2, seed=3))


@pytest.mark.parametrize("policy", ca.POLICIES)
@pytest.mark.parametrize("batch_size", [None, 7])
def test_traces_change_no_number(stream, policy, batch_size):
    # what lets a traced result answer an untraced call
    X, R = stream
    if batch_size and policy in ca.OFFLINE_POLICIES:
        return
    kw = dict(runs=2, seed=1, batch_size=batch_size)
    a = ca.simulate(X, R, [0.3, 0.7], policy, **kw)
    b = ca.simulate(X, R, [0.3, 0.7], policy, return_traces=True, **kw)
    _same(a, dataclasses.replace(b, orders=None, assignments=None, queues=None))
