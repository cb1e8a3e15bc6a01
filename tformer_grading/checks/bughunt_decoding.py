"""Checks for the graded bug hunt on the seed's greedy decoding loop (ch06_bughunt).

The learner gets the seed's ``generate_text(model, src, max_length, device)`` verbatim
and fixes it in place. The seed's loop has three bugs; each has its own check, judged
from behaviour:

1. it calls ``model.decoder.create_trg_mask(trg)``, a method the decoder does not have
   (the seed defines ``create_trg_mask`` as a free function): :func:`check_target_mask`
   runs the loop on sources without padding and compares its tokens with the reference's
   greedy search;
2. ``create_trg_mask`` builds its mask with ``torch.ones((trg_len, trg_len))``, on the
   CPU whatever ``device`` is (on a GPU the decoder's CUDA scores meet a CPU mask and
   raise; on a CPU nothing shows): :func:`check_mask_device` runs the loop under a
   recorder that knows which tensors the learner's code created without choosing a
   device, and fails when one of them meets the model's tensors without having been
   moved;
3. the encoder and the decoder get ``None`` as the source mask, so padding in the source
   is attended to: :func:`check_source_padding` decodes sources that end with padding.

Each check gives the loop what it needs to get past the *other* bugs, so a loop with one
bug fixed passes exactly that bug's check: checks 2 and 3 hand it a model whose decoder
does have a ``create_trg_mask`` method (the notebook's own free function), and checks 1
and 3 move the masks they are given to the model's device.

The model has the seed's interface (:class:`SeedStyleTransformer`): ``model.encoder(src,
src_mask)`` and ``model.decoder(trg, enc_src, src_mask, trg_mask)`` returning logits [N,
T, V]; masks follow the seed's convention (its ``masked_fill(mask == 0, ...)``: an entry
equal to 0 is masked, and ``None`` masks nothing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from tformer_ref.decoding import greedy_decode
from tformer_ref.device import get_device
from tformer_ref.model import Transformer

from ..guard.integrity import seal
from .ch03 import S_CAUSAL, S_PADDING
from .ch06 import DECODES_IN_TRAINING_MODE, S_DECODE
from .delegation import check_not_delegated
from .diagnosis import (
    UNEXPLAINED,
    Diagnosis,
    Raised,
    fail,
    passed,
    run,
    single_threaded,
)
from .measure.devices import Placement
from .measure.mask_readings import causal_reading, shared_pattern
from .measure.sizes import named
from .pieces import wrap_checks

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True

#: The exercise these checks grade (the pitfall index links its rows there).
ASSIGNMENT = "ch06_bughunt"

SOS_IDX, EOS_IDX, PAD_IDX = 1, 2, 0
VOCAB = 16  # ids 3 .. 15 are ordinary tokens
D_MODEL, N_HEADS = 32, 4
# None of them is a case's source length or max_length: a size error's numbers read
# as one size each.
MODEL_SIZES = named(H=N_HEADS, Dh=D_MODEL // N_HEADS, D=D_MODEL, V=VOCAB)


# ---------------------------------------------------------------------------- the model


def _core(seed: int = 0) -> Transformer:
    """A small Transformer built under ``seed`` (the notebook's random state left
    alone) that never outputs PAD or SOS. Its logits are scaled up: every greedy choice
    wins by a margin far above float rounding, so right loops written differently (one
    that drops the padding, say) pick the same tokens."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        core = Transformer(VOCAB, VOCAB, D_MODEL, N_HEADS, 2, 64, max_len=64)
    with torch.no_grad():
        core.generator.weight.mul_(4.0)
        core.generator.bias.mul_(4.0)
        core.generator.bias[PAD_IDX] = core.generator.bias[SOS_IDX] = -1e4
    return core


def _kept(value, keep: Callable) -> Any:
    """An argument as the record keeps it: ``keep`` of the tensor, detached and on the
    CPU, or the type's name."""
    if not isinstance(value, torch.Tensor):
        return type(value).__name__
    # Not the learner's tensors: kept out of the record of where tensors live.
    with torch._C.DisableTorchFunction():
        return keep(value.detach().cpu())


