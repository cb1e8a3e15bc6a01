"""Release and autograde one submission in one nbgrader process.

Run in a course folder as ``python -m tformer_grading.autograde_one CHAPTER STUDENT
TIMEOUT SANDBOX`` (TIMEOUT 0: the configured one; SANDBOX: required, auto or off).
Starting Python, nbgrader and PyTorch is most of the time a learner waits for a
self-grade, so generate_assignment (which records the source's cells and points) and
autograde share one process. Each graded cell prints a progress line as it finishes
(:mod:`tformer_grading.progress`), and the scores are printed last, read from the
gradebook here, where nbgrader's database layer is already imported.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path


def autograde_one(
    chapter: str, student: str, timeout: int = 0, sandbox: str = "auto"
) -> str | None:
    """Generate ``chapter`` and autograde ``student``'s submission in the current
    folder.

    Returns None on success, else nbgrader's log and error.
    """
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=".").load_config()
    if timeout:
        config.Execute.timeout = timeout
    config.GuardedExecute.sandbox = sandbox
    _report_progress(config)
    config.CourseDirectory.root = "."
    _stamp_new_gradebook(config.CourseDirectory.db_url)
    api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
    for step in (
        lambda: api.generate_assignment(chapter, force=True),
        lambda: api.autograde(chapter, student, force=True),
    ):
        result = step()
        if not result["success"]:
            return f"{result.get('log', '')} {result.get('error', '')}"
    return None


def _stamp_new_gradebook(db_url: str) -> None:
    """Record nbgrader's database revision in a new sqlite gradebook before nbgrader
    opens it.

    A gradebook nbgrader creates itself asks for that revision by starting the `alembic`
    command in a new interpreter: five of the ten seconds a self-grade used to spend
    before running a cell. Read in this process from nbgrader's own migration scripts,
    it is the same revision in a tenth of a second, and the database is the one nbgrader
    would have made (it creates the other tables when it finds this one).
    """
    import sqlite3

    import nbgrader
    from alembic.script import ScriptDirectory

    prefix = "sqlite:///"
    if not db_url.startswith(prefix) or Path(db_url[len(prefix) :]).exists():
        return
    scripts = Path(nbgrader.__file__).parent / "alembic"
    head = ScriptDirectory(str(scripts)).get_current_head()
    with contextlib.closing(sqlite3.connect(db_url[len(prefix) :])) as db, db:
        db.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
        db.execute("INSERT INTO alembic_version (version_num) VALUES (?)", (head,))


def _report_progress(config) -> None:
    """Grade with the executor that prints a line per graded cell (the learner
    watches)."""
    from .progress import GUARDED, PROGRESS

    steps = list(config.Autograde.get("autograde_preprocessors", []))
    if GUARDED in steps:
        config.Autograde.autograde_preprocessors = [
            PROGRESS if step == GUARDED else step for step in steps
        ]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 4:
        print(
            "usage: python -m tformer_grading.autograde_one CHAPTER STUDENT TIMEOUT "
            "SANDBOX"
        )
        return 2
    problem = autograde_one(args[0], args[1], int(args[2]), args[3])
    if problem:
        print(problem)
        return 1
    from .course import read_scores
    from .progress import SCORES

    print(SCORES + json.dumps(read_scores(Path("."), args[0])), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
