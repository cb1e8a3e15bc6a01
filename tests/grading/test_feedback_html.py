"""Feedback pages show learner markup as text (tformer_grading/guard/feedback_html.py).

Bug (issue 31): a feedback page rendered a learner's markdown cell and the HTML their
code displayed as they were, so a ``<script>`` or an ``onerror=`` ran for whoever
opened the page. Cause: nbgrader's feedback template renders markdown unsanitized,
and nbconvert's own sanitizer, when switched on, also escapes paragraphs and headings.
Guard: both go through :func:`clean_html`, which keeps the markup of a lesson and a
check. (tests/grading/test_classgrade.py opens a real graded learner's page.)

Bug (issue 32): the cleaner let a web image through, which the page fetched as it
opened (its owner learns who read the page, and when), and an image by a relative path,
which read a file beside the page; and it dropped the ``data:`` image a pasted image
becomes, so the learner's picture did not show. Guard: an ``<img>`` shows ``data:``
pictures only; a link never opens a ``data:`` page. (tests/grading/
test_feedback_page_inert.py opens the page of a learner who tries everything.)
"""

import pytest

from tformer_grading.guard.feedback_html import clean_html, markdown_html

PNG = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
)


@pytest.mark.parametrize(
    "hostile, gone",
    [
        ("<script>alert(1)</script>", "<script"),
        ('<img src="x" onerror="alert(2)">', "onerror"),
        ('<a href="javascript:alert(3)">x</a>', "javascript:"),
        ('<iframe src="https://example.org"></iframe>', "<iframe"),
        ('<p style="position:fixed">x</p>', "style="),
        ('<svg onload="alert(4)"></svg>', "<svg"),
    ],
)
def test_what_would_run_is_escaped_or_dropped(hostile, gone):
    assert gone not in clean_html(hostile)


def test_the_markup_of_lessons_and_checks_is_kept():
    link = (
        '<p class="tformer-lesson-link">The lesson explains this: <a href="../../book/'
        'ch01_shapes/lesson.ipynb#1.9-Scaling-by-the-head-size">§1.9</a></p>'
    )
    assert clean_html(link) == link
    table = "<table><tbody><tr><th>a</th><td><code>x</code></td></tr></tbody></table>"
    assert clean_html(table) == table
    for tag in ("<h2>Title</h2>", "<pre>x = 1</pre>", "<ul><li>a</li></ul>"):
        assert clean_html(tag) == tag


def test_rendered_markdown_loses_the_files_prefix_and_stays_clean():
    assert markdown_html('<a href="files/notes.txt">my notes</a>') == (
        '<a href="notes.txt">my notes</a>'
    )
    assert "<script" not in markdown_html("<p>hi</p><script>x()</script>")


@pytest.mark.parametrize(
    "image",
    [
        f'<img src="{PNG}" alt="my plot">',  # what a pasted image becomes
        '<img src="data:image/jpeg;base64,/9j/4AAQ" alt="photo" width="40">',
        # An SVG in an <img> runs no script, whatever it holds.
        '<img src="data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9ImFsZXJ0KDEpIi8+">',
    ],
)
def test_an_image_from_inside_the_page_shows(image):
    assert clean_html(image) == image


@pytest.mark.parametrize(
    "image",
    [
        '<img src="https://tracker.example/pixel.png" alt="my plot">',
        '<img src="//tracker.example/pixel.png" alt="my plot">',
        '<img src="../../../gradebook.db" alt="my plot">',
        '<img src="data:text/html;base64,PHNjcmlwdD4=" alt="my plot">',
        '<img src="data:image/svg+xml,<svg onload=alert(1)>" alt="my plot">',
        '<img src="data&colon;image/png;base64,iVBO" alt="my plot">',
        '<img src="javascript:alert(1)" alt="my plot">',
    ],
)
def test_an_image_from_anywhere_else_shows_its_text_and_loads_nothing(image):
    assert clean_html(image) == '<img alt="my plot">'


@pytest.mark.parametrize(
    "link",
    [
        '<a href="data:text/html;base64,PHNjcmlwdD4=">notes</a>',
        '<a href=" DATA:text/html,x">notes</a>',
        '<a href="data&colon;text/html,x">notes</a>',
        '<a href="da&#x74;a:text/html,x">notes</a>',
    ],
)
def test_a_link_never_opens_a_page_of_the_learners_making(link):
    assert clean_html(link) == "<a>notes</a>"


def test_links_a_learner_writes_are_kept():
    for link in (
        '<a href="https://arxiv.org/abs/1706.03762">paper</a>',
        '<a href="database.html">my notes</a>',  # relative: rewritten by the page
        '<a href="#my-notes">below</a>',
    ):
        assert clean_html(link) == link
