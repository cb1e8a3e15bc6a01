"""Checks for chapter 6, training pitfalls and decoding (book/ch06_training).

Each public ``check_*`` is what an exercise test cell calls. The private functions
near each are the known wrong variants a diagnosis can name. Greedy decoding is
judged from behaviour too: the learner's loop runs on a model that records how it
is used, and each probe reads one thing that record (or the output) shows.
"""

from __future__ import annotations

import math
import types
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import LambdaLR

from tformer_ref.device import get_device
from tformer_ref.training import noam_lambda
from ..guard.integrity import seal
from .cases import randn
from .measure.sizes import named

# Unused here: the exercise's test cells call it as ch06.check_by_hand.
from .delegation import check_by_hand, check_not_delegated  # noqa: F401
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
    quiet,
    run,
    run_or_fail,
    same,
    single_threaded,
)

CHAPTER = "ch06_training"
S_TASK = Section(CHAPTER, "6.1", "The toy task")
S_SHIFT = Section(CHAPTER, "6.2", "Teacher forcing and the shift")
S_LOSS = Section(CHAPTER, "6.3", "A loss that ignores padding")
S_LR = Section(CHAPTER, "6.4", "Learning rate and warm-up")
S_CLIP = Section(CHAPTER, "6.5", "Exploding gradients and clipping")
S_PAD = Section(CHAPTER, "6.6", "Dynamic padding and bucketing")
S_DECODE = Section(CHAPTER, "6.7", "Greedy and beam decoding")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _tokens(
    b: int, s: int, seed: int, pad_id: int = 0, vocab: int = 13
) -> torch.Tensor:
    """[B, S] batch-first targets: BOS=1, random tokens, EOS=2, then padding (rows of
    varying length)."""
    g = _gen(seed)
    out = torch.full((b, s), pad_id, dtype=torch.long)
    for i in range(b):
        n = s if i == 0 else int(torch.randint(3, s + 1, (1,), generator=g))
        out[i, :n] = torch.randint(4, vocab, (n,), generator=g)
        out[i, 0], out[i, n - 1] = 1, 2
    return out.to(get_device())


# ------------------------------------------------------------------------ shift_targets


def _shift_ref(tgt):
    return tgt[:, :-1], tgt[:, 1:]


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
            lambda b=b, s=s, i=i, dtype=dtype: (_tokens(b, s, seed=i).to(dtype),),
        )
        for i, (b, s, dtype) in enumerate(shapes)
    ]


def _pair(title, out, label):
    """The learner's ``out`` as a (decoder input, labels) pair of tensors, or fail."""
    __tracebackhide__ = True
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
    names, wants = ("decoder input", "label tensor"), _shift_ref(tgt)
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


def _listed_pitfall(cases, theirs, pitfalls, adapt, atol, rtol):
    """The listed pitfall whose variant reproduces every one of ``theirs``, or None."""
    for pitfall in pitfalls:
        variant = [run(adapt(pitfall.impl), case.make()) for case in cases]
        if all(same(g, v, atol, rtol) for g, v in zip(theirs, variant)):
            return pitfall
    return None


def _fail_first_problem(
    title,
    problem,
    cases,
    learner,
    pitfalls,
    adapt,
    tolerance,
    section,
    pitfall_detail=None,
) -> None:
    """Fail on the first measured ``problem`` (diagnosis or None, what was seen): name
    the listed pitfall that reproduces ``learner`` (already adapted) on every case
    within ``tolerance`` (atol, rtol), else the measured diagnosis, else say where,
    not why."""
    __tracebackhide__ = True
    diagnosis, seen = problem
    theirs = [run(learner, case.make()) for case in cases]
    pitfall = _listed_pitfall(cases, theirs, pitfalls, adapt, *tolerance)
    if pitfall is not None:
        pitfall.fail(title, pitfall_detail or seen)
    if diagnosis is not None:
        diagnosis.fail(title, seen)
    fail(title, f"{seen} It {UNEXPLAINED}; compare your code with the lesson.", section)


