"""One grading worker of the class command: grades its share of the students.

Run by :mod:`tformer_grading.classgrade` as ``python -m tformer_grading.classworker
SETTINGS.json`` in the course folder, once per job. nbgrader runs here, in the
grader's trust; only each notebook's kernel runs in its sandbox. The submissions it
grades are the class command's own checked copies, in ``settings["submitted"]``
(nbgrader's submitted folder for this run, outside the course and the instructor's
submissions); the autograded notebooks and feedback go to the course's folders, as
``nbgrader autograde`` would put them. For each student it prints one JSON line
(:data:`RESULT` + the result); a submission that cannot be graded is reported with
the reason, and the worker goes on with the next one.

The worker bounds its own memory (:data:`WORKER_MEMORY`): a notebook that got the
grader past it costs that notebook, and at worst this worker, whose remaining
students the class command hands to a new one.
"""

from __future__ import annotations

import json
import re
import resource
import shutil
import sys
import time
from pathlib import Path

from .course import NOTEBOOK, diagnoses, forget_submission, read_scores

RESULT = "tformer-result\t"
# The heap a worker may use (RLIMIT_DATA). Grading holds at most one notebook and one
# kernel message of 32 MB (guard/message_bound.py); a worker peaks near 0.5 GB.
WORKER_MEMORY = 3 << 30
_NOT_GRADABLE = re.compile(r"NotGradable: (.+)")
_RAISED = re.compile(r"^\s*((?:\w+\.)*\w*(?:Error|Exception)\b.*)$", re.MULTILINE)


def _config(settings: dict):
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=".").load_config()
    config.CourseDirectory.root = "."
    config.CourseDirectory.submitted_directory = settings["submitted"]
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


def _why(result: dict, could_not: str = "grade it") -> str:
    """Why an nbgrader API call (its result dict) failed, in one line."""
    text = f"{result.get('error') or ''}\n{result.get('log') or ''}"
    found = _NOT_GRADABLE.findall(text)
    if found:
        return found[-1].strip()
    # The traceback's last exception says why; nbgrader's own last line never does.
    raised = [r for r in _RAISED.findall(text) if "NbGraderException" not in r]
    lines = raised or [line for line in text.splitlines() if line.strip()]
    return f"nbgrader could not {could_not}: " + (
        lines[-1].strip() if lines else "no reason given"
    )


def grade_one(api, settings: dict, student: str) -> dict:
    """Autograde one staged submission and write its feedback page."""
    assignment, db_url = settings["assignment"], api.coursedir.db_url
    graded = Path("autograded") / student / assignment / f"{NOTEBOOK}.ipynb"
    for folder in (graded.parent, Path("feedback") / student / assignment):
        shutil.rmtree(folder, ignore_errors=True)
    result = api.autograde(assignment, student, force=True)
    if not result["success"] or not graded.is_file():
        # Nor kept as handed in: a later `nbgrader autograde` does not try it again.
        forget_submission(db_url, assignment, student)
        shutil.rmtree(graded.parent, ignore_errors=True)
        shutil.rmtree(Path(settings["submitted"]) / student, ignore_errors=True)
        return {"status": "not graded", "reason": _why(result)}
    row = {
        "status": "graded",
        "cells": read_scores(Path("."), assignment, db_url, student)[student],
        "diagnoses": diagnoses(graded),
    }
    # The grade stands without its page; the instructor is told, and can rerun
    # `nbgrader generate_feedback` once the cause is mended.
    feedback = api.generate_feedback(assignment, student, force=True)
    page = Path("feedback") / student / assignment / f"{NOTEBOOK}.html"
    if not feedback["success"] or not page.is_file():
        row["notes"] = ["no feedback page: " + _why(feedback, "write its page")]
    return row


def bound_memory(limit: int) -> None:
    """This process's heap limited to ``limit`` bytes: the soft limit only, so the
    sandbox can still give each kernel its own, larger one below the hard limit."""
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    soft = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))


def peak_mb() -> int:
    """This process's peak resident memory so far, in MB (Linux counts kB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10


def main(argv: list[str] | None = None) -> int:
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    args = sys.argv[1:] if argv is None else argv
    settings = json.loads(Path(args[0]).read_text())
    bound_memory(settings.get("worker_memory") or WORKER_MEMORY)
    config = _config(settings)
    api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
    for student in settings["students"]:
        started = time.perf_counter()
        try:
            row = grade_one(api, settings, student)
        except Exception as exc:  # noqa: BLE001 - one student's failure only
            row = {"status": "not graded", "reason": f"{type(exc).__name__}: {exc}"}
        row.update(
            student=student,
            seconds=round(time.perf_counter() - started, 2),
            grader_mb=peak_mb(),
        )
        print(RESULT + json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
