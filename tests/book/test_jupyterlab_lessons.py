"""The kit's lessons read in JupyterLab as in the book.

Bug (issue 29, reader review 2026-12-05, problem 1): a learner who opened
``book/ch01_shapes/*.ipynb`` in JupyterLab, as the book and the kit's README say,
read the lessons' MyST source: directive fields (``:alt:``, ``:name:``) instead of the
diagrams, ``{glue:text}`` placeholders instead of the measured numbers, raw ``{cite}``,
``{doc}`` and ``{seed}`` roles, and the bug hunt's answers open next to the code to
debug. Cause: JupyterLab renders plain Markdown only, and the values of the book's roles
exist only in the book's build. Guard: ``jupyterlab-myst`` in the learner's requirements
renders the MyST, and ``tools/kit_lessons.py`` writes the build's values into the kit's
notebooks. This test opens the built kit's chapter 1 pages (a figure, glued numbers, a
note, maths, a bug hunt whose answers are dropdowns) and the graded bug hunt of chapter
3 in a real JupyterLab, with the network closed, and reads them as a learner sees them.
"""

from __future__ import annotations

import html
import re
import time
import zipfile

import pytest
from browser import (
    chromium,
    jupyterlab,
    outside_requests,
    requested_urls,
    require_chromium,
    wait_for,
    wait_for_notebook,
)

from book import HTML, SCREENSHOTS, build_book

# One build of the book per worker: every user of it runs on the same one.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("book")]

# Chapter 1's three pages: the diagram, the bug hunt's folded answers, the glued numbers.
LESSON = "book/ch01_shapes/lesson.ipynb"
HEADS = "book/ch01_shapes/heads.ipynb"
TIMING = "book/ch01_shapes/timing.ipynb"
BUGHUNT = "book/ch03_bughunt/exercise.ipynb"
GLUED = "What this run shows"
# The bug hunt's first answer, folded in a dropdown under this title.
ANSWER_TITLE = "Bug 1 — look at the einsum"
ANSWER = "The einsum attends across heads, not tokens"
# What a role or directive left unrendered would show.
RAW_MYST = re.compile(
    r"\{(glue|cite|doc|ref|numref|section|seed|seedtr|seed-quote|figure|dropdown)"
    r"[:}]|^:(alt|name|width|code):|^(:::|```)",
    re.MULTILINE,
)
RENDERED_MARKDOWN = (
    "return Array.from(document.querySelectorAll("
    "'.jp-NotebookPanel:not(.lm-mod-hidden) .jp-MarkdownCell .jp-RenderedMarkdown, "
    ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-MarkdownCell .myst'))"
    ".map(e => e.innerText).join('\\n')"
)
# Every markdown cell shows what jupyterlab-myst made of it (it renders them one by one,
# after the notebook has opened), and every image in them is drawn.
ALL_RENDERED = (
    "const cells = Array.from(document.querySelectorAll("
    "'.jp-NotebookPanel:not(.lm-mod-hidden) .jp-MarkdownCell'));"
    "return cells.length > 0 && cells.every(c => {"
    " const m = c.querySelector('.myst');"
    " return m && (m.innerText.trim() || m.querySelector('img')); })"
    " && Array.from(document.querySelectorAll('.jp-MarkdownCell img'))"
    ".every(i => i.complete && i.naturalWidth > 0)"
)


def _plain(text: str) -> str:
    """Text compared as a reader reads it: one space between words, straight quotes."""
    return " ".join(text.replace("’", "'").replace("‘", "'").split())


def book_paragraph(page: str, start: str) -> str:
    """The text of the paragraph of ``page`` that starts with ``start`` in bold."""
    source = (HTML / page).read_text(encoding="utf-8")
    match = re.search(
        rf"<p><strong>{re.escape(start)}</strong>.*?</p>", source, re.DOTALL
    )
    assert match, f"{page} has no paragraph starting '{start}'"
    return _plain(html.unescape(re.sub(r"<[^>]+>", "", match.group(0))))


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    """The course kit of the shared book build, unpacked as a learner unpacks it."""
    require_chromium()
    proc = build_book()
    assert proc.returncode == 0, f"the book or its kit failed:\n{proc.stdout[-8000:]}"
    folder = tmp_path_factory.mktemp("kit")
    with zipfile.ZipFile(HTML / "course-kit.zip") as archive:
        archive.extractall(folder)
    (course,) = folder.iterdir()
    return course


def _open(driver, base, token, path, workspace):
    # A workspace of its own: JupyterLab would otherwise restore the last one's tabs.
    driver.get(f"{base}lab/workspaces/{workspace}/tree/{path}?reset&token={token}")
    wait_for_notebook(driver)
    wait_for(
        driver,
        ALL_RENDERED,
        what=f"every markdown cell of {path} to be rendered by jupyterlab-myst",
    )


def _screenshot(driver, element, name: str) -> None:
    driver.execute_script("arguments[0].scrollIntoView({block: 'start'})", element)
    time.sleep(0.5)
    driver.save_screenshot(str(SCREENSHOTS / name))


