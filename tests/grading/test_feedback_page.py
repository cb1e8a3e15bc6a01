"""The feedback page a learner receives is worth receiving (issue 29, item 2).

Bugs, from a reader's review (shared/reviews/2026-12-05/reader.md, problem 2): the page
(nbgrader's ``generate_feedback``, also run by the class command)
- linked the lesson section to ``../../book/ch01_shapes/lesson.ipynb#1.5-...``, which
  exists nowhere from a page sent by mail or an LMS (nor is it the book's page);
- showed each diagnosis as one unwrapped line, cut at the box's edge with its remedy;
- loaded MathJax from a CDN, so offline its maths was raw TeX;
- showed the hidden tests' source and a grader receipt at the end of each success line.
Guard: ``tformer_grading/feedback_page.py``, set in ``nbgrader_config.py``. The fast
tests render a graded ch01 notebook through the course's nbgrader configuration; the
slow ones open a page from the real ``nbgrader autograde`` and ``generate_feedback`` in
a headless Chromium with the network closed, at 1280 and 390 px.
"""

from __future__ import annotations

import copy
import html
import json
import re
import time
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import unquote

import nbformat
import pytest
from course import (
    ROOT,
    autograde,
    filled,
    make_course,
    nbgrader,
    page_text,
    released,
    solution_sources,
    submit,
)
from learners import MERGE_NO_TRANSPOSE
from nbformat.v4 import new_output

from tformer_grading import feedback_page
from tformer_grading.feedback_page import (
    HIDDEN_TEST_LINE,
    book_anchor,
    book_target,
    hide_hidden_tests,
    make_id,
    section_anchor,
    without_receipts,
)

CHAPTER = "ch01_shapes"
BOOK = "https://course.example.org/transformers"
HEADING = re.compile(r"^#{1,6} (.+?)\s*$")
BEGIN = "### BEGIN " + "HIDDEN TESTS"  # spelt apart: only solutions/ hold the marker


# ----------------------------------------------------------------------- the book


def page_headings(page: Path) -> list[str]:
    """The headings of book page ``page`` (a notebook): its markdown cells' ``#`` lines
    outside code fences."""
    found = []
    for cell in nbformat.read(page, as_version=4).cells:
        if cell.cell_type == "markdown":
            fenced = False
            for line in cell.source.splitlines():
                fenced ^= line.lstrip().startswith(("```", "~~~"))
                if not fenced and (m := HEADING.match(line)):
                    found.append(m[1])
    return found


def book_pages() -> list[Path]:
    return sorted((ROOT / "book").glob("*/*.ipynb"))


def book_anchors() -> dict[str, set[str]]:
    """``book/<chapter>/<name>`` -> the ids jupyter-book gives its headings."""
    return {
        f"book/{p.parent.name}/{p.stem}": {make_id(h) for h in page_headings(p)}
        for p in book_pages()
    }


def check_sections() -> set:
    """Every lesson section a check can send a learner to."""
    from tformer_grading import checks
    from tformer_grading.checks.diagnosis import sections_named

    found = set()
    for module in checks.exercise_modules():
        found |= sections_named(module)
    return found


def test_anchors_are_the_ids_jupyter_book_gives_the_headings():
    """jupyter-book names a section by docutils' make_id of its title (a test below
    checks it against the built book): every lesson heading's anchor, and the fallback
    for a grader without docutils, is that id, once per page."""
    from docutils import nodes

    for page in book_pages():
        titles = page_headings(page)
        ids = [nodes.make_id(t) for t in titles]
        assert [feedback_page._make_id(t) for t in titles] == ids, page
        assert len(set(ids)) == len(ids), f"{page}: two headings share an anchor"
    assert section_anchor("1.5", "Splitting into heads") == "splitting-into-heads"


def test_every_section_a_check_names_has_its_anchor_in_the_lesson():
    anchors = book_anchors()
    for s in check_sections():
        page = f"book/{s.chapter}/{s.page}"
        assert section_anchor(s.number, s.title) in anchors[page], s


