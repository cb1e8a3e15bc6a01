"""Learner text on a feedback page is shown, never run.

nbgrader's feedback page renders every markdown cell of the graded notebook and
every output, and a learner writes both: a ``<script>`` or an ``onerror=`` in a
markdown cell, or ``display(HTML(...))`` in an answer, would run in the browser of
whoever opens the page (the learner, or an instructor going through the class).
``nbgrader_config.py`` makes nbconvert call :func:`clean_html` on HTML outputs
(``HTMLExporter.sanitize_html``) and :func:`markdown_html` on rendered markdown
(nbgrader's feedback template passes it through ``strip_files_prefix``, which this
replaces), both through ``tformer_grading.feedback_page``'s filters, which then
rewrite the links for a page read on its own. Both keep the markup a lesson or a
check uses (headings, paragraphs, lists, tables, code, links, images) and escape
everything else: nbconvert's own cleaner also escapes ``<p>`` and headings, which
would leave the page unreadable.

>>> clean_html('<p class="x">hi <a href="s.html#a" onclick="f()">s</a></p>')
'<p class="x">hi <a href="s.html#a">s</a></p>'
>>> clean_html('<script>alert(1)</script>')
'&lt;script&gt;alert(1)&lt;/script&gt;'
"""

from __future__ import annotations

import bleach

TAGS = frozenset(bleach.ALLOWED_TAGS) | {
    "p", "div", "span", "br", "hr", "pre", "code", "kbd", "samp", "var", "del",
    "ins", "sub", "sup", "mark", "small", "h1", "h2", "h3", "h4", "h5", "h6",
    "table", "thead", "tbody", "tfoot", "tr", "th", "td", "caption", "img",
    "dl", "dt", "dd", "details", "summary", "figure", "figcaption",
}  # fmt: skip
ATTRIBUTES = {
    "*": ["class", "id", "title"],
    "a": ["href", "title", "class", "id"],
    "img": ["src", "alt", "title", "width", "height", "class"],
    "th": ["colspan", "rowspan", "align", "class"],
    "td": ["colspan", "rowspan", "align", "class"],
}
# Relative links (a lesson section) carry no protocol and are kept; javascript: is not.
PROTOCOLS = ["http", "https", "mailto"]
_CLEANER = bleach.Cleaner(
    tags=TAGS, attributes=ATTRIBUTES, protocols=PROTOCOLS, strip=False
)


def clean_html(html) -> str:
    """HTML a learner may have written, with only harmless markup left as markup."""
    html = html.decode() if isinstance(html, bytes) else str(html)
    return _CLEANER.clean(html)


def markdown_html(html) -> str:
    """nbconvert's ``strip_files_prefix``, then :func:`clean_html`."""
    from nbconvert.filters import strip_files_prefix

    return clean_html(strip_files_prefix(html))
