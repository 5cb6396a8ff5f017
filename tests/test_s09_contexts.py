"""The tabular tasks' contexts coded by column type.

The coding rule is data/README.md's "How the contexts are coded" (fixed on
2026-11-26); the old coding ("codes") must still give the contexts, and with
the old agents the whole task, of the version before the rule.
"""

import numpy as np
import pandas as pd
import pytest
from scipy.special import ndtri

import capassign as ca
from capbook import engines as cb_engines
from _helpers import or_skip as _or_skip


# --- normal scores ------------------------------------------------------------------


def test_normal_scores_follow_the_mid_rank_formula():
    ref = np.array([3.0, 1.0, 2.0, 2.0, 7.0])
    x = np.array([-5.0, 1.0, 2.0, 2.5, 7.0, 8.0])
    n = ref.size
    below = np.array([(ref < v).sum() for v in x])
    upto = np.array([(ref <= v).sum() for v in x])
    want = np.round(ndtri((below + upto + 1) / (2 * (n + 1))), 6)
    got = ca.normal_scores(x, ref)
    np.testing.assert_array_equal(got, want)
    # a reference value of rank r (no ties) scores ndtri(r / (n + 1)); ties get their mid-rank
    assert got[1] == round(float(ndtri(1 / 6)), 6)
    assert got[2] == round(float(ndtri(2.5 / 6)), 6)
    # outside the reference: the bound, symmetric
    assert -got[0] == got[-1] == round(float(-ndtri(1 / (2 * (n + 1)))), 6)


def test_normal_scores_are_monotone_bounded_rounded_and_signless_at_zero():
    rng = np.random.default_rng(0)
    ref = rng.standard_cauchy(999)            # extreme outliers
    x = np.sort(np.concatenate([rng.standard_cauchy(500), [-1e300, 1e300]]))
    s = ca.normal_scores(x, ref)
    assert np.all(np.diff(s) >= 0)
    bound = -ndtri(1 / (2 * (ref.size + 1)))
    assert np.abs(s).max() <= bound + 1e-6
    np.testing.assert_array_equal(s, np.round(s, 6))
    # the median of an odd sample scores +0.0, not -0.0
    z = ca.normal_scores([0.0], [-1.0, 0.0, 1.0])
    assert z[0] == 0.0 and not np.signbit(z[0])
    assert ca.normal_scores([[1.0, 2.0]], [1.0, 2.0]).shape == (1, 2)


def test_normal_scores_reject_bad_input():
    with pytest.raises(ValueError, match="reference"):
        ca.normal_scores([1.0], [])
    with pytest.raises(ValueError, match="reference"):
        ca.normal_scores([1.0], [1.0, np.nan])
    with pytest.raises(ValueError, match="x"):
        ca.normal_scores([np.inf], [1.0])
    with pytest.raises(TypeError, match="x"):
        ca.normal_scores(["a"], [1.0])


# --- the column types table -----------------------------------------------------------


@pytest.mark.parametrize("name", ca.TABULAR_TASKS)
def test_column_types_table_matches_the_data(name):
    design = _or_skip(ca._tabular_design, name)
    df = design.df
    types = ca.TABULAR_COLUMN_TYPES[name]
    assert len(df.columns) == ca.PAPER_TABLE3[name]["features"]
    # every column has exactly one type
    listed = [c for kind in ("numeric", "nominal", "binary") for c in types[kind]]
    listed += list(types["ordered"])
    assert sorted(listed) == sorted(df.columns)
    for c in types["numeric"]:
        assert pd.api.types.is_numeric_dtype(df[c]) and df[c].nunique() > 2, c
    for c, order in types["ordered"].items():
        # ordered only when every level that occurs has a place in the documented order
        assert set(df[c].unique()) <= set(order), c
        assert len(set(order)) == len(order)
    for c in types["binary"]:
        assert df[c].nunique() <= 2, c
    for c in types["nominal"]:
        assert df[c].nunique() >= 3, c
    # the rule's reasons for calling a category nominal: a level outside a documented order
    if name == "bank":
        for c in ("education", "default", "housing", "loan"):
            assert "unknown" in set(df[c])
    if name == "credit":
        assert {0, 5, 6} <= set(df.EDUCATION) and 0 in set(df.MARRIAGE)
        for c in ("PAY_0", "PAY_2", "PAY_3", "PAY_4", "PAY_5", "PAY_6"):
            assert {-2, 0} <= set(df[c])


