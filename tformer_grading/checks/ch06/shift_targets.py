"""Checks for exercise ``shift_targets`` of chapter 6 (book/ch06_training):
``shift_targets(tgt [B, St]) -> (tgt_in [B, St-1], labels [B, St-1])``, batch-first.
"""

from __future__ import annotations

import torch
from torch import nn

from ...guard.integrity import seal
from ..diagnosis import (
    Case,
    Diagnosis,
    Pitfall,
    passed,
    run_or_fail,
    single_threaded,
)
from .references import fail_first_problem, shift_ref, tokens
from .sections import S_SHIFT

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True

SHIFT_PITFALLS = [
    Pitfall(
        "sequence-first slicing on batch-first data",
        "You sliced axis 0 (tgt[:-1], tgt[1:]), as the seed does. That is the time "
        "axis only for sequence-first [St, B] tensors; on batch-first [B, St] data "
        "it drops the last and first *sequences* of the batch instead of shifting "
        "in time. Slice axis 1: tgt[:, :-1] and tgt[:, 1:].",
        S_SHIFT,
        lambda tgt: (tgt[:-1], tgt[1:]),
    ),
    Pitfall(
        "targets shifted the wrong way",
        "Your decoder input is tgt[:, 1:] and your labels tgt[:, :-1]: the model "
        "would be asked to predict each token from the *next* one. The decoder "
        "reads BOS y1 .. yn (tgt[:, :-1]) and predicts y1 .. yn EOS (tgt[:, 1:]).",
        S_SHIFT,
        lambda tgt: (tgt[:, 1:], tgt[:, :-1]),
    ),
    Pitfall(
        "labels not shifted",
        "Your decoder input and labels are the same tokens, so with the causal "
        "mask the model just copies its input (the loss drops to 0 and nothing is "
        "learned). The labels are the input moved one step left: tgt[:, :-1] in, "
        "tgt[:, 1:] out.",
        S_SHIFT,
        lambda tgt: (tgt[:, :-1], tgt[:, :-1]),
    ),
    Pitfall(
        "no shift at all",
        "You feed the whole target and use it as labels: nothing is shifted. "
        "Decoder input tgt[:, :-1], labels tgt[:, 1:].",
        S_SHIFT,
        lambda tgt: (tgt, tgt),
    ),
]

# Recognised by measuring what the learner's two tensors are, as slices of tgt.
_SLICES = (
    "The decoder input is tgt[:, :-1] (every position but the last) and the "
    "labels tgt[:, 1:] (every position but the first): position t reads BOS .. "
    "token t and is trained to predict token t+1."
)
SHIFT_WRONG_OFFSET = Diagnosis(
    "labels not one step ahead of the decoder input",
    "Each label must be the token one position after the decoder input's. " + _SLICES,
    S_SHIFT,
)
SHIFT_WRONG_LENGTH = Diagnosis(
    "decoder input and labels cut to the wrong length",
    "Both keep St-1 positions, so the longest row keeps its last label (EOS). "
    + _SLICES,
    S_SHIFT,
)
SHIFT_BATCH_AXIS = Diagnosis(
    "sliced the batch axis",
    "Your tensors are slices along axis 0, which for batch-first [B, St] data is the "
    "batch: rows of the batch are dropped instead of positions in time. " + _SLICES,
    S_SHIFT,
)
SHIFT_TIME_FIRST = Diagnosis(
    "outputs are time-first",
    "Every tensor in this course is batch-first: return [B, St-1] tensors, without a "
    "transpose. " + _SLICES,
    S_SHIFT,
)
SHIFT_TOKENS_CHANGED = Diagnosis(
    "tokens changed by the shift",
    "The shift only slices: every token keeps its id, BOS, EOS and PAD included (the "
    "loss leaves the PAD labels out through its pad_id). " + _SLICES,
    S_SHIFT,
)
SHIFT_ROWS_MIXED = Diagnosis(
    "rows of the batch mixed up",
    "Each row of the batch is shifted on its own: row i of the decoder input and of "
    "the labels comes from row i of tgt. " + _SLICES,
    S_SHIFT,
)
SHIFT_EXTRA_POSITIONS = Diagnosis(
    "tokens added to the shifted targets",
    "tgt already starts with BOS and ends with EOS: the shift adds nothing, it only "
    "slices. " + _SLICES,
    S_SHIFT,
)
SHIFT_RESHAPED = Diagnosis(
    "shifted targets reshaped",
    "Return both as [B, St-1], batch-first, as they come out of the slices: the loss "
    "flattens them itself. " + _SLICES,
    S_SHIFT,
)
SHIFT_NOT_A_PAIR = Diagnosis(
    "shift_targets does not return a pair of tensors",
    "Return the two tensors as a tuple: (decoder input, labels).",
    S_SHIFT,
)
SHIFT_MODIFIES_TGT = Diagnosis(
    "tgt modified in place",
    "Your shift_targets wrote into the tgt it was given (slices are views of it: "
    "writing into them writes into tgt). Leave tgt unchanged; the shift only slices.",
    S_SHIFT,
)
SHIFT_DEVICE = Diagnosis(
    "tensors moved to another device",
    "Return the slices on tgt's device (slicing keeps it; no .cpu() or .to(...)).",
    S_SHIFT,
)
SHIFT_DTYPE = Diagnosis(
    "token ids converted to another dtype",
    "Keep the token ids in tgt's own dtype, whatever it is (torch.long, torch.int32, "
    '...): no .long(), .int() or .to(...). The exercise says: "the shift only '
    'slices, so every token keeps its id and its dtype".',
    S_SHIFT,
)


