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


# Bug (issue 32, measured on main at ac414e0): autograded notebooks of 42 MB and 31 MB
# went through the 2 MB cap. Cause: the cap counted a display's ``data`` and an
# error's message, not its display metadata or its exception's name. Guard: an output
# counts as the JSON it adds to the notebook.
def display(metadata: dict, data: str = "x") -> dict:
    return {
        "msg_type": "display_data",
        "content": {"data": {"text/plain": data}, "metadata": metadata},
    }


def test_display_metadata_counts_against_the_cap():
    ex = executor()
    assert ex._capped(display({"note": "y" * FLOOD}), 3) is None
    assert ex._dropped[3] >= FLOOD


def test_an_exception_name_counts_and_is_cut_but_stays_an_error():
    ex = executor()
    msg = {
        "msg_type": "error",
        "content": {"ename": "E" * FLOOD, "evalue": "boom", "traceback": ["boom"]},
    }
    content = ex._capped(msg, 3)["content"]
    assert len(content["ename"]) <= 200 and content["evalue"] == "boom"
    assert ex._dropped[3] > FLOOD - ex.max_output_chars


def test_an_honest_picture_with_its_metadata_is_kept_whole():
    ex = executor()
    msg = display({"image/png": {"width": 640, "height": 480}}, data="iVBOR" * 10_000)
    assert ex._capped(msg, 3) is msg and 3 not in ex._dropped


def test_what_is_kept_never_passes_the_notebook_cap():
    ex = executor()
    for i in range(100):
        ex._capped(display({"n": "m" * 60_000}, data="d" * 30_000), i)
    assert ex._notebook_chars <= ex.max_notebook_output_chars
    assert sum(ex._dropped.values()) > 0
