"""Release and autograde one submission in one nbgrader process.

Run in a course folder as ``python -m tformer_grading.autograde_one CHAPTER STUDENT
[TIMEOUT]``. Starting Python, nbgrader and PyTorch is most of the time a learner
waits for a self-grade, so generate_assignment (which records the source's cells
and points) and autograde share one process.
"""

from __future__ import annotations

import sys


def autograde_one(chapter: str, student: str, timeout: int = 0) -> str | None:
    """Generate ``chapter`` and autograde ``student``'s submission in the current folder.

    Returns None on success, else nbgrader's log and error.
    """
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=".").load_config()
    if timeout:
        config.Execute.timeout = timeout
    config.CourseDirectory.root = "."
    api = NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)
    for step in (
        lambda: api.generate_assignment(chapter, force=True),
        lambda: api.autograde(chapter, student, force=True),
    ):
        result = step()
        if not result["success"]:
            return f"{result.get('log', '')} {result.get('error', '')}"
    return None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (2, 3):
        print(
            "usage: python -m tformer_grading.autograde_one CHAPTER STUDENT [TIMEOUT]"
        )
        return 2
    problem = autograde_one(args[0], args[1], int(args[2]) if len(args) == 3 else 0)
    if problem:
        print(problem)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
