"""Every random-experiment claim a lesson asserts is listed and tested over seeds.

See ``tests/book/seed_claims.py`` for what counts as such a claim. Each chapter's
module ``tests/book/test_claims_<chapter>.py`` lists its lessons' claims (``CLAIMS``)
and the magnitude asserts that no draw can change (``NOT_RANDOM``).
"""

from __future__ import annotations

import importlib
from collections import Counter

import pytest

from tests.book.seed_claims import (
    ROOT,
    SEEDS_AT_LEAST,
    Claim,
    LessonAssert,
    NotRandom,
    lesson_asserts,
    normalise,
)

MODULES = sorted(p.stem for p in (ROOT / "tests" / "book").glob("test_claims_*.py"))


def _listings() -> list[tuple[str, Claim | NotRandom]]:
    listed = []
    for name in MODULES:
        module = importlib.import_module(f"tests.book.{name}")
        for entry in [*module.CLAIMS, *module.NOT_RANDOM]:
            listed.append((name, entry))
    return listed


def _keys(entry: Claim | NotRandom) -> list[tuple[str, str]]:
    return [(entry.page, normalise(a)) for a in entry.asserts]


def test_the_scan_finds_the_lessons_claims():
    asserts = lesson_asserts()
    # A scan that found nothing would make the tests below pass vacuously.
    assert len(asserts) > 50
    assert any(a.page == "ch02_attention/lesson" for a in asserts)


def test_every_magnitude_assert_of_a_lesson_is_listed():
    listed = {key for _, entry in _listings() for key in _keys(entry)}
    unlisted = [a for a in lesson_asserts() if (a.page, a.condition) not in listed]
    assert not unlisted, (
        "these lesson asserts compare measured magnitudes but no "
        "tests/book/test_claims_*.py lists them: list each as a Claim with a test over "
        "seeds, or as NotRandom with the reason no draw changes it\n"
        + "\n".join(f"nbsrc/book/{a.page}.py:{a.line}: {a.condition}" for a in unlisted)
    )


def test_every_listing_matches_an_assert_of_its_lesson():
    asserted = {(a.page, a.condition) for a in lesson_asserts()}
    stale = [
        f"{module}: {key[0]}: `assert {key[1]}`"
        for module, entry in _listings()
        for key in _keys(entry)
        if key not in asserted
    ]
    assert not stale, "listed, but no lesson asserts it any more:\n" + "\n".join(stale)


def test_no_assert_is_listed_twice():
    counts = Counter(key for _, entry in _listings() for key in _keys(entry))
    assert [k for k, n in counts.items() if n > 1] == []


def _seed_count(test) -> int:
    for mark in getattr(test, "pytestmark", []):
        if mark.name == "parametrize" and "seed" in str(mark.args[0]).split(","):
            return len(mark.args[1])
    return 0


@pytest.mark.parametrize("module", MODULES)
def test_every_claim_has_a_test_over_seeds(module):
    claims = importlib.import_module(f"tests.book.{module}")
    for claim in claims.CLAIMS:
        test = getattr(claims, claim.test, None)
        assert callable(test), f"{module}: no test {claim.test} for '{claim.says}'"
        assert _seed_count(test) >= SEEDS_AT_LEAST, (
            f"{module}.{claim.test} must be parametrized over 'seed' with at least "
            f"{SEEDS_AT_LEAST} values"
        )
    for entry in claims.NOT_RANDOM:
        assert entry.why.strip(), f"{module}: {entry.asserts} needs its reason"


def test_a_new_unlisted_claim_is_caught(tmp_path):
    lesson = tmp_path / "ch99_demo"
    lesson.mkdir()
    (lesson / "lesson.py").write_text(
        "x = 1.0\nassert abs(x - 1) < 1e-6\nassert x.shape == (2,)\n"
        "assert x > 2 * x  # a measured ordering\n"
    )
    assert lesson_asserts(tmp_path) == [
        LessonAssert("ch99_demo/lesson", 4, "x > 2 * x")
    ]
