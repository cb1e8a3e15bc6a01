"""An instructor grades a class: every submission in its own sandbox, several at once.

``collected/<student>/exercise.ipynb`` or
``collected/<student>/<assignment>/exercise.ipynb``.
:func:`grade_class` records the assignment in the gradebook (nbgrader's
``db_url``: SQLite by default, PostgreSQL for graders sharing one), splits the
students between ``jobs`` workers (:mod:`tformer_grading.classworker`), shows
their progress, and writes to the output folder:

- ``grades.csv``: nbgrader's columns plus ``status`` and ``reason``: a submission
  that could not be graded says why, and is not a zero;
- ``cells.csv``: points per graded cell; ``feedback/<student>/``;
- ``pitfalls.csv`` and ``pitfalls.png``: how many learners each named mistake cost
  points (:mod:`tformer_grading.classreport`);
- ``results.json``: everything above, per student.

``shard=(k, n)`` grades the k-th of n slices of the class (for graders on several
machines sharing a gradebook).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from .course import NOTEBOOK, GradeError, chapters, grading_env, nbgrader
from .preflight import NotGradable

UNSAFE_HINT = (
    "install it, or pass --unsafe-no-sandbox to grade without one (learner code "
    "then runs as you, and can read and change your files)"
)


def collect(submissions: Path, assignment: str) -> dict[str, Path | str]:
    """student -> their notebook, or why there is none. Nothing here follows a link."""
    found: dict[str, Path | str] = {}
    with os.scandir(submissions) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.name.startswith("."):
                continue
            if not entry.is_dir(follow_symlinks=False):
                continue
            nested = Path(entry.path) / assignment
            folder = nested if nested.is_dir() and not nested.is_symlink() else None
            folder = folder or Path(entry.path)
            notebook = folder / f"{NOTEBOOK}.ipynb"
            if notebook.is_symlink() or notebook.exists():
                found[entry.name] = notebook
            else:
                found[entry.name] = f"no {NOTEBOOK}.ipynb in the submission"
    return found


def _record_assignment(course: Path, assignment: str, db_url: str) -> None:
    """Record the assignment's cells and points in the gradebook, once (two shards may
    try at the same moment: the loser finds it recorded)."""
    from nbgrader.api import Gradebook, MissingEntry

    def known() -> bool:
        with Gradebook(db_url) as gb:
            try:
                return bool(gb.find_assignment(assignment).notebooks)
            except MissingEntry:
                return False

    cid = course_id_for(course, db_url)
    problem = ""
    for attempt in range(8):
        try:
            if known():
                return
            proc = nbgrader(
                course,
                course,
                "generate_assignment",
                assignment,
                "--force",
                "--log-level=ERROR",
                f"--CourseDirectory.db_url={db_url}",
                *([f"--CourseDirectory.course_id={cid}"] if cid else []),
                check=False,
            )
            if proc.returncode == 0 and known():
                return
            problem = proc.stdout[-3000:]
        except Exception as exc:  # another grader adding the same rows at this moment
            problem = f"{type(exc).__name__}: {exc}"
        time.sleep(1 + attempt)
    raise GradeError(f"could not record {assignment} in {db_url}:\n{problem}")


def _config(course: Path):
    from traitlets.config.loader import PyFileConfigLoader

    return PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()


def course_id_for(course: Path, db_url: str) -> str:
    """The course id to grade under, when the configured one will not do ("" otherwise).

    A database server enforces the gradebook's course key, and nbgrader records an
    assignment under ``CourseDirectory.course_id``, empty unless configured (SQLite does
    not check): there an unset course id becomes nbgrader's own default course."""
    if db_url.startswith("sqlite") or _config(course).CourseDirectory.get("course_id"):
        return ""
    return "default_course"


def course_db_url(course: Path) -> str:
    """The gradebook nbgrader_config.py names (relative SQLite paths made absolute)."""
    url = _config(course).CourseDirectory.get("db_url", "sqlite:///gradebook.db")
    prefix = "sqlite:///"
    if url.startswith(prefix) and not url[len(prefix) :].startswith("/"):
        url = prefix + str(course / url[len(prefix) :])
    return url


class Progress:
    """A one-line progress bar (redrawn on a terminal, a line per student otherwise)."""

    def __init__(self, total: int, stream=None):
        self.total, self.done, self.stream = total, 0, stream or sys.stderr
        self.started = time.perf_counter()
        self.lock = threading.Lock()

    def __call__(self, row: dict) -> None:
        with self.lock:
            self.done += 1
            width = 30
            filled = width * self.done // max(self.total, 1)
            bar = "#" * filled + "." * (width - filled)
            verdict = (
                f"{sum(s for s, _ in row['cells'].values()):g}/"
                f"{sum(m for _, m in row['cells'].values()):g}"
                if row["status"] == "graded"
                else "NOT GRADED"
            )
            line = (
                f"[{bar}] {self.done}/{self.total}  {row['student']}: {verdict} "
                f"({time.perf_counter() - self.started:.0f} s)"
            )
            tty = getattr(self.stream, "isatty", lambda: False)()
            end = "\r" if tty and self.done < self.total else "\n"
            print(
                line.ljust(100) if tty else line, end=end, file=self.stream, flush=True
            )


