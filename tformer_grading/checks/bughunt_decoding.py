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

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from tformer_ref.decoding import greedy_decode
from tformer_ref.device import get_device
from tformer_ref.model import Transformer

from ..guard.integrity import seal
from .ch03 import S_CAUSAL, S_PADDING
from .ch06 import DECODES_IN_TRAINING_MODE, S_DECODE
from .delegation import check_not_delegated
from .diagnosis import (
    NOT_THE_LEARNERS,
    UNEXPLAINED,
    Diagnosis,
    Raised,
    fail,
    passed,
    run,
    single_threaded,
)

#: The exercise these checks grade (the pitfall index links its rows there).
ASSIGNMENT = "ch06_bughunt"

SOS_IDX, EOS_IDX, PAD_IDX = 1, 2, 0
VOCAB = 16  # ids 3 .. 15 are ordinary tokens


# ---------------------------------------------------------------------------- the model


def _core(seed: int = 0) -> Transformer:
    """A small tformer_ref Transformer built under ``seed`` (the notebook's random state
    left alone) that never outputs PAD or SOS. Its logits are scaled up so that every
    greedy choice wins by a margin far above float rounding (a right loop written
    differently, say one that drops the padding instead of masking it, picks the same
    tokens)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        core = Transformer(
            VOCAB,
            VOCAB,
            d_model=32,
            n_heads=4,
            n_layers=2,
            d_ff=64,
            dropout=0.1,
            max_len=64,
            pad_id=PAD_IDX,
        )
    with torch.no_grad():
        core.generator.weight.mul_(4.0)
        core.generator.bias.mul_(4.0)
        core.generator.bias[PAD_IDX] = core.generator.bias[SOS_IDX] = -1e4
    return core


def _snapshot(mask) -> Any:
    """What a mask argument was, kept for the diagnosis: None, a bool keep-mask on the
    CPU (the seed's convention: entries equal to 0 are masked), or the type's name."""
    if mask is None:
        return None
    if not isinstance(mask, torch.Tensor):
        return type(mask).__name__
    # Not the learner's tensors: kept out of the record of where tensors live.
    with torch._C.DisableTorchFunction():
        return (mask.detach() != 0).cpu()


def _seed_mask(mask, name: str, like: torch.Tensor, move: bool):
    """A mask in the seed's convention -> the course's bool keep-mask with 4 axes
    (leading axes added, as broadcasting in the seed's masked_fill would). ``move``: put
    it on ``like``'s device."""
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
    keep = keep.reshape((1,) * (4 - keep.dim()) + tuple(keep.shape))
    return keep.to(like.device) if move else keep


@dataclass
class Call:
    """One call the loop made to ``model.encoder`` or ``model.decoder``."""

    part: str  # "encoder" or "decoder"
    tokens: list  # src or trg, as lists of ids
    src_mask: Any  # _snapshot of the source mask argument
    trg_mask: Any = None  # _snapshot of the target mask argument (decoder)
    training: bool = False
    grad: bool = False
    argmax: Any = None  # the argmax token at each position of the logits returned


class Encoder(nn.Module):
    """The seed's ``model.encoder(src [N, S], src_mask) -> enc_src [N, S, D]``."""

    def __init__(self, core: Transformer, log: list, move_masks: bool):
        super().__init__()
        self.core, self.log, self.move_masks = core, log, move_masks

    def forward(self, src, mask):
        self.log.append(
            Call(
                "encoder",
                _ids(src),
                _snapshot(mask),
                None,
                self.training,
                torch.is_grad_enabled(),
            )
        )
        core = self.core
        x = core.embed(src, core.src_embed, core.src_pos)
        return core.encoder(x, _seed_mask(mask, "src_mask", x, self.move_masks))


class Decoder(nn.Module):
    """The seed's ``model.decoder(trg [N, T], enc_src [N, S, D], src_mask, trg_mask)
    -> logits [N, T, V]``. Like the seed's attention, no ``trg_mask`` masks nothing."""

    def __init__(self, core: Transformer, log: list, move_masks: bool):
        super().__init__()
        self.core, self.log, self.move_masks = core, log, move_masks

    def forward(self, trg, enc_src, src_mask, trg_mask):
        masks = _snapshot(src_mask), _snapshot(trg_mask)
        self.log.append(
            Call("decoder", _ids(trg), *masks, self.training, torch.is_grad_enabled())
        )
        core = self.core
        x = core.embed(trg, core.tgt_embed, core.tgt_pos)
        self_mask = _seed_mask(trg_mask, "trg_mask", x, self.move_masks)
        if self_mask is None:
            self_mask = torch.ones(1, 1, 1, 1, dtype=torch.bool, device=x.device)
        memory_mask = _seed_mask(src_mask, "src_mask", x, self.move_masks)
        logits = core.generator(core.decoder(x, enc_src, self_mask, memory_mask))
        if logits.dim() == 3 and logits.size(0) == 1:
            self.log[-1].argmax = _ids(logits[0].argmax(-1))
        return logits


def _ids(tokens) -> Any:
    if not isinstance(tokens, torch.Tensor):
        return type(tokens).__name__
    with torch._C.DisableTorchFunction():
        return tokens.detach().cpu().tolist()


class SeedStyleTransformer(nn.Module):
    """A tformer_ref Transformer behind the seed's interface: ``model.encoder(src,
    src_mask)`` and ``model.decoder(trg, enc_src, src_mask, trg_mask)`` -> logits [N, T,
    V].

    Masks use the seed's convention (an entry equal to 0 is masked; ``None`` masks
    nothing) and broadcast to the scores [N, heads, query_len, key_len]. ``log`` records
    every call. A check may build it with ``move_masks`` (masks moved to the model's
    device) or ``mask_method`` (a ``model.decoder.create_trg_mask``); the notebook's
    model has neither, like the seed's.

    Used in the exercise ch06_bughunt, on §6.7 'Greedy and beam decoding'
    (book/ch06_training).
    """

    def __init__(
        self,
        core: Transformer,
        move_masks: bool = False,
        mask_method: Callable | None = None,
    ):
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
_MODEL_CODES = frozenset({Encoder.forward.__code__, Decoder.forward.__code__})


def seed_style_model(device=None) -> SeedStyleTransformer:
    """The exercise's model: small, untrained, seeded, on ``device`` (default: the
    course's)."""
    return SeedStyleTransformer(_core()).to(device or get_device())


# ------------------------------------------------------------------ cases and reference

# (label, source ids, max_length): ordinary tokens only, no padding.
_PLAIN = (
    ("src=[5, 9, 4, 11]", (5, 9, 4, 11), 10),
    ("src=[7, 3, 12]", (7, 3, 12), 8),
    ("src=[14, 6, 8, 10, 13, 4]", (14, 6, 8, 10, 13, 4), 12),
    ("src=[9, 9, 15, 3, 6]", (9, 9, 15, 3, 6), 10),
)
# The same kind of sources, ending with PAD_IDX.
_PADDED = (
    ("src=[5, 9, 4, 11, PAD, PAD]", (5, 9, 4, 11, 0, 0), 10),
    ("src=[7, 3, 12, PAD]", (7, 3, 12, 0), 8),
    ("src=[14, 6, 8, PAD, PAD, PAD]", (14, 6, 8, 0, 0, 0), 12),
    ("src=[9, 9, 15, 3, 6, PAD, PAD]", (9, 9, 15, 3, 6, 0, 0), 10),
)

# What generate_text returns, as the exercise states it; failures enforcing it quote it.
CONTRACT = (
    'The exercise says: "generate_text(model, src, max_length, device) '
    "returns trg, a LongTensor [1, T]: SOS_IDX, then the greedy tokens, at "
    "most max_length tokens in all, ending with EOS_IDX when the model "
    'produces it."'
)


def _source(ids) -> torch.Tensor:
    return torch.tensor([list(ids)], dtype=torch.long, device=get_device())


def _reference(model: SeedStyleTransformer, src: torch.Tensor, max_length: int) -> list:
    """The reference's greedy search on the same weights, with the padding and causal
    masks: SOS, then at most ``max_length - 1`` tokens, stopping after EOS (the seed's
    count)."""
    return greedy_decode(model.core, src, max_length - 1, SOS_IDX, EOS_IDX, PAD_IDX)[
        0
    ].tolist()


def _mask_builder(fn: Callable) -> Callable | None:
    """The notebook's free ``create_trg_mask``: what a loop calling the method meant."""
    found = getattr(fn, "__globals__", {}).get("create_trg_mask")
    return found if callable(found) else None


def _model(move_masks: bool, fn: Callable | None = None) -> SeedStyleTransformer:
    method = _mask_builder(fn) if fn is not None else None
    return SeedStyleTransformer(_core(), move_masks, method).to(get_device())


def _decode(fn, model, src, max_length):
    """The learner's loop on one source: its output (or Raised), the model left in
    training mode before it, as after training."""
    model.log.clear()
    model.train()
    return run(fn, (model, src, max_length, get_device()))


def _tokens(title: str, label: str, out) -> list:
    __tracebackhide__ = True
    if type(out) is not torch.Tensor or out.dim() != 2 or out.size(0) != 1:
        got = (
            f"shape {list(out.shape)}"
            if isinstance(out, torch.Tensor)
            else type(out).__name__
        )
        fail(
            title,
            f"case {label}: expected a LongTensor [1, T] of token ids, got "
            f"{got}. " + CONTRACT,
            S_DECODE,
        )
    if out.dtype not in (torch.long, torch.int32):
        fail(
            title,
            f"case {label}: expected token ids (torch.long), got dtype "
            f"{out.dtype}. " + CONTRACT,
            S_DECODE,
        )
    return out[0].tolist()


# ----------------------------------------------------------- what the masks looked like


def _pattern(keep: torch.Tensor, q: int, k: int) -> torch.Tensor | None:
    """A recorded keep-mask as the one [q, k] pattern every batch row and head sees, or
    None when it does not broadcast to [1, H, q, k] or differs between heads."""
    if keep.dim() > 4:
        return None
    keep = keep.reshape((1,) * (4 - keep.dim()) + tuple(keep.shape))
    try:
        full = keep.expand(keep.size(0), keep.size(1), q, k)
    except RuntimeError:
        return None
    first = full[0, 0]
    return first if bool((full == first).all()) else None


def _rows(pattern: torch.Tensor) -> str:
    return str(pattern.int().tolist())


def _target_kind(call: Call) -> tuple[str, str]:
    """(kind, shown) of a decoder call's target mask: kind in causal, none, upper,
    inverted, shape, other."""
    t = len(call.tokens[0]) if isinstance(call.tokens, list) else 0
    mask = call.trg_mask
    if mask is None:
        return "none", "None"
    if isinstance(mask, str):
        return "other", f"a {mask}"
    pattern = _pattern(mask, t, t)
    if pattern is None:
        return "shape", f"shape {list(mask.shape)}"
    tril = torch.ones(t, t, dtype=torch.bool).tril()
    if torch.equal(pattern, tril):
        return "causal", _rows(pattern)
    if bool(pattern.all()):
        return "none", _rows(pattern)
    if torch.equal(pattern, tril.T):
        return "upper", _rows(pattern)
    if torch.equal(pattern, ~tril):
        return "inverted", _rows(pattern)
    return "other", _rows(pattern)


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
    if bool((keep == real).all()):
        return "right"
    if bool((keep == ~real).all()):
        return "inverted"
    if bool(keep.all()):
        return "none"
    return "other"


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def _shape(mask) -> str:
    return (
        "None"
        if mask is None
        else (f"a {mask}" if isinstance(mask, str) else f"shape {list(mask.shape)}")
    )


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
    for call in log:
        src_ids = next(
            (
                c.tokens[0]
                for c in log
                if c.part == "encoder" and isinstance(c.tokens, list)
            ),
            None,
        )
        if src_ids is None or call.src_mask is None:
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


def _target_length_problem(log: list) -> str | None:
    for call in _decoder_calls(log):
        kind, shown = _target_kind(call)
        if kind == "shape":
            t = len(call.tokens[0])
            tokens = "token" if t == 1 else "tokens"
            return (
                f"At the step that decoded {t} {tokens}, your target mask had {shown}."
            )
    return None


def _explain_raise(title: str, label: str, log: list, raised: Raised) -> None:
    """The loop raised: name the mistake the record shows, else say what and where."""
    __tracebackhide__ = True
    exc = raised.exc
    if isinstance(exc, AttributeError) and "create_trg_mask" in str(exc):
        NO_MASK_METHOD.fail(title, f"In case {label} your loop raised {raised!r}.")
    length = _target_length_problem(log)
    if length is not None:
        TARGET_MASK_LENGTH.fail(title, f"In case {label}: {length} Then {raised!r}.")
    source = _source_mask_problem(log)
    if source is not None:
        SOURCE_MASK_WRONG.fail(title, f"In case {label}: {source} Then {raised!r}.")
    fail(title, f"case {label}: your loop raised {raised!r}", S_DECODE)


def _fail_on_target_mask(title: str, label: str, log: list) -> None:
    """Fail naming the mistake when the record shows training mode or a target mask that
    is not causal; return otherwise."""
    __tracebackhide__ = True
    calls = _decoder_calls(log)
    training = sum(c.training for c in calls)
    if training:
        DECODES_IN_TRAINING_MODE.fail(
            title,
            f"In case {label}, {training} of your {len(calls)} decoder calls "
            "ran in training mode.",
        )
    for call in calls:
        t = len(call.tokens[0]) if isinstance(call.tokens, list) else 0
        if t < 2:
            continue
        kind, shown = _target_kind(call)
        observed = (
            f"In case {label}, at the step that decoded {t} tokens, your "
            f"target mask was {shown}."
        )
        if kind == "none":
            NO_TARGET_MASK.fail(title, observed)
        if kind in ("upper", "inverted"):
            INVERTED_TARGET_MASK.fail(title, observed)
        if kind == "other":
            TARGET_MASK_PATTERN.fail(title, observed)


def _explain_target_tokens(
    title: str, label: str, log: list, got: list, want: list
) -> None:
    __tracebackhide__ = True
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
    __tracebackhide__ = True
    title = "generate_text: the target mask"
    model = _model(move_masks=True)
    for label, ids, max_length in _PLAIN:
        src = _source(ids)
        want = _reference(model, src, max_length)
        out = _decode(generate_text, model, src, max_length)
        if isinstance(out, Raised):
            _explain_raise(title, label, model.log, out)
        got = _tokens(title, label, out)
        if got != want:
            _explain_target_tokens(title, label, model.log, got, want)
    passed(
        title,
        f"{len(_PLAIN)} sources decode exactly as the reference's greedy "
        "search: the loop calls the free create_trg_mask (or builds the "
        "causal mask itself)",
    )


# ---------------------------------------------------------- check 2: where tensors live

_MOVES = frozenset({"to", "cuda", "cpu"})
# Ops that may mix devices on a GPU without error (copying, indexing with CPU indices).
_MIXING_ALLOWED = frozenset(
    {
        "to",
        "copy_",
        "type_as",
        "__getitem__",
        "__setitem__",
        "index_put_",
        "new_ones",
        "new_zeros",
        "new_full",
        "new_empty",
        "new_tensor",
    }
)


def _same_device(a: torch.device, b: torch.device) -> bool:
    return a.type == b.type and (
        a.index is None or b.index is None or a.index == b.index
    )


def _device_of(value) -> torch.device | None:
    """The device a ``.to(...)`` argument names, or None (a dtype, a flag)."""
    if isinstance(value, torch.Tensor):
        return value.device
    if isinstance(value, bool):
        return None
    if isinstance(value, (torch.device, str, int)):
        try:
            return torch.device(value)
        except (RuntimeError, TypeError):
            return None
    return None


@dataclass(frozen=True)
class Where:
    """A line of the learner's code (the notebook's): its number, text and function, and
    how the tensor made there got its device."""

    line: int
    text: str
    function: str
    how: str = "made without a device"

    def __str__(self) -> str:
        return f"in {self.function}: `{self.text}`"


def _frame_where(frame, how: str = "made without a device") -> Where:
    import linecache

    text = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    return Where(frame.f_lineno, text, frame.f_code.co_name, how)


def _learner_frame():
    """The innermost frame of the learner's code (the notebook's), or None when the
    tensor is being made inside the model (the course's own tensors). A course function
    the learner calls directly, such as ``causal_mask(t)`` without a device, counts as
    the learner's line."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code in _MODEL_CODES:
            return None
        if not frame.f_code.co_filename.startswith(NOT_THE_LEARNERS):
            return frame
        frame = frame.f_back
    return None


@dataclass(frozen=True)
class Meeting:
    """The first op that mixed a tensor off the model's device with one on it."""

    op: str
    made: Where  # where the tensor off the device was made (or moved)
    during: Where | None  # the line of the learner's loop running then


class Placement(TorchFunctionMode):
    """Records, for every tensor a loop touches, whether its device was chosen.

    A tensor is *placed* when it is one of the model's, the source, made with
    ``device=`` (the model's), moved with ``.to(...)``/``.cuda()`` to the model's
    device, or computed from a placed tensor; it is *loose* when the learner's code made
    it without a device (``torch.ones(3, 3)``), moved it elsewhere (``.cpu()``), or
    computed it from loose tensors only. Tensors the course's code makes without a
    device are not followed. The first op that mixes a loose tensor (not a 0-dim scalar)
    with a placed one is kept in ``meeting``: on a GPU that op raises.
    """

    def __init__(self, model: nn.Module, src: torch.Tensor, loop_code):
        super().__init__()
        self.device = src.device
        self.loop_code = loop_code
        self.loose: dict[int, tuple[torch.Tensor, Where]] = {}
        self.placed: dict[int, torch.Tensor] = {}
        for t in [*model.parameters(), *model.buffers(), src]:
            self.placed[id(t)] = t
        self.meeting: Meeting | None = None

    def _loop_line(self) -> Where | None:
        frame = sys._getframe(1)
        while frame is not None and frame.f_code is not self.loop_code:
            frame = frame.f_back
        return _frame_where(frame) if frame is not None else None

    def _mark(self, out, origin) -> None:
        """origin: True = placed, None = not followed, a Where = loose (made there)."""
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            self.placed.pop(id(t), None)
            self.loose.pop(id(t), None)
            if origin is True:
                self.placed[id(t)] = t
            elif origin is not None:
                self.loose[id(t)] = (t, origin)

    def _moved(self, device: torch.device, how: str = ""):
        """Placed when ``device`` is the model's (and not named as "the CPU" whatever
        the model's device: ``how`` says so), else loose, where the learner moved it."""
        if not how and _same_device(device, self.device):
            return True
        frame = _learner_frame()
        return None if frame is None else _frame_where(frame, how or f"put on {device}")

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        flat = tree_flatten((args, kwargs))[0]
        inputs = [t for t in flat if isinstance(t, torch.Tensor)]
        placed = any(id(t) in self.placed for t in inputs)
        loose = [
            self.loose[id(t)][1] for t in inputs if id(t) in self.loose and t.dim() > 0
        ]
        if self.meeting is None and placed and loose and name not in _MIXING_ALLOWED:
            self.meeting = Meeting(name, loose[0], self._loop_line())
        out = func(*args, **kwargs)
        self._mark(out, self._origin(name, args, kwargs, inputs, placed))
        return out

    def _origin(self, name, args, kwargs, inputs, placed):
        if name in _MOVES:
            named = [*args[1:], kwargs.get("device")]
            by_name = any(isinstance(a, str) and a.strip() == "cpu" for a in named)
            if name == "cpu" or by_name:  # the CPU by name: wrong once on a GPU
                how = f"put on the CPU by name ({name})"
                return self._moved(torch.device("cpu"), how)
            target = (
                torch.device("cuda")
                if name == "cuda"
                else next((d for d in map(_device_of, named) if d is not None), None)
            )
            if target is not None:
                return self._moved(target)
        elif kwargs.get("device") is not None:
            named = kwargs["device"]
            by_name = isinstance(named, str) and named.strip() == "cpu"
            how = f"made on the CPU by name ({name})" if by_name else ""
            return self._moved(torch.device(named), how)
        elif isinstance(kwargs.get("out"), torch.Tensor):
            out = kwargs["out"]
            if id(out) in self.placed:
                return True
            return self.loose.get(id(out), (out, None))[1]
        if not inputs:  # made from nothing: a factory without a device
            frame = _learner_frame()
            return None if frame is None else _frame_where(frame)
        if placed:
            return True
        return next((self.loose[id(t)][1] for t in inputs if id(t) in self.loose), None)


def _describe_meeting(meeting: Meeting) -> str:
    made = meeting.made
    text = f"The tensor {made.how} {made} met the model's tensors (in {meeting.op})"
    if meeting.during is not None and meeting.during.text != made.text:
        text += f" during `{meeting.during.text}`"
    return text + ", without having been moved to the model's device."


@single_threaded
def check_mask_device(generate_text: Callable) -> None:
    """Bug 2. Every tensor the loop builds must be on the model's device (``device=``, a
    ``*_like``, or moved with ``.to``) before it meets the model's tensors; judged on
    the CPU too, from where each tensor was made. The model's decoder has the
    ``create_trg_mask`` method (the notebook's free function) and masks are not moved
    for the loop."""
    __tracebackhide__ = True
    title = "generate_text: the devices of the tensors it builds"
    model = _model(move_masks=False, fn=generate_text)
    for label, ids, max_length in _PLAIN[:2]:
        src = _source(ids)
        placement = Placement(model, src, getattr(generate_text, "__code__", None))
        model.log.clear()
        model.train()
        with placement:
            out = run(generate_text, (model, src, max_length, get_device()))
        if placement.meeting is not None:
            seen = _describe_meeting(placement.meeting)
            NO_DEVICE.fail(title, f"In case {label}: {seen}")
        if isinstance(out, Raised):
            fail(
                title,
                f"case {label}: your loop raised {out!r}; this check runs it "
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
    title: str, label: str, ids: list, log: list, got: list, want: list, unpadded: list
) -> None:
    __tracebackhide__ = True
    source = _source_mask_problem(log)
    if source is not None:
        SOURCE_MASK_WRONG.fail(title, f"In case {label}: {source}")
    encoders = [c for c in log if c.part == "encoder"]
    decoders = _decoder_calls(log)
    enc_none = any(_source_kind(c.src_mask, ids) == "none" for c in encoders)
    dec_none = [c for c in decoders if _source_kind(c.src_mask, ids) == "none"]
    if enc_none or dec_none:
        parts = []
        if enc_none:
            shown = _shape(
                next(
                    c.src_mask
                    for c in encoders
                    if _source_kind(c.src_mask, ids) == "none"
                )
            )
            parts.append(f"your model.encoder call got src_mask={shown}")
        if dec_none:
            shown = _shape(dec_none[0].src_mask)
            parts.append(
                f"{len(dec_none)} of your {len(decoders)} model.decoder calls "
                f"got src_mask={shown}"
            )
        pads = sum(i == PAD_IDX for i in ids)
        SOURCE_PADDING_ATTENDED.fail(
            title,
            f"In case {label} ({pads} PAD_IDX at the end) your loop returned "
            f"{got}; with the padding masked it decodes to {want} (and without "
            f"the padding, to {unpadded}). {_sentence(' and '.join(parts))}, so "
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
    __tracebackhide__ = True
    title = "generate_text: padding in the source"
    model = _model(move_masks=True, fn=generate_text)
    for label, ids, max_length in _PADDED:
        src = _source(ids)
        want = _reference(model, src, max_length)
        out = _decode(generate_text, model, src, max_length)
        if isinstance(out, Raised):
            _explain_raise(title, label, model.log, out)
        got = _tokens(title, label, out)
        if got != want:
            log = list(model.log)
            unpadded = _reference(
                model, _source([i for i in ids if i != PAD_IDX]), max_length
            )
            _explain_padding(title, label, ids, log, got, want, unpadded)
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
    __tracebackhide__ = True
    title = "generate_text"
    model = _model(move_masks=True, fn=generate_text)
    src = _source(list(_PLAIN[0][1]))
    out = _decode(generate_text, model, src, 8)
    if isinstance(out, Raised):
        fail(title, f"your loop raised {out!r}", S_DECODE)
    forbidden = ["tformer_ref.greedy_decode", "tformer_ref.beam_search"]
    check_not_delegated(
        title, lambda: generate_text(model, src, 8, get_device()), forbidden=forbidden
    )


seal(__name__)
