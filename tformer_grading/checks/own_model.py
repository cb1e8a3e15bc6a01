"""Checks of "Train your own Transformer" (the assignment ``ch06_own_model``).

The learner pastes their own pieces from exercises 1–5 and assembles them into an
encoder–decoder. Two kinds of check:

* one per piece (:func:`check_own_attention`, :func:`check_own_masks`,
  :func:`check_own_blocks`, :func:`check_own_positions`). It passes only when every
  object of the piece is the learner's own, not taken from ``tformer_ref`` or
  ``tformer_grading`` (judged by where the object comes from, never by its code), and
  passes its chapter's checks again;
* :func:`check_own_model_learns`: the assembled model, trained with a fixed recipe on
  a small version of the date task of §6.1, must reach :data:`THRESHOLD` exact match
  on held-out dates. When it does not, the chapter checks run again on each of the
  learner's own pieces, probes run on the assembled model (a causal decoder, padding
  ignored, positions on both sides, the target shifted), and the failure names what
  they found.

Shape letters: B batch, Ss source length, St target length, D = d_model, V vocabulary.
"""

from __future__ import annotations

import contextlib
import functools
import io
import math
import re
import time
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from tformer_ref.attention import MultiHeadAttention as _RefAttention
from tformer_ref.attention import scaled_dot_product_attention as _ref_attention
from tformer_ref.blocks import DecoderBlock as _RefDecoderBlock
from tformer_ref.data import BOS, EOS, PAD, CharVocab, Collate, PairDataset, make_pairs
from tformer_ref.decoding import strip
from tformer_ref.device import get_device
from tformer_ref.model import xavier_init_
from tformer_ref.training import sequence_loss

from ..guard.integrity import seal
from . import ch01, ch03, ch04, ch05, ch06
from .cases import randn
from .diagnosis import (
    UNEXPLAINED,
    CheckFailure,
    Raised,
    Section,
    fail,
    passed,
    quiet,
    run,
    single_thread,
    verify_integrity,
)
from .measure.softmax import normalised_over

#: The exercise these checks grade (the pitfall index links its rows there).
ASSIGNMENT = "ch06_own_model"

# The training recipe, the same for every learner. Measured on CPU with the solution's
# pieces under five initialisation seeds: THRESHOLD first passed between step 240 and
# 420 of 600, 95-99 % exact match at step 420, 99-100 % at the end; about 25 ms of one
# core per step, so the training takes about 15 s on an idle machine.
D_MODEL, N_HEADS, D_FF, N_LAYERS = 32, 4, 64, 1
N_TRAIN, N_TEST, BATCH = 4000, 200, 64
STEPS, WARMUP, PEAK_LR = 600, 60, 0.01
THRESHOLD = 0.90
DECODE_STEPS = 18  # the longest target, "30 September 2049", is 17 characters + EOS
SECONDS_LIMIT = 45.0  # training stops there (nbgrader stops a cell at 60 s)
SEED = 0
TITLE = "your Transformer learns"  # the model check's failures and success line
NOT_YOURS = ("tformer_ref", "tformer_grading")

S_TASK, S_SHIFT, S_LOSS = ch06.S_TASK, ch06.S_SHIFT, ch06.S_LOSS
S_DECODER, S_ORDER = ch05.S_DECODER, ch05.S_ORDER
S_CAUSAL, S_PADDING, S_PROBES = ch03.S_CAUSAL, ch03.S_PADDING, ch03.S_PROBES

BORROWED = (
    "this piece is tformer_ref's, not yours: no points for it, and the model "
    "check below still counts"
)


# ------------------------------------------------------------ the reference stand-ins


def reference_embed(
    tokens: torch.Tensor, table: nn.Embedding, pe: torch.Tensor
) -> torch.Tensor:
    """Exercise 5's ``embed`` done right, for a learner who takes the reference's:
    tokens [B, S] -> table(tokens)·√D + pe[:S], [B, S, D].

    Examples::

        >>> table, pe = nn.Embedding(10, 4), torch.zeros(8, 4)
        >>> reference_embed(torch.tensor([[1, 2, 3]]), table, pe).shape
        torch.Size([1, 3, 4])
    """
    return table(tokens) * math.sqrt(table.embedding_dim) + pe[: tokens.size(1)]


