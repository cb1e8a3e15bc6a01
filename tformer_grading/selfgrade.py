"""A learner grades one notebook with the real nbgrader, without any instructor set-up.

:func:`grade_notebook` builds a throw-away nbgrader course in a temporary folder,
runs ``nbgrader autograde`` on the notebook (check cells restored, hidden tests
included when ``solutions/<chapter>/exercise.ipynb`` is present) and returns
each graded cell's points and the diagnosis of every cell that lost points.
Without ``solutions/`` (a course that keeps its solutions private) only the
visible checks run, and :func:`report` says so.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .course import (
    NOTEBOOK,
    GradeError,
    chapter_of,
    diagnoses,
    find_course_root,
    grade_ids,
    read_scores,
    run_python,
)

STUDENT = "you"
_EDITED = (
    "raise AssertionError('this check cell was edited, and without the original it "
    "cannot be graded: restore it from the course repository')"
)


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


def _pristine_student_version(
    notebook: Path, root: Path, chapter: str, scratch: Path
) -> Path | None:
    """An unedited student version to restore the check cells from, when solutions/ is absent."""
    released = root / "book" / chapter / f"{NOTEBOOK}.ipynb"
    if released.is_file() and released.resolve() != notebook.resolve():
        return released
    try:  # the learner edits the committed file itself: git still has the original
        rel = released.resolve().relative_to(root)
        text = subprocess.run(
            ["git", "show", f"HEAD:{rel.as_posix()}"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=30,
        )
        if text.returncode == 0 and text.stdout.strip():
            copy = scratch / f"pristine-{NOTEBOOK}.ipynb"
            copy.write_text(text.stdout)
            return copy
    except (OSError, ValueError, subprocess.SubprocessError):
        pass
    return None


def _visible_source(student_version: Path):
    """A source notebook built from a student version: locked cells whose nbgrader checksum no
    longer matches (edited) are replaced by a cell that fails, so an edited check cannot pass."""
    import nbformat
    from nbgrader.utils import compute_checksum

    nb = nbformat.read(student_version, as_version=4)
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if (
            meta.get("locked")
            and "checksum" in meta
            and compute_checksum(cell) != meta["checksum"]
        ):
            cell.source = _EDITED
        meta.pop("checksum", None)
    return nb


def _write_source(
    course: Path, notebook: Path, root: Path, chapter: str, hidden: bool
) -> None:
    import nbformat

    src = course / "solutions" / chapter
    src.mkdir(parents=True, exist_ok=True)
    if hidden:
        shutil.copy(
            root / "solutions" / chapter / f"{NOTEBOOK}.ipynb",
            src / f"{NOTEBOOK}.ipynb",
        )
    else:
        pristine = (
            _pristine_student_version(notebook, root, chapter, course) or notebook
        )
        nbformat.write(_visible_source(pristine), src / f"{NOTEBOOK}.ipynb")


def grade_notebook(
    notebook: Path,
    *,
    chapter: str | None = None,
    timeout: int | None = None,
    visible_only: bool = False,
) -> Result:
    """Autograde one learner notebook in a temporary course; return per-cell points and
    diagnoses."""
    started = time.perf_counter()
    notebook = notebook.resolve()
    if not notebook.is_file():
        raise GradeError(f"no such notebook: {notebook}")
    root = find_course_root(notebook.parent)
    chapter = chapter or chapter_of(notebook, root)
    solution = root / "solutions" / chapter / f"{NOTEBOOK}.ipynb"
    hidden = solution.is_file() and not visible_only
    with tempfile.TemporaryDirectory(prefix="tformer-grade-") as tmp:
        course = Path(tmp)
        shutil.copy(root / "nbgrader_config.py", course)
        _write_source(course, notebook, root, chapter, hidden)
        handed_in = course / "submitted" / STUDENT / chapter
        handed_in.mkdir(parents=True)
        shutil.copy(notebook, handed_in / f"{NOTEBOOK}.ipynb")
        proc = run_python(
            course,
            root,
            "-m",
            "tformer_grading.autograde_one",
            chapter,
            STUDENT,
            str(timeout or 0),
        )
        autograded = course / "autograded" / STUDENT / chapter / f"{NOTEBOOK}.ipynb"
        if proc.returncode != 0 or not autograded.is_file():
            raise GradeError(
                f"nbgrader could not grade {notebook}:\n{proc.stdout[-4000:]}"
            )
        why = diagnoses(autograded)
        scores = read_scores(course, chapter)[STUDENT]
    result = Result(chapter, hidden)
    for grade_id, (score, max_score) in scores.items():
        lost = why.get(grade_id, "") if score < max_score else ""
        result.cells.append(CellResult(grade_id, score, max_score, lost))
    order = {
        gid: i for i, gid in enumerate(grade_ids(solution if hidden else notebook))
    }
    result.cells.sort(key=lambda c: order.get(c.grade_id, len(order)))
    result.seconds = time.perf_counter() - started
    return result


def report(result: Result, notebook: Path) -> str:
    """The self-grade as the learner reads it: one line per graded cell, diagnoses under it."""
    lines = [f"Grading {notebook} ({result.chapter})"]
    if result.hidden_tests:
        lines.append(
            "Hidden tests included (from solutions/). This is what the course's "
            "autograder would give."
        )
    else:
        lines.append(
            "VISIBLE CHECKS ONLY: this copy of the course has no solutions/ folder, so "
            "the hidden tests did not run. The instructor's grade can be lower."
        )
    width = max((len(c.grade_id) for c in result.cells), default=10)
    for c in result.cells:
        mark = "✓" if c.score == c.max_score else "✗"
        lines.append(f"  {mark} {c.grade_id:<{width}}  {c.score:g} / {c.max_score:g}")
        lines += [f"      {d}" for d in c.diagnosis.splitlines()]
    lines.append(
        f"Total: {result.score:g} / {result.max_score:g}   ({result.seconds:.1f} s)"
    )
    return "\n".join(lines)