def _run_workers(course, settings: dict, queues: list, on_row) -> list[dict]:
    """Start one worker per non-empty queue, hand each finished row to ``on_row``, and
    return the rows (a student whose worker died is reported with its last words)."""
    from .classworker import RESULT

    queues = [q for q in queues if q]
    rows: list[dict] = []
    logs: list[list[str]] = [[] for _ in queues]

    def read(proc, log):
        for line in proc.stdout:
            if line.startswith(RESULT):
                row = json.loads(line[len(RESULT) :])
                rows.append(row)
                on_row(row)
            else:
                log.append(line)
        proc.wait()

    with tempfile.TemporaryDirectory(prefix="tformer-class-") as tmp:
        threads = []
        for i, (queue, log) in enumerate(zip(queues, logs)):
            path = Path(tmp) / f"worker-{i}.json"
            path.write_text(json.dumps({**settings, "students": queue}))
            proc = subprocess.Popen(
                [sys.executable, "-m", "tformer_grading.classworker", str(path)],
                cwd=course,
                env=grading_env(course),
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            threads.append(threading.Thread(target=read, args=(proc, log)))
            threads[-1].start()
        for thread in threads:
            thread.join()
    done = {r["student"] for r in rows}
    for queue, log in zip(queues, logs):
        for student, _ in queue:
            if student not in done:
                row = {
                    "student": student,
                    "status": "not graded",
                    "reason": "the grading worker stopped: " + "".join(log)[-500:],
                }
                rows.append(row)
                on_row(row)
    return rows


def grade_class(
    course: Path,
    assignment: str,
    submissions: Path,
    out: Path,
    *,
    timeout: int | None = None,
    notebook_timeout: int | None = None,
    jobs: int | None = None,
    shard: tuple[int, int] = (1, 1),
    sandbox: bool = True,
    db_url: str | None = None,
    on_row: Callable[[dict], None] | None = None,
) -> dict:
    """Grade every submission (of this shard) and write the tables to ``out``.

    Returns student -> {"status", "reason", "notes", "score", "max_score", "cells",
    "diagnoses"}. Raises :class:`GradeError` before grading anyone when the
    assignment, the submissions or the sandbox are missing.
    """
    from .classreport import write_reports
    from .sandbox import availability

    course, submissions, out = course.resolve(), submissions.resolve(), out.resolve()
    if not (course / "solutions" / assignment / f"{NOTEBOOK}.ipynb").is_file():
        raise GradeError(
            f"{course}/solutions/{assignment}/{NOTEBOOK}.ipynb does not exist; "
            f"assignments here: {', '.join(chapters(course)) or 'none'}"
        )
    if not submissions.is_dir():
        raise GradeError(f"{submissions} is not a folder of submissions")
    k, n = shard
    if not 1 <= k <= n:
        raise GradeError(f"--shard {k}/{n}: expected k/n with 1 <= k <= n")
    if sandbox and (problem := availability()):
        raise GradeError(f"no sandbox: {problem}; {UNSAFE_HINT}")
    found = collect(submissions, assignment)
    mine = dict(list(found.items())[k - 1 :: n])
    if not mine:
        raise GradeError(
            f"no {NOTEBOOK}.ipynb under {submissions}/<student>/[{assignment}/]"
            + (f" in shard {k}/{n}" if n > 1 else "")
        )
    db_url = db_url or course_db_url(course)
    _record_assignment(course, assignment, db_url)
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(mine)))
    queues: list[list] = [[] for _ in range(jobs)]
    missing = []
    for i, (student, notebook) in enumerate(mine.items()):
        if isinstance(notebook, str):
            missing.append(
                {"student": student, "status": "not graded", "reason": notebook}
            )
        else:
            queues[i % jobs].append((student, str(notebook)))
    settings = {
        "assignment": assignment,
        "db_url": db_url,
        "timeout": timeout,
        "notebook_timeout": notebook_timeout,
        "sandbox": "required" if sandbox else "off",
        "course_id": course_id_for(course, db_url),
        "timestamp": time.strftime("%Y-%m-%d %H:%M:%S.000000 UTC", time.gmtime()),
    }
    progress = on_row or Progress(len(mine))
    for row in missing:
        progress(row)
    rows = missing + _run_workers(course, settings, queues, progress)
    table = {}
    for row in sorted(rows, key=lambda r: r["student"]):
        cells = row.get("cells", {})
        table[row["student"]] = {
            "status": row["status"],
            "reason": row.get("reason", ""),
            "notes": row.get("notes", []),
            "score": sum(s for s, _ in cells.values()),
            "max_score": sum(m for _, m in cells.values()),
            "cells": {g: s for g, (s, _) in cells.items()},
            "max_cells": {g: m for g, (_, m) in cells.items()},
            "diagnoses": row.get("diagnoses", {}),
            "seconds": row.get("seconds", 0.0),
        }
    out.mkdir(parents=True, exist_ok=True)
    for student, row in table.items():
        feedback = course / "feedback" / student / assignment
        target = out / "feedback" / student
        shutil.rmtree(target, ignore_errors=True)
        if row["status"] == "graded" and feedback.is_dir():
            shutil.copytree(feedback, target)
    write_reports(out, assignment, table, db_url)
    return table


__all__ = ["GradeError", "NotGradable", "collect", "grade_class"]
