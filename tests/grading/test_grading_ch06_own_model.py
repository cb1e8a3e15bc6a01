""" "Train your own Transformer" graded with the real nbgrader CLI: generate ->
autograde -> feedback.

One autograde run grades a small class: the solution (full marks), the untouched student
version (zero), a learner who took every piece from the reference and wrote only the
assembly (the model's points only, each piece cell saying why it scores nothing), and
learners with one wrong piece or a wrong assembly, who lose exactly the cells that piece
is graded in, the feedback naming it.
"""

import pytest

from course import Buggy, GradedChapter, released, solution_sources

CHAPTER = "ch06_own_model"
FULL = {
    "test_own_attention": 2,
    "test_own_masks": 1,
    "test_own_blocks": 2,
    "test_own_positions": 1,
    "test_own_model_learns": 6,
}
PIECE_CELLS = (
    "test_own_attention",
    "test_own_masks",
    "test_own_blocks",
    "test_own_positions",
)

# Every piece from the course, as each answer cell's instructions say.
ALL_REFERENCE = {
    "own_attention": """
from tformer_ref.heads import split_heads, merge_heads
from tformer_ref.attention import scaled_dot_product_attention as masked_attention
from tformer_ref.attention import MultiHeadAttention
""",
    "own_masks": "from tformer_ref.masks import causal_mask, padding_mask\n",
    "own_blocks": """
from tformer_ref.blocks import FeedForward, EncoderBlock
from tformer_grading.checks.own_model import ReferenceDecoderBlock as DecoderBlock
""",
    "own_positions": """
from tformer_ref.positions import sinusoidal_encoding
from tformer_grading.checks.own_model import reference_embed as embed
""",
}
# triu for tril: chapter 3's check fails, and the decoder sees the future, so the
# model learns to read the answer in training and cannot decode.
MASK_TRIU = """
def causal_mask(size):
    return torch.ones(size, size, dtype=torch.bool, device=device).triu()[None, None]


def padding_mask(tokens, pad_id):
    return (tokens != pad_id)[:, None, None, :]
"""
LOSS_NOT_SHIFTED = solution_sources(CHAPTER)["own_model"].replace(
    "tgt_in, labels = tgt[:, :-1], tgt[:, 1:]", "tgt_in, labels = tgt, tgt"
)
assert "labels = tgt, tgt" in LOSS_NOT_SHIFTED

BUGGY = {
    "all_reference": Buggy(
        answers=ALL_REFERENCE,
        zero=PIECE_CELLS,
        feedback=(
            "this piece is tformer_ref's, not yours: no points for it, and the "
            "model check below still counts",
            "✓ your Transformer learns",
        ),
    ),
    "causal_triu": Buggy(
        answers={"own_masks": MASK_TRIU},
        zero=("test_own_masks", "test_own_model_learns"),
        feedback=(
            "triu instead of tril",
            "- your masks piece (causal_mask, padding_mask) fails",
            "the decoder sees the future",
        ),
    ),
    "target_not_shifted": Buggy(
        answers={"own_model": LOSS_NOT_SHIFTED},
        zero=("test_own_model_learns",),
        feedback="the target is not shifted",
    ),
}

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(CHAPTER)]


class TestGrading(GradedChapter):
    chapter, full, buggy = CHAPTER, FULL, BUGGY

    def test_hidden_tests_are_not_in_the_student_version_but_are_graded(self, graded):
        # This exercise hides no test: every check is visible. Instead: the student
        # version holds no solution.
        course, _ = graded
        text = released(course, CHAPTER)
        sources = "".join(cell.source for cell in text.cells)
        assert "BEGIN SOLUTION" not in sources and "class OwnTransformer" not in sources
        assert sources.count("raise NotImplementedError()") == 5
