"""Two graders, one PostgreSQL gradebook: two shards of a class graded at once.

The attackers of hostile.py's class and two honest learners are graded again by two
processes (``--shard 1/2`` and ``--shard 2/2``) into a fresh PostgreSQL server. Every
learner must come out once, with the same points and status as in the single SQLite
run: the shared gradebook works, and grading the attacks is stable on rerun. (The
learners who spend their time in loops and the plainly wrong ones are not graded
again: they would double this test's time and attack nothing.)

The two commands are the instructors page's (book/instructors.md, the block named
``class-shards``), read from the page and run as written in the course folder, with
``GRADEBOOK_URL`` naming the server, so the page cannot drift from what works (issue
29). Each gets the hostile class's time limits (the SQLite run's, for equal results)
and one job (two processes on this two-core machine), added at its end.
"""

import csv
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

import postgres
from course import make_course
from hostile import CHAPTER, NOTEBOOK_TIMEOUT, TIMEOUT, graded_class
from instructors_page import block, commands

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("hostile_class")]
AGAIN = {
    *("reads_solutions", "rewrites_course", "outlives_kernel", "other_kernels"),
    *("lookalike_first", "import_hook_first", "edited_metadata", "memory_flood"),
    *("error_and_update_flood", "output_and_warnings", "solution", "pasted_copy"),
    *("invalid_json", "not_utf8", "format_3", "ten_thousand_cells", "link_to_passwd"),
}


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
        collected = course / "collected"  # where the page's commands read it
        shutil.copytree(out_sqlite.parent / "collected", collected, symlinks=True)
        for student in {p.name for p in collected.iterdir()} - AGAIN:
            shutil.rmtree(collected / student)
        page = commands(block("class-shards"))
        assert [re.search(r"--shard (\S+)", c)[1] for c in page] == ["1/2", "2/2"]
        limits = f" --timeout {TIMEOUT} --notebook-timeout {NOTEBOOK_TIMEOUT} --jobs 1"
        env = {**os.environ, "GRADEBOOK_URL": url}
        shards = [
            subprocess.Popen(
                ["bash", "-euo", "pipefail", "-c", command + limits], cwd=course,
                env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            )
            for command in page
        ]  # fmt: skip
        logs = [p.communicate(timeout=900)[0] for p in shards]
        # 0: all graded, 1: some could not be (they are in the class): never 2 or 3.
        assert all(p.returncode in (0, 1) for p in shards), logs
        outs = [course / re.search(r"--out (\S+)", c)[1] for c in page]
        parts = [_grades(out / "grades.csv") for out in outs]
        assert not parts[0].keys() & parts[1].keys()  # each learner in one shard
        merged = {**parts[0], **parts[1]}
        single = _grades(out_sqlite / "grades.csv")
        assert merged == {s: g for s, g in single.items() if s in AGAIN}
        from nbgrader.api import Gradebook

        with Gradebook(url) as gb:  # the shared gradebook holds exactly the graded ones
            in_db = {s.student.id: s.score for s in gb.assignment_submissions(CHAPTER)}
        graded = {s: float(g[1]) for s, g in merged.items() if g[0] == "graded"}
        assert in_db == graded
    finally:
        stop()
        shutil.rmtree(tmp, ignore_errors=True)