def _shift_cases():
    # (6, 7): B = St - 1 catches axis mix-ups that keep the shapes right. The int32
    # cases show any conversion of the ids: the shift must keep tgt's dtype.
    shapes = [
        (3, 7, torch.long),
        (4, 5, torch.int32),
        (6, 7, torch.long),
        (1, 4, torch.long),
        (5, 9, torch.int32),
    ]
    return [
        Case(
            f"tgt [B={b}, St={s}] {dtype}",
            lambda b=b, s=s, i=i, dtype=dtype: (tokens(b, s, seed=i).to(dtype),),
        )
        for i, (b, s, dtype) in enumerate(shapes)
    ]


def _pair(title, out, label):
    """The learner's ``out`` as a (decoder input, labels) pair of tensors, or fail."""
    if not (
        isinstance(out, (tuple, list))
        and len(out) == 2
        and all(type(t) in (torch.Tensor, nn.Parameter) for t in out)
    ):
        kinds = (
            ", ".join(type(t).__name__ for t in out)
            if isinstance(out, (tuple, list))
            else ""
        )
        got = (
            f"a {type(out).__name__} of {len(out)} ({kinds})"
            if isinstance(out, (tuple, list))
            else f"a {type(out).__name__}"
        )
        SHIFT_NOT_A_PAIR.fail(title, f"In case {label} yours returned {got}.")
    return out


def _cut(start, stop, n) -> str:
    """Python slice text of [start, stop) on an axis of length n: '1:', ':-1'."""
    return f"{start or ''}:{'' if stop == n else stop - n}"


def _slice_of(got, tgt):
    """``(text, kind, start, stop)`` naming the slice of ``tgt [B, St]`` that ``got``
    equals (kind 'time', 'batch' or 'time-first'), or None."""
    b, s = tgt.shape
    windows = [
        (f"tgt[:, {_cut(i, j, s)}]", "time", i, j, tgt[:, i:j])
        for i in range(s)
        for j in range(i + 1, s + 1)
    ]
    windows += [
        (f"tgt[{_cut(i, j, b)}]", "batch", i, j, tgt[i:j])
        for i in range(b)
        for j in range(i + 1, b + 1)
    ]
    windows += [
        (f"tgt[:, {_cut(i, j, s)}].T", "time-first", i, j, tgt[:, i:j].T)
        for i in range(s)
        for j in range(i + 1, s + 1)
    ]
    for text, kind, i, j, window in windows:
        if got.shape == window.shape and torch.equal(got.to(window), window):
            return text, kind, i, j
    return None


