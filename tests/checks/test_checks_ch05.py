"""The chapter 5 checks, tested with banks of wrong implementations (each rejected with its named
diagnosis) and right ones written differently (each accepted)."""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from tformer_ref.attention import MultiHeadAttention
from tformer_grading.checks import CheckFailure, ch05

# --------------------------------------------------------------------------- sinusoidal_encoding


def pe_right_div_term(n, d):  # the seed's PositionalEncoding, the usual way
    pe = torch.zeros(n, d)
    position = torch.arange(0, n, dtype=torch.float).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d, 2).float() * (-math.log(10000.0) / d))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def pe_right_loops(n, d):  # straight from the formula, in float64
    pe = torch.zeros(n, d, dtype=torch.float64)
    for pos in range(n):
        for i in range(d // 2):
            pe[pos, 2 * i] = math.sin(pos / 10000 ** (2 * i / d))
            pe[pos, 2 * i + 1] = math.cos(pos / 10000 ** (2 * i / d))
    return pe


def pe_right_stack(n, d):  # sin and cos stacked on a new last axis, then flattened (interleaves them)
    angle = torch.arange(n)[:, None] / torch.pow(10000.0, torch.arange(0, d, 2) / d)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)


def pe_swapped(n, d):  # cos in the even columns
    pe = pe_right_div_term(n, d)
    return pe.view(n, d // 2, 2).flip(-1).reshape(n, d)


def pe_exponent_i(n, d):  # 10000^(i/d) with i the pair index
    angle = torch.arange(n)[:, None] / torch.pow(10000.0, torch.arange(d // 2) / d)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)


def pe_no_minus(n, d):  # div_term without the minus sign
    position = torch.arange(n, dtype=torch.float).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d, 2).float() * (math.log(10000.0) / d))
    pe = torch.zeros(n, d)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(position * div_term), torch.cos(position * div_term)
    return pe


def pe_per_column(n, d):  # every column its own exponent j/d
    angle = torch.arange(n)[:, None] / torch.pow(10000.0, torch.arange(d) / d)
    pe = angle.clone()
    pe[:, 0::2], pe[:, 1::2] = angle[:, 0::2].sin(), angle[:, 1::2].cos()
    return pe


def pe_no_log(n, d):  # forgot math.log(10000.0)
    position = torch.arange(n, dtype=torch.float).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d, 2).float() * (-1.0 / d))
    pe = torch.zeros(n, d)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(position * div_term), torch.cos(position * div_term)
    return pe


def pe_concat(n, d):  # [sin | cos]
    angle = torch.arange(n)[:, None] / torch.pow(10000.0, torch.arange(0, d, 2) / d)
    return torch.cat([angle.sin(), angle.cos()], dim=1)


def pe_from_one(n, d):  # positions 1..n
    return pe_right_div_term(n + 1, d)[1:]


@pytest.mark.parametrize("fn", [pe_right_div_term, pe_right_loops, pe_right_stack])
def test_sinusoidal_accepts_right_implementations(fn, capsys):
    ch05.check_sinusoidal_encoding(fn)
    ch05.check_by_hand("sinusoidal_encoding", fn, (10, 8))
    assert capsys.readouterr().out.count("✓ sinusoidal_encoding") == 2


