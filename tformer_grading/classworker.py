"""One grading worker of the class command: grades its share of the students.

Run by :mod:`tformer_grading.classgrade` as ``python -m tformer_grading.classworker
SETTINGS.json`` in the course folder, once per job. nbgrader runs here, in the
grader's trust; only each notebook's kernel runs in its sandbox. For each student
it prints one JSON line (:data:`RESULT` + the result); a submission that cannot be
graded is reported with the reason, and the worker goes on with the next one.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
from pathlib import Path

from .course import NOTEBOOK, diagnoses, read_scores
from .preflight import NotGradable, read_submission, write

RESULT = "tformer-result\t"
_NOT_GRADABLE = re.compile(r"NotGradable: (.+)")


def _config(settings: dict):
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=".").load_config()
    config.CourseDirectory.root = "."
    if settings.get("db_url"):
        config.CourseDirectory.db_url = settings["db_url"]
    if settings.get("course_id"):
        config.CourseDirectory.course_id = settings["course_id"]
    if settings.get("timeout"):
        config.Execute.timeout = settings["timeout"]
    config.GuardedExecute.sandbox = settings["sandbox"]
    if settings.get("notebook_timeout"):
        config.GuardedExecute.notebook_timeout = settings["notebook_timeout"]
    config.Autograde.log_level = "ERROR"
    return config


def _why(result: dict) -> str:
    text = f"{result.get('error') or ''}\n{result.get('log') or ''}"
    found = _NOT_GRADABLE.findall(text)
    if found:
        return found[-1].strip()
    lines = [line for line in text.splitlines() if line.strip()]
    return "nbgrader could not grade it: " + (lines[-1] if lines else "no reason given")


def _forget(db_url: str, assignment: str, student: str) -> None:
    """No grades of a submission that was not graded (not a zero: no row at all)."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url) as gb:
        try:
            gb.remove_submission(assignment, student)
        except MissingEntry:
            pass


def grade_one(api, settings: dict, student: str, notebook: Path) -> dict:
    assignment, db_url = settings["assignment"], api.coursedir.db_url
    handed_in = Path("submitted") / student / assignment
    for folder in (handed_in, Path("autograded") / student / assignment):
        shutil.rmtree(folder, ignore_errors=True)
    source = Path("solutions") / assignment / f"{NOTEBOOK}.ipynb"
    try:
        submission = read_submission(notebook, source)
    except NotGradable as exc:
        _forget(db_url, assignment, student)
        return {"status": "not graded", "reason": str(exc)}
    write(submission, handed_in / f"{NOTEBOOK}.ipynb")
    (handed_in / "timestamp.txt").write_text(settings["timestamp"])
    result = api.autograde(assignment, student, force=True)
    graded = Path("autograded") / student / assignment / f"{NOTEBOOK}.ipynb"
    if not result["success"] or not graded.is_file():
        # Not handed in either: a later `nbgrader autograde` does not try it again.
        _forget(db_url, assignment, student)
        shutil.rmtree(graded.parent, ignore_errors=True)
        shutil.rmtree(handed_in, ignore_errors=True)
        return {"status": "not graded", "reason": _why(result), "notes": []}
    api.generate_feedback(assignment, student, force=True)
    return {
        "status": "graded",
        "notes": submission.notes,
        "cells": read_scores(Path("."), assignment, db_url, student)[student],
        "diagnoses": diagnoses(graded),
    }


def main(argv: list[str] | None = None) -> int:
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    args = sys.argv[1:] if argv is None else argv
    settings = json.loads(Path(args[0]).read_text())
    config = _config(settings)
    api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
    for student, notebook in settings["students"]:
        started = time.perf_counter()
        try:
            row = grade_one(api, settings, student, Path(notebook))
        except Exception as exc:  # one student's failure never stops the others
            row = {"status": "not graded", "reason": f"{type(exc).__name__}: {exc}"}
        row.update(student=student, seconds=round(time.perf_counter() - started, 2))
        print(RESULT + json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
