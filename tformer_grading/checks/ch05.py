"""Checks for chapter 5, positions and the whole model (book/ch05_model).

The exercise writes ``sinusoidal_encoding``, the embedding step (token embedding
scaled by √d_model plus positions) and a Post-LN ``DecoderBlock`` built from
``tformer_ref.attention.MultiHeadAttention``, ``nn.LayerNorm`` and a feed-forward.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn

from tformer_ref.device import get_device
from tformer_ref.positions import sinusoidal_encoding
from . import blocks
from .blocks import Parts, compare_with_roles, find_parts, norm_orders, randomise_norms, sublayer
from ..guard.integrity import seal
from .cases import build_module, randn
from .delegation import check_by_hand, check_not_delegated
from .diagnosis import (Case, CheckFailure, Pitfall, Section, compare_to_reference, fail, passed,
                        run, single_threaded)

CHAPTER = "ch05_model"
S_ORDER = Section(CHAPTER, "5.1", "Attention ignores order")
S_SINUSOID = Section(CHAPTER, "5.2", "Sinusoidal positional encoding")
S_LEARNED = Section(CHAPTER, "5.3", "Learned positions and max_length")
S_EXTRAPOLATE = Section(CHAPTER, "5.4", 'What "extrapolates" means')
S_EMBED = Section(CHAPTER, "5.5", "Embeddings scaled by sqrt(d_model)")
S_DECODER = Section(CHAPTER, "5.6", "Encoder, decoder and cross-attention")
S_COUNT = Section(CHAPTER, "5.7", "The seed's model, counted")
S_LM = Section(CHAPTER, "5.8", "A decoder-only model")

# The blocks' own lessons are in chapter 4.
S_RESIDUAL = Section("ch04_blocks", "4.1", "Residual connections")
S_NORM = Section("ch04_blocks", "4.3", "LayerNorm, not BatchNorm")
S_PLACEMENT = Section("ch04_blocks", "4.5", "Post-LN and Pre-LN")


# --------------------------------------------------------------------------- sinusoidal encoding

def _table(n, d, *, swap=False, exponent=None, concat=False, start=0):
    """The sinusoidal table, and its wrong variants; float64 maths, float32 result."""
    pos = torch.arange(start, start + n, dtype=torch.float64)[:, None]
    i = torch.arange(d // 2, dtype=torch.float64)
    if exponent is None:
        inv = 10000.0 ** (-2 * i / d)
    else:
        inv = exponent(i, d)
    angle = pos * inv
    first, second = (torch.cos(angle), torch.sin(angle)) if swap else (torch.sin(angle), torch.cos(angle))
    if concat:
        return torch.cat([first, second], dim=1).float()
    pe = torch.empty(n, d, dtype=torch.float64)
    pe[:, 0::2], pe[:, 1::2] = first, second
    return pe.float()


def _per_column_table(n, d):
    """Each column j at its own frequency 1/10000^(j/D): the odd (cos) columns use 2i+1 instead of 2i."""
    pos = torch.arange(n, dtype=torch.float64)[:, None]
    j = torch.arange(d, dtype=torch.float64)
    angle = pos / 10000.0 ** (j / d)
    pe = torch.where(j.long() % 2 == 0, torch.sin(angle), torch.cos(angle))
    return pe.float()


_GROWING = Pitfall("wrong frequencies (positions multiplied by 10000^(2i/D))",
        "Your frequencies grow with i instead of shrinking: divide the position by 10000^(2i/D) "
        "(div_term = exp(-2i·ln(10000)/D), note the minus sign).",
        S_SINUSOID, lambda n, d: _table(n, d, exponent=lambda i, d: 10000.0 ** (2 * i / d)))

SINUSOID_PITFALLS = [
    Pitfall("sin and cos swapped",
            "Your even columns hold cosines and the odd ones sines. The paper's table is PE[pos, 2i] = "
            "sin(pos/10000^(2i/D)) and PE[pos, 2i+1] = cos(...): at position 0 the even columns are 0 and the "
            "odd ones 1.", S_SINUSOID, lambda n, d: _table(n, d, swap=True)),
    Pitfall("wrong frequencies (exponent i/D, not 2i/D)",
            "Your pair i turns at 1/10000^(i/D): the exponent must be 2i/D (the column index of the sine), "
            "so that the wavelengths run from 2π up to 10000·2π over the D/2 pairs; with i/D they stop at "
            "about 100·2π.", S_SINUSOID, lambda n, d: _table(n, d, exponent=lambda i, d: 10000.0 ** (-i / d))),
    _GROWING,
    Pitfall("wrong frequencies (one exponent per column)",
            "You gave every column j its own frequency 1/10000^(j/D). A sine and its cosine share one "
            "frequency: columns 2i and 2i+1 both use 10000^(2i/D). Sharing it is what makes PE[pos+k] a "
            "rotation of PE[pos].", S_SINUSOID, _per_column_table),
    Pitfall("wrong frequencies (the base 10000 left out)",
            "Your frequencies are exp(-2i/D): the log of the base is missing, div_term = exp(2i · (-ln(10000)/D)).",
            S_SINUSOID, lambda n, d: _table(n, d, exponent=lambda i, d: torch.exp(-2 * i / d))),
    Pitfall("sin and cos concatenated, not interleaved",
            "You put all the sines first and all the cosines after ([sin | cos]). The course follows the paper: "
            "sine in the even columns, cosine in the odd ones (pe[:, 0::2] = sin, pe[:, 1::2] = cos).",
            S_SINUSOID, lambda n, d: _table(n, d, concat=True)),
    Pitfall("positions start at 1",
            "Your first row is position 1: positions are 0, 1, ..., n-1 (torch.arange(n)); row 0 is "
            "[0, 1, 0, 1, ...].", S_SINUSOID, lambda n, d: _table(n, d, start=1)),
]


def _as_float32(fn):
    def run(n, d):
        out = fn(n, d)
        # A float64 table is as right as a float32 one: compare values, not precision.
        return out.float() if isinstance(out, torch.Tensor) and out.is_floating_point() else out
    return run


@single_threaded
def check_sinusoidal_encoding(fn) -> None:
    """``fn(n_positions, d_model) -> [n_positions, d_model]``, the table of Vaswani et al. §3.5."""
    __tracebackhide__ = True
    cases = [Case(f"n_positions={n}, d_model={d}", lambda n=n, d=d: (n, d))
             for n, d in [(10, 8), (50, 16), (7, 6), (100, 32), (1, 4)]]
    learner = _as_float32(fn)
    try:
        compare_to_reference("sinusoidal_encoding", cases, learner, lambda n, d: _table(n, d),
                             SINUSOID_PITFALLS, atol=1e-4, rtol=1e-4)
    except CheckFailure as failure:
        if "matches none of the known pitfalls" in str(failure) and _frequencies_grow(learner):
            fail("sinusoidal_encoding", f"this looks like the pitfall '{_GROWING.name}'. {_GROWING.explanation}",
                 _GROWING.section)
        raise


def _frequencies_grow(learner) -> bool:
    """Row 1 (position 1) against frequencies 10000^(+2i/D). Only row 1 is compared, loosely: at larger
    positions the angles reach 10^5 and float32 keeps no phase, so no full-table comparison can name it."""
    got = run(learner, (10, 8))
    want = _table(10, 8, exponent=lambda i, d: 10000.0 ** (2 * i / d))
    return isinstance(got, torch.Tensor) and got.shape == want.shape and torch.allclose(got[1], want[1], atol=1e-2)



# --------------------------------------------------------------------------- embeddings

def _embed_cases():
    configs = [(2, 5, 16, 20, torch.float32), (3, 4, 8, 11, torch.float32), (1, 7, 12, 9, torch.float64),
               (4, 3, 32, 50, torch.float32)]
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
        cases.append(Case(f"tokens [{b}, {s}], vocab {vocab}, d_model {d}, pe [{s + 6}, {d}], {dtype}", make))
    return cases


def _embed(tokens, table, pe, scale=lambda d: math.sqrt(d), scale_positions=False, by_token=False):
    d = table.embedding_dim
    positions = pe[tokens] if by_token else pe[: tokens.size(1)]
    if scale_positions:
        return (table(tokens) + positions) * scale(d)
    return table(tokens) * scale(d) + positions


EMBED_PITFALLS = [
    Pitfall("missing √d_model embedding scale",
            "Your token embeddings are not multiplied by √d_model (Vaswani et al. §3.4). Embeddings start with "
            "entries of size about 1/√D, the positional encoding with entries of size 1: without the scale the "
            "positions drown the tokens.", S_EMBED, lambda t, e, p: _embed(t, e, p, scale=lambda d: 1.0)),
    Pitfall("scaled by d_model, not √d_model",
            "You multiplied the embeddings by d_model; the paper multiplies by √d_model.",
            S_EMBED, lambda t, e, p: _embed(t, e, p, scale=lambda d: float(d))),
    Pitfall("divided by √d_model",
            "You divided the embeddings by √d_model; the paper multiplies by it.",
            S_EMBED, lambda t, e, p: _embed(t, e, p, scale=lambda d: 1 / math.sqrt(d))),
    Pitfall("positions scaled too",
            "You multiplied (embedding + position) by √d_model: only the token embedding is scaled, the "
            "positional encoding is added afterwards, as it is.",
            S_EMBED, lambda t, e, p: _embed(t, e, p, scale_positions=True)),
    Pitfall("positions looked up by token id",
            "You indexed the positional table with the token ids (pe[tokens]): the row is the token's "
            "*position*, 0..S-1 (pe[:S]), whatever the token.", S_SINUSOID,
            lambda t, e, p: _embed(t, e, p, by_token=True)),
]


@single_threaded
def check_embed(fn) -> None:
    """``fn(tokens [B, S] long, table nn.Embedding(V, D), pe [max_len, D]) -> [B, S, D]``:
    ``table(tokens) · √D + pe[:S]``."""
    __tracebackhide__ = True
    compare_to_reference("embed", _embed_cases(), fn, _embed, EMBED_PITFALLS, atol=1e-5, rtol=1e-5)


# --------------------------------------------------------------------------- DecoderBlock

def decoder_parts(module, d_model, d_ff=None) -> Parts:
    return find_parts("DecoderBlock", module, d_model, d_ff, 2, 3, S_NORM, S_DECODER)


def _causal(s, device, triu=False):
    ones = torch.ones(s, s, dtype=torch.bool, device=device)
    return (ones.triu() if triu else ones.tril())[None, None]


def decoder_forward(role, module, x, memory, src_mask, *, style="post", self_mask="causal", cross_kv="memory",
                    order=("self", "cross", "ff")):
    """The Post-LN decoder block from the learner's parts. ``role`` = (attention order, norm order)."""
    (a_self, a_cross), norm_order = role
    parts = decoder_parts(module, x.size(-1))
    attn_self, attn_cross = parts.attns[a_self], parts.attns[a_cross]
    norms = [parts.norms[i] for i in norm_order]
    mask = {"causal": _causal(x.size(1), x.device), "none": None,
            "triu": _causal(x.size(1), x.device, triu=True)}[self_mask]

    def cross(h):
        if cross_kv == "memory":
            return attn_cross(h, memory, memory, mask=src_mask)
        return attn_cross(h, h, h, mask=src_mask if cross_kv == "decoder" else None)

    fns = {"self": lambda h: attn_self(h, h, h, mask=mask), "cross": cross, "ff": parts.ff}
    for i, name in enumerate(order):
        x = sublayer(style, x, fns[name], norms[i], lambda t: t)
    return x


