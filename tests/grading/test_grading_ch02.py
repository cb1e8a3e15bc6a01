"""Chapter 2 graded with the real nbgrader CLI: generate -> autograde -> feedback.

One autograde run grades a small class: the solution, the untouched student version,
and one buggy submission per diagnosed pitfall. Each must score exactly what it
deserves, and the feedback must name the pitfall.
"""
import pytest

from course import GradedChapter

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

# student -> (answer cells replaced, cells that must score 0, text the feedback must contain)
BUGGY = {
    "no_scaling": ({"attention": NO_SCALING}, ("test_attention",), "'no scaling'"),
    "sqrt_d_model": ({"attention": SQRT_D_MODEL}, ("test_attention",), "'scaled by sqrt(d_model)'"),
    "softmax_queries": ({"attention": SOFTMAX_QUERIES}, ("test_attention",), "'softmax over the wrong axis (queries)'"),
    "calls_sdpa": ({"attention": CALLS_SDPA}, ("test_attention_by_hand",), "calls scaled_dot_product_attention"),
    "entropy_nan": ({"attention_entropy": ENTROPY_NAN}, ("test_attention_entropy",), "'0·log 0 gives NaN'"),
}


pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(CHAPTER)]  # one autograde run per chapter, on one worker


class TestGrading(GradedChapter):
    chapter, full, buggy = CHAPTER, FULL, BUGGY
    hidden_marker, hidden_student = 'check_attention_by_hand', 'calls_sdpa'
