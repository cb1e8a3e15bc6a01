"""The bubblewrap command line that runs one kernel in its own sandbox.

bubblewrap (``bwrap``, Debian's ``bubblewrap`` package) builds the sandbox from
Linux namespaces without needing privileges; this module only says what goes in.
Limits are set inside the sandbox by ``prlimit`` (util-linux), after the user
namespace exists, so the process limit counts the sandbox's processes only. A
grader running as root runs the sandbox as ``nobody``: root is exempt from the
process limit, and nothing of root's should be reachable from learner code.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

NOBODY = 65534
# Variables the kernel keeps from the grader's environment; everything else is dropped
# (the grader's environment may hold secrets, and the kernel needs none of it).
KEPT_ENV_PREFIXES = ("TFORMER_", "CUDA_", "NVIDIA_")
# NBGRADER_EXECUTION: nbgrader's documented sign that a notebook is being graded (an
# exercise's optional training cell skips itself then).
KEPT_ENV = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "LANG",
    "LC_ALL",
    "TZ",
    "NBGRADER_EXECUTION",
)
INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt install bubblewrap)"


class SandboxUnavailable(RuntimeError):
    """The sandbox cannot run here; the message says why and what to install."""


@dataclass(frozen=True)
class Limits:
    """What one sandboxed kernel may use. Sizes in bytes."""

    memory: int = 6 << 30  # RLIMIT_DATA: heap and private mappings (tensors)
    processes: int = 256  # threads count too: PyTorch starts one per core
    cpu_seconds: int = 1200  # CPU time of each process, all its threads together
    file_size: int = 256 << 20  # the largest file it may write
    # The one writable space: /dev/shm, with /tmp, the working folder and the kernel's
    # sockets in it. Its pages are memory that RLIMIT_DATA does not count.
    scratch: int = 512 << 20

    def prlimit(self) -> list[str]:
        return [
            "prlimit",
            f"--data={self.memory}",
            f"--nproc={self.processes}",
            f"--cpu={self.cpu_seconds}",
            f"--fsize={self.file_size}",
            "--core=0",
            "--",
        ]


# As root: in a private mount namespace, bind each folder ``nobody`` cannot reach
# (a Python under /root, say) onto a reachable stage, then become nobody.
_STAGE_SCRIPT = (
    'set -e; while [ "$1" != "--" ]; do mount --bind "$1" "$2"; shift 2; done; '
    'shift; exec "$@"'
)


def _reachable_by_others(path: Path) -> bool:
    """Can a user who owns nothing on the way open ``path``? (Every folder o+x.)"""
    return all(os.stat(p).st_mode & 0o001 for p in [*path.parents, path] if p.exists())


def _as_nobody(args: list[str], binds: list[str], stage: Path) -> tuple[list, dict]:
    """``args`` (a bwrap command) run as nobody; returns it and the sources it binds
    from the stage (source path -> staged path)."""
    staged = {}
    for i, path in enumerate(binds):
        if not _reachable_by_others(Path(path)):
            staged[path] = str(stage / str(i))
    prefix = []
    if staged:
        prefix = ["unshare", "--mount", "--propagation", "private", "--"]
        prefix += ["sh", "-c", _STAGE_SCRIPT, "sh"]
        prefix += [x for pair in staged.items() for x in pair] + ["--"]
    setpriv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    return [*prefix, *setpriv, "--", *args], staged


def sandbox_uid() -> int | None:
    """The uid the sandbox runs as on the host, when it differs from the grader's."""
    return NOBODY if os.geteuid() == 0 else None


def _python_dirs() -> list[str]:
    """Read-only: the interpreter, its standard library, every site-packages in use."""
    found = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    found.add(str(Path(sys.executable).resolve().parent.parent))
    for entry in sys.path:
        name = Path(entry).name
        if entry and ("site-packages" in name or "dist-packages" in name):
            found.add(entry)
    return sorted(p for p in found if p and Path(p).is_dir())


