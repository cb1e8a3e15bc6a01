"""Every lesson ends with "Check your understanding": questions, answers in dropdowns.

The section comes right after the Recap, as the lesson's last cell. Each question is a
paragraph ``**k.** ...``, followed by a MyST ``:::{dropdown} Answer`` fence (colon_fence
is on in _config.yml) whose answer is not empty and sends the learner back to a section
of the lesson: ``§N.k`` with the lesson's own chapter number. Every ``§N.k`` an answer
cites must be a heading of chapter N, and where the citation gives the title
(``§3.5 'Fill values, ...'``) it must be that heading's title: renumbering or retitling
a section fails here until the answers follow. Reads the sources only: fast, no kernel.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import jupytext
import pytest
from markdown_it.renderer import RendererHTML
from myst_parser.config.main import MdParserConfig
from myst_parser.parsers.mdit import create_md_parser

ROOT = Path(__file__).resolve().parents[2]


def _chapter_pages(folder: Path) -> list[Path]:
    """A chapter's numbered pages: ``lesson.py``, then the pages that go on numbering
    its sections (chapter 1's ``heads.py``); not its unnumbered side pages."""
    more = [
        p
        for p in sorted(folder.glob("*.py"))
        if p.name != "lesson.py"
        and re.search(r"^# ## \d+\.\d+ ", p.read_text(encoding="utf-8"), re.M)
    ]
    return [folder / "lesson.py", *more]


# Each chapter's last numbered page, which ends with its Recap and its questions.
LESSONS = [
    _chapter_pages(p.parent)[-1]
    for p in sorted((ROOT / "nbsrc" / "book").glob("ch*/lesson.py"))
]
SECTION = "Check your understanding"
DROPDOWN = "{dropdown} Answer"
MIN_QUESTIONS = 3
QUESTION = re.compile(r"\*\*(\d+)\.\*\*\s+\S")
# "§3.5", optionally with its title in single quotes, as the checks' messages write it.
# The title may wrap onto the next line and may hold an apostrophe ("The seed's model"),
# so it ends at a quote followed by a boundary.
CITATION = re.compile(r"§(\d+)\.(\d+)(?:\s+'(.+?)'(?=[\s.,;:)]|$))?", re.S)
TITLE = re.compile(r"Chapter (\d+) — ")
NUMBERED = re.compile(r"(\d+)\.(\d+) (.+)")


@cache
def _parser():
    config = MdParserConfig(enable_extensions={"colon_fence", "dollarmath"})
    return create_md_parser(config, RendererHTML)


@cache
def cells(path: Path) -> tuple[tuple[str, str], ...]:
    """(cell type, source) of every cell, as jupytext reads the percent script."""
    return tuple((c.cell_type, c.source) for c in jupytext.read(path).cells)


def markdown(path: Path) -> list[str]:
    return [src for kind, src in cells(path) if kind == "markdown"]


def headings(source: str) -> list[tuple[int, str]]:
    """(level, text) of the headings in ``source`` (not a code block's comments)."""
    tokens = _parser().parse(source)
    return [
        (int(t.tag[1]), tokens[i + 1].content)
        for i, t in enumerate(tokens)
        if t.type == "heading_open"
    ]


@cache
def chapter(path: Path) -> tuple[int, dict[str, str]]:
    """The lesson's chapter number and its numbered sections {"3.5": "Fill ..."}."""
    pages = _chapter_pages(path.parent)
    found = [h for page in pages for src in markdown(page) for h in headings(src)]
    titles = [TITLE.match(text) for level, text in found if level == 1]
    assert titles and titles[0], f"{path}: no '# Chapter N — Title' heading"
    sections = {}
    for level, text in found:
        m = NUMBERED.fullmatch(text)
        if level == 2 and m:
            sections[f"{m[1]}.{m[2]}"] = m[3]
    return int(titles[0][1]), sections


@cache
def all_chapters() -> dict[int, dict[str, str]]:
    return dict(chapter(p) for p in LESSONS)


def questions(source: str) -> list[tuple[int, str, str | None]]:
    """(number, question, answer) of each question in ``source``; answer None if none.

    A question starts at a paragraph ``**k.** ...``; its text may go on (a code block),
    and the first dropdown after it is its answer. A dropdown after no question fails.
    """
    found: list[list] = []
    tokens = _parser().parse(source)
    for i, t in enumerate(tokens):
        if t.level != 0:
            continue
        if t.type == "paragraph_open" and QUESTION.match(tokens[i + 1].content):
            text = tokens[i + 1].content
            found.append([int(QUESTION.match(text)[1]), text, None])
        elif t.type == "colon_fence":
            line = t.map[0] + 1
            assert t.info == DROPDOWN, f"line {line}: ':::{t.info}' is no answer"
            assert found and found[-1][2] is None, f"line {line}: no question"
            found[-1][2] = t.content
    return [tuple(q) for q in found]


def test_every_chapter_has_a_lesson():
    assert sorted(all_chapters()) == list(range(1, 9)), [p.parent.name for p in LESSONS]


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.parent.name)
def test_lesson_ends_with_check_your_understanding(path):
    name = path.parent.name
    kind, last = cells(path)[-1]
    assert kind == "markdown", f"{name}: the last cell must be the '{SECTION}' markdown"
    sections = [
        text
        for page in _chapter_pages(path.parent)
        for src in markdown(page)
        for lv, text in headings(src)
        if lv == 2
    ]
    assert sections[-1] == SECTION, f"{name}: the last section is {sections[-1]!r}"
    assert [text for _, text in headings(last)] == [SECTION], f"{name}: not its cell"
    number, _ = chapter(path)
    assert re.fullmatch(rf"{number}\.\d+ Recap", sections[-2]), (
        f"{name}: '{SECTION}' must follow the Recap, not {sections[-2]!r}"
    )


