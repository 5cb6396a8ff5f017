"""The paper-to-code index (book chapter ``paper_index``) stays true.

The executed page stores, for every part of the paper it lists, the name of
the implementing object, the citation its docstring must carry and a sha256
of the code it shows. These tests fail when a name disappears, when a
docstring stops citing its part of the paper, when the module's code differs
from the code the page shows (re-execute the chapter), or when a part of the
paper the book relies on is missing from the index.
"""

import functools
import hashlib
import inspect

import pytest

import capassign as ca
import capbook as cb

# Parts of the paper that must each appear in the index.
REQUIRED = ["Sec. 2.3", "Thm 1", "App. A", "Prop. 1", "Prop. 2", "App. B.4", "App. C",
            "App. D.1", "App. D.4", "App. D.5", "Eq. 1", "Eq. 2", "Algorithm 1", "App. E.1",
            "App. E.2", "App. G", "Sec. 4", "App. H.1", "App. H.4", "App. H.5"]


@pytest.fixture(scope="module")
def index():
    return cb.glued_values("paper_index")["pi_index"]


def _resolve(name):
    return functools.reduce(getattr, name.split("."), ca)


def test_every_part_of_the_paper_is_indexed(index):
    listed = " ".join(part for part, *_ in index)
    missing = [p for p in REQUIRED if p not in listed]
    assert not missing, f"parts of the paper missing from the index: {missing}"


def test_every_entry_names_code_that_cites_its_part_of_the_paper(index):
    for part, name, cite, _ in index:
        obj = _resolve(name)
        assert cite in part, f"{name}: citation {cite!r} is not the part listed ({part!r})"
        assert cite in (inspect.getdoc(obj) or ""), f"{name}: docstring does not cite {cite!r}"


def test_the_page_shows_the_modules_code(index):
    stale = [name for _, name, _, digest in index
             if hashlib.sha256(inspect.getsource(_resolve(name)).encode()).hexdigest() != digest]
    assert not stale, (f"the code of {stale} changed since the paper_index chapter was "
                       "executed: python -m capbook reproduce paper_index")
