"""An instructor grades a class: every submission in its own sandbox, several at once.

:func:`grade_class` finds the hand-ins in any layout an instructor meets
(:mod:`tformer_grading.submissions`: a folder per learner, nbgrader's ``submitted/``
or exchange inbound, an LMS download or zip) and never writes there: each notebook
is checked (:mod:`tformer_grading.preflight`) and copied, with the time it was handed
in, to ``<out>/submitted/<id>/<assignment>/``, which is nbgrader's submitted folder for
this run. It records the assignment in the gradebook (nbgrader's ``db_url``: SQLite
by default, PostgreSQL for graders sharing one), splits the learners between
``jobs`` workers (:mod:`tformer_grading.classworker`), shows their progress, and
writes to the output folder:

- ``grades.csv``: nbgrader's columns plus ``status`` and ``reason``: a submission
  that could not be graded says why, and is not a zero;
- ``cells.csv``: points per graded cell; ``feedback/<student>/``;
- ``pitfalls.csv`` and ``pitfalls.png``: how many learners each named mistake cost
  points (:mod:`tformer_grading.classreport`);
- ``results.json``: everything above, per student.

A learner is graded under a safe id made from their folder's name
(:func:`tformer_grading.learner_text.student_id`); the name itself, escaped, is in
the ``submitted_as`` column. Whatever goes wrong with one learner, at any step, is
that learner's "not graded" and its reason; the others are graded.

``shard=(k, n)`` grades the k-th of n slices of the class (for graders on several
machines sharing a gradebook).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from .course import (
    NOTEBOOK,
    GradeError,
    chapters,
    forget_submission,
    grading_env,
    nbgrader,
)
from .learner_text import printable, shown
from .preflight import NotGradable, read_submission, write
from .submissions import HandIn, find

UNSAFE_HINT = (
    "install it, or pass --unsafe-no-sandbox to grade without one (learner code "
    "then runs as you, and can read and change your files)"
)
SECRET = "submission_secret.txt"  # written by `nbgrader submit`, beside the notebook


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
        # Another grader may be adding the same rows at this moment.
        except Exception as exc:  # noqa: BLE001 - any failure is retried
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
            who = row.get("submitted_as") or row["student"]
            line = (
                f"[{bar}] {self.done}/{self.total}  {printable(who)}: {verdict} "
                f"({time.perf_counter() - self.started:.0f} s)"
            )
            tty = getattr(self.stream, "isatty", lambda: False)()
            end = "\r" if tty and self.done < self.total else "\n"
            print(
                line.ljust(100) if tty else line, end=end, file=self.stream, flush=True
            )


def _tell(on_row, row: dict) -> None:
    """Show a finished row; a progress display that fails never stops the grading."""
    try:
        on_row(row)
    except Exception:  # noqa: BLE001, S110 - a failing display never stops the grading
        pass


def _run_workers(
    course, settings: dict, queues: list, on_row, known: dict[str, dict]
) -> list[dict]:
    """Start one worker per non-empty queue, hand each finished row (with what
    ``known`` says of its student) to ``on_row``, and return the rows. A worker that
    dies costs only the student it was grading (reported with its last words): a
    new worker grades the rest of its queue."""
    from .classworker import RESULT

    rows: list[dict] = []

    def finish(row: dict) -> None:
        before = known.get(row["student"], {})
        notes = before.get("notes", []) + row.get("notes", [])
        row = {**before, **row, "notes": notes}
        rows.append(row)
        _tell(on_row, row)

    def work(queue: list[str], settings_file: Path) -> None:
        left = list(queue)
        while left:
            settings_file.write_text(json.dumps({**settings, "students": left}))
            log: list[str] = []
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tformer_grading.classworker",
                    str(settings_file),
                ],
                cwd=course,
                env=grading_env(course),
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            for line in proc.stdout:
                if line.startswith(RESULT):
                    row = json.loads(line[len(RESULT) :])
                    left.remove(row["student"])
                    finish(row)
                else:
                    log.append(line)
            proc.wait()
            if left:  # it died grading left[0], which it grades in order
                last_words = "".join(log)[-500:].strip() or "no output"
                finish(
                    {
                        "student": left.pop(0),
                        "status": "not graded",
                        "reason": f"the grading worker stopped (exit status "
                        f"{proc.returncode}) while grading it: {last_words}",
                    }
                )

    with tempfile.TemporaryDirectory(prefix="tformer-class-") as tmp:
        threads = [
            threading.Thread(target=work, args=(q, Path(tmp) / f"worker-{i}.json"))
            for i, q in enumerate(q for q in queues if q)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
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
    worker_memory: int | None = None,
) -> dict:
    """Grade every submission (of this shard) and write the tables to ``out``.

    Returns student id -> {"status", "reason", "notes", "submitted_as", "handed_in",
    "time_from", "score", "max_score", "cells", "diagnoses"}. Raises
    :class:`GradeError` before grading anyone when the assignment, the submissions or
    the sandbox are missing, or when it would write where the submissions are.
    ``worker_memory`` bounds each grading worker (bytes; default
    :data:`~tformer_grading.classworker.WORKER_MEMORY`).
    """
    from .classreport import write_reports
    from .sandbox import availability

    course, submissions, out = course.resolve(), submissions.resolve(), out.resolve()
    if not (course / "solutions" / assignment / f"{NOTEBOOK}.ipynb").is_file():
        raise GradeError(
            f"{course}/solutions/{assignment}/{NOTEBOOK}.ipynb does not exist; "
            f"assignments here: {', '.join(chapters(course)) or 'none'}"
        )
    if not submissions.exists():
        raise GradeError(
            f"{submissions} does not exist: expected a folder of "
            "submissions or a zip of them"
        )
    k, n = shard
    if not 1 <= k <= n:
        raise GradeError(f"--shard {k}/{n}: expected k/n with 1 <= k <= n")
    if sandbox and (problem := availability()):
        raise GradeError(f"no sandbox: {problem}; {UNSAFE_HINT}")
    db_url = db_url or course_db_url(course)
    _never_into(submissions, _written(course, out, db_url))
    with tempfile.TemporaryDirectory(prefix="tformer-unzip-") as scratch:
        found = find(submissions, assignment, Path(scratch))
        mine = found[k - 1 :: n]
        if not mine:
            raise GradeError(
                f"no {NOTEBOOK}.ipynb under {submissions}/<student>/[{assignment}/]"
                + (f" in shard {k}/{n}" if n > 1 else "")
            )
        _record_assignment(course, assignment, db_url)
        staged = {
            h.id: _stage(h, course, assignment, out / "submitted", db_url) for h in mine
        }
    ready = [sid for sid, row in staged.items() if row["status"] == "ready"]
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(ready) or 1))
    queues: list[list] = [ready[i::jobs] for i in range(jobs)]
    settings = {
        "assignment": assignment,
        "db_url": db_url,
        "timeout": timeout,
        "notebook_timeout": notebook_timeout,
        "sandbox": "required" if sandbox else "off",
        "course_id": course_id_for(course, db_url),
        "submitted": str(out / "submitted"),
        "worker_memory": worker_memory,
    }
    progress = on_row or Progress(len(mine))
    rows = [row for row in staged.values() if row["status"] != "ready"]
    for row in rows:
        _tell(progress, row)
    rows += _run_workers(course, settings, queues, progress, staged)
    table = {row["student"]: _table_row(row) for row in rows}
    table = dict(sorted(table.items()))
    out.mkdir(parents=True, exist_ok=True)
    for student, row in table.items():
        try:
            _copy_feedback(course, assignment, student, row, out)
        except Exception as exc:  # noqa: BLE001 - one learner's page, never the others'
            row["notes"].append(f"feedback page not copied: {_failure(exc)}")
    for problem in write_reports(out, assignment, table, db_url):
        print(f"note: {printable(problem)}", file=sys.stderr)
    return table


def _written(course: Path, out: Path, db_url: str) -> list[Path]:
    """Every place the command writes (besides temporary folders of its own)."""
    places = [out, course / "autograded", course / "feedback"]
    prefix = "sqlite:///"
    if db_url.startswith(prefix):
        places.append(Path(db_url[len(prefix) :]).resolve())
    return places


def _never_into(submissions: Path, places: list[Path]) -> None:
    for place in places:
        if place.is_relative_to(submissions) or submissions.is_relative_to(place):
            raise GradeError(
                f"{place} is inside the submissions ({submissions}), or they are "
                "inside it: the command writes there, and never writes where the "
                "submissions are. Choose another --out, or move the submissions."
            )


def _stage(
    hand_in: HandIn, course: Path, assignment: str, staging: Path, db_url: str
) -> dict:
    """Check ``hand_in`` and copy it, with its time, where the workers grade it.
    The row says "ready", or "not graded" and why (whatever went wrong)."""
    row = {
        "student": hand_in.id,
        "submitted_as": shown(hand_in.name),
        "handed_in": hand_in.handed_in.isoformat(" ") if hand_in.handed_in else "",
        "time_from": hand_in.time_from,
        "notes": list(hand_in.notes),
        "status": "ready",
    }
    folder = staging / hand_in.id / assignment
    try:
        shutil.rmtree(staging / hand_in.id, ignore_errors=True)
        if hand_in.problem:
            raise NotGradable(hand_in.problem)
        source = course / "solutions" / assignment / f"{NOTEBOOK}.ipynb"
        submission = read_submission(hand_in.notebook, source)
        write(submission, folder / f"{NOTEBOOK}.ipynb")
        if hand_in.handed_in:
            stamp = hand_in.handed_in.strftime("%Y-%m-%d %H:%M:%S.%f UTC")
            (folder / "timestamp.txt").write_text(stamp)
        _keep_secret(hand_in.notebook.parent, folder)
        row["notes"] += submission.notes
        return row
    except Exception as exc:  # noqa: BLE001 - one learner's failure, never the others'
        reason = str(exc) if isinstance(exc, NotGradable) else _failure(exc)
        row.update(status="not graded", reason=reason)
    try:
        shutil.rmtree(staging / hand_in.id, ignore_errors=True)
        forget_submission(db_url, assignment, hand_in.id)
    except Exception as exc:  # noqa: BLE001 - cleanup that fails is only a note
        row["notes"].append(f"an earlier grade may remain: {_failure(exc)}")
    return row


def _keep_secret(beside: Path, folder: Path) -> None:
    """Copy the ``submission_secret.txt`` that ``nbgrader submit`` left beside the
    notebook (kept by ``collect``), if it is a plain file of hex digits: ``nbgrader
    release_feedback`` names the learner's page by it, and fails without it."""
    secret = beside / SECRET
    try:
        if not stat.S_ISREG(os.lstat(secret).st_mode):
            return
        with open(secret, "rb") as f:
            text = f.read(257)
    except OSError:
        return
    if re.fullmatch(rb"[0-9a-f]{1,256}", text):
        (folder / SECRET).write_bytes(text)