def _seed_mask(mask, name: str, like: torch.Tensor, move: bool):
    """A mask in the seed's convention -> the course's bool keep-mask with 4 axes.
    ``move``: put it on ``like``'s device."""
    if mask is None:
        return None
    if not isinstance(mask, torch.Tensor):
        raise TypeError(
            f"{name} must be a tensor (entries equal to 0 are masked) or "
            f"None, got {type(mask).__name__}"
        )
    if mask.dim() > 4:
        raise ValueError(
            f"{name} must broadcast to the scores [N, heads, query_len, "
            f"key_len], got shape {list(mask.shape)}"
        )
    keep = mask != 0
    keep = keep.reshape((1,) * (4 - keep.dim()) + tuple(keep.shape))  # as broadcast
    return keep.to(like.device) if move else keep


@dataclass
class Call:
    """One call the loop made to ``model.encoder`` or ``model.decoder``, as kept."""

    part: str  # "encoder" or "decoder"
    tokens: Any  # src or trg, as lists of ids
    src_mask: Any  # a bool keep-mask on the CPU, None, or the type's name
    trg_mask: Any = None  # the same, of the target mask (decoder)
    training: bool = False
    argmax: Any = None  # the argmax token at each position of the logits returned


class _Part(nn.Module):
    """A part of the seed's model over the core's layers. It records each call before
    running it: a call that raises is in the record too (a forward hook would miss it).
    """

    def __init__(self, core: Transformer, log: list, move_masks: bool):
        super().__init__()
        self.core, self.log, self.move_masks = core, log, move_masks

    def _record(self, tokens, src_mask, trg_mask=None) -> None:
        # A mask as the seed's convention reads it: a bool keep-mask (0 is masked).
        masks = [
            None if m is None else _kept(m, lambda t: t != 0)
            for m in (src_mask, trg_mask)
        ]
        tokens = _kept(tokens, torch.Tensor.tolist)
        self.log.append(Call(self.part, tokens, *masks, self.training))


class Encoder(_Part):
    """The seed's ``model.encoder(src [N, S], src_mask) -> enc_src [N, S, D]``."""

    part = "encoder"

    def forward(self, src, mask):
        self._record(src, mask)
        core = self.core
        x = core.embed(src, core.src_embed, core.src_pos)
        return core.encoder(x, _seed_mask(mask, "src_mask", x, self.move_masks))


class Decoder(_Part):
    """The seed's ``model.decoder(trg [N, T], enc_src [N, S, D], src_mask, trg_mask)
    -> logits [N, T, V]``. Like the seed's attention, no ``trg_mask`` masks nothing."""

    part = "decoder"

    def forward(self, trg, enc_src, src_mask, trg_mask):
        self._record(trg, src_mask, trg_mask)
        core = self.core
        x = core.embed(trg, core.tgt_embed, core.tgt_pos)
        self_mask = _seed_mask(trg_mask, "trg_mask", x, self.move_masks)
        if self_mask is None:
            self_mask = torch.ones(1, 1, 1, 1, dtype=torch.bool, device=x.device)
        memory_mask = _seed_mask(src_mask, "src_mask", x, self.move_masks)
        logits = core.generator(core.decoder(x, enc_src, self_mask, memory_mask))
        if logits.dim() == 3 and logits.size(0) == 1:
            self.log[-1].argmax = _kept(logits[0].argmax(-1), torch.Tensor.tolist)
        return logits


class SeedStyleTransformer(nn.Module):
    """A tformer_ref Transformer behind the seed's interface (masks in the seed's
    convention, broadcast to the scores [N, heads, query_len, key_len]); ``log``
    records every call. A check may build it with ``move_masks`` (masks moved to the
    model's device) or ``mask_method`` (a ``model.decoder.create_trg_mask``); the
    notebook's model has neither, like the seed's.

    Used in the exercise ch06_bughunt, on §6.7 'Greedy and beam decoding'
    (book/ch06_training).
    """

    def __init__(self, core: Transformer, move_masks=False, mask_method=None):
        super().__init__()
        self.log: list[Call] = []
        self.encoder = Encoder(core, self.log, move_masks)
        self.decoder = Decoder(core, self.log, move_masks)
        if mask_method is not None:
            self.decoder.create_trg_mask = mask_method

    @property
    def core(self) -> Transformer:
        return self.encoder.core


