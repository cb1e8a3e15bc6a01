"""The instructors page says how many graded test cells the judge decides: the count
is the judge's own reading of the course's notebooks (tformer_grading/judge/plan.py),
so that the page cannot promise more cells than the judge judges."""

import re
from pathlib import Path

import nbformat

from tformer_grading.judge.plan import plan

ROOT = Path(__file__).resolve().parents[2]


def _test_cells():
    for path in sorted((ROOT / "solutions").glob("*/exercise.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            grading = cell.metadata.get("nbgrader", {})
            if grading.get("grade") and not grading.get("solution"):
                yield cell.source


def test_the_instructors_page_counts_the_cells_the_judge_decides():
    sources = list(_test_cells())
    judged = sum(plan(source) is not None for source in sources)
    page = " ".join((ROOT / "book" / "instructors.md").read_text().split())
    said = re.search(r"(\d+) of the course's (\d+) graded test cells", page)
    assert said, "the page no longer says how many cells are judged"
    assert (int(said[1]), int(said[2])) == (judged, len(sources))
