"""The attacks on the judge (tests/grading/judge_attacks.py), graded twice.

Each attacker is one of hostile.py's class, graded by the instructor command in the
sandbox with honest learners after it, then again in a new course
(hostile.graded_again). For each: the run finishes, the attacked cells score 0 (the
attacks on the checks sit on wrong answers; those on the judge's handle lose what the
judge could not measure), the honest learners score what they deserve and their
submissions are graded as handed in, and the gradebook is the same both times.
What each attacker scores cell by cell, and what its feedback says, is asserted with
the rest of the class in test_hostile_submissions.py.
"""

from __future__ import annotations

import sqlite3

import nbformat
import pytest

from hostile import CHAPTER, JUDGE_ATTACKS, LEARNERS, graded_again, graded_class

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("hostile_class")]

ATTACKERS = [f"judge_{attack[0]}" for attack in JUDGE_ATTACKS] + ["judge_key_search"]
HONEST = ("solution", "scale_d_model")


@pytest.mark.parametrize("attacker", ATTACKERS)
def test_each_attack_finishes_and_earns_nothing(attacker):
    for _, _, table, *_ in (graded_class(), graded_again()):
        row = table[attacker]
        assert row["status"] == "graded", row
        assert row["cells"]["test_split_heads"] == 0
        assert row["cells"]["test_merge_heads"] == 0
        assert sum(row["cells"].values()) <= sum(LEARNERS[attacker].scores.values())


def _gradebook(course) -> dict:
    """(learner, cell) -> the points the gradebook holds, for the attackers and the
    honest learners."""
    db = sqlite3.connect(course / "gradebook.db")
    rows = db.execute(
        "SELECT student.id, base_cell.name, grade.auto_score FROM grade "
        "JOIN submitted_notebook ON grade.notebook_id = submitted_notebook.id "
        "JOIN submitted_assignment "
        "ON submitted_notebook.assignment_id = submitted_assignment.id "
        "JOIN student ON submitted_assignment.student_id = student.id "
        "JOIN base_cell ON grade.cell_id = base_cell.id"
    ).fetchall()
    db.close()
    return {(s, c): p for s, c, p in rows if s in ATTACKERS or s in HONEST}


def test_the_gradebook_is_the_same_when_graded_again():
    first_course, _, first, _ = graded_class()
    again_course, _, again, _ = graded_again()
    for learner in (*ATTACKERS, *HONEST):
        assert again[learner]["cells"] == first[learner]["cells"], learner
    assert _gradebook(again_course) == _gradebook(first_course)
    assert len(_gradebook(again_course)) == 5 * (len(ATTACKERS) + len(HONEST))


def test_honest_learners_after_the_attacks_are_untouched():
    """Graded after the attackers (the names sort so, and the progress shows it), the
    honest learners score what they deserve, and the notebook graded is the one each
    handed in, answer for answer."""
    _, _, _, progress = graded_again()
    done = [line.split()[2].rstrip(":") for line in progress if "/" in line.split()[1]]
    assert done.index("solution") > min(done.index(a) for a in ATTACKERS)
    for course, out, table, *_ in (graded_class(), graded_again()):
        for learner in HONEST:
            assert table[learner]["cells"] == LEARNERS[learner].scores, learner
            handed_in = nbformat.read(
                out / "submitted" / learner / CHAPTER / "exercise.ipynb", 4
            )
            graded = nbformat.read(
                course / "autograded" / learner / CHAPTER / "exercise.ipynb", 4
            )
            answers = lambda nb: [  # noqa: E731
                c.source
                for c in nb.cells
                if c.metadata.get("nbgrader", {}).get("solution")
            ]
            assert answers(graded) == answers(handed_in), learner


def test_the_receipt_key_earns_nothing_where_the_judge_decides_every_cell():
    """A control: a learner who reads the receipt key from the checks' memory and
    signs success lines for every check of chapter 1, whose cells the judge all
    decides, earns only what the judge measured: 0 for the wrong split, merge and
    MultiHeadAttention (scaled by sqrt(d_model)); that MultiHeadAttention's behaviour
    probes pass, and so its by-hand cell, whose observation was forged too, scores."""
    for _, _, table, *_ in (graded_class(), graded_again()):
        cells = table["judge_key_search"]["cells"]
        assert cells["test_split_heads"] == cells["test_merge_heads"] == 0
        assert cells["test_mha_matches_reference"] == 0
        assert cells["test_mha_behaviour"] == cells["test_mha_written_by_hand"] == 2
