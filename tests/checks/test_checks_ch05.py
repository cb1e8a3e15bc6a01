"""The chapter 5 checks, tested with banks of wrong implementations (each rejected with its named
diagnosis) and right ones written differently (each accepted)."""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from tformer_ref.attention import MultiHeadAttention
from tformer_grading.checks import CheckFailure, ch05
from tformer_grading.checks.ch05.decoder_block import decoder_parts, trace_block
from tformer_grading.checks.ch05.embed import embed_probe, fit_embed
from tformer_grading.checks.ch05.sinusoidal_encoding import (
    EXPECTED_LAYOUT,
    fit_problems,
    fit_sinusoids,
)

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


def pe_right_stack(
    n, d
):  # sin and cos stacked on a new last axis, then flattened (interleaves them)
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
    pe[:, 0::2], pe[:, 1::2] = (
        torch.sin(position * div_term),
        torch.cos(position * div_term),
    )
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
    pe[:, 0::2], pe[:, 1::2] = (
        torch.sin(position * div_term),
        torch.cos(position * div_term),
    )
    return pe


def pe_concat(n, d):  # [sin | cos]
    angle = torch.arange(n)[:, None] / torch.pow(10000.0, torch.arange(0, d, 2) / d)
    return torch.cat([angle.sin(), angle.cos()], dim=1)


def pe_from_one(n, d):  # positions 1..n
    return pe_right_div_term(n + 1, d)[1:]


def pe_zeros(n, d):  # the table allocated but never filled
    return torch.zeros(n, d)


@pytest.mark.parametrize("fn", [pe_right_div_term, pe_right_loops, pe_right_stack])
def test_sinusoidal_accepts_right_implementations(fn, capsys):
    ch05.check_sinusoidal_encoding(fn)
    ch05.check_by_hand("sinusoidal_encoding", fn, (10, 8))
    assert capsys.readouterr().out.count("✓ sinusoidal_encoding") == 2


