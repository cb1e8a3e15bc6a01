"""The judge's requests to the grading kernel, over the kernel's own channels.

:class:`~tformer_grading.guard.execute.GuardedExecute` runs the judge in a worker
thread while its event loop keeps the kernel's channels. Each request of the judge
(:class:`KernelLink.ask`, from that thread) is one comm message to the kernel, on a
comm the judge opens once per kernel (after one execution, out of the kernel's
history, that registers :func:`.agent.listen`'s target). A comm message, unlike an
execution, does not go through IPython's cell machinery: a request costs one to two
milliseconds whatever its size (an execution, 4 ms and 0.2 ms more a kilobyte). Its
answer is the one display output of type :data:`~.agent.MIME` the kernel sends while
handling it (:func:`.agent.serve`). Everything else it sends (the learner's prints
included) is read, counted by the kernel client's bounds, and dropped. The judge goes
on as soon as the answer comes; the rest of the request's messages, up to the kernel's
idle, are read before the next request or when the cell is judged (:func:`settle`).

Before its answer, the kernel may call back an object of the judge's that the
learner's code was given (a check's model): one display output of type
:data:`~.agent.CALLBACK`, which the judge answers in its own thread and replies to on
the kernel's stdin channel, as an ``input_reply``; then it reads on for the answer.

The judge gives up, and the cell scores 0, when the kernel answers not once but
never or twice, answers with anything but text, or is late: past the cell's time the
kernel is interrupted, and when it does not stop it is shut down, as a cell that ran
too long would be. A kernel that dies, or sends more than the client's bounds, ends
the request the same way.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import queue
import threading
import time
import uuid

from .agent import CALLBACK, MIME, TARGET
from .remote import JudgeError, KernelGone

_GRACE = 60.0  # seconds the judge's checks may run past the cell's time limit
_LISTEN = "__import__('tformer_grading.judge.agent', fromlist=['listen']).listen()"


def preload(sources) -> None:
    """Start importing the checks (and PyTorch) in the background when a test cell of
    ``sources`` will be judged: the import then overlaps the kernel's start instead
    of delaying the first judged cell by a second."""
    from .plan import plan

    if any(plan(source) for source in sources):
        threading.Thread(target=_warm, daemon=True).start()


def _warm() -> None:
    importlib.import_module("tformer_grading.judge.cells")
    # What PyTorch imports on the first autograd.grad given grad_outputs (sympy, a
    # third of a second): a check taking a gradient through the learner's code would
    # otherwise wait for it.
    importlib.import_module("torch.fx.experimental.symbolic_shapes")


async def judge_in_thread(executor, source: str, deadline: float, passed=None):
    """The judge's :class:`~.cells.Verdict` on a test cell of ``source``, run in a
    worker thread on ``executor``'s kernel; None when the judge does not judge such a
    cell. ``passed``: as :func:`.cells.judge`'s."""
    link = KernelLink(executor, asyncio.get_running_loop(), deadline)
    # Every request ends by the deadline; the grace is for the checks' own work, so
    # that a judge that never ends cannot hold the notebook's grading.
    grace = max(0.0, deadline - time.monotonic()) + _GRACE
    try:
        verdict = await asyncio.wait_for(
            asyncio.to_thread(_judge, source, link, passed), grace
        )
    except asyncio.TimeoutError:
        from .cells import Verdict

        # The thread may still ask: it must not read the next cell's messages.
        link.closed = True
        # Nor may the next cell wait for this request's idle, which it may read.
        if getattr(executor, "kc", None) is not None:
            executor.kc._tformer_judge_pending = None
        return Verdict(
            f"the grader could not judge this cell: its checks ran {_GRACE:.0f} s "
            "past the cell's time limit. This cell scores 0.",
            "",
        )
    try:
        await settle(executor, deadline)
    except JudgeError as exc:
        from .cells import unjudged

        return unjudged(exc)
    return verdict


def _judge(source: str, link, passed=None):
    from .cells import judge_cell  # imports the checks (and torch) on first use

    return judge_cell(source, link, passed)


