"""capbook: the companion book's own code, beside the library ``capassign``.

The rule that splits the two: what a practitioner could call on their own
data lives in ``capassign.py`` (the oracle, the policies, the engines, the
router, tasks, sweeps, the statistics and the paper-style plots); what reads
a notebook, formats a page or exists for one chapter lives here.  A chapter
imports both::

    import capassign as ca     # the method
    import capbook as cb       # the page: tables, glue, figures, read-outs

The dependency points one way: capbook imports capassign, never the reverse.
The package lives in the book's folder of the repository (``book/capbook``),
with its own ``book/pyproject.toml``: the README's set-up (``pip install -e
".[book]" -e ./book``) installs it, editable, beside ``capassign``; ``pip
install capassign`` never brings it.  Importing it loads nothing of the
book's tool chain (jupytext, nbformat, papermill, myst-nb); the functions
that need one import it when called.

Modules, in the order a chapter meets them:

``present``
    the page: one figure style (a colour-blind-safe colour, line style and
    marker per policy, PNGs at twice the page's resolution), tables with the paper's values beside ours,
    numbers glued into the prose;
``sources``
    the library's code shown on a page, folded, its docstring rendered;
``readouts``
    the chapters' read-outs: the paper's claims, one analysis of an
    error-vs-capacity experiment, the reproduction scorecard's verdicts;
``experiments``
    the read-outs of Part II's experiment chapters: their tables, the checks
    of their prose's claims and the numbers it quotes;
``engines``
    the stored comparison of the fast and reference engines on the tabular
    tasks (``book/results/engine_validation.json``);
``evidence``
    the paper's evidence: the readings of the tabular agents decided by the
    paper's accuracies, and the construction seeds that stand for each row of
    Table 4 with the table's cells against our range over them;
``spreads``
    the stored errors of Table 4's policies on every construction seed
    matched to a row of the paper's Table 4 (``book/results/table4_spreads.json``);
``depth``
    the stored paired runs of Coupon's tree greedy at two depths against
    logistic greedy (``book/results/coupon_depth.json``);
``fullstream``
    the stored runs of the two engines on the whole Coupon stream
    (``book/results/coupon_full_stream.json``);
``speed``
    the README's speed tables: one run of the library's benchmarks, printed
    as Markdown;
``front``
    the pages that read other chapters: the front page's figure of what holds
    of the paper's main result, the reproduction scorecard's tables, the paper
    index;
``pipeline``
    the chapter tools of a checkout: papermill re-execution, the
    source/notebook drift check, prose sync, a chapter's glued values;
``cli``
    ``python -m capbook reproduce | sync-text | validate-engines | table4-spreads |
    coupon-depth | full-stream | speed-tables``.

The public API is ``__all__``; every name in it is available here.
"""

from __future__ import annotations

from .engines import (ENGINE_VALIDATION_PATH, engine_validation, read_engine_validation,
                      validate_engines)
from .pipeline import (BOOK_DIR, CHAPTER_DIR, EXECUTED_DIR, ROOT, chapter_drift, chapter_names,
                       glued_values, reproduce, sync_text)
from .present import (BOOK_DPI, BOOK_STYLE, COLUMN_INCHES, COLUMN_PX, FIGURE_INCHES,
                      FONT_RECORD_KEY, OKABE_ITO, OVERLAP_RECORD_KEY, PIXEL_RATIO, BOOK_POLICY_STYLE,
                      PRINTED_WIDTH, SYMBOL_NAMES, Fold, Table, adherence_table, book_figure,
                      error_table, figure_png, fold_text, glue, legend_outside, legend_overlaps,
                      paired_table, policy_style, say, show_table, smallest_font, wrap)
from .sources import Source, show_source
from .depth import DEPTH_PATH, depth_gaps, depth_settings, read_coupon_depth, write_coupon_depth
from .fullstream import (FULL_STREAM_PATH, engine_gap, full_stream_settings, read_full_stream,
                         write_full_stream)
from .evidence import (ENCODING_TOL, MATCH_TOL, TABLE4_POLICIES, TABLE4_RUNS, agent_evidence,
                       encoding_evidence, paper_logistic_targets, table4_matched_seeds,
                       table4_seed_errors, table4_spreads)
