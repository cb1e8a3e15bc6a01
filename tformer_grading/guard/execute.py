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
- **an output cap** (:class:`~tformer_grading.guard.output_cap.CappedExecute`,
  its base class): per cell and per notebook, error messages and display updates
  included.
- **bounded reading**: the kernel client is a
  :class:`~tformer_grading.guard.message_bound.BoundedKernelClient` (a bound per
  message and per notebook); past either, the kernel is stopped and the rest of the
  notebook is marked "not run". Widget (comm) state is not kept: it is not graded.
- **a time limit per notebook** (``notebook_timeout``): a notebook still running
  past it is not graded (:class:`NotGradable`), and the class report says so.
- **a sandbox** (``sandbox``): the kernel runs in bubblewrap
  (:mod:`tformer_grading.sandbox`); "required" refuses to grade without it,
  "auto" uses it where it can start, "off" runs the kernel as the grader's user.
- **the kernel is this interpreter's ipykernel**, whatever kernelspec the
  notebook names, and it is killed after the last cell (``shutdown_kernel``
  "immediate": a graceful exit only waits for the learner's ``atexit`` hooks).

Before the notebook's first cell it runs, silently and outside the notebook's
history, :func:`tformer_grading.guard.bootstrap.start`: the checks are imported
and sealed before any learner code, and the fresh receipt key goes to them there
(never through the environment or a file). The key is passed on in ``resources``
to :class:`~tformer_grading.guard.verify.VerifyReceipts`.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time

from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbclient.util import ensure_async, run_sync
from nbformat.v4 import new_output
from traitlets import Bool, Enum, Integer, default

from ..judge.link import judge_in_thread, preload
from .message_bound import BoundedKernelClient
from .output_cap import CappedExecute

RESOURCE_KEY = "tformer_grading_key"
JUDGED_KEY = "tformer_judged_cells"  # grade ids the judge decided
_BOOTSTRAP = "import tformer_grading.guard.bootstrap as _b\n_b.start({key!r})\ndel _b"


def graded_test_cell(cell) -> bool:
    """A code cell nbgrader scores by its checks (graded, not an answer)."""
    meta = cell.metadata.get("nbgrader", {})
    return (
        cell.cell_type == "code"
        and bool(meta.get("grade"))
        and not meta.get("solution")
    )


class NotGradable(RuntimeError):
    """This notebook cannot be graded (the message says why); others still are."""


def error_output(ename: str, evalue: str):
    return new_output(
        "error", ename=ename, evalue=evalue, traceback=[f"{ename}: {evalue}"]
    )


class GuardedExecute(CappedExecute):
    """nbgrader's Execute with capped output (:class:`CappedExecute`), plus kernel-death
    recovery, a time limit per notebook, the sandbox and the receipt key."""

    notebook_timeout = Integer(
        900, help="seconds a whole notebook may run before it is not graded; 0: none"
    ).tag(config=True)
    sandbox = Enum(
        ["required", "auto", "off"],
        "auto",
        help="run the kernel in bubblewrap: always (refuse without it), where it can "
        "start, or never",
    ).tag(config=True)

    judge = Bool(
        help="judge graded test cells in this process too (tformer_grading.judge): a "
        "cell scores only when the judge's run of its checks passes. Default: on, "
        "unless the environment says TFORMER_JUDGE=off (the benchmarks' baseline)",
    ).tag(config=True)

    # Widget state is not graded; kept whole, a comm flood grew the grader by 5 GB.
    store_widget_state = Bool(False).tag(config=True)

    @default("judge")
    def _judge_unless_switched_off(self):
        return os.environ.get("TFORMER_JUDGE", "on") != "off"

    @default("shutdown_kernel")
    def _kill_after_the_last_cell(self):
        # Nothing a kernel does after the last cell counts (a learner's atexit hooks
        # included), and a kernel that imported PyTorch takes about a second to exit.
        return "immediate"

    def create_kernel_manager(self):
        from ..sandbox import SandboxUnavailable
        from ..sandbox.kernel import kernel_manager

        self.kernel_name = "python3"  # never a kernelspec the notebook names
        try:
            self.km = kernel_manager(self.sandbox, self.config, self.log)
        except SandboxUnavailable as exc:
            raise NotGradable(str(exc)) from None
        self.km.client_factory = BoundedKernelClient
        return self.km

    def handle_comm_msg(self, outs, msg, cell_index) -> None:
        """Comm (widget) messages are read and counted (the client's bound), not kept:
        an Output widget's outputs then land in the cell, where they are capped."""

    async def _async_check_alive(self) -> None:
        # nbclient calls this every second while a cell runs: a kernel past the
        # client's bounds is stopped here, and the cell ends as if it had died.
        await self._stop_if_overrun()
        await super()._async_check_alive()

    async def _stop_if_overrun(self) -> None:
        overrun = self.kc.overrun() if hasattr(self.kc, "overrun") else None
        if not overrun or self._overrun:
            return
        # A kernel that dies closes its sockets too: only one still alive a moment
        # after is stopped for the bound (a dead one is reported as dead).
        for wait in (0, 0.5):
            await asyncio.sleep(wait)
            if not await ensure_async(self.km.is_alive()):
                return
        self._overrun = overrun
        self._stopped = f"in an earlier cell, {overrun}"
        try:
            await ensure_async(self.km.shutdown_kernel(now=True))
        except Exception:  # noqa: BLE001, S110 - already gone
            pass

    def preprocess(self, nb, resources=None, km=None):
        self._key = secrets.token_hex(16)
        self._stopped: str | None = None
        self._overrun: str | None = None
        self._booted = False
        self._judged: set[str] = set()
        # The judge's check calls that passed since the learner's code last ran: a
        # by-hand cell after the behaviour cell it maps to is not measured twice.
        self._passed: set = set()
        if self.judge:
            preload(c.source for c in nb.cells if graded_test_cell(c))
        self._deadline = time.monotonic() + (self.notebook_timeout or float("inf"))
        nb, resources = super().preprocess(nb, resources, km=km)
        resources[RESOURCE_KEY] = self._key
        resources[JUDGED_KEY] = set(self._judged)
        return nb, resources

    def _get_timeout(self, cell):
        """A cell's time limit, cut to what is left of the notebook's."""
        timeout = super()._get_timeout(cell)
        left = self._deadline - time.monotonic()
        if left == float("inf"):
            return timeout
        left = max(1, int(left))
        return left if timeout is None else min(timeout, left)

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
        if not self._booted:
            await self._bootstrap()
        if not graded_test_cell(cell):
            self._passed.clear()  # the learner's code may change what passed
        await self._stop_if_overrun()  # a flood in a cell too quick to be caught
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
            await self._judge_cell(cell)
        except DeadKernelError:
            if self._overrun:  # stopped by _stop_if_overrun, which says why
                why = (
                    f"the grader stopped the kernel in this cell: {self._overrun}. "
                    "This cell and every later cell score 0."
                )
                cell.outputs.append(error_output("KernelStopped", why))
            else:
                self._stopped = "the kernel died in an earlier cell"
                cell.outputs.append(
                    error_output(
                        "DeadKernelError",
                        "the kernel died while running this cell (os._exit, a "
                        "crash, or out of memory). This cell and every later cell "
                        "score 0.",
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
                    "stop when interrupted, so the kernel was shut down. This cell "
                    "and every later cell score 0.",
                )
            )
            try:
                await ensure_async(self.km.shutdown_kernel(now=True))
            except Exception:  # noqa: BLE001, S110 - already gone
                pass
        self.nb["cells"][cell_index] = cell
        return cell

    async def _judge_cell(self, cell) -> None:
        """Run a graded test cell's checks again in this process (the judge), on the
        learner's code in the kernel; a failure there zeroes the cell. A cell whose
        kernel run failed scores 0 already, and is not judged."""
        if (
            not self.judge
            or not graded_test_cell(cell)
            or any(o.output_type == "error" for o in cell.outputs)
        ):
            return
        limit = self.timeout if self.timeout and self.timeout > 0 else 60
        deadline = min(self._deadline, time.monotonic() + limit)
        verdict = await judge_in_thread(self, cell.source, deadline, self._passed)
        if verdict is None:  # not a cell the judge judges (yet): receipts decide
            return
        self._judged.add(cell.metadata["nbgrader"].get("grade_id"))
        if verdict.failure is not None:
            cell.outputs.append(error_output("CheckFailure", verdict.failure))

    execute_cell = run_sync(async_execute_cell)
