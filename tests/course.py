"""Drive the real nbgrader CLI on a temporary copy of the course.

Used by the grading tests of every chapter: build a course folder, release an
exercise, hand in notebooks as fixture learners, autograde, generate feedback,
and read the scores from the real gradebook.
"""
from __future__ import annotations

import copy
import html
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
SOLUTION_BLOCK = re.compile(r"^[ \t]*### BEGIN SOLUTION\n(.*?)^[ \t]*### END SOLUTION\n?", re.S | re.M)


def nbgrader(course: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run ``nbgrader ARGS`` in ``course``; fail the test with its output when it exits non-zero."""
    proc = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    assert proc.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{proc.stdout[-5000:]}"
    return proc


def make_course(tmp: Path, chapter: str) -> Path:
    """A fresh course folder holding ``chapter``'s source notebook, with the assignment released."""
    course = tmp / "course"
    (course / "solutions" / chapter).mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copy(ROOT / "solutions" / chapter / "exercise.ipynb", course / "solutions" / chapter)
    nbgrader(course, "db", "assignment", "add", chapter)
    nbgrader(course, "generate_assignment", chapter, "--force")
    return course


def released(course: Path, chapter: str) -> nbformat.NotebookNode:
    return nbformat.read(course / "release" / chapter / "exercise.ipynb", as_version=4)


def solution_sources(chapter: str) -> dict[str, str]:
    """grade_id -> the solution cell's code, as a learner who got it right would write it."""
    nb = nbformat.read(ROOT / "solutions" / chapter / "exercise.ipynb", as_version=4)
    out = {}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and cell.cell_type == "code":
            out[meta["grade_id"]] = SOLUTION_BLOCK.sub(lambda m: m.group(1), cell.source)
    return out


def filled(student_nb: nbformat.NotebookNode, answers: dict[str, str]) -> nbformat.NotebookNode:
    """A copy of the student notebook with the answer cells named in ``answers`` replaced."""
    nb = copy.deepcopy(student_nb)
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell.source = answers[grade_id]
    return nb


def submit(course: Path, chapter: str, student: str, nb: nbformat.NotebookNode) -> None:
    folder = course / "submitted" / student / chapter
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / "exercise.ipynb")
    (folder / "timestamp.txt").write_text("2026-11-29 10:00:00.000000 UTC")


def autograde(course: Path, chapter: str, *extra: str) -> subprocess.CompletedProcess:
    return nbgrader(course, "autograde", chapter, "--force", *extra)


def scores(course: Path, chapter: str) -> dict[str, dict[str, float]]:
    """student -> {grade_id: score} from the gradebook nbgrader wrote."""
    from nbgrader.api import Gradebook

    result = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for submission in gb.assignment_submissions(chapter):
            grades = submission.notebooks[0].grades
            result[submission.student.id] = {g.name: g.score for g in grades}
    return result


def feedback_text(course: Path, chapter: str, student: str) -> str:
    """The learner's feedback page as plain text (tags dropped, entities decoded)."""
    page = (course / "feedback" / student / chapter / "exercise.html").read_text()
    return html.unescape(re.sub(r"<[^>]+>", "", page))