# The model's forward code: tensors made below it are the course's, not the learner's.
# Not every module's forward (Placement's default): a loop that calls model.core's
# parts itself answers for the tensors they make without a device.
_MODEL_CODES = frozenset({Encoder.forward.__code__, Decoder.forward.__code__})


def seed_style_model(device=None) -> SeedStyleTransformer:
    """The exercise's model: small, untrained, seeded, on ``device`` (default: the
    course's)."""
    return SeedStyleTransformer(_core()).to(device or get_device())


def _model(move_masks: bool, fn: Callable | None = None) -> SeedStyleTransformer:
    """The model a check hands the loop; with ``fn``, its decoder has the method
    ``create_trg_mask``: the notebook's free function, what a loop calling it meant."""
    found = getattr(fn, "__globals__", {}).get("create_trg_mask")
    method = found if callable(found) else None
    return SeedStyleTransformer(_core(), move_masks, method).to(get_device())


# ------------------------------------------------------------------ cases and reference


@dataclass(frozen=True)
class Source:
    """A case: the source's ids and ``max_length``; its length is none of the model's
    sizes, nor max_length, so that each number of a size error reads as one size."""

    ids: tuple[int, ...]
    max_length: int

    @property
    def label(self) -> str:
        ids = ("PAD" if i == PAD_IDX else str(i) for i in self.ids)
        return f"src=[{', '.join(ids)}]"

    def sizes(self, log: list) -> str:
        """The case's sizes, with T, the length of trg, when the model's last call was
        a decoder step."""
        last = log[-1] if log else None
        step = {}
        if last is not None and last.part == "decoder":
            step = {"T": len(last.tokens[0])} if isinstance(last.tokens, list) else {}
        sizes = named(S=len(self.ids), **step, max_length=self.max_length)
        return f"{sizes}; the model's {MODEL_SIZES}"


# Ordinary tokens only, no padding.
_PLAIN = (
    Source((5, 9, 4, 11, 7), 10),
    Source((7, 3, 12), 9),
    Source((14, 6, 8, 10, 13, 4), 12),
    Source((9, 9, 15, 3, 6), 10),
)
# The same kind of sources, ending with PAD_IDX.
_PADDED = (
    Source((5, 9, 4, 11, PAD_IDX, PAD_IDX), 10),
    Source((7, 3, 12, PAD_IDX, PAD_IDX), 9),
    Source((14, 6, 8, PAD_IDX, PAD_IDX, PAD_IDX), 12),
    Source((9, 9, 15, 3, 6, PAD_IDX, PAD_IDX), 10),
)


def _source(ids) -> torch.Tensor:
    return torch.tensor([list(ids)], dtype=torch.long, device=get_device())


# What generate_text returns, as the exercise states it; failures enforcing it quote it.
CONTRACT = (
    'The exercise says: "generate_text(model, src, max_length, device) '
    "returns trg, a LongTensor [1, T]: SOS_IDX, then the greedy tokens, at "
    "most max_length tokens in all, ending with EOS_IDX when the model "
    'produces it."'
)


def _reference(model: SeedStyleTransformer, src: torch.Tensor, max_length: int) -> list:
    """The reference's greedy search on the same weights, with the padding and causal
    masks: SOS, then at most ``max_length - 1`` tokens, stopping after EOS (the seed's
    count)."""
    out = greedy_decode(model.core, src, max_length - 1, SOS_IDX, EOS_IDX, PAD_IDX)
    return out[0].tolist()


def _decode(fn, model, src, max_length):
    """The learner's loop on one source: its output (or Raised), the model left in
    training mode before it, as after training."""
    model.log.clear()
    model.train()
    return run(fn, (model, src, max_length, get_device()))


def _tokens(title: str, label: str, out) -> list:
    if type(out) is not torch.Tensor or out.dim() != 2 or out.size(0) != 1:
        tensor = isinstance(out, torch.Tensor)
        got = f"shape {list(out.shape)}" if tensor else type(out).__name__
        problem = f"expected a LongTensor [1, T] of token ids, got {got}"
    elif out.dtype not in (torch.long, torch.int32):
        problem = f"expected token ids (torch.long), got dtype {out.dtype}"
    else:
        return out[0].tolist()
    fail(title, f"case {label}: {problem}. " + CONTRACT, S_DECODE)


