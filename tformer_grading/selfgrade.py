"""A learner grades one notebook with the real nbgrader, without any instructor set-up.

:func:`grade_notebook` builds a throw-away nbgrader course in a temporary folder,
runs ``nbgrader autograde`` on the notebook (check cells restored, hidden tests
included when ``solutions/<chapter>/exercise.ipynb`` is present) and returns
each graded cell's points and the diagnosis of every cell that lost points,
reporting each graded cell as nbgrader finishes it. A cell whose answer is still the
released placeholder is "not answered yet", not a list of wrong cases.
Without ``solutions/`` (a course that keeps its solutions private) only the
visible checks run, and :func:`report` says so.

What goes wrong is said in one line, as whose it is: the notebook's (it cannot be
read, is another chapter's, lost the marks of its graded cells beyond matching, ran
past its time limit: a :class:`GradeError`) or the grader's (nbgrader failed on a
notebook the preflight passed: a :class:`GraderFailure`, its log kept in a file to
report). Never nbgrader's traceback.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from .course import (
    NOTEBOOK,
    GradeError,
    chapter_of,
    chapters,
    diagnoses,
    find_course_root,
    grade_ids,
    grading_env,
    pictures,
)
from .preflight import WrongChapter, read_bytes, sanitize, write
from .preflight import parse as parse_notebook
from .progress import SCORES, CellDone, parse

STUDENT = "you"
NOT_ANSWERED_HINT = (
    "not answered yet (the answer still raises NotImplementedError: write yours)"
)
_EDITED = (
    "raise AssertionError('this check cell was edited, and without the original it "
    "cannot be graded: restore it from the course repository')"
)
_NOT_GRADABLE = re.compile(r"NotGradable: (.+)")
_RAISED = re.compile(r"^\s*((?:\w+\.)*\w*(?:Error|Exception)\b.*)$", re.MULTILINE)


class GraderFailure(GradeError):
    """nbgrader failed on a notebook the preflight found gradable: the grader's
    problem, not the learner's. ``log`` is the file that keeps nbgrader's output."""

    def __init__(self, what: str, log: Path):
        super().__init__(
            f"the grader failed ({what}). This is a bug in the course's grader, not "
            f"in your notebook: please report it, with nbgrader's log: {log}"
        )
        self.log = log


@dataclass
class CellResult:
    grade_id: str
    score: float
    max_score: float
    diagnosis: str = ""
    unanswered: bool = False
    # A hidden test's cell, run without its hidden code (no solutions/ here): its points
    # say nothing about the answer, so they are left out of the total.
    hidden: bool = False
    # The pictures the failed check drew, saved as PNG files (a terminal shows none).
    pictures: list[str] = field(default_factory=list)


@dataclass
class Result:
    chapter: str
    hidden_tests: bool
    cells: list[CellResult] = field(default_factory=list)
    seconds: float = 0.0
    # Why the kernel ran unprotected, or "" when it ran in the sandbox.
    unsandboxed: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def sandboxed(self) -> bool:
        return not self.unsandboxed

    @property
    def score(self) -> float:
        return sum(c.score for c in self.cells if not c.hidden)

    @property
    def max_score(self) -> float:
        return sum(c.max_score for c in self.cells if not c.hidden)

    @property
    def hidden_max_score(self) -> float:
        """The points of hidden tests that did not run here (left out of the total)."""
        return sum(c.max_score for c in self.cells if c.hidden)


def _pristine_student_version(
    notebook: Path, root: Path, chapter: str, scratch: Path
) -> Path | None:
    """An unedited student version to restore the check cells from, when solutions/ is
    absent."""
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
            check=False,
        )
        if text.returncode == 0 and text.stdout.strip():
            copy = scratch / f"pristine-{NOTEBOOK}.ipynb"
            copy.write_text(text.stdout)
            return copy
    except (OSError, ValueError, subprocess.SubprocessError):
        pass
    return None


def _visible_source(student_version: Path):
    """A source notebook built from a student version: locked cells whose nbgrader
    checksum no longer matches (edited) are replaced by a cell that fails, so an edited
    check cannot pass."""
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


def _hidden_only(notebook: Path) -> set[str]:
    """Grade ids of test cells whose code is all hidden: in a student version only their
    comments are left, so without solutions/ they pass whatever the answer."""
    import nbformat

    found = set()
    for cell in nbformat.read(notebook, as_version=4).cells:
        meta = cell.metadata.get("nbgrader", {})
        code = [
            line
            for line in cell.source.splitlines()
            if line.strip() and not line.lstrip().startswith("#")
        ]
        if meta.get("grade") and not meta.get("solution") and not code:
            found.add(meta.get("grade_id", ""))
    return found


def _write_source(
    course: Path,
    notebook: Path,
    submitted: dict,
    root: Path,
    chapter: str,
    hidden: bool,
) -> set[str]:
    import nbformat

    src = course / "solutions" / chapter
    src.mkdir(parents=True, exist_ok=True)
    if hidden:
        shutil.copy(
            root / "solutions" / chapter / f"{NOTEBOOK}.ipynb",
            src / f"{NOTEBOOK}.ipynb",
        )
    else:
        pristine = _pristine_student_version(
            notebook, root, chapter, course
        ) or _own_copy(submitted, notebook, course)
        nbformat.write(_visible_source(pristine), src / f"{NOTEBOOK}.ipynb")
    return set() if hidden else _hidden_only(src / f"{NOTEBOOK}.ipynb")


def _own_copy(submitted: dict, notebook: Path, scratch: Path) -> Path:
    """The learner's notebook as the preflight reads it (nbformat refuses some that
    Jupyter saves), to restore the checks from when nothing else is there: a course
    without solutions/ nor git, where the learner edits the released file itself."""
    own = sanitize(submitted, submitted)
    if not any(
        c["metadata"].get("nbgrader", {}).get("grade") for c in own.notebook["cells"]
    ):
        raise GradeError(
            f"{notebook.name} has no graded cells (their nbgrader marks were lost), "
            "and this copy of the course has neither solutions/ nor the exercise as "
            "released to match them with: download the assignment again and copy "
            "your answers in"
        )
    copy = scratch / f"own-{NOTEBOOK}.ipynb"
    write(own, copy)
    return copy


def _chapter_notebooks(root: Path, known: list[str], chapter: str) -> dict[str, Path]:
    """Every other chapter's notebook, to tell which one a notebook is."""
    found = {}
    for other in known:
        for folder in ("solutions", "book"):
            path = root / folder / other / f"{NOTEBOOK}.ipynb"
            if other != chapter and path.is_file():
                found[other] = path
                break
    return found


