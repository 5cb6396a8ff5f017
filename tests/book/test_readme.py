"""The speed tables of README.md keep the format ``python -m capbook speed-tables`` prints.

They are pasted from one run of ``python -m capbook speed-tables``.  This
test fails when the README's tables and the command's output diverge: a
column, a row, a label or a sentence added, dropped or reworded on either
side.  It compares the two with every number masked, so that it needs no
benchmark run; the numbers themselves come from the run named in the tables.
"""

import re
from pathlib import Path

import capassign as ca
from capbook import speed

ROOT = Path(__file__).resolve().parents[2]


def _masked(lines):
    return [re.sub(r"\d(?:[\d,.]*\d)?", "#", line) for line in lines]


_TIMING = dict(fast_us=1.0, fast_cpu_us=1.0, reference_us=1.0, reference_cpu_us=1.0,
               speedup=1.0, speedup_cpu=1.0)
#: What the engines' and the router's benchmarks return, with stand-in numbers.
_ENGINES = dict(T=1, d=1, fast_runs=1, reference_runs=1, reference_T=1,
                policies={p: _TIMING for p in ca.ONLINE_POLICIES}, grid_wall_seconds=1.0,
                grid_cpu_seconds=1.0, grid_runs=100, grid_T=1, grid_d=1,
                grid_per_policy={p: 1.0 for p in ca.CONTEXTUAL_POLICIES + ("random",)})
_ROUTER = {label: dict(us=1.0, cpu_us=1.0, error=0.5)
           for label in list(ca.ONLINE_POLICIES) + [f"{p}, stream bins" for p in ca.ONLINE_POLICIES
                                                   if p.startswith("tree")]}


def _startup():
    return [dict(what=w, cold=1.0, warm=1.0)
            for w in ["import capassign", "import numba"] + [w for w, _ in ca._STARTUP_CASES]]


def _printed_format():
    """What ``speed-tables`` prints, with stand-in numbers."""
    startup = _startup()
    run = dict(date="2000-01-01", cores=1, numba="1.0", threads=1, load=(1.0, 1.0))
    return speed.speed_markdown(startup, _ENGINES, _ROUTER, run)


def test_readme_speed_tables_have_the_format_bench_prints():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    begin, end = speed.SPEED_MARKERS
    assert readme.count(begin) == readme.count(end) == 1, "README.md holds the tables once"
    block = readme[readme.index(begin):readme.index(end) + len(end)].splitlines()
    assert _masked(block) == _masked(_printed_format()), (
        "README.md's speed tables differ from what `python -m capbook speed-tables` prints; "
        "run it and paste its output over the tables")


def test_the_comparison_sees_a_changed_row_or_column():
    printed = _printed_format()
    header = next(i for i, line in enumerate(printed) if line.startswith("| policy | fast"))
    dropped_row = printed[:header + 2] + printed[header + 3:]
    extra_column = printed[:header] + [printed[header] + " x |"] + printed[header + 1:]
    other_number = [line.replace("1.0", "23.45") for line in printed]
    assert _masked(dropped_row) != _masked(printed)
    assert _masked(extra_column) != _masked(printed)
    assert _masked(other_number) == _masked(printed)


def test_the_library_writes_no_markdown():
    """capassign's benchmarks print measurements; the README's Markdown is the book's."""
    src = Path(ca.__file__).read_text(encoding="utf-8")
    assert "<!--" not in src
    assert not re.search(r"\|-+\|", src), "a Markdown table rule in capassign.py"


def test_speed_tables_command_prints_the_tables_of_one_run(monkeypatch, capsys):
    """``python -m capbook speed-tables`` runs the library's three benchmarks once and prints
    the README's block (here with stand-in benchmarks, so that it takes no time)."""
    import capbook

    printed = _printed_format()
    startup = _startup()
    calls = []
    monkeypatch.setattr(speed, "benchmark_startup", lambda out: calls.append("startup") or startup)
    monkeypatch.setattr(speed, "benchmark_engines",
                        lambda seed, out: calls.append(("engines", seed)) or _ENGINES)
    monkeypatch.setattr(speed, "benchmark_router",
                        lambda T, seed, out: calls.append(("router", T, seed)) or _ROUTER)
    assert capbook.main(["speed-tables", "--seed", "3"]) == 0
    assert calls == ["startup", ("engines", 3), ("router", 20000, 3)]
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == speed.SPEED_MARKERS[0] and lines[-1] == speed.SPEED_MARKERS[1]
    assert _masked(lines) == _masked(printed)