def test_column_types_table_is_checked_against_the_columns():
    with pytest.raises(ValueError, match="only in the data.*'extra'"):
        ca._column_types("cardio", [*ca.TABULAR_COLUMN_TYPES["cardio"]["numeric"],
                                    "cholesterol", "gluc", "gender", "smoke", "alco", "active",
                                    "extra"])


# --- contexts coded by type -------------------------------------------------------------


@pytest.fixture(scope="module")
def coupon():
    return _or_skip(ca.load_task, "coupon", 3)


def test_typed_contexts_of_coupon(coupon):
    task = coupon
    assert task.meta["context_coding"] == "typed"
    names = list(task.feature_names)
    assert tuple(names) == task.meta["context_columns"]
    assert len(names) == task.X.shape[1] == len(set(names))
    assert len(task.meta["features"]) == 24
    design = ca._tabular_design("coupon")
    stream = task.meta["stream_rows"]
    train = np.setdiff1d(np.arange(len(design.y)), stream)
    types = ca.TABULAR_COLUMN_TYPES["coupon"]
    X = task.X
    # nominal: one 0/1 column per level, exactly one 1 per row, levels in sorted order
    for c in types["nominal"]:
        cols = [i for i, n in enumerate(names) if n.startswith(f"{c}=")]
        levels = [names[i].split("=", 1)[1] for i in cols]
        assert levels == sorted(design.df[c].unique())
        np.testing.assert_array_equal(X[:, cols].sum(axis=1), 1.0)
        raw = design.df[c].to_numpy()[stream]
        np.testing.assert_array_equal(X[:, cols].argmax(axis=1),
                                      [levels.index(v) for v in raw])
    # binary: 1 for the later level in sorted order; the constant column is 1
    g = X[:, names.index("gender")]
    np.testing.assert_array_equal(g, design.df.gender.to_numpy()[stream] == "Male")
    np.testing.assert_array_equal(X[:, names.index("expiration")],
                                  design.df.expiration.to_numpy()[stream] == "2h")
    np.testing.assert_array_equal(X[:, names.index("toCoupon_GEQ5min")], 1.0)
    # ordered: normal scores of the documented rank against the training rows
    for c, order in types["ordered"].items():
        rank = design.df[c].map({v: i for i, v in enumerate(order)}).to_numpy(float)
        np.testing.assert_array_equal(X[:, names.index(c)],
                                      ca.normal_scores(rank[stream], rank[train]))
    # the age bands keep their order (alphabetical codes put "50plus" before "below21")
    age = design.df.age.to_numpy()[stream]
    assert X[age == "below21", names.index("age")].max() < X[age == "21",
                                                              names.index("age")].min()
    assert X[age == "46", names.index("age")].max() < X[age == "50plus",
                                                         names.index("age")].min()
    t = X[:, names.index("temperature")]
    raw_t = design.df.temperature.to_numpy(float)
    np.testing.assert_array_equal(t, ca.normal_scores(raw_t[stream], raw_t[train]))


@pytest.mark.parametrize("name", ca.TABULAR_TASKS)
def test_typed_contexts_are_bounded_and_deterministic(name):
    task = _or_skip(ca.load_task, name, 5)
    n_train = task.meta["n_train"]
    bound = -ndtri(1 / (2 * (n_train + 1)))
    assert np.abs(task.X).max() <= bound + 1e-6
    np.testing.assert_array_equal(task.X, np.round(task.X, 6))
    kinds = task.meta["column_types"]
    assert list(kinds) == list(task.meta["features"])
    raw = ca._tabular_design(name).df.iloc[task.meta["stream_rows"]]
    for i, n in enumerate(task.feature_names):
        if n in kinds and kinds[n] == "numeric":
            # monotone in the raw values: same order, ties kept
            order = np.argsort(raw[n].to_numpy(float), kind="stable")
            assert np.all(np.diff(task.X[order, i]) >= 0), n
        elif not (n in kinds and kinds[n] == "ordered"):
            assert set(np.unique(task.X[:, i])) <= {0.0, 1.0}, n
    again = ca._tabular_task(name, 5, "random")
    np.testing.assert_array_equal(again.X, task.X)
    np.testing.assert_array_equal(again.R, task.R)