def _judge_tokens(title: str, generate_text, model, cases, wrong: Callable) -> None:
    """Decode each case with the learner's loop and the reference; a raise is explained
    from the record, tokens that differ by ``wrong(title, case, model, got, want)``."""
    for case in cases:
        src = _source(case.ids)
        want = _reference(model, src, case.max_length)
        out = _decode(generate_text, model, src, case.max_length)
        if isinstance(out, Raised):
            _explain_raise(title, case, model.log, out)
        got = _tokens(title, case.label, out)
        if got != want:
            wrong(title, case, model, got, want)


# ----------------------------------------------------------- what the masks looked like


def _target_reading(call: Call) -> tuple[Diagnosis | None, str]:
    """The mistake a decoder call's target mask shows (None: causal; the wrong length
    when it is no [t, t] pattern), and the mask as shown."""
    t = len(call.tokens[0]) if isinstance(call.tokens, list) else 0
    mask = call.trg_mask
    if mask is None or isinstance(mask, str):
        return (
            (NO_TARGET_MASK, "None")
            if mask is None
            else (TARGET_MASK_PATTERN, f"a {mask}")
        )
    pattern = shared_pattern(mask, t, t)
    if pattern is None:
        return TARGET_MASK_LENGTH, f"shape {list(mask.shape)}"
    found = _TARGET_READINGS.get(causal_reading(pattern), TARGET_MASK_PATTERN)
    return found, str(pattern.int().tolist())


def _source_kind(mask, src_ids: list) -> str:
    """How a recorded source mask treats ``src_ids``: right, none, shape, inverted or
    other."""
    s = len(src_ids)
    if mask is None:
        return "none"
    if isinstance(mask, str):
        return "other"
    if mask.dim() == 0:
        mask = mask.reshape(1)
    if mask.dim() > 4 or mask.size(-1) not in (1, s):
        return "shape"
    # A last axis of 1 broadcasts over the keys only when nothing else varies: a mask
    # of S values on another axis ([1, 1, S, 1]) marks queries, not keys.
    if mask.size(-1) == 1 and s > 1 and mask.numel() > 1:
        return "shape"
    keep = mask.reshape(-1, mask.size(-1)).expand(-1, s)
    real = torch.tensor([i != PAD_IDX for i in src_ids])
    kinds = {"right": real, "inverted": ~real, "none": real | True}
    return next((k for k, p in kinds.items() if bool((keep == p).all())), "other")


def _shape(mask) -> str:
    if mask is None or isinstance(mask, str):
        return "None" if mask is None else f"a {mask}"
    return f"shape {list(mask.shape)}"


# ------------------------------------------------------------------------ the diagnoses

