"""The instructors page's command blocks, run as written on a fresh copy of the course.

Bug (issue 29, reader review 2026-12-05): ``release_assignment``, ``collect`` and
``release_feedback`` failed as the page gave them. Cause: the exchange commands need a
course id, and the shipped ``nbgrader_config.py`` sets none. Guard: the page's named
blocks are read from ``book/instructors.md`` and run in the page's order through a real
exchange, so the page cannot drift from what works. The exchange folder is named in a
global ``nbgrader_config.py`` (``JUPYTER_CONFIG_DIR``), as the page tells an instructor
to do.

Bugs of the second review (same issue): ``nbgrader db student import students.csv``
failed as written (no such file: the page gave no sample). Guard: ``students.csv`` ships
in the course folder and the set-up block runs. After the class command the cycle's
``generate_feedback`` only printed "Skipping existing assignment" (the class command
writes the feedback pages itself), and the page did not say so. Guard: the class
command's route is a block of its own, without ``generate_feedback``, and the test
checks that it releases the pages the class command wrote. That route then failed:
``release_feedback`` found no ``submission_secret.txt`` (the class command copied only
the notebook and its ``timestamp.txt``, and nbgrader names the released page by the
secret); the class command keeps it now. Every nbgrader command printed "root '.' is
not absolute" (``c.CourseDirectory.root = "."``). Guard: no block's output says it.

Every fenced block of the page is named and listed below: run here (RUN, in the page's
order), run by another test (ELSEWHERE), or not run, with the reason (NOT_RUN).
"""

import csv
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from course import (
    ROOT,
    course_folder,
    filled,
    needs_sandbox,
    scores,
    solution_sources,
)
from instructors_page import block, blocks

CHAPTER = "ch01_shapes"
WORK = "# ... work in"  # where the learner's block pauses for the learner's answers
RUN = [
    "setup-gradebook",
    *("cycle-release", "cycle-learner", "cycle-grade", "cycle-grade-class"),
    *("class-command", "regrade-one", "self-grade"),
]
ELSEWHERE = {
    "class-shards": "test_shared_gradebook.py, two processes and a real PostgreSQL",
}
NOT_RUN = {
    "setup-environment": "a placeholder for the clone; `make env` builds the "
    "environment the tests run in (CI runs it); `learner_lab.py --instructor` would "
    "rewrite that environment's JupyterLab settings (tests/book/test_jupyterlab.py "
    "runs learner_lab.py into a folder of its own)",
    "gradebook-url": "names a server and password of the instructor's; the sharded "
    "test starts its own server and sets GRADEBOOK_URL to it",
}


def test_every_block_of_the_page_is_run_or_said_why_not():
    found = [name for name, _ in blocks()]
    assert None not in found, "a block of book/instructors.md is not a named bash block"
    assert sorted(found) == sorted([*RUN, *ELSEWHERE, *NOT_RUN])
    assert [name for name in found if name in RUN] == RUN  # run in the page's order
    # What the set-up runs that no test runs here exists as the page names it.
    setup = block("setup-environment")
    makefile = (ROOT / "Makefile").read_text()
    for target in re.findall(r"\bmake (\w+)", setup):
        assert re.search(rf"^{target}:", makefile, re.MULTILINE), f"no `make {target}`"
    assert "--instructor" in (ROOT / "tools" / "learner_lab.py").read_text()
    assert "python tools/learner_lab.py --instructor" in setup


def run(script: str, cwd: Path, env: dict) -> str:
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, f"{script}\nfailed:\n{proc.stdout[-5000:]}"
    assert "is not absolute" not in proc.stdout, proc.stdout[-5000:]
    return proc.stdout


def _rows(path: Path) -> dict[str, dict]:
    return {row["student_id"]: row for row in csv.DictReader(open(path))}


def _names(course: Path) -> dict[str, tuple]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return {s.id: (s.first_name, s.last_name) for s in gb.students}


