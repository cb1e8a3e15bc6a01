"""Chapter 4 graded with the real nbgrader CLI: generate -> autograde -> feedback.

One autograde run grades the solution, the untouched student version and one buggy
submission per diagnosed pitfall; each must score exactly what it deserves, and the
feedback must name the pitfall.
"""
import pytest

from course import Buggy, GradedChapter

CHAPTER = "ch04_blocks"
FULL = {"test_feed_forward": 2, "test_post_ln": 4, "test_pre_ln": 3, "test_dropout_placement": 2,
        "test_block_behaviour": 2, "test_block_by_hand": 1}

BLOCK_TEMPLATE = '''
class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.ln1, self.ln2 = {norm}(d_model), {norm}(d_model)
        self.drop = nn.Dropout(dropout)

    def sub(self, x, f, norm):
        if self.norm_first:
            return {pre}
        return {post}

    def forward(self, x, mask=None):
        x = self.sub(x, lambda h: self.attn(h, h, h, mask=mask), self.ln1)
        return self.sub(x, self.ff, self.ln2)
'''
PRE, POST = "x + self.drop(f(norm(x)))", "norm(x + self.drop(f(x)))"


def block(norm="nn.LayerNorm", pre=PRE, post=POST, prelude=""):
    return prelude + BLOCK_TEMPLATE.format(norm=norm, pre=pre, post=post)


BATCHNORM = '''
class BN(nn.BatchNorm1d):
    def forward(self, x):
        return super().forward(x.transpose(1, 2)).transpose(1, 2)
'''
FF_NO_RELU = '''
class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.linear2(self.linear1(x))
'''
WRAPS_REFERENCE = '''
from tformer_ref.blocks import EncoderBlock as _Ref

class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1, norm_first=False):
        super().__init__()
        self.inner = _Ref(d_model, n_heads, d_ff, dropout, norm_first)

    def forward(self, x, mask=None):
        return self.inner(x, mask)
'''
BLOCK_CELLS = ("test_post_ln", "test_pre_ln", "test_dropout_placement")

BUGGY = {
    "missing_residual": Buggy(
        answers={"encoder_block": block(pre="self.drop(f(norm(x)))",
                                        post="norm(self.drop(f(x)))")},
        zero=BLOCK_CELLS,
        feedback="missing residual"),
    "norm_on_sublayer": Buggy(
        answers={"encoder_block": block(pre="x + norm(self.drop(f(x)))",
                                        post="x + norm(self.drop(f(x)))")},
        zero=BLOCK_CELLS,
        feedback="LayerNorm in the wrong place"),
    "seed_dropout": Buggy(
        answers={"encoder_block": block(post="self.drop(norm(x + f(x)))")},
        zero=("test_dropout_placement",),
        feedback="dropout after the norm (the seed's block)"),
    "batchnorm": Buggy(
        answers={"encoder_block": block(norm="BN", prelude=BATCHNORM)},
        zero=(*BLOCK_CELLS, "test_block_behaviour"),
        feedback="BatchNorm instead of LayerNorm"),
    "ff_no_relu": Buggy(
        answers={"feed_forward": FF_NO_RELU},
        zero=("test_feed_forward", "test_post_ln", "test_pre_ln"),
        feedback="no activation between the two Linear layers"),
    "wraps_reference": Buggy(
        answers={"encoder_block": WRAPS_REFERENCE},
        zero=("test_block_by_hand",),
        feedback="contains tformer_ref.blocks.EncoderBlock"),
}


pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(CHAPTER)]  # one autograde run per chapter, on one worker


class TestGrading(GradedChapter):
    chapter, full, buggy = CHAPTER, FULL, BUGGY
    hidden_marker, hidden_student = 'check_block_by_hand', 'wraps_reference'
    right_variants = {"written_differently": {"encoder_block": block()}}
