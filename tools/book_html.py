"""Sphinx extension: small fixes to the book's HTML.

1. The link to the learner kit on every page. ``html.announcement`` in ``_config.yml``
   holds it as ``href="course-kit.zip"`` (the zip tools/kit.py writes at the root of
   the build); the announcement is the same text on every page, so each page gets the
   path from where it is.
2. The repository's address, ``repository: url:`` in ``_config.yml``, in two MyST
   substitutions, ``{{ course_source }}`` (the landing page) and
   ``{{ course_repository }}`` (the instructors page): sentences with the address as a
   link when it is set, and when it is empty (no public repository) sentences that say
   how the course is had, with no address (and ``use_repository_button: false``: no
   header button pointing nowhere).
3. Each script tag once: Jupyter Book 1.0 adds some inline scripts twice (sphinx-thebe's
   ``const THEBE_JS_URL = ...``), and the second ``const`` is a JavaScript error on
   every page.
4. A theme mode ("auto": the reader's system setting), without which the theme logs an
   error.
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


def course_sentences(url: str) -> dict[str, str]:
    """The pages' sentences about the course's repository at ``url`` ("" for none)."""
    if url:
        link = f"[{url.removeprefix('https://').removeprefix('http://')}]({url})"
        return {
            "course_source": f"The course's source is at {link}.",
            "course_repository": (
                f"The course's repository, with `solutions/`, is {link} "
                "(`repository: url:` in `_config.yml`)."
            ),
        }
    return {
        "course_source": (
            "The kit is how the course is shared: it has no public repository."
        ),
        "course_repository": (
            "The course's repository, with `solutions/`, is not public: no page of "
            "this book and nothing in the kit contains the solutions or the hidden "
            "tests. Ask whoever runs your course for a copy (a published course sets "
            "`repository: url:` in `_config.yml`, and this page then shows it)."
        ),
    }


def _repository_substitution(app, config):
    url = (config.html_theme_options or {}).get("repository_url") or ""
    # A new dict: the default value is shared with every Sphinx config.
    config.myst_substitutions = {**config.myst_substitutions, **course_sentences(url)}


def _dedupe_scripts(app, pagename, templatename, context, doctree):
    scripts, seen = context.get("script_files"), set()
    if not scripts:
        return
    unique = []
    for script in scripts:
        # The same script can come once with filename None and once with "" (inline
        # scripts).
        key = (
            str(getattr(script, "filename", script) or ""),
            repr(sorted(getattr(script, "attributes", {}).items())),
        )
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"] = unique


def _theme_mode(app, pagename, templatename, context, doctree):
    # pydata-sphinx-theme logs a console error on a reader's first visit when no mode
    # is set, and sphinx-book-theme does not accept the theme option that sets it.
    if not context.get("default_mode"):
        context["default_mode"] = "auto"


def setup(app):
    app.connect("config-inited", _repository_substitution)
    app.connect("html-page-context", _dedupe_scripts, priority=900)
    app.connect("html-page-context", _theme_mode, priority=900)
    app.connect("html-page-context", _kit_link, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
