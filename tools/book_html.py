"""Sphinx extension: small fixes to the book's HTML.

1. The link to the learner kit on every page. ``html.announcement`` in ``_config.yml`` holds it
   as ``href="course-kit.zip"`` (the zip tools/kit.py writes at the root of the build); the
   announcement is the same text on every page, so each page gets the path from where it is.
2. The repository's address, ``repository: url:`` in ``_config.yml``, as the MyST substitution
   ``{{ repository_url }}`` (a link), so the landing page shows the one setting the header's
   repository button uses, not a second copy of it.
3. Each script tag once: Jupyter Book 1.0 adds some inline scripts twice (sphinx-thebe's
   ``const THEBE_JS_URL = ...``), and the second ``const`` is a JavaScript error on every page.
4. A theme mode ("auto": the reader's system setting), without which the theme logs an error.
"""

from __future__ import annotations

KIT = "course-kit.zip"


def _kit_link(app, pagename, templatename, context, doctree):
    announcement = context.get("theme_announcement")
    if announcement and f'href="{KIT}"' in announcement:
        href = context["pathto"](KIT, 1)
        context["theme_announcement"] = announcement.replace(
            f'href="{KIT}"', f'href="{href}"'
        )


def _repository_substitution(app, config):
    url = (config.html_theme_options or {}).get("repository_url")
    if url:
        shown = url.removeprefix("https://").removeprefix("http://")
        # A new dict: the default value is shared with every Sphinx config.
        config.myst_substitutions = {
            **config.myst_substitutions,
            "repository_url": f"[{shown}]({url})",
        }


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
    app.connect("config-inited", _repository_substitution)
    app.connect("html-page-context", _dedupe_scripts, priority=900)
    app.connect("html-page-context", _theme_mode, priority=900)
    app.connect("html-page-context", _kit_link, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
