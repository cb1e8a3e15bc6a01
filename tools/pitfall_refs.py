"""What the pitfall tables' "explained in" and "caught by" cells point at, found in the
course.

``book/pitfalls.md`` writes those cells as references, never as prose, so the page
cannot claim a section or a check that does not exist:

- ``{section}`3.5``` names a numbered heading of a lesson page (``nbsrc/book/*/*.py``);
  it becomes a link reading "§3.5 Fill values, half precision and NaN".
- ``{check}`check_bug_scale``` names a check function, and
  ``{check}`check_multi_head_attention: no scaling``` one of the diagnoses its module
  names. The function must be called by an exercise's graded cells; the link goes to
  that exercise. ``{checks}`check_a, check_b``` lists several, each exercise once.

A pitfall no exercise grades says "not graded" in its "caught by" cell. Both the Sphinx
roles (``tools/pitfall_index.py``) and ``tests/book/test_pitfall_tables.py`` resolve the
references with the functions here, so a reference to nothing fails the build and the
tests.
"""

from __future__ import annotations

import re
import sys
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
    found = getattr(module, "ASSIGNMENT", None)
    if found is None and module.__name__.count(".") > 2:  # in a chapter package
        package = sys.modules[module.__name__.rsplit(".", 1)[0]]
        found = getattr(package, "ASSIGNMENT", None)
    return found


def check_modules():
    """Every module of exercise checks, ordered as the course runs them."""
    import tformer_grading.checks as checks

    modules = checks.exercise_modules()

    def key(module):
        # A chapter package's modules keep the order of its MODULES (the exercises').
        chapter = module.__name__.split(".checks.", 1)[1].split(".")[0]
        return assignment_of(module) or chapter, modules.index(module)

    return sorted(modules, key=key)


def module_diagnoses(module):
    """Every ``Diagnosis`` ``module`` defines, alone or in a list or tuple, in order."""
    from tformer_grading.checks.diagnosis import Diagnosis, declared

    return declared(module, Diagnosis)


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


# --------------------------------------------------------- the index of diagnoses
#
# Which checks can name a diagnosis is read from the checks' code: a check names a
# diagnosis when the diagnosis is reachable from the check's function through the names
# its module's code loads (its helpers, classes and tables of pitfalls). Helpers of
# other modules are not followed: the own-model exercise re-runs every chapter's
# checks, and listing it in every row would say nothing.


def _loaded_globals(code, namespace):
    """The objects ``code`` (and the functions nested in it) loads by global name, and
    by ``module.name`` for a module it loads."""
    import dis
    import types

    found, previous = [], None
    for ins in dis.get_instructions(code):
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
            previous = namespace.get(ins.argval)
        elif ins.opname in ("LOAD_ATTR", "LOAD_METHOD") and isinstance(
            previous, types.ModuleType
        ):
            previous = getattr(previous, ins.argval, None)
        else:
            previous = None
            continue
        if previous is not None:
            found.append(previous)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found.extend(_loaded_globals(const, namespace))
    return found


def _reachable_diagnoses(module, root) -> set[int]:
    """The ids of the Diagnosis objects ``root`` can reach inside ``module``."""
    import functools
    import types

    from tformer_grading.checks.diagnosis import Diagnosis

    # A chapter package's exercises share code in its modules (ch01/stages.py): follow
    # functions anywhere in the package, as in a chapter kept in one module.
    name = module.__name__
    home = name.rsplit(".", 1)[0] if name.count(".") > 2 else name

    def ours(obj) -> bool:
        owner = getattr(obj, "__module__", None) or ""
        return owner == home or owner.startswith(home + ".")

    seen, found, stack = {}, set(), [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen[id(obj)] = obj  # kept alive, so that no id is reused
        if isinstance(obj, Diagnosis):
            found.add(id(obj))
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        elif isinstance(obj, dict):
            stack.extend([*obj.keys(), *obj.values()])
        elif isinstance(obj, functools.partial):
            stack.extend([obj.func, *obj.args, *obj.keywords.values()])
        elif isinstance(obj, types.FunctionType):
            if getattr(obj, "__wrapped__", None) is not None:
                stack.append(obj.__wrapped__)
            if ours(obj):
                stack.extend(_loaded_globals(obj.__code__, obj.__globals__))
                stack.extend(obj.__defaults__ or ())
                stack.extend((obj.__kwdefaults__ or {}).values())
                stack.extend(cell.cell_contents for cell in obj.__closure__ or ())
        elif isinstance(obj, type):
            if ours(obj):
                for value in vars(obj).values():
                    if isinstance(value, (staticmethod, classmethod)):
                        value = value.__func__
                    if isinstance(value, property):
                        stack.extend(f for f in (value.fget, value.fset) if f)
                    else:
                        stack.append(value)
        elif ours(type(obj)) and hasattr(obj, "__dict__"):
            stack.append(type(obj))
            stack.extend(vars(obj).values())
    return found


def graded_checks(module) -> list[str]:
    """The check functions ``module`` defines that an exercise calls, in file order."""
    code = _exercise_code()
    return [
        name
        for name, value in vars(module).items()
        if name.startswith("check_")
        and callable(value)
        and getattr(value, "__module__", None) == module.__name__
        and any(re.search(rf"\b{re.escape(name)}\(", text) for text in code.values())
    ]


@dataclass(frozen=True)
class IndexRow:
    """One mistake of one chapter: what the checks call it, where the book explains it
    and which graded checks can name it."""

    name: str
    sections: tuple[str, ...]  # section numbers, e.g. ("3.5",)
    checks: tuple[str, ...]  # check function names


@lru_cache(maxsize=None)
def index_rows() -> dict[str, tuple[IndexRow, ...]]:
    """Every diagnosis of every check module, one row per name in each chapter (the
    chapter of the section that explains it), rows ordered by section."""
    diagnoses, naming = [], {}
    for module in check_modules():
        for name in graded_checks(module):
            for found in _reachable_diagnoses(module, getattr(module, name)):
                naming.setdefault(found, []).append(name)
        diagnoses.extend(module_diagnoses(module))
    rows: dict[str, dict[str, tuple[list, list]]] = {}
    for item in diagnoses:
        sections, checks = rows.setdefault(item.section.chapter, {}).setdefault(
            item.name, ([], [])
        )
        if item.section.number not in sections:
            sections.append(item.section.number)
        checks.extend(c for c in naming.get(id(item), ()) if c not in checks)
    order = sorted(rows, key=lambda chapter: chapter[2:4])
    return {
        chapter: tuple(
            sorted(
                (
                    IndexRow(name, tuple(sorted(s, key=_section_key)), tuple(c))
                    for name, (s, c) in rows[chapter].items()
                ),
                key=lambda row: [_section_key(n) for n in row.sections],
            )
        )
        for chapter in order
    }