def _repair(
    submitted: dict, source: Path, notebook: Path, root: Path, chapter: str, asked: bool
):
    """The preflight's repaired copy; another chapter's notebook said in one line."""
    others = _chapter_notebooks(root, chapters(root), chapter)
    try:
        return sanitize(
            submitted,
            json.loads(source.read_text()),
            assignment=chapter,
            others=others,
        )
    except WrongChapter as exc:
        if asked or notebook.parent.name != chapter:
            where = f"not {chapter}'s:"
        else:
            where = f"found in the {chapter} folder: move it to book/{exc.found}/, or"
        raise GradeError(
            f"this is the {exc.found} notebook, {where} grade it with --chapter "
            f"{exc.found}"
        ) from None


def _failure(notebook: Path, log: str) -> GradeError:
    """Whose problem it is that nbgrader did not grade the notebook, in one line: the
    notebook's when the guard refused it (its time limit), else the grader's."""
    refused = _NOT_GRADABLE.findall(log)
    if refused:
        return GradeError(f"{notebook.name} could not be graded: {refused[-1].strip()}")
    raised = [r for r in _RAISED.findall(log) if "NbGraderException" not in r]
    what = raised[-1].strip()[:300] if raised else "nbgrader stopped without a reason"
    fd, name = tempfile.mkstemp(prefix="tformer-grade-log-", suffix=".txt")
    with open(fd, "w") as f:
        f.write(log)
    return GraderFailure(what, Path(name))


