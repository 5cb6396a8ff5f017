"""The distribution works as well as the source tree: a wheel, installed in a
fresh environment, finds the data registry it ships and loads a task from
``CAPASSIGN_DATA``; it ships the library alone: the book's module ``capbook``
stays out (the README's set-up installs it from the checkout's
``book/pyproject.toml``), and its dependencies are the method's (numpy, scipy,
numba), the rest coming through extras.

The wheel is built from a copy of the files the build reads (so the working
tree gets no ``build/`` or ``*.egg-info``), without build isolation and without
network.  The fresh virtual environment has no pip and no packages of its own:
the wheel is installed into it with ``--no-deps``, and the test environment's
site-packages folders are appended to its path by a ``.pth`` file, which gives
it numpy, pandas, ... but not the editable installs of the source tree (a path
listed in a ``.pth`` file is added to ``sys.path`` without running the ``.pth``
files it contains, where the editable finders are registered).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
import tomllib
import venv
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
# the files the build reads: the module, its metadata and the data files the
# distribution ships (read from pyproject.toml, so a file added there is built too)
_SETUPTOOLS = _PYPROJECT["tool"]["setuptools"]
BOOK_PYPROJECT = tomllib.loads((ROOT / "book" / "pyproject.toml").read_text(encoding="utf-8"))
BOOK_MODULE = "book/capbook"
BUILD_FILES = ("pyproject.toml", "capassign.py", "README.md", "LICENSE") + tuple(
    f"data/{name}" for name in _SETUPTOOLS["package-data"]["capassign_data"])
#: What ``pip install capassign`` brings: the method's dependencies alone.
CORE = {"numpy", "scipy", "numba"}
#: Packages of the extras that the library must not import to route tasks.
OPTIONAL = ("pandas", "sklearn", "xgboost", "matplotlib", "pooch", "joblib", "tqdm")


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
    (tmp / "wheel-files.json").write_text(json.dumps(zipfile.ZipFile(wheel).namelist()))
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


def test_wheel_leaves_the_book_module_out(installed):
    py, env_dir, tmp = installed
    files = json.loads((tmp / "wheel-files.json").read_text())
    assert "capassign.py" in files
    assert not [f for f in files if f.startswith("capbook")], files
    code = ("import sys, capassign; print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('capbook', 'jupytext', 'nbformat', 'papermill', 'myst_nb')))\n"
            "try:\n    import capbook\nexcept ImportError:\n    print('no capbook')\n"
            "else:\n    print(capbook.__file__)")
    got = _run(py, code, tmp)
    assert got.returncode == 0, got.stderr
    assert got.stdout.splitlines() == ["[]", "no capbook"]   # nothing of the book


def test_dependencies_are_the_methods_and_extras_bring_the_rest():
    def names(reqs):
        return {re.split(r"[<>=!\[ ;]", r, maxsplit=1)[0] for r in reqs}

    project = _PYPROJECT["project"]
    assert names(project["dependencies"]) == CORE
    extras = project["optional-dependencies"]
    assert {"pandas", "pooch", "scikit-learn", "xgboost-cpu", "joblib", "tqdm"} <= names(
        extras["tasks"])
    assert names(extras["plot"]) == {"matplotlib"}
    assert "capassign[tasks,plot]" in extras["book"] and "capassign[book]" in extras["pdf"]
    assert "capassign[pdf]" in extras["test"]
    # every optional module the library imports lazily is named with its extra
    import capassign as ca
    src = (ROOT / "capassign.py").read_text(encoding="utf-8")
    lazy = set(re.findall(r'_optional\("(\w+)', src))
    assert lazy == set(OPTIONAL) == set(ca._EXTRAS)
    # plain imports only where _optional checked the package first (the trees of the
    # reference engine, whose source the book shows as it was)
    plain = re.findall(r"^\s*(?:import|from) (" + "|".join(OPTIONAL) + r")\b", src, re.M)
    assert plain == ["sklearn", "sklearn"], plain


def test_routing_needs_no_extra(tmp_path):
    """The README's Router example, run where the packages of the extras cannot
    be imported (a light install): it imports none of them."""
    blocked = ", ".join(f"{m!r}: None" for m in OPTIONAL)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    example = readme.split("\n## Routing real tasks", 1)[1].split("```python\n", 1)[1].split(
        "```", 1)[0]
    code = (f"import sys\nsys.modules.update({{{blocked}}})\n" + example
            + "\nprint(sorted(m for m in sys.modules if sys.modules[m] is not None and "
              f"m.split('.')[0] in {OPTIONAL!r}))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(ROOT)
    got = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert got.returncode == 0, got.stderr[-2000:]
    assert got.stdout.splitlines()[-1] == "[]"


def test_installed_copy_caches_kernels_outside_site_packages(installed):
    """An installed copy puts numba's cache in the user's cache folder, never in
    site-packages (a checkout keeps numba's __pycache__ next to the module)."""
    py, env_dir, tmp = installed
    home = tmp / "user-cache"
    code = ("import capassign as ca\nprint(ca.kernel_cache_dir())\n"
            "r = ca.Router(2, [0.5, 0.5], 'random', seed=0)\n"
            "r.update(0, r.assign([0.0]), 1)")
    got = _run(py, code, tmp, XDG_CACHE_HOME=str(home))
    assert got.returncode == 0, got.stderr
    assert Path(got.stdout.strip()) == home / "capassign" / "numba"
    assert list((home / "capassign" / "numba").rglob("*.nbi"))
    assert (home / "capassign" / "numba").stat().st_mode & 0o077 == 0     # private
    assert not list(env_dir.rglob("*.nbi"))


def test_readme_setup_installs_the_book_module(tmp_path):
    """The README's set-up installs capbook, editable, from book/pyproject.toml:
    importable from any folder, without PYTHONPATH, as this checkout's files."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quick = readme.split("\n## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"pip install [^&\n]*", quick)
    assert len(commands) >= 2                          # the book build and the test command
    for command in commands:
        assert '-e ".[' in command and "-e ./book" in command, command
    assert BOOK_PYPROJECT["tool"]["setuptools"]["packages"] == ["capbook"]
    assert "capbook" not in _SETUPTOOLS.get("packages", [])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    got = subprocess.run([sys.executable, "-c", "import capbook; print(capbook.__file__)"],
                         cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert got.returncode == 0, got.stderr
    assert Path(got.stdout.strip()) == ROOT / BOOK_MODULE / "__init__.py"
