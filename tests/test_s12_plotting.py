"""The figures of section 12: one line per input, the table of error_vs_capacity drawn
with the styles of POLICY_STYLE, bands and legends on request."""

import matplotlib
import numpy as np
import pandas as pd
import pytest

import capassign as ca
from test_s10_experiments import synthetic, table  # noqa: F401 (synthetic: a fixture)

matplotlib.use("Agg")


def test_plots_draw_one_line_per_input(synthetic):
    import matplotlib.pyplot as plt

    caps = (0.3, 0.7)
    lam = ca.optimal_assignment(synthetic.mu, caps).shadow_prices
    results = [ca.simulate_known_mu(synthetic.mu, synthetic.R, caps, runs=2),
               ca.simulate(synthetic.X, synthetic.R, caps, "logistic-greedy", runs=2,
                           return_traces=True)]
    ax = ca.plot_regret([ca.regret_curve(r, synthetic.mu, lam) for r in results])
    assert len(ax.lines) == 2 and ax.get_xscale() == "log"
    ax = ca.plot_price_tracking([ca.price_tracking(r, lam) for r in results])
    assert len(ax.lines) == 3                               # two policies and lambda
    ax = ca.plot_capacity_adherence([ca.capacity_adherence(r) for r in results])
    assert len(ax.lines) == 2
    e = np.array([0.2, 0.3, 0.25])
    tests = ca.paired_tests(table({"random": [e, e], "tree-ts": [e - 0.1, e - 0.05]}))
    ax = ca.plot_paired_differences(tests)
    assert len(ax.containers) == 1
    with pytest.raises(TypeError, match="RegretCurves"):
        ca.plot_regret([1])
    plt.close("all")


def test_plot_error_vs_capacity_draws_the_table():
    # one line per policy through its (alpha1, error) points in alpha1 order; a
    # 95% band for the online policies only; offline benchmarks as dotted
    # horizontal lines without markers; styles and labels of POLICY_STYLE
    import matplotlib.pyplot as plt

    rows = []
    for policy, errors in (("random", [0.30, 0.25, 0.28]), ("tree-greedy", [0.20, 0.18, 0.22]),
                           ("offline-tree", [0.15, 0.15, 0.15])):
        for a, e in zip((0.8, 0.2, 0.5), errors):
            rows.append(dict(policy=policy, alpha1=a, error=e, ci_low=e - 0.01,
                             ci_high=e + 0.01))
    df = pd.DataFrame(rows)
    ax = ca.plot_error_vs_capacity(df, title="t")
    assert [line.get_label() for line in ax.lines] == [
        ca.POLICY_STYLE[p]["label"] for p in ("random", "tree-greedy", "offline-tree")]
    for line, (_, g) in zip(ax.lines, df.groupby("policy", sort=False)):
        g = g.sort_values("alpha1")
        np.testing.assert_array_equal(line.get_xdata(), g.alpha1)
        np.testing.assert_array_equal(line.get_ydata(), g.error)
    offline = ax.lines[2]
    on, off = ca.POLICY_STYLE["offline-tree"]["ls"][1]        # a dotted dash pattern
    assert on < off and offline.get_linestyle() != "-"
    assert offline.get_marker() in ("", "None", None)
    assert len(set(offline.get_ydata())) == 1
    assert len(ax.collections) == 2          # bands: random and tree-greedy
    assert ax.get_legend() is not None and ax.get_title() == "t"
    plt.close("all")
    bare = ca.plot_error_vs_capacity(df, bands=False, legend=False)
    assert len(bare.collections) == 0 and bare.get_legend() is None
    plt.close("all")