from .spreads import (SPREADS_PATH, read_table4_spreads, spreads_errors, spreads_settings,
                      write_table4_spreads)
from .readouts import (ITEM_BASES, OFFLINE_FIGURE_STYLE, POWER_MULTIPLE, SCORECARD_TOL,
                       SIMILAR_TOL, VERDICT_KINDS, VERDICTS, Z_INTERVAL, ExperimentAnalysis,
                       analyse_experiment, paper_claims, scorecard_se, scorecard_verdict,
                       verdict_kind)
from .badges import (VERDICT_MEANINGS, plain_maths, verdict_badge, verdict_legend,
                     verdict_meaning)
from .cli import main

__all__ = [
    # the page (present)
    "COLUMN_PX", "BOOK_DPI", "PIXEL_RATIO", "COLUMN_INCHES", "FIGURE_INCHES", "OKABE_ITO",
    "BOOK_POLICY_STYLE", "policy_style", "BOOK_STYLE", "book_figure", "legend_outside",
    "legend_overlaps", "smallest_font", "FONT_RECORD_KEY", "OVERLAP_RECORD_KEY", "figure_png", "SYMBOL_NAMES", "Table", "show_table", "Fold", "fold_text",
    "PRINTED_WIDTH", "wrap", "say",
    "error_table", "paired_table", "adherence_table", "glue",
    # the library's code on a page (sources)
    "Source", "show_source",
    # the chapters' read-outs (readouts)
    "SIMILAR_TOL", "paper_claims", "OFFLINE_FIGURE_STYLE", "ExperimentAnalysis",
    "analyse_experiment", "SCORECARD_TOL", "scorecard_verdict", "ITEM_BASES",
    "VERDICT_KINDS", "VERDICTS", "verdict_kind", "scorecard_se",
    "Z_INTERVAL", "POWER_MULTIPLE",
    # how the scorecard shows its verdicts (badges)
    "VERDICT_MEANINGS", "verdict_meaning", "verdict_badge", "verdict_legend", "plain_maths",
    # the engine validation (engines)
    "ENGINE_VALIDATION_PATH", "validate_engines", "read_engine_validation",
    "engine_validation",
    # the paper's evidence: the agents' readings and Table 4's matched seeds (evidence)
    "ENCODING_TOL", "paper_logistic_targets", "encoding_evidence", "agent_evidence",
    "MATCH_TOL", "TABLE4_POLICIES", "TABLE4_RUNS", "table4_matched_seeds", "table4_seed_errors",
    "table4_spreads",
    # Table 4's matched-seed spreads (spreads)
    "SPREADS_PATH", "spreads_settings", "write_table4_spreads", "read_table4_spreads",
    "spreads_errors",
    # Coupon's tree depth (depth)
    "DEPTH_PATH", "depth_settings", "write_coupon_depth", "read_coupon_depth", "depth_gaps",
    # the two engines on one full stream (fullstream)
    "FULL_STREAM_PATH", "full_stream_settings", "write_full_stream", "read_full_stream",
    "engine_gap",
    # the notebook pipeline of a checkout (pipeline)
    "BOOK_DIR", "ROOT", "CHAPTER_DIR", "EXECUTED_DIR", "chapter_names", "reproduce",
    "chapter_drift", "sync_text", "glued_values",
    # the command line (cli)
    "main",
]

# the foundation chapters' read-outs: the data, the agents, the theory, the router
# (foundations)
from .foundations import (  # noqa: E402
    AGENT_MATCH_TOL, TABLE3_TASKS, verify_data, mmlu_substitution_fold, implied_logistic_fold,
    show_encoding_evidence, matched_agents, show_matched_agents, context_codings,
    coding_sensitivity, coding_moves, reading_table, chosen_reading, rebuild_table3,
    show_table3, check_table3, plot_table3, agents_by_seed, show_agents_by_seed,
    bank_splits, camelyon17_fold, plot_context_curves, plot_many_agents,
    context_curves_fold, second_agent_lead, binned_accuracies, report_fig1_split,
    three_agents, three_agent_grid, step_label, price_table, price_misses,
    plot_online_prices, plot_online_shares, tuning_rule, steps_on_tuning_streams,
    LiveWorld, plot_router_live, noncontextual_table, plot_noncontextual,
    OPE_ESTIMATOR_STYLE, plot_coverage, plot_price_regions, plot_two_agent_thresholds,
    plot_disagreement_gain, plot_pointwise_best, glue_chapter)

