"""Grade exercise notebooks with the real nbgrader, without any instructor set-up.

Learner, from the course folder (or anywhere inside it)::

    python -m tformer_ref.grade book/ch01_shapes/exercise.ipynb

builds a throw-away nbgrader course in a temporary folder, runs ``nbgrader
autograde`` on the notebook (check cells restored, hidden tests included when
``solutions/<chapter>/exercise.ipynb`` is present) and prints each graded cell's
points, the total, and the diagnosis of every cell that lost points. Without
``solutions/`` (a course that keeps its solutions private) only the visible
checks run, and the report says so.

Instructor: autograde a folder of submissions into the course's gradebook, then
write feedback and a grade table::

    python -m tformer_ref.grade --course . --assignment ch01_shapes --submissions collected/ --out grades/

``collected/<student>/exercise.ipynb`` or ``collected/<student>/<assignment>/exercise.ipynb``.
Chapters are found from ``solutions/*/exercise.ipynb``; nothing here names one.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

NOTEBOOK = "exercise"
STUDENT = "you"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class GradeError(RuntimeError):
    """Grading could not run (not a course, unknown chapter, nbgrader failed)."""


# --------------------------------------------------------------------------- course layout

def find_course_root(start: Path) -> Path:
    """The nearest folder at or above ``start`` holding nbgrader_config.py."""
    start = start.resolve()
    for folder in [start, *start.parents]:
        if (folder / "nbgrader_config.py").is_file():
            return folder
    raise GradeError(f"no nbgrader_config.py in {start} or above: run this from inside the course folder")


def chapters(root: Path) -> list[str]:
    """Every chapter with an exercise: from solutions/ when present, else from book/."""
    found = {p.parent.name for p in (root / "solutions").glob(f"*/{NOTEBOOK}.ipynb")}
    return sorted(found or {p.parent.name for p in (root / "book").glob(f"*/{NOTEBOOK}.ipynb")})


def _grade_ids(path: Path) -> set[str]:
    nb = json.loads(path.read_text())
    return {c.get("metadata", {}).get("nbgrader", {}).get("grade_id") for c in nb["cells"]} - {None}


def chapter_of(notebook: Path, root: Path) -> str:
    """The chapter a notebook belongs to: its folder's name, or the chapter whose cells it has."""
    known = chapters(root)
    if notebook.parent.name in known:
        return notebook.parent.name
    ids = _grade_ids(notebook)
    for chapter in known:
        for candidate in (root / "solutions" / chapter / f"{NOTEBOOK}.ipynb", root / "book" / chapter / f"{NOTEBOOK}.ipynb"):
            if candidate.is_file() and _grade_ids(candidate) >= ids and ids:
                return chapter
    raise GradeError(f"cannot tell which chapter {notebook} is; known chapters: {', '.join(known) or 'none'}. "
                     "Use --chapter.")


