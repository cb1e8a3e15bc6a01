"""Chapter 1 answer cells that more than one grading test hands in.

Each string is an answer cell as a learner would type it. The notebook's setup cell
gives it ``math``, ``torch`` and ``nn``, and the cells above it the learner's own
``split_heads`` and ``merge_heads``.
"""

# The four projections most fixture learners write alike; their ``forward`` differs.
MHA_PROJECTIONS = """
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.q, self.k, self.v, self.o = (nn.Linear(d_model, d_model) for _ in range(4))
"""


def mha(forward: str) -> str:
    """A MultiHeadAttention answer cell: the shared projections, then ``forward``."""
    return MHA_PROJECTIONS + forward


# Right, and calls neither split_heads nor merge_heads: a learner whose split or merge
# cell is sabotaged loses exactly that cell's points.
MHA_STANDALONE = mha("""
    def forward(self, query, key, value, mask=None):
        b, sq, d = query.shape
        q = self.q(query).view(b, sq, self.h, -1).transpose(1, 2)
        k = self.k(key).view(b, key.size(1), self.h, -1).transpose(1, 2)
        v = self.v(value).view(b, value.size(1), self.h, -1).transpose(1, 2)
        w = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).softmax(-1)
        return self.o((w @ v).transpose(1, 2).reshape(b, sq, d))
""")

# Right, but PyTorch does the attention: only the hidden by-hand test can tell.
MHA_CALLS_SDPA = mha("""
    def forward(self, query, key, value, mask=None):
        q = split_heads(self.q(query), self.h)
        k = split_heads(self.k(key), self.h)
        v = split_heads(self.v(value), self.h)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return self.o(merge_heads(out))
""")

# Heads split without moving the head axis before the sequence: a view with the heads
# third.
SPLIT_NO_TRANSPOSE = """
def split_heads(x, n_heads):
    b, s, d = x.shape
    return x.view(b, s, n_heads, d // n_heads)
"""

# Heads merged without moving them back next to each other: the values are scrambled,
# the shape is right.
MERGE_NO_TRANSPOSE = """
def merge_heads(x):
    b, h, s, dh = x.shape
    return x.reshape(b, s, h * dh)
"""
