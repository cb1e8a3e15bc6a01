"""The book, the instructors page and the kit show a repository only when one is set.

Bug (issue 29, reader review 2026-12-05): every page, the landing page, the kit's README
and the instructors page gave github.com/tformer-course/transformers-from-scratch, a
placeholder, while ``_config.yml`` said no public repository exists. Cause: the address
was typed as if the course were published. Guard: ``repository: url:`` is empty until it
is, the header's button follows it, and the pages' sentences about the repository come
from it (tools/book_html.py); the built pages are checked in tests/book/test_book.py's
build, the sentences here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

from book_html import course_sentences  # noqa: E402


def test_the_header_button_follows_the_address():
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    url = config["repository"]["url"]
    assert bool(url) == config["html"]["use_repository_button"], url


def test_without_an_address_the_pages_say_how_the_course_is_had():
    said = course_sentences("")
    assert "no public repository" in said["course_source"]
    assert "not public" in said["course_repository"]
    assert not [s for s in said.values() if "github" in s or "http" in s]


def test_with_an_address_the_pages_link_it():
    url = "https://example.org/course"
    said = course_sentences(url)
    assert all(f"]({url})" in s for s in said.values()), said


def test_no_page_source_types_an_address_of_its_own():
    for page in [*(ROOT / "book").glob("*.md"), ROOT / "README.md", ROOT / "AGENTS.md"]:
        text = page.read_text()
        assert "tformer-course" not in text, page