NO_MASK_METHOD = Diagnosis(
    "create_trg_mask called as a method of model.decoder",
    "The seed's decoder has no create_trg_mask method: the seed defines "
    "create_trg_mask as a free function (it is in the setup cell). Call it as "
    "create_trg_mask(trg), or build the causal mask yourself.",
    S_DECODE,
)
NO_TARGET_MASK = Diagnosis(
    "decoding without the causal target mask",
    "Every step must decode the prefix with the causal (lower triangular) mask it was "
    "trained with: without it, earlier positions see later ones inside the decoder, "
    "and from the second layer on the last position's output is not what the model "
    "learned to produce.",
    S_CAUSAL,
)
INVERTED_TARGET_MASK = Diagnosis(
    "causal mask inverted",
    "Your target mask keeps the future and hides the past. The model's convention is "
    "the seed's (an entry equal to 0 is masked), and the causal mask is lower "
    "triangular: torch.tril of ones, 1 (or True) at (i, j) for every key j up to "
    "query i.",
    S_CAUSAL,
)
TARGET_MASK_LENGTH = Diagnosis(
    "target mask built for the wrong length",
    "At each step the decoder reads the whole prefix trg [1, t], so the target mask "
    "must be [t, t] (or [1, 1, t, t]) for that t: build it from trg at every step, "
    "after the last token was appended.",
    S_CAUSAL,
)
TARGET_MASK_PATTERN = Diagnosis(
    "target mask not causal",
    "The target mask must be lower triangular: query i may attend to keys 0 .. i and "
    "no others.",
    S_CAUSAL,
)
# What a target mask read as one [t, t] pattern (mask_readings.causal_reading) shows;
# any other reading (no diagonal among them) is a pattern that is not causal.
_TARGET_READINGS = {
    "causal": None,
    "all visible": NO_TARGET_MASK,
    "triu": INVERTED_TARGET_MASK,
    "inverted": INVERTED_TARGET_MASK,
}
NO_DEVICE = Diagnosis(
    "tensor built without a device",
    "A tensor made by torch.ones, zeros, tensor, arange ... without device= lives on "
    "the CPU, whatever device the model is on. The seed's create_trg_mask builds its "
    "mask with torch.ones((trg_len, trg_len)): on a GPU the decoder's scores are CUDA "
    "tensors and masked_fill raises 'Expected all tensors to be on the same device'; "
    "on a CPU nothing shows. Build it on trg's device (device=trg.device) or move it "
    "(.to(device)), as the seed already does for trg.",
    S_DECODE,
)
SOURCE_PADDING_ATTENDED = Diagnosis(
    "padding in the source attended to",
    "The encoder's self-attention and the decoder's cross-attention must both ignore "
    "the source's padding: pass the source mask, create_src_mask(src) [1, 1, 1, S], to "
    "model.encoder and to every model.decoder call, where the seed passes None.",
    S_PADDING,
)
LENGTH_WRONG = Diagnosis(
    "the loop returns the wrong number of tokens",
    "The right tokens, but too many or too few of them: trg holds SOS and then at "
    "most max_length - 1 greedy tokens (max_length in all), and stops right after "
    "EOS_IDX. " + CONTRACT,
    S_DECODE,
)
SOS_DROPPED = Diagnosis(
    "SOS_IDX left out of the returned tokens",
    "trg starts with SOS_IDX and the loop appends to it: return trg whole, SOS_IDX "
    "first. " + CONTRACT,
    S_DECODE,
)
NOT_LAST_POSITION = Diagnosis(
    "the next token is not the argmax of the last position",
    "The decoder returns logits [1, T, V], one row per position of trg; the next "
    "token is the argmax of the *last* row, output.argmax(2)[:, -1]. " + CONTRACT,
    S_DECODE,
)
SOURCE_MASK_WRONG = Diagnosis(
    "source mask not built from src",
    "The source mask says which positions of src are real tokens: "
    "create_src_mask(src), shape [1, 1, 1, S] for src [1, S], True (or 1) at real "
    "tokens and False (0) at PAD_IDX. It is the same for the encoder and for every "
    "decoder step.",
    S_PADDING,
)


# ------------------------------------------------------------- check 1: the target mask


def _decoder_calls(log: list) -> list:
    return [c for c in log if c.part == "decoder"]


def _source_mask_problem(log: list) -> str | None:
    """What was wrong with the source masks a loop passed (None is judged elsewhere)."""
    encoded = (c.tokens for c in log if c.part == "encoder")
    src_ids = next((t[0] for t in encoded if isinstance(t, list)), None)
    for call in log if src_ids is not None else ():
        if call.src_mask is None:
            continue
        kind = _source_kind(call.src_mask, src_ids)
        if kind in ("shape", "inverted", "other"):
            what = {
                "shape": f"had {_shape(call.src_mask)} for a source of "
                f"{len(src_ids)} positions",
                "inverted": "masked the real tokens and kept the padding",
                "other": "did not mark the source's padding",
            }[kind]
            return f"The source mask you passed to model.{call.part} {what}."
    return None


def _explain_raise(title: str, case: Source, log: list, raised: Raised) -> None:
    """Name the mistake the record shows, else say what was raised where; in the case's
    sizes, so that a size error's numbers are read in them."""
    if isinstance(raised.exc, AttributeError) and "create_trg_mask" in str(raised.exc):
        NO_MASK_METHOD.fail(title, f"In case {case.label} your loop raised {raised!r}.")
    where = f"{case.label} ({case.sizes(log)})"
    for call in _decoder_calls(log):
        found, shown = _target_reading(call)
        if found is TARGET_MASK_LENGTH:
            t = len(call.tokens[0])
            TARGET_MASK_LENGTH.fail(
                title,
                f"In case {where}: At the step that decoded {t} "
                f"{'token' if t == 1 else 'tokens'}, your target mask had {shown}. "
                f"Then {raised!r}.",
            )
    source = _source_mask_problem(log)
    if source is not None:
        SOURCE_MASK_WRONG.fail(title, f"In case {where}: {source} Then {raised!r}.")
    fail(title, f"case {where}: your loop raised {raised!r}", S_DECODE)


