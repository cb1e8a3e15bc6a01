"""Sphinx extension: small fixes to the book's HTML.

1. A "launch" button on every notebook page that opens it in the learner's own JupyterLab.
2. Each script tag once: Jupyter Book 1.0 adds some inline scripts twice (sphinx-thebe's
   ``const THEBE_JS_URL = ...``), and the second ``const`` is a JavaScript error on every page.
3. A theme mode ("auto": the reader's system setting), without which the theme logs an error.

The launch button:

sphinx-book-theme only builds launch buttons for hosted services (Binder, JupyterHub, Colab) and
only when the book names a public repository. The course is run locally (see book/running.md), so
each notebook page links to the same file in a JupyterLab started from the course folder:
``jupyter lab`` serves ``http://localhost:8888/lab/tree/<path from the course root>``.
Set ``tformer_lab_url`` in ``_config.yml`` (``sphinx: config:``) for another address.
"""

from __future__ import annotations

from pathlib import Path


def _add_button(app, pagename, templatename, context, doctree):
    buttons = context.get("header_buttons")
    if buttons is None or context.get("page_source_suffix") != ".ipynb":
        return
    source = Path(app.env.doc2path(pagename)).relative_to(app.srcdir).as_posix()
    url = app.config.tformer_lab_url.rstrip("/") + "/" + source
    button = {
        "type": "link",
        "text": "JupyterLab (local)",
        "tooltip": "Open this notebook in your own JupyterLab",
        "icon": "fas fa-flask",
        "url": url,
        "label": "launch-jupyterlab-local-button",
    }
    # Join the theme's launch menu when it made one (hosted services configured), else make our own.
    for entry in buttons:
        if entry.get("label") == "launch-buttons":
            entry["buttons"].append(button)
            return
    buttons.append(
        {
            "type": "group",
            "tooltip": "Launch interactive content",
            "icon": "fas fa-rocket",
            "buttons": [button],
            "label": "launch-buttons",
        }
    )


def _dedupe_scripts(app, pagename, templatename, context, doctree):
    scripts, seen = context.get("script_files"), set()
    if not scripts:
        return
    unique = []
    for script in scripts:
        # The same script can come once with filename None and once with "" (inline scripts).
        key = (
            str(getattr(script, "filename", script) or ""),
            repr(sorted(getattr(script, "attributes", {}).items())),
        )
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def _theme_mode(app, pagename, templatename, context, doctree):
    # pydata-sphinx-theme logs a console error on a reader's first visit when no mode is set, and
    # sphinx-book-theme does not accept the theme option that sets it.
    if not context.get("default_mode"):
        context["default_mode"] = "auto"


def setup(app):
    app.add_config_value("tformer_lab_url", "http://localhost:8888/lab/tree", "html")
    app.connect("html-page-context", _dedupe_scripts, priority=900)
    app.connect("html-page-context", _theme_mode, priority=900)
    # After sphinx-book-theme's own launch buttons (priority 501).
    app.connect("html-page-context", _add_button, priority=502)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
