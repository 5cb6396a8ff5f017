"""The library's own code shown in the book: one object's source, folded and readable.

The paper-to-code index (chapter ``paper_index``) shows the code that
implements each part of the paper.  :func:`show_source` gives the page one
fold per object: closed, it is one line (the name and the first line of the
docstring); open, the docstring is rendered as text (numpydoc sections,
``literals``, roles and math as a reader expects them) and the code follows,
syntax-highlighted with the book's Pygments classes.  The notebook's plain
text (what nbval compares) is the object's complete source, unchanged.
"""

from __future__ import annotations

import ast
import functools
import html
import inspect
import re
import textwrap


class Source:
    """The source of one object of :mod:`capassign`, for a page of the book.

    Made by :func:`show_source`.  ``text`` is the complete source as
    :func:`inspect.getsource` returns it; ``print``, ``repr`` and the
    notebook's plain text give it unchanged, while the notebook's HTML is
    one fold: the docstring rendered, then the code highlighted.

    Attributes
    ----------
    name : str
        The dotted name under :mod:`capassign` (e.g. ``"VirtualQueues.update"``).
    text : str
        The complete source.
    summary : str
        The first paragraph of the docstring, on one line ('' without one).

    Examples
    --------
    >>> s = show_source("random_assignment_value")
    >>> s.text.startswith("def random_assignment_value(")
    True
    >>> "<details" in s._repr_html_() and "Sec. 2.3" in s.summary
    True
    """

    def __init__(self, name, text, docstring, code, first_line):
        self.name, self.text = name, text
        self.docstring, self.code, self.first_line = docstring, code, first_line
        # the first paragraph of the docstring heads the fold; the rest is inside it
        head, _, self.details = docstring.strip().partition("\n\n")
        self.summary = " ".join(head.split())

    def __repr__(self):
        return self.text

    def _repr_html_(self):
        lines = self.text.count("\n") + (not self.text.endswith("\n"))
        head = (f"<code>capassign.{html.escape(self.name)}</code>"
                + (f" <span class=\"ca-source-summary\">{_inline_html(self.summary)}</span>"
                   if self.summary else "")
                + f" <span class=\"ca-source-lines\">{lines} lines</span>")
        doc = _docstring_html(self.details) if self.details.strip() else ""
        return (f"<details class=\"ca-fold ca-source\"><summary>{head}</summary>"
                f"<div class=\"ca-source-doc\">{doc}</div>{_highlight(self.code)}</details>")


def _resolve(name):
    import capassign

    return functools.reduce(getattr, name.split("."), capassign)


def show_source(name):
    """The source of ``capassign.<name>`` as one fold of a page (:class:`Source`).

    Parameters
    ----------
    name : str
        A name under :mod:`capassign`, dotted for a method
        (``"VirtualQueues.update"``).

    Returns
    -------
    Source

    Examples
    --------
    >>> print(show_source("VirtualQueues.update").text.splitlines()[0].strip())
    def update(self, a):
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str naming an object of capassign, "
                        f"got {type(name).__name__}")
    try:
        obj = _resolve(name)
    except AttributeError:
        raise ValueError(f"name {name!r} names nothing in capassign") from None
    text = inspect.getsource(obj)
    docstring, code, first = _split_docstring(text)
    return Source(name, text, docstring, code, first)


def _split_docstring(text):
    """(docstring, the source without it, line of the docstring) of one def or class."""
    body = textwrap.dedent(text)
    node = ast.parse(body).body[0]
    first = node.body[0] if node.body else None
    if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)):
        return "", text, None
    lines = text.splitlines(keepends=True)
    start, end = first.lineno - 1, first.end_lineno
    return inspect.cleandoc(first.value.value), "".join(lines[:start] + lines[end:]), start


def _highlight(code):
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer

    return ("<div class=\"highlight-python notranslate\">"
            + highlight(code, PythonLexer(), HtmlFormatter(cssclass="highlight")) + "</div>")


# numpydoc/Sphinx roles (``:func:`name```) read as literal names; math as inline math
_ROLE = re.compile(r":(?:py:)?(func|class|meth|attr|data|mod|obj|exc|math):`([^`]+)`")


def _inline_html(text):
    """One line of docstring text as HTML: ``literals`` and roles as code, $-free."""
    out = []
    for part in re.split(r"(``[^`]+``|:(?:py:)?\w+:`[^`]+`)", text):
        m = _ROLE.fullmatch(part)
        if part.startswith("``") and part.endswith("``"):
            out.append(f"<code>{html.escape(part[2:-2])}</code>")
        elif m and m.group(1) == "math":
            out.append(f"<span class=\"math notranslate nohighlight\">\\({html.escape(m.group(2))}"
                       f"\\)</span>")
        elif m:
            out.append(f"<code>{html.escape(m.group(2).lstrip('~'))}</code>")
        else:
            out.append(html.escape(part))
    return "".join(out)


def _docstring_html(doc):
    """A numpydoc docstring rendered to HTML by docutils (sections, definition
    lists, literals), its examples highlighted as Python sessions."""
    from docutils.core import publish_parts
    from docutils.parsers.rst import roles
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonConsoleLexer

    def literal_role(name, rawtext, text, lineno, inliner, options=None, content=None):
        from docutils import nodes

        return [nodes.literal(rawtext, text.lstrip("~"))], []

    for role in ("func", "class", "meth", "attr", "data", "mod", "obj", "exc"):
        roles.register_local_role(role, literal_role)
        roles.register_local_role(f"py:{role}", literal_role)
    parts = publish_parts(
        source=doc, writer_name="html5",
        settings_overrides={"report_level": 5, "halt_level": 5, "warning_stream": False,
                            "doctitle_xform": False, "initial_header_level": 4,
                            "math_output": "MathJax", "syntax_highlight": "none",
                            "embed_stylesheet": False, "_disable_config": True})
    # no ids: many docstrings on one page would repeat "parameters", "returns", ...
    body = re.sub(r' id="[^"]*"', "", parts["body"])

    def session(m):
        code = html.unescape(re.sub(r"<[^>]+>", "", m.group(1)))
        return highlight(code, PythonConsoleLexer(), HtmlFormatter(cssclass="highlight"))

    return re.sub(r"<pre class=\"[^\"]*doctest[^\"]*\">(.*?)</pre>", session, body, flags=re.S)