# A chapter's earlier numbered page may end with questions of its own (chapter 1's
# first page): they follow the same rules, at least one of them.
QUESTION_PAGES = [
    page
    for last in LESSONS
    for page in _chapter_pages(last.parent)
    if page == last or f"# ## {SECTION}" in page.read_text(encoding="utf-8")
]


@pytest.mark.parametrize(
    "path", QUESTION_PAGES, ids=lambda p: f"{p.parent.name}/{p.stem}"
)
def test_questions_have_answers_that_cite_the_lesson(path):
    number, _ = chapter(path)
    chapters = all_chapters()
    found = questions(markdown(path)[-1])
    name = f"{path.parent.name}/{path.stem}"
    least = MIN_QUESTIONS if path in LESSONS else 1
    assert len(found) >= least, f"{name}: {len(found)} questions"
    assert [n for n, _, _ in found] == list(range(1, len(found) + 1)), "not 1, 2, ..."
    for n, _, answer in found:
        where = f"{name}, question {n}"
        assert answer is not None, f"{where}: not followed by a ':::{DROPDOWN}' fence"
        assert answer.strip(), f"{where}: empty answer"
        cited = CITATION.findall(answer)
        assert any(int(c) == number for c, _, _ in cited), f"{where}: no §{number}.k"
        for c, k, title in cited:
            sections = chapters.get(int(c), {})
            assert f"{c}.{k}" in sections, f"{where}: no §{c}.{k} in chapter {c}"
            title = " ".join(title.split())
            if title:
                assert title == sections[f"{c}.{k}"], (
                    f"{where}: §{c}.{k} is titled {sections[f'{c}.{k}']!r} now, "
                    f"the answer says {title!r}"
                )


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.parent.name)
def test_dropdowns_survive_the_notebook(path, tmp_path):
    """The fences are comments in the percent script (``# :::``), lines in the notebook.

    The lesson goes to .ipynb and back through jupytext, as tools/nbsync.py does: the
    last markdown cell still holds each fence on a line of its own, with no ``#`` left.
    """
    ipynb = tmp_path / "lesson.ipynb"
    jupytext.write(jupytext.read(path), ipynb)
    cell = [c for c in jupytext.read(ipynb).cells if c.cell_type == "markdown"][-1]
    lines = cell.source.splitlines()
    assert lines[0] == f"## {SECTION}"
    opened = lines.count(f":::{DROPDOWN}")
    assert opened >= MIN_QUESTIONS and lines.count(":::") == opened, (
        "each dropdown opens and closes on a line of its own"
    )
    assert not any(line.lstrip().startswith("# :::") for line in lines), "kept a '#'"
    raw = path.read_text(encoding="utf-8").splitlines()
    section = raw[raw.index(f"# ## {SECTION}") :]
    fences = (section.count(f"# :::{DROPDOWN}"), section.count("# :::"))
    assert fences == (opened, opened), f"lesson.py: '# :::{DROPDOWN}' ... '# :::'"
