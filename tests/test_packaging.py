"""The distribution works as well as the source tree: a wheel, installed in a
fresh environment, finds the data registry it ships and loads a task from
``CAPASSIGN_DATA``; the book's module ``capbook`` travels beside ``capassign``
(which does not import it), and the README's set-up installs it from the
checkout's ``book/capbook``.

The wheel is built from a copy of the files the build reads (so the working
tree gets no ``build/`` or ``*.egg-info``), without build isolation and without
network.  The fresh virtual environment has no pip and no packages of its own:
the wheel is installed into it with ``--no-deps``, and the test environment's
site-packages folders are appended to its path by a ``.pth`` file, which gives
it numpy, pandas, ... but not the editable install of the source tree (a path
listed in a ``.pth`` file is added to ``sys.path`` without running the ``.pth``
files it contains, where the editable finder is registered).
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import tomllib
import venv
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
# the files the build reads: the module, its metadata, the data files the
# distribution ships and the book module's files (read from pyproject.toml, so a
# file added there is built too)
_SETUPTOOLS = _PYPROJECT["tool"]["setuptools"]
BOOK_MODULE = _SETUPTOOLS["package-dir"]["capbook"]
BUILD_FILES = ("pyproject.toml", "capassign.py", "README.md", "LICENSE") + tuple(
    f"data/{name}" for name in _SETUPTOOLS["package-data"]["capassign_data"]) + tuple(
    p.relative_to(ROOT).as_posix() for p in sorted((ROOT / BOOK_MODULE).glob("*.py")))


def _setuptools_version():
    try:
        return tuple(int(p) for p in metadata.version("setuptools").split(".")[:2])
    except (metadata.PackageNotFoundError, ValueError):
        return (0, 0)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """Python of a fresh venv holding only the freshly built capassign wheel."""
    if _setuptools_version() < (77, 0):
        pytest.skip("building the wheel needs setuptools >= 77 in the test environment "
                    "(pip install -e '.[test]' installs it)")
    tmp = tmp_path_factory.mktemp("dist")
    src = tmp / "src"
    for rel in BUILD_FILES:
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, src / rel)
    env = dict(os.environ)  # the build reads only the copy in src
    wheels = tmp / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--no-index", "-q", "-w", str(wheels), str(src)],
                   check=True, cwd=tmp, env=env, capture_output=True, timeout=300)
    (wheel,) = wheels.glob("capassign-*.whl")
    env_dir = tmp / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps",
                    "--no-index", "-q", str(wheel)],
                   check=True, cwd=tmp, env=env, capture_output=True, timeout=300)
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    ours = [p for p in site.getsitepackages() + [sysconfig.get_paths()["purelib"]]
            if Path(p).is_dir()]
    (Path(purelib) / "test-environment.pth").write_text("\n".join(dict.fromkeys(ours)) + "\n")
    return py, env_dir, tmp


def _run(py, code_or_args, tmp, **env_extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "CAPASSIGN_DATA", "CAPASSIGN_CACHE")}
    env.update(CAPASSIGN_CACHE=str(tmp / "cache"), **env_extra)
    args = [str(py), "-c", code_or_args] if isinstance(code_or_args, str) else code_or_args
    return subprocess.run(args, cwd=tmp, env=env, capture_output=True, text=True, timeout=300)


def test_wheel_ships_the_registry(installed):
    py, env_dir, tmp = installed
    out = _run(py, "import capassign, json; print(json.dumps([capassign.__file__, "
                   "str(capassign.REGISTRY_PATH), str(capassign.data_registry().cache_dir)]))", tmp)
    assert out.returncode == 0, out.stderr
    module, registry, cache = json.loads(out.stdout)
    assert Path(module).resolve().is_relative_to(env_dir.resolve())  # not the source tree
    assert Path(registry).parent.name == "capassign_data"
    assert json.loads(Path(registry).read_text()) == json.loads(
        (ROOT / "data" / "registry.json").read_text())
    assert Path(cache) == tmp / "cache"


def test_wheel_ships_the_tabular_seed_search(installed):
    # paper_agent_seed reads data/tabular_agents.json, which must travel too
    py, env_dir, tmp = installed
    code = ("import capassign as ca; print(ca.TABULAR_AGENTS_PATH); "
            "print([ca.paper_agent_seed(n) for n in ca.TABULAR_TASKS])")
    got = _run(py, code, tmp)
    assert got.returncode == 0, got.stderr
    import capassign as ca
    path, seeds = got.stdout.splitlines()
    assert Path(path).resolve().is_relative_to(env_dir.resolve())
    assert seeds == str([ca.paper_agent_seed(n) for n in ca.TABULAR_TASKS])


def test_wheel_loads_a_task_from_capassign_data(installed):
    data = Path(os.environ.get("CAPASSIGN_DATA", ROOT / "no-data"))
    if not (data / "mmlu").is_dir():
        pytest.skip("real data unavailable: set CAPASSIGN_DATA to the folder of the data files")
    py, env_dir, tmp = installed
    code = ("import capassign as ca, numpy as np; t = ca.load_task('mmlu'); "
            "print(ca.__file__); print(t.X.shape, t.R.shape, repr(float(t.R.mean())))")
    got = _run(py, code, tmp, CAPASSIGN_DATA=str(data))
    assert got.returncode == 0, got.stderr
    # the same stream as the source tree's
    import capassign as ca
    t = ca.load_task("mmlu")
    lines = got.stdout.splitlines()
    assert Path(lines[0]).resolve().is_relative_to(env_dir.resolve())
    assert lines[1] == f"{t.X.shape} {t.R.shape} {float(t.R.mean())!r}"


def test_wheel_command_line(installed):
    py, env_dir, tmp = installed
    script = py.parent / ("capassign.exe" if os.name == "nt" else "capassign")
    got = _run(py, [str(script), "data", "list"], tmp, CAPASSIGN_DATA=str(tmp))
    assert got.returncode == 0, got.stderr
    assert "mmlu/agents" in got.stdout or "bank" in got.stdout
    missing = _run(py, [str(script), "data", "verify"], tmp, CAPASSIGN_DATA=str(tmp / "absent"))
    assert missing.returncode == 2
    assert missing.stderr.count("\n") == 1 and "does not exist" in missing.stderr


def test_wheel_ships_the_book_module_apart_from_the_library(installed):
    py, env_dir, tmp = installed
    code = ("import sys, capassign; before = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('capbook', 'jupytext', 'nbformat', 'papermill', 'myst_nb')); import capbook; "
            "print(before); print(capbook.__file__); print(capbook.show_table.__module__)")
    got = _run(py, code, tmp)
    assert got.returncode == 0, got.stderr
    before, module, home = got.stdout.splitlines()
    assert before == "[]"                     # the library loads nothing of the book
    assert Path(module).resolve().is_relative_to(env_dir.resolve())
    assert home == "capbook.present"
    # the chapter tools need a checkout: one line that says so, not an empty list
    listed = _run(py, [str(py), "-m", "capbook", "reproduce", "--list"], tmp)
    assert listed.returncode == 2 and listed.stdout == ""
    assert listed.stderr.count("\n") == 1 and "checkout" in listed.stderr, listed.stderr


def test_readme_setup_installs_the_book_module(tmp_path):
    """The README's set-up (``pip install -e``) installs capbook from book/capbook:
    importable from any folder, without PYTHONPATH, as this checkout's files."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quick = readme.split("\n## Quick start", 1)[1].split("\n## ", 1)[0]
    assert quick.count('pip install -e ".[') >= 2       # the book build and the test command
    assert "capbook" in _SETUPTOOLS["packages"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    got = subprocess.run([sys.executable, "-c", "import capbook; print(capbook.__file__)"],
                         cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert got.returncode == 0, got.stderr
    assert Path(got.stdout.strip()) == ROOT / BOOK_MODULE / "__init__.py"
