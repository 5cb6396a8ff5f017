"""Sphinx extension: the built book carries its own MathJax 3.

With ``mathjax_path`` set to a relative path under ``mathjax/`` (``_config.yml``
sets ``mathjax/tex-chtml.js``), Sphinx loads MathJax from the build's own
``_static/mathjax/`` folder through a relative URL, so the mathematics renders
without network and from ``file://``. This extension puts the files there at
build time, copied from the installed ``django-static-mathjax`` package (a plain
copy of the MathJax 3 distribution, Apache-2.0; in the ``book`` extra). No copy
of MathJax lives in the repository.

Only what the combined component needs is copied, keeping MathJax's own layout
below ``_static/mathjax/`` (MathJax finds its other files relative to the URL
of the script it was loaded from):

* the combined component itself (``tex-chtml.js``: TeX input, CommonHTML output,
  the menu and the assistive MathML);
* the web fonts of its output (``output/chtml/fonts/woff-v2/``; the SVG output
  carries its font data inside the component and needs none);
* the TeX extensions (``input/tex/extensions/``), which the component loads on
  first use of a macro it does not contain (``\\boldsymbol``, ``\\cancel``, ...);
* MathJax's ``LICENSE``, which the Apache-2.0 licence asks to ship with copies.

Not copied: MathJax's sources, the other components and the accessibility
explorer with its speech-rule engine (about 4 MB), which MathJax loads only if
a reader turns it on in the math menu.

Sphinx loads MathJax only on the pages whose text holds mathematics. A page
whose only math is in a cell's HTML output (a table of the book's module
typesets its symbol headers, e.g. alpha_1, as inline math) is marked as a page
with equations too (:func:`mark_output_math`), so its math is typeset.

A missing package, a MathJax that is not version 3 or an unknown component
stops the build with an error that says so. A ``mathjax_path`` that is a URL
(or an absolute path) is left alone: the extension then copies nothing.
"""

import importlib.util
import json
import shutil
from pathlib import Path

from docutils import nodes
from sphinx.errors import ExtensionError
from sphinx.util import logging

logger = logging.getLogger(__name__)

# mathjax_path values this extension serves: "mathjax/<component>.js"
PREFIX = "mathjax/"
# component output -> the folder of web fonts it loads, relative to es5/
FONTS = {"chtml": "output/chtml/fonts/woff-v2", "svg": None}
TEX_EXTENSIONS = "input/tex/extensions"
INSTALL_HINT = ("install it with `pip install django-static-mathjax` "
                "(or `pip install -e '.[book]'`; conda: environment.yml)")


def _is_local(mathjax_path):
    return isinstance(mathjax_path, str) and mathjax_path.startswith(PREFIX) and "://" not in mathjax_path


def mathjax_distribution():
    """Folder of the installed MathJax 3 distribution (the one holding ``es5/``).

    Returns
    -------
    pathlib.Path
        ``<site-packages>/mathjax/static/mathjax`` of ``django-static-mathjax``.

    Raises
    ------
    sphinx.errors.ExtensionError
        If the package is not installed or its MathJax is not version 3.
    """
    spec = importlib.util.find_spec("mathjax")
    root = Path(spec.origin).parent / "static" / "mathjax" if spec and spec.origin else None
    if root is None or not (root / "package.json").is_file():
        raise ExtensionError(
            "the book carries its own MathJax, copied from the django-static-mathjax package, "
            f"which is not installed: {INSTALL_HINT}")
    version = json.loads((root / "package.json").read_text(encoding="utf-8")).get("version", "")
    if not version.startswith("3."):
        raise ExtensionError(
            f"django-static-mathjax provides MathJax {version!r}; the book needs MathJax 3 "
            "(django-static-mathjax>=3.2.2,<4)")
    return root


def _output(name):
    """'chtml' or 'svg' for a combined component (tex-chtml, tex-mml-svg, ...), else None."""
    parts = name.split("-")
    if parts[0] not in ("tex", "mml"):
        return None
    return next((p for p in parts if p in FONTS), None)


def _files(mathjax_path):
    """(source folder, [paths relative to es5/ to copy]) for a local ``mathjax_path``."""
    root = mathjax_distribution()
    es5 = root / "es5"
    component = mathjax_path[len(PREFIX):]
    name = Path(component).stem
    output = _output(name)
    if "/" in component or not (es5 / component).is_file() or output is None:
        known = sorted(p.name for p in es5.glob("*.js") if _output(p.stem))
        raise ExtensionError(
            f"mathjax_path is {mathjax_path!r}: expected {PREFIX}<component> with a combined "
            f"MathJax component of {es5}, one of {known}")
    files = [Path(component)]
    for folder in filter(None, [FONTS[output], TEX_EXTENSIONS if name.startswith("tex") else None]):
        files += sorted(p.relative_to(es5) for p in (es5 / folder).rglob("*") if p.is_file())
    return root, files


def check_mathjax(app):
    """At the start of an HTML build: fail early, and clearly, if MathJax cannot be copied."""
    if app.builder.format == "html" and _is_local(app.config.mathjax_path):
        _files(app.config.mathjax_path)


def copy_mathjax(app, exception):
    """After a successful HTML build: copy MathJax into ``<outdir>/_static/mathjax/``."""
    if exception is not None or app.builder.format != "html" or not _is_local(app.config.mathjax_path):
        return
    root, files = _files(app.config.mathjax_path)
    target = Path(app.outdir) / "_static" / "mathjax"
    for rel in files:
        dest = target / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / "es5" / rel, dest)
    shutil.copyfile(root / "LICENSE", target / "LICENSE")
    logger.info("MathJax %s: %d files copied into %s", app.config.mathjax_path, len(files), target)


#: What an HTML output's inline math looks like (capbook's tables, Sphinx's own math).
OUTPUT_MATH = 'class="math notranslate nohighlight"'


def mark_output_math(app, doctree):
    """Mark the page being read as one with equations when a raw HTML node (a cell's
    output) holds inline math, so that Sphinx's ``mathjax`` loads MathJax on it."""
    if any(node.get("format") == "html" and OUTPUT_MATH in node.astext()
           for node in doctree.findall(nodes.raw)):
        app.env.get_domain("math").data["has_equations"][app.env.docname] = True


def setup(app):
    app.connect("doctree-read", mark_output_math)
    app.connect("builder-inited", check_mathjax)
    app.connect("build-finished", copy_mathjax)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