def _decoder_roles():
    return [(attn, norms) for attn in ((0, 1), (1, 0)) for norms in norm_orders(3)]


def _decoder_cases(cls):
    # (D, H, d_ff, B, St, Ss, source padding?, dtype); Ss != St catches keys taken from the wrong side.
    configs = [(16, 4, 40, 2, 5, 7, True, torch.float32), (24, 3, 48, 3, 4, 4, True, torch.float32),
               (12, 2, 20, 2, 6, 3, False, torch.float64), (16, 4, 32, 4, 5, 6, True, torch.float32)]
    device = get_device()
    cases = []
    for i, (d, h, f, b, st, ss, pad, dtype) in enumerate(configs):
        def make(d=d, h=h, f=f, b=b, st=st, ss=ss, pad=pad, dtype=dtype, i=i):
            torch.manual_seed(2000 + i)
            module = build_module("DecoderBlock", cls, (d, h, f, 0.1), dtype).eval()
            randomise_norms(decoder_parts(module, d, f), seed=20 + i)
            x = randn(b, st, d, seed=2100 + i, dtype=dtype, device=device)
            memory = randn(b, ss, d, seed=2200 + i, dtype=dtype, device=device)
            src_mask = None
            if pad:
                lengths = (torch.arange(b) % ss + 2).clamp(max=ss)
                src_mask = (torch.arange(ss)[None, :] < lengths[:, None])[:, None, None, :].to(device)
            return module, x, memory, src_mask
        cases.append(Case(f"D={d}, H={h}, d_ff={f}, x [{b}, {st}, {d}], memory [{b}, {ss}, {d}], "
                          f"source padding {'yes' if pad else 'no'}, {dtype}", make))
    return cases


