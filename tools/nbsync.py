"""Build the committed .ipynb notebooks from their text sources in nbsrc/.

Notebooks are authored as jupytext "percent" scripts, which diff and review
like code: ``nbsrc/book/ch01_shapes/lesson.py`` becomes
``book/ch01_shapes/lesson.ipynb`` and ``nbsrc/solutions/ch01_shapes/exercise.py``
becomes ``solutions/ch01_shapes/exercise.ipynb`` (nbgrader's source notebook).
The .ipynb files are committed without outputs; tests/book/test_notebook_files.py
fails when they drift from their sources.

nbgrader cells are marked with a short tag in the cell header, expanded here
into nbgrader's full metadata (schema 3)::

    # %% nbgrader="solution:split_heads"      an answer cell
                                              (### BEGIN/END SOLUTION inside)
    # %% nbgrader="test:test_split_heads:2"   a locked, graded test cell worth 2 points
    # %% nbgrader="locked:setup"              a locked cell learners should not change

Usage: python tools/nbsync.py [--check]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jupytext
import nbformat

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "nbsrc"
KERNELSPEC = {
    "display_name": "Python 3 (ipykernel)",
    "language": "python",
    "name": "python3",
}


def nbgrader_metadata(tag: str) -> dict:
    kind, _, rest = tag.partition(":")
    if kind == "solution":
        return {
            "grade": False,
            "grade_id": rest,
            "locked": False,
            "schema_version": 3,
            "solution": True,
            "task": False,
        }
    if kind == "test":
        grade_id, _, points = rest.partition(":")
        return {
            "grade": True,
            "grade_id": grade_id,
            "locked": True,
            "points": int(points),
            "schema_version": 3,
            "solution": False,
            "task": False,
        }
    if kind == "locked":
        return {
            "grade": False,
            "grade_id": rest,
            "locked": True,
            "schema_version": 3,
            "solution": False,
            "task": False,
        }
    raise ValueError(
        f"unknown nbgrader tag {tag!r}: use solution:ID, test:ID:POINTS or locked:ID"
    )


def build(source: Path) -> nbformat.NotebookNode:
    nb = jupytext.read(source)
    nb.metadata = {"kernelspec": KERNELSPEC, "language_info": {"name": "python"}}
    for cell in nb.cells:
        tag = cell.metadata.get("nbgrader")
        # mystnb: figure caption and alt text of the cell's image output
        # (CONTRIBUTING.md, "Figures").
        meta = {k: v for k, v in cell.metadata.items() if k in ("tags", "mystnb")}
        if isinstance(tag, str):
            meta["nbgrader"] = nbgrader_metadata(tag)
        cell.metadata = meta
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb


def target_of(source: Path) -> Path:
    return ROOT / source.relative_to(SRC).with_suffix(".ipynb")


def render(nb: nbformat.NotebookNode) -> str:
    # Stable cell ids keep regenerated notebooks byte-identical.
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"c{i:03d}"
    return nbformat.writes(nb, version=4) + "\n"


def write_if_changed(target: Path, text: str, check: bool) -> bool:
    """Write ``text`` to ``target`` if the file differs; with ``check``, only say so.

    Prints a line for a file that differs and returns whether it does (tools/release.py
    uses it too).
    """
    if target.exists() and target.read_text() == text:
        return False
    if not check:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    print(f"{'out of date' if check else 'written'}: {target.relative_to(ROOT)}")
    return True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="only report notebooks that differ from their sources",
    )
    args = parser.parse_args(argv)
    changed = [
        write_if_changed(target_of(source), render(build(source)), args.check)
        for source in sorted(SRC.rglob("*.py"))
    ]
    return 1 if (args.check and any(changed)) else 0


if __name__ == "__main__":
    sys.exit(main())
