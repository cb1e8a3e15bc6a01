"""tformer_grading/guard/output_cap.py: an error that reaches the notebook by nbgrader's
hook is capped like one that comes on iopub.

Bug (found by a full suite run, 2026-12-06): the hostile learner who raises a
20,000,000-character ValueError was graded into a 40 MB notebook and a 21 MB feedback
page, in one run of many. Cause, read in that notebook: its one error output had
IPython's four-line traceback from the execute reply, which nbgrader's
``Execute.on_cell_executed`` appends uncapped when no error of that name came on iopub
(iopub fell behind the reply). Guard: the hook's error goes through the same cap; this
test calls the hook as nbclient does, so it needs no race to fail.
"""

from __future__ import annotations

from nbformat.v4 import new_code_cell

from tformer_grading.guard.output_cap import CappedExecute

FLOOD = 20_000_000


def executor() -> CappedExecute:
    ex = CappedExecute()
    ex._chars, ex._dropped, ex._notebook_chars, ex._cell_index = {}, {}, 0, 3
    return ex


def reply(evalue: str) -> dict:
    return {
        "content": {
            "status": "error",
            "ename": "ValueError",
            "evalue": evalue,
            "traceback": ["---", "Cell In[3], line 6", "ValueError: " + evalue],
        }
    }


def test_an_error_only_the_reply_carries_is_capped():
    ex, cell = executor(), new_code_cell("raise ValueError('z' * 20_000_000)")
    ex.on_cell_executed(cell=cell, cell_index=3, execute_reply=reply("z" * FLOOD))
    (error,) = cell.outputs
    assert error.output_type == "error" and error.ename == "ValueError"
    kept = len(error.evalue) + sum(len(line) for line in error.traceback)
    assert kept <= 2 * ex.max_output_chars, kept
    assert ex._dropped[3] > FLOOD - ex.max_output_chars  # the cell says what it lost


def test_a_small_error_only_the_reply_carries_is_kept_whole():
    ex, cell = executor(), new_code_cell("1 / 0")
    ex.on_cell_executed(cell=cell, cell_index=3, execute_reply=reply("boom"))
    (error,) = cell.outputs
    assert error.evalue == "boom" and error.traceback[-1] == "ValueError: boom"
    assert 3 not in ex._dropped