@pytest.mark.parametrize(
    "fn,diagnosis",
    [
        (pe_swapped, "sin and cos swapped"),
        (pe_exponent_i, r"wrong frequencies \(exponent i/D, not 2i/D\)"),
        (pe_no_minus, r"wrong frequencies \(positions multiplied"),
        (pe_per_column, r"wrong frequencies \(one exponent per column\)"),
        (pe_no_log, r"wrong frequencies \(the base 10000 left out\)"),
        (pe_concat, "sin and cos concatenated, not interleaved"),
        (pe_from_one, "positions start at 1"),
        (pe_zeros, "your table is all zeros"),
    ],
)
def test_sinusoidal_rejects_wrong_implementations(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch05.check_sinusoidal_encoding(fn)


def test_sinusoidal_failure_points_to_the_lesson():
    with pytest.raises(CheckFailure) as info:
        ch05.check_sinusoidal_encoding(pe_swapped)
    assert (
        "§5.2 'Sinusoidal positional encoding' in book/ch05_model/lesson.ipynb"
        in str(info.value)
    )


def test_by_hand_rejects_the_reference():
    from tformer_ref.positions import sinusoidal_encoding

    with pytest.raises(CheckFailure, match="calls tformer_ref.sinusoidal_encoding"):
        ch05.check_by_hand(
            "sinusoidal_encoding", lambda n, d: sinusoidal_encoding(n, d), (10, 8)
        )


# --------------------------------------------------------------------------- embed


def embed_right(tokens, table, pe):
    return table(tokens) * math.sqrt(table.embedding_dim) + pe[: tokens.size(1)]


def embed_right_functional(
    tokens, table, pe
):  # F.embedding, d from pe, positions broadcast by unsqueeze
    d = pe.size(-1)
    return F.embedding(tokens, table.weight) * d**0.5 + pe[: tokens.shape[1]].unsqueeze(
        0
    )


def embed_right_arange(tokens, table, pe):  # positions looked up with arange
    positions = torch.arange(tokens.size(1), device=tokens.device).expand_as(tokens)
    return table(tokens).mul(math.sqrt(pe.size(1))).add(pe[positions])


@pytest.mark.parametrize(
    "fn", [embed_right, embed_right_functional, embed_right_arange]
)
def test_embed_accepts_right_implementations(fn, capsys):
    ch05.check_embed(fn)
    assert "✓ embed" in capsys.readouterr().out


def embed_unscaled(tokens, table, pe):  # the √d_model scale forgotten
    seq_len = tokens.shape[1]
    return table(tokens) + pe[:seq_len]


def embed_times_d(tokens, table, pe):  # scaled by d_model instead of its square root
    return table(tokens) * pe.shape[-1] + pe[: tokens.shape[-1]]


def embed_divided(tokens, table, pe):  # divided by √d_model instead of multiplied
    return table(tokens) / math.sqrt(table.weight.size(1)) + pe[: tokens.size(1)]


def embed_positions_scaled(tokens, table, pe):  # the sum scaled, positions included
    x = table(tokens) + pe[: tokens.size(1)].unsqueeze(0)
    return x * math.sqrt(x.size(-1))


def embed_by_token_id(tokens, table, pe):  # pe rows picked by token id, not by position
    scale = table.embedding_dim**0.5
    return F.embedding(tokens, table.weight) * scale + F.embedding(tokens, pe)


def embed_no_positions(tokens, table, pe):  # the positional encoding never added
    return table(tokens) * math.sqrt(table.embedding_dim)


@pytest.mark.parametrize(
    "fn,diagnosis",
    [
        (embed_unscaled, "missing √d_model embedding scale"),
        (embed_times_d, r"scaled by d_model, not √d_model"),
        (embed_divided, r"divided by √d_model"),
        (embed_positions_scaled, "positions scaled too"),
        (embed_by_token_id, "positions looked up by token id"),
        (embed_no_positions, "no positional encoding is added"),
    ],
)
def test_embed_rejects_wrong_implementations(fn, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch05.check_embed(fn)


# --------------------------------------------------------------------------- DecoderBlock


class FF(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_model, d_ff),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(d_ff, d_model),
        )

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
        x = self.ln_self(
            x + drop(self.masked(x, mask=causal_mask(x.size(1), x.device)))
        )
        x = self.ln_cross(x + drop(self.enc_dec(x, memory, memory, src_mask)))
        return self.ln_ff(x + drop(self.w2(torch.relu(self.w1(x)))))


class DecNoCausal(Dec):  # self-attention unmasked
    def self_mask(self, x):
        return None


class DecTriu(Dec):  # mask the wrong triangle
    def self_mask(self, x):
        s = x.size(1)
        return torch.ones(s, s, dtype=torch.bool).triu()[None, None]


class DecCrossFromDecoder(
    Dec
):  # the seed passes (value, key, query) in the wrong slots
    def cross(self, x, memory, src_mask):
        return self.cross_attn(x, x, x)


class DecCrossFromDecoderMasked(Dec):  # keys/values from x, with the source mask
    def cross(self, x, memory, src_mask):
        return self.cross_attn(x, x, x, mask=src_mask)


class DecNoSrcMask(Dec):  # the source padding mask never passed on
    def cross(self, x, memory, src_mask):
        return self.cross_attn(x, memory, memory)


class DecNoResidual(Dec):  # no "x +" in any of the three sublayers
    def forward(self, x, memory, src_mask=None):
        x = self.norm1(self.drop(self.self_attn(x, x, x, mask=self.self_mask(x))))
        x = self.norm2(self.drop(self.cross(x, memory, src_mask)))
        return self.norm3(self.drop(self.ff(x)))


class DecPreLN(Dec):  # Pre-LN where the exercise asks for Post-LN
    def forward(self, x, memory, src_mask=None):
        h = self.norm1(x)
        x = x + self.drop(self.self_attn(h, h, h, mask=self.self_mask(h)))
        x = x + self.drop(self.cross(self.norm2(x), memory, src_mask))
        return x + self.drop(self.ff(self.norm3(x)))


class DecCrossFirst(Dec):  # cross-attention runs before the masked self-attention
    def forward(self, x, memory, src_mask=None):
        x = self.norm1(x + self.drop(self.cross(x, memory, src_mask)))
        x = self.norm2(x + self.drop(self.self_attn(x, x, x, mask=self.self_mask(x))))
        return self.norm3(x + self.drop(self.ff(x)))


class DecWrapsTorch(nn.Module):  # PyTorch's layer does the work
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.layer = nn.TransformerDecoderLayer(
            d_model, n_heads, d_ff, dropout, batch_first=True
        )

    def forward(self, x, memory, src_mask=None):
        s = x.size(1)
        return self.layer(
            x, memory, tgt_mask=~torch.ones(s, s, dtype=torch.bool).tril()
        )


class DecModuleLists(nn.Module):
    """Right: both attentions in one ModuleList (cross-attention first) and the norms in
    another, no biases in the self-attention nor in the feed-forward's first layer, one
    nn.Dropout, the causal mask as the complement of the strict upper triangle."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.attns = nn.ModuleList(
            [
                MultiHeadAttention(d_model, n_heads, dropout),
                MultiHeadAttention(d_model, n_heads, bias=False),
            ]
        )
        self.lns = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(3))
        self.up = nn.Linear(d_model, d_ff, bias=False)
        self.down = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None):
        cross, masked = self.attns
        s = x.size(1)
        ones = torch.ones(s, s, dtype=torch.bool, device=x.device)
        future = torch.triu(ones, diagonal=1)
        x = self.lns[0](x + self.dropout(masked(x, x, x, mask=~future[None, None])))
        x = self.lns[1](x + self.dropout(cross(x, memory, memory, mask=src_mask)))
        return self.lns[2](x + self.dropout(self.down(F.relu(self.up(x)))))


class DecBatchNorm(Dec):  # BatchNorm over each feature instead of LayerNorm
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__(d_model, n_heads, d_ff, dropout)
        self.norm1, self.norm2, self.norm3 = (BatchNormBSD(d_model) for _ in range(3))


class BatchNormBSD(nn.BatchNorm1d):
    """BatchNorm1d on [B, S, D]: it wants the features on axis 1."""

    def forward(self, x):
        return super().forward(x.permute(0, 2, 1)).permute(0, 2, 1)


class DecDropoutInEval(Dec):  # dropout applied whatever the mode
    def forward(self, x, memory, src_mask=None):
        return F.dropout(super().forward(x, memory, src_mask), 0.3, training=True)


RIGHT = [Dec, DecReordered, DecModuleLists]


@pytest.mark.parametrize("cls", RIGHT)
def test_decoder_block_accepts_right_implementations(cls, capsys):
    ch05.check_decoder_block(cls)
    ch05.check_decoder_behaviour(cls)
    ch05.check_decoder_by_hand(cls)
    assert capsys.readouterr().out.count("✓ DecoderBlock") == 3


@pytest.mark.parametrize(
    "cls,diagnosis",
    [
        (DecNoCausal, "decoder self-attention without the causal mask"),
        (DecTriu, "causal mask built with triu instead of tril"),
        (DecCrossFromDecoder, "cross-attention taking keys/values from the decoder"),
        (DecNoSrcMask, "cross-attention ignores the source padding mask"),
        (DecNoResidual, "missing residual"),
        (DecPreLN, r"LayerNorm in the wrong place \(Pre-LN where Post-LN was asked\)"),
        (DecCrossFirst, "cross-attention before self-attention"),
        (DecBatchNorm, "BatchNorm instead of LayerNorm"),
    ],
)
def test_decoder_block_rejects_wrong_implementations(cls, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch05.check_decoder_block(cls)


@pytest.mark.parametrize(
    "cls,diagnosis",
    [
        (DecNoCausal, "decoder self-attention without the causal mask"),
        (DecTriu, "decoder self-attention without the causal mask"),
        (DecCrossFromDecoder, "cross-attention taking keys/values from the decoder"),
        (DecNoSrcMask, "cross-attention ignores the source padding mask"),
        (DecDropoutInEval, "dropout still on in eval mode"),
    ],
)
def test_decoder_behaviour_rejects(cls, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch05.check_decoder_behaviour(cls)


def test_decoder_by_hand_rejects_pytorchs_layer():
    with pytest.raises(
        CheckFailure,
        match="contains torch.nn.modules.transformer.TransformerDecoderLayer",
    ):
        ch05.check_decoder_by_hand(DecWrapsTorch)


def test_checks_write_nothing_to_stderr(capfd):
    ch05.check_decoder_block(Dec)
    with pytest.raises(CheckFailure):
        ch05.check_decoder_block(DecCrossFromDecoderMasked)
    with pytest.raises(CheckFailure):
        ch05.check_sinusoidal_encoding(pe_swapped)
    assert capfd.readouterr().err == ""


# ------------------------------------------------------------------------ measurements


def test_fit_reads_the_parameters_of_a_table():
    fit = fit_sinusoids(pe_right_div_term(64, 16))
    assert fit.layout == EXPECTED_LAYOUT and fit_problems(fit, 16, 64) == []
    wrong = fit_sinusoids(pe_from_one(64, 16) * 2)
    problems = " ".join(fit_problems(wrong, 16, 64))
    assert "row 0 is position 1" in problems and "amplitude 2" in problems


def test_embed_fit_reads_scale_and_rows():
    tokens, table, pe = embed_probe(0)()
    got = table(tokens) * 3.0 + pe[1 : tokens.size(1) + 1]
    fit = fit_embed(got, tokens, table, pe)
    assert abs(fit.scale - 3.0) < 1e-4 and fit.rows == tuple(range(1, 7))
    assert abs(fit.pos_scale - 1.0) < 1e-4 and fit.shared


def test_decoder_trace_removes_its_hooks():
    torch.manual_seed(0)
    module = Dec(16, 4, 32).eval()
    parts = decoder_parts(module, 16, 32)
    x, memory = torch.randn(2, 5, 16), torch.randn(2, 3, 16)
    out, calls = trace_block(module, parts, x, memory, None)
    kinds = [c.kind for c in calls]
    assert kinds == ["attn", "norm", "attn", "norm", "ff1", "ff2", "norm"]
    assert all(not m._forward_hooks for m in module.modules())


def test_decoder_trace_names_the_first_stage_that_departs():
    with pytest.raises(CheckFailure, match=r"reads 1·x \+ 0\.5·self-attention"):
        ch05.check_decoder_block(DecHalfResidual)


class DecHalfResidual(Dec):  # the self-attention's output halved "for stability"
    def forward(self, x, memory, src_mask=None):
        x = self.norm1(x + 0.5 * self.self_attn(x, x, x, mask=self.self_mask(x)))
        x = self.norm2(x + self.drop(self.cross(x, memory, src_mask)))
        return self.norm3(x + self.drop(self.ff(x)))
