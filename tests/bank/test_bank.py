"""Every answer in the measured bank gets the verdict it records, and every chapter's
bank meets the standard: per exercise at least 25 wrong answers (15 of them mistakes
the checks list no variant for) and 8 right ones; per chapter every wrong answer
rejected, at least 85 % named, none misnamed, every right one accepted."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from bank import Entry, Verdict, entries, expected_kind, grade, load

BANKS = Path(__file__).parent.glob("bank_ch*.py")
CHAPTERS = sorted(p.stem[len("bank_") :] for p in BANKS)


def _load_all() -> tuple[list[Entry], dict[str, str]]:
    """Every bank's entries, and the banks that do not import (reported by a test of
    their own rather than stopping the collection of the others)."""
    found, broken = [], {}
    for chapter in CHAPTERS:
        try:
            found += entries(chapter)
        except Exception as exc:  # noqa: BLE001 - any error in a bank file is reported
            broken[chapter] = f"{type(exc).__name__}: {exc}"
    return found, broken


ALL, BROKEN = _load_all()

MIN_WRONG, MIN_UNLISTED, MIN_RIGHT, MIN_NAMED = 25, 15, 8, 0.85


@functools.cache
def verdict(entry: Entry) -> Verdict:
    return grade(entry, load(entry.chapter).GRADERS)


def group(chapter: str):
    # A chapter's answers and its standard run on one xdist worker: each graded once.
    return pytest.mark.xdist_group(f"bank-{chapter}")


@pytest.mark.parametrize(
    "entry", [pytest.param(e, id=e.id, marks=group(e.chapter)) for e in ALL]
)
def test_answer_gets_its_verdict(entry: Entry):
    got = verdict(entry)
    assert got.kind == expected_kind(entry), (
        f"{entry.id}: expected {expected_kind(entry)}"
        + (f" matching {entry.expect!r}" if entry.expect else "")
        + f", got {got.kind}: {got.message}"
    )


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_bank_imports(chapter: str):
    assert chapter not in BROKEN, f"tests/bank/bank_{chapter}.py: {BROKEN.get(chapter)}"


@pytest.mark.parametrize(
    "chapter", [pytest.param(c, marks=group(c)) for c in CHAPTERS if c not in BROKEN]
)
def test_chapter_bank_meets_the_standard(chapter: str):
    bank = entries(chapter)
    exercises = sorted({e.exercise for e in bank} | set(load(chapter).GRADERS))
    for exercise in exercises:
        mine = [e for e in bank if e.exercise == exercise]
        wrong = [e for e in mine if e.expect is not None]
        unlisted = [e for e in wrong if not e.listed]
        right = [e for e in mine if e.expect is None]
        where = f"{chapter} {exercise}"
        assert len(wrong) >= MIN_WRONG, f"{where}: {len(wrong)} wrong answers"
        assert len(unlisted) >= MIN_UNLISTED, f"{where}: {len(unlisted)} unlisted"
        assert len(right) >= MIN_RIGHT, f"{where}: {len(right)} right answers"
    kinds = {e.id: verdict(e).kind for e in bank}
    wrong = [e for e in bank if e.expect is not None]
    assert all(kinds[e.id] in ("named", "generic", "misnamed") for e in wrong), [
        e.id for e in wrong if kinds[e.id] not in ("named", "generic", "misnamed")
    ]
    assert [e.id for e in wrong if kinds[e.id] == "misnamed"] == []
    named = sum(kinds[e.id] == "named" for e in wrong)
    assert named >= MIN_NAMED * len(wrong), f"{chapter}: {named} of {len(wrong)} named"
    assert [e.id for e in bank if e.expect is None and kinds[e.id] != "accepted"] == []
