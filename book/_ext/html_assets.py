"""Sphinx extension: write each ``<script>`` of a rendered page once.

Sphinx 7.4 adds a script that an extension registers after the builder has
started (sphinx-thebe and sphinx-togglebutton do so for their inline
configuration) twice to every page: once as registered, once when it replays
the registry before writing. For sphinx-thebe's ``const THEBE_JS_URL = ...``
the second copy is a JavaScript ``SyntaxError`` on every page of the book,
which ``tests/book/test_browser.py`` reports. This handler drops the repeats,
keeping the first of each (same file or same inline body, same attributes).
"""


def _script_key(script):
    return (script.filename or "", script.priority, tuple(sorted(script.attributes.items())))


def drop_repeated_scripts(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for script in scripts:
        key = _script_key(script)
        if key not in seen:
            seen.add(key)
            unique.append(script)
    # in place: later handlers may still add page-specific scripts to this list
    scripts[:] = unique


def setup(app):
    # a late priority, so that the scripts other handlers add are seen too
    app.connect("html-page-context", drop_repeated_scripts, priority=900)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