class KernelLink:
    """``ask`` from the judge's thread; answered on ``loop`` by ``executor``'s kernel
    client, within ``deadline`` (a ``time.monotonic()`` value). While the kernel
    answers, it may call the judge's objects back: ``on_callback(text) -> text``
    (set by :class:`.remote.Kernel`) answers each such call, in the judge's thread,
    and its reply goes to the kernel's stdin channel."""

    def __init__(self, executor, loop: asyncio.AbstractEventLoop, deadline: float):
        self.executor, self.loop, self.deadline = executor, loop, deadline
        self.closed = False
        self.on_callback = None
        self._answering = False  # a call back is being answered

    def ask(self, request: str) -> str:
        if self.closed:
            raise JudgeError("the grader stopped judging this cell")
        if self._answering:
            # The kernel waits for the judge: asking it now would wait for ever.
            raise JudgeError("the grader's object asked the kernel while it waited")
        kind, text, msg_id = self._wait(
            ask_kernel(self.executor, request, self.deadline)
        )
        while kind == CALLBACK:
            try:
                self._answering = True
                reply = self.on_callback(text)
            except BaseException:
                # The kernel must not wait for a reply that will not come; what it
                # sends after this is read and dropped.
                self._wait(reply_kernel(self.executor, msg_id, None, self.deadline))
                raise
            finally:
                self._answering = False
            kind, text, _ = self._wait(
                reply_kernel(self.executor, msg_id, reply, self.deadline)
            )
        return text

    def _wait(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()


async def reply_kernel(executor, msg_id: str, reply: str | None, deadline: float):
    """Send ``reply`` to the kernel's call back during request ``msg_id``, and read on
    to the request's next answer or call back, as :func:`ask_kernel`. With no reply,
    the kernel's code is told the judge gave up, and the request's messages are left
    to read (:func:`settle`), without counting its answers; each later call back is
    told the same, so the kernel does not wait for the cell's time."""
    kc = executor.kc
    if reply is None:
        _give_up(kc)
        kc._tformer_judge_pending = (msg_id, False)
        return None
    kc.stdin_channel.send(kc.session.msg("input_reply", {"value": reply}))
    return await _answer(executor, msg_id, deadline)


def _give_up(kc) -> None:
    """Tell the kernel's code waiting on a call back that the judge has given up: it
    raises there, and the kernel goes on to its idle."""
    value = json.dumps({"raised": _GAVE_UP})
    kc.stdin_channel.send(kc.session.msg("input_reply", {"value": value}))


_GAVE_UP = {
    "$": "raised",
    "type": "RuntimeError",
    "message": "the grader stopped judging this cell",
}


async def ask_kernel(executor, request: str, deadline: float):
    """The kernel's one answer to ``request``, or its first call back, as (kind, text,
    the request's message id); JudgeError when there is neither in time."""
    kc = executor.kc
    if time.monotonic() >= deadline:
        raise JudgeError(
            "your code did not answer the grader in time (the cell's time limit)"
        )
    await settle(executor, deadline)
    comm = await _comm(executor, deadline)
    message = kc.session.msg(
        "comm_msg", {"comm_id": comm, "data": {"request": request}}
    )
    kc.shell_channel.send(message)
    return await _answer(executor, message["header"]["msg_id"], deadline)


async def _answer(executor, msg_id: str, deadline: float):
    kc = executor.kc
    answers, idle = await _outputs(executor, msg_id, deadline, until_answer=True)
    if len(answers) != 1 or not isinstance(answers[0][1], str):
        raise JudgeError(_answered(len(answers)))
    if not idle and answers[0][0] == MIME:
        # The rest of this request's messages (a second answer would be one) are read
        # before the next request, or when the judge is done with the cell: the
        # judge computes meanwhile. (A call back waits for its reply: nothing more.)
        kc._tformer_judge_pending = (msg_id, True)
    return (*answers[0], msg_id)


def _answered(times: int) -> str:
    return (
        f"the kernel answered the grader {times} times where it must answer once "
        "(has the notebook replaced or silenced the grader's code?)"
    )


async def settle(executor, deadline: float) -> None:
    """Read the last request's messages up to the kernel's idle; JudgeError when they
    hold another answer."""
    kc = executor.kc
    pending = getattr(kc, "_tformer_judge_pending", None)
    if pending is None:
        return
    kc._tformer_judge_pending = None
    msg_id, strict = pending
    more, _ = await _outputs(executor, msg_id, deadline)
    if more and strict:
        raise JudgeError(_answered(1 + len(more)))


async def _comm(executor, deadline: float) -> str:
    """The id of the judge's comm to this kernel, opened on first use."""
    kc = executor.kc
    opened = getattr(kc, "_tformer_judge_comm", None)
    if opened is not None:
        return opened
    msg_id = kc.execute(
        _LISTEN,
        silent=False,
        store_history=False,
        allow_stdin=False,
        stop_on_error=False,
    )
    await _outputs(executor, msg_id, deadline)
    await _drain_shell(kc, msg_id)
    comm = uuid.uuid4().hex
    message = kc.session.msg("comm_open", {"comm_id": comm, "target_name": TARGET})
    message["content"]["data"] = {}
    kc.shell_channel.send(message)
    await _outputs(executor, message["header"]["msg_id"], deadline)
    kc._tformer_judge_comm = comm
    return comm


async def _outputs(
    executor, msg_id: str, deadline: float, until_answer: bool = False
) -> tuple[list, bool]:
    """The judge's answers and the kernel's calls back, as (MIME or CALLBACK, text),
    among what the kernel sends for message ``msg_id``, read until the kernel is idle
    again (or, ``until_answer``, until the first of them), and whether the kernel's
    idle was read."""
    kc = executor.kc
    answers = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            await _stop_late(executor, msg_id)
        try:
            msg = await kc.get_iopub_msg(timeout=min(1.0, left))
        except queue.Empty:
            await _still_there(executor)
            continue
        if msg.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        content = msg.get("content", {})
        data = content.get("data", {}) if msg["msg_type"] == "display_data" else {}
        kind = next((k for k in (MIME, CALLBACK) if k in data), None)
        if kind is not None:
            answers.append((kind, data[kind]))
            if until_answer:
                return answers, False
            if kind == CALLBACK:  # past its answer, or after the judge gave up
                _give_up(kc)
        elif msg["msg_type"] == "status" and content.get("execution_state") == "idle":
            return answers, True


async def _still_there(executor) -> None:
    overrun = executor.kc.overrun() if hasattr(executor.kc, "overrun") else None
    if overrun:
        await executor._stop_if_overrun()
        raise KernelGone(f"the grader stopped the kernel: {overrun}")
    if not await executor.km.is_alive():
        executor._stopped = "the kernel died in an earlier cell"
        raise KernelGone(
            "the kernel died while the grader ran your code (os._exit, a crash, or "
            "out of memory)"
        )


async def _stop_late(executor, msg_id: str) -> None:
    """Interrupt a kernel still busy with the judge's request past the deadline (twice:
    an interrupt that comes before the request starts is lost); shut it down when it
    does not stop. Raises JudgeError either way."""
    why = "your code did not answer the grader in time (the cell's time limit)"
    for _ in range(2):
        await executor.km.interrupt_kernel()
        end = time.monotonic() + 2.5
        while time.monotonic() < end:
            try:
                msg = await executor.kc.get_iopub_msg(timeout=0.5)
            except queue.Empty:
                continue
            if (
                msg.get("parent_header", {}).get("msg_id") == msg_id
                and msg["msg_type"] == "status"
                and msg["content"].get("execution_state") == "idle"
            ):
                await _drain_shell(executor.kc, msg_id)  # an execution's reply
                raise JudgeError(why)
    executor._stopped = (
        "an earlier cell ran past the time limit and ignored the interrupt"
    )
    await executor.km.shutdown_kernel(now=True)
    raise KernelGone(
        why + ", and it ignored the interrupt, so the kernel was shut down"
    )


async def _drain_shell(kc, msg_id: str) -> None:
    """Read the execution's reply off the shell channel (it says nothing the judge
    needs; left there, it would wait for the next cell's reader)."""
    end = time.monotonic() + 5
    while time.monotonic() < end:
        try:
            msg = await kc.get_shell_msg(timeout=0.5)
        except queue.Empty:
            return
        if msg.get("parent_header", {}).get("msg_id") == msg_id:
            return
