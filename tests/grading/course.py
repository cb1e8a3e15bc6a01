"""Drive the real nbgrader CLI on a temporary copy of the course.

Used by the grading tests of every chapter: build a course folder, release an
exercise, hand in notebooks as fixture learners, autograde, generate feedback,
and read the scores from the real gradebook.
"""

from __future__ import annotations

import copy
import html
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[2]
SOLUTION_BLOCK = re.compile(
    r"^[ \t]*### BEGIN SOLUTION\n(.*?)^[ \t]*### END SOLUTION\n?", re.S | re.M
)


def missing(what: str, reason: str) -> None:
    """Skip the test, saying why, where ``what`` ("sandbox", "postgres") cannot run
    here; fail instead where the environment says it must (``.ci/run`` sets
    TFORMER_REQUIRE_SANDBOX=1 and TFORMER_REQUIRE_POSTGRES=1)."""
    import os

    if os.environ.get(f"TFORMER_REQUIRE_{what.upper()}") == "1":
        pytest.fail(f"{what} is required here and cannot run: {reason}")
    pytest.skip(reason)


def needs_sandbox() -> None:
    """Skip (or fail, where required) when the grading sandbox cannot start here: the
    class command refuses to grade without it."""
    from tformer_grading.sandbox import availability

    if problem := availability():
        missing("sandbox", f"the grading sandbox cannot start here: {problem}")


def nbgrader(
    course: Path, *args: str, timeout: float = 600, pictures: bool = True
) -> subprocess.CompletedProcess:
    """Run ``nbgrader ARGS`` in ``course``; fail the test with its output when it exits
    non-zero. ``pictures=False``: the checks draw none (``TFORMER_PICTURES=off``), where
    a test does not look at them and the suite's time budget is short (a kernel that
    draws one spends about half a second importing matplotlib)."""
    env = None if pictures else {**os.environ, "TFORMER_PICTURES": "off"}
    proc = subprocess.run(
        [sys.executable, "-m", "nbgrader", *args],
        cwd=course,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=timeout,
        env=env,
    )
    assert proc.returncode == 0, (
        f"nbgrader {' '.join(args)} failed:\n{proc.stdout[-5000:]}"
    )
    return proc


def course_folder(tmp: Path, chapter: str) -> Path:
    """A fresh course folder holding the course's config and ``chapter``'s source
    notebook, nothing generated yet."""
    course = tmp / "course"
    (course / "solutions" / chapter).mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copy(
        ROOT / "solutions" / chapter / "exercise.ipynb", course / "solutions" / chapter
    )
    return course


def make_course(tmp: Path, chapter: str) -> Path:
    """A fresh course folder holding ``chapter``'s source notebook, with the assignment
    released."""
    course = course_folder(tmp, chapter)
    nbgrader(course, "db", "assignment", "add", chapter)
    nbgrader(course, "generate_assignment", chapter, "--force")
    return course


def released(course: Path, chapter: str) -> nbformat.NotebookNode:
    return nbformat.read(course / "release" / chapter / "exercise.ipynb", as_version=4)


def solution_sources(chapter: str) -> dict[str, str]:
    """grade_id -> the solution cell's code, as a learner who got it right would write
    it."""
    nb = nbformat.read(ROOT / "solutions" / chapter / "exercise.ipynb", as_version=4)
    out = {}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and cell.cell_type == "code":
            out[meta["grade_id"]] = SOLUTION_BLOCK.sub(
                lambda m: m.group(1), cell.source
            )
    return out


def filled(
    student_nb: nbformat.NotebookNode, answers: dict[str, str]
) -> nbformat.NotebookNode:
    """A copy of the student notebook with the answer cells named in ``answers``
    replaced."""
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


def autograde(
    course: Path, chapter: str, *extra: str, pictures: bool = True
) -> subprocess.CompletedProcess:
    return nbgrader(course, "autograde", chapter, "--force", *extra, pictures=pictures)


def scores(course: Path, chapter: str) -> dict[str, dict[str, float]]:
    """student -> {grade_id: score} from the gradebook nbgrader wrote."""
    from nbgrader.api import Gradebook

    result = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for submission in gb.assignment_submissions(chapter):
            grades = submission.notebooks[0].grades
            result[submission.student.id] = {g.name: g.score for g in grades}
    return result


