"""The pitfall index points only at sections and checks that exist, one row per mistake.

The bugs this guards against: the index once said six checks caught pitfalls that no
exercise checked (gradcheck, Xavier, weight tying, learned positions, ``batch_first``,
bucketing) and named chapters in plain text long after they were written. Its cells are
now ``{section}`` and ``{check}`` references (``tools/pitfall_refs.py``), resolved here
and by the book build; a pitfall no exercise grades says "not graded". Its generated part
was once one 402-row table repeating a section up to 21 times; it is now one table per
chapter (``{pitfall-index} chNN_...``), one row per mistake, its checks in the row.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import pitfall_index  # noqa: E402
import pitfall_refs  # noqa: E402

PAGE = ROOT / "book" / "pitfalls.md"
REF = re.compile(r"\{(?P<kind>section|check)\}`(?P<text>[^`]*)`")
CHECKS = re.compile(r"\{checks\}`([^`]*)`")
DIRECTIVE = re.compile(r"^```\{pitfall-index\}\s+(?P<chapter>\S+)\s*$", re.M)


def cells_of(line):
    return [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]


def table_rows():
    """(row id, explained-in cell, caught-by cell) for each row of the hand-written tables."""
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        cells = cells_of(line)
        if len(cells) >= 4 and cells[0] not in ("#", "---"):
            yield cells[0], cells[-2], cells[-1]


ROWS = list(table_rows())
CHAPTERS = DIRECTIVE.findall(PAGE.read_text(encoding="utf-8"))


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
    with pytest.raises(pitfall_refs.UnresolvedReference, match="no check names"):
        pitfall_index.index_table("ch99_nothing")


def test_a_check_no_exercise_calls_is_refused(monkeypatch):
    # A check defined but called by no exercise (the index once cited such checks).
    monkeypatch.setattr(pitfall_refs, "_exercise_code", lambda: {"ch01_shapes": "pass"})
    with pytest.raises(pitfall_refs.UnresolvedReference, match="no exercise calls it"):
        pitfall_refs.resolve_check("check_attention")


# ------------------------------------------------------ the generated per-chapter tables


def test_every_chapter_has_its_table_once():
    assert sorted(CHAPTERS) == sorted(set(CHAPTERS)), CHAPTERS
    assert set(CHAPTERS) == set(pitfall_refs.index_rows()), (
        "book/pitfalls.md needs one {pitfall-index} table per chapter whose mistakes "
        f"the checks name: has {CHAPTERS}, needs {sorted(pitfall_refs.index_rows())}"
    )


def generated(chapter):
    """(mistake, section refs, check refs) of each row of ``chapter``'s table."""
    for line in pitfall_index.index_table(chapter)[2:]:
        where, name, checks = cells_of(line)
        yield (
            name.replace("\\|", "|"),
            [m["text"] for m in REF.finditer(where) if m["kind"] == "section"],
            [c.strip() for m in CHECKS.finditer(checks) for c in m[1].split(",")],
        )


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_one_row_per_mistake_with_its_checks(chapter):
    rows = list(generated(chapter))
    names = [name for name, *_ in rows]
    twice = sorted({name for name in names if names.count(name) > 1})
    assert not twice, f"{chapter}: mistakes with more than one row: {twice}"
    shown = [tuple(sections) for _, sections, _ in rows if sections]
    # A section is written once, above the mistakes it explains.
    assert len(shown) == len(set(shown)), f"{chapter}: a section repeated: {shown}"
    for name, sections, checks in rows:
        for text in sections:
            assert pitfall_refs.resolve_section(text).doc.startswith(f"book/{chapter}/")
        for text in checks:
            pitfall_refs.resolve_check(text)
    assert rows[0][1], f"{chapter}: the first row names no section"


def test_every_diagnosis_of_every_check_module_appears():
    listed = {
        (chapter, name) for chapter in CHAPTERS for name, *_ in generated(chapter)
    }
    for module in pitfall_refs.check_modules():
        for item in pitfall_refs.module_diagnoses(module):
            assert (item.section.chapter, item.name) in listed, (
                f"{module.__name__}: '{item.name}' is missing from the pitfall index"
            )


def test_the_checks_that_name_a_mistake_are_found():
    # Spot checks of the code analysis: a table of pitfalls, a probe's diagnosis, a
    # pitfall named by a bug hunt and by a chapter's check.
    rows = {
        (chapter, row.name): row.checks
        for chapter, chapter_rows in pitfall_refs.index_rows().items()
        for row in chapter_rows
    }
    assert "check_train_step" in rows["ch06_training", "clipping before backward"]
    named = [checks for checks in rows.values() if checks]
    assert len(named) >= 0.95 * len(rows), "most mistakes name no check"
