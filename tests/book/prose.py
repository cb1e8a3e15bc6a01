"""The book's prose as text, for the tests that check what it claims.

``markdown_sources()`` yields every page a reader reads: the lessons' markdown cells
(``nbsrc/book/``), the exercises' (``nbsrc/solutions/``) and the book's own pages
(``book/*.md``). ``code_sources()`` gives each notebook source's code, where glue calls
live.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import jupytext

ROOT = Path(__file__).resolve().parents[2]
LESSONS = sorted((ROOT / "nbsrc" / "book").glob("*/*.py"))
EXERCISES = sorted((ROOT / "nbsrc" / "solutions").glob("*/exercise.py"))
PAGES = sorted(p for p in (ROOT / "book").glob("*.md"))
SEEDS_PAGE = ROOT / "book" / "seeds" / "index.md"


@dataclass(frozen=True)
class Markdown:
    """One markdown cell (or one page), with where it is."""

    path: Path
    line: int  # first line of the cell in its source file
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def _cells(path: Path):
    nb = jupytext.read(path)
    source = path.read_text(encoding="utf-8")
    cursor = 0
    for cell in nb.cells:
        # Find the cell's first line in the source to report a usable location.
        first = next((line for line in cell.source.splitlines() if line.strip()), "")
        probe = ("# " + first) if cell.cell_type == "markdown" else first
        at = source.find(probe, cursor) if first else -1
        if at >= 0:
            cursor = at
        yield cell, source.count("\n", 0, max(at, 0)) + 1


def markdown_sources(lessons=True, exercises=True, pages=True):
    paths = (LESSONS if lessons else []) + (EXERCISES if exercises else [])
    for path in paths:
        for cell, line in _cells(path):
            if cell.cell_type == "markdown":
                yield Markdown(path, line, cell.source)
    if pages:
        for path in PAGES + [SEEDS_PAGE]:
            yield Markdown(path, 1, path.read_text(encoding="utf-8"))


def code_of(path: Path) -> str:
    """All code cells of one notebook source, joined."""
    return "\n".join(
        cell.source for cell, _ in _cells(path) if cell.cell_type == "code"
    )


# Role and directive syntax (MyST): {name}`text`, and ```{name} arg ... ``` blocks.
ROLE = re.compile(r"\{(?P<name>[\w:-]+)\}`(?P<text>[^`]*)`")
FENCE = re.compile(
    r"^(?P<fence>`{3,}|:{3,})\{(?P<name>[\w:-]+)\}(?P<arg>[^\n]*)\n"
    r"(?P<body>.*?)^(?P=fence)\s*$",
    re.S | re.M,
)
