"""The checks an exercise runs, read from the exercise itself: a bank grades an answer
by running the exercise's own test cells (hidden tests included) with the answer in
place of the learner's code, so the list of checks is written once, in the notebook.

An exercise's bank says which notebook names the exercise answers::

    GRADERS = graders("ch02_attention", {"attention": "attention"})
    GRADERS = graders("ch06_training", {"noam": ("noam_lambda", "make_scheduler")})

An exercise with several names is answered by an object that has each as an
attribute (a class holding ``noam_lambda`` and ``make_scheduler``). A test cell runs
for an exercise when it uses one of its names; ``others`` gives the names a cell uses
that the exercise does not answer (chapter 3's mask probes take the reference's masks
when a masked_attention answer is graded).

Bug this guards against: the checks typed twice, once in the test cells and once in
the bank, drifting apart (aesthetics review 2026-12-05, §2).
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
_HEADER = re.compile(r'^# %% nbgrader="(?P<kind>[\w-]+):(?P<name>[\w-]+)')


@dataclass(frozen=True)
class Cell:
    """A code cell of an exercise: its nbgrader kind (``test``, ``locked``, ...), its
    name, its code without comments (hidden tests kept), and the names it uses."""

    kind: str
    name: str
    code: str

    @functools.cached_property
    def names(self) -> frozenset:
        tree = ast.parse(self.code)
        return frozenset(n.id for n in ast.walk(tree) if isinstance(n, ast.Name))

    @functools.cached_property
    def compiled(self):
        """The code compiled once, run for every answer."""
        return compile(self.code, f"<{self.name}>", "exec")


def cells(chapter: str) -> list[Cell]:
    """The nbgrader code cells of the chapter's solution notebook source, in order."""
    found, current, lines = [], None, []
    source = ROOT / "nbsrc" / "solutions" / chapter / "exercise.py"
    for line in [*source.read_text(encoding="utf-8").splitlines(), "# %%"]:
        if line.startswith("# %%"):
            if current is not None:
                found.append(Cell(*current, "\n".join(lines)))
            match = _HEADER.match(line)
            current = (match["kind"], match["name"]) if match else None
            lines = []
        elif current is not None and not line.lstrip().startswith("#"):
            lines.append(line)
    return found


@functools.cache
def _setup(chapter: str) -> dict:
    """The namespace the exercise's locked setup cells build (imports, seeds)."""
    namespace: dict = {"__name__": f"exercise_{chapter}"}
    for cell in cells(chapter):
        if cell.kind == "locked":
            exec(cell.compiled, namespace)  # noqa: S102
    return namespace


@dataclass(frozen=True)
class Grader:
    """Grades an answer to one exercise: runs each of ``cells`` with the answer bound
    to ``names`` (one name: the answer itself; several: its attributes)."""

    chapter: str
    names: tuple[str, ...]
    cells: tuple[Cell, ...]
    others: tuple[tuple[str, Any], ...] = ()

    def bound(self, answer: Any) -> dict[str, Any]:
        """The notebook names ``answer`` stands for: itself under the one name, else
        its attribute of each name."""
        if len(self.names) == 1:
            return {self.names[0]: answer}
        return {name: getattr(answer, name) for name in self.names}

    def __call__(self, answer: Any) -> None:
        bound = self.bound(answer)
        for cell in self.cells:
            namespace = {**_setup(self.chapter), **dict(self.others), **bound}
            exec(cell.compiled, namespace)  # noqa: S102

    def each_cell(self) -> list[Grader]:
        """One grader per test cell, to run a cell without the ones before it."""
        return [Grader(self.chapter, self.names, (c,), self.others) for c in self.cells]


def graders(
    chapter: str,
    answers: dict[str, str | tuple[str, ...]],
    others: dict[str, Any] | None = None,
) -> dict[str, Grader]:
    """For each exercise of ``answers`` (exercise -> the notebook name or names it
    answers), a grader that runs every test cell using one of those names."""
    tests = [c for c in cells(chapter) if c.kind == "test"]
    out = {}
    for exercise, names in answers.items():
        names = (names,) if isinstance(names, str) else tuple(names)
        mine = tuple(c for c in tests if c.names & set(names))
        if not mine:
            raise ValueError(f"no test cell of {chapter} uses {names}")
        out[exercise] = Grader(chapter, names, mine, tuple((others or {}).items()))
    return out