def _fail_on_target_mask(title: str, label: str, log: list) -> None:
    """Fail naming the mistake when the record shows training mode or a target mask that
    is not causal; return otherwise."""
    calls = _decoder_calls(log)
    training = sum(c.training for c in calls)
    if training:
        said = f"{training} of your {len(calls)} decoder calls ran in training mode."
        DECODES_IN_TRAINING_MODE.fail(title, f"In case {label}, {said}")
    for call in calls:
        t = len(call.tokens[0]) if isinstance(call.tokens, list) else 0
        found, shown = _target_reading(call) if t >= 2 else (None, "")
        if found not in (None, TARGET_MASK_LENGTH):
            said = f"at the step that decoded {t} tokens, your target mask was {shown}."
            found.fail(title, f"In case {label}, {said}")


def _explain_target_tokens(
    title: str, case: Source, model: SeedStyleTransformer, got: list, want: list
) -> None:
    label, log = case.label, model.log
    _fail_on_target_mask(title, label, log)
    source = _source_mask_problem(log)
    if source is not None:
        SOURCE_MASK_WRONG.fail(title, f"In case {label}: {source}")
    n = min(len(got), len(want))
    if len(got) != len(want) and got[:n] == want[:n]:
        LENGTH_WRONG.fail(
            title,
            f"In case {label} your loop returned {len(got)} tokens where {len(want)} "
            f"are expected, and the first {n} are the expected ones: {got}.",
        )
    if len(want) > 1 and got == want[1:]:
        SOS_DROPPED.fail(
            title,
            f"In case {label} your loop returned {got}: the expected {want} without "
            f"its first token, SOS_IDX = {want[0]}.",
        )
    position = _chosen_position(log, got)
    if position is not None:
        NOT_LAST_POSITION.fail(title, f"In case {label}, {position}")
    fail(
        title,
        f"case {label}: your loop returned {got}, expected {want}. It "
        f"{UNEXPLAINED}: the target mask of every step and the model's mode "
        "looked right. " + CONTRACT,
        S_DECODE,
    )


def _chosen_position(log: list, got: list) -> str | None:
    """Which position of each step's logits the loop took its token from, when one
    position other than the last explains every step and the last does not."""
    steps = [
        (len(c.tokens[0]), c.argmax)
        for c in _decoder_calls(log)
        if isinstance(c.tokens, list) and isinstance(c.argmax, list)
    ]
    steps = [(t, row) for t, row in steps if t < len(got) and len(row) == t]
    if not steps or all(got[t] == row[-1] for t, row in steps):
        return None
    for j in range(min(len(row) for _, row in steps)):
        if all(got[t] == row[j] for t, row in steps):
            t, row = next((t, row) for t, row in steps if got[t] != row[-1])
            return (
                f"every token your loop appended is the argmax of position {j} of "
                f"the step's logits: at the step that decoded {t} tokens you "
                f"appended {got[t]}, where the last position's argmax is {row[-1]}."
            )
    return None


@single_threaded
def check_target_mask(generate_text: Callable) -> None:
    """Bug 1. ``generate_text(model, src [1, S], max_length, device) -> [1, T]`` on
    sources without padding, on a model without a ``create_trg_mask`` method (masks
    moved to its device): the tokens must be the reference's greedy search, which uses
    the causal mask."""
    title = "generate_text: the target mask"
    model = _model(move_masks=True)
    _judge_tokens(title, generate_text, model, _PLAIN, _explain_target_tokens)
    passed(
        title,
        f"{len(_PLAIN)} sources decode exactly as the reference's greedy "
        "search: the loop calls the free create_trg_mask (or builds the "
        "causal mask itself)",
    )


# ---------------------------------------------------------- check 2: where tensors live

# measure.devices.Placement follows each tensor from the line that made it.


