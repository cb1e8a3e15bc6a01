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
KEPT_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "LANG", "LC_ALL", "TZ")
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
    scratch: int = 512 << 20  # size of each of /tmp, /dev/shm and the working folder

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


def command(
    kernel_cmd: list[str], *, workdir: str, sockdir: str, limits: Limits
) -> list[str]:
    """``kernel_cmd`` wrapped to run sandboxed with ``workdir`` (an empty private
    folder, seen at that path) as its working folder and ``sockdir`` (the connection
    file and the kernel's sockets) shared with the grader. As root, ``sockdir``'s
    parent is the stage for folders nobody cannot reach, and ``sockdir`` must belong to
    nobody."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxUnavailable(f"bubblewrap (bwrap) is not installed: {INSTALL_HINT}")
    packages = package_dirs()
    binds = sorted(set(_python_dirs()) | set(packages), key=lambda p: p.count("/"))
    staged: dict[str, str] = {}
    if os.geteuid() == 0:
        stage = Path(sockdir).parent / "stage"
        _, staged = _as_nobody([], binds, stage)
        for mount_point in staged.values():
            Path(mount_point).mkdir(parents=True, exist_ok=True)
    args = [bwrap, "--unshare-all", "--die-with-parent"]
    args += ["--new-session", "--cap-drop", "ALL", "--clearenv"]
    args += _system_binds()
    args += ["--proc", "/proc", "--dev", "/dev"]
    args += _gpu_binds()
    # The scratch folders first: the interpreter or the course may live under /tmp, and
    # their read-only mounts must lie on top of the fresh /tmp, not under it.
    for scratch in ("/tmp", "/dev/shm", workdir):
        args += ["--size", str(limits.scratch), "--tmpfs", scratch]
    for path in binds:
        args += ["--ro-bind", staged.get(path, path), path]
    args += ["--bind", sockdir, sockdir, "--remount-ro", "/", "--chdir", workdir]
    parents = [str(Path(p).parent) for p in packages]
    for name, value in sorted(kernel_env(parents).items()):
        args += ["--setenv", name, value]
    args += ["--", *limits.prlimit(), *kernel_cmd]
    if os.geteuid() == 0:
        args, _ = _as_nobody(args, binds, Path(sockdir).parent / "stage")
    return args


def private_dir(parent: Path) -> Path:
    """A new folder under ``parent`` for one kernel's connection file and sockets,
    reachable and writable by the user the sandbox runs as (and by nobody else)."""
    parent.chmod(0o755)
    sockdir = Path(tempfile.mkdtemp(prefix="kernel-", dir=parent))
    uid = sandbox_uid()
    if uid is not None:
        os.chown(sockdir, uid, uid)
    return sockdir


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
        sockdir = private_dir(Path(tmp))
        try:
            cmd = command(
                [sys.executable, "-c", "import tformer_grading"],
                workdir="/sandbox-probe",
                sockdir=str(sockdir),
                limits=Limits(),
            )
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.SubprocessError, SandboxUnavailable) as exc:
            return f"bubblewrap could not start a sandbox: {exc}"
    if proc.returncode != 0:
        return (
            "bubblewrap could not start a sandbox (are unprivileged user namespaces "
            f"disabled?): {proc.stderr.strip()[-500:]}"
        )
    return None