# The contexts of the version before the rule: sha256 of Task.X and Task.R of
# seed 5 as that version built them (old agents: exact subset, z-scores).
_OLD_DIGESTS = {
    "bank": ("d349affdeef5d81fc171d66b74d60d33c538494ccb029ace03da7ed374d99b4c",
             "9fff2a19ad00d69c4adc18f9bb2710ddbaafac5d3a853e04d4f212f35115607d"),
    "credit": ("20d0b83047da4390e823b1a255cad8f18c82bf8a9963a4f9f8a4a8f0409e0c67",
               "016ceeb60ade3dafb958cb3dd702db5944d6e6094b87cd4ccfaf1fd3184003ff"),
    "coupon": ("98d167fc61e64f752cc8470208204b6d042ee53d14688d65827d9ff9a9b7e219",
               "2db82aab019e09bed16a7cc3c89b53341c08d0abf1f63133e4ebad0227464f5c"),
    "cardio": ("e9ebb3549281001722469c6a07ed1a282d6c6c0221e4135eef9f86a95c25ecb3",
               "96ed441750fe2c756339db01cc08a584e561d6a444a21d04a33588dd0f28203b"),
}
#: The logistic codings before the readings were chosen by agent_evidence.
_OLD_ENCODING = {"bank": "onehot", "credit": "onehot", "coupon": "onehot", "cardio": "ordinal"}


@pytest.mark.parametrize("name", ca.TABULAR_TASKS)
def test_codes_coding_reproduces_the_old_task_bit_for_bit(name):
    import hashlib

    task = _or_skip(ca.load_task, name, 5, coding="codes", encoding=_OLD_ENCODING[name],
                    subset="exact", scaling="z")
    assert task.meta["context_coding"] == "codes"
    assert task.feature_names == task.meta["features"]
    x, r = _OLD_DIGESTS[name]
    assert hashlib.sha256(task.X.tobytes()).hexdigest() == x
    assert hashlib.sha256(task.R.tobytes()).hexdigest() == r
    # and the formula, written out: z-scores of the integer codes with training mean and sd
    design = ca._tabular_design(name)
    stream = task.meta["stream_rows"]
    train = np.setdiff1d(np.arange(len(design.y)), stream)
    mean, sd = design.Xraw[train].mean(axis=0), design.Xraw[train].std(axis=0)
    sd[sd == 0] = 1.0
    np.testing.assert_array_equal(task.X, ((design.Xraw - mean) / sd)[stream])


def test_engine_validation_tasks_are_the_ones_load_task_builds():
    # each stored task names its coding; a file from before the coding rule has none and
    # ran on the integer codes with the old one-hot encoding, exact subset and z-scores
    obj = cb_engines.read_engine_validation(check_data=False)
    for name, info in obj["tasks"].items():
        coding = info.get("coding", "codes")
        old = {} if "coding" in info else dict(encoding=_OLD_ENCODING[name], subset="exact",
                                                scaling="z")
        task = _or_skip(ca.load_task, name, info["agent_seed"], coding=coding, **old)
        assert ca._task_digest(task.X, task.R) == info["digest"], name


def test_load_task_checks_the_new_arguments():
    with pytest.raises(ValueError, match="coding"):
        ca.load_task("bank", 0, coding="onehot")
    with pytest.raises(ValueError, match="encoding"):
        ca.load_task("bank", 0, encoding="binary")
    with pytest.raises(ValueError, match="subset"):
        ca.load_task("bank", 0, subset="all")
    with pytest.raises(ValueError, match="scaling"):
        ca.load_task("bank", 0, scaling="minmax")
    # non-tabular tasks ignore the tabular options
    assert ca.load_task("synthetic", 0, coding="codes") is ca.load_task("synthetic", 0)


# --- agent 1's subset size ------------------------------------------------------------


def test_agent_features_exact_and_upto_readings():
    for d in (11, 15, 23, 24):
        K = max(1, int(np.floor(0.2 * d)))
        sizes = set()
        for seed in range(60):
            f1, f2 = ca._agent_features(d, seed)
            # the exact reading is the draw used before the readings were compared
            old = np.sort(np.random.default_rng([seed, 1]).choice(d, size=K, replace=False))
            np.testing.assert_array_equal(f1, old)
            u1, u2 = ca._agent_features(d, seed, "upto")
            rng = np.random.default_rng([seed, 1])
            k = int(rng.integers(1, K, endpoint=True))
            np.testing.assert_array_equal(u1, np.sort(rng.choice(d, size=k, replace=False)))
            assert 1 <= len(u1) <= K and len(u1) + len(u2) == d
            assert set(u1).isdisjoint(u2)
            sizes.add(len(u1))
        assert sizes == set(range(1, K + 1))      # every size 1..K occurs
    with pytest.raises(ValueError, match="subset"):
        ca._agent_features(10, 0, "some")


