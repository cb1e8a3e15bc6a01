# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Bug hunt — the seed's SelfAttention
#
# The answer cell below holds the `SelfAttention` class of the second seed (a beginner's
# notes on the Transformer architecture, with code in PyTorch), **copied byte for byte**, its Chinese
# comments included; their translation is in the next cell. The class runs, and for
# self-attention in float32 it returns a tensor of the right shape, but it has **four bugs**.
# Chapter 1 met three of them and chapter 3 the fourth: here you fix all four.
#
# **How to work.** Fix the class *in place*, in its cell: edit the seed's code until every check
# cell below passes. Keep the class name `SelfAttention`, its constructor
# `SelfAttention(embed_size, heads)` and its `forward(self, values, keys, query, mask)` (argument
# order included: the values come first); everything inside is yours to change: names, the order
# the layers are registered in, biases or none, one fused projection or several, einsum or matmul.
# The checks judge what your module *does*, never how it is written. After the last `return` of
# `forward` you will find nbgrader's usual `# YOUR CODE HERE` / `raise NotImplementedError()`:
# those two lines never run (they follow a `return`), so delete them or leave them.
#
# **Grading.** Each bug has its own check cell and its own points, and each check judges only its
# bug: fix one bug and you earn that bug's points, whatever state the other three are in (with one
# limit, explained at the projections check); a check that still fails names the bug it still
# sees, what it measured, and the lesson section to read.
# Run the check cells on the untouched code first: the four failures are your bug report. Do not
# edit the check cells: they are restored before grading, and some grading cases (other sizes) are
# hidden.
#
# | check cell | bug | points | read |
# |---|---|---|---|
# | `bug_einsum` | how the scores are computed across tokens | 3 | chapter 1, "einsum and matmul" |
# | `bug_shared_linear` | the projections that make the queries, keys and values | 3 | chapter 1, "Per-head projections" |
# | `bug_scale` | the number the scores are divided by | 2 | chapter 1, "Scaling by the head size" |
# | `bug_fill_value` | the mask line, in float16 | 2 | chapter 3, [§3.5](../ch03_masks/lesson.ipynb#id-3-5-fill-values-half-precision-and-nan) "Fill values, half precision and NaN" |
#
# The lessons: [chapter 1](../ch01_shapes/lesson.ipynb), [chapter 3](../ch03_masks/lesson.ipynb).
#
# **Grade yourself** at any time, from the course folder:
# `python -m tformer_grading book/ch03_bughunt/exercise.ipynb`

# %% nbgrader="locked:setup"
import math

import torch
import torch.nn as nn

from tformer_grading.checks import bughunt_attention
from tformer_ref.device import get_device, seed_everything

seed_everything(0)
device = get_device()

# %% [markdown]
# ## The seed's code
#
# The seed's comments, translated (the code keeps the originals):
#
# | seed's comment | in English |
# |---|---|
# | {seed}`004:线性变换生成 Q, K, V` | linear maps producing Q, K, V |
# | {seed}`004:输出投影` | output projection |
# | {seed}`004:分割多头` | split into heads |
# | {seed}`004:线性变换` | linear maps |
# | {seed}`004:计算 attention scores` | compute the attention scores |
# | {seed}`004:einsum 解释：b=batch, h=heads, q=query_len, k=key_len, d=head_dim` | einsum legend: b=batch, h=heads, q=query_len, k=key_len, d=head_dim |
# | {seed}`004:缩放` | scaling |
# | {seed}`004:应用 mask（可选）` | apply the mask (optional) |
# | {seed}`004:softmax 得到注意力权重` | softmax gives the attention weights |
# | {seed}`004:加权求和` | weighted sum |
# | {seed}`004:拼接多头` | concatenate the heads |
#
# Shapes: `values`, `keys` `[N, key_len, embed_size]`, `query` `[N, query_len, embed_size]`, `mask`
# `None` or a keep-mask (0 or False = masked) that broadcasts against the scores, such as a padding
# mask `[N, 1, 1, key_len]`; the output is `[N, query_len, embed_size]`. The checks call it both as
# self-attention and as cross-attention (`key_len != query_len`, as in the decoder's
# encoder–decoder attention).