def _dec(**kw):
    return lambda role, module, x, memory, src_mask: decoder_forward(role, module, x, memory, src_mask, **kw)


_NO_CAUSAL = ("The decoder's self-attention is not masked, so position i reads the target tokens after it: in "
              "training it copies the answer instead of predicting it, and at generation time those tokens do not "
              "exist yet. Self-attention in the decoder always uses the causal (lower-triangular) mask.")
_CROSS_FROM_DECODER = ("Your cross-attention takes its keys and values from the decoder's own states, so the "
                       "target never reads the source. Queries come from the decoder, keys and values from the "
                       "encoder's output: cross_attn(x, memory, memory, mask=src_mask).")

DECODER_PITFALLS = [
    Pitfall("decoder self-attention without the causal mask", _NO_CAUSAL, S_DECODER, _dec(self_mask="none")),
    Pitfall("causal mask built with triu instead of tril",
            "Your self-attention mask keeps the upper triangle: each position attends to itself and the "
            "*future*. The keep-mask is lower triangular, torch.ones(S, S).tril().", S_DECODER, _dec(self_mask="triu")),
    Pitfall("cross-attention taking keys/values from the decoder", _CROSS_FROM_DECODER, S_DECODER,
            _dec(cross_kv="decoder")),
    Pitfall("cross-attention taking keys/values from the decoder", _CROSS_FROM_DECODER, S_DECODER,
            _dec(cross_kv="decoder_unmasked")),
    Pitfall("cross-attention ignores the source padding mask",
            "Your cross-attention reads the encoder's padding positions: pass the source mask "
            "(src_mask, [B, 1, 1, Ss]) to it.", S_DECODER, lambda r, m, x, mem, sm: decoder_forward(r, m, x, mem, None)),
    Pitfall("cross-attention before self-attention",
            "The decoder block runs masked self-attention first, then cross-attention to the encoder, then the "
            "feed-forward.", S_DECODER, _dec(order=("cross", "self", "ff"))),
    Pitfall("missing residual",
            "Each of the three sublayers is wrapped as LayerNorm(x + Dropout(Sublayer(x))): the input is added back.",
            S_RESIDUAL, _dec(style="post_no_residual")),
    Pitfall("LayerNorm in the wrong place (Pre-LN where Post-LN was asked)",
            "This block is Post-LN: x = LayerNorm(x + Dropout(Sublayer(x))) for each sublayer.", S_PLACEMENT,
            _dec(style="pre")),
]


