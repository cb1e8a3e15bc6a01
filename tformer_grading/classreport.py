"""The tables and the plot the class command writes next to each other.

``grades.csv`` has nbgrader's export columns (read from the gradebook) plus
``status``, ``reason``, the learner's folder name as handed in (``submitted_as``)
and where the hand-in time came from (``time_from``); ``pitfalls.csv`` and
``pitfalls.png`` count, per test cell and named mistake, the learners whose
submission lost points to it, read from the diagnoses the checks printed.

Diagnoses quote learners' own exception messages, and names are the learners'
folders: every text here is written as data (:mod:`tformer_grading.learner_text`),
and a report that cannot be written is a note, never a crash that loses the others.
"""

from __future__ import annotations

import csv
import json
import re
from collections import Counter
from pathlib import Path

from .learner_text import csv_cell, plain_label

GRADE_COLUMNS = [
    "assignment",
    "duedate",
    "timestamp",
    "student_id",
    "last_name",
    "first_name",
    "email",
    "raw_score",
    "late_submission_penalty",
    "score",
    "max_score",
    "status",
    "reason",
    "submitted_as",
    "time_from",
]
_PITFALL = re.compile(r"the pitfall '([^']+)'")
# A check that finds several listed mistakes names each: "this looks like 2 mistakes
# at once: 'a': what was measured; 'b': what was measured. ..."
_SEVERAL = re.compile(r"this looks like (\d+) mistakes at once: (.*)", re.DOTALL)
_EACH = re.compile(r"(?:^|; )'([^']+)': ")
NOT_NAMED = "a mistake the checks did not name"
NOT_ANSWERED = "not answered"
INTEGRITY = "checks tampered with"
ERRORED = "the learner's code raised an error"


def mistakes(diagnosis: str) -> list[str]:
    """Every named mistake behind one cell's lost points (or the kind of failure).

    >>> mistakes("CheckFailure: f: this looks like the pitfall 'p'. You ...")
    ['p']
    >>> mistakes("CheckFailure: M: this looks like 2 mistakes at once: 'a': x; 'b': y.")
    ['a', 'b']
    """
    several = _SEVERAL.search(diagnosis)
    if several:
        names = _EACH.findall(several.group(2))
        # The count the check printed is the proof the names were read whole.
        return names if len(names) == int(several.group(1)) else [NOT_NAMED]
    named = _PITFALL.search(diagnosis)
    if named:
        return [named.group(1)]
    if "Not answered yet" in diagnosis or diagnosis.startswith("NotImplementedError"):
        return [NOT_ANSWERED]
    if "GradingIntegrityError" in diagnosis or "grading integrity" in diagnosis:
        return [INTEGRITY]
    if diagnosis.startswith("CheckFailure"):
        return [NOT_NAMED]
    return [ERRORED]


def pitfall_counts(table: dict) -> Counter:
    """(test cell, mistake) -> how many graded learners lost the cell's points to it.

    A learner whose cell shows two mistakes at once is counted under each."""
    counts: Counter = Counter()
    for row in table.values():
        if row["status"] != "graded":
            continue
        for grade_id, why in row["diagnoses"].items():
            if row["cells"].get(grade_id, 0) < _max(row, grade_id):
                for name in dict.fromkeys(mistakes(why)):
                    counts[grade_id, name] += 1
    return counts


def _max(row: dict, grade_id: str) -> float:
    return row.get("max_cells", {}).get(grade_id, float("inf"))


def write_grades(path: Path, assignment: str, table: dict, db_url: str) -> None:
    from nbgrader.api import Gradebook

    with Gradebook(db_url) as gb, open(path, "w", newline="") as f:
        writer = _writer(f)
        writer.writerow(GRADE_COLUMNS)
        duedate = gb.find_assignment(assignment).duedate
        for student, row in sorted(table.items()):
            line = dict.fromkeys(GRADE_COLUMNS, "")
            line.update(
                assignment=assignment, duedate=duedate or "", student_id=student
            )
            line.update(status=row["status"], reason=row["reason"])
            line.update(submitted_as=row.get("submitted_as", student))
            line.update(time_from=row.get("time_from", ""))
            if row["status"] == "graded":
                try:
                    line.update(_gradebook_columns(gb, assignment, student))
                except Exception as exc:  # noqa: BLE001 - one learner's row only
                    line.update(status="not graded", reason=_unreadable(exc))
            writer.writerow([line[c] for c in GRADE_COLUMNS])