def exercise_links() -> list[tuple[str, str, str]]:
    """(exercise, href, book page) for each relative link of the exercises' text."""
    found = []
    for source in sorted((ROOT / "solutions").glob("*/exercise.ipynb")):
        folder = f"book/{source.parent.name}"
        for cell in nbformat.read(source, as_version=4).cells:
            if cell.cell_type != "markdown":
                continue
            for href in re.findall(r"\]\(([^)\s]+)\)", cell.source):
                if not re.match(r"[a-z]+:|#", href):
                    target = book_target(href, folder)
                    assert target, f"{folder}/exercise.ipynb: {href} is no book page"
                    found.append((folder, href, target[0].rsplit(".", 1)[0]))
    return found


def test_every_link_of_an_exercise_opens_a_page_of_the_book():
    """Relative links of the exercises' text go to book pages the table of contents
    builds (the feedback page sends them there), at anchors the pages have."""
    toc = (ROOT / "_toc.yml").read_text()
    anchors = book_anchors()
    for folder, href, page in exercise_links():
        assert f"file: {page}\n" in toc, f"{folder}: {page} is not in _toc.yml"
        path, fragment = book_target(href, folder)
        assert not fragment or book_anchor(path, fragment) in anchors[page], href


@pytest.mark.slow
@pytest.mark.xdist_group("book")  # beside the other tests of the built book: one build
def test_the_anchors_and_pages_are_in_the_built_book():
    """The rule above, against what jupyter-book built (tests/book/book.py)."""
    from book import HTML, build_book

    proc = build_book()
    assert proc.returncode == 0, f"jupyter-book build failed:\n{proc.stdout[-4000:]}"

    def ids(page: str) -> set[str]:
        return set(re.findall(r'\bid="([^"]+)"', (HTML / f"{page}.html").read_text()))

    for s in check_sections():
        page = f"book/{s.chapter}/{s.page}"
        assert section_anchor(s.number, s.title) in ids(page), (s, page)
    for folder, href, page in exercise_links():
        path, fragment = book_target(href, folder)
        assert (HTML / f"{page}.html").is_file(), href
        assert not fragment or book_anchor(path, fragment) in ids(page), href


# ----------------------------------------------------------------- the page, rendered