def _as_is(fn):
    return fn


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
    __tracebackhide__ = True
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
            _fail_first_problem(
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


# ------------------------------------------------------------------------ sequence_loss


def _ce(logits, labels, **kw):
    vocab = logits.size(-1)
    return F.cross_entropy(logits.reshape(-1, vocab), labels.reshape(-1), **kw)


def _loss_ref(logits, labels, pad_id, eps):
    return _ce(logits, labels, ignore_index=pad_id, label_smoothing=eps)


def _loss_counts_padding(logits, labels, pad_id, eps):
    return _ce(logits, labels, label_smoothing=eps)


def _loss_mean_over_all(logits, labels, pad_id, eps):
    total = _loss_sum(logits, labels, pad_id, eps)
    return total / labels.numel()


def _loss_no_smoothing(logits, labels, pad_id, eps):
    return _ce(logits, labels, ignore_index=pad_id)


def _loss_pad_zero(logits, labels, pad_id, eps):
    return _ce(logits, labels, ignore_index=0, label_smoothing=eps)


def _loss_sum(logits, labels, pad_id, eps):
    return _ce(
        logits, labels, ignore_index=pad_id, label_smoothing=eps, reduction="sum"
    )


def _loss_counts_padding_no_smoothing(logits, labels, pad_id, eps):
    return _ce(logits, labels)


def _loss_of_probabilities(logits, labels, pad_id, eps):
    return _loss_ref(logits.softmax(-1), labels, pad_id, eps)


LOSS_PITFALLS = [
    Pitfall(
        "padding counted in the loss",
        "Your loss includes the padding positions: the model is trained to predict "
        "PAD after EOS, and batches with more padding weigh more. Pass "
        "ignore_index=pad_id to cross_entropy (or mask those positions out of both "
        "the sum and the count).",
        S_LOSS,
        _loss_counts_padding,
    ),
    Pitfall(
        "padding counted in the loss and no label smoothing",
        "Your loss includes the padding positions and ignores label_smoothing. "
        "Pass ignore_index=pad_id and label_smoothing=label_smoothing to "
        "cross_entropy.",
        S_LOSS,
        _loss_counts_padding_no_smoothing,
    ),
    Pitfall(
        "padding counted in the mean",
        "You left the padding out of the sum but still divide by all B·St "
        "positions, so the loss shrinks as padding grows. Divide by the number of "
        "real tokens (cross_entropy with ignore_index does).",
        S_LOSS,
        _loss_mean_over_all,
    ),
    Pitfall(
        "pad id hard-coded to 0",
        "You ignore token 0 instead of the pad_id you were given (the seed's masks "
        "hard-code 0 too). Use the pad_id argument.",
        S_LOSS,
        _loss_pad_zero,
    ),
    Pitfall(
        "label smoothing ignored",
        "Your loss ignores the label_smoothing argument. cross_entropy takes it "
        "directly: label_smoothing=label_smoothing.",
        S_LOSS,
        _loss_no_smoothing,
    ),
    Pitfall(
        "summed, not averaged",
        "Your loss is the sum over tokens, not the mean: its size (and the "
        "gradient's) grows with the batch and the learning rate no longer means "
        "the same thing. Average over the real tokens.",
        S_LOSS,
        _loss_sum,
    ),
    Pitfall(
        "softmax applied before cross_entropy",
        "cross_entropy takes raw logits and applies log_softmax itself; softmax "
        "first squashes every logit into [0, 1], so the loss can hardly move. Pass "
        "the logits as they are.",
        S_LOSS,
        _loss_of_probabilities,
    ),
]

# Recognised from the returned tensor itself, before any value is compared.
LOSS_NOT_SCALAR = Diagnosis(
    "loss not reduced to a scalar",
    "The loss must be a scalar tensor that gradients can flow back through: one "
    "number, the mean over the real tokens (cross_entropy's default reduction, with "
    "ignore_index).",
    S_LOSS,
)
LOSS_DETACHED = Diagnosis(
    "loss detached from the graph",
    "The loss must be a scalar tensor that gradients can flow back through. Do not "
    "call .item() or wrap it in torch.tensor(...).",
    S_LOSS,
)
LOSS_DTYPE = Diagnosis(
    "loss computed in another dtype",
    "Compute the loss in the logits' dtype (no .float() / .half()): a float64 model "
    "gets a float64 loss.",
    S_LOSS,
)

# Recognised by measuring the gradient of the learner's loss with respect to each
# position's logits. Any cross-entropy with label smoothing e, weighted w per position,
# has gradient w · (softmax - (1 - e)·onehot(label) - e/V) there: a least-squares fit
# of w and e at every position says which positions count, how much, and with what e.
_MEAN = (
    "The loss is the mean over the real tokens: every label that is not pad_id "
    "has weight 1/N (N = their number), every pad_id label weight 0 "
    "(cross_entropy with ignore_index=pad_id)."
)
LOSS_PADS_WEIGHTED = Diagnosis(
    "padding counted in the loss",
    "Pad labels must not count: the model would learn to predict PAD after EOS. "
    + _MEAN,
    S_LOSS,
)
LOSS_WRONG_TOKENS_IGNORED = Diagnosis(
    "ignores tokens that are not padding",
    "Only the labels equal to pad_id are left out; use the pad_id argument (not a "
    "constant) as ignore_index. " + _MEAN,
    S_LOSS,
)
LOSS_SMOOTHING = Diagnosis(
    "label smoothing not as specified",
    "With label_smoothing = ε the target puts 1 − ε on the label and spreads ε evenly "
    "over all V classes, the label included (ε/V each), exactly as "
    "F.cross_entropy(..., label_smoothing=ε) does.",
    S_LOSS,
)
LOSS_WEIGHTING = Diagnosis("not a mean over the real tokens", _MEAN, S_LOSS)
LOSS_UNEVEN = Diagnosis(
    "real tokens weighted unevenly",
    "Your loss weighs the real tokens differently from one another. " + _MEAN,
    S_LOSS,
)
LOSS_MISPAIRED = Diagnosis(
    "logits and labels paired up wrongly",
    "Flatten logits [B, St, V] and labels [B, St] the same way (logits.reshape(-1, "
    "V) with labels.reshape(-1), or cross_entropy(logits.transpose(1, 2), labels)), "
    "so that each position's logits meet that position's label.",
    S_LOSS,
)
LOSS_NOT_NORMALISED = Diagnosis(
    "logits not normalised by log_softmax",
    "A cross-entropy does not change when the same constant is added to all V logits "
    "of a position; yours does, so it does not take log_softmax of the raw logits "
    "(nll_loss needs log-probabilities; cross_entropy takes raw logits).",
    S_LOSS,
)
LOSS_SATURATES = Diagnosis(
    "loss of probabilities, not log-probabilities",
    "Your loss stays small however confidently wrong the logits are, as a loss of "
    "softmax probabilities does. cross_entropy applies log_softmax itself: pass it "
    "the raw logits (no softmax first); nll_loss needs log_softmax(logits), not "
    "softmax(logits).",
    S_LOSS,
)
LOSS_MIXES_POSITIONS = Diagnosis(
    "logits of different positions mixed",
    "Each position's loss must depend on that position's V logits only. Yours mixes "
    "positions: a reshape or view that interleaves the vocabulary axis with the "
    "time axis (logits [B, St, V].permute(0, 2, 1).reshape(-1, V)), or a softmax "
    "over another axis than the last. Use logits.reshape(-1, V) with "
    "labels.reshape(-1), or cross_entropy(logits.transpose(1, 2), labels).",
    S_LOSS,
)
LOSS_VALUE_OFFSET = Diagnosis(
    "loss value off by a constant",
    "Your gradient is right but the value is not the mean cross-entropy. KL "
    "divergence to the smoothed target (the Annotated Transformer's "
    "LabelSmoothing) is the cross-entropy minus the target's entropy: same gradient, "
    "smaller value. Return the cross-entropy.",
    S_LOSS,
)


def _loss_cases():
    configs = [  # (B, St, V, pad_id, label_smoothing, dtype)
        (4, 5, 13, 0, 0.1, torch.float32),
        (3, 6, 11, 0, 0.0, torch.float32),
        (2, 7, 9, 3, 0.0, torch.float32),
        (5, 4, 17, 0, 0.2, torch.float64),
        (4, 6, 10, 3, 0.1, torch.float32),
    ]
    cases = []
    for i, (b, s, v, pad, eps, dtype) in enumerate(configs):

        def make(b=b, s=s, v=v, pad=pad, eps=eps, dtype=dtype, i=i):
            labels = torch.randint(4, v, (b, s), generator=_gen(100 + i))
            if pad != 0:  # token 0 is a real token here: hard-coding 0 shows
                labels[:, ::2] = torch.randint(
                    0, 3, (b, (s + 1) // 2), generator=_gen(150 + i)
                )
            for r in range(1, b):  # every row but the first ends in padding
                labels[r, s - 1 - r % (s - 1) :] = pad
            logits = randn(b, s, v, seed=200 + i, dtype=dtype)
            return logits, labels.to(get_device()), pad, eps

        label = (
            f"logits [{named(B=b, St=s, V=v)}] {dtype}, pad_id={pad}, "
            f"label_smoothing={eps}"
        )
        cases.append(Case(label, make))
    return cases


@dataclass(frozen=True)
class _LossSeen:
    """One case of the learner's loss: its inputs, its value and its gradient with
    respect to the logits [B, St, V], all detached."""

    label: str
    logits: torch.Tensor
    labels: torch.Tensor
    pad: int
    eps: float
    value: torch.Tensor
    grad: torch.Tensor


LOSS_MODIFIES_INPUTS = Diagnosis(
    "arguments modified in place",
    "Your sequence_loss wrote into a tensor it was given: the caller's logits or "
    "labels change under it (train_step logs and reuses them). Leave both unchanged: "
    "work on new tensors (masked_fill, not masked_fill_; no labels[...] = ...), or use "
    "ignore_index=pad_id.",
    S_LOSS,
)


def _unchanged_arguments(title, given, originals, label) -> None:
    """Fail when the learner's call changed any of ``given`` (logits [B, St, V],
    labels [B, St]) from ``originals``."""
    __tracebackhide__ = True
    for name, now, was in zip(("logits", "labels"), given, originals):
        now = now.detach()
        if now.shape != was.shape or not torch.equal(now, was.to(now)):
            changed = (
                int((now != was.to(now)).sum())
                if now.shape == was.shape
                else f"all (now shape {list(now.shape)})"
            )
            LOSS_MODIFIES_INPUTS.fail(
                title,
                f"In case {label} your code changed "
                f"{changed} entries of the {name} it was "
                "given.",
            )


def _loss_value(title, loss_fn, logits, labels, pad, eps, label):
    """Run the learner's loss on a graph-connected copy of ``logits`` (so in-place
    writes are the learner's business) and check it is a scalar tensor with a graph."""
    __tracebackhide__ = True
    leaf = logits.detach().clone().requires_grad_(True)
    given = (leaf.clone(), labels.clone())
    out = run_or_fail(title, loss_fn, (*given, pad, eps), f"case {label}: your code")
    _unchanged_arguments(title, given, (logits, labels), label)
    if isinstance(out, (float, int)):  # a loss.item() returned
        LOSS_DETACHED.fail(title, f"Yours is a Python {type(out).__name__}.")
    if type(out) is not torch.Tensor:
        fail(
            title,
            f"case {label}: expected a scalar torch.Tensor, got {type(out).__name__}",
            S_LOSS,
        )
    if out.dim() != 0:
        LOSS_NOT_SCALAR.fail(title, f"Yours has shape {list(out.shape)}.")
    if not out.requires_grad:
        LOSS_DETACHED.fail(title, "Yours has requires_grad=False.")
    if out.dtype != logits.dtype:
        LOSS_DTYPE.fail(
            title,
            f"In case {label} your loss is {out.dtype} for {logits.dtype} logits.",
        )
    if not bool(torch.isfinite(out.detach())):
        fail(
            title,
            f"In case {label} your loss is {float(out.detach())} (a log of "
            f"0 or a division by 0?). It {UNEXPLAINED}; compare your code with "
            "the lesson.",
            S_LOSS,
        )
    return leaf, out


def _gradient_seen(title, loss_fn, logits, labels, pad, eps, label) -> _LossSeen:
    """The learner's loss and its gradient with respect to ``logits``."""
    __tracebackhide__ = True
    leaf, out = _loss_value(title, loss_fn, logits, labels, pad, eps, label)
    grad = run(lambda: torch.autograd.grad(out, leaf, allow_unused=True)[0], ())
    if isinstance(grad, Raised):
        fail(
            title,
            f"case {label}: the backward pass through your loss raised {grad!r}",
            S_LOSS,
        )
    if grad is None or not bool(grad.any()):
        LOSS_DETACHED.fail(title, "No gradient reaches the logits.")
    return _LossSeen(label, logits, labels, pad, eps, out.detach(), grad.detach())


def _loss_seen(title, loss_fn, case) -> _LossSeen:
    __tracebackhide__ = True
    return _gradient_seen(title, loss_fn, *case.make(), case.label)


def _loss_seen_at(title, loss_fn, logits, seen) -> _LossSeen:
    """The same case as ``seen`` with other logits."""
    __tracebackhide__ = True
    return _gradient_seen(
        title, loss_fn, logits, seen.labels, seen.pad, seen.eps, seen.label
    )


def _fit_positions(seen: _LossSeen, labels=None):
    """Per position [B, St]: the weight w, smoothing e and relative residual that fit
    the learner's gradient as w · (softmax - (1 - e)·onehot(label) - e/V)."""
    labels = seen.labels if labels is None else labels
    vocab = seen.logits.size(-1)
    g = seen.grad.double()
    onehot = F.one_hot(labels.clamp(0, vocab - 1), vocab).double()
    u = seen.logits.double().softmax(-1) - onehot
    v = onehot - 1.0 / vocab
    uu, vv, uv = (u * u).sum(-1), (v * v).sum(-1), (u * v).sum(-1)
    gu, gv = (g * u).sum(-1), (g * v).sum(-1)
    det = uu * vv - uv**2
    a, b = (gu * vv - gv * uv) / det, (gv * uu - gu * uv) / det  # a = w, b = w·e
    rest = g - a[..., None] * u - b[..., None] * v
    residual = rest.norm(dim=-1) / g.norm(dim=-1).clamp_min(1e-30)
    eps = torch.where(a.abs() > 1e-12, b / a, torch.zeros_like(a))
    return a, eps, residual


def _fits(seen, residual) -> torch.Tensor:
    """Positions where the fit explains the gradient (or there is no gradient)."""
    size = seen.grad.double().norm(dim=-1) * int(_real(seen).sum())
    return (residual < 1e-3) | (size < 1e-6)


def _real(seen):
    return seen.labels != seen.pad


def _not_a_cross_entropy(title, loss_fn, seen, weight, residual) -> tuple | None:
    """Why the gradient is not that of a weighted cross-entropy, or None when it is."""
    n_real = int(_real(seen).sum())
    if bool(_fits(seen, residual).all()):
        return None
    mixed = _mixes_positions(title, loss_fn, seen)
    if mixed is not None:
        return LOSS_MIXES_POSITIONS, mixed
    pushed = seen.grad.double().argmin(-1)  # the class each position's loss pushes up
    w2, _, r2 = _fit_positions(seen, pushed)
    if bool(_fits(seen, r2).all()):
        moved = int(((pushed != seen.labels) & (w2.abs() * n_real > 1e-6)).sum())
        return LOSS_MISPAIRED, (
            f"In case {seen.label} at {moved} of the "
            f"{seen.labels.numel()} positions your loss scores the "
            "logits against another position's label."
        )
    return _probe_normalisation(title, loss_fn, seen)


def _mixes_positions(title, loss_fn, seen) -> str | None:
    """Change the logits of position (0, 0) only: in a per-position loss, the gradient
    at every other position stays the same."""
    __tracebackhide__ = True
    changed = seen.logits.clone()
    changed[0, 0] += torch.linspace(
        -2.0, 2.0, changed.size(-1), dtype=changed.dtype, device=changed.device
    )
    other = _loss_seen_at(title, loss_fn, changed, seen)
    moved = (other.grad - seen.grad).abs().flatten(0, 1)[1:].amax(-1)
    scale = float(seen.grad.abs().max())
    if float(moved.max()) > 1e-4 * scale:
        count = int((moved > 1e-4 * scale).sum())
        return (
            f"In case {seen.label} changing only position (0, 0)'s logits changed "
            f"your loss's gradient at {count} other positions."
        )
    return None


def _probe_normalisation(title, loss_fn, seen) -> tuple:
    """Shift every position's logits by its own constant, then make them saturate:
    a cross-entropy is unchanged by the first and grows without bound in the second."""
    __tracebackhide__ = True
    shift = torch.linspace(
        -3.0,
        5.0,
        seen.labels.numel(),
        dtype=seen.logits.dtype,
        device=seen.logits.device,
    ).reshape(*seen.labels.shape, 1)
    args = (seen.labels, seen.pad, seen.eps, seen.label)
    moved = _loss_value(title, loss_fn, seen.logits + shift, *args)[1].detach()
    if not math.isclose(float(moved), float(seen.value), rel_tol=1e-4, abs_tol=1e-5):
        return LOSS_NOT_NORMALISED, (
            f"In case {seen.label} adding a constant to each "
            f"position's logits changed your loss from "
            f"{float(seen.value):.5g} to {float(moved):.5g}."
        )
    wrong_class = (seen.labels + 1) % seen.logits.size(-1)
    sure = 30.0 * F.one_hot(wrong_class, seen.logits.size(-1)).to(seen.logits)
    theirs = _loss_value(title, loss_fn, sure, *args)[1].detach()
    want = _loss_ref(sure, seen.labels, seen.pad, seen.eps)
    if float(theirs) < 0.5 * float(want):
        return LOSS_SATURATES, (
            f"In case {seen.label}, with logits that put 30 on a "
            f"wrong class, your loss is {float(theirs):.4g}; the "
            f"cross-entropy is {float(want):.4g}."
        )
    return None, (
        f"In case {seen.label} the gradient of your loss is not that of a "
        "cross-entropy of softmax(logits), with or without smoothing."
    )


def _loss_padding(seen, weight) -> tuple | None:
    """Which positions count: the pads must not, every real token must."""
    real = _real(seen)
    n_real = int(real.sum())
    counts = weight.abs() * n_real > 1e-4
    pads_in, n_pads = int((counts & ~real).sum()), int((~real).sum())
    left_out = real & ~counts
    if left_out.any():
        ids = sorted(set(seen.labels[left_out].tolist()))
        rows = sorted(set(left_out.nonzero()[:, 0].tolist()))
        return LOSS_WRONG_TOKENS_IGNORED, (
            f"In case {seen.label} (pad_id={seen.pad}) your loss leaves out "
            f"{int(left_out.sum())} real tokens, labels {ids} in rows {rows}"
            + (
                f", and counts {pads_in} of the {n_pads} pad positions."
                if pads_in
                else "."
            )
        )
    if pads_in:
        return LOSS_PADS_WEIGHTED, (
            f"In case {seen.label} your loss gives weight to {pads_in} of the "
            f"{n_pads} pad positions ({100 * pads_in / n_pads:.0f} %)."
        )
    return None


def _smoothing_story(on, off, eps, vocab) -> str:
    """What a target with ``on`` on the label and ``off`` elsewhere looks like."""
    known = [
        ((1.0, 0.0), "no smoothing at all: the label_smoothing argument is ignored"),
        ((1 - eps, eps / (vocab - 1)), "ε spread over the V−1 other classes only"),
        (
            (1.0, eps),
            "ε given to every class instead of ε/V (a sum where a mean belongs)",
        ),
        ((eps + (1 - eps) / vocab, (1 - eps) / vocab), "ε and 1 − ε swapped"),
        ((1 + eps / vocab, eps / vocab), "ε/V added without taking ε off the label"),
        (
            (1 - eps, 0.0),
            "a smoothing term that carries no gradient (computed "
            "from detached logits?)",
        ),
    ]
    for (a, b), story in known:
        if abs(on - a) < 1e-3 and abs(off - b) < 1e-3 / vocab and eps > 0:
            return f" That is {story}."
    return ""


def _loss_smoothing(seen, weight, eps_fit) -> tuple | None:
    """The smoothed target the gradient implies, at the real tokens that count:
    Σ_k target_k = N·w, target_other = N·w·e/V."""
    n_real, vocab, eps = int(_real(seen).sum()), seen.logits.size(-1), seen.eps
    counts = _real(seen) & (weight.abs() * n_real > 1e-4)
    measured = float(eps_fit[counts].median())
    spread = float(eps_fit[counts].max() - eps_fit[counts].min())
    if spread > 1e-3:
        return LOSS_UNEVEN, (
            f"In case {seen.label} the label smoothing your gradient implies varies "
            f"from token to token (ε from {float(eps_fit[counts].min()):.3g} to "
            f"{float(eps_fit[counts].max()):.3g}), and so do the weights: the tokens' "
            "losses are not one smoothed cross-entropy averaged."
        )
    if abs(measured - eps) < 1e-3:
        return None
    total = float((weight[counts] * n_real).median())
    on, off = total * (1 - measured + measured / vocab), total * measured / vocab
    story = _smoothing_story(on, off, eps, vocab)
    return LOSS_SMOOTHING, (
        f"In case {seen.label} (V = {vocab}) your loss's gradient implies a target of "
        f"{on:.4g} on the label and {off:.4g} on each other class; label_smoothing = "
        f"{eps} gives {1 - eps + eps / vocab:.4g} and {eps / vocab:.4g}.{story}"
    )


def _weighting_story(k, seen) -> str:
    b, s = seen.labels.shape
    known = [
        (b * s, "B·St, all positions, pads included"),
        (b, "B, the batch size"),
        (s, "St, the sequence length"),
        (1, "1: a sum, not a mean"),
    ]
    for value, story in known:
        if abs(k - value) < 1e-3 * value:
            return f" You divide by {story}."
    return ""


def _groups_weigh_equally(weight, real, axis) -> bool:
    """Each row (axis 1) or column (axis 0) of ``weight`` [B, St] is a mean over its
    real tokens, and the rows (columns) are averaged: weight = 1 / (count · groups)."""
    count = real.sum(axis, keepdim=True).double()
    groups = real.size(1 - axis)
    return bool(((weight.double() * count * groups)[real] - 1).abs().lt(1e-3).all())


def _loss_weighting(seen, weight) -> tuple | None:
    """Every real token must weigh 1/N: measure what the learner's loss gives them."""
    real = _real(seen)
    n_real = int(real.sum())
    w = weight[real] * n_real
    if bool(((w - 1).abs() < 1e-3).all()):
        return None
    seen_at = f"In case {seen.label} ({n_real} real tokens)"
    if bool(((w - w[0]).abs() < 1e-3 * w[0].abs()).all()):
        k = float(n_real / w[0])
        return LOSS_WEIGHTING, (
            f"{seen_at} every real token has weight 1/{k:.4g} "
            f"instead of 1/{n_real}.{_weighting_story(k, seen)}"
        )
    if _groups_weigh_equally(weight, real, 1):
        return LOSS_WEIGHTING, (
            f"{seen_at} your loss weights every sequence equally "
            "(a mean of per-sequence means): a token of a row with "
            "n real tokens weighs 1/(B·n), not 1/N."
        )
    if _groups_weigh_equally(weight, real, 0):
        return LOSS_WEIGHTING, (
            f"{seen_at} your loss weights every time step "
            "equally (a mean of per-position means over the "
            "batch): a token at a position with m real tokens "
            "weighs 1/(St·m), not 1/N."
        )
    return LOSS_UNEVEN, (
        f"{seen_at} the real tokens' weights range from "
        f"{float(w.min()):.4g}/N to {float(w.max()):.4g}/N, "
        "expected 1/N each."
    )


def _smoothed_target_entropy(eps, vocab) -> float:
    on, off = 1 - eps + eps / vocab, eps / vocab
    return -(on * math.log(on) + (vocab - 1) * off * math.log(off)) if eps else 0.0


def _loss_offset(seen) -> tuple | None:
    """With the right gradient, the value may still be off by a constant."""
    want = float(_loss_ref(seen.logits, seen.labels, seen.pad, seen.eps))
    got = float(seen.value)
    if math.isclose(got, want, rel_tol=1e-4, abs_tol=1e-5):
        return None
    entropy = _smoothed_target_entropy(seen.eps, seen.logits.size(-1))
    kl = (
        f" The difference is the smoothed target's entropy ({entropy:.4g}): a KL "
        "divergence."
        if abs(want - got - entropy) < 1e-4
        else ""
    )
    return LOSS_VALUE_OFFSET, (
        f"In case {seen.label} your loss is {got:.6g}, the mean "
        f"cross-entropy {want:.6g}.{kl}"
    )


def _loss_problem(title, loss_fn, seen) -> tuple | None:
    """The first stage at which the learner's loss departs, as (diagnosis, seen)."""
    weight, eps_fit, residual = _fit_positions(seen)
    return (
        _not_a_cross_entropy(title, loss_fn, seen, weight, residual)
        or _of_probabilities(title, loss_fn, seen, weight)
        or _loss_padding(seen, weight)
        or _loss_smoothing(seen, weight, eps_fit)
        or _loss_weighting(seen, weight)
        or _loss_offset(seen)
    )


def _of_probabilities(title, loss_fn, seen, weight) -> tuple | None:
    """A loss of probabilities has a cross-entropy's gradient weighted by p(label):
    when the real tokens' weights follow no pattern, probe for it."""
    __tracebackhide__ = True
    problem = _loss_weighting(seen, weight)
    if problem is None or problem[0] is not LOSS_UNEVEN:
        return None
    probed = _probe_normalisation(title, loss_fn, seen)
    return probed if probed[0] is not None else None


def _by_smoothing(loss_fn, cases, problem) -> tuple:
    """A problem no stage could name, showing in exactly the cases with label smoothing,
    is the smoothing (done some other way than PyTorch's)."""
    if problem[0] is not None:
        return problem
    wrong = {
        c.label
        for c in cases
        if not same(run(loss_fn, c.make()), _loss_ref(*c.make()), 1e-5, 1e-4)
    }
    smoothed = {c.label for c in cases if c.make()[3] > 0}
    if wrong != smoothed:
        return problem
    return LOSS_SMOOTHING, (
        f"Your loss is right in every case without label smoothing "
        f"and wrong in every case with it. {problem[1]}"
    )


@single_threaded
def check_sequence_loss(loss_fn) -> None:
    """``loss_fn(logits [B, St, V], labels [B, St], pad_id, label_smoothing) -> scalar
    tensor``: the mean smoothed cross-entropy over the labels that are not pad_id."""
    __tracebackhide__ = True
    title, cases = "sequence_loss", _loss_cases()
    for case in cases:
        problem = _loss_problem(title, loss_fn, _loss_seen(title, loss_fn, case))
        if problem is not None:
            _fail_first_problem(
                title,
                _by_smoothing(loss_fn, cases, problem),
                cases,
                loss_fn,
                LOSS_PITFALLS,
                _as_is,
                (1e-5, 1e-4),
                S_LOSS,
            )
    compare_to_reference(title, cases, loss_fn, _loss_ref, (), atol=1e-5, rtol=1e-4)


# -------------------------------------------------------------------------- noam_lambda


def _paper(n, d, w):
    return d**-0.5 * min(n**-0.5, n * w**-1.5)


def _noam_off_by_one_guarded(step, d, w):
    return _paper(max(step, 1), d, w)


def _noam_zero_at_start(step, d, w):
    return 0.0 if step == 0 else _paper(step, d, w)


def _noam_plus_two(step, d, w):
    return _paper(step + 2, d, w)


def _noam_warmup_exponent(step, d, w):
    n = step + 1
    return d**-0.5 * min(n**-0.5, n * w**-0.5)


def _noam_no_d_model(step, d, w):
    n = step + 1
    return min(n**-0.5, n * w**-1.5)


def _noam_max(step, d, w):
    n = step + 1
    return d**-0.5 * max(n**-0.5, n * w**-1.5)


def _rates(fn):
    """``fn(step, d_model, warmup)`` -> (d_model, warmup, steps) -> float64 tensor of
    its rates."""

    def rates(d, w, steps):
        return torch.tensor([float(fn(s, d, w)) for s in steps], dtype=torch.float64)

    return rates


NOAM_PITFALLS = [
    Pitfall(
        "Noam schedule off by one",
        "Your rate at LambdaLR's step s is the paper's rate for update s (or a "
        "guard such as max(step, 1)): LambdaLR counts from 0 and step 0 *is* the "
        "first update, so use n = step + 1.",
        S_LR,
        _noam_off_by_one_guarded,
    ),
    Pitfall(
        "Noam schedule off by one",
        "Your first update gets learning rate 0 and every later one the rate of "
        "the update before it: LambdaLR's step 0 is the first update, so use n = "
        "step + 1 (no special case needed).",
        S_LR,
        _noam_zero_at_start,
    ),
    Pitfall(
        "Noam schedule off by one",
        "Your rates are one update ahead: LambdaLR's step 0 is update n = 1, so "
        "n = step + 1, not step + 2.",
        S_LR,
        _noam_plus_two,
    ),
    Pitfall(
        "warm-up exponent wrong",
        "The warm-up branch is n · warmup^-1.5 (so the two branches meet at n = "
        "warmup); you used warmup^-0.5.",
        S_LR,
        _noam_warmup_exponent,
    ),
    Pitfall(
        "missing the d_model^-0.5 factor",
        "The whole schedule is scaled by d_model^-0.5: wider models take smaller "
        "steps.",
        S_LR,
        _noam_no_d_model,
    ),
    Pitfall(
        "max instead of min",
        "The rate is the *minimum* of the two branches: it rises linearly while n "
        "< warmup, then decays like n^-0.5. With max it starts huge and never "
        "warms up.",
        S_LR,
        _noam_max,
    ),
]

# Recognised at step 0 alone: an exception or an infinite rate has no values to compare.
NOAM_DIVIDES_BY_ZERO = Diagnosis(
    "Noam schedule divides by zero at step 0",
    "LambdaLR calls your function with step 0 before the first update (the seed's "
    "formula uses step^-0.5). Use n = step + 1.",
    S_LR,
)


# Recognised by measuring the learner's rates: the step offset, the exponents of the two
# branches, the d_model scale and the warm-up coefficient, in that order (each later
# measurement assumes the earlier ones came out right).
_NOAM = (
    "Noam: lr(n) = d_model^-0.5 · min(n^-0.5, n · warmup^-1.5) for update n = "
    "step + 1: linear warm-up, peak at n = warmup, then decay like n^-0.5."
)
NOAM_STEP_OFFSET = Diagnosis(
    "Noam schedule off by one",
    "LambdaLR's step 0 is the first update, n = 1: use n = step + 1. " + _NOAM,
    S_LR,
)
NOAM_STEP_ZERO = Diagnosis(
    "first update's rate wrong",
    "Step 0 needs no special case: with n = step + 1 it is update 1, rate "
    "d_model^-0.5 · warmup^-1.5. " + _NOAM,
    S_LR,
)
NOAM_DECAY_EXPONENT = Diagnosis(
    "decay exponent wrong",
    "After the warm-up the rate decays like n^-0.5 (the inverse square root). " + _NOAM,
    S_LR,
)
NOAM_WARMUP_SHAPE = Diagnosis(
    "warm-up not linear",
    "During the warm-up the rate grows linearly in n: n · warmup^-1.5. " + _NOAM,
    S_LR,
)
NOAM_SCALE = Diagnosis(
    "schedule scaled wrongly",
    "The whole schedule is multiplied by d_model^-0.5 (and by nothing else: the "
    "optimizer's lr is 1.0). " + _NOAM,
    S_LR,
)
NOAM_WARMUP_SCALE = Diagnosis(
    "warm-up exponent wrong",
    "The warm-up branch is n · warmup^-1.5, so that it meets the decay branch n^-0.5 "
    "at n = warmup. " + _NOAM,
    S_LR,
)
NOAM_PEAK = Diagnosis(
    "warm-up length wrong",
    "The rate is the minimum of the two branches and peaks at n = warmup (step "
    "warmup - 1). " + _NOAM,
    S_LR,
)
NOAM_NOT_A_NUMBER = Diagnosis(
    "noam_lambda does not return a number",
    "Return the multiplier as a Python float (or a 0-d tensor): LambdaLR multiplies "
    "the base lr by it.",
    S_LR,
)


def _noam_cases():
    configs = [(512, 4000), (64, 200), (128, 50), (32, 1)]
    return [
        Case(
            f"d_model={d}, warmup={w}",
            lambda d=d, w=w: (d, w, [0, 1, 2, 3, w - 1, w, w + 1, 3 * w, 10 * w]),
        )
        for d, w in configs
    ]


def _rate_at_step_zero_breaks(noam_fn) -> str | None:
    """What goes wrong with ``noam_fn(0, 64, 200)``, or None when it is a finite
    number."""
    first = run(lambda: float(noam_fn(0, 64, 200)), ())
    arithmetic = (ZeroDivisionError, ValueError, OverflowError, FloatingPointError)
    if isinstance(first, Raised) and isinstance(first.exc, arithmetic):
        return f"noam_lambda(0, 64, 200) raised {first!r}."
    if isinstance(first, float) and not math.isfinite(first):
        return f"noam_lambda(0, 64, 200) returned {first}."
    return None  # any other exception: reported with the case that raised it


def _noam_rate(title, noam_fn, step, d, w) -> float:
    """``float(noam_fn(step, d, w))``; fails saying what the learner's code did."""
    __tracebackhide__ = True
    out = run_or_fail(title, noam_fn, (step, d, w), f"noam_lambda({step}, {d}, {w})")
    value = run(float, (out,))
    if isinstance(value, Raised) or isinstance(out, (str, bytes)):
        NOAM_NOT_A_NUMBER.fail(
            title, f"noam_lambda({step}, {d}, {w}) returned a {type(out).__name__}."
        )
    return value


_SHOWN_UPDATES = (1, 10, 100, 1000, 10000)


def _rate_table(title, noam_fn, d, w) -> str:
    """The learner's and Noam's rates at a few updates, as the learner reads them."""
    steps = [n - 1 for n in _SHOWN_UPDATES]
    got = ", ".join(f"{_noam_rate(title, noam_fn, s, d, w):.3g}" for s in steps)
    want = ", ".join(f"{noam_lambda(s, d, w):.3g}" for s in steps)
    return (
        f"With d_model={d}, warmup={w} your rates at steps "
        f"{', '.join(map(str, steps))} are {got}; Noam gives {want}."
    )


def _noam_offset(title, noam_fn, d, w) -> tuple | None:
    """Rates that are Noam's at another step (n = step + 1 + k, k != 0), or Noam's at
    every step but step 0."""
    steps = [1, 2, 3, w - 2, w - 1, w, w + 1, 3 * w, 10 * w]
    got = [_noam_rate(title, noam_fn, s, d, w) for s in steps if s >= 1]
    first = _noam_rate(title, noam_fn, 0, d, w)
    for k in (0, -1, 1, -2, 2):
        want = [noam_lambda(s + k, d, w) for s in steps if s >= 1 and s + k >= 0]
        if not _close(got[len(got) - len(want) :], want):
            continue
        if k == 0 and math.isclose(first, noam_lambda(0, d, w), rel_tol=1e-6):
            return None  # right here: other configurations tell
        if k == 0:
            return NOAM_STEP_ZERO, (
                f"With d_model={d}, warmup={w} your rate at step 0 "
                f"is {first:.4g}, Noam's "
                f"{noam_lambda(0, d, w):.4g}; from step 1 on yours "
                "are right."
            )
        return NOAM_STEP_OFFSET, (
            f"Your rate at step s is Noam's for update n = s + {1 + k}, where "
            f"LambdaLR's step s is update s + 1; at step 0 yours is {first:.3g}."
        )
    return None


def _slope(title, noam_fn, n1, n2, d, w) -> float:
    """d log(rate) / d log(n) between updates n1 and n2."""
    r1 = _noam_rate(title, noam_fn, n1 - 1, d, w)
    r2 = _noam_rate(title, noam_fn, n2 - 1, d, w)
    if r1 <= 0 or r2 <= 0:
        return math.nan
    return math.log(r2 / r1) / math.log(n2 / n1)


# Far past any warm-up a learner might have used, whatever warmup they were given.
_FAR = (10**6, 10**7)


def _still_rising(title, noam_fn, d, w) -> bool:
    """The rate still grows linearly at updates _FAR: a warm-up that has not ended."""
    return abs(_slope(title, noam_fn, *_FAR, d, w) - 1) < 1e-3


def _decaying(title, noam_fn, configs) -> list:
    """The configurations whose warm-up (the learner's) is over by update _FAR[0]."""
    return [(d, w) for d, w in configs if not _still_rising(title, noam_fn, d, w)]


def _noam_decay(title, noam_fn, configs) -> tuple | None:
    """Far after the warm-up the rate must fall like n^-0.5 (smallest warmup first)."""
    where = f"between updates {_FAR[0]:.0e} and {_FAR[1]:.0e}"
    decaying = _decaying(title, noam_fn, sorted(configs, key=lambda c: c[1]))
    if not decaying:
        return NOAM_DECAY_EXPONENT, (
            f"{where.capitalize()} your rate still grows like "
            "n^1 in every case: it never decays."
        )
    for d, w in decaying:
        decay = _slope(title, noam_fn, *_FAR, d, w)
        if math.isnan(decay):
            return NOAM_DECAY_EXPONENT, (
                f"With d_model={d}, warmup={w} your rate is "
                f"{_noam_rate(title, noam_fn, _FAR[1] - 1, d, w):.3g} at update "
                f"{_FAR[1]:.0e}: Noam's decays like n^-0.5 and never reaches 0."
            )
        if not abs(decay + 0.5) < 1e-3:
            return NOAM_DECAY_EXPONENT, (
                f"With d_model={d}, warmup={w}, {where} your rate goes like "
                f"n^{decay:.3g}, expected n^-0.5."
            )
    return None


def _line_fit(xs, ys) -> tuple[float, float, float]:
    """(slope, intercept, largest relative residual) of the least-squares line."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum(
        (x - mx) ** 2 for x in xs
    )
    icept = my - slope * mx
    scale = max(abs(y) for y in ys) or 1.0
    return slope, icept, max(abs(slope * x + icept - y) for x, y in zip(xs, ys)) / scale


def _noam_warmup(title, noam_fn, configs) -> tuple | None:
    """During the warm-up (steps 0..4, warmup >= 50) the rate must be α · (step + 1):
    a line through zero at step -1."""
    for d, w in configs:
        if w < 50:
            continue
        steps = list(range(5))
        rates = [_noam_rate(title, noam_fn, s, d, w) for s in steps]
        if not any(rates):
            return NOAM_WARMUP_SHAPE, (
                f"With d_model={d}, warmup={w} your rate is 0 "
                "at steps 0..4: it never starts to warm up."
            )
        slope, icept, off = _line_fit(steps, rates)
        if off > 1e-4:
            rise = _slope(title, noam_fn, 2, 4, d, w)
            return NOAM_WARMUP_SHAPE, (
                f"With d_model={d}, warmup={w}, over steps 0..4 your rate is not a "
                f"line: between updates 2 and 4 it goes like n^{rise:.3g}, expected "
                "n^1."
            )
        if slope > 0 and not math.isclose(icept / slope, 1.0, abs_tol=1e-3):
            return NOAM_STEP_OFFSET, (
                f"With d_model={d}, warmup={w} your warm-up rate is {slope:.4g} · "
                f"(step + {icept / slope:.3g}), expected {slope:.4g} · (step + 1): it "
                f"is {icept:.3g} at step 0."
            )
    return None


def _power_fit(xs, ys) -> tuple[float, float]:
    """(k, p) of the least-squares fit ys = k · xs^p in log space."""
    slope, icept, _ = _line_fit([math.log(x) for x in xs], [math.log(y) for y in ys])
    return math.exp(icept), slope


def _fixed(values, name, invert) -> str:
    if all(math.isclose(v, 1.0, rel_tol=1e-4) for v in values):
        return f" It has no {name} factor at all."
    if all(math.isclose(v, values[0], rel_tol=1e-4) for v in values):
        return (
            f" It is the same whatever {name}, as if {name} were "
            f"{invert(values[0]):.4g}: is {name} hard-coded?"
        )
    return ""


def _noam_decay_scale(title, noam_fn, configs) -> tuple | None:
    """The decay branch's factor must be d_model^-0.5 (fitted over the d_models)."""
    n, decaying = _FAR[0], _decaying(title, noam_fn, configs)
    decay = [_noam_rate(title, noam_fn, n - 1, d, w) * n**0.5 for d, w in decaying]
    if not all(
        math.isclose(c, d**-0.5, rel_tol=1e-4) for c, (d, _) in zip(decay, decaying)
    ):
        if min(decay) <= 0 or len({d for d, _ in decaying}) < 2:
            return None
        k, p = _power_fit([d for d, _ in decaying], decay)
        fixed = _fixed(decay, "d_model", lambda c: c**-2)
        return NOAM_SCALE, (
            f"After the warm-up your rate is {k:.3g} · d_model^{p:.3g} "
            f"· n^-0.5, expected d_model^-0.5 · n^-0.5.{fixed}"
        )
    return None


def _noam_warmup_scale(title, noam_fn, configs) -> tuple | None:
    """The warm-up branch's factor must be d_model^-0.5 · warmup^-1.5 (fitted over the
    warmups)."""
    warm = [
        (_noam_rate(title, noam_fn, 0, d, w) * d**0.5, w) for d, w in configs if w > 1
    ]
    if not all(math.isclose(c, w**-1.5, rel_tol=1e-4) for c, w in warm):
        if min(c for c, _ in warm) <= 0:
            return None
        k, p = _power_fit([w for _, w in warm], [c for c, _ in warm])
        fixed = _fixed([c for c, _ in warm], "warmup", lambda c: c ** (-1 / 1.5))
        return NOAM_WARMUP_SCALE, (
            f"Your warm-up branch is {k:.3g} · warmup^{p:.3g} · n · d_model^-0.5, "
            f"expected warmup^-1.5 · n · d_model^-0.5.{fixed}"
        )
    return None


def _noam_peak(title, noam_fn, configs) -> tuple | None:
    for d, w in configs:
        if w <= 200:
            rates = [_noam_rate(title, noam_fn, s, d, w) for s in range(3 * w + 2)]
            peak = max(range(len(rates)), key=rates.__getitem__)
            if peak != w - 1:
                return NOAM_PEAK, (
                    f"With d_model={d}, warmup={w} your rate peaks at "
                    f"step {peak}, expected step {w - 1} (n = warmup)."
                )
    return None


def _noam_problem(title, noam_fn) -> tuple:
    """(diagnosis or None, what was measured, the rate table) for wrong rates."""
    configs = [case.make()[:2] for case in _noam_cases()]
    d, w = configs[0]
    table = _rate_table(title, noam_fn, d, w)
    problem = (
        _noam_offset(title, noam_fn, d, w)
        or _noam_decay(title, noam_fn, configs)
        or _noam_decay_scale(title, noam_fn, configs)
        or _noam_warmup(title, noam_fn, configs)
        or _noam_warmup_scale(title, noam_fn, configs)
        or _noam_peak(title, noam_fn, configs)
    )
    if problem is None:
        return None, table, table
    return problem[0], f"{problem[1]} {table}", table


@single_threaded
def check_noam_lambda(noam_fn) -> None:
    """``noam_fn(step, d_model, warmup) -> float``: the LambdaLR multiplier for step 0,
    1, ... (base lr 1.0)."""
    __tracebackhide__ = True
    title, cases = "noam_lambda", _noam_cases()
    broken = _rate_at_step_zero_breaks(noam_fn)
    if broken is not None:
        NOAM_DIVIDES_BY_ZERO.fail(title, broken)
    for case in cases:
        d, w, steps = case.make()
        got = [_noam_rate(title, noam_fn, s, d, w) for s in steps]
        if _close(got, [noam_lambda(s, d, w) for s in steps]):
            continue
        diagnosis, seen, table = _noam_problem(title, noam_fn)
        _fail_first_problem(
            title,
            (diagnosis, seen),
            cases,
            _rates(noam_fn),
            NOAM_PITFALLS,
            _rates,
            (1e-12, 1e-6),
            S_LR,
            table,
        )
    passed(title, f"matches the reference on {len(cases)} cases")


# ----------------------------------------------------------------------- make_scheduler

# Recognised from what the scheduler does to an optimizer that counts its step() calls.
SCHEDULER_STEPS_OPTIMIZER = Diagnosis(
    "scheduler steps the optimizer",
    "That is the seed's AdamWarmup: next to the loop's own optimizer.step() every "
    "batch is applied twice, and under AMP it bypasses GradScaler.step. A scheduler "
    "only sets the learning rate; torch.optim.lr_scheduler.LambdaLR does exactly that.",
    S_LR,
)
SCHEDULER_RATE_SET_LATE = Diagnosis(
    "Noam schedule off by one",
    "The first update runs at the optimizer's initial lr (1.0) because your scheduler "
    "sets the rate only in step(). Set the rate for step 0 when the scheduler is "
    "created (LambdaLR does).",
    S_LR,
)
SCHEDULER_RATES_AHEAD = Diagnosis(
    "Noam schedule off by one",
    "Your rates run one update ahead: the first update must run at noam_lambda(0, "
    "d_model, warmup).",
    S_LR,
)
# Recognised by measuring the rates the scheduler set, update after update.
_ONE_STEP = (
    "make_scheduler's scheduler sets noam_lambda(k, d_model, warmup) (times "
    "the optimizer's lr, 1.0) for update k + 1, and its step() advances k by "
    "one: LambdaLR(optimizer, lambda step: "
    "noam_lambda(step, d_model, warmup))."
)
SCHEDULER_STEP_COUNT = Diagnosis(
    "scheduler counts its steps wrongly",
    "One scheduler.step() per update must move the schedule on by exactly one step. "
    + _ONE_STEP,
    S_LR,
)
SCHEDULER_SCALED = Diagnosis(
    "scheduler's rates scaled",
    "LambdaLR multiplies the optimizer's own lr (1.0 here) by your multiplier: add no "
    "base rate of your own and leave the optimizer's lr alone. " + _ONE_STEP,
    S_LR,
)
SCHEDULER_COMPOUNDS = Diagnosis(
    "scheduler multiplies the previous rate",
    "Each rate must be noam_lambda of the step, not the previous rate times it "
    "(MultiplicativeLR, or group['lr'] *= ...). " + _ONE_STEP,
    S_LR,
)
SCHEDULER_PEAK = Diagnosis(
    "scheduler's warm-up length wrong",
    "The rate rises for warmup updates and peaks at update warmup: pass the warmup "
    "(and d_model) make_scheduler was given on to noam_lambda. " + _ONE_STEP,
    S_LR,
)
SCHEDULER_CONSTANT = Diagnosis(
    "learning rate never changes",
    "Your scheduler left the same learning rate for every update. It must drive the "
    "optimizer it is given and follow noam_lambda. " + _ONE_STEP,
    S_LR,
)


def _counting_sgd(params, lr):
    """SGD whose step() calls are counted, whoever makes them (``opt.calls``).

    The counter wraps the *instance's* step: a subclass would not do, since PyTorch
    replaces an optimizer class's step with a profiling wrapper when the first instance
    is made."""
    opt = torch.optim.SGD(params, lr=lr)
    opt.calls = 0
    inner = opt.step

    def step(self, *args, **kwargs):
        self.calls += 1
        return inner(*args, **kwargs)

    # A bound method, as LambdaLR's own wrapper expects.
    opt.step = types.MethodType(step, opt)
    return opt


def _build_scheduler(title, make_scheduler, opt, d, w):
    __tracebackhide__ = True
    sched = run_or_fail(
        title, make_scheduler, (opt, d, w), f"make_scheduler(optimizer, {d}, {w})"
    )
    if not callable(getattr(sched, "step", None)):
        fail(
            title,
            "make_scheduler must return a scheduler with a step() method, got "
            f"{type(sched).__name__}",
            S_LR,
        )
    return sched


def _rates_while_training(title, make_scheduler, d, w, n) -> list[float]:
    """The learning rates of n + 1 updates, each optimizer.step() (the loop's) followed
    by one scheduler.step(); fails as soon as scheduler.step() moves the weights."""
    __tracebackhide__ = True
    weight = nn.Parameter(torch.ones(3, device=get_device()))
    opt = _counting_sgd([weight], lr=1.0)
    sched = _build_scheduler(title, make_scheduler, opt, d, w)
    rates = [float(opt.param_groups[0]["lr"])]
    for k in range(1, n + 1):
        weight.grad = torch.ones_like(weight)
        with quiet():
            opt.step()  # the training loop's own call
        calls, before = opt.calls, weight.detach().clone()
        run_or_fail(title, sched.step, (), "scheduler.step()")
        if opt.calls != calls or not torch.equal(weight.detach(), before):
            SCHEDULER_STEPS_OPTIMIZER.fail(
                title, f"Your scheduler.step() number {k} updated the weights."
            )
        rates.append(float(opt.param_groups[0]["lr"]))
    return rates


def _close(got, want) -> bool:
    return len(got) == len(want) and all(
        math.isclose(a, b, rel_tol=1e-6) for a, b in zip(got, want)
    )


def _rate_set_only_in_step(rates, want) -> bool:
    return rates[0] == 1.0 and _close(rates[1:], want[: len(rates) - 1])


def _rates_one_ahead(rates, want) -> bool:
    return _close(rates, want[1 : len(rates) + 1])


_SCHEDULER_RATE_MISTAKES = (
    (_rate_set_only_in_step, SCHEDULER_RATE_SET_LATE),
    (_rates_one_ahead, SCHEDULER_RATES_AHEAD),
)


def _schedule_steps(rates, d, w) -> list[int] | None:
    """For each update, the step s whose noam_lambda(s, d, w) is its rate (None when
    some rate is no Noam rate)."""
    table = [noam_lambda(s, d, w) for s in range(4 * len(rates) + 4)]
    steps = []
    for rate in rates:
        s = next(
            (s for s, r in enumerate(table) if math.isclose(rate, r, rel_tol=1e-6)),
            None,
        )
        if s is None:
            return None
        steps.append(s)
    return steps


def _measured_schedule(rates, want, d, w) -> tuple[Diagnosis | None, str]:
    """What the rates the learner's scheduler set look like: (diagnosis, seen)."""
    shown = ", ".join(f"{r:.4g}" for r in rates[:6])
    seen = (
        f"The rates of your first updates were {shown}; noam_lambda gives "
        f"{', '.join(f'{r:.4g}' for r in want[:6])} (d_model={d}, warmup={w})."
    )
    if all(r == rates[0] for r in rates):
        return SCHEDULER_CONSTANT, f"{seen} Yours stayed {rates[0]:.4g}."
    steps, later = _schedule_steps(rates, d, w), _schedule_steps(rates[1:], d, w)
    if steps is not None:
        return SCHEDULER_STEP_COUNT, (
            f"{seen} Your updates ran at the Noam rates of "
            f"steps {steps[:8]}, expected "
            f"{list(range(min(8, len(steps))))}."
        )
    if later is not None:
        return SCHEDULER_STEP_COUNT, (
            f"{seen} Your first update ran at {rates[0]:.4g}, "
            f"the next ones at the Noam rates of steps "
            f"{later[:8]}; expected steps 0, 1, 2, ..."
        )
    ratio = [r / x for r, x in zip(rates, want)]
    if all(math.isclose(q, ratio[0], rel_tol=1e-6) for q in ratio):
        width = d / ratio[0] ** 2  # d_model^-0.5 scales the rates
        story = (
            f" That is as if d_model were {width:.0f} instead of {d}, or a base "
            f"lr of {ratio[0]:.4g}."
            if width != d and math.isclose(width, round(width), abs_tol=1e-3)
            else ""
        )
        return SCHEDULER_SCALED, (
            f"{seen} Yours are {ratio[0]:.4g} × noam_lambda's.{story}"
        )
    products = [math.prod(want[: k + 1]) for k in range(len(rates))]
    # Each rate the previous one times noam_lambda of its step, whatever the first.
    steps_ratio = [b / a for a, b in zip(rates, rates[1:]) if a != 0]
    if (
        _close(rates, products)
        or _close(rates[1:], products[:-1])
        or (
            len(steps_ratio) == len(rates) - 1
            and _close(steps_ratio, want[1 : len(rates)])
        )
    ):
        return SCHEDULER_COMPOUNDS, (
            f"{seen} Each of your rates is the previous one times a value of "
            f"noam_lambda ({rates[1]:.4g} × {rates[2] / rates[1]:.4g} = "
            f"{rates[2]:.4g}): the multipliers compound."
        )
    peak = max(range(len(rates)), key=rates.__getitem__)
    if peak != w - 1:
        where = (
            f"never stop rising in {len(rates)} updates"
            if peak == len(rates) - 1
            else f"peak at update {peak + 1}"
        )
        return SCHEDULER_PEAK, (
            f"{seen} Your rates {where}; Noam's peak at update {w} = warmup."
        )
    return None, seen


@single_threaded
def check_noam_scheduler(make_scheduler) -> None:
    """``make_scheduler(optimizer, d_model, warmup)`` returns a scheduler whose
    ``step()`` sets the Noam rate for the next update and does nothing else. The optimizer is created with lr=1.0."""
    __tracebackhide__ = True
    title, d, w, n = "make_scheduler", 64, 5, 12
    rates = _rates_while_training(title, make_scheduler, d, w, n)
    # One rate more than the updates, to recognise rates that run ahead.
    want = [noam_lambda(s, d, w) for s in range(n + 2)]
    if _close(rates, want[: n + 1]):
        passed(
            title,
            f"sets the Noam rate for {n + 1} updates and never steps the optimizer",
        )
        return
    for looks_like, diagnosis in _SCHEDULER_RATE_MISTAKES:
        if looks_like(rates, want):
            diagnosis.fail(title)
    diagnosis, seen = _measured_schedule(rates, want[: n + 1], d, w)
    if diagnosis is not None:
        diagnosis.fail(title, seen)
    fail(title, f"{seen} It {UNEXPLAINED}; compare your code with the lesson.", S_LR)


# --------------------------------------------------------------------------- train_step


def _small_model(seed: int = 0, dropout: float = 0.0, vocab: int = 13):
    """A small TorchTransformer built under ``seed``, the notebook's random state left
    alone."""
    from tformer_ref.baselines import TorchTransformer

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = TorchTransformer(
            vocab,
            vocab,
            d_model=16,
            n_heads=8,
            n_layers=2,
            d_ff=32,
            dropout=dropout,
            max_len=32,
        )
    return model.to(get_device())


def _teacher_forced_loss(model, src, tgt, pad_id, eps):
    tgt_in, labels = _shift_ref(tgt)
    return _loss_ref(model(src, tgt_in), labels, pad_id, eps)


def _train_step_reference(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    """zero_grad, forward, loss, backward, clip, optimizer.step, scheduler.step."""
    model.train()
    opt.zero_grad()
    loss = _teacher_forced_loss(model, src, tgt, pad_id, eps)
    loss.backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item(), float(norm)


def _train_clip_before_backward(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    model.train()
    opt.zero_grad()
    loss = _teacher_forced_loss(model, src, tgt, pad_id, eps)
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    loss.backward()
    opt.step()
    sched.step()
    return loss.item(), float(norm)


CLIP_BEFORE_BACKWARD = Pitfall(
    "clipping before backward",
    "You clip before loss.backward(): there are no gradients yet (or only last "
    "batch's, about to be zeroed), so nothing is clipped and the norm you report is 0. "
    "Order: zero_grad, forward, loss, backward, clip_grad_norm_, optimizer.step, "
    "scheduler.step.",
    S_CLIP,
    _train_clip_before_backward,
)


def _train_clip_before_zero_grad(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    model.train()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.zero_grad()
    loss = _teacher_forced_loss(model, src, tgt, pad_id, eps)
    loss.backward()
    opt.step()
    sched.step()
    return loss.item(), float(norm)


CLIP_BEFORE_ZERO_GRAD = Pitfall(
    "clipping before backward",
    "You clip before zero_grad and backward, i.e. last batch's gradients: this batch's "
    "update is never clipped. Clip right after loss.backward() and before "
    "optimizer.step().",
    S_CLIP,
    _train_clip_before_zero_grad,
)


def _train_clip_after_step(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    model.train()
    opt.zero_grad()
    loss = _teacher_forced_loss(model, src, tgt, pad_id, eps)
    loss.backward()
    opt.step()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    sched.step()
    return loss.item(), float(norm)


CLIP_AFTER_STEP = Pitfall(
    "clipping after the step",
    "You clip after optimizer.step(): the weights have already moved by the unclipped "
    "gradient, so clipping changes nothing. Clip between loss.backward() and "
    "optimizer.step().",
    S_CLIP,
    _train_clip_after_step,
)


def _train_without_zero_grad(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    model.train()
    loss = _teacher_forced_loss(model, src, tgt, pad_id, eps)
    loss.backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item(), float(norm)


GRADIENTS_NEVER_ZEROED = Pitfall(
    "gradients never zeroed",
    "Your gradients accumulate across steps: call optimizer.zero_grad() at the start "
    "of each step.",
    S_CLIP,
    _train_without_zero_grad,
)


def _train_without_scheduler(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    model.train()
    opt.zero_grad()
    loss = _teacher_forced_loss(model, src, tgt, pad_id, eps)
    loss.backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    return loss.item(), float(norm)


SCHEDULER_NOT_STEPPED = Pitfall(
    "scheduler not stepped",
    "The learning rate never changes: call scheduler.step() once per update, after "
    "optimizer.step().",
    S_LR,
    _train_without_scheduler,
)


def _train_scheduler_before_optimizer(
    model, src, tgt, opt, sched, max_norm, pad_id, eps
):
    model.train()
    opt.zero_grad()
    loss = _teacher_forced_loss(model, src, tgt, pad_id, eps)
    loss.backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    sched.step()
    opt.step()
    return loss.item(), float(norm)


SCHEDULER_BEFORE_OPTIMIZER = Pitfall(
    "scheduler stepped before the optimizer",
    "You call scheduler.step() before optimizer.step(), so the first update already "
    "uses the second rate (and PyTorch warns). Step the optimizer first, then the "
    "scheduler.",
    S_LR,
    _train_scheduler_before_optimizer,
)


def _train_loss_counts_padding(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    model.train()
    opt.zero_grad()
    tgt_in, labels = _shift_ref(tgt)
    loss = _loss_counts_padding(model(src, tgt_in), labels, pad_id, eps)
    loss.backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item(), float(norm)


TRAIN_LOSS_COUNTS_PADDING = Pitfall(
    "padding counted in the loss",
    "Your training step's loss includes padding positions: use your sequence_loss with "
    "pad_id.",
    S_LOSS,
    _train_loss_counts_padding,
)


def _train_shifted_the_wrong_way(model, src, tgt, opt, sched, max_norm, pad_id, eps):
    model.train()
    opt.zero_grad()
    loss = _loss_ref(model(src, tgt[:, 1:]), tgt[:, :-1], pad_id, eps)
    loss.backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()
    sched.step()
    return loss.item(), float(norm)


TRAIN_SHIFTED_WRONG_WAY = Pitfall(
    "targets shifted the wrong way",
    "Your training step feeds tgt[:, 1:] and predicts tgt[:, :-1]: use your "
    "shift_targets.",
    S_SHIFT,
    _train_shifted_the_wrong_way,
)

# What the recording model, optimizer and scheduler of a step show (ch06_loop).
import numbers  # noqa: E402

from .ch06_loop import (
    StepCase,
    build_models,
    close,
    clipped,  # noqa: E402
    loss_fit,
    mix_fit,
    observe,
    per_tensor_scales,
)
from .diagnosis import UNEXPLAINED  # noqa: E402

TRAIN_PITFALLS = (
    CLIP_BEFORE_BACKWARD,
    CLIP_BEFORE_ZERO_GRAD,
    CLIP_AFTER_STEP,
    GRADIENTS_NEVER_ZEROED,
    SCHEDULER_NOT_STEPPED,
    SCHEDULER_BEFORE_OPTIMIZER,
    TRAIN_LOSS_COUNTS_PADDING,
    TRAIN_SHIFTED_WRONG_WAY,
)

# What the step's text asks for, quoted by the failures that enforce it.
_DUTIES = (
    'The exercise says: "train_step must: put the model in training mode, zero '
    "the gradients, compute the loss of shift_targets/sequence_loss, backward, "
    'clip to max_norm, optimizer.step(), then scheduler.step(), once each."'
)

# Recognised by measuring what the recording model, optimizer and scheduler saw.
TRAIN_EVAL_MODE = Diagnosis(
    "training step in eval mode",
    "The check hands train_step a model left in eval mode, as after an evaluation; "
    "with dropout that trains a different model than the one you meant. Call "
    "model.train() at the start of the step. " + _DUTIES,
    S_CLIP,
)
TRAIN_MODEL_NOT_CALLED = Diagnosis(
    "model never called",
    "The loss must come from model(src, tgt_in) on this batch. " + _DUTIES,
    S_CLIP,
)
TRAIN_NO_GRADIENT = Diagnosis(
    "no gradient from the loss",
    "No gradient reached the model's logits: backward was not called on the loss "
    "tensor, or the loss was detached (.item(), torch.tensor(...), .detach()) before "
    "it. Call loss.backward() on the tensor sequence_loss returns.",
    S_LOSS,
)
TRAIN_BACKWARD_TWICE = Diagnosis(
    "backward run more than once",
    "Each backward adds the loss's gradient again: call loss.backward() once per step.",
    S_CLIP,
)
TRAIN_GRAD_SCALED = Diagnosis(
    "gradient scaled",
    "The gradient optimizer.step() applies must be the loss's own gradient, clipped "
    "to max_norm when its norm is larger, never enlarged.",
    S_CLIP,
)
TRAIN_RETURN_ORDER = Diagnosis(
    "returned in the wrong order",
    "train_step returns (loss, grad_norm), in that order.",
    S_CLIP,
)
TRAIN_DECODER_INPUT = Diagnosis(
    "wrong decoder input",
    "The decoder reads tgt[:, :-1] (BOS y1 .. yn): use your shift_targets.",
    S_SHIFT,
)
TRAIN_LABELS_NOT_SHIFTED = Diagnosis(
    "labels not shifted",
    "Your loss compares the logits with the decoder input itself; the labels are "
    "tgt[:, 1:], the input moved one step left (shift_targets).",
    S_SHIFT,
)
TRAIN_WRONG_LABELS = Diagnosis(
    "wrong labels",
    "The labels of position t are tgt[:, t + 1] (shift_targets' second output).",
    S_SHIFT,
)
TRAIN_DROPS_TOKENS = Diagnosis(
    "real tokens left out of the loss",
    "Every real label (everything but pad_id, EOS included) must count in the loss.",
    S_LOSS,
)
TRAIN_NOT_CROSS_ENTROPY = Diagnosis(
    "loss is not the cross-entropy",
    "The gradient your loss sends to the logits is not that of a cross-entropy "
    "(softmax minus the smoothed one-hot): use sequence_loss on the raw logits.",
    S_LOSS,
)
TRAIN_SMOOTHING = Diagnosis(
    "label smoothing not the one given",
    "Pass the label_smoothing argument through to sequence_loss.",
    S_LOSS,
)
TRAIN_LOSS_SUMMED = Diagnosis(
    "summed, not averaged",
    "Your loss is the sum over tokens: the gradient grows with the batch. Average "
    "over the real tokens (cross_entropy's default reduction with ignore_index).",
    S_LOSS,
)
TRAIN_PADDING_IN_MEAN = Diagnosis(
    "padding counted in the mean",
    "You divide by all B·(St-1) positions, padding included, so the loss shrinks as "
    "padding grows. Divide by the number of real tokens.",
    S_LOSS,
)
TRAIN_PER_SEQUENCE = Diagnosis(
    "every sequence weighted equally",
    "You average each sequence's tokens, then the sequences: a token of a short "
    "sequence weighs more than one of a long one. Take one mean over all the real "
    "tokens of the batch.",
    S_LOSS,
)
TRAIN_LOSS_SCALE = Diagnosis(
    "loss scaled",
    "The loss you backpropagate must be the mean over the real tokens, unscaled.",
    S_LOSS,
)
TRAIN_STEPS = Diagnosis(
    "optimizer.step() not called once",
    "Each training step updates the weights exactly once. " + _DUTIES,
    S_CLIP,
)
TRAIN_ZEROED_BEFORE_STEP = Diagnosis(
    "gradients zeroed before the step",
    "The gradients were all zero when optimizer.step() ran, so the weights did not "
    "learn from this batch. zero_grad belongs before the forward pass (or after the "
    "step), never between backward and step.",
    S_CLIP,
)
TRAIN_NOT_CLIPPED = Diagnosis(
    "gradients not clipped",
    "Call torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm) between "
    "loss.backward() and optimizer.step().",
    S_CLIP,
)
TRAIN_CLIP_NORM = Diagnosis(
    "clipped to the wrong norm",
    "clip_grad_norm_ rescales all the gradients together to total norm max_norm, "
    "only when their norm exceeds it: use the max_norm argument.",
    S_CLIP,
)
TRAIN_CLIP_NORM_TYPE = Diagnosis(
    "clipped in another norm than the 2-norm",
    "clip_grad_norm_ measures the total norm with norm_type=2 by default (the "
    "Euclidean norm of all the gradients together), and the exercise clips that: "
    "leave norm_type at its default, clip_grad_norm_(model.parameters(), max_norm).",
    S_CLIP,
)
TRAIN_CLIP_PER_TENSOR = Diagnosis(
    "each parameter clipped on its own",
    "You clipped each parameter's gradient separately, which changes the update's "
    "direction. Clip them together: clip_grad_norm_(model.parameters(), max_norm).",
    S_CLIP,
)
TRAIN_CLIP_BY_VALUE = Diagnosis(
    "gradients clipped element by element",
    "You clamped each gradient element (clip_grad_value_ or clamp), which changes the "
    "update's direction. Clip the total norm: clip_grad_norm_(model.parameters(), "
    "max_norm).",
    S_CLIP,
)
TRAIN_WEIGHTS_MOVED = Diagnosis(
    "weights changed outside optimizer.step()",
    "Only optimizer.step() may change the weights, once per training step.",
    S_CLIP,
)
TRAIN_SCHEDULER_COUNT = Diagnosis(
    "scheduler.step() not called once",
    "Call scheduler.step() once per update, right after optimizer.step().",
    S_LR,
)
TRAIN_RETURNS_TENSORS = Diagnosis(
    "returns tensors, not floats",
    "train_step returns (loss, grad_norm) as two Python floats: loss.item() and "
    "norm.item() (a kept loss tensor holds on to the whole graph).",
    S_CLIP,
)
TRAIN_RETURNED_LOSS = Diagnosis(
    "returned loss is not the batch's loss",
    "Return loss.item() of the loss you backpropagated: the mean over the real "
    "tokens, computed before the update, unscaled.",
    S_LOSS,
)
TRAIN_NORM_AFTER_CLIP = Diagnosis(
    "norm measured after clipping",
    "Return the total norm *before* clipping, which clip_grad_norm_ returns: that is "
    "the number to log to see gradient spikes.",
    S_CLIP,
)
TRAIN_WRONG_NORM = Diagnosis(
    "wrong gradient norm returned",
    "Return the total 2-norm of all the gradients before clipping (what "
    "clip_grad_norm_ returns).",
    S_CLIP,
)

_STEP_CASES = (  # the first clips to below most gradient elements
    StepCase("pad_id=3, label_smoothing=0.1, max_norm=0.05", 1, 3, 0.1, 0.05),
    StepCase("pad_id=0, label_smoothing=0, max_norm=1.0", 0, 0, 0.0, 1.0),
    StepCase(
        "pad_id=0, label_smoothing=0, max_norm=100 (no clipping)",
        2,
        0,
        0.0,
        100.0,
        updates=1,
    ),
)
_RATE, _DECAY = 0.5, 0.5  # recording_scheduler's base rate and halving


def _traced(seen):
    """The decode call that backward reached (the one the loss came from), or None."""
    return next((c for c in seen.events("forward") if c.grads), None)


def _step_not_called(seen):
    if not seen.events("forward"):
        return TRAIN_MODEL_NOT_CALLED, f"{seen.where()}, your step never ran the model."
    return None


def _ran_in_eval_mode(seen):
    if not _traced(seen).training:  # the forward the loss came from
        return TRAIN_EVAL_MODE, (
            f"{seen.where()}, your model's forward ran in eval mode."
        )
    return None


def _no_gradient(seen):
    if _traced(seen) is None:
        return TRAIN_NO_GRADIENT, (
            f"{seen.where()}, backward never reached the logits "
            "of any of your model calls."
        )
    return None


def _backward_twice(seen):
    n = len(_traced(seen).grads)
    if n > 1:
        return TRAIN_BACKWARD_TWICE, (
            f"{seen.where()}, backward reached your logits {n} times."
        )
    return None


def _slice_name(tgt, tgt_in):
    """Which slice of tgt ``tgt_in`` is, in the learner's terms."""
    named = {
        "tgt[:, 1:]": tgt[:, 1:],
        "the whole tgt (not shifted)": tgt,
        "tgt[:-1] (rows dropped: sequence-first slicing)": tgt[:-1],
        "tgt[:, :-2]": tgt[:, :-2],
        "tgt[:, 2:]": tgt[:, 2:],
    }
    for name, t in named.items():
        if t.shape == tgt_in.shape and torch.equal(t, tgt_in):
            return name
    return f"a tensor of shape {list(tgt_in.shape)}"


def _measured_labels(call):
    """[B, t] the label each position's gradient points at (its most negative entry)."""
    return call.grads[0].argmin(-1)


def _wrong_decoder_input(seen):
    call, tgt = _traced(seen), seen.tgt
    if call.tgt_in.shape == tgt[:, :-1].shape and torch.equal(call.tgt_in, tgt[:, :-1]):
        return None
    name = _slice_name(tgt, call.tgt_in)
    hit, labels = _reached(call), _measured_labels(call)
    if (
        name == "tgt[:, 1:]"
        and torch.equal(labels[hit], tgt[:, :-1][hit])
        and _is_cross_entropy_of(call, labels, hit)
    ):
        return TRAIN_SHIFTED_WRONG_WAY, (
            f"{seen.where()}, the decoder read tgt[:, 1:] "
            "and your loss's labels were tgt[:, :-1]."
        )
    return TRAIN_DECODER_INPUT, f"{seen.where()}, the decoder read {name}."


def _reached(call):
    """[B, t] bool: the positions whose logits got any gradient."""
    return call.grads[0].abs().amax(-1) > 0


def _is_cross_entropy_of(call, labels, where) -> bool:
    """The gradient at the positions ``where`` [B, t] is a cross-entropy's with
    ``labels`` [B, t] (the only case where the labels can be read off it)."""
    _, _, res = loss_fit(call.logits[where], call.grads[0][where], labels[where])
    return float(res.max()) < 1e-3


def _wrong_labels(seen):
    call = _traced(seen)
    got, want, hit = _measured_labels(call), seen.want.labels, _reached(call)
    bad = hit & seen.want.real & (got != want)
    if not bad.any() or not _is_cross_entropy_of(call, got, bad):
        return None  # right, or not a cross-entropy: a later stage says so
    if torch.equal(got[hit], call.tgt_in[hit]):
        return TRAIN_LABELS_NOT_SHIFTED, (
            f"{seen.where()}, your loss's labels were the decoder input tgt[:, :-1]."
        )
    r, t = (int(i) for i in bad.nonzero()[0])
    return TRAIN_WRONG_LABELS, (
        f"{seen.where()}, the label your loss used at row {r}, "
        f"position {t} was token {int(got[r, t])}, expected "
        f"{int(want[r, t])} = tgt[{r}, {t + 1}]."
    )


def _padding_positions(seen):
    hit, real = _reached(_traced(seen)), seen.want.real
    pad = seen.case.pad_id
    if (hit & ~real).any():
        n, total = int((hit & ~real).sum()), int((~real).sum())
        return TRAIN_LOSS_COUNTS_PADDING, (
            f"{seen.where()}, {n} of the {total} "
            f"padding positions (pad_id={pad}) got "
            "gradient."
        )
    if (real & ~hit).any():
        n = int((real & ~hit).sum())
        return TRAIN_DROPS_TOKENS, (
            f"{seen.where()}, {n} real label positions got no gradient."
        )
    return None


def _fit_loss(seen):
    """(N [B, t], eps [B, t], residual) of the cross-entropy the learner's loss is,
    on the real positions (NaN elsewhere)."""
    call, real = _traced(seen), seen.want.real
    n, e, res = loss_fit(call.logits[real], call.grads[0][real], seen.want.labels[real])
    full = torch.full(real.shape, float("nan"), dtype=torch.float64, device=real.device)
    big_n, eps = full.clone(), full.clone()
    big_n[real], eps[real] = n, e
    return big_n, eps, float(res.max())


def _not_cross_entropy(seen):
    _, _, res = _fit_loss(seen)
    if res > 1e-3:
        return TRAIN_NOT_CROSS_ENTROPY, (
            f"{seen.where()}, the gradient at the logits "
            "departs from softmax minus the one-hot by "
            f"{res:.2g} (relative)."
        )
    return None


def _wrong_smoothing(seen):
    _, eps, _ = _fit_loss(seen)
    got, want = float(eps.nanmedian()), seen.case.eps
    if abs(got - want) > 2e-3:
        return TRAIN_SMOOTHING, (
            f"{seen.where()}, your loss's label smoothing "
            f"measures {got:.3g}; label_smoothing={want}."
        )
    return None


def _wrong_normaliser(seen):
    big_n, _, _ = _fit_loss(seen)
    real = seen.want.real
    count, got = int(real.sum()), big_n[real]
    if torch.allclose(got, torch.full_like(got, float(count)), rtol=2e-3):
        return None
    where, b = seen.where(), real.size(0)
    if torch.allclose(got, torch.ones_like(got), rtol=2e-3):
        return TRAIN_LOSS_SUMMED, f"{where}, your loss divides by 1, not {count}."
    if torch.allclose(got, torch.full_like(got, float(real.numel())), rtol=2e-3):
        return TRAIN_PADDING_IN_MEAN, (
            f"{where}, your loss divides by {real.numel()} "
            f"positions, not the {count} real tokens."
        )
    per_row = (b * real.sum(1, keepdim=True)).double().expand_as(big_n)[real]
    if torch.allclose(got, per_row, rtol=2e-3):
        return TRAIN_PER_SEQUENCE, (
            f"{where}, each row's tokens are divided by {b} × that row's length."
        )
    if torch.allclose(got, got.mean().expand_as(got), rtol=2e-3):
        n = float(got.mean())
        return TRAIN_LOSS_SCALE, (
            f"{where}, your loss is the token sum divided by "
            f"{n:.4g}, expected {count} (real tokens): "
            f"{count / n:.4g} × the mean."
        )
    return TRAIN_LOSS_SCALE, (
        f"{where}, your loss weights tokens unequally (divisors "
        f"from {float(got.min()):.4g} to {float(got.max()):.4g}; "
        f"expected {count} for every real token)."
    )


def _step_count(seen):
    n = len(seen.events("step"))
    if n != 1:
        return TRAIN_STEPS, f"{seen.where()}, optimizer.step() ran {n} times."
    return None


def _order(seen):
    return [event for event, _ in seen.log if event in ("step", "sched")]


def _scheduler_calls(seen):
    order = _order(seen)
    if order == ["step", "sched"]:
        return None
    if "sched" not in order:
        return SCHEDULER_NOT_STEPPED, f"{seen.where()}, scheduler.step() never ran."
    if order == ["sched", "step"]:
        lr = seen.events("step")[0].lr
        return SCHEDULER_BEFORE_OPTIMIZER, (
            f"{seen.where()}, scheduler.step() ran "
            f"before optimizer.step(), which then used "
            f"lr {lr:g} instead of {seen.lr:g}."
        )
    return TRAIN_SCHEDULER_COUNT, (
        f"{seen.where()}, the calls were {', '.join(order)} (step = optimizer.step())."
    )


def _clipping_of(seen, got):
    """The gradient at the step is this batch's times alpha: was it clipped right?"""
    want, m = seen.want, seen.case.max_norm
    alpha, expect = float(got.norm()) / want.norm, min(1.0, m / (want.norm + 1e-6))
    if close(alpha, expect):
        return None
    where = (
        f"{seen.where()}, the gradient at optimizer.step() had norm {got.norm():.4g}"
    )
    if alpha > 1.0 + 2e-3:
        return TRAIN_GRAD_SCALED, (
            f"{where}: {alpha:.4g} × the gradient of this "
            f"batch's loss (norm {want.norm:.4g})."
        )
    if close(alpha, 1.0):
        return _why_unclipped(seen, where)
    norm_type = _clipped_norm_type(got, m)
    if norm_type is not None and norm_type != "L2":
        return TRAIN_CLIP_NORM_TYPE, (
            f"{where}: its {norm_type} norm is {_norms(got)[norm_type]:.4g} = "
            f"max_norm={m:g}, its L2 norm {got.norm():.4g}: you clipped the "
            f"{norm_type} norm (norm_type={_NORM_TYPES[norm_type]})."
        )
    return TRAIN_CLIP_NORM, (
        f"{where}: you clipped to total norm {got.norm():.4g}; "
        f"with max_norm={m:g} and a norm of {want.norm:.4g} "
        f"before clipping it should be {min(want.norm, m):.4g}."
    )


_NORM_TYPES = {"L1": "1", "L2": "2", "max (L-inf)": "inf"}


def _norms(grad) -> dict:
    """The flat gradient's norms, by the names of _NORM_TYPES."""
    return {
        "L1": float(grad.abs().sum()),
        "L2": float(grad.norm()),
        "max (L-inf)": float(grad.abs().max()),
    }


def _clipped_norm_type(grad, max_norm) -> str | None:
    """Which norm of the clipped gradient (flat) equals max_norm: the norm_type
    clip_grad_norm_ used; None when none does."""
    return next(
        (
            name
            for name, value in _norms(grad).items()
            if close(value, max_norm, rel=1e-3)
        ),
        None,
    )


def _returned_number(seen, i):
    """``float`` of the learner's i-th returned value, or None when it has none."""
    try:
        return float(seen.out[i])
    except Exception:  # not a pair, or not a number: later stages report it
        return None


def _why_unclipped(seen, where):
    m, norm = seen.case.max_norm, _returned_number(seen, 1)
    end = clipped(seen.want.grad, m)
    detail = f"{where}, above max_norm={m:g}: not clipped"
    if torch.allclose(seen.end, end, rtol=1e-3, atol=1e-9):
        return CLIP_AFTER_STEP, f"{detail} before the step, but after it."
    before = (float(seen.left.norm()), 0.0)
    if norm is not None and any(close(norm, b, abs_=1e-6) for b in before):
        return CLIP_BEFORE_BACKWARD, (
            f"{detail}; the norm you returned, {norm:.4g}, "
            "is that of the gradients before backward."
        )
    return TRAIN_NOT_CLIPPED, f"{detail}."


def _gradient_at_step(seen):
    got, want = seen.events("step")[0].grad, seen.want
    if float(got.norm()) <= 1e-12:
        return TRAIN_ZEROED_BEFORE_STEP, (
            f"{seen.where()}, every gradient was 0 at optimizer.step()."
        )
    alpha, beta, res = mix_fit(got, want.grad, seen.left)
    if res < 1e-3 and abs(beta) * float(seen.left.norm()) > 1e-3 * float(got.norm()):
        return GRADIENTS_NEVER_ZEROED, (
            f"{seen.where()}, the gradient at optimizer.step() was {alpha:.3g} × this "
            f"batch's + {beta:.3g} × the gradient left from the update before."
        )
    if res < 1e-3:
        return _clipping_of(seen, got)
    return _misshapen_gradient(seen, got)


def _misshapen_gradient(seen, got):
    """The gradient at the step points elsewhere than this batch's."""
    want, where = seen.want.grad, seen.where()
    scales, worst = per_tensor_scales(got, want, seen.slices)
    if worst < 1e-3:
        return TRAIN_CLIP_PER_TENSOR, (
            f"{where}, each parameter's gradient was scaled "
            f"by its own factor (from {min(scales):.3g} to "
            f"{max(scales):.3g})."
        )
    c = float(got.abs().max())
    if torch.allclose(got, want.clamp(-c, c), rtol=1e-3, atol=1e-7):
        return TRAIN_CLIP_BY_VALUE, (
            f"{where}, every gradient element was clamped to ±{c:.3g}."
        )
    cos = float(got @ want) / float(got.norm() * want.norm())
    fail(
        "train_step",
        f"{where}, the gradient at optimizer.step() is not a multiple "
        f"of this batch's (cosine {cos:.4f}, norm {got.norm():.4g} vs "
        f"{want.norm():.4g}). It {UNEXPLAINED}. {_DUTIES}",
        S_CLIP,
    )


def _weights_moved(seen):
    call = seen.events("step")[0]
    expect = seen.before - call.lr * call.grad
    if not torch.allclose(seen.after, expect, rtol=1e-4, atol=1e-7):
        diff = float((seen.after - expect).abs().max())
        return TRAIN_WEIGHTS_MOVED, (
            f"{seen.where()}, the weights differ by up to "
            f"{diff:.3g} from one SGD step with the gradient "
            "optimizer.step() saw."
        )
    return None


def _returned_pair(seen):
    out = seen.out
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        fail(
            "train_step",
            f"{seen.where()}: must return (loss, grad_norm), got "
            f"{type(out).__name__}. {_DUTIES}",
            S_CLIP,
        )
    kinds = [type(x).__name__ for x in out]
    # A Python (or NumPy) number, as .item() or float() gives; not a tensor.
    if not all(isinstance(x, numbers.Real) and not isinstance(x, bool) for x in out):
        return TRAIN_RETURNS_TENSORS, (
            f"{seen.where()}, yours returned ({', '.join(kinds)})."
        )
    return None


def _returned_loss(seen):
    got, want = seen.out[0], seen.want.loss
    if close(got, want, rel=1e-4, abs_=1e-6):
        return None
    after = seen.loss_after()
    detail = (
        f"{seen.where()}, you returned loss {got:.6g}; the batch's loss is {want:.6g}"
    )
    if close(got, seen.want.norm, rel=1e-4) and close(seen.out[1], want, rel=1e-4):
        return TRAIN_RETURN_ORDER, f"{detail}: you returned (grad_norm, loss)."
    if close(got, after, rel=1e-4, abs_=1e-6):
        return TRAIN_RETURNED_LOSS, (
            f"{detail}, and {after:.6g} after the update: yours."
        )
    return TRAIN_RETURNED_LOSS, f"{detail} ({got / want:.4g} × it)."


def _returned_norm(seen):
    got, want = seen.out[1], seen.want.norm
    if close(got, want, rel=1e-4, abs_=1e-6):
        return None
    clip = float(seen.events("step")[0].grad.norm())
    detail = (
        f"{seen.where()}, you returned grad_norm {got:.6g}; the norm before "
        f"clipping was {want:.6g}"
    )
    if close(got, clip, rel=1e-4, abs_=1e-6):
        return TRAIN_NORM_AFTER_CLIP, f"{detail}, after clipping {clip:.6g}."
    other = next(
        (
            name
            for name, value in _norms(seen.want.grad).items()
            if name != "L2" and close(got, value, rel=1e-4, abs_=1e-6)
        ),
        None,
    )
    if other is not None:
        return TRAIN_WRONG_NORM, f"{detail}: yours is its {other} norm."
    return TRAIN_WRONG_NORM, f"{detail} (yours is {got / want:.4g} × it)."


# The stages of a step in the order it runs them; the first that departs is reported.
# The mode comes last: with the check's dropout-free model it changes no number the
# other stages measure, so any of their findings is the mistake to fix first.
STEP_STAGES = (
    _step_not_called,
    _no_gradient,
    _backward_twice,
    _wrong_decoder_input,
    _wrong_labels,
    _padding_positions,
    _not_cross_entropy,
    _wrong_smoothing,
    _wrong_normaliser,
    _step_count,
    _gradient_at_step,
    _weights_moved,
    _scheduler_calls,
    _returned_pair,
    _returned_loss,
    _returned_norm,
    _ran_in_eval_mode,
)


@single_threaded
def check_train_step(step_fn) -> None:
    """``step_fn(model, src, tgt, optimizer, scheduler, max_norm, pad_id,
    label_smoothing) -> (loss, grad_norm)`` as floats, the norm being the gradients'
    total norm before clipping. Every update of every case is recorded first; then
    each stage, in the order a step runs, is judged on all of them."""
    __tracebackhide__ = True
    title = "train_step"
    model, twin, start = build_models(0)
    seen = [
        one
        for case in _STEP_CASES
        for one in observe(title, step_fn, case, model, twin, start)
    ]
    for stage in STEP_STAGES:
        for one in seen:
            found = stage(one)
            if found is not None:
                found[0].fail(title, found[1])
    passed(
        title,
        f"{len(seen)} updates in {len(_STEP_CASES)} cases: train mode, "
        "zeroed, shifted, loss over the real tokens, clipped, one step each",
    )


# ------------------------------------------------------------------------ greedy_decode


def _keep_mask(tgt_mask, st):
    """A learner's ``tgt_mask`` as a bool [st, st] mask (True = may attend)."""
    if (
        not isinstance(tgt_mask, torch.Tensor)
        or tgt_mask.dtype != torch.bool
        or tgt_mask.numel() != st * st
    ):
        got = (
            f"{tgt_mask.dtype} {tuple(tgt_mask.shape)}"
            if isinstance(tgt_mask, torch.Tensor)
            else type(tgt_mask).__name__
        )
        raise TypeError(
            f"tgt_mask must be a bool mask [{st}, {st}] or [1, 1, {st}, "
            f"{st}] (True = may attend), got {got}"
        )
    return tgt_mask.reshape(st, st)


def _causal(t, device):
    """The [t, t] causal keep-mask (True = may attend), lower triangular."""
    return torch.ones(t, t, dtype=torch.bool, device=device).tril()


class DecodingModel(nn.Module):
    """An encoder–decoder whose ``decode`` takes the target mask explicitly, as
    nn.TransformerDecoder does.

    ``encode(src [B, Ss]) -> (memory [B, Ss, D], src_mask [B, 1, 1, Ss])``;
    ``decode(tgt_in [B, St], memory, src_mask, tgt_mask=None) -> logits [B, St, V]``
    where ``tgt_mask`` is a bool [St, St] or [1, 1, St, St] mask, True = may attend. No
    ``tgt_mask`` means no mask at all. It records how it is used, so a check can say
    what a decoding loop did. ``ids`` = (bos, eos, pad): it never generates PAD or
    BOS, and ``eos_bias`` makes EOS likelier."""

    def __init__(
        self,
        eos_bias: float = 0.0,
        seed: int = 0,
        dropout: float = 0.3,
        ids: tuple = (1, 2, 0),
    ):
        super().__init__()
        self.inner = _small_model(seed, dropout=dropout)
        self.bias = self.inner.out.bias.detach().clone()
        self.configure(eos_bias, ids)

    def configure(self, eos_bias: float, ids: tuple):
        """Set the output bias for ``eos_bias`` and ``ids`` and forget the record."""
        bos, eos, pad = ids
        with torch.no_grad():
            self.inner.out.bias.copy_(self.bias)
            self.inner.out.bias[eos] += eos_bias
            # Never generates PAD or BOS, so a missing BOS or PAD shows in the output.
            self.inner.out.bias[[pad, bos]] = -1e4
        self.reset()

    def reset(self):
        self.encoded_rows, self.calls, self.memories = 0, [], []

    def encode(self, src):
        self.encoded_rows += src.size(0)
        memory, src_mask = self.inner.encode(src)
        self.memories.append(memory.detach())
        return memory, src_mask

    def _from_encoder(self, memory) -> bool:
        """Every row of ``memory`` is a row of a memory encode returned."""
        rows = [m[j] for m in self.memories for j in range(m.size(0))]
        return (
            isinstance(memory, torch.Tensor)
            and memory.dim() == 3
            and all(
                any(r.shape == row.shape and torch.equal(r, row) for r in rows)
                for row in memory.detach()
            )
        )

    def decode(self, tgt_in, memory, src_mask, tgt_mask=None):
        st = tgt_in.size(1)
        if tgt_mask is None:
            kind = "none"
            keep = torch.ones(st, st, dtype=torch.bool, device=tgt_in.device)
        else:
            keep = _keep_mask(tgt_mask, st)
            tril = _causal(st, keep.device)
            kind = (
                "causal"
                if torch.equal(keep, tril)
                else "triu"
                if torch.equal(keep, tril.T)
                else "none"
                if keep.all()
                else "other"
            )
        call = {
            "training": self.training,
            "grad": torch.is_grad_enabled(),
            "mask": kind,
            "length": st,
            "dtype": tgt_in.dtype,
            "memory": self._from_encoder(memory),
            "prefix": tgt_in.detach().clone(),
        }
        self.calls.append(call)
        logits = self.inner.decode(tgt_in, memory, src_mask, tgt_mask=keep)
        call["logits"] = logits.detach().clone()
        return logits

    def forward(self, src, tgt_in):
        memory, src_mask = self.encode(src)
        st = tgt_in.size(1)
        causal = _causal(st, src.device)
        return self.decode(tgt_in, memory, src_mask, causal)


def _greedy_reference(model, src, max_len, bos_id, eos_id, pad_id):
    """Greedy loop for :class:`DecodingModel`: eval, no grad, encode once, causal mask,
    argmax of the last position, PAD after a row's EOS, stop once every row ended."""
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            mask = _causal(out.size(1), src.device)
            logits = model.decode(out, memory, src_mask, mask)
            nxt = logits[:, -1].argmax(-1).masked_fill(done, pad_id)
            out = torch.cat([out, nxt[:, None]], 1)
            done |= nxt == eos_id
            if done.all():
                break
    return out


def _greedy_stops_at_first_eos(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        for _ in range(max_len):
            mask = _causal(out.size(1), src.device)
            logits = model.decode(out, memory, src_mask, mask)
            nxt = logits[:, -1].argmax(-1)
            out = torch.cat([out, nxt[:, None]], 1)
            if (nxt == eos_id).any():
                break
    return out


STOPS_AT_FIRST_EOS = Pitfall(
    "stops the whole batch at the first EOS",
    "You break as soon as any sequence ends; the others are cut short. Stop when every "
    "row has produced EOS.",
    S_DECODE,
    _greedy_stops_at_first_eos,
)


def _greedy_first_position(model, src, max_len, bos_id, eos_id, pad_id):
    model.eval()
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)
        done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
        for _ in range(max_len):
            mask = _causal(out.size(1), src.device)
            logits = model.decode(out, memory, src_mask, mask)
            nxt = logits[:, 0].argmax(-1).masked_fill(done, pad_id)
            out = torch.cat([out, nxt[:, None]], 1)
            done |= nxt == eos_id
            if done.all():
                break
    return out


ARGMAX_OF_FIRST_POSITION = Pitfall(
    "argmax of the first position",
    "You take the argmax of the *first* position's logits at every step. The next "
    "token is predicted by the last position: logits[:, -1].",
    S_DECODE,
    _greedy_first_position,
)

# What greedy_decode returns, as the exercise states it; failures enforcing it quote it.
_DECODE_TEXT = (
    'The exercise says: "greedy_decode(model, src, max_len, bos_id, '
    "eos_id, pad_id) returns a LongTensor [B, T] whose first column is "
    "bos_id, followed by at most max_len new tokens per row; after a row's "
    'eos_id come pad_id tokens."'
)

# Recognised from what the recording model saw, not by matching a wrong loop's output.
ENCODES_EVERY_STEP = Diagnosis(
    "source encoded at every step",
    "Encode the source once before the loop and reuse the memory at every step "
    "(calling model(src, tgt) at each step re-encodes it).",
    S_DECODE,
)
MEMORY_NOT_USED = Diagnosis(
    "memory from encode not used",
    "Each decode call reads the source through the memory that model.encode(src) "
    "returned: pass that memory (and its src_mask) to every step.",
    S_DECODE,
)
START_NOT_LONG = Diagnosis(
    "start token not a LongTensor",
    "Token ids index an embedding, so they must be integers: build the start column "
    "with torch.full((B, 1), bos_id, dtype=torch.long, device=src.device).",
    S_DECODE,
)
WRONG_START = Diagnosis(
    "decoding does not start from BOS",
    "The decoder's first input is one bos_id per row (the argument, not a constant).",
    S_DECODE,
)
LAST_TOKEN_ONLY = Diagnosis(
    "decoder fed only the newest token",
    "Without a key/value cache the decoder must re-read the whole prefix at every "
    "step (BOS and every token so far); fed one token it forgets the history.",
    S_DECODE,
)
NO_CAUSAL_MASK = Diagnosis(
    "greedy decoding without the causal mask",
    "Each step must decode with the same causal mask as training (causal_mask / tril, "
    "True = may attend): without it, earlier positions see later ones inside the "
    "decoder, and from the second layer on the last position's output is not what the "
    "model was trained to produce.",
    S_DECODE,
)
UPPER_TRIANGULAR_MASK = Diagnosis(
    "upper triangular target mask",
    "Your target mask is upper triangular (triu): each position may attend only to the "
    "*future*. The causal mask is lower triangular (tril).",
    S_DECODE,
)
DECODES_IN_TRAINING_MODE = Diagnosis(
    "decoding in training mode",
    "The model decoded in training mode, so dropout was on and the output is random. "
    "Call model.eval() before decoding.",
    S_DECODE,
)
DECODES_WITH_GRADIENTS = Diagnosis(
    "decoding with gradients enabled",
    "Decoding with gradients enabled builds an autograd graph at every step for "
    "nothing. Wrap the loop in torch.no_grad() (or torch.inference_mode()).",
    S_DECODE,
)
OUTPUT_NOT_LONG = Diagnosis(
    "output not a LongTensor",
    "Return the token ids as a LongTensor. " + _DECODE_TEXT,
    S_DECODE,
)
NO_LEADING_BOS = Diagnosis(
    "output without the leading BOS",
    "Keep the start token in what you return. " + _DECODE_TEXT,
    S_DECODE,
)
EOS_WRITTEN_AS_PAD = Diagnosis(
    "EOS replaced by pad_id",
    "A row's EOS is its last real token: append the step's token first, then mark the "
    "row finished, so that pad_id starts after the EOS, not in its place. "
    + _DECODE_TEXT,
    S_DECODE,
)
WRONG_NEXT_TOKEN = Diagnosis(
    "next token is not the argmax of the last position",
    "At each step append logits[:, -1].argmax(-1): the highest score over the "
    "vocabulary (the last axis) at the last position.",
    S_DECODE,
)
MAX_LEN_COUNT = Diagnosis(
    "max_len counted wrong",
    "max_len counts the new tokens after BOS: a row that never produces EOS gets "
    "exactly max_len of them (T = max_len + 1 with BOS). " + _DECODE_TEXT,
    S_DECODE,
)
WRONG_PADDING = Diagnosis(
    "finished rows not padded with pad_id",
    "Once a row has produced eos_id, every later token of that row is pad_id (the "
    "argument). " + _DECODE_TEXT,
    S_DECODE,
)
ROWS_CUT_SHORT = Diagnosis(
    "rows cut short",
    "A row ends with the step that produced its EOS (the EOS included), or after "
    "max_len new tokens: append each step's token before testing whether to stop.",
    S_DECODE,
)
NO_STOP_AT_EOS = Diagnosis(
    "greedy decoding does not stop at EOS",
    "Track which rows are finished, pad them, and break when all are.",
    S_DECODE,
)

_BOS, _EOS, _PAD = 1, 2, 0
_DECODE_CASES = (  # (label, eos_bias, batch, max_len, seed, (bos, eos, pad))
    ("every row ends before max_len", 2.0, 6, 12, 0, (1, 2, 0)),
    ("some rows reach max_len=8", 1.0, 6, 8, 0, (1, 2, 0)),
    ("a batch of one", 0.0, 1, 10, 3, (1, 2, 0)),
    ("bos_id=12, eos_id=11, pad_id=10", 2.0, 4, 9, 5, (12, 11, 10)),
)


def _rows(tokens, eos, pad):
    """[B, T] tokens after BOS -> per row: (tokens up to and including the first EOS,
    trailing PAD dropped when there is none; the tokens after it that are not PAD)."""
    rows = []
    for r in tokens.tolist():
        if eos in r:
            k = r.index(eos)
            rows.append((r[: k + 1], [x for x in r[k + 1 :] if x != pad]))
        else:
            while r and r[-1] == pad:
                r = r[:-1]
            rows.append((r, []))
    return rows


def _decoded_tokens(rows):
    return [tokens for tokens, _ in rows]


def _decode_src(b, seed):
    """[b, 5] source ids."""
    return torch.randint(3, 13, (b, 5), generator=_gen(seed)).to(get_device())


def _decode_inputs(eos_bias, b, seed, ids=(_BOS, _EOS, _PAD)):
    model = DecodingModel(eos_bias=eos_bias, ids=ids).to(get_device())
    return model, _decode_src(b, seed)


@dataclass(frozen=True)
class _Decoding:
    """One case of the learner's loop: what it returned, and what the model recorded."""

    label: str
    model: DecodingModel
    src: torch.Tensor
    max_len: int
    batch: int
    ids: tuple  # (bos, eos, pad)
    eos_bias: float
    out: torch.Tensor  # [B, T] what the learner returned
    rows: list  # _rows of the learner's output after its first column
    want: list  # _rows of the reference's output after BOS
    want_steps: int  # decode calls the reference made
    calls: tuple  # the model's record of each decode call the learner made
    encoded_rows: int


TOKEN_IDS_OUT_OF_RANGE = Diagnosis(
    "appended tokens are not vocabulary ids",
    "Each step appends one id per row, a LongTensor [B] in 0 .. V-1: "
    "logits[:, -1].argmax(-1), the argmax over the vocabulary (the last axis) of each "
    "row's last position. An argmax without dim flattens the whole tensor and returns "
    "one index into all B·V (or B·T·V) scores.",
    S_DECODE,
)


def _flat_argmax(logits, ids) -> str | None:
    """Which argmax without ``dim`` over ``logits`` [B, T, V] gives ``ids`` [B]."""
    flats = (("logits[:, -1]", logits[:, -1]), ("logits", logits))
    name = next(
        (
            name
            for name, z in flats
            if bool((ids == z.reshape(-1).argmax().to(ids.device)).all())
        ),
        None,
    )
    if name is None:
        return None
    return (
        f"the flat index of the largest of all the scores in {name}, the whole "
        "batch's: an argmax without dim, one index for every row"
    )


def _out_of_range_ids(calls, vocab) -> str | None:
    """What the first decode call fed ids outside 0 .. vocab-1 saw, or None."""

    def outside(ids):
        return ids.dtype == torch.long and bool(((ids < 0) | (ids >= vocab)).any())

    k = next((k for k, c in enumerate(calls) if outside(c["prefix"])), None)
    if k is None:
        return None
    bad = calls[k]["prefix"]
    seen = (
        f"your decoder input [B={bad.size(0)}, {bad.size(1)}] held ids from "
        f"{int(bad.min())} to {int(bad.max())}; the vocabulary has V = {vocab} "
        f"ids, 0 .. {vocab - 1}."
    )
    before = calls[k - 1] if k else None
    if before is not None and bad.size(1) == before["length"] + 1:
        seen += f" The column you appended was {bad[:, -1].tolist()}"
        flat = _flat_argmax(before["logits"], bad[:, -1])
        seen += f": {flat}." if flat else "."
    return seen


def _raised_in_decode(title, label, model, raised) -> None:
    """The learner's loop raised: name what the model saw first, else say where."""
    __tracebackhide__ = True
    calls = model.calls
    bad = next((c for c in calls if c["dtype"] != torch.long), None)
    if bad is not None:
        START_NOT_LONG.fail(
            title,
            f"In case {label}, your decoder input had dtype "
            f"{bad['dtype']} (and the embedding raised).",
        )
    out_of_range = _out_of_range_ids(calls, model.inner.out.out_features)
    if out_of_range is not None:
        TOKEN_IDS_OUT_OF_RANGE.fail(
            title, f"In case {label}, {out_of_range} Then your code raised {raised!r}"
        )
    fail(title, f"case {label}: your code raised {raised!r}")


def _returned_ids(title, label, out, batch) -> torch.Tensor:
    __tracebackhide__ = True
    if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.size(0) != batch:
        got = (
            f"shape {list(out.shape)}"
            if isinstance(out, torch.Tensor)
            else type(out).__name__
        )
        fail(
            title,
            f"case {label}: expected a LongTensor [B={batch}, T] of token ids, "
            f"got {got}. {_DECODE_TEXT}",
            S_DECODE,
        )
    if type(out) is not torch.Tensor:  # a subclass could make any comparison agree
        fail(
            title,
            f"case {label}: expected a plain torch.Tensor, got the tensor "
            f"subclass {type(out).__name__}",
            S_DECODE,
        )
    if out.dtype != torch.long:
        OUTPUT_NOT_LONG.fail(title, f"In case {label}, yours has dtype {out.dtype}.")
    return out


def _decode_case(
    title, greedy_fn, model, label, eos_bias, batch, max_len, seed, ids
) -> _Decoding:
    """Run the reference, then the learner, on ``model`` set up for this case and left
    in training mode."""
    __tracebackhide__ = True
    bos, eos, pad = ids
    model.configure(eos_bias, ids)
    src = _decode_src(batch, seed)
    model.train()  # as a model is left after training
    want = _rows(_greedy_reference(model, src, max_len, *ids)[:, 1:], eos, pad)
    want_steps = len(model.calls)
    model.reset()
    model.train()
    got = run(greedy_fn, (model, src, max_len, *ids))
    if isinstance(got, Raised):
        _raised_in_decode(title, label, model, got)
    out = _returned_ids(title, label, got, batch)
    return _Decoding(
        label,
        model,
        src,
        max_len,
        batch,
        ids,
        eos_bias,
        out,
        _rows(out[:, 1:], eos, pad),
        want,
        want_steps,
        tuple(model.calls),
        model.encoded_rows,
    )


# Each probe returns what it saw the learner's loop do wrong in one case, or None.


def _encoded_more_than_once(seen: _Decoding) -> str | None:
    if seen.encoded_rows > seen.batch:
        return (
            f"In case {seen.label}, {seen.encoded_rows} source rows were encoded "
            f"for a batch of {seen.batch}."
        )
    return None


def _memory_not_from_encoder(seen: _Decoding) -> str | None:
    n = sum(not c["memory"] for c in seen.calls)
    if n:
        return (
            f"In case {seen.label}, {n} of your {len(seen.calls)} decode calls got "
            "a memory that model.encode(src) did not return."
        )
    return None


def _started_elsewhere(seen: _Decoding) -> str | None:
    first = seen.calls[0]["prefix"] if seen.calls else None
    bos = seen.ids[0]
    if first is None or (first.size(1) >= 1 and bool((first[:, 0] == bos).all())):
        return None
    return (
        f"In case {seen.label}, your first decode call read "
        f"{first[:, 0].tolist()}; bos_id={bos}."
    )


def _only_newest_token(seen: _Decoding) -> str | None:
    lengths = [c["length"] for c in seen.calls]
    if len(lengths) > 1 and max(lengths) == 1:
        return (
            f"In case {seen.label}, each of your {len(lengths)} decode calls read "
            "a single token."
        )
    return None


def _first_masked_step(seen: _Decoding, kinds) -> dict | None:
    """The first decode call past the first token whose mask is one of ``kinds``."""
    return next((c for c in seen.calls if c["length"] > 1 and c["mask"] in kinds), None)


def _decoded_without_causal_mask(seen: _Decoding) -> str | None:
    call = _first_masked_step(seen, ("none", "other"))
    if call is None:
        return None
    mask = "None (or all True)" if call["mask"] == "none" else "neither tril nor triu"
    return (
        f"At the step that decoded {call['length']} tokens, your target mask was "
        f"{mask}."
    )


def _decoded_with_triu_mask(seen: _Decoding) -> str | None:
    call = _first_masked_step(seen, ("triu",))
    if call is None:
        return None
    return (
        f"At the step that decoded {call['length']} tokens, your target mask was triu."
    )


def _decoded_in_training_mode(seen: _Decoding) -> str | None:
    n = sum(c["training"] for c in seen.calls)
    if n:
        return f"{n} of your {len(seen.calls)} decode calls ran in training mode."
    return None


def _decoded_with_gradients(seen: _Decoding) -> str | None:
    n = sum(c["grad"] for c in seen.calls)
    if n:
        return f"{n} of your {len(seen.calls)} decode calls ran with gradients on."
    return None


def _without_bos(seen: _Decoding) -> str | None:
    first = seen.out[:, 0] if seen.out.size(1) else seen.out.new_empty(0)
    if first.numel() and bool((first == seen.ids[0]).all()):
        return None
    return (
        f"In case {seen.label}, your output's first column is {first.tolist()}; "
        f"bos_id={seen.ids[0]}."
    )


def _appended(seen: _Decoding):
    """(call, rows still decoding, the tokens appended to them) for each decode call
    whose prefix the next call extends by one column."""
    eos = seen.ids[1]
    for a, b in zip(seen.calls, seen.calls[1:]):
        pa, pb = a["prefix"], b["prefix"]
        if pb.shape != (pa.size(0), pa.size(1) + 1) or not torch.equal(pb[:, :-1], pa):
            continue
        alive = ~(pa == eos).any(1)
        if alive.any():
            yield a, alive, pb[alive, -1]


# What a loop may have appended instead of the last position's argmax, by name.
_TOKEN_CHOICES = (
    ("the argmax of the last position", lambda z: z[:, -1].argmax(-1)),
    ("the smallest logit of the last position (argmin)", lambda z: z[:, -1].argmin(-1)),
    (
        "the argmax over the positions axis (dim=1), not the vocabulary",
        lambda z: z.argmax(1)[:, -1],
    ),
    (
        "the argmax of the second-to-last position",
        lambda z: z[:, -2].argmax(-1) if z.size(1) > 1 else z[:, -1].argmax(-1),
    ),
)


def _token_choice(seen: _Decoding) -> str | None:
    """Which of _TOKEN_CHOICES explains every appended token (None: none or right)."""
    steps = list(_appended(seen))
    for name, choose in _TOKEN_CHOICES:
        if all(
            torch.equal(choose(c["logits"][alive]).to(tok.device), tok)
            for c, alive, tok in steps
        ):
            return name
    return None


def _took_first_position(seen: _Decoding) -> str | None:
    steps = list(_appended(seen))
    if (
        steps
        and all(
            torch.equal(c["logits"][alive, 0].argmax(-1).to(t.device), t)
            for c, alive, t in steps
        )
        and _token_choice(seen) is None
    ):
        return f"In case {seen.label}, your tokens are logits[:, 0].argmax(-1)."
    return None


def _eos_written_as_pad(seen: _Decoding) -> str | None:
    """Every appended token is the argmax, except pad_id wherever the argmax was EOS."""
    eos, pad = seen.ids[1], seen.ids[2]
    off = []
    for c, alive, tok in _appended(seen):
        want = c["logits"][alive, -1].argmax(-1).to(tok.device)
        differ = want != tok
        if not ((want[differ] == eos).all() and (tok[differ] == pad).all()):
            return None
        off += [c["length"]] if differ.any() else []
    if not off:
        return None
    return (
        f"In case {seen.label}, every token you appended is the last position's "
        f"argmax, except where that argmax was EOS ({eos}): there you appended "
        f"pad_id ({pad}) (first after the step that decoded {off[0]} tokens)."
    )


def _wrong_token_choice(seen: _Decoding) -> str | None:
    steps = list(_appended(seen))
    if not steps:
        return None
    choice = _token_choice(seen)
    if choice == _TOKEN_CHOICES[0][0]:
        return None
    if choice is not None:
        return f"In case {seen.label}, every token you appended was {choice}."
    c, alive, tok = next(
        (c, a, t)
        for c, a, t in steps
        if not torch.equal(c["logits"][a, -1].argmax(-1).to(t.device), t)
    )
    want = c["logits"][alive, -1].argmax(-1).tolist()
    return (
        f"In case {seen.label}, after the step that decoded {c['length']} tokens "
        f"you appended {tok.tolist()}; the last position's argmax was {want}."
    )


def _max_len_miscounted(seen: _Decoding) -> str | None:
    """Rows that never produce EOS got one or two tokens more or fewer than max_len
    (a loop stopped for another reason is a stopping mistake, judged later)."""
    eos = seen.ids[1]
    open_rows = [i for i, (tokens, _) in enumerate(seen.want) if eos not in tokens]
    counts = {len(seen.rows[i][0]) for i in open_rows if eos not in seen.rows[i][0]}
    if len(counts) != 1 or not 0 < abs(min(counts) - seen.max_len) <= 2:
        return None
    return (
        f"In case {seen.label}, the rows that never produce EOS got "
        f"{sorted(counts)} new tokens after BOS with max_len={seen.max_len}."
    )


def _kept_decoding_finished_rows(seen: _Decoding) -> bool:
    """Some finished row was given the model's own next token, as if not finished."""
    eos = seen.ids[1]
    for a, b in zip(seen.calls, seen.calls[1:]):
        pa, pb = a["prefix"], b["prefix"]
        if pb.shape != (pa.size(0), pa.size(1) + 1) or not torch.equal(pb[:, :-1], pa):
            continue
        done = (pa == eos).any(1)
        guess = a["logits"][:, -1].argmax(-1).to(pb.device)
        if (done & (pb[:, -1] == guess)).any():
            return True
    return False


def _padded_with_something_else(seen: _Decoding) -> str | None:
    extras = {x for _, extra in seen.rows for x in extra}
    if len(extras) == 1 and not _kept_decoding_finished_rows(seen):
        (value,) = extras
        return (
            f"In case {seen.label}, after EOS your rows hold {value}; "
            f"pad_id={seen.ids[2]}."
        )
    return None


def _row_cut_short(seen: _Decoding) -> str | None:
    for i, ((got, _), (want, _)) in enumerate(zip(seen.rows, seen.want)):
        if len(got) < len(want) and want[: len(got)] == got:
            return (
                f"In case {seen.label}, row {i} is {got}: the first {len(got)} of "
                f"the {len(want)} tokens it decodes to, {want}."
            )
    return None


def _decoded_past_eos(seen: _Decoding) -> str | None:
    longest = max((c["length"] for c in seen.calls), default=0)
    ended = all(seen.ids[1] in tokens for tokens in _decoded_tokens(seen.want))
    if ended and longest > seen.want_steps:
        return (
            f"In case {seen.label}, every sequence had ended after "
            f"{seen.want_steps} steps but your loop went on to decode a prefix of "
            f"{longest} tokens."
        )
    after = [(i, extra) for i, (_, extra) in enumerate(seen.rows) if extra]
    if after:
        row, extra = after[0]
        return f"In case {seen.label}, row {row} goes on after its EOS with {extra}."
    return None


def _rows_match(seen: _Decoding, variant) -> bool:
    """``variant`` gives the learner's tokens on the same model."""
    seen.model.configure(seen.eos_bias, seen.ids)  # the model serves every case
    theirs = variant(seen.model, seen.src, seen.max_len, *seen.ids)
    return _decoded_tokens(_rows(theirs[:, 1:], *seen.ids[1:])) == _decoded_tokens(
        seen.rows
    )


def _stopped_at_first_eos(seen: _Decoding) -> str | None:
    """Reproduced by the variant (judged on every case: it is a Pitfall)."""
    if _rows_match(seen, STOPS_AT_FIRST_EOS.impl):
        return (
            f"In case {seen.label}, every row stops at the step where the first "
            "EOS appears."
        )
    return None


# In the order a loop runs: set-up, each step's input, the token it picks, when it
# stops; a mask or mode mistake explains any wrong tokens that follow from it.
DECODE_PROBES = (
    (_encoded_more_than_once, ENCODES_EVERY_STEP),
    (_memory_not_from_encoder, MEMORY_NOT_USED),
    (_started_elsewhere, WRONG_START),
    (_only_newest_token, LAST_TOKEN_ONLY),
    (_decoded_without_causal_mask, NO_CAUSAL_MASK),
    (_decoded_with_triu_mask, UPPER_TRIANGULAR_MASK),
    (_decoded_in_training_mode, DECODES_IN_TRAINING_MODE),
    (_decoded_with_gradients, DECODES_WITH_GRADIENTS),
    (_without_bos, NO_LEADING_BOS),
    (_took_first_position, ARGMAX_OF_FIRST_POSITION),
    (_eos_written_as_pad, EOS_WRITTEN_AS_PAD),
    (_wrong_token_choice, WRONG_NEXT_TOKEN),
    (_stopped_at_first_eos, STOPS_AT_FIRST_EOS),
    (_max_len_miscounted, MAX_LEN_COUNT),
    (_row_cut_short, ROWS_CUT_SHORT),
    (_padded_with_something_else, WRONG_PADDING),
    (_decoded_past_eos, NO_STOP_AT_EOS),
)


def _judge(title, probe, diagnosis, seen: list) -> None:
    """Fail when ``probe`` sees its mistake: a Diagnosis in any case, a Pitfall (a wrong
    variant) only when it explains every case and some case's tokens are wrong."""
    __tracebackhide__ = True
    if isinstance(diagnosis, Pitfall):
        wrong = [_decoded_tokens(s.rows) != _decoded_tokens(s.want) for s in seen]
        if any(wrong):
            observed = [probe(one) for one in seen]
            if all(o is not None for o in observed):
                diagnosis.fail(title, observed[wrong.index(True)])
        return
    found = next((o for o in map(probe, seen) if o is not None), None)
    if found is not None:
        diagnosis.fail(title, found)


def _fail_first_wrong_row(title, seen: _Decoding) -> None:
    __tracebackhide__ = True
    got, want = _decoded_tokens(seen.rows), _decoded_tokens(seen.want)
    i = next(i for i, (g, w) in enumerate(zip(got, want)) if g != w)
    fail(
        title,
        f"case {seen.label}: row {i} decoded to {got[i]}, expected {want[i]} "
        f"(tokens after BOS up to EOS). It {UNEXPLAINED}: every step's input, "
        "mask, mode and token choice looked right. " + _DECODE_TEXT,
        S_DECODE,
    )


@single_threaded
def check_greedy_decode(greedy_fn) -> None:
    """``greedy_fn(model, src [B, Ss], max_len, bos_id, eos_id, pad_id) -> [B, T]`` (BOS
    first, at most max_len new tokens, PAD after EOS), for a model like
    :class:`DecodingModel`. All cases run first; then each probe, in the order a loop
    runs, is judged on all of them."""
    __tracebackhide__ = True
    title = "greedy_decode"
    model = DecodingModel().to(get_device())
    seen = [_decode_case(title, greedy_fn, model, *case) for case in _DECODE_CASES]
    for probe, diagnosis in DECODE_PROBES:
        _judge(title, probe, diagnosis, seen)
    for one in seen:
        if _decoded_tokens(one.rows) != _decoded_tokens(one.want):
            _fail_first_wrong_row(title, one)
    passed(
        title,
        f"matches the reference on {len(_DECODE_CASES)} cases: eval mode, no "
        "grad, encodes once, causal mask, stops at EOS",
    )


# ------------------------------------------------------------------------- hidden tests


@single_threaded
def check_train_step_by_hand(step_fn) -> None:
    """Hidden test: the learner's step, not the reference's train_step (calling the
    model is fine)."""
    __tracebackhide__ = True
    model = _small_model(0)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = LambdaLR(opt, lambda s: 1.0)
    src, tgt = _tokens(2, 5, seed=1), _tokens(2, 6, seed=2)
    check_not_delegated(
        "train_step",
        lambda: step_fn(model, src, tgt, opt, sched, 1.0, 0, 0.0),
        forbidden=["tformer_ref.train_step", "tformer_ref.fit"],
    )


@single_threaded
def check_greedy_by_hand(greedy_fn) -> None:
    """Hidden test: the learner's loop, not the reference's greedy_decode."""
    __tracebackhide__ = True
    model, src = _decode_inputs(0.5, 2, 0)
    # The model itself is reference code the learner is meant to call: profile only the
    # learner's loop.
    check_not_delegated(
        "greedy_decode",
        lambda: greedy_fn(model, src, 8, 1, 2, 0),
        forbidden=["tformer_ref.greedy_decode", "tformer_ref.beam_search"],
    )


seal(__name__)