# %% nbgrader="solution:self_attention"
class SelfAttention(nn.Module):
    def __init__(self, embed_size, heads):
        super(SelfAttention, self).__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads

        assert (self.head_dim * heads == embed_size), "Embed size needs to be div by heads"

        # 线性变换生成 Q, K, V
        self.values = nn.Linear(self.head_dim, self.head_dim, bias=False)
        self.keys = nn.Linear(self.head_dim, self.head_dim, bias=False)
        self.queries = nn.Linear(self.head_dim, self.head_dim, bias=False)

        # 输出投影
        self.fc_out = nn.Linear(heads * self.head_dim, embed_size)

    def forward(self, values, keys, query, mask):
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]

        # 分割多头
        values = values.reshape(N, value_len, self.heads, self.head_dim)
        keys = keys.reshape(N, key_len, self.heads, self.head_dim)
        query = query.reshape(N, query_len, self.heads, self.head_dim)

        # 线性变换
        values = self.values(values)
        keys = self.keys(keys)
        query = self.queries(query)

        # 计算 attention scores
        # einsum 解释：b=batch, h=heads, q=query_len, k=key_len, d=head_dim
        energy = torch.einsum("bhqd, bhkd -> bhqk", [query, keys])

        # 缩放
        energy = energy / (self.embed_size ** (1/2))

        # 应用 mask（可选）
        if mask is not None:
            energy = energy.masked_fill(mask == 0, float("-1e20"))

        # softmax 得到注意力权重
        attention = torch.softmax(energy, dim=3)

        # 加权求和
        out = torch.einsum("bhql, bhlv -> bhqv", [attention, values])

        # 拼接多头
        out = out.reshape(N, query_len, self.heads * self.head_dim)

        return self.fc_out(out)
        ### BEGIN SOLUTION

    # The fixed methods replace the seed's above (a class body keeps the last definition
    # of a name). nbgrader releases everything outside this region, so the learner gets
    # the seed's code as it is.
    def __init__(self, embed_size, heads):
        super(SelfAttention, self).__init__()
        self.embed_size = embed_size
        self.heads = heads
        self.head_dim = embed_size // heads
        assert self.head_dim * heads == embed_size, "Embed size needs to be div by heads"
        # Bug 2: each head needs its own projection of the whole embedding;
        # Linear(E, E) is H separate E -> Dh maps side by side. Project, then split.
        self.values = nn.Linear(embed_size, embed_size, bias=False)
        self.keys = nn.Linear(embed_size, embed_size, bias=False)
        self.queries = nn.Linear(embed_size, embed_size, bias=False)
        self.fc_out = nn.Linear(heads * self.head_dim, embed_size)

    def forward(self, values, keys, query, mask):
        """values, keys [N, Lk, E], query [N, Lq, E], mask None or a keep-mask
        broadcasting against the scores [N, H, Lq, Lk] -> [N, Lq, E]."""
        N = query.shape[0]
        value_len, key_len, query_len = values.shape[1], keys.shape[1], query.shape[1]
        values = self.values(values).reshape(N, value_len, self.heads, self.head_dim)
        keys = self.keys(keys).reshape(N, key_len, self.heads, self.head_dim)
        query = self.queries(query).reshape(N, query_len, self.heads, self.head_dim)
        # Bug 1: the letters name the axes of [N, L, H, Dh] as they are, so the scores
        # [N, H, Lq, Lk] range over key *positions*.
        energy = torch.einsum("nqhd,nkhd->nhqk", query, keys)
        # Bug 3: the dot products are over head_dim features.
        energy = energy / math.sqrt(self.head_dim)
        if mask is not None:
            # Bug 4: a finite fill in the scores' own dtype (-65504 in float16).
            energy = energy.masked_fill(mask == 0, torch.finfo(energy.dtype).min)
        attention = torch.softmax(energy, dim=3)
        out = torch.einsum("nhqk,nkhd->nqhd", attention, values)
        out = out.reshape(N, query_len, self.heads * self.head_dim)
        return self.fc_out(out)
        ### END SOLUTION


# %% [markdown]
# ## Bug: the einsum (3 points)
#
# The check changes one key/value token and expects the other positions' outputs to change,
# calls your module as cross-attention (keys longer than the queries), reorders the queries (the
# output rows must follow) and the keys (the output must not change), and gives every key the same
# value (then every query's output is that value's, whatever the scores). It changes one value
# token in many directions: each head averages its *own* head's values, so the output must move
# in all `embed_size` directions, not only in one head's `head_dim`. One call has a mask: a
# causal keep-mask `[1, 1, L, L]` in self-attention, which must line up with the scores.

# %% nbgrader="test:bug_einsum:3"
bughunt_attention.check_bug_einsum(SelfAttention)
### BEGIN HIDDEN TESTS
bughunt_attention.check_bug_einsum(SelfAttention, sizes=((48, 3),))
### END HIDDEN TESTS

# %% [markdown]
# ## Bug: the projections (3 points)
#
# The check changes only one head's slice of the query (then of the keys, then of the values:
# features `h*head_dim` to `(h+1)*head_dim`) and measures in how many directions your output
# moves. If head h's queries are computed from that slice alone, only head h reacts, and the
# output moves within head h's `head_dim`-dimensional share of `fc_out`; with projections from
# the whole embedding it moves in many more. One limit: while the einsum bug is still there, a
# head's key or value slice reaches every head anyway, so only the queries can show this bug; fix
# the einsum, and the keys and values are checked too.

# %% nbgrader="test:bug_shared_linear:3"
bughunt_attention.check_bug_shared_linear(SelfAttention)
### BEGIN HIDDEN TESTS
bughunt_attention.check_bug_shared_linear(SelfAttention, sizes=((48, 3),))
### END HIDDEN TESTS

# %% [markdown]
# ## Bug: the scale (2 points)
#
# The check finds your projections by what each weight is applied to, copies known weights into
# them, and *measures* the number your scores are divided by: it fits the divisor with which the
# attention it knows (computed per token, or across the heads of one token as the seed's einsum
# does) reproduces your output. That number must be `√head_dim`.

# %% nbgrader="test:bug_scale:2"
bughunt_attention.check_bug_scale(SelfAttention)
### BEGIN HIDDEN TESTS
bughunt_attention.check_bug_scale(SelfAttention, sizes=((48, 3),))
### END HIDDEN TESTS

# %% [markdown]
# ## Bug: the fill value (2 points)
#
# The check runs a float16 copy of your module (on the CPU too) with a padding mask
# `[3, 1, 1, L]`: one sequence padded after two tokens, one fully masked, one that keeps only its
# last key. It must not raise, must give no NaN (the fully masked sequence included), and masked
# keys must get no weight: with a single key left, changing the queries must not change the
# output. The mask keeps the keys it marks 1 and masks those it marks 0: in the sequence that
# keeps only its last key, changing the masked keys must not move the output, changing the kept
# one must.

# %% nbgrader="test:bug_fill_value:2"
bughunt_attention.check_bug_fill_value(SelfAttention)
### BEGIN HIDDEN TESTS
bughunt_attention.check_bug_fill_value(SelfAttention, sizes=((48, 3),))
### END HIDDEN TESTS
