"""The lessons' claims that rest on a random experiment, and where each is tested.

A lesson shows an experiment once, with the book's seed. When it asserts a trend, an
ordering or a ratio measured on random draws, the claim must hold on other draws
too: the suite reruns it at small sizes over at least five seeds
(``tests/book/test_claims_<chapter>.py``), so the book's run only illustrates it.

``lesson_asserts`` finds every assert of a lesson that compares magnitudes (``<``,
``>``, ``<=``, ``>=``), leaving out tolerances (a bound of at most 0.01) and sizes
(``shape``, ``len``, ``numel``). Each must be listed once: as a ``Claim`` in a claim
module, or as ``NotRandom`` here with the reason its outcome cannot depend on the
draw. ``tests/book/test_seed_claims.py`` fails on an assert listed nowhere, on a
listing that no lesson asserts any more, and on a claim test over fewer than five
seeds. Asserts are matched by their code, so comments and line breaks do not matter.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LESSONS = ROOT / "nbsrc" / "book"

# A bound this small is a tolerance on an exact identity, not a measured magnitude.
TOLERANCE = 1e-2
SIZES = re.compile(r"\bshape\b|\blen\(|\bnumel\b|\.dim\(|\.size\(")
SEEDS_AT_LEAST = 5


@dataclass(frozen=True)
class Claim:
    """A claim a lesson asserts on a random experiment.

    ``page`` is the lesson's source under ``nbsrc/book`` without ``.py``
    (``"ch02_attention/lesson"``); ``asserts`` are the asserted conditions as written
    (``"jac_scaled > 100 * jac_512"``); ``says`` is the claim in words; ``test`` names
    the test function, in the same module, that checks it over seeds.
    """

    page: str
    asserts: tuple[str, ...]
    says: str
    test: str


@dataclass(frozen=True)
class NotRandom:
    """Asserts that compare magnitudes but whose outcome no draw can change.

    ``why`` says what the outcome depends on instead: a formula, a bound that holds
    for every draw by construction, or a measured time (the suite times nothing).
    """

    page: str
    asserts: tuple[str, ...]
    why: str


@dataclass(frozen=True)
class LessonAssert:
    page: str
    line: int
    condition: str  # normalised: ast.unparse of the asserted expression


def normalise(condition: str) -> str:
    """One spelling per condition, whatever its comments and line breaks."""
    return ast.unparse(ast.parse(condition.strip(), mode="eval").body)


def _compares_magnitudes(test: ast.expr, source: str) -> bool:
    for node in ast.walk(test):
        if not isinstance(node, ast.Compare):
            continue
        if not any(
            isinstance(op, (ast.Lt, ast.Gt, ast.LtE, ast.GtE)) for op in node.ops
        ):
            continue
        sides = [node.left, *node.comparators]
        if any(
            isinstance(s, ast.Constant)
            and isinstance(s.value, (int, float))
            and 0 < s.value <= TOLERANCE
            for s in sides
        ):
            continue
        if SIZES.search(ast.get_source_segment(source, node) or ""):
            continue
        return True
    return False


def lesson_asserts(root: Path = LESSONS) -> list[LessonAssert]:
    """Every assert in the lessons' sources that compares measured magnitudes."""
    found = []
    for path in sorted(root.glob("*/*.py")):
        source = path.read_text(encoding="utf-8")
        page = path.relative_to(root).with_suffix("").as_posix()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Assert) and _compares_magnitudes(node.test, source):
                found.append(LessonAssert(page, node.lineno, ast.unparse(node.test)))
    return sorted(found, key=lambda a: (a.page, a.line))
