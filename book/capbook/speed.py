"""The README's speed tables: one run of the library's benchmarks, printed as Markdown.

``python -m capbook speed-tables`` runs the three benchmarks of the library
(``python -m capassign bench --startup``, ``bench`` with the paper's full
grid, ``bench --router`` at T = 20,000), their reports on stderr, and prints
the tables that README.md carries under "Speed", with the date, the machine's
cores, the numba version and threads, and the lowest and highest load average
seen during the run.  The library measures; the Markdown is written here
(tests/book/test_readme.py keeps the README's tables in the format printed).
"""

from __future__ import annotations

import os
import sys
import time

from capassign import benchmark_engines, benchmark_router, benchmark_startup

#: The first and last lines of the speed tables ``python -m capbook speed-tables``
#: prints and README.md carries (tests/book/test_readme.py keeps the two in one format).
SPEED_MARKERS = ("<!-- speed tables: python -m capbook speed-tables -->",
                 "<!-- end of the speed tables -->")


def speed_markdown(startup, engines, router, run):
    """The README's speed tables in Markdown, from one run of the three benchmarks.

    ``startup``, ``engines`` and ``router`` are what ``capassign.benchmark_startup``,
    ``capassign.benchmark_engines`` and ``capassign.benchmark_router`` return; ``run``
    holds the ``date``, ``cores``, ``numba`` version, ``threads`` and the
    lowest and highest ``load`` average seen during the run.  Returns the
    lines, the markers of :data:`SPEED_MARKERS` first and last.
    """
    imports = {r["what"]: r["cold"] for r in startup}
    lo, hi = run["load"]
    lines = [SPEED_MARKERS[0], "",
             f"Measured with `python -m capbook speed-tables` on {run['date']}: "
             f"{run['cores']} cores, numba {run['numba']} on {run['threads']} threads, "
             f"load average {lo:.2f} to {hi:.2f} during the run.", "",
             f"*First calls*, each in a fresh process (`import capassign`: "
             f"{imports['import capassign']:.2f} s; numba, imported at the first kernel "
             f"call: {imports['import numba']:.2f} s), cold (an empty numba cache) and warm "
             f"(the cache the cold call filled):", "",
             "| first call | cold (s) | warm (s) |", "|---|---|---|"]
    lines += [f"| {r['what']} | {r['cold']:.1f} | {r['warm']:.2f} |" for r in startup
              if not r["what"].startswith("import ")]
    lines += ["", f"*Engines*, microseconds per decision on a synthetic stream (T={engines['T']}, "
                  f"d={engines['d']}, two agents at 0.5/0.5; fast engine: "
                  f"{engines['fast_runs']} runs in parallel, reference: "
                  f"{engines['reference_runs']} run(s) of {engines['reference_T']} tasks):", "",
              "| policy | fast (wall) | fast (CPU) | reference (wall) | reference (CPU) "
              "| speed-up, wall (CPU) |", "|---|---|---|---|---|---|"]
    lines += [f"| {p} | {r['fast_us']:.3f} | {r['fast_cpu_us']:.3f} | {r['reference_us']:,.1f} "
              f"| {r['reference_cpu_us']:,.1f} | {r['speedup']:,.0f}x ({r['speedup_cpu']:,.0f}x) |"
              for p, r in engines["policies"].items()]
    if "grid_wall_seconds" in engines:
        tree = sum(v for p, v in engines["grid_per_policy"].items() if p.startswith("tree"))
        runs = engines["grid_runs"]
        lines += ["", f"The paper's full grid for its largest task shape (100 runs x 5 capacities "
                      f"x 5 policies, T={engines['grid_T']}, d={engines['grid_d']}): "
                      f"{engines['grid_wall_seconds']:,.0f} s wall, "
                      f"{engines['grid_cpu_seconds']:,.0f} CPU-seconds, "
                      f"{100 * tree / sum(engines['grid_per_policy'].values()):.0f}% of it in the "
                      f"tree policies ("
                      + ("measured" if runs == 100 else f"{runs} runs per point, scaled to 100")
                      + ")."]
    lines += ["", "*Router*, `assign` then `update` per task (synthetic stream, two agents, "
                  "immediate rewards; the tree policies with the whole stream as `X_reference`, "
                  "or cutting their bins from the stream):", "",
              "| policy | µs per task (wall) | (CPU) | error |", "|---|---|---|---|"]
    lines += [f"| {p} | {r['us']:.2f} | {r['cpu_us']:.2f} | {r['error']:.4f} |"
              for p, r in router.items()]
    return lines + ["", SPEED_MARKERS[1]]


def speed_tables(seed=0, out=print):
    """Run ``capassign.benchmark_startup``, ``capassign.benchmark_engines`` (full grid)
    and ``capassign.benchmark_router`` (T = 20000) once, their reports on stderr,
    and send the README's tables (:func:`speed_markdown`) to ``out``."""
    import numba

    loads = [os.getloadavg()[0]]

    def log(line):
        loads.append(os.getloadavg()[0])
        print(line, file=sys.stderr, flush=True)

    startup = benchmark_startup(out=log)
    engines = benchmark_engines(seed=seed, out=log)
    router = benchmark_router(T=20000, seed=seed, out=log)
    log("done")
    run = dict(date=time.strftime("%Y-%m-%d"), cores=os.cpu_count(), numba=numba.__version__,
               threads=numba.get_num_threads(), load=(min(loads), max(loads)))
    for line in speed_markdown(startup, engines, router, run):
        out(line)
