"""``python -m tformer_grading``: grade exercise notebooks with the real nbgrader.

Learner, from the course folder (or anywhere inside it)::

    python -m tformer_grading book/ch01_shapes/exercise.ipynb

Instructor, a folder of submissions into the course's gradebook::

    python -m tformer_grading --course . --assignment ch01_shapes --submissions collected/ --out grades/

Chapters are found from ``solutions/*/exercise.ipynb``; nothing here names one.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .classgrade import grade_class
from .course import GradeError
from .selfgrade import grade_notebook, report

PROG = "python -m tformer_grading"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("notebook", nargs="?", type=Path, help="a learner's exercise notebook to grade")
    add("--chapter", help="the chapter (default: the notebook's folder name)")
    add(
        "--visible-only",
        action="store_true",
        help="skip the hidden tests even if solutions/ exists",
    )
    add(
        "--timeout",
        type=int,
        help="seconds per cell (default: nbgrader_config.py's, 60)",
    )
    add("--json", action="store_true", help="print the result as JSON")
    add(
        "--course",
        type=Path,
        help="instructor: the course folder (with nbgrader_config.py)",
    )
    add(
        "--assignment",
        help="instructor: the assignment (a chapter folder under solutions/)",
    )
    add(
        "--submissions",
        type=Path,
        help="instructor: folder of <student>/[<assignment>/]exercise.ipynb",
    )
    add(
        "--out",
        type=Path,
        help="instructor: where grades.csv, cells.csv and feedback/ go "
        "(default: <course>/grades/<assignment>)",
    )
    return parser


def _grade_class(args) -> None:
    course = args.course or Path(".")
    out = args.out or course / "grades" / args.assignment
    table = grade_class(course, args.assignment, args.submissions, out, args.timeout)
    if args.json:
        print(json.dumps(table, indent=1))
        return
    for student, row in sorted(table.items()):
        print(f"{student:<24} {row['score']:g} / {row['max_score']:g}")
    print(
        f"grades: {out / 'grades.csv'}, per cell: {out / 'cells.csv'}, "
        f"feedback: {out / 'feedback'}"
    )


def _print_progress(cell) -> None:
    print(cell.line(), flush=True)


def _grade_notebook(args) -> None:
    if not args.json:
        print(
            f"Self-grading {args.notebook} with nbgrader; each graded cell is reported "
            "as it finishes:",
            flush=True,
        )
    result = grade_notebook(
        args.notebook,
        chapter=args.chapter,
        timeout=args.timeout,
        visible_only=args.visible_only,
        on_cell=None if args.json else _print_progress,
    )
    if not args.json:
        print(report(result, args.notebook))
        return
    print(
        json.dumps(
            {
                "chapter": result.chapter,
                "hidden_tests": result.hidden_tests,
                "score": result.score,
                "max_score": result.max_score,
                "seconds": round(result.seconds, 2),
                "cells": [vars(c) for c in result.cells],
            },
            indent=1,
        )
    )


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    instructor = args.submissions or args.course or args.assignment
    if instructor and not (args.submissions and args.assignment):
        parser.error(
            "instructor mode needs --assignment and --submissions (and --course, "
            "default .)"
        )
    if not instructor and args.notebook is None:
        parser.error("give a notebook to grade, or --assignment and --submissions")
    try:
        if instructor:
            _grade_class(args)
        else:
            _grade_notebook(args)
    except GradeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
