"""Two graders, one PostgreSQL gradebook: two shards of a class graded at once.

The class is hostile.py's (minus the learners who spend their time in loops), graded
again by two processes (``--shard 1/2`` and ``--shard 2/2``) into a fresh PostgreSQL
server. Every learner must come out once, with the same points and status as in
the single SQLite run: the shared gradebook works, and grading is stable on rerun.
"""

import csv
import shutil
import tempfile
from pathlib import Path

import pytest

import postgres
from course import make_course
from hostile import CHAPTER, class_command, graded_class

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("hostile_class")]
SLOW = {"loop_and_crash", "stubborn_loop", "slow"}


def _grades(path: Path) -> dict:
    return {
        r["student_id"]: (r["status"], r["score"], r["max_score"])
        for r in csv.DictReader(open(path))
    }


def test_two_shards_into_postgres_match_one_sqlite_run():
    course_sqlite, out_sqlite, _, _ = graded_class()
    url, stop = postgres.start()
    tmp = Path(tempfile.mkdtemp(prefix="tformer-shards-"))
    try:
        course = make_course(tmp, CHAPTER)
        collected = tmp / "collected"
        shutil.copytree(out_sqlite.parent / "collected", collected, symlinks=True)
        for student in SLOW:
            shutil.rmtree(collected / student)
        shards = [
            class_command(
                course, collected, tmp / f"out{k}", "--jobs", "1",
                "--shard", f"{k}/2", "--db-url", url, wait=False,
            )
            for k in (1, 2)
        ]  # fmt: skip
        logs = [p.communicate(timeout=900)[0] for p in shards]
        assert [p.returncode for p in shards] != [2, 2], logs
        parts = [_grades(tmp / f"out{k}" / "grades.csv") for k in (1, 2)]
        assert not parts[0].keys() & parts[1].keys()  # each learner in one shard
        merged = {**parts[0], **parts[1]}
        single = _grades(out_sqlite / "grades.csv")
        assert merged == {s: g for s, g in single.items() if s not in SLOW}
        from nbgrader.api import Gradebook

        with Gradebook(url) as gb:  # the shared gradebook holds exactly the graded ones
            in_db = {s.student.id: s.score for s in gb.assignment_submissions(CHAPTER)}
        graded = {s: float(g[1]) for s, g in merged.items() if g[0] == "graded"}
        assert in_db == graded
    finally:
        stop()
        shutil.rmtree(tmp, ignore_errors=True)
