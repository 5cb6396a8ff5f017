"""``Router.assign_batch(X, explain=True)``: a :class:`capassign.Decision` per
task, whose propensity is the probability that the batch rule (App. H.5) gave
the task its agent - 1 for the deterministic policies, a Monte Carlo share for
``random`` and Thompson sampling - and decisions equal to those of a batch
without ``explain``."""

import json

import numpy as np
import pytest

import capassign as ca

X, R, _ = ca.synthetic_stream(60, 3, seed=1)


def _trained(policy):
    router = ca.Router(["m", "h"], [0.7, 0.3], policy, n_features=3, seed=0,
                       X_reference=X if policy.startswith("tree") else None)
    for i in range(30):
        a = router.assign(X[i])
        router.update(i, a, R[i, router.agents.index(a)])
    return router


@pytest.mark.parametrize("policy", ["random", "logistic-ts", "tree-ts", "logistic-greedy",
                                    "marginal", "tree-greedy"])
def test_batch_propensities_are_the_choice_frequencies(policy):
    """Restored copies of one router, each with another decision stream, take
    the batch's decisions with the frequencies the propensities state."""
    router = _trained(policy)
    st = json.loads(json.dumps(router.state_dict()))
    ds = router.assign_batch(X[30:40], explain=True, n_draws=2000)
    assert [d.task_id for d in ds] == list(range(30, 40))
    chosen = [d.agent for d in ds]
    assert ca.Router.from_state(st).assign_batch(X[30:40]) == chosen   # explain changes nothing
    p = np.array([d.propensity for d in ds])
    se = np.array([d.propensity_se for d in ds])
    assert all(d.penalties == ds[0].penalties for d in ds)
    if policy.endswith("greedy") or policy == "marginal":
        assert np.all(p == 1) and np.all(se == 0) and all(d.n_draws == 0 for d in ds)
        assert all(d.estimates is not None for d in ds)
        return
    assert all(d.n_draws == 2000 for d in ds) and np.all((p > 0) & (p <= 1))
    assert (ds[0].estimates is None) == (policy == "random")
    n = 300 if policy != "tree-ts" else 150
    rs = np.random.default_rng(5)
    hits = np.zeros(len(ds))
    for _ in range(n):
        st["rng"] = [int(v) for v in rs.integers(1, 2 ** 63, 4)]
        hits += np.array(ca.Router.from_state(st).assign_batch(X[30:40])) == np.array(chosen)
    z = (hits / n - p) / np.sqrt(p * (1 - p) / n + se ** 2 + 1e-12)
    assert np.abs(z).max() < 4, (p, hits / n)


def test_batch_propensity_has_its_standard_error():
    """A Thompson propensity of a batch of one task: a probability in (0, 1]
    with the standard error sqrt(p (1 - p) / n_draws)."""
    d = _trained("logistic-ts").assign_batch(X[30:31], explain=True, n_draws=500)[0]
    assert 0 < d.propensity <= 1
    assert d.propensity_se == pytest.approx(np.sqrt(d.propensity * (1 - d.propensity) / 500))


def test_bad_explain_arguments():
    router = _trained("random")
    with pytest.raises(TypeError, match="explain"):
        router.assign_batch(X[30:32], explain="yes")
    with pytest.raises(ValueError, match="n_draws"):
        router.assign_batch(X[30:32], explain=True, n_draws=0)
