"""A light install and a fast start: a missing optional package is one line
naming the extra that installs it; the kernels' numba cache follows the rule
of :func:`capassign.kernel_cache_dir`; ``python -m capassign warmup --cache
DIR`` fills the folder named, from which a later process loads every kernel
it needs without compiling."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import capassign as ca

ROOT = Path(__file__).resolve().parents[1]


def _block(monkeypatch, *modules):
    """Make ``import module`` fail as when the package is not installed."""
    for name in list(sys.modules):
        if name.split(".")[0] in modules:
            monkeypatch.setitem(sys.modules, name, None)
    for name in modules:
        monkeypatch.setitem(sys.modules, name, None)


def test_missing_plot_extra_is_one_line_naming_it(monkeypatch):
    _block(monkeypatch, "matplotlib")
    with pytest.raises(ImportError) as exc:
        ca.plot_error_vs_capacity(None)
    msg = str(exc.value)
    assert "\n" not in msg and exc.value.name == "matplotlib"
    assert msg.endswith("needs matplotlib, which is not installed: pip install "
                        "'capassign[plot]'"), msg


def test_missing_tasks_extra_is_one_line_naming_it(monkeypatch):
    X, R, _ = ca.synthetic_stream(50, 2, seed=0)
    _block(monkeypatch, "sklearn")
    with pytest.raises(ImportError, match=r"needs sklearn, which is not installed: "
                                          r"pip install 'capassign\[tasks\]'$"):
        ca.simulate(X, R, [0.5, 0.5], "tree-greedy", engine="reference", runs=1)


def test_missing_extra_on_the_command_line(monkeypatch, capsys):
    _block(monkeypatch, "sklearn")
    with pytest.raises(SystemExit) as exc:
        ca.main(["simulate", "--task", "synthetic", "--policy", "tree-greedy", "--capacities",
                 "0.5,0.5", "--runs", "1", "--engine", "reference"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("capassign simulate: error: capassign.")
    assert err.rstrip().endswith("pip install 'capassign[tasks]'"), err


def test_a_broken_optional_package_keeps_its_own_error(monkeypatch):
    """Only the package's own absence is reworded: an import error inside an
    installed package (a missing dependency of its own) is raised as it is."""
    def broken(name, package=None):
        raise ModuleNotFoundError("No module named 'somelib'", name="somelib")

    monkeypatch.setattr("importlib.import_module", broken)
    with pytest.raises(ModuleNotFoundError, match="somelib"):
        ca._optional("pandas")


def test_kernel_cache_dir_rule(monkeypatch, tmp_path):
    for env in (ca.KERNEL_CACHE_ENV, "NUMBA_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(env, raising=False)
    assert ca.kernel_cache_dir() is None                   # a checkout: numba's __pycache__
    monkeypatch.setattr(ca, "__file__", str(tmp_path / "site-packages" / "capassign.py"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    if sys.platform not in ("win32", "darwin"):
        assert ca.kernel_cache_dir() == tmp_path / "xdg" / "capassign" / "numba"
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba"))
    assert ca.kernel_cache_dir() == tmp_path / "numba"
    monkeypatch.setenv(ca.KERNEL_CACHE_ENV, str(tmp_path / "ours"))
    assert ca.kernel_cache_dir() == tmp_path / "ours"      # ours first


def _python(code, **env_extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("NUMBA_CACHE_DIR", ca.KERNEL_CACHE_ENV, ca.PROGRESS_ENV)}
    env.update(PYTHONPATH=str(ROOT), **env_extra)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=600)


def _cache_files(folder):
    return {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


def test_warmup_fills_the_folder_named_and_a_later_process_loads_from_it(tmp_path):
    """``warmup --cache DIR`` (its workload cut to one router, to stay quick):
    DIR, created private, holds the kernels; a new process pointed at DIR by
    CAPASSIGN_NUMBA_CACHE makes the same decision and compiles nothing (no
    cache file is added or rewritten)."""
    cache = tmp_path / "kernels"
    decide = ("import capassign as ca\n"
              "r = ca.Router(2, [0.5, 0.5], 'random', seed=0)\n"
              "print(r.assign([0.0]))\n")
    warm = _python("import capassign as ca\n"
                   f"ca._warmup_calls = lambda: exec({decide!r})\n"
                   f"ca.main(['warmup', '--cache', {str(cache)!r}])")
    assert warm.returncode == 0, warm.stderr
    assert f"cached in {cache}" in warm.stdout
    assert f"{ca.KERNEL_CACHE_ENV}={cache}" in warm.stdout
    assert list(cache.rglob("*.nbi")) and list(cache.rglob("*.nbc"))
    assert cache.stat().st_mode & 0o077 == 0
    before = _cache_files(cache)
    later = _python(decide, **{ca.KERNEL_CACHE_ENV: str(cache)})
    assert later.returncode == 0, later.stderr
    assert later.stdout.splitlines()[-1] == warm.stdout.splitlines()[0]
    assert _cache_files(cache) == before                   # loaded, not compiled
    # a process on another (empty) folder compiles and writes there instead
    other = tmp_path / "other"
    again = _python(decide, **{ca.KERNEL_CACHE_ENV: str(other)})
    assert again.returncode == 0, again.stderr
    assert list(other.rglob("*.nbc")) and _cache_files(cache) == before


def test_warmup_refuses_an_empty_folder_name(capsys):
    with pytest.raises(SystemExit) as exc:
        ca.main(["warmup", "--cache", " "])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--cache" in err
