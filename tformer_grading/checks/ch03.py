"""Checks for chapter 3, masks (book/ch03_masks).

Convention the exercise uses, as the package does: a bool keep-mask, True = may attend,
broadcastable to the scores' [B, H, Sq, Sk].

Each check is staged: when an answer departs from the reference, the check first asks
whether one of the listed pitfalls reproduces it on every case (then it names it), and
otherwise observes the answer stage by stage (what came back, its shape, its dtype, the
pattern of the mask, the weights' normalisation, their zeros, the scale and the fill
value read off the weights, the output) and reports the first stage that departs, with
the quantity measured there.
"""

from __future__ import annotations

import functools
import itertools
import math

import torch

from tformer_ref.attention import scaled_dot_product_attention
from tformer_ref.device import get_device
from tformer_ref.masks import causal_mask, padding_mask
from ..guard.integrity import seal
from .cases import randn
from .measure.sizes import named
from .ch02 import S_SATURATION, part_of_pair
from .delegation import check_not_delegated
from .diagnosis import (
    UNEXPLAINED,
    Case,
    Diagnosis,
    Pitfall,
    Raised,
    Section,
    compare_to_reference,
    fail,
    passed,
    run,
    run_or_fail,
    same,
    single_threaded,
    verify_integrity,
)

CHAPTER = "ch03_masks"
S_PADDING = Section(CHAPTER, "3.1", "Padding masks")
S_CAUSAL = Section(CHAPTER, "3.2", "The causal mask")
S_COMBINE = Section(CHAPTER, "3.3", "Combining masks")
S_CONVENTIONS = Section(CHAPTER, "3.4", "Three conventions for one mask")
S_FILL = Section(CHAPTER, "3.5", "Fill values, half precision and NaN")
S_PROBES = Section(CHAPTER, "3.6", "Probes: causality and pad invariance")

AXES = ("batch", "heads", "queries", "keys")  # the scores' [B, H, Sq, Sk]


def _ints(values) -> str:
    return "[" + ", ".join(str(int(v)) for v in values) + "]"


def _values_of(t: torch.Tensor) -> str:
    """The distinct values of ``t`` (at most 4 shown)."""
    values = (torch.unique(t.detach().double().cpu()) + 0.0).tolist()  # no -0
    shown = ", ".join(f"{v:g}" for v in values[:4])
    return shown + (", ..." if len(values) > 4 else "")


# ---------------------------------------------------------------------- reading a mask
# A returned mask is read in stages: a plain tensor, its shape as broadcasting reads it
# against the scores, its dtype (how a float or int mask would be read), its pattern.


def _plain_tensor_problem(result, call: str) -> str | None:
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


def _aligned(shape) -> list[int]:
    """``shape`` as broadcasting against the 4-dim scores reads it (1s on the left)."""
    return [1] * (4 - len(shape)) + list(shape)


def _read_as_bool(t: torch.Tensor):
    """(keep, how) for a non-bool mask: 1/0 read as multiplicative (1 = attend), 0 and
    large negative numbers as additive (0 = attend); (None, None) when neither fits."""
    v = t.detach().double()
    if bool(((v == 0) | (v == 1)).all()):
        return v == 1, "1 = attend, 0 = masked"
    if bool((v <= 0).all()):
        return v > -1e4, "0 = attend, a large negative number = masked (additive)"
    return None, None


MASK_NOT_BOOL = Diagnosis(
    "mask not bool",
    "Return a bool tensor (True = may attend). PyTorch *adds* a float mask to the "
    "scores, so a 1/0 mask masks nothing and a 0/-inf one is another convention; "
    "`~mask` on an int mask flips every bit (~1 = -2). Use .bool() or a comparison.",
    S_CONVENTIONS,
)


def _dtype_detail(call: str, t: torch.Tensor, keep, how, pattern: str) -> str:
    read = (
        f"Read as {how}, its pattern {pattern}."
        if keep is not None
        else "Neither a 1/0 nor a 0/negative mask."
    )
    return f"{call} returned dtype {t.dtype} with values {_values_of(t)}. {read}"


# --------------------------------------------------------------------------- causal mask


def _as_4d(fn):
    """Accept a [S, S] or [1, S, S] answer as well as [1, 1, S, S]: all three broadcast
    the same way against the scores (so does a 0-dim True for size 1)."""

    def call(size):
        out = fn(size)
        if isinstance(out, torch.Tensor) and out.dim() < 4:
            out = out[(None,) * (4 - out.dim())]
        return out

    return call


def _ones(size):
    return torch.ones(size, size, device=get_device())


