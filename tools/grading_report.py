"""How the checks do on the measured bank (tests/bank/bank_chNN.py): per chapter and
exercise, how many wrong answers were rejected, how many of those named the actual
mistake (or the measured quantity that is off), how many got only the generic "where,
not why" message, how many a wrong name, and how many right answers were accepted; and
of the failures that forward a size error of the learner's code ("size err"), how many
say what its numbers are in the case's sizes ("read").

Usage: python tools/grading_report.py [--json] [chNN ...]     (make grading-report)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "bank"))

from bank import entries, grade, load  # noqa: E402

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
    graders = load(chapter).GRADERS
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
    rows["all"] = total
    return {name: {c: row[c] for c in COLUMNS} for name, row in rows.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapters", nargs="*")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    chapters = args.chapters or sorted(
        p.stem[len("bank_") :] for p in (ROOT / "tests" / "bank").glob("bank_ch*.py")
    )
    table = {chapter: measure(chapter) for chapter in chapters}
    if args.json:
        print(json.dumps(table, indent=1))
        return 0
    header = "".join(f"{c:>9}" for c in COLUMNS)
    print(f"{'chapter / exercise':<30}{header}{'named %':>9}")
    for chapter, rows in table.items():
        for name, row in rows.items():
            label = chapter if name == "all" else f"  {name}"
            share = 100 * row["named"] / row["wrong"] if row["wrong"] else 0.0
            cells = "".join(
                f"{row[c]:>9.1f}" if c == "seconds" else f"{int(row[c]):>9}"
                for c in COLUMNS
            )
            print(f"{label:<30}{cells}{share:>8.0f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
