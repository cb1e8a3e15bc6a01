"""How the checks do on the measured bank (tests/exercises/**/bank_*.py): per exercise,
how many wrong answers were rejected, how many of those named the actual mistake (or the
measured quantity that is off), how many got only the generic "where, not why" message,
how many a wrong name, and how many right answers were accepted; and of the failures
that forward a size error of the learner's code ("size err"), how many say what its
numbers are in the case's sizes ("read").

Usage: python tools/grading_report.py [--json] [chapter ...]  (make grading-report)
(a chapter is a folder of tests/exercises: ch01, ..., bughunt_attention, own_model)
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "bank"))

from bank import chapters, entries, grade, graders_of  # noqa: E402

from tformer_grading.checks.measure.torch_errors import (  # noqa: E402
    explain,
    holds_size_error,
)

COLUMNS = (
    "wrong",
    "unlisted",
    "rejected",
    "named",
    "generic",
    "misnamed",
    "right",
    "accepted",
    "crashed",
    "size err",
    "read",
    "seconds",
)


def measure(chapter: str) -> dict[str, dict[str, float]]:
    """Per exercise of ``chapter`` (and 'all'), the counts in COLUMNS."""
    graders = graders_of(chapter)
    rows: dict[str, Counter] = {}
    for entry in entries(chapter):
        start = time.perf_counter()
        verdict = grade(entry, graders)
        kind = verdict.kind
        row = rows.setdefault(entry.exercise, Counter())
        row["seconds"] += time.perf_counter() - start
        if entry.expect is None:
            row["right"] += 1
            row["accepted"] += kind == "accepted"
            row["crashed"] += kind == "crashed"
        else:
            row["wrong"] += 1
            row["unlisted"] += not entry.listed
            row["rejected"] += kind in ("named", "generic", "misnamed")
            row[kind] += kind != "accepted"
            if holds_size_error(verdict.message):
                row["size err"] += 1
                row["read"] += explain(verdict.message) != ""
    total = sum(rows.values(), Counter())
    rows = {name: rows[name] for name in sorted(rows, key=_course_order(chapter))}
    rows["all"] = total
    return {name: {c: row[c] for c in COLUMNS} for name, row in rows.items()}


def _course_order(chapter: str):
    """A sort key: a chapter's exercises in the order of its check package's MODULES
    (the book's), not of their bank files' names."""
    try:
        order = importlib.import_module(f"tformer_grading.checks.{chapter}").MODULES
    except (ImportError, AttributeError):  # a one-exercise chapter
        order = ()
    return lambda name: order.index(name) if name in order else len(order)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapters", nargs="*")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    table = {chapter: measure(chapter) for chapter in args.chapters or chapters()}
    if args.json:
        print(json.dumps(table, indent=1))
        return 0
    header = "".join(f"{c:>9}" for c in COLUMNS)
    print(f"{'chapter':<19}{'exercise':<22}{header}{'named %':>9}")
    rows = [
        (chapter, name, row)
        for chapter, exercises in table.items()
        for name, row in exercises.items()
        if name != "all"
    ]
    total = {c: sum(row[c] for *_, row in rows) for c in COLUMNS}
    for chapter, name, row in [*rows, ("total", "", total)]:
        share = 100 * row["named"] / row["wrong"] if row["wrong"] else 0.0
        cells = "".join(
            f"{row[c]:>9.1f}" if c == "seconds" else f"{int(row[c]):>9}"
            for c in COLUMNS
        )
        print(f"{chapter:<19}{name:<22}{cells}{share:>8.0f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
