"""Checks for chapter 5, positions and the whole model (book/ch05_model).

The exercise writes ``sinusoidal_encoding``, the embedding step (token embedding
scaled by √d_model plus positions) and a Post-LN ``DecoderBlock`` built from
``tformer_ref.attention.MultiHeadAttention``, ``nn.LayerNorm`` and a feed-forward.
"""
from __future__ import annotations

import math
from dataclasses import replace

import torch
import torch.nn as nn

from tformer_ref.device import get_device
from tformer_ref.positions import sinusoidal_encoding
from ..guard.integrity import seal
from .blocks import (Parts, check_block_not_delegated, compare_with_roles, find_parts,
                     holds, keep, norm_orders, post_ln, pre_ln, randomise_norms)
from .cases import build_module, randn
from .ch04 import (BATCHNORM, DROPOUT_IN_EVAL, S_PLACEMENT, S_RESIDUAL,
                   post_ln_no_residual)
from .delegation import check_by_hand  # noqa: F401 (test cells call ch05.check_by_hand)
from .diagnosis import (Case, CheckFailure, Pitfall, Section, compare_to_reference,
                        passed, run, single_threaded)

CHAPTER = "ch05_model"
S_ORDER = Section(CHAPTER, "5.1", "Attention ignores order")
S_SINUSOID = Section(CHAPTER, "5.2", "Sinusoidal positional encoding")
S_LEARNED = Section(CHAPTER, "5.3", "Learned positions and max_length")
S_EXTRAPOLATE = Section(CHAPTER, "5.4", 'What "extrapolates" means')
S_EMBED = Section(CHAPTER, "5.5", "Embeddings scaled by sqrt(d_model)")
S_DECODER = Section(CHAPTER, "5.6", "Encoder, decoder and cross-attention")
S_COUNT = Section(CHAPTER, "5.7", "The seed's model, counted")
S_LM = Section(CHAPTER, "5.8", "A decoder-only model")
# The blocks' own lessons (S_RESIDUAL, S_PLACEMENT, BATCHNORM's) are chapter 4's.


# ------------------------------------------------------------------ sinusoidal encoding
# The tables are computed in float64 and returned in float32.

def _positions(n):
    return torch.arange(n, dtype=torch.float64)[:, None]


