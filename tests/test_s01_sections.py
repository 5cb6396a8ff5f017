"""capassign.py reads one way: a section uses only what the sections before it define.

The module docstring promises sections in data-flow order (1 validation ...
14 command line), the paper's numbers standing before section 1.  These tests
walk the module's syntax tree and fail on a reference from one section to a
name defined in a later section, and on an import of a tool of the book
(the library knows nothing of the book).

The tests follow the same sections: each file tests/test_sNN_<topic>.py tests
section NN, every section has at least one, and the book's checks sit in
tests/book/.

A reference counts wherever Python resolves it to a module-level name: in a
statement at module level, in a decorator or a default value, and anywhere in
a function or class body (``symtable`` tells which names of a body are the
module's).  Names a body looks up by string (``globals()[name]``) are not seen.
"""

import ast
import re
import symtable
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "capassign.py"

#: Tools of the book that the library must not import.
BOOK_TOOLS = {"jupytext", "nbformat", "papermill", "myst_nb"}

#: Known exceptions, each (the code that refers, the name it refers to) with
#: the reason.  None now: the book's code left with its module capbook and the
#: seed search that load_task reads sits in section 9.  An entry added here
#: must say why; a stale one fails test_known_exceptions_are_still_needed.
KNOWN_EXCEPTIONS = set()


def _sections(lines):
    """(line number, section number) of every section header; 0 before the first."""
    return [(i + 1, int(m.group(1))) for i, line in enumerate(lines)
            if (m := re.match(r"# (\d+)\. ", line)) and i and lines[i - 1].startswith("# ====")]


def _module_refs(tree, src):
    """Per top-level statement: (line, name or source, names it refers to, modules it imports)."""
    table = symtable.symtable(src, str(SOURCE), "exec")
    bodies = {}
    for child in table.get_children():
        bodies.setdefault((child.get_name(), child.get_lineno()), child)

    def body_refs(t):
        refs = {s.get_name() for s in t.get_symbols()
                if s.is_referenced() and (s.is_global() or (t.get_type() == "class"
                                                             and not s.is_assigned()))}
        for child in t.get_children():
            refs |= body_refs(child)
        return refs

    def loads(nodes):
        return {n.id for node in nodes for n in ast.walk(node)
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            eager = list(node.decorator_list)
            if isinstance(node, ast.FunctionDef):
                eager += node.args.defaults + [d for d in node.args.kw_defaults if d]
            else:
                eager += node.bases + [k.value for k in node.keywords]
            refs = loads(eager)
            for line in [node.lineno] + [d.lineno for d in node.decorator_list]:
                if (node.name, line) in bodies:
                    refs |= body_refs(bodies[node.name, line])
            label = node.name
        else:
            refs = loads([node])
            label = ast.unparse(node).splitlines()[0][:60]
        imports = {(a.name if isinstance(n, ast.Import) else n.module or "").split(".")[0]
                   for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))
                   for a in n.names}
        yield node, label, refs, imports


