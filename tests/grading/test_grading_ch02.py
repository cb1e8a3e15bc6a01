"""Chapter 2 graded with the real nbgrader CLI: generate -> autograde -> feedback.

One autograde run grades a small class: the solution, the untouched student version,
and one buggy submission per diagnosed pitfall. Each must score exactly what it
deserves, and the feedback must name the pitfall.
"""
import pytest

from course import Buggy, GradedChapter

CHAPTER = "ch02_attention"
FULL = {"test_attention": 4, "test_attention_by_hand": 1, "test_attention_entropy": 2}

ATTENTION = '''
def attention(q, k, v):
    scores = {scores}
    weights = scores.softmax(dim={dim})
    return {out}, weights
'''
RIGHT_SCORES = "q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))"
NO_SCALING = ATTENTION.format(scores="q @ k.transpose(-2, -1)", dim=-1, out="weights @ v")
SQRT_D_MODEL = ATTENTION.format(scores="q @ k.transpose(-2, -1) / math.sqrt(q.size(1) * q.size(-1))", dim=-1,
                                out="weights @ v")
SOFTMAX_QUERIES = ATTENTION.format(scores=RIGHT_SCORES, dim=2, out="weights @ v")
CALLS_SDPA = ATTENTION.format(scores=RIGHT_SCORES, dim=-1,
                              out="torch.nn.functional.scaled_dot_product_attention(q, k, v)")
ENTROPY_NAN = '''
def attention_entropy(weights):
    return -(weights * weights.log()).sum(dim=-1)
'''

BUGGY = {
    "no_scaling": Buggy(
        answers={"attention": NO_SCALING},
        zero=("test_attention",),
        feedback="'no scaling'"),
    "sqrt_d_model": Buggy(
        answers={"attention": SQRT_D_MODEL},
        zero=("test_attention",),
        feedback="'scaled by sqrt(d_model)'"),
    "softmax_queries": Buggy(
        answers={"attention": SOFTMAX_QUERIES},
        zero=("test_attention",),
        feedback="'softmax over the wrong axis (queries)'"),
    "calls_sdpa": Buggy(
        answers={"attention": CALLS_SDPA},
        zero=("test_attention_by_hand",),
        feedback="calls scaled_dot_product_attention"),
    "entropy_nan": Buggy(
        answers={"attention_entropy": ENTROPY_NAN},
        zero=("test_attention_entropy",),
        feedback="'0·log 0 gives NaN'"),
}


pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(CHAPTER)]  # one autograde run per chapter, on one worker


class TestGrading(GradedChapter):
    chapter, full, buggy = CHAPTER, FULL, BUGGY
    hidden_marker, hidden_student = 'check_attention_by_hand', 'calls_sdpa'
