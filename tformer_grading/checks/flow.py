"""The flow every exercise check runs, written once: one function per step.

    cases → run the learner's code (and the reference) on each → raised? → form (type,
    shape, dtype, device) → inputs unchanged → determinism → comparison with
    tolerances → the listed pitfall that reproduces every case → measured findings
    (the exercise's own) → the fallback: where, not why

A check calls the steps it needs, in that order, and skips the others; the measured
findings are the exercise's and stay in its module.
:func:`.diagnosis.compare_to_reference` is the whole flow for a function compared
with a reference. A step returns what it saw (for the check to word), or fails the
check with its message.

A planted mistake, an in-place op on the input, read back by the inputs step:

>>> import torch
>>> from tformer_grading.checks.diagnosis import Case
>>> cases = [Case("x [2, 3]", lambda: (torch.ones(2, 3),))]
>>> def halve(x):
...     return x.div_(2)
>>> runs = run_cases(halve, cases)
>>> changed_input(runs[0], "x")
'x'
>>> form_problem(runs[0].result, [2, 4], torch.float32, runs[0].result.device)
'expected shape [2, 4], got [2, 3]'
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..guard.integrity import seal
from .diagnosis import (
    UNEXPLAINED,
    Case,
    Diagnosis,
    Pitfall,
    Raised,
    describe_difference,
    fail,
    run,
    same,
)

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True

# --------------------------------------------------------------------------- running


@dataclass(frozen=True)
class Run:
    """One case run: its ``case``, the ``args`` the code was given (as the call left
    them: an in-place op shows there) and its ``result`` (a :class:`Raised` when the
    code raised)."""

    case: Case
    args: tuple
    result: Any


def run_cases(fn: Callable, cases: Sequence[Case]) -> list[Run]:
    """``fn`` run quietly on fresh arguments of every case (an exception becomes a
    :class:`Raised` result)."""
    return [Run(case, args, run(fn, args)) for case in cases for args in [case.make()]]


def reference_outputs(reference: Callable, cases: Sequence[Case]) -> list:
    """The reference's output on every case; one that raises is the course's bug, not
    the learner's (a RuntimeError, not a failed check)."""
    ours = [run(reference, case.make()) for case in cases]
    for case, want in zip(cases, ours):
        if isinstance(want, Raised):
            raise RuntimeError(  # noqa: TRY004 - the course's bug, not a type
                f"reference failed on case {case.label}: {want!r}"
            )
    return ours


def fail_if_raised(title: str, result: Any, where: str, section: Any = None) -> None:
    """The learner's exception as a failure: what it raised, at which line of their
    code (:class:`Raised`), and ``where`` the check was ("on case ...")."""
    if isinstance(result, Raised):
        fail(title, f"your code raised {result!r} {where}.", section)


# --------------------------------------------------------------------------- the form

#: How :func:`form_problem` words each problem; a check may pass its own words (say,
#: naming the input whose dtype the result must have).
FORM_WORDS = {
    "not a tensor": "expected a tensor of shape {want}, got {got}",
    "subclass": "expected a plain torch.Tensor, got the tensor subclass {got}",
    "shape": "expected shape {want}, got {got}",
    "dtype": "expected dtype {want}, got {got}",
    "device": "expected a tensor on {want}, got one on {got}",
}


def form_problem(
    got: Any, shape, dtype: torch.dtype, device, words: dict = FORM_WORDS
) -> str | None:
    """What is wrong with the form of ``got`` (a plain tensor of ``shape``, ``dtype``,
    on ``device``), in ``words``; None when nothing is. A tensor subclass is refused:
    its ``__torch_function__`` could make any comparison say "equal"."""
    said = None
    if not isinstance(got, torch.Tensor):
        said = "not a tensor", list(shape), type(got).__name__
    elif type(got) not in (torch.Tensor, torch.nn.Parameter):
        said = "subclass", None, type(got).__name__
    elif list(got.shape) != list(shape):
        said = "shape", list(shape), list(got.shape)
    elif got.dtype != dtype:
        said = "dtype", dtype, got.dtype
    elif got.device != device:
        said = "device", device, got.device
    return None if said is None else words[said[0]].format(want=said[1], got=said[2])


def pair_of_tensors(result: Any) -> bool:
    """``result`` is a pair (tuple or list) of tensors, as attention returns."""
    return (
        isinstance(result, (tuple, list))
        and len(result) == 2
        and all(isinstance(t, torch.Tensor) for t in result)
    )


def part_of_pair(fn: Callable, index: int) -> Callable:
    """``fn`` returns the pair (out, weights); keep only ``result[index]``, so that the
    two parts of a pair are compared in turn. Anything but a pair raises, which the
    comparison reports."""

    def pick(*args):
        result = fn(*args)
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            kind = type(result).__name__
            raise TypeError(f"must return a pair (out, weights), got {kind}")
        return result[index]

    return pick


# --------------------------------------------------------------- inputs, determinism


def changed_input(done: Run, names: Sequence[str]) -> str | None:
    """The name of the first tensor argument the call changed in place (compared with
    a fresh copy of the case's arguments), or None."""
    for name, before, after in zip(names, done.case.make(), done.args):
        if isinstance(before, torch.Tensor) and not torch.equal(before, after):
            return name
    return None