def _failure(exc: Exception) -> str:
    return f"the grader failed on this submission ({type(exc).__name__}: {exc})"


def _table_row(row: dict) -> dict:
    cells = row.get("cells", {})
    return {
        "status": row["status"],
        "reason": row.get("reason", ""),
        "notes": row.get("notes", []),
        "submitted_as": row.get("submitted_as", row["student"]),
        "handed_in": row.get("handed_in", ""),
        "time_from": row.get("time_from", "unknown"),
        "score": sum(s for s, _ in cells.values()),
        "max_score": sum(m for _, m in cells.values()),
        "cells": {g: s for g, (s, _) in cells.items()},
        "max_cells": {g: m for g, (_, m) in cells.items()},
        "diagnoses": row.get("diagnoses", {}),
        "seconds": row.get("seconds", 0.0),
        # the grading worker's peak memory when it had graded this learner
        "grader_mb": row.get("grader_mb", 0),
    }


def _copy_feedback(course: Path, assignment: str, student: str, row, out: Path):
    feedback = course / "feedback" / student / assignment
    target = out / "feedback" / student
    shutil.rmtree(target, ignore_errors=True)
    if row["status"] == "graded" and feedback.is_dir():
        shutil.copytree(feedback, target)


__all__ = ["GradeError", "NotGradable", "grade_class"]
