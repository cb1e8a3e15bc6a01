"""Generate the student version of every exercise with the real nbgrader CLI.

``nbgrader generate_assignment`` strips solutions and hidden tests from
``solutions/<chapter>/exercise.ipynb``. It runs in a temporary copy of the
course (it replaces its whole output folder and writes a gradebook), and the
student notebook is copied to ``book/<chapter>/exercise.ipynb``, where the book
and learners read it. tests/book/test_notebook_files.py fails when a committed
student version differs from what this produces.

Usage: python tools/release.py [--check] [chapter ...]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from nbsync import write_if_changed  # tools/ is on sys.path: it holds this script
from tformer_grading.course import chapters, nbgrader

ROOT = Path(__file__).resolve().parent.parent


def generate(chapter: str, workdir: Path) -> Path:
    """Run nbgrader generate_assignment for ``chapter`` in ``workdir``; return the
    student notebook."""
    shutil.copy(ROOT / "nbgrader_config.py", workdir)
    src = workdir / "solutions" / chapter
    src.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "solutions" / chapter / "exercise.ipynb", src)
    nbgrader(
        workdir, None, "generate_assignment", chapter, "--force", "--log-level=ERROR"
    )
    return workdir / "release" / chapter / "exercise.ipynb"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="only report student versions that are out of date",
    )
    parser.add_argument("chapter", nargs="*", help="chapters to release (default: all)")
    args = parser.parse_args(argv)
    changed = []
    for chapter in args.chapter or chapters(ROOT):
        with tempfile.TemporaryDirectory() as tmp:
            text = generate(chapter, Path(tmp)).read_text()
        target = ROOT / "book" / chapter / "exercise.ipynb"
        changed.append(write_if_changed(target, text, args.check))
    return 1 if (args.check and any(changed)) else 0


if __name__ == "__main__":
    sys.exit(main())