__all__ += [
    "AGENT_MATCH_TOL", "TABLE3_TASKS", "verify_data", "mmlu_substitution_fold",
    "implied_logistic_fold", "show_encoding_evidence", "matched_agents",
    "show_matched_agents", "context_codings", "coding_sensitivity", "coding_moves",
    "reading_table", "chosen_reading", "rebuild_table3", "show_table3", "check_table3",
    "plot_table3", "agents_by_seed", "show_agents_by_seed", "bank_splits",
    "camelyon17_fold", "plot_context_curves", "plot_many_agents", "context_curves_fold",
    "second_agent_lead", "binned_accuracies", "report_fig1_split", "three_agents",
    "three_agent_grid", "step_label", "price_table", "price_misses", "plot_online_prices",
    "plot_online_shares", "tuning_rule", "steps_on_tuning_streams", "LiveWorld",
    "plot_router_live", "noncontextual_table", "plot_noncontextual", "OPE_ESTIMATOR_STYLE",
    "plot_coverage", "plot_price_regions", "plot_two_agent_thresholds",
    "plot_disagreement_gain", "plot_pointwise_best", "glue_chapter",
]

# the front page, the scorecard's page and the paper index (front)
from .front import (CLAIM_PARTS, FRONT_ALPHA, FRONT_POLICIES, FRONT_TASKS, KIND_SHORT,  # noqa: E402
                    PAPER_INDEX, PAPER_SEED, SCORECARD_CHANGES, STATUS_TEXT, Scorecard,
                    WhatHolds, paper_index, stored_paired_tests, verdict_colours, what_holds)

__all__ += ["FRONT_TASKS", "FRONT_POLICIES", "FRONT_ALPHA", "PAPER_SEED", "CLAIM_PARTS",
            "STATUS_TEXT", "stored_paired_tests", "verdict_colours", "WhatHolds", "what_holds",
            "KIND_SHORT", "SCORECARD_CHANGES", "Scorecard", "PAPER_INDEX", "paper_index"]

# the read-outs of Part II's experiment chapters (experiments)
from .experiments import (ChapterTables, coding_table, gain_cells, gain_frame, gap_cells,
                          glue_imagenet_mmlu, glue_tabular, imagenet_mmlu_checks, say_checks,
                          separation_table, tabular_checks, task_line, update_influence,
                          seed_row, seed_tables, seeds_gain_figure, implied_random_table,
                          matched_rows, matched_table, spread_table, spread_counts,
                          seeds_summary, seeds_checks, glue_seeds, engine_zmax_table,
                          engine_folds, check_engine_cells, say_engine_settings,
                          engine_summary_table, engine_cell_folds, engine_figure,
                          check_engine_tabular, pairs_summary, mmlu_pairs_figure,
                          short_model_names, mmlu_pairs_checks, glue_mmlu_pairs)

__all__ += [
    "ChapterTables", "say_checks", "task_line", "gap_cells", "gain_frame", "gain_cells",
    "coding_table", "update_influence", "separation_table", "tabular_checks", "glue_tabular",
    "imagenet_mmlu_checks", "glue_imagenet_mmlu", "seed_row", "seed_tables",
    "seeds_gain_figure", "implied_random_table", "matched_rows", "matched_table",
    "spread_table", "spread_counts", "seeds_summary", "seeds_checks", "glue_seeds",
    "engine_zmax_table", "engine_folds", "check_engine_cells", "say_engine_settings",
    "engine_summary_table", "engine_cell_folds", "engine_figure", "check_engine_tabular",
    "pairs_summary", "mmlu_pairs_figure", "short_model_names", "mmlu_pairs_checks",
    "glue_mmlu_pairs",
]
