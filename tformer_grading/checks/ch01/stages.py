"""What chapter 1's exercises share (book/ch01_shapes).

The staged comparison of all three (``split_heads``, ``merge_heads``,
``multi_head_attention``): run every case, name a listed pitfall only when it
reproduces every case, then the input changed in place, the exercise's measuring
stages, and only when no stage can be isolated say where the outputs differ. And what
``split_heads`` and ``merge_heads`` share: a tensor of codes whose output says where
each element was copied from, the gradient of a rearrangement, the batch and token
each element came from.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from tformer_ref.device import get_device

from ...guard.integrity import seal
from .. import flow
from ..diagnosis import (
    Case,
    Diagnosis,
    Pitfall,
    Raised,
    Section,
    describe_difference,
    fail,
    passed,
    run,
    verify_integrity,
)
from .sections import S_SPLIT

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True

# ----------------------------------------------------------------------- staged checks
# One comparison for the three exercises: run every case, name a listed pitfall only
# when it reproduces every case, then run the measuring stages, then say where it
# differs.


@dataclass(frozen=True)
class Run:
    """One case: what the learner got (``args``) and returned (``got``), what the
    reference returns (``want``), the arguments reference and pitfalls take
    (``ref_args``), and the name of an argument the learner changed in place."""

    label: str
    args: tuple
    got: Any
    want: torch.Tensor
    ref_args: tuple
    mutated: str | None = None
    extra: Any = None  # what a stage needs besides (the learner's module, say)


def snapshot(args: tuple) -> list:
    return [a.detach().clone() if isinstance(a, torch.Tensor) else None for a in args]


def changed(args: tuple, before: list, names: Sequence[str]) -> str | None:
    """The name of the first tensor argument whose values differ from ``before``."""
    for name, now, then in zip(names, args, before):
        if then is not None and not torch.equal(now.detach(), then):
            return name
    return None


def run_function(
    case: Case, fn: Callable, reference: Callable, names: Sequence[str]
) -> Run:
    ref_args = case.make()
    want = reference(*ref_args)
    (done,) = flow.run_cases(fn, [case])
    mutated = flow.changed_input(done, names)
    return Run(case.label, done.args, done.result, want, ref_args, mutated)


def is_right(r: Run, atol: float, rtol: float) -> bool:
    return r.mutated is None and describe_difference(r.got, r.want, atol, rtol) is None


def _name_listed(
    title: str,
    runs: Sequence[Run],
    pitfalls: Sequence[Pitfall],
    atol: float,
    rtol: float,
) -> None:
    """Name a listed pitfall, but only one that reproduces every case."""
    got = [r.got for r in runs]
    pitfall = flow.listed_pitfall(
        pitfalls,
        runs,
        got,
        atol,
        rtol,
        run_on=lambda fn, r: run(fn, r.ref_args),
        stop_early=True,
    )
    if pitfall is not None:
        pitfall.fail(title)


def raised_stage(title: str, runs: Sequence[Run]) -> None:
    """The learner's exception, with their line and the case that triggered it."""
    raised = [r for r in runs if isinstance(r.got, Raised)]
    if raised:
        flow.fail_if_raised(
            title,
            raised[0].got,
            f"while the check ran case {raised[0].label} ({len(raised)} of "
            f"{len(runs)} cases raised)",
        )


INPUT_CHANGED = Diagnosis(
    "input changed in place",
    "Your function must leave its arguments as it found them: the caller still needs "
    "them (the residual connection reuses the block's input). Use out-of-place ops "
    "(x * s, not x.mul_(s) or x *= s) on the arguments.",
    S_SPLIT,
)


def _mutation_stage(title: str, runs: Sequence[Run]) -> None:
    for r in runs:
        if r.mutated is not None:
            INPUT_CHANGED.fail(
                title,
                f"After your call on case {r.label} the values "
                f"of the argument `{r.mutated}` had changed.",
            )


WRONG_FORM = Diagnosis(
    "wrong type, shape, dtype or device",
    "Return one plain tensor of the documented shape, with the input's dtype and "
    "device (no .float(), no new tensors made without dtype=/device= of the input).",
    S_SPLIT,
)


def form_stage(title: str, runs: Sequence[Run], section: Section) -> None:
    """Type, shape, dtype and device, before any values are compared."""
    for r in runs:
        got, want = r.got, r.want
        if (
            not isinstance(got, torch.Tensor)
            or got.shape != want.shape
            or got.dtype != want.dtype
            or got.device != want.device
        ):
            fail(
                title,
                f"this looks like the pitfall '{WRONG_FORM.name}'. On case "
                f"{r.label}: {describe_difference(got, want, 0, 0)}. "
                f"{WRONG_FORM.explanation}",
                section,
            )