def _autograde(
    course: Path, root: Path, chapter: str, timeout: int | None, sandbox: str, on_cell
) -> tuple[int, str, list[CellDone], dict]:
    """Run nbgrader in ``course``, handing each graded cell to ``on_cell`` as it
    finishes; return the exit status, nbgrader's other output, every finished cell and
    the scores (student -> grade_id -> [score, max_score])."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tformer_grading.autograde_one", chapter, STUDENT]
        + [str(timeout or 0), sandbox],
        cwd=course,
        env=grading_env(root),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    log, done, scores = [], [], {}
    for line in proc.stdout:
        if line.startswith(SCORES):
            scores = json.loads(line[len(SCORES) :])
            continue
        cell = parse(line)
        if cell is None:
            log.append(line)
            continue
        done.append(cell)
        if on_cell is not None:
            on_cell(cell)
    return proc.wait(), "".join(log), done, scores


def _marking(on_cell, hidden_only: set[str]):
    """``on_cell``, told which cells are hidden tests that did not run here."""
    if on_cell is None or not hidden_only:
        return on_cell
    return lambda cell: on_cell(replace(cell, hidden=cell.grade_id in hidden_only))


def grade_notebook(
    notebook: Path,
    *,
    chapter: str | None = None,
    timeout: int | None = None,
    visible_only: bool = False,
    on_cell: Callable[[CellDone], None] | None = None,
    sandbox: bool = True,
) -> Result:
    """Autograde one learner notebook in a temporary course; return per-cell points and
    diagnoses. ``on_cell`` is called with each graded cell as nbgrader finishes it.

    Every error a learner can cause (no such file, not a notebook, not in a course,
    an unknown chapter, another chapter's notebook, graded cells that lost their marks
    beyond matching) is a :class:`GradeError` raised before any kernel starts; a
    failure of nbgrader on a notebook that passed is a :class:`GraderFailure`."""
    from .sandbox import availability

    started = time.perf_counter()
    notebook = notebook.resolve()
    if not notebook.exists():
        raise GradeError(f"no such notebook: {notebook}")
    submitted = parse_notebook(read_bytes(notebook), notebook.name)
    root = find_course_root(notebook.parent)
    known = chapters(root)
    if chapter and chapter not in known:
        raise GradeError(
            f"--chapter {chapter}: no such chapter; chapters here: "
            f"{', '.join(known) or 'none'}"
        )
    asked = bool(chapter)
    chapter = chapter or chapter_of(notebook, root, known)
    solution = root / "solutions" / chapter / f"{NOTEBOOK}.ipynb"
    hidden = solution.is_file() and not visible_only
    with tempfile.TemporaryDirectory(prefix="tformer-grade-") as tmp:
        course = Path(tmp)
        shutil.copy(root / "nbgrader_config.py", course)
        hidden_only = _write_source(course, notebook, submitted, root, chapter, hidden)
        source = course / "solutions" / chapter / f"{NOTEBOOK}.ipynb"
        repaired = _repair(submitted, source, notebook, root, chapter, asked)
        handed_in = course / "submitted" / STUDENT / chapter
        write(repaired, handed_in / f"{NOTEBOOK}.ipynb")
        # Only now: the probe starts a process, and the notebook's own problems are
        # said before any process starts.
        unsandboxed = "you asked for --no-sandbox" if not sandbox else availability()
        mode = "off" if unsandboxed else "required"
        status, log, done, scores = _autograde(
            course, root, chapter, timeout, mode, _marking(on_cell, hidden_only)
        )
        autograded = course / "autograded" / STUDENT / chapter / f"{NOTEBOOK}.ipynb"
        if status != 0 or not autograded.is_file() or STUDENT not in scores:
            raise _failure(notebook, log)
        why = diagnoses(autograded)
        drawn = pictures(autograded)
        order = {gid: i for i, gid in enumerate(grade_ids(source))}
        scores = {gid: tuple(points) for gid, points in scores[STUDENT].items()}
    result = Result(chapter, hidden, unsandboxed=unsandboxed or "")
    result.notes = repaired.notes
    unanswered = {c.grade_id for c in done if c.unanswered}
    for grade_id, (score, max_score) in scores.items():
        lost = why.get(grade_id, "") if score < max_score else ""
        blank = score < max_score and grade_id in unanswered
        result.cells.append(
            CellResult(grade_id, score, max_score, lost, blank, grade_id in hidden_only)
        )
    result.cells.sort(key=lambda c: order.get(c.grade_id, len(order)))
    _save_pictures(result, drawn, notebook)
    result.seconds = time.perf_counter() - started
    return result


def pictures_folder(notebook: Path) -> Path:
    """Where the self-grade saves the pictures of ``notebook``'s failed checks: beside
    it, ``<name>_pictures/``, emptied of the last grading's pictures each time."""
    return notebook.parent / f"{notebook.stem}_pictures"


