"""Chapter 1 graded with the real nbgrader CLI: generate -> autograde -> feedback.

One autograde run grades a small class: the solution, the untouched student
version, and one buggy submission per diagnosed pitfall. Each must score exactly
what it deserves, and the feedback must name the pitfall.
"""

import pytest

from course import Buggy, GradedChapter
from learners import MHA_CALLS_SDPA, mha

CHAPTER = "ch01_shapes"
FULL = {
    "test_split_heads": 2,
    "test_merge_heads": 2,
    "test_mha_matches_reference": 4,
    "test_mha_behaviour": 2,
    "test_mha_written_by_hand": 2,
}

SPLIT_VIEW_STRAIGHT = """
def split_heads(x, n_heads):
    b, s, d = x.shape
    return x.view(b, n_heads, s, d // n_heads)
"""
MERGE_WRONG_ORDER = """
def merge_heads(x):
    b, h, s, dh = x.shape
    return x.permute(0, 2, 3, 1).reshape(b, s, h * dh)
"""
MHA_SCALE_D_MODEL = mha("""
    def forward(self, query, key, value, mask=None):
        q = split_heads(self.q(query), self.h)
        k = split_heads(self.k(key), self.h)
        v = split_heads(self.v(value), self.h)
        out = (q @ k.transpose(-2, -1) / math.sqrt(query.size(-1))).softmax(-1) @ v
        return self.o(merge_heads(out))
""")
# The seed's einsums: letters for [B, H, S, Dh] over [B, S, H, Dh] tensors, so heads
# attend to heads within each position.
MHA_SEED_EINSUM = mha("""
    def forward(self, query, key, value, mask=None):
        b, s, d = query.shape
        dh = d // self.h
        q = self.q(query).view(b, s, self.h, dh)
        k = self.k(key).view(b, key.size(1), self.h, dh)
        v = self.v(value).view(b, value.size(1), self.h, dh)
        weights = torch.einsum("bhqd,bhkd->bhqk", q, k).div(math.sqrt(dh)).softmax(-1)
        return self.o(torch.einsum("bhqk,bhkd->bhqd", weights, v).reshape(b, s, d))
""")
# The seed's projections: one Linear(Dh, Dh) applied to every head's slice, so all heads
# share its weights.
MHA_SHARED_LINEAR = """
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        dh = d_model // n_heads
        self.q, self.k, self.v = (nn.Linear(dh, dh, bias=False) for _ in range(3))
        self.o = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        q, k, v = (split_heads(x, self.h) for x in (query, key, value))
        q, k, v = self.q(q), self.k(k), self.v(v)
        out = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1) @ v
        return self.o(merge_heads(out))
"""

BUGGY = {
    "split_view_straight": Buggy(
        answers={"split_heads": SPLIT_VIEW_STRAIGHT},
        zero=("test_split_heads", "test_mha_matches_reference"),
        feedback="sequence and head axes confused",
    ),
    "merge_wrong_order": Buggy(
        answers={"merge_heads": MERGE_WRONG_ORDER},
        zero=("test_merge_heads", "test_mha_matches_reference"),
        feedback="heads merged in the wrong order",
    ),
    # Its own code, but wrong behaviour: the by-hand cell needs the behaviour probes
    # to pass in the judge (tformer_grading/judge/registry.py), so it loses that too.
    "seed_einsum": Buggy(
        answers={"multi_head_attention": MHA_SEED_EINSUM},
        zero=(
            "test_mha_matches_reference",
            "test_mha_behaviour",
            "test_mha_written_by_hand",
        ),
        feedback="einsum over the wrong axes",
    ),
    "shared_linear": Buggy(
        answers={"multi_head_attention": MHA_SHARED_LINEAR},
        zero=("test_mha_matches_reference",),
        feedback="one Linear shared by all heads",
    ),
    "scale_d_model": Buggy(
        answers={"multi_head_attention": MHA_SCALE_D_MODEL},
        zero=("test_mha_matches_reference",),
        feedback="scaled by sqrt(d_model)",
    ),
    "calls_sdpa": Buggy(
        answers={"multi_head_attention": MHA_CALLS_SDPA},
        zero=("test_mha_written_by_hand",),
        feedback="calls scaled_dot_product_attention",
    ),
}


pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group(CHAPTER),
]  # one autograde run per chapter, on one worker


class TestGrading(GradedChapter):
    chapter, full, buggy = CHAPTER, FULL, BUGGY
    hidden_marker, hidden_student = "check_multi_head_attention_by_hand", "calls_sdpa"
