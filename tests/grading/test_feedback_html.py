"""Feedback pages show learner markup as text (tformer_grading/guard/feedback_html.py).

Bug (issue 31): a feedback page rendered a learner's markdown cell and the HTML their
code displayed as they were, so a ``<script>`` or an ``onerror=`` ran for whoever
opened the page. Cause: nbgrader's feedback template renders markdown unsanitized,
and nbconvert's own sanitizer, when switched on, also escapes paragraphs and headings.
Guard: both go through :func:`clean_html`, which keeps the markup of a lesson and a
check. (tests/grading/test_classgrade.py opens a real graded learner's page.)
"""

import pytest

from tformer_grading.guard.feedback_html import clean_html, markdown_html


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
    assert markdown_html('<img src="files/fig.png" alt="f">') == (
        '<img src="fig.png" alt="f">'
    )
    assert "<script" not in markdown_html("<p>hi</p><script>x()</script>")
