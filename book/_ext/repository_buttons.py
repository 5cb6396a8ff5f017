"""Sphinx extension: the repository, issue and Binder buttons from one setting.

The theme draws a repository button, an issue button and a Binder launch
button on every page from ``repository: url:`` in ``_config.yml``. That
setting is empty by default, and then the book has none of these buttons
(no link to an address that does not exist); with an address, this extension
turns the repository and issue buttons on (Jupyter Book refuses them in
``_config.yml`` while the address is empty) and the theme adds the Binder
button. A real address can be given at
build time without editing the file, in the environment variable
``CAPASSIGN_REPOSITORY_URL`` (e.g. ``https://github.com/OWNER/capassign``);
it replaces the setting. An address that is not an https URL of the form
``https://HOST/OWNER/REPOSITORY`` stops the build with an error naming it.
"""

import os
import re

from sphinx.errors import ExtensionError

ENV = "CAPASSIGN_REPOSITORY_URL"
URL = re.compile(r"^https://[A-Za-z0-9.-]+/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+/?$")
# shown when there is an address (Jupyter Book refuses them in _config.yml without one)
BUTTONS = ("use_repository_button", "use_issues_button")
# never shown: they would edit or show the source on the repository's site
OFF = ("use_edit_page_button", "use_source_button")
LAUNCHERS = ("binderhub_url", "jupyterhub_url", "colab_url", "deepnote_url", "jupyterlite_url",
             "thebe")


def repository_url(config_url, environ=os.environ):
    """The repository address the book links to: the environment's, else the setting's ('' for none)."""
    url = (environ.get(ENV) or config_url or "").strip()
    if url and not URL.match(url):
        raise ExtensionError(f"repository url must look like https://HOST/OWNER/REPOSITORY, "
                             f"got {url!r} (from {ENV if environ.get(ENV) else '_config.yml'})")
    return url.rstrip("/")


def set_buttons(app, config):
    opts = dict(config.html_theme_options or {})
    url = repository_url(opts.get("repository_url", ""))
    opts["repository_url"] = url
    for key in BUTTONS:
        opts[key] = bool(url)
    for key in OFF:
        opts[key] = False
    if not url:
        launch = dict(opts.get("launch_buttons") or {})
        for key in LAUNCHERS:
            launch.pop(key, None)
        opts["launch_buttons"] = launch
    config.html_theme_options = opts


def setup(app):
    app.connect("config-inited", set_buttons, priority=100)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
