"""The attacks of tests/grading/attacks.py, graded in the class run of hostile.py.

Each learner's points are asserted in test_hostile_submissions.py (it earns what its
wrong fallback earns, nothing more); here: what the attacks must not have touched,
the submissions that could not be graded, and the class report.
"""

import csv
import json
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from course import make_course, released
from hostile import (
    CHAPTER,
    LEARNERS,
    NOT_GRADABLE,
    PROGRESS,
    SNAPSHOT,
    class_command,
    graded_again,
    graded_class,
    hand_in,
    neighbour,
    snapshot,
)

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("hostile_class")]


def test_no_course_file_changed_and_no_gradebook_trigger():
    course, _, _, _ = graded_class()
    now = snapshot(course)
    assert {f: h for f, h in now.items() if f in SNAPSHOT} == SNAPSHOT
    db = sqlite3.connect(course / "gradebook.db")
    assert (
        db.execute("SELECT name FROM sqlite_master WHERE type='trigger'").fetchall()
        == []
    )
    assert not Path("/tmp/pwned").exists()


def test_no_process_outlives_its_kernel():
    _, out, _, _ = graded_class()
    time.sleep(1)  # a survivor would be rewriting grades.csv by now
    left = subprocess.run(["pgrep", "-f", "tformer-spy-marker"], capture_output=True)
    assert left.stdout == b""
    assert not Path("/tmp/tformer-spy-found-a-key").exists()
    assert "spy" not in (out / "grades.csv").read_text()


def test_attacks_saw_no_solutions_no_kernels_no_ports():
    course, out, _, _ = graded_class()
    page = (out / "feedback" / "other_kernels" / "exercise.html").read_text()
    for line in (
        "connection files seen: 0",
        "ports reached: 0",
        "other kernels seen: 0",
    ):
        assert line in page
    graded = (
        course / "autograded" / "reads_solutions" / "ch01_shapes" / "exercise.ipynb"
    )
    printed = json.dumps(
        [c.get("outputs", []) for c in json.loads(graded.read_text())["cells"]]
    )
    assert "solutions found: 0" in printed
    assert "BEGIN SOLUTION" not in printed and "BEGIN HIDDEN" not in printed


def test_ungradable_submissions_are_named_with_the_reason_not_zero():
    _, out, table, _ = graded_class()
    rows = {r["student_id"]: r for r in csv.DictReader(open(out / "grades.csv"))}
    for student, (_, reason) in NOT_GRADABLE.items():
        assert table[student]["status"] == "not graded", student
        assert reason in table[student]["reason"], table[student]["reason"]
        assert rows[student]["status"] == "not graded" and rows[student]["score"] == ""
    graded = [s for s in table if s not in NOT_GRADABLE]
    assert sorted(graded) == sorted(LEARNERS)
    assert all(rows[s]["status"] == "graded" for s in graded)


def test_metadata_edits_earn_nothing_and_a_pasted_copy_is_graded():
    _, _, table, _ = graded_class()
    assert table["edited_metadata"]["max_score"] == 12
    assert any("bonus" in n for n in table["edited_metadata"]["notes"])
    assert any("second copy" in n for n in table["pasted_copy"]["notes"])


def test_error_messages_and_display_updates_are_capped():
    course, _, _, _ = graded_class()
    nb = course / "autograded" / "error_and_update_flood" / "ch01_shapes"
    assert (nb / "exercise.ipynb").stat().st_size < 3_000_000


# The learners whose kernels the grader stops, and the reason it gives.
STOPPED = {
    "big_message": "a message over 32 MB",
    "comm_flood": "more than 512 MB of messages",
}