def fail_findings(title: str, findings: list) -> None:
    """Fail with the measured ``findings``, [(Diagnosis, detail)]: one, as its
    diagnosis; several, all of them, each with its name."""
    if len(findings) == 1:
        diagnosis, detail = findings[0]
        diagnosis.fail(title, f"Measured: {detail}.")
    text = "; ".join(f"'{d.name}': {detail}" for d, detail in findings)
    fail(
        title,
        f"this looks like {len(findings)} mistakes at once: {text}. "
        + " ".join(d.explanation for d, _ in findings),
        findings[0][0].section,
    )


def _fallback(
    title: str, runs: Sequence[Run], atol: float, rtol: float, known: str = ""
) -> None:
    """Where, not why: the first case that differs, and what is known to be right."""
    wrong = [
        (r, m) for r in runs if (m := describe_difference(r.got, r.want, atol, rtol))
    ]
    r, msg = wrong[0]
    seen = f"wrong on {len(wrong)} of {len(runs)} cases. First: case {r.label}: "
    # ``known`` is empty or ends in a space, and the fallback puts its own before "It".
    flow.fallback(title, f"{seen}{msg}. {known}".removesuffix(" "), stop="")


def staged(
    title: str,
    runs: Sequence[Run],
    pitfalls: Sequence[Pitfall],
    stages: Sequence[Callable],
    atol: float,
    rtol: float,
    known: str = "",
    when_right: Callable | None = None,
) -> None:
    """Pass, or fail with the first stage that explains the difference.
    ``when_right(title, runs)`` checks what right values cannot show (the gradient)."""
    verify_integrity()
    if all(is_right(r, atol, rtol) for r in runs):
        if when_right is not None:
            when_right(title, runs)
        passed(title, f"matches the reference on {len(runs)} cases")
        return
    _name_listed(title, runs, pitfalls, atol, rtol)
    _mutation_stage(title, runs)
    for stage in stages:  # each exercise says where the learner's exceptions come in
        stage(title, runs)
    _fallback(title, runs, atol, rtol, known)


# -------------------------------------------------------------- where values came from
# split_heads and merge_heads only move numbers. Fed a tensor of codes (N distinct
# integers ±1..±N, shuffled, no two with the same absolute value), their output says,
# element by element, where it was copied from; any arithmetic (abs, a mean, a scale)
# gives numbers that are not codes, and the sorted order of arange cannot hide a sort.


def codes(*shape: int) -> torch.Tensor:
    """A tensor of ``shape`` holding ±1..±N once each in a seeded shuffled order."""
    n = math.prod(shape)
    g = torch.Generator().manual_seed(1234)
    sign = torch.randint(0, 2, (n,), generator=g) * 2 - 1
    codes = sign * (torch.randperm(n, generator=g) + 1)
    return codes.to(torch.float32).reshape(shape).to(get_device())


def sources(got: Any, x: torch.Tensor) -> tuple | None:
    """For each element of ``got``, its coordinates in the code tensor ``x`` (a tuple of
    index tensors shaped like ``got``), or None when ``got`` holds values that are not
    copies of x's elements."""
    if not isinstance(got, torch.Tensor) or got.numel() == 0 or got.is_complex():
        return None
    g, flat = got.detach().double(), x.detach().double().flatten()
    n = flat.numel()
    if not torch.equal(g, g.round()) or g.abs().min() < 1 or g.abs().max() > n:
        return None
    where = torch.empty(n + 1, dtype=torch.long, device=flat.device)
    where[flat.abs().long()] = torch.arange(n, device=flat.device)
    index = where[g.abs().long()]
    if not torch.equal(flat[index], g):  # a sign flipped: not a copy
        return None
    return torch.unravel_index(index, tuple(x.shape))


def axis_letters(shape: Sequence[int], sizes: dict) -> str | None:
    """``shape`` written with the letters of ``sizes`` (all distinct), or None."""
    by_size = {v: k for k, v in sizes.items()}
    if (
        len(by_size) != len(sizes)
        or any(n not in by_size for n in shape)
        or len(set(shape)) != len(shape)
    ):
        return None
    return ", ".join(by_size[n] for n in shape)


VALUES_CHANGED = Diagnosis(
    "values changed, not only moved",
    "Splitting and merging heads only rearrange numbers (view, reshape, transpose, "
    "permute): no arithmetic on the values.",
    S_SPLIT,
)


