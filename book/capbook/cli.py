"""The book's command line: ``python -m capbook COMMAND``.

``reproduce`` re-executes chapters through papermill, ``sync-text`` copies
prose-only edits into the executed notebooks, ``validate-engines`` computes
the stored comparison of the two engines, ``table4-spreads`` Table 4's policies on
every matched construction seed, ``coupon-depth`` Coupon's trees at two depths against
logistic greedy, ``full-stream`` the two engines on the whole Coupon stream, ``speed-tables``
the README's speed tables from one run of the library's benchmarks.  The library's own commands
(``simulate``, ``sweep``, ``bench``, ``data``) are ``python -m capassign``;
both command lines report an expected failure the same way, in one line on
stderr with exit status 2.
"""

from __future__ import annotations

import json

from capassign import (CONTEXT_CODINGS, TABULAR_TASKS, _add_commands, _CommandParser,
                       _int_opt, _opt, _run_command, _split_names, _validate_int,
                       _validate_names)

from . import depth, engines, fullstream, pipeline, speed, spreads


def _tasks(arg):
    """The tasks of ``--tasks`` (all by default), each named once."""
    tasks = TABULAR_TASKS if arg is None else _split_names(arg)
    return _validate_names(tasks, TABULAR_TASKS, "--tasks", unique=True)


def _cmd_reproduce(args):
    if args.list:
        if args.chapters or args.parameter:
            raise ValueError("--list lists the chapters and runs none; give it no chapter "
                             "names and no -p")
        print("\n".join(pipeline.chapter_names()))
        return
    params = {}
    for k, v in args.parameter:
        if k in params:
            raise ValueError(f"-p {k} is given twice; give each parameter once")
        try:
            params[k] = json.loads(v)
        except json.JSONDecodeError:
            params[k] = v
        except RecursionError:
            raise ValueError(f"-p {k}: the value is JSON nested too deeply to read") from None
    pipeline._check_parameters(args.chapters, params, "-p")
    import papermill

    try:
        pipeline.reproduce(args.chapters, parameters=params)
    except papermill.PapermillExecutionError as exc:   # a cell raised: one line
        raise ValueError(f"a cell of the chapter raised {exc.ename}: {exc.evalue} (cell "
                         f"{exc.cell_index}); its stored notebook is unchanged") from None


def _cmd_validate(args):
    tasks = _tasks(args.tasks)
    for name, v, lo in (("--prefix", args.prefix, 10), ("--pilot", args.pilot, 2),
                        ("--max-runs", args.max_runs, args.pilot), ("--seed", args.seed, 0)):
        _validate_int(v, name, lo=lo)
    if args.out is not None:
        engines._check_results_path(args.out, tasks, "--out")
    path = engines.validate_engines(args.out, tasks=tasks, prefix=args.prefix,
                                    pilot=args.pilot, max_runs=args.max_runs, seed=args.seed,
                                    collect=args.collect, out=print)
    if path is not None:
        print(f"wrote {path}")


def _cmd_spreads(args):
    if args.check:
        if args.tasks is not None:
            raise ValueError("--check verifies the whole file; --tasks does not apply to it")
        obj = spreads.read_table4_spreads(args.out, check_data=True)
        print(f"{args.out}: ok, {len(spreads.spreads_errors(obj))} (task, coding, seed, "
              f"policy) cells")
        return
    tasks = _tasks(args.tasks)
    engines._check_results_path(args.out, [f"{t}.{c}" for t in tasks for c in CONTEXT_CODINGS],
                                "--out")                # before any work
    done = spreads.write_table4_spreads(args.out, tasks=tasks)
    print(f"wrote {done}" if done else "partial files complete for " + ", ".join(tasks))


def _coupon_command(read, write):
    """The command of one Coupon results file: ``--check`` verifies it, else it is written."""
    def run(args):
        if args.check:
            obj = read(args.out, check_data=True)
            print(f"{args.out}: ok, {obj['settings']['runs']} runs per cell")
        else:
            print(f"wrote {write(args.out)}")
    return run


def _cmd_pdf(args):
    from . import pdf
    done = pdf.book_pdf(args.out, html_dir=args.html)
    print(f"wrote {done['path']}: {done['pages']} pages, {done['chapters']} chapters, "
          f"{done['scaled']} wide boxes set smaller, nothing cut off")


_cmd_depth = _coupon_command(depth.read_coupon_depth, depth.write_coupon_depth)
_cmd_full_stream = _coupon_command(fullstream.read_full_stream, fullstream.write_full_stream)


_CHAPTERS_ARG = _opt("chapters", nargs="*", metavar="CHAPTER",
                     help="chapter names (stems of book/chapters/*.md, each once); default: all")