def test_lessons_read_in_jupyterlab_as_in_the_book(kit, tmp_path, capsys):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with (
        jupyterlab(kit, tmp_path) as (base, token),
        chromium(tmp_path / "chromium", width=1400, height=1000) as driver,
    ):
        for path in (LESSON, HEADS, TIMING):
            _open(driver, base, token, path, path.rsplit("/", 1)[1].split(".")[0])
            shown = driver.execute_script(RENDERED_MARKDOWN)
            raw = sorted({m.group(0) for m in RAW_MYST.finditer(shown)})
            assert not raw, f"MyST left as source in {path}: {raw}"
            page = driver.execute_script("return document.body.innerText")
            assert "{glue" not in page, f"a {{glue}} role is shown as text in {path}"
            # Maths typeset (KaTeX), no dollar sign left.
            assert driver.execute_script(
                "return document.querySelectorAll('.jp-MarkdownCell .katex').length"
            ), f"no maths typeset in {path}"
            assert "$" not in shown, f"raw $ maths in {path}"
            if path == LESSON:
                _check_the_figure(driver)
            elif path == TIMING:
                _check_the_glued_numbers(driver)
            else:
                _check_the_folded_answers(driver)

        # The graded bug hunt quotes the seed's comments as code, no "004:" role text.
        _open(driver, base, token, BUGHUNT, "bughunt")
        shown = driver.execute_script(RENDERED_MARKDOWN)
        raw = sorted({m.group(0) for m in RAW_MYST.finditer(shown)})
        assert not raw and "004:" not in shown, f"MyST left as source in {BUGHUNT}"
        quoted = driver.execute_script(
            "return Array.from(document.querySelectorAll('.jp-MarkdownCell td code'))"
            ".map(c => c.innerText)"
        )
        assert "输出投影" in quoted, quoted
        assert not outside_requests(requested_urls(driver))
    with capsys.disabled():
        print(
            f"\nscreenshots of the kit's lesson in JupyterLab in {SCREENSHOTS}: "
            "jupyterlab-lesson-glued.png, jupyterlab-lesson-bughunt-folded.png"
        )


def _check_the_figure(driver):
    """The diagram is an image, drawn, with its caption."""
    figure = driver.execute_script(
        "const f = document.querySelector('.jp-MarkdownCell figure');"
        "if (!f) return null; const i = f.querySelector('img');"
        "return {src: i && i.src, width: i && i.complete && i.naturalWidth,"
        " caption: f.innerText}"
    )
    assert figure, f"no figure rendered in {LESSON}"
    assert "model_ch01.svg" in figure["src"] and figure["width"], figure
    assert "The whole model" in figure["caption"], figure


def _check_the_glued_numbers(driver):
    """The glued numbers are the book's, in the same sentence as the book's, under the
    kit's note on whose run they come from."""
    paragraph = driver.execute_script(
        "return Array.from(document.querySelectorAll('.jp-MarkdownCell .myst p'))"
        ".map(p => p.innerText).find(t => t.startsWith(arguments[0]))",
        GLUED,
    )
    book = book_paragraph("book/ch01_shapes/timing.html", GLUED)
    assert paragraph, f"no paragraph '{GLUED}…' in JupyterLab"
    assert _plain(paragraph) == book, f"JupyterLab: {paragraph}\nthe book: {book}"
    note = driver.execute_script(
        "const a = document.querySelector("
        "'.jp-MarkdownCell aside.myst-admonition'); return a && a.innerText"
    )
    assert note and "Note" in note and "run that built the book" in note, note
    glued = driver.execute_script(
        "return Array.from(document.querySelectorAll('.jp-MarkdownCell'))"
        ".find(c => c.innerText.includes(arguments[0]))",
        GLUED,
    )
    _screenshot(driver, glued, "jupyterlab-lesson-glued.png")


def _check_the_folded_answers(driver):
    """The bug hunt's answers stay folded until the learner opens them."""
    dropdowns = driver.execute_script(
        "return Array.from(document.querySelectorAll('.jp-MarkdownCell details'))"
        ".map(d => [d.open, d.querySelector('summary').innerText.trim()])"
    )
    assert len(dropdowns) >= 4, dropdowns
    assert not [title for is_open, title in dropdowns if is_open], dropdowns
    summary = driver.execute_script(
        "return Array.from(document.querySelectorAll('.jp-MarkdownCell summary'))"
        ".find(s => s.innerText.trim() === arguments[0])",
        ANSWER_TITLE,
    )
    assert summary is not None, dropdowns
    answer = summary.find_element("xpath", "..").find_element("css selector", "p")
    assert ANSWER in answer.get_attribute("textContent")
    assert not answer.is_displayed(), "the answer shows before it is opened"
    _screenshot(driver, summary, "jupyterlab-lesson-bughunt-folded.png")
    summary.click()
    wait_for(
        driver,
        "return arguments[0].parentElement.open",
        what="the dropdown to open",
        args=(summary,),
    )
    assert answer.is_displayed() and ANSWER in answer.text
    # Its folded code cell (the book's hide-input) stays collapsed.
    assert driver.execute_script(
        "return document.querySelectorAll('.jp-CodeCell .jp-InputPlaceholder').length"
    ), "the bug hunt's answer code is not folded"
