"""The benchmarks of section 13: what they print, and the arguments and memory they
refuse before any work."""

import pytest

import capassign as ca


def test_oracle_benchmark_prints_times(capsys):
    ca.benchmark_oracle(sizes=(1000, 4000), agents=(2, 3), seed=0)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 7 and all(" s (" in line for line in lines)
    assert "n = 1,000" in lines[0] and "n = 4,000" in lines[1] and "A = 3" in lines[2]
    # the tied instances at the largest n and A: 0/1 rewards (at most 2^3
    # distinct rows) and a 10-level grid, each through the whole programme
    assert lines[4].startswith("optimal_assignment, A = 3, n = 4,000, binary mu (8 distinct "
                               "rows): ") and "HiGHS, whole programme" in lines[4]
    assert lines[5].startswith("optimal_assignment, A = 3, n = 4,000, 10-level mu (")
    # limits at the largest n and A: 0.5 each, through the dual method
    assert lines[6].startswith("optimal_assignment, A = 3, n = 4,000, limits 0.5 each: ")
    assert "dual method" in lines[6] and "max (load - alpha)+ = " in lines[6]
    assert all(float(line.rsplit("= ", 1)[1]) < 1e-9 for line in lines)   # capacities met
    ca.benchmark_oracle(sizes=(100,), agents=(2,), tied=False, limits=False)
    assert len(capsys.readouterr().out.splitlines()) == 1


def test_benchmarks_refuse_what_memory_cannot_hold(monkeypatch):
    def work(*a, **k):
        raise AssertionError("the benchmark started its work")

    monkeypatch.setattr(ca, "synthetic_stream", work)
    with pytest.raises(ValueError, match=r"^T=10000000000 needs about [\d.]+ TiB for the "
                                         r"benchmark's stream of 10,000,000,000 tasks"):
        ca.benchmark_engines(T=10**10, grid=False)
    with pytest.raises(ValueError, match=r"^grid_runs=1000000000 needs about"):
        ca.benchmark_engines(T=100, grid={"runs": 10**9})
    with pytest.raises(ValueError, match=r"^T=10000000000 needs about [\d.]+ TiB"):
        ca.benchmark_router(T=10**10)


@pytest.mark.parametrize("kw, message", [(dict(reference_T=-5), "reference_T must be an integer >= 1"),
                                         (dict(T=0), "T must be an integer >= 1"),
                                         (dict(fast_runs=2.5), "fast_runs must be an integer")])
def test_benchmark_arguments_are_checked(monkeypatch, kw, message):
    monkeypatch.setattr(ca, "synthetic_stream", lambda *a, **k: 1 / 0)
    with pytest.raises((ValueError, TypeError), match=message):
        ca.benchmark_engines(grid=False, **kw)
