"""The command blocks of the instructors page (book/instructors.md), read as written.

Every fenced block of the page is a ``{code-block} bash`` with a ``:name:``; the tests
that run them (test_instructors_page.py, test_shared_gradebook.py) find them by name.
"""

from __future__ import annotations

import re

from course import ROOT

PAGE = ROOT / "book" / "instructors.md"
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```", re.DOTALL | re.MULTILINE)
NAME = re.compile(r":name: (\S+)\n")


def blocks() -> list[tuple[str | None, str]]:
    """(name, body) of every fenced block of the page, in the page's order; a block
    that is not a named ``{code-block} bash`` has the name ``None``."""
    found = []
    for header, body in FENCE.findall(PAGE.read_text()):
        name = NAME.match(body)
        if header.strip() == "{code-block} bash" and name:
            found.append((name.group(1), body[name.end() :]))
        else:
            found.append((None, body))
    return found


def block(name: str) -> str:
    """The body of the page's ``{code-block} bash`` named ``name``."""
    bodies = [body for found, body in blocks() if found == name]
    assert len(bodies) == 1, f"book/instructors.md has no one bash block named {name}"
    return bodies[0]


def commands(body: str) -> list[str]:
    """The commands of a block: comment lines dropped, continued lines joined."""
    text = re.sub(r"\\\n\s*", "", body)
    return [line for line in text.splitlines() if line and not line.startswith("#")]
