"""Reading a returned mask, shared by chapter 3's mask exercises: a plain tensor,
its shape as broadcasting reads it against the scores [B, H, Sq, Sk], its dtype (how a
float or int mask would be read), and the stage-by-stage failure.

Convention, as the package's: a bool keep-mask, True = may attend.
"""

from __future__ import annotations

import torch

from tformer_ref.device import get_device

from ...guard.integrity import seal
from ..diagnosis import Diagnosis, Raised, Section, fail
from ..flow import fallback, listed_pitfall
from .sections import S_COMBINE, S_CONVENTIONS

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True


def ints_text(values) -> str:
    return "[" + ", ".join(str(int(v)) for v in values) + "]"


def values_text(t: torch.Tensor) -> str:
    """The distinct values of ``t`` (at most 4 shown)."""
    values = (torch.unique(t.detach().double().cpu()) + 0.0).tolist()  # no -0
    shown = ", ".join(f"{v:g}" for v in values[:4])
    return shown + (", ..." if len(values) > 4 else "")


def plain_tensor_problem(result, call: str) -> str | None:
    if isinstance(result, Raised):
        return f"{call} raised {result!r}"
    if type(result) not in (torch.Tensor, torch.nn.Parameter):
        return f"{call} must return a torch.Tensor, got {type(result).__name__}"
    if result.device != get_device():
        return (
            f"{call} returned a mask on {result.device}; the scores are on "
            f"{get_device()} (build it with device=...)"
        )
    return None


def aligned_shape(shape) -> list[int]:
    """``shape`` as broadcasting against the 4-dim scores reads it (1s on the left)."""
    return [1] * (4 - len(shape)) + list(shape)


MASK_NOT_BOOL = Diagnosis(
    "mask not bool",
    "Return a bool tensor (True = may attend). PyTorch *adds* a float mask to the "
    "scores, so a 1/0 mask masks nothing and a 0/-inf one is another convention; "
    "`~mask` on an int mask flips every bit (~1 = -2). Use .bool() or a comparison.",
    S_CONVENTIONS,
)


def dtype_detail(call: str, t: torch.Tensor, keep, how, pattern: str) -> str:
    read = (
        f"Read as {how}, its pattern {pattern}."
        if keep is not None
        else "Neither a 1/0 nor a 0/negative mask."
    )
    return f"{call} returned dtype {t.dtype} with values {values_text(t)}. {read}"


def as_4d(fn):
    """Accept a [S, S] or [1, S, S] answer as well as [1, 1, S, S]: all three broadcast
    the same way against the scores (so does a 0-dim True for size 1)."""

    def call(size):
        out = fn(size)
        if isinstance(out, torch.Tensor) and out.dim() < 4:
            out = out[(None,) * (4 - out.dim())]
        return out

    return call


MASK_SHAPE = Diagnosis(
    "mask of the wrong shape",
    "Broadcasting aligns a mask with the scores [B, H, Sq, Sk] from the right, so each "
    "axis of the mask must line up with the axis it is meant for (a causal mask "
    "[1, 1, S, S], a padding mask [B, 1, 1, S]).",
    S_COMBINE,
)


def reproduced_pitfall(theirs, cases, pitfalls, adapt=lambda fn: fn):
    """The first listed pitfall that reproduces every one of the learner's outputs
    (compared exactly); none when the learner's code raised anywhere (then the error
    itself is reported)."""
    if any(isinstance(got, Raised) for got in theirs):
        return None
    return listed_pitfall(pitfalls, cases, theirs, 0, 0, adapt)


def fail_stage(title: str, diagnosis, seen: str, section: Section) -> None:
    """Name ``diagnosis`` with what was seen; without one, say what was seen and that
    it is unexplained (a raise or a wrong kind of result is reported as it is)."""
    seen = seen.rstrip(".")
    if diagnosis is not None:
        diagnosis.fail(title, seen + ("" if seen.endswith("?") else "."))
    if " raised " in seen or "must return" in seen or "returned a mask on" in seen:
        fail(title, seen, section)
    fallback(title, seen, section, advice="compare your code with the lesson")


seal(__name__)
