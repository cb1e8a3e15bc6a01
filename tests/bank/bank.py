"""The measured bank: literal learner answers, each with the verdict the checks give.

An exercise's bank is ``tests/exercises/<chapter>/<exercise>/bank_<exercise>.py``
(``tests/exercises/<chapter>/bank_<chapter>.py`` for a chapter of one exercise: the bug
hunts, the own model). It registers answers with the two decorators below and says, in
``GRADERS``, how an answer to the exercise is graded: by the exercise's own test cells,
read from its source (``exercise_cells.graders``)::

    GRADERS = graders("ch02_attention", {"attention": "attention"})

    @wrong("attention", r"divided by 8(\\.0)?\\b.*expected .*sqrt", listed=False)
    def attention_divides_by_two_sqrt(q, k, v):   # an extra factor 2 "for stability"
        ...

    @right("attention")
    def attention_with_baddbmm(q, k, v):
        ...

An entry's chapter is the folder under ``tests/exercises`` its bank is in. ``expect`` is
a regular expression the failure message must match: the pitfall's name or the measured
quantity that is off, never words every failure has. ``GENERIC`` says the checks are
expected to reject the answer without naming its mistake (counted against the chapter's
85 %). ``listed`` says whether the mistake is exactly one of the check's own wrong
variants; the bank needs mistakes the checks were not written from.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from tformer_grading.checks import pieces
from tformer_grading.checks.diagnosis import UNEXPLAINED, CheckFailure

GENERIC = "<generic>"
EXERCISES = Path(__file__).resolve().parents[1] / "exercises"


@dataclass(frozen=True)
class Entry:
    """One answer in the bank."""

    chapter: str
    exercise: str
    name: str
    answer: Any
    expect: str | None  # None: a right answer, to be accepted
    listed: bool = False

    @property
    def id(self) -> str:
        return f"{self.chapter}-{self.exercise}-{self.name}"


@dataclass(frozen=True)
class Verdict:
    """What the checks made of an answer: ``kind`` is accepted, named, generic, misnamed
    or crashed (a check raised something other than CheckFailure: the course's bug)."""

    kind: str
    message: str = ""


ENTRIES: list[Entry] = []


def _chapter_of(fn: Callable) -> str:
    """The folder under tests/exercises that the bank defining ``fn`` is in."""
    path = Path(sys.modules[fn.__module__].__file__).resolve()
    if not (path.name.startswith("bank_") and path.is_relative_to(EXERCISES)):
        raise ValueError(
            f"bank entries live in tests/exercises/<chapter>/**/bank_*.py, not {path}"
        )
    return path.relative_to(EXERCISES).parts[0]


def right(exercise: str) -> Callable:
    """Register a right answer to ``exercise``: every check must accept it."""

    def register(answer):
        chapter = _chapter_of(answer)
        ENTRIES.append(Entry(chapter, exercise, answer.__name__, answer, None))
        return answer

    return register


def wrong(exercise: str, expect: str, *, listed: bool) -> Callable:
    """Register a wrong answer to ``exercise``: the checks must reject it with a message
    matching ``expect`` (or with the generic fallback, when ``expect`` is GENERIC)."""
    re.compile(expect)

    def register(answer):
        chapter = _chapter_of(answer)
        ENTRIES.append(
            Entry(chapter, exercise, answer.__name__, answer, expect, listed)
        )
        return answer

    return register


def failure_of(grader: Callable[[Any], None], answer: Any) -> CheckFailure | None:
    """The failure ``grader`` rejects ``answer`` with, None when it accepts it; any
    other exception (a check that crashed) goes to the caller."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # the checks' ✓ lines
            grader(answer)
    except CheckFailure as failure:
        return failure
    return None


def _failure(grader: Callable[[Any], None], answer: Any) -> str | None:
    """The message ``grader`` rejects ``answer`` with (:func:`failure_of`)."""
    failure = failure_of(grader, answer)
    return None if failure is None else str(failure)


def classify(entry: Entry, message: str | None) -> Verdict:
    """The verdict of the first failure message (None: every check accepted)."""
    if message is None:
        return Verdict("accepted")
    if UNEXPLAINED in message:
        return Verdict("generic", message)
    if entry.expect not in (None, GENERIC) and re.search(entry.expect, message, re.S):
        return Verdict("named", message)
    return Verdict("misnamed", message)


def grade(entry: Entry, graders: dict[str, Callable[[Any], None]]) -> Verdict:
    """Run every check of the entry's exercise on its answer; classify the outcome."""
    pieces.forget()  # each answer is a notebook of its own
    try:
        message = _failure(graders[entry.exercise], entry.answer)
    except Exception as exc:  # noqa: BLE001 - a check that crashes is what we look for
        return Verdict("crashed", f"{type(exc).__name__}: {exc}")
    return classify(entry, message)


@dataclass(frozen=True)
class Outcome:
    """What one test cell, run on its own, made of an answer: ``kind`` is passed,
    failed (``message`` the learner reads) or crashed (the check raised)."""

    kind: str
    message: str = ""


def cell_outcomes(
    entry: Entry, graders: dict[str, Callable[[Any], None]]
) -> list[Outcome]:
    """Each test cell of the entry's exercise run on its own, in order: what a
    learner reads in a notebook, where every graded cell runs even after one fails.
    The cells share no namespace, so the first that does not pass gives ``grade``'s
    verdict (``verdict_of``), and tests that need both run the cells once."""
    pieces.forget()  # each answer is a notebook of its own
    found = []
    for cell in graders[entry.exercise].each_cell():
        try:
            message = _failure(cell, entry.answer)
        except Exception as exc:  # noqa: BLE001 - a check that crashes is reported
            found.append(Outcome("crashed", f"{type(exc).__name__}: {exc}"))
            continue
        found.append(
            Outcome("passed") if message is None else Outcome("failed", message)
        )
    return found


def verdict_of(entry: Entry, outcomes: list[Outcome]) -> Verdict:
    """``grade``'s verdict, read from the outcomes of the entry's cells."""
    for outcome in outcomes:
        if outcome.kind == "crashed":
            return Verdict("crashed", outcome.message)
        if outcome.kind == "failed":
            return classify(entry, outcome.message)
    return Verdict("accepted")


def every_message(entry: Entry, graders: dict[str, Callable[[Any], None]]) -> list[str]:
    """The failure message of each test cell of the entry's exercise, each cell run on
    its own (``grade`` stops at the first failure, as the verdict is the first)."""
    return [o.message for o in cell_outcomes(entry, graders) if o.kind == "failed"]


def expected_kind(entry: Entry) -> str:
    if entry.expect is None:
        return "accepted"
    return "generic" if entry.expect == GENERIC else "named"


def chapters() -> list[str]:
    """The folders of tests/exercises that hold a bank."""
    return sorted({p.relative_to(EXERCISES).parts[0] for p in _banks()})


def _banks(chapter: str = "") -> list[Path]:
    return sorted((EXERCISES / chapter).rglob("bank_*.py"))


def load(chapter: str) -> list:
    """Import every bank of ``chapter`` (registering its entries); return the modules.
    Each is imported by its own name, from its folder, as the unit tests import it."""
    modules = []
    for path in _banks(chapter):
        # a bank may import its chapter's shared answers (answers_<chapter>.py)
        for folder in (path.parent, EXERCISES / chapter):
            if str(folder) not in sys.path:
                sys.path.insert(0, str(folder))
        module = importlib.import_module(path.stem)
        if Path(module.__file__).resolve() != path.resolve():
            raise ValueError(f"two banks named {path.name}: {module.__file__}, {path}")
        modules.append(module)
    return modules


@functools.cache
def graders_of(chapter: str) -> dict[str, Callable[[Any], None]]:
    """exercise -> the Grader its bank declares, for every bank of ``chapter``."""
    found: dict[str, Callable[[Any], None]] = {}
    for module in load(chapter):
        twice = set(found) & set(module.GRADERS)
        if twice:
            raise ValueError(f"{module.__file__}: {sorted(twice)} graded twice")
        found.update(module.GRADERS)
    return found


def entries(chapter: str) -> list[Entry]:
    load(chapter)
    return [e for e in ENTRIES if e.chapter == chapter]
