"""An nbgrader ``Execute`` that survives hostile notebooks.

``nbgrader_config.py`` puts :class:`GuardedExecute` in place of nbgrader's
``Execute`` in ``Autograde.autograde_preprocessors``. It runs in the nbgrader
process, outside the learner's kernel, and adds per notebook:

- **kernel death** (``os._exit``, a segfault, out of memory): the cell that
  killed the kernel and every later cell get an error output and score 0; the
  cells before keep their scores and the run goes on with the next learner
  (plain nbgrader drops the whole submission).
- **a loop that ignores the interrupt**: nbgrader interrupts a cell after
  ``Execute.timeout`` seconds; when the kernel still does not answer, it is
  shut down and the rest of the notebook is marked "not run".
- **an output cap**: at most ``max_output_chars`` characters of output per cell
  are kept (nbgrader's own ``LimitOutput`` counts lines, and one 100 MB line is
  one line); receipt lines are kept beyond the cap.

It also hands the kernel a fresh receipt key (``receipts.GRADING_KEY_ENV``) and
passes it on in ``resources`` to :class:`~tformer_grading.guard.verify.VerifyReceipts`.
"""

from __future__ import annotations

import os
import secrets

from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbclient.util import ensure_async, run_sync
from nbformat.v4 import new_output
from nbgrader.preprocessors import Execute
from traitlets import Integer

from .receipts import GRADING_KEY_ENV, receipt_lines

RESOURCE_KEY = "tformer_grading_key"
_CAPPED = ("stream", "display_data", "execute_result", "error")


def error_output(ename: str, evalue: str):
    return new_output(
        "error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"]
    )


class GuardedExecute(Execute):
    """nbgrader's Execute, plus kernel-death recovery, an output cap and the receipt key."""

    max_output_chars = Integer(
        100_000, help="characters of output kept per cell; -1 for no limit"
    ).tag(config=True)

    def preprocess(self, nb, resources=None, km=None):
        key = secrets.token_hex(16)
        saved = os.environ.get(GRADING_KEY_ENV)
        # The kernel inherits the key; the checks remove it from the kernel's os.environ.
        os.environ[GRADING_KEY_ENV] = key
        self._stopped: str | None = None
        self._chars: dict[int, int] = {}
        self._dropped: dict[int, int] = {}
        try:
            nb, resources = super().preprocess(nb, resources, km=km)
        finally:
            if saved is None:
                os.environ.pop(GRADING_KEY_ENV, None)
            else:
                os.environ[GRADING_KEY_ENV] = saved
        resources[RESOURCE_KEY] = key
        return nb, resources

    async def async_execute_cell(
        self, cell, cell_index, execution_count=None, store_history=True
    ):
        if cell.cell_type != "code" or not cell.source.strip():
            return cell
        if self._stopped:
            cell.outputs = [
                error_output(
                    "NotRun", f"this cell was not run: {self._stopped}. It scores 0."
                )
            ]
            return cell
        try:
            cell = await super().async_execute_cell(
                cell, cell_index, execution_count, store_history
            )
        except DeadKernelError:
            self._stopped = "the kernel died in an earlier cell"
            cell.outputs.append(
                error_output(
                    "DeadKernelError",
                    "the kernel died while running this cell (os._exit, a crash, "
                    "or out of memory). This cell and every later cell score 0.",
                )
            )
        except CellTimeoutError:
            self._stopped = (
                "an earlier cell ran past the time limit and ignored the interrupt"
            )
            cell.outputs.append(
                error_output(
                    "CellTimeoutError",
                    f"this cell ran past the {self.timeout} s limit and did not "
                    "stop when interrupted, so the kernel was shut down. This cell and every later "
                    "cell score 0.",
                )
            )
            try:
                await ensure_async(self.km.shutdown_kernel(now=True))
            except Exception:  # already gone
                pass
        dropped = self._dropped.pop(cell_index, 0)
        if dropped:
            cell.outputs.append(
                new_output(
                    "stream",
                    name="stdout",
                    text=(
                        f"\n[grader: {dropped:,} characters of output dropped; at most "
                        f"{self.max_output_chars:,} are kept per cell]\n"
                    ),
                )
            )
        self.nb["cells"][cell_index] = cell
        return cell

    execute_cell = run_sync(async_execute_cell)

    def output(self, outs, msg, display_id, cell_index):
        if self.max_output_chars >= 0 and msg["msg_type"] in _CAPPED:
            msg = self._capped(msg, cell_index)
            if msg is None:
                return None
        return super().output(outs, msg, display_id, cell_index)

    def _capped(self, msg, cell_index):
        """``msg`` cut to what is left of this cell's output allowance, or None to drop it."""
        content, kind = msg["content"], msg["msg_type"]
        size = (
            len(content["text"])
            if kind == "stream"
            else len(str(content.get("data", content)))
        )
        used = self._chars.get(cell_index, 0)
        self._chars[cell_index] = used + size
        if used + size <= self.max_output_chars or kind == "error":
            return msg
        room = max(0, self.max_output_chars - used)
        if kind != "stream":
            self._dropped[cell_index] = self._dropped.get(cell_index, 0) + size
            return None
        text = content["text"]
        kept, receipts = text[:room], receipt_lines(text[room:])
        self._dropped[cell_index] = self._dropped.get(cell_index, 0) + len(text) - room
        if not kept and not receipts:
            return None
        joined = kept + ("\n" if kept and receipts else "") + receipts
        return {**msg, "content": {**content, "text": joined}}