def _save_pictures(result: Result, drawn: dict[str, list[bytes]], notebook: Path):
    """Each failed cell's pictures as ``<grade_id>.png`` (``-2``, ... for more) in
    :func:`pictures_folder`; a folder that cannot be written is a note."""
    folder = pictures_folder(notebook)
    try:
        for old in folder.glob("*.png") if folder.is_dir() else ():
            old.unlink()
        for cell in result.cells:
            if cell.score >= cell.max_score or cell.hidden:
                continue
            for n, png in enumerate(drawn.get(cell.grade_id, []), 1):
                folder.mkdir(exist_ok=True)
                path = folder / f"{cell.grade_id}{'' if n == 1 else f'-{n}'}.png"
                path.write_bytes(png)
                cell.pictures.append(str(path))
    except OSError as exc:
        result.notes.append(f"the checks' pictures could not be saved: {exc}")


def report(result: Result, notebook: Path) -> str:
    """The self-grade as the learner reads it: one line per graded cell, diagnoses under
    it."""
    lines = [f"Grading {notebook} ({result.chapter})"]
    if result.hidden_tests:
        lines.append(
            "Hidden tests included (from solutions/). This is what the course's "
            "autograder would give."
        )
    else:
        lines.append(
            "Visible checks only: this copy of the course has no solutions/ folder, so "
            "the hidden tests did not run. Your instructor's grade can be lower."
        )
    if result.sandboxed:
        lines.append("Graded in a sandbox (bubblewrap): no network, no other files.")
    else:
        # The learner grades their own code: nothing to protect them from, so no alarm.
        lines.append(
            f"Not sandboxed: {result.unsandboxed}. That is fine for your own "
            "notebook: it ran as you, as it does in JupyterLab."
        )
    lines += [f"Note: {note}" for note in result.notes]
    width = max((len(c.grade_id) for c in result.cells), default=10)
    for c in result.cells:
        if c.hidden:
            lines.append(
                f"  - {c.grade_id:<{width}}  hidden test, not run here "
                f"({c.max_score:g} points the course's grader decides)"
            )
            continue
        mark = "✓" if c.score == c.max_score else "✗"
        line = f"  {mark} {c.grade_id:<{width}}  {c.score:g} / {c.max_score:g}"
        if c.unanswered:
            # Its "diagnosis" would only list the cases the placeholder got wrong.
            lines.append(f"{line}  {NOT_ANSWERED_HINT}")
            continue
        lines.append(line)
        lines += [f"      {d}" for d in c.diagnosis.splitlines()]
        lines += [f"      Picture (open it to see): {path}" for path in c.pictures]
    hidden = result.hidden_max_score
    total = f"Total: {result.score:g} / {result.max_score:g}"
    if hidden:  # the exercise's headings count these points too
        total += (
            f" on the visible checks (the exercise's "
            f"{result.max_score + hidden:g} points include {hidden:g} for hidden tests)"
        )
    lines.append(f"{total}   ({result.seconds:.1f} s)")
    return "\n".join(lines)
