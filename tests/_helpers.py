"""Helpers shared by the test modules (imported as ``_helpers``: pytest puts this
folder on the path of the modules it collects)."""

import pytest

import capassign as ca


def or_skip(fn, *args, **kw):
    """``fn(*args, **kw)``, or skip the test when the real data it reads is unavailable."""
    try:
        return fn(*args, **kw)
    except ca.DataUnavailable as exc:
        pytest.skip(f"real data unavailable: {exc}")
