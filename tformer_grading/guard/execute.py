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
  and ``max_notebook_output_chars`` per notebook are kept, error messages and
  display updates included (nbgrader's own ``LimitOutput`` counts lines, and one
  100 MB line is one line); receipt lines are kept beyond the cap.
- **a time limit per notebook** (``notebook_timeout``): a notebook still running
  past it is not graded (:class:`NotGradable`), and the class report says so.
- **a sandbox** (``sandbox``): the kernel runs in bubblewrap
  (:mod:`tformer_grading.sandbox`); "required" refuses to grade without it,
  "auto" uses it where it can start, "off" runs the kernel as the grader's user.
- **the kernel is this interpreter's ipykernel**, whatever kernelspec the
  notebook names.

Before the notebook's first cell it runs, silently and outside the notebook's
history, :func:`tformer_grading.guard.bootstrap.start`: the checks are imported
and sealed before any learner code, and the fresh receipt key goes to them there
(never through the environment or a file). The key is passed on in ``resources``
to :class:`~tformer_grading.guard.verify.VerifyReceipts`.
"""

from __future__ import annotations

import secrets
import time

from jupyter_client import AsyncKernelManager
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbclient.util import ensure_async, run_sync
from nbformat.v4 import new_output
from nbgrader.preprocessors import Execute
from traitlets import Enum, Integer

from .receipts import receipt_lines

RESOURCE_KEY = "tformer_grading_key"
_CAPPED = ("stream", "display_data", "execute_result", "error")
_BOOTSTRAP = "import tformer_grading.guard.bootstrap as _b\n_b.start({key!r})\ndel _b"


class NotGradable(RuntimeError):
    """This notebook cannot be graded (the message says why); others still are."""


def error_output(ename: str, evalue: str):
    return new_output(
        "error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"]
    )


class GuardedExecute(Execute):
    """nbgrader's Execute, plus kernel-death recovery, output caps, a time limit per
    notebook, the sandbox and the receipt key."""

    max_output_chars = Integer(
        100_000, help="characters of output kept per cell; -1 for no limit"
    ).tag(config=True)
    max_notebook_output_chars = Integer(
        2_000_000, help="characters of output kept per notebook; -1 for no limit"
    ).tag(config=True)
    notebook_timeout = Integer(
        900, help="seconds a whole notebook may run before it is not graded; 0: none"
    ).tag(config=True)
    sandbox = Enum(
        ["required", "auto", "off"],
        "auto",
        help="run the kernel in bubblewrap: always (refuse without it), where it can "
        "start, or never",
    ).tag(config=True)

    def create_kernel_manager(self):
        from ..sandbox import availability

        self.kernel_name = "python3"  # never a kernelspec the notebook names
        problem = availability() if self.sandbox != "off" else "off"
        if problem and self.sandbox == "required":
            raise NotGradable(f"the sandbox is required and cannot start: {problem}")
        if problem:
            if self.sandbox == "auto":
                self.log.warning("grading without a sandbox: %s", problem)
            self.km = AsyncKernelManager(kernel_name="python3", config=self.config)
        else:
            from ..sandbox.kernel import SandboxedKernelManager

            self.km = SandboxedKernelManager(kernel_name="python3", config=self.config)
        return self.km

    def preprocess(self, nb, resources=None, km=None):
        self._key = secrets.token_hex(16)
        self._stopped: str | None = None
        self._booted = False
        self._chars: dict[int, int] = {}
        self._dropped: dict[int, int] = {}
        self._notebook_chars = 0
        self._cell_index = 0
        self._timeout = self.timeout
        self._deadline = time.monotonic() + (self.notebook_timeout or float("inf"))
        nb, resources = super().preprocess(nb, resources, km=km)
        resources[RESOURCE_KEY] = self._key
        return nb, resources

    async def _bootstrap(self) -> None:
        """Import the checks and hand them the key before any cell of the notebook."""
        self._booted = True
        msg_id = self.kc.execute(
            _BOOTSTRAP.format(key=self._key), silent=True, store_history=False
        )
        reply = await self.async_wait_for_reply(msg_id)
        content = (reply or {}).get("content", {})
        if content.get("status") != "ok":
            raise NotGradable(
                "the grader could not set up the kernel: "
                f"{content.get('ename')}: {content.get('evalue')}"
            )

    async def async_execute_cell(
        self, cell, cell_index, execution_count=None, store_history=True
    ):
        if cell.cell_type != "code" or not cell.source.strip():
            return cell
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise NotGradable(
                f"the notebook ran past its time limit of {self.notebook_timeout} s"
            )
        self.timeout = max(1, int(min(self._timeout or left, left)))
        self._cell_index = cell_index
        if not self._booted:
            await self._bootstrap()
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
            if time.monotonic() > self._deadline - 1:  # it was cut by the deadline
                raise NotGradable(
                    f"the notebook ran past its time limit of {self.notebook_timeout} s"
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
                        f"{self.max_output_chars:,} are kept per cell and "
                        f"{self.max_notebook_output_chars:,} per notebook]\n"
                    ),
                )
            )
        self.nb["cells"][cell_index] = cell
        return cell

    execute_cell = run_sync(async_execute_cell)

    def output(self, outs, msg, display_id, cell_index):
        if msg["msg_type"] in _CAPPED:
            msg = self._capped(msg, cell_index)
            if msg is None:
                return None
        return super().output(outs, msg, display_id, cell_index)

    def _update_display_id(self, display_id, msg):
        # An update rewrites an earlier output in place: it counts against the cell
        # running now, like any output, and past the cap it is dropped.
        if self._capped(msg, self._cell_index) is not None:
            super()._update_display_id(display_id, msg)

    def _room(self, cell_index: int) -> int:
        """Characters this cell may still add (the cell's and the notebook's caps)."""
        rooms = []
        if self.max_output_chars >= 0:
            rooms.append(self.max_output_chars - self._chars.get(cell_index, 0))
        if self.max_notebook_output_chars >= 0:
            rooms.append(self.max_notebook_output_chars - self._notebook_chars)
        return max(0, min(rooms)) if rooms else -1

    def _capped(self, msg, cell_index):
        """``msg`` cut to what is left of the output allowance, or None to drop it."""
        content, kind = msg["content"], msg["msg_type"]
        if kind == "stream":
            size = len(content["text"])
        elif kind == "error":
            size = len(content.get("evalue", "")) + sum(
                len(line) for line in content.get("traceback", [])
            )
        else:
            size = len(str(content.get("data", content)))
        room = self._room(cell_index)
        self._chars[cell_index] = self._chars.get(cell_index, 0) + size
        # The notebook's allowance counts what is kept, so one flood does not silence
        # the cells after it.
        self._notebook_chars += size if room < 0 else min(size, room)
        if room < 0 or size <= room:
            return msg
        self._dropped[cell_index] = self._dropped.get(cell_index, 0) + size - room
        if kind == "error":  # still an error (the cell scores 0), its message cut
            evalue = content.get("evalue", "")[: max(room, 200)]
            return {
                **msg,
                "content": {**content, "evalue": evalue, "traceback": [evalue]},
            }
        if kind != "stream":
            self._dropped[cell_index] += room
            return None
        text = content["text"]
        kept, receipts = text[:room], receipt_lines(text[room:])
        if not kept and not receipts:
            return None
        joined = kept + ("\n" if kept and receipts else "") + receipts
        return {**msg, "content": {**content, "text": joined}}
