"""The grader's side of the guards: an nbgrader ``Execute`` that survives hostile notebooks.

``nbgrader_config.py`` puts :class:`GuardedExecute` in place of nbgrader's
``Execute`` in ``Autograde.autograde_preprocessors``. It runs in the nbgrader
process (outside the learner's kernel) and adds, per notebook:

- **kernel death** (``os._exit``, a segfault, running out of memory): the cell
  that killed the kernel and every later cell get an error output and score 0;
  the cells before keep their scores and the run goes on with the next learner
  (plain nbgrader drops the whole submission).
- **a loop that ignores the interrupt**: nbgrader interrupts a cell after
  ``Execute.timeout`` seconds; when the kernel still does not answer, the kernel
  is shut down and the rest of the notebook is marked "not run".
- **output limit**: at most ``max_output_chars`` characters of output per cell
  are kept (nbgrader's own ``LimitOutput`` counts lines, and one 100 MB line is
  one line); receipt lines are kept beyond the limit.
- **receipts**: a fresh key is put in the kernel's environment; each success
  line a check prints is signed with it (``tformer_ref.checks.core.passed``).
  A graded test cell that raised nothing but shows fewer valid receipts than the
  check calls in its (restored) source gets an error output and scores 0: its
  checks were replaced, skipped or silenced.

This module imports nbgrader; the kernel side never imports it.
"""
from __future__ import annotations

import os
import re
import secrets

from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbclient.util import ensure_async, run_sync
from nbformat.v4 import new_output
from nbgrader.preprocessors import Execute
from traitlets import Integer

from .checks.core import GRADING_KEY_ENV, RECEIPT_PATTERN, receipt_mac

_RECEIPT = re.compile(RECEIPT_PATTERN, re.M)
_CHECK_CALL = re.compile(r"\bcheck_\w+\s*\(")


def _error(ename: str, evalue: str):
    return new_output("error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"])


def expected_receipts(source: str) -> int:
    """How many check calls a test cell's source makes (comments ignored): each must print a receipt."""
    code = "\n".join(line.split("#", 1)[0] for line in source.splitlines())
    return len(_CHECK_CALL.findall(code))


def valid_receipts(text: str, key: str) -> list[int]:
    """The numbers of the correctly signed success lines in ``text``."""
    return [int(n) for line, n, mac in _RECEIPT.findall(text) if secrets.compare_digest(mac, receipt_mac(key, int(n), line))]


class GuardedExecute(Execute):
    """nbgrader's Execute, plus kernel-death recovery, an output limit and receipt verification."""

    max_output_chars = Integer(100_000, help="characters of output kept per cell; -1 for no limit").tag(config=True)

    def preprocess(self, nb, resources=None, km=None):
        key = secrets.token_hex(16)
        saved = os.environ.get(GRADING_KEY_ENV)
        os.environ[GRADING_KEY_ENV] = key  # the kernel inherits it; the check package removes it from os.environ
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
        self._verify_receipts(nb, key)
        return nb, resources

    async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
        if cell.cell_type != "code" or not cell.source.strip():
            return cell
        if self._stopped:
            cell.outputs = [_error("NotRun", f"this cell was not run: {self._stopped}. It scores 0.")]
            return cell
        try:
            cell = await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        except DeadKernelError:
            self._stopped = "the kernel died in an earlier cell"
            cell.outputs.append(_error(
                "DeadKernelError", "the kernel died while running this cell (os._exit, a crash, or out of memory). "
                "This cell and every later cell score 0."))
        except CellTimeoutError:
            self._stopped = "an earlier cell ran past the time limit and ignored the interrupt"
            cell.outputs.append(_error(
                "CellTimeoutError", f"this cell ran past the {self.timeout} s limit and did not stop when interrupted, "
                "so the kernel was shut down. This cell and every later cell score 0."))
            try:
                await ensure_async(self.km.shutdown_kernel(now=True))
            except Exception:  # already gone
                pass
        dropped = self._dropped.pop(cell_index, 0)
        if dropped:
            cell.outputs.append(new_output("stream", name="stdout", text=(
                f"\n[grader: {dropped:,} characters of output dropped; at most {self.max_output_chars:,} are kept per cell]\n")))
        self.nb["cells"][cell_index] = cell
        return cell

    execute_cell = run_sync(async_execute_cell)

    def output(self, outs, msg, display_id, cell_index):
        if self.max_output_chars >= 0 and msg["msg_type"] in ("stream", "display_data", "execute_result", "error"):
            content = msg["content"]
            size = len(content["text"]) if msg["msg_type"] == "stream" else len(str(content.get("data", content)))
            used = self._chars.get(cell_index, 0)
            self._chars[cell_index] = used + size
            if used + size > self.max_output_chars and msg["msg_type"] != "error":
                room = max(0, self.max_output_chars - used)
                if msg["msg_type"] != "stream":
                    self._dropped[cell_index] = self._dropped.get(cell_index, 0) + size
                    return None
                text = content["text"]
                kept = text[:room]
                receipts = "".join(m.group(0) + "\n" for m in _RECEIPT.finditer(text[room:])) if "[grader receipt" in text else ""
                self._dropped[cell_index] = self._dropped.get(cell_index, 0) + len(text) - room
                if not kept and not receipts:
                    return None
                msg = {**msg, "content": {**content, "text": kept + ("\n" if kept and receipts else "") + receipts}}
        return super().output(outs, msg, display_id, cell_index)

    def _verify_receipts(self, nb, key: str) -> None:
        seen: set[int] = set()
        for cell in nb.cells:
            meta = cell.metadata.get("nbgrader", {})
            if cell.cell_type != "code" or not meta.get("grade") or meta.get("solution"):
                continue
            if any(o.output_type == "error" for o in cell.outputs):
                continue  # already scores 0
            text = "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream" and o.name == "stdout")
            numbers = [n for n in valid_receipts(text, key) if n not in seen]
            seen.update(numbers)
            want = expected_receipts(cell.source)
            if len(set(numbers)) < want:
                cell.outputs.append(_error(
                    "GradingIntegrityError",
                    f"this test cell makes {want} check call(s) but only {len(set(numbers))} reported a verified "
                    "success: its checks were replaced, skipped or silenced by the notebook's code. It scores 0."))