@single_threaded
def check_mask_device(generate_text: Callable) -> None:
    """Bug 2. Every tensor the loop builds must be on the model's device (``device=``, a
    ``*_like``, or moved with ``.to``) before it meets the model's tensors; judged on
    the CPU too, from where each tensor was made. The model's decoder has the
    ``create_trg_mask`` method (the notebook's free function) and masks are not moved
    for the loop."""
    title = "generate_text: the devices of the tensors it builds"
    model = _model(move_masks=False, fn=generate_text)
    for case in _PLAIN[:2]:
        src = _source(case.ids)
        code = getattr(generate_text, "__code__", None)
        placement = Placement(model, [src], code, _MODEL_CODES)
        with placement:
            out = _decode(generate_text, model, src, case.max_length)
        if placement.meeting is not None:
            NO_DEVICE.fail(title, f"In case {case.label}: {placement.meeting}")
        if isinstance(out, Raised):
            fail(
                title,
                f"case {case.label}: your loop raised {out!r}; this check runs it "
                "to the end to see where each tensor it builds lives.",
                S_DECODE,
            )
    passed(
        title,
        "every tensor it builds is on the model's device (made there or "
        "moved) before it meets the model's",
    )


# ------------------------------------------------------- check 3: padding in the source


def _explain_padding(
    title: str, case: Source, model: SeedStyleTransformer, got: list, want: list
) -> None:
    label, ids, log = case.label, case.ids, list(model.log)
    real = [i for i in ids if i != PAD_IDX]
    unpadded = _reference(model, _source(real), case.max_length)
    source = _source_mask_problem(log)
    if source is not None:
        SOURCE_MASK_WRONG.fail(title, f"In case {label}: {source}")
    unmasked = [c for c in log if _source_kind(c.src_mask, ids) == "none"]
    encoders = [c for c in unmasked if c.part == "encoder"]
    decoders = [c for c in unmasked if c.part == "decoder"]
    parts = [
        f"your model.encoder call got src_mask={_shape(c.src_mask)}"
        for c in encoders[:1]
    ]
    if decoders:
        parts.append(
            f"{len(decoders)} of your {len(_decoder_calls(log))} model.decoder calls "
            f"got src_mask={_shape(decoders[0].src_mask)}"
        )
    if parts:
        said = " and ".join(parts)
        SOURCE_PADDING_ATTENDED.fail(
            title,
            f"In case {label} ({len(ids) - len(real)} PAD_IDX at the end) your loop "
            f"returned {got}; with the padding masked it decodes to {want} (and "
            f"without the padding, to {unpadded}). {said[0].upper()}{said[1:]}, so "
            "attention reads the padding.",
        )
    _fail_on_target_mask(title, label, log)
    fail(
        title,
        f"case {label}: your loop returned {got}, expected {want}. It "
        f"{UNEXPLAINED}: the source mask of every call looked right. " + CONTRACT,
        S_DECODE,
    )


@single_threaded
def check_source_padding(generate_text: Callable) -> None:
    """Bug 3. Sources that end with PAD_IDX must decode as the reference does with the
    padding masked (the model's decoder has the ``create_trg_mask`` method; masks are
    moved to its device)."""
    title = "generate_text: padding in the source"
    model = _model(move_masks=True, fn=generate_text)
    _judge_tokens(title, generate_text, model, _PADDED, _explain_padding)
    passed(
        title,
        f"{len(_PADDED)} sources ending with padding decode as the reference "
        "with the padding masked, in the encoder and in the cross-attention",
    )


# -------------------------------------------------------------------------- hidden test


@single_threaded
def check_generate_text_by_hand(generate_text: Callable) -> None:
    """Hidden test: the learner's loop, not the reference's greedy_decode or
    beam_search."""
    title = "generate_text"
    model = _model(move_masks=True, fn=generate_text)
    src = _source(_PLAIN[0].ids)
    out = _decode(generate_text, model, src, 8)
    if isinstance(out, Raised):
        fail(title, f"your loop raised {out!r}", S_DECODE)
    forbidden = ["tformer_ref.greedy_decode", "tformer_ref.beam_search"]
    check_not_delegated(
        title, lambda: generate_text(model, src, 8, get_device()), forbidden=forbidden
    )


wrap_checks(globals())  # one diagnosis per submission (pieces.py)
seal(__name__)
