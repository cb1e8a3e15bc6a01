"""Chapter 3 graded with the real nbgrader CLI: generate -> autograde -> feedback.

One autograde run grades a small class: the solution, the untouched student version,
and one buggy submission per diagnosed pitfall. Each must score exactly what it
deserves, and the feedback must name the pitfall.
"""
import pytest

from course import Buggy, GradedChapter

CHAPTER = "ch03_masks"
FULL = {"test_causal_mask": 2, "test_padding_mask": 2, "test_masked_attention": 4, "test_masked_attention_half": 2,
        "test_masked_attention_by_hand": 1, "test_mask_probes": 2}

CAUSAL_TRIU = '''
def causal_mask(size):
    return torch.triu(torch.ones(size, size, device=device)).bool()[None, None]
'''
CAUSAL_IGNORE = '''
def causal_mask(size):
    return torch.ones(1, 1, size, size, dtype=torch.bool, device=device).triu(diagonal=1)
'''
PADDING_WRONG_AXIS = '''
def padding_mask(tokens, pad_id):
    return (tokens != pad_id).unsqueeze(1)
'''
MASKED = '''
def masked_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    {body}
    return weights @ v, weights
'''
AFTER_SOFTMAX = MASKED.format(body="weights = scores.softmax(-1).masked_fill(~mask, 0.0)")
INVERTED = MASKED.format(body="weights = scores.masked_fill(mask, torch.finfo(scores.dtype).min).softmax(-1)")
MINUS_INF = MASKED.format(body="weights = scores.masked_fill(mask == 0, float('-inf')).softmax(-1)")
MINUS_1E9 = MASKED.format(body="weights = scores.masked_fill(mask == 0, -1e9).softmax(-1)")
CALLS_SDPA = '''
def masked_attention(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    weights = scores.masked_fill(~mask, -1e4).softmax(-1)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask), weights
'''

MASK_CELLS = ("test_masked_attention", "test_masked_attention_half")
BUGGY = {
    "causal_triu": Buggy(
        answers={"causal_mask": CAUSAL_TRIU},
        zero=("test_causal_mask", "test_mask_probes"),
        feedback="'triu instead of tril'"),
    "causal_ignore_convention": Buggy(
        answers={"causal_mask": CAUSAL_IGNORE},
        zero=("test_causal_mask", "test_mask_probes"),
        feedback="'mask inverted'"),
    "padding_wrong_axis": Buggy(
        answers={"padding_mask": PADDING_WRONG_AXIS},
        zero=("test_padding_mask", "test_mask_probes"),
        feedback="'mask broadcast over the wrong axis'"),
    "after_softmax": Buggy(
        answers={"masked_attention": AFTER_SOFTMAX},
        zero=(*MASK_CELLS, "test_mask_probes"),
        feedback="'mask applied after softmax'"),
    "inverted": Buggy(
        answers={"masked_attention": INVERTED},
        zero=(*MASK_CELLS, "test_mask_probes"),
        feedback="'mask inverted'"),
    "minus_inf": Buggy(
        answers={"masked_attention": MINUS_INF},
        zero=MASK_CELLS,
        feedback="'NaN on fully masked rows'"),
    "minus_1e9": Buggy(
        answers={"masked_attention": MINUS_1E9},
        zero=("test_masked_attention_half",),
        feedback="'fill value that overflows in half precision'"),
    "calls_sdpa": Buggy(
        answers={"masked_attention": CALLS_SDPA},
        zero=("test_masked_attention_by_hand",),
        feedback="calls scaled_dot_product_attention"),
}


pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(CHAPTER)]  # one autograde run per chapter, on one worker


class TestGrading(GradedChapter):
    chapter, full, buggy = CHAPTER, FULL, BUGGY
    hidden_marker, hidden_student = 'check_masked_attention_by_hand', 'calls_sdpa'
