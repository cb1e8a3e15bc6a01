"""Chapter 4 graded with the real nbgrader CLI: generate -> autograde -> feedback.

One autograde run grades the solution, the untouched student version and one buggy
submission per diagnosed pitfall; each must score exactly what it deserves, and the
feedback must name the pitfall.
"""

import pytest

from course import Buggy, GradedChapter

CHAPTER = "ch04_blocks"
FULL = {
    "test_feed_forward": 2,
    "test_post_ln": 4,
    "test_pre_ln": 3,
    "test_dropout_placement": 2,
    "test_block_behaviour": 2,
    "test_block_by_hand": 1,
}

# Neither wiring adds the sublayer's input back: the block has no residual connection.
ENCODER_BLOCK_MISSING_RESIDUAL = """
class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def sub(self, x, f, norm):
        if self.norm_first:
            return self.drop(f(norm(x)))
        return norm(self.drop(f(x)))

    def forward(self, x, mask=None):
        x = self.sub(x, lambda h: self.attn(h, h, h, mask=mask), self.ln1)
        return self.sub(x, self.ff, self.ln2)
"""
# Both wirings normalise the sublayer's output, not the residual sum (Post-LN) nor the
# sublayer's input (Pre-LN).
ENCODER_BLOCK_NORM_ON_SUBLAYER = """
class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def sub(self, x, f, norm):
        if self.norm_first:
            return x + norm(self.drop(f(x)))
        return x + norm(self.drop(f(x)))

    def forward(self, x, mask=None):
        x = self.sub(x, lambda h: self.attn(h, h, h, mask=mask), self.ln1)
        return self.sub(x, self.ff, self.ln2)
"""
# The seed's Post-LN block: dropout on the normalised output, after the residual sum,
# instead of on the sublayer's output before it. Pre-LN is right.
ENCODER_BLOCK_SEED_DROPOUT = """
class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def sub(self, x, f, norm):
        if self.norm_first:
            return x + self.drop(f(norm(x)))
        return self.drop(norm(x + f(x)))

    def forward(self, x, mask=None):
        x = self.sub(x, lambda h: self.attn(h, h, h, mask=mask), self.ln1)
        return self.sub(x, self.ff, self.ln2)
"""
# BatchNorm over the features instead of LayerNorm: statistics across the batch and the
# positions, so one sequence's output depends on the others.
ENCODER_BLOCK_BATCHNORM = """
class BN(nn.BatchNorm1d):
    def forward(self, x):
        return super().forward(x.transpose(1, 2)).transpose(1, 2)

class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.ln1, self.ln2 = BN(d_model), BN(d_model)
        self.drop = nn.Dropout(dropout)

    def sub(self, x, f, norm):
        if self.norm_first:
            return x + self.drop(f(norm(x)))
        return norm(x + self.drop(f(x)))

    def forward(self, x, mask=None):
        x = self.sub(x, lambda h: self.attn(h, h, h, mask=mask), self.ln1)
        return self.sub(x, self.ff, self.ln2)
"""
# Right: both wirings through one helper, one dropout module shared by the sublayers.
ENCODER_BLOCK_ONE_HELPER = """
class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def sub(self, x, f, norm):
        if self.norm_first:
            return x + self.drop(f(norm(x)))
        return norm(x + self.drop(f(x)))

    def forward(self, x, mask=None):
        x = self.sub(x, lambda h: self.attn(h, h, h, mask=mask), self.ln1)
        return self.sub(x, self.ff, self.ln2)
"""
# Two Linear layers with nothing between them: the feed-forward is one linear map.
FF_NO_RELU = """
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.linear2(self.linear1(x))
"""
# Hands the work to the reference block: only the hidden by-hand test tells.
WRAPS_REFERENCE = """
from tformer_ref.blocks import EncoderBlock as _Ref

class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.inner = _Ref(d_model, n_heads, d_ff, dropout, norm_first)

    def forward(self, x, mask=None):
        return self.inner(x, mask)
"""
BLOCK_CELLS = ("test_post_ln", "test_pre_ln", "test_dropout_placement")

BUGGY = {
    "missing_residual": Buggy(
        answers={"encoder_block": ENCODER_BLOCK_MISSING_RESIDUAL},
        zero=BLOCK_CELLS,
        feedback="missing residual",
    ),
    "norm_on_sublayer": Buggy(
        answers={"encoder_block": ENCODER_BLOCK_NORM_ON_SUBLAYER},
        zero=BLOCK_CELLS,
        feedback="LayerNorm in the wrong place",
    ),
    "seed_dropout": Buggy(
        answers={"encoder_block": ENCODER_BLOCK_SEED_DROPOUT},
        zero=("test_dropout_placement",),
        feedback="dropout after the norm (the seed's block)",
    ),
    "batchnorm": Buggy(
        answers={"encoder_block": ENCODER_BLOCK_BATCHNORM},
        # The by-hand cell too: the judge runs the block's behaviour probes in its
        # place (tformer_grading/judge/registry.py), and BatchNorm fails them.
        zero=(*BLOCK_CELLS, "test_block_behaviour", "test_block_by_hand"),
        feedback="BatchNorm instead of LayerNorm",
    ),
    "ff_no_relu": Buggy(
        answers={"feed_forward": FF_NO_RELU},
        zero=("test_feed_forward", "test_post_ln", "test_pre_ln"),
        feedback="no activation between the two Linear layers",
    ),
    "wraps_reference": Buggy(
        answers={"encoder_block": WRAPS_REFERENCE},
        zero=("test_block_by_hand",),
        feedback="contains tformer_ref.blocks.EncoderBlock",
    ),
}


# One autograde run per chapter, on one worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(CHAPTER)]


class TestGrading(GradedChapter):
    chapter, full, buggy = CHAPTER, FULL, BUGGY
    hidden_marker, hidden_student = "check_block_by_hand", "wraps_reference"
    right_variants = {
        "written_differently": {"encoder_block": ENCODER_BLOCK_ONE_HELPER}
    }
