"""Checks for exercise ``causal_mask`` of chapter 3 (book/ch03_masks):
``causal_mask(size) -> bool [1, 1, S, S]``, True where query i may attend to key j <= i.
"""

from __future__ import annotations

import functools

import torch

from tformer_ref.device import get_device
from tformer_ref.masks import causal_mask

from ...guard.integrity import seal
from ...pictures.attach import masks_picture, pictured
from ..diagnosis import (
    Case,
    Diagnosis,
    Pitfall,
    compare_to_reference,
    run,
    single_threaded,
    verify_integrity,
)
from ..measure.mask_readings import read_as_bool
from ..measure.softmax import AXIS_NAMES
from .reading import (
    MASK_NOT_BOOL,
    MASK_SHAPE,
    aligned_shape,
    as_4d,
    dtype_detail,
    fail_stage,
    ints_text,
    plain_tensor_problem,
    reproduced_pitfall,
)
from .sections import S_CAUSAL, S_CONVENTIONS

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True


def _ones(size):
    return torch.ones(size, size, device=get_device())


def causal_reference(size):
    return causal_mask(size, device=get_device())


CAUSAL_PITFALLS = (
    Pitfall(
        "triu instead of tril",
        "Your mask is upper triangular: query i may attend to keys i..S-1, i.e. to "
        "itself and the *future*. With True = attend, the causal mask is "
        "torch.tril (keys 0..i).",
        S_CAUSAL,
        lambda s: _ones(s).triu().bool()[None, None],
    ),
    Pitfall(
        "mask inverted",
        "Your mask is True where the query must *not* attend (triu(1)): that is "
        "nn.MultiheadAttention's convention (True = ignore). This exercise, like "
        "F.scaled_dot_product_attention, uses True = attend.",
        S_CONVENTIONS,
        lambda s: _ones(s).triu(1).bool()[None, None],
    ),
    Pitfall(
        "diagonal excluded",
        "Your mask forbids a query to attend to itself (tril(-1)): query 0 then "
        "has nothing to attend to. Query i may attend to keys 0..i, the diagonal "
        "included.",
        S_CAUSAL,
        lambda s: _ones(s).tril(-1).bool()[None, None],
    ),
    Pitfall(
        "float mask instead of bool",
        "Your mask holds 1.0/0.0 floats. PyTorch *adds* a float mask to the "
        "scores, so a 1/0 mask masks nothing. Return a bool tensor (.bool()).",
        S_CONVENTIONS,
        lambda s: _ones(s).tril()[None, None],
    ),
)


CAUSAL_OFFSET = Diagnosis(
    "causal mask off the diagonal",
    "Query i may attend to keys 0..i: torch.tril with diagonal=0. A negative diagonal "
    "hides the query itself (and more of the past); a positive one shows it the "
    "future.",
    S_CAUSAL,
)


CAUSAL_UPPER = Diagnosis(
    "upper triangle instead of lower",
    "Your mask is upper triangular (torch.triu): each query is allowed the keys after "
    "it. triu(1) is the complement of the causal mask, nn.MultiheadAttention's "
    "convention (True = ignore); here True = attend, torch.tril (keys 0..i).",
    S_CAUSAL,
)


CAUSAL_SELF_ONLY = Diagnosis(
    "causal mask keeps only the diagonal",
    "Query i may attend to every key up to and including its own position, 0..i: "
    "torch.tril, not torch.eye (a query that sees only itself learns nothing from "
    "the context).",
    S_CAUSAL,
)
CAUSAL_MIRRORED = Diagnosis(
    "causal mask mirrored",
    "Row i of the mask is query i, column j key j: query i may attend to keys 0..i, "
    "the lower triangle torch.tril(ones(S, S)), with no flip.",
    S_CAUSAL,
)
CAUSAL_CONSTANT = Diagnosis(
    "causal mask constant",
    "Every entry of your mask is the same, so it cannot tell past from future. "
    "Query i may attend to keys 0..i: torch.tril(torch.ones(S, S, dtype=torch.bool)).",
    S_CAUSAL,
)


