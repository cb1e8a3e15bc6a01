"""The tables and the plot the class command writes next to each other.

``grades.csv`` has nbgrader's export columns (read from the gradebook) plus
``status`` and ``reason``; ``pitfalls.csv`` and ``pitfalls.png`` count, per
test cell and named mistake, the learners whose submission lost points to it,
read from the diagnoses the checks printed.
"""

from __future__ import annotations

import csv
import json
import re
from collections import Counter
from pathlib import Path

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
]
_PITFALL = re.compile(r"the pitfall '([^']+)'")
NOT_NAMED = "a mistake the checks did not name"
NOT_ANSWERED = "not answered"
INTEGRITY = "checks tampered with"
ERRORED = "the learner's code raised an error"


def mistake(diagnosis: str) -> str:
    """The named mistake behind one cell's lost points (or the kind of failure)."""
    named = _PITFALL.search(diagnosis)
    if named:
        return named.group(1)
    if "Not answered yet" in diagnosis or diagnosis.startswith("NotImplementedError"):
        return NOT_ANSWERED
    if "GradingIntegrityError" in diagnosis or "grading integrity" in diagnosis:
        return INTEGRITY
    if diagnosis.startswith("CheckFailure"):
        return NOT_NAMED
    return ERRORED


def pitfall_counts(table: dict) -> Counter:
    """(test cell, mistake) -> how many graded learners lost the cell's points to it."""
    counts: Counter = Counter()
    for row in table.values():
        if row["status"] != "graded":
            continue
        for grade_id, why in row["diagnoses"].items():
            if row["cells"].get(grade_id, 0) < _max(row, grade_id):
                counts[grade_id, mistake(why)] += 1
    return counts


def _max(row: dict, grade_id: str) -> float:
    return row.get("max_cells", {}).get(grade_id, float("inf"))


def write_grades(path: Path, assignment: str, table: dict, db_url: str) -> None:
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url) as gb, open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, GRADE_COLUMNS)
        writer.writeheader()
        duedate = gb.find_assignment(assignment).duedate
        for student, row in sorted(table.items()):
            line = dict.fromkeys(GRADE_COLUMNS, "")
            line.update(
                assignment=assignment, duedate=duedate or "", student_id=student
            )
            line.update(status=row["status"], reason=row["reason"])
            if row["status"] == "graded":
                try:
                    sub = gb.find_submission(assignment, student)
                except MissingEntry:
                    line.update(
                        status="not graded", reason="missing from the gradebook"
                    )
                else:
                    penalty = sub.late_submission_penalty or 0.0
                    line.update(
                        timestamp=sub.timestamp,
                        last_name=sub.student.last_name or "",
                        first_name=sub.student.first_name or "",
                        email=sub.student.email or "",
                        raw_score=sub.score,
                        late_submission_penalty=penalty,
                        score=max(0.0, sub.score - penalty),
                        max_score=sub.max_score,
                    )
            writer.writerow(line)


def write_cells(path: Path, table: dict) -> None:
    ids = sorted({g for row in table.values() for g in row["cells"]})
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
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
        writer = csv.writer(f)
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
    fig, ax = plt.subplots(figsize=(COLUMN_INCHES, 1.2 + 0.35 * max(len(items), 1)))
    labels = [f"{name}  ({cell})" for (cell, name), _ in items]
    ax.barh(range(len(items)), [c for _, c in items], color="#4477aa")
    ax.set_yticks(range(len(items)), labels)
    ax.set_xlabel(f"learners who lost the cell's points (of {learners} graded)")
    ax.set_xlim(0, max(learners, 1))
    if not items:
        ax.text(
            0.5, 0.5, "no test cell lost points", ha="center", transform=ax.transAxes
        )
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_reports(out: Path, assignment: str, table: dict, db_url: str) -> None:
    write_grades(out / "grades.csv", assignment, table, db_url)
    write_cells(out / "cells.csv", table)
    graded = sum(row["status"] == "graded" for row in table.values())
    write_pitfalls(out, pitfall_counts(table), graded)
    (out / "results.json").write_text(json.dumps(table, indent=1, sort_keys=True))
