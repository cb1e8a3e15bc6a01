"""Chapter 4's measured bank for encoder_block (the format: tests/bank/bank.py)."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from bank import GENERIC, right, wrong  # noqa: F401
from exercise_cells import graders
from tformer_ref.attention import MultiHeadAttention

GRADERS = graders("ch04_blocks", {"encoder_block": "EncoderBlock"})


# ----------------------------------------------------------------- encoder_block, right
# The learner's FeedForward from the first answer cell, used by most blocks below.


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.linear2(self.dropout(torch.relu(self.linear1(x))))


@right("encoder_block")
class BlockSolution(nn.Module):  # the two wirings written out
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout1, self.dropout2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout1(self.self_attn(h, h, h, mask=mask))
            return x + self.dropout2(self.ff(self.norm2(x)))
        x = self.norm1(x + self.dropout1(self.self_attn(x, x, x, mask=mask)))
        return self.norm2(x + self.dropout2(self.ff(x)))


@right("encoder_block")
class BlockFunctionalNorm(nn.Module):  # F.layer_norm with its own gain and bias
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.pre = norm_first
        self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.g1 = nn.Parameter(torch.ones(d_model))
        self.b1 = nn.Parameter(torch.zeros(d_model))
        self.g2 = nn.Parameter(torch.ones(d_model))
        self.b2 = nn.Parameter(torch.zeros(d_model))
        self.p = dropout

    def ln(self, x, g, b):
        return F.layer_norm(x, (x.size(-1),), g, b)

    def forward(self, x, mask=None):
        drop = lambda t: F.dropout(t, self.p, self.training)  # noqa: E731
        if self.pre:
            h = self.ln(x, self.g1, self.b1)
            x = x + drop(self.attn(h, h, h, mask=mask))
            return x + drop(self.ff(self.ln(x, self.g2, self.b2)))
        x = self.ln(x + drop(self.attn(x, x, x, mask=mask)), self.g1, self.b1)
        return self.ln(x + drop(self.ff(x)), self.g2, self.b2)


class Residual(nn.Module):
    def __init__(self, d_model, dropout, norm_first):
        super().__init__()
        self.norm, self.drop = nn.LayerNorm(d_model), nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x, sublayer):
        if self.norm_first:
            return x + self.drop(sublayer(self.norm(x)))
        return self.norm(x + self.drop(sublayer(x)))


@right("encoder_block")
class BlockSublayerHelpers(nn.Module):  # Annotated-Transformer helpers, FF's first
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.ff_res = Residual(d_model, dropout, norm_first)
        self.attn_res = Residual(d_model, dropout, norm_first)
        self.ffn = nn.Sequential(
            nn.Linear(d_model, d_ff),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(d_ff, d_model),
        )
        self.mha = MultiHeadAttention(d_model, n_heads, dropout, fused=True)

    def forward(self, x, mask=None):
        x = self.attn_res(x, lambda h: self.mha(h, mask=mask))
        return self.ff_res(x, self.ffn)


@right("encoder_block")
class BlockModuleListNorms(nn.Module):  # norms in a list, the FF's first, no biases
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.up = nn.Linear(d_model, d_ff, bias=False)
        self.down = nn.Linear(d_ff, d_model, bias=False)
        self.norms = nn.ModuleList([nn.LayerNorm(d_model) for _ in range(2)])
        self.attention = MultiHeadAttention(d_model, n_heads, dropout, bias=False)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        ln_ff, ln_attn = self.norms
        feed = lambda t: self.down(F.relu(self.up(t)))  # noqa: E731
        if self.norm_first:
            y = ln_attn(x)
            x = x + self.drop(self.attention(y, y, y, mask=mask))
            return x + self.drop(feed(ln_ff(x)))
        x = ln_attn(x + self.drop(self.attention(x, x, x, mask=mask)))
        return ln_ff(x + self.drop(feed(x)))


@right("encoder_block")
class BlockTwoMethods(nn.Module):  # one method per arrangement, residual in a variable
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.ln_a, self.ln_b = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.do_a, self.do_b = nn.Dropout(dropout), nn.Dropout(dropout)
        self.norm_first = norm_first

    def post(self, x, mask):
        residual = x
        x = self.attn(x, x, x, mask=mask)
        x = self.ln_a(residual + self.do_a(x))
        residual = x
        return self.ln_b(residual + self.do_b(self.ff(x)))

    def pre(self, x, mask):
        residual = x
        x = self.ln_a(x)
        x = residual + self.do_a(self.attn(x, x, x, mask))
        residual = x
        return residual + self.do_b(self.ff(self.ln_b(x)))

    def forward(self, x, mask=None):
        return self.pre(x, mask) if self.norm_first else self.post(x, mask)


@right("encoder_block")
class BlockInPlaceAdd(nn.Module):  # in-place adds onto fresh tensors, one dropout
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.nf = norm_first
        self.sa = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.mlp = FeedForward(d_model, d_ff, dropout)
        self.n1, self.n2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        if self.nf:
            h = self.n1(x)
            out = self.dropout(self.sa(h, h, h, mask=mask))
            out += x
            ff = self.dropout(self.mlp(self.n2(out)))
            ff += out
            return ff
        a = self.dropout(self.sa(x, x, x, mask=mask))
        a += x
        h = self.n1(a)
        f = self.dropout(self.mlp(h))
        f += h
        return self.n2(f)


@right("encoder_block")
class BlockKeywordCalls(nn.Module):  # keyword arguments everywhere, eps written out
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.ffn = FeedForward(d_model=d_model, d_ff=d_ff, dropout=dropout)
        self.mha = MultiHeadAttention(d_model=d_model, n_heads=n_heads, dropout=dropout)
        self.ln_ffn = nn.LayerNorm(normalized_shape=d_model, eps=1e-5)
        self.ln_mha = nn.LayerNorm(normalized_shape=d_model, eps=1e-5)
        self.drop_mha, self.drop_ffn = nn.Dropout(p=dropout), nn.Dropout(p=dropout)
        self.norm_first = norm_first

    def forward(self, x, mask=None):
        if not self.norm_first:
            a = self.mha(query=x, key=x, value=x, mask=mask)
            x = self.ln_mha(x + self.drop_mha(a))
            return self.ln_ffn(x + self.drop_ffn(self.ffn(x)))
        q = self.ln_mha(x)
        x = x + self.drop_mha(self.mha(query=q, key=q, value=q, mask=mask))
        return x + self.drop_ffn(self.ffn(self.ln_ffn(x)))


@right("encoder_block")
class BlockHandDropout(nn.Module):  # hand-made dropout with the 1/(1-p) rescale
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first, self.p = norm_first, dropout
        self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def drop(self, t):
        if not self.training or self.p == 0:
            return t
        keep = torch.rand_like(t) >= self.p
        return torch.where(keep, t / (1 - self.p), torch.zeros_like(t))

    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.drop(self.attn(h, h, h, mask=mask))
            return x + self.drop(self.ff(self.norm2(x)))
        x = self.norm1(x + self.drop(self.attn(x, x, x, mask=mask)))
        return self.norm2(x + self.drop(self.ff(x)))


# ----------------------------------------------------------------- encoder_block, wrong
# Most wrong blocks share this __init__ (what a learner's first cell holds) and get one
# forward each.


class Parts(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.drop1, self.drop2 = nn.Dropout(dropout), nn.Dropout(dropout)


@wrong(
    "encoder_block",
    r"'the feed-forward's dropout is not the block's rate'.*inside your block built "
    r"with dropout=0\.3 it drops 0%",
    listed=False,
)
class BlockFeedForwardWithoutRate(nn.Module):  # FeedForward's dropout left at 0.0
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.drop1, self.drop2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.drop1(self.attn(h, h, h, mask=mask))
            return x + self.drop2(self.ff(self.norm2(x)))
        x = self.norm1(x + self.drop1(self.attn(x, x, x, mask=mask)))
        return self.norm2(x + self.drop2(self.ff(x)))


@wrong("encoder_block", r"'missing residual'", listed=True)
class BlockNoResidual(Parts):  # "x +" forgotten in both wirings
    def forward(self, x, mask=None):
        if self.norm_first:
            x = self.drop1(self.attn(self.norm1(x), self.norm1(x), self.norm1(x), mask))
            return self.drop2(self.ff(self.norm2(x)))
        x = self.norm1(self.drop1(self.attn(x, x, x, mask=mask)))
        return self.norm2(self.drop2(self.ff(x)))


@wrong("encoder_block", r"Pre-LN where Post-LN was asked", listed=True)
class BlockAlwaysPreLN(Parts):  # norm_first never read: always Pre-LN
    def forward(self, x, mask=None):
        h = self.norm1(x)
        x = x + self.drop1(self.attn(h, h, h, mask=mask))
        return x + self.drop2(self.ff(self.norm2(x)))


@wrong("encoder_block", r"x \+ LayerNorm\(sublayer\)", listed=True)
class BlockNormsTheBranch(Parts):  # normalises the sublayer's output, then adds x
    def forward(self, x, mask=None):
        x = x + self.norm1(self.drop1(self.attn(x, x, x, mask=mask)))
        return x + self.norm2(self.drop2(self.ff(x)))


@wrong("encoder_block", r"dropout after the norm \(the seed's block\)", listed=True)
class BlockSeedDropout(Parts):  # the seed's dropout(norm(x + sublayer(x)))
    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.drop1(self.attn(h, h, h, mask=mask))
            return x + self.drop2(self.ff(self.norm2(x)))
        x = self.drop1(self.norm1(x + self.attn(x, x, x, mask=mask)))
        return self.drop2(self.norm2(x + self.ff(x)))


class TransposedBN(nn.BatchNorm1d):
    def forward(self, x):
        return super().forward(x.transpose(1, 2)).transpose(1, 2)


@wrong("encoder_block", r"'BatchNorm instead of LayerNorm'", listed=True)
class BlockBatchNorm(Parts):  # BatchNorm1d, transposed to fit [B, S, D]
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        self.norm1, self.norm2 = TransposedBN(d_model), TransposedBN(d_model)

    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.drop1(self.attn(h, h, h, mask=mask))
            return x + self.drop2(self.ff(self.norm2(x)))
        x = self.norm1(x + self.drop1(self.attn(x, x, x, mask=mask)))
        return self.norm2(x + self.drop2(self.ff(x)))


@wrong(
    "encoder_block",
    r"is 2·x \+ the attention's output; expected x \+ the attention",
    listed=False,
)
class BlockResidualTwice(Parts):  # residual = x, then "x + residual + sublayer"
    def forward(self, x, mask=None):
        residual = x
        if self.norm_first:
            h = self.norm1(x)
            x = x + residual + self.drop1(self.attn(h, h, h, mask=mask))
            return x + self.drop2(self.ff(self.norm2(x)))
        x = self.norm1(x + residual + self.drop1(self.attn(x, x, x, mask=mask)))
        return self.norm2(x + self.drop2(self.ff(x)))


@wrong("encoder_block", r"is 0\.707·x \+ 0\.707·the attention's output", listed=False)
class BlockScaledResidual(Parts):  # "keeps the variance": (x + f(x)) / sqrt(2)
    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = (x + self.drop1(self.attn(h, h, h, mask=mask))) / math.sqrt(2)
            return (x + self.drop2(self.ff(self.norm2(x)))) / math.sqrt(2)
        x = self.norm1(x + self.drop1(self.attn(x, x, x, mask=mask)))
        return self.norm2(x + self.drop2(self.ff(x)))


@wrong(
    "encoder_block", r"'the mask does not reach the attention'.*mask=None", listed=False
)
class BlockDropsMask(Parts):  # the mask argument accepted but never passed on
    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.drop1(self.attn(h, h, h))
            return x + self.drop2(self.ff(self.norm2(x)))
        x = self.norm1(x + self.drop1(self.attn(x, x, x)))
        return self.norm2(x + self.drop2(self.ff(x)))


@wrong("encoder_block", r"the inverted mask", listed=False)
class BlockInvertsMask(Parts):  # PyTorch's key_padding_mask habit: True = pad
    def forward(self, x, mask=None):
        pad = None if mask is None else ~mask
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.drop1(self.attn(h, h, h, mask=pad))
            return x + self.drop2(self.ff(self.norm2(x)))
        x = self.norm1(x + self.drop1(self.attn(x, x, x, mask=pad)))
        return self.norm2(x + self.drop2(self.ff(x)))


@wrong("encoder_block", r"received another mask", listed=False)
class BlockCausalEncoder(Parts):  # a causal mask in the encoder, the given one dropped
    def forward(self, x, mask=None):
        s = x.size(1)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()[None, None]
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.drop1(self.attn(h, h, h, mask=causal))
            return x + self.drop2(self.ff(self.norm2(x)))
        x = self.norm1(x + self.drop1(self.attn(x, x, x, mask=causal)))
        return self.norm2(x + self.drop2(self.ff(x)))


@wrong("encoder_block", r"'one LayerNorm for both sublayers'", listed=False)
class BlockOneNorm(nn.Module):  # "the norms are identical at init, one is enough"
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm(x)
            x = x + self.drop(self.attn(h, h, h, mask=mask))
            return x + self.drop(self.ff(self.norm(x)))
        x = self.norm(x + self.drop(self.attn(x, x, x, mask=mask)))
        return self.norm(x + self.drop(self.ff(x)))


@wrong("encoder_block", r"'LayerNorm without its gain and bias'", listed=False)
class BlockNoAffine(Parts):  # elementwise_affine=False "to save parameters"
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        self.norm1 = nn.LayerNorm(d_model, elementwise_affine=False)
        self.norm2 = nn.LayerNorm(d_model, elementwise_affine=False)

    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.drop1(self.attn(h, h, h, mask=mask))
            return x + self.drop2(self.ff(self.norm2(x)))
        x = self.norm1(x + self.drop1(self.attn(x, x, x, mask=mask)))
        return self.norm2(x + self.drop2(self.ff(x)))


@wrong("encoder_block", r"uses eps = 0\.1\b", listed=False)
class BlockBigEps(Parts):  # eps=0.1 "for stability"
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        self.norm1 = nn.LayerNorm(d_model, eps=0.1)
        self.norm2 = nn.LayerNorm(d_model, eps=0.1)

    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.drop1(self.attn(h, h, h, mask=mask))
            return x + self.drop2(self.ff(self.norm2(x)))
        x = self.norm1(x + self.drop1(self.attn(x, x, x, mask=mask)))
        return self.norm2(x + self.drop2(self.ff(x)))


@wrong("encoder_block", r"normalized_shape=\[5, 16\]", listed=False)
class BlockNormOverSequence(Parts):  # F.layer_norm over the whole [S, D] slice
    def forward(self, x, mask=None):
        ln = lambda t: F.layer_norm(t, t.shape[1:])  # noqa: E731
        if self.norm_first:
            h = ln(x)
            x = x + self.drop1(self.attn(h, h, h, mask=mask))
            return x + self.drop2(self.ff(ln(x)))
        x = ln(x + self.drop1(self.attn(x, x, x, mask=mask)))
        return ln(x + self.drop2(self.ff(x)))


class GeluFF(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.fc, self.proj = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x)))


@wrong(
    "encoder_block", r"'the wrong activation in the feed-forward'.*GELU", listed=False
)
class BlockGeluFF(Parts):  # a GPT-style MLP inside the block
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        self.ff = GeluFF(d_model, d_ff)

    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.drop1(self.attn(h, h, h, mask=mask))
            return x + self.drop2(self.ff(self.norm2(x)))
        x = self.norm1(x + self.drop1(self.attn(x, x, x, mask=mask)))
        return self.norm2(x + self.drop2(self.ff(x)))


@wrong("encoder_block", r"hidden layer of 64 features", listed=False)
class BlockFourTimesWidth(Parts):  # d_ff ignored: 4 * d_model
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        self.ff = FeedForward(d_model, 4 * d_model, dropout)

    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.drop1(self.attn(h, h, h, mask=mask))
            return x + self.drop2(self.ff(self.norm2(x)))
        x = self.norm1(x + self.drop1(self.attn(x, x, x, mask=mask)))
        return self.norm2(x + self.drop2(self.ff(x)))


@wrong(
    "encoder_block",
    r"the feed-forward's input is x; expected LayerNorm call 1",
    listed=False,
)
class BlockFFReadsInput(Parts):  # Post-LN: both sublayers read the block's input x
    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.drop1(self.attn(h, h, h, mask=mask))
            return x + self.drop2(self.ff(self.norm2(x)))
        h = self.norm1(x + self.drop1(self.attn(x, x, x, mask=mask)))
        return self.norm2(h + self.drop2(self.ff(x)))


@wrong(
    "encoder_block",
    r"'query, key and value are not the same tensor'.*its key is x",
    listed=False,
)
class BlockPreLNRawKeys(Parts):  # Pre-LN: only the query normalised
    def forward(self, x, mask=None):
        if self.norm_first:
            q = self.norm1(x)
            x = x + self.drop1(self.attn(q, x, x, mask=mask))
            return x + self.drop2(self.ff(self.norm2(x)))
        x = self.norm1(x + self.drop1(self.attn(x, x, x, mask=mask)))
        return self.norm2(x + self.drop2(self.ff(x)))


@wrong("encoder_block", r"about 30 %|expected about 30%", listed=False)
class BlockHardCodedDropout(Parts):  # nn.Dropout(0.1): the argument never used
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        self.drop1, self.drop2 = nn.Dropout(0.1), nn.Dropout(0.1)

    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.drop1(self.attn(h, h, h, mask=mask))
            return x + self.drop2(self.ff(self.norm2(x)))
        x = self.norm1(x + self.drop1(self.attn(x, x, x, mask=mask)))
        return self.norm2(x + self.drop2(self.ff(x)))


@wrong("encoder_block", r"0% of the feed-forward branch", listed=False)
class BlockDropoutOnlyOnAttention(Parts):  # dropout on the attention branch only
    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.drop1(self.attn(h, h, h, mask=mask))
            return x + self.ff(self.norm2(x))
        x = self.norm1(x + self.drop1(self.attn(x, x, x, mask=mask)))
        return self.norm2(x + self.ff(x))


@wrong("encoder_block", r"multiplied by 1\b.*1/\(1-p\) = 1\.43", listed=False)
class BlockDropoutNoRescale(Parts):  # hand-made dropout mask without the 1/(1-p)
    def drop(self, t):
        if not self.training:
            return t
        return t * (torch.rand_like(t) >= self.drop1.p)

    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.drop(self.attn(h, h, h, mask=mask))
            return x + self.drop(self.ff(self.norm2(x)))
        x = self.norm1(x + self.drop(self.attn(x, x, x, mask=mask)))
        return self.norm2(x + self.drop(self.ff(x)))


@wrong("encoder_block", r"of the attention's query input were zeroed", listed=False)
class BlockDropsSublayerInput(Parts):  # dropout on what the sublayer reads
    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.drop1(self.attn(h, h, h, mask=mask))
            return x + self.drop2(self.ff(self.norm2(x)))
        d = self.drop1(x)
        x = self.norm1(x + self.attn(d, d, d, mask=mask))
        d = self.drop2(x)
        return self.norm2(x + self.ff(d))


@wrong(
    "encoder_block",
    r"the block.s output is LayerNorm call 3.s output; expected LayerNorm call 2",
    listed=False,
)
class BlockPreLNFinalNorm(Parts):  # the encoder stack's final norm put in every block
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        self.final = nn.LayerNorm(d_model)

    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.drop1(self.attn(h, h, h, mask=mask))
            return self.final(x + self.drop2(self.ff(self.norm2(x))))
        x = self.norm1(x + self.drop1(self.attn(x, x, x, mask=mask)))
        return self.final(self.norm2(x + self.drop2(self.ff(x))))


@wrong(
    "encoder_block",
    r"is LayerNorm call 1's output \+ the attention's output; "
    r"expected x \+ the attention",
    listed=False,
)
class BlockPreLNNormedResidualOnce(Parts):  # Pre-LN: norm1(x) reused as the residual
    def forward(self, x, mask=None):
        if self.norm_first:
            x = self.norm1(x)
            x = x + self.drop1(self.attn(x, x, x, mask=mask))
            return x + self.drop2(self.ff(self.norm2(x)))
        x = self.norm1(x + self.drop1(self.attn(x, x, x, mask=mask)))
        return self.norm2(x + self.drop2(self.ff(x)))


@wrong(
    "encoder_block",
    r"is x \+ the feed-forward's output; expected LayerNorm call 1",
    listed=False,
)
class BlockSkipFromBlockInput(Parts):  # both residuals taken from the block's input
    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            y = x + self.drop1(self.attn(h, h, h, mask=mask))
            return y + self.drop2(self.ff(self.norm2(y)))
        h = self.norm1(x + self.drop1(self.attn(x, x, x, mask=mask)))
        return self.norm2(x + self.drop2(self.ff(h)))


class FFWithSkip(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.l1, self.l2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return x + self.l2(F.relu(self.l1(x)))


@wrong(
    "encoder_block",
    r"is 2·LayerNorm call 1's output \+ the feed-forward's output",
    listed=False,
)
class BlockDoubleFFResidual(Parts):  # the FeedForward adds its own residual too
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        self.ff = FFWithSkip(d_model, d_ff)

    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.drop1(self.attn(h, h, h, mask=mask))
            return x + self.drop2(self.ff(self.norm2(x)))
        x = self.norm1(x + self.drop1(self.attn(x, x, x, mask=mask)))
        return self.norm2(x + self.drop2(self.ff(x)))


@wrong("encoder_block", r"raised ValueError: key must", listed=False)
class BlockMaskAsKey(Parts):  # attn(x, mask): the mask lands in the key slot
    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.drop1(self.attn(h, mask))
            return x + self.drop2(self.ff(self.norm2(x)))
        x = self.norm1(x + self.drop1(self.attn(x, mask)))
        return self.norm2(x + self.drop2(self.ff(x)))


@wrong("encoder_block", r"'dropout still on in eval mode'", listed=False)
class BlockFunctionalDropoutAlwaysOn(Parts):  # F.dropout without training=self.training
    def forward(self, x, mask=None):
        p = self.drop1.p
        if self.norm_first:
            h = self.norm1(x)
            x = x + F.dropout(self.attn(h, h, h, mask=mask), p)
            return x + F.dropout(self.ff(self.norm2(x)), p)
        x = self.norm1(x + F.dropout(self.attn(x, x, x, mask=mask), p))
        return self.norm2(x + F.dropout(self.ff(x), p))


@wrong(
    "encoder_block",
    r"no LayerNorm runs after the feed-forward, where Post-LN puts",
    listed=False,
)
class BlockForgetsSecondNorm(Parts):  # Post-LN: the final norm2 forgotten
    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.drop1(self.attn(h, h, h, mask=mask))
            return x + self.drop2(self.ff(self.norm2(x)))
        x = self.norm1(x + self.drop1(self.attn(x, x, x, mask=mask)))
        return x + self.drop2(self.ff(x))


@wrong(
    "encoder_block",
    r"34% of the residual path the attention's output is added to",
    listed=False,
)
class BlockDropsResidualPath(Parts):  # Post-LN: dropout on x instead of on the sublayer
    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.drop1(self.attn(h, h, h, mask=mask))
            return x + self.drop2(self.ff(self.norm2(x)))
        x = self.norm1(self.drop1(x) + self.attn(x, x, x, mask=mask))
        return self.norm2(self.drop2(x) + self.ff(x))


@wrong("encoder_block", r"your block returned a tuple", listed=False)
class BlockReturnsPair(Parts):  # returns (output, weights) like nn.MultiheadAttention
    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.drop1(self.attn(h, h, h, mask=mask))
            return x + self.drop2(self.ff(self.norm2(x))), None
        x = self.norm1(x + self.drop1(self.attn(x, x, x, mask=mask)))
        return self.norm2(x + self.drop2(self.ff(x))), None


@wrong("encoder_block", r"'the block modifies its input in place'", listed=False)
class BlockAddsInPlace(Parts):  # Pre-LN written with x += on the caller's tensor
    def forward(self, x, mask=None):
        if self.norm_first:
            x += self.drop1(self.attn(self.norm1(x), mask=mask))
            x += self.drop2(self.ff(self.norm2(x)))
            return x
        x = self.norm1(x + self.drop1(self.attn(x, x, x, mask=mask)))
        return self.norm2(x + self.drop2(self.ff(x)))


@wrong(
    "encoder_block",
    r"(4[0-9]|5[0-5])% of the attention branch .* expected about 30%",
    listed=False,
)
class BlockDropoutTwice(Parts):  # dropout inside a helper and again around it
    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.drop1(self.drop1(self.attn(h, h, h, mask=mask)))
            return x + self.drop2(self.ff(self.norm2(x)))
        x = self.norm1(x + self.drop1(self.drop1(self.attn(x, x, x, mask=mask))))
        return self.norm2(x + self.drop2(self.ff(x)))


@wrong(
    "encoder_block",
    r"makes no layer_norm call, and none of its modules normalises each token",
    listed=False,
)
class BlockHandWrittenNorm(Parts):  # LayerNorm by hand, without gain and bias
    def ln(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return (x - mean) / torch.sqrt(var + 1e-5)

    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.ln(x)
            x = x + self.drop1(self.attn(h, h, h, mask=mask))
            return x + self.drop2(self.ff(self.ln(x)))
        x = self.ln(x + self.drop1(self.attn(x, x, x, mask=mask)))
        return self.ln(x + self.drop2(self.ff(x)))


@wrong(
    "encoder_block", r"the feed-forward's input is the attention's output", listed=False
)
class BlockFFReadsAttention(Parts):  # the feed-forward fed the raw attention output
    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.drop1(self.attn(h, h, h, mask=mask))
            return x + self.drop2(self.ff(self.norm2(x)))
        a = self.attn(x, x, x, mask=mask)
        x = self.norm1(x + self.drop1(a))
        return self.norm2(x + self.drop2(self.ff(a)))


@wrong("encoder_block", r"'the sublayers in the wrong order'", listed=False)
class BlockFeedForwardFirst(Parts):  # the two sublayers swapped
    def forward(self, x, mask=None):
        if self.norm_first:
            x = x + self.drop2(self.ff(self.norm2(x)))
            h = self.norm1(x)
            return x + self.drop1(self.attn(h, h, h, mask=mask))
        x = self.norm2(x + self.drop2(self.ff(x)))
        return self.norm1(x + self.drop1(self.attn(x, x, x, mask=mask)))


@wrong("encoder_block", r"'a LayerNorm created inside forward'", listed=False)
class BlockNormsBuiltInForward(Parts):  # nn.LayerNorm(d) built on the fly
    def forward(self, x, mask=None):
        d = x.size(-1)
        if self.norm_first:
            h = nn.LayerNorm(d).to(x)(x)
            x = x + self.drop1(self.attn(h, h, h, mask=mask))
            return x + self.drop2(self.ff(nn.LayerNorm(d).to(x)(x)))
        x = nn.LayerNorm(d).to(x)(x + self.drop1(self.attn(x, x, x, mask=mask)))
        return nn.LayerNorm(d).to(x)(x + self.drop2(self.ff(x)))


@wrong(
    "encoder_block",
    r"is x \+ the attention's output \+ the feed-forward's output; "
    r"expected LayerNorm call 1's output",
    listed=False,
)
class BlockKeepsUnnormedStream(Parts):  # Post-LN: the FF residual from the raw sum
    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.drop1(self.attn(h, h, h, mask=mask))
            return x + self.drop2(self.ff(self.norm2(x)))
        s = x + self.drop1(self.attn(x, x, x, mask=mask))
        return self.norm2(s + self.drop2(self.ff(self.norm1(s))))


@wrong(
    "encoder_block",
    r"1[0-9]% of the attention branch .* expected about 30%",
    listed=False,
)
class BlockHalfDropout(Parts):  # p / 2 "because there are two dropouts"
    def forward(self, x, mask=None):
        p = self.drop1.p / 2
        if self.norm_first:
            h = self.norm1(x)
            x = x + F.dropout(self.attn(h, h, h, mask=mask), p, self.training)
            return x + F.dropout(self.ff(self.norm2(x)), p, self.training)
        x = self.norm1(x + F.dropout(self.attn(x, x, x, mask=mask), p, self.training))
        return self.norm2(x + F.dropout(self.ff(x), p, self.training))


# ------------------------------------------- held-out trial: dropout rates and eps


class HeldParts(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.do1, self.do2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.ln1(x)
            x = x + self.do1(self.attn(h, h, h, mask=mask))
            return x + self.do2(self.ff(self.ln2(x)))
        x = self.ln1(x + self.do1(self.attn(x, x, x, mask=mask)))
        return self.ln2(x + self.do2(self.ff(x)))


@wrong(
    "encoder_block",
    r"dropout=0\.3, your block's MultiHeadAttention drops its "
    r"attention weights at p = 0\b",
    listed=False,
)
class BlockAttentionWithoutDropout(HeldParts):  # MultiHeadAttention's default kept
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        self.attn = MultiHeadAttention(d_model, n_heads)


@wrong(
    "encoder_block",
    r"dropout=0\.3, your block's MultiHeadAttention drops its "
    r"attention weights at p = 0\.1\b",
    listed=False,
)
class BlockAttentionFixedDropout(nn.Module):  # the paper's 0.1 typed into the attention
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.pre = norm_first
        self.mha = MultiHeadAttention(d_model, n_heads, 0.1)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.norms = nn.ModuleList([nn.LayerNorm(d_model), nn.LayerNorm(d_model)])
        self.p = dropout

    def forward(self, x, mask=None):
        drop = lambda t: F.dropout(t, self.p, self.training)  # noqa: E731
        if self.pre:
            h = self.norms[0](x)
            x = x + drop(self.mha(h, h, h, mask=mask))
            return x + drop(self.ffn(self.norms[1](x)))
        x = self.norms[0](x + drop(self.mha(x, x, x, mask=mask)))
        return self.norms[1](x + drop(self.ffn(x)))


@wrong(
    "encoder_block",
    r"p = 0\.5 in train mode, [23]\d% of the attention branch .* "
    r"expected about 50%",
    listed=False,
)
class BlockDropoutTypedIn(HeldParts):  # dropout 0.3 typed in, the argument ignored
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        self.do1, self.do2 = nn.Dropout(0.3), nn.Dropout(0.3)


# Was wrong until the teaching review of 2026-12-05 (ch1-4 M10): an eps of 1e-6 changes
# the block's outputs by about 5e-6, so judged by what it does, it is right.
@right("encoder_block")
class BlockEps1e6(HeldParts):  # the Annotated Transformer's eps
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        self.ln1 = nn.LayerNorm(d_model, eps=1e-6)
        self.ln2 = nn.LayerNorm(d_model, eps=1e-6)


@right("encoder_block")  # as BlockEps1e6: the eps changes nothing measurable
class BlockFunctionalNormBertEps(nn.Module):  # F.layer_norm with BERT's eps
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.g = nn.ParameterList([nn.Parameter(torch.ones(d_model)) for _ in "ab"])
        self.b = nn.ParameterList([nn.Parameter(torch.zeros(d_model)) for _ in "ab"])
        self.drop = nn.Dropout(dropout)

    def norm(self, i, t):
        return F.layer_norm(t, t.shape[-1:], self.g[i], self.b[i], eps=1e-12)

    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm(0, x)
            x = x + self.drop(self.attn(h, h, h, mask=mask))
            return x + self.drop(self.ff(self.norm(1, x)))
        x = self.norm(0, x + self.drop(self.attn(x, x, x, mask=mask)))
        return self.norm(1, x + self.drop(self.ff(x)))


@right("encoder_block")
class BlockSharedDropoutLoop(nn.Module):  # one shared Dropout, (norm, fn) pairs looped
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.mha = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.mlp = FeedForward(d_model, d_ff, dropout)
        self.norms = nn.ModuleList([nn.LayerNorm(d_model) for _ in range(2)])
        self.drop = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        subs = [lambda h: self.mha(h, h, h, mask=mask), self.mlp]
        for norm, f in zip(self.norms, subs):
            if self.norm_first:
                x = x + self.drop(f(norm(x)))
            else:
                x = norm(x + self.drop(f(x)))
        return x


# ------------------------------------ norms written by hand (teaching review ch1-4 M10)


class LayerNorm(nn.Module):  # the Annotated Transformer's, as learners port it
    "Construct a layernorm module (See citation for details)."

    def __init__(self, features, eps=1e-6):
        super(LayerNorm, self).__init__()
        self.a_2 = nn.Parameter(torch.ones(features))
        self.b_2 = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)
        return self.a_2 * (x - mean) / (std + self.eps) + self.b_2


@right("encoder_block")
class BlockAnnotatedNorm(nn.Module):  # the Annotated Transformer's hand-written norm
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.feed_forward = FeedForward(d_model, d_ff, dropout)
        self.sublayer_norms = nn.ModuleList([LayerNorm(d_model) for _ in range(2)])
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        norm_a, norm_f = self.sublayer_norms
        if self.norm_first:
            h = norm_a(x)
            x = x + self.dropout(self.self_attn(h, h, h, mask=mask))
            return x + self.dropout(self.feed_forward(norm_f(x)))
        x = norm_a(x + self.dropout(self.self_attn(x, x, x, mask=mask)))
        return norm_f(x + self.dropout(self.feed_forward(x)))


class MyLayerNorm(nn.Module):  # by hand, biased variance, eps inside the root
    def __init__(self, d):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(d))
        self.beta = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        mu = x.mean(dim=-1, keepdim=True)
        var = ((x - mu) ** 2).mean(dim=-1, keepdim=True)
        return self.gamma * (x - mu) / torch.sqrt(var + 1e-5) + self.beta


@right("encoder_block")
class BlockMyLayerNorm(HeldParts):  # the same block with norms typed out
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        self.ln1, self.ln2 = MyLayerNorm(d_model), MyLayerNorm(d_model)


class SeqNorm(nn.Module):  # by hand, but over the sequence axis (dim=1)
    def __init__(self, d):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(d))
        self.beta = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        mu = x.mean(dim=1, keepdim=True)
        sd = x.std(dim=1, keepdim=True)
        return self.gamma * (x - mu) / (sd + 1e-6) + self.beta


@wrong(
    "encoder_block",
    r"makes no layer_norm call, and none of its modules normalises each token",
    listed=False,
)
class BlockHandNormOverSequence(HeldParts):  # a hand-written norm over the wrong axis
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        self.ln1, self.ln2 = SeqNorm(d_model), SeqNorm(d_model)


# ------------------------------------- reachability: each named mistake gets an answer


@wrong("encoder_block", r"'another normalisation instead of LayerNorm'", listed=False)
class BlockRMSNorm(HeldParts):  # LLaMA's RMSNorm where the exercise asks LayerNorm
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        self.ln1, self.ln2 = nn.RMSNorm(d_model), nn.RMSNorm(d_model)


@wrong("encoder_block", r"'missing residual \(around the attention\)'", listed=True)
class BlockNoAttentionResidual(Parts):  # "x +" forgotten in the first sublayer only
    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = self.drop1(self.attn(h, h, h, mask=mask))
            return x + self.drop2(self.ff(self.norm2(x)))
        x = self.norm1(self.drop1(self.attn(x, x, x, mask=mask)))
        return self.norm2(x + self.drop2(self.ff(x)))


@wrong("encoder_block", r"'missing residual \(around the feed-forward\)'", listed=True)
class BlockNoFeedForwardResidual(Parts):  # "x +" forgotten in the return line
    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.drop1(self.attn(h, h, h, mask=mask))
            return self.drop2(self.ff(self.norm2(x)))
        x = self.norm1(x + self.drop1(self.attn(x, x, x, mask=mask)))
        return self.norm2(self.drop2(self.ff(x)))


@wrong("encoder_block", r"Post-LN where Pre-LN was asked", listed=True)
class BlockAlwaysPostLN(Parts):  # norm_first stored but never read: always Post-LN
    def forward(self, x, mask=None):
        x = self.norm1(x + self.drop1(self.attn(x, x, x, mask=mask)))
        return self.norm2(x + self.drop2(self.ff(x)))


@wrong(
    "encoder_block", r"'LayerNorm in the wrong place \(the residual stream", listed=True
)
class BlockPreLNOverwritesStream(Parts):  # Pre-LN: x = norm(x) before each sublayer
    def forward(self, x, mask=None):
        if self.norm_first:
            x = self.norm1(x)
            x = x + self.drop1(self.attn(x, x, x, mask=mask))
            x = self.norm2(x)
            return x + self.drop2(self.ff(x))
        x = self.norm1(x + self.drop1(self.attn(x, x, x, mask=mask)))
        return self.norm2(x + self.drop2(self.ff(x)))


@wrong("encoder_block", r"'no dropout on the sublayer outputs'", listed=True)
class BlockNoSublayerDropout(Parts):  # only the FeedForward's own dropout, none around
    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.attn(h, h, h, mask=mask)
            return x + self.ff(self.norm2(x))
        x = self.norm1(x + self.attn(x, x, x, mask=mask))
        return self.norm2(x + self.ff(x))


@wrong("encoder_block", r"attention's weights are \[S, 4, B, B\]", listed=False)
class BlockSequenceFirstAttention(Parts):  # nn.MultiheadAttention's [S, B, D] habit
    def forward(self, x, mask=None):
        def attend(h):  # to [S, B, D] for the attention, then back
            h = h.transpose(0, 1)
            return self.attn(h, h, h, mask=mask).transpose(0, 1)

        if self.norm_first:
            x = x + self.drop1(attend(self.norm1(x)))
            return x + self.drop2(self.ff(self.norm2(x)))
        x = self.norm1(x + self.drop1(attend(x)))
        return self.norm2(x + self.drop2(self.ff(x)))


@wrong(
    "encoder_block",
    r"[67]\d% of the attention branch .* expected about 30%",
    listed=False,
)
class BlockKeepProbability(HeldParts):  # dropout read as the keep probability
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__(d_model, n_heads, d_ff, dropout, norm_first)
        self.do1, self.do2 = nn.Dropout(1 - dropout), nn.Dropout(1 - dropout)