CAUSAL_LONG = Diagnosis(
    "causal mask wrong for long sequences",
    "causal_mask(size) must work for every size, however long: build it for the size "
    "asked (torch.tril(torch.ones(size, size, dtype=torch.bool))), or make a buffer "
    "you cut it from at least that long.",
    S_CAUSAL,
)


def _triangle(size: int, diagonal: int, upper: bool) -> torch.Tensor:
    ones = torch.ones(size, size, dtype=torch.bool, device=get_device())
    return ones.triu(diagonal) if upper else ones.tril(diagonal)


def _triangle_of(pattern: torch.Tensor):
    """('lower'|'upper', diagonal) when the [S, S] bool ``pattern`` is tril/triu(k)."""
    size = pattern.size(-1)
    for k in range(-size + 1, size):
        for upper in (False, True):
            if torch.equal(pattern, _triangle(size, k, upper)):
                return ("upper" if upper else "lower"), k
    return None


def _row_keys(row: torch.Tensor) -> str:
    return ints_text(row.nonzero().flatten().tolist())


def _causal_pattern_problem(pattern: torch.Tensor):
    """(Diagnosis, what was seen) for a [S, S] bool pattern that is not tril(0), or
    (None, what was seen) when no description fits; None when it is right."""
    size = pattern.size(-1)
    if torch.equal(pattern, _triangle(size, 0, upper=False)):
        return None
    if size > 1 and (pattern.all() or not pattern.any()):
        allowed = "every key" if pattern.all() else "no key"
        return CAUSAL_CONSTANT, f"your mask lets every query attend to {allowed}."
    eye = torch.eye(size, dtype=torch.bool, device=pattern.device)
    if size > 1 and torch.equal(pattern, eye):
        return (
            CAUSAL_SELF_ONLY,
            "your mask is the identity: query i may attend to key i.",
        )
    if size > 1 and torch.equal(pattern, _triangle(size, 0, upper=False).flip(-1)):
        return CAUSAL_MIRRORED, (
            "your mask is tril mirrored left to right (.flip(-1)): query i may attend "
            "to keys S-1-i..S-1, expected 0..i."
        )
    found = _triangle_of(pattern)
    if found is not None and size > 1:
        side, k = found
        if side == "lower":
            last = f"i{k:+d}" if k else "i"
            return CAUSAL_OFFSET, (
                f"your mask is tril(diagonal={k}): query i may "
                f"attend to keys 0..{last}, expected 0..i "
                f"(diagonal 0), an offset of {k}."
            )
        return CAUSAL_UPPER, (
            f"your mask is triu(diagonal={k}): query i may attend to keys i{k:+d}..S-1"
            if k
            else "your mask is triu(diagonal=0): query i may attend to keys i..S-1"
        ) + ", expected tril(diagonal=0), keys 0..i."
    row = int((pattern != _triangle(size, 0, upper=False)).any(-1).nonzero()[0])
    return None, (
        f"query {row} may attend to keys {_row_keys(pattern[row])}, expected "
        f"{_row_keys(_triangle(size, 0, upper=False)[row])}"
    )


def _causal_problem(size: int, result):
    """(Diagnosis or None, what was seen) for the first stage of ``causal_mask(size)``'s
    result that departs, or None when it is right."""
    call = f"causal_mask({size})"
    seen = plain_tensor_problem(result, call)
    if seen is not None:
        return None, seen
    shape = list(result.shape)
    if len(shape) > 4 or aligned_shape(shape) != [1, 1, size, size]:
        return MASK_SHAPE, f"{call} returned shape {shape}: {_shape_note(shape, size)}"
    pattern = result.reshape(size, size)  # [S, S], [1, S, S] and 0-dim are accepted
    if result.dtype != torch.bool:
        keep, how = read_as_bool(pattern)
        problem = None if keep is None else _causal_pattern_problem(keep)
        note = "is right" if problem is None else "is off too: " + problem[1]
        return MASK_NOT_BOOL, dtype_detail(call, result, keep, how, note)
    problem = _causal_pattern_problem(pattern)
    if problem is None:
        return None
    return problem[0], f"{call}: {problem[1]}"


