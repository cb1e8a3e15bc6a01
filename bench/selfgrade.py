"""Self-grading one chapter (chapter 1, hidden tests included) against a plain
``nbgrader autograde`` of the same notebook, measured in the same run.

* ours: ``python -m tformer_grading book/ch01_shapes/exercise.ipynb`` on the solution
  notebook, end to end as the learner runs it (a throw-away course, generate_assignment,
  autograde, the report).
* peer: ``nbgrader autograde`` of that notebook in a course where generate_assignment
  has already run (not timed), with the course's own nbgrader_config.py.

Budget: at most 1.4x the plain autograde (the self-grade also builds its course and runs
generate_assignment, about a second); the label also shows the seconds, which must stay
under 20 s on an idle 2-core machine (the learner waits for them). Before the gradebook
was stamped in-process and the scores read by the grading process, this was 2.0x.

A second pair, the early error: the same command on a notebook that is not valid JSON
(it must say so before nbgrader or a kernel starts; the issue asked for under 2 s),
against the command's own ``--help`` (the interpreter starting and the command's module
loading). Budget 1.5x.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
from pathlib import Path

from . import ROOT, timed_module

CHAPTER = "ch01_shapes"
SOLUTION = ROOT / "solutions" / CHAPTER / "exercise.ipynb"


def _plain_course(tmp: Path) -> Path:
    """A course with the chapter generated and the solution handed in by one student."""
    course = tmp / "plain"
    (course / "solutions" / CHAPTER).mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copy(SOLUTION, course / "solutions" / CHAPTER)
    timed_module(["nbgrader", "generate_assignment", CHAPTER, "--force"], course)
    handed_in = course / "submitted" / "you" / CHAPTER
    handed_in.mkdir(parents=True)
    shutil.copy(SOLUTION, handed_in / "exercise.ipynb")
    return course


def _self_grade(tmp: Path) -> float:
    """The learner's command in a copy of the course holding this chapter only."""
    course = tmp / "learner"
    if not course.is_dir():
        (course / "book" / CHAPTER).mkdir(parents=True)
        shutil.copy(ROOT / "nbgrader_config.py", course)
        shutil.copytree(ROOT / "solutions" / CHAPTER, course / "solutions" / CHAPTER)
        shutil.copy(SOLUTION, course / "book" / CHAPTER / "mine.ipynb")
    mine = course / "book" / CHAPTER / "mine.ipynb"
    return timed_module(["tformer_grading", str(mine)], course)


def _plain_autograde(course: Path) -> float:
    args = ["nbgrader", "autograde", CHAPTER, "--student", "you", "--force"]
    return timed_module(args, course)


def _early_error(tmp: Path, rounds: int = 5) -> tuple[float, float]:
    broken = tmp / "broken" / "exercise.ipynb"
    broken.parent.mkdir(parents=True, exist_ok=True)
    broken.write_text('{"cells": [')
    error, usage = [], []
    for _ in range(rounds):
        error.append(timed_module(["tformer_grading", str(broken)], tmp, status=2))
        usage.append(timed_module(["tformer_grading", "--help"], tmp))
    return statistics.median(error), statistics.median(usage)


def run(rounds: int = 2) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="tformer-bench-") as tmp:
        tmp = Path(tmp)
        course = _plain_course(tmp)
        times = {"ours": [], "peer": []}
        for _ in range(rounds):
            times["ours"].append(_self_grade(tmp))
            times["peer"].append(_plain_autograde(course))
        error, usage = _early_error(tmp)
    ours, peer = statistics.median(times["ours"]), statistics.median(times["peer"])
    return [
        {
            "benchmark": f"self-grade {CHAPTER} with hidden tests ({ours:.1f} s) vs a "
            f"plain nbgrader autograde of the same notebook ({peer:.1f} s)",
            "ours_ms": ours * 1e3,
            "peer_ms": peer * 1e3,
            "ratio": ours / peer,
            "budget": 1.4,
        },
        {
            "benchmark": "self-grade's error on a notebook that is not JSON "
            f"({error:.2f} s) vs the command's --help ({usage:.2f} s)",
            "ours_ms": error * 1e3,
            "peer_ms": usage * 1e3,
            "ratio": error / usage,
            "budget": 1.5,
        },
    ]


if __name__ == "__main__":
    for result in run():
        print(result)