def _gradebook_columns(gb, assignment: str, student: str) -> dict:
    sub = gb.find_submission(assignment, student)
    penalty = sub.late_submission_penalty or 0.0
    return {
        "timestamp": sub.timestamp or "",
        "last_name": sub.student.last_name or "",
        "first_name": sub.student.first_name or "",
        "email": sub.student.email or "",
        "raw_score": sub.score,
        "late_submission_penalty": penalty,
        "score": max(0.0, sub.score - penalty),
        "max_score": sub.max_score,
    }


def _unreadable(exc: Exception) -> str:
    from nbgrader.api import MissingEntry

    if isinstance(exc, MissingEntry):
        return "missing from the gradebook"
    return f"its gradebook row could not be read ({type(exc).__name__}: {exc})"


class _writer:
    """A csv writer whose every text cell is data to a spreadsheet (no formulas)."""

    def __init__(self, f):
        self._csv = csv.writer(f)

    def writerow(self, values) -> None:
        self._csv.writerow([csv_cell(v) for v in values])


def write_cells(path: Path, table: dict) -> None:
    ids = sorted({g for row in table.values() for g in row["cells"]})
    with open(path, "w", newline="") as f:
        writer = _writer(f)
        writer.writerow(["student", *ids, "total", "max", "status"])
        for student, row in sorted(table.items()):
            graded = row["status"] == "graded"
            writer.writerow(
                [
                    student,
                    *(row["cells"].get(g, "") for g in ids),
                    row["score"] if graded else "",
                    row["max_score"] if graded else "",
                    row["status"],
                ]
            )


def write_pitfalls(out: Path, counts: Counter, learners: int) -> None:
    with open(out / "pitfalls.csv", "w", newline="") as f:
        writer = _writer(f)
        writer.writerow(["test_cell", "mistake", "learners", "of_graded"])
        for (cell, name), count in sorted(counts.items(), key=lambda kv: -kv[1]):
            writer.writerow([cell, name, count, learners])
    _plot(out / "pitfalls.png", counts, learners)


def _plot(path: Path, counts: Counter, learners: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tformer_ref.plotting import COLUMN_INCHES, use_book_style

    use_book_style()
    items = sorted(counts.items(), key=lambda kv: kv[1])[-20:]
    labels = [_label(name, cell) for (cell, name), _ in items]
    lines = sum(label.count("\n") + 1 for label in labels)
    fig, ax = plt.subplots(figsize=(COLUMN_INCHES, 1.4 + 0.2 * max(lines, 2)))
    ax.barh(range(len(items)), [c for _, c in items], color="#4477aa")
    # A named mistake is read from a diagnosis, which may quote a learner's own
    # message: a label is plain text ($ is a dollar sign, not the start of TeX).
    ax.set_yticks(range(len(items)), labels, parse_math=False, fontsize=9)
    ax.set_xlabel(f"learners who lost the cell's points (of {learners} graded)")
    ax.set_xlim(0, max(learners, 1))
    ax.xaxis.get_major_locator().set_params(integer=True)
    if not items:
        ax.text(
            0.5, 0.5, "no test cell lost points", ha="center", transform=ax.transAxes
        )
    fig.tight_layout()
    fig.savefig(path, bbox_inches="tight")  # long labels stay whole
    plt.close(fig)


def _label(name: str, cell: str) -> str:
    """The mistake, wrapped, over the test cell: long labels would leave the bars a
    quarter of the figure (reader review 2026-12-05 §6)."""
    import textwrap

    wrapped = textwrap.wrap(plain_label(name), 28, break_long_words=True) or [""]
    return "\n".join([*wrapped[:3], f"({cell})"])


def write_reports(out: Path, assignment: str, table: dict, db_url: str) -> list[str]:
    """Write every table and the plot; returns what could not be written, and why
    (each one is tried whatever happened to the others)."""
    graded = sum(row["status"] == "graded" for row in table.values())
    steps = {
        "grades.csv": lambda: write_grades(
            out / "grades.csv", assignment, table, db_url
        ),
        "cells.csv": lambda: write_cells(out / "cells.csv", table),
        "pitfalls.csv and pitfalls.png": lambda: write_pitfalls(
            out, pitfall_counts(table), graded
        ),
        "results.json": lambda: (out / "results.json").write_text(
            json.dumps(table, indent=1, sort_keys=True)
        ),
    }
    problems = []
    for name, step in steps.items():
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - one report failing spares the rest
            problems.append(f"{name} not written: {type(exc).__name__}: {exc}")
    return problems