def _shape_note(shape, size: int) -> str:
    if len(shape) > 4:
        return f"{len(shape)} dims, but the scores have 4 ([B, H, Sq, Sk])"
    aligned, want = aligned_shape(shape), [1, 1, size, size]
    off = "; ".join(
        f"axis {i} ({AXIS_NAMES[i]}) has size {got}, expected {w}"
        for i, (got, w) in enumerate(zip(aligned, want))
        if got != w
    )
    return (
        f"broadcasting reads it as {aligned} against the scores [B, H, Sq, Sk]: "
        f"{off}. Expected [1, 1, {size}, {size}] (or [{size}, {size}])"
    )


CAUSAL_SIZES = (1, 4, 7)


# Longer than any block size a learner may build a buffer for (nanoGPT's is 1024).
LONG_SIZE = 1100


def _judge_causal(title: str, causal_mask_fn) -> None:
    """Fail naming the first stage that departs, on the largest wrong size (it shows
    the most); return when every size is right."""
    verify_integrity()
    cases = [Case(f"size={s}", lambda s=s: (s,)) for s in CAUSAL_SIZES]
    raw = [run(causal_mask_fn, (s,)) for s in CAUSAL_SIZES]
    problems = [
        (s, p)
        for s, got in zip(CAUSAL_SIZES, raw)
        if (p := _causal_problem(s, got)) is not None
    ]
    if not problems:
        _judge_long_causal(title, causal_mask_fn)
        return
    theirs = [run(as_4d(causal_mask_fn), (s,)) for s in CAUSAL_SIZES]
    # The largest size first: it shows the most.
    picture = functools.partial(
        masks_picture,
        theirs[::-1],
        [causal_reference(s) for s in CAUSAL_SIZES[::-1]],
        [c.label for c in cases[::-1]],
        [(1, 1, s, s) for s in CAUSAL_SIZES[::-1]],
    )
    with pictured(picture):
        pitfall = reproduced_pitfall(theirs, cases, CAUSAL_PITFALLS)
        if pitfall is not None:
            pitfall.fail(title)
        raised = [p for s, p in problems if p[0] is None and " raised " in p[1]]
        diagnosis, seen = raised[0] if raised else problems[-1][1]
        fail_stage(title, diagnosis, seen, S_CAUSAL)


def _judge_long_causal(title: str, causal_mask_fn) -> None:
    """Fail, saying what was measured, when the mask is right for the usual sizes but
    not for LONG_SIZE (a mask cut from a buffer of fixed size)."""
    problem = _causal_problem(LONG_SIZE, run(causal_mask_fn, (LONG_SIZE,)))
    if problem is None:
        return
    sizes = ", ".join(map(str, CAUSAL_SIZES))
    # S named, so that a size error's numbers read in it (a buffer's own size shows).
    seen = problem[1].rstrip(".")
    CAUSAL_LONG.fail(
        title,
        f"Your mask is right for sizes {sizes}, but not for S={LONG_SIZE}: {seen}.",
    )


@single_threaded
def check_causal_mask(causal_mask_fn) -> None:
    """``causal_mask_fn(size) -> bool [1, 1, S, S]`` (or [S, S], [1, S, S]) on the
    course's device, True = may attend."""
    _judge_causal("causal_mask", causal_mask_fn)
    cases = [Case(f"size={s}", lambda s=s: (s,)) for s in CAUSAL_SIZES]
    compare_to_reference(
        "causal_mask",
        cases,
        as_4d(causal_mask_fn),
        causal_reference,
        CAUSAL_PITFALLS,
        atol=0,
        rtol=0,
    )


seal(__name__)