def same_bits(a: Any, b: Any) -> bool:
    """Two results are the same, bit for bit (NaN equal to NaN): tensors, or tuples
    of them compared element by element."""
    if isinstance(b, (tuple, list)):
        return (
            isinstance(a, (tuple, list))
            and len(a) == len(b)
            and all(same_bits(x, y) for x, y in zip(a, b))
        )
    return (
        isinstance(a, torch.Tensor)
        and isinstance(b, torch.Tensor)
        and a.shape == b.shape
        and a.dtype == b.dtype
        and torch.allclose(a, b, rtol=0, atol=0, equal_nan=True)
    )


def check_deterministic(
    title: str, fn: Callable, case: Case, first: Any, diagnosis: Diagnosis
) -> None:
    """Call ``fn`` again on ``case`` (whose first call gave ``first``): a different
    result names ``diagnosis`` (the exercise's "depends on chance")."""
    again = run(fn, case.make())
    fail_if_raised(
        title,
        again,
        f"when the check called it a second time on case {case.label} (the first "
        "call returned)",
    )
    if not same_bits(again, first):
        diagnosis.fail(
            title,
            f"Two calls on the same inputs (case {case.label}) gave different results.",
        )


# --------------------------------------------------------------- comparison, pitfalls


def largest_difference(
    got: torch.Tensor, want: torch.Tensor, at: str = "index"
) -> tuple[float, str]:
    """The largest absolute difference (NaN counts as infinite) and where it is (``at``
    names the place): ``(0.5, "largest difference 0.5 at index (1,) (yours 2,
    expected 1.5)")``."""
    got_d, want_d = got.detach(), want.detach()
    diff = (got_d.double() - want_d.double()).abs().nan_to_num(nan=math.inf)
    idx = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape))
    size = diff.max().item()
    return size, (
        f"largest difference {size:.3g} at {at} {idx} "
        f"(yours {got_d[idx].item():.6g}, expected {want_d[idx].item():.6g})"
    )


def matches(theirs: list, ours: list, atol: float, rtol: float) -> bool:
    """Every output equals the reference's within tolerance: the comparison step
    (:func:`.diagnosis.describe_difference` says how one differs)."""
    return all(
        describe_difference(got, want, atol, rtol) is None
        for got, want in zip(theirs, ours)
    )


def agree(a: Any, b: Any, atol: float, rtol: float) -> bool:
    """Two outputs agree within tolerance (:func:`.diagnosis.same`), pairs part by
    part."""
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(same(x, y, atol, rtol) for x, y in zip(a, b))
    return same(a, b, atol, rtol)


def as_is(fn: Callable) -> Callable:
    """The ``adapt`` that leaves a function as it is."""
    return fn


#: Every pitfall whose variant reproduced a learner's outputs in this process: read by
#: the test that each variant is reproduced by some wrong answer of the bank (a variant
#: nothing reproduces is dead code, or a mistake no answer tests).
REPRODUCED: set[Pitfall] = set()


def reproduced(pitfall: Pitfall) -> Pitfall:
    """``pitfall``, recorded in :data:`REPRODUCED`: what a check calls when the
    pitfall's variant gave the learner's outputs on every case."""
    REPRODUCED.add(pitfall)
    return pitfall


def listed_pitfall(
    pitfalls: Sequence[Pitfall],
    cases: Sequence,
    theirs: list,
    atol: float,
    rtol: float,
    adapt: Callable[[Callable], Callable] = as_is,
    run_on: Callable[[Callable, Any], Any] = lambda fn, case: run(fn, case.make()),
    alike: Callable[[Any, Any], bool] | None = None,
    stop_early: bool = False,
) -> Pitfall | None:
    """The first of ``pitfalls`` whose variant (wrapped by ``adapt``, as the learner's
    code was) gives the learner's outputs ``theirs`` on every case, or None: a pitfall
    is named only when it reproduces everything. A check with runs of its own passes
    how to run a variant on a case (``run_on``) and compare it (``alike(got, v)``);
    ``stop_early`` leaves a variant at its first case that differs (where building a
    case costs more than the random state the skipped runs would draw)."""
    same_as = alike or (lambda g, v: agree(g, v, atol, rtol))
    for pitfall in pitfalls:
        runs = (run_on(adapt(pitfall.impl), case) for case in cases)
        variant = runs if stop_early else list(runs)
        if all(same_as(g, v) for g, v in zip(theirs, variant)):
            return reproduced(pitfall)
    return None


def first_finding(stages: Sequence[Callable], seen: Any):
    """The measured findings, stage by stage in the order the computation runs: what
    the first stage that departs found (each stage: ``seen`` -> a finding or None)."""
    for stage in stages:
        found = stage(seen)
        if found is not None:
            return found
    return None


def one_finding(found: list):
    """Measured findings, one per wrong case ((Diagnosis, detail) or None when nothing
    was isolated): the first, when the same diagnosis explains every case that is
    wrong; else None (two mistakes, or one seen only sometimes, are not named)."""
    if found and all(f is not None and f[0] is found[0][0] for f in found):
        return found[0]
    return None


# --------------------------------------------------------------------------- fallback


def fallback(
    title: str,
    seen: str,
    section: Any = None,
    advice: str = "compare your code with the lesson step by step",
    stop: str = ".",
) -> None:
    """The failure when no mistake could be named: what was ``seen`` (where, not why;
    ``stop`` ends it), the words the report counts as unexplained, and ``advice``."""
    said = f"; {advice}" if advice else ""
    fail(title, f"{seen}{stop} It {UNEXPLAINED}{said}.", section)


seal(__name__)
