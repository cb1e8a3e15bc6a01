"""A Jupyter kernel manager whose kernel runs in a bubblewrap sandbox.

The kernel talks to the grader over Unix sockets (ZeroMQ's ``ipc`` transport)
that it binds in its own scratch space; the grader reaches them through
``/proc/<sandbox pid>/root``, so no folder of the host's is writable from inside. In
its own network namespace the kernel can reach no TCP port, the grader's included,
and no other kernel's connection file is in its view. Its kernelspec is never read
from the notebook: it is this interpreter's ipykernel. An interrupt is a message on
the control channel, since a signal to the sandbox's outer process does not reach
the kernel inside.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from jupyter_client import AsyncKernelManager
from traitlets import Any

from . import bwrap


def kernel_manager(mode: str, config, log) -> AsyncKernelManager:
    """The kernel manager for sandbox ``mode`` ("required", "auto" or "off"): sandboxed
    where bubblewrap can start; else plain ("auto", with a warning in the grader's log)
    or :class:`bwrap.SandboxUnavailable` ("required")."""
    problem = bwrap.availability() if mode != "off" else "off"
    if not problem:
        return SandboxedKernelManager(kernel_name="python3", config=config)
    if mode == "required":
        raise bwrap.SandboxUnavailable(
            f"the sandbox is required and cannot start: {problem}"
        )
    if mode == "auto":
        log.warning("grading without a sandbox: %s", problem)
    return AsyncKernelManager(kernel_name="python3", config=config)


class SandboxedKernelManager(AsyncKernelManager):
    """An ``AsyncKernelManager`` that starts ipykernel inside :func:`bwrap.command`."""

    limits = Any(bwrap.Limits(), help="a sandbox.Limits").tag(config=False)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._root = Path(tempfile.mkdtemp(prefix="tformer-sandbox-"))
        self._private = bwrap.private_dir(self._root)
        self.transport = "ipc"
        # The connection file says where the kernel binds, inside its sandbox; once
        # it runs, the grader's own sockets connect through /proc (see below).
        self.ip = bwrap.INNER_SOCKETS
        self.connection_file = str(self._private / "kernel.json")

    def format_kernel_cmd(self, extra_arguments=None) -> list[str]:
        return [
            sys.executable,
            "-m",
            "ipykernel_launcher",
            "-f",
            bwrap.INNER_CONNECTION_FILE,
            *(extra_arguments or []),
        ]

    async def _async_launch_kernel(self, kernel_cmd: list[str], **kw) -> None:
        workdir = str(Path(kw.get("cwd") or os.getcwd()).resolve())
        bwrap.readable_by_sandbox(Path(self.connection_file))
        info_read, info_write = os.pipe()
        kw.update(
            cwd=str(self._private),
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(info_write,),
        )
        cmd = bwrap.command(
            kernel_cmd,
            workdir=workdir,
            connection_file=self.connection_file,
            limits=self.limits,
            info_fd=info_write,
        )
        try:
            await super()._async_launch_kernel(cmd, **kw)
        finally:
            os.close(info_write)
        try:
            pid = await asyncio.to_thread(_sandbox_pid, info_read)
        finally:
            os.close(info_read)
        self.ip = bwrap.socket_prefix(pid)

    async def _async_interrupt_kernel(self) -> None:
        msg = self.session.msg("interrupt_request", content={})
        self._connect_control_socket()
        self.session.send(self._control_socket, msg)

    interrupt_kernel = _async_interrupt_kernel

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart=restart)
        if not restart:
            shutil.rmtree(self._root, ignore_errors=True)

    cleanup_resources = _async_cleanup_resources


def _sandbox_pid(fd: int) -> int:
    """The pid bubblewrap writes to its ``--info-fd`` once the sandbox exists."""
    data = b""
    while chunk := os.read(fd, 4096):  # bubblewrap closes it after writing
        data += chunk
    try:
        return int(json.loads(data)["child-pid"])
    except (ValueError, KeyError, TypeError):
        raise RuntimeError(
            "the sandbox did not start (bubblewrap reported no process): "
            f"{data[:200]!r}"
        ) from None
