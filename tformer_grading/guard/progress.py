"""The guarded executor that also reports each graded cell as it finishes.

A self-grade (:mod:`tformer_grading.autograde_one`) uses it in place of
:class:`~tformer_grading.guard.execute.GuardedExecute`; the lines it prints are read by
:func:`tformer_grading.progress.parse`.
"""

from __future__ import annotations

import sys
import time

from nbclient.util import run_sync

from ..progress import MARK, unanswered
from .execute import GuardedExecute


class ProgressExecute(GuardedExecute):
    """The guarded executor, printing a :data:`MARK` line after each graded cell."""

    async def async_execute_cell(
        self, cell, cell_index, execution_count=None, store_history=True
    ):
        started = time.perf_counter()
        cell = await super().async_execute_cell(
            cell, cell_index, execution_count, store_history
        )
        meta = cell.get("metadata", {}).get("nbgrader", {})
        # An answer cell that runs the placeholder at top level leaves the check after
        # it failing on a missing name: that check's cell is the one not answered yet.
        self._placeholder_ran = getattr(self, "_placeholder_ran", False) or (
            not meta.get("grade") and unanswered(cell)
        )
        if meta.get("grade") and cell.get("cell_type") == "code":
            failed = any(o.get("output_type") == "error" for o in cell.outputs)
            blank = failed and (unanswered(cell) or self._placeholder_ran)
            self._placeholder_ran = False
            seconds = time.perf_counter() - started
            fields = (meta["grade_id"], int(failed), int(blank), seconds)
            sys.stdout.write(MARK + "\t".join(map(str, fields)) + "\n")
            sys.stdout.flush()
        return cell

    # nbconvert runs each cell through the synchronous name, bound in the base class to
    # the base's coroutine: bind it to this one.
    execute_cell = run_sync(async_execute_cell)