class ReferenceDecoderBlock(_RefDecoderBlock):
    """``tformer_ref.blocks.DecoderBlock`` called as in exercise 5:
    ``forward(x [B, St, D], memory [B, Ss, D], src_mask=None) -> [B, St, D]``
    (Post-LN, the causal mask built inside).

    Examples::

        >>> block = ReferenceDecoderBlock(8, 2, 16, dropout=0.0).eval()
        >>> block(torch.randn(2, 3, 8), torch.randn(2, 5, 8)).shape
        torch.Size([2, 3, 8])
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1):
        super().__init__(d_model, n_heads, d_ff, dropout)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return super().forward(x, memory, None, src_mask)


def _right_causal_mask(size: int) -> torch.Tensor:
    """[1, 1, S, S] on the course's device. Written here, not taken from tformer_ref:
    the hidden "by hand" checks would count a call into tformer_ref against the
    block."""
    ones = torch.ones(size, size, dtype=torch.bool, device=get_device())
    return ones.tril()[None, None]


# ------------------------------------------------------------ whose piece is it?


def borrowed_from(obj) -> str | None:
    """Where ``obj`` comes from when it is the course's code, None when it is the
    learner's. Judged by origin only: a class is the course's when any class it
    inherits from is, a function when the course's module defined it.

    Examples::

        >>> from tformer_ref.heads import split_heads
        >>> borrowed_from(split_heads)
        'tformer_ref.heads.split_heads'
        >>> notebook = {"__name__": "__main__"}  # the learner's globals
        >>> exec("def split_heads(x, n_heads): return x", notebook)
        >>> borrowed_from(notebook["split_heads"]) is None
        True
    """
    try:
        while isinstance(obj, functools.partial):
            obj = obj.func
        obj = getattr(obj, "__func__", obj)
        owners = obj.__mro__ if isinstance(obj, type) else (obj,)
        for owner in owners:
            module = getattr(owner, "__module__", None) or ""
            if module.split(".")[0] in NOT_YOURS:
                name = getattr(owner, "__qualname__", type(owner).__name__)
                return f"{module}.{name}"
    except Exception:  # noqa: BLE001 - a hostile object's attributes: not the course's
        return None
    return None


def _fail_if_borrowed(title: str, named: dict) -> None:
    __tracebackhide__ = True
    found = [
        f"{name} is {where}"
        for name, obj in named.items()
        if (where := borrowed_from(obj)) is not None
    ]
    if found:
        fail(title, f"{BORROWED} ({'; '.join(found)}).")


@contextlib.contextmanager
def _silent():
    """The chapter checks print their own success lines: keep them out of this cell."""
    with contextlib.redirect_stdout(io.StringIO()):
        yield


def _globals_of(cls) -> dict | None:
    """The namespace a learner's class reads its globals from (the notebook's)."""
    for value in vars(cls).values():
        namespace = getattr(value, "__globals__", None)
        if isinstance(namespace, dict):
            return namespace
    return None


@contextlib.contextmanager
def _with_names(classes: Sequence[type], **names):
    """Run with ``names`` in the learner's namespace in place of theirs, restored after.

    The blocks are judged with the reference's attention and causal mask, so that a
    mistake in those counts against their own piece, not against the blocks."""
    namespaces = {}
    for cls in classes:
        ns = _globals_of(cls)
        if ns is not None:
            namespaces[id(ns)] = ns
    saved = []
    try:
        for ns in namespaces.values():
            for name, value in names.items():
                if name in ns:
                    saved.append((ns, name, ns[name]))
                    ns[name] = value
        yield
    finally:
        for ns, name, value in reversed(saved):
            ns[name] = value


# ------------------------------------------------------------ the four pieces


def _raised(outputs) -> str | None:
    for out in outputs:
        if isinstance(out, Raised):
            return f"forward(query, key, value, mask) raised {out!r}"
    return None


def _ignores_causal_mask(module, x) -> str | None:
    changed = x.clone()
    changed[:, -1] += 1.0
    keep = _right_causal_mask(x.size(1))
    with torch.no_grad():
        a = run(module, (x, x, x, keep))
        b = run(module, (changed, changed, changed, keep))
    if _raised((a, b)):
        return _raised((a, b))
    if not torch.allclose(a[:, :-1], b[:, :-1], atol=1e-5):
        return (
            "with a causal mask, changing the last token changed the outputs of "
            "the earlier ones: the mask is not applied"
        )
    return None


def _ignores_padding_mask(module, x) -> str | None:
    keep = torch.ones(x.size(0), 1, 1, x.size(1), dtype=torch.bool, device=x.device)
    keep[..., -2:] = False
    noisy = x.clone()
    noisy[:, -2:] += 3.0
    with torch.no_grad():
        a = run(module, (x[:, :3], x, x, keep))
        b = run(module, (x[:, :3], noisy, noisy, keep))
    if _raised((a, b)):
        return _raised((a, b))
    if not torch.allclose(a, b, atol=1e-5):
        return (
            "with a padding mask, changing the masked keys and values changed the "
            "output: the mask is not applied"
        )
    return None


def _mha_mask_problem(cls) -> str | None:
    """None when ``cls(16, 4, dropout=0.0)`` obeys a causal and a padding mask, else
    what it did."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        try:
            module = cls(16, 4, dropout=0.0)
        except Exception as exc:  # noqa: BLE001 - the learner's code may raise anything
            return f"MultiHeadAttention(16, 4, dropout=0.0) raised {Raised(exc)!r}"
    module = module.to(get_device()).eval()
    x = randn(2, 5, 16, seed=SEED)
    return _ignores_causal_mask(module, x) or _ignores_padding_mask(module, x)