def _violations():
    src = SOURCE.read_text(encoding="utf-8")
    lines = src.splitlines()
    heads = _sections(lines)

    def section(line):
        return max([n for ln, n in heads if ln <= line], default=0)

    tree = ast.parse(src)
    defined = {}
    for node in tree.body:
        targets = ([node] if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else
                   node.targets if isinstance(node, ast.Assign) else
                   [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else [])
        for t in targets:
            names = [t.name] if hasattr(t, "name") else [n.id for n in ast.walk(t)
                                                         if isinstance(n, ast.Name)]
            for name in names:
                defined.setdefault(name, section(node.lineno))
    found = {}
    for node, label, refs, imports in _module_refs(tree, src):
        here = section(node.lineno)
        for name in refs:
            if defined.get(name, here) > here:
                found[label, name] = (f"{label} (section {here}) uses {name} "
                                      f"(section {defined[name]})")
        for module in imports & BOOK_TOOLS:
            found[label, module] = f"{label} (section {here}) imports the book tool {module}"
    return heads, found


def test_sections_are_numbered_in_order():
    heads, _ = _violations()
    assert [n for _, n in heads] == list(range(1, 15))


def test_no_section_uses_a_later_one_and_no_book_tool_is_imported():
    _, found = _violations()
    new = sorted(msg for key, msg in found.items() if key not in KNOWN_EXCEPTIONS)
    assert not new, "references against the data flow:\n" + "\n".join(new)


def test_known_exceptions_are_still_needed():
    _, found = _violations()
    stale = sorted(KNOWN_EXCEPTIONS - set(found))
    assert not stale, f"remove from KNOWN_EXCEPTIONS (no longer found): {stale}"


def test_the_check_sees_what_it_must(tmp_path, monkeypatch):
    """The walk finds a reference to a later section in a body, a default and a
    module-level statement, and an import of a book tool; it ignores local
    names and names of earlier sections."""
    rule = "# " + "=" * 20
    src = "\n".join([
        "import os", rule, "# 1. First", rule, "A = 1",
        "def f(x=B):", "    import papermill", "    return g() + A", "def ok(B):", "    return B",
        "C = g", rule, "# 2. Second", rule, "B = 2", "def g():", "    return A", ""])
    monkeypatch.setattr(sys.modules[__name__], "SOURCE", tmp_path / "mod.py")
    (tmp_path / "mod.py").write_text(src, encoding="utf-8")
    _, found = _violations()
    assert set(found) == {("f", "B"), ("f", "g"), ("f", "papermill"), ("C = g", "g")}


# --- the tests follow the sections -------------------------------------------------

_TEST_NAME = re.compile(r"test_s(\d\d)_[a-z0-9]+(?:_[a-z0-9]+)*\.py")


def _layout_problems(library, book, folders, sections):
    """What breaks the test layout: the names of the test files in tests/ (``library``)
    and in tests/book/ (``book``), the other folders of tests/ that hold test files,
    and the section numbers of capassign.py."""
    problems = [f"tests/{name}: not test_sNN_<topic>.py with NN a section of capassign.py"
                for name in library
                if not (m := _TEST_NAME.fullmatch(name)) or int(m.group(1)) not in sections]
    tested = {int(m.group(1)) for name in library if (m := _TEST_NAME.fullmatch(name))}
    problems += [f"section {n} has no test file tests/test_s{n:02d}_<topic>.py"
                 for n in sorted(set(sections) - tested)]
    # the test folders are not packages: pytest imports each test file by its name alone
    problems += [f"tests/book/{name}: the name of a file in tests/" for name in book
                 if name in library]
    problems += [f"{folder}: test files outside tests/ and tests/book/" for folder in folders]
    return problems


def test_test_files_are_named_by_the_section_they_test():
    tests = ROOT / "tests"
    sections = [n for _, n in _sections(SOURCE.read_text(encoding="utf-8").splitlines())]
    library = sorted(p.name for p in tests.glob("test_*.py"))
    book = sorted(p.name for p in (tests / "book").glob("test_*.py"))
    folders = sorted({p.parent.relative_to(ROOT).as_posix() for p in tests.rglob("test_*.py")}
                     - {"tests", "tests/book"})
    assert len(library) >= len(sections) and len(book) >= 10
    problems = _layout_problems(library, book, folders, sections)
    assert not problems, "\n".join(problems)


def test_the_layout_check_sees_what_it_must():
    ok = ["test_s01_validation.py", "test_s02_kernels.py", "test_s02_kernel_cache.py"]
    assert _layout_problems(ok, ["test_notebooks.py"], [], [1, 2]) == []
    assert _layout_problems(ok + ["test_router.py", "test_s3_oracle.py", "test_s15_x.py",
                                  "test_s01.py", "test_s01_Bad.py"],
                            ["test_s01_validation.py"], ["tests/old"], [1, 2, 3]) == [
        "tests/test_router.py: not test_sNN_<topic>.py with NN a section of capassign.py",
        "tests/test_s3_oracle.py: not test_sNN_<topic>.py with NN a section of capassign.py",
        "tests/test_s15_x.py: not test_sNN_<topic>.py with NN a section of capassign.py",
        "tests/test_s01.py: not test_sNN_<topic>.py with NN a section of capassign.py",
        "tests/test_s01_Bad.py: not test_sNN_<topic>.py with NN a section of capassign.py",
        "section 3 has no test file tests/test_s03_<topic>.py",
        "tests/book/test_s01_validation.py: the name of a file in tests/",
        "tests/old: test files outside tests/ and tests/book/"]
