"""The two engines on the whole Coupon stream (``book/results/coupon_full_stream.json``,
``python -m capbook full-stream``): the file is intact, describes the library as it is
now, and the engine gap and its standard error are computed as stated."""
import json

import numpy as np
import pytest

import capbook as cb


@pytest.fixture(scope="module")
def stored():
    return cb.read_full_stream()


def test_file_is_complete(stored):
    st = stored["settings"]
    assert st == json.loads(json.dumps(cb.full_stream_settings(st["runs"])))
    assert sorted(stored["errors"]) == ["fast", "reference"]
    assert all(len(v) == st["runs"] for v in stored["errors"].values())
    # the runs are not copies of each other: the engines draw differently
    assert stored["errors"]["fast"] != stored["errors"]["reference"]


def test_edited_file_is_rejected(stored, tmp_path):
    bad = json.loads(json.dumps(stored))
    bad["errors"]["reference"][0] += 0.001
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(ValueError, match="checksum"):
        cb.read_full_stream(path)


def test_gap_and_standard_error():
    """Injected runs: the difference of the means and the two-sample standard error."""
    f, r = [0.30, 0.34, 0.32], [0.31, 0.33, 0.35, 0.33]
    g = cb.engine_gap({"errors": {"fast": f, "reference": r}})
    assert g["gap"] == pytest.approx(np.mean(f) - np.mean(r))
    assert g["se"] == pytest.approx(np.sqrt(np.var(f, ddof=1) / 3 + np.var(r, ddof=1) / 4))
