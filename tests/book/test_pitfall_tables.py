"""The pitfall index points only at sections and checks that exist.

The bug this guards against: the index once said six checks caught pitfalls that no
exercise checked (gradcheck, Xavier, weight tying, learned positions, ``batch_first``,
bucketing) and named chapters in plain text long after they were written. Its cells are
now ``{section}`` and ``{check}`` references (``tools/pitfall_refs.py``), resolved here
and by the book build; a pitfall no exercise grades says "not graded".
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import pitfall_refs  # noqa: E402

PAGE = ROOT / "book" / "pitfalls.md"
REF = re.compile(r"\{(?P<kind>section|check)\}`(?P<text>[^`]*)`")


def table_rows():
    """(row id, explained-in cell, caught-by cell) for each row of the hand-written tables."""
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) >= 4 and cells[0] not in ("#", "---"):
            yield cells[0], cells[-2], cells[-1]


ROWS = list(table_rows())


def test_the_tables_are_found():
    ids = [row_id for row_id, *_ in ROWS]
    assert {"A", "D4", "L", "M", "1", "7"} <= set(ids), ids


@pytest.mark.parametrize("row_id, explained, caught", ROWS, ids=[r[0] for r in ROWS])
def test_each_row_points_at_what_exists(row_id, explained, caught):
    sections = [m["text"] for m in REF.finditer(explained) if m["kind"] == "section"]
    assert sections, f"row {row_id}: 'explained in' names no {{section}}"
    for text in sections:
        pitfall_refs.resolve_section(text)
    checks = [m["text"] for m in REF.finditer(caught) if m["kind"] == "check"]
    assert checks or caught.startswith("not graded"), (
        f"row {row_id}: 'caught by' must name a {{check}} or say 'not graded', got {caught!r}"
    )
    for text in checks:
        pitfall_refs.resolve_check(text)
    plain = re.findall(r"\bch0\d_[a-z_]+\b", REF.sub("", explained + caught))
    assert not plain, f"row {row_id}: chapters named in plain text: {plain}"


def test_a_reference_to_nothing_is_refused():
    with pytest.raises(pitfall_refs.UnresolvedReference, match="no lesson has"):
        pitfall_refs.resolve_section("4.99")
    with pytest.raises(pitfall_refs.UnresolvedReference, match="no check module"):
        pitfall_refs.resolve_check("check_xavier_init")
    with pytest.raises(pitfall_refs.UnresolvedReference, match="names no diagnosis"):
        pitfall_refs.resolve_check("check_attention: gradients exploded")


def test_a_check_no_exercise_calls_is_refused(monkeypatch):
    # A check defined but called by no exercise (the index once cited such checks).
    monkeypatch.setattr(pitfall_refs, "_exercise_code", lambda: {"ch01_shapes": "pass"})
    with pytest.raises(pitfall_refs.UnresolvedReference, match="no exercise calls it"):
        pitfall_refs.resolve_check("check_attention")
