"""Did the learner implement it, or call it? The hidden "written by hand" tests.

One recorder (:func:`record_calls`) watches a learner's function run: the
PyTorch functions it calls through any alias (a ``TorchFunctionMode``), the
reference package's functions it enters from outside, and every code object it
enters (``sys.setprofile``). A learner's code that switches the recorder off is
itself reported.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

import tformer_ref

from ..guard.integrity import seal
from .diagnosis import Raised, fail, passed, single_thread, verify_integrity
from .diagnosis import run as call_quietly

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True

REFERENCE_DIR = os.path.dirname(os.path.abspath(tformer_ref.__file__)) + os.sep
# Reference code a learner may call freely inside an exercise (it teaches nothing the
# exercise asks for). Immutable on purpose: the integrity seal compares module globals
# by identity.
ALLOWED_FILES = frozenset({os.path.join(REFERENCE_DIR, "device.py")})


def is_reference(path: str) -> bool:
    return path.startswith(REFERENCE_DIR) and path not in ALLOWED_FILES


@dataclass
class Calls:
    """What a run called: PyTorch function names, reference functions
    (``tformer_ref.<name>``), the code objects entered, and whether the recorder was
    switched off."""

    torch: set = field(default_factory=set)
    reference: set = field(default_factory=set)
    code: set = field(default_factory=set)
    switched_off: bool = False


@contextlib.contextmanager
def record_calls():
    """Record what the code run inside the ``with`` block calls (see :class:`Calls`)."""
    calls = Calls()

    class _Mode(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types=(), args=(), kwargs=None):
            calls.torch.add(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    def _profile(frame, event, arg):
        if event != "call":
            return
        calls.code.add(frame.f_code)
        caller = frame.f_back.f_code.co_filename if frame.f_back else ""
        # Only entries into the package from outside it: its own internal calls are not
        # the learner's.
        if is_reference(frame.f_code.co_filename) and not is_reference(caller):
            calls.reference.add(f"tformer_ref.{frame.f_code.co_name}")

    old = sys.getprofile()
    sys.setprofile(_profile)
    try:
        with _Mode():
            yield calls
        calls.switched_off = sys.getprofile() is not _profile
    finally:
        sys.setprofile(old)


def reject_wrapped(
    title: str,
    module: torch.nn.Module,
    kinds: tuple = (torch.nn.MultiheadAttention,),
    modules: Sequence[str] = ("tformer_ref",),
) -> None:
    """Fail when ``module`` contains a submodule of one of ``kinds``, or one whose
    class is defined in one of ``modules`` (a package or module name): the exercise is
    to write it, not to wrap PyTorch's own or the reference's."""
    for name, sub in module.named_modules():
        home = type(sub).__module__
        if isinstance(sub, kinds) or any(
            home == m or home.startswith(m + ".") for m in modules
        ):
            fail(
                title,
                f"your module contains {home}.{type(sub).__name__} (at "
                f"'{name or 'self'}'): the exercise is to write it yourself, not to "
                "wrap the reference or PyTorch's own.",
            )


def check_not_delegated(
    title: str,
    run: Callable[[], Any],
    forbidden: Sequence[str] = (),
    module: torch.nn.Module | None = None,
    forbidden_code: Mapping[types.CodeType, str] | None = None,
) -> None:
    """Fail when ``run()`` calls any of ``forbidden`` (PyTorch function names,
    ``"tformer_ref.<name>"``, or ``"tformer_ref"`` for any reference code) or enters
    one of ``forbidden_code`` (code object -> what to call it), or when ``module``
    contains a reference or built-in attention module."""
    verify_integrity()
    if module is not None:
        reject_wrapped(title, module)
    with record_calls() as calls:
        result = call_quietly(run, ())
    fail_if_raised(title, result)
    if calls.switched_off:
        fail(
            title,
            "your code changed sys.setprofile while it was being checked, which hides "
            "what it calls.",
        )
    used = {c for c in calls.torch | calls.reference if c in forbidden}
    if "tformer_ref" in forbidden:
        used |= calls.reference
    used |= {
        name for code, name in (forbidden_code or {}).items() if code in calls.code
    }
    if used:
        fail(
            title,
            f"your code calls {', '.join(sorted(used))}: the exercise is to write that "
            "computation yourself.",
        )
    passed(title, "written by hand, no built-in or reference shortcut")


def first_raised(result: Any) -> Raised | None:
    """The learner's exception in what a run returned: ``result`` itself, or an item or
    field of it (a list of outputs, a record of a run), or None."""
    if isinstance(result, Raised):
        return result
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        result = [getattr(result, f.name) for f in dataclasses.fields(result)]
    if isinstance(result, (list, tuple)):
        return next((r for r in map(first_raised, result) if r is not None), None)
    return None


def fail_if_raised(title: str, result: Any) -> None:
    """A hidden test sees how code computes only when it runs: fail when it raised."""
    raised = first_raised(result)
    if raised is not None:
        fail(
            title,
            f"your code raised {raised!r} when this test ran it to see what it calls, "
            "so nothing shows how it computes. It counts once your code runs: fix what "
            "the checks above report first.",
        )


def check_by_hand(
    title: str, fn: Callable, args: tuple, forbidden: Sequence[str] = ("tformer_ref",)
) -> None:
    """Hidden test: ``fn(*args)`` runs without calling ``forbidden`` (default: any
    reference code)."""
    with single_thread():
        check_not_delegated(title, lambda: fn(*args), forbidden=forbidden)


seal(__name__)
