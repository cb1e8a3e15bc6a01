"""What the pitfall tables' "explained in" and "caught by" cells point at, found in the course.

``book/pitfalls.md`` writes those cells as references, never as prose, so the page cannot
claim a section or a check that does not exist:

- ``{section}`3.5``` names a numbered heading of a lesson page (``nbsrc/book/*/*.py``);
  it becomes a link reading "§3.5 Fill values, half precision and NaN".
- ``{check}`check_bug_scale``` names a check function, and
  ``{check}`check_multi_head_attention: no scaling``` one of the diagnoses its module
  names. The function must be called by an exercise's graded cells; the link goes to that
  exercise.

A pitfall no exercise grades says "not graded" in its "caught by" cell. Both the Sphinx
roles (``tools/pitfall_index.py``) and ``tests/book/test_pitfall_tables.py`` resolve the
references with the functions here, so a reference to nothing fails the build and the
tests.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEADING = re.compile(r"^# #{2,3} (?P<number>\d+\.\d+) (?P<title>.+?)\s*$", re.M)
TITLE = re.compile(r"^# # (?P<title>.+?)\s*$", re.M)


class UnresolvedReference(ValueError):
    """A table cell points at a section or check that does not exist."""


@dataclass(frozen=True)
class SectionRef:
    number: str
    title: str
    doc: str  # e.g. "book/ch03_masks/lesson"

    @property
    def label(self) -> str:
        return f"§{self.number} {self.title}"


@dataclass(frozen=True)
class CheckRef:
    function: str
    diagnosis: str | None
    assignment: str
    exercise_label: str

    @property
    def doc(self) -> str:
        return f"book/{self.assignment}/exercise"


@lru_cache(maxsize=None)
def lesson_sections() -> dict[str, SectionRef]:
    """Every numbered heading of every lesson page, by number."""
    found: dict[str, SectionRef] = {}
    for source in sorted((ROOT / "nbsrc" / "book").glob("*/*.py")):
        doc = f"book/{source.parent.name}/{source.stem}"
        for match in HEADING.finditer(source.read_text(encoding="utf-8")):
            number = match["number"]
            if number in found:
                raise UnresolvedReference(
                    f"§{number} is a heading of both {found[number].doc} and {doc}"
                )
            found[number] = SectionRef(number, match["title"], doc)
    return found


def resolve_section(text: str) -> SectionRef:
    number = text.strip().lstrip("§")
    sections = lesson_sections()
    if number not in sections:
        raise UnresolvedReference(
            f"no lesson has a section §{number} (known: "
            f"{', '.join(sorted(sections, key=_section_key))})"
        )
    return sections[number]


def _section_key(number: str):
    return tuple(int(part) for part in number.split("."))


@lru_cache(maxsize=None)
def _exercise_code() -> dict[str, str]:
    """Each assignment's solution source, by assignment name."""
    return {
        path.parent.name: path.read_text(encoding="utf-8")
        for path in sorted((ROOT / "nbsrc" / "solutions").glob("*/exercise.py"))
    }


def exercise_label(assignment: str) -> str:
    """ "exercise 3", "bug hunt 3", "own model": how the tables name an exercise."""
    chapter = int(assignment[2:4])
    if "bughunt" in assignment:
        return f"bug hunt {chapter}"
    if "own_model" in assignment:
        return "own model"
    return f"exercise {chapter}"


def assignment_of(module) -> str | None:
    """The assignment whose exercise runs ``module``'s checks: its ``ASSIGNMENT`` if it
    names one (the bug hunts, the own-model exercise), else None (each section's
    chapter)."""
    return getattr(module, "ASSIGNMENT", None)


def check_modules():
    """Every module of exercise checks, ordered as the course runs them."""
    import importlib
    import pkgutil

    import tformer_grading.checks as checks

    modules = [
        importlib.import_module(f"tformer_grading.checks.{info.name}")
        for info in pkgutil.iter_modules(checks.__path__)
        if info.name not in checks.SHARED_MODULES
    ]
    return sorted(
        modules, key=lambda m: assignment_of(m) or m.__name__.rsplit(".", 1)[1]
    )


def module_diagnoses(module):
    """Every ``Diagnosis`` ``module`` defines, alone or in a list or tuple, in order."""
    from tformer_grading.checks.diagnosis import Diagnosis

    for value in vars(module).values():
        items = value if isinstance(value, (list, tuple)) else [value]
        yield from (item for item in items if isinstance(item, Diagnosis))


def _check_module_of(function: str):
    for module in check_modules():
        value = getattr(module, function, None)
        if callable(value) and getattr(value, "__module__", None) == module.__name__:
            return module
    return None


def resolve_check(text: str) -> CheckRef:
    function, _, diagnosis = (part.strip() for part in text.partition(":"))
    module = _check_module_of(function)
    if module is None:
        raise UnresolvedReference(f"no check module defines {function}()")
    callers = [
        name
        for name, code in _exercise_code().items()
        if re.search(rf"\b{re.escape(function)}\(", code)
    ]
    if not callers:
        raise UnresolvedReference(
            f"{function}() is defined in {module.__name__} but no exercise calls it"
        )
    if diagnosis and diagnosis not in {d.name for d in module_diagnoses(module)}:
        raise UnresolvedReference(f"{module.__name__} names no diagnosis {diagnosis!r}")
    assignment = callers[0]
    return CheckRef(function, diagnosis or None, assignment, exercise_label(assignment))
