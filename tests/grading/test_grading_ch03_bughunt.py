"""The bug hunt on the seed's SelfAttention (ch03_bughunt), graded with the real nbgrader CLI.

One autograde run grades a small class: the solution (full marks), the untouched student
version, which is the seed's code as it is (zero: it has all four bugs), two right fixes
written differently, one submission per seed bug left unfixed (each loses exactly that
bug's points, and its feedback names the bug), and a fix that only the hidden tests catch.
Each answer is the whole answer cell, as the learner leaves it after editing the seed's class.
"""

import pytest

from course import Buggy, GradedChapter

CHAPTER = "ch03_bughunt"
FULL = {"bug_einsum": 3, "bug_shared_linear": 3, "bug_scale": 2, "bug_fill_value": 2}

# The fixed class with the seed's line for one bug put back, bug by bug. Each keeps the
# seed's structure, as a learner who fixed the other three in place would.
EINSUM_LEFT = """
class SelfAttention(nn.Module):
    def __init__(self, embed_size, heads):
        super(SelfAttention, self).__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(heads * self.head_dim, embed_size)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]
        values = self.values(values).reshape(N, value_len, self.heads, self.head_dim)
        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)
        energy = torch.einsum("bhqd, bhkd -> bhqk", [query, keys])
        energy = energy / (self.head_dim ** (1/2))
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("bhql, bhlv -> bhqv", [attention, values])
        out = out.reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)
"""
SHARED_LINEAR_LEFT = """
class SelfAttention(nn.Module):
    def __init__(self, embed_size, heads):
        super(SelfAttention, self).__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(self.head_dim, self.head_dim, bias=False)
        self.keys = nn.Linear(self.head_dim, self.head_dim, bias=False)
        self.queries = nn.Linear(self.head_dim, self.head_dim, bias=False)
        self.fc_out = nn.Linear(heads * self.head_dim, embed_size)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]
        values = values.reshape(N, value_len, self.heads, self.head_dim)
        keys = keys.reshape(N, key_len, self.heads, self.head_dim)
        query = query.reshape(N, query_len, self.heads, self.head_dim)
        values = self.values(values)
        keys = self.keys(keys)
        query = self.queries(query)
        energy = torch.einsum("nqhd,nkhd->nhqk", [query, keys])
        energy = energy / (self.head_dim ** (1/2))
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhql,nlhd->nqhd", [attention, values])
        out = out.reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)
"""
SCALE_LEFT = """
class SelfAttention(nn.Module):
    def __init__(self, embed_size, heads):
        super(SelfAttention, self).__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(heads * self.head_dim, embed_size)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]
        values = self.values(values).reshape(N, value_len, self.heads, self.head_dim)
        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", [query, keys])
        energy = energy / (self.embed_size ** (1/2))
        if mask is not None:
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhql,nlhd->nqhd", [attention, values])
        out = out.reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)
"""
FILL_LEFT = """
class SelfAttention(nn.Module):
    def __init__(self, embed_size, heads):
        super(SelfAttention, self).__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(heads * self.head_dim, embed_size)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]
        values = self.values(values).reshape(N, value_len, self.heads, self.head_dim)
        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)
        energy = torch.einsum("nqhd,nkhd->nhqk", [query, keys])
        energy = energy / (self.head_dim ** (1/2))
        if mask is not None:
            energy = energy.masked_fill(mask == 0, float("-1e20"))
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhql,nlhd->nqhd", [attention, values])
        out = out.reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)
"""
# Bug 3 "fixed" with the number the visible check printed (√8, its head_dim = 8): right at
# the visible size, wrong at the hidden tests' head_dim = 16.
SCALE_HARDCODED = SCALE_LEFT.replace("(self.embed_size ** (1/2))", "math.sqrt(8)")

