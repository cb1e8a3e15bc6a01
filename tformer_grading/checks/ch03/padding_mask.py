"""Checks for exercise ``padding_mask`` of chapter 3 (book/ch03_masks):
``padding_mask(tokens [B, S], pad_id) -> bool [B, 1, 1, S]``, True at real tokens.
"""

from __future__ import annotations

import torch

from tformer_ref.device import get_device
from tformer_ref.masks import padding_mask

from ...guard.integrity import seal
from ...pictures.attach import masks_picture, pictured
from ..diagnosis import (
    Case,
    Diagnosis,
    Pitfall,
    passed,
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
    dtype_detail,
    fail_stage,
    ints_text,
    plain_tensor_problem,
    reproduced_pitfall,
)
from .sections import S_CONVENTIONS, S_PADDING

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True

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
    aligned = aligned_shape(shape)
    where = []
    for size, what in ((b, f"the batch (B={b})"), (s, f"the sequence (S={s})")):
        axes = [AXIS_NAMES[i] for i, n in enumerate(aligned) if n == size]
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
    back = lambda t: t.flip(-1).cumsum(-1).flip(-1)  # sum from the right
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
        f"sequence {row} {ints_text(tokens[row].tolist())} gets the mask "
        f"{ints_text(keep[row].tolist())}, expected {ints_text(want[row].tolist())}"
    )


def _padding_problem(case: Case, fn):
    """(Diagnosis or None, what was seen) for the first stage of ``fn`` on ``case``
    that departs, or None when it is right."""
    tokens, pad_id = case.make()
    result = run(fn, (tokens, pad_id))
    call = f"padding_mask on case {case.label}"
    seen = plain_tensor_problem(result, call)
    if seen is not None:
        return None, seen
    if not torch.equal(tokens, case.make()[0]):
        return INPUT_MODIFIED, f"{call}: your function changed the tokens it was given."
    b, s = tokens.shape
    if len(result.shape) > 4 or aligned_shape(result.shape) != [b, 1, 1, s]:
        return MASK_SHAPE, (
            f"{call} returned shape {list(result.shape)}: "
            f"{_shape_reading(result.shape, b, s)}."
        )
    pattern = result.reshape(b, s)
    if result.dtype != torch.bool:
        keep, how = read_as_bool(pattern)
        problem = None if keep is None else _pad_pattern_problem(keep, tokens, pad_id)
        note = "is right" if problem is None else "is off too: " + problem[1]
        return MASK_NOT_BOOL, dtype_detail(call, result, keep, how, note)
    problem = _pad_pattern_problem(pattern, tokens, pad_id)
    if problem is None:
        return None
    return problem[0], f"{call}: {problem[1]}."


def _judge_padding(title: str, padding_mask_fn) -> None:
    """Fail naming the first stage that departs (a listed pitfall only when it
    reproduces every case); return when every case is right."""
    verify_integrity()
    cases = _padding_cases()
    problems = [p for case in cases if (p := _padding_problem(case, padding_mask_fn))]
    if not problems:
        return
    theirs = [run(padding_mask_fn, case.make()) for case in cases]
    with pictured(lambda said: _masks_picture(cases, theirs, said)):
        pitfall = reproduced_pitfall(theirs, cases, PADDING_PITFALLS)
        if pitfall is not None:
            pitfall.fail(title)
        diagnosis, seen = problems[0]
        if diagnosis is PAD_CONSTANT and not _constant_everywhere(theirs):
            diagnosis, seen = (
                None,
                (f"{seen}, although on other cases your mask changes with the tokens"),
            )
        fail_stage(title, diagnosis, seen, S_PADDING)


def _masks_picture(cases, theirs, said: str):
    """The learner's mask against self-attention scores [B, H, S, S] with H = B (as in
    the lesson's model, where a mask on the wrong axis runs), next to the right one."""
    made = [case.make() for case in cases]
    return masks_picture(
        theirs,
        [padding_mask(*args) for args in made],
        [case.label for case in cases],
        [(t.size(0), t.size(0), t.size(1), t.size(1)) for t, _ in made],
        said,
    )


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
    _judge_padding("padding_mask", padding_mask_fn)
    # _judge_padding returns only when every case is the reference's mask exactly
    # (shape, bool dtype, device, pattern): a comparison with it could only pass.
    passed("padding_mask", f"matches the reference on {len(_padding_cases())} cases")


seal(__name__)
