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

What is required is said here; :mod:`.own_model_training` runs it, the same for every
learner: the recipe (sizes, data, schedule, training, greedy decoding), the model's
interface, and ``batch_loss`` read back on a stand-in model.

Shape letters: B batch, Ss source length, St target length, D = d_model, V vocabulary.
"""

from __future__ import annotations

import contextlib
import functools
import io
import math
import re
from collections.abc import Sequence

import torch
from torch import nn

from tformer_ref.attention import MultiHeadAttention as _RefAttention
from tformer_ref.attention import scaled_dot_product_attention as _ref_attention
from tformer_ref.blocks import DecoderBlock as _RefDecoderBlock
from tformer_ref.data import PAD
from tformer_ref.device import get_device

from ..guard.integrity import seal
from ..pictures.attach import pictured
from . import ch01, ch03, ch04, ch05, ch06
from .cases import randn
from .diagnosis import (
    UNEXPLAINED,
    CheckFailure,
    Raised,
    fail,
    passed,
    quiet,
    run,
    same,
    single_thread,
    verify_integrity,
)
from .measure.probes import future_moves_past, padding_invisible
from .measure.sizes import named
from .measure.softmax import normalised_over
from .own_model_training import (
    N_TEST,
    SECONDS_LIMIT,
    SEED,
    STEPS,
    build_model,
    calls_in_order,
    date_data,
    eval_logits,
    exact_match,
    own_modules,
    probe_batch,
    probe_loss,
    require_forward,
    train,
)
from .pieces import wrap_checks

# pytest hides this module's frames in a failure's traceback: a learner sees theirs.
__tracebackhide__ = True

#: The exercise these checks grade (the pitfall index links its rows there).
ASSIGNMENT = "ch06_own_model"

# The recipe (own_model_training: sizes, data, steps, schedule) is the same for every
# learner; a right model passes the bar in 240-420 of its 600 steps.
THRESHOLD = 0.90
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


def _mha_mask_problem(cls) -> str | None:
    """None when ``cls(16, 4, dropout=0.0)``, attending to itself, obeys a causal and a
    padding mask (measure.probes' causality and padding invariance), else what it
    did."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        try:
            module = cls(16, 4, dropout=0.0)
        except Exception as exc:  # noqa: BLE001 - the learner's code may raise anything
            return f"MultiHeadAttention(16, 4, dropout=0.0) raised {Raised(exc)!r}"
    module = module.to(get_device()).eval()
    x = randn(2, 5, 16, seed=SEED)

    def attend(t, keep):
        return module(t, t, t, keep)

    causal = functools.partial(attend, keep=_right_causal_mask(5))
    with torch.no_grad():
        moved = run(future_moves_past, (causal, x, 4))  # the last token changed
        hidden = run(padding_invisible, (attend, x[:, :3], x[:, 3:] + 3.0))
    for seen in (moved, hidden):
        if isinstance(seen, Raised):
            return f"forward(query, key, value, mask) raised {seen!r}"
    if moved is not None:
        return (
            "with a causal mask, changing the last token changed the outputs of "
            "the earlier ones: the mask is not applied"
        )
    if not hidden:
        return (
            "with a padding mask, the masked keys and values changed the output of "
            "the real positions: the mask is not applied"
        )
    return None


def _attention_checks(split_heads, merge_heads, masked_attention, mha_cls) -> None:
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
    ch03.check_causal_mask(causal_mask)
    ch03.check_padding_mask(padding_mask)
    ch03.check_mask_probes(_ref_attention, causal_mask, padding_mask)


def _block_checks(feed_forward, encoder_block, decoder_block) -> None:
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
    verify_integrity()
    title, names, checks, chapters = PIECES[index]
    _fail_if_borrowed(title, dict(zip(names, objects)))
    try:
        with _silent(), single_thread():
            checks(*objects)
    except CheckFailure as exc:
        with pictured(lambda said, inner=exc: inner.picture):
            fail(title, f"your piece fails a check of {chapters} again:\n{exc}")
    passed(title, f"{', '.join(names)} are yours and pass the checks of {chapters}")


def check_own_attention(split_heads, merge_heads, masked_attention, mha_cls) -> None:
    """Exercise 1's ``split_heads``, ``merge_heads`` and ``MultiHeadAttention`` (now
    with a ``dropout`` argument and using its ``mask``), exercise 3's
    ``masked_attention``: the learner's own, passing their chapters' checks, the module
    obeying its mask."""
    _check_piece(0, (split_heads, merge_heads, masked_attention, mha_cls))


def check_own_masks(causal_mask, padding_mask) -> None:
    """Exercise 3's ``causal_mask`` and ``padding_mask``: the learner's own, passing
    chapter 3's checks (its probes run with the reference's attention)."""
    _check_piece(1, (causal_mask, padding_mask))


def check_own_blocks(feed_forward, encoder_block, decoder_block) -> None:
    """Exercise 4's ``FeedForward`` and ``EncoderBlock`` (Post-LN), exercise 5's
    ``DecoderBlock``: the learner's own, passing their chapters' checks, run with the
    reference's attention and causal mask in place of the learner's."""
    _check_piece(2, (feed_forward, encoder_block, decoder_block))


def check_own_positions(sinusoidal_encoding, embed) -> None:
    """Exercise 5's ``sinusoidal_encoding`` and ``embed``: the learner's own, passing
    chapter 5's checks."""
    _check_piece(3, (sinusoidal_encoding, embed))


# ------------------------------------------------------------ probes of the assembly
# Each probe runs the untrained model (seeded, Xavier-initialised) and returns False,
# True (it saw its table row's mistake) or the sentence saying what it saw.


def _same(a, b) -> bool:
    return isinstance(a, torch.Tensor) and same(a, b, 1e-4, 1e-4)


def _sees_future(model, src, tgt) -> bool:
    changed = tgt[:, :-1].clone()
    changed[:, -1] = 30
    a, b = eval_logits(model, src, tgt[:, :-1]), eval_logits(model, src, changed)
    return isinstance(a, torch.Tensor) and not _same(a[:, :-1], b[:, :-1])


def _source_padding_counts(model, src, tgt) -> str | None:
    """Padding the source must leave the logits as they were; when it does not, the
    encoder's output at the real positions says where the padding was read."""
    padded = torch.cat([src, torch.full_like(src[:, :3], PAD)], dim=1)
    if _same(
        eval_logits(model, src, tgt[:, :-1]), eval_logits(model, padded, tgt[:, :-1])
    ):
        return None
    lead = "padding the source changes the logits: "
    plain, longer = (
        _encoder_output(model, src, tgt),
        _encoder_output(model, padded, tgt),
    )
    if plain is None or longer is None:
        return lead + (
            "the source padding mask does not reach the encoder's self-attention or "
            "the decoder's cross-attention"
        )
    unmasked = "the source padding mask does not reach it, or does not hide the padding"
    if _same(plain, longer[:, : src.size(1)]):
        return lead + (
            "the decoder's cross-attention reads the padded positions (the encoder's "
            f"output at the real positions stayed the same): {unmasked}"
        )
    return lead + (
        "the encoder's self-attention reads the padded positions (its output at the "
        f"real positions changed): {unmasked}"
    )


def _source_unread(model, src, tgt) -> bool:
    a = eval_logits(model, src, tgt[:, :-1])
    return _same(a, eval_logits(model, src.flip(0), tgt[:, :-1]))


def _source_order_unseen(model, src, tgt) -> bool:
    real = src[1:2]  # the row without padding
    reordered = torch.cat([real[:, :-1].flip(1), real[:, -1:]], dim=1)
    a = eval_logits(model, real, tgt[1:2, :-1])
    return _same(a, eval_logits(model, reordered, tgt[1:2, :-1]))


def _target_order_unseen(model, src, tgt) -> bool:
    out = eval_logits(model, src, torch.full((2, 5), 20, device=src.device))
    return isinstance(out, torch.Tensor) and _same(out[:, :1].expand_as(out), out)


def _unregistered(model, src, tgt) -> bool:
    # The same class built under another seed and given this model's state_dict must
    # compute the same logits: weights outside the state_dict keep their own draw.
    a = eval_logits(model, src, tgt[:, :-1])
    if not isinstance(a, torch.Tensor):
        return False
    other = build_model(TITLE, type(model), a.size(-1), seed=SEED + 1)
    with quiet():
        other.load_state_dict(model.state_dict())
    return not _same(a, eval_logits(other, src, tgt[:, :-1]))


def _probabilities(model, src, tgt) -> bool:
    # cross_entropy then takes the log-softmax of numbers in [0, 1]: every class
    # stays nearly equally likely.
    out = eval_logits(model, src, tgt[:, :-1])
    return _floats(out) and normalised_over(out, ((-1,),)) == (-1,)


def _floats(out) -> bool:
    return isinstance(out, torch.Tensor) and out.is_floating_point()


def _used(module) -> bool:
    return any(p.grad is not None and bool(p.grad.any()) for p in module.parameters())


def _idle_or_shared_block(model, src, tgt) -> str | None:
    """Built with two layers, each of the learner's blocks must be an object of its own
    and reach the logits: a block whose every parameter gets an exactly zero gradient
    was computed for nothing."""
    logits = eval_logits(model, src, tgt[:, :-1])
    if not isinstance(logits, torch.Tensor):
        return None
    deep = build_model(TITLE, type(model), logits.size(-1), layers=2).eval()
    found = sorted(own_modules(deep), key=lambda named: named[0].count("."))
    called = set()
    hooks = [
        m.register_forward_hook(lambda m, i, o: called.add(id(m))) for _, m in found
    ]
    out = run(deep, (src, tgt[:, :-1]))
    for hook in hooks:
        hook.remove()
    if not isinstance(out, torch.Tensor) or not out.requires_grad:
        return None
    out.float().sum().backward()
    for name, module in found:  # a block before its parts
        kind = type(module).__name__
        twins = [(n, m) for n, m in found if type(m) is type(module)]
        shared = [n for n, m in twins if m is module and n != name]
        if shared and shared[0].rsplit(".", 1)[0] == name.rsplit(".", 1)[0]:
            return (
                f"built with 2 layers, your {kind} {name} is the same object as "
                f"{shared[0]}: the layers share one block's weights (build a new block "
                "for each layer)"
            )
        if _used(module):
            continue
        if any(_used(m) for _, m in twins):
            return (
                f"built with 2 layers, your {kind} {name} has no effect on the logits "
                f"(every one of its parameters gets a zero gradient) while another "
                f"{kind} does: each block must read the previous block's output, not "
                "the embeddings"
            )
        if id(module) in called:
            names = ", ".join(n for n, _ in twins)
            return (
                f"built with 2 layers, your {kind} blocks ({names}) run and get a zero "
                "gradient from the logits: their output never reaches them (does the "
                "decoder read the encoder's output?)"
            )
    return None


def _positions_added_late(model, src, tgt) -> str | None:
    # One repeated token: a block's first input can vary by position only through the
    # positional encodings.
    events = calls_in_order(
        model,
        torch.full((1, 6), 9, device=src.device),
        torch.full((1, 5), 20, device=src.device),
    )
    for length, side in ((6, "source"), (5, "target")):
        first = [
            (c, x) for k, c, x in events if k == "in" and x.shape[:2] == (1, length)
        ]
        if first and _same(first[0][1], first[0][1][:, :1].expand_as(first[0][1])):
            return (
                f"for a {side} of one repeated token your first {first[0][0]} gets the "
                "same vector at every position: the positional encodings are not "
                f"added to the {side} embeddings before the blocks"
            )
    return None


def _encoder_output(model, src, tgt) -> torch.Tensor | None:
    """The encoder's output for ``src``: the last output of one of the learner's
    modules with the source's batch and length (None when there is none)."""
    outs = [x for k, _, x in calls_in_order(model, src, tgt[:, :-1]) if k == "out"]
    outs = [x for x in outs if x.shape[:2] == src.shape]
    return outs[-1] if outs else None


def _causal_encoder(model, src, tgt) -> bool:
    # Changing the last character before EOS must change the encoder's output at the
    # earlier positions too.
    changed = src[1:2].clone()
    changed[0, -2] = 30
    a, b = (_encoder_output(model, s, tgt[1:2]) for s in (src[1:2], changed))
    if a is None or b is None:
        return False
    return _same(a[:, :-2], b[:, :-2]) and not _same(a, b)


MODEL_PROBES = (
    (
        _unregistered,
        (
            "two models built under different seeds compute different logits after "
            "load_state_dict gave them the same weights: some weights are outside the "
            "state_dict (not registered), so the optimizer never trains them (keep "
            "blocks in an nn.ModuleList, not a Python list)"
        ),
        S_DECODER,
    ),
    (_idle_or_shared_block, None, S_DECODER),
    (
        _probabilities,
        (
            "the model returns probabilities, not logits: at every position its "
            "outputs are non-negative and sum to 1 over the vocabulary, and "
            "cross_entropy takes the log-softmax of what it is given, so the softmax "
            "is applied twice (return the last Linear's output)"
        ),
        S_LOSS,
    ),
    (
        _sees_future,
        (
            "the decoder sees the future: changing the last input token of the target "
            "changed the logits at earlier positions, so in training each position can "
            "read the token it must predict, and greedy decoding, which has no future "
            "to read, fails"
        ),
        S_CAUSAL,
    ),
    (_source_padding_counts, None, S_PADDING),
    (
        _source_unread,
        (
            "the logits do not depend on the source: the decoder's cross-attention "
            "does not read the encoder's output"
        ),
        S_DECODER,
    ),
    (
        _source_order_unseen,
        (
            "reversing the source characters leaves the logits unchanged: the encoder "
            "sees no positions (are the positional encodings added to the source "
            "embeddings?)"
        ),
        S_ORDER,
    ),
    (
        _target_order_unseen,
        (
            "a target of one repeated token gives the same logits at every position: "
            "the decoder sees no positions (are the positional encodings added to the "
            "target embeddings?)"
        ),
        S_ORDER,
    ),
    (_positions_added_late, None, S_ORDER),
    (
        _causal_encoder,
        (
            "changing the last source character leaves the encoder's output at every "
            "earlier position unchanged: the encoder's self-attention is causal (the "
            "causal mask belongs to the decoder; the encoder gets the padding mask "
            "only)"
        ),
        S_CAUSAL,
    ),
)


def _fail_with_findings(title: str, task: str, findings: list) -> None:
    """Fail listing every finding; the most likely one's section is the failure's own,
    so JupyterLab shows its link (its "Read" line moves to the end, said once)."""
    lead = next((section for _, section, _ in findings if section), None)
    texts = [text for text, _, _ in findings]
    if lead is not None:
        first = next(i for i, (_, s, _) in enumerate(findings) if s == lead)
        said = re.compile(rf"\n\s*Read {re.escape(str(lead))}\.")
        texts[first] = said.sub("", texts[first], count=1)
    listed = "\n".join(texts)
    # The first piece's failure that has a picture lends it (its chapter's check's).
    shown = [failure for _, _, failure in findings if failure and failure.pictured]
    with pictured(lambda said: shown[0].picture if shown else None):
        fail(
            title, f"{task}. What the probes found, most likely first:\n{listed}", lead
        )


def _piece_findings(pieces: Sequence[tuple]) -> list[tuple]:
    """Each of the learner's own pieces through its chapter checks again: what fails,
    the section that explains it, and the failure (text, section, failure)."""
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
            found.append((text, exc.section, exc))
    return found


def _assembly_findings(model, batch_loss, vocab_size) -> list[tuple]:
    src, tgt = probe_batch(get_device())
    found = []
    for probe, text, section in MODEL_PROBES:
        seen = probe(model, src, tgt)
        if seen:
            seen = text if seen is True else seen
            said = f"- the assembled model: {seen}.\n    Read {section}."
            found.append((said, section, None))
    seen = probe_loss(model, batch_loss, vocab_size, src, tgt)
    if seen is not None:
        said = f"- the assembly: {seen[0]}.\n    Read {seen[1]}."
        found.append((said, seen[1], None))
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
    title = TITLE
    verify_integrity()
    pieces = (attention, masks, blocks, positions)
    _validate_pieces(pieces)
    vocab, items, test_src, test_tgt = date_data()
    with single_thread():
        model = build_model(title, model_cls, len(vocab))
        src, tgt = probe_batch(get_device())
        require_forward(title, model, src, tgt[:, :-1], len(vocab))
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
                f"training raised at step {result['steps'] + 1}, on a batch of tgt "
                f"[{named(B=result['batch'][0], T=result['batch'][1])}] (labels "
                f"L={result['batch'][1] - 1}, V={len(vocab)}): {error!r}",
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


wrap_checks(globals())  # one diagnosis per submission (pieces.py)
seal(__name__)