@pytest.mark.slow
def test_the_page_runs_as_written(tmp_path):
    needs_sandbox()
    course = course_folder(tmp_path, CHAPTER)
    shutil.copy(ROOT / "students.csv", course)
    (course / "book" / CHAPTER).mkdir(parents=True)
    shutil.copy(ROOT / "book" / CHAPTER / "exercise.ipynb", course / "book" / CHAPTER)
    learner, exchange, config = (
        tmp_path / d for d in ("learner", "exchange", "config")
    )
    for folder in (learner, exchange, config):
        folder.mkdir()
    exchange.chmod(0o777)
    (config / "nbgrader_config.py").write_text(f"c.Exchange.root = {str(exchange)!r}\n")
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(config),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }

    run(block("setup-gradebook"), course, env)
    with open(ROOT / "students.csv") as f:
        sample = {r["id"]: (r["first_name"], r["last_name"]) for r in csv.DictReader(f)}
    assert _names(course) == {"alice": ("Alice", "Liddell"), **sample}

    run(block("cycle-release"), course, env)
    fetch, submit = block("cycle-learner").split(WORK)
    run(fetch, learner, env)
    mine = learner / CHAPTER / "exercise.ipynb"
    answered = filled(nbformat.read(mine, as_version=4), solution_sources(CHAPTER))
    nbformat.write(answered, mine)
    run(submit.split("\n", 1)[1], learner, env)  # the rest of the comment line dropped
    said = run(block("cycle-grade"), course, env)

    (handed_in,) = (course / "submitted").iterdir()
    student = handed_in.name
    assert (handed_in / CHAPTER / "exercise.ipynb").is_file()
    assert (handed_in / CHAPTER / "timestamp.txt").is_file()
    (released,) = (exchange / "transformers" / "feedback").rglob("*.html")
    assert float(_rows(course / "grades.csv")[student]["score"]) == 12.0
    # Not in students.csv: autograde added the learner, by id alone.
    assert _names(course)[student] == (None, None)

    # The class command's route: it rewrites the feedback page, which is released.
    before = time.time()
    said = run(block("cycle-grade-class"), course, env)
    page = course / "feedback" / student / CHAPTER / "exercise.html"
    assert page.stat().st_mtime > before and released.stat().st_mtime > before, said
    assert released.read_bytes() == page.read_bytes()
    row = _rows(course / "grades" / CHAPTER / "grades.csv")[student]
    assert (row["status"], float(row["score"]), row["time_from"]) == (
        "graded",
        12.0,
        "timestamp.txt",
    )
    assert float(_rows(course / "grades.csv")[student]["score"]) == 12.0
    again = run(f"nbgrader generate_feedback {CHAPTER}", course, env)
    assert "Skipping existing assignment" in again  # as the page says

    # A folder per learner: alice answered it, carol (not in the gradebook) did not.
    student_nb = nbformat.read(course / "release" / CHAPTER / "exercise.ipynb", 4)
    for who, nb in {"alice": answered, "carol": student_nb}.items():
        (course / "collected" / who).mkdir(parents=True)
        nbformat.write(nb, course / "collected" / who / "exercise.ipynb")
    said = run(block("class-command"), course, env)
    rows = _rows(course / "grades" / CHAPTER / "grades.csv")
    assert {s: (r["status"], float(r["score"])) for s, r in rows.items()} == {
        "alice": ("graded", 12.0),
        "carol": ("graded", 0.0),
    }, said
    names = _names(course)
    assert (names["alice"], names["carol"]) == (("Alice", "Liddell"), (None, None))
    # nbgrader itself regrades one learner from the command's submitted folder.
    graded = course / "autograded" / "alice" / CHAPTER / "exercise.ipynb"
    before = time.time()
    said = run(block("regrade-one"), course, env)
    assert graded.stat().st_mtime > before, said
    assert sum(scores(course, CHAPTER)["alice"].values()) == 12.0

    said = run(block("self-grade"), course, env)
    assert "Hidden tests included" in said and "Total: 0 / 12" in said, said
