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

An image shows only from inside the page (a ``data:`` image, which is what a pasted
image becomes): one from the web would tell its owner who opened the page, and when,
and one by a relative path reads a file beside the page. An ``<img>`` runs no script,
SVG included. Without its source, the image shows its text:

>>> clean_html('<img src="https://tracker.example/p.png" alt="my plot">')
'<img alt="my plot">'

The feedback page's Content-Security-Policy (``tformer_grading.feedback_page``) forbids
the same things again, should markup ever get past this cleaner.
"""

from __future__ import annotations

import html
import re

import bleach

TAGS = frozenset(bleach.ALLOWED_TAGS) | {
    "p", "div", "span", "br", "hr", "pre", "code", "kbd", "samp", "var", "del",
    "ins", "sub", "sup", "mark", "small", "h1", "h2", "h3", "h4", "h5", "h6",
    "table", "thead", "tbody", "tfoot", "tr", "th", "td", "caption", "img",
    "dl", "dt", "dd", "details", "summary", "figure", "figcaption",
}  # fmt: skip
COMMON = frozenset({"class", "id", "title"})
#: The images an ``<img>`` may show: base64 data of a picture type, written plainly (an
#: entity or a space in the scheme is an attempt to slip past a filter, not a picture).
DATA_IMAGE = re.compile(
    r"data:image/(?:png|jpeg|gif|webp|bmp|svg\+xml)(?:;[\w.+-]+=[\w.+-]+)*;base64,"
    r"[A-Za-z0-9+/=\s]*",
    re.IGNORECASE,
)


def _link(tag: str, name: str, value: str) -> bool:
    # A data: link opens a page of the learner's making, where a browser lets it.
    if name == "href":  # read as bleach reads it: entities decoded, blanks dropped
        plain = re.sub(r"[`\x00-\x20\x7f-\xa0]+", "", html.unescape(value))
        return not plain.lower().startswith("data:")
    return name in COMMON


def _image(tag: str, name: str, value: str) -> bool:
    if name == "src":
        return DATA_IMAGE.fullmatch(value) is not None
    return name in COMMON | {"alt", "width", "height"}


ATTRIBUTES = {
    "*": sorted(COMMON),
    "a": _link,
    "img": _image,
    "th": ["colspan", "rowspan", "align", "class"],
    "td": ["colspan", "rowspan", "align", "class"],
}
# Relative links (a lesson section) carry no protocol and are kept; javascript: is not.
# data: is for images only (the filters above).
PROTOCOLS = ["http", "https", "mailto", "data"]
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
