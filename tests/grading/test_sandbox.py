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
        connection_file = bwrap.private_dir(Path(tmp)) / "kernel.json"
        connection_file.write_text("{}")
        bwrap.readable_by_sandbox(connection_file)
        cmd = bwrap.command(
            [sys.executable, "-c", textwrap.dedent(code)],
            workdir="/work/x",
            connection_file=str(connection_file),
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


def test_scratch_sockets_and_shared_memory_are_one_bounded_space():
    """Bug (issue 32): /tmp, /dev/shm and the working folder were three tmpfs of the
    scratch size each, and the socket folder was the host's own disk: a notebook wrote
    600 MB there beside its scratch. Guard: one tmpfs of ``Limits.scratch`` holds them
    all, and the connection file is the only host file in view, read-only."""
    limits = Limits(scratch=64 << 20)
    rc, out = sandboxed(
        f"""
        import os
        written = 0
        for folder in ["/tmp", "/work/x", "/dev/shm", "/dev/shm/.kernel"]:
            try:
                with open(os.path.join(folder, "fill"), "wb") as f:
                    for _ in range(64):
                        f.write(b"x" * (1 << 20))
                        written += 1 << 20
            except OSError as e:
                print("full at", folder, e.errno)
        print("written MB", written >> 20, flush=True)
        try:
            open({bwrap.INNER_CONNECTION_FILE!r}, "a").write("x")
        except OSError as e:
            print("connection file refused", e.errno)
        """,
        limits,
    )
    assert rc == 0, out
    written = int(out.split("written MB")[1].split()[0])
    assert written <= 64, out  # all four folders together, not 64 MB each
    assert "full at /tmp" in out or "full at /work/x" in out, out
    assert "connection file refused" in out, out
    # Shared memory comes from the same space: past it, the writer gets SIGBUS.
    rc, out = sandboxed(
        """
        from multiprocessing import shared_memory
        block = shared_memory.SharedMemory(create=True, size=96 << 20)
        block.buf[:] = b"y" * (96 << 20)
        print("96 MB of shared memory written")
        """,
        limits,
    )
    assert rc != 0 and "written" not in out, out


def test_no_nested_user_namespaces():
    """Bug (issue 32): a kernel could make user namespaces of its own, a kernel attack
    surface the sandbox never needs. Guard: bubblewrap's --disable-userns."""
    rc, out = sandboxed(
        """
        import subprocess
        done = subprocess.run(["unshare", "--user", "true"], capture_output=True)
        print("nested", done.returncode)
        """
    )
    assert rc == 0, out
    assert "nested 0" not in out and "nested" in out, out


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


def test_the_kernel_knows_it_is_being_graded(monkeypatch):
    """nbgrader's NBGRADER_EXECUTION reaches the sandboxed kernel (an exercise's
    optional training cell skips itself while grading); other variables do not."""
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    monkeypatch.setenv("SOME_SECRET", "x")
    rc, out = sandboxed(
        """
        import os
        print("grading", os.environ.get("NBGRADER_EXECUTION"))
        print("secret", os.environ.get("SOME_SECRET"))
        """
    )
    assert rc == 0, out
    assert "grading autograde" in out and "secret None" in out
