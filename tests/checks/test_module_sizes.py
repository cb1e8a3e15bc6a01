"""Every check module stays small enough to read as one exercise's specification.

Bug: the checks grew one module per chapter, up to 3,500 lines, in which changing one
exercise's grading meant reading 1,300–1,900 lines in 5–10 stretches (aesthetics
review 2026-12-05, §2). Cause: each new measurement was written where it was first
needed. Guard: a module of ``tformer_grading/checks/`` has at most 800 lines (the
toolkit, ``measure/``, at most 300: ``measure/test_toolkit.py``); the modules not yet
there are listed with their size today, and the list may only shrink.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import tformer_grading.checks as checks

ROOT = Path(checks.__file__).parent
MAX_LINES = 800

# Over the limit today: path -> its lines now (a module may not grow past them).
OVER_YET: dict[str, int] = {}


def _lines(path: Path) -> int:
    return path.read_text(encoding="utf-8").count("\n")


MODULES = sorted(p for p in ROOT.rglob("*.py") if "measure" not in p.parts)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_each_check_module_fits_in_one_reading(path):
    name = str(path.relative_to(ROOT))
    lines = _lines(path)
    limit = OVER_YET.get(name, MAX_LINES)
    assert lines <= limit, (
        f"checks/{name} has {lines} lines (at most {limit}): move a measurement "
        "into checks/measure/, or a check of its own into a module of its own"
    )


def test_the_modules_over_the_limit_are_still_over_it():
    fitted = [n for n in OVER_YET if _lines(ROOT / n) <= MAX_LINES]
    assert not fitted, f"now within {MAX_LINES} lines, remove from OVER_YET: {fitted}"
