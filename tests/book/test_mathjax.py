"""The book carries its own MathJax 3 (book/_ext/local_mathjax.py, configured in _config.yml).

These checks need no browser; tests/book/test_browser.py opens the pages and checks
the math is typeset offline and from file://.
"""

import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from sphinx.errors import ExtensionError

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import local_mathjax  # noqa: E402

CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
MATHJAX_PATH = CONFIG["sphinx"]["config"]["mathjax_path"]


def _app(outdir, mathjax_path=MATHJAX_PATH):
    return SimpleNamespace(builder=SimpleNamespace(format="html"), outdir=str(outdir),
                           config=SimpleNamespace(mathjax_path=mathjax_path))


def test_config_loads_mathjax_from_the_build():
    assert CONFIG["sphinx"]["local_extensions"]["local_mathjax"] == "book/_ext"
    assert local_mathjax._is_local(MATHJAX_PATH), MATHJAX_PATH


def test_only_the_component_its_fonts_and_tex_extensions_are_copied(tmp_path):
    local_mathjax.copy_mathjax(_app(tmp_path), None)
    target = tmp_path / "_static" / "mathjax"
    files = sorted(p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file())
    component = MATHJAX_PATH.removeprefix("mathjax/")
    assert component in files and "LICENSE" in files
    assert "Apache License" in (target / "LICENSE").read_text(encoding="utf-8")
    fonts = [f for f in files if f.startswith("output/chtml/fonts/woff-v2/")]
    extensions = [f for f in files if f.startswith("input/tex/extensions/")]
    assert len(fonts) >= 20 and all(f.endswith(".woff") for f in fonts), fonts
    assert "input/tex/extensions/boldsymbol.js" in extensions, extensions
    assert len(files) == 2 + len(fonts) + len(extensions), files
    source = local_mathjax.mathjax_distribution() / "es5" / component
    assert (target / component).read_bytes() == source.read_bytes()


def test_failed_or_non_html_builds_and_urls_copy_nothing(tmp_path):
    local_mathjax.copy_mathjax(_app(tmp_path), RuntimeError("the build failed"))
    latex = _app(tmp_path)
    latex.builder.format = "latex"
    local_mathjax.copy_mathjax(latex, None)
    cdn = "https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-chtml.js"
    local_mathjax.check_mathjax(_app(tmp_path, cdn))
    local_mathjax.copy_mathjax(_app(tmp_path, cdn), None)
    assert not any(tmp_path.iterdir())


def test_missing_package_is_a_clear_build_error(tmp_path, monkeypatch):
    monkeypatch.setattr(local_mathjax.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ExtensionError, match="django-static-mathjax.*not installed"):
        local_mathjax.check_mathjax(_app(tmp_path))


def test_mathjax_2_is_refused(tmp_path, monkeypatch):
    fake = tmp_path / "mathjax" / "static" / "mathjax"
    fake.mkdir(parents=True)
    (fake / "package.json").write_text(json.dumps({"version": "2.7.9"}), encoding="utf-8")
    (tmp_path / "mathjax" / "__init__.py").write_text("", encoding="utf-8")
    monkeypatch.setattr(local_mathjax.importlib.util, "find_spec", lambda name: SimpleNamespace(
        origin=str(tmp_path / "mathjax" / "__init__.py")))
    with pytest.raises(ExtensionError, match=r"MathJax '2\.7\.9'.*needs MathJax 3"):
        local_mathjax.check_mathjax(_app(tmp_path))


@pytest.mark.parametrize("bad", ["mathjax/tex-nothing.js", "mathjax/es5/tex-chtml.js", "mathjax/startup.js"])
def test_unknown_component_is_a_clear_build_error(tmp_path, bad):
    with pytest.raises(ExtensionError, match=re.escape(repr(bad)) + ".*tex-chtml.js"):
        local_mathjax.check_mathjax(_app(tmp_path, bad))


def test_built_pages_load_mathjax_by_a_relative_url(book_html):
    """Every page with math loads the build's MathJax through a relative URL (so
    file:// works), and no page loads MathJax from anywhere else."""
    pages = sorted(book_html.rglob("*.html"))
    with_math = 0
    for page in pages:
        html = page.read_text(encoding="utf-8")
        srcs = re.findall(r'<script[^>]*\ssrc="([^"]*mathjax[^"]*)"', html, flags=re.I)
        if not srcs:
            continue
        with_math += 1
        rel = page.parent.relative_to(book_html).as_posix()
        up = "" if rel == "." else "../" * len(rel.split("/"))
        assert srcs == [f"{up}_static/{MATHJAX_PATH}"], (page, srcs)
        assert (page.parent / srcs[0]).resolve().is_file(), (page, srcs)
    assert with_math >= 5, f"only {with_math} pages load MathJax"


def test_math_only_in_a_cell_output_marks_the_page(tmp_path):
    """A page whose only math is in a cell's HTML output (a table header typeset by the
    book's module) is a page with equations, so MathJax is loaded on it."""
    from docutils import nodes
    from docutils.utils import new_document

    has = {}
    env = SimpleNamespace(docname="book/executed/x",
                          get_domain=lambda name: SimpleNamespace(data={"has_equations": has}))
    app = SimpleNamespace(env=env)
    doc = new_document("x")
    doc += nodes.raw("", "<table><th>alpha</th></table>", format="html")
    local_mathjax.mark_output_math(app, doc)
    assert has == {}
    doc += nodes.raw("", '<th><span class="math notranslate nohighlight">\\(\\alpha_1\\)'
                         "</span></th>", format="latex")
    local_mathjax.mark_output_math(app, doc)
    assert has == {}
    doc += nodes.raw("", '<th><span class="math notranslate nohighlight">\\(\\alpha_1\\)'
                         "</span></th>", format="html")
    local_mathjax.mark_output_math(app, doc)
    assert has == {"book/executed/x": True}
