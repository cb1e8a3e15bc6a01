"""The machinery every exercise check is built from.

A check runs the learner's code on several cases, compares each output with
the reference, and on a mismatch runs the *known wrong variants* (pitfalls) on
the same cases: when one of them reproduces the learner's output, the failure
names that pitfall and the lesson section that explains it. Otherwise it reports
the case, the shapes, the largest difference and where it is.

A check prints one line on success and raises :class:`CheckFailure` (an
``AssertionError``, so nbgrader marks the cell failed) on failure. It never
writes to stderr: nbgrader gives a test cell zero points when it does.
"""
from __future__ import annotations

import contextlib
import os
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CHECKS_DIR = os.path.dirname(os.path.abspath(__file__))
# Reference code a learner may call freely inside an exercise (it teaches nothing the exercise asks for).
_ALLOWED_FILES = {os.path.join(_PACKAGE_DIR, "device.py")}


class CheckFailure(AssertionError):
    """A check found a mistake. The message says which, and where to read about it."""


@dataclass(frozen=True)
class Section:
    """A place in the book: lesson ``chapter`` (its folder under ``book/``), section ``number``."""

    chapter: str
    number: str
    title: str

    def __str__(self) -> str:
        return f"§{self.number} '{self.title}' in book/{self.chapter}/lesson.ipynb"


@dataclass(frozen=True)
class Pitfall:
    """A known wrong variant of a reference function.

    ``impl`` takes the same arguments as the reference; when it reproduces a
    learner's outputs on every case, ``explanation`` is what the learner reads.
    """

    name: str
    explanation: str
    section: Section
    impl: Callable[..., Any]


@dataclass(frozen=True)
class Case:
    """One input to try. ``make`` builds fresh arguments each call (learners may modify inputs in place)."""

    label: str
    make: Callable[[], tuple]


class _Raised:
    def __init__(self, exc: BaseException):
        self.exc = exc

    def __repr__(self) -> str:
        return f"{type(self.exc).__name__}: {self.exc}"


def fail(title: str, message: str, section: Section | None = None) -> None:
    """Raise a :class:`CheckFailure` formatted the same way everywhere."""
    text = f"{title}: {message}"
    if section is not None:
        text += f"\n    Read {section}."
    raise CheckFailure(text)


def passed(title: str, detail: str) -> None:
    print(f"✓ {title}: {detail}")


def _run(fn: Callable, args: tuple) -> Any:
    """Call ``fn``; an exception becomes a value so that variants can be compared on it too.

    Warnings are recorded rather than printed: a warning reaching stderr would
    make nbgrader give the cell zero even when the answer is right.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return fn(*args)
        except CheckFailure:
            raise
        except Exception as exc:  # the learner's code may raise anything
            return _Raised(exc)


def describe_difference(got: Any, want: torch.Tensor, atol: float, rtol: float) -> str | None:
    """None when ``got`` equals ``want`` within tolerance, else a sentence saying how it differs."""
    if isinstance(got, _Raised):
        return f"your code raised {got!r}"
    if not isinstance(got, torch.Tensor):
        return f"expected a tensor of shape {list(want.shape)}, got {type(got).__name__}"
    if got.shape != want.shape:
        return f"expected shape {list(want.shape)}, got {list(got.shape)}"
    if got.dtype != want.dtype:
        return f"expected dtype {want.dtype}, got {got.dtype}"
    if got.device != want.device:
        return f"expected a tensor on {want.device}, got one on {got.device}"
    got_d, want_d = got.detach(), want.detach()
    nan_got = torch.isnan(got_d)
    if nan_got.any() and not torch.isnan(want_d).any():
        where = tuple(nan_got.nonzero()[0].tolist())
        return f"your output has NaN (first at index {where}) where the reference has none"
    if torch.allclose(got_d, want_d, atol=atol, rtol=rtol, equal_nan=True):
        return None
    diff = (got_d.double() - want_d.double()).abs().nan_to_num(nan=float("inf"))
    idx = tuple(torch.unravel_index(diff.argmax(), diff.shape))
    idx = tuple(int(i) for i in idx)
    return (
        f"values differ: largest difference {diff.max().item():.3g} at index {idx} "
        f"(yours {got_d[idx].item():.6g}, expected {want_d[idx].item():.6g})"
    )


def _same(a: Any, b: Any, atol: float, rtol: float) -> bool:
    if isinstance(a, _Raised) or isinstance(b, _Raised):
        return isinstance(a, _Raised) and isinstance(b, _Raised) and type(a.exc) is type(b.exc)
    return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and describe_difference(a, b, atol, rtol) is None


def compare_to_reference(
    title: str,
    cases: Sequence[Case],
    learner: Callable,
    reference: Callable,
    pitfalls: Sequence[Pitfall] = (),
    atol: float = 1e-5,
    rtol: float = 1e-4,
) -> None:
    """Run ``learner`` and ``reference`` on every case; on a mismatch, name the pitfall that explains it."""
    __tracebackhide__ = True
    ours = [_run(reference, case.make()) for case in cases]
    for case, want in zip(cases, ours):
        if isinstance(want, _Raised):  # a broken case is the course's bug, not the learner's
            raise RuntimeError(f"reference failed on case {case.label}: {want!r}")
    theirs = [_run(learner, case.make()) for case in cases]
    problems = [
        (case, msg)
        for case, got, want in zip(cases, theirs, ours)
        if (msg := describe_difference(got, want, atol, rtol)) is not None
    ]
    if not problems:
        passed(title, f"matches the reference on {len(cases)} cases")
        return
    for pitfall in pitfalls:
        variant = [_run(pitfall.impl, case.make()) for case in cases]
        if all(_same(g, v, atol, rtol) for g, v in zip(theirs, variant)):
            fail(title, f"this looks like the pitfall '{pitfall.name}'. {pitfall.explanation}", pitfall.section)
    case, msg = problems[0]
    fail(
        title,
        f"wrong on {len(problems)} of {len(cases)} cases. First: case {case.label}: {msg}. "
        "It matches none of the known pitfalls; compare your code with the lesson step by step.",
    )


# ---------------------------------------------------------------------------
# Behaviour probes: properties any correct implementation has, whatever its code.


def probe_token_mixing(title: str, fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, section: Section) -> None:
    """Changing token j must change the output at some other position i: attention mixes tokens."""
    __tracebackhide__ = True
    base = fn(x.clone()).detach()
    changed = x.clone()
    j = x.size(1) - 1
    changed[:, j] = changed[:, j] + 1.0
    out = fn(changed).detach()
    others = [i for i in range(x.size(1)) if i != j]
    if torch.allclose(out[:, others], base[:, others], atol=1e-6):
        fail(
            title,
            f"changing token {j} changed no other position's output, so tokens never exchange information. "
            "The scores must contract over the feature axis and range over key *positions*: "
            "check the axes of your matmul/einsum (the seed's einsum labels the sequence axis as heads).",
            section,
        )


def probe_batch_independence(title: str, fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, section: Section) -> None:
    """Changing batch entry 1 must leave batch entry 0's output unchanged."""
    __tracebackhide__ = True
    if x.size(0) < 2:
        raise ValueError("probe_batch_independence needs a batch of at least 2")
    base = fn(x.clone()).detach()
    changed = x.clone()
    changed[1:] = changed[1:] + 1.0
    out = fn(changed).detach()
    if not torch.allclose(out[0], base[0], atol=1e-6):
        fail(
            title,
            "changing the other sequences of the batch changed the output for sequence 0: "
            "batch entries are leaking into each other. Check that no reshape/view mixes the batch axis "
            "with the head or sequence axis, and that batch-first tensors go to modules built with batch_first=True.",
            section,
        )


