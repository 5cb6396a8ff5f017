"""Section 5: a policy name is parsed once into (family, mode), and every family
has one registry entry (its reference models, its fast-engine arguments, its
router model).  No other code of the module tests a policy's name."""

import ast
import inspect
import re
from pathlib import Path

import numpy as np
import pytest

import capassign as ca

SOURCE = Path(ca.__file__).read_text(encoding="utf-8")
EVERY = ca.POLICIES + ca.EXPLORATION_POLICIES


@pytest.mark.parametrize("name, family, mode, offline", [
    ("random", "random", ca._GREEDY, False),
    ("marginal", "marginal", ca._GREEDY, False),
    ("logistic-greedy", "logistic", ca._GREEDY, False),
    ("logistic-ts", "logistic", ca._THOMPSON, False),
    ("logistic-ucb", "logistic", ca._UCB, False),
    ("tree-ts", "tree", ca._THOMPSON, False),
    ("tree-egreedy", "tree", ca._EGREEDY, False),
    ("marginal-egreedy", "marginal", ca._EGREEDY, False),
    ("offline-logistic", "logistic", ca._GREEDY, True),
    ("offline-tree", "tree", ca._GREEDY, True),
])
def test_a_policy_name_parses_into_family_and_mode(name, family, mode, offline):
    p = ca._parse_policy(name)
    assert (p.name, p.family, p.mode, p.offline) == (name, family, mode, offline)


def test_every_policy_has_a_registry_entry():
    for name in EVERY:
        model = ca._parse_policy(name).model
        assert issubclass(model, ca._RewardModel) and ca._FAMILIES[model_family(name)] is model
    assert ca._parse_policy("hindsight").offline          # a benchmark row of the experiments
    assert set(ca._FAMILIES) == {"random", "marginal", "logistic", "tree"}


def model_family(name):
    return ca._parse_policy(name).family


def test_stochastic_policies_are_those_that_draw():
    drawing = {p for p in EVERY if not ca._parse_policy(p).offline and ca._parse_policy(p).stochastic}
    assert drawing == {"random", "logistic-ts", "tree-ts", "marginal-egreedy",
                       "logistic-egreedy", "tree-egreedy"}


def _name_tests(tree):
    """(line, source) of every string test on a policy-like name outside _parse_policy."""
    parser = next(n for n in tree.body if isinstance(n, ast.FunctionDef)
                  and n.name == "_parse_policy")
    inside = set(range(parser.lineno, parser.end_lineno + 1))
    names = set(ca.POLICIES) | set(ca.EXPLORATION_POLICIES) | {"hindsight"}
    prefixes = {"random", "marginal", "logistic", "tree", "offline", "offline-", "-ts",
                "-greedy", "ts", "greedy"}
    found = []
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in inside:
            continue
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("startswith", "endswith") and node.args
                and isinstance(node.args[0], ast.Constant) and node.args[0].value in prefixes):
            found.append((node.lineno, ast.unparse(node)))
        if isinstance(node, ast.Compare):
            consts = [c for c in [node.left, *node.comparators] if isinstance(c, ast.Constant)]
            if any(c.value in names for c in consts) and re.search(
                    r"polic|family", ast.unparse(node)):
                found.append((node.lineno, ast.unparse(node)))
        if (isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant)
                and node.left.value in ("tree", "logistic") and any(
                    isinstance(o, (ast.In, ast.NotIn)) for o in node.ops)):
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_no_code_outside_the_parser_tests_a_policy_name():
    # Table rows of the experiments are selected by their label (the baseline,
    # the hindsight oracle): data, not a policy's family or mode.
    allowed = {"r.policy == baseline", "r.policy in (baseline, 'hindsight')",
               "r.policy == 'hindsight'"}
    found = [f for f in _name_tests(ast.parse(SOURCE)) if f[1] not in allowed]
    assert found == []


def test_the_name_check_sees_the_old_tests():
    # the check fails on the kinds of tests this module used to hold
    old = ('def f(policy):\n    if policy.startswith("tree"):\n        pass\n'
           '    t = policy.endswith("-ts")\n    if policy == "random":\n        pass\n'
           '    if "tree" in policy:\n        pass\n'
           'def _parse_policy(name):\n    return name.startswith("offline-")\n')
    assert len(_name_tests(ast.parse(old))) == 4


def test_reference_models_share_one_update_signature():
    for cls in (ca.LaplaceLogistic, ca.BootstrapTrees, ca.MarginalAccuracy):
        params = list(inspect.signature(cls.update).parameters.values())
        assert [p.name for p in params] == ["self", "x", "r", "rng"], cls
        assert params[-1].default is None, cls
    rng = np.random.default_rng(0)
    for model in (ca.LaplaceLogistic(2), ca.BootstrapTrees(), ca.MarginalAccuracy()):
        assert model.update(np.array([0.1, 0.2]), 1.0, rng) is model


@pytest.mark.parametrize("policy", ca.ONLINE_POLICIES + ca.EXPLORATION_POLICIES)
def test_each_family_fills_its_own_run_arguments(policy):
    X, _, _ = ca.synthetic_stream(50, 3, seed=0)
    args = ca._run_models(X, policy, ca.PAPER_SETTINGS)
    field = {"random": "random", "marginal": "marginal", "logistic": "logistic",
             "tree": "trees"}[model_family(policy)]
    assert [f for f in ("random", "marginal", "logistic", "trees") if getattr(args, f) is not None] \
        == [field]
    assert (args.mode_rule is not None) == policy.endswith(("-egreedy", "-ucb"))
    models = ca._parse_policy(policy).model.reference_models(X, 3, ca.PAPER_SETTINGS)
    assert (models is None) == (policy == "random") or len(models) == 3


def test_new_settings_leave_the_records_of_the_paper_unchanged():
    assert ca.PAPER_SETTINGS.fields() == {
        "gamma": 1.0, "kappa": 0.5, "w_min": 1e-4, "w_max": 0.25, "n_trees": 20, "max_depth": 3,
        "min_samples_leaf": 10, "refit_every": 20, "max_bins": 32}
    s = ca.ModelSettings(ucb_c=2.0, epsilon=0.05)
    assert s.fields()["ucb_c"] == 2.0 and s.fields()["epsilon"] == 0.05
    with pytest.raises(ValueError, match="settings.epsilon"):
        ca.ModelSettings(epsilon=1.5)
    with pytest.raises(ValueError, match="settings.ucb_c"):
        ca.ModelSettings(ucb_c=-1.0)


def test_a_router_state_with_new_settings_round_trips():
    import json
    X, R, _ = ca.synthetic_stream(80, 2, seed=1)
    s = ca.ModelSettings(epsilon=0.3, ucb_c=0.5)
    for policy in ("logistic-ucb", "marginal-egreedy"):
        rt = ca.Router(2, [0.5, 0.5], policy, n_features=2, settings=s, seed=3)
        for t in range(40):
            a = rt.assign(X[t]); rt.update(t, a, float(R[t, a]))
        back = ca.Router.from_state(json.loads(json.dumps(rt.state_dict())))
        assert back.settings == s
        assert [rt.assign(X[t]) for t in range(40, 80)] == [back.assign(X[t]) for t in range(40, 80)]