def _attention_checks(split_heads, merge_heads, masked_attention, mha_cls) -> None:
    __tracebackhide__ = True
    ch01.check_split_heads(split_heads)
    ch01.check_by_hand("split_heads", split_heads, (randn(2, 3, 8, seed=1), 2))
    ch01.check_merge_heads(merge_heads)
    ch01.check_by_hand("merge_heads", merge_heads, (randn(2, 2, 3, 4, seed=2),))
    ch03.check_masked_attention(masked_attention)
    ch03.check_masked_attention_by_hand(masked_attention)
    ch01.check_multi_head_attention(mha_cls)
    ch01.check_multi_head_attention_behaviour(mha_cls)
    ch01.check_multi_head_attention_by_hand(mha_cls)
    problem = _mha_mask_problem(mha_cls)
    if problem is not None:
        fail(
            "MultiHeadAttention with a mask",
            f"{problem}. Pass the mask on to your masked_attention.",
            S_PROBES,
        )


def _mask_checks(causal_mask, padding_mask) -> None:
    __tracebackhide__ = True
    ch03.check_causal_mask(causal_mask)
    ch03.check_padding_mask(padding_mask)
    ch03.check_mask_probes(_ref_attention, causal_mask, padding_mask)


def _block_checks(feed_forward, encoder_block, decoder_block) -> None:
    __tracebackhide__ = True
    learner = (feed_forward, encoder_block, decoder_block)
    with _with_names(
        learner, MultiHeadAttention=_RefAttention, causal_mask=_right_causal_mask
    ):
        ch04.check_feed_forward(feed_forward)
        ch04.check_encoder_block(encoder_block, norm_first=False)
        ch04.check_dropout_placement(encoder_block, layouts=("Post-LN",))
        ch04.check_block_behaviour(encoder_block)
        ch04.check_block_by_hand(encoder_block)
        ch05.check_decoder_block(decoder_block)
        ch05.check_decoder_behaviour(decoder_block)
        ch05.check_decoder_by_hand(decoder_block)


def _position_checks(sinusoidal_encoding, embed) -> None:
    __tracebackhide__ = True
    ch05.check_sinusoidal_encoding(sinusoidal_encoding)
    ch05.check_by_hand("sinusoidal_encoding", sinusoidal_encoding, (12, 8))
    ch05.check_embed(embed)


# (title, the names of its objects, its chapter checks, the chapters they come from)
PIECES = (
    (
        "own_attention",
        ("split_heads", "merge_heads", "masked_attention", "MultiHeadAttention"),
        _attention_checks,
        "chapters 1 and 3",
    ),
    ("own_masks", ("causal_mask", "padding_mask"), _mask_checks, "chapter 3"),
    (
        "own_blocks",
        ("FeedForward", "EncoderBlock", "DecoderBlock"),
        _block_checks,
        "chapters 4 and 5",
    ),
    ("own_positions", ("sinusoidal_encoding", "embed"), _position_checks, "chapter 5"),
)


def _check_piece(index: int, objects: tuple) -> None:
    __tracebackhide__ = True
    verify_integrity()
    title, names, checks, chapters = PIECES[index]
    _fail_if_borrowed(title, dict(zip(names, objects)))
    try:
        with _silent(), single_thread():
            checks(*objects)
    except CheckFailure as exc:
        fail(title, f"your piece fails a check of {chapters} again:\n{exc}")
    passed(title, f"{', '.join(names)} are yours and pass the checks of {chapters}")


def check_own_attention(split_heads, merge_heads, masked_attention, mha_cls) -> None:
    """Exercise 1's ``split_heads``, ``merge_heads`` and ``MultiHeadAttention`` (now
    with a ``dropout`` argument and using its ``mask``), exercise 3's
    ``masked_attention``: the learner's own, passing their chapters' checks, the module
    obeying its mask."""
    __tracebackhide__ = True
    _check_piece(0, (split_heads, merge_heads, masked_attention, mha_cls))


def check_own_masks(causal_mask, padding_mask) -> None:
    """Exercise 3's ``causal_mask`` and ``padding_mask``: the learner's own, passing
    chapter 3's checks (its probes run with the reference's attention)."""
    __tracebackhide__ = True
    _check_piece(1, (causal_mask, padding_mask))


def check_own_blocks(feed_forward, encoder_block, decoder_block) -> None:
    """Exercise 4's ``FeedForward`` and ``EncoderBlock`` (Post-LN), exercise 5's
    ``DecoderBlock``: the learner's own, passing their chapters' checks, run with the
    reference's attention and causal mask in place of the learner's."""
    __tracebackhide__ = True
    _check_piece(2, (feed_forward, encoder_block, decoder_block))