def test_display_metadata_and_exception_names_are_capped():
    """Bug (issue 32): 30 MB of display metadata and a 5 MB exception name went
    through the 2 MB output cap, which counted neither. Guard: an output counts as the
    JSON it adds (tests/grading/test_output_cap.py); here, the notebook as graded."""
    course, out, _, _ = graded_class()
    nb = course / "autograded" / "metadata_and_name_flood" / CHAPTER / "exercise.ipynb"
    assert nb.stat().st_size < 3_000_000
    page = out / "feedback" / "metadata_and_name_flood" / "exercise.html"
    assert page.stat().st_size < 6_000_000


def test_the_grader_reads_a_bounded_amount_whatever_a_kernel_sends():
    """Bug (issue 32): one 600 MB message cost the grading worker 2 GB, and 700 MB of
    widget messages grew it past 1.2 GB (5.1 GB in a longer flood). Guard: at most
    32 MB per message and 512 MB per notebook are read
    (tformer_grading/guard/message_bound.py); past either the kernel is stopped with
    the reason. Measured: every worker's peak memory over the whole class."""
    course, _, table, _ = graded_class()
    for student, reason in STOPPED.items():
        assert table[student]["status"] == "graded", table[student]
        graded = course / "autograded" / student / CHAPTER / "exercise.ipynb"
        assert reason in graded.read_text(), student
    peaks = {s: row["grader_mb"] for s, row in table.items() if row["grader_mb"]}
    assert peaks and max(peaks.values()) < 1024, peaks


def test_the_resource_attacks_graded_again_earn_the_same():
    """Each resource case graded a second time (a new course, honest learners beside
    them): the same points cell by cell, the same reasons, the workers' peak bounded."""
    course, _, first, _ = graded_class()
    _, out, again, _ = graded_again()
    assert {s: row["cells"] for s, row in again.items()} == {
        s: first[s]["cells"] for s in again
    }
    # Stopped in the flooding cell, or at the start of the next when the flood ended
    # within the second between two looks: the reason is the same.
    for student, reason in STOPPED.items():
        page = out / "feedback" / student / "exercise.html"
        assert reason in page.read_text(), student
    assert max(row["grader_mb"] for row in again.values()) < 1024


def test_class_report_counts_each_named_mistake():
    _, out, table, _ = graded_class()
    rows = list(csv.DictReader(open(out / "pitfalls.csv")))
    named = {(r["test_cell"], r["mistake"]): int(r["learners"]) for r in rows}
    why = table["scale_d_model"]["diagnoses"]["test_mha_matches_reference"]
    pitfall = why.split("the pitfall '")[1].split("'")[0]
    assert named[("test_mha_matches_reference", pitfall)] >= 1
    assert (out / "pitfalls.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((out / "results.json").read_text()).keys() == table.keys()


def test_control_without_the_sandbox_the_same_attacks_succeed(tmp_path):
    """The same two attacks graded with --unsafe-no-sandbox find the instructor's
    answers (and earn the points of running them) and reach the neighbour's port: what
    the sandbox is there to stop."""
    neighbour()
    course = make_course(tmp_path, CHAPTER)
    collected = tmp_path / "collected"
    hand_in(collected, released(course, CHAPTER), ("reads_solutions", "other_kernels"))
    out = tmp_path / "out"
    proc = class_command(course, collected, out, "--unsafe-no-sandbox", "--json")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "WARNING: grading without a sandbox" in proc.stderr
    row = json.loads(proc.stdout)["reads_solutions"]
    assert row["cells"]["test_split_heads"] == 2  # the instructor's split_heads ran
    page = out / "feedback" / "reads_solutions" / "exercise.html"
    assert "solutions found: 1" in page.read_text()
    page = out / "feedback" / "other_kernels" / "exercise.html"
    assert "ports reached: 0" not in page.read_text()


def test_progress_shows_every_submission_once():
    graded_class()
    bars = [line for line in PROGRESS if line.startswith("[")]
    total = len(LEARNERS) + len(NOT_GRADABLE)
    assert len(bars) == total and bars[-1].startswith(f"[{'#' * 30}] {total}/{total}")
    assert sum("NOT GRADED" in line for line in bars) == len(NOT_GRADABLE)
