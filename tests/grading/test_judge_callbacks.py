"""Chapter 6's greedy_decode, self-graded over a real sandboxed kernel: the judge gives
the learner's loop its recording model, which stays in the grader's process, and the
loop calls it back across the kernel's stdin channel (tformer_grading/judge/agent.py's
JudgeObject, link.py's KernelLink.ask). tests/judge/test_callbacks.py checks the same
calls with a link in this process."""

import shutil

import nbformat
import pytest
from course import ROOT

from tformer_grading.selfgrade import grade_notebook

pytestmark = pytest.mark.slow

CHAPTER = "ch06_training"
GREEDY = ("test_greedy_decode", "test_greedy_by_hand")

# Right only when the course's checks are on the stack, as in the kernel's own run of
# the test cell; the judge calls it from its agent instead.
SNIFFS = """
_honest_greedy = greedy_decode


def greedy_decode(model, src, max_len, bos_id, eos_id, pad_id):
    import inspect

    out = _honest_greedy(model, src, max_len, bos_id, eos_id, pad_id)
    if any("tformer_grading/checks" in f.filename for f in inspect.stack()):
        return out
    return out.flip(1)
"""

# Outside the checks, it calls the grader's model back with a forged request: an object
# number the grader never gave.
FORGES = """
_honest_greedy = greedy_decode


def greedy_decode(model, src, max_len, bos_id, eos_id, pad_id):
    import inspect
    import json

    if not any("tformer_grading/checks" in f.filename for f in inspect.stack()):
        forged = {"op": "call", "id": 77, "name": "decode", "args": [], "kwargs": {}}
        model._call_back(json.dumps(forged))
    return _honest_greedy(model, src, max_len, bos_id, eos_id, pad_id)
"""


def _graded(tmp_path, extra: str, between: bool = False):
    """The chapter's solution, self-graded with ``extra`` after its greedy_decode,
    or (``between``) in a cell of its own between the two greedy test cells."""
    course = tmp_path / "course"
    (course / "book" / CHAPTER).mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "solutions" / CHAPTER, course / "solutions" / CHAPTER)
    nb = nbformat.read(ROOT / "solutions" / CHAPTER / "exercise.ipynb", as_version=4)
    if between:
        at = next(
            i
            for i, c in enumerate(nb.cells)
            if c.metadata.get("nbgrader", {}).get("grade_id") == GREEDY[0]
        )
        nb.cells.insert(at + 1, nbformat.v4.new_code_cell(extra))
    else:
        cell = next(c for c in nb.cells if "def greedy_decode" in c.source)
        cell.source += "\n" + extra
    mine = course / "book" / CHAPTER / "mine.ipynb"
    nbformat.write(nb, mine)
    result = grade_notebook(mine)
    return {c.grade_id: c for c in result.cells}


def test_a_loop_right_only_under_the_kernels_checks_scores_nothing(tmp_path):
    cells = _graded(tmp_path, SNIFFS)
    for name in GREEDY:
        assert cells[name].score == 0, name
        assert "outside your notebook's kernel" in cells[name].diagnosis
        assert "'output without the leading BOS'" in cells[name].diagnosis
    others = [c for name, c in cells.items() if name not in GREEDY]
    assert others and all(c.score == c.max_score for c in others)


def test_a_forged_call_back_scores_nothing_and_the_kernel_goes_on(tmp_path):
    cells = _graded(tmp_path, FORGES)
    for name in GREEDY:  # the second cell runs after the first's forged call
        assert cells[name].score == 0, name
        assert "the kernel's call to the grader is not valid" in cells[name].diagnosis
    others = [c for name, c in cells.items() if name not in GREEDY]
    assert others and all(c.score == c.max_score for c in others)


def test_a_learner_cell_between_two_test_cells_has_the_second_measured_again(
    tmp_path,
):
    """The by-hand cell after test_greedy_decode maps to the same check, which the
    grader does not run again while no learner code ran in between
    (GuardedExecute._passed); a learner cell in between makes it measure again."""
    cells = _graded(tmp_path, SNIFFS, between=True)
    assert cells[GREEDY[0]].score == cells[GREEDY[0]].max_score
    assert cells[GREEDY[1]].score == 0
    assert "outside your notebook's kernel" in cells[GREEDY[1]].diagnosis
