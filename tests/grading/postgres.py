"""A throw-away PostgreSQL server (Debian's package) for the shared-gradebook test.

``start(folder)`` runs initdb and the server on a Unix socket in ``folder`` and
returns a SQLAlchemy URL; it skips the test, saying why, where PostgreSQL is not
installed or cannot start. PostgreSQL refuses to run as root: as root the server
runs as the ``postgres`` user the package creates.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from course import missing


def _bin(name: str) -> str | None:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found[-1] if found else shutil.which(name)


def _as_server_user(cmd: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


def start() -> tuple[str, callable]:
    """(db_url, stop) for a fresh server with an empty database ``gradebook``, in a new
    folder under /tmp that the server's user can reach."""
    initdb, pg_ctl = _bin("initdb"), _bin("pg_ctl")
    if not initdb or not pg_ctl:
        missing(
            "postgres", "PostgreSQL is not installed (Debian: apt install postgresql)"
        )
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        missing("postgres", "psycopg2 is not installed (requirements.txt pins it)")
    folder = Path(tempfile.mkdtemp(prefix="tformer-postgres-"))
    data, sock = folder / "data", folder / "socket"
    sock.mkdir()
    if os.geteuid() == 0:
        folder.chmod(0o755)
        shutil.chown(sock, "postgres")
        data.mkdir()
        shutil.chown(data, "postgres")

    def run(cmd, **kw):
        return subprocess.run(
            _as_server_user(cmd), capture_output=True, text=True, timeout=120, **kw
        )

    made = run([initdb, "-D", str(data), "-U", "grader", "--auth=trust"])
    if made.returncode != 0:
        missing("postgres", f"initdb failed: {made.stderr[-500:]}")
    options = f"-k {sock} -c listen_addresses='' -p 5439"
    up = run(
        [pg_ctl, "-D", str(data), "-o", options, "-w", "-l", str(sock / "log"), "start"]
    )
    if up.returncode != 0:
        missing(
            "postgres",
            f"PostgreSQL did not start: {up.stderr[-500:]}{up.stdout[-500:]}",
        )
    created = run(
        [_bin("createdb"), "-h", str(sock), "-p", "5439", "-U", "grader", "gradebook"]
    )
    if created.returncode != 0:
        run([pg_ctl, "-D", str(data), "-m", "immediate", "stop"])
        missing("postgres", f"createdb failed: {created.stderr[-500:]}")

    def stop():
        run([pg_ctl, "-D", str(data), "-m", "fast", "stop"])
        shutil.rmtree(folder, ignore_errors=True)

    return f"postgresql+psycopg2://grader@/gradebook?host={sock}&port=5439", stop