def _probe(cls):
    __tracebackhide__ = True
    torch.manual_seed(0)
    module = build_module("DecoderBlock", cls, (16, 4, 40, 0.1)).eval()
    decoder_parts(module, 16, 40)
    return module


@single_threaded
def check_decoder_block(cls) -> None:
    """``cls(d_model, n_heads, d_ff, dropout)``, ``forward(x [B, St, D], memory [B, Ss, D], src_mask=None)
    -> [B, St, D]``: Post-LN, causal self-attention, cross-attention to ``memory``, feed-forward."""
    __tracebackhide__ = True
    _probe(cls)
    compare_with_roles("DecoderBlock", _decoder_cases(cls), lambda m, x, mem, sm: m(x, mem, sm), _dec(),
                       DECODER_PITFALLS, _decoder_roles())


@single_threaded
def check_decoder_behaviour(cls) -> None:
    """Probes any right decoder block passes: the future never changes the past, the output reads the
    memory, masked source positions are invisible, eval mode is deterministic."""
    __tracebackhide__ = True
    title = "DecoderBlock behaviour"
    module = _probe(cls)
    device = get_device()
    x, memory = randn(2, 6, 16, seed=31, device=device), randn(2, 5, 16, seed=32, device=device)
    src_mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool, device=device)[:, None, None, :]

    def run(*args):
        with torch.no_grad():
            try:
                return module(*args)
            except Exception as exc:
                fail(title, f"your block raised {type(exc).__name__}: {exc}")

    base = run(x, memory, src_mask)
    if not torch.equal(base, run(x, memory, src_mask)):
        fail(title, "two calls in eval mode gave different outputs: dropout must be off in eval mode.", S_DECODER)
    if torch.allclose(run(x, memory + 1.0, src_mask), base, atol=1e-5):
        fail(title, "changing the encoder's output (memory) changed nothing: this looks like the pitfall "
                    f"'cross-attention taking keys/values from the decoder'. {_CROSS_FROM_DECODER}", S_DECODER)
    future = x.clone()
    future[:, 3:] = future[:, 3:] * 2.0 + 1.0
    if not torch.allclose(run(future, memory, src_mask)[:, :3], base[:, :3], atol=1e-5):
        fail(title, "changing target positions 3..5 changed the outputs at positions 0..2: the past sees the "
                    f"future. This looks like the pitfall 'decoder self-attention without the causal mask'. {_NO_CAUSAL}",
             S_DECODER)
    hidden = memory.clone()
    hidden[0, 3:] = 100.0  # masked source positions of sequence 0
    if not torch.allclose(run(x, hidden, src_mask), base, atol=1e-5):
        fail(title, "changing masked (padding) source positions changed the output: the cross-attention must "
                    "use src_mask.", S_DECODER)
    passed(title, "causal, reads the memory, ignores source padding, deterministic in eval mode")


@single_threaded
def check_decoder_by_hand(cls) -> None:
    """Hidden test: the learner wired the block, not PyTorch's TransformerDecoderLayer or the reference's."""
    __tracebackhide__ = True
    torch.manual_seed(0)
    blocks.check_block_not_delegated("DecoderBlock", build_module("DecoderBlock", cls, (16, 4, 40, 0.1)))


seal(__name__)
