"""An instructor autogrades a folder of submissions into the course's gradebook.

``collected/<student>/exercise.ipynb`` or ``collected/<student>/<assignment>/exercise.ipynb``;
feedback and two grade tables (nbgrader's ``grades.csv`` and a per-cell
``cells.csv``) go to the output folder.
"""

from __future__ import annotations

import csv
import shutil
import time
from pathlib import Path

from .course import NOTEBOOK, GradeError, chapters, nbgrader, read_scores


def _collect(submissions: Path, assignment: str) -> dict[str, Path]:
    """student -> the folder holding their notebook(s), from either layout."""
    found = {}
    for student in sorted(p for p in submissions.iterdir() if p.is_dir()):
        folder = student / assignment if (student / assignment).is_dir() else student
        if (folder / f"{NOTEBOOK}.ipynb").is_file():
            found[student.name] = folder
    return found


def _assignment_known(course: Path, assignment: str) -> bool:
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        try:
            return bool(gb.find_assignment(assignment).notebooks)
        except MissingEntry:
            return False


def _hand_in(course: Path, assignment: str, students: dict[str, Path]) -> None:
    for student, folder in students.items():
        target = course / "submitted" / student / assignment
        if folder.resolve() != target.resolve():
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(folder, target)
        stamp = target / "timestamp.txt"
        if not stamp.exists():
            stamp.write_text(
                time.strftime("%Y-%m-%d %H:%M:%S.000000 UTC", time.gmtime())
            )


def _write_cells_csv(path: Path, table: dict) -> None:
    ids = sorted({g for row in table.values() for g in row["cells"]})
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["student", *ids, "total", "max"])
        for student, row in sorted(table.items()):
            writer.writerow(
                [
                    student,
                    *(row["cells"].get(g, "") for g in ids),
                    row["score"],
                    row["max_score"],
                ]
            )


def grade_class(
    course: Path,
    assignment: str,
    submissions: Path,
    out: Path,
    timeout: int | None = None,
) -> dict:
    """Autograde every submission into ``course``'s gradebook, then write feedback and grades to
    ``out``.

    Returns student -> {"score", "max_score", "cells": {grade_id: score}}.
    """
    course, submissions, out = course.resolve(), submissions.resolve(), out.resolve()
    if not (course / "solutions" / assignment / f"{NOTEBOOK}.ipynb").is_file():
        raise GradeError(
            f"{course}/solutions/{assignment}/{NOTEBOOK}.ipynb does not exist; "
            f"assignments here: {', '.join(chapters(course)) or 'none'}"
        )
    if not _assignment_known(
        course, assignment
    ):  # records the source's checksums and points
        nbgrader(
            course,
            course,
            "generate_assignment",
            assignment,
            "--force",
            "--log-level=ERROR",
        )
    students = _collect(submissions, assignment)
    if not students:
        raise GradeError(
            f"no {NOTEBOOK}.ipynb under {submissions}/<student>/[{assignment}/]"
        )
    _hand_in(course, assignment, students)
    args = ["autograde", assignment, "--force"]
    args += [f"--Execute.timeout={timeout}"] if timeout else []
    graded = nbgrader(course, course, *args, check=False)
    nbgrader(
        course,
        course,
        "generate_feedback",
        assignment,
        "--force",
        "--log-level=ERROR",
        check=False,
    )
    out.mkdir(parents=True, exist_ok=True)
    nbgrader(
        course, course, "export", f"--to={out / 'grades.csv'}", "--log-level=ERROR"
    )
    (out / "autograde.log").write_text(graded.stdout)
    scores = read_scores(course, assignment)
    table = {}
    for student in students:
        cells = scores.get(student, {})
        table[student] = {
            "score": sum(s for s, _ in cells.values()),
            "max_score": sum(m for _, m in cells.values()),
            "cells": {g: s for g, (s, _) in cells.items()},
        }
        feedback = course / "feedback" / student / assignment
        if feedback.is_dir():
            shutil.copytree(feedback, out / "feedback" / student, dirs_exist_ok=True)
    _write_cells_csv(out / "cells.csv", table)
    return table