def _env(root: Path) -> dict:
    """nbgrader and the kernels it starts see this interpreter's tools and the course's tformer_ref."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(root), env.get("PYTHONPATH", "")] if p)
    env.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    return env


def nbgrader(course: Path, root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=_env(root), text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if check and proc.returncode != 0:
        raise GradeError(f"nbgrader {' '.join(args)} failed:\n{proc.stdout[-4000:]}")
    return proc


# --------------------------------------------------------------------------- reading results

@dataclass
class CellResult:
    grade_id: str
    score: float
    max_score: float
    diagnosis: str = ""


@dataclass
class Result:
    chapter: str
    hidden_tests: bool
    cells: list[CellResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def score(self) -> float:
        return sum(c.score for c in self.cells)

    @property
    def max_score(self) -> float:
        return sum(c.max_score for c in self.cells)


def diagnoses(autograded: Path) -> dict[str, str]:
    """grade_id -> why the cell lost its points, read from the autograded notebook's outputs."""
    nb = json.loads(autograded.read_text())
    out = {}
    for cell in nb["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if not meta.get("grade") or cell.get("cell_type") != "code":
            continue
        errors = [f"{o.get('ename')}: {o.get('evalue')}" for o in cell.get("outputs", []) if o["output_type"] == "error"]
        stderr = [o.get("text", "") for o in cell.get("outputs", []) if o["output_type"] == "stream" and o.get("name") == "stderr"]
        if errors:
            out[meta["grade_id"]] = "\n".join(_ANSI.sub("", e) for e in errors)
        elif stderr:
            out[meta["grade_id"]] = "the cell wrote to stderr (nbgrader gives such a cell 0): " + "".join(stderr)[:500]
    return out


def read_scores(course: Path, assignment: str) -> dict[str, dict[str, tuple[float, float]]]:
    """student -> {grade_id: (score, max_score)} from the course's gradebook."""
    from nbgrader.api import Gradebook

    url = f"sqlite:///{course / 'gradebook.db'}"
    result = {}
    with Gradebook(url) as gb:
        for submission in gb.assignment_submissions(assignment):
            result[submission.student.id] = {g.name: (float(g.score), float(g.max_score))
                                             for nb in submission.notebooks for g in nb.grades}
    return result


# --------------------------------------------------------------------------- learner: one notebook

def _pristine_student_version(notebook: Path, root: Path, chapter: str) -> Path | None:
    """An unedited student version to restore the check cells from, when solutions/ is absent."""
    released = root / "book" / chapter / f"{NOTEBOOK}.ipynb"
    if released.is_file() and released.resolve() != notebook.resolve():
        return released
    try:  # the learner edits the committed file itself: git still has the original
        rel = released.resolve().relative_to(root)
        text = subprocess.run(["git", "show", f"HEAD:{rel.as_posix()}"], cwd=root, capture_output=True, text=True,
                              timeout=30)
        if text.returncode == 0 and text.stdout.strip():
            copy = Path(tempfile.mkdtemp()) / f"{NOTEBOOK}.ipynb"
            copy.write_text(text.stdout)
            return copy
    except (OSError, ValueError, subprocess.SubprocessError):
        pass
    return None


def _visible_source(student_version: Path) -> dict:
    """A source notebook built from a student version: locked cells whose nbgrader checksum no longer
    matches (edited) are replaced by a cell that fails, so an edited check cannot pass."""
    import nbformat
    from nbgrader.utils import compute_checksum

    nb = nbformat.read(student_version, as_version=4)
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("locked") and "checksum" in meta and compute_checksum(cell) != meta["checksum"]:
            cell.source = ("raise AssertionError('this check cell was edited, and without the original it cannot "
                           "be graded: restore it from the course repository')")
        for key in ("checksum",):
            meta.pop(key, None)
    return nb


def grade_notebook(notebook: Path, *, chapter: str | None = None, timeout: int | None = None,
                   visible_only: bool = False, keep: Path | None = None) -> Result:
    """Autograde one learner notebook in a temporary course; return per-cell points and diagnoses."""
    import nbformat

    started = time.perf_counter()
    notebook = notebook.resolve()
    if not notebook.is_file():
        raise GradeError(f"no such notebook: {notebook}")
    root = find_course_root(notebook.parent)
    chapter = chapter or chapter_of(notebook, root)
    solution = root / "solutions" / chapter / f"{NOTEBOOK}.ipynb"
    hidden = solution.is_file() and not visible_only
    with tempfile.TemporaryDirectory(prefix="tformer-grade-") as tmp:
        course = Path(keep or tmp)
        course.mkdir(parents=True, exist_ok=True)
        shutil.copy(root / "nbgrader_config.py", course)
        src = course / "solutions" / chapter
        src.mkdir(parents=True, exist_ok=True)
        if hidden:
            shutil.copy(solution, src / f"{NOTEBOOK}.ipynb")
        else:
            pristine = _pristine_student_version(notebook, root, chapter) or notebook
            nbformat.write(_visible_source(pristine), src / f"{NOTEBOOK}.ipynb")
        handed_in = course / "submitted" / STUDENT / chapter
        handed_in.mkdir(parents=True)
        shutil.copy(notebook, handed_in / f"{NOTEBOOK}.ipynb")
        # generate_assignment (records the source's cells and points) then autograde, in one nbgrader
        # process: starting Python, nbgrader and PyTorch is most of the time a learner waits.
        proc = subprocess.run([sys.executable, "-c", _ONE_PROCESS, chapter, STUDENT, str(timeout or 0)], cwd=course,
                              env=_env(root), text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        autograded = course / "autograded" / STUDENT / chapter / f"{NOTEBOOK}.ipynb"
        if proc.returncode != 0 or not autograded.is_file():
            raise GradeError(f"nbgrader could not grade {notebook}:\n{proc.stdout[-4000:]}")
        why = diagnoses(autograded)
        scores = read_scores(course, chapter)[STUDENT]
    result = Result(chapter, hidden)
    for grade_id, (score, max_score) in scores.items():
        result.cells.append(CellResult(grade_id, score, max_score, why.get(grade_id, "") if score < max_score else ""))
    order = {gid: i for i, gid in enumerate(_ordered_ids(solution if hidden else notebook))}
    result.cells.sort(key=lambda c: order.get(c.grade_id, len(order)))
    result.seconds = time.perf_counter() - started
    return result


_ONE_PROCESS = """
import sys
from nbgrader.apps import NbGraderAPI
from nbgrader.coursedir import CourseDirectory
from traitlets.config.loader import PyFileConfigLoader

chapter, student, timeout = sys.argv[1], sys.argv[2], int(sys.argv[3])
config = PyFileConfigLoader("nbgrader_config.py", path=".").load_config()
if timeout:
    config.Execute.timeout = timeout
config.CourseDirectory.root = "."
api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
for step in (lambda: api.generate_assignment(chapter, force=True), lambda: api.autograde(chapter, student, force=True)):
    result = step()
    if not result["success"]:
        print(result.get("log", ""), result.get("error", ""))
        sys.exit(1)
"""


def _ordered_ids(path: Path) -> list[str]:
    nb = json.loads(path.read_text())
    return [c["metadata"]["nbgrader"]["grade_id"] for c in nb["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade_id")]


def report(result: Result, notebook: Path) -> str:
    lines = [f"Grading {notebook} ({result.chapter})"]
    if result.hidden_tests:
        lines.append("Hidden tests included (from solutions/). This is what the course's autograder would give.")
    else:
        lines.append("VISIBLE CHECKS ONLY: this copy of the course has no solutions/ folder, so the hidden tests "
                     "did not run. The instructor's grade can be lower.")
    width = max((len(c.grade_id) for c in result.cells), default=10)
    for c in result.cells:
        mark = "✓" if c.score == c.max_score else "✗"
        lines.append(f"  {mark} {c.grade_id:<{width}}  {c.score:g} / {c.max_score:g}")
        for d in c.diagnosis.splitlines():
            lines.append(f"      {d}")
    lines.append(f"Total: {result.score:g} / {result.max_score:g}   ({result.seconds:.1f} s)")
    return "\n".join(lines)


# --------------------------------------------------------------------------- instructor: a class

def _collect(submissions: Path, assignment: str) -> dict[str, Path]:
    """student -> the folder holding their notebook(s), from either layout."""
    found = {}
    for student in sorted(p for p in submissions.iterdir() if p.is_dir()):
        folder = student / assignment if (student / assignment).is_dir() else student
        if (folder / f"{NOTEBOOK}.ipynb").is_file():
            found[student.name] = folder
    return found


def grade_class(course: Path, assignment: str, submissions: Path, out: Path, timeout: int | None = None) -> dict:
    """Autograde every submission into ``course``'s gradebook, then write feedback and grades to ``out``.

    Returns student -> {"score", "max_score", "cells": {grade_id: score}}.
    """
    from nbgrader.api import Gradebook, MissingEntry

    course, submissions, out = course.resolve(), submissions.resolve(), out.resolve()
    root = course
    if not (course / "solutions" / assignment / f"{NOTEBOOK}.ipynb").is_file():
        raise GradeError(f"{course}/solutions/{assignment}/{NOTEBOOK}.ipynb does not exist; "
                         f"assignments here: {', '.join(chapters(course)) or 'none'}")
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        try:
            known = bool(gb.find_assignment(assignment).notebooks)
        except MissingEntry:
            known = False
    if not known:  # records the source notebook (checksums, points) in the gradebook
        nbgrader(course, root, "generate_assignment", assignment, "--force", "--log-level=ERROR")
    students = _collect(submissions, assignment)
    if not students:
        raise GradeError(f"no {NOTEBOOK}.ipynb under {submissions}/<student>/[{assignment}/]")
    target_root = course / "submitted"
    for student, folder in students.items():
        target = target_root / student / assignment
        if folder.resolve() != target.resolve():
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(folder, target)
        stamp = target / "timestamp.txt"
        if not stamp.exists():
            stamp.write_text(time.strftime("%Y-%m-%d %H:%M:%S.000000 UTC", time.gmtime()))
    args = ["autograde", assignment, "--force"] + ([f"--Execute.timeout={timeout}"] if timeout else [])
    graded = nbgrader(course, root, *args, check=False)
    nbgrader(course, root, "generate_feedback", assignment, "--force", "--log-level=ERROR", check=False)
    out.mkdir(parents=True, exist_ok=True)
    nbgrader(course, root, "export", f"--to={out / 'grades.csv'}", "--log-level=ERROR")
    (out / "autograde.log").write_text(graded.stdout)
    scores = read_scores(course, assignment)
    table = {}
    for student in students:
        cells = scores.get(student, {})
        table[student] = {"score": sum(s for s, _ in cells.values()), "max_score": sum(m for _, m in cells.values()),
                          "cells": {g: s for g, (s, _) in cells.items()}}
        feedback = course / "feedback" / student / assignment
        if feedback.is_dir():
            shutil.copytree(feedback, out / "feedback" / student, dirs_exist_ok=True)
    with open(out / "cells.csv", "w", newline="") as f:
        ids = sorted({g for row in table.values() for g in row["cells"]})
        writer = csv.writer(f)
        writer.writerow(["student", *ids, "total", "max"])
        for student, row in sorted(table.items()):
            writer.writerow([student, *(row["cells"].get(g, "") for g in ids), row["score"], row["max_score"]])
    return table


# --------------------------------------------------------------------------- command line

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tformer_ref.grade", description=__doc__.split("\n\n")[0])
    parser.add_argument("notebook", nargs="?", type=Path, help="a learner's exercise notebook to grade")
    parser.add_argument("--chapter", help="the chapter (default: the notebook's folder name)")
    parser.add_argument("--visible-only", action="store_true", help="skip the hidden tests even if solutions/ exists")
    parser.add_argument("--timeout", type=int, help="seconds per cell (default: nbgrader_config.py's, 60)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--course", type=Path, help="instructor: the course folder (with nbgrader_config.py)")
    parser.add_argument("--assignment", help="instructor: the assignment (a chapter folder under solutions/)")
    parser.add_argument("--submissions", type=Path, help="instructor: folder of <student>/[<assignment>/]exercise.ipynb")
    parser.add_argument("--out", type=Path, help="instructor: where grades.csv, cells.csv and feedback/ go "
                                                   "(default: <course>/grades/<assignment>)")
    args = parser.parse_args(argv)
    try:
        if args.submissions or args.course or args.assignment:
            if not (args.submissions and args.assignment):
                parser.error("instructor mode needs --assignment and --submissions (and --course, default .)")
            course = args.course or Path(".")
            out = args.out or course / "grades" / args.assignment
            table = grade_class(course, args.assignment, args.submissions, out, args.timeout)
            if args.json:
                print(json.dumps(table, indent=1))
            else:
                for student, row in sorted(table.items()):
                    print(f"{student:<24} {row['score']:g} / {row['max_score']:g}")
                print(f"grades: {out / 'grades.csv'}, per cell: {out / 'cells.csv'}, feedback: {out / 'feedback'}")
            return 0
        if args.notebook is None:
            parser.error("give a notebook to grade, or --assignment and --submissions")
        result = grade_notebook(args.notebook, chapter=args.chapter, timeout=args.timeout, visible_only=args.visible_only)
    except GradeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"chapter": result.chapter, "hidden_tests": result.hidden_tests, "score": result.score,
                          "max_score": result.max_score, "seconds": round(result.seconds, 2),
                          "cells": [vars(c) for c in result.cells]}, indent=1))
    else:
        print(report(result, args.notebook))
    return 0


if __name__ == "__main__":
    sys.exit(main())
