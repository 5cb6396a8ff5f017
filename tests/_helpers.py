"""Helpers shared by the test modules (imported as ``_helpers``: pyproject.toml's
``pythonpath`` puts this folder on the path, for tests/ and tests/book/ alike)."""

import json

import pytest

import capassign as ca


def or_skip(fn, *args, **kw):
    """``fn(*args, **kw)``, or skip the test when the real data it reads is unavailable."""
    try:
        return fn(*args, **kw)
    except ca.DataUnavailable as exc:
        pytest.skip(f"real data unavailable: {exc}")


def search_file(path, seeds, counts):
    """A schema-2 search file with the same ``counts[name]`` (dict agent -> list) under
    every reading."""
    tasks = {name: {"n_stream": n, **{s: dict(c) for s in ca.AGENT_SUBSET_READINGS}}
             for name, (n, c) in counts.items()}
    path.write_text(json.dumps({"schema": ca.TABULAR_AGENTS_SCHEMA, "seeds": list(seeds),
                                "tasks": tasks}))
    return path