def check_own_positions(sinusoidal_encoding, embed) -> None:
    """Exercise 5's ``sinusoidal_encoding`` and ``embed``: the learner's own, passing
    chapter 5's checks."""
    __tracebackhide__ = True
    _check_piece(3, (sinusoidal_encoding, embed))


# ------------------------------------------------------------ data, model, training


def _data():
    """(vocabulary, training items, held-out src [N, Ss], held-out tgt [N, St])."""
    vocab = CharVocab.for_dates()
    train_pairs, test_pairs = make_pairs(N_TRAIN, N_TEST, seed=SEED)
    src, tgt = Collate()(PairDataset(test_pairs, vocab).items)
    return vocab, PairDataset(train_pairs, vocab), src, tgt


def _build(
    title: str, model_cls, vocab_size: int, seed: int = SEED, layers: int = N_LAYERS
) -> nn.Module:
    """``model_cls(V, D, H, F, layers)`` under ``seed``, with the course's Xavier
    initialisation (§4.6), on the course's device."""
    __tracebackhide__ = True
    name = getattr(model_cls, "__name__", "model")
    call = f"{name}({vocab_size}, {D_MODEL}, {N_HEADS}, {D_FF}, {layers})"
    with torch.random.fork_rng(devices=[]), quiet():
        torch.manual_seed(seed)
        try:
            model = model_cls(vocab_size, D_MODEL, N_HEADS, D_FF, layers)
            if not isinstance(model, nn.Module):
                got = type(model).__name__
                fail(title, f"{call} must build an nn.Module, got {got}", S_DECODER)
            xavier_init_(model)
        except CheckFailure:
            raise
        except Exception as exc:  # noqa: BLE001 - the learner's code may raise anything
            fail(title, f"{call} raised {Raised(exc)!r}", S_DECODER)
    if not any(p.requires_grad for p in model.parameters()):
        fail(
            title,
            f"{call} has no trainable parameters: keep the blocks in an "
            "nn.ModuleList and the layers as attributes of the module.",
            S_DECODER,
        )
    return model.to(get_device())


def _logits(model, src, tgt_in):
    """model(src, tgt_in) in eval mode without gradients (a Raised on error)."""
    model.eval()
    with torch.no_grad():
        return run(model, (src, tgt_in))