def graded_notebook() -> nbformat.NotebookNode:
    """ch01's instructor notebook as nbgrader's autograde leaves it for a learner whose
    ``split_heads`` views [B, S, D] straight: the real check's diagnosis, with the
    lesson link it displays in a kernel, and success lines signed as while grading."""
    import IPython
    from IPython import display as ipython_display

    from tformer_grading.checks import ch01
    from tformer_grading.checks.diagnosis import CheckFailure
    from tformer_grading.guard import receipts

    def split_view_straight(x, n_heads):
        return x.view(x.size(0), n_heads, -1, x.size(-1) // n_heads)

    with pytest.raises(CheckFailure) as info:
        ch01.check_split_heads(split_view_straight)
    shown = []
    with pytest.MonkeyPatch.context() as patch:  # a kernel, for the link's display
        patch.setattr(IPython, "get_ipython", lambda: SimpleNamespace(kernel=True))
        patch.setattr(ipython_display, "display", lambda data, raw: shown.append(data))
        traceback = info.value._render_traceback_()
    sign, install_key = receipts._make_signer()
    install_key("k" * 32)
    success = "".join(
        sign(f"✓ merge_heads: {what}") + "\n"
        for what in ("matches the reference on 7 cases", "written by hand")
    )
    nb = nbformat.read(ROOT / "solutions" / CHAPTER / "exercise.ipynb", as_version=4)
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade") and not meta.get("solution"):
            meta["score"] = 0 if meta["grade_id"] == "test_split_heads" else 2
        if meta.get("grade_id") == "test_split_heads":
            cell.outputs = [
                new_output("display_data", data=shown[0]),
                new_output(
                    "error",
                    ename="CheckFailure",
                    evalue=str(info.value),
                    traceback=traceback,
                ),
            ]
        elif meta.get("grade_id") == "test_merge_heads":
            cell.outputs = [new_output("stream", name="stdout", text=success)]
    return nb


def render(nb, **feedback) -> str:
    """``nb``'s feedback page as ``nbgrader generate_feedback`` writes it with the
    course's nbgrader_config.py (``feedback``: LearnerFeedback settings), but with the
    scores read from the notebook, not a gradebook."""
    from nbgrader.converters import GenerateFeedback
    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    for name, value in feedback.items():
        setattr(config.LearnerFeedback, name, value)
    converter = GenerateFeedback(config=config)  # adds nbgrader's template settings
    # As nbgrader's API (the class command's workers) does: it insists on this name.
    converter.update_config(Config({"HTMLExporter": {"template_name": "feedback"}}))
    exporter = converter.exporter_class(parent=converter, config=converter.config)
    for preprocessor in converter.preprocessors:
        if not str(preprocessor).endswith("GetGrades"):
            exporter.register_preprocessor(preprocessor)
    resources = {
        "nbgrader": {
            "notebook": "exercise",
            "assignment": CHAPTER,
            "student": "bob",
            "score": 10,
            "max_score": 12,
            "late_penalty": 0,
        }
    }
    page, _ = exporter.from_notebook_node(copy.deepcopy(nb), resources=resources)
    return page


def shown(page: str, tmp_path: Path) -> str:
    """What a learner reads of ``page``, white space collapsed (course.page_text)."""
    path = tmp_path / "exercise.html"
    path.write_text(page)
    return page_text(path)


def links(page: str) -> list[str]:
    return [html.unescape(h) for h in re.findall(r'<a\b[^>]*\bhref="([^"]*)"', page)]


@pytest.fixture(scope="module")
def notebook():
    return graded_notebook()


def test_the_page_keeps_hidden_tests_and_receipts_to_the_grader(notebook, tmp_path):
    source = json.dumps(notebook)
    assert BEGIN in source and "[grader receipt 1:" in source  # the graded notebook
    page = render(notebook, book_url="")
    text = shown(page, tmp_path)
    assert "HIDDEN TESTS" not in page and "check_by_hand" not in page
    assert text.count(HIDDEN_TEST_LINE) == 3  # one per test cell that has hidden tests
    assert "grader receipt" not in page
    assert "on 7 cases ✓ merge_heads: written by hand" in text
    assert "Score: 0.0 / 2.0" in text and "sequence and head axes confused" in text


def test_without_a_book_address_the_page_names_the_kit_file_and_links_nowhere(
    notebook, tmp_path
):
    page = render(notebook, book_url="")
    text = shown(page, tmp_path)
    kit = "book/ch01_shapes/lesson.ipynb in your course kit"
    heads = "book/ch01_shapes/heads.ipynb in your course kit"
    assert f"The lesson explains every step: {kit}, attention for one head" in text
    assert text.count(kit) == 1 and text.count(heads) == 1, "named once a page"
    assert "The lesson explains this: §1.5 'Splitting into heads'" in text
    assert [href for href in links(page) if not href.startswith("#")] == []


def test_with_a_book_address_the_page_links_the_lesson_section_there(notebook):
    page = render(notebook, book_url=BOOK + "/")
    lesson = f"{BOOK}/book/ch01_shapes/lesson.html"
    heads = f"{BOOK}/book/ch01_shapes/heads.html"
    anchors = book_anchors()
    outside = {h for h in links(page) if not h.startswith("#")}
    assert f"{heads}#splitting-into-heads" in outside  # the diagnosis's section
    assert {
        lesson,
        heads,
    } <= outside  # the introduction's "lesson.ipynb", "heads.ipynb"
    for href in outside:  # the exercise's own links to sections
        url, _, anchor = href.partition("#")
        assert url in (lesson, heads), href
        page = url.removeprefix(f"{BOOK}/").removesuffix(".html")
        assert anchor == "" or anchor in anchors[page], href
    for href in links(page):  # and in-page links land on the page
        if href.startswith("#"):
            # nbconvert writes a heading's id percent-encoded, as its link
            assert any(
                f'{attr}="{html.escape(target)}"' in page
                for attr in ("id", "name")
                for target in (href[1:], unquote(href[1:]))
            ), href


def test_the_book_address_defaults_to_the_course_configs_baseurl(
    notebook, tmp_path, monkeypatch
):
    """nbgrader runs in the course folder: html.baseurl of its _config.yml (the address
    jupyter-book publishes at) is the book's, and a non-web address links nowhere."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "_config.yml").write_text(f"html:\n  baseurl: {BOOK}\n")
    assert f'href="{BOOK}/book/ch01_shapes/heads.html#splitting' in render(notebook)
    (tmp_path / "_config.yml").write_text("html:\n  baseurl: file:///home/me/_build\n")
    assert "file:" not in " ".join(links(render(notebook)))


def test_the_page_carries_its_maths_renderer_and_wraps_its_output(notebook):
    page = render(notebook, book_url="")
    assert "cdnjs" not in page and "<script src=" not in page
    assert 'id="tformer-mathjax"' in page and "white-space: pre-wrap" in page
    size = len(page.encode())
    assert size < 1_300_000, f"the page is {size:,} bytes"
    no_maths = copy.deepcopy(notebook)
    for cell in no_maths.cells:
        if cell.cell_type == "markdown":
            cell.source = cell.source.replace("$", "")
    assert len(render(no_maths, book_url="").encode()) < 250_000  # no MathJax


def test_the_page_shows_a_checks_picture_with_its_caption_and_alt_text(notebook):
    """A failed check's picture (tformer_grading.pictures), as the kernel displayed
    it: in the page, inside it (a data: image, which the page's policy allows), with
    the alt text and caption the check wrote."""
    import torch

    from tformer_grading.pictures.attention_maps import draw_mask

    keep = torch.ones(4, 4, dtype=torch.bool)
    picture = draw_mask(keep, keep.tril(), where="case size=4, batch 0, head 0")
    data, metadata = picture.bundle()
    nb = copy.deepcopy(notebook)
    cell = next(
        c
        for c in nb.cells
        if c.metadata.get("nbgrader", {}).get("grade_id") == "test_split_heads"
    )
    cell.outputs.insert(0, new_output("display_data", data=data, metadata=metadata))
    page = render(nb)
    figure = re.search(r'<figure class="tformer-picture">(<img [^>]*>)', page)
    assert figure, "the picture is not in the page"
    attributes = dict(re.findall(r'(\w+)="([^"]*)"', figure[1]))
    assert attributes["src"] == f"data:image/png;base64,{data['image/png']}"
    assert html.unescape(attributes["alt"]) == picture.alt
    assert f"<figcaption>{html.escape(picture.caption)}</figcaption>" in page
    assert "img-src data:" in page  # the page's policy lets it show


def test_hidden_test_regions_become_one_line_each():
    source = f"a()\n{BEGIN}\nb()\n### END HIDDEN TESTS\nc()\n    {BEGIN}\n    d()\n"
    hidden = hide_hidden_tests(source, "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
    assert hidden == f"a()\n{HIDDEN_TEST_LINE}\nc()\n    {HIDDEN_TEST_LINE}\n"


def test_receipts_are_dropped_and_the_line_kept():
    from tformer_grading.guard import receipts

    sign, install_key = receipts._make_signer()
    install_key("x" * 32)
    line = "✓ split_heads: matches the reference on 9 cases"
    assert without_receipts(sign(line) + "\n" + sign(line)) == f"{line}\n{line}"


def test_links_a_page_sent_alone_can_follow():
    rewrite = feedback_page.rewrite_links
    here = "book/ch03_bughunt"
    link = '<a href="../ch01_shapes/heads.ipynb#1.9-Scaling-by-the-head-size">1</a>'
    lesson = f"{BOOK}/book/ch01_shapes/heads.html"
    assert rewrite(link, BOOK, here) == (
        f'<a href="{lesson}#scaling-by-the-head-size">1</a>'
    )
    # JupyterLab's anchors (jupyterlab-myst's, plain JupyterLab's) are not the book's.
    myst = link.replace("1.9-Scaling-by", "id-1-9-scaling-by")
    assert rewrite(myst, BOOK, here) == rewrite(link, BOOK, here)
    unknown = link.replace("1.9-Scaling-by", "9.9-No")
    assert rewrite(unknown, BOOK, here) == f'<a href="{lesson}">1</a>'
    assert rewrite(link, "", here) == (
        "1 (<code>book/ch01_shapes/heads.ipynb</code> in your course kit)"
    )
    # Without a book, a page names each kit file once: an exercise links its lesson
    # up to ten times.
    named: set[str] = set()
    first, again = (rewrite(link, "", here, named) for _ in range(2))
    assert first == rewrite(link, "", here) and again == "1"
    whole = '<a href="../ch01_shapes/heads.ipynb">heads.ipynb</a>'
    assert rewrite(whole, "", here, named) == (
        "<code>book/ch01_shapes/heads.ipynb</code>"
    )
    # The learner's own relative links keep their text; web and in-page links stay.
    assert rewrite('<a href="notes/x.png">my &amp; plot</a>', BOOK, here) == (
        "my &amp; plot"
    )
    for kept in (
        '<a href="https://arxiv.org/abs/1706.03762">paper</a>',
        '<a href="#t">',
    ):
        assert rewrite(kept, BOOK, here) == kept


# -------------------------------------------------------- the real page, in a browser


@pytest.fixture(scope="module")
def real_page(tmp_path_factory) -> Path:
    """A learner's feedback page from the real nbgrader CLI: autograde, then
    generate_feedback with the book's address set (the course's nbgrader_config.py)."""
    course = make_course(tmp_path_factory.mktemp("feedback_page"), CHAPTER)
    right = solution_sources(CHAPTER)
    nb = filled(released(course, CHAPTER), {**right, "merge_heads": MERGE_NO_TRANSPOSE})
    submit(course, CHAPTER, "bob", nb)
    autograde(course, CHAPTER)
    nbgrader(
        course,
        "generate_feedback",
        CHAPTER,
        "--force",
        f"--LearnerFeedback.book_url={BOOK}",
    )
    # The receipts stay in the graded notebook, where VerifyReceipts reads them.
    graded = course / "autograded" / "bob" / CHAPTER / "exercise.ipynb"
    assert "[grader receipt" in graded.read_text()
    return course / "feedback" / "bob" / CHAPTER / "exercise.html"


# In the page: every diagnosis box's overflow, the maths, the text a learner sees.
MEASURE = """
const boxes = [...document.querySelectorAll('div.output_error, div.output_stream')];
return {
  boxes: boxes.length,
  overflowing: boxes.filter(b => b.scrollWidth > b.clientWidth)
                    .map(b => [b.scrollWidth, b.clientWidth, b.innerText.slice(0, 60)]),
  page: [document.documentElement.scrollWidth, window.innerWidth],
  maths: document.querySelectorAll('mjx-container[jax="SVG"]').length,
  // TeX errors: CHTML output marks them mjx-merror, SVG output (this page's) a node
  errors: document.querySelectorAll('mjx-merror, [data-mml-node="merror"]').length,
  text: document.body.innerText,
  links: [...document.querySelectorAll('a[href]')].map(a => a.getAttribute('href')),
  ids: [...document.querySelectorAll('[id], a[name]')].map(e => e.id || e.name),
};
"""


@pytest.mark.slow
def test_the_real_page_reads_well_offline_at_desktop_and_phone_width(real_page):
    from browser import (
        chromium,
        console_errors,
        open_typeset,
        outside_requests,
        requested_urls,
    )

    from book import SCREENSHOTS

    started = time.perf_counter()
    anchors = book_anchors()
    with chromium(real_page.parent / ".chromium") as driver:
        for width in (1280, 390):
            driver.set_window_size(width, 1000)
            open_typeset(driver, real_page)
            seen = driver.execute_script(MEASURE)
            urls = [u for u in requested_urls(driver) if not u.startswith("chrome:")]
            assert outside_requests(urls) == [] and console_errors(driver) == []
            assert all(u == real_page.as_uri() or u.startswith("data:") for u in urls)
            assert seen["maths"] >= 2 and seen["errors"] == 0, width
            assert not re.search(r"\$[^$\n]+\$", seen["text"]), "raw TeX shown"
            assert seen["boxes"] >= 3 and seen["overflowing"] == [], width
            assert seen["page"][0] <= seen["page"][1], f"page wider than {width} px"
            assert "✗ merge_heads" in seen["text"], "no diagnosis shown"
            assert "BEGIN HIDDEN TESTS" not in seen["text"]
            assert "grader receipt" not in seen["text"]
            for href in seen["links"]:
                if href.startswith("#"):
                    assert {href[1:], unquote(href[1:])} & set(seen["ids"]), href
                    continue
                page, _, anchor = href.removeprefix(f"{BOOK}/").partition("#")
                assert href.startswith(f"{BOOK}/book/") and page.endswith(".html"), href
                assert anchor == "" or anchor in anchors[page[: -len(".html")]], href
            assert (
                f"{BOOK}/book/ch01_shapes/heads.html#merging-heads-back"
                in seen["links"]
            )
            if width == 1280:
                SCREENSHOTS.mkdir(parents=True, exist_ok=True)
                height = driver.execute_script("return document.body.scrollHeight")
                driver.set_window_size(width, min(height, 4000))
                driver.save_screenshot(str(SCREENSHOTS / "feedback_page.png"))
    assert time.perf_counter() - started < 60