def values_stage(title: str, r: Run) -> None:
    """The output is not a rearrangement of the input: say by how much it differs."""
    got, want = r.got.detach().double(), r.want.detach().double()
    scale = (got * want).sum() / (want * want).sum()
    if torch.allclose(got, scale * want, atol=1e-6, rtol=1e-6):
        VALUES_CHANGED.fail(
            title,
            f"On case {r.label} your output is the expected one "
            f"times {scale.item():.4g}.",
        )
    VALUES_CHANGED.fail(
        title,
        f"On case {r.label} (each value of x distinct) your "
        "output holds numbers that are not elements of x.",
    )


# ------------------------------------------------------------- the gradient reaches x
# split_heads and merge_heads sit inside a model that is trained through them: right
# values are not enough, the gradient must flow back to x. A rearrangement's gradient
# is the inverse rearrangement of the upstream gradient, so with the upstream gradient
# G a tensor of codes, x's gradient must be G moved back (merge_heads(G) for a split).

GRADIENT_CUT = Diagnosis(
    "gradient does not reach the input",
    "The model is trained through split_heads and merge_heads, so the gradient must "
    "flow back to x unchanged in layout: the gradient of a rearrangement is the "
    "inverse rearrangement of the upstream gradient. Rearrange x itself with tensor "
    "ops (view, reshape, transpose, permute): no .detach(), .data, torch.no_grad() "
    "or copies through NumPy/lists.",
    S_SPLIT,
)


def _input_gradient(fn: Callable, x: torch.Tensor, rest: tuple, upstream):
    """d sum(fn(x, *rest) * upstream) / dx, or None when autograd cannot reach x."""
    x = x.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        out = fn(x, *rest)
        if not isinstance(out, torch.Tensor) or not out.requires_grad:
            return None
        (grad,) = torch.autograd.grad(out, x, upstream, allow_unused=True)
    return grad


def gradient_stage(
    fn: Callable, inverse: Callable, title: str, runs: Sequence[Run]
) -> None:
    """On every case, x's gradient must be the upstream gradient G [shape of the
    output] moved back by ``inverse(G, x)``."""
    for r in runs:
        x, rest = r.ref_args[0], tuple(r.ref_args[1:])
        upstream = codes(*r.want.shape).to(r.want.dtype)
        grad = run(_input_gradient, (fn, x, rest, upstream))
        if isinstance(grad, Raised):
            fail(
                title,
                f"your code raised {grad!r} while the check took the gradient "
                f"through it on case {r.label}.",
                S_SPLIT,
            )
        if grad is None:
            GRADIENT_CUT.fail(
                title,
                f"On case {r.label} your output is right but "
                "carries no gradient back to x (autograd cannot "
                "reach x from it).",
            )
        diff = describe_difference(grad, inverse(upstream, x), 0, 0)
        if diff:
            GRADIENT_CUT.fail(
                title,
                f"On case {r.label} your output is right, but "
                "the gradient reaching x is not the upstream "
                f"gradient rearranged back: {diff}.",
            )


AXES_IN_WRONG_ORDER = Diagnosis(
    "axes in the wrong order",
    "split_heads returns [B, H, S, Dh] and merge_heads [B, S, D]: check which axis "
    "your view/permute/transpose puts where.",
    S_SPLIT,
)


BATCH_MIXED = Diagnosis(
    "batch entries mixed",
    "Every output of batch entry b must come from batch entry b of the input: no "
    "view/reshape may cut across the batch axis.",
    S_SPLIT,
)


def _first_mismatch(found: torch.Tensor, expected: torch.Tensor) -> tuple:
    return tuple(int(i) for i in (found != expected).nonzero()[0])


def batch_and_token_stage(
    title: str, r: Run, src: tuple, batch: tuple, token: tuple, tokens_mixed: Diagnosis
) -> None:
    """Every output element must come from its own batch entry, then its own token:
    ``batch`` and ``token`` are (where each element came from, where it should have)."""
    for (found, expected), diagnosis, what in (
        (batch, BATCH_MIXED, "batch entry"),
        (token, tokens_mixed, "token"),
    ):
        if bool((found != expected).any()):
            at = _first_mismatch(found, expected.expand_as(found))
            origin = [int(t[at]) for t in src]
            diagnosis.fail(
                title,
                f"On case {r.label} out{list(at)} was "
                f"copied from {what} {int(found[at])} of x "
                f"(x{origin}).",
            )


seal(__name__)