def _pairs(d):
    return torch.arange(d // 2, dtype=torch.float64)


def _interleaved(even, odd):
    """[n, D/2] and [n, D/2] -> [n, D]: ``even`` in columns 0, 2, ..., ``odd`` in
    1, 3, ..."""
    pe = torch.empty(even.size(0), 2 * even.size(1), dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = even, odd
    return pe.float()


def _sinusoid_table(n, d):
    """PE[pos, 2i] = sin(pos / 10000^(2i/D)), PE[pos, 2i+1] = cos(the same)."""
    angle = _positions(n) * 10000.0 ** (-2 * _pairs(d) / d)
    return _interleaved(torch.sin(angle), torch.cos(angle))


def _sin_cos_swapped(n, d):
    angle = _positions(n) * 10000.0 ** (-2 * _pairs(d) / d)
    return _interleaved(torch.cos(angle), torch.sin(angle))


def _exponent_i_over_d(n, d):  # 10000^(i/D) with i the pair index
    angle = _positions(n) * 10000.0 ** (-_pairs(d) / d)
    return _interleaved(torch.sin(angle), torch.cos(angle))


def _growing_frequencies(n, d):  # the minus sign of the exponent lost
    angle = _positions(n) * 10000.0 ** (2 * _pairs(d) / d)
    return _interleaved(torch.sin(angle), torch.cos(angle))


def _per_column_table(n, d):
    """Each column j at its own frequency 1/10000^(j/D): the odd (cos) columns use 2i+1
    instead of 2i."""
    j = torch.arange(d, dtype=torch.float64)
    angle = _positions(n) / 10000.0 ** (j / d)
    return torch.where(j.long() % 2 == 0, torch.sin(angle), torch.cos(angle)).float()


def _without_base(n, d):  # exp(-2i/D): the log of 10000 left out
    angle = _positions(n) * torch.exp(-2 * _pairs(d) / d)
    return _interleaved(torch.sin(angle), torch.cos(angle))


def _concatenated(n, d):  # [sin | cos]
    angle = _positions(n) * 10000.0 ** (-2 * _pairs(d) / d)
    return torch.cat([torch.sin(angle), torch.cos(angle)], dim=1).float()


def _from_position_one(n, d):
    return _sinusoid_table(n + 1, d)[1:]


GROWING_FREQUENCIES = Pitfall(
    "wrong frequencies (positions multiplied by 10000^(2i/D))",
    "Your frequencies grow with i instead of shrinking: divide the position by "
    "10000^(2i/D) (div_term = exp(-2i·ln(10000)/D), note the minus "
    "sign).", S_SINUSOID, _growing_frequencies)

SINUSOID_PITFALLS = (
    Pitfall("sin and cos swapped",
            "Your even columns hold cosines and the odd ones sines. The paper's table "
            "is PE[pos, 2i] = sin(pos/10000^(2i/D)) and PE[pos, 2i+1] = cos(...): at "
            "position 0 the even columns are 0 and the odd ones "
            "1.", S_SINUSOID, _sin_cos_swapped),
    Pitfall("wrong frequencies (exponent i/D, not 2i/D)",
            "Your pair i turns at 1/10000^(i/D): the exponent must be 2i/D (the column "
            "index of the sine), so that the wavelengths run from 2π up to 10000·2π "
            "over the D/2 pairs; with i/D they stop at about "
            "100·2π.", S_SINUSOID, _exponent_i_over_d),
    GROWING_FREQUENCIES,
    Pitfall("wrong frequencies (one exponent per column)",
            "You gave every column j its own frequency 1/10000^(j/D). A sine and its "
            "cosine share one frequency: columns 2i and 2i+1 both use 10000^(2i/D). "
            "Sharing it is what makes PE[pos+k] a rotation of "
            "PE[pos].", S_SINUSOID, _per_column_table),
    Pitfall("wrong frequencies (the base 10000 left out)",
            "Your frequencies are exp(-2i/D): the log of the base is missing, div_term "
            "= exp(2i · (-ln(10000)/D)).", S_SINUSOID, _without_base),
    Pitfall("sin and cos concatenated, not interleaved",
            "You put all the sines first and all the cosines after ([sin | cos]). The "
            "course follows the paper: sine in the even columns, cosine in the odd "
            "ones (pe[:, 0::2] = sin, pe[:, 1::2] = cos).", S_SINUSOID, _concatenated),
    Pitfall("positions start at 1",
            "Your first row is position 1: positions are 0, 1, ..., n-1 "
            "(torch.arange(n)); row 0 is [0, 1, 0, 1, "
            "...].", S_SINUSOID, _from_position_one),
)


def _as_float32(fn):
    def as_float32(n, d):
        out = fn(n, d)
        # A float64 table is as right as a float32 one: compare values, not precision.
        if isinstance(out, torch.Tensor) and out.is_floating_point():
            return out.float()
        return out
    return as_float32


def _frequencies_grow(learner) -> bool:
    """Row 1 (position 1) against frequencies 10000^(+2i/D). Only row 1 is compared,
    loosely: at larger positions the angles reach 10^5 and float32 keeps no phase, so no
    full-table comparison can name it."""
    got = run(learner, (10, 8))
    want = _growing_frequencies(10, 8)
    return (isinstance(got, torch.Tensor) and got.shape == want.shape
            and torch.allclose(got[1], want[1], atol=1e-2))


@single_threaded
def check_sinusoidal_encoding(fn) -> None:
    """``fn(n_positions, d_model) -> [n_positions, d_model]``, the table of Vaswani et
    al. §3.5."""
    __tracebackhide__ = True
    cases = [Case(f"n_positions={n}, d_model={d}", lambda n=n, d=d: (n, d))
             for n, d in [(10, 8), (50, 16), (7, 6), (100, 32), (1, 4)]]
    try:
        compare_to_reference("sinusoidal_encoding", cases, fn, _sinusoid_table,
                             SINUSOID_PITFALLS, atol=1e-4, rtol=1e-4, adapt=_as_float32)
    except CheckFailure as failure:
        unexplained = "matches none of the known pitfalls" in str(failure)
        if unexplained and _frequencies_grow(_as_float32(fn)):
            GROWING_FREQUENCIES.fail("sinusoidal_encoding")
        raise


# --------------------------------------------------------------------------- embeddings

def _embed_cases():
    configs = [(2, 5, 16, 20, torch.float32), (3, 4, 8, 11, torch.float32),
               (1, 7, 12, 9, torch.float64), (4, 3, 32, 50, torch.float32)]
    device = get_device()
    cases = []
    for i, (b, s, d, vocab, dtype) in enumerate(configs):
        def make(b=b, s=s, d=d, vocab=vocab, dtype=dtype, i=i):
            torch.manual_seed(500 + i)
            table = nn.Embedding(vocab, d).to(device=device, dtype=dtype)
            nn.init.normal_(table.weight, std=d ** -0.5)
            g = torch.Generator().manual_seed(600 + i)
            tokens = torch.randint(0, vocab, (b, s), generator=g).to(device)
            pe = sinusoidal_encoding(s + 6, d, dtype=dtype, device=device)
            return tokens, table, pe
        cases.append(Case(f"tokens [{b}, {s}], vocab {vocab}, d_model {d}, "
                          f"pe [{s + 6}, {d}], {dtype}", make))
    return cases


def _embed(tokens, table, pe):
    """table(tokens) · √D + pe[:S]."""
    return table(tokens) * math.sqrt(table.embedding_dim) + pe[: tokens.size(1)]


def _embed_unscaled(tokens, table, pe):
    return table(tokens) + pe[: tokens.size(1)]


def _embed_times_d(tokens, table, pe):
    return table(tokens) * float(table.embedding_dim) + pe[: tokens.size(1)]


def _embed_over_sqrt_d(tokens, table, pe):
    return table(tokens) * (1 / math.sqrt(table.embedding_dim)) + pe[: tokens.size(1)]


def _embed_positions_scaled(tokens, table, pe):  # (embedding + position) · √D
    return (table(tokens) + pe[: tokens.size(1)]) * math.sqrt(table.embedding_dim)


def _embed_positions_by_token(tokens, table, pe):  # pe[tokens]
    return table(tokens) * math.sqrt(table.embedding_dim) + pe[tokens]


EMBED_PITFALLS = (
    Pitfall("missing √d_model embedding scale",
            "Your token embeddings are not multiplied by √d_model (Vaswani et al. "
            "§3.4). Embeddings start with entries of size about 1/√D, the positional "
            "encoding with entries of size 1: without the scale the positions drown "
            "the tokens.", S_EMBED,
            _embed_unscaled),
    Pitfall("scaled by d_model, not √d_model",
            "You multiplied the embeddings by d_model; the paper multiplies by "
            "√d_model.",
            S_EMBED, _embed_times_d),
    Pitfall("divided by √d_model",
            "You divided the embeddings by √d_model; the paper multiplies by it.",
            S_EMBED, _embed_over_sqrt_d),
    Pitfall("positions scaled too",
            "You multiplied (embedding + position) by √d_model: only the token "
            "embedding is scaled, the positional encoding is added afterwards, as it "
            "is.",
            S_EMBED, _embed_positions_scaled),
    Pitfall("positions looked up by token id",
            "You indexed the positional table with the token ids (pe[tokens]): the row "
            "is the token's *position*, 0..S-1 (pe[:S]), whatever the "
            "token.", S_SINUSOID,
            _embed_positions_by_token),
)


@single_threaded
def check_embed(fn) -> None:
    """``fn(tokens [B, S] long, table nn.Embedding(V, D), pe [max_len, D])
    -> [B, S, D]``: ``table(tokens) · √D + pe[:S]``."""
    __tracebackhide__ = True
    compare_to_reference("embed", _embed_cases(), fn, _embed, EMBED_PITFALLS, atol=1e-5,
                         rtol=1e-5)


# ------------------------------------------------------------------------- DecoderBlock
# A decoder variant is ``fn(role, module, x, memory, src_mask)``. ``role`` = (attention
# order, norm order) says which of the learner's attentions is the self-attention and
# which norm serves which sublayer.

def decoder_parts(module, d_model, d_ff=None) -> Parts:
    return find_parts("DecoderBlock", module, d_model, d_ff, 2, 3, BATCHNORM, S_DECODER)


def _in_role(role, module, x) -> Parts:
    """The learner's parts as ``role`` assigns them: ``attns`` = (self, cross)."""
    attn_order, norm_order = role
    return decoder_parts(module, x.size(-1)).in_role(norm_order, attn_order)


def _decoder(parts, x, first, second, wiring=post_ln):
    """Sublayers ``first``, ``second``, then the feed-forward, each wrapped by
    ``wiring`` with the next norm (eval mode: no dropout)."""
    for sublayer, norm in zip((first, second, parts.ff), parts.norms):
        x = wiring(x, sublayer, norm, keep)
    return x


def _lower_triangle(h):
    s = h.size(1)
    return torch.ones(s, s, dtype=torch.bool, device=h.device).tril()[None, None]


def _masked_self(p):
    return lambda h: p.attns[0](h, h, h, mask=_lower_triangle(h))


def _cross(p, memory, src_mask):
    return lambda h: p.attns[1](h, memory, memory, mask=src_mask)


def decoder_block(role, module, x, memory, src_mask):
    """The Post-LN decoder block from the learner's parts: causal self-attention,
    cross-attention to ``memory``, feed-forward."""
    p = _in_role(role, module, x)
    return _decoder(p, x, _masked_self(p), _cross(p, memory, src_mask))


def _unmasked_self(role, module, x, memory, src_mask):
    p = _in_role(role, module, x)
    return _decoder(p, x, lambda h: p.attns[0](h, h, h), _cross(p, memory, src_mask))


def _upper_triangle(h):  # triu(): each position keeps itself and the future
    s = h.size(1)
    return torch.ones(s, s, dtype=torch.bool, device=h.device).triu()[None, None]


def _triu_self(role, module, x, memory, src_mask):
    p = _in_role(role, module, x)
    upper = lambda h: p.attns[0](h, h, h, mask=_upper_triangle(h))  # noqa: E731
    return _decoder(p, x, upper, _cross(p, memory, src_mask))


def _cross_from_decoder(role, module, x, memory, src_mask):
    p = _in_role(role, module, x)
    own = lambda h: p.attns[1](h, h, h, mask=src_mask)  # noqa: E731
    return _decoder(p, x, _masked_self(p), own)


def _cross_from_decoder_unmasked(role, module, x, memory, src_mask):
    p = _in_role(role, module, x)
    return _decoder(p, x, _masked_self(p), lambda h: p.attns[1](h, h, h))


def _cross_without_src_mask(role, module, x, memory, src_mask):
    p = _in_role(role, module, x)
    return _decoder(p, x, _masked_self(p), _cross(p, memory, None))


def _cross_before_self(role, module, x, memory, src_mask):
    p = _in_role(role, module, x)
    return _decoder(p, x, _cross(p, memory, src_mask), _masked_self(p))


def _decoder_no_residual(role, module, x, memory, src_mask):
    p = _in_role(role, module, x)
    return _decoder(p, x, _masked_self(p), _cross(p, memory, src_mask),
                    post_ln_no_residual)


def _decoder_pre_ln(role, module, x, memory, src_mask):
    p = _in_role(role, module, x)
    return _decoder(p, x, _masked_self(p), _cross(p, memory, src_mask), pre_ln)


NO_CAUSAL_MASK = Pitfall(
    "decoder self-attention without the causal mask",
    "The decoder's self-attention is not masked, so position i reads the target tokens "
    "after it: in training it copies the answer instead of predicting it, and at "
    "generation time those tokens do not exist yet. Self-attention in the decoder "
    "always uses the causal (lower-triangular) mask.", S_DECODER, _unmasked_self)
CROSS_FROM_DECODER = Pitfall(
    "cross-attention taking keys/values from the decoder",
    "Your cross-attention takes its keys and values from the decoder's own states, so "
    "the target never reads the source. Queries come from the decoder, keys and values "
    "from the encoder's output: cross_attn(x, memory, memory, "
    "mask=src_mask).", S_DECODER,
    _cross_from_decoder)
SOURCE_PADDING_SEEN = Pitfall(
    "cross-attention ignores the source padding mask",
    "Your cross-attention reads the encoder's padding positions: pass the source mask "
    "(src_mask, [B, 1, 1, Ss]) to it.", S_DECODER, _cross_without_src_mask)

DECODER_PITFALLS = (
    NO_CAUSAL_MASK,
    Pitfall("causal mask built with triu instead of tril",
            "Your self-attention mask keeps the upper triangle: each position attends "
            "to itself and the *future*. The keep-mask is lower triangular, "
            "torch.ones(S, S).tril().",
            S_DECODER, _triu_self),
    CROSS_FROM_DECODER,
    replace(CROSS_FROM_DECODER, impl=_cross_from_decoder_unmasked),
    SOURCE_PADDING_SEEN,
    Pitfall("cross-attention before self-attention",
            "The decoder block runs masked self-attention first, then cross-attention "
            "to the encoder, then the feed-forward.", S_DECODER, _cross_before_self),
    Pitfall("missing residual",
            "Each of the three sublayers is wrapped as LayerNorm(x + "
            "Dropout(Sublayer(x))): the input is added "
            "back.", S_RESIDUAL, _decoder_no_residual),
    Pitfall("LayerNorm in the wrong place (Pre-LN where Post-LN was asked)",
            "This block is Post-LN: x = LayerNorm(x + Dropout(Sublayer(x))) for each "
            "sublayer.",
            S_PLACEMENT, _decoder_pre_ln),
)
DECODER_ROLES = tuple((attns, norms) for attns in ((0, 1), (1, 0))
                      for norms in norm_orders(3))


def _decoder_cases(cls):
    # (D, H, d_ff, B, St, Ss, source padding?, dtype); Ss != St catches keys taken from
    # the wrong side.
    configs = [(16, 4, 40, 2, 5, 7, True, torch.float32),
               (24, 3, 48, 3, 4, 4, True, torch.float32),
               (12, 2, 20, 2, 6, 3, False, torch.float64),
               (16, 4, 32, 4, 5, 6, True, torch.float32)]
    cases = []
    for i, (d, h, f, b, st, ss, pad, dtype) in enumerate(configs):
        def make(d=d, h=h, f=f, b=b, st=st, ss=ss, pad=pad, dtype=dtype, i=i):
            torch.manual_seed(2000 + i)
            module = build_module("DecoderBlock", cls, (d, h, f, 0.1), dtype).eval()
            randomise_norms(decoder_parts(module, d, f), seed=20 + i)
            x = randn(b, st, d, seed=2100 + i, dtype=dtype)
            memory = randn(b, ss, d, seed=2200 + i, dtype=dtype)
            return module, x, memory, _source_mask(b, ss) if pad else None
        cases.append(Case(f"D={d}, H={h}, d_ff={f}, x [{b}, {st}, {d}], "
                          f"memory [{b}, {ss}, {d}], source padding "
                          f"{'yes' if pad else 'no'}, {dtype}", make))
    return cases


def _source_mask(b, ss):
    """Source sequence i keeps its first 2 + i positions: [B, 1, 1, Ss]."""
    lengths = (torch.arange(b) % ss + 2).clamp(max=ss)
    kept = torch.arange(ss)[None, :] < lengths[:, None]
    return kept[:, None, None, :].to(get_device())


def _call_decoder(module, x, memory, src_mask):
    return module(x, memory, src_mask)


def _probe(cls):
    __tracebackhide__ = True
    torch.manual_seed(0)
    module = build_module("DecoderBlock", cls, (16, 4, 40, 0.1)).eval()
    decoder_parts(module, 16, 40)
    return module


@single_threaded
def check_decoder_block(cls) -> None:
    """``cls(d_model, n_heads, d_ff, dropout)``, ``forward(x [B, St, D],
    memory [B, Ss, D], src_mask=None) -> [B, St, D]``: Post-LN, causal self-attention,
    cross-attention to ``memory``, feed-forward."""
    __tracebackhide__ = True
    _probe(cls)
    compare_with_roles("DecoderBlock", _decoder_cases(cls), _call_decoder,
                       decoder_block, DECODER_PITFALLS, DECODER_ROLES)


# -------------------------------------------------------------------- decoder behaviour
# Probes on one block in eval mode: ``probe(module, x, memory, src_mask) -> bool``.

def _deterministic(module, x, memory, src_mask):
    return torch.equal(module(x, memory, src_mask), module(x, memory, src_mask))


def _reads_memory(module, x, memory, src_mask):
    base = module(x, memory, src_mask)
    return not torch.allclose(module(x, memory + 1.0, src_mask), base, atol=1e-5)


def _past_ignores_future(module, x, memory, src_mask):
    future = x.clone()
    future[:, 3:] = future[:, 3:] * 2.0 + 1.0
    base = module(x, memory, src_mask)
    changed = module(future, memory, src_mask)
    return torch.allclose(changed[:, :3], base[:, :3], atol=1e-5)


def _masked_source_invisible(module, x, memory, src_mask):
    hidden = memory.clone()
    hidden[0, 3:] = 100.0  # masked source positions of sequence 0
    base = module(x, memory, src_mask)
    return torch.allclose(module(x, hidden, src_mask), base, atol=1e-5)


DECODER_PROBES = (
    (_deterministic, DROPOUT_IN_EVAL, "Two calls in eval mode gave different outputs."),
    (_reads_memory, CROSS_FROM_DECODER,
     "Changing the encoder's output (memory) changed nothing."),
    (_past_ignores_future, NO_CAUSAL_MASK,
     "Changing target positions 3..5 changed the outputs at positions 0..2: the past "
     "sees the future."),
    (_masked_source_invisible, SOURCE_PADDING_SEEN,
     "Changing masked (padding) source positions changed the output."),
)


@single_threaded
def check_decoder_behaviour(cls) -> None:
    """Probes any right decoder block passes: the future never changes the past, the
    output reads the memory, masked source positions are invisible, eval mode is
    deterministic."""
    __tracebackhide__ = True
    title = "DecoderBlock behaviour"
    module = _probe(cls)
    x, memory = randn(2, 6, 16, seed=31), randn(2, 5, 16, seed=32)
    src_mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool,
                            device=get_device())[:, None, None, :]
    for probe, diagnosis, observed in DECODER_PROBES:
        if not holds(title, probe, module, x, memory, src_mask):
            diagnosis.fail(title, observed)
    passed(title, "causal, reads the memory, ignores source padding, deterministic in "
                  "eval mode")


@single_threaded
def check_decoder_by_hand(cls) -> None:
    """Hidden test: the learner wired the block, not PyTorch's
    TransformerDecoderLayer or the reference's."""
    __tracebackhide__ = True
    torch.manual_seed(0)
    module = build_module("DecoderBlock", cls, (16, 4, 40, 0.1))
    check_block_not_delegated("DecoderBlock", module)


seal(__name__)