# Right, written differently: one fused Linear(E, 3E) (each third applied to its own input),
# matmul, a -1e4 fill (float16 holds it; exp(-1e4) is 0 next to real scores).
FUSED_MATMUL = """
class SelfAttention(nn.Module):
    def __init__(self, embed_size, heads):
        super().__init__()
        self.heads, self.head_dim = heads, embed_size // heads
        self.qkv = nn.Linear(embed_size, 3 * embed_size)
        self.fc_out = nn.Linear(embed_size, embed_size)

    def split(self, x):
        return x.view(x.size(0), x.size(1), self.heads, self.head_dim).transpose(1, 2)

    def forward(self, values, keys, query, mask):
        wq, wk, wv = self.qkv.weight.chunk(3)
        bq, bk, bv = self.qkv.bias.chunk(3)
        q = self.split(F.linear(query, wq, bq))
        k = self.split(F.linear(keys, wk, bk))
        v = self.split(F.linear(values, wv, bv))
        energy = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if mask is not None:
            energy = energy.masked_fill(mask == 0, -1e4)
        out = energy.softmax(-1) @ v
        return self.fc_out(out.transpose(1, 2).flatten(2))
""".replace(
    "class SelfAttention", "import torch.nn.functional as F\n\n\nclass SelfAttention"
)
# Right, written differently: per-head Linear(E, Dh) modules, the output projection
# registered first, softmax in float32 (so the seed's -1e20 fits), no biases.
PER_HEAD_FLOAT32_SOFTMAX = """
class SelfAttention(nn.Module):
    def __init__(self, embed_size, heads):
        super().__init__()
        self.fc_out = nn.Linear(embed_size, embed_size, bias=False)
        head_dim = embed_size // heads
        self.q = nn.ModuleList(nn.Linear(embed_size, head_dim, bias=False) for _ in range(heads))
        self.k = nn.ModuleList(nn.Linear(embed_size, head_dim, bias=False) for _ in range(heads))
        self.v = nn.ModuleList(nn.Linear(embed_size, head_dim, bias=False) for _ in range(heads))

    def forward(self, values, keys, query, mask):
        outs = []
        for q, k, v in zip(self.q, self.k, self.v):
            qh, kh, vh = q(query), k(keys), v(values)
            energy = (qh @ kh.transpose(1, 2)).float() / math.sqrt(qh.size(-1))
            if mask is not None:
                energy = energy.masked_fill(mask.reshape(mask.size(0), *mask.shape[-2:]) == 0,
                                            float("-1e20"))
            outs.append(energy.softmax(dim=-1).to(vh.dtype) @ vh)
        return self.fc_out(torch.cat(outs, dim=-1))
"""

BUGGY = {
    "einsum_left": Buggy(
        answers={"self_attention": EINSUM_LEFT},
        zero=("bug_einsum",),
        feedback=("bug 1 still present", "tokens never mix"),
    ),
    "shared_linear_left": Buggy(
        answers={"self_attention": SHARED_LINEAR_LEFT},
        zero=("bug_shared_linear",),
        feedback=("bug 2 still present", "slice of `query`"),
    ),
    "scale_left": Buggy(
        answers={"self_attention": SCALE_LEFT},
        zero=("bug_scale",),
        feedback=("bug 3 still present", "divided by 5.657; that is √d_model"),
    ),
    "fill_left": Buggy(
        answers={"self_attention": FILL_LEFT},
        zero=("bug_fill_value",),
        feedback=("bug 4 still present", "without overflow"),
    ),
    "scale_hardcoded": Buggy(
        answers={"self_attention": SCALE_HARDCODED},
        zero=("bug_scale",),
        feedback=("bug 3 still present", "divided by 2.828"),
    ),
}

RIGHT = {
    "fused_matmul": {"self_attention": FUSED_MATMUL},
    "per_head_float32_softmax": {"self_attention": PER_HEAD_FLOAT32_SOFTMAX},
}


pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group(CHAPTER),
]  # one autograde run, one worker


class TestGrading(GradedChapter):
    chapter, full, buggy, right_variants = CHAPTER, FULL, BUGGY, RIGHT
    hidden_marker, hidden_student = "sizes=((48, 3),)", "scale_hardcoded"