def probe_eval_determinism(title: str, module: torch.nn.Module, inputs: tuple, section: Section) -> None:
    """In eval mode two identical calls must give identical outputs (dropout off)."""
    __tracebackhide__ = True
    module.eval()
    with torch.no_grad():
        a, b = module(*inputs), module(*inputs)
    if not torch.equal(a, b):
        fail(
            title,
            "two calls in eval mode gave different outputs. Dropout must be off in eval mode: "
            "use nn.Dropout or pass `dropout_p if self.training else 0.0`.",
            section,
        )


# ---------------------------------------------------------------------------
# "Did you implement it, or call it?"


def _is_reference(path: str) -> bool:
    return path.startswith(_PACKAGE_DIR) and not path.startswith(_CHECKS_DIR) and path not in _ALLOWED_FILES


@contextlib.contextmanager
def _record_calls():
    """Record PyTorch functions called (through any alias) and tformer_ref code entered."""
    called: set[str] = set()

    class _Mode(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            called.add(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    def _profile(frame, event, arg):
        if event == "call":
            path = frame.f_code.co_filename
            caller = frame.f_back.f_code.co_filename if frame.f_back else ""
            # Only entries into the package from outside it: its own internal calls are not the learner's.
            if _is_reference(path) and not _is_reference(caller):
                called.add(f"tformer_ref.{frame.f_code.co_name}")

    old = sys.getprofile()
    sys.setprofile(_profile)
    try:
        with _Mode():
            yield called
    finally:
        sys.setprofile(old)


def check_not_delegated(title: str, run: Callable[[], Any], forbidden: Sequence[str], module: torch.nn.Module | None = None) -> None:
    """Fail when ``run()`` calls any of ``forbidden`` (PyTorch function names or
    ``"tformer_ref"`` for any reference code), or when ``module`` contains a
    reference or built-in attention module."""
    __tracebackhide__ = True
    if module is not None:
        for name, sub in module.named_modules():
            kind = type(sub)
            if kind.__module__.startswith("tformer_ref") or kind is torch.nn.MultiheadAttention:
                fail(title, f"your module contains {kind.__module__}.{kind.__name__} (at '{name or 'self'}'): "
                            "the exercise is to write it yourself, not to wrap the reference or PyTorch's own.")
    with _record_calls() as called:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run()
    used = sorted(c for c in called if c in forbidden or ("tformer_ref" in forbidden and c.startswith("tformer_ref.")))
    if used:
        fail(title, f"your code calls {', '.join(used)}: the exercise is to write that computation yourself.")
    passed(title, "written by hand, no built-in or reference shortcut")
