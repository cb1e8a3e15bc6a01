"""The checks an exercise runs, read from the exercise itself: a bank grades an answer
by running the exercise's own test cells (hidden tests included) with the answer in
place of the learner's code, so the list of checks is written once, in the notebook.

A chapter's bank says which notebook names each of its exercises answers::

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
from typing import Any, Callable

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


def cells(chapter: str) -> list[Cell]:
    """The nbgrader code cells of ``nbsrc/solutions/<chapter>/exercise.py``, in order."""
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
    """The namespace the exercise's locked setup cells build (imports, seeds, helpers)."""
    namespace: dict = {"__name__": f"exercise_{chapter}"}
    for cell in cells(chapter):
        if cell.kind == "locked":
            exec(compile(cell.code, f"<{chapter} setup>", "exec"), namespace)  # noqa: S102
    return namespace


def graders(
    chapter: str,
    answers: dict[str, str | tuple[str, ...]],
    others: dict[str, Any] | None = None,
) -> dict[str, Callable[[Any], None]]:
    """For each exercise of ``answers`` (exercise -> the notebook name or names it
    answers), a grader that runs every test cell using one of those names."""
    tests = [c for c in cells(chapter) if c.kind == "test"]
    out = {}
    for exercise, names in answers.items():
        names = (names,) if isinstance(names, str) else tuple(names)
        mine = [c for c in tests if c.names & set(names)]
        if not mine:
            raise ValueError(f"no test cell of {chapter} uses {names}")
        out[exercise] = functools.partial(_run_cells, chapter, names, mine, others)
    return out


def _run_cells(chapter, names, mine, others, answer) -> None:
    bound = (
        {names[0]: answer}
        if len(names) == 1
        else {name: getattr(answer, name) for name in names}
    )
    for cell in mine:
        namespace = {**_setup(chapter), **(others or {}), **bound}
        exec(compile(cell.code, f"<{chapter} {cell.name}>", "exec"), namespace)  # noqa: S102
