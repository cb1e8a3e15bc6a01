"""Chapter 1 graded with the real nbgrader CLI: generate -> autograde -> feedback.

One autograde run grades a small class: the solution, the untouched student
version, and one buggy submission per diagnosed pitfall. Each must score exactly
what it deserves, and the feedback must name the pitfall.
"""
import pytest

from course import GradedChapter

CHAPTER = "ch01_shapes"
FULL = {"test_split_heads": 2, "test_merge_heads": 2, "test_mha_matches_reference": 4,
        "test_mha_behaviour": 2, "test_mha_written_by_hand": 2}
MHA_CELLS = ("test_mha_matches_reference", "test_mha_behaviour", "test_mha_written_by_hand")

SPLIT_VIEW_STRAIGHT = '''
def split_heads(x, n_heads):
    b, s, d = x.shape
    return x.view(b, n_heads, s, d // n_heads)
'''
MERGE_WRONG_ORDER = '''
def merge_heads(x):
    b, h, s, dh = x.shape
    return x.permute(0, 2, 3, 1).reshape(b, s, h * dh)
'''
MHA_TEMPLATE = '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, query, key, value, mask=None):
        q, k, v = split_heads(self.q(query), self.h), split_heads(self.k(key), self.h), split_heads(self.v(value), self.h)
        {body}
        return self.o(merge_heads(out))
'''
MHA_SCALE_D_MODEL = MHA_TEMPLATE.format(body="out = (q @ k.transpose(-2, -1) / math.sqrt(query.size(-1))).softmax(-1) @ v")
MHA_CALLS_SDPA = MHA_TEMPLATE.format(body="out = torch.nn.functional.scaled_dot_product_attention(q, k, v)")
MHA_SEED_EINSUM = '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, query, key, value, mask=None):
        n, d = query.size(0), query.size(-1)
        q = self.q(query).reshape(n, query.size(1), self.h, d // self.h)
        k = self.k(key).reshape(n, key.size(1), self.h, d // self.h)
        v = self.v(value).reshape(n, value.size(1), self.h, d // self.h)
        energy = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(d // self.h)
        out = torch.einsum("bhql,bhlv->bhqv", energy.softmax(dim=3), v)
        return self.o(out.reshape(n, query.size(1), d))
'''
MHA_SHARED_LINEAR = '''
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, dh = n_heads, d_model // n_heads
        self.values = nn.Linear(dh, dh, bias=False)
        self.keys = nn.Linear(dh, dh, bias=False)
        self.queries = nn.Linear(dh, dh, bias=False)
        self.fc_out = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        n = query.size(0)
        q = self.queries(query.reshape(n, query.size(1), self.h, -1)).transpose(1, 2)
        k = self.keys(key.reshape(n, key.size(1), self.h, -1)).transpose(1, 2)
        v = self.values(value.reshape(n, value.size(1), self.h, -1)).transpose(1, 2)
        out = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1) @ v
        return self.fc_out(merge_heads(out))
'''

# student -> (answer cells replaced, cells that must score 0, text the feedback must contain)
BUGGY = {
    "split_view_straight": ({"split_heads": SPLIT_VIEW_STRAIGHT}, ("test_split_heads", "test_mha_matches_reference"),
                            "sequence and head axes confused"),
    "merge_wrong_order": ({"merge_heads": MERGE_WRONG_ORDER}, ("test_merge_heads", "test_mha_matches_reference"),
                          "heads merged in the wrong order"),
    "seed_einsum": ({"multi_head_attention": MHA_SEED_EINSUM}, ("test_mha_matches_reference", "test_mha_behaviour"),
                    "einsum over the wrong axes"),
    "shared_linear": ({"multi_head_attention": MHA_SHARED_LINEAR}, ("test_mha_matches_reference",),
                      "one Linear shared by all heads"),
    "scale_d_model": ({"multi_head_attention": MHA_SCALE_D_MODEL}, ("test_mha_matches_reference",),
                      "scaled by sqrt(d_model)"),
    "calls_sdpa": ({"multi_head_attention": MHA_CALLS_SDPA}, ("test_mha_written_by_hand",),
                   "calls scaled_dot_product_attention"),
}


pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(CHAPTER)]  # one autograde run per chapter, on one worker


class TestGrading(GradedChapter):
    chapter, full, buggy = CHAPTER, FULL, BUGGY
    hidden_marker, hidden_student = 'check_multi_head_attention_by_hand', 'calls_sdpa'
