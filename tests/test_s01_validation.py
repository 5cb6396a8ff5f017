"""One rule for bad arguments, and the declared public API (``__all__``).

The convention: an argument of the wrong type raises TypeError, one of the
right type with a value out of range raises ValueError; bools are not numbers.
The same mistake gets the same exception type and the same message at every
public entry point.  Every case is checked before any work starts (the
``no_work`` fixture makes the simulation's first step fail loudly).
"""

import ast
import inspect
import math
import re
from pathlib import Path

import numpy as np
import pytest

import capassign as ca
import capbook as cb

ROOT = Path(__file__).resolve().parents[1]

X, R, _ = ca.synthetic_stream(20, 2, 2, seed=0)
MU = np.tile([0.2, 0.8], (20, 1))
ERR = np.array([0.30, 0.32, 0.29, 0.31])
BASE = np.array([0.40, 0.41, 0.39, 0.42])


@pytest.fixture
def no_work(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("work started before validation finished")
    monkeypatch.setattr(ca, "_stream_orders", boom)


def _sweep(tmp_path, **kw):
    return ca.sweep({"t": (X, R)}, ["random"], [0.5], tmp_path / "sweep", n_jobs=1,
                    backend="sequential", **kw)


# argument -> {entry point: call with that argument set to v}
ENTRY_POINTS = {
    "runs": {
        "simulate": lambda v, p: ca.simulate(X, R, [0.5, 0.5], "random", runs=v),
        "sweep": lambda v, p: _sweep(p, runs=v),
        "error_vs_capacity": lambda v, p: ca.error_vs_capacity(X, R, ["random"], runs=v),
        "simulate_grid": lambda v, p: ca.simulate_grid(X, R, ["random"], [[0.5, 0.5]], runs=v),
        "simulate_known_mu": lambda v, p: ca.simulate_known_mu(MU, R, [0.5, 0.5], runs=v),
    },
    "seed": {
        "simulate": lambda v, p: ca.simulate(X, R, [0.5, 0.5], "random", seed=v),
        "sweep": lambda v, p: _sweep(p, seed=v),
        "error_vs_capacity": lambda v, p: ca.error_vs_capacity(X, R, ["random"], seed=v),
        "simulate_grid": lambda v, p: ca.simulate_grid(X, R, ["random"], [[0.5, 0.5]], seed=v),
        "simulate_known_mu": lambda v, p: ca.simulate_known_mu(MU, R, [0.5, 0.5], seed=v),
        "Router": lambda v, p: ca.Router(2, [0.5, 0.5], "random", seed=v),
        "synthetic_task": lambda v, p: ca.synthetic_task(T=10, seed=v),
        "synthetic_stream": lambda v, p: ca.synthetic_stream(10, 2, 2, seed=v),
        "load_task": lambda v, p: ca.load_task("synthetic", seed=v),
    },
    "T": {
        "synthetic_task": lambda v, p: ca.synthetic_task(T=v),
        "synthetic_stream": lambda v, p: ca.synthetic_stream(T=v),
    },
    "d": {
        "synthetic_task": lambda v, p: ca.synthetic_task(T=10, d=v),
        "synthetic_stream": lambda v, p: ca.synthetic_stream(T=10, d=v),
    },
    "n_agents": {
        "synthetic_task": lambda v, p: ca.synthetic_task(T=10, n_agents=v),
        "synthetic_stream": lambda v, p: ca.synthetic_stream(T=10, n_agents=v),
    },
    "B": {
        "batch_counts": lambda v, p: ca.batch_counts(v, [0.5, 0.5], [0.0, 0.0]),
        "batch_queue_update": lambda v, p: ca.batch_queue_update([0.0, 0.0], [1, 1],
                                                                 [0.5, 0.5], v),
    },
    "batch_size": {
        "simulate": lambda v, p: ca.simulate(X, R, [0.5, 0.5], "random", batch_size=v),
        "simulate_grid": lambda v, p: ca.simulate_grid(X, R, ["random"], [[0.5, 0.5]],
                                                       batch_size=v),
    },
    "max_runs": {"runs_needed": lambda v, p: ca.runs_needed(ERR, BASE, max_runs=v)},
    "bins": {"accuracy_by_context": lambda v, p: ca.accuracy_by_context(X[:, 0], R, bins=v)},
    "eta": {
        "simulate": lambda v, p: ca.simulate(X, R, [0.5, 0.5], "random", eta=v),
        "sweep": lambda v, p: _sweep(p, eta=v),
        "error_vs_capacity": lambda v, p: ca.error_vs_capacity(X, R, ["random"], eta=v),
        "simulate_grid": lambda v, p: ca.simulate_grid(X, R, ["random"], [[0.5, 0.5]], eta=v),
        "simulate_known_mu": lambda v, p: ca.simulate_known_mu(MU, R, [0.5, 0.5], eta=v),
        "Router": lambda v, p: ca.Router(2, [0.5, 0.5], "random", eta=v),
    },
    # the step of one decision: a number only (no schedule)
    "eta_t": {"select_agent": lambda v, p: ca.select_agent([0.2, 0.8], [0.0, 0.0], v)},
    "alpha": {
        "two_agent_threshold": lambda v, p: ca.two_agent_threshold([-1.0, 1.0], v),
        "disagreement_gain": lambda v, p: ca.disagreement_gain([-1.0, 1.0], v),
    },
    "level": {
        "difference_ci": lambda v, p: ca.difference_ci(ERR, BASE, level=v),
        "runs_needed": lambda v, p: ca.runs_needed(ERR, BASE, level=v),
    },
    "engine": {
        "simulate": lambda v, p: ca.simulate(X, R, [0.5, 0.5], "random", engine=v),
        "sweep": lambda v, p: _sweep(p, engine=v),
        "error_vs_capacity": lambda v, p: ca.error_vs_capacity(X, R, ["random"], engine=v),
        "simulate_grid": lambda v, p: ca.simulate_grid(X, R, ["random"], [[0.5, 0.5]],
                                                       engine=v),
    },
    "policies[0]": {
        "sweep": lambda v, p: ca.sweep({"t": (X, R)}, [v], [0.5], p / "sweep"),
        "error_vs_capacity": lambda v, p: ca.error_vs_capacity(X, R, [v]),
        "simulate_grid": lambda v, p: ca.simulate_grid(X, R, [v], [[0.5, 0.5]]),
    },
    "paired": {
        "difference_ci": lambda v, p: ca.difference_ci(ERR, BASE, paired=v),
        "runs_needed": lambda v, p: ca.runs_needed(ERR, BASE, paired=v),
    },
}

# the lower bound of each integer argument
INT_LO = {"runs": 1, "seed": 0, "T": 1, "d": 1, "n_agents": 2, "B": 1, "batch_size": 1,
          "max_runs": 2, "bins": 1}
POLICY_NAMES = ", ".join(repr(p) for p in ca.POLICIES)


def _int_cases(arg):
    lo = INT_LO[arg]
    msg = f"{arg} must be an integer >= {lo}, got {{!r}}"
    bad = [(2.5, TypeError), (True, TypeError), (np.bool_(False), TypeError), ("3", TypeError),
           (lo - 1, ValueError), (np.int64(lo - 1), ValueError)]
    return [(arg, v, err, msg.format(v)) for v, err in bad]


def _cases():
    cases = []
    for arg in INT_LO:
        cases += _int_cases(arg)
    eta = "eta must be a finite number >= 0, got {!r}"
    cases += [("eta", v, err, eta.format(v)) for v, err in
              [(-1, ValueError), (-0.5, ValueError), (math.nan, ValueError),
               (math.inf, ValueError)]]
    # a value of the wrong kind: eta may also be a step schedule
    eta_kind = "eta must be a finite number >= 0 or a DecayingEta, got {!r}"
    cases += [("eta", v, TypeError, eta_kind.format(v)) for v in ("0.5", True, None)]
    cases += [("eta_t", v, err, eta.format(v)) for v, err in
              [(-1, ValueError), (math.nan, ValueError), ("0.5", TypeError),
               (True, TypeError), (None, TypeError)]]
    alpha = "alpha must be a finite number in [0, 1], got {!r}"
    cases += [("alpha", v, err, alpha.format(v)) for v, err in
              [(1.5, ValueError), (-0.1, ValueError), (math.nan, ValueError),
               ("0.5", TypeError), (False, TypeError)]]
    level = "level must be a finite number in (0, 1), got {!r}"
    cases += [("level", v, err, level.format(v)) for v, err in
              [(0, ValueError), (1.0, ValueError), (95, ValueError), ("0.95", TypeError),
               (True, TypeError)]]
    engine = "engine must be one of 'fast', 'reference', got {!r}"
    cases += [("engine", v, err, engine.format(v)) for v, err in
              [("gpu", ValueError), ("Fast", ValueError), (1, TypeError), (None, TypeError)]]
    pol = f"policies[0] must be one of {POLICY_NAMES}, got {{!r}}"
    cases += [("policies[0]", v, err, pol.format(v)) for v, err in
              [("ucb", ValueError), (3, TypeError), (None, TypeError)]]
    paired = "paired must be True or False, got {!r}"
    cases += [("paired", v, TypeError, paired.format(v)) for v in (1, "yes", None)]
    return [pytest.param(arg, entry, v, err, msg, id=f"{arg}={v!r}-{entry}")
            for arg, v, err, msg in cases for entry in ENTRY_POINTS[arg]]


@pytest.mark.parametrize("arg, entry, value, err, message", _cases())
def test_same_mistake_same_error_everywhere(no_work, tmp_path, arg, entry, value, err,
                                            message):
    with pytest.raises(err) as info:
        ENTRY_POINTS[arg][entry](value, tmp_path)
    assert type(info.value) is err
    assert str(info.value) == message


def test_policy_argument_of_simulate_and_router():
    for call, allowed in ((lambda v: ca.simulate(X, R, [0.5, 0.5], v), ca.POLICIES),
                          (lambda v: ca.Router(2, [0.5, 0.5], v), ca.ONLINE_POLICIES)):
        names = ", ".join(repr(p) for p in allowed)
        with pytest.raises(ValueError) as info:
            call("ucb")
        assert str(info.value) == f"policy must be one of {names}, got 'ucb'"
        with pytest.raises(TypeError) as info:
            call(None)
        assert str(info.value) == f"policy must be one of {names}, got None"


@pytest.mark.parametrize("call, name", [
    (lambda: ca.simulate(X, R, [0.5, 0.5], "random", runs=1, return_traces=1), "return_traces"),
    (lambda: ca.error_vs_capacity(X, R, ["random"], runs=1, hindsight="yes"), "hindsight"),
    (lambda: ca.disagreement_gain([-1.0, 1.0], 0.5, allow_outside=0), "allow_outside"),
])
def test_flags_must_be_bools(no_work, call, name):
    with pytest.raises(TypeError, match=rf"^{name} must be True or False, got "):
        call()


def test_integers_of_every_numpy_kind_are_accepted():
    assert ca._validate_int(np.int32(3), "runs", lo=1) == 3
    assert ca._validate_int(np.uint8(0), "seed") == 0
    assert ca._validate_real(np.float32(0.5), "eta", lo=0.0) == 0.5
    assert ca._validate_real(2, "eta", lo=0.0) == 2.0
    with pytest.raises(ValueError, match=r"^x must be an integer in \[1, 3\], got 4$"):
        ca._validate_int(4, "x", 1, 3)


# --- capacity vectors, arrays and lists of names ------------------------------------

# every entry point that takes one capacity vector for two agents
CAPACITY_ENTRY_POINTS = {
    "simulate": lambda v: ca.simulate(X, R, v, "random", runs=1),
    "simulate_known_mu": lambda v: ca.simulate_known_mu(MU, R, v, runs=1),
    "Router": lambda v: ca.Router(2, v, "random"),
    "VirtualQueues": lambda v: ca.VirtualQueues(v),
    "optimal_assignment": lambda v: ca.optimal_assignment(MU[:2], v),
    "random_assignment_value": lambda v: ca.random_assignment_value(MU[:2], v),
    "hindsight_optimum": lambda v: ca.hindsight_optimum(R, v),
}

CAPACITY_CASES = [
    ([1.5, -0.5], ValueError, "capacities[0] must be a finite number in [0, 1], got 1.5"),
    ([0.5, math.nan], ValueError, "capacities[1] must be a finite number in [0, 1], got nan"),
    (["0.5", 0.5], TypeError, "capacities[0] must be a finite number in [0, 1], got '0.5'"),
    ([True, 0.0], TypeError, "capacities[0] must be a finite number in [0, 1], got True"),
    ("0.5,0.5", TypeError,
     "capacities must be a sequence of numbers (or None for a free agent), got str"),
    (None, TypeError,
     "capacities must be a sequence of numbers (or None for a free agent), got NoneType"),
    ([None, None], ValueError, "capacities: at least one agent must be capacity-constrained"),
]


@pytest.mark.parametrize("entry", CAPACITY_ENTRY_POINTS)
@pytest.mark.parametrize("value, err, message", CAPACITY_CASES,
                         ids=[repr(c[0]) for c in CAPACITY_CASES])
def test_same_capacity_mistake_same_error_everywhere(no_work, entry, value, err, message):
    with pytest.raises(err) as info:
        CAPACITY_ENTRY_POINTS[entry](value)
    assert type(info.value) is err
    assert str(info.value) == message


@pytest.mark.parametrize("value, message", [
    ([0.6, 0.6], "capacities sum to 1.2; they must sum to 1 (within 1e-09) when every agent "),
    ([1.0], "capacities has 1 entries but there are 2 agents; give one capacity per agent"),
])
def test_capacities_of_wrong_sum_or_length_same_error_everywhere(no_work, value, message):
    for entry, call in CAPACITY_ENTRY_POINTS.items():
        if entry == "VirtualQueues":     # no agent count to compare the length with
            continue
        with pytest.raises(ValueError) as info:
            call(value)
        assert str(info.value).startswith(message), entry
    with pytest.raises(ValueError, match=r"^capacities must list at least two agents, got 1$"):
        ca.VirtualQueues([1.0])


EMPTY_2D = np.zeros((0, 2))

# (entry point, argument, message) for an array with too few rows
EMPTY_ARRAY_CASES = [
    (lambda: ca.optimal_assignment(EMPTY_2D, [0.5, 0.5]), "mu", "one row", (0, 2)),
    (lambda: ca.random_assignment_value(EMPTY_2D, [0.5, 0.5]), "mu", "one row", (0, 2)),
    (lambda: ca.hindsight_optimum(EMPTY_2D, [0.5, 0.5]), "R", "one row", (0, 2)),
    (lambda: ca.two_agent_threshold([], 0.5), "delta", "one entry", (0,)),
    (lambda: ca.disagreement_regions([]), "delta", "one entry", (0,)),
    (lambda: ca.disagreement_gain([], 0.5), "delta", "one entry", (0,)),
    (lambda: ca.first_pc([[0.0, 1.0]]), "E", "two rows", (1, 2)),
]


@pytest.mark.parametrize("call, name, rows, shape", EMPTY_ARRAY_CASES,
                         ids=[f"{c[1]}-{i}" for i, c in enumerate(EMPTY_ARRAY_CASES)])
def test_too_few_rows_one_wording(call, name, rows, shape):
    with pytest.raises(ValueError) as info:
        call()
    assert str(info.value) == f"{name} must have at least {rows}, got shape {shape}"


@pytest.mark.parametrize("call", [
    lambda v: ca.optimal_assignment(v, [0.5, 0.5]),
    lambda v: ca.random_assignment_value(v, [0.5, 0.5]),
    lambda v: ca.shadow_price_policy(v, [0.0, 0.0], [0.5, 0.5]),
])
def test_bad_mu_same_error_everywhere(call):
    with pytest.raises(ValueError, match=r"^mu contains NaN or infinite values$"):
        call([[0.1, math.nan]])
    with pytest.raises(ValueError, match=r"^mu must be a 2-d array, got shape \(2,\)$"):
        call([0.1, 0.2])
    with pytest.raises(TypeError, match=r"^mu must be a numeric array$"):
        call([["a", "b"]])


# every entry point that takes probabilities of two context points
WEIGHTS_ENTRY_POINTS = {
    "optimal_assignment": lambda w: ca.optimal_assignment(MU[:2], [0.5, 0.5], w),
    "random_assignment_value": lambda w: ca.random_assignment_value(MU[:2], [0.5, 0.5], w),
    "shadow_price_policy": lambda w: ca.shadow_price_policy(MU[:2], [0.0, 0.0], [0.5, 0.5], w),
    "two_agent_threshold": lambda w: ca.two_agent_threshold([0.1, -0.1], 0.5, w),
    "disagreement_regions": lambda w: ca.disagreement_regions([0.1, -0.1], w),
    "disagreement_gain": lambda w: ca.disagreement_gain([0.1, -0.1], 0.5, w),
}


@pytest.mark.parametrize("entry", WEIGHTS_ENTRY_POINTS)
@pytest.mark.parametrize("value, err, message", [
    ([1.5, -0.5], ValueError, "weights must be non-negative, got minimum -0.5"),
    ([0.25, 0.25], ValueError,
     "weights sum to 0.5; they must be probabilities summing to 1 (within 1e-09)"),
    ([0.5, 0.25, 0.25], ValueError, "weights must have shape (2,), got (3,)"),
    ([0.5, math.nan], ValueError, "weights contains NaN or infinite values"),
    ([["a", "b"]], TypeError, "weights must be a numeric array"),
], ids=["negative", "sum", "length", "nan", "text"])
def test_same_weights_mistake_same_error_everywhere(entry, value, err, message):
    with pytest.raises(err) as info:
        WEIGHTS_ENTRY_POINTS[entry](value)
    assert type(info.value) is err
    assert str(info.value) == message


# every entry point that takes a reward matrix of 20 tasks and two agents
REWARD_ENTRY_POINTS = {
    "simulate": lambda R: ca.simulate(X, R, [0.5, 0.5], "random", runs=1),
    "error_vs_capacity": lambda R: ca.error_vs_capacity(X, R, ["random"], runs=1),
    "hindsight_optimum": lambda R: ca.hindsight_optimum(R, [0.5, 0.5]),
    "simulate_known_mu": lambda R: ca.simulate_known_mu(MU, R, [0.5, 0.5], runs=1),
}


@pytest.mark.parametrize("entry", REWARD_ENTRY_POINTS)
def test_same_reward_mistake_same_error_everywhere(no_work, entry):
    wrong = R.astype(float)
    wrong[3, 1] = 1.5                     # graded rewards in [0, 1] are allowed; 1.5 is not
    with pytest.raises(ValueError) as info:
        REWARD_ENTRY_POINTS[entry](wrong)
    assert str(info.value) == f"R: {ca.REWARD_RULE}; got 1.5 at index [3, 1]"


def test_array_of_wrong_shape_one_wording():
    res = ca.optimal_assignment(MU[:2], [0.5, 0.5])
    cases = [
        (lambda: res.adjusted_rewards([[0.1, 0.2, 0.3]]), "mu must have shape (*, 2), got (1, 3)"),
        (lambda: ca.shadow_price_policy(MU, [0.0, 0.0, 0.0]),
         "shadow_prices must have shape (2,), got (3,)"),
        (lambda: ca.accuracy_by_context(X[:5, 0], R), "R must have shape (5, *), got (20, 2)"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError) as info:
            call()
        assert str(info.value) == message


def test_sort_method_needs_two_agents_one_wording():
    R3 = np.array([[1, 0, 1], [0, 1, 1]])
    with pytest.raises(ValueError) as info:
        ca.hindsight_optimum(R3, [0.5, 0.25, 0.25], method="sort")
    assert str(info.value) == "method='sort' needs exactly two agents, R has 3 columns"
    with pytest.raises(ValueError) as info:
        ca.batch_assign(R3.astype(float), [1, 1, 0], method="sort")
    assert str(info.value) == "method='sort' needs exactly two agents, scores has 3 columns"


def test_lists_of_names_one_wording():
    subjects = ", ".join(repr(s) for s in ca.MMLU_SUBJECTS)
    cases = [
        (lambda: ca.mmlu_questions(splits="val"), TypeError,
         "splits must be a list of names, got 'val'"),
        (lambda: ca.mmlu_questions(splits=["val", "train"]), ValueError,
         "splits[1] must be one of 'val', 'test', got 'train'"),
        (lambda: ca.mmlu_questions(subjects=["nope"]), ValueError,
         f"subjects[0] must be one of {subjects}, got 'nope'"),
        (lambda: ca.mmlu_models(subjects=["nope"]), ValueError,
         f"subjects[0] must be one of {subjects}, got 'nope'"),
        (lambda: ca.mmlu_questions(subjects=[]), ValueError,
         "subjects must be a non-empty list of names, got []"),
        (lambda: ca.tabular_agent_accuracies("bank", range(1), agents=["gpt"]), ValueError,
         "agents[0] must be one of 'ordinal', 'onehot', 'xgboost', got 'gpt'"),
        (lambda: ca.tabular_agent_accuracies("bank", range(1), agents="xgboost"), TypeError,
         "agents must be a list of names, got 'xgboost'"),
        (lambda: ca.mmlu_task("openai_davinci"), TypeError,
         "models must be a list of at least 2 names, got 'openai_davinci'"),
        (lambda: ca.mmlu_task(["openai_davinci", "openai_davinci"]), ValueError,
         "models must not repeat a name, got ['openai_davinci', 'openai_davinci']"),
    ]
    for call, err, message in cases:
        with pytest.raises(err) as info:
            call()
        assert type(info.value) is err
        assert str(info.value) == message


def test_validate_names():
    assert ca._validate_names(("a", "b"), "abc", "x") == ["a", "b"]
    assert ca._validate_names([], "abc", "x", min_count=0) == []
    with pytest.raises(ValueError, match=r"^x must be a list of at least 2 names, got \['a'\]$"):
        ca._validate_names(["a"], "abc", "x", min_count=2)
    with pytest.raises(ValueError, match=r"^x must not repeat a name, got \['a', 'a'\]$"):
        ca._validate_names(["a", "a"], "abc", "x", unique=True)
    with pytest.raises(TypeError, match=r"^x\[0\] must be one of 'a', 'b', got 1$"):
        ca._validate_names([1], "ab", "x")
    with pytest.raises(TypeError, match=r"^x must be a non-empty list of names, got 3$"):
        ca._validate_names(3, "ab", "x")


@pytest.mark.parametrize("argv, message", [
    (["bench", "--T", "0"], "--T must be an integer >= 1, got 0"),
    (["bench", "--fast-runs", "-1"], "--fast-runs must be an integer >= 1, got -1"),
    (["bench", "--policies", "offline-tree"],
     "--policies[0] must be one of " + ", ".join(repr(p) for p in ca.ONLINE_POLICIES)
     + ", got 'offline-tree'"),
    (["validate-engines", "--tasks", "bank,nope", "--out", "unused"],
     "--tasks[1] must be one of " + ", ".join(repr(t) for t in ca.TABULAR_TASKS)
     + ", got 'nope'"),
    (["validate-engines", "--pilot", "1", "--out", "unused"], "--pilot must be an integer >= 2, got 1"),
])
def test_command_line_uses_the_same_wording(capsys, argv, message):
    main = cb.main if argv[0] == "validate-engines" else ca.main   # the book's command
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert capsys.readouterr().err.rstrip("\n").endswith(message)


# --- the declared public API -----------------------------------------------------


def _assignments(module):
    """Name -> (source lines, line number) of every top-level assignment of ``module``."""
    lines = inspect.getsource(module).splitlines()
    assigned = {}
    for node in ast.parse(inspect.getsource(module)).body:
        target = (node.targets[0] if isinstance(node, ast.Assign) else
                  node.target if isinstance(node, ast.AnnAssign) else None)
        if isinstance(target, ast.Name):
            assigned[target.id] = (lines, node.lineno)
    return assigned


def _book_modules():
    import importlib
    import pkgutil

    return [importlib.import_module(f"capbook.{m.name}") for m in pkgutil.iter_modules(cb.__path__)
            if m.name != "__main__"]


@pytest.mark.parametrize("package", ["capassign", "capbook"])
def test_all_names_exist_once_and_are_documented(package):
    module = ca if package == "capassign" else cb
    home = [ca] if package == "capassign" else _book_modules()
    assert len(module.__all__) == len(set(module.__all__))
    assigned = {k: v for m in home for k, v in _assignments(m).items()}
    for name in module.__all__:
        assert hasattr(module, name), name
        obj = getattr(module, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert getattr(obj, "__module__", "").split(".")[0] == package, name
            own = vars(obj).get("__doc__") if inspect.isclass(obj) else obj.__doc__
            assert (own or "").strip(), f"{name} has no docstring"
        else:                    # data: a ``#:`` comment right above its assignment
            assert name in assigned, name
            lines, lineno = assigned[name]
            assert lines[lineno - 2].startswith("#:"), f"{name} is not documented"


def test_the_library_knows_nothing_of_the_book():
    """capassign imports none of the book's tool chain (nor the book module), names no
    path inside the book and exports none of the book's names."""
    src = inspect.getsource(ca)
    for word in ("jupytext", "nbformat", "papermill", "myst_nb", "book/", "import capbook",
                 "from capbook"):
        assert word not in src, word
    assert set(ca.__all__) & set(cb.__all__) == {"main"}   # each its own command line


def _references(paths, pattern):
    found = {}
    for path in paths:
        for m in re.finditer(pattern, path.read_text(encoding="utf-8")):
            found.setdefault(m.group(1), path.name)
    return found


def test_every_name_the_book_and_readme_use_is_public():
    docs = sorted((ROOT / "book" / "chapters").glob("*.md")) + [ROOT / "README.md"]
    # quoted strings such as "capassign.router/2" and the file name capassign.py are
    # not attribute references
    used = _references(docs, r"(?<![\w\"'/])(?:ca|capassign)\.([A-Za-z]\w*)")
    used.pop("py", None)
    assert len(used) > 50
    missing = {n: where for n, where in used.items() if n not in ca.__all__}
    assert not missing, f"used but not in capassign.__all__: {missing}"


def test_every_name_the_tests_use_exists():
    """The tests also check names that are not public (a test of a part is not a use of
    the method): each must exist."""
    used = _references(sorted((ROOT / "tests").rglob("test_*.py")), r"\bca\.([A-Za-z]\w*)")
    assert len(used) > 50
    absent = {n: where for n, where in used.items() if not hasattr(ca, n)}
    assert not absent, f"tests use names capassign does not have: {absent}"


def test_every_name_the_book_and_tests_use_of_the_book_module_is_public():
    docs = sorted((ROOT / "book" / "chapters").glob("*.md")) + [ROOT / "README.md"]
    used = _references(docs, r"(?<![\w\"'/])(?:cb|capbook)\.([A-Za-z]\w*)")
    used.update(_references(sorted((ROOT / "tests").rglob("test_*.py")), r"\bcb\.([A-Za-z]\w*)"))
    assert len(used) > 15
    missing = {n: where for n, where in used.items() if n not in cb.__all__}
    assert not missing, f"used but not in capbook.__all__: {missing}"


def _book_uses_of_the_library():
    """``{name: files}`` of every capassign name that capbook's code imports or reads as an
    attribute of the module (an import from it or an attribute of its alias; no dunders)."""
    used = {}
    for path in sorted((ROOT / "book" / "capbook").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        aliases = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.Import)
                   for a in n.names if a.name == "capassign"}
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom) and n.module == "capassign":
                names = [a.name for a in n.names]
            elif (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                  and n.value.id in aliases and not n.attr.startswith("__")):
                names = [n.attr]
            else:
                continue
            for name in names:
                used.setdefault(name, set()).add(path.name)
    return used


def test_the_book_uses_public_names_or_the_declared_book_api():
    used = _book_uses_of_the_library()
    assert len(used) > 40
    assert len(set(ca._BOOK_API)) == len(ca._BOOK_API)
    assert not set(ca._BOOK_API) & set(ca.__all__)
    assert all(hasattr(ca, name) for name in ca._BOOK_API)
    undeclared = {n: sorted(f) for n, f in used.items()
                  if n not in ca.__all__ and n not in ca._BOOK_API}
    assert not undeclared, f"capbook uses names neither in __all__ nor in _BOOK_API: {undeclared}"
    stale = sorted(set(ca._BOOK_API) - set(used))
    assert not stale, f"_BOOK_API lists names capbook no longer uses: {stale}"


def test_every_public_name_has_a_use():
    """A name is public because a user of the method calls it: the README, a chapter or
    data/README.md name it (as an attribute of the module or in backticks), or the
    book's code uses it."""
    docs = "\n".join(p.read_text(encoding="utf-8") for p in
                     sorted((ROOT / "book" / "chapters").glob("*.md"))
                     + [ROOT / "README.md", ROOT / "data" / "README.md"])
    used = _book_uses_of_the_library()
    unused = [n for n in ca.__all__ if n != "main" and n not in used
              and not re.search(rf"(?:\b(?:ca|capassign)\.|`){re.escape(n)}\b", docs)]
    assert not unused, f"public names with no use in the README, the book or data/README.md: {unused}"
    assert len(ca.__all__) <= 80


@pytest.mark.parametrize("package", ["capassign", "capbook"])
def test_star_import_gives_all(package):
    namespace = {}
    exec(f"from {package} import *", namespace)  # noqa: S102
    assert set(namespace) - {"__builtins__"} == set((ca if package == "capassign" else cb).__all__)


# --- memory: what cannot fit is refused before any work ---------------------------------

@pytest.mark.parametrize("text, limit", [("64M", 64 * 2**20), ("1.5G", 1.5 * 2**30),
                                         ("512MiB", 512 * 2**20), ("2gb", 2 * 2**30),
                                         ("1000", 1000.0), ("none", None), (" None ", None)])
def test_memory_limit_from_the_environment(monkeypatch, text, limit):
    monkeypatch.setenv(ca.MEMORY_ENV, text)
    assert ca._memory_limit()[0] == limit


@pytest.mark.parametrize("text", ["lots", "0", "-1G", "G", "1X", "nan", "inf"])
def test_memory_limit_bad_values_name_the_variable(monkeypatch, text):
    monkeypatch.setenv(ca.MEMORY_ENV, text)
    with pytest.raises(ValueError, match=f"^{ca.MEMORY_ENV}="):
        ca._memory_limit()


def test_default_memory_limit_is_a_fraction_of_physical_memory(monkeypatch):
    import os

    monkeypatch.delenv(ca.MEMORY_ENV, raising=False)
    limit, source = ca._memory_limit()
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert 0 < limit <= ca.MEMORY_FRACTION * physical
    assert ca.MEMORY_ENV in source


def test_simulate_refuses_what_memory_cannot_hold(no_work, monkeypatch):
    # runs x T task orders and 1 KiB of seeds per run: 10^5 runs of 20
    # tasks need about 113 MiB; 10^9 runs (default limit) about a TiB
    monkeypatch.setenv("CAPASSIGN_MEMORY_LIMIT", "64M")
    with pytest.raises(ValueError, match=r"^runs=100000 needs about 112\.9 MiB for 100,000 runs "
                                         r"of 20 tasks, over the limit of 64\.0 MiB "
                                         r"\(CAPASSIGN_MEMORY_LIMIT=64M\)$"):
        ca.simulate(X, R, [0.5, 0.5], "random", runs=100_000)
    monkeypatch.delenv("CAPASSIGN_MEMORY_LIMIT")
    with pytest.raises(ValueError, match=r"^runs=1000000000 needs about [\d.]+ TiB"):
        ca.simulate(X, R, [0.5, 0.5], "random", runs=10**9)


def test_memory_estimate_counts_traces_engines_and_forests():
    s = ca.PAPER_SETTINGS
    base = ca._simulation_memory(10, 1000, 4, 2, "random", "fast", False, s)
    assert base == 10 * (ca._RUN_BYTES + 8 * 1000)
    assert ca._simulation_memory(10, 1000, 4, 2, "random", "fast", True, s) == base + 10 * 1000 * 20
    assert ca._simulation_memory(10, 1000, 4, 2, "random", "reference", False, s) == \
        base + 10 * 1000 * 40
    tree = ca._simulation_memory(10, 1000, 4, 2, "tree-ts", "fast", False, s)
    workers = min(10, __import__("os").cpu_count() or 1)
    assert tree == base + 1000 * 4 + workers * 2 * 1000 * (s.n_trees + 21)