def _causal_reference(size):
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
MASK_SHAPE = Diagnosis(
    "mask of the wrong shape",
    "Broadcasting aligns a mask with the scores [B, H, Sq, Sk] from the right, so each "
    "axis of the mask must line up with the axis it is meant for (a causal mask "
    "[1, 1, S, S], a padding mask [B, 1, 1, S]).",
    S_COMBINE,
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
    return _ints(row.nonzero().flatten().tolist())


def _causal_pattern_problem(pattern: torch.Tensor):
    """(Diagnosis, what was seen) for a [S, S] bool pattern that is not tril(0), or
    (None, what was seen) when no description fits; None when it is right."""
    size = pattern.size(-1)
    if torch.equal(pattern, _triangle(size, 0, upper=False)):
        return None
    if size > 1 and (pattern.all() or not pattern.any()):
        allowed = "every key" if pattern.all() else "no key"
        return CAUSAL_CONSTANT, f"your mask lets every query attend to {allowed}."
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
    seen = _plain_tensor_problem(result, call)
    if seen is not None:
        return None, seen
    shape = list(result.shape)
    if len(shape) > 4 or _aligned(shape) != [1, 1, size, size]:
        return MASK_SHAPE, f"{call} returned shape {shape}: {_shape_note(shape, size)}"
    pattern = result.reshape(size, size)  # [S, S], [1, S, S] and 0-dim are accepted
    if result.dtype != torch.bool:
        keep, how = _read_as_bool(pattern)
        problem = None if keep is None else _causal_pattern_problem(keep)
        note = "is right" if problem is None else "is off too: " + problem[1]
        return MASK_NOT_BOOL, _dtype_detail(call, result, keep, how, note)
    problem = _causal_pattern_problem(pattern)
    if problem is None:
        return None
    return problem[0], f"{call}: {problem[1]}"


def _shape_note(shape, size: int) -> str:
    if len(shape) > 4:
        return f"{len(shape)} dims, but the scores have 4 ([B, H, Sq, Sk])"
    aligned, want = _aligned(shape), [1, 1, size, size]
    off = "; ".join(
        f"axis {i} ({AXES[i]}) has size {got}, expected {w}"
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


def _reproduced(theirs, cases, pitfalls, adapt=lambda fn: fn):
    """The first listed pitfall that reproduces every one of the learner's outputs
    (compared exactly); none when the learner's code raised anywhere (then the error
    itself is reported)."""
    if any(isinstance(got, Raised) for got in theirs):
        return None
    for pitfall in pitfalls:
        variant = [run(adapt(pitfall.impl), case.make()) for case in cases]
        if all(same(g, v, 0, 0) for g, v in zip(theirs, variant)):
            return pitfall
    return None


def _judge_causal(title: str, causal_mask_fn) -> None:
    """Fail naming the first stage that departs, on the largest wrong size (it shows
    the most); return when every size is right."""
    __tracebackhide__ = True
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
    theirs = [run(_as_4d(causal_mask_fn), (s,)) for s in CAUSAL_SIZES]
    pitfall = _reproduced(theirs, cases, CAUSAL_PITFALLS)
    if pitfall is not None:
        pitfall.fail(title)
    raised = [p for s, p in problems if p[0] is None and " raised " in p[1]]
    diagnosis, seen = raised[0] if raised else problems[-1][1]
    _fail_stage(title, diagnosis, seen, S_CAUSAL)


def _judge_long_causal(title: str, causal_mask_fn) -> None:
    """Fail, saying what was measured, when the mask is right for the usual sizes but
    not for LONG_SIZE (a mask cut from a buffer of fixed size)."""
    __tracebackhide__ = True
    problem = _causal_problem(LONG_SIZE, run(causal_mask_fn, (LONG_SIZE,)))
    if problem is None:
        return
    sizes = ", ".join(map(str, CAUSAL_SIZES))
    CAUSAL_LONG.fail(
        title, f"Your mask is right for sizes {sizes}, but {problem[1].rstrip('.')}."
    )


def _fail_stage(title: str, diagnosis, seen: str, section: Section) -> None:
    """Name ``diagnosis`` with what was seen; without one, say what was seen and that
    it is unexplained (a raise or a wrong kind of result is reported as it is)."""
    __tracebackhide__ = True
    seen = seen.rstrip(".")
    if diagnosis is not None:
        diagnosis.fail(title, seen + ("" if seen.endswith("?") else "."))
    if " raised " in seen or "must return" in seen or "returned a mask on" in seen:
        fail(title, seen, section)
    fail(
        title, f"{seen}. It {UNEXPLAINED}; compare your code with the lesson.", section
    )


@single_threaded
def check_causal_mask(causal_mask_fn) -> None:
    """``causal_mask_fn(size) -> bool [1, 1, S, S]`` (or [S, S], [1, S, S]) on the
    course's device, True = may attend."""
    __tracebackhide__ = True
    _judge_causal("causal_mask", causal_mask_fn)
    cases = [Case(f"size={s}", lambda s=s: (s,)) for s in CAUSAL_SIZES]
    compare_to_reference(
        "causal_mask",
        cases,
        _as_4d(causal_mask_fn),
        _causal_reference,
        CAUSAL_PITFALLS,
        atol=0,
        rtol=0,
    )


# --------------------------------------------------------------------------- padding mask

PADDING_PITFALLS = (
    Pitfall(
        "mask broadcast over the wrong axis",
        "Your mask has shape [B, 1, S]. Against the scores [B, H, Sq, Sk] "
        "broadcasting aligns from the right, so it is read as [1, B, 1, S]: its "
        "batch axis lands on the *heads* axis. When B ≠ H it crashes; when B == H "
        "it runs and head h silently uses sequence h's padding. "
        "Return [B, 1, 1, S] (e.g. (tokens != pad_id)[:, None, None, :]).",
        S_PADDING,
        lambda t, p: (t != p)[:, None, :],
    ),
    Pitfall(
        "mask broadcast over the wrong axis ([B, S])",
        "Your mask has shape [B, S]. Against the scores [B, H, Sq, Sk] it is read "
        "as [1, 1, B, S]: the batch axis lands on the *query* axis. "
        "Return [B, 1, 1, S].",
        S_PADDING,
        lambda t, p: t != p,
    ),
    Pitfall(
        "mask on the query axis",
        "Your mask has shape [B, 1, S, 1]: it removes padded *queries* instead of "
        "padded *keys*. Return [B, 1, 1, S], so that no query attends to a padded "
        "key.",
        S_PADDING,
        lambda t, p: (t != p)[:, None, :, None],
    ),
    Pitfall(
        "mask inverted",
        "Your mask is True on the padding: that is nn.MultiheadAttention's "
        "key_padding_mask convention (True = ignore). Here, as in "
        "F.scaled_dot_product_attention, True = attend: tokens != pad_id.",
        S_CONVENTIONS,
        lambda t, p: (t == p)[:, None, None, :],
    ),
    Pitfall(
        "pad id hard-coded",
        "Your mask treats token 0 as padding whatever pad_id is "
        "(the seed's `x != 0`). Compare with pad_id.",
        S_PADDING,
        lambda t, p: (t != 0)[:, None, None, :],
    ),
    Pitfall(
        "float mask instead of bool",
        "Your mask holds 1.0/0.0 floats. PyTorch *adds* a float mask to the "
        "scores, so a 1/0 mask masks nothing. Return a bool tensor.",
        S_CONVENTIONS,
        lambda t, p: (t != p)[:, None, None, :].float(),
    ),
)

PAD_RULE = Diagnosis(
    "padding read from the wrong rule",
    "A key is padding exactly when its token id equals pad_id, whatever its position "
    "and whatever the other ids: (tokens != pad_id)[:, None, None, :].",
    S_PADDING,
)
PAD_BY_POSITION = Diagnosis(
    "padding located by position",
    "Your mask marks positions by where the padding starts or ends in each sequence "
    "(before the first pad, after the last one, the first or last L positions), so it "
    "is right only for one way of padding. Compare each token with pad_id instead: "
    "the padding may sit anywhere (left-padded batches put it first).",
    S_PADDING,
)
PAD_CONSTANT = Diagnosis(
    "padding mask constant",
    "Your mask is the same for every token, so it does not depend on which tokens are "
    "padding: compare the tokens with pad_id, (tokens != pad_id)[:, None, None, :].",
    S_PADDING,
)
INPUT_MODIFIED = Diagnosis(
    "input modified in place",
    "Your function changed a tensor it was given (an in-place op such as `+=`, "
    "masked_fill_, or writing into a slice of an argument): the caller's tensor is "
    "changed for everyone who uses it afterwards. Work on new tensors (masked_fill, "
    "not masked_fill_; x = x / c, not x /= c).",
    S_PADDING,
)


def _padding_cases():
    dev = get_device()
    return [
        Case(
            "tokens [2, 5], pad_id=0",
            lambda: (torch.tensor([[5, 6, 7, 0, 0], [1, 2, 3, 4, 9]], device=dev), 0),
        ),
        Case(
            "tokens [3, 4], pad_id=1 (and 0 is a real token)",
            lambda: (
                torch.tensor([[0, 3, 1, 1], [2, 0, 5, 1], [4, 4, 4, 4]], device=dev),
                1,
            ),
        ),
        Case(
            "tokens [4, 6], pad_id=0 (B == 4 == H in the lesson's model)",
            lambda: (
                torch.tensor(
                    [
                        [1, 2, 0, 0, 0, 0],
                        [3, 3, 3, 3, 3, 0],
                        [7, 0, 0, 0, 0, 0],
                        [1, 2, 3, 4, 5, 6],
                    ],
                    device=dev,
                ),
                0,
            ),
        ),
        Case(
            "tokens [2, 7], pad_id=3, left-padded (the padding comes first)",
            lambda: (
                torch.tensor(
                    [[3, 3, 3, 8, 0, 9, 5], [3, 1, 2, 6, 4, 7, 7]], device=dev
                ),
                3,
            ),
        ),
    ]


def _shape_reading(shape, b: int, s: int) -> str:
    """Where broadcasting puts the batch and the sequence of a padding mask of
    ``shape`` against the scores [B, H, Sq, Sk]."""
    aligned = _aligned(shape)
    where = []
    for size, what in ((b, f"the batch (B={b})"), (s, f"the sequence (S={s})")):
        axes = [AXES[i] for i, n in enumerate(aligned) if n == size]
        if axes:
            where.append(f"{what} lands on the {' and '.join(axes)} axis")
    landed = "; ".join(where) or "neither B nor S lines up with any axis"
    return (
        f"broadcasting against the scores [B, H, Sq, Sk] reads it as {aligned}: "
        f"{landed}. Expected [{b}, 1, 1, {s}]: the batch on the batch axis, the "
        "sequence on the keys axis"
    )


def _pad_rules(tokens: torch.Tensor, pad_id: int):
    """(text, keep [B, S]) for the rules a learner may have written instead of
    tokens != pad_id: another constant, another comparison."""
    ids = sorted({*torch.unique(tokens).tolist(), 0, 1, pad_id, -1})
    for c in ids:
        yield f"tokens != {c}", tokens != c
    for c in ids:
        yield f"tokens > {c}", tokens > c
        yield f"tokens >= {c}", tokens >= c
        yield f"tokens < {c}", tokens < c
        yield f"tokens == {c}", tokens == c


def _by_position(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    real = (tokens != pad_id).sum(-1, keepdim=True)
    return torch.arange(tokens.size(1), device=tokens.device) < real


def _positional_rules(tokens: torch.Tensor, pad_id: int):
    """(text, keep [B, S]) for masks that place the padding by *where it starts or
    ends* in each sequence instead of comparing every token with pad_id."""
    pad = (tokens == pad_id).long()
    real = 1 - pad
    back = lambda t: t.flip(-1).cumsum(-1).flip(-1)  # noqa: E731 (sum from the right)
    yield (
        "the positions before the first pad (assumes right padding)",
        pad.cumsum(-1) == 0,
    )
    yield "the positions after the last pad (assumes left padding)", back(pad) == 0
    yield (
        "the positions from the first real token on (assumes left padding)",
        real.cumsum(-1) > 0,
    )
    yield (
        "the positions up to the last real token (assumes right padding)",
        back(real) > 0,
    )
    yield (
        (
            "the first L positions, L = the number of real tokens (assumes right "
            "padding)"
        ),
        _by_position(tokens, pad_id),
    )
    yield (
        ("the last L positions, L = the number of real tokens (assumes left padding)"),
        _by_position(tokens.flip(-1), pad_id).flip(-1),
    )


def _positional_problem(keep: torch.Tensor, tokens, pad_id):
    for text, rule in _positional_rules(tokens, pad_id):
        if torch.equal(keep, rule):
            return PAD_BY_POSITION, (
                f"it is True exactly on {text}, not on the tokens != pad_id"
            )
    return None


def _pad_pattern_problem(keep: torch.Tensor, tokens, pad_id):
    """(Diagnosis or None, what was seen) for a [B, S] bool pattern that is not
    tokens != pad_id; None when it is right."""
    want = tokens != pad_id
    if torch.equal(keep, want):
        return None
    positional = _positional_problem(keep, tokens, pad_id)
    if positional is not None:
        return positional
    if keep.all() or not keep.any():
        return PAD_CONSTANT, (
            "it is True everywhere: no key counts as padding"
            if keep.all()
            else "it is False everywhere: every key counts as padding"
        )
    if torch.equal(keep, ~want):
        return PADDING_PITFALLS[3], (
            "it is True exactly on the padding (tokens == pad_id)"
        )
    if torch.equal(keep, want[:1].expand_as(want)):
        return PAD_RULE, "every sequence gets the mask of sequence 0"
    for text, rule in _pad_rules(tokens, pad_id):
        if torch.equal(keep, rule):
            return PAD_RULE, (
                f"it is True exactly where {text}; expected tokens != "
                f"pad_id, here tokens != {pad_id}"
            )
    row = int((keep != want).any(-1).nonzero()[0])
    return None, (
        f"sequence {row} {_ints(tokens[row].tolist())} gets the mask "
        f"{_ints(keep[row].tolist())}, expected {_ints(want[row].tolist())}"
    )


def _padding_problem(case: Case, fn):
    """(Diagnosis or None, what was seen) for the first stage of ``fn`` on ``case``
    that departs, or None when it is right."""
    tokens, pad_id = case.make()
    result = run(fn, (tokens, pad_id))
    call = f"padding_mask on case {case.label}"
    seen = _plain_tensor_problem(result, call)
    if seen is not None:
        return None, seen
    if not torch.equal(tokens, case.make()[0]):
        return INPUT_MODIFIED, f"{call}: your function changed the tokens it was given."
    b, s = tokens.shape
    if len(result.shape) > 4 or _aligned(result.shape) != [b, 1, 1, s]:
        return MASK_SHAPE, (
            f"{call} returned shape {list(result.shape)}: "
            f"{_shape_reading(result.shape, b, s)}."
        )
    pattern = result.reshape(b, s)
    if result.dtype != torch.bool:
        keep, how = _read_as_bool(pattern)
        problem = None if keep is None else _pad_pattern_problem(keep, tokens, pad_id)
        note = "is right" if problem is None else "is off too: " + problem[1]
        return MASK_NOT_BOOL, _dtype_detail(call, result, keep, how, note)
    problem = _pad_pattern_problem(pattern, tokens, pad_id)
    if problem is None:
        return None
    return problem[0], f"{call}: {problem[1]}."


def _judge_padding(title: str, padding_mask_fn) -> None:
    """Fail naming the first stage that departs (a listed pitfall only when it
    reproduces every case); return when every case is right."""
    __tracebackhide__ = True
    verify_integrity()
    cases = _padding_cases()
    problems = [p for case in cases if (p := _padding_problem(case, padding_mask_fn))]
    if not problems:
        return
    theirs = [run(padding_mask_fn, case.make()) for case in cases]
    pitfall = _reproduced(theirs, cases, PADDING_PITFALLS)
    if pitfall is not None:
        pitfall.fail(title)
    diagnosis, seen = problems[0]
    if diagnosis is PAD_CONSTANT and not _constant_everywhere(theirs):
        diagnosis, seen = (
            None,
            (f"{seen}, although on other cases your mask changes with the tokens"),
        )
    _fail_stage(title, diagnosis, seen, S_PADDING)


def _constant_everywhere(results) -> bool:
    """The learner's masks are one value (all True or all False) on every case: only
    then does the mask really not depend on the tokens."""
    if not all(isinstance(r, torch.Tensor) and r.numel() for r in results):
        return False
    values = {bool(v) for r in results for v in torch.unique(r != 0).tolist()}
    return len(values) == 1


@single_threaded
def check_padding_mask(padding_mask_fn) -> None:
    """``padding_mask_fn(tokens [B, S] int, pad_id) -> bool [B, 1, 1, S]``, True on real
    tokens (wherever the padding sits), ``tokens`` left unmodified."""
    __tracebackhide__ = True
    _judge_padding("padding_mask", padding_mask_fn)
    compare_to_reference(
        "padding_mask",
        _padding_cases(),
        padding_mask_fn,
        padding_mask,
        PADDING_PITFALLS,
        atol=0,
        rtol=0,
    )


# --------------------------------------------------------------------------- masked attention
# The reference is the package's scaled_dot_product_attention (zeros for a query that
# may attend to no key); each variant below changes one step of it.


def _scaled_scores(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))


def _masked_after_softmax(q, k, v, mask):
    weights = _scaled_scores(q, k).softmax(-1).masked_fill(~mask, 0.0)
    return weights @ v, weights


def _masked_where_true(q, k, v, mask):
    scores = _scaled_scores(q, k)
    weights = scores.masked_fill(mask, torch.finfo(scores.dtype).min).softmax(-1)
    return weights @ v, weights


def _masked_with_minus_inf(q, k, v, mask):
    weights = _scaled_scores(q, k).masked_fill(~mask, float("-inf")).softmax(-1)
    return weights @ v, weights


def _masked_with_zero(q, k, v, mask):
    weights = _scaled_scores(q, k).masked_fill(~mask, 0.0).softmax(-1)
    return weights @ v, weights


def _mask_ignored(q, k, v, mask):
    weights = _scaled_scores(q, k).softmax(-1)
    return weights @ v, weights


def _masked_unscaled(q, k, v, mask):
    scores = q @ k.transpose(-2, -1)
    weights = scores.masked_fill(~mask, torch.finfo(scores.dtype).min).softmax(-1)
    return weights @ v, weights


def _masked_with_minus_1e9(q, k, v, mask):
    weights = _scaled_scores(q, k).masked_fill(~mask, -1e9).softmax(-1)
    return weights @ v, weights


NAN_ON_FULLY_MASKED_ROWS = Pitfall(
    "NaN on fully masked rows",
    "Filling with -inf (or with a value that becomes -inf: -1e9 in float16, float64's "
    "minimum cast to float32) turns a query whose keys are all masked into "
    "softmax(-inf, ..., -inf) = 0/0 = NaN, and the NaN spreads to everything "
    "downstream. Fill with a finite value such as torch.finfo(scores.dtype).min (then "
    "zero such rows, or leave them uniform).",
    S_FILL,
    _masked_with_minus_inf,
)

MASK_INVERTED = Pitfall(
    "mask inverted",
    "You masked where the mask is True. Here True means *attend* "
    "(F.scaled_dot_product_attention's convention); nn.MultiheadAttention's is "
    "the opposite. Fill where the mask is False: masked_fill(~mask, ...).",
    S_CONVENTIONS,
    _masked_where_true,
)
MASKED_PITFALLS = (
    Pitfall(
        "mask applied after softmax",
        "You zeroed the masked weights *after* the softmax, so each row no longer "
        "sums to 1 (the masked keys took their share of the probability and it was "
        "thrown away). Fill the *scores* before softmax.",
        S_FILL,
        _masked_after_softmax,
    ),
    MASK_INVERTED,
    NAN_ON_FULLY_MASKED_ROWS,
    Pitfall(
        "masked with 0 instead of a large negative number",
        "You set the masked scores to 0. exp(0) = 1, so masked keys still get "
        "weight. The fill must be very negative so that exp() of it is 0.",
        S_FILL,
        _masked_with_zero,
    ),
    Pitfall(
        "mask ignored",
        "Your output is what attention gives without any mask: the mask argument "
        "is not used.",
        S_PADDING,
        _mask_ignored,
    ),
    Pitfall(
        "no scaling",
        "Your scores are not divided by √d_k (chapter 2).",
        S_SATURATION,
        _masked_unscaled,
    ),
)

HALF_PITFALL = Pitfall(
    "fill value that overflows in half precision",
    "Your fill value does not fit in float16, whose range ends at ±65504: -1e9 or "
    "-1e20 becomes -inf (masked_fill refuses it with 'value cannot be converted to "
    "type Half without overflow'), and -inf makes fully masked rows NaN. Use the "
    "dtype's own limit, torch.finfo(scores.dtype).min.",
    S_FILL,
    _masked_with_minus_1e9,
)


def _fully_masked(mask, weights_shape):
    """[B, H, Sq, 1] bool: the queries that may attend to no key."""
    return ~mask.expand(weights_shape).any(dim=-1, keepdim=True)


def _zero_finite_empty_rows(part, q, k, mask):
    """``part`` (out or weights) with the *finite* fully masked rows set to zero; NaN
    and inf are left in place so that they are diagnosed."""
    if not isinstance(part, torch.Tensor) or part.dim() != 4:
        return part
    try:
        rows = _fully_masked(mask, (q.size(0), q.size(1), q.size(2), k.size(2)))
        finite = torch.isfinite(part).all(dim=-1, keepdim=True)
        return part.masked_fill(rows & finite, 0.0)
    except RuntimeError:  # the wrong shape: leave it for the comparison to report
        return part


def _lenient(fn, index):
    """``fn``'s output (index 0) or weights (index 1), with a query that may attend to
    no key set to zeros: the exercise accepts zeros or a uniform row there (the stages
    below check that it is one of the two). The reference gives zeros there already,
    so it comes through unchanged."""
    pick = part_of_pair(fn, index)

    def call(q, k, v, mask):
        return _zero_finite_empty_rows(pick(q, k, v, mask), q, k, mask)

    return call


def _pad(tokens):
    return (torch.tensor(tokens, device=get_device()) != 0)[:, None, None, :]


_PER_HEAD_MASK = (
    (
        ((1, 1, 0, 0), (0, 0, 0, 0), (1, 0, 1, 1)),
        ((1, 1, 1, 1), (0, 1, 0, 0), (1, 1, 1, 0)),
    ),
    (
        ((0, 0, 0, 1), (1, 1, 1, 1), (1, 1, 0, 0)),
        ((1, 0, 0, 0), (0, 1, 0, 1), (0, 0, 1, 1)),
    ),
)

# (label, B, H, Sq, Sk, Dh, mask)
_MASKED_SPECS = (
    (
        "padding mask [2, 1, 1, 6], cross-attention",
        2,
        3,
        4,
        6,
        8,
        lambda: _pad([[3, 4, 5, 0, 0, 0], [1, 2, 3, 4, 5, 6]]),
    ),
    ("causal mask [1, 1, 5, 5]", 2, 2, 5, 5, 8, lambda: _causal_reference(5)),
    (
        "padding & causal [3, 1, 5, 5], B == H == 3, a fully padded sequence "
        "(fully masked rows)",
        3,
        3,
        5,
        5,
        4,
        lambda: (
            _pad([[1, 2, 3, 0, 0], [0, 0, 0, 0, 0], [4, 5, 6, 7, 8]])
            & _causal_reference(5)
        ),
    ),
    (
        "per-head mask [2, 2, 3, 4] with one fully masked query",
        2,
        2,
        3,
        4,
        16,
        lambda: torch.tensor(_PER_HEAD_MASK, dtype=torch.bool, device=get_device()),
    ),
)
_FULL_DTYPES = (torch.float32, torch.float32, torch.float64, torch.float32)
_HALF_DTYPES = (torch.float16, torch.bfloat16, torch.float16, torch.float16)


def _masked_case(i, spec, dtype):
    label, b, h, sq, sk, dh, mask_fn = spec

    def make():
        return (
            randn(b, h, sq, dh, seed=100 + 10 * i, dtype=dtype),
            randn(b, h, sk, dh, seed=101 + 10 * i, dtype=dtype),
            randn(b, h, sk, dh, seed=102 + 10 * i, dtype=dtype),
            mask_fn(),
        )

    return Case(f"{label} ({named(B=b, H=h, Sq=sq, Sk=sk, Dh=dh)}), {dtype}", make)


def _masked_cases(dtypes=_FULL_DTYPES):
    return [
        _masked_case(i, spec, dtype)
        for i, (spec, dtype) in enumerate(zip(_MASKED_SPECS, dtypes))
    ]


def _compare_masked(title, cases, fn, pitfalls, atol, rtol):
    __tracebackhide__ = True
    for index, part in ((1, "weights"), (0, "output")):
        compare_to_reference(
            f"{title} ({part})",
            cases,
            fn,
            scaled_dot_product_attention,
            pitfalls,
            atol,
            rtol,
            adapt=functools.partial(_lenient, index=index),
        )


# --------------------------------------------------------------------------- stages
# The stages of masked attention. Each stage function returns (Diagnosis or None, what
# was seen) for the first thing that departs, or None; None as the Diagnosis means "say
# what was seen, and that no mistake could be named".

WRONG_RESULT = Diagnosis(
    "weights or output of the wrong shape or dtype",
    "masked_attention returns (out [B, H, Sq, Dh], weights [B, H, Sq, Sk]) in the "
    "dtype of q: a float32 constant or mask.float() mixed into float16 scores promotes "
    "them to float32; an extra unsqueeze or a mask broadcast the wrong way adds an axis.",
    S_FILL,
)
NAN_IN_ATTENDED_ROWS = Diagnosis(
    "NaN where a query has keys to attend",
    "Queries with at least one allowed key got NaN or inf. The usual causes: 0 × inf = "
    "NaN (an additive mask made by multiplying a 0/1 mask by -inf), inf - inf "
    "(subtracting a row maximum that is -inf), or a fill that overflows the dtype. Use "
    "masked_fill(~mask, torch.finfo(scores.dtype).min) on the scores.",
    S_FILL,
)
WRONG_AXIS = Diagnosis(
    "weights normalised over the wrong axis",
    "Each query's weights over the *keys* must sum to 1: softmax over the last axis "
    "(dim=-1) of the scores [B, H, Sq, Sk].",
    S_FILL,
)
NOT_RENORMALISED = Diagnosis(
    "weights not renormalised after masking",
    "Masked keys get weight 0, but the allowed keys' weights must still sum to 1: "
    "mask the *scores* (masked_fill before softmax), not the weights after it; or, "
    "zeroing after the softmax, divide each row by its new sum.",
    S_FILL,
)
MASKED_KEYS_WEIGHTED = Diagnosis(
    "masked keys keep some weight",
    "A masked key must get weight exactly 0, so its score must be replaced by a value "
    "whose exp() is 0 next to the real scores: masked_fill(~mask, "
    "torch.finfo(scores.dtype).min). A small fill (0, -1, -10), or adding the mask to "
    "the scores, leaves the masked keys part of the softmax.",
    S_FILL,
)
MASK_MISREAD = Diagnosis(
    "mask applied to the wrong entries",
    "The weights must be 0 exactly where the mask, broadcast to the scores [B, H, Sq, "
    "Sk], is False: the mask's last axis is the keys (a padding mask hides keys, not "
    "queries), True = attend, and the mask is used as it comes (no transpose, no "
    "reshape).",
    S_CONVENTIONS,
)
WRONG_SCALE = Diagnosis(
    "scores scaled by the wrong factor",
    "The scores are q·kᵀ divided by √Dh, the square root of the size of the vectors "
    "being dotted (chapter 2): math.sqrt(q.size(-1)).",
    S_SATURATION,
)
EMPTY_ROWS = Diagnosis(
    "fully masked queries neither zero nor a distribution",
    "A query whose keys are all masked has nothing to attend to: its weights must be "
    "finite and either all zeros (what the reference returns) or a row that sums to 1 "
    "like any other (a finite fill gives a uniform one).",
    S_FILL,
)
ALLOWED_KEYS_ZEROED = Diagnosis(
    "allowed keys zeroed",
    "Some keys the mask allows got weight exactly 0 although their scores give them a "
    "real share: something zeroes weights after the softmax (dropout left on: "
    "F.dropout defaults to training=True, the exercise has no dropout), or a second "
    "mask is applied.",
    S_FILL,
)
ROWS_ZEROED = Diagnosis(
    "whole rows of weights zeroed",
    "Only a query that may attend to no key (its mask row all False, ~mask.any(-1)) "
    "may get all-zero weights; every other query's weights over its allowed keys sum "
    "to 1. Zero exactly the rows where ~mask.any(dim=-1, keepdim=True) is True (not "
    "mask.all(-1), not rows that contain a masked key).",
    S_FILL,
)
OUTPUT_NOT_WEIGHTS_V = Diagnosis(
    "output not computed from the returned weights",
    "The output is the returned weights times the values: out = weights @ v, with the "
    "weights after masking.",
    S_FILL,
)


def _loose(q: torch.Tensor) -> bool:
    return q.dtype in (torch.float16, torch.bfloat16)


def _structure_stage(case: Case, args, result):
    if isinstance(result, Raised):
        q, k, _, mask = args
        return None, (
            f"your code raised {result!r} while the check ran case "
            f"{case.label} (q {list(q.shape)}, k and v {list(k.shape)}, mask "
            f"{list(mask.shape)})"
        )
    if not _pair_of_tensors(result):
        kind = (
            f"a {type(result).__name__} of {len(result)}"
            if isinstance(result, (tuple, list))
            else type(result).__name__
        )
        return None, (
            f"masked_attention must return the pair (out, weights) of "
            f"tensors; on case {case.label} it returned {kind}"
        )
    for name, given, fresh in zip("qkv", args[:3], case.make()[:3]):
        if not torch.equal(given, fresh):
            return INPUT_MODIFIED, (
                f"On case {case.label}: your masked_attention changed its input {name}."
            )
    if not torch.equal(args[3], case.make()[3]):
        return INPUT_MODIFIED, f"On case {case.label}: it changed its input mask."
    return None


def _shape_stage(case: Case, q, k, result):
    out, weights = result
    want_w = [q.size(0), q.size(1), q.size(2), k.size(2)]
    want_o = [*q.shape]
    if list(out.shape) == want_w and list(weights.shape) == want_o != want_w:
        return WRONG_RESULT, (
            f"On case {case.label}: you return (weights, out): the "
            "pair is (out, weights)."
        )
    for name, got, want in (("weights", weights, want_w), ("output", out, want_o)):
        if list(got.shape) != want:
            return WRONG_RESULT, (
                f"On case {case.label}: your {name} have shape "
                f"{list(got.shape)}, expected {want}."
            )
    for name, got in (("weights", weights), ("output", out)):
        if got.dtype != q.dtype or got.device != q.device:
            return WRONG_RESULT, (
                f"On case {case.label}: your {name} are {got.dtype} "
                f"on {got.device} for {q.dtype} inputs on "
                f"{q.device}."
            )
    return None


class _Seen:
    """One case's inputs and the learner's (out, weights), in float64 for measuring:
    q [B, H, Sq, Dh], k and v [B, H, Sk, Dh], keep [B, H, Sq, Sk] (the mask broadcast),
    empty [B, H, Sq] (queries with no key allowed), dots = q·kᵀ (unscaled)."""

    def __init__(self, case: Case, result):
        q, k, v, mask = case.make()
        self.label, self.dtype, self.loose = case.label, q.dtype, _loose(q)
        self.d_head, self.heads = q.size(-1), q.size(1)
        self.q, self.k, self.v = q.double(), k.double(), v.double()
        self.mask = mask
        self.dots = self.q @ self.k.transpose(-2, -1)
        self.keep = mask.expand(self.dots.shape)
        self.empty = ~self.keep.any(-1)
        self.out, self.weights = (t.detach().double() for t in result)
        self.tol = 3e-2 if self.loose else 1e-4

    def attended(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` [B, H, Sq, ...] at the queries that have a key to attend to."""
        return t[~self.empty]


def _finite_stage(seen: _Seen):
    bad = ~(torch.isfinite(seen.weights).all(-1) & torch.isfinite(seen.out).all(-1))
    if not bad.any():
        return None
    if not (bad & ~seen.empty).any():
        return NAN_ON_FULLY_MASKED_ROWS, (
            f"On case {seen.label}, {int(bad.sum())} of the {int(seen.empty.sum())} "
            "queries that may attend to no key have NaN or inf weights or output; "
            "every other query is finite."
        )
    rows = int((bad & ~seen.empty).sum())
    return NAN_IN_ATTENDED_ROWS, (
        f"On case {seen.label}, {rows} of the {int((~seen.empty).sum())} queries that "
        f"have keys to attend to got NaN or inf (first at query "
        f"{tuple((bad & ~seen.empty).nonzero()[0].tolist())})."
    )


def _span(t: torch.Tensor) -> str:
    lo, hi = t.min().item(), t.max().item()
    return f"{lo:.4g}" if abs(hi - lo) < 5e-5 else f"{lo:.4g} to {hi:.4g}"


def _zeroed_rows_stage(seen: _Seen):
    """Queries that have keys to attend to but whose weights are all (practically)
    zero, while no other row has an allowed key zeroed: something zeroed whole rows
    after the softmax. Named by which keys those queries may see (all, or some)."""
    zero = seen.weights.abs() < 1e-7
    zeroed = zero.all(-1) & ~seen.empty
    if not zeroed.any():
        return None
    if (zero & seen.keep & ~zeroed[..., None]).any():
        # Allowed keys zeroed here and there in other rows too: zeros scattered at
        # random (dropout) also empty a short row now and then, so the rows say
        # nothing of their own; the allowed-keys stage reads the scattered zeros.
        return None
    full = seen.keep.all(-1)
    kinds = [
        what
        for what, rows in (
            ("every key visible", zeroed & full),
            ("only some keys visible", zeroed & ~full),
        )
        if rows.any()
    ]
    first = tuple(zeroed.nonzero()[0].tolist())
    return ROWS_ZEROED, (
        f"On case {seen.label}: rows of queries with {' and with '.join(kinds)} have "
        f"all-zero weights ({int(zeroed.sum())} of the {int((~seen.empty).sum())} "
        f"queries that may attend to some key; first at {first}, whose mask row is "
        f"{_ints(seen.keep[first].int().tolist())})."
    )


def _inverted_stage(seen: _Seen):
    """Queries that may attend to some keys and not others: all their weight on the
    keys the mask marks False, none on those it marks True (whatever the fill)."""
    mixed = seen.keep.any(-1) & ~seen.keep.all(-1)
    if not mixed.any():
        return None
    w = seen.weights[mixed]
    keep = seen.keep[mixed]
    on_allowed, on_masked = (w * keep).abs().sum(-1), (w * ~keep).abs().sum(-1)
    if bool((on_allowed < seen.tol).all()) and bool((on_masked > seen.tol).any()):
        return MASK_INVERTED, (
            f"On case {seen.label}, the {int(mixed.sum())} queries that may attend to "
            "some keys and not others put no weight on the keys the mask marks True, "
            "only on those it marks False."
        )
    return None


def _axis_stage(seen: _Seen):
    sums = seen.attended(seen.weights.sum(-1))
    if bool(((sums - 1).abs() < seen.tol).all()):
        return None
    for axes in _AXIS_SETS:
        if all(seen.weights.size(a) > 1 for a in axes) and bool(
            ((seen.weights.sum(axes) - 1).abs() < seen.tol).all()
        ):
            names = ", ".join(f"{a} ({AXES[a]})" for a in sorted(axes))
            return WRONG_AXIS, (
                f"On case {seen.label}: your weights sum to 1 over axis {names}, not "
                "over the keys (axis 3) alone: a query's weights over the keys sum to "
                f"{_span(sums)}."
            )
    return None


# Where else a softmax or a division may have normalised: one axis, or several at once
# (the whole tensor, a whole head's [Sq, Sk] map).
_AXIS_SETS = tuple(
    axes
    for n in (1, 2, 3, 4)
    for axes in itertools.combinations((2, 1, 0, 3), n)
    if axes != (3,)
)


def _kept(seen: _Seen) -> torch.Tensor:
    """[B, H, Sq, Sk] bool: where the learner's weights are not (practically) zero."""
    return seen.weights > 1e-7


def _differs_on(got, want, rows) -> bool:
    return not torch.equal(got[rows], want[rows])


def _both_kinds(keep: torch.Tensor) -> torch.Tensor:
    """[B, H, Sq]: queries that have some keys allowed and some hidden."""
    return keep.any(-1) & ~keep.all(-1)


def _misread_masks(seen: _Seen):
    """(what the learner did, the keep pattern it gives, the queries to compare on)."""
    yield (
        (
            "your weights are 0 exactly on the keys the mask allows (True) and nonzero "
            "on the ones it hides: you read True as 'ignore'"
        ),
        ~seen.keep,
        _both_kinds(seen.keep),
    )
    mask = seen.mask
    if seen.keep.size(-1) == seen.keep.size(-2):
        flipped = mask.transpose(-2, -1).expand(seen.keep.shape)
        yield (
            (
                "your weights follow the mask transposed (queries and keys swapped): "
                "you masked queries instead of keys"
            ),
            flipped,
            flipped.any(-1),
        )
    if (
        mask.dim() == 4
        and mask.size(0) in (1, seen.keep.size(1))
        and mask.size(1) in (1, seen.keep.size(0))
    ):
        swapped = mask.transpose(0, 1).expand(seen.keep.shape)
        yield (
            (
                "your weights follow the mask with its batch and heads axes swapped: "
                "sequence b's mask was applied to head b"
            ),
            swapped,
            swapped.any(-1),
        )
    for axis in (0, 1):
        if mask.dim() == 4 and mask.size(axis) > 1:
            first = mask.narrow(axis, 0, 1).expand(seen.keep.shape)
            what = ("sequence", "head")[axis]
            yield (
                (
                    f"your weights follow {what} 0's mask for every {what}: the mask "
                    f"was sliced or broadcast along axis {axis} ({AXES[axis]})"
                ),
                first,
                first.any(-1),
            )


def _pattern_stage(seen: _Seen):
    """The masked keys must get no weight. (Allowed keys may underflow to 0 when the
    scores are scaled wrong: the value stage measures that.)"""
    kept, rows = _kept(seen), ~seen.empty
    if not (kept & ~seen.keep)[rows].any():
        return None
    if kept[rows].all():
        return _masked_weight_stage(seen)
    for what, pattern, compare in _misread_masks(seen):
        compare = compare & rows
        if compare.any() and not _differs_on(kept, pattern, compare):
            return MASK_MISREAD, f"On case {seen.label}: {what}."
    wrong = (kept != seen.keep) & rows[..., None]
    at = tuple(wrong.nonzero()[0].tolist())
    weight, allowed = seen.weights[at].item(), bool(seen.keep[at])
    return None, (
        f"on case {seen.label} your weights differ from the mask's pattern "
        f"at {int(wrong.sum())} entries; first at {at} (query {at[2]}, key "
        f"{at[3]}): weight {weight:.3g} where the mask says "
        f"{'attend' if allowed else 'hidden'}"
    )


def _row_centred(x: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
    """``x`` minus its mean over the last axis, both taken only ``where`` True (0
    elsewhere)."""
    n = where.sum(-1, keepdim=True).clamp(min=1)
    mean = (x * where).sum(-1, keepdim=True) / n
    return (x - mean) * where


def _fitted_scale(seen: _Seen, where: torch.Tensor):
    """(c, worst residual): the learner's weights at ``where`` fitted as
    softmax(q·kᵀ / c) up to a per-query constant; None when nothing can be fitted."""
    where = where & (seen.weights > 0)
    log_w = seen.weights.clamp(min=1e-300).log()
    dd, dl = _row_centred(seen.dots, where), _row_centred(log_w, where)
    denominator = (dd * dl).sum()
    if (where.sum(-1) >= 2).sum() == 0 or denominator.abs() < 1e-12:
        return None
    c = ((dd * dd).sum() / denominator).item()
    return c, (dl - dd / c).abs().max().item()


def _fill_fit(seen: _Seen, c: float):
    """Implied scores of the masked keys, from their weights next to the allowed keys'
    (the learner's scale ``c``): (constant fill, spread) and (shift from the true
    scaled scores, spread), over the queries with keys of both kinds."""
    rows = _both_kinds(seen.keep) & ~seen.empty
    keep, hide = seen.keep & rows[..., None], ~seen.keep & rows[..., None]
    scaled = seen.dots / c
    log_w = seen.weights.clamp(min=1e-300).log()
    log_z = ((scaled - log_w) * keep).sum(-1, keepdim=True) / keep.sum(
        -1, keepdim=True
    ).clamp(min=1)
    implied = (log_w + log_z)[hide]
    shift = implied - scaled[hide]
    return (
        (implied.median().item(), (implied.max() - implied.min()).item()),
        (shift.median().item(), (shift.max() - shift.min()).item()),
    )


def _scale_words(seen: _Seen, c: float) -> str:
    dh, h = seen.d_head, seen.heads
    words = f"your scores are divided by {c:.4g}; expected √Dh = √{dh} = {dh**0.5:.4g}"
    named = {
        1.0: "not scaled at all",
        float(dh): "Dh, not √Dh",
        (h * dh) ** 0.5: "√(H·Dh) = √d_model, not √Dh",
    }
    for value, name in named.items():
        if abs(c / value - 1) < 2e-2 and abs(value / dh**0.5 - 1) > 2e-2:
            words += f" ({name})"
    return words


def _masked_weight_stage(seen: _Seen):
    """Masked keys got weight: measure what their scores were."""
    fit = _fitted_scale(seen, seen.keep)
    c = fit[0] if fit is not None and fit[1] < 10 * seen.tol else seen.d_head**0.5
    (fill, fill_spread), (shift, shift_spread) = _fill_fit(seen, c)
    scale = (
        ""
        if abs(c / seen.d_head**0.5 - 1) < 2e-2
        else f" Also {_scale_words(seen, c)}."
    )
    limit = 0.1 if seen.loose else 1e-2
    if shift_spread < limit and abs(shift) < limit:
        what = (
            "the masked keys get the weight they would get with no mask at all: "
            "the mask is not applied to the scores"
        )
    elif shift_spread <= fill_spread and shift_spread < limit:
        what = (
            f"the masked keys' scores are their true scores shifted by {shift:.4g} "
            "(a mask added to the scores instead of a fill)"
        )
    elif fill_spread < limit:
        what = (
            f"the masked keys' scores are all {fill:.4g} (your fill value): exp of "
            "it is not 0 next to the real scores"
        )
    else:
        return None, (
            f"on case {seen.label} the masked keys get nonzero weight (up to "
            f"{(seen.weights * ~seen.keep).max().item():.3g}), and their "
            "scores fit neither a constant fill nor a shift"
        )
    return MASKED_KEYS_WEIGHTED, f"On case {seen.label}: {what}.{scale}"


def _zeroed_allowed_keys(seen: _Seen, c: float) -> str | None:
    """What was seen when allowed keys that softmax(q·kᵀ / c) gives a real share of
    the weight got exactly 0 (dropout left on, an extra mask)."""
    allowed = seen.keep & ~seen.empty[..., None]
    scores = (seen.dots / c).masked_fill(~seen.keep, -math.inf)
    expected = scores.softmax(-1).nan_to_num(0.0)
    zeroed = allowed & (seen.weights == 0) & (expected > 1e-4)
    if not zeroed.any():
        return None
    share = 100 * zeroed.sum().item() / allowed.sum().item()
    return (
        f"your weights are exactly 0 at {int(zeroed.sum())} of the "
        f"{int(allowed.sum())} allowed keys ({share:.0f}%), where the softmax "
        f"gives them up to {expected[zeroed].max().item():.3g}"
    )


def _value_stage(seen: _Seen):
    """Masked keys get nothing: the allowed keys' weights must be softmax(q·kᵀ / √Dh)
    over them. Fit the scale c of softmax(q·kᵀ / c) to the weights; when they are not
    a softmax of the scores at all (the fit is poor), say so."""
    sums = seen.attended(seen.weights.sum(-1))
    fit = _fitted_scale(seen, seen.keep & ~seen.empty[..., None])
    softmax_like = fit is not None and fit[1] < (5e-2 if seen.loose else 1e-2)
    right = softmax_like and abs(fit[0] / seen.d_head**0.5 - 1) < (
        5e-2 if seen.loose else 1e-3
    )
    scale = "" if right or not softmax_like else f" Also {_scale_words(seen, fit[0])}."
    if softmax_like:
        zeroed = _zeroed_allowed_keys(seen, fit[0])
        if zeroed is not None:
            return ALLOWED_KEYS_ZEROED, f"On case {seen.label}: {zeroed}.{scale}"
    if not bool(((sums - 1).abs() < seen.tol).all()):
        if not softmax_like:
            return None, (
                f"on case {seen.label} your weights are 0 on the masked "
                f"keys, but a query's weights sum to {_span(sums)}, not 1, "
                "and are not in the ratios of a softmax of the scores"
            )
        return NOT_RENORMALISED, (
            f"On case {seen.label}: your weights are 0 on the masked keys and in the "
            "right ratios, but a query's weights on the allowed keys sum to "
            f"{_span(sums)}, not 1.{scale}"
        )
    if softmax_like and not right:
        return WRONG_SCALE, f"On case {seen.label}: {_scale_words(seen, fit[0])}."
    return None


def _empty_rows_stage(seen: _Seen):
    if not seen.empty.any():
        return None
    rows = seen.weights[seen.empty]
    zero = (rows.abs() < seen.tol).all(-1)
    distribution = ((rows.sum(-1) - 1).abs() < seen.tol) & (rows > -seen.tol).all(-1)
    if bool((zero | distribution).all()):
        return None
    bad = rows[~(zero | distribution)][0]
    return EMPTY_ROWS, (
        f"On case {seen.label}: a query that may attend to no key has "
        f"the weights {[round(x, 3) for x in bad.tolist()]} (sum "
        f"{bad.sum().item():.3g}), neither zeros nor summing to 1."
    )


def _output_candidates(seen: _Seen):
    unmasked = (seen.dots / seen.d_head**0.5).softmax(-1)
    yield "the weights before masking @ v", unmasked @ seen.v
    yield "weights @ k instead of weights @ v", seen.weights @ seen.k
    right = seen.weights @ seen.v
    for order in itertools.permutations(range(4)):
        moved = right.permute(order)
        if order != (0, 1, 2, 3) and moved.shape == seen.out.shape:
            axes = ", ".join(AXES[i] if i < 3 else "features" for i in order)
            yield (
                (f"weights @ v with its axes permuted to [{axes}] (.permute{order})"),
                moved,
            )


def _output_stage(seen: _Seen):
    rows = ~seen.empty
    want = (seen.weights @ seen.v)[rows]
    close = functools.partial(torch.allclose, atol=seen.tol, rtol=seen.tol)
    if close(seen.out[rows], want):
        return None
    for what, candidate in _output_candidates(seen):
        if close(seen.out[rows], candidate[rows]):
            return OUTPUT_NOT_WEIGHTS_V, (
                f"On case {seen.label}: your output is {what}, not your weights @ v."
            )
    gap = (seen.out[rows] - want).abs().max().item()
    return None, (
        f"on case {seen.label} your weights are right but your output is not "
        f"weights @ v (largest difference {gap:.3g})"
    )


_MEASURING_STAGES = (
    _finite_stage,
    _inverted_stage,
    _zeroed_rows_stage,
    _axis_stage,
    _pattern_stage,
    _value_stage,
    _empty_rows_stage,
    _output_stage,
)


def _attention_problem(case: Case, fn, matched: bool):
    """(Diagnosis or None, what was seen) for the first stage of ``fn`` on ``case``
    that departs, or None when every stage is right. On a case that ``matched`` the
    reference within tolerance only what the comparison cannot see is checked: the
    inputs left as they were, and the fully masked queries (which it zeroes)."""
    args = case.make()
    result = run(fn, args)
    problem = _structure_stage(case, args, result)
    if problem is None:
        problem = _shape_stage(case, args[0], args[1], result)
    if problem is not None:
        return problem
    seen = _Seen(case, result)
    for stage in (_empty_rows_stage,) if matched else _MEASURING_STAGES:
        problem = stage(seen)
        if problem is not None:
            return problem
    return None


def _case_matches(fn, case: Case, atol, rtol) -> bool:
    """Weights and output match the reference within tolerance (fully masked queries
    compared leniently)."""
    return all(
        same(
            run(_lenient(fn, i), case.make()),
            run(_lenient(scaled_dot_product_attention, i), case.make()),
            atol,
            rtol,
        )
        for i in (1, 0)
    )


def _judge_masked(title, cases, fn, pitfalls, atol, rtol) -> None:
    """Fail naming the first stage that departs (a listed pitfall only when it
    reproduces both outputs on every case); return when every case is right."""
    __tracebackhide__ = True
    verify_integrity()
    matched = [_case_matches(fn, case, atol, rtol) for case in cases]
    problems = [
        p for case, ok in zip(cases, matched) if (p := _attention_problem(case, fn, ok))
    ]
    if not problems and all(matched):
        return
    pitfall = _reproduced_pair(fn, cases, pitfalls, atol, rtol)
    if pitfall is not None:
        pitfall.fail(title, _fill_note(pitfall, fn).strip())
    if problems:
        diagnosis, seen = problems[0]
        _fail_stage(title, diagnosis, seen + _fill_note(diagnosis, fn), S_FILL)
    fail(
        title,
        f"your weights pass every stage this check measures, but differ from "
        f"the reference beyond tolerance. It {UNEXPLAINED}.",
        S_FILL,
    )


def _fill_note(diagnosis, fn) -> str:
    """The fill value measured, for the mistakes that are about it."""
    if diagnosis in (NAN_ON_FULLY_MASKED_ROWS, HALF_PITFALL, MASKED_PITFALLS[3]):
        return _measured_fill(fn)
    return ""


def _reproduced_pair(fn, cases, pitfalls, atol, rtol):
    """The first listed pitfall that reproduces the learner's weights and output on
    every case, or None."""
    theirs = [run(fn, c.make()) for c in cases]
    if not all(_pair_of_tensors(t) for t in theirs):
        return None
    for pitfall in pitfalls:
        if all(
            same(
                run(_lenient(fn, i), c.make()),
                run(_lenient(pitfall.impl, i), c.make()),
                atol,
                rtol,
            )
            for c in cases
            for i in (1, 0)
        ):
            return pitfall
    return None


@single_threaded
def check_masked_attention(masked_attention_fn) -> None:
    """``masked_attention_fn(q [B, H, Sq, Dh], k, v [B, H, Sk, Dh], mask bool
    broadcastable to [B, H, Sq, Sk]) -> (out [B, H, Sq, Dh], weights [B, H, Sq, Sk])``,
    True = may attend, out = weights @ v in q's dtype, inputs left unmodified. A query
    with no key to attend to must give finite values: zero weights (as the reference)
    or a row summing to 1 (a finite fill gives a uniform one) are both accepted."""
    __tracebackhide__ = True
    title, cases = "masked_attention", _masked_cases()
    _judge_masked(title, cases, masked_attention_fn, MASKED_PITFALLS, 1e-5, 1e-4)
    _compare_masked(title, cases, masked_attention_fn, MASKED_PITFALLS, 1e-5, 1e-4)


def _is_pair(result) -> bool:
    return isinstance(result, (tuple, list)) and len(result) == 2


def _pair_of_tensors(result) -> bool:
    return _is_pair(result) and all(isinstance(t, torch.Tensor) for t in result)


def _all_finite(result) -> bool:
    return isinstance(result, (tuple, list)) and all(
        isinstance(t, torch.Tensor) and torch.isfinite(t).all() for t in result
    )


# The fill value, measured: one allowed key and three masked ones, every score equal to
# a level s = -1, -10, ..., -1e38 (q = s, k = 1, Dh = 1). While the fill f is far below
# s the allowed key keeps all the weight; at s = f it keeps 1/4; below f, none. A last
# query with every key masked tells -inf (NaN there) from a finite fill.
_FILL_LEVELS = tuple(-(10.0**p) for p in range(39))


def _fill_probe_inputs():
    """q [1, 1, n + 1, 1] (the levels, then 0), k [1, 1, 4, 1] ones, v, mask
    [1, 1, n + 1, 4]: key 0 allowed for the levels' queries, nothing for the last."""
    dev, n = get_device(), len(_FILL_LEVELS)
    q = torch.tensor((*_FILL_LEVELS, 0.0), device=dev).view(1, 1, n + 1, 1)
    k = torch.ones(1, 1, 4, 1, device=dev)
    v = torch.arange(4.0, device=dev).view(1, 1, 4, 1)
    mask = torch.zeros(1, 1, n + 1, 4, dtype=torch.bool, device=dev)
    mask[..., :n, 0] = True
    return q, k, v, mask


def _fill_estimate(fn):
    """(sentence, upper bound) for the learner's fill value measured in float32: the
    fill is at most the bound; ('', None) when it cannot be measured."""
    got = run(fn, _fill_probe_inputs())
    n = len(_FILL_LEVELS)
    if not _pair_of_tensors(got) or list(got[1].shape) != [1, 1, n + 1, 4]:
        return "", None
    said = " Measured in float32, your fill value is"
    kept = got[1][0, 0, :n, 0].double().tolist()
    for i, (level, w) in enumerate(zip(_FILL_LEVELS, kept)):
        if not math.isfinite(w) or w > 0.999:
            continue
        if w > 1e-3:
            fill = level + math.log((1 / w - 1) / 3)
            fill = 0.0 if abs(fill) < 1e-4 else fill  # float32's rounding, not a fill
            return f"{said} {fill:.3g}.", fill
        if i == 0:
            return f"{said} above -1.", None
        return (
            f"{said} between {level:.0e} and {_FILL_LEVELS[i - 1]:.0e}.",
            _FILL_LEVELS[i - 1],
        )
    if torch.isnan(got[1][0, 0, n]).any():
        return f"{said} -inf (a query with every key masked gets NaN).", -math.inf
    return (
        f"{said} below -1e+38 (float32's own minimum, or -inf with the NaN rows "
        "repaired).",
        -math.inf,
    )


def _measured_fill(fn) -> str:
    return _fill_estimate(fn)[0]


HALF_NON_FINITE = Diagnosis(
    "NaN or inf in half precision only",
    "Your code is finite in float32 but not in float16, whose range ends at ±65504 "
    "and whose smallest number is about 6e-8: a float32 constant beyond that range "
    "(-1e9, torch.finfo(torch.float32).min) becomes -inf, an epsilon such as 1e-9 "
    "becomes 0 (so 0 / (0 + eps) is NaN on a fully masked row). Use constants of the "
    "scores' own dtype: torch.finfo(scores.dtype).min and .tiny.",
    S_FILL,
)
HALF_MIXED_DTYPES = Diagnosis(
    "float32 mixed into half precision",
    "Your code works in float32 but raises in half precision: something in it is "
    "float32 whatever the inputs (mask.float(), torch.tensor(...) or torch.zeros(...) "
    "without dtype=, a float32 constant) and meets the float16 tensors, which promotes "
    "some of them and not others. Build every tensor in q.dtype (mask.to(q.dtype), "
    "dtype=scores.dtype).",
    S_FILL,
)


def _in_float32(case: Case):
    q, k, v, mask = case.make()
    return q.float(), k.float(), v.float(), mask


def _half_precision_problem(fn, case):
    """(diagnosis, what was seen) when ``fn`` overflows, mixes dtypes or goes
    non-finite on a half-precision case but not in float32, else None."""
    got = run(fn, case.make())
    if isinstance(got, Raised):
        if "overflow" in str(got.exc).lower():
            return HALF_PITFALL, (
                f"On case {case.label}: your code raised {got!r}." + _measured_fill(fn)
            )
        if not isinstance(run(fn, _in_float32(case)), Raised):
            return HALF_MIXED_DTYPES, (
                f"On case {case.label}: your code raised "
                f"{got!r}; the same case in float32 runs."
            )
        return None
    if not _pair_of_tensors(got) or _all_finite(got):
        return None
    if _all_finite(run(fn, _in_float32(case))):
        fill, bound = _fill_estimate(fn)
        seen = (
            f"On case {case.label}: your output has inf or NaN in {got[0].dtype} "
            f"but not in float32.{fill}"
        )
        finite_overflow = bound is not None and -math.inf < bound < -65504
        return (HALF_PITFALL if finite_overflow else HALF_NON_FINITE), seen
    return None


@single_threaded
def check_masked_attention_half_precision(masked_attention_fn) -> None:
    """The same function in float16 and bfloat16: the fill value must not overflow,
    fully masked rows stay finite."""
    __tracebackhide__ = True
    title = "masked_attention in half precision"
    cases = _masked_cases(_HALF_DTYPES)
    for case in cases:
        problem = _half_precision_problem(masked_attention_fn, case)
        if problem is not None:
            diagnosis, seen = problem
            diagnosis.fail(title, seen)
    pitfalls = (HALF_PITFALL, *MASKED_PITFALLS)
    _judge_masked(title, cases, masked_attention_fn, pitfalls, 2e-2, 2e-2)
    _compare_masked(title, cases, masked_attention_fn, pitfalls, 2e-2, 2e-2)


@single_threaded
def check_masked_attention_by_hand(masked_attention_fn) -> None:
    """Hidden test: no call to PyTorch's or the reference's attention."""
    __tracebackhide__ = True
    q, k, v = (randn(2, 2, 3, 4, seed=s) for s in (1, 2, 3))
    mask = _causal_reference(3)
    # An answer that raises fails here, saying where, rather than inside the recorder.
    run_or_fail(
        "masked_attention",
        masked_attention_fn,
        (q, k, v, mask),
        "masked_attention(q [2, 2, 3, 4], k, v, causal mask [1, 1, 3, 3])",
    )
    check_not_delegated(
        "masked_attention",
        lambda: masked_attention_fn(q, k, v, mask),
        forbidden=[
            "scaled_dot_product_attention",
            "multi_head_attention_forward",
            "tformer_ref",
        ],
    )


# --------------------------------------------------------------------------- probes
# Behaviour any right answer has, whatever its code, run with the learner's own three
# functions. Each probe returns what it saw go wrong, or None.


class _LearnerMasks:
    """The learner's masked_attention, causal_mask and padding_mask, called as the
    probes need them: a call that raises or returns no pair fails the check at once."""

    def __init__(self, title, attention_fn, causal_mask_fn, padding_mask_fn):
        self.title, self.attention_fn = title, attention_fn
        self.causal_mask_fn, self.padding_mask_fn = causal_mask_fn, padding_mask_fn

    def attend(self, q, k, v, mask):
        """The output (not the weights) of the learner's masked_attention."""
        __tracebackhide__ = True
        result = run_or_fail(
            self.title,
            self.attention_fn,
            (q, k, v, mask),
            f"masked_attention(q {list(q.shape)}, k, v, mask)",
        )
        if not _pair_of_tensors(result) or result[0].shape != q.shape:
            got = (
                f"out of shape {list(result[0].shape)}"
                if _pair_of_tensors(result)
                else type(result).__name__
            )
            fail(
                self.title,
                "masked_attention must return (out [B, H, Sq, Dh], "
                f"weights); for q {list(q.shape)} it gave {got}",
            )
        return result[0].detach()

    def causal_mask(self, size):
        __tracebackhide__ = True
        return run_or_fail(
            self.title, _as_4d(self.causal_mask_fn), (size,), f"causal_mask({size})"
        )

    def padding_masks(self, *token_batches):
        __tracebackhide__ = True
        return [
            run_or_fail(self.title, self.padding_mask_fn, (tokens, 0), "padding_mask")
            for tokens in token_batches
        ]


def _future_changes_past(learner: _LearnerMasks):
    """Changing tokens t.. must leave the outputs of tokens 0..t-1 as they were."""
    b, h, s, dh, t = 2, 2, 6, 8, 3
    q, k, v = (randn(b, h, s, dh, seed=200 + i) for i in range(3))
    mask = learner.causal_mask(s)
    base = learner.attend(q, k, v, mask)
    future = [x.clone() for x in (q, k, v)]
    for x in future:
        x[:, :, t:] += 5.0
    moved = (learner.attend(*future, mask) - base)[:, :, :t].abs().amax(dim=(0, 1, 3))
    if not torch.all(moved < 1e-5):
        first = int((moved >= 1e-5).nonzero()[0])
        return (
            f"Changing tokens {t}..{s - 1} changed the outputs of tokens "
            f"0..{t - 1} (token {first} by up to {moved[first].item():.3g})."
        )
    return None


CAUSALITY_VIOLATED = Diagnosis(
    "causality violated",
    "The past must not see the future: check your causal mask (tril, True = attend) "
    "and that masked_attention fills where the mask is False, before the softmax.",
    S_PROBES,
)


def _padded_batch(learner: _LearnerMasks):
    """Two sequences (pad id 0, B == H == 2), the same with 3 pad tokens appended, their
    masks from the learner, and q, k, v [2, 2, 7, 8] for the longer ones."""
    tokens = torch.tensor([[4, 5, 6, 0], [7, 8, 9, 3]], device=get_device())
    longer = torch.cat([tokens, torch.zeros_like(tokens[:, :3])], dim=1)
    q, k, v = (randn(2, 2, 7, 8, seed=210 + i) for i in range(3))
    short_mask, long_mask = learner.padding_masks(tokens, longer)
    return tokens, longer, (q, k, v), short_mask, long_mask


def _padding_changes_real_tokens(learner: _LearnerMasks):
    """Appending pad tokens must leave the outputs of the real tokens as they were."""
    tokens, _, (q, k, v), short_mask, long_mask = _padded_batch(learner)
    short = learner.attend(q[:, :, :4], k[:, :, :4], v[:, :, :4], short_mask)
    long = learner.attend(q, k, v, long_mask)
    moved = (short - long[:, :, :4]).abs().amax(dim=(1, 3))  # [B, S]
    if not torch.all(moved[tokens != 0] < 1e-5):
        return (
            f"Appending padding tokens changed the outputs of real tokens (by up "
            f"to {moved[tokens != 0].max().item():.3g})."
        )
    return None


PAD_INVARIANCE_VIOLATED = Diagnosis(
    "pad invariance violated",
    "Padded keys must get zero weight: check the padding mask's shape [B, 1, 1, S] and "
    "its polarity.",
    S_PROBES,
)


def _padded_values_read(learner: _LearnerMasks):
    """What sits at padded positions must not matter: with a mask on the wrong axis and
    B == H, a sequence is masked with another sequence's padding and reads it."""
    _, longer, (q, k, v), _, long_mask = _padded_batch(learner)
    base = learner.attend(q, k, v, long_mask)
    pads = (longer == 0)[:, None, :, None]  # [B, 1, S, 1]
    garbage = [x.masked_fill(pads, 7.0) for x in (k, v)]
    moved = (learner.attend(q, *garbage, long_mask) - base).abs().amax(dim=(1, 3))
    if not torch.all(moved[longer != 0] < 1e-5):
        return (
            "Changing the keys and values at padded positions changed the outputs "
            f"of real tokens (by up to {moved[longer != 0].max().item():.3g})."
        )
    return None


ATTENDS_TO_PADDING = Diagnosis(
    "attends to padding",
    "Some query attends to padding: check that the padding mask has shape "
    "[B, 1, 1, S] (a [B, 1, S] mask puts the batch on the heads axis, and when B == H "
    "it silently masks each sequence with another one's padding) and that True means "
    "attend.",
    S_PROBES,
)


MASK_PROBES = (
    (_future_changes_past, CAUSALITY_VIOLATED),
    (_padding_changes_real_tokens, PAD_INVARIANCE_VIOLATED),
    (_padded_values_read, ATTENDS_TO_PADDING),
)


@single_threaded
def check_mask_probes(masked_attention_fn, causal_mask_fn, padding_mask_fn) -> None:
    """Behaviour any right answer has, run with the learner's own three functions:
    changing future tokens leaves the past unchanged, and appending padding changes no
    real token's output."""
    __tracebackhide__ = True
    title = "mask probes"
    learner = _LearnerMasks(title, masked_attention_fn, causal_mask_fn, padding_mask_fn)
    for probe, diagnosis in MASK_PROBES:
        seen = probe(learner)
        if seen is not None:
            diagnosis.fail(title, seen)
    passed(title, "the past ignores the future, and padding changes no real token")


seal(__name__)
