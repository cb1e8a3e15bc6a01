"""Every place that sends a reader to '§N.k Title' names a heading that exists.

Two kinds of pointer, one test: a check's ``Section`` (a failure tells the learner "Read §3.2
'The causal mask' in book/ch03_masks/lesson.ipynb") and a reference docstring's "Taught in §3.2
'The causal mask' (book/ch03_masks)." line (d2l's "Defined in"), which every public object of
``tformer_ref`` carries. Bug this guards against: a lesson heading renamed or renumbered while the
pointers to it keep the old one (four copies of this test once drifted apart, and chapters 1, 6
and 7 had none).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import tformer_ref
from tformer_grading import checks
from tformer_grading.checks.diagnosis import Section, sections_named

LESSONS = Path(__file__).resolve().parents[2] / "nbsrc" / "book"
# The title may hold an apostrophe ("§5.7 'The seed's model, counted'"): quoted up to "' (book/".
# A page other than the chapter's lesson is named after the chapter: (book/ch01_shapes/heads).
# An unnumbered page is named by its title: "Used in 'Heads, memory and speed, re-measured'
# (book/ch01_shapes/timing)."
POINTER = re.compile(
    r"(?:Taught|Used) in (?:§(\d+\.\d+) )?'(.+?)' \(book/(ch\d\d_\w+?)(?:/(\w+))?\)\."
)


def _check_modules():
    # A chapter package's sections.py too: a Section no diagnosis uses yet must exist.
    modules = checks.exercise_modules()
    packages = {
        m.__name__.rsplit(".", 1)[0] for m in modules if m.__name__.count(".") > 2
    }
    return modules + [
        importlib.import_module(f"{p}.sections") for p in sorted(packages)
    ]


def _public_objects(module):
    for name, value in vars(module).items():
        if name.startswith("_") or not (
            inspect.isfunction(value) or inspect.isclass(value)
        ):
            continue
        if getattr(value, "__module__", None) == module.__name__:
            yield name, value


def _reference_modules():
    return [
        importlib.import_module(f"tformer_ref.{m.name}")
        for m in pkgutil.iter_modules(tformer_ref.__path__)
    ]


def _pointers():
    """(where it is written, Section) for every check Section and every reference docstring."""
    out = []
    for module in _check_modules():
        out += [(module.__name__, s) for s in sorted(sections_named(module), key=str)]
    for module in _reference_modules():
        for name, obj in _public_objects(module):
            match = POINTER.search(inspect.getdoc(obj) or "")
            where = f"{module.__name__}.{name}"
            section = None
            if match:
                page = match[4] or "lesson"
                section = Section(match[3], match[1] or "", match[2], page=page)
            out.append((where, section))
    return out


def _headings(chapter: str, page: str) -> set[str]:
    """The page's numbered section headings, and its title as an unnumbered heading."""
    text = (LESSONS / chapter / f"{page}.py").read_text()
    numbered = re.findall(r"^# ## (\d+\.\d+ .+)$", text, flags=re.MULTILINE)
    return {*numbered, *re.findall(r"^# # (.+)$", text, flags=re.MULTILINE)}


@pytest.mark.parametrize(
    "where, section", _pointers(), ids=lambda v: str(v) if isinstance(v, str) else ""
)
def test_every_pointer_to_a_lesson_section_names_a_heading_that_exists(where, section):
    assert section is not None, (
        f"{where}: its docstring needs a line like \"Taught in §3.2 'The causal mask' "
        '(book/ch03_masks)." (or "Used in ..." for lesson support code)'
    )
    assert (LESSONS / section.chapter / f"{section.page}.py").is_file(), (
        f"{where} points to {section.notebook}, which the book has not"
    )
    heading = f"{section.number} {section.title}".strip()
    assert heading in _headings(section.chapter, section.page), (
        f"{where} points to §{section.number} '{section.title}' in {section.notebook}, "
        "which has no such heading"
    )


def test_every_chapter_with_an_exercise_has_checks_that_name_its_sections():
    chapters = {p.parent.name for p in LESSONS.glob("*/lesson.py")}
    named = {s.chapter for m in _check_modules() for s in sections_named(m)}
    assert chapters <= named, f"no check names a section of {sorted(chapters - named)}"