def _check_forward(title: str, model, src, tgt_in, vocab_size: int) -> None:
    """The interface: model(src [B, Ss], tgt_in [B, St]) -> float logits [B, St, V]."""
    __tracebackhide__ = True
    out = _logits(model, src, tgt_in)
    call = f"model(src {list(src.shape)}, tgt_in {list(tgt_in.shape)})"
    want = [src.size(0), tgt_in.size(1), vocab_size]
    if isinstance(out, Raised):
        fail(title, f"{call} raised {out!r}", S_DECODER)
    if not isinstance(out, torch.Tensor) or list(out.shape) != want:
        got = list(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        fail(
            title,
            f"{call} must return logits of shape {want} (B, St, V), got {got}",
            S_DECODER,
        )
    if not out.is_floating_point():
        fail(
            title,
            f"the logits must be a float tensor, got dtype {out.dtype}",
            S_DECODER,
        )


def greedy(model, src: torch.Tensor, steps: int = DECODE_STEPS) -> torch.Tensor:
    """src [B, Ss] -> [B, T]: BOS, then the argmax of ``model(src, prefix)[:, -1]`` at
    each step (the learner's model has no separate encode and decode). A finished row
    gets PAD."""
    model.eval()
    out = torch.full((src.size(0), 1), BOS, dtype=torch.long, device=src.device)
    finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    with torch.no_grad():
        for _ in range(steps):
            nxt = model(src, out)[:, -1].argmax(dim=-1).masked_fill(finished, PAD)
            out = torch.cat([out, nxt[:, None]], dim=1)
            finished |= nxt == EOS
            if finished.all():
                break
    return out


def exact_match(model, src: torch.Tensor, tgt: torch.Tensor) -> float:
    """Greedy exact-match accuracy of ``model`` on src [N, Ss], tgt [N, St]."""
    pred = greedy(model, src.to(get_device())).cpu()
    return sum(strip(p) == strip(t) for p, t in zip(pred, tgt)) / max(1, len(pred))


def _schedule(step: int, steps: int) -> float:
    """Linear warm-up to PEAK_LR over WARMUP steps, then linear decay to 0 at ``steps``
    (a short run cannot wait for Noam's slow decay: §6.4)."""
    warmup = min(WARMUP, steps // 2)
    return min((step + 1) / warmup, max(0.0, (steps - step) / (steps - warmup)))


def _backward(batch_loss, model, src, tgt):
    """One loss and its backward: the loss as a float, or a sentence saying why the
    learner's loss cannot be trained on."""
    loss = batch_loss(model, src, tgt)
    if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
        is_tensor = isinstance(loss, torch.Tensor)
        got = list(loss.shape) if is_tensor else type(loss).__name__
        return f"batch_loss(model, src, tgt) must return a scalar tensor, got {got}"
    if not loss.requires_grad:
        return (
            "batch_loss returned a loss without a gradient (detached from the model?)"
        )
    loss.backward()
    return loss.item()


def train(
    model: nn.Module,
    batch_loss: Callable,
    items: PairDataset,
    steps: int = STEPS,
    evaluate: Callable[[nn.Module], float] | None = None,
    eval_every: int = 50,
) -> dict:
    """The fixed recipe: Adam (0.9, 0.98), warm-up then linear decay, gradients clipped
    at 1, batches of BATCH in a seeded order, ``steps`` updates of
    ``batch_loss(model, src, tgt)``.

    Returns a dict: ``steps`` done, the last ``loss``, ``seconds`` of training
    (evaluations excluded), ``error`` (the learner's exception as a Raised, or a
    sentence), ``curve`` [(step, accuracy)] when ``evaluate`` is given, and
    ``out_of_time`` when training stopped at SECONDS_LIMIT.
    """
    device = get_device()
    # foreach: one fused update for all the small tensors, not a loop over them.
    optimizer = torch.optim.Adam(
        model.parameters(), lr=PEAK_LR, betas=(0.9, 0.98), eps=1e-9, foreach=True
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, functools.partial(_schedule, steps=steps)
    )
    order = torch.Generator().manual_seed(SEED)
    collate = Collate()
    result = {
        "steps": 0,
        "loss": float("nan"),
        "seconds": 0.0,
        "error": None,
        "curve": [],
        "out_of_time": False,
    }
    start, evaluating = time.perf_counter(), 0.0
    while result["steps"] < steps:
        perm = torch.randperm(len(items), generator=order).tolist()
        for i in range(0, len(perm) - BATCH + 1, BATCH):
            src, tgt = collate([items[j] for j in perm[i : i + BATCH]])
            model.train()
            optimizer.zero_grad(set_to_none=True)
            loss = run(_backward, (batch_loss, model, src.to(device), tgt.to(device)))
            if isinstance(loss, (Raised, str)):
                result["error"] = loss
                return result
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
            optimizer.step()
            scheduler.step()
            result["steps"] += 1
            result["loss"] = loss
            result["seconds"] = time.perf_counter() - start - evaluating
            if not math.isfinite(loss):
                result["error"] = f"the loss became {loss} at step {result['steps']}"
                return result
            if result["seconds"] > SECONDS_LIMIT:  # a busy machine or a slow model
                result["out_of_time"] = True
                return result
            if evaluate is not None and result["steps"] % eval_every == 0:
                tick = time.perf_counter()
                result["curve"].append((result["steps"], evaluate(model)))
                evaluating += time.perf_counter() - tick
            if result["steps"] >= steps:
                break
    return result


# ------------------------------------------------------------ probes of the assembly
# Each probe runs the untrained model (seeded, Xavier-initialised) and returns None or
# (what it saw, the section to read).


def _probe_batch(device) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed src [2, 8] (row 0 padded) and tgt [2, 7] (BOS ... EOS, row 1 padded)."""
    src = torch.tensor(
        [[8, 9, 10, 11, 12, 13, EOS, PAD], [14, 9, 15, 16, 17, 18, 19, EOS]]
    )
    tgt = torch.tensor(
        [[BOS, 20, 21, 22, 23, 24, EOS], [BOS, 25, 26, 27, EOS, PAD, PAD]]
    )
    return src.to(device), tgt.to(device)


def _same(a, b) -> bool:
    return (
        isinstance(a, torch.Tensor)
        and isinstance(b, torch.Tensor)
        and a.shape == b.shape
        and torch.allclose(a, b, atol=1e-4, rtol=1e-4)
    )


def _probe_causal(model, src, tgt):
    tgt_in = tgt[:, :-1]
    changed = tgt_in.clone()
    changed[:, -1] = 30
    a, b = _logits(model, src, tgt_in), _logits(model, src, changed)
    if isinstance(a, torch.Tensor) and not _same(a[:, :-1], b[:, :-1]):
        return (
            (
                "the decoder sees the future: changing the last input token of the "
                "target changed the logits at earlier positions, so in training each "
                "position can read the token it must predict, and greedy decoding, "
                "which has no future to read, fails"
            ),
            S_CAUSAL,
        )
    return None


def _probe_source_padding(model, src, tgt):
    padded = torch.cat([src, torch.full_like(src[:, :3], PAD)], dim=1)
    a, b = _logits(model, src, tgt[:, :-1]), _logits(model, padded, tgt[:, :-1])
    if not _same(a, b):
        return (
            (
                "padding the source changes the logits: the source padding mask does "
                "not reach the encoder's self-attention or the decoder's "
                "cross-attention"
            ),
            S_PADDING,
        )
    return None


def _probe_source_read(model, src, tgt):
    a, b = _logits(model, src, tgt[:, :-1]), _logits(model, src.flip(0), tgt[:, :-1])
    if _same(a, b):
        return (
            (
                "the logits do not depend on the source: the decoder's cross-attention "
                "does not read the encoder's output"
            ),
            S_DECODER,
        )
    return None


def _probe_source_order(model, src, tgt):
    real = src[1:2]  # the row without padding
    reordered = torch.cat([real[:, :-1].flip(1), real[:, -1:]], dim=1)
    a = _logits(model, real, tgt[1:2, :-1])
    b = _logits(model, reordered, tgt[1:2, :-1])
    if _same(a, b):
        return (
            (
                "reversing the source characters leaves the logits unchanged: the "
                "encoder sees no positions (are the positional encodings added to the "
                "source embeddings?)"
            ),
            S_ORDER,
        )
    return None


def _probe_target_order(model, src, tgt):
    repeated = torch.full((2, 5), 20, dtype=torch.long, device=src.device)
    out = _logits(model, src, repeated)
    if isinstance(out, torch.Tensor) and _same(out[:, :1].expand_as(out), out):
        return (
            (
                "a target of one repeated token gives the same logits at every "
                "position: the decoder sees no positions (are the positional encodings "
                "added to the target embeddings?)"
            ),
            S_ORDER,
        )
    return None


def _probe_registered(model, src, tgt):
    # The same class built under another seed and given this model's state_dict must
    # compute the same logits: weights outside the state_dict keep their own draw.
    a = _logits(model, src, tgt[:, :-1])
    if not isinstance(a, torch.Tensor):
        return None
    other = _build(TITLE, type(model), a.size(-1), seed=SEED + 1)
    with quiet():
        other.load_state_dict(model.state_dict())
    if not _same(a, _logits(other, src, tgt[:, :-1])):
        return (
            (
                "two models built under different seeds compute different logits after "
                "load_state_dict gave them the same weights: some weights are outside "
                "the state_dict (not registered), so the optimizer never trains them "
                "(keep blocks in an nn.ModuleList, not a Python list)"
            ),
            S_DECODER,
        )
    return None


def _probe_logits(model, src, tgt):
    # A softmax inside the model: cross_entropy then takes the log-softmax of
    # probabilities, whose range [0, 1] leaves every class nearly equally likely.
    out = _logits(model, src, tgt[:, :-1])
    if not isinstance(out, torch.Tensor) or not out.is_floating_point():
        return None
    if normalised_over(out, ((-1,),)) == (-1,):
        return (
            (
                "the model returns probabilities, not logits: at every position its "
                "outputs are non-negative and sum to 1 over the vocabulary, and "
                "cross_entropy takes the log-softmax of what it is given, so the "
                "softmax is applied twice (return the last Linear's output)"
            ),
            S_LOSS,
        )
    return None


def _probe_every_block_counts(model, src, tgt):
    # Built with two layers, each of the learner's own blocks must reach the logits:
    # a block whose every parameter gets an exactly zero gradient, beside a twin of
    # its class that gets one, is computed and then never used (a loop that feeds
    # each block the embeddings instead of the previous block's output).
    logits = _logits(model, src, tgt[:, :-1])
    if not isinstance(logits, torch.Tensor):
        return None
    deep = _build(TITLE, type(model), logits.size(-1), layers=2).eval()
    out = run(deep, (src, tgt[:, :-1]))
    if not isinstance(out, torch.Tensor) or not out.requires_grad:
        return None
    out.float().sum().backward()
    counts: dict[type, list[tuple[str, bool]]] = {}
    for name, module in deep.named_modules():
        params = list(module.parameters())
        if not name or not params or type(module).__module__.startswith("torch."):
            continue
        used = any(p.grad is not None and p.grad.abs().sum() > 0 for p in params)
        counts.setdefault(type(module), []).append((name, used))
    for cls, seen in counts.items():
        idle = [name for name, used in seen if not used]
        if idle and len(idle) < len(seen):
            return (
                (
                    f"built with 2 layers, your {cls.__name__} {idle[0]} has no effect "
                    "on the logits (every one of its parameters gets a zero gradient) "
                    f"while another {cls.__name__} does: each block must read the "
                    "previous block's output, not the embeddings"
                ),
                S_DECODER,
            )
    return None


MODEL_PROBES = (
    _probe_registered,
    _probe_every_block_counts,
    _probe_logits,
    _probe_causal,
    _probe_source_padding,
    _probe_source_read,
    _probe_source_order,
    _probe_target_order,
)


class _Spy(nn.Module):
    """A model that records the decoder input it is given and returns fixed logits."""

    def __init__(self, vocab_size: int):
        super().__init__()
        self.vocab_size, self.seen = vocab_size, []
        self.bias = nn.Parameter(torch.zeros(()))

    def forward(self, src, tgt_in):
        self.seen.append(tgt_in.detach().clone())
        g = torch.Generator().manual_seed(SEED)
        logits = torch.randn(*tgt_in.shape, self.vocab_size, generator=g)
        return logits.to(tgt_in.device) + self.bias


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-4 * max(1.0, abs(b))


def _shift_problem(fed, tgt):
    """What is wrong with the decoder input ``fed`` that batch_loss gave the model."""
    if _same_ids(fed, tgt):
        return (
            (
                "batch_loss gives the model the whole target, not the target without "
                "its last token: the target is not shifted, so each position learns to "
                "copy its own input token instead of predicting the next one"
            ),
            S_SHIFT,
        )
    if _same_ids(fed, tgt[:, 1:]):
        return (
            (
                "batch_loss gives the model the labels (the target without its first "
                "token) as its input: the decoder reads what it must predict"
            ),
            S_SHIFT,
        )
    if not _same_ids(fed, tgt[:, :-1]):
        return (
            (
                f"batch_loss gives the model a decoder input of shape "
                f"{list(fed.shape)} that is not the target without its last token "
                f"({list(tgt[:, :-1].shape)})"
            ),
            S_SHIFT,
        )
    return None


def _loss_problem(got: float, logits, tgt):
    """What is wrong with the loss ``got`` batch_loss computed from ``logits``."""
    flat, vocab_size = logits.reshape(-1, logits.size(-1)), logits.size(-1)
    if _close(got, sequence_loss(logits, tgt[:, 1:], PAD).item()):
        return None
    if _close(got, F.cross_entropy(flat, tgt[:, 1:].reshape(-1)).item()):
        return (
            (
                "batch_loss counts the padding: the mean runs over the PAD labels too "
                "(ignore_index=PAD leaves them out)"
            ),
            S_LOSS,
        )
    own_input = F.cross_entropy(flat, tgt[:, :-1].reshape(-1), ignore_index=PAD).item()
    if _close(got, own_input):
        return (
            (
                "batch_loss compares each position with its own input token, not with "
                "the next one: the labels are not shifted"
            ),
            S_SHIFT,
        )
    want = sequence_loss(logits, tgt[:, 1:], PAD).item()
    return (
        (
            f"batch_loss gives {got:.4f} where the mean cross-entropy over the real "
            f"label tokens (of {vocab_size} classes) is {want:.4f}"
        ),
        S_LOSS,
    )


def _probe_loss(batch_loss, vocab_size, src, tgt):
    """Is batch_loss the teacher-forced loss over the real tokens? (None: yes.)"""
    spy = _Spy(vocab_size).to(src.device)
    loss = run(batch_loss, (spy, src, tgt))
    if isinstance(loss, Raised) or not spy.seen:
        return None  # training already reported it
    shift = _shift_problem(spy.seen[-1], tgt)
    if shift is not None:
        return shift
    if not (isinstance(loss, torch.Tensor) and loss.numel() == 1):
        return None
    return _loss_problem(float(loss.detach()), spy(src, tgt[:, :-1]).detach(), tgt)


def _fail_with_findings(title: str, task: str, findings: list) -> None:
    """Fail listing every finding; the most likely one's section is the failure's own,
    so JupyterLab shows its link (its "Read" line moves to the end, said once)."""
    __tracebackhide__ = True
    lead = next((section for _, section in findings if section is not None), None)
    texts = [text for text, _ in findings]
    if lead is not None:
        first = next(i for i, (_, section) in enumerate(findings) if section == lead)
        said = re.compile(rf"\n\s*Read {re.escape(str(lead))}\.")
        texts[first] = said.sub("", texts[first], count=1)
    listed = "\n".join(texts)
    fail(title, f"{task}. What the probes found, most likely first:\n{listed}", lead)


def _same_ids(a, b) -> bool:
    return isinstance(a, torch.Tensor) and a.shape == b.shape and torch.equal(a, b)


def _piece_findings(pieces: Sequence[tuple]) -> list[tuple[str, Section | None]]:
    """Each of the learner's own pieces through its chapter checks again: what fails,
    and the section that explains it."""
    found = []
    for (title, names, checks, chapters), objects in zip(PIECES, pieces):
        if any(borrowed_from(obj) for obj in objects):
            continue  # the reference's: right by construction
        try:
            with _silent(), single_thread():
                checks(*objects)
        except CheckFailure as exc:
            detail = str(exc).replace("\n", "\n    ")
            text = (
                f"- your {title[4:]} piece ({', '.join(names)}) fails a check "
                f"of {chapters}:\n    {detail}"
            )
            found.append((text, exc.section))
    return found


def _assembly_findings(
    model, batch_loss, vocab_size
) -> list[tuple[str, Section | None]]:
    src, tgt = _probe_batch(get_device())
    found = []
    for probe in MODEL_PROBES:
        seen = probe(model, src, tgt)
        if seen is not None:
            found.append(
                (f"- the assembled model: {seen[0]}.\n    Read {seen[1]}.", seen[1])
            )
    seen = _probe_loss(batch_loss, vocab_size, src, tgt)
    if seen is not None:
        found.append((f"- the assembly: {seen[0]}.\n    Read {seen[1]}.", seen[1]))
    return found


def _validate_pieces(pieces: Sequence) -> None:
    for (title, names, _, _), objects in zip(PIECES, pieces):
        if not isinstance(objects, tuple) or len(objects) != len(names):
            raise TypeError(
                f"{title[4:]} must be the tuple ({', '.join(names)}), got {objects!r}"
            )


def check_own_model_learns(
    model_cls,
    batch_loss,
    *,
    attention: tuple,
    masks: tuple,
    blocks: tuple,
    positions: tuple,
    steps: int = STEPS,
) -> None:
    """Build ``model_cls(V, 32, 4, 64, 1)``, whose
    ``forward(src [B, Ss], tgt_in [B, St])`` returns logits [B, St, V], train it with
    ``batch_loss(model, src, tgt)`` for ``steps`` steps of the fixed recipe, and
    require THRESHOLD greedy exact match on N_TEST held-out dates. When it falls short,
    name the pieces (their chapter checks) and the parts of the assembly (the probes) at
    fault.

    The assembly is probed first, before training (a model can learn the task with
    its source mask left out or padding counted in its loss). The pieces, probed when
    the assembly fails or the model does not learn: ``attention`` =
    (split_heads, merge_heads, masked_attention, MultiHeadAttention), ``masks`` =
    (causal_mask, padding_mask), ``blocks`` = (FeedForward, EncoderBlock, DecoderBlock),
    ``positions`` = (sinusoidal_encoding, embed). ``steps``: tests shorten it to reach
    a wrong model's diagnosis sooner; a right model needs all of STEPS.
    """
    __tracebackhide__ = True
    title = TITLE
    verify_integrity()
    pieces = (attention, masks, blocks, positions)
    _validate_pieces(pieces)
    vocab, items, test_src, test_tgt = _data()
    with single_thread():
        model = _build(title, model_cls, len(vocab))
        src, tgt = _probe_batch(get_device())
        _check_forward(title, model, src, tgt[:, :-1], len(vocab))
        # Before training: a model can learn the dates with its source mask left out
        # or padding counted in its loss, so learning proves neither.
        assembly = _assembly_findings(model, batch_loss, len(vocab))
        if assembly:
            task = (
                "your assembled model fails probes that every right model passes, "
                "whatever it learns (run on the untrained model)"
            )
            _fail_with_findings(title, task, _piece_findings(pieces) + assembly)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(SEED)
            result = train(model, batch_loss, items, steps=steps)
        error = result["error"]
        if isinstance(error, Raised):
            fail(
                title,
                f"training raised at step {result['steps'] + 1}: {error!r}",
                S_SHIFT,
            )
        if isinstance(error, str) and error.startswith("batch_loss"):
            fail(title, error, S_LOSS)
        accuracy = 0.0 if error else run(exact_match, (model, test_src, test_tgt))
        if isinstance(accuracy, Raised):
            fail(
                title,
                f"greedy decoding with model(src, prefix) raised {accuracy!r}",
                S_DECODER,
            )
        if error is None and accuracy >= THRESHOLD:
            passed(
                title,
                f"{accuracy:.1%} exact match on {N_TEST} new dates after "
                f"{result['steps']} steps ({result['seconds']:.1f} s of "
                f"training); the bar is {THRESHOLD:.0%}",
            )
            return
        findings = _piece_findings(pieces)
    how = error or (
        f"after {result['steps']} steps it gets {accuracy:.1%} exact match "
        f"on {N_TEST} new dates; the bar is {THRESHOLD:.0%}"
    )
    if result["out_of_time"]:
        how += (
            f"; training was stopped after {SECONDS_LIMIT:.0f} s, at step "
            f"{result['steps']} of {steps}: is your model much slower than the "
            "reference's, or the machine busy?"
        )
    task = f"your model does not learn the task of §{S_TASK.number} ({how})"
    if findings:
        _fail_with_findings(title, task, findings)
    fail(
        title,
        f"{task}, yet every piece of yours passes its chapter's checks and the "
        "assembled model passes the probes (a causal decoder, source padding "
        "ignored, the source read, positions on both sides, the target shifted "
        f"and padding left out of the loss). It {UNEXPLAINED}; compare your "
        f"OwnTransformer and batch_loss with {S_DECODER} and {S_SHIFT}.",
    )


seal(__name__)
