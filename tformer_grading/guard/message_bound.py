"""A kernel client that reads a bounded amount of what a kernel sends.

The grader's side of the sandbox: whatever the learner's kernel sends, the grader
holds at most ``max_message_bytes`` of one message and reads at most
``max_notebook_bytes`` in all, so one notebook cannot grow the grading process.

- **Per message**, ZeroMQ's own ``MAXMSGSIZE`` on every socket of the client: a
  larger message is refused as it arrives, before it is held in memory, and ZeroMQ
  drops the connection it came on. (It does the same with a message it has no
  memory for, past the grading worker's own limit.)
- **Per notebook**, every byte read on the shell, iopub, stdin and control channels
  is counted, comm (widget) messages included.

Either way the client reports an :meth:`BoundedKernelClient.overrun`, and
:class:`~tformer_grading.guard.execute.GuardedExecute` stops the kernel (not
itself): the cell running scores 0, the rest of the notebook is not run, and the
cells before keep their scores.

Example (what ``GuardedExecute`` does; ``km`` is a started kernel manager)::

    km.client_factory = BoundedKernelClient
    kc = km.client()          # sockets made from here on carry the bound
    kc.start_channels()
    ...
    kc.overrun()              # None, or why the kernel must be stopped
"""

from __future__ import annotations

import zmq
import zmq.asyncio
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from traitlets import Integer, Type

_CHANNELS = ("shell", "iopub", "stdin", "control")


class Meter:
    """Bytes read from one kernel, and the connections it broke."""

    def __init__(self) -> None:
        self.received = 0
        self._monitors: list[zmq.Socket] = []
        self.disconnected = False

    def watch(self, socket: zmq.asyncio.Socket, name: str) -> None:
        """Notice when ``socket`` loses its connection (as a message over the
        per-message bound makes ZeroMQ drop it)."""
        address = f"inproc://tformer-monitor-{id(self)}-{name}"
        socket.monitor(address, zmq.EVENT_DISCONNECTED)
        context = zmq.Context.shadow(socket.context.underlying)
        monitor = context.socket(zmq.PAIR)
        monitor.connect(address)
        self._monitors.append(monitor)

    def saw_disconnect(self) -> bool:
        for monitor in self._monitors:
            if monitor.poll(0):
                self.disconnected = True
        return self.disconnected

    def close(self) -> None:
        for monitor in self._monitors:
            monitor.close(linger=0)
        self._monitors = []


class MeteredChannel(AsyncZMQSocketChannel):
    """A channel that adds what it reads to its client's :class:`Meter`."""

    meter: Meter | None = None

    async def _recv(self, **kwargs):
        frames = await self.socket.recv_multipart(**kwargs)
        if self.meter is not None:
            self.meter.received += sum(len(frame) for frame in frames)
        _, message = self.session.feed_identities(frames)
        return self.session.deserialize(message)


class BoundedKernelClient(AsyncKernelClient):
    """An ``AsyncKernelClient`` whose reads are bounded per message and in all."""

    max_message_bytes = Integer(
        32 << 20, help="the largest message the grader reads from a kernel (bytes)"
    ).tag(config=True)
    max_notebook_bytes = Integer(
        512 << 20, help="bytes the grader reads from one notebook's kernel in all"
    ).tag(config=True)

    shell_channel_class = Type(MeteredChannel)
    iopub_channel_class = Type(MeteredChannel)
    stdin_channel_class = Type(MeteredChannel)
    control_channel_class = Type(MeteredChannel)
    meter: Meter | None = None  # from start_channels on

    def _context_default(self) -> zmq.asyncio.Context:
        context = super()._context_default()
        # Every socket this context makes from now on refuses larger messages.
        context.setsockopt(zmq.MAXMSGSIZE, self.max_message_bytes)
        return context

    def start_channels(self, *args, **kwargs) -> None:
        self.meter = Meter()
        super().start_channels(*args, **kwargs)
        for name in _CHANNELS:
            channel = getattr(self, f"{name}_channel")
            if channel is not None and channel.socket is not None:
                channel.meter = self.meter
                self.meter.watch(channel.socket, name)

    def stop_channels(self) -> None:
        if self.meter is not None:
            self.meter.close()
        super().stop_channels()

    def overrun(self) -> str | None:
        """Why this kernel must be stopped, or None while it keeps within bounds."""
        meter = self.meter
        if meter is None:
            return None
        if meter.received > self.max_notebook_bytes:
            return (
                f"the notebook sent the grader more than "
                f"{self.max_notebook_bytes >> 20} MB of messages"
            )
        if meter.saw_disconnect():
            bound = (
                f"over {self.max_message_bytes >> 20} MB"
                if self.max_message_bytes > 0
                else "too large"
            )
            return (
                "the kernel's connection to the grader broke (a message "
                f"{bound} for the grader to hold, or the kernel closed its sockets)"
            )
        return None
