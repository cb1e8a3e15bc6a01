"""The judge agrees with the checks run beside the learner's code, on the whole bank.

For every test cell the judge judges (tformer_grading/judge/registry.py), the checks the
judge makes for it are run on every bank answer behind the wire, as the judge runs them
(through the kernel's agent, here in this process: the same requests and answers as a
kernel's), and on every wrong answer itself too, as the kernel runs them (a right one
passes there: tests/bank/test_bank.py asserts it). A right answer must pass the judge
(an honest learner never loses points to it), and a wrong answer the checks reject must
be rejected by the judge too (the judge alone grants points). The messages must be the
same, word for word, for at least 95 % of them: the same checks, on the same inputs,
save the shares a dropout zeroed ("21%"): the learner's code draws its masks from the
judge's seed in the kernel, and from the global random state beside the checks.
"""

from __future__ import annotations

import functools
import re

import pytest
from bank import chapters, entries, graders_of
from exercise_cells import _setup

from tformer_grading.checks import pieces
from tformer_grading.judge.cells import judge, plan
from tformer_grading.judge.remote import Kernel, LocalLink


class Direct:
    """The learner's objects themselves, as the kernel's checks see them."""

    def __init__(self, namespace: dict) -> None:
        self.namespace = namespace

    def lookup(self, name: str):
        return self.namespace[name]

    def forget(self) -> None:
        pass


def _drawn(message: str) -> str:
    """``message`` with its percentages masked: shares measured on random draws."""
    return re.sub(r"\d+%", "N%", message)


@functools.cache
def _judged_exercises() -> list[tuple[str, str]]:
    found = []
    for chapter in chapters():
        for exercise, grader in graders_of(chapter).items():
            if any(plan(c.code) for c in grader.cells):
                found.append((chapter, exercise))
    return found


def test_the_judge_judges_the_exercises_the_registry_lists():
    assert len(_judged_exercises()) >= 20


@pytest.mark.parametrize("chapter,exercise", _judged_exercises(), ids=lambda x: str(x))
def test_the_judge_agrees_with_the_cells(chapter, exercise):
    grader = graders_of(chapter)[exercise]
    disagree, same, compared = [], 0, 0
    for entry in [e for e in entries(chapter) if e.exercise == exercise]:
        seen = set()  # a by-hand cell the judge judges by another cell's checks
        for cell in grader.cells:
            calls = plan(cell.code)
            if calls is None or repr(calls) in seen:
                continue
            seen.add(repr(calls))
            namespace = {
                **_setup(grader.chapter),
                **dict(grader.others),
                **grader.bound(entry.answer),
            }
            pieces.forget()
            judged = judge(calls, Kernel(LocalLink(namespace))).failure
            # A right answer passes the checks run beside it (tests/bank/test_bank.py
            # asserts it): only a wrong one needs that run, for its message.
            here = None
            if entry.expect is not None:
                pieces.forget()
                here = judge(calls, Direct(namespace)).failure
            if entry.expect is None and judged is not None:
                disagree.append(f"{entry.name} (right) in {cell.name}: {judged}")
            if here is not None and judged is None:
                disagree.append(f"{entry.name} in {cell.name}: the judge passed it")
            if here is not None and judged is not None:
                compared += 1
                same += _drawn(judged) == _drawn(here)
    assert not disagree, "\n".join(disagree)
    assert same >= 0.95 * compared, f"{same} of {compared} messages the same"
