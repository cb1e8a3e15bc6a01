"""Chapter 2 graded with the real nbgrader CLI: generate -> autograde -> feedback.

One autograde run grades a small class: the solution, the untouched student version,
and one buggy submission per diagnosed pitfall. Each must score exactly what it
deserves, and the feedback must name the pitfall.
"""

import pytest

from course import Buggy, GradedChapter

CHAPTER = "ch02_attention"
FULL = {"test_attention": 4, "test_attention_by_hand": 1, "test_attention_entropy": 2}

# No scaling: the scores grow with the head size and the softmax saturates.
ATTENTION_NO_SCALING = """
def attention(q, k, v):
    scores = q @ k.transpose(-2, -1)
    weights = scores.softmax(dim=-1)
    return weights @ v, weights
"""
# Scaled by sqrt(d_model) (heads times head size) instead of sqrt(d_head).
ATTENTION_SQRT_D_MODEL = """
def attention(q, k, v):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(1) * q.size(-1))
    weights = scores.softmax(dim=-1)
    return weights @ v, weights
"""
# The softmax runs over dim 2, the queries: each key's column sums to 1, not each row.
ATTENTION_SOFTMAX_QUERIES = """
def attention(q, k, v):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    weights = scores.softmax(dim=2)
    return weights @ v, weights
"""
# Right values, but PyTorch computes the output: only the hidden by-hand test tells.
ATTENTION_CALLS_SDPA = """
def attention(q, k, v):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    weights = scores.softmax(dim=-1)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v), weights
"""
# weights.log() is -inf where a weight is 0, and 0 * -inf is NaN.
ENTROPY_NAN = """
def attention_entropy(weights):
    return -(weights * weights.log()).sum(dim=-1)
"""

# The by-hand cell scores only when attention behaves right: the judge
# (tformer_grading/judge/registry.py) runs check_attention in its place.
ATTENTION_CELLS = ("test_attention", "test_attention_by_hand")
BUGGY = {
    "no_scaling": Buggy(
        answers={"attention": ATTENTION_NO_SCALING},
        zero=ATTENTION_CELLS,
        feedback="'no scaling'",
    ),
    "sqrt_d_model": Buggy(
        answers={"attention": ATTENTION_SQRT_D_MODEL},
        zero=ATTENTION_CELLS,
        feedback="'scaled by sqrt(d_model)'",
    ),
    "softmax_queries": Buggy(
        answers={"attention": ATTENTION_SOFTMAX_QUERIES},
        zero=ATTENTION_CELLS,
        feedback="'softmax over the wrong axis (queries)'",
    ),
    "calls_sdpa": Buggy(
        answers={"attention": ATTENTION_CALLS_SDPA},
        zero=("test_attention_by_hand",),
        feedback="calls scaled_dot_product_attention",
    ),
    "entropy_nan": Buggy(
        answers={"attention_entropy": ENTROPY_NAN},
        zero=("test_attention_entropy",),
        feedback="'0·log 0 gives NaN'",
    ),
}


# One autograde run per chapter, on one worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(CHAPTER)]


class TestGrading(GradedChapter):
    chapter, full, buggy = CHAPTER, FULL, BUGGY
    hidden_marker, hidden_student = "check_attention_by_hand", "calls_sdpa"
