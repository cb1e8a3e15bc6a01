"""tformer_grading.sandbox on its own: what a sandboxed process can and cannot reach.

Each test runs a short Python program in :func:`bwrap.command` (a fraction of a second)
and one starts a real kernel through the kernel manager nbgrader uses. They skip,
saying why, where bubblewrap cannot start a sandbox.
"""

import asyncio
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from course import ROOT, needs_sandbox
from tformer_grading.sandbox import Limits, bwrap


@pytest.fixture(autouse=True)
def sandbox_available():
    needs_sandbox()


def sandboxed(code: str, limits: Limits = Limits(), timeout: float = 60):
    """Run ``code`` in a sandbox working in /work/x; return (returncode, output)."""
    with tempfile.TemporaryDirectory() as tmp:
        sockdir = bwrap.private_dir(Path(tmp))
        cmd = bwrap.command(
            [sys.executable, "-c", textwrap.dedent(code)],
            workdir="/work/x",
            sockdir=str(sockdir),
            limits=limits,
        )
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


def test_the_course_folder_shows_only_its_packages():
    rc, out = sandboxed(f"""
        import os
        print(sorted(os.listdir({str(ROOT)!r})), os.listdir("."))
        import tformer_grading, tformer_ref
        print("imported")
    """)
    assert rc == 0, out
    assert "solutions" not in out and "nbgrader_config.py" not in out
    assert "'tformer_grading'" in out and "imported" in out


def test_nothing_is_writable_but_its_scratch_folders():
    rc, out = sandboxed(f"""
        import os
        for path in ["/tmp/a", "/work/x/a", "/dev/shm/a", "/a",
                     {str(ROOT / "tformer_grading" / "x.py")!r}]:
            try:
                open(path, "w").write("x")
                print("wrote", path)
            except OSError as e:
                print("refused", path, type(e).__name__)
    """)
    assert rc == 0, out
    assert out.count("wrote") == 3 and out.count("refused") == 2, out
    assert not (ROOT / "tformer_grading" / "x.py").exists()


def test_no_network_and_no_process_of_the_host():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    try:
        rc, out = sandboxed(f"""
            import os, socket
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=2)
                print("connected")
            except OSError as e:
                print("refused", type(e).__name__)
            print("pids", sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
            print("env", sorted(os.environ))
        """)
    finally:
        server.close()
    assert rc == 0, out
    assert "refused" in out and "connected" not in out
    assert "pids [1, 2]" in out  # bubblewrap's init and this program
    assert "TFORMER_GRADING_KEY" not in out and "'HOME'" in out


def test_memory_processes_and_file_size_are_limited():
    limits = Limits(memory=2 << 30, processes=64, file_size=1 << 20)
    rc, out = sandboxed(
        """
        import os, subprocess
        try:
            bytearray(3 << 30)
        except MemoryError:
            print("memory refused")
        started = 0
        try:
            for _ in range(200):
                subprocess.Popen(["sleep", "5"])
                started += 1
        except OSError:
            print("processes refused after", started)
        try:
            open("/tmp/big", "wb").write(b"x" * (2 << 20))
        except OSError as e:
            print("file refused", e.errno)
        """,
        limits,
    )
    assert "memory refused" in out, out
    assert "processes refused after" in out and "file refused" in out, out


def test_a_kernel_runs_is_interrupted_and_leaves_no_process_behind():
    from tformer_grading.sandbox.kernel import SandboxedKernelManager

    async def session():
        km = SandboxedKernelManager(kernel_name="python3")
        await km.start_kernel(cwd="/work/kernel-test")
        kc = km.client()
        kc.start_channels()
        await kc.wait_for_ready(timeout=60)
        marker = "['sleep', '3600', 'tformer-test-marker']"
        spawn = f"import subprocess\nsubprocess.Popen({marker})"
        await kc.execute_interactive(spawn, timeout=30)
        loop = asyncio.ensure_future(
            kc.execute_interactive("while True: pass", timeout=60)
        )
        await asyncio.sleep(1)
        await km.interrupt_kernel()
        reply = await loop
        kc.stop_channels()
        await km.shutdown_kernel(now=True)
        await km.cleanup_resources()
        return reply["content"]

    content = asyncio.run(session())
    assert content.get("ename") == "KeyboardInterrupt"
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", "tformer-test-marker"], capture_output=True)
    assert left.stdout == b""