# --- what a model class can separate ------------------------------------------------------


def test_contrast_separation_linear_and_nonlinear_signal():
    rng = np.random.default_rng(3)
    X = rng.uniform(-1, 1, size=(800, 2))
    # agent 1 right in two opposite quadrants (XOR): no linear score separates that
    xor = (X[:, 0] > 0) == (X[:, 1] > 0)
    R = np.column_stack([xor, ~xor]).astype(float)
    out = ca.contrast_separation(X, R, 0.5, folds=4).set_index("model")
    assert out.loc["tree", "auc"] > 0.95 and out.loc["tree", "gain"] > 0.4
    assert abs(out.loc["logistic", "auc"] - 0.5) < 0.1 and out.loc["logistic", "gain"] < 0.1
    np.testing.assert_allclose(out.random, 0.5, atol=0.05)
    np.testing.assert_allclose(out.gain, out.random - out.error)
    # deterministic in the seed
    pd.testing.assert_frame_equal(ca.contrast_separation(X, R, 0.5, folds=4).set_index("model"),
                                  out)
    # where the agents never disagree there is nothing to separate
    same = np.column_stack([xor, xor]).astype(float)
    flat = ca.contrast_separation(X, same, 0.3, folds=3)
    assert flat.auc.isna().all() and np.allclose(flat.gain, 0.0)


def test_contrast_separation_rejects_bad_input():
    X = np.zeros((10, 1))
    R = np.zeros((10, 2))
    with pytest.raises(ValueError, match="R"):
        ca.contrast_separation(X, np.zeros((10, 3)))
    with pytest.raises(ValueError, match="alpha1"):
        ca.contrast_separation(X, R, 1.5)
    with pytest.raises(ValueError, match="folds"):
        ca.contrast_separation(X, R, folds=1)
    with pytest.raises(ValueError, match="R"):
        ca.contrast_separation(X, np.full((10, 2), 0.5))


def test_task_errors_split_a_simulation_by_task():
    X, R, _ = ca.synthetic_stream(T=300, d=2, seed=1)
    res = ca.simulate(X, R, [0.5, 0.5], "logistic-greedy", runs=4, return_traces=True)
    e = ca.task_errors(res, R)
    assert e.shape == (300,) and np.isclose(e.mean(), res.error)
    # run by run, by hand
    want = np.zeros(300)
    for k in range(4):
        for t in range(300):
            i = res.orders[k, t]
            want[i] += 1 - R[i, res.assignments[k, t]]
    np.testing.assert_allclose(e, want / 4)
    with pytest.raises(ValueError, match="return_traces"):
        ca.task_errors(ca.simulate(X, R, [0.5, 0.5], "random", runs=2), R)


def test_laplace_update_influence_replays_the_laplace_updates():
    X, R, _ = ca.synthetic_stream(T=400, d=2, seed=2)
    X = X.copy()
    X[17] = [60.0, -60.0]                      # one outlying context
    df = ca.laplace_update_influence(X, R, reference=np.arange(0, 400, 3))
    assert list(df.agent[:4]) == [0, 1, 0, 1] and sorted(df.task) == list(range(400))
    assert np.all(np.isfinite(df.movement)) and (df.movement >= 0).all()
    # the same updates by hand: LaplaceLogistic in the stated order, contrast on the reference
    order = df.task.to_numpy()
    ref = np.arange(0, 400, 3)
    models = [ca.LaplaceLogistic(2), ca.LaplaceLogistic(2)]
    mu = lambda m: np.array([m.predict(x) for x in X[ref]])
    before = np.zeros(ref.size)
    for step in range(6):
        i = order[step]
        models[step % 2].update(X[i], R[i, step % 2])
        c = mu(models[0]) - mu(models[1])
        assert df.movement[step] == pytest.approx(np.abs(c - before).mean(), abs=1e-12)
        before = c
    pd.testing.assert_frame_equal(df, ca.laplace_update_influence(X, R, reference=ref))
    with pytest.raises(ValueError, match="reference"):
        ca.laplace_update_influence(X, R, reference=np.array([0, 400]))
    with pytest.raises(ValueError, match="reference"):
        ca.laplace_update_influence(X, R, reference=0)