@pytest.mark.parametrize("fn,diagnosis", [
    (pe_swapped, "sin and cos swapped"),
    (pe_exponent_i, r"wrong frequencies \(exponent i/D, not 2i/D\)"),
    (pe_no_minus, r"wrong frequencies \(positions multiplied"),
    (pe_per_column, r"wrong frequencies \(one exponent per column\)"),
    (pe_no_log, r"wrong frequencies \(the base 10000 left out\)"),
    (pe_concat, "sin and cos concatenated, not interleaved"),
    (pe_from_one, "positions start at 1"),
    (lambda n, d: torch.zeros(n, d), "matches none of the known pitfalls"),
])
def test_sinusoidal_rejects_wrong_implementations(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch05.check_sinusoidal_encoding(fn)


def test_sinusoidal_failure_points_to_the_lesson():
    with pytest.raises(CheckFailure) as info:
        ch05.check_sinusoidal_encoding(pe_swapped)
    assert "§5.2 'Sinusoidal positional encoding' in book/ch05_model/lesson.ipynb" in str(info.value)


def test_by_hand_rejects_the_reference():
    from tformer_ref.positions import sinusoidal_encoding

    with pytest.raises(CheckFailure, match="calls tformer_ref.sinusoidal_encoding"):
        ch05.check_by_hand("sinusoidal_encoding", lambda n, d: sinusoidal_encoding(n, d), (10, 8))


# --------------------------------------------------------------------------- embed


def embed_right(tokens, table, pe):
    return table(tokens) * math.sqrt(table.embedding_dim) + pe[: tokens.size(1)]


def embed_right_functional(tokens, table, pe):  # F.embedding, d from pe, positions broadcast by unsqueeze
    d = pe.size(-1)
    return F.embedding(tokens, table.weight) * d ** 0.5 + pe[: tokens.shape[1]].unsqueeze(0)


def embed_right_arange(tokens, table, pe):  # positions looked up with arange
    positions = torch.arange(tokens.size(1), device=tokens.device).expand_as(tokens)
    return table(tokens).mul(math.sqrt(pe.size(1))).add(pe[positions])


@pytest.mark.parametrize("fn", [embed_right, embed_right_functional, embed_right_arange])
def test_embed_accepts_right_implementations(fn, capsys):
    ch05.check_embed(fn)
    assert "✓ embed" in capsys.readouterr().out


@pytest.mark.parametrize("fn,diagnosis", [
    (lambda t, e, p: e(t) + p[: t.size(1)], "missing √d_model embedding scale"),  # no scale
    (lambda t, e, p: e(t) * e.embedding_dim + p[: t.size(1)], r"scaled by d_model, not √d_model"),
    (lambda t, e, p: e(t) / math.sqrt(e.embedding_dim) + p[: t.size(1)], r"divided by √d_model"),
    (lambda t, e, p: (e(t) + p[: t.size(1)]) * math.sqrt(e.embedding_dim), "positions scaled too"),
    (lambda t, e, p: e(t) * math.sqrt(e.embedding_dim) + p[t], "positions looked up by token id"),
    (lambda t, e, p: e(t) * math.sqrt(e.embedding_dim), "matches none of the known pitfalls"),  # no positions
])
def test_embed_rejects_wrong_implementations(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch05.check_embed(fn)


# --------------------------------------------------------------------------- DecoderBlock


class FF(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model))

    def forward(self, x):
        return self.net(x)


class Dec(nn.Module):
    """A right decoder block; the wrong ones override one step."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FF(d_model, d_ff, dropout)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.drop = nn.Dropout(dropout)

    def self_mask(self, x):
        s = x.size(1)
        return torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]

    def cross(self, x, memory, src_mask):
        return self.cross_attn(x, memory, memory, mask=src_mask)

    def forward(self, x, memory, src_mask=None):
        x = self.norm1(x + self.drop(self.self_attn(x, x, x, mask=self.self_mask(x))))
        x = self.norm2(x + self.drop(self.cross(x, memory, src_mask)))
        return self.norm3(x + self.drop(self.ff(x)))


class DecReordered(nn.Module):
    """Right: cross-attention and the last norm registered first, the causal mask from the package."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.ln_ff = nn.LayerNorm(d_model)
        self.enc_dec = MultiHeadAttention(d_model, n_heads, fused=True)
        self.masked = MultiHeadAttention(d_model, n_heads)
        self.ln_self, self.ln_cross = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.w1, self.w2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.p = dropout

    def forward(self, x, memory, src_mask=None):
        from tformer_ref.masks import causal_mask

        drop = lambda t: F.dropout(t, self.p, self.training)  # noqa: E731
        x = self.ln_self(x + drop(self.masked(x, mask=causal_mask(x.size(1), x.device))))
        x = self.ln_cross(x + drop(self.enc_dec(x, memory, memory, src_mask)))
        return self.ln_ff(x + drop(self.w2(torch.relu(self.w1(x)))))


class DecNoCausal(Dec):  # self-attention unmasked
    def self_mask(self, x):
        return None


class DecTriu(Dec):  # mask the wrong triangle
    def self_mask(self, x):
        s = x.size(1)
        return torch.ones(s, s, dtype=torch.bool).triu()[None, None]


class DecCrossFromDecoder(Dec):  # the seed passes (value, key, query) in the wrong slots
    def cross(self, x, memory, src_mask):
        return self.cross_attn(x, x, x)


class DecCrossFromDecoderMasked(Dec):
    def cross(self, x, memory, src_mask):
        return self.cross_attn(x, x, x, mask=src_mask)


class DecNoSrcMask(Dec):
    def cross(self, x, memory, src_mask):
        return self.cross_attn(x, memory, memory)


class DecNoResidual(Dec):
    def forward(self, x, memory, src_mask=None):
        x = self.norm1(self.drop(self.self_attn(x, x, x, mask=self.self_mask(x))))
        x = self.norm2(self.drop(self.cross(x, memory, src_mask)))
        return self.norm3(self.drop(self.ff(x)))


class DecPreLN(Dec):
    def forward(self, x, memory, src_mask=None):
        h = self.norm1(x)
        x = x + self.drop(self.self_attn(h, h, h, mask=self.self_mask(h)))
        x = x + self.drop(self.cross(self.norm2(x), memory, src_mask))
        return x + self.drop(self.ff(self.norm3(x)))


class DecCrossFirst(Dec):
    def forward(self, x, memory, src_mask=None):
        x = self.norm1(x + self.drop(self.cross(x, memory, src_mask)))
        x = self.norm2(x + self.drop(self.self_attn(x, x, x, mask=self.self_mask(x))))
        return self.norm3(x + self.drop(self.ff(x)))


class DecWrapsTorch(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.layer = nn.TransformerDecoderLayer(d_model, n_heads, d_ff, dropout, batch_first=True)

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        return self.layer(x, memory, tgt_mask=~torch.ones(s, s, dtype=torch.bool).tril())


RIGHT = [Dec, DecReordered]


@pytest.mark.parametrize("cls", RIGHT)
def test_decoder_block_accepts_right_implementations(cls, capsys):
    ch05.check_decoder_block(cls)
    ch05.check_decoder_behaviour(cls)
    ch05.check_decoder_by_hand(cls)
    assert capsys.readouterr().out.count("✓ DecoderBlock") == 3


@pytest.mark.parametrize("cls,diagnosis", [
    (DecNoCausal, "decoder self-attention without the causal mask"),
    (DecTriu, "causal mask built with triu instead of tril"),
    (DecCrossFromDecoder, "cross-attention taking keys/values from the decoder"),
    (DecCrossFromDecoderMasked, "cross-attention taking keys/values from the decoder"),
    (DecNoSrcMask, "cross-attention ignores the source padding mask"),
    (DecNoResidual, "missing residual"),
    (DecPreLN, r"LayerNorm in the wrong place \(Pre-LN where Post-LN was asked\)"),
    (DecCrossFirst, "cross-attention before self-attention"),
])
def test_decoder_block_rejects_wrong_implementations(cls, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch05.check_decoder_block(cls)


@pytest.mark.parametrize("cls,diagnosis", [
    (DecNoCausal, "decoder self-attention without the causal mask"),
    (DecTriu, "decoder self-attention without the causal mask"),
    (DecCrossFromDecoder, "cross-attention taking keys/values from the decoder"),
    (DecNoSrcMask, "changing masked \\(padding\\) source positions"),
])
def test_decoder_behaviour_rejects(cls, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch05.check_decoder_behaviour(cls)


def test_decoder_by_hand_rejects_pytorchs_layer():
    with pytest.raises(CheckFailure, match="contains torch.nn.modules.transformer.TransformerDecoderLayer"):
        ch05.check_decoder_by_hand(DecWrapsTorch)


def test_checks_write_nothing_to_stderr(capfd):
    ch05.check_decoder_block(Dec)
    with pytest.raises(CheckFailure):
        ch05.check_decoder_block(DecCrossFromDecoderMasked)
    with pytest.raises(CheckFailure):
        ch05.check_sinusoidal_encoding(pe_swapped)
    assert capfd.readouterr().err == ""


def test_sections_named_by_the_checks_exist_in_the_lessons():
    """A failure sends the learner to '§N.k Title': that heading must exist in the lesson it names."""
    from pathlib import Path

    from tformer_grading.checks.diagnosis import Section

    root = Path(__file__).resolve().parents[2] / "nbsrc" / "book"
    sections = [v for v in vars(ch05).values() if isinstance(v, Section)]
    assert len(sections) == 11
    for section in sections:
        lesson = (root / section.chapter / "lesson.py").read_text()
        assert f"# ## {section.number} {section.title}\n" in lesson, section
