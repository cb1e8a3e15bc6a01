"""The instructors page's nbgrader cycle, run as written on a fresh copy of the course.

Bug (issue 29, reader review 2026-12-05): ``release_assignment``, ``collect`` and
``release_feedback`` failed as the page gave them. Cause: the exchange commands need a
course id, and the shipped ``nbgrader_config.py`` sets none. Guard: the page's three
named blocks (``cycle-release``, ``cycle-learner``, ``cycle-grade``) are read from
``book/instructors.md`` and run in order through a real exchange, so the page cannot
drift from what works. The exchange folder is named in a global ``nbgrader_config.py``
(``JUPYTER_CONFIG_DIR``), as the page tells an instructor to do.
"""

import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from course import ROOT, course_folder, filled, needs_sandbox, solution_sources

pytestmark = pytest.mark.slow

CHAPTER = "ch01_shapes"
PAGE = ROOT / "book" / "instructors.md"
WORK = "# ... work in"  # where the learner's block pauses for the learner's answers


def block(name: str) -> str:
    """The body of the page's ``{code-block} bash`` named ``name``."""
    found = re.search(
        rf"```{{code-block}} bash\n:name: {name}\n(.*?)```", PAGE.read_text(), re.S
    )
    assert found, f"book/instructors.md has no bash block named {name}"
    return found.group(1)


def run(script: str, cwd: Path, env: dict) -> str:
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=600,
    )
    assert proc.returncode == 0, f"{script}\nfailed:\n{proc.stdout[-5000:]}"
    return proc.stdout


def test_the_cycle_runs_as_the_page_gives_it(tmp_path):
    needs_sandbox()
    course = course_folder(tmp_path, CHAPTER)
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

    run(block("cycle-release"), course, env)
    fetch, submit = block("cycle-learner").split(WORK)
    run(fetch, learner, env)
    mine = learner / CHAPTER / "exercise.ipynb"
    answered = filled(nbformat.read(mine, as_version=4), solution_sources(CHAPTER))
    nbformat.write(answered, mine)
    run(submit.split("\n", 1)[1], learner, env)  # the rest of the comment line dropped
    said = run(block("cycle-grade"), course, env)

    (handed_in,) = (course / "submitted").iterdir()
    assert (handed_in / CHAPTER / "exercise.ipynb").is_file()
    assert (handed_in / CHAPTER / "timestamp.txt").is_file()
    feedback = list((exchange / "transformers" / "feedback").rglob("*.html"))
    assert len(feedback) == 1, said
    (row,) = csv.DictReader(open(course / "grades.csv"))
    assert (row["student_id"], float(row["score"])) == (handed_in.name, 12.0)
    (row,) = csv.DictReader(open(course / "grades" / CHAPTER / "grades.csv"))
    assert (row["status"], float(row["score"]), row["time_from"]) == (
        "graded",
        12.0,
        "timestamp.txt",
    )
