"""The course folder as nbgrader sees it: where chapters are, and how to run nbgrader
there."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from pathlib import Path

NOTEBOOK = "exercise"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class GradeError(RuntimeError):
    """Grading could not run (not a course, unknown chapter, nbgrader failed)."""


def find_course_root(start: Path) -> Path:
    """The nearest folder at or above ``start`` holding nbgrader_config.py."""
    start = start.resolve()
    for folder in [start, *start.parents]:
        if (folder / "nbgrader_config.py").is_file():
            return folder
    raise GradeError(
        f"no nbgrader_config.py in {start} or above: run this from inside the "
        "course folder"
    )


def chapters(root: Path) -> list[str]:
    """Every chapter with an exercise: from solutions/ when present, else from book/."""
    found = {p.parent.name for p in (root / "solutions").glob(f"*/{NOTEBOOK}.ipynb")}
    return sorted(
        found or {p.parent.name for p in (root / "book").glob(f"*/{NOTEBOOK}.ipynb")}
    )


def grade_ids(path: Path) -> list[str]:
    """The grade_ids of a notebook's nbgrader cells, in order. A learner's notebook is
    read as the preflight reads it (a byte-order mark ignored); metadata that is not
    nbgrader's names no grade_id."""
    nb = json.loads(path.read_text(encoding="utf-8-sig"))
    ids = []
    for cell in nb.get("cells", []) if isinstance(nb, dict) else []:
        meta = cell.get("metadata") if isinstance(cell, dict) else None
        meta = meta.get("nbgrader") if isinstance(meta, dict) else None
        gid = meta.get("grade_id") if isinstance(meta, dict) else None
        if isinstance(gid, str) and gid:
            ids.append(gid)
    return ids


def chapter_of(notebook: Path, root: Path, known: list[str]) -> str:
    """The chapter a notebook belongs to, of the ``known`` ones (:func:`chapters`): its
    folder's name, or the chapter whose cells it has."""
    if notebook.parent.name in known:
        return notebook.parent.name
    ids = set(grade_ids(notebook))
    for chapter in known:
        for folder in ("solutions", "book"):
            candidate = root / folder / chapter / f"{NOTEBOOK}.ipynb"
            if ids and candidate.is_file() and set(grade_ids(candidate)) >= ids:
                return chapter
    raise GradeError(
        f"cannot tell which chapter {notebook} is; known chapters: "
        f"{', '.join(known) or 'none'}. Use --chapter."
    )


def grading_env(root: Path | None = None) -> dict:
    """The environment nbgrader and its kernels run in: this interpreter's tools first
    on PATH (nbgrader calls `alembic` by name) and, with ``root``, the course's packages
    importable."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join(
        [str(Path(sys.executable).parent), env.get("PATH", "")]
    )
    if root is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in [str(root), env.get("PYTHONPATH", "")] if p
        )
    env.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    return env


def run_python(cwd: Path, root: Path | None, *args: str) -> subprocess.CompletedProcess:
    """``python ARGS`` in ``cwd`` with :func:`grading_env`, output and errors captured
    together."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=grading_env(root),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        check=False,
    )


def nbgrader(
    course: Path, root: Path | None, *args: str, check: bool = True
) -> subprocess.CompletedProcess:
    """``nbgrader ARGS`` in ``course``; with ``check``, a failure raises
    :class:`GradeError`."""
    proc = run_python(course, root, "-m", "nbgrader", *args)
    if check and proc.returncode != 0:
        raise GradeError(f"nbgrader {' '.join(args)} failed:\n{proc.stdout[-4000:]}")
    return proc


def read_scores(
    course: Path, assignment: str, db_url: str = "", student: str = ""
) -> dict[str, dict[str, tuple[float, float]]]:
    """student -> {grade_id: (score, max_score)} from the gradebook at ``db_url``
    (the course's ``gradebook.db`` by default); only ``student``'s when given."""
    from nbgrader.api import Gradebook

    db_url = db_url or f"sqlite:///{course / 'gradebook.db'}"
    with Gradebook(db_url) as gb:
        if student:
            submissions = [gb.find_submission(assignment, student)]
        else:
            submissions = gb.assignment_submissions(assignment)
        return {
            submission.student.id: {
                g.name: (float(g.score), float(g.max_score))
                for nb in submission.notebooks
                for g in nb.grades
            }
            for submission in submissions
        }


def forget_submission(db_url: str, assignment: str, student: str) -> None:
    """No grades for a submission that was not graded (not a zero: no row at all)."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url) as gb:
        try:
            gb.remove_submission(assignment, student)
        except MissingEntry:
            pass


def diagnoses(autograded: Path) -> dict[str, str]:
    """grade_id -> why the cell lost its points, read from the autograded notebook's
    outputs."""
    nb = json.loads(autograded.read_text())
    out = {}
    for cell in nb["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if not meta.get("grade") or cell.get("cell_type") != "code":
            continue
        outputs = cell.get("outputs", [])
        errors = [
            f"{o.get('ename')}: {o.get('evalue')}"
            for o in outputs
            if o["output_type"] == "error"
        ]
        stderr = [
            o.get("text", "")
            for o in outputs
            if o["output_type"] == "stream" and o.get("name") == "stderr"
        ]
        if errors:
            out[meta["grade_id"]] = "\n".join(_ANSI.sub("", e) for e in errors)
        elif stderr:
            out[meta["grade_id"]] = (
                "the cell wrote to stderr (nbgrader gives such a cell 0): "
                + "".join(stderr)[:500]
            )
    return out


#: The most a picture of a graded notebook may weigh: a check's is about 30 KB.
PICTURE_BYTES = 2_000_000


def pictures(autograded: Path) -> dict[str, list[bytes]]:
    """grade_id -> the PNG pictures a failed graded cell showed (a check draws one
    beside its diagnosis: tformer_grading.pictures), read from the autograded
    notebook's outputs; only real PNGs of at most :data:`PICTURE_BYTES`."""
    nb = json.loads(autograded.read_text())
    out = {}
    for cell in nb["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        outputs = cell.get("outputs", [])
        if not meta.get("grade") or not any(
            o.get("output_type") == "error" for o in outputs
        ):
            continue
        found = []
        for o in outputs:
            data = o.get("data", {}).get("image/png") if "data" in o else None
            if not isinstance(data, str):
                continue
            try:
                png = base64.b64decode(data, validate=True)
            except ValueError:
                continue
            if png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) <= PICTURE_BYTES:
                found.append(png)
        if found:
            out[meta["grade_id"]] = found
    return out