def _describe_slices(slices, s) -> tuple[Diagnosis, str]:
    """The diagnosis for two outputs that are both slices of tgt (St = ``s``)."""
    (text_in, kind_in, a, b), (text_lab, kind_lab, c, d) = slices
    seen = f"your decoder input is {text_in} and your labels {text_lab}. "
    if "batch" in (kind_in, kind_lab):
        return SHIFT_BATCH_AXIS, seen
    if "time-first" in (kind_in, kind_lab):
        return SHIFT_TIME_FIRST, seen + "That is [St-1, B], time first. "
    if c - a != 1:
        return SHIFT_WRONG_OFFSET, (
            seen + f"Your labels are {c - a} position(s) after "
            "the decoder input's tokens, expected 1. "
        )
    return SHIFT_WRONG_LENGTH, (
        seen + f"They keep {b - a} and {d - c} of the St = {s} "
        f"positions, expected {s - 1}. "
    )


def _describe_tokens(name, got, want, tgt) -> tuple[Diagnosis, str] | None:
    """How ``got`` departs from ``want`` (the right slice) when it has the right shape
    or holds the right slice between extra columns, else None."""
    if (
        got.shape != want.shape
        and got.numel() == want.numel()
        and torch.equal(got.reshape(want.shape).to(want), want)
    ):
        return SHIFT_RESHAPED, (
            f"your {name} holds the right tokens in shape "
            f"{list(got.shape)}, expected {list(want.shape)}."
        )
    if got.dim() != 2 or got.size(0) != want.size(0) or got.size(1) < want.size(1):
        return None
    n, extra = want.size(1), got.size(1) - want.size(1)
    longer = _slice_of(got, tgt) if extra else None
    if longer is not None and longer[1] == "time":
        # The columns around the right slice are tgt's own: nothing was added, the
        # slice was not cut (torch.roll keeps every position, and wraps one round).
        return SHIFT_WRONG_LENGTH, (
            f"your {name} is {longer[0]}: it keeps {got.size(1)} of the St = "
            f"{tgt.size(1)} positions, expected {n}, the right slice and the "
            f"{extra} column(s) of tgt next to it."
        )
    for k in range(extra + 1):
        if extra and torch.equal(got[:, k : k + n].to(want), want):
            return SHIFT_EXTRA_POSITIONS, (
                f"your {name} is the right slice with {got[0, :k].tolist()} before it "
                f"and {got[0, k + n :].tolist()} after it (row 0)."
            )
    if extra:
        return None
    added = _window_with_additions(got.to(want), want, tgt)
    if added is not None:
        return SHIFT_EXTRA_POSITIONS, (
            f"your {name} is {added}, where the right slice "
            f"is {_slice_of(want, tgt)[0]}."
        )
    return _changed_tokens(name, got.to(want), want)


def _window_with_additions(got, want, tgt) -> str | None:
    """'[1] then tgt[:, :-2]' when ``got`` is a time slice of ``tgt`` other than the
    right one (``want``), moved by one or two columns put before or after it."""
    for k in (1, 2):
        before, after = _slice_of(got[:, k:], tgt), _slice_of(got[:, :-k], tgt)
        if (
            before is not None
            and before[1] == "time"
            and not torch.equal(got[:, k:], want[:, k:])
        ):
            return f"{got[0, :k].tolist()} (row 0) then {before[0]}"
        if (
            after is not None
            and after[1] == "time"
            and not torch.equal(got[:, :-k], want[:, :-k])
        ):
            return f"{after[0]} then {got[0, -k:].tolist()} (row 0)"
    return None


