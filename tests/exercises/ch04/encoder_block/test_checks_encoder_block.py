"""encoder_block (chapter 4, book/ch04_blocks): the unit tests of
``ch04.check_encoder_block`` (Post-LN and Pre-LN), ``check_dropout_placement``,
``check_block_behaviour`` and the hidden ``check_block_by_hand``, with wrong blocks
(each rejected with its named diagnosis) and right ones written differently (each
accepted). Each wrong one says in a comment what bug it is.

Beyond the bank (bank_encoder_block.py): the lesson a failure points to (§4.1), the
seed's dropout invisible in eval mode (why a separate probe is needed), missing parts
and a constructor that raises reported clearly, delegation to PyTorch's or the course's
block, and silence on stderr (nbgrader gives a test cell zero when it writes there).
"""

import pytest
import torch
import torch.nn.functional as F
from bank_encoder_block import TransposedBN as TransposedBatchNorm
from torch import nn
from units_ch04 import FF

from tformer_grading.checks import CheckFailure, ch04
from tformer_ref.attention import MultiHeadAttention

# --------------------------------------------------------------------------- EncoderBlock


class Block(nn.Module):
    """A right block; the wrong ones below override one of its sublayer wirings."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FF(d_model, d_ff, dropout)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.drop1, self.drop2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def sub(self, x, f, norm, drop):
        if self.norm_first:
            return x + drop(f(norm(x)))
        return norm(x + drop(f(x)))

    def forward(self, x, mask=None):
        x = self.sub(x, lambda h: self.attn(h, h, h, mask=mask), self.norm1, self.drop1)
        return self.sub(x, self.ff, self.norm2, self.drop2)


class SublayerConnection(nn.Module):
    """The Annotated Transformer's helper: norm and dropout in one module."""

    def __init__(self, d_model, dropout, norm_first):
        super().__init__()
        self.norm, self.dropout, self.norm_first = (
            nn.LayerNorm(d_model),
            dropout,
            norm_first,
        )

    def forward(self, x, f):
        if self.norm_first:
            return x + F.dropout(f(self.norm(x)), self.dropout, self.training)
        return self.norm(x + F.dropout(f(x), self.dropout, self.training))