def page_text(page: Path) -> str:
    """A feedback page as the learner reads it: styles and scripts dropped (the page's
    CSS names a "Generic.Traceback" token), tags dropped, entities decoded, each run of
    white space one space (a diagnosis is shown broken into lines)."""
    body = re.sub(r"<(style|script)\b.*?</\1>", "", page.read_text(), flags=re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", body)).split())


def feedback_text(course: Path, chapter: str, student: str) -> str:
    """The learner's feedback page in nbgrader's feedback folder, as plain text."""
    return page_text(course / "feedback" / student / chapter / "exercise.html")


class Buggy(NamedTuple):
    """A buggy learner; the answer cells it does not name are the solution's."""

    answers: dict[str, str]  # grade_id of an answer cell -> the learner's code for it
    zero: tuple[str, ...]  # test cells that must score 0; the others keep their points
    feedback: str | tuple[str, ...]  # what the learner's feedback page must contain


class GradedChapter:
    """Base of every chapter's grading test (tests/grading/test_grading_chNN.py):
    subclass it as ``TestGrading`` and give the data below. One real ``nbgrader
    autograde`` run grades a small class: the solution, the untouched student version,
    right answers written differently, and one buggy submission per diagnosis; then
    ``generate_feedback`` writes each learner's page.
    """

    chapter: str
    full: dict[str, int]  # grade_id of every test cell -> its points
    buggy: dict[str, Buggy]  # one learner per diagnosis
    right_variants: dict[
        str, dict[str, str]
    ] = {}  # learner -> answer cells replaced by right code
    hidden_marker: str  # text that only the hidden tests contain
    hidden_student: (
        str  # a learner whose autograded notebook must show the hidden tests
    )
    # Whether the checks draw their pictures (tformer_grading.pictures): on where a
    # chapter's test looks at them (ch03), off elsewhere for the suite's time.
    pictures: bool = False

    @pytest.fixture(scope="class")
    @classmethod
    def graded(cls, tmp_path_factory):
        self = cls
        course = make_course(tmp_path_factory.mktemp(self.chapter), self.chapter)
        student_nb = released(course, self.chapter)
        right = solution_sources(self.chapter)
        submit(course, self.chapter, "solution", filled(student_nb, right))
        submit(course, self.chapter, "untouched", student_nb)
        for student, answers in self.right_variants.items():
            submit(
                course, self.chapter, student, filled(student_nb, {**right, **answers})
            )
        for student, learner in self.buggy.items():
            nb = filled(student_nb, {**right, **learner.answers})
            submit(course, self.chapter, student, nb)
        autograde(course, self.chapter, pictures=self.pictures)
        nbgrader(course, "generate_feedback", self.chapter, "--force")
        return course, scores(course, self.chapter)

    def test_solution_scores_full_marks(self, graded):
        _, got = graded
        assert got["solution"] == self.full

    def test_right_answers_written_differently_score_full_marks(self, graded):
        _, got = graded
        for student in self.right_variants:
            assert got[student] == self.full, student

    def test_untouched_student_version_scores_zero(self, graded):
        _, got = graded
        assert got["untouched"] == {cell: 0 for cell in self.full}

    def test_buggy_submission_loses_exactly_its_cells(self, graded, buggy_student):
        course, got = graded
        learner = self.buggy[buggy_student]
        assert got[buggy_student] == {
            cell: (0 if cell in learner.zero else pts)
            for cell, pts in self.full.items()
        }
        text = feedback_text(course, self.chapter, buggy_student)
        feedback = learner.feedback
        for diagnosis in (feedback,) if isinstance(feedback, str) else feedback:
            assert " ".join(diagnosis.split()) in text, diagnosis

    def test_hidden_tests_are_not_in_the_student_version_but_are_graded(self, graded):
        course, _ = graded
        released_text = (
            course / "release" / self.chapter / "exercise.ipynb"
        ).read_text()
        assert (
            self.hidden_marker not in released_text
            and "BEGIN HIDDEN TESTS" not in released_text
        )
        graded_nb = (
            course
            / "autograded"
            / self.hidden_student
            / self.chapter
            / "exercise.ipynb"
        )
        assert self.hidden_marker in graded_nb.read_text()


# An image pasted into a markdown cell, as JupyterLab saves it.
PASTED_IMAGE = {
    "attachments": {
        "image.png": {
            "image/png": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4"
            "nGNg+A8AAAEBAQBaTWyeAAAAAElFTkSuQmCC"
        }
    },
    "cell_type": "markdown",
    "id": "5b1e0c62-8d3e-4c4e-9b8f-0a4b9f3c2d71",
    "metadata": {},
    "source": ["My sketch of the heads:\n", "\n", "![image.png](attachment:image.png)"],
}