def package_dirs(names=("tformer_ref", "tformer_grading")) -> list[str]:
    """The folders of the course's packages (and nothing else of the course folder)."""
    dirs = []
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise SandboxUnavailable(f"the package {name} is not importable here")
        dirs += [str(Path(p).resolve()) for p in spec.submodule_search_locations]
    return dirs


def _system_binds() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc"):
        if Path(top).is_symlink():
            args += ["--symlink", os.readlink(top), top]
        elif Path(top).exists():
            args += ["--ro-bind", top, top]
    return args


def _gpu_binds() -> list[str]:
    """The NVIDIA device files and driver information, where there is a GPU."""
    if not Path("/dev/nvidiactl").exists():
        return []
    args = []
    for dev in sorted(Path("/dev").glob("nvidia*")):
        args += ["--dev-bind", str(dev), str(dev)]
    for extra in ("/sys", "/proc/driver/nvidia"):
        args += ["--ro-bind-try", extra, extra]
    return args


def kernel_env(package_parents: list[str]) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k.startswith(KEPT_ENV_PREFIXES) or k in KEPT_ENV
    }
    env.pop("TFORMER_GRADING_KEY", None)
    env.update(
        PATH=f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
        HOME="/tmp",
        TMPDIR="/tmp",
        PYTHONPATH=":".join(dict.fromkeys(package_parents)),
        PYTHONDONTWRITEBYTECODE="1",
        MPLBACKEND="Agg",
        MPLCONFIGDIR="/tmp/matplotlib",
        PYDEVD_DISABLE_FILE_VALIDATION="1",
    )
    env.setdefault("LANG", "C.UTF-8")
    return env


# Inside the sandbox. One size-limited tmpfs holds everything the kernel may write:
# POSIX shared memory must live in /dev/shm, so the tmpfs is mounted there and /tmp,
# the working folder and the kernel's sockets are folders in it.
SCRATCH = "/dev/shm"
INNER_TMP = f"{SCRATCH}/tmp"
INNER_WORKDIR = f"{SCRATCH}/work"
# The kernel binds its sockets here (``ipc`` transport, ``<ip>-<port>``); the grader
# reaches them through ``/proc/<sandbox pid>/root`` (:func:`socket_prefix`), so the
# sandbox needs no folder of the host's that it can write to.
INNER_SOCKETS = f"{SCRATCH}/.kernel/kernel"
INNER_CONNECTION_FILE = "/run/tformer/kernel.json"


def _in_scratch(path: str) -> str:
    """Where a path of the host's is mounted inside: ``/tmp`` is a link into the
    scratch space, and bubblewrap creates mount points by real paths, not through
    links (the course, its interpreter or the working folder may be under /tmp)."""
    if path == "/tmp" or path.startswith("/tmp/"):
        return INNER_TMP + path[len("/tmp") :]
    return path


def socket_prefix(sandbox_pid: int) -> str:
    """Where the grader finds the sockets of the sandbox whose init is ``sandbox_pid``
    (as bubblewrap's ``--info-fd`` reports it)."""
    return f"/proc/{sandbox_pid}/root{INNER_SOCKETS}"