def _changed_tokens(name, got, want) -> tuple[Diagnosis, str]:
    """``got`` and ``want`` [B, n] differ: which tokens, or which rows, moved."""
    wrong = got != want
    rows = [
        next((j for j in range(len(want)) if torch.equal(g, want[j])), None)
        for g in got
    ]
    if None not in rows:
        return SHIFT_ROWS_MIXED, (
            f"row i of your {name} holds row {rows}[i] of the right slice."
        )
    was, now = sorted(set(want[wrong].tolist())), sorted(set(got[wrong].tolist()))
    r, t = (int(i) for i in wrong.nonzero()[0])
    first = (
        f"first at row {r}, position {t}: yours {int(got[r, t])}, expected "
        f"{int(want[r, t])}"
    )
    if was == now:
        return SHIFT_TOKENS_CHANGED, (
            f"your {name} has {int(wrong.sum())} tokens in other places, {first}."
        )
    return SHIFT_TOKENS_CHANGED, (
        f"your {name} has {int(wrong.sum())} tokens that differ from the right slice's "
        f"({first}): where it has {was}, yours has {now}."
    )


def _equal(got, want) -> bool:
    return (
        got.shape == want.shape
        and got.device == want.device
        and torch.equal(got.to(want), want)
    )


def _shift_problem(title, tgt, out, label) -> tuple[Diagnosis | None, str] | None:
    """The first way the learner's pair departs from (tgt[:, :-1], tgt[:, 1:]), measured
    as slices of ``tgt``: (diagnosis, what was seen), diagnosis None when nothing could
    be measured; None when the pair is right."""
    names, wants = ("decoder input", "label tensor"), shift_ref(tgt)
    got = _pair(title, out, label)
    seen = f"In case {label}"
    moved = [(n, g.device) for n, g in zip(names, got) if g.device != tgt.device]
    if moved:
        return SHIFT_DEVICE, (
            f"{seen} your {moved[0][0]} is on {moved[0][1]}, tgt on {tgt.device}."
        )
    if all(_equal(g, w) for g, w in zip(got, wants)):
        wrong = [(n, g.dtype) for n, g in zip(names, got) if g.dtype != tgt.dtype]
        if not wrong:
            return None
        return SHIFT_DTYPE, f"{seen} your {wrong[0][0]} is {wrong[0][1]}."
    slices = [_slice_of(g, tgt) for g in got]
    if all(slices):
        diagnosis, detail = _describe_slices(slices, tgt.size(1))
        return diagnosis, f"{seen} {detail.strip()}"
    for name, g, w in zip(names, got, wants):
        found = None if _equal(g, w) else _describe_tokens(name, g, w, tgt)
        if found is not None:
            return found[0], f"{seen} {found[1]}"
    shapes = " and ".join(f"{list(g.shape)}" for g in got)
    return None, (
        f"{seen} your decoder input and labels have shapes {shapes}, "
        f"expected {list(wants[0].shape)} = [B, St-1] each; they are not "
        "slices of tgt."
    )


def _stacked(fn):
    """``fn(tgt) -> (tgt_in, labels)`` as one stacked tensor, to compare variants."""

    def run_stacked(tgt):
        out = fn(tgt)
        return torch.stack([out[0], out[1]])  # raises when the two shapes differ

    return run_stacked


@single_threaded
def check_shift_targets(shift_fn) -> None:
    """``shift_fn(tgt [B, St]) -> (tgt_in [B, St-1], labels [B, St-1])``, on
    batch-first tensors; ``tgt`` is left unchanged."""
    title, cases = "shift_targets", _shift_cases()
    for case in cases:
        (tgt,) = case.make()
        given = tgt.clone()
        out = run_or_fail(title, shift_fn, (tgt,), f"case {case.label}: your code")
        if not torch.equal(tgt, given):
            SHIFT_MODIFIES_TGT.fail(
                title,
                f"In case {case.label} tgt changed at "
                f"{int((tgt != given).sum())} positions.",
            )
        problem = _shift_problem(title, given, out, case.label)
        if problem is not None:
            fail_first_problem(
                title,
                problem,
                cases,
                _stacked(shift_fn),
                SHIFT_PITFALLS,
                _stacked,
                (0, 0),
                S_SHIFT,
            )
    passed(title, f"matches the reference on {len(cases)} cases")


seal(__name__)