#: The sub-commands, as in ``capassign``'s table of commands:
#: ``(name, help, description, function, options)``.
_COMMANDS = [
    ("reproduce", "re-execute book chapters through papermill",
     "Re-execute chapters (all by default) through papermill at the paper's settings and "
     "write book/executed/*.ipynb.", _cmd_reproduce, [
         _CHAPTERS_ARG,
         _opt("--list", action="store_true", help="list the chapters and exit"),
         _opt("-p", "--parameter", nargs=2, action="append", default=[],
              metavar=("NAME", "VALUE"),
              help="override a parameter of the chapters' parameters cell (VALUE is read "
                   "as JSON, else as a string)")]),
    ("sync-text", "copy edited prose into executed notebooks",
     "Copy markdown edits from chapter sources into the executed notebooks when no code "
     "cell changed.", lambda a: pipeline.sync_text(a.chapters), [_CHAPTERS_ARG]),
    ("validate-engines",
     "compare the fast and reference engines on the tabular tasks -> a checksummed results "
     "file",
     "Paired runs of every online policy on Bank, Credit, Coupon and Cardio at three "
     "capacities on both engines (about an hour on one core); writes the file the "
     "fast_engine chapter reads.  Interrupted runs resume; --tasks computes some tasks only "
     "(e.g. in parallel), a final call without it writes the file.", _cmd_validate, [
         _opt("--out", default=None,
              help="results file (default book/results/engine_validation.json)"),
         _opt("--tasks", default=None,
              help=f"comma-separated subset of {','.join(TABULAR_TASKS)} (default: all)"),
         _int_opt("--prefix", 2000, "tasks per run"),
         _int_opt("--pilot", 10, "paired runs before the sample-size rule"),
         _int_opt("--max-runs", 60, "cap of paired runs per cell"),
         _int_opt("--seed", 0, "seed of the rows and runs"),
         _opt("--collect", action="store_true",
              help="compute nothing: write the file from the cells stored so far, listing "
                   "the missing ones (a later call completes it)")]),
    ("table4-spreads",
     "Table 4's three policies on every matched construction seed -> a checksummed file",
     "Errors of random, logistic greedy and tree greedy at alpha = (0.5, 0.5), 10 runs, on "
     "every construction seed matched to a row of the paper's Table 4, under both codings "
     "of the contexts (about an hour on one core); writes the file the exp_seeds and "
     "scorecard chapters read.  Interrupted runs resume; --tasks computes some tasks only, "
     "a final call without it writes the file.", _cmd_spreads, [
         _opt("--out", default=str(spreads.SPREADS_PATH),
              help="results file (default book/results/table4_spreads.json)"),
         _opt("--tasks", default=None,
              help=f"comma-separated subset of {','.join(TABULAR_TASKS)} (default: all)"),
         _opt("--check", action="store_true",
              help="verify the stored file, data hashes included (minutes), and exit")]),
    ("coupon-depth",
     "Coupon: tree greedy at depths 3 and 5 against logistic greedy -> a checksummed file",
     "Paired runs of logistic greedy and tree greedy (depths 3 and 5) on Coupon at the "
     "interior capacities of the paper's grid, 100 runs each as exp_tabular (about two "
     "CPU-minutes); writes the file the scorecard reads.", _cmd_depth, [
         _opt("--out", default=str(depth.DEPTH_PATH),
              help="results file (default book/results/coupon_depth.json)"),
         _opt("--check", action="store_true",
              help="verify the stored file and the task's data hash, and exit")]),
    ("full-stream",
     "Coupon, tree greedy: fast against reference engine on the whole stream -> a "
     "checksummed file",
     "60 runs of tree greedy at alpha = (0.5, 0.5) on the whole Coupon stream on each "
     "engine (the persistent Poisson bootstrap against a fresh resample at each refit; a "
     "few CPU-minutes); writes the file the scorecard reads.", _cmd_full_stream, [
         _opt("--out", default=str(fullstream.FULL_STREAM_PATH),
              help="results file (default book/results/coupon_full_stream.json)"),
         _opt("--check", action="store_true",
              help="verify the stored file and the task's data hash, and exit")]),
    ("speed-tables",
     "the README's speed tables: the library's benchmarks once, printed as Markdown",
     "Run python -m capassign bench --startup, bench (the engines with the paper's full grid) "
     "and bench --router (T=20000) once, their reports on stderr, and print README.md's "
     "speed tables (Markdown, with the date, the machine and its load during the run; some "
     "minutes).", lambda a: speed.speed_tables(seed=a.seed), [
         _int_opt("--seed", 0, "seed of the synthetic streams and the runs")]),
    ("pdf", "the whole book as one PDF, printed offline by the system's Chromium",
     "Build the HTML book from the stored notebooks, print every page of _toc.yml in "
     "order with folds open and nothing cut off (headless Chromium, through Playwright) "
     "and join the pages into one PDF (pypdf).  Needs the pdf extra and a Chromium "
     "(the system's chromium package, or CAPASSIGN_CHROMIUM).", _cmd_pdf, [
         _opt("--out", default="_build/capassign-book.pdf",
              help="the PDF to write (default _build/capassign-book.pdf)"),
         _opt("--html", default=None,
              help="print an existing HTML build (its html folder) instead of building one")]),
]


def _build_parser():
    parser = _CommandParser(
        prog="capbook",
        description="The companion book's own commands: re-execute chapters, sync their "
                    "prose, validate the fast engine; the library's commands are "
                    "python -m capassign.")
    _add_commands(parser.add_subparsers(dest="command", metavar="COMMAND"), _COMMANDS)
    return parser


def main(argv=None):
    """Run the book's command line on ``argv`` (``python -m capbook`` runs it on its own).

    What the user can fix (a bad argument, a missing package, no checkout to
    work in) ends the command with one line on stderr and exit status 2.

    Parameters
    ----------
    argv : list of str, optional
        The words after ``capbook``; default those of the process.

    Returns
    -------
    int
        0 once the command has run.

    Examples
    --------
    >>> main(["reproduce", "--list"])
    beyond_capacity
    ...
    theory_unconstrained
    0
    """
    return _run_command(_build_parser(), argv)