def command(
    kernel_cmd: list[str],
    *,
    workdir: str,
    connection_file: str,
    limits: Limits,
    info_fd: int | None = None,
) -> list[str]:
    """``kernel_cmd`` wrapped to run sandboxed, working in ``workdir`` (a new empty
    folder in the scratch space, seen at that path), with ``connection_file`` (the
    grader's, read-only) at :data:`INNER_CONNECTION_FILE`. With ``info_fd``,
    bubblewrap writes the sandbox's pid there (JSON, ``child-pid``). As root, the
    connection file's folder is the stage for folders nobody cannot reach, and the
    file must be readable by nobody."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxUnavailable(f"bubblewrap (bwrap) is not installed: {INSTALL_HINT}")
    packages = package_dirs()
    binds = sorted(set(_python_dirs()) | set(packages), key=lambda p: p.count("/"))
    stage = Path(connection_file).parent / "stage"
    staged: dict[str, str] = {}
    if os.geteuid() == 0:
        _, staged = _as_nobody([], binds, stage)
        for mount_point in staged.values():
            Path(mount_point).mkdir(parents=True, exist_ok=True)
    args = [bwrap, "--unshare-all", "--unshare-user", "--disable-userns"]
    args += ["--die-with-parent", "--new-session", "--cap-drop", "ALL", "--clearenv"]
    if info_fd is not None:
        args += ["--info-fd", str(info_fd)]
    args += _system_binds()
    args += ["--proc", "/proc", "--dev", "/dev"]
    args += _gpu_binds()
    # The scratch space first: the interpreter or the course may live under /tmp, and
    # their read-only mounts must lie in the sandbox's /tmp, not under it.
    args += ["--size", str(limits.scratch), "--tmpfs", SCRATCH]
    for folder in (INNER_TMP, INNER_WORKDIR, str(Path(INNER_SOCKETS).parent)):
        args += ["--dir", folder]
    args += ["--symlink", INNER_TMP, "/tmp"]
    if workdir != INNER_WORKDIR:
        args += ["--symlink", INNER_WORKDIR, _in_scratch(workdir)]
    for path in binds:
        args += ["--ro-bind", staged.get(path, path), _in_scratch(path)]
    args += ["--ro-bind", connection_file, INNER_CONNECTION_FILE]
    args += ["--remount-ro", "/", "--chdir", workdir]
    parents = [str(Path(p).parent) for p in packages]
    for name, value in sorted(kernel_env(parents).items()):
        args += ["--setenv", name, value]
    args += ["--", *limits.prlimit(), *kernel_cmd]
    if os.geteuid() == 0:
        args, _ = _as_nobody(args, binds, stage)
    return args


def private_dir(parent: Path) -> Path:
    """A new folder under ``parent`` for one kernel's connection file (and, as root,
    the stage), which the user the sandbox runs as may pass through but not list."""
    parent.chmod(0o755)
    folder = Path(tempfile.mkdtemp(prefix="kernel-", dir=parent))
    folder.chmod(0o711)
    return folder


def readable_by_sandbox(path: Path) -> None:
    """Let the sandbox's user (nobody, when grading as root) read ``path``, only it."""
    path.chmod(0o600)
    uid = sandbox_uid()
    if uid is not None:
        os.chown(path, uid, uid)


@functools.lru_cache(maxsize=1)
def availability() -> str | None:
    """None when a sandbox can start here, else why not (tried once per process)."""
    if not sys.platform.startswith("linux"):
        return "bubblewrap, the grading sandbox, runs on Linux only"
    if shutil.which("bwrap") is None:
        return f"bubblewrap (bwrap) is not installed: {INSTALL_HINT}"
    tools = ("prlimit", *(["setpriv", "unshare"] if os.geteuid() == 0 else []))
    for tool in tools:
        if shutil.which(tool) is None:
            return f"{tool} (util-linux) is not installed"
    with tempfile.TemporaryDirectory(prefix="tformer-sandbox-probe-") as tmp:
        connection_file = private_dir(Path(tmp)) / "kernel.json"
        connection_file.write_text("{}")
        readable_by_sandbox(connection_file)
        try:
            cmd = command(
                [sys.executable, "-c", "import tformer_grading"],
                workdir="/sandbox-probe",
                connection_file=str(connection_file),
                limits=Limits(),
            )
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=120, check=False
            )
        except (OSError, subprocess.SubprocessError, SandboxUnavailable) as exc:
            return f"bubblewrap could not start a sandbox: {exc}"
    if proc.returncode != 0:
        return (
            "bubblewrap could not start a sandbox (are unprivileged user namespaces "
            f"disabled?): {proc.stderr.strip()[-500:]}"
        )
    return None
