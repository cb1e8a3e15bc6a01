"""The instructor workflow with the real nbgrader CLI on a temporary course.

generate_assignment -> (hand-in of a small class) -> autograde -> generate_feedback -> export, driven by
the instructor command ``python -m tformer_grading --course --assignment --submissions``. The class is
the fixture learners of tests/grading/hostile.py (honest, buggy and hostile), graded in one run.
"""

import csv
import sqlite3

import pytest

from course import nbgrader, page_text
from hostile import CHAPTER, LEARNERS, NOT_GRADABLE, TIMEOUT, graded_class
from tformer_grading.course import read_scores

pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("hostile_class"),
]  # graded_class() runs once per worker


@pytest.fixture(scope="module")
def graded():
    return graded_class()


def test_exported_grades_match_what_each_submission_deserves(graded):
    course, out, table, _ = graded
    with open(out / "grades.csv") as f:
        rows = {
            row["student_id"]: row
            for row in csv.DictReader(f)
            if row["assignment"] == CHAPTER
        }
    assert set(rows) == set(LEARNERS) | set(NOT_GRADABLE)
    for learner in NOT_GRADABLE:  # listed, with the reason, and not as a zero
        assert (
            rows[learner]["status"] == "not graded" and rows[learner]["raw_score"] == ""
        )
    for learner, spec in LEARNERS.items():
        assert rows[learner]["status"] == "graded", learner
        assert float(rows[learner]["raw_score"]) == sum(spec.scores.values()), learner
        assert float(rows[learner]["max_score"]) == 12
        assert table[learner]["cells"] == spec.scores, learner


def test_feedback_is_written_for_every_learner(graded):
    _, out, _, _ = graded
    for learner in LEARNERS:
        page = out / "feedback" / learner / "exercise.html"
        assert page.is_file(), learner
        assert page.stat().st_size < 2_000_000, (
            f"{learner}'s feedback is {page.stat().st_size:,} bytes"
        )


def test_feedback_shows_the_diagnosis_not_the_checks_traceback(graded):
    """A check that fails shows its diagnosis and the lesson section, no frames of the
    checks' code (scale_d_model's only failing cell is a check that names its pitfall)."""
    _, out, _, _ = graded
    page = (out / "feedback" / "scale_d_model" / "exercise.html").read_text()
    text = page_text(out / "feedback" / "scale_d_model" / "exercise.html")
    assert " ".join(LEARNERS["scale_d_model"].feedback.split()) in text
    assert "Read §1.9 'Scaling by the head size'" in text
    assert "Traceback" not in text and "tformer_grading/checks" not in text
    # This course names no published book: the section and the kit's file, as text
    # (tests/grading/test_feedback_page.py tests the links to a book).
    assert "The lesson explains this: §1.9 'Scaling by the head size'" in text
    assert text.count("book/ch01_shapes/lesson.ipynb in your course kit") == 1
    assert 'href="../' not in page


def test_gradebook_is_consistent(graded):
    """Every learner has one submission with every grade cell scored; nothing dangling, nothing null."""
    course, _, _, _ = graded
    db = sqlite3.connect(course / "gradebook.db")
    try:
        grades = db.execute(
            "SELECT student.id, base_cell.name, grade.auto_score, grade.needs_manual_grade "
            "FROM grade JOIN submitted_notebook ON grade.notebook_id = submitted_notebook.id "
            "JOIN submitted_assignment ON submitted_notebook.assignment_id = submitted_assignment.id "
            "JOIN student ON submitted_assignment.student_id = student.id "
            "JOIN base_cell ON grade.cell_id = base_cell.id"
        ).fetchall()
        submissions = db.execute(
            "SELECT COUNT(*) FROM submitted_assignment"
        ).fetchone()[0]
    finally:
        db.close()
    assert submissions == len(LEARNERS)
    assert len(grades) == 5 * len(LEARNERS)
    assert all(score is not None and not manual for _, _, score, manual in grades), [
        g for g in grades if g[2] is None or g[3]
    ]


def test_running_autograde_again_changes_nothing(graded):
    """nbgrader itself, pointed at the copies the class command graded
    (``<out>/submitted``), finds them graded, and regrades one to the same scores."""
    course, out, table, _ = graded
    copies = f"--CourseDirectory.submitted_directory={out / 'submitted'}"
    before = (course / "gradebook.db").read_bytes()
    # already graded: nbgrader skips, the gradebook is untouched
    nbgrader(course, "autograde", CHAPTER, copies)
    assert (course / "gradebook.db").read_bytes() == before
    # Forced regrading of one learner gives the same scores.
    nbgrader(
        course,
        "autograde",
        CHAPTER,
        copies,
        "--force",
        "--student=scale_d_model",
        f"--Execute.timeout={TIMEOUT}",
    )
    again = read_scores(course, CHAPTER)
    regraded = {g: s for g, (s, _) in again["scale_d_model"].items()}
    assert regraded == LEARNERS["scale_d_model"].scores
    assert {s: {g: v for g, (v, _) in c.items()} for s, c in again.items()} == {
        s: row["cells"] for s, row in table.items() if row["status"] == "graded"
    }


def test_whole_class_grades_within_budget(graded):
    """DESIGN §6: one learner's chapter submission autogrades in about 20 s (2-core CPU, loaded machine: 3x slack).
    The class includes two deliberate timeouts of TIMEOUT seconds."""
    _, _, _, seconds = graded
    print(f"class of {len(LEARNERS)} graded in {seconds:.0f} s")
    assert seconds < 60 * len(LEARNERS)
