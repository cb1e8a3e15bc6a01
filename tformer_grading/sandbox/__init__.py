"""A sandbox per graded notebook: the learner's kernel runs inside bubblewrap.

nbgrader itself, the gradebook and the receipt key stay in the grader's process;
only the kernel, where the learner's code runs, is sandboxed
(:class:`~tformer_grading.sandbox.kernel.SandboxedKernelManager`). Inside it sees
the Python installation and the course's two packages read-only, an empty
private working folder, ``/tmp`` and ``/dev/shm`` in one scratch space of bounded
size (its sockets too: the grader reaches them through ``/proc``), its own
``/proc``, no network (a fresh network namespace with only its own loopback), no
other process, no way to make a user namespace, and limits on memory, processes,
CPU time and file size. When the kernel ends, every process it started ends with it
(a PID namespace).

What it holds is listed in book/instructors.md, "The sandbox".
"""

from .bwrap import Limits, SandboxUnavailable, availability

__all__ = ["Limits", "SandboxUnavailable", "availability"]
