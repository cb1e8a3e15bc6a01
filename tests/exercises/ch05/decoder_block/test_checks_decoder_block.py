"""decoder_block (chapter 5, book/ch05_model): the unit tests of
``ch05.check_decoder_block``, ``check_decoder_behaviour`` and the hidden
``check_decoder_by_hand``, with wrong blocks (each rejected with its named diagnosis)
and right ones written differently (each accepted).

Beyond the bank (bank_decoder_block.py): PyTorch's decoder layer refused by the hidden
test, and the trace of a block's forward: it removes its hooks, and a failure names the
first stage that departs from the reference.
"""

import pytest
import torch
import torch.nn.functional as F
from bank_decoder_block import DecoderBlockModuleLists as DecModuleLists
from torch import nn
from units_ch05 import Dec

from tformer_grading.checks import CheckFailure, ch05
from tformer_grading.checks.ch05.decoder_block import decoder_parts, trace_block
from tformer_ref.attention import MultiHeadAttention

# --------------------------------------------------------------------------- DecoderBlock


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

        drop = lambda t: F.dropout(t, self.p, self.training)
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
