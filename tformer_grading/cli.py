"""``python -m tformer_grading``: grade exercise notebooks with the real nbgrader.

Learner, from the course folder (or anywhere inside it)::

    python -m tformer_grading book/ch01_shapes/exercise.ipynb

Instructor, a folder of submissions into the course's gradebook::

    python -m tformer_grading --course . --assignment ch01_shapes \
        --submissions collected/ --out grades/ [--jobs N] [--shard K/N]

Exit status: 0 when every submission was graded, 1 when some could not be (each
is listed with the reason), 2 when nothing was graded (the error says why: the
notebook's problem, or the set-up's), 3 when the grader itself failed (a bug in the
course's grader, to report; a self-grade names the file that keeps nbgrader's log).

Chapters are found from ``solutions/*/exercise.ipynb``; nothing here names one.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .classgrade import grade_class
from .course import GradeError
from .learner_text import printable
from .selfgrade import GraderFailure, grade_notebook, report

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
        help="instructor: a folder of <student>/[<assignment>/]exercise.ipynb, "
        "nbgrader's submitted/ or exchange inbound folder, an LMS download, or a zip "
        "of one (only read, never written)",
    )
    add(
        "--out",
        type=Path,
        help="instructor: where grades.csv, cells.csv, pitfalls.csv/.png and "
        "feedback/ go (default: <course>/grades/<assignment>)",
    )
    add(
        "--jobs", type=int, help="instructor: notebooks graded at once (default: cores)"
    )
    add("--shard", help="instructor: grade the K-th of N slices of the class, as K/N")
    add("--db-url", help="instructor: the gradebook (default: nbgrader_config.py's)")
    add(
        "--notebook-timeout",
        type=int,
        help="seconds a whole notebook may run before it is not graded (default 900)",
    )
    add(
        "--worker-memory",
        type=int,
        metavar="MB",
        help="instructor: the memory each grading worker may use, in MB (default "
        "3072); each learner's kernel has its own 6 GB besides",
    )
    add(
        "--unsafe-no-sandbox",
        action="store_true",
        help="instructor: grade without the bubblewrap sandbox (learner code runs "
        "as you)",
    )
    add(
        "--no-sandbox",
        action="store_true",
        help="self-grade without the sandbox (your own code, as you)",
    )
    return parser


def _shard(text: str | None) -> tuple[int, int]:
    if not text:
        return (1, 1)
    try:
        k, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise GradeError(f"--shard {text}: expected K/N, as in --shard 2/3") from None
    return k, n


def _grade_class(args) -> int:
    course = args.course or Path(".")
    out = args.out or course / "grades" / args.assignment
    if args.unsafe_no_sandbox:
        print(
            "WARNING: grading without a sandbox: learner code runs as you, with your "
            "files",
            file=sys.stderr,
        )
    table = grade_class(
        course,
        args.assignment,
        args.submissions,
        out,
        timeout=args.timeout,
        notebook_timeout=args.notebook_timeout,
        jobs=args.jobs,
        shard=_shard(args.shard),
        sandbox=not args.unsafe_no_sandbox,
        db_url=args.db_url,
        worker_memory=args.worker_memory << 20 if args.worker_memory else None,
    )
    not_graded = {s: r for s, r in table.items() if r["status"] != "graded"}
    if args.json:
        print(json.dumps(table, indent=1))
    else:
        for row in table.values():
            who = printable(row["submitted_as"])
            if row["status"] == "graded":
                print(f"{who:<24} {row['score']:g} / {row['max_score']:g}")
            else:
                print(f"{who:<24} NOT GRADED: {printable(row['reason'])}")
            for note in row["notes"]:
                print(f"{'':<24} note: {printable(note)}")
        print(
            f"{len(table) - len(not_graded)} graded, {len(not_graded)} not graded. "
            f"grades: {out / 'grades.csv'}, per cell: {out / 'cells.csv'}, "
            f"mistakes: {out / 'pitfalls.csv'}, feedback: {out / 'feedback'}"
        )
    return 1 if not_graded else 0


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
        sandbox=not args.no_sandbox,
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
                "sandboxed": result.sandboxed,
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
            return _grade_class(args)
        _grade_notebook(args)
    except GradeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3 if isinstance(exc, GraderFailure) else 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 2
    # Never a raw traceback: say what failed, and where to report.
    except Exception as exc:  # noqa: BLE001 - the grader's own bug, reported
        print(
            f"error: the grader failed ({type(exc).__name__}: {printable(str(exc))}). "
            "This is a bug in "
            "the course's grader, not in your notebook: please report it.",
            file=sys.stderr,
        )
        return 3
    return 0