class BlockWithHelpers(nn.Module):
    """Sublayer helpers, the feed-forward's norm registered first, a fused-attention MHA;
    wrong since the text asks for MultiHeadAttention(..., dropout=dropout)."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.ff_sub = SublayerConnection(d_model, dropout, norm_first)
        self.attn_sub = SublayerConnection(d_model, dropout, norm_first)
        self.ffn = nn.Sequential(
            nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model)
        )
        self.mha = MultiHeadAttention(d_model, n_heads, fused=True)

    def forward(self, x, mask=None):
        x = self.attn_sub(x, lambda h: self.mha(h, mask=mask))
        return self.ff_sub(x, self.ffn)


class BlockOneDropout(Block):
    """Right: one Dropout module shared by both sublayers, Pre-LN and Post-LN written out."""

    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.drop1(self.attn(h, h, h, mask))
            return x + self.drop1(self.ff(self.norm2(x)))
        x = self.norm1(x + self.drop1(self.attn(x, x, x, mask)))
        return self.norm2(x + self.drop1(self.ff(x)))


class BlockReversed(nn.Module):
    """Right: the feed-forward and its norm registered before the attention, the norms
    in one ModuleList (the feed-forward's first), no biases in the attention nor in the
    feed-forward's output layer, dropout through F.dropout."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.pre = norm_first
        self.expand = nn.Linear(d_model, d_ff)
        self.contract = nn.Linear(d_ff, d_model, bias=False)
        self.lns = nn.ModuleList([nn.LayerNorm(d_model), nn.LayerNorm(d_model)])
        self.attention = MultiHeadAttention(d_model, n_heads, dropout, bias=False)
        self.p = dropout

    def forward(self, x, mask=None):
        ln_ff, ln_attn = self.lns
        drop = lambda t: F.dropout(t, self.p, self.training)
        feed = lambda t: self.contract(F.relu(self.expand(t)))
        if self.pre:
            y = ln_attn(x)
            x = x + drop(self.attention(y, y, y, mask=mask))
            return x + drop(feed(ln_ff(x)))
        x = ln_attn(x + drop(self.attention(x, x, x, mask=mask)))
        return ln_ff(x + drop(feed(x)))


class WrongNoResidual(Block):  # forgot "x +"
    def sub(self, x, f, norm, drop):
        return drop(f(norm(x))) if self.norm_first else norm(drop(f(x)))


class WrongNoResidualAroundFF(Block):  # residual only around attention
    def forward(self, x, mask=None):
        x = self.sub(x, lambda h: self.attn(h, h, h, mask=mask), self.norm1, self.drop1)
        return (
            self.drop2(self.ff(self.norm2(x)))
            if self.norm_first
            else self.norm2(self.drop2(self.ff(x)))
        )


class WrongNoResidualAroundAttention(Block):  # attention output replaces the stream
    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = self.drop1(self.attn(h, h, h, mask=mask))
        else:
            x = self.norm1(self.drop1(self.attn(x, x, x, mask=mask)))
        return self.sub(x, self.ff, self.norm2, self.drop2)


class WrongAlwaysPreLN(Block):  # norm_first ignored: always Pre-LN
    def sub(self, x, f, norm, drop):
        return x + drop(f(norm(x)))


class WrongAlwaysPostLN(Block):  # norm_first ignored: always Post-LN
    def sub(self, x, f, norm, drop):
        return norm(x + drop(f(x)))


class WrongNormOnSublayer(Block):  # x + LN(sublayer(x))
    def sub(self, x, f, norm, drop):
        return x + norm(drop(f(x)))


class WrongNormedStream(Block):  # Pre-LN that overwrites the stream with its norm
    def sub(self, x, f, norm, drop):
        if self.norm_first:
            x = norm(x)
            return x + drop(f(x))
        return norm(x + drop(f(x)))


class WrongNormThenAdd(Block):  # norm_first ignored: LN(x) + f(LN(x)) everywhere
    def sub(self, x, f, norm, drop):
        y = norm(x)
        return y + drop(f(y))


class WrongSeedDropout(Block):  # the seed's x = dropout(norm(attn + x))
    def sub(self, x, f, norm, drop):
        if self.norm_first:
            return x + drop(f(norm(x)))
        return drop(norm(x + f(x)))


class WrongPreLNDropsTheNormedInput(Block):  # Pre-LN: dropout on LN(x), not on f(...)
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        self.ff = FF(d_model, d_ff)  # no hidden dropout in this one's feed-forward

    def sub(self, x, f, norm, drop):
        if self.norm_first:
            return x + f(drop(norm(x)))
        return norm(x + drop(f(x)))


class WrongPreLNDropoutOnSum(Block):  # Pre-LN: dropout(x + f(LN(x))), residual dropped
    def sub(self, x, f, norm, drop):
        if self.norm_first:
            return drop(x + f(norm(x)))
        return norm(x + drop(f(x)))


class WrongDropoutOnSum(Block):  # norm(dropout(x + f(x)))
    def sub(self, x, f, norm, drop):
        if self.norm_first:
            return x + drop(f(norm(x)))
        return norm(drop(x + f(x)))


class WrongNoDropout(Block):  # dropout argument never used on sublayer outputs
    def sub(self, x, f, norm, drop):
        return x + f(norm(x)) if self.norm_first else norm(x + f(x))


class WrongDropoutOnlyInFF(
    nn.Module
):  # the only dropout: the feed-forward's hidden one
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ff = FF(d_model, d_ff, dropout)
        self.n1, self.n2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.n1(x)
            x = x + self.attn(h, h, h, mask=mask)
            return x + self.ff(self.n2(x))
        x = self.n1(x + self.attn(x, x, x, mask=mask))
        return self.n2(x + self.ff(x))


class WrongBatchNorm(Block):  # the seed's first attempt: BatchNorm over each feature
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        self.norm1, self.norm2 = (
            TransposedBatchNorm(d_model),
            TransposedBatchNorm(d_model),
        )


class HandBatchNorm(nn.Module):
    """A hand-written batch norm: statistics over batch and positions, per feature."""

    def __init__(self, d):
        super().__init__()
        self.weight, self.bias = (
            nn.Parameter(torch.ones(d)),
            nn.Parameter(torch.zeros(d)),
        )

    def forward(self, x):
        mean, var = x.mean(dim=(0, 1)), x.var(dim=(0, 1), unbiased=False)
        return (x - mean) / torch.sqrt(var + 1e-5) * self.weight + self.bias


class WrongHandBatchNorm(Block):  # batch statistics, written by hand (no nn.LayerNorm)
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        self.norm1, self.norm2 = HandBatchNorm(d_model), HandBatchNorm(d_model)


class WrongIgnoresMask(Block):  # mask never reaches the attention
    def forward(self, x, mask=None):
        return super().forward(x, None)


class WrongDropoutAlwaysOn(Block):  # F.dropout without training=self.training
    def forward(self, x, mask=None):
        return F.dropout(
            super().forward(x, mask), 0.5 if self.drop1.p else 0.0, training=True
        )


class WrongDropoutRateTyped(Block):  # the paper's 0.1, whatever the block is given
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        self.drop1, self.drop2 = nn.Dropout(0.1), nn.Dropout(0.1)


class WrongDropoutKeepRate(Block):  # "dropout" read as the share to keep
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        self.drop1, self.drop2 = nn.Dropout(1 - dropout), nn.Dropout(1 - dropout)


class WrongSequenceFirst(Block):  # transposed to [S, B, D] "as nn.Transformer wants"
    def forward(self, x, mask=None):
        x = x.transpose(0, 1)
        x = self.sub(x, lambda h: self.attn(h, h, h), self.norm1, self.drop1)
        return self.sub(x, self.ff, self.norm2, self.drop2).transpose(0, 1)


class WrongWrapsTorch(nn.Module):  # PyTorch's layer does the work
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(
            d_model, n_heads, d_ff, dropout, batch_first=True, norm_first=norm_first
        )

    def forward(self, x, mask=None):
        return self.layer(
            x, src_key_padding_mask=None if mask is None else ~mask[:, 0, 0]
        )


class WrongWrapsReference(nn.Module):  # the course's own block does the work
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        from tformer_ref.blocks import EncoderBlock

        self.inner = EncoderBlock(d_model, n_heads, d_ff, dropout, norm_first)

    def forward(self, x, mask=None):
        return self.inner(x, mask)


RIGHT = [Block, BlockOneDropout, BlockReversed]


@pytest.mark.parametrize("cls", RIGHT)
def test_encoder_block_accepts_right_implementations(cls, capsys):
    ch04.check_encoder_block(cls, norm_first=False)
    ch04.check_encoder_block(cls, norm_first=True)
    ch04.check_dropout_placement(cls)
    ch04.check_block_behaviour(cls)
    ch04.check_block_by_hand(cls)
    out = capsys.readouterr().out
    assert out.count("✓ EncoderBlock") == 5


@pytest.mark.parametrize(
    "cls,norm_first,diagnosis",
    [
        (WrongNoResidual, False, "'missing residual'"),
        (WrongNoResidual, True, "'missing residual'"),
        (
            WrongNoResidualAroundFF,
            False,
            r"missing residual \(around the feed-forward\)",
        ),
        (
            WrongNoResidualAroundFF,
            True,
            r"missing residual \(around the feed-forward\)",
        ),
        (
            WrongNoResidualAroundAttention,
            False,
            r"missing residual \(around the attention",
        ),
        (
            WrongNoResidualAroundAttention,
            True,
            r"missing residual \(around the attention",
        ),
        (
            WrongAlwaysPreLN,
            False,
            r"LayerNorm in the wrong place \(Pre-LN where Post-LN was asked\)",
        ),
        (
            WrongAlwaysPostLN,
            True,
            r"LayerNorm in the wrong place \(Post-LN where Pre-LN was asked\)",
        ),
        (
            WrongNormOnSublayer,
            False,
            r"LayerNorm in the wrong place \(x \+ LayerNorm\(sublayer\)\)",
        ),
        (
            WrongNormOnSublayer,
            True,
            r"LayerNorm in the wrong place \(x \+ LayerNorm\(sublayer\)\)",
        ),
        (
            WrongNormedStream,
            True,
            r"LayerNorm in the wrong place \(the residual stream normalised\)",
        ),
        (WrongNormThenAdd, False, r"the residual stream normalised"),
        (WrongBatchNorm, False, "BatchNorm instead of LayerNorm"),
        (WrongHandBatchNorm, False, "BatchNorm instead of LayerNorm"),
        (WrongIgnoresMask, False, "the mask does not reach the attention"),
    ],
)
def test_encoder_block_rejects_wrong_implementations(cls, norm_first, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch04.check_encoder_block(cls, norm_first=norm_first)


def test_block_failure_points_to_the_lesson():
    with pytest.raises(CheckFailure) as info:
        ch04.check_encoder_block(WrongNoResidual)
    assert "§4.1 'Residual connections' in book/ch04_blocks/lesson.ipynb" in str(
        info.value
    )


@pytest.mark.parametrize(
    "cls,diagnosis",
    [
        (WrongSeedDropout, r"dropout after the norm \(the seed's block\)"),
        (WrongDropoutOnSum, "dropout on the residual sum"),
        (WrongNoDropout, "no dropout on the sublayer outputs"),
        (WrongDropoutOnlyInFF, r"sublayer outputs \(only inside the feed-forward\)"),
        (WrongPreLNDropsTheNormedInput, r"dropout after the norm \(the seed's block\)"),
        (WrongPreLNDropoutOnSum, "dropout on the residual sum"),
        # The text asks for MultiHeadAttention(d_model, n_heads, dropout=dropout).
        (BlockWithHelpers, r"attention's dropout is not the block's rate.*at p = 0\b"),
    ],
)
def test_dropout_placement_rejects_wrong_implementations(cls, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch04.check_dropout_placement(cls)


def test_the_seeds_dropout_is_invisible_in_eval_mode():
    """Why a separate probe is needed: in eval mode the seed's block equals the right one."""
    ch04.check_encoder_block(WrongSeedDropout, norm_first=False)


@pytest.mark.parametrize(
    "cls,diagnosis",
    [
        (WrongBatchNorm, "BatchNorm instead of LayerNorm"),
        (WrongHandBatchNorm, "BatchNorm instead of LayerNorm"),
        (WrongIgnoresMask, "padding changes the real tokens"),
        (WrongDropoutAlwaysOn, "dropout still on in eval mode"),
        # Bug these guard against: each was named 'BatchNorm instead of LayerNorm'
        # (held-out trial, issue 26): randomness, or rows mixed by attention, made
        # sequence 0 look batch-dependent.
        (WrongDropoutRateTyped, "'random in train mode at dropout 0'"),
        (WrongDropoutKeepRate, "'train and eval mode differ at dropout 0'"),
        (WrongSequenceFirst, "'the sequences of a batch mix'.*positions of the other"),
    ],
)
def test_behaviour_rejects(cls, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch04.check_block_behaviour(cls)


@pytest.mark.parametrize(
    "cls,diagnosis",
    [
        (
            WrongWrapsTorch,
            "contains torch.nn.modules.transformer.TransformerEncoderLayer",
        ),
        (WrongWrapsReference, "contains tformer_ref.blocks.EncoderBlock"),
    ],
)
def test_by_hand_rejects_delegation(cls, diagnosis):
    with pytest.raises(CheckFailure, match=diagnosis):
        ch04.check_block_by_hand(cls)


def test_missing_parts_are_reported_clearly():
    class TorchAttention(Block):
        def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
            super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
            self.attn = nn.MultiheadAttention(d_model, n_heads, batch_first=True)

    class Broken(nn.Module):
        def __init__(self, *args):
            raise NotImplementedError()

    with pytest.raises(CheckFailure, match="found 0.*MultiheadAttention"):
        ch04.check_encoder_block(TorchAttention)
    with pytest.raises(CheckFailure, match="raised NotImplementedError"):
        ch04.check_encoder_block(Broken)


def test_checks_write_nothing_to_stderr(capfd):
    ch04.check_encoder_block(Block)
    ch04.check_block_behaviour(Block)
    with pytest.raises(CheckFailure):
        ch04.check_dropout_placement(WrongSeedDropout)
    with pytest.raises(CheckFailure):
        ch04.check_block_behaviour(WrongBatchNorm)
    assert capfd.readouterr().err == ""
